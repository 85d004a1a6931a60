import Testing
import Foundation
@testable import Strata

enum Status: String, Codable, Sendable, CaseIterable { case online, away, offline }
enum Level: Int, Codable, Sendable { case low = 5, high = 9 }

struct Address: Codable, Sendable, Equatable {
    var street: String
    var city: String
    var zip: Int?
}

struct Person: Model, Equatable {
    static let indexes: [PartialKeyPath<Person> & Sendable] = [\.name, \.status]
    var id: String
    var name: String
    var status: Status
    var level: Level
    var tags: [String]
    var tagSet: Set<Int>
    var scores: [String: Double]
    var address: Address?
    var bestFriend: Ref<Person>?
    var friends: [Ref<Person>]
    var born: Date
    var uuid: UUID
    var blob: Data
    var price: Decimal
    var site: URL?
    var small: Int8
    var big: UInt64
    var ratio: Float
    var flag: Bool
    var maybe: Int??
    var optionalArray: [Int?]
}

/// A model whose init(from:) decodes in its own order, not declaration order.
struct Shuffled: Model, Equatable {
    var id: Int
    var b: String
    var a: Double

    enum CodingKeys: String, CodingKey { case id, a, b }

    init(id: Int, b: String, a: Double) { self.id = id; self.b = b; self.a = a }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        a = try c.decode(Double.self, forKey: .a)
        id = try c.decode(Int.self, forKey: .id)
        b = try c.decode(String.self, forKey: .b)
    }
}

struct RecordTests {
    static func sample(_ i: Int) -> Person {
        Person(
            id: "p\(i)", name: "Ana ✓ \(i)", status: .away, level: .high, tags: ["", "x", "ünï"], tagSet: [3, 1, 2],
            scores: ["b": 2.5, "a": -.infinity], address: Address(street: "Main", city: "Lyon", zip: nil),
            bestFriend: Ref("p0"), friends: [Ref("p1"), Ref("p2")], born: Date(timeIntervalSinceReferenceDate: -1e9),
            uuid: UUID(), blob: Data([0, 1, 255]), price: Decimal(string: "12.345")!, site: URL(string: "https://example.com/a?b=c"),
            small: Int8.min, big: UInt64.max, ratio: .nan, flag: true, maybe: .some(nil), optionalArray: [1, nil, 3])
    }

    @Test func schemaOfPerson() throws {
        let schema = try SchemaProbe.schema(of: Person.self, modelName: "Person")
        let names = schema.fields.map(\.name)
        #expect(
            names == [
                "id", "name", "status", "level", "tags", "tagSet", "scores", "address", "bestFriend", "friends", "born", "uuid", "blob", "price", "site",
                "small", "big", "ratio", "flag", "maybe", "optionalArray",
            ])
        let types = Dictionary(uniqueKeysWithValues: schema.fields.map { ($0.name, $0.type) })
        #expect(types["status"] == .enumeration(.string))
        #expect(types["level"] == .enumeration(.int(bits: 64, signed: true)))
        #expect(types["tags"] == .array(.string))
        #expect(types["scores"] == .dictionary(.double))
        #expect(types["bestFriend"] == .optional(.reference("Person")))
        #expect(types["friends"] == .array(.reference("Person")))
        #expect(types["small"] == .int(bits: 8, signed: true))
        #expect(types["optionalArray"] == .array(.optional(.int(bits: 64, signed: true))))
        if case .optional(.object(let address)) = types["address"] {
            #expect(address.fields.map(\.name) == ["street", "city", "zip"])
        } else {
            Issue.record("address is \(String(describing: types["address"]))")
        }
    }

    @Test func roundTrip() throws {
        let schema = try SchemaProbe.schema(of: Person.self, modelName: "Person")
        var p = RecordTests.sample(1)
        let bytes = try RecordEncoding.encode(p, schema: schema, model: "Person")
        let back = try bytes.withUnsafeBytes { try RecordDecoding.decode(Person.self, from: $0, schema: schema, model: "Person") }
        #expect(back.ratio.isNaN)
        p.ratio = back.ratio
        #expect(back.name == p.name)
        #expect(back.maybe == p.maybe)
        // NaN never equals itself, so compare the rest with the NaN field aligned.
        var aligned = back
        aligned.ratio = p.ratio
        #expect(aligned.id == p.id && aligned.tagSet == p.tagSet && aligned.scores == p.scores && aligned.address == p.address)
        #expect(aligned.friends == p.friends && aligned.born == p.born && aligned.uuid == p.uuid && aligned.price == p.price)
        #expect(aligned.site == p.site && aligned.small == p.small && aligned.big == p.big && aligned.optionalArray == p.optionalArray)
        // Sets and dictionaries encode deterministically.
        let again = try RecordEncoding.encode(back, schema: schema, model: "Person")
        #expect(again == bytes)
    }

    @Test func handWrittenDecodeOrder() throws {
        let schema = try SchemaProbe.schema(of: Shuffled.self, modelName: "Shuffled")
        #expect(schema.fields.map(\.name) == ["a", "id", "b"])
        let value = Shuffled(id: 7, b: "bee", a: 1.5)
        let bytes = try RecordEncoding.encode(value, schema: schema, model: "Shuffled")
        let back = try bytes.withUnsafeBytes { try RecordDecoding.decode(Shuffled.self, from: $0, schema: schema, model: "Shuffled") }
        #expect(back == value)
    }

    @Test func corruptRecordsThrow() throws {
        let schema = try SchemaProbe.schema(of: Person.self, modelName: "Person")
        let bytes = try RecordEncoding.encode(RecordTests.sample(2), schema: schema, model: "Person")
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            var spoiled = bytes
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                spoiled[Int.random(in: 0..<spoiled.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
            }
            if Bool.random(using: &rng) { spoiled.removeLast(Int.random(in: 0..<spoiled.count, using: &rng)) }
            _ = try? spoiled.withUnsafeBytes { try RecordDecoding.decode(Person.self, from: $0, schema: schema, model: "Person") }
        }
    }

    struct GridCell: Codable, Sendable { var v: Int8 }
    struct Grid: Model {
        var id: Int
        var rows: [[GridCell]]
        var flat: [[Int8]]
    }
    struct WideCell: Codable, Sendable { var v: Int }
    struct WideGrid: Model {
        var id: Int
        var rows: [[WideCell]]
        var flat: [[Int]]
    }

    /// Errors name an element of an array inside an array, and a field below it, as partial
    /// updates name them (`rows[1][1].v`): the element indexes are kept as numbers until an error
    /// reads them. Here a stored value too large for the field's type is decoded.
    @Test func errorsNameElementsOfNestedArrays() throws {
        let schema = try SchemaProbe.schema(of: Grid.self, modelName: "Grid")
        let wideSchema = try SchemaProbe.schema(of: WideGrid.self, modelName: "Grid")
        func failingField(_ wide: WideGrid) throws -> String? {
            let bytes = try RecordEncoding.encode(wide, schema: wideSchema, model: "Grid")
            do {
                _ = try bytes.withUnsafeBytes { try RecordDecoding.decode(Grid.self, from: $0, schema: schema, model: "Grid") }
                return nil
            } catch StrataError.typeMismatch(_, let field, _) {
                return field
            }
        }
        let small = [[WideCell(v: 1)], [WideCell(v: 2), WideCell(v: 3)]]
        #expect(try failingField(WideGrid(id: 1, rows: small, flat: [[1], [2, 3]])) == nil)
        #expect(try failingField(WideGrid(id: 1, rows: [[WideCell(v: 1)], [WideCell(v: 2), WideCell(v: 300)]], flat: [])) == "rows[1][1].v")
        #expect(try failingField(WideGrid(id: 1, rows: small, flat: [[1, 2, 3], [4], [5, -129]])) == "flat[2][1]")
    }

    struct Depth: Codable, Sendable, Equatable { var x: Int8 }
    struct Holder: Codable, Sendable, Equatable {
        var name: String
        var inner: Depth
        var more: [Depth]?
    }
    struct Shelf: Model, Equatable {
        var id: Int
        var items: [Holder]
        var byKey: [String: Holder]
    }
    struct WideDepth: Codable, Sendable { var x: Int }
    struct WideHolder: Codable, Sendable {
        var name: String
        var inner: WideDepth
        var more: [WideDepth]?
    }
    struct WideShelf: Model {
        var id: Int
        var items: [WideHolder]
        var byKey: [String: WideHolder]
    }

    /// One decoder reads element after element of an array (or dictionary) of structs, and one
    /// model decoder record after record: values come back exact and an error names the element
    /// it is in, however many elements (with nested structs and arrays of their own) were read
    /// before it with the same decoders, and the decoders read correctly after an error.
    @Test func reusedElementDecodersNameTheirElement() throws {
        let schema = try SchemaProbe.schema(of: Shelf.self, modelName: "Shelf")
        let wideSchema = try SchemaProbe.schema(of: WideShelf.self, modelName: "Shelf")
        func holder(_ i: Int, _ x: Int = 1, more: [Int]? = [2, 3]) -> WideHolder {
            WideHolder(name: "h\(i)", inner: WideDepth(x: x), more: more.map { $0.map(WideDepth.init) })
        }
        func narrow(_ h: WideHolder) -> Holder {
            Holder(name: h.name, inner: Depth(x: Int8(h.inner.x)), more: h.more.map { $0.map { Depth(x: Int8($0.x)) } })
        }
        let decoder = ModelDecoder(layout: DecodingLayout(schema), model: "Shelf")
        func read(_ wide: WideShelf) throws -> Result<Shelf, StrataError> {
            let bytes = try RecordEncoding.encode(wide, schema: wideSchema, model: "Shelf")
            do {
                return .success(try bytes.withUnsafeBytes { try decoder.decode(Shelf.self, from: $0) })
            } catch let error as StrataError {
                return .failure(error)
            }
        }
        func failingField(_ wide: WideShelf) throws -> String? {
            if case .failure(.typeMismatch(_, let field, _)) = try read(wide) { return field }
            return nil
        }
        let good = WideShelf(id: 1, items: (0..<4).map { holder($0, more: $0 == 2 ? nil : [$0, 2]) }, byKey: ["a": holder(7), "b": holder(8)])
        let expected = Shelf(id: 1, items: good.items.map(narrow), byKey: good.byKey.mapValues(narrow))
        #expect(try read(good).get() == expected)
        var bad = good
        bad.items[2].inner.x = 300
        #expect(try failingField(bad) == "items[2].inner.x")
        bad = good
        bad.items[3].more = [WideDepth(x: 1), WideDepth(x: -200)]
        #expect(try failingField(bad) == "items[3].more[1].x")
        bad = good
        bad.byKey["b"]?.inner.x = 1_000
        #expect(try failingField(bad) == "byKey.b.inner.x")
        // The same decoders, after those errors, and on records of other sizes.
        #expect(try read(good).get() == expected)
        let other = WideShelf(id: 2, items: [holder(9, 5, more: [])], byKey: [:])
        #expect(try read(other).get() == Shelf(id: 2, items: other.items.map(narrow), byKey: [:]))
        bad = other
        bad.items[0].inner.x = 128
        #expect(try failingField(bad) == "items[0].inner.x")
    }

    struct Tagged: Model, Equatable {
        var id: Int
        var tags: [String]
        var maybe: [String]?
        var set: Set<String>
        var nested: [[String]]
    }

    /// `[String]` fields take a short path in both directions: the bytes are those the general
    /// path writes for an array of strings (compared field by field with `encodeValue`), and
    /// reading them back gives the same strings, empty ones, combining marks and emoji included,
    /// optional or not; sets and nested arrays keep the general path and round trip too.
    @Test func stringArraysAreWrittenAsTheGeneralPathWritesThem() throws {
        let schema = try SchemaProbe.schema(of: Tagged.self, modelName: "Tagged")
        let samples: [[String]] = [[], [""], ["a", "", "e\u{301}", "\u{E9}", "🇫🇷", String(repeating: "x", count: 300)], (0..<40).map { "tag\($0)" }]
        for (i, tags) in samples.enumerated() {
            let value = Tagged(id: i, tags: tags, maybe: i % 2 == 0 ? nil : tags, set: Set(tags), nested: [tags, [], tags])
            let record = try RecordEncoding.encode(value, schema: schema, model: "Tagged")
            let fields = try record.withUnsafeBytes { try FieldTable($0).entries }
            for (name, expected) in [("tags", tags), ("maybe", value.maybe)] {
                guard let id = schema.field(named: name)?.id else {
                    Issue.record("no field \(name)")
                    continue
                }
                let entry = fields.first { $0.id == id }
                if let expected {
                    var general: [UInt8] = []
                    try RecordEncoding.encodeValue(expected, as: .array(.string), into: &general, context: EncodingContext(model: "Tagged", path: [name]))
                    #expect(entry.map { Array(record[$0.start..<$0.end]) } == general, "sample \(i), \(name)")
                } else {
                    #expect(entry?.isNil ?? true, "sample \(i), \(name)")
                }
            }
            let decoded = try record.withUnsafeBytes { try RecordDecoding.decode(Tagged.self, from: $0, schema: schema, model: "Tagged") }
            #expect(decoded == value, "sample \(i)")
        }
    }

    @Test func keyEncodingPreservesOrder() {
        let ints: [Int] = [Int.min, -5, -1, 0, 1, 7, Int.max]
        let encoded = ints.map { KeyEncoding.encode($0)! }
        #expect(encoded == encoded.sorted { $0.lexicographicallyPrecedes($1) })
        let doubles: [Double] = [-.infinity, -2.5, -0.0, 0, 1e-300, 3, .infinity]
        let d = doubles.map { KeyEncoding.encode($0)! }
        #expect(d == d.sorted { $0.lexicographicallyPrecedes($1) } || d[2] == d[3])
        let strings = ["", "a", "a\u{0}", "a\u{0}b", "ab", "b"]
        let s = strings.map { KeyEncoding.encode($0)! }
        #expect(s == s.sorted { $0.lexicographicallyPrecedes($1) })
        for (value, bytes) in zip(strings, s) {
            #expect(bytes.withUnsafeBytes { KeyEncoding.decode(String.self, from: $0) } == value)
        }
        #expect(KeyEncoding.encode(Optional<Int>.none as Any)! == [0])
    }
}

/// A model written in declaration order (the common case: its record's values are the encoder's
/// buffer as it stands).
struct InOrderRecord: Model, Equatable {
    var id: Int
    var name: String
    var note: String?
    var blob: Data
    var score: Double
}

/// The same fields, written backwards by a hand-written `encode(to:)`, a present note twice (the
/// last value counts, as in JSON): the record must still list its fields by id.
struct BackwardsRecord: Model, Equatable {
    var id: Int
    var name: String
    var note: String?
    var blob: Data
    var score: Double

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(score, forKey: .score)
        try c.encode(blob, forKey: .blob)
        if let note {
            try c.encode("overwritten", forKey: .note)
            try c.encode(note, forKey: .note)
        }
        try c.encode(name, forKey: .name)
        try c.encode(id, forKey: .id)
    }
}

struct RecordOrderTests {
    static let values: [(Int, String, String?, Data, Double)] = [
        (0, "", nil, Data(), 0),
        (Int.min, "e\u{301}", "", Data([0]), -0.0),
        (Int.max, String(repeating: "ü", count: 300), "x", Data(repeating: 7, count: 5_000), .infinity),
        (-1, "a", nil, Data([1, 2, 3]), -.greatestFiniteMagnitude),
    ]

    /// `RecordCoder.encode` writes a record's values in one piece when they were encoded in schema
    /// order, and field by field otherwise: both must give the bytes the general path
    /// (`RecordEncoding.encode`) writes, and decode back to the object.
    @Test func recordsAreTheSameWhateverOrderTheFieldsWereWrittenIn() throws {
        let db = try Database.inMemory(models: [InOrderRecord.self, BackwardsRecord.self])
        let inOrder = try db.recordCoder(for: InOrderRecord.self)
        let backwards = try db.recordCoder(for: BackwardsRecord.self)
        let inOrderSchema = try SchemaProbe.schema(of: InOrderRecord.self, modelName: "InOrderRecord")
        let backwardsSchema = try SchemaProbe.schema(of: BackwardsRecord.self, modelName: "BackwardsRecord")
        #expect(inOrderSchema.fields.map(\.name) == ["id", "name", "note", "blob", "score"])
        #expect(backwardsSchema.fields.map(\.name) == inOrderSchema.fields.map(\.name))
        for (id, name, note, blob, score) in Self.values {
            let a = InOrderRecord(id: id, name: name, note: note, blob: blob, score: score)
            let b = BackwardsRecord(id: id, name: name, note: note, blob: blob, score: score)
            let aRecord = try inOrder.encode(a)
            let bRecord = try backwards.encode(b)
            #expect(aRecord == (try RecordEncoding.encode(a, schema: inOrderSchema, model: "InOrderRecord")), "id \(id)")
            #expect(bRecord == (try RecordEncoding.encode(b, schema: backwardsSchema, model: "BackwardsRecord")), "id \(id)")
            #expect(aRecord == bRecord, "id \(id)")
            #expect(try inOrder.decode(aRecord) == a)
            #expect(try backwards.decode(bRecord) == b)
        }
    }
}
