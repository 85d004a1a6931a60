import Foundation
import Testing

@testable import Strata

/// Arrays, sets and dictionaries are written element after element into one buffer: primitives of
/// common types without passing through `Any`, structs through one encoder moved from element to
/// element. These tests hold those short paths to the bytes the general path writes, to the
/// element each error names, and to types that keep their encoder or container.
@Suite struct CollectionEncodingTests {
    /// A single value wrapper (`CHWrapped`): the schema stores it as the value it wraps, but the
    /// encoder cannot tell it from the outside, so its elements take the general path (through
    /// `Any` and the wrapper's own `encode(to:)`).
    typealias Box = CHWrapped

    struct Plain: Model, Equatable {
        var id: Int
        var ints: [Int]
        var int64s: [Int64]
        var int32s: [Int32]
        var uint64s: [UInt64]
        var uints: [UInt]
        var bytes: [UInt8]
        var doubles: [Double]
        var strings: Set<String>
        var flags: [Bool]
        var dates: [Date]
        var blobs: [Data]
        var maybe: [Int?]
        var byName: [String: Double]
        var nested: [[Int]]
    }

    struct Boxed: Model {
        var id: Int
        var ints: [Box<Int>]
        var int64s: [Box<Int64>]
        var int32s: [Box<Int32>]
        var uint64s: [Box<UInt64>]
        var uints: [Box<UInt>]
        var bytes: [Box<UInt8>]
        var doubles: [Box<Double>]
        var strings: Set<Box<String>>
        var flags: [Box<Bool>]
        var dates: [Box<Date>]
        var blobs: [Box<Data>]
        var maybe: [Box<Int>?]
        var byName: [String: Box<Double>]
        var nested: [[Box<Int>]]
    }

    static func boxed(_ p: Plain) -> Boxed {
        Boxed(
            id: p.id, ints: p.ints.map(Box.init), int64s: p.int64s.map(Box.init), int32s: p.int32s.map(Box.init),
            uint64s: p.uint64s.map(Box.init), uints: p.uints.map(Box.init), bytes: p.bytes.map(Box.init),
            doubles: p.doubles.map(Box.init), strings: Set(p.strings.map(Box.init)), flags: p.flags.map(Box.init),
            dates: p.dates.map(Box.init), blobs: p.blobs.map(Box.init), maybe: p.maybe.map { $0.map(Box.init) },
            byName: p.byName.mapValues(Box.init), nested: p.nested.map { $0.map(Box.init) })
    }

    static let samples: [Plain] = [
        Plain(
            id: 1, ints: [], int64s: [], int32s: [], uint64s: [], uints: [], bytes: [], doubles: [], strings: [], flags: [], dates: [],
            blobs: [], maybe: [], byName: [:], nested: []),
        Plain(
            id: 2, ints: [Int.min, -1, 0, 1, 63, 64, -65, Int.max], int64s: [Int64.min, Int64.max, 300], int32s: [Int32.min, -7, Int32.max],
            uint64s: [0, 127, 128, UInt64.max], uints: [UInt.max, 0, 16_384], bytes: [0, 1, 127, 128, 255],
            doubles: [-0.0, 0, .nan, -.infinity, .infinity, .leastNonzeroMagnitude, -1.5, .greatestFiniteMagnitude],
            strings: ["", "a", "e\u{301}", "\u{E9}", "🇫🇷", String(repeating: "z", count: 200)], flags: [true, false, true],
            dates: [Date(timeIntervalSinceReferenceDate: 0), .distantPast, .distantFuture, Date(timeIntervalSinceReferenceDate: -0.5)],
            blobs: [Data(), Data([0]), Data(repeating: 0xAB, count: 300)], maybe: [nil, 0, nil, Int.min, 5],
            byName: ["": 1, "b": -0.0, "a": .infinity, "e\u{301}": 2, "\u{1F1EB}\u{1F1F7}": 3], nested: [[], [1, 2], [Int.max], []]),
        Plain(
            id: 3, ints: Array(-100...100), int64s: [7], int32s: [0], uint64s: [1 << 63], uints: [1], bytes: Array(0...255),
            doubles: (0..<50).map { Double($0) / 7 }, strings: Set((0..<60).map { "s\($0)" }), flags: [], dates: [Date(timeIntervalSince1970: 1)],
            blobs: [Data((0..<200).map { UInt8($0) })], maybe: [nil], byName: Dictionary(uniqueKeysWithValues: (0..<30).map { ("k\($0)", Double($0)) }),
            nested: (0..<10).map { Array(0..<$0) }),
    ]

    /// The record of every sample is byte for byte the record of the same values written through
    /// the general path (wrapped), with the same schema, and reads back as the values.
    @Test func primitiveElementsAreWrittenAsTheGeneralPathWritesThem() throws {
        let plainSchema = try SchemaProbe.schema(of: Plain.self, modelName: "Doc")
        let boxedSchema = try SchemaProbe.schema(of: Boxed.self, modelName: "Doc")
        #expect(plainSchema.fields == boxedSchema.fields)
        for sample in Self.samples {
            let plain = try RecordEncoding.encode(sample, schema: plainSchema, model: "Doc")
            let general = try RecordEncoding.encode(Self.boxed(sample), schema: boxedSchema, model: "Doc")
            #expect(plain == general, "sample \(sample.id)")
            let back = try plain.withUnsafeBytes { try RecordDecoding.decode(Plain.self, from: $0, schema: plainSchema, model: "Doc") }
            // (NaN is not equal to itself: compared by bit pattern.)
            #expect(back.doubles.map(\.bitPattern) == sample.doubles.map(\.bitPattern), "sample \(sample.id)")
            var comparable = back
            comparable.doubles = sample.doubles
            if sample.doubles.contains(where: \.isNaN) {
                #expect(comparable.ints == sample.ints && comparable.strings == sample.strings && comparable.byName == sample.byName)
            } else {
                #expect(comparable == sample, "sample \(sample.id)")
            }
        }
    }

    struct Stored: Model {
        var id: Int
        var xs: [Int?]
        var ys: [Double]
    }
    struct ReadPlain: Model {
        var id: Int
        var xs: [Int]
        var ys: [Int]
    }
    struct ReadBoxed: Model {
        var id: Int
        var xs: [Box<Int>]
        var ys: [Box<Int>]
    }

    /// Arrays of `Int`, `Int64`, `Double` and `Date` are read without `Array.init(from:)`: a nil
    /// element or an element of another stored type fails at the element the general path names.
    @Test func primitiveArraysFailWhereTheGeneralPathFails() throws {
        let schema = try SchemaProbe.schema(of: Stored.self, modelName: "Stored")
        func failingField<M: Model>(_ type: M.Type, _ value: Stored) throws -> String? {
            let record = try RecordEncoding.encode(value, schema: schema, model: "Stored")
            do {
                _ = try record.withUnsafeBytes { try RecordDecoding.decode(M.self, from: $0, schema: schema, model: "Stored") }
                return nil
            } catch let StrataError.typeMismatch(_, field, _) {
                return field
            }
        }
        let nilElement = Stored(id: 1, xs: [1, 2, nil], ys: [])
        #expect(try failingField(ReadPlain.self, nilElement) == "xs[2]")
        #expect(try failingField(ReadBoxed.self, nilElement) == "xs[2]")
        let doubles = Stored(id: 2, xs: [], ys: [1.5])
        #expect(try failingField(ReadPlain.self, doubles) == "ys[0]")
        #expect(try failingField(ReadBoxed.self, doubles) == "ys[0]")
        // Writing: an array whose elements the schema stores as another type.
        func failingWrite<M: Model>(_ value: M) -> String? { Self.failingField(encoding: value, schema: schema, model: "Stored") }
        #expect(failingWrite(ReadPlain(id: 4, xs: [1], ys: [2, 3])) == "ys[0]")
        #expect(failingWrite(ReadBoxed(id: 4, xs: [Box(1)], ys: [Box(2), Box(3)])) == "ys[0]")
        #expect(failingWrite(ReadPlain(id: 5, xs: [], ys: [])) == nil)
        let fine = Stored(id: 3, xs: [Int.min, 0, Int.max], ys: [])
        let record = try RecordEncoding.encode(fine, schema: schema, model: "Stored")
        let back = try record.withUnsafeBytes { try RecordDecoding.decode(ReadPlain.self, from: $0, schema: schema, model: "Stored") }
        #expect(back.xs == [Int.min, 0, Int.max] && back.ys == [])
    }

    /// The field a failed encode names (`typeMismatch`), nil when it succeeds, or another error's text.
    static func failingField<M: Encodable>(encoding value: M, schema: ObjectSchema, model: String) -> String? {
        do {
            _ = try RecordEncoding.encode(value, schema: schema, model: model)
            return nil
        } catch let StrataError.typeMismatch(_, field, _) {
            return field
        } catch {
            return "\(error)"
        }
    }

    struct Row: Codable, Sendable, Hashable {
        var a: Int
        var b: String?
    }

    struct Rows: Model, Equatable {
        var id: Int
        var set: Set<Row>
        var maybe: Set<String?>
        /// Sets the field does not hold itself: inside a single-value wrapper (twice over), inside an
        /// array and inside a dictionary.
        var wrapped: CHWrapped<Set<Row>>
        var wrappedTwice: CHWrapped<CHWrapped<Set<String?>>>
        var nested: [Set<Int>]
        var byName: [String: CHWrapped<Set<Int>>]
    }

    /// Sets are written in one order whatever their iteration order: by element bytes, and a nil
    /// before an empty value; also where the field holds them through a wrapper or a collection.
    @Test func setsAreWrittenInOneOrder() throws {
        let schema = try SchemaProbe.schema(of: Rows.self, modelName: "Rows")
        let rows = (0..<40).map { Row(a: $0 % 7, b: $0 % 3 == 0 ? nil : "r\($0)") }
        let strings: [String?] = [nil, "", "a", "e\u{301}", "\u{E9}x"]
        // Equal sets built in opposite orders at different capacities iterate differently.
        func rowSet(_ reversed: Bool) -> Set<Row> {
            var set = Set<Row>(minimumCapacity: reversed ? 500 : 0)
            for row in reversed ? rows.reversed() : rows { set.insert(row) }
            return set
        }
        func stringSet(_ reversed: Bool) -> Set<String?> {
            var set = Set<String?>(minimumCapacity: reversed ? 300 : 0)
            for s in reversed ? strings.reversed() : strings { set.insert(s) }
            return set
        }
        func intSet(_ reversed: Bool, _ n: Int) -> Set<Int> {
            var set = Set<Int>(minimumCapacity: reversed ? 400 : 0)
            for i in reversed ? Array((0..<n).reversed()) : Array(0..<n) { set.insert(i * 7919 - 50) }
            return set
        }
        func model(_ reversed: Bool) -> Rows {
            Rows(
                id: 1, set: rowSet(reversed), maybe: stringSet(reversed), wrapped: CHWrapped(rowSet(reversed)),
                wrappedTwice: CHWrapped(CHWrapped(stringSet(reversed))), nested: [intSet(reversed, 30), [], intSet(reversed, 3)],
                byName: ["x": CHWrapped(intSet(reversed, 25)), "y": CHWrapped([])])
        }
        let a = model(false)
        let b = model(true)
        #expect(a == b)
        #expect(Array(a.wrapped.value) != Array(b.wrapped.value), "the sets should iterate in different orders for the test to mean anything")
        let ra = try RecordEncoding.encode(a, schema: schema, model: "Rows")
        let rb = try RecordEncoding.encode(b, schema: schema, model: "Rows")
        #expect(ra == rb)
        #expect(try ra.withUnsafeBytes { try RecordDecoding.decode(Rows.self, from: $0, schema: schema, model: "Rows") } == a)
    }

    typealias Depth = RecordTests.WideDepth
    typealias Holder = RecordTests.WideHolder
    typealias Shelf = RecordTests.WideShelf
    struct UnsignedDepth: Codable, Sendable { var x: UInt8 }
    struct UnsignedHolder: Codable, Sendable {
        var name: String
        var inner: UnsignedDepth
        var more: [UnsignedDepth]?
    }
    struct UnsignedShelf: Model {
        var id: Int
        var items: [UnsignedHolder]
        var byKey: [String: UnsignedHolder]
    }

    /// One encoder writes element after element; an error names the element it happened in (and
    /// the field under it), not an element an encoder was made for before. A negative `x` does not
    /// fit the schema's unsigned field.
    @Test func reusedElementEncodersNameTheirElement() throws {
        let schema = try SchemaProbe.schema(of: UnsignedShelf.self, modelName: "Shelf")
        func holder(_ i: Int, _ x: Int = 1, more: [Int]? = [2, 3]) -> Holder {
            Holder(name: "h\(i)", inner: Depth(x: x), more: more.map { $0.map(Depth.init) })
        }
        func failingField(_ shelf: Shelf) -> String? { Self.failingField(encoding: shelf, schema: schema, model: "Shelf") }
        let good = Shelf(id: 1, items: (0..<4).map { holder($0, more: $0 == 2 ? nil : [$0, 2]) }, byKey: ["a": holder(7), "b": holder(8)])
        let record = try RecordEncoding.encode(good, schema: schema, model: "Shelf")
        let back = try record.withUnsafeBytes { try RecordDecoding.decode(UnsignedShelf.self, from: $0, schema: schema, model: "Shelf") }
        #expect(back.items.map(\.inner.x) == [1, 1, 1, 1])
        #expect(back.items.map { $0.more?.map(\.x) } == [[0, 2], [1, 2], nil, [3, 2]])
        #expect(back.byKey["b"]?.name == "h8")
        var bad = good
        bad.items[2].inner.x = -5
        #expect(failingField(bad) == "items[2].inner.x")
        bad = good
        bad.items[3].more = [Depth(x: 1), Depth(x: -200)]
        #expect(failingField(bad) == "items[3].more[1].x")
        bad = good
        bad.byKey["b"]?.inner.x = -1
        #expect(failingField(bad) == "byKey.b.inner.x")
        bad = good
        bad.items[0].inner.x = -1
        #expect(failingField(bad) == "items[0].inner.x")
    }
}

/// Single-value wrappers (property wrappers, tagged types) around an array, a dictionary or a
/// struct: the wrapper encodes its value through a single-value container, and the record holds
/// the wrapped value as the field's type.
struct WrappedShapes: Model, Equatable {
    var id: Int
    var scores: CHWrapped<[Int]>
    var names: CHWrapped<[String]>
    var byName: CHWrapped<[String: Double]>
    var point: CHWrapped<CollectionEncodingTests.Point>
    var rows: [CHWrapped<CollectionEncodingTests.Point>]
    var twice: CHWrapped<CHWrapped<[Int]>>
}

extension CollectionEncodingTests {
    struct Point: Codable, Sendable, Hashable {
        var x: Int
        var y: Double
    }

    @Test func singleValueWrappersOfCollectionsAndStructsRoundTrip() throws {
        let value = WrappedShapes(
            id: 1, scores: CHWrapped([3, -1, Int.max]), names: CHWrapped(["a", "", "e\u{301}"]), byName: CHWrapped(["x": 1.5, "": -0.0]),
            point: CHWrapped(Point(x: 7, y: 0.25)), rows: [CHWrapped(Point(x: 1, y: 2)), CHWrapped(Point(x: -3, y: .infinity))],
            twice: CHWrapped(CHWrapped([9, 8])))
        let db = try Database(path: databasePath(), models: [WrappedShapes.self], options: StoreOptions(durability: .noSync))
        try db.write { tx in try tx.insert(value) }
        #expect(try db.object(WrappedShapes.self, key: 1) == value)
        let schema = try SchemaProbe.schema(of: WrappedShapes.self, modelName: "WrappedShapes")
        let plain = try SchemaProbe.schema(of: UnwrappedShapes.self, modelName: "WrappedShapes")
        #expect(schema.fields == plain.fields)
        let unwrapped = UnwrappedShapes(
            id: 1, scores: value.scores.value, names: value.names.value, byName: value.byName.value, point: value.point.value,
            rows: value.rows.map(\.value), twice: value.twice.value.value)
        #expect(
            try RecordEncoding.encode(value, schema: schema, model: "WrappedShapes") == RecordEncoding.encode(unwrapped, schema: plain, model: "WrappedShapes"))
    }

    struct UnwrappedShapes: Model, Equatable {
        var id: Int
        var scores: [Int]
        var names: [String]
        var byName: [String: Double]
        var point: Point
        var rows: [Point]
        var twice: [Int]
    }
}

/// Reads an array, but writes itself as its own single value, or nil: no encoder could finish the
/// first, and the second is not the array the field stores.
struct SelfWrapping: Codable, Sendable, Equatable {
    var xs: [Int]
    var writesNil = false
    init(xs: [Int], writesNil: Bool = false) {
        self.xs = xs
        self.writesNil = writesNil
    }
    init(from decoder: any Decoder) throws { xs = try decoder.singleValueContainer().decode([Int].self) }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        if writesNil { try c.encodeNil() } else { try c.encode(self) }
    }
}

struct SelfWrappingModel: Model, Equatable {
    var id: Int
    var values: SelfWrapping
}

extension CollectionEncodingTests {
    @Test func wrappersThatNeverReachTheirValueAreRefused() throws {
        let db = try Database(path: databasePath(), models: [SelfWrappingModel.self], options: StoreOptions(durability: .noSync))
        for value in [SelfWrapping(xs: [1]), SelfWrapping(xs: [1], writesNil: true)] {
            do {
                try db.write { tx in try tx.insert(SelfWrappingModel(id: 1, values: value)) }
                Issue.record("stored \(value)")
            } catch let StrataError.typeMismatch(_, field, reason) {
                #expect(field == "values", "\(reason)")
            }
        }
        #expect(try db.object(SelfWrappingModel.self, key: 1) == nil)
    }
}
