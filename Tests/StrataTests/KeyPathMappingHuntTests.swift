import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Strata

// Hunting correctness bugs in how key paths map to stored fields (FieldNames), now that key paths
// to payload enums, to structs holding one, and to collections of them resolve. Every answer is
// checked against a reference that does not go through Strata's mapping: `Predicate.evaluate` and
// `SortDescriptor.compare` over the fetched objects, the objects' own values for aggregates, and
// `JSONDecoder` over the merged document for partial updates.

// MARK: - Models

/// First case without a payload; labeled, unlabeled (a tuple) and mixed payloads.
enum KPHShape: Codable, Sendable, Hashable, Comparable {
    case none
    case circle(radius: Double)
    case box(Int, Int)
    case label(String)
    case pair(w: Int, name: String)
}

/// First case with a payload; the payload-free case last.
enum KPHLevel: Codable, Sendable, Hashable, Comparable {
    case low(Int)
    case mid(Int, String)
    case off
}

/// A single case.
enum KPHOnly: Codable, Sendable, Hashable, Comparable {
    case value(Int)
}

/// The payload is one Bool, whose telltale is one bit per marking run.
enum KPHFlag: Codable, Sendable, Hashable {
    case off
    case on(Bool)
}

/// A payload enum inside a payload enum whose first case has none.
enum KPHWrapped: Codable, Sendable, Hashable {
    case empty
    case inner(KPHShape)
}

enum KPHKind: String, Codable, Sendable, CaseIterable, Comparable {
    case a, b, c
    static func < (l: KPHKind, r: KPHKind) -> Bool { l.rawValue < r.rawValue }
}

struct KPHFrame: Codable, Sendable, Hashable {
    var shape: KPHShape
    var kind: KPHKind
    var size: Int
    var title: String
}

struct KPHItem: Model, Equatable {
    var id: Int
    var shape: KPHShape
    var level: KPHLevel
    var only: KPHOnly
    var maybe: KPHShape?
    var maybeLevel: KPHLevel?
    var frame: KPHFrame
    var kind: KPHKind
    var shapes: [KPHShape]
    var named: [String: KPHLevel]
    var flag: KPHFlag
    var done: Bool
    var wrapped: KPHWrapped
    var count: Int

    enum CodingKeys: String, CodingKey {
        case id
        case shape = "s"
        case level = "lv"
        case only
        case maybe = "m"
        case maybeLevel = "ml"
        case frame = "f"
        case kind = "k"
        case shapes
        case named
        case flag = "fl"
        case done = "d"
        case wrapped = "w"
        case count = "c"
    }
}

/// A hand-written coder: `shape` and `note` under "meta", `level` alone under "solo", `width`
/// alone under "size" (the shape of a server payload).
struct KPHGrouped: Model, Equatable {
    var id: Int
    var shape: KPHShape
    var note: String
    var level: KPHLevel
    var width: Int
    var count: Int

    enum CodingKeys: String, CodingKey { case id, meta, solo, size, count = "c" }
    enum MetaKeys: String, CodingKey { case shape, note = "n" }
    enum SoloKeys: String, CodingKey { case level = "lv" }
    enum SizeKeys: String, CodingKey { case width = "w" }

    init(id: Int, shape: KPHShape, note: String, level: KPHLevel, width: Int, count: Int) {
        self.id = id
        self.shape = shape
        self.note = note
        self.level = level
        self.width = width
        self.count = count
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(Int.self, forKey: .id)
        let meta = try container.nestedContainer(keyedBy: MetaKeys.self, forKey: .meta)
        shape = try meta.decode(KPHShape.self, forKey: .shape)
        note = try meta.decode(String.self, forKey: .note)
        let solo = try container.nestedContainer(keyedBy: SoloKeys.self, forKey: .solo)
        level = try solo.decode(KPHLevel.self, forKey: .level)
        let size = try container.nestedContainer(keyedBy: SizeKeys.self, forKey: .size)
        width = try size.decode(Int.self, forKey: .width)
        count = try container.decode(Int.self, forKey: .count)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        var meta = container.nestedContainer(keyedBy: MetaKeys.self, forKey: .meta)
        try meta.encode(shape, forKey: .shape)
        try meta.encode(note, forKey: .note)
        var solo = container.nestedContainer(keyedBy: SoloKeys.self, forKey: .solo)
        try solo.encode(level, forKey: .level)
        var size = container.nestedContainer(keyedBy: SizeKeys.self, forKey: .size)
        try size.encode(width, forKey: .width)
        try container.encode(count, forKey: .count)
    }
}

/// `KPHGrouped`'s coder with an index on the one property of a single-field nested container,
/// which the docs say may be indexed.
struct KPHSoloIndexed: Model, Equatable {
    static let indexes: [PartialKeyPath<KPHSoloIndexed> & Sendable] = [\.width]
    var id: Int
    var width: Int
    var title: String

    enum CodingKeys: String, CodingKey { case id, size, title }
    enum SizeKeys: String, CodingKey { case width = "w" }

    init(id: Int, width: Int, title: String) {
        self.id = id
        self.width = width
        self.title = title
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(Int.self, forKey: .id)
        title = try container.decode(String.self, forKey: .title)
        let size = try container.nestedContainer(keyedBy: SizeKeys.self, forKey: .size)
        width = try size.decode(Int.self, forKey: .width)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(title, forKey: .title)
        var size = container.nestedContainer(keyedBy: SizeKeys.self, forKey: .size)
        try size.encode(width, forKey: .width)
    }
}

// Index declarations on fields stored as objects (refused at open), and on fields beside them.

struct KPHIdxShape: Model {
    static let indexes: [PartialKeyPath<KPHIdxShape> & Sendable] = [\.shape]
    var id: Int
    var shape: KPHShape
    enum CodingKeys: String, CodingKey {
        case id
        case shape = "s"
    }
}

struct KPHIdxLevel: Model {
    static let uniqueIndexes: [PartialKeyPath<KPHIdxLevel> & Sendable] = [\.level]
    var id: Int
    var level: KPHLevel
}

struct KPHIdxMaybe: Model {
    static let indexes: [PartialKeyPath<KPHIdxMaybe> & Sendable] = [\.maybe]
    var id: Int
    var maybe: KPHShape?
    enum CodingKeys: String, CodingKey {
        case id
        case maybe = "m"
    }
}

struct KPHIdxOnly: Model {
    static let indexDescriptors: [IndexDescriptor<KPHIdxOnly>] = [.on(\.only)]
    var id: Int
    var only: KPHOnly
}

struct KPHIdxFlag: Model {
    static let indexes: [PartialKeyPath<KPHIdxFlag> & Sendable] = [\.flag]
    var id: Int
    var flag: KPHFlag
    var done: Bool
}

struct KPHIdxCompound: Model {
    static let indexDescriptors: [IndexDescriptor<KPHIdxCompound>] = [.on(\.kind, \.frame.shape)]
    var id: Int
    var kind: KPHKind
    var frame: KPHFrame
}

struct KPHIdxUniqueCompound: Model {
    static let indexDescriptors: [IndexDescriptor<KPHIdxUniqueCompound>] = [.unique(\.frame.size, \.level)]
    var id: Int
    var level: KPHLevel
    var frame: KPHFrame
}

struct KPHIdxFrameShape: Model {
    static let indexes: [PartialKeyPath<KPHIdxFrameShape> & Sendable] = [\.frame.shape]
    var id: Int
    var frame: KPHFrame
    enum CodingKeys: String, CodingKey {
        case id
        case frame = "f"
    }
}

struct KPHIdxFrame: Model {
    static let indexes: [PartialKeyPath<KPHIdxFrame> & Sendable] = [\.frame]
    var id: Int
    var frame: KPHFrame?
}

struct KPHIdxWrapped: Model {
    static let indexes: [PartialKeyPath<KPHIdxWrapped> & Sendable] = [\.wrapped]
    var id: Int
    var wrapped: KPHWrapped
}

/// An array of payload enums: either refused at open, or indexed correctly.
struct KPHIdxShapes: Model {
    static let indexes: [PartialKeyPath<KPHIdxShapes> & Sendable] = [\.shapes]
    var id: Int
    var shapes: [KPHShape]
}

/// Indexes on a dictionary of payload enums and on an array of structs holding one.
struct KPHIdxNamedShapes: Model {
    static let indexes: [PartialKeyPath<KPHIdxNamedShapes> & Sendable] = [\.named]
    var id: Int
    var named: [String: KPHShape]
}

struct KPHIdxFrames: Model {
    static let indexes: [PartialKeyPath<KPHIdxFrames> & Sendable] = [\.frames]
    var id: Int
    var frames: [KPHFrame]
}

/// Indexes on primitive fields inside a struct that holds a payload enum, beside payload enums.
struct KPHIdxBeside: Model, Equatable {
    static let indexes: [PartialKeyPath<KPHIdxBeside> & Sendable] = [\.frame.size, \.frame.kind, \.kind]
    static let uniqueIndexes: [PartialKeyPath<KPHIdxBeside> & Sendable] = [\.code]
    static let indexDescriptors: [IndexDescriptor<KPHIdxBeside>] = [.on(\.frame.kind, \.frame.size), .fullText(\.frame.title)]
    var id: Int
    var shape: KPHShape
    var frame: KPHFrame
    var kind: KPHKind
    var code: String
    enum CodingKeys: String, CodingKey {
        case id
        case shape = "s"
        case frame = "f"
        case kind = "k"
        case code = "cd"
    }
}

// Two versions of one model: a new case and a new optional payload-enum field are additive.

enum KPHShapeV1: Codable, Sendable, Hashable {
    case none
    case circle(radius: Double)
}

enum KPHShapeV2: Codable, Sendable, Hashable {
    case none
    case circle(radius: Double)
    case star(points: Int, name: String)
}

struct KPHEvolveV1: Model {
    static var modelName: String { "KPHEvolve" }
    static let indexes: [PartialKeyPath<KPHEvolveV1> & Sendable] = [\.size]
    var id: Int
    var shape: KPHShapeV1
    var size: Int
    enum CodingKeys: String, CodingKey {
        case id
        case shape = "s"
        case size = "z"
    }
}

struct KPHEvolveV2: Model, Equatable {
    static var modelName: String { "KPHEvolve" }
    static let indexes: [PartialKeyPath<KPHEvolveV2> & Sendable] = [\.size]
    var id: Int
    var shape: KPHShapeV2
    var size: Int
    var extra: KPHShapeV2?
    enum CodingKeys: String, CodingKey {
        case id
        case shape = "s"
        case size = "z"
        case extra = "x"
    }
}

// MARK: - Data

/// Values of each enum, edge values included. No NaN: those are added where `==` semantics are
/// what is checked (NaN holds no place in an order).
enum KPHValues {
    static let shapes: [KPHShape] = [
        .none, .circle(radius: 0.0), .circle(radius: -0.0), .circle(radius: 1.5), .circle(radius: -.infinity),
        .circle(radius: .greatestFiniteMagnitude), .box(Int.min, Int.max), .box(0, 0), .box(Int.max, Int.min), .label(""),
        .label("é"), .label("e\u{301}"), .label("a"), .label("Z"), .pair(w: -1, name: "e\u{301}"), .pair(w: -1, name: "é"),
        .pair(w: Int.min, name: ""),
    ]
    static let nanShape = KPHShape.circle(radius: .nan)
    static let levels: [KPHLevel] = [
        .low(Int.min), .low(0), .low(Int.max), .mid(0, ""), .mid(0, "é"), .mid(0, "e\u{301}"), .mid(-5, "z"), .off,
    ]
    static let onlies: [KPHOnly] = [.value(Int.min), .value(0), .value(Int.max)]
    static let flags: [KPHFlag] = [.off, .on(true), .on(false)]
    static let wrappeds: [KPHWrapped] = [.empty, .inner(.none), .inner(.box(1, 2)), .inner(.label("é"))]
    static let titles = ["", "red fox", "e\u{301}clair", "Éclair blue", "fox"]

    static func items(seed: UInt64, count: Int, nan: Bool) -> [KPHItem] {
        var rng = SeededRandom(seed: seed)
        func pick<T>(_ values: [T]) -> T { values[rng.below(values.count)] }
        return (1...count).map { id in
            var maybe: KPHShape? = rng.below(3) == 0 ? nil : pick(shapes)
            var frameShape = pick(shapes)
            if nan && rng.below(5) == 0 { maybe = nanShape }
            if nan && rng.below(5) == 0 { frameShape = nanShape }
            let shapeList = (0..<rng.below(4)).map { _ in pick(shapes) }
            var named: [String: KPHLevel] = [:]
            for _ in 0..<rng.below(3) { named[pick(["a", "é", "e\u{301}x", ""])] = pick(levels) }
            return KPHItem(
                id: id, shape: pick(shapes), level: pick(levels), only: pick(onlies), maybe: maybe,
                maybeLevel: rng.below(3) == 0 ? nil : pick(levels),
                frame: KPHFrame(shape: frameShape, kind: pick(KPHKind.allCases), size: pick([Int.min, -1, 0, 7, Int.max]), title: pick(titles)),
                kind: pick(KPHKind.allCases), shapes: shapeList, named: named, flag: pick(flags), done: rng.below(2) == 0,
                wrapped: pick(wrappeds), count: pick([Int.min, 0, 1, 5, Int.max]))
        }
    }
}

/// A description that tells NaN payloads and both zeros apart, for comparing values that `==`
/// cannot (NaN is unequal to itself).
func kphShow(_ value: Any) -> String { String(reflecting: value) }

/// `unsupportedType`'s field and reason, or what happened instead.
func kphRefusal(_ open: () throws -> Void) -> (field: String, reason: String) {
    do {
        try open()
        return ("", "opened")
    } catch StrataError.unsupportedType(_, let field, let reason) {
        return (field, reason)
    } catch {
        return ("", "\(error)")
    }
}

// MARK: - Suite

@Suite struct KeyPathMappingHuntTests {
    static let seed: UInt64 = 0x4B50_4854_2026

    // MARK: Mapping

    /// Each key path names the stored field its coding keys give: payload enums of every shape,
    /// optional ones, collections of them, structs holding them, and the fields beside them.
    @Test func keyPathsNameTheirStoredFields() {
        func path(_ keyPath: PartialKeyPath<KPHItem>) -> String? { fieldPath(of: keyPath) }
        let expected: [(PartialKeyPath<KPHItem>, String)] = [
            (\KPHItem.id, "id"), (\KPHItem.shape, "s"), (\KPHItem.level, "lv"), (\KPHItem.only, "only"),
            (\KPHItem.maybe, "m"), (\KPHItem.maybeLevel, "ml"), (\KPHItem.frame, "f"), (\KPHItem.frame.shape, "f.shape"),
            (\KPHItem.frame.kind, "f.kind"), (\KPHItem.frame.size, "f.size"), (\KPHItem.frame.title, "f.title"),
            (\KPHItem.kind, "k"), (\KPHItem.shapes, "shapes"), (\KPHItem.named, "named"), (\KPHItem.flag, "fl"),
            (\KPHItem.done, "d"), (\KPHItem.wrapped, "w"), (\KPHItem.count, "c"),
        ]
        for (keyPath, stored) in expected {
            #expect(path(keyPath) == stored, "\(keyPath)")
            #expect(FieldNames.storedPath(of: keyPath) == stored, "\(keyPath)")
        }
    }

    /// A hand-written `init(from:)` that reads a payload enum (or any property) from a nested
    /// container: the key path names the field inside the container, as it does for a struct.
    @Test func keyPathsIntoNestedContainersNameTheFieldInside() {
        // Found by this hunt, fixed since: \.shape read from a nested container resolves to nil: FieldNames.build's "deeper" search finds "meta.shape", "meta.shape.<case>" and "meta.shape.<case>.<label>" alike (the case object holds the same tokens) and gives up.
        #expect(fieldPath(of: \KPHGrouped.shape as PartialKeyPath<KPHGrouped>) == "meta.shape")
        #expect(fieldPath(of: \KPHGrouped.note as PartialKeyPath<KPHGrouped>) == "meta.n")
        // Found by this hunt, fixed since: the only property of a nested container resolves to the container ("solo", "size"): FieldNames.build takes the depth-1 stored path with the same tokens before looking deeper.
        #expect(fieldPath(of: \KPHGrouped.level as PartialKeyPath<KPHGrouped>) == "solo.lv")
        #expect(fieldPath(of: \KPHGrouped.width as PartialKeyPath<KPHGrouped>) == "size.w")
        #expect(fieldPath(of: \KPHGrouped.count as PartialKeyPath<KPHGrouped>) == "c")
        #expect(fieldPath(of: \KPHSoloIndexed.width as PartialKeyPath<KPHSoloIndexed>) == "size.w")
    }

    // MARK: Queries

    static func predicates() -> [(String, Predicate<KPHItem>)] {
        let shapes = KPHValues.shapes + [KPHValues.nanShape]
        let levels = KPHValues.levels
        var list: [(String, Predicate<KPHItem>)] = []
        for w in shapes {
            let wOpt: KPHShape? = w
            let fallback = KPHShape.label("é")
            list.append(("shape == \(kphShow(w))", #Predicate<KPHItem> { $0.shape == w }))
            list.append(("shape != \(kphShow(w))", #Predicate<KPHItem> { $0.shape != w }))
            list.append(("maybe == \(kphShow(w))", #Predicate<KPHItem> { $0.maybe == wOpt }))
            list.append(("maybe ?? é == \(kphShow(w))", #Predicate<KPHItem> { ($0.maybe ?? fallback) == w }))
            list.append(("frame.shape == \(kphShow(w))", #Predicate<KPHItem> { $0.frame.shape == w }))
            list.append(("shapes contains \(kphShow(w))", #Predicate<KPHItem> { $0.shapes.contains(w) }))
            list.append(("shape < \(kphShow(w))", #Predicate<KPHItem> { $0.shape < w }))
            list.append(("shape >= \(kphShow(w))", #Predicate<KPHItem> { $0.shape >= w }))
            let b = KPHKind.b
            let five = 5
            list.append(("frame.shape != w && count < 5", #Predicate<KPHItem> { $0.frame.shape != w && $0.count < five }))
            list.append(("kind == b || shape == w", #Predicate<KPHItem> { $0.kind == b || $0.shape == w }))
            list.append(("frame.kind == b && frame.shape > w", #Predicate<KPHItem> { $0.frame.kind == b && $0.frame.shape > w }))
        }
        for l in levels {
            let lOpt: KPHLevel? = l
            let off = KPHLevel.off
            list.append(("level == \(kphShow(l))", #Predicate<KPHItem> { $0.level == l }))
            list.append(("level < \(kphShow(l))", #Predicate<KPHItem> { $0.level < l }))
            list.append(("level > \(kphShow(l))", #Predicate<KPHItem> { $0.level > l }))
            list.append(("level <= \(kphShow(l))", #Predicate<KPHItem> { $0.level <= l }))
            list.append(("maybeLevel == \(kphShow(l))", #Predicate<KPHItem> { $0.maybeLevel == lOpt }))
            list.append(("maybeLevel ?? off > \(kphShow(l))", #Predicate<KPHItem> { ($0.maybeLevel ?? off) > l }))
            list.append(("level != l && !done", #Predicate<KPHItem> { $0.level != l && !$0.done }))
        }
        for o in KPHValues.onlies {
            list.append(("only == \(kphShow(o))", #Predicate<KPHItem> { $0.only == o }))
            list.append(("only > \(kphShow(o))", #Predicate<KPHItem> { $0.only > o }))
        }
        for f in KPHValues.flags {
            let t = true
            list.append(("flag == \(kphShow(f))", #Predicate<KPHItem> { $0.flag == f }))
            list.append(("flag != f && done", #Predicate<KPHItem> { $0.flag != f && $0.done == t }))
        }
        for w in KPHValues.wrappeds {
            list.append(("wrapped == \(kphShow(w))", #Predicate<KPHItem> { $0.wrapped == w }))
        }
        list.append(("maybe == nil", #Predicate<KPHItem> { $0.maybe == nil }))
        list.append(("maybe != nil", #Predicate<KPHItem> { $0.maybe != nil }))
        let off = KPHLevel.off
        list.append(("maybeLevel == nil || level == off", #Predicate<KPHItem> { $0.maybeLevel == nil || $0.level == off }))
        return list
    }

    static func checkQueries(_ db: Database, seed: UInt64, _ note: String) throws -> [String] {
        var answers: [String] = []
        let all = try db.objects(KPHItem.self).fetch()
        for (name, predicate) in predicates() {
            let expected = try all.filter { try predicate.evaluate($0) }.map(\.id)
            let results = db.objects(KPHItem.self).filter(predicate)
            let got = try results.fetch().map(\.id)
            #expect(got == expected, "seed \(seed) \(note): \(name)")
            #expect(results.count == expected.count, "seed \(seed) \(note): count of \(name)")
            answers.append("\(name): \(got)")
        }
        // The key-path filters.
        for w in KPHValues.shapes + [KPHValues.nanShape] {
            let equals = try db.objects(KPHItem.self).filter(\.shape, equals: w).fetch().map(\.id)
            #expect(equals == all.filter { $0.shape == w }.map(\.id), "seed \(seed) \(note): filter(\\.shape, equals: \(kphShow(w)))")
            let contains = try db.objects(KPHItem.self).filter(\.shapes, contains: w).fetch().map(\.id)
            #expect(contains == all.filter { $0.shapes.contains(w) }.map(\.id), "seed \(seed) \(note): filter(\\.shapes, contains: \(kphShow(w)))")
            answers.append("equals \(kphShow(w)): \(equals) contains: \(contains)")
        }
        return answers
    }

    /// `#Predicate`s on payload enums (==, !=, <, >, `??`, `contains`, mixed with other
    /// conditions) select what `Predicate.evaluate` selects over the fetched objects.
    @Test func predicatesOnPayloadEnumsMatchEvaluate() throws {
        let seed = Self.seed
        let db = try Database.inMemory(models: [KPHItem.self])
        try db.write { tx in for item in KPHValues.items(seed: seed, count: 60, nan: true) { try tx.insert(item) } }
        _ = try Self.checkQueries(db, seed: seed, "in memory")
    }

    // MARK: Sorts

    static func sorts() -> [(String, [SortDescriptor<KPHItem>])] {
        [
            ("shape", [SortDescriptor(\.shape)]),
            ("shape reverse", [SortDescriptor(\.shape, order: .reverse)]),
            ("level", [SortDescriptor(\.level)]),
            ("level reverse", [SortDescriptor(\.level, order: .reverse)]),
            ("only, shape reverse", [SortDescriptor(\.only), SortDescriptor(\.shape, order: .reverse)]),
            ("maybeLevel", [SortDescriptor(\.maybeLevel)]),
            ("maybeLevel reverse", [SortDescriptor(\.maybeLevel, order: .reverse)]),
            ("kind, level", [SortDescriptor(\.kind), SortDescriptor(\.level)]),
            ("count, shape", [SortDescriptor(\.count), SortDescriptor(\.shape)]),
            ("frame.size reverse, level", [SortDescriptor(\.frame.size, order: .reverse), SortDescriptor(\.level)]),
        ]
    }

    static func expectedOrder(_ objects: [KPHItem], _ descriptors: [SortDescriptor<KPHItem>]) -> [Int] {
        objects.sorted { a, b in
            for descriptor in descriptors {
                switch descriptor.compare(a, b) {
                case .orderedAscending: return true
                case .orderedDescending: return false
                case .orderedSame: continue
                }
            }
            return a.id < b.id
        }.map(\.id)
    }

    static func checkSorts(_ db: Database, seed: UInt64, _ note: String) throws -> [String] {
        var answers: [String] = []
        let all = try db.objects(KPHItem.self).fetch()
        let low = KPHLevel.low(0)
        let filter = #Predicate<KPHItem> { $0.level > low }
        for (name, descriptors) in sorts() {
            let got = try db.objects(KPHItem.self).sorted(by: descriptors).fetch().map(\.id)
            #expect(got == expectedOrder(all, descriptors), "seed \(seed) \(note): sorted by \(name)")
            let filtered = try db.objects(KPHItem.self).filter(filter).sorted(by: descriptors).fetch().map(\.id)
            #expect(filtered == expectedOrder(try all.filter { try filter.evaluate($0) }, descriptors), "seed \(seed) \(note): filtered, sorted by \(name)")
            let window = try db.objects(KPHItem.self).sorted(by: descriptors).offset(3).prefix(7).fetch().map(\.id)
            #expect(window == Array(expectedOrder(all, descriptors).dropFirst(3).prefix(7)), "seed \(seed) \(note): window sorted by \(name)")
            answers.append("\(name): \(got)")
        }
        return answers
    }

    /// Sorts on Comparable payload enums (and optional ones, and beside other descriptors) order
    /// as `SortDescriptor.compare` does, ties by primary key.
    @Test func sortsOnPayloadEnumsMatchCompare() throws {
        let seed = Self.seed &+ 1
        let db = try Database.inMemory(models: [KPHItem.self])
        try db.write { tx in for item in KPHValues.items(seed: seed, count: 60, nan: false) { try tx.insert(item) } }
        _ = try Self.checkSorts(db, seed: seed, "in memory")
    }

    // MARK: Aggregates and distinct

    static func checkAggregates(_ db: Database, seed: UInt64, _ note: String) throws -> [String] {
        let all = try db.objects(KPHItem.self).fetch()
        let results = db.objects(KPHItem.self)
        func same<V: Encodable>(_ got: [V], _ want: [V], _ what: String) {
            // (JSON with sorted keys: two equal dictionaries may list their entries in two orders.)
            #expect((try? sortedJSON(got)) == (try? sortedJSON(want)), "seed \(seed) \(note): values(\(what))")
        }
        same(try results.values(\.shape), all.map(\.shape), "shape")
        same(try results.values(\.level), all.map(\.level), "level")
        same(try results.values(\.only), all.map(\.only), "only")
        same(try results.values(\.maybe), all.map(\.maybe), "maybe")
        same(try results.values(\.maybeLevel), all.map(\.maybeLevel), "maybeLevel")
        same(try results.values(\.frame), all.map(\.frame), "frame")
        same(try results.values(\.frame.shape), all.map(\.frame.shape), "frame.shape")
        same(try results.values(\.frame.size), all.map(\.frame.size), "frame.size")
        same(try results.values(\.shapes), all.map(\.shapes), "shapes")
        same(try results.values(\.named), all.map(\.named), "named")
        same(try results.values(\.flag), all.map(\.flag), "flag")
        same(try results.values(\.wrapped), all.map(\.wrapped), "wrapped")
        same(try results.values(\.count), all.map(\.count), "count")
        let answers = [
            kphShow(results.min(of: \.shape) as Any), kphShow(results.max(of: \.shape) as Any),
            kphShow(results.min(of: \.level) as Any), kphShow(results.max(of: \.level) as Any),
            kphShow(results.min(of: \.only) as Any), kphShow(results.max(of: \.only) as Any),
            kphShow(results.min(of: \.maybeLevel) as Any), kphShow(results.max(of: \.maybeLevel) as Any),
        ]
        let expected = [
            kphShow(all.map(\.shape).min() as Any), kphShow(all.map(\.shape).max() as Any),
            kphShow(all.map(\.level).min() as Any), kphShow(all.map(\.level).max() as Any),
            kphShow(all.map(\.only).min() as Any), kphShow(all.map(\.only).max() as Any),
            kphShow(all.compactMap(\.maybeLevel).min() as Any), kphShow(all.compactMap(\.maybeLevel).max() as Any),
        ]
        #expect(answers == expected, "seed \(seed) \(note): min/max")
        // Filtered, the same values of the matches.
        let mid = KPHLevel.mid(0, "e\u{301}")
        let filter = #Predicate<KPHItem> { $0.level >= mid }
        let matches = try all.filter { try filter.evaluate($0) }
        let filtered = db.objects(KPHItem.self).filter(filter)
        same(try filtered.values(\.shape), matches.map(\.shape), "shape where level >= mid")
        #expect(kphShow(filtered.min(of: \.shape) as Any) == kphShow(matches.map(\.shape).min() as Any), "seed \(seed) \(note)")
        #expect(kphShow(filtered.max(of: \.frame.size) as Any) == kphShow(matches.map(\.frame.size).max() as Any), "seed \(seed) \(note)")
        // distinct(by:): the first of each group equal by `==`.
        let distinctKeyPaths: [(String, PartialKeyPath<KPHItem> & Sendable)] = [
            ("shape", \KPHItem.shape), ("level", \KPHItem.level), ("frame", \KPHItem.frame),
        ]
        for (name, keyPath) in distinctKeyPaths {
            var kept: [KPHItem] = []
            for item in all {
                func equal(_ a: KPHItem, _ b: KPHItem) -> Bool {
                    switch name {
                    case "shape": return a.shape == b.shape
                    case "level": return a.level == b.level
                    default: return a.frame == b.frame
                    }
                }
                if !kept.contains(where: { equal($0, item) }) { kept.append(item) }
            }
            let got = try db.objects(KPHItem.self).distinct(by: keyPath).fetch().map(\.id)
            #expect(got == kept.map(\.id), "seed \(seed) \(note): distinct by \(name)")
        }
        return answers
    }

    /// `values`, `min(of:)`, `max(of:)` and `distinct(by:)` on payload-enum fields give what the
    /// fetched objects hold.
    @Test func aggregatesOnPayloadEnumsMatchObjects() throws {
        let seed = Self.seed &+ 2
        let db = try Database.inMemory(models: [KPHItem.self])
        try db.write { tx in for item in KPHValues.items(seed: seed, count: 50, nan: false) { try tx.insert(item) } }
        _ = try Self.checkAggregates(db, seed: seed, "in memory")
        // NaN payloads: values read back as the objects hold them.
        let nan = try Database.inMemory(models: [KPHItem.self])
        try nan.write { tx in for item in KPHValues.items(seed: seed, count: 30, nan: true) { try tx.insert(item) } }
        let all = try nan.objects(KPHItem.self).fetch()
        #expect(try nan.objects(KPHItem.self).values(\.maybe).map(kphShow) == all.map(\.maybe).map(kphShow), "seed \(seed)")
        #expect(try nan.objects(KPHItem.self).values(\.frame.shape).map(kphShow) == all.map(\.frame.shape).map(kphShow), "seed \(seed)")
    }

    /// A property read from a single-field nested container reads its own values in aggregates.
    // Found by this hunt, fixed since: values(\.width) throws and min/max(of: \.width) are nil: \.width maps to the container "size" (an object), and QueryEngine.fieldValues reads that field as an Int.
    @Test func aggregatesOnANestedContainersOnlyField() throws {
        let db = try Database.inMemory(models: [KPHGrouped.self])
        let widths = [Int.min, 3, -1, Int.max, 0]
        try db.write { tx in
            for (i, width) in widths.enumerated() {
                try tx.insert(KPHGrouped(id: i, shape: KPHValues.shapes[i], note: "n\(i)", level: KPHValues.levels[i], width: width, count: i))
            }
        }
        let results = db.objects(KPHGrouped.self)
        #expect((try? results.values(\.width)) == widths)
        #expect(results.max(of: \.width) == Int.max)
        #expect(results.min(of: \.width) == Int.min)
        #expect(try results.values(\.level) == Array(KPHValues.levels.prefix(5)))
        #expect(try results.values(\.shape) == Array(KPHValues.shapes.prefix(5)))
        let three = 3
        #expect(try results.filter(#Predicate { $0.width >= three }).fetch().map(\.id) == [1, 3])
        #expect(try results.sorted(by: SortDescriptor(\.width, order: .reverse)).fetch().map(\.id) == [3, 1, 4, 2, 0])
        let box = KPHShape.box(Int.min, Int.max)
        #expect(try results.filter(#Predicate { $0.shape >= box }).fetch().map(\.id) == [])
        let none = KPHShape.none
        #expect(try results.filter(#Predicate { $0.shape != none }).fetch().map(\.id) == [1, 2, 3, 4])
    }

    // MARK: Observation

    struct Step: Sendable {
        let key: Int
        /// Whether an observer narrowed to the key paths under test must hear it.
        let heard: Bool
        let write: @Sendable (Transaction) throws -> Void

        static func change(_ key: Int, heard: Bool, _ body: @escaping @Sendable (inout KPHItem) -> Void) -> Step {
            Step(key: key, heard: heard) { tx in _ = try tx.update(KPHItem.self, key: key) { body(&$0) } }
        }

        static func json(_ key: Int, heard: Bool, _ text: String) -> Step {
            Step(key: key, heard: heard) { tx in _ = try tx.update(KPHItem.self, key: key, json: Data(text.utf8)) }
        }
    }

    static func baseItems() -> [KPHItem] {
        (1...4).map { id in
            KPHItem(
                id: id, shape: .none, level: .low(id), only: .value(id), maybe: nil, maybeLevel: nil,
                frame: KPHFrame(shape: .label("f\(id)"), kind: .a, size: id, title: "t\(id)"), kind: .a, shapes: [], named: [:],
                flag: .off, done: false, wrapped: .empty, count: 0)
        }
    }

    /// Runs `steps` under an observer narrowed to `keyPaths`: it hears exactly the steps marked
    /// heard. Every step it must not hear is followed by one it must, and deliveries come in
    /// commit order, so whether commits coalesce or not, a spurious delivery shows up as one.
    static func checkNarrowing(_ name: String, keyPaths: [PartialKeyPath<KPHItem> & Sendable], _ steps: [Step]) async throws {
        let db = try Database.inMemory(models: [KPHItem.self])
        try await db.write { tx in for item in baseItems() { try tx.insert(item) } }
        let log = Mutex<[String]>([])
        let delivered = Mutex<[KPHItem]>([])
        let token = db.objects(KPHItem.self).sorted(by: SortDescriptor(\.id)).observe(on: DispatchQueue(label: "kph-\(name)"), keyPaths: keyPaths) {
            change in
            switch change {
            case .initial(let r):
                delivered.withLock { $0 = Array(r) }
                log.withLock { $0.append("initial \(r.count)") }
            case .update(let r, let d, let i, let m):
                delivered.withLock { $0 = Array(r) }
                log.withLock { $0.append("d\(d) i\(i) m\(m)") }
            case .error(let e): log.withLock { $0.append("error \(e)") }
            }
        }
        defer { token.invalidate() }
        var expected = ["initial 4"]
        func expectLog() async throws {
            let target = expected.count
            let arrived = try await poolEventually { log.withLock { $0.count } >= target }
            #expect(arrived, "\(name): \(log.withLock { $0 })")
            #expect(log.withLock { $0 } == expected, "\(name)")
        }
        try await expectLog()
        for (n, step) in steps.enumerated() {
            try await db.write { tx in try step.write(tx) }
            if step.heard {
                expected.append("d[] i[] m[\(step.key - 1)]")
                try await expectLog()
            } else {
                #expect(steps.dropFirst(n + 1).contains { $0.heard }, "\(name): step \(n) must be followed by a heard one")
            }
        }
        // The last delivery holds the objects as stored, changes not heard included.
        let stored = try db.objects(KPHItem.self).sorted(by: SortDescriptor(\.id)).fetch()
        #expect(try sortedJSON(delivered.withLock { $0 }) == sortedJSON(stored), "\(name)")
    }

    /// Narrowed to a payload enum: a new case, a new payload (in a tuple too), a JSON patch naming
    /// another case are heard; other fields, including other payload enums, are not.
    @Test func narrowedToAPayloadEnum() async throws {
        try await Self.checkNarrowing(
            "shape", keyPaths: [\.shape],
            [
                .change(1, heard: false) { $0.count = 5 },
                .change(2, heard: true) { $0.shape = .box(Int.min, Int.max) },
                .change(3, heard: false) { $0.frame.shape = .box(1, 2) },
                .change(2, heard: true) { $0.shape = .box(Int.min, Int.max - 1) },
                .change(1, heard: false) { $0.maybe = .box(Int.min, Int.max) },
                .change(1, heard: false) { $0.level = .mid(1, "x") },
                .change(3, heard: true) { $0.shape = .pair(w: 1, name: "é") },
                .change(3, heard: false) { $0.shapes = [.none] },
                .change(3, heard: true) { $0.shape = .pair(w: 1, name: "") },
                .json(4, heard: false, #"{"c": 9, "f": {"size": 3}}"#),
                .json(4, heard: true, #"{"s": {"label": {"_0": "e\u0301"}}}"#),
                .change(4, heard: false) { $0.shape = .label("e\u{301}") },  // the same value: no change
                .change(4, heard: true) { $0.shape = .none },
                .change(1, heard: true) { $0.shape = .circle(radius: .nan) },
                .change(1, heard: false) { $0.wrapped = .inner(.circle(radius: .nan)) },
                .change(1, heard: true) { $0.shape = .circle(radius: 1) },
            ])
    }

    @Test func narrowedToAFirstCaseWithPayloadEnumAndOptional() async throws {
        try await Self.checkNarrowing(
            "level+maybe", keyPaths: [\.level, \.maybe],
            [
                .change(1, heard: false) { $0.shape = .box(1, 1) },
                .change(1, heard: true) { $0.level = .off },
                .change(2, heard: false) { $0.maybeLevel = .off },
                .change(2, heard: true) { $0.maybe = KPHShape.none },
                .change(2, heard: true) { $0.maybe = nil },
                .change(3, heard: false) { $0.only = .value(Int.max) },
                .change(3, heard: true) { $0.level = .mid(Int.min, "e\u{301}") },
                .json(4, heard: false, #"{"ml": {"low": {"_0": 3}}}"#),
                .json(4, heard: true, #"{"m": {"circle": {"radius": 2.5}}}"#),
                .json(4, heard: true, #"{"m": null}"#),
            ])
    }

    @Test func narrowedToAnEnumInsideAStruct() async throws {
        try await Self.checkNarrowing(
            "frame.shape", keyPaths: [\.frame.shape],
            [
                .change(1, heard: false) { $0.frame.size = 99 },
                .change(1, heard: true) { $0.frame.shape = .none },
                .change(2, heard: false) { $0.frame.kind = .c },
                .change(2, heard: false) { $0.shape = .label("f2") },
                .change(2, heard: true) { $0.frame.shape = .label("f2x") },
                .json(3, heard: false, #"{"f": {"title": "new"}}"#),
                .json(3, heard: true, #"{"f": {"shape": {"pair": {"w": -1, "name": ""}}}}"#),
            ])
    }

    @Test func narrowedToAStructHoldingAnEnum() async throws {
        try await Self.checkNarrowing(
            "frame", keyPaths: [\.frame],
            [
                .change(1, heard: false) { $0.shape = .box(0, 0) },
                .change(1, heard: true) { $0.frame.shape = .box(0, 0) },
                .change(2, heard: false) { $0.count = 1 },
                .change(2, heard: true) { $0.frame.size = Int.min },
                .change(3, heard: false) { $0.level = .off },
                .change(3, heard: true) { $0.frame.kind = .b },
            ])
    }

    @Test func narrowedToCollectionsAndAMix() async throws {
        try await Self.checkNarrowing(
            "shapes+named+flag+count", keyPaths: [\.shapes, \.named, \.flag, \.frame.size],
            [
                .change(1, heard: false) { $0.shape = .box(0, 0) },
                .change(1, heard: true) { $0.shapes = [.none, .box(1, 2)] },
                .change(1, heard: true) { $0.shapes = [.none, .box(1, 3)] },
                .change(2, heard: false) { $0.frame.shape = .none },
                .change(2, heard: true) { $0.named = ["é": .off] },
                .change(2, heard: true) { $0.named = ["é": .low(0)] },
                .change(3, heard: false) { $0.done = true },
                .change(3, heard: true) { $0.flag = .on(true) },
                .change(3, heard: true) { $0.flag = .on(false) },
                .change(4, heard: false) { $0.wrapped = .inner(.none) },
                .change(4, heard: true) { $0.frame.size = 0 },
            ])
    }

    @Test func narrowedToASingleCaseAndANestedEnum() async throws {
        try await Self.checkNarrowing(
            "only+wrapped", keyPaths: [\.only, \.wrapped],
            [
                .change(1, heard: false) { $0.shape = .box(0, 0) },
                .change(1, heard: true) { $0.only = .value(Int.min) },
                .change(2, heard: false) { $0.frame.shape = .none },
                .change(2, heard: true) { $0.wrapped = .inner(.none) },
                .change(2, heard: true) { $0.wrapped = .inner(.label("")) },
                .change(3, heard: false) { $0.level = .off },
                .change(3, heard: true) { $0.wrapped = .inner(.circle(radius: -0.5)) },
            ])
    }

    /// The same narrowing through a hand-written coder's nested container: a change to `count`
    /// is not heard by an observer of `\.shape` or `\.level`.
    @Test func narrowedToPayloadEnumsInNestedContainers() async throws {
        let db = try Database.inMemory(models: [KPHGrouped.self])
        try await db.write { tx in
            for id in 1...3 { try tx.insert(KPHGrouped(id: id, shape: .none, note: "n", level: .off, width: id, count: 0)) }
        }
        let log = Mutex<[String]>([])
        let token = db.objects(KPHGrouped.self).sorted(by: SortDescriptor(\.id)).observe(
            on: DispatchQueue(label: "kph-grouped"), keyPaths: [\.shape, \.level]
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
            // Found by this hunt, fixed since: `\.shape` read from a nested container maps to no field (see keyPathsIntoNestedContainersNameTheFieldInside), so the narrowing is dropped and a change to `count` or `note` is delivered.
            #expect(log.withLock { $0 } == expected)
        }
        try await expectLog()
        try await db.write { tx in try tx.update(KPHGrouped.self, key: 1) { $0.count = 5 } }
        try await db.write { tx in try tx.update(KPHGrouped.self, key: 2) { $0.shape = .box(1, 2) } }
        expected.append("d[] i[] m[1]")
        try await expectLog()
        try await db.write { tx in try tx.update(KPHGrouped.self, key: 1) { $0.note = "changed" } }
        try await db.write { tx in try tx.update(KPHGrouped.self, key: 3) { $0.level = .low(3) } }
        expected.append("d[] i[] m[2]")
        try await expectLog()
        try await db.write { tx in try tx.update(KPHGrouped.self, key: 2) { $0.width = 40 } }
        try await db.write { tx in _ = try tx.update(KPHGrouped.self, key: 1, json: Data(#"{"meta": {"shape": {"circle": {"radius": 1}}}}"#.utf8)) }
        expected.append("d[] i[] m[0]")
        try await expectLog()
    }

    /// Per-object observation names the stored field that changed: a payload enum's, a struct's
    /// holding one.
    @Test func objectObservationNamesPayloadEnumFields() async throws {
        let db = try Database.inMemory(models: [KPHItem.self])
        try await db.write { tx in for item in Self.baseItems() { try tx.insert(item) } }
        let log = Mutex<[String]>([])
        let heardCount = Atomic<Int>(0)
        let token = db.observe(KPHItem.self, key: 2, on: DispatchQueue(label: "kph-object")) { change in
            switch change {
            case .changed(let item, let fields) where fields == ["c"]: heardCount.store(item.count, ordering: .sequentiallyConsistent)
            case .changed(_, let fields): log.withLock { $0.append(fields.sorted().joined(separator: ",")) }
            default: log.withLock { $0.append("\(change)") }
            }
        }
        defer { token.invalidate() }
        // The observer reports no initial change: change `count` (whose deliveries are not
        // logged) until one is heard, so that its first read is behind the steps.
        var warmedUp = false
        for n in 1...200 where !warmedUp {
            try await db.write { tx in try tx.update(KPHItem.self, key: 2) { $0.count = n } }
            warmedUp = try await poolEventually(seconds: 0.2, polls: 0) { heardCount.load(ordering: .sequentiallyConsistent) > 0 }
        }
        #expect(warmedUp)
        // Then one more, heard after every earlier one.
        try await db.write { tx in try tx.update(KPHItem.self, key: 2) { $0.count = 10_000 } }
        #expect(try await poolEventually { heardCount.load(ordering: .sequentiallyConsistent) == 10_000 })
        var expected: [String] = []
        func step(_ body: @escaping @Sendable (inout KPHItem) -> Void, _ fields: String) async throws {
            try await db.write { tx in try tx.update(KPHItem.self, key: 2) { body(&$0) } }
            expected.append(fields)
            let target = expected.count
            let arrived = try await poolEventually { log.withLock { $0.count } >= target }
            #expect(arrived, "\(log.withLock { $0 })")
            #expect(log.withLock { $0 } == expected)
        }
        try await step({ $0.shape = .box(Int.min, 0) }, "s")
        try await step({ $0.frame.shape = .circle(radius: .nan) }, "f")
        try await step({ $0.maybe = .pair(w: 0, name: "é") }, "m")
        try await step({ $0.only = .value(-9) }, "only")
        try await step(
            {
                $0.wrapped = .inner(.none)
                $0.level = .off
            }, "lv,w")
    }

    // MARK: Partial updates

    /// A JSON value read with `JSONDecoder` (integers as `Int64`, exactly), for the reference merge.
    indirect enum JSON: Codable, Equatable {
        case null, bool(Bool), int(Int64), double(Double), string(String), array([JSON]), object([String: JSON])

        init(from decoder: any Decoder) throws {
            let c = try decoder.singleValueContainer()
            if c.decodeNil() {
                self = .null
            } else if let v = try? c.decode(Bool.self) {
                self = .bool(v)
            } else if let v = try? c.decode(Int64.self) {
                self = .int(v)
            } else if let v = try? c.decode(Double.self) {
                self = .double(v)
            } else if let v = try? c.decode(String.self) {
                self = .string(v)
            } else if let v = try? c.decode([JSON].self) {
                self = .array(v)
            } else {
                self = .object(try c.decode([String: JSON].self))
            }
        }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.singleValueContainer()
            switch self {
            case .null: try c.encodeNil()
            case .bool(let v): try c.encode(v)
            case .int(let v): try c.encode(v)
            case .double(let v): try c.encode(v)
            case .string(let v): try c.encode(v)
            case .array(let v): try c.encode(v)
            case .object(let v): try c.encode(v)
            }
        }
    }

    /// RFC 7396 merge, except that the values at `replaced` paths (payload enums, dictionaries,
    /// arrays) are replaced whole, as the docs promise.
    static func merge(_ base: JSON?, _ patch: JSON, at path: String, replaced: Set<String>) -> JSON? {
        guard case .object(let fields) = patch, !replaced.contains(path) else { return patch == .null ? nil : patch }
        var target: [String: JSON] = [:]
        if case .object(let existing)? = base { target = existing }
        for (key, value) in fields {
            let child = path.isEmpty ? key : path + "." + key
            target[key] = value == .null ? nil : merge(target[key], value, at: child, replaced: replaced)
        }
        return .object(target)
    }

    static func expectedAfter<M: Model>(_ object: M, patch: String, replaced: Set<String>) throws -> M {
        // (Infinities, which the stored objects may hold, travel as strings.)
        let encoder = JSONEncoder()
        encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "+inf", negativeInfinity: "-inf", nan: "nan")
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(positiveInfinity: "+inf", negativeInfinity: "-inf", nan: "nan")
        let base = try decoder.decode(JSON.self, from: encoder.encode(object))
        let patchValue = try decoder.decode(JSON.self, from: Data(patch.utf8))
        let merged = merge(base, patchValue, at: "", replaced: replaced) ?? .object([:])
        return try decoder.decode(M.self, from: encoder.encode(merged))
    }

    /// The object's JSON with sorted keys: equal exactly when the stored values are (both zeros
    /// and canonically equal strings told apart).
    static func sortedJSON<M: Encodable>(_ object: M) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "+inf", negativeInfinity: "-inf", nan: "nan")
        return String(decoding: try encoder.encode(object), as: UTF8.self)
    }

    static let itemReplaced: Set<String> = ["s", "lv", "only", "m", "ml", "f.shape", "shapes", "named", "fl", "w"]

    /// Partial JSON updates of payload-enum fields (top level, optional, in a struct, in
    /// collections) and of fields beside them leave what `JSONDecoder` decodes from the document
    /// merged with the patch (payload enums, arrays and dictionaries replaced whole).
    @Test func partialUpdatesMatchJSONDecoder() throws {
        let db = try Database.inMemory(models: [KPHItem.self])
        let start = KPHValues.items(seed: Self.seed &+ 3, count: 3, nan: false)
        try db.write { tx in for item in start { try tx.insert(item) } }
        let patches = [
            #"{"s": {"label": {"_0": "e\u0301"}}}"#,
            #"{"s": {"box": {"_0": -9223372036854775808, "_1": 9223372036854775807}}}"#,
            #"{"s": {"none": {}}}"#,
            #"{"s": {"pair": {"w": 1, "name": ""}}, "c": -9223372036854775808}"#,
            #"{"f": {"shape": {"circle": {"radius": -0.0}}}}"#,
            #"{"f": {"size": 4, "title": "é"}}"#,
            #"{"f": {"shape": {"none": {}}, "kind": "c"}}"#,
            #"{"m": null}"#,
            #"{"m": {"pair": {"w": 3, "name": "e\u0301"}}}"#,
            #"{"m": {"box": {"_0": 0, "_1": 0}}}"#,
            #"{"ml": {"mid": {"_0": 1, "_1": ""}}}"#,
            #"{"ml": null, "lv": {"off": {}}}"#,
            #"{"lv": {"low": {"_0": 9223372036854775807}}}"#,
            #"{"only": {"value": {"_0": -9223372036854775808}}}"#,
            #"{"shapes": [{"none": {}}, {"box": {"_0": 1, "_1": 2}}, {"label": {"_0": ""}}]}"#,
            #"{"named": {"é": {"off": {}}, "": {"mid": {"_0": 0, "_1": "x"}}}}"#,
            #"{"named": {"a": {"low": {"_0": 1}}}}"#,
            #"{"fl": {"on": {"_0": false}}, "d": true}"#,
            #"{"w": {"inner": {"_0": {"circle": {"radius": 2}}}}}"#,
            #"{"w": {"inner": {"_0": {"none": {}}}}}"#,
            #"{"k": "b", "c": 12}"#,
        ]
        for key in 1...3 {
            for patch in patches {
                let before = try #require(try db.objects(KPHItem.self).fetch().first { $0.id == key })
                let expected = try Self.expectedAfter(before, patch: patch, replaced: Self.itemReplaced)
                let result = try db.write { tx in try tx.update(KPHItem.self, key: key, json: Data(patch.utf8)) }
                let stored = try #require(try db.objects(KPHItem.self).fetch().first { $0.id == key })
                #expect(result.object == expected, "key \(key) patch \(patch)")
                #expect(stored == expected, "key \(key) patch \(patch)")
                if !patch.contains("-0.0") {
                    #expect(result.changed == (try Self.sortedJSON(expected) != Self.sortedJSON(before)), "key \(key) patch \(patch)")
                }
            }
        }
        // The same through `update(fields:)`, nested dictionaries standing for the JSON objects.
        let before = try #require(try db.objects(KPHItem.self).fetch().first { $0.id == 1 })
        let fields: [String: Any] = [
            "s": ["box": ["_0": Int.max, "_1": 0]], "f": ["shape": ["label": ["_0": "é"]]], "m": ["none": [String: Any]()],
        ]
        let expected = try Self.expectedAfter(
            before, patch: #"{"s": {"box": {"_0": 9223372036854775807, "_1": 0}}, "f": {"shape": {"label": {"_0": "é"}}}, "m": {"none": {}}}"#,
            replaced: Self.itemReplaced)
        let result = try db.write { tx in try tx.update(KPHItem.self, key: 1, fields: fields) }
        #expect(result.object == expected)
        // A partial payload of the stored case: the docs have the patch give the whole value, so
        // it is refused, or (merged) it is what JSONDecoder reads from the merged document.
        try db.write { tx in try tx.update(KPHItem.self, key: 2) { $0.shape = .box(1, 2) } }
        let boxed = try #require(try db.objects(KPHItem.self).fetch().first { $0.id == 2 })
        let partial = #"{"s": {"box": {"_0": 7}}}"#
        do {
            let result = try db.write { tx in try tx.update(KPHItem.self, key: 2, json: Data(partial.utf8)) }
            #expect(result.object.shape == .box(7, 2), "\(result.object.shape)")
        } catch {
            let after = try #require(try db.objects(KPHItem.self).fetch().first { $0.id == 2 })
            #expect(after == boxed, "\(error)")
        }
    }

    /// Partial updates through a hand-written coder's nested containers: the container merges key
    /// by key, the payload enum inside it is replaced.
    @Test func partialUpdatesThroughNestedContainers() throws {
        let db = try Database.inMemory(models: [KPHGrouped.self])
        try db.write { tx in try tx.insert(KPHGrouped(id: 1, shape: .box(1, 2), note: "n", level: .low(1), width: 3, count: 0)) }
        let patches = [
            #"{"meta": {"shape": {"label": {"_0": "e\u0301"}}}}"#,
            #"{"meta": {"n": ""}}"#,
            #"{"solo": {"lv": {"mid": {"_0": -1, "_1": "é"}}}}"#,
            #"{"size": {"w": -9223372036854775808}, "c": 4}"#,
            #"{"meta": {"shape": {"none": {}}, "n": "x"}, "solo": {"lv": {"off": {}}}}"#,
        ]
        for patch in patches {
            let before = try #require(try db.objects(KPHGrouped.self).fetch().first)
            let expected = try Self.expectedAfter(before, patch: patch, replaced: ["meta.shape", "solo.lv"])
            let result = try db.write { tx in try tx.update(KPHGrouped.self, key: 1, json: Data(patch.utf8)) }
            #expect(result.object == expected, "patch \(patch)")
            #expect(try db.objects(KPHGrouped.self).fetch().first == expected, "patch \(patch)")
        }
    }

    // MARK: Indexes

    /// An index on a field stored as an object is refused at open, naming the field and why, for
    /// every way of declaring one.
    @Test func indexesOnObjectFieldsAreRefused() {
        let enumReason = "enum with associated values"
        let cases: [(String, String, String, () throws -> Void)] = [
            ("shape", "s", enumReason, { _ = try Database.inMemory(models: [KPHIdxShape.self]) }),
            ("level (unique)", "level", enumReason, { _ = try Database.inMemory(models: [KPHIdxLevel.self]) }),
            ("maybe (optional)", "m", enumReason, { _ = try Database.inMemory(models: [KPHIdxMaybe.self]) }),
            ("only (single case, descriptor)", "only", enumReason, { _ = try Database.inMemory(models: [KPHIdxOnly.self]) }),
            ("flag (Bool payload)", "flag", enumReason, { _ = try Database.inMemory(models: [KPHIdxFlag.self]) }),
            ("kind + frame.shape (compound)", "frame.shape", enumReason, { _ = try Database.inMemory(models: [KPHIdxCompound.self]) }),
            ("frame.size + level (unique compound)", "level", enumReason, { _ = try Database.inMemory(models: [KPHIdxUniqueCompound.self]) }),
            ("frame.shape", "f.shape", enumReason, { _ = try Database.inMemory(models: [KPHIdxFrameShape.self]) }),
            ("wrapped (enum in enum)", "wrapped", enumReason, { _ = try Database.inMemory(models: [KPHIdxWrapped.self]) }),
            ("frame (optional struct)", "frame", "nested struct", { _ = try Database.inMemory(models: [KPHIdxFrame.self]) }),
        ]
        for (name, field, reason, open) in cases {
            let refusal = kphRefusal(open)
            #expect(refusal.field == field, "\(name): \(refusal)")
            #expect(refusal.reason.contains(reason) && refusal.reason.contains("cannot be indexed"), "\(name): \(refusal.reason)")
        }
    }

    /// An array of payload enums as an index: refused at open, or else every write and lookup works.
    @Test func indexOnAnArrayOfPayloadEnums() throws {
        let db: Database
        do {
            db = try Database.inMemory(models: [KPHIdxShapes.self])
        } catch StrataError.unsupportedType(_, _, let reason) {
            #expect(reason.contains("cannot be indexed"), "\(reason)")
            return
        }
        var inserted: [KPHIdxShapes] = []
        do {
            try db.write { tx in
                for (i, shape) in KPHValues.shapes.enumerated() {
                    let item = KPHIdxShapes(id: i, shapes: [shape, .none])
                    try tx.insert(item)
                    inserted.append(item)
                }
            }
        } catch {
            // Found by this hunt, fixed since: opens, then every insert throws "corrupt record: a KPHShape value cannot be an index key": ModelInfo's new object check looks at `.object` only, not at an array's element; before the change \.shapes did not resolve and opening refused it.
            Issue.record("opened, then an insert failed: \(error)")
            return
        }
        for w in KPHValues.shapes {
            let got = try db.objects(KPHIdxShapes.self).filter(\.shapes, contains: w).fetch().map(\.id)
            #expect(got == inserted.filter { $0.shapes.contains(w) }.map(\.id), "\(kphShow(w))")
        }
    }

    /// Dictionaries of payload enums and arrays of structs holding one, as indexes: refused at
    /// open, or else writes and lookups work.
    // Found by this hunt, fixed since: both open, then every insert throws "corrupt record: a … value cannot be an index key": ModelInfo.path(of:) refuses `.object` only, not `.dictionary`/`.array` of objects (the dictionary case is new: \.named did not resolve before the change).
    @Test func indexOnOtherCollectionsOfObjects() throws {
        func outcome<M: Model>(_ type: M.Type, _ objects: [M]) -> String {
            let db: Database
            do {
                db = try Database.inMemory(models: [M.self])
            } catch StrataError.unsupportedType(_, _, let reason) {
                return reason.contains("index") ? "refused" : "refused: \(reason)"
            } catch {
                return "\(error)"
            }
            do {
                try db.write { tx in for object in objects { try tx.insert(object) } }
                return try db.objects(M.self).fetch().count == objects.count ? "works" : "lost objects"
            } catch {
                return "opened, then an insert failed: \(error)"
            }
        }
        let dictionary = outcome(KPHIdxNamedShapes.self, [KPHIdxNamedShapes(id: 1, named: ["a": .box(1, 2)])])
        #expect(dictionary == "refused" || dictionary == "works", "\(dictionary)")
        let frames = outcome(KPHIdxFrames.self, [KPHIdxFrames(id: 1, frames: [KPHFrame(shape: .none, kind: .a, size: 1, title: "")])])
        #expect(frames == "refused" || frames == "works", "\(frames)")
    }

    /// Indexes on primitive fields of a struct that holds a payload enum (plain, unique, compound,
    /// full text) work, and their queries agree with `Predicate.evaluate`.
    @Test func indexesBesidePayloadEnumsWork() throws {
        let db = try Database.inMemory(models: [KPHIdxBeside.self])
        var rng = SeededRandom(seed: Self.seed &+ 4)
        try db.write { tx in
            for id in 0..<40 {
                let frame = KPHFrame(
                    shape: KPHValues.shapes[rng.below(KPHValues.shapes.count)], kind: KPHKind.allCases[rng.below(3)],
                    size: [Int.min, 0, 3, Int.max][rng.below(4)], title: KPHValues.titles[rng.below(KPHValues.titles.count)])
                try tx.insert(
                    KPHIdxBeside(
                        id: id, shape: KPHValues.shapes[rng.below(KPHValues.shapes.count)], frame: frame, kind: KPHKind.allCases[rng.below(3)], code: "c\(id)"))
            }
        }
        let all = try db.objects(KPHIdxBeside.self).fetch()
        let three = 3
        let b = KPHKind.b
        let box = KPHShape.box(0, 0)
        let predicates: [(String, Predicate<KPHIdxBeside>)] = [
            ("frame.size == 3", #Predicate { $0.frame.size == three }),
            ("frame.size > 3", #Predicate { $0.frame.size > three }),
            ("frame.kind == b", #Predicate { $0.frame.kind == b }),
            ("frame.kind == b && frame.size == 3", #Predicate { $0.frame.kind == b && $0.frame.size == three }),
            ("kind == b && frame.shape != box", #Predicate { $0.kind == b && $0.frame.shape != box }),
            ("frame.size <= 3 && shape == box", #Predicate { $0.frame.size <= three && $0.shape == box }),
        ]
        for (name, predicate) in predicates {
            let got = try db.objects(KPHIdxBeside.self).filter(predicate).fetch().map(\.id)
            #expect(got == (try all.filter { try predicate.evaluate($0) }.map(\.id)), "\(name)")
        }
        let sorted = try db.objects(KPHIdxBeside.self).sorted(by: SortDescriptor(\.frame.size), SortDescriptor(\.shape, order: .reverse)).fetch().map(\.id)
        let expected = all.sorted { a, b in
            if a.frame.size != b.frame.size { return a.frame.size < b.frame.size }
            if a.shape != b.shape { return a.shape > b.shape }
            return a.id < b.id
        }.map(\.id)
        #expect(sorted == expected)
        let foxes = try db.objects(KPHIdxBeside.self).search(\.frame.title, "fox").fetch().map(\.id)
        #expect(foxes == all.filter { $0.frame.title.contains("fox") }.map(\.id))
        #expect(throws: StrataError.self) {
            try db.write { tx in try tx.insert(KPHIdxBeside(id: 99, shape: .none, frame: all[0].frame, kind: .a, code: "c0")) }
        }
    }

    /// The docs: key paths to properties a hand-written coder reads from a nested container
    /// "query, sort and index the nested field", a container holding one property included.
    @Test func indexOnANestedContainersOnlyField() throws {
        // Found by this hunt, fixed since: refused at open as "a nested struct ... cannot be indexed": \.width maps to the container "size", not to "size.w" (FieldNames.build), which the new object check in ModelInfo.path(of:) now rejects.
        let refusal = kphRefusal { _ = try Database.inMemory(models: [KPHSoloIndexed.self]) }
        #expect(refusal.reason == "opened", "\(refusal)")
        guard refusal.reason == "opened" else { return }
        let db = try Database.inMemory(models: [KPHSoloIndexed.self])
        try db.write { tx in for id in 0..<6 { try tx.insert(KPHSoloIndexed(id: id, width: id % 3, title: "t\(id)")) } }
        let one = 1
        #expect(try db.objects(KPHSoloIndexed.self).filter(#Predicate { $0.width == one }).fetch().map(\.id) == [1, 4])
    }

    // MARK: Reopen

    /// A new case and a new optional payload-enum field open as additive changes; queries,
    /// aggregates and narrowing on them work on the old objects and the new, and after a reopen.
    @Test func newCaseAndNewEnumFieldAfterReopen() async throws {
        let path = databasePath()
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        do {
            let v1 = try Database(path: path, models: [KPHEvolveV1.self])
            try await v1.write { tx in
                for id in 0..<6 { try tx.insert(KPHEvolveV1(id: id, shape: id % 2 == 0 ? .none : .circle(radius: Double(id)), size: id % 3)) }
            }
            v1.close()
        }
        let star = KPHShapeV2.star(points: Int.min, name: "e\u{301}")
        let starOpt: KPHShapeV2? = star
        func check(_ db: Database, _ note: String) throws {
            let all = try db.objects(KPHEvolveV2.self).fetch()
            #expect(all.map(\.id) == Array(0..<6), "\(note)")
            let predicates: [(String, Predicate<KPHEvolveV2>)] = [
                ("shape == star", #Predicate { $0.shape == star }),
                ("extra == star", #Predicate { $0.extra == starOpt }),
                ("extra == nil", #Predicate { $0.extra == nil }),
                ("size == 1 && shape != star", #Predicate { $0.size == 1 && $0.shape != star }),
            ]
            for (name, predicate) in predicates {
                let got = try db.objects(KPHEvolveV2.self).filter(predicate).fetch().map(\.id)
                #expect(got == (try all.filter { try predicate.evaluate($0) }.map(\.id)), "\(note): \(name)")
            }
            #expect(try db.objects(KPHEvolveV2.self).values(\.shape) == all.map(\.shape), "\(note)")
            #expect(try db.objects(KPHEvolveV2.self).values(\.extra) == all.map(\.extra), "\(note)")
        }
        let v2 = try Database(path: path, models: [KPHEvolveV2.self])
        try check(v2, "opened as v2")
        #expect(fieldPath(of: \KPHEvolveV2.extra as PartialKeyPath<KPHEvolveV2>) == "x")
        let log = Mutex<[String]>([])
        let token = v2.objects(KPHEvolveV2.self).sorted(by: SortDescriptor(\.id)).observe(on: DispatchQueue(label: "kph-evolve"), keyPaths: [\.extra]) {
            change in
            switch change {
            case .initial(let r): log.withLock { $0.append("initial \(r.count)") }
            case .update(_, let d, let i, let m): log.withLock { $0.append("d\(d) i\(i) m\(m)") }
            case .error(let e): log.withLock { $0.append("error \(e)") }
            }
        }
        #expect(try await poolEventually { log.withLock { $0.count } >= 1 })
        try await v2.write { tx in try tx.update(KPHEvolveV2.self, key: 2) { $0.shape = star } }
        try await v2.write { tx in try tx.update(KPHEvolveV2.self, key: 3) { $0.extra = star } }
        #expect(try await poolEventually { log.withLock { $0.count } >= 2 })
        try await v2.write { tx in try tx.update(KPHEvolveV2.self, key: 4) { $0.size = 9 } }
        try await v2.write { tx in _ = try tx.update(KPHEvolveV2.self, key: 5, json: Data(#"{"x": {"none": {}}}"#.utf8)) }
        #expect(try await poolEventually { log.withLock { $0.count } >= 3 })
        #expect(log.withLock { $0 } == ["initial 6", "d[] i[] m[3]", "d[] i[] m[5]"])
        token.invalidate()
        try check(v2, "written as v2")
        v2.close()
        let again = try Database(path: path, models: [KPHEvolveV2.self])
        defer { again.close() }
        try check(again, "reopened as v2")
        #expect(try again.objects(KPHEvolveV2.self).filter(#Predicate { $0.shape == star }).fetch().map(\.id) == [2])
    }

    /// A file-backed database gives the same answers to the same queries, sorts and aggregates
    /// after it is closed and opened again.
    @Test func reopenGivesTheSameAnswers() throws {
        let seed = Self.seed &+ 5
        let path = databasePath()
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        let items = KPHValues.items(seed: seed, count: 40, nan: false)
        var first: [String] = []
        do {
            let db = try Database(path: path, models: [KPHItem.self, KPHIdxBeside.self])
            try db.write { tx in for item in items { try tx.insert(item) } }
            first += try Self.checkQueries(db, seed: seed, "file")
            first += try Self.checkSorts(db, seed: seed, "file")
            first += try Self.checkAggregates(db, seed: seed, "file")
            db.close()
        }
        let again = try Database(path: path, models: [KPHItem.self, KPHIdxBeside.self])
        defer { again.close() }
        #expect(try again.objects(KPHItem.self).fetch() == items, "seed \(seed)")
        var second: [String] = []
        second += try Self.checkQueries(again, seed: seed, "reopened")
        second += try Self.checkSorts(again, seed: seed, "reopened")
        second += try Self.checkAggregates(again, seed: seed, "reopened")
        #expect(first == second, "seed \(seed)")
        for keyPath in [\KPHItem.shape as PartialKeyPath<KPHItem>, \KPHItem.frame.shape, \KPHItem.maybe, \KPHItem.frame] {
            #expect(fieldPath(of: keyPath) != nil, "\(keyPath)")
        }
    }
}
