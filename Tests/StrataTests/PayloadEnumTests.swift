import Foundation
import Testing

@testable import Strata

// Enums with associated values, with the Codable Swift synthesizes: stored as JSONEncoder writes
// them (an object holding one key, the case, whose value holds the associated values), wherever
// they sit: a field, an optional, an array element, a dictionary value, inside a nested struct,
// holding a nested struct. References: the value itself, JSONEncoder/JSONDecoder, and
// `Predicate.evaluate`.

enum PEAttachment: Codable, Sendable, Equatable {
    case text(String)
    case image(url: URL, size: Int)
    case location(Double, Double)
    case file(PEFile?)
    case none
}

struct PEFile: Codable, Sendable, Equatable {
    var name: String
    var kind: PEKind
}

/// Renamed case keys: the stored key is the raw value.
enum PEKind: Codable, Sendable, Equatable {
    case plain
    case tagged(label: String)
    enum CodingKeys: String, CodingKey {
        case plain = "p"
        case tagged = "t"
    }
}

enum PESingle: Codable, Sendable, Equatable { case only(Int) }

struct PEBox: Codable, Sendable, Equatable {
    var inner: PEAttachment
    var note: String
}

struct PEMessage: Model, Equatable {
    static let indexes: [PartialKeyPath<PEMessage> & Sendable] = [\.room]
    var id: Int
    var room: Int
    var attachment: PEAttachment
    var optional: PEAttachment?
    var list: [PEAttachment]
    var byName: [String: PEKind]
    var box: PEBox
    var single: PESingle
}

/// The same model after a case was added (`sticker`): an additive change.
enum PEAttachmentV2: Codable, Sendable, Equatable {
    case text(String)
    case sticker(id: Int)
}

struct PENoteV1: Model, Equatable {
    static var modelName: String { "PENote" }
    enum Body: Codable, Sendable, Equatable { case text(String) }
    var id: Int
    var body: Body
}

struct PENoteV2: Model, Equatable {
    static var modelName: String { "PENote" }
    var id: Int
    var body: PEAttachmentV2
}

@Suite struct PayloadEnumTests {
    static let seed: UInt64 = 20_261_203

    static func attachment(_ rng: inout SeededRandom) -> PEAttachment {
        switch rng.below(6) {
        case 0: return .text(["", "hi", "e\u{301}", "\u{1F600}"][rng.below(4)])
        case 1: return .image(url: URL(string: "https://example.com/\(rng.below(9)).png")!, size: [Int.min, 0, Int.max][rng.below(3)])
        case 2: return .location([-0.0, 1.5, .greatestFiniteMagnitude][rng.below(3)], -2)
        case 3: return .file(rng.below(2) == 0 ? nil : PEFile(name: "f\(rng.below(5))", kind: rng.below(2) == 0 ? .plain : .tagged(label: "L")))
        default: return .none
        }
    }

    static func message(_ id: Int, _ rng: inout SeededRandom) -> PEMessage {
        PEMessage(
            id: id, room: rng.below(4), attachment: attachment(&rng), optional: rng.below(3) == 0 ? nil : attachment(&rng),
            list: (0..<rng.below(4)).map { _ in attachment(&rng) },
            byName: rng.below(2) == 0 ? [:] : ["a": .plain, "b": .tagged(label: "x")],
            box: PEBox(inner: attachment(&rng), note: "n\(id)"), single: .only(rng.below(100)))
    }

    @Test func payloadEnumsRoundTripAndQueryAsFoundationDoes() throws {
        let path = databasePath("PayloadEnumTests-roundtrip")
        defer { try? FileManager.default.removeItem(atPath: path) }
        var rng = SeededRandom(seed: Self.seed)
        var model = (0..<120).map { Self.message($0, &rng) }
        // The reference agrees: JSON round-trips every one of them.
        for message in model {
            #expect(try JSONDecoder().decode(PEMessage.self, from: JSONEncoder().encode(message)) == message, "seed \(Self.seed) \(message.id)")
        }
        var db = try Database(path: path, models: [PEMessage.self])
        try db.write { tx in try tx.insert(contentsOf: model) }
        let nothing = PEAttachment.none
        let seven = PESingle.only(7)
        let predicates: [(String, Predicate<PEMessage>)] = [
            ("attachment == none", #Predicate { $0.attachment == nothing }),
            ("room == 2 && optional == nil", #Predicate { $0.room == 2 && $0.optional == nil }),
            ("single == only(7)", #Predicate { $0.single == seven }),
            ("list.count > 1", #Predicate { $0.list.count > 1 }),
        ]
        func check(_ stage: String) throws {
            #expect(try db.objects(PEMessage.self).fetch() == model, "seed \(Self.seed) \(stage)")
            for (name, predicate) in predicates {
                let expected = try model.filter { try predicate.evaluate($0) }.map(\.id)
                #expect(try db.objects(PEMessage.self).filter(predicate).fetch().map(\.id) == expected, "seed \(Self.seed) \(stage): \(name)")
            }
        }
        try check("after insert")
        try db.write { tx in
            for i in stride(from: 0, to: model.count, by: 3) {
                let replacement = Self.attachment(&rng)
                try tx.update(PEMessage.self, key: model[i].id) { $0.attachment = replacement }
                model[i].attachment = replacement
            }
        }
        try check("after updates")
        db.close()
        db = try Database(path: path, models: [PEMessage.self])
        defer { db.close() }
        try check("after reopen")
    }

    /// A partial JSON update gives a payload enum whole: a patch naming another case replaces
    /// the stored one (merged key by key, the object would hold two cases); a full upsert of
    /// JSONEncoder's document gives back the object.
    @Test func partialJSONReplacesTheCase() throws {
        let db = try Database.inMemory(models: [PEMessage.self])
        var rng = SeededRandom(seed: Self.seed &+ 1)
        var message = Self.message(1, &rng)
        message.attachment = .location(1, 2)
        message.box.inner = .text("a")
        try db.write { tx in
            let made = try tx.upsert(PEMessage.self, key: 1, json: try JSONEncoder().encode(message))
            #expect(made.created && made.object == message)
        }
        let patch = #"{"attachment": {"image": {"url": "https://example.com/p.png", "size": 9}}, "box": {"inner": {"none": {}}}}"#
        let result = try db.write { tx in try tx.update(PEMessage.self, key: 1, json: Data(patch.utf8)) }
        var expected = message
        expected.attachment = .image(url: URL(string: "https://example.com/p.png")!, size: 9)
        expected.box.inner = PEAttachment.none
        #expect(result.object == expected)
        #expect(try db.object(PEMessage.self, key: 1) == expected)
    }

    /// A new case is a new optional field: the file opens with the new type without a migration,
    /// and what was stored reads back.
    @Test func aNewCaseIsAnAdditiveChange() throws {
        let path = databasePath("PayloadEnumTests-newcase")
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [PENoteV1.self])
            try db.write { tx in try tx.insert(PENoteV1(id: 1, body: .text("kept"))) }
            db.close()
        }
        let db = try Database(path: path, models: [PENoteV2.self])
        defer { db.close() }
        #expect(try db.object(PENoteV2.self, key: 1) == PENoteV2(id: 1, body: .text("kept")))
        try db.write { tx in try tx.insert(PENoteV2(id: 2, body: .sticker(id: 5))) }
        #expect(try db.object(PENoteV2.self, key: 2)?.body == .sticker(id: 5))
    }

    /// Sorting compares the decoded values with the type's own `<`; an index is refused, saying why.
    @Test func sortsUseTheEnumsOrderAndIndexesAreRefused() throws {
        let db = try Database.inMemory(models: [PEMooded.self])
        let moods: [PEMood] = [.sad, .meh(3), .happy, .meh(1), .sad]
        try db.write { tx in for (i, mood) in moods.enumerated() { try tx.insert(PEMooded(id: i, mood: mood)) } }
        let all = try db.objects(PEMooded.self).fetch()
        for descriptors in [[SortDescriptor(\PEMooded.mood)], [SortDescriptor(\PEMooded.mood, order: .reverse), SortDescriptor(\PEMooded.id)]] {
            let expected = all.sorted { a, b in
                for d in descriptors {
                    let order = d.compare(a, b)
                    if order != .orderedSame { return order == .orderedAscending }
                }
                return false
            }
            #expect(try db.objects(PEMooded.self).sorted(by: descriptors).fetch().map(\.id) == expected.map(\.id))
        }
        do {
            _ = try Database.inMemory(models: [PEMoodIndexed.self])
            Issue.record("an index on a payload enum was accepted")
        } catch StrataError.unsupportedType(_, _, let reason) {
            #expect(reason.contains("cannot be indexed"), "\(reason)")
        }
    }

    @Test func theCasesOfCodingKeysAreListed() {
        #expect(CodingKeyCases.cases(of: PEKind.CodingKeys.self)?.map(\.stringValue) == ["p", "t"])
        #expect(CodingKeyCases.cases(of: NCPlace.CodingKeys.self)?.map(\.stringValue) == ["id", "title", "geo", "meta"])
        // Not an enum: not listed.
        #expect(CodingKeyCases.cases(of: AnyCodingKey.self) == nil)
    }
}

/// Without raw values, with one payload case: synthesized `Comparable`.
enum PEMood: Codable, Sendable, Equatable, Comparable { case happy, sad, meh(Int) }
struct PEMooded: Model, Equatable {
    var id: Int
    var mood: PEMood
}
struct PEMoodIndexed: Model {
    static let indexes: [PartialKeyPath<PEMoodIndexed> & Sendable] = [\.mood]
    var id: Int
    var mood: PEMood
}

/// A struct coding key: its values cannot be listed.
struct AnyCodingKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
