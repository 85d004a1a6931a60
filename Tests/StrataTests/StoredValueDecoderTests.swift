import Foundation
import StrataStorage
import Testing

@testable import Strata

// A stored value read back as a Swift type (`old["plan"]?.decode(Plan.self)` in a migration) is
// what the record it came from reads as. It went through JSON, where an enum with its own Codable
// read its stored raw value as its wire form: the raw value 2 of `SVDay` (written `rawValue + 1`
// on the wire) came back as the case before, and 1 was refused.

/// Written to JSON as `rawValue + 1`.
enum SVDay: Int, Codable, CaseIterable, Sendable {
    case mon, tue, wed
    init(from decoder: any Decoder) throws {
        let wire = try decoder.singleValueContainer().decode(Int.self)
        guard let day = SVDay(rawValue: wire - 1) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "no day \(wire)"))
        }
        self = day
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue + 1)
    }
}

/// Not CaseIterable (stored by raw value as a one-byte enum); written to JSON by its case name.
enum SVColor: String, Codable, Sendable {
    case red = "R", green = "G"
    init(from decoder: any Decoder) throws {
        switch try decoder.singleValueContainer().decode(String.self) {
        case "red": self = .red
        case "green": self = .green
        case let other: throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "no color \(other)"))
        }
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(self == .red ? "red" : "green")
    }
}

/// An option set written to JSON as text ("f:5").
struct SVFlags: OptionSet, Codable, Sendable, Hashable {
    let rawValue: UInt8
    init(rawValue: UInt8) { self.rawValue = rawValue }
    init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard text.hasPrefix("f:"), let raw = UInt8(text.dropFirst(2)) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "no flags \(text)"))
        }
        rawValue = raw
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode("f:\(rawValue)")
    }
}

struct SVInner: Codable, Equatable, Sendable {
    var day: SVDay
    var colors: [SVColor]
    var maybe: SVDay?
}

struct SVPlan: Model, Equatable {
    var id: Int
    var day: SVDay
    var days: [SVDay]
    var byName: [String: SVDay]
    var color: SVColor
    var flags: SVFlags
    var inner: SVInner
    var later: SVDay?
}

struct SVDayKeyed: Model, Equatable {
    var id: SVDay
    var name: String
}

struct SVDayRef: Model, Equatable {
    var id: Int
    var to: Ref<SVDayKeyed>
    var maybe: Ref<SVDayKeyed>?
}

struct StoredValueDecoderTests {
    static func plans() -> [SVPlan] {
        var plans: [SVPlan] = []
        for i in 0..<12 {
            let day = SVDay.allCases[i % 3]
            plans.append(
                SVPlan(
                    id: i, day: day, days: Array(SVDay.allCases.prefix(i % 4)), byName: ["a": day, "b": SVDay.allCases[(i + 1) % 3]],
                    color: i % 2 == 0 ? .red : .green, flags: SVFlags(rawValue: UInt8(i * 21)),
                    inner: SVInner(day: SVDay.allCases[(i + 2) % 3], colors: i % 3 == 0 ? [] : [.green, .red], maybe: i % 2 == 0 ? nil : day),
                    later: i % 4 == 0 ? nil : SVDay.allCases[(i + 1) % 3]))
        }
        return plans
    }

    /// Every stored object read untyped and decoded back, whole and field by field, is the object
    /// that was stored (the model-based check: the array of inserted plans is the reference).
    @Test func untypedObjectsDecodeAsStored() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let db = try Database(path: path, models: [SVPlan.self], options: StoreOptions(durability: .noSync))
        let plans = Self.plans()
        try db.write { tx in try tx.insert(contentsOf: plans) }
        var read: [Int: SVPlan] = [:]
        try StoredObjects.forEach(in: db.store, model: "SVPlan") { key, fields in
            let plan = try StoredValue.object(fields).decode(SVPlan.self)
            read[plan.id] = plan
            #expect(key == .int(Int64(plan.id)))
            #expect(try fields["day"]?.decode(SVDay.self) == plan.day)
            #expect(try fields["days"]?.decode([SVDay].self) == plan.days)
            #expect(try fields["inner"]?.decode(SVInner.self) == plan.inner)
            #expect(try fields["flags"]?.decode(SVFlags.self) == plan.flags)
            #expect(try fields["later"]?.decode(SVDay?.self) == plan.later)
            return true
        }
        #expect(read == Dictionary(uniqueKeysWithValues: plans.map { ($0.id, $0) }))
    }

    /// A migration restructuring an old nested struct reads its enums as the stored cases.
    @Test func aMigrationReadsAnOldStructWithItsStoredCases() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let plans = Self.plans()
        do {
            let db = try Database(path: path, models: [SVPlan.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try tx.insert(contentsOf: plans) }
            db.close()
        }
        var seen: [Int: SVInner] = [:]
        _ = try Database(path: path, models: [SVPlan.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { migration in
            for old in try migration.objects("SVPlan") {
                seen[Int(old.key.intValue ?? -1)] = try old["inner"]?.decode(SVInner.self)
            }
        }
        #expect(seen == Dictionary(uniqueKeysWithValues: plans.map { ($0.id, $0.inner) }))
    }

    /// A reference to a model keyed by such an enum reads as the stored key's case.
    @Test func aReferenceToAnEnumKeyReadsItsStoredCase() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let db = try Database(path: path, models: [SVDayKeyed.self, SVDayRef.self], options: StoreOptions(durability: .noSync))
        let refs = SVDay.allCases.enumerated().map { SVDayRef(id: $0.offset, to: Ref($0.element), maybe: $0.offset == 1 ? nil : Ref(.wed)) }
        try db.write { tx in
            try tx.insert(contentsOf: SVDay.allCases.map { SVDayKeyed(id: $0, name: "\($0)") })
            try tx.insert(contentsOf: refs)
        }
        var read: [SVDayRef] = []
        try StoredObjects.forEach(in: db.store, model: "SVDayRef") { _, fields in
            read.append(try StoredValue.object(fields).decode(SVDayRef.self))
            return true
        }
        #expect(read == refs)
        var keys: [SVDay] = []
        try StoredObjects.forEach(in: db.store, model: "SVDayKeyed") { key, _ in
            keys.append(try key.decode(SVDay.self))
            return true
        }
        #expect(keys == SVDay.allCases)
    }

    /// A raw value that names no case is read by the type's own `init(from:)`, as the record
    /// decoder lets it (here: the wire number 1 is `.mon`, through `rawValue + 1`).
    @Test func aRawValueOfNoCaseFallsBackToInitFrom() throws {
        #expect(try StoredValue.int(1).decode(SVDay.self) == .tue)
        #expect(try StoredValue.int(3).decode(SVDay.self) == .wed)
        #expect(throws: StrataError.self) { try StoredValue.int(9).decode(SVDay.self) }
        #expect(try StoredValue.string("G").decode(SVColor.self) == .green)
        #expect(try StoredValue.string("green").decode(SVColor.self) == .green)
    }

    /// Scalars read as another kind convert as JSONDecoder converts their JSON form (the
    /// reference), and are refused where it refuses them.
    @Test func scalarConversionsAreJSONDecoders() throws {
        let values: [StoredValue] = [
            .int(2), .int(-1), .int(300), .int(Int64.min), .uint(UInt64.max), .uint(7), .double(2.0), .double(2.5), .double(-0.0),
            .double(1e300), .double(.nan), .double(.infinity), .double(0.1), .double(16_777_217), .bool(true), .string("12"), .string("nan"),
            .string("2001-01-01T00:00:00Z"), .string("AQI="), .string("E621E1F8-C36C-495A-93FC-0C247A3E6E5F"), .string("https://x.org/a b"),
            .decimal(Decimal(string: "12.50")!), .decimal(Decimal(string: "3")!), .null,
        ]
        func check<T: Decodable & Equatable>(_ type: T.Type, _ value: StoredValue) {
            let reference = Result { try StoredValue.jsonDecoder.decode(T.self, from: Data(value.json.utf8)) }
            let decoded = Result { try value.decode(T.self) }
            switch (reference, decoded) {
            case (.success(let r), .success(let d)):
                // NaN is not equal to itself (nor is a Date of NaN seconds, which cannot even be printed).
                #expect(r == d || (Self.isNaN(r) && Self.isNaN(d)), "\(value.json) as \(T.self)")
            case (.failure, .failure): break
            default: Issue.record("\(value.json) as \(T.self): JSONDecoder \(reference), decode \(decoded)")
            }
        }
        for value in values {
            check(Int.self, value)
            check(Int8.self, value)
            check(UInt8.self, value)
            check(UInt64.self, value)
            check(Int64.self, value)
            check(Double.self, value)
            check(Float.self, value)
            check(Bool.self, value)
            check(String.self, value)
            check(Decimal.self, value)
            check(Date.self, value)
            check(Data.self, value)
            check(UUID.self, value)
            check(URL.self, value)
            check(Int?.self, value)
            check(String?.self, value)
        }
    }

    static func isNaN(_ value: Any) -> Bool {
        switch value {
        case let d as Double: return d.isNaN
        case let f as Float: return f.isNaN
        case let date as Date: return date.timeIntervalSinceReferenceDate.isNaN
        default: return false
        }
    }

    /// 128-bit integers, which have container requirements of their own (whose defaults throw),
    /// read as JSONDecoder reads them, at the top, in a struct, in an array and optional.
    @Test func wideIntegersAreJSONDecoders() throws {
        struct Wide: Codable, Equatable {
            var n: UInt128
            var m: Int128?
            var list: [Int128]
            var maybe: [UInt128?]
        }
        let values: [StoredValue] = [
            .object(["n": .uint(7), "m": .int(-3), "list": .array([.int(1), .int(Int64.min)]), "maybe": .array([.null, .uint(UInt64.max)])]),
            .object(["n": .uint(7), "list": .array([]), "maybe": .array([])]), .object(["n": .int(-1), "list": .array([]), "maybe": .array([])]),
            .object(["n": .double(2.5), "list": .array([]), "maybe": .array([])]),
        ]
        for value in values {
            let reference = Result { try StoredValue.jsonDecoder.decode(Wide.self, from: Data(value.json.utf8)) }
            let decoded = Result { try value.decode(Wide.self) }
            switch (reference, decoded) {
            case (.success(let r), .success(let d)): #expect(r == d, "\(value.json)")
            case (.failure, .failure): break
            default: Issue.record("\(value.json): JSONDecoder \(reference), decode \(decoded)")
            }
        }
        #expect(try StoredValue.int(5).decode(Int128.self) == 5)
        #expect(try StoredValue.uint(UInt64.max).decode(UInt128.self) == UInt128(UInt64.max))
        #expect(try StoredValue.object(["n": .uint(7), "list": .array([]), "maybe": .array([])]).decode(Wide.self).n == 7)
    }

    /// Containers: a missing key is keyNotFound (decodeIfPresent nil), null is nil for an
    /// optional and refused otherwise, an array too short is refused, and a dictionary with Int
    /// keys reads from an object's keys, each as JSONDecoder reads the same JSON.
    @Test func containersAreJSONDecoders() throws {
        struct Pair: Codable, Equatable {
            var a: Int
            var b: String?
        }
        let cases: [(StoredValue, String)] = [
            (.object(["a": .int(1)]), "pair"), (.object(["a": .int(1), "b": .null]), "pair"), (.object(["b": .string("x")]), "pair"),
            (.object(["a": .null]), "pair"), (.array([.int(1), .null, .int(3)]), "ints?"), (.array([.int(1), .null]), "ints"),
            (.object(["1": .int(2), "x": .int(3)]), "byInt"), (.object(["1": .int(2), "10": .int(3)]), "byInt"), (.string("x"), "pair"),
            (.array([.array([.int(1)]), .array([])]), "nested"),
        ]
        func same<T: Decodable & Equatable>(_ type: T.Type, _ value: StoredValue) {
            let reference = Result { try StoredValue.jsonDecoder.decode(T.self, from: Data(value.json.utf8)) }
            let decoded = Result { try value.decode(T.self) }
            switch (reference, decoded) {
            case (.success(let r), .success(let d)): #expect(r == d, "\(value.json) as \(T.self)")
            case (.failure, .failure): break
            default: Issue.record("\(value.json) as \(T.self): JSONDecoder \(reference), decode \(decoded)")
            }
        }
        for (value, shape) in cases {
            switch shape {
            case "pair": same(Pair.self, value)
            case "ints?": same([Int?].self, value)
            case "ints": same([Int].self, value)
            case "byInt": same([Int: Int].self, value)
            default: same([[Int]].self, value)
            }
        }
    }
}
