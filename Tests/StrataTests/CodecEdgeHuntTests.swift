import Foundation
import Testing

@testable import Strata

// MARK: Models

struct CEZeroes: Model, Equatable {
    static let indexes: [PartialKeyPath<CEZeroes> & Sendable] = [\.d, \.date, \.f]
    var id: Int
    var d: Double
    var date: Date
    var f: Float
    var plain: Double
}

/// A tagged identifier whose own order is the reverse of its raw value's.
struct CEReversedID: Codable, Hashable, Sendable, Comparable {
    var raw: Int
    init(_ raw: Int) { self.raw = raw }
    init(from decoder: any Decoder) throws { raw = try decoder.singleValueContainer().decode(Int.self) }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(raw)
    }
    static func < (a: Self, b: Self) -> Bool { a.raw > b.raw }
}

struct CETagged: Model, Equatable {
    static let indexes: [PartialKeyPath<CETagged> & Sendable] = [\.other]
    var id: CEReversedID
    var other: CEReversedID
}

enum CEPriority: Int, Codable, Sendable, Comparable, CaseIterable {
    case urgent = 9, normal = 1, low = 5
    static func < (a: Self, b: Self) -> Bool {
        let order: [CEPriority] = [.low, .normal, .urgent]
        return order.firstIndex(of: a)! < order.firstIndex(of: b)!
    }
}

struct CEEnumKeyed: Model, Equatable {
    static let indexes: [PartialKeyPath<CEEnumKeyed> & Sendable] = [\.p]
    var id: CEPriority
    var p: CEPriority
}

struct CEAddress: Codable, Sendable, Equatable { var city: String }

struct CEDotted: Model, Equatable {
    static let indexes: [PartialKeyPath<CEDotted> & Sendable] = [\.dotted]
    enum CodingKeys: String, CodingKey {
        case id, address
        case dotted = "address.city"
    }
    var id: Int
    var address: CEAddress
    var dotted: String
}

struct CEInt128: Model { var id: Int; var big: Int128 }
struct CEInt128Key: Model { var id: Int128; var x: Int }
struct CEURLKey: Model { var id: URL; var x: Int }
struct CEDecimalKey: Model { var id: Decimal; var x: Int }
struct CEFloatKey: Model { var id: Float; var x: Int }
struct CEIntDict: Model, Equatable { var id: Int; var byInt: [Int: String]; var byUUID: [UUID: String]; var byEnum: [CEPriority: Int] }

/// The ids `predicate` selects from `objects` (in key order), as Foundation evaluates it.
func ceWant<M: Model>(_ objects: [M], _ predicate: Predicate<M>) throws -> [M.ID] where M.ID: Comparable {
    try objects.filter { try predicate.evaluate($0) }.map(\.id).sorted()
}

/// Checks every predicate against `Predicate.evaluate` over `objects`, on `db`.
func ceCheck<M: Model>(_ db: Database, _ objects: [M], _ predicates: [(String, Predicate<M>)], sourceLocation: SourceLocation = #_sourceLocation) throws
where M.ID: Comparable {
    for (text, predicate) in predicates {
        let results = db.objects(M.self).filter(predicate)
        // Unsorted results come in key order, the key encoding's (an enum key's raw value's),
        // which need not be the key type's own `<`: compare as sets.
        let got = try results.fetch().map(\.id).sorted()
        let want = try ceWant(objects, predicate)
        #expect(got == want, "\(M.self) \(text): got \(got) want \(want); \(results.explain())", sourceLocation: sourceLocation)
        #expect(try results.fetchCount() == want.count, "\(M.self) count \(text)", sourceLocation: sourceLocation)
    }
}

/// `objects` sorted by `descriptor`, ties in key order: the documented meaning of a sort.
func ceSorted<M: Model>(_ objects: [M], _ descriptor: SortDescriptor<M>) -> [M.ID] where M.ID: Comparable {
    objects.sorted { a, b in
        switch descriptor.compare(a, b) {
        case .orderedAscending: return true
        case .orderedDescending: return false
        case .orderedSame: return a.id < b.id
        }
    }.map(\.id)
}

func ceUnsupported(_ error: any Error) -> String? {
    guard case StrataError.unsupportedType = error else { return nil }
    return "\(error)"
}

struct CodecEdgeHuntTests {
    /// -0.0 and 0.0 (and dates at ±0) are equal: sorts and index walks keep their ties in key order.
    @Test func signedZerosTieInKeyOrder() throws {
        let db = try Database.inMemory(models: [CEZeroes.self])
        let objects = (0..<12).map { i -> CEZeroes in
            let z: Double = i % 2 == 0 ? -0.0 : 0.0
            return CEZeroes(id: 12 - i, d: z, date: Date(timeIntervalSinceReferenceDate: z), f: Float(z), plain: z)
        }
        try db.write { tx in try tx.insert(contentsOf: objects) }
        for order in [SortOrder.forward, .reverse] {
            for d in [
                SortDescriptor(\CEZeroes.d, order: order), SortDescriptor(\CEZeroes.date, order: order), SortDescriptor(\CEZeroes.f, order: order),
                SortDescriptor(\CEZeroes.plain, order: order),
            ] {
                for n in [3, 100] {
                    let results = db.objects(CEZeroes.self).sorted(by: d).prefix(n)
                    #expect(try results.fetch().map(\.id) == Array(ceSorted(objects, d).prefix(n)), "\(d) prefix \(n): \(results.explain())")
                }
            }
        }
        let zero = 0.0, negativeZero = -0.0
        try ceCheck(
            db, objects,
            [
                ("d == 0", #Predicate { $0.d == zero }), ("d == -0", #Predicate { $0.d == negativeZero }), ("d < 0", #Predicate { $0.d < zero }),
                ("d >= -0", #Predicate { $0.d >= negativeZero }), ("in [-0]", #Predicate { [negativeZero].contains($0.d) }),
            ])
    }

    /// Enum keys and fields whose `<` is not their raw value's order answer as `<` says; a
    /// wrapper key is refused saying which key types work.
    @Test func customOrderEnumKeysAnswerAsEvaluate() throws {
        let db = try Database.inMemory(models: [CEEnumKeyed.self])
        let objects = CEPriority.allCases.map { CEEnumKeyed(id: $0, p: $0) }.sorted { $0.id < $1.id }
        try db.write { tx in try tx.insert(contentsOf: objects) }
        for c in CEPriority.allCases {
            try ceCheck(
                db, objects,
                [
                    ("id < \(c)", #Predicate { $0.id < c }), ("id >= \(c)", #Predicate { $0.id >= c }), ("p < \(c)", #Predicate { $0.p < c }),
                    ("p > \(c)", #Predicate { $0.p > c }), ("p == \(c)", #Predicate { $0.p == c }),
                ])
        }
        for d in [SortDescriptor(\CEEnumKeyed.id), SortDescriptor(\CEEnumKeyed.p), SortDescriptor(\CEEnumKeyed.p, order: .reverse)] {
            #expect(try db.objects(CEEnumKeyed.self).sorted(by: d).prefix(2).fetch().map(\.id) == Array(ceSorted(objects, d).prefix(2)), "\(d)")
        }
        #expect(throws: (any Error).self) { _ = try Database.inMemory(models: [CETagged.self]) }
        do { _ = try Database.inMemory(models: [CETagged.self]) } catch {
            #expect(ceUnsupported(error)?.contains("cannot be a primary key") == true, "\(error)")
        }
    }

    /// Stored names with a dot, a space, none at all or other scripts work in queries, sorts and
    /// aggregates; an index on a dotted name is refused saying why.
    @Test func unusualStoredNamesQueryAsEvaluate() throws {
        do {
            let db = try Database.inMemory(models: [CEDotted2.self])
            let objects = (1...4).map { CEDotted2(id: $0, address: CEAddress(city: "c\($0)"), dotted: "d\(5 - $0)") }
            try db.write { tx in try tx.insert(contentsOf: objects) }
            #expect(try db.objects(CEDotted2.self).fetch() == objects)
            let c = "d2", a = "c2"
            try ceCheck(
                db, objects,
                [
                    ("dotted", #Predicate { $0.dotted == c }), ("city", #Predicate { $0.address.city == a }), ("dotted >", #Predicate { $0.dotted > c }),
                ])
            for d in [SortDescriptor(\CEDotted2.dotted), SortDescriptor(\CEDotted2.address.city)] {
                #expect(try db.objects(CEDotted2.self).sorted(by: d).fetch().map(\.id) == ceSorted(objects, d))
            }
            #expect(db.objects(CEDotted2.self).max(of: \.dotted) == "d4")
            #expect(db.objects(CEDotted2.self).max(of: \.address.city) == "c4")
        }
        do {
            _ = try Database.inMemory(models: [CEDotted.self])
            Issue.record("an index on a stored name with a dot opened")
        } catch {
            #expect(ceUnsupported(error)?.contains("containing '.'") == true, "\(error)")
        }
        do {
            let db = try Database.inMemory(models: [CEEmptyKeys.self])
            let objects = (1...4).map { CEEmptyKeys(id: $0, empty: 10 - $0, inner: CEInner(blank: $0 * 2, x: 100 - $0), space: "s\($0)") }
            try db.write { tx in try tx.insert(contentsOf: objects) }
            #expect(try db.objects(CEEmptyKeys.self).fetch() == objects)
            let e = 8, b = 4, x = 98, sp = "s2"
            try ceCheck(
                db, objects,
                [
                    ("empty", #Predicate { $0.empty < e }), ("inner.blank", #Predicate { $0.inner.blank == b }), ("inner.x", #Predicate { $0.inner.x >= x }),
                    ("space", #Predicate { $0.space == sp }),
                ])
            for d in [SortDescriptor(\CEEmptyKeys.empty), SortDescriptor(\CEEmptyKeys.inner.blank), SortDescriptor(\CEEmptyKeys.inner.x, order: .reverse)] {
                #expect(try db.objects(CEEmptyKeys.self).sorted(by: d).fetch().map(\.id) == ceSorted(objects, d))
            }
            #expect(db.objects(CEEmptyKeys.self).min(of: \.empty) == 6)
        }
        do {
            let db = try Database.inMemory(models: [CESpaceKeyIndexed.self])
            let objects = (1...4).map { CESpaceKeyIndexed(id: $0, space: 5 - $0, uni: "u\($0)") }
            try db.write { tx in try tx.insert(contentsOf: objects) }
            let a = 3, u = "u2"
            try ceCheck(db, objects, [("space", #Predicate { $0.space < a }), ("uni", #Predicate { $0.uni == u })])
        }
    }

    /// Comparisons between two fields of an object: -0.0 == 0.0, NaN equal to nothing, strings
    /// and decimals compared by value, not by stored bytes.
    @Test func fieldToFieldComparisonsAnswerAsEvaluate() throws {
        let db = try Database.inMemory(models: [CEPair.self])
        let d0 = Date(timeIntervalSinceReferenceDate: 0)
        let objects = [
            CEPair(
                id: 1, a: -0.0, b: 0.0, s: "\u{E9}", t: "e\u{301}", x: Decimal(string: "1.00")!, y: Decimal(1), da: d0,
                db: Date(timeIntervalSinceReferenceDate: -0.0)),
            CEPair(
                id: 2, a: .nan, b: .nan, s: "a", t: "a", x: Decimal(string: "100")!, y: Decimal(string: "1e2")!, da: Date(timeIntervalSinceReferenceDate: .nan),
                db: Date(timeIntervalSinceReferenceDate: .nan)),
            CEPair(id: 3, a: 1, b: 2, s: "A\u{30A}", t: "\u{212B}", x: Decimal(string: "-0")!, y: Decimal(0), da: d0, db: d0),
        ]
        try db.write { tx in try tx.insert(contentsOf: objects) }
        try ceCheck(
            db, objects,
            [
                ("a==b", #Predicate { $0.a == $0.b }), ("a!=b", #Predicate { $0.a != $0.b }), ("a<b", #Predicate { $0.a < $0.b }),
                ("a>=b", #Predicate { $0.a >= $0.b }),
                ("s==t", #Predicate { $0.s == $0.t }), ("s!=t", #Predicate { $0.s != $0.t }), ("s<t", #Predicate { $0.s < $0.t }),
                ("x==y", #Predicate { $0.x == $0.y }), ("x<y", #Predicate { $0.x < $0.y }),
                ("da==db", #Predicate { $0.da == $0.db }), ("da<=db", #Predicate { $0.da <= $0.db }),
            ])
    }

    /// A struct that codes itself as an unkeyed list of numbers is stored as that list, and key
    /// paths into it still query and sort as evaluated.
    @Test func unkeyedStructFieldsQueryAsEvaluate() throws {
        let db = try Database.inMemory(models: [CEShape.self])
        let objects = (1...4).map { CEShape(id: $0, p: CEPoint(x: Double($0), y: Double(10 - $0)), q: $0 % 2 == 0 ? nil : CEPoint(x: 5, y: Double($0))) }
        try db.write { tx in try tx.insert(contentsOf: objects) }
        #expect(try db.objects(CEShape.self).fetch() == objects)
        let c = 2.0
        try ceCheck(db, objects, [("p.x", #Predicate { $0.p.x > c }), ("p.y", #Predicate { $0.p.y > 7 }), ("q.y", #Predicate { $0.q?.y == 3 })])
        for d in [SortDescriptor(\CEShape.p.y), SortDescriptor(\CEShape.p.x, order: .reverse)] {
            #expect(try db.objects(CEShape.self).sorted(by: d).fetch().map(\.id) == ceSorted(objects, d))
        }
    }

    /// Types the documentation lists as unsupported are refused when the database opens, naming
    /// the field and saying what to do.
    @Test func documentedUnsupportedTypesAreRefusedClearly() throws {
        let cases: [(String, () throws -> Void, String)] = [
            ("Int128 field", { _ = try Database.inMemory(models: [CEInt128.self]) }, "Int128"),
            ("Int128 key", { _ = try Database.inMemory(models: [CEInt128Key.self]) }, "Int128"),
            ("URL key", { _ = try Database.inMemory(models: [CEURLKey.self]) }, "cannot be a primary key"),
            ("Decimal key", { _ = try Database.inMemory(models: [CEDecimalKey.self]) }, "cannot be a primary key"),
            ("Float key", { _ = try Database.inMemory(models: [CEFloatKey.self]) }, "cannot be a primary key"),
            ("[Int: String]", { _ = try Database.inMemory(models: [CEIntDict.self]) }, "String keys"),
        ]
        for (label, open, phrase) in cases {
            do {
                try open()
                Issue.record("\(label): opened")
            } catch {
                #expect(ceUnsupported(error)?.contains(phrase) == true, "\(label): \(error)")
            }
        }
    }

    /// Hand-written coders: a struct flattened into its parent's container, numbers stored as
    /// strings, dates as seconds since 1970 and defaults left out all read back and query as
    /// evaluated; a discriminated union whose later case writes keys the probe never saw fails
    /// that insert with typeMismatch, as documented, and keeps the rest.
    @Test func handWrittenCoderShapes() throws {
        do {
            let db = try Database.inMemory(models: [CEFlat.self])
            let objects = (1...4).map { CEFlat(id: $0, name: "n\($0)", place: CEPlace(city: "c\(5 - $0)", zip: $0 * 10)) }
            try db.write { tx in try tx.insert(contentsOf: objects) }
            #expect(try db.objects(CEFlat.self).fetch() == objects)
            let c = "c2", z = 20
            try ceCheck(db, objects, [("city", #Predicate { $0.place.city == c }), ("zip>", #Predicate { $0.place.zip > z })])
            #expect(try db.objects(CEFlat.self).sorted(by: SortDescriptor(\.place.city)).fetch().map(\.id) == [4, 3, 2, 1])
            #expect(db.objects(CEFlat.self).max(of: \.place.zip) == 40)
        }
        do {
            let db = try Database.inMemory(models: [CEStringly.self])
            let objects = (1...5).map {
                CEStringly(
                    id: $0, n: [5, 40, 100, 9, -3][$0 - 1], when: Date(timeIntervalSince1970: Double([3, 1, 2, 5, 4][$0 - 1])), count: [0, 2, 0, 7, 1][$0 - 1])
            }
            try db.write { tx in try tx.insert(contentsOf: objects) }
            #expect(try db.objects(CEStringly.self).fetch() == objects)
            let n = 10, d = Date(timeIntervalSince1970: 2.5), k = 0
            try ceCheck(
                db, objects,
                [
                    ("n>10", #Predicate { $0.n > n }), ("when<", #Predicate { $0.when < d }), ("count==0", #Predicate { $0.count == k }),
                    ("count<2", #Predicate { $0.count < 2 }),
                ])
            for sort in [SortDescriptor(\CEStringly.n), SortDescriptor(\CEStringly.when), SortDescriptor(\CEStringly.count)] {
                #expect(try db.objects(CEStringly.self).sorted(by: sort).fetch().map(\.id) == ceSorted(objects, sort))
            }
            #expect(db.objects(CEStringly.self).max(of: \.n) == 100)
            #expect(db.objects(CEStringly.self).min(of: \.count) == 0)
            #expect(db.objects(CEStringly.self).sum(of: \.count) == 10)
        }
        do {
            let db = try Database.inMemory(models: [CEShapeRecord.self])
            let circle = CEShapeRecord(id: 1, kind: .circle, radius: 2)
            try db.write { tx in try tx.insert(circle) }
            #expect(throws: (any Error).self) { try db.write { tx in try tx.insert(CEShapeRecord(id: 2, kind: .rect, w: 3, h: 4)) } }
            #expect(try db.objects(CEShapeRecord.self).fetch() == [circle])
        }
    }

    /// NaN in an indexed and an unindexed Double: equality, IN lists, negations and ranges as
    /// evaluated; sorts put NaN above every number (Queries.md), ties in key order.
    @Test func nanInIndexedAndPlainDoubles() throws {
        let db = try Database.inMemory(models: [CENaN.self])
        let values: [Double] = [.nan, 1, -.infinity, .nan, 0, -0.0, .infinity, -Double.nan, 2]
        let objects = values.enumerated().map { CENaN(id: $0.offset + 1, d: $0.element, plain: $0.element) }
        try db.write { tx in try tx.insert(contentsOf: objects) }
        let notANumber = Double(bitPattern: 0x7FF8_0000_0000_0001), one = 1.0, lo = -Double.infinity
        try ceCheck(
            db, objects,
            [
                ("d == notANumber", #Predicate { $0.d == notANumber }), ("in [notANumber, 1]", #Predicate { [notANumber, one].contains($0.d) }),
                ("d != notANumber", #Predicate { $0.d != notANumber }),
                ("!(d == notANumber)", #Predicate { !($0.d == notANumber) }), ("d >= -inf", #Predicate { $0.d >= lo }),
                ("!(d < 1)", #Predicate { !($0.d < one) }),
                ("d != 1", #Predicate { $0.d != one }), ("plain == notANumber", #Predicate { $0.plain == notANumber }),
                ("in plain", #Predicate { [notANumber, one].contains($0.plain) }),
                ("!(plain < 1)", #Predicate { !($0.plain < one) }), ("d == d", #Predicate { $0.d == $0.d }), ("d != d", #Predicate { $0.d != $0.d }),
            ])
        let ascending = [3, 5, 6, 2, 9, 7, 1, 4, 8]
        let descending = [1, 4, 8, 7, 9, 2, 5, 6, 3]
        for keyPath in [\CENaN.d, \CENaN.plain] {
            #expect(try db.objects(CENaN.self).sorted(by: SortDescriptor(keyPath)).fetch().map(\.id) == ascending)
            #expect(try db.objects(CENaN.self).sorted(by: SortDescriptor(keyPath, order: .reverse)).fetch().map(\.id) == descending)
            #expect(try db.objects(CENaN.self).sorted(by: SortDescriptor(keyPath, order: .reverse)).prefix(3).fetch().map(\.id) == [1, 4, 8])
        }
        #expect(db.objects(CENaN.self).max(of: \.d)?.isNaN == true)
        #expect(db.objects(CENaN.self).min(of: \.d) == -.infinity)
    }

    /// Optional structs whose fields are all nil, arrays of optional structs, dictionaries of
    /// dictionaries with keys "", ".", "a.b" and NUL, and double optionals inside array
    /// elements read back as written; a model of nothing but its key works.
    @Test func hollowValuesReadBack() throws {
        let db = try Database.inMemory(models: [CEHollow.self, CEOnlyID.self])
        let objects = [
            CEHollow(id: 1, allOptional: nil, allOptionals: [nil, CEAllOptional(a: nil, b: nil)], dicts: [:], doubleInArray: []),
            CEHollow(
                id: 2, allOptional: CEAllOptional(a: nil, b: nil), allOptionals: [],
                dicts: ["": [:], "a.b": ["": nil, ".": 1, "1": 2], "\u{0}": ["x": nil]],
                doubleInArray: [CEDoubleBox(v: nil), CEDoubleBox(v: .some(nil)), CEDoubleBox(v: 3)]),
            CEHollow(
                id: 3, allOptional: CEAllOptional(a: 1, b: nil), allOptionals: [CEAllOptional(a: nil, b: "x")], dicts: ["k": ["v": 5]],
                doubleInArray: [CEDoubleBox(v: .some(nil))]),
        ]
        try db.write { tx in
            try tx.insert(contentsOf: objects)
            try tx.insert(CEOnlyID(id: ""))
            try tx.insert(CEOnlyID(id: "\u{0}"))
        }
        #expect(try db.objects(CEHollow.self).fetch() == objects)
        #expect(try db.objects(CEOnlyID.self).fetch() == [CEOnlyID(id: ""), CEOnlyID(id: "\u{0}")])
        try ceCheck(
            db, objects,
            [
                ("allOptional == nil", #Predicate { $0.allOptional == nil }), ("allOptional?.a == nil", #Predicate { $0.allOptional?.a == nil }),
                ("dicts[a.b] != nil", #Predicate { $0.dicts["a.b"] != nil }), ("allOptionals.count", #Predicate { $0.allOptionals.count == 2 }),
            ])
    }
}

extension CodecEdgeHuntTests {
    static let diffSeed: UInt64 = 0xC0DEC_ED6E

    func runRare<T: CEIndexing>(_: T.Type) throws {
        typealias M = CERare<T>
        var r = CERandom(rng: SeededRandom(seed: Self.diffSeed))
        var objects: [M] = (1...40).map { r.object($0) }
        let path = databasePath("rare")
        let options = StoreOptions(durability: .noSync)
        func check(_ db: Database, _ stage: String) throws {
            let stored = try db.objects(M.self).fetch()
            #expect(
                stored.count == objects.count && zip(stored, objects).allSatisfy { ceSame($0, $1) }, "seed \(Self.diffSeed) \(M.modelName) \(stage): round trip"
            )
            for _ in 0..<3 {
                for (text, predicate) in cePredicates(&r) as [(String, Predicate<M>)] {
                    let want = try objects.filter { try predicate.evaluate($0) }.map(\.id)
                    let results = db.objects(M.self).filter(predicate)
                    let got = try results.fetch().map(\.id)
                    #expect(got == want, "seed \(Self.diffSeed) \(M.modelName) \(stage): \(text): got \(got) want \(want); \(results.explain())")
                    #expect(try results.fetchCount() == want.count, "seed \(Self.diffSeed) \(M.modelName) \(stage): count \(text)")
                }
            }
            try checkAggregates(db.objects(M.self), objects, stage)
            for c in [Int16.min, 0, 255] {
                try checkAggregates(db.objects(M.self).filter(#Predicate { $0.i16 == c }), objects.filter { $0.i16 == c }, "\(stage) i16 == \(c)")
            }
            for (text, sort) in ceSorts() as [(String, SortDescriptor<M>)] {
                let want = objects.sorted { a, b in
                    switch sort.compare(a, b) {
                    case .orderedAscending: return true
                    case .orderedDescending: return false
                    case .orderedSame: return a.id < b.id
                    }
                }.map(\.id)
                for n in [5, 1000] {
                    let results = db.objects(M.self).sorted(by: sort).prefix(n)
                    let got = try results.fetch().map(\.id)
                    #expect(
                        got == Array(want.prefix(n)),
                        "seed \(Self.diffSeed) \(M.modelName) \(stage): sort \(text) \(sort.order) prefix \(n): got \(got); \(results.explain())")
                }
            }
        }
        do {
            let db = try Database(path: path, models: [M.self], options: options)
            try db.write { tx in try tx.insert(contentsOf: objects) }
            try check(db, "inserted")
            try db.write { tx in
                for i in objects.indices where r.rng.below(3) == 0 {
                    let fresh: M = r.object(objects[i].id)
                    objects[i] = fresh
                    try tx.upsert(fresh)
                }
                for i in objects.indices.reversed() where r.rng.below(4) == 0 {
                    try tx.delete(M.self, key: objects[i].id)
                    objects.remove(at: i)
                }
                // The transaction's own view, before the commit.
                for (text, predicate) in cePredicates(&r) as [(String, Predicate<M>)] {
                    let want = try objects.filter { try predicate.evaluate($0) }.map(\.id)
                    let got = try tx.objects(M.self, where: predicate).map(\.id)
                    #expect(got == want, "seed \(Self.diffSeed) \(M.modelName) in the write: \(text): got \(got) want \(want)")
                    #expect(try tx.count(M.self, where: predicate) == want.count, "seed \(Self.diffSeed) \(M.modelName) in the write: count \(text)")
                }
                for (text, sort) in ceSorts() as [(String, SortDescriptor<M>)] {
                    let want = objects.sorted { a, b in
                        switch sort.compare(a, b) {
                        case .orderedAscending: return true
                        case .orderedDescending: return false
                        case .orderedSame: return a.id < b.id
                        }
                    }.map(\.id)
                    let got = try tx.objects(M.self, sortedBy: [sort]).map(\.id)
                    #expect(got == want, "seed \(Self.diffSeed) \(M.modelName) in the write: sort \(text) \(sort.order): got \(got)")
                }
            }
            try check(db, "updated")
        }
        try check(try Database(path: path, models: [M.self], options: options), "reopened")
    }

    func checkAggregates<T>(_ results: Results<CERare<T>>, _ objects: [CERare<T>], _ stage: String) throws {
        let where_ = "seed \(Self.diffSeed) \(CERare<T>.modelName) \(stage)"
        #expect(results.max(of: \.u) == objects.map(\.u).max(), "\(where_): max u")
        #expect(results.min(of: \.u) == objects.map(\.u).min(), "\(where_): min u")
        #expect(results.min(of: \.i16) == objects.map(\.i16).min(), "\(where_): min i16")
        #expect(results.max(of: \.i32) == objects.map(\.i32).max(), "\(where_): max i32")
        #expect(results.min(of: \.i64) == objects.compactMap(\.i64).min(), "\(where_): min i64")
        #expect(results.max(of: \.i64) == objects.compactMap(\.i64).max(), "\(where_): max i64")
        #expect(results.min(of: \.ouuid) == objects.compactMap(\.ouuid).min(), "\(where_): min ouuid")
        #expect(results.max(of: \.text) == objects.compactMap(\.text).max(), "\(where_): max text")
        #expect(results.min(of: \.u8) == objects.compactMap(\.u8).min(), "\(where_): min u8")
        #expect(results.max(of: \.prio) == objects.compactMap(\.prio).max(), "\(where_): max prio")
        let u32s = objects.map { Double($0.u32) }
        #expect(results.average(of: \.u32) == (u32s.isEmpty ? nil : u32s.reduce(0, +) / Double(u32s.count)), "\(where_): average u32")
        let floats = objects.compactMap(\.f)
        let numbers = floats.filter { !$0.isNaN }
        let maxF = results.max(of: \.f), minF = results.min(of: \.f)
        if floats.isEmpty {
            #expect(maxF == nil && minF == nil, "\(where_): max/min f of none")
        } else {
            #expect(numbers.count < floats.count ? maxF?.isNaN == true : maxF == numbers.max(), "\(where_): max f \(String(describing: maxF))")
            #expect(numbers.isEmpty ? minF?.isNaN == true : minF == numbers.min(), "\(where_): min f \(String(describing: minF))")
        }
        var sum16: UInt16? = 0
        for o in objects {
            sum16 = sum16.flatMap { s in
                let (v, o) = s.addingReportingOverflow(o.u16); return o ? nil : v
            }
        }
        let got16 = try? results.fetchSum(of: \.u16)
        #expect(got16 == sum16, "\(where_): sum u16 \(String(describing: got16)) want \(String(describing: sum16))")
        let sum32 = objects.reduce(Int64(0)) { $0 + Int64($1.i32) }
        let got32 = try? results.fetchSum(of: \.i32)
        #expect(got32.map(Int64.init) == (Int64(Int32.min)...Int64(Int32.max) ~= sum32 ? sum32 : nil), "\(where_): sum i32")
    }

    @Test func rareFieldTypesAnswerAsEvaluateIndexed() throws { try runRare(CEIndexed.self) }
    @Test func rareFieldTypesAnswerAsEvaluateScanned() throws { try runRare(CEScanned.self) }
}

// MARK: More models

struct CEDotted2: Model, Equatable {
    enum CodingKeys: String, CodingKey {
        case id, address
        case dotted = "address.city"
    }
    var id: Int
    var address: CEAddress
    var dotted: String
}

struct CEInner: Codable, Sendable, Equatable {
    enum CodingKeys: String, CodingKey { case blank = "", x }
    var blank: Int
    var x: Int
}

struct CEEmptyKeys: Model, Equatable {
    enum CodingKeys: String, CodingKey {
        case id
        case empty = ""
        case inner
        case space = " "
    }
    var id: Int
    var empty: Int
    var inner: CEInner
    var space: String
}

struct CESpaceKeyIndexed: Model, Equatable {
    static let indexes: [PartialKeyPath<CESpaceKeyIndexed> & Sendable] = [\.space, \.uni]
    enum CodingKeys: String, CodingKey { case id, space = " ", uni = "ключ🔑" }
    var id: Int
    var space: Int
    var uni: String
}

struct CEPair: Model, Equatable {
    var id: Int
    var a: Double
    var b: Double
    var s: String
    var t: String
    var x: Decimal
    var y: Decimal
    var da: Date
    var db: Date
}

struct CEPoint: Codable, Sendable, Equatable {
    var x: Double
    var y: Double
    init(x: Double, y: Double) {
        self.x = x
        self.y = y
    }
    init(from decoder: any Decoder) throws {
        var c = try decoder.unkeyedContainer()
        x = try c.decode(Double.self)
        y = try c.decode(Double.self)
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.unkeyedContainer()
        try c.encode(x)
        try c.encode(y)
    }
}

struct CEShape: Model, Equatable {
    var id: Int
    var p: CEPoint
    var q: CEPoint?
}

/// A discriminated union written by hand: which keys follow depends on `kind`.
struct CEShapeRecord: Model, Equatable {
    enum Kind: String, Codable, Sendable, CaseIterable { case circle, rect }
    enum CodingKeys: String, CodingKey { case id, kind, radius, w, h }
    var id: Int
    var kind: Kind
    var radius: Double
    var w: Double
    var h: Double
    init(id: Int, kind: Kind, radius: Double = 0, w: Double = 0, h: Double = 0) {
        self.id = id
        self.kind = kind
        self.radius = radius
        self.w = w
        self.h = h
    }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        kind = try c.decode(Kind.self, forKey: .kind)
        switch kind {
        case .circle:
            radius = try c.decode(Double.self, forKey: .radius)
            w = 0
            h = 0
        case .rect:
            radius = 0
            w = try c.decode(Double.self, forKey: .w)
            h = try c.decode(Double.self, forKey: .h)
        }
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(kind, forKey: .kind)
        switch kind {
        case .circle: try c.encode(radius, forKey: .radius)
        case .rect:
            try c.encode(w, forKey: .w)
            try c.encode(h, forKey: .h)
        }
    }
}

struct CEPlace: Codable, Sendable, Equatable {
    var city: String
    var zip: Int
}

/// A struct flattened into its parent's container (`Place(from: decoder)`).
struct CEFlat: Model, Equatable {
    enum CodingKeys: String, CodingKey { case id, name }
    var id: Int
    var name: String
    var place: CEPlace
    init(id: Int, name: String, place: CEPlace) {
        self.id = id
        self.name = name
        self.place = place
    }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        name = try c.decode(String.self, forKey: .name)
        place = try CEPlace(from: decoder)
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(name, forKey: .name)
        try place.encode(to: encoder)
    }
}

/// Numbers stored as strings, dates as seconds since 1970, defaults left out.
struct CEStringly: Model, Equatable {
    enum CodingKeys: String, CodingKey { case id, n, when, count }
    var id: Int
    var n: Int
    var when: Date
    var count: Int
    init(id: Int, n: Int, when: Date, count: Int) {
        self.id = id
        self.n = n
        self.when = when
        self.count = count
    }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        n = Int(try c.decode(String.self, forKey: .n)) ?? -1
        when = Date(timeIntervalSince1970: try c.decode(Double.self, forKey: .when))
        count = try c.decodeIfPresent(Int.self, forKey: .count) ?? 0
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(String(n), forKey: .n)
        try c.encode(when.timeIntervalSince1970, forKey: .when)
        if count != 0 { try c.encode(count, forKey: .count) }
    }
}

struct CENaN: Model, Equatable {
    static let indexes: [PartialKeyPath<CENaN> & Sendable] = [\.d]
    var id: Int
    var d: Double
    var plain: Double
}

struct CEAllOptional: Codable, Sendable, Equatable {
    var a: Int?
    var b: String?
}

struct CEDoubleBox: Codable, Sendable, Equatable { var v: Int?? }

struct CEHollow: Model, Equatable {
    var id: Int
    var allOptional: CEAllOptional?
    var allOptionals: [CEAllOptional?]
    var dicts: [String: [String: Int?]]
    var doubleInArray: [CEDoubleBox]
}

struct CEOnlyID: Model, Equatable { var id: String }

// MARK: Models of the differential test

// Models of CodecEdgeHuntTests' differential test: the field types the other differential tests
// leave out (16- and 32-bit integers, UInt, URL, Data, [UInt8], arrays of floats, dates, UUIDs and
// decimals, optional floats and UUIDs), indexed and not.

protocol CEIndexing: Sendable { static var indexed: Bool { get } }
enum CEIndexed: CEIndexing { static var indexed: Bool { true } }
enum CEScanned: CEIndexing { static var indexed: Bool { false } }

struct CERare<T: CEIndexing>: Model, Equatable {
    static var modelName: String { T.indexed ? "CERareIndexed" : "CERareScanned" }
    static var indexes: [PartialKeyPath<CERare> & Sendable] {
        guard T.indexed else { return [] }
        return [
            \.i16, \.u16, \.i32, \.u32, \.u, \.i64, \.url, \.ourl, \.data, \.odata, \.bytes, \.floats, \.dates, \.uuids, \.f, \.ouuid, \.text, \.prio, \.u8,
        ]
    }
    var id: Int
    var i16: Int16
    var u16: UInt16
    var i32: Int32
    var u32: UInt32
    var u: UInt
    var i64: Int64?
    var url: URL
    var ourl: URL?
    var data: Data
    var odata: Data?
    var bytes: [UInt8]
    var floats: [Float]
    var dates: [Date]
    var uuids: [UUID]
    var decs: [Decimal]
    var f: Float?
    var ouuid: UUID?
    var text: String?
    var prio: CEPriority?
    var u8: UInt8?
}

enum CEPools {
    static let i16: [Int16] = [.min, -1, 0, 1, 255, 256, .max]
    static let u16: [UInt16] = [0, 1, 255, 256, .max]
    static let i32: [Int32] = [.min, -1, 0, 1, 65536, .max]
    static let u32: [UInt32] = [0, 1, UInt32(Int32.max), UInt32(Int32.max) + 1, .max]
    static let u: [UInt] = [0, 1, UInt(Int.max), UInt(Int.max) + 1, .max]
    static let i64: [Int64?] = [nil, .min, -1, 0, .max]
    static let urls: [URL] = ["https://a.com", "https://a.com/", "https://A.com", "file:///tmp/x", "a", "https://a.com/%20x", "https://a.com/?q=1#f"].map {
        URL(string: $0)!
    }
    static let datas: [Data] = [Data(), Data([0]), Data([0, 0]), Data([255]), Data([1, 2, 3]), Data(repeating: 7, count: 300)]
    static let bytes: [[UInt8]] = [[], [0], [0, 0], [255], [1, 2, 3], [3, 2, 1]]
    static let floats: [Float] = [
        -.infinity, -.greatestFiniteMagnitude, -1, -.leastNonzeroMagnitude, -0.0, 0, .leastNonzeroMagnitude, .leastNormalMagnitude, 1.5,
        .greatestFiniteMagnitude, .infinity, .nan,
    ]
    static let dates: [Date] = [
        .distantPast, Date(timeIntervalSinceReferenceDate: -0.001), Date(timeIntervalSinceReferenceDate: 0), Date(timeIntervalSinceReferenceDate: 1e-7),
        Date(timeIntervalSince1970: 0), .distantFuture,
    ]
    static let uuids: [UUID] = [
        UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)),
        UUID(uuid: (255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255)),
        UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1)),
        UUID(uuid: (1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)),
        UUID(uuid: (128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)),
        UUID(uuid: (127, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255)),
    ]
    static let decs: [Decimal] = [
        0, 1, -1, Decimal(string: "0.1")!, Decimal(string: "0.10000000000000000001")!, Decimal(string: "1e100")!, Decimal(string: "-1e-100")!,
        .greatestFiniteMagnitude, .leastNonzeroMagnitude,
    ]
    static let texts: [String?] = [nil, "", "\u{0}", "a", "\u{E9}", "e\u{301}", "A", "\u{10FFFF}"]
    static let prios: [CEPriority?] = [nil] + CEPriority.allCases
    static let u8s: [UInt8?] = [nil, 0, 1, 127, 128, 255]
}

struct CERandom {
    var rng: SeededRandom
    mutating func pick<E>(_ pool: [E]) -> E { pool[rng.below(pool.count)] }
    mutating func list<E>(_ pool: [E]) -> [E] { (0..<rng.below(4)).map { _ in pick(pool) } }
    mutating func maybe<E>(_ pool: [E]) -> E? { rng.below(4) == 0 ? nil : pick(pool) }

    mutating func object<T>(_ id: Int) -> CERare<T> {
        CERare<T>(
            id: id, i16: pick(CEPools.i16), u16: pick(CEPools.u16), i32: pick(CEPools.i32), u32: pick(CEPools.u32), u: pick(CEPools.u),
            i64: pick(CEPools.i64), url: pick(CEPools.urls), ourl: maybe(CEPools.urls), data: pick(CEPools.datas), odata: maybe(CEPools.datas),
            bytes: pick(CEPools.bytes), floats: list(CEPools.floats), dates: list(CEPools.dates), uuids: list(CEPools.uuids), decs: list(CEPools.decs),
            f: maybe(CEPools.floats), ouuid: maybe(CEPools.uuids), text: pick(CEPools.texts), prio: pick(CEPools.prios), u8: pick(CEPools.u8s))
    }
}

/// Objects equal field by field, NaN equal to NaN (a float NaN is not `==` itself).
func ceSame<T>(_ a: CERare<T>, _ b: CERare<T>) -> Bool {
    func floats(_ x: [Float], _ y: [Float]) -> Bool { x.count == y.count && zip(x, y).allSatisfy { $0.bitPattern == $1.bitPattern } }
    var a2 = a, b2 = b
    guard floats(a.floats, b.floats), a.f?.bitPattern == b.f?.bitPattern else { return false }
    a2.floats = []; b2.floats = []; a2.f = nil; b2.f = nil
    return a2 == b2
}

/// Predicates on every field of `CERare`, with constants drawn from the pools.
func cePredicates<T>(_ r: inout CERandom) -> [(String, Predicate<CERare<T>>)] {
    typealias M = CERare<T>
    let i16 = r.pick(CEPools.i16), u16 = r.pick(CEPools.u16), i32 = r.pick(CEPools.i32), u32 = r.pick(CEPools.u32), u = r.pick(CEPools.u)
    let i64 = r.pick(CEPools.i64), i64b = r.pick(CEPools.i64.compactMap { $0 })
    let url = r.pick(CEPools.urls), ourl: URL? = r.maybe(CEPools.urls), data = r.pick(CEPools.datas), odata: Data? = r.maybe(CEPools.datas)
    let byte = r.pick([UInt8(0), 1, 2, 3, 255]), bytes = r.pick(CEPools.bytes)
    let fl = r.pick(CEPools.floats), of: Float? = r.maybe(CEPools.floats), date = r.pick(CEPools.dates), uuid = r.pick(CEPools.uuids)
    let ouuid: UUID? = r.maybe(CEPools.uuids), dec = r.pick(CEPools.decs), text = r.pick(CEPools.texts), textb = r.pick(CEPools.texts.compactMap { $0 })
    let prio = r.pick(CEPools.prios), priob = r.pick(CEPriority.allCases), u8 = r.pick(CEPools.u8s), u8b = r.pick(CEPools.u8s.compactMap { $0 })
    let i16s = [r.pick(CEPools.i16), r.pick(CEPools.i16)], urls = [r.pick(CEPools.urls), r.pick(CEPools.urls)]
    let datas = [r.pick(CEPools.datas), r.pick(CEPools.datas)]
    let u32lo = min(u32, r.pick(CEPools.u32)), u32hi = max(u32, r.pick(CEPools.u32))
    let all: [(String, Predicate<M>)] = [
        ("i16 == \(i16)", #Predicate<M> { $0.i16 == i16 }), ("i16 < \(i16)", #Predicate<M> { $0.i16 < i16 }),
        ("i16 >= \(i16)", #Predicate<M> { $0.i16 >= i16 }), ("i16 in \(i16s)", #Predicate<M> { i16s.contains($0.i16) }),
        ("u16 > \(u16)", #Predicate<M> { $0.u16 > u16 }), ("u16 != \(u16)", #Predicate<M> { $0.u16 != u16 }),
        ("i32 <= \(i32)", #Predicate<M> { $0.i32 <= i32 }), ("i32 == \(i32)", #Predicate<M> { $0.i32 == i32 }),
        ("u32 in \(u32lo)...\(u32hi)", #Predicate<M> { $0.u32 >= u32lo && $0.u32 <= u32hi }), ("u32 < \(u32)", #Predicate<M> { $0.u32 < u32 }),
        ("u > \(u)", #Predicate<M> { $0.u > u }), ("u == \(u)", #Predicate<M> { $0.u == u }), ("u <= \(u)", #Predicate<M> { $0.u <= u }),
        ("i64 == \(String(describing: i64))", #Predicate<M> { $0.i64 == i64 }),
        ("i64 != nil && i64! < \(i64b)", #Predicate<M> { $0.i64 != nil && $0.i64! < i64b }),
        ("(i64 ?? 0) > \(i64b)", #Predicate<M> { ($0.i64 ?? 0) > i64b }),
        ("url == \(url)", #Predicate<M> { $0.url == url }), ("url != \(url)", #Predicate<M> { $0.url != url }),
        ("url in \(urls)", #Predicate<M> { urls.contains($0.url) }), ("ourl == \(String(describing: ourl))", #Predicate<M> { $0.ourl == ourl }),
        ("data == \(data)", #Predicate<M> { $0.data == data }), ("data in", #Predicate<M> { datas.contains($0.data) }),
        ("odata == \(String(describing: odata))", #Predicate<M> { $0.odata == odata }), ("odata == nil", #Predicate<M> { $0.odata == nil }),
        ("bytes contains \(byte)", #Predicate<M> { $0.bytes.contains(byte) }), ("bytes == \(bytes)", #Predicate<M> { $0.bytes == bytes }),
        ("bytes.isEmpty", #Predicate<M> { $0.bytes.isEmpty }),
        ("floats contains \(fl)", #Predicate<M> { $0.floats.contains(fl) }),
        ("floats any < \(fl)", #Predicate<M> { $0.floats.contains { $0 < fl } }),
        ("dates contains \(date)", #Predicate<M> { $0.dates.contains(date) }),
        ("uuids contains \(uuid)", #Predicate<M> { $0.uuids.contains(uuid) }),
        ("decs contains \(dec)", #Predicate<M> { $0.decs.contains(dec) }),
        ("f == \(String(describing: of))", #Predicate<M> { $0.f == of }), ("f != nil && f! < \(fl)", #Predicate<M> { $0.f != nil && $0.f! < fl }),
        ("f != nil && f! >= \(fl)", #Predicate<M> { $0.f != nil && $0.f! >= fl }), ("f != \(String(describing: of))", #Predicate<M> { $0.f != of }),
        ("ouuid == \(String(describing: ouuid))", #Predicate<M> { $0.ouuid == ouuid }),
        ("ouuid != nil && ouuid! < \(uuid)", #Predicate<M> { $0.ouuid != nil && $0.ouuid! < uuid }),
        ("ouuid != nil && ouuid! >= \(uuid)", #Predicate<M> { $0.ouuid != nil && $0.ouuid! >= uuid }),
        ("text == \(String(describing: text))", #Predicate<M> { $0.text == text }),
        ("text != nil && text! > \(textb)", #Predicate<M> { $0.text != nil && $0.text! > textb }),
        ("text starts \(textb)", #Predicate<M> { $0.text != nil && $0.text!.starts(with: textb) }),
        ("prio == \(String(describing: prio))", #Predicate<M> { $0.prio == prio }),
        ("prio != nil && prio! < \(priob)", #Predicate<M> { $0.prio != nil && $0.prio! < priob }),
        ("u8 == \(String(describing: u8))", #Predicate<M> { $0.u8 == u8 }), ("u8 != nil && u8! > \(u8b)", #Predicate<M> { $0.u8 != nil && $0.u8! > u8b }),
        ("i16 == \(i16) || u8 == \(String(describing: u8))", #Predicate<M> { $0.i16 == i16 || $0.u8 == u8 }),
        ("url == \(url) && u > \(u)", #Predicate<M> { $0.url == url && $0.u > u }),
        ("!(data == \(data))", #Predicate<M> { !($0.data == data) }),
    ]
    return all
}

func ceSorts<T>() -> [(String, SortDescriptor<CERare<T>>)] {
    typealias M = CERare<T>
    var out: [(String, SortDescriptor<M>)] = []
    for order in [SortOrder.forward, .reverse] {
        out += [
            ("i16", SortDescriptor(\M.i16, order: order)), ("u16", SortDescriptor(\M.u16, order: order)), ("i32", SortDescriptor(\M.i32, order: order)),
            ("u32", SortDescriptor(\M.u32, order: order)), ("u", SortDescriptor(\M.u, order: order)), ("i64", SortDescriptor(\M.i64, order: order)),
            ("ouuid", SortDescriptor(\M.ouuid, order: order)), ("text", SortDescriptor(\M.text, order: order)), ("prio", SortDescriptor(\M.prio, order: order)),
            ("u8", SortDescriptor(\M.u8, order: order)),
        ]
    }
    return out
}
