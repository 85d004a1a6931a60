import Foundation
import Testing

@testable import Strata

/// Arrays and `[String: V]` dictionaries are read with their element type known, without the
/// standard library's `Array.init(from:)` and `Dictionary.init(from:)`. A field wrapped in a
/// single-value type (`CHWrapped`) is stored the same way but reaches the collection through the
/// wrapper's `init(from:)` and so through the standard library's initializers: these tests hold
/// the direct path to what that reference path reads, values and errors alike.
@Suite struct CollectionDecodingTests {
    struct Leaf: Codable, Sendable, Hashable { var x: Int }
    struct Row: Codable, Sendable, Hashable {
        var a: Int
        var b: String?
        var inner: [Leaf]?
    }

    struct Plain: Model, Equatable {
        var id: Int
        var rows: [Row]
        var maybe: [Row?]
        var grid: [[Row]]
        var byName: [String: Row]
        var maybeByName: [String: Row?]
        var listsByName: [String: [Row]]
    }

    struct Wrapped: Model, Equatable {
        var id: Int
        var rows: CHWrapped<[Row]>
        var maybe: CHWrapped<[Row?]>
        var grid: CHWrapped<[[Row]]>
        var byName: CHWrapped<[String: Row]>
        var maybeByName: CHWrapped<[String: Row?]>
        var listsByName: CHWrapped<[String: [Row]]>
    }

    static func row(_ i: Int) -> Row {
        Row(a: i * 7 - 20, b: i % 3 == 0 ? nil : "r\(i)", inner: i % 4 == 0 ? nil : (0..<(i % 5)).map { Leaf(x: $0 - i) })
    }

    static let samples: [Plain] = [
        Plain(id: 1, rows: [], maybe: [], grid: [], byName: [:], maybeByName: [:], listsByName: [:]),
        Plain(
            id: 2, rows: (0..<12).map(row), maybe: [nil, row(1), nil, row(2)], grid: [[], [row(3)], (0..<5).map(row), []],
            byName: ["": row(0), "a": row(1), "Z": row(2), "é": row(3), "e\u{301}x": row(4), "🇫🇷": row(5)],
            maybeByName: ["n": nil, "m": row(6)], listsByName: ["none": [], "some": (0..<3).map(row)]),
        Plain(
            id: 3, rows: (0..<200).map(row), maybe: Array(repeating: nil, count: 5), grid: [(0..<40).map(row)],
            byName: Dictionary(uniqueKeysWithValues: (0..<50).map { ("k\($0)", row($0)) }), maybeByName: ["x": nil],
            listsByName: ["k": [row(1)]]),
    ]

    static func read<M: Model>(_ type: M.Type, _ record: [UInt8], _ schema: ObjectSchema) throws -> M {
        try record.withUnsafeBytes { try RecordDecoding.decode(M.self, from: $0, schema: schema, model: "Doc") }
    }

    /// Every sample reads back as written, and as the standard library's initializers read it.
    @Test func collectionsReadAsTheStandardLibraryReadsThem() throws {
        let schema = try SchemaProbe.schema(of: Plain.self, modelName: "Doc")
        #expect(try SchemaProbe.schema(of: Wrapped.self, modelName: "Doc").fields == schema.fields)
        for sample in Self.samples {
            let record = try RecordEncoding.encode(sample, schema: schema, model: "Doc")
            let direct = try Self.read(Plain.self, record, schema)
            let reference = try Self.read(Wrapped.self, record, schema)
            #expect(direct == sample, "sample \(sample.id)")
            let viaReference = Plain(
                id: reference.id, rows: reference.rows.value, maybe: reference.maybe.value, grid: reference.grid.value,
                byName: reference.byName.value, maybeByName: reference.maybeByName.value, listsByName: reference.listsByName.value)
            #expect(direct == viaReference, "sample \(sample.id)")
            // Equal as Strings is not enough: the same key bytes.
            #expect(
                direct.byName.keys.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
                    == sample.byName.keys.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) })
        }
    }

    /// Writes `byName` with two keys that are equal as Swift Strings (é as one scalar and as two),
    /// which no Swift dictionary holds but a record can.
    struct TwoEqualKeys: Encodable {
        struct Key: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }
        let first: Row
        let second: Row
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Key.self)
            try container.encode(first, forKey: Key(stringValue: "\u{E9}"))
            try container.encode(second, forKey: Key(stringValue: "e\u{301}"))
            try container.encode(first, forKey: Key(stringValue: "a"))
        }
    }
    struct Writer: Encodable {
        var id: Int
        var rows: [Row] = []
        var maybe: [Row?] = []
        var grid: [[Row]] = []
        var byName: TwoEqualKeys
        var maybeByName: [String: Row?] = [:]
        var listsByName: [String: [Row]] = [:]
    }

    /// Keys equal as Strings: the dictionary holds the one key and the value the standard library
    /// keeps (the reference path), however the direct path would have ordered them.
    @Test func keysEqualAsStringsReadAsTheStandardLibraryReadsThem() throws {
        let schema = try SchemaProbe.schema(of: Plain.self, modelName: "Doc")
        let record = try RecordEncoding.encode(Writer(id: 1, byName: TwoEqualKeys(first: Self.row(1), second: Self.row(2))), schema: schema, model: "Doc")
        let direct = try Self.read(Plain.self, record, schema).byName
        let reference = try Self.read(Wrapped.self, record, schema).byName.value
        #expect(direct.count == 2)
        #expect(direct == reference)
        #expect(
            direct.keys.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
                == reference.keys.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) })
        // The value the standard library drops is never read: one that does not fit fails neither path.
        let fine = Row(a: 1, b: nil, inner: [Leaf(x: 1)])
        let bad = Row(a: 1, b: "x", inner: [Leaf(x: -1)])
        let dropped = try RecordEncoding.encode(Writer(id: 2, byName: TwoEqualKeys(first: fine, second: bad)), schema: schema, model: "Doc")
        #expect(try Self.read(NarrowPlain.self, dropped, schema).byName.count == 2)
        #expect(try Self.read(NarrowWrapped.self, dropped, schema).byName.value.count == 2)
    }

    struct NarrowLeaf: Codable, Sendable, Hashable { var x: UInt8 }
    struct NarrowRow: Codable, Sendable, Hashable {
        var a: Int
        var b: String?
        var inner: [NarrowLeaf]?
    }
    struct NarrowPlain: Model {
        var id: Int
        var rows: [NarrowRow]
        var maybe: [NarrowRow]
        var grid: [[NarrowRow]]
        var byName: [String: NarrowRow]
        var maybeByName: [String: NarrowRow]
        var listsByName: [String: [NarrowRow]]
    }
    struct NarrowWrapped: Model {
        var id: Int
        var rows: CHWrapped<[NarrowRow]>
        var maybe: CHWrapped<[NarrowRow]>
        var grid: CHWrapped<[[NarrowRow]]>
        var byName: CHWrapped<[String: NarrowRow]>
        var maybeByName: CHWrapped<[String: NarrowRow]>
        var listsByName: CHWrapped<[String: [NarrowRow]]>
    }

    /// A value that does not fit (a negative `x` read as `UInt8`) or a nil read as a non-optional
    /// fails at the element the reference path names.
    @Test func errorsNameTheElementTheStandardLibraryPathNames() throws {
        let schema = try SchemaProbe.schema(of: Plain.self, modelName: "Doc")
        func failingField<M: Model>(_ type: M.Type, _ value: Plain) throws -> String? {
            let record = try RecordEncoding.encode(value, schema: schema, model: "Doc")
            do {
                _ = try Self.read(M.self, record, schema)
                return nil
            } catch let StrataError.typeMismatch(_, field, _) {
                return field
            }
        }
        let fine = Row(a: 1, b: nil, inner: [Leaf(x: 1)])
        let bad = Row(a: 1, b: "x", inner: [Leaf(x: 2), Leaf(x: -1)])
        let base = Plain(id: 1, rows: [fine], maybe: [fine], grid: [[fine]], byName: ["k": fine], maybeByName: ["m": fine], listsByName: ["l": [fine]])
        var cases: [(Plain, String)] = []
        var v = base
        v.rows = [fine, fine, bad]
        cases.append((v, "rows[2].inner[1].x"))
        v = base
        v.maybe = [fine, nil]
        cases.append((v, "maybe[1]"))
        v = base
        v.grid = [[fine], [fine, bad]]
        cases.append((v, "grid[1][1].inner[1].x"))
        v = base
        v.byName = ["a": fine, "b": bad]
        cases.append((v, "byName.b.inner[1].x"))
        v = base
        v.maybeByName = ["m": nil]
        cases.append((v, "maybeByName.m"))
        v = base
        v.listsByName = ["l": [fine, bad]]
        cases.append((v, "listsByName.l[1].inner[1].x"))
        #expect(try failingField(NarrowPlain.self, base) == nil)
        for (value, field) in cases {
            #expect(try failingField(NarrowPlain.self, value) == field)
            #expect(try failingField(NarrowWrapped.self, value) == field)
        }
    }
}
