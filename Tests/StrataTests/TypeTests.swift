import Testing
import Foundation
@testable import Strata

struct Everything: Model, Equatable {
    var id: UUID
    var bool: Bool
    var int: Int
    var int8: Int8
    var int16: Int16
    var int32: Int32
    var int64: Int64
    var uint: UInt
    var uint8: UInt8
    var uint16: UInt16
    var uint32: UInt32
    var uint64: UInt64
    var double: Double
    var float: Float
    var string: String
    var data: Data
    var date: Date
    var uuid: UUID
    var decimal: Decimal
    var url: URL
    var status: Status
    var level: Level
    var optionalInt: Int?
    var optionalString: String?
    var nested: Address
    var optionalNested: Address?
    var strings: [String]
    var set: Set<String>
    var dictionary: [String: Int]
    var dates: [Date]
    var ref: Ref<Everything>?
    var refs: [Ref<Everything>]
    var doubleOptional: Int??
}

struct Unsupported: Model {
    var id: Int
    var weird: [Int: String]
}

enum Shape: Codable, Sendable, Equatable { case circle(Double), square }

/// Reads the one key present, whatever it is: its keys cannot be listed, so no schema follows.
struct OneOf: Codable, Sendable {
    var name: String
    struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        guard let key = container.allKeys.first else { throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "no key")) }
        name = key.stringValue
    }
    func encode(to encoder: any Encoder) throws {}
}
struct WithOneOf: Model { var id: Int; var value: OneOf }

struct WithPayloadEnum: Model {
    var id: Int
    var shape: Shape
}

struct With128: Model { var id: Int; var big: Int128 }
struct WithOptional128: Model { var id: Int; var big: UInt128? }
struct With128Array: Model { var id: Int; var bigs: [UInt128] }
/// A wrapper that decodes itself as one 128-bit value (a single-value container).
struct Wide: Codable, Sendable {
    var value: Int128
    init(from decoder: any Decoder) throws { value = try decoder.singleValueContainer().decode(Int128.self) }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(value)
    }
}
struct WithWide: Model { var id: Int; var wide: Wide }

struct NestedOptionals: Model, Equatable {
    var id: Int
    var field: String??
    var list: [String??]
    var map: [String: Int??]
}

struct TypeTests {
    static func extremes(_ i: Int) -> Everything {
        Everything(
            id: UUID(), bool: i % 2 == 0, int: i == 0 ? .min : .max, int8: .min, int16: .max, int32: .min, int64: .max,
            uint: .max, uint8: .max, uint16: 0, uint32: .max, uint64: .max, double: i == 0 ? .infinity : -.infinity,
            float: .greatestFiniteMagnitude, string: i == 0 ? "" : "日本語 ✓ e\u{301}", data: Data(), date: i == 0 ? .distantPast : .distantFuture,
            uuid: UUID(), decimal: Decimal(string: "-123456789.000000001")!, url: URL(string: "file:///tmp/a%20b")!,
            status: .offline, level: .low, optionalInt: i == 0 ? nil : 0, optionalString: i == 0 ? "" : nil,
            nested: Address(street: "", city: "ü", zip: Int.min), optionalNested: i == 0 ? nil : Address(street: "s", city: "c", zip: nil),
            strings: i == 0 ? [] : ["", "a"], set: i == 0 ? [] : ["x", "y", "z"], dictionary: i == 0 ? [:] : ["": 0, "k": -1],
            dates: [.distantPast], ref: nil, refs: [], doubleOptional: i == 0 ? .some(nil) : nil)
    }

    @Test func everyFieldTypeRoundTripsThroughTheDatabase() throws {
        let path = databasePath()
        var stored: [Everything] = []
        do {
            let db = try Database(path: path, models: [Everything.self])
            stored = [TypeTests.extremes(0), TypeTests.extremes(1)]
            stored[1].ref = Ref(stored[0].id)
            stored[1].refs = [Ref(stored[0].id), Ref(stored[1].id)]
            try db.write { tx in try tx.insert(contentsOf: stored) }
        }
        let db = try Database(path: path, models: [Everything.self])
        for value in stored {
            let back = try #require(try db.object(Everything.self, key: value.id))
            #expect(back == value)
        }
        var nan = TypeTests.extremes(2)
        nan.double = .nan
        try db.write { tx in try tx.insert(nan) }
        #expect(try db.object(Everything.self, key: nan.id)?.double.isNaN == true)
    }

    @Test func unrepresentableTypesAreRejectedAtOpen() throws {
        #expect(throws: StrataError.self) { _ = try Database.inMemory(models: [Unsupported.self]) }
        do {
            _ = try Database.inMemory(models: [Unsupported.self])
        } catch let error as StrataError {
            guard case .unsupportedType(let model, let field, _) = error else { Issue.record("\(error)"); return }
            #expect(model == "Unsupported" && field == "weird")
        }
        // An enum with associated values is stored as JSONEncoder writes it (PayloadEnumTests).
        let db = try Database.inMemory(models: [WithPayloadEnum.self])
        try db.write { tx in
            try tx.insert(WithPayloadEnum(id: 1, shape: .circle(2.5)))
            try tx.insert(WithPayloadEnum(id: 2, shape: .square))
        }
        #expect(try db.objects(WithPayloadEnum.self).fetch().map(\.shape) == [.circle(2.5), .square])
    }

    /// The reason names what cannot be stored and what to do instead, wherever the type sits (a
    /// field, an optional, an array element, a single-value wrapper), not the standard library's
    /// "Decoder has not implemented support for Int128" or "Invalid number of keys found".
    @Test func rejectionsSayWhy() throws {
        func reason(_ model: any Model.Type) -> (field: String, reason: String)? {
            do {
                _ = try Database.inMemory(models: [model])
            } catch StrataError.unsupportedType(_, let field, let reason) {
                return (field, reason)
            } catch {
                Issue.record("\(model): \(error)")
            }
            return nil
        }
        let wide: [(any Model.Type, String, String)] = [
            (With128.self, "big", "Int128"), (WithOptional128.self, "big", "UInt128"),
            (With128Array.self, "bigs[]", "UInt128"), (WithWide.self, "wide", "Int128"),
        ]
        for (model, field, type) in wide {
            let got = reason(model)
            #expect(got?.field == field, "\(model)")
            #expect(got?.reason.hasPrefix("\(type) is not supported (stored integers have at most 64 bits)") == true, "\(model): \(got?.reason ?? "accepted")")
        }
        let oneOf = reason(WithOneOf.self)
        #expect(oneOf?.field == "value")
        #expect(oneOf?.reason.contains("OneOf.init(from:) reads which keys the data holds (allKeys)") == true, "\(oneOf?.reason ?? "accepted")")
    }

    /// A field keeps a nested optional's inner nil; an array element or dictionary value has one
    /// nil flag, so storing `.some(nil)` there is refused with a reason (not "nil where a value is
    /// required"), and nothing of the object is stored.
    @Test func nestedOptionalsKeepTheirInnerNilOrSayWhyNot() throws {
        let db = try Database.inMemory(models: [NestedOptionals.self])
        let kept = [
            NestedOptionals(id: 1, field: .some(nil), list: [nil, "a"], map: ["n": nil, "v": 2]),
            NestedOptionals(id: 2, field: nil, list: [], map: [:]),
            NestedOptionals(id: 3, field: "s", list: ["b"], map: ["v": 3]),
        ]
        try db.write { tx in for object in kept { try tx.insert(object) } }
        for object in kept { #expect(try db.object(NestedOptionals.self, key: object.id) == object) }
        let refused: [(NestedOptionals, String)] = [
            (NestedOptionals(id: 4, field: nil, list: ["x", .some(nil)], map: [:]), "list[1]"),
            (NestedOptionals(id: 5, field: nil, list: [], map: ["k": .some(nil)]), "map.k"),
        ]
        for (object, field) in refused {
            do {
                try db.write { tx in try tx.insert(object) }
                Issue.record("\(object) was stored")
            } catch StrataError.typeMismatch(let model, let at, let reason) {
                #expect(model == "NestedOptionals" && at == field)
                #expect(reason.contains("inner nil of a nested optional"), "\(reason)")
            }
            #expect(try db.object(NestedOptionals.self, key: object.id) == nil)
        }
    }

    @Test func closedDatabaseThrows() throws {
        let db = try Database.inMemory(models: [Everything.self])
        db.close()
        #expect(throws: StrataError.databaseClosed) { try db.write { _ in } }
        #expect(throws: StrataError.databaseClosed) { _ = try db.object(Everything.self, key: UUID()) }
        #expect(db.objects(Everything.self).error == .databaseClosed)
        #expect(db.objects(Everything.self).isEmpty)
    }

    @Test func modelsNotPassedAtOpenAreAnError() throws {
        let db = try Database.inMemory(models: [Everything.self])
        #expect(throws: StrataError.self) { try db.write { try $0.insert(Author(id: "x", name: "", mentor: nil)) } }
    }
}
