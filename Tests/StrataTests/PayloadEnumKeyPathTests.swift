import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Strata

/// Key paths to payload enums (and to structs holding one) name their stored fields, so that
/// queries, sorts and `observe(keyPaths:)` can use them: an observer narrowed to such a field
/// hears of changes to that field (a new case, a new payload) and of nothing else.
@Suite struct PayloadEnumKeyPathTests {
    enum Shape: Codable, Sendable, Equatable {
        case none
        case circle(radius: Double)
        case box(Int, Int)
        case label(String)
    }

    enum Tag: Codable, Sendable, Equatable {
        case plain(Int)
        case empty
    }

    struct Frame: Codable, Sendable, Equatable {
        var shape: Shape
        var note: String
    }

    struct Drawing: Model, Equatable {
        var id: Int
        var shape: Shape
        var tag: Tag?
        var frame: Frame
        var count: Int
        enum CodingKeys: String, CodingKey {
            case id
            case shape = "s"
            case tag
            case frame = "f"
            case count
        }
    }

    /// Each key path reaches the stored field its coding key names, payload enums, an optional
    /// one, and the struct holding one included.
    @Test func keyPathsToPayloadEnumsNameTheirFields() {
        #expect(fieldPath(of: \Drawing.shape as PartialKeyPath<Drawing>) == "s")
        #expect(fieldPath(of: \Drawing.tag as PartialKeyPath<Drawing>) == "tag")
        #expect(fieldPath(of: \Drawing.frame as PartialKeyPath<Drawing>) == "f")
        #expect(fieldPath(of: \Drawing.frame.shape as PartialKeyPath<Drawing>) == "f.shape")
        #expect(fieldPath(of: \Drawing.frame.note as PartialKeyPath<Drawing>) == "f.note")
        #expect(fieldPath(of: \Drawing.count as PartialKeyPath<Drawing>) == "count")
    }

    struct ShapeIndexed: Model {
        var id: Int
        var shape: Shape
        var frame: Frame
        enum CodingKeys: String, CodingKey {
            case id
            case shape = "s"
            case frame = "f"
        }
        static let indexes: [PartialKeyPath<ShapeIndexed> & Sendable] = [\.shape]
    }

    struct FrameIndexed: Model {
        var id: Int
        var frame: Frame?
        static let indexes: [PartialKeyPath<FrameIndexed> & Sendable] = [\.frame]
    }

    struct FrameNoteIndexed: Model {
        var id: Int
        var frame: Frame
        static let indexes: [PartialKeyPath<FrameNoteIndexed> & Sendable] = [\.frame.note]
    }

    /// A field stored as an object (a payload enum, a nested struct, optional or not) cannot be
    /// an index key: opening says so and why, rather than the first insert failing. A field inside
    /// the struct can be indexed.
    @Test func indexesOnObjectFieldsAreRefusedAtOpen() throws {
        func reason(_ open: () throws -> Void) -> String {
            do {
                try open()
                return "opened"
            } catch StrataError.unsupportedType(_, _, let reason) {
                return reason
            } catch {
                return "\(error)"
            }
        }
        let enumReason = reason { _ = try Database.inMemory(models: [ShapeIndexed.self]) }
        #expect(enumReason.contains("enum with associated values") && enumReason.contains("cannot be indexed"), "\(enumReason)")
        let structReason = reason { _ = try Database.inMemory(models: [FrameIndexed.self]) }
        #expect(structReason.contains("nested struct") && structReason.contains("cannot be indexed"), "\(structReason)")
        let db = try Database.inMemory(models: [FrameNoteIndexed.self])
        try db.write { tx in
            for id in 0..<6 { try tx.insert(FrameNoteIndexed(id: id, frame: Frame(shape: .box(id, id), note: "n\(id % 2)"))) }
        }
        let note = "n1"
        #expect(try db.objects(FrameNoteIndexed.self).filter(#Predicate { $0.frame.note == note }).fetch().map(\.id) == [1, 3, 5])
    }

    enum Level: Codable, Sendable, Comparable {
        case none
        case low(Int)
        case high(Int, String)
    }

    struct Leveled: Model, Equatable {
        var id: Int
        var level: Level
        var maybe: Level?
        var frame: Frame
        enum CodingKeys: String, CodingKey {
            case id
            case level = "lv"
            case maybe
            case frame
        }
    }

    /// Reading one field of every record (what aggregates do) gives the values the objects hold,
    /// for payload enums, optional ones and a struct holding one; min and max order them by the
    /// enum's own `<`. Checked against the fetched objects.
    @Test func aggregatesReadPayloadEnumFields() throws {
        let db = try Database.inMemory(models: [Leveled.self])
        let levels: [Level] = [.low(3), .none, .high(1, "b"), .high(1, "a"), .low(-2), .none]
        try db.write { tx in
            for (i, level) in levels.enumerated() {
                let frame = Frame(shape: i % 2 == 0 ? .box(i, -i) : .none, note: "\(i)")
                try tx.insert(Leveled(id: i, level: level, maybe: i % 3 == 0 ? nil : level, frame: frame))
            }
        }
        let all = try db.objects(Leveled.self).fetch()
        let results = db.objects(Leveled.self)
        #expect(try results.values(\.level) == all.map(\.level))
        #expect(try results.values(\.maybe) == all.map(\.maybe))
        #expect(try results.values(\.frame) == all.map(\.frame))
        #expect(try results.values(\.frame.shape) == all.map(\.frame.shape))
        #expect(results.min(of: \.level) == all.map(\.level).min())
        #expect(results.max(of: \.level) == all.map(\.level).max())
        #expect(results.max(of: \.maybe) == all.compactMap(\.maybe).max())
        let low = Level.low(0)
        let filtered = db.objects(Leveled.self).filter(#Predicate { $0.level > low })
        #expect(try filtered.values(\.level) == all.filter { $0.level > low }.map(\.level))
    }

    /// A partial JSON update that gives null for a case (`{"s": {"none": null}}`, where JSONEncoder
    /// writes `{"none": {}}`) is refused as JSONDecoder refuses it, naming the case and the form a
    /// case takes; the stored object is unchanged. The `{}` form is accepted.
    @Test func aPatchGivingNullForACaseIsRefusedWithTheReason() throws {
        let db = try Database.inMemory(models: [Drawing.self])
        let original = Drawing(id: 1, shape: .label("a"), tag: nil, frame: Frame(shape: .none, note: ""), count: 0)
        try db.write { tx in try tx.insert(original) }
        let patch = Data(#"{"s": {"none": null}}"#.utf8)
        var merged = try JSONSerialization.jsonObject(with: JSONEncoder().encode(original)) as? [String: Any] ?? [:]
        merged["s"] = ["none": NSNull()]
        #expect(throws: (any Error).self) { try JSONDecoder().decode(Drawing.self, from: JSONSerialization.data(withJSONObject: merged)) }
        do {
            try db.write { tx in _ = try tx.update(Drawing.self, key: 1, json: patch) }
            Issue.record("a null case was accepted")
        } catch StrataError.typeMismatch(let model, let field, let reason) {
            #expect(model == "Drawing" && field == "s.none", "\(field)")
            #expect(reason.contains("null given for a case of Shape") && reason.contains("{}"), "\(reason)")
        }
        #expect(try db.object(Drawing.self, key: 1) == original)
        try db.write { tx in _ = try tx.update(Drawing.self, key: 1, json: Data(#"{"s": {"none": {}}}"#.utf8)) }
        #expect(try db.object(Drawing.self, key: 1)?.shape == Shape.none)
    }

    /// An observer narrowed to `\.shape` is told of a new case, of a new payload in the same case,
    /// and of a partial JSON update that switches the case; a change to `count` or to the frame
    /// alone is not delivered. Each write it must not hear is followed by one it must, and
    /// deliveries come in commit order, so a spurious one would show up before the next.
    @Test func narrowedObserversHearOnlyTheirPayloadEnumField() async throws {
        let db = try Database.inMemory(models: [Drawing.self])
        try await db.write { tx in
            for id in 1...3 {
                try tx.insert(Drawing(id: id, shape: .none, tag: nil, frame: Frame(shape: .label("f\(id)"), note: ""), count: 0))
            }
        }
        let log = Mutex<[String]>([])
        let token = db.objects(Drawing.self).sorted(by: SortDescriptor(\.id)).observe(
            on: DispatchQueue(label: "payload-keypaths"), keyPaths: [\.shape]
        ) { change in
            switch change {
            case .initial(let r): log.withLock { $0.append("initial \(r.count)") }
            case .update(_, let d, let i, let m): log.withLock { $0.append("d\(d) i\(i) m\(m)") }
            case .error(let e): log.withLock { $0.append("error \(e)") }
            }
        }
        defer { token.invalidate() }
        var expected = ["initial 3"]
        func expectLog() async throws {
            let target = expected.count
            let arrived = try await poolEventually { log.withLock { $0.count } >= target }
            #expect(arrived, "\(log.withLock { $0 })")
            #expect(log.withLock { $0 } == expected)
        }
        try await expectLog()

        try await db.write { tx in try tx.update(Drawing.self, key: 1) { $0.count = 5 } }
        try await db.write { tx in try tx.update(Drawing.self, key: 2) { $0.shape = .circle(radius: 1) } }
        expected.append("d[] i[] m[1]")
        try await expectLog()

        try await db.write { tx in try tx.update(Drawing.self, key: 3) { $0.frame.shape = .box(1, 2) } }
        try await db.write { tx in try tx.update(Drawing.self, key: 2) { $0.shape = .circle(radius: 2) } }
        expected.append("d[] i[] m[1]")
        try await expectLog()

        try await db.write { tx in try tx.update(Drawing.self, key: 1) { $0.tag = .plain(3) } }
        try await db.write { tx in try tx.update(Drawing.self, key: 3) { $0.shape = .box(3, 4) } }
        expected.append("d[] i[] m[2]")
        try await expectLog()

        try await db.write { tx in _ = try tx.update(Drawing.self, key: 1, json: Data(#"{"s": {"label": {"_0": "x"}}}"#.utf8)) }
        expected.append("d[] i[] m[0]")
        try await expectLog()

        try await db.write { tx in
            try tx.update(Drawing.self, key: 2) { $0.count = 9 }
            try tx.update(Drawing.self, key: 3) { $0.shape = .box(3, 4) }  // the same value: no change
        }
        try await db.write { tx in try tx.update(Drawing.self, key: 3) { $0.shape = .none } }
        expected.append("d[] i[] m[2]")
        try await expectLog()
        #expect(try db.objects(Drawing.self).sorted(by: SortDescriptor(\.id)).fetch().map(\.shape) == [.label("x"), .circle(radius: 2), .none])
    }
}
