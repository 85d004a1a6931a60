import Foundation
import Testing

@testable import Strata

// A single-value wrapper around an optional (`@NullCodable`-style: `CHWrapped<Int?>`) holding nil:
// its field, array element or dictionary value is stored nil and read back through its own
// init(from:), as a JSON round trip gives it. Every write of one holding nil threw, and a nil
// read back did not reach its init(from:) (found by a review of the codec, 2026-12-07).

struct OWInner: Codable, Sendable, Hashable {
    var a: Int
}

struct OWModel: Model, Equatable {
    var id: Int
    var inner: CHWrapped<OWInner?>
    var n: CHWrapped<Int?>
    var s: CHWrapped<String?>
    var xs: CHWrapped<[Int]?>
    var list: [CHWrapped<Int?>]
    var map: [String: CHWrapped<Int?>]
}

/// A raw enum whose own encode(to:) writes nil for a case: stored by its raw value all the same
/// (ModelsAndSchema), also in an optional field written with encodeIfPresent.
enum OWMood: String, Codable, Sendable, Hashable {
    case happy, unknown

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        self = c.decodeNil() ? .unknown : OWMood(rawValue: try c.decode(String.self)) ?? .unknown
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        if self == .unknown { try c.encodeNil() } else { try c.encode(rawValue) }
    }
}

struct OWEntry: Model, Equatable {
    var id: Int
    var mood: OWMood?
    var moods: [OWMood?]
}

struct OptionalWrapperTests {
    /// A present optional is not asked whether it writes nil (that took `.unknown`, whose own
    /// encode(to:) writes nil, for a nil, and made every present optional encode twice).
    @Test func aRawEnumThatEncodesNilIsStoredByItsRawValue() throws {
        let db = try Database.inMemory(models: [OWEntry.self])
        let entries = [
            OWEntry(id: 1, mood: .unknown, moods: [.unknown, nil, .happy]), OWEntry(id: 2, mood: nil, moods: []), OWEntry(id: 3, mood: .happy, moods: [nil]),
        ]
        try db.write { tx in try tx.insert(contentsOf: entries) }
        for entry in entries { #expect(try db.object(OWEntry.self, key: entry.id) == entry, "\(entry.id)") }
    }

    @Test func wrappersHoldingNilRoundTripAsJSONDoes() throws {
        let db = try Database.inMemory(models: [OWModel.self])
        let values = [
            OWModel(
                id: 1, inner: .init(nil), n: .init(nil), s: .init(nil), xs: .init(nil), list: [.init(nil), .init(3)], map: ["a": .init(nil), "b": .init(2)]),
            OWModel(id: 2, inner: .init(OWInner(a: 4)), n: .init(5), s: .init(""), xs: .init([]), list: [], map: [:]),
            OWModel(id: 3, inner: .init(nil), n: .init(-1), s: .init("x"), xs: .init([1, 2]), list: [.init(nil)], map: ["": .init(nil)]),
        ]
        try db.write { tx in try tx.insert(contentsOf: values) }
        for value in values {
            let json = try JSONDecoder().decode(OWModel.self, from: JSONEncoder().encode(value))
            #expect(json == value)
            #expect(try db.object(OWModel.self, key: value.id) == json, "\(value.id)")
        }
        // Queries read the wrapped nil as the field's nil.
        #expect(db.objects(OWModel.self).map(\.id) == [1, 2, 3])
        // And an update from nil to a value and back.
        try db.write { tx in
            _ = try tx.update(OWModel.self, key: 1) {
                $0.n = .init(9); $0.s = .init("y")
            }
        }
        #expect(try db.object(OWModel.self, key: 1)?.n.value == 9)
        try db.write { tx in _ = try tx.update(OWModel.self, key: 1) { $0.n = .init(nil) } }
        #expect(try db.object(OWModel.self, key: 1)?.n.value == nil)
    }
}
