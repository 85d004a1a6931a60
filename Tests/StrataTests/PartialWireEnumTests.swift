import Foundation
import StrataStorage
import Testing

@testable import Strata

// Partial updates of raw-value enums with their own Codable (a wire format's numbers or names):
// the JSON holds what JSONEncoder writes, so a patch must store the case JSONDecoder reads. It
// stored the case whose raw value the wire value happened to be (`{"day": 2}`, Tuesday on the
// wire, became Wednesday), silently.

struct PartialWireEnumTests {
    typealias Shift = CodecReviewTests.Shift
    typealias Weekday = CodecReviewTests.Weekday

    static let start = Shift(id: 0, day: .monday, status: .open, days: [], next: nil)

    /// The stored object after a patch, against JSONDecoder on the object's JSON with the patch
    /// merged in (RFC 7396 at the top level: each given key replaces the object's).
    @Test(arguments: [
        #"{"day": 2}"#, #"{"day": 7}"#, #"{"day": 1, "next": 3}"#, #"{"days": [1, 7, 2], "next": null}"#,
        #"{"status": "closed"}"#, #"{"status": "whatever"}"#, #"{"day": 6, "status": "open", "days": [5]}"#,
    ])
    func aPatchStoresTheCaseJSONDecoderReads(patch: String) throws {
        let db = try Database.inMemory(models: [Shift.self])
        try db.write { tx in try tx.insert(Self.start) }
        let result = try db.write { tx in try tx.update(Shift.self, key: 0, json: Data(patch.utf8)) }
        var merged = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(Self.start)) as? [String: Any])
        for (key, value) in try #require(try JSONSerialization.jsonObject(with: Data(patch.utf8)) as? [String: Any]) { merged[key] = value }
        merged = merged.filter { !($0.value is NSNull) }
        let expected = try JSONDecoder().decode(Shift.self, from: JSONSerialization.data(withJSONObject: merged))
        #expect(result.object == expected, "\(patch)")
        #expect(try db.object(Shift.self, key: 0) == expected, "\(patch)")
        // The index holds the stored case.
        let day = expected.day
        #expect(db.objects(Shift.self).filter(#Predicate { $0.day == day }).map(\.id) == [0], "\(patch)")
    }

    /// A whole object from JSON (an upsert that creates it) reads as JSONDecoder reads it.
    @Test func anUpsertCreatesTheObjectJSONDecoderReads() throws {
        let db = try Database.inMemory(models: [Shift.self])
        let json = #"{"id": 4, "day": 3, "status": "closed", "days": [7, 1], "next": 5}"#
        let result = try db.write { tx in try tx.upsert(Shift.self, key: 4, json: Data(json.utf8)) }
        #expect(result.created)
        #expect(result.object == (try JSONDecoder().decode(Shift.self, from: Data(json.utf8))))
    }

    /// An enum given as itself in `fields:` stands for itself, whatever its wire form.
    @Test func anEnumGivenAsItselfStandsForItself() throws {
        let db = try Database.inMemory(models: [Shift.self])
        try db.write { tx in try tx.insert(Self.start) }
        let result = try db.write { tx in
            try tx.update(
                Shift.self, key: 0, fields: ["day": Weekday.friday, "days": [Weekday.sunday, Weekday.monday], "status": CodecReviewTests.Status.closed])
        }
        #expect(result.object.day == .friday)
        #expect(result.object.days == [.sunday, .monday])
        #expect(result.object.status == .closed)
    }

    /// A wire value the enum's init(from:) refuses is a typed error naming the field.
    @Test func aWireValueTheEnumRefusesIsATypeMismatch() throws {
        let db = try Database.inMemory(models: [Shift.self])
        try db.write { tx in try tx.insert(Self.start) }
        for patch in [#"{"day": 0}"#, #"{"day": 8}"#, #"{"day": "monday"}"#, #"{"days": [1, 9]}"#] {
            #expect(throws: StrataError.self, "\(patch)") {
                try db.write { tx in try tx.update(Shift.self, key: 0, json: Data(patch.utf8)) }
            }
            #expect(try db.object(Shift.self, key: 0) == Self.start)
        }
    }
}
