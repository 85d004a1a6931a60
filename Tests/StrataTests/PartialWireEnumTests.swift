import Foundation
import StrataStorage
import Testing

@testable import Strata

// Partial updates of raw-value enums with their own Codable (a wire format's numbers or names):
// the JSON holds what JSONEncoder writes, so a patch must store the case JSONDecoder reads. It
// stored the case whose raw value the wire value happened to be (`{"day": 2}`, Tuesday on the
// wire, became Wednesday), silently.

/// An enum whose own Codable agrees with its raw value for its first case only (`rawValue * 10`
/// on the wire, and none is 0 either way): told from one case, it was taken for a plain one.
enum PWPriority: Int, Codable, Sendable {
    case none = 0, low, medium, high

    init(from decoder: any Decoder) throws {
        let n = try decoder.singleValueContainer().decode(Int.self)
        guard n % 10 == 0, let priority = PWPriority(rawValue: n / 10) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "no priority \(n)"))
        }
        self = priority
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue * 10)
    }
}

struct PWTask: Model, Equatable {
    static let indexes: [PartialKeyPath<PWTask> & Sendable] = [\.priority]
    var id: Int
    var priority: PWPriority
}

/// A tagged date: raw-value, its raw value no JSON scalar (read as any date field is).
struct PWStamp: RawRepresentable, Codable, Sendable, Equatable {
    var rawValue: Date
}

struct PWEvent: Model, Equatable {
    var id: String
    var at: PWStamp
}

/// A key whose own Codable writes `rawValue + 1` (CodecReviewTests.Weekday), in change messages.
struct PWDay: Model, Equatable {
    var id: CodecReviewTests.Weekday
    var note: String
}

struct PartialWireEnumTests {
    /// A raw-value struct whose raw value is a Date keeps reading as a date (every update of one
    /// threw for a moment this session, found by a review).
    @Test func aTaggedDateReadsAsADate() throws {
        let db = try Database.inMemory(models: [PWEvent.self])
        let d = Date(timeIntervalSinceReferenceDate: 700_000_000)
        try db.write { tx in try tx.insert(PWEvent(id: "e", at: PWStamp(rawValue: Date(timeIntervalSinceReferenceDate: 0)))) }
        let given = try db.write { tx in try tx.update(PWEvent.self, key: "e", fields: ["at": PWStamp(rawValue: d)]) }
        #expect(given.object.at.rawValue == d)
        let later = d.addingTimeInterval(60)
        // As any date field reads JSON (SyncingFromAServer): ISO 8601 text or {"$date": ms since 1970}.
        let ms = Int((later.timeIntervalSince1970 * 1000).rounded())
        let json = try db.write { tx in try tx.update(PWEvent.self, key: "e", json: Data(#"{"at": {"$date": \#(ms)}}"#.utf8)) }
        #expect(json.object.at.rawValue == later)
    }

    /// A change message's id of an enum key with its own Codable is read in its JSON form, as
    /// the field's values are (it was taken for the raw value).
    @Test func aChangeMessagesEnumKeyReadsItsWireForm() throws {
        let db = try Database.inMemory(models: [PWDay.self])
        try db.write { tx in try tx.insert(PWDay(id: .monday, note: "a")) }
        // Wire 1 is Monday (raw 0).
        let messages = try ChangeMessage.decode(json: Data(#"[{"msg": "changed", "collection": "PWDay", "id": 1, "fields": {"note": "b"}}]"#.utf8))
        _ = try db.apply(messages)
        #expect(try db.object(PWDay.self, key: .monday)?.note == "b")
        #expect(try db.object(PWDay.self, key: .tuesday) == nil)
    }

    /// Every raw enum field reads its JSON form through its own init(from:), whatever its first
    /// case writes; an enum given as itself is that case; the index holds its raw value.
    @Test func anEnumWhoseFirstCaseWritesItsRawValueReadsItsWireForm() throws {
        let db = try Database.inMemory(models: [PWTask.self])
        try db.write { tx in try tx.insert(PWTask(id: 1, priority: .none)) }
        let given = try db.write { tx in try tx.update(PWTask.self, key: 1, fields: ["priority": PWPriority.medium]) }
        #expect(given.object.priority == .medium)
        let medium = PWPriority.medium
        #expect(db.objects(PWTask.self).filter(#Predicate { $0.priority == medium }).map(\.id) == [1])
        let wire = try db.write { tx in try tx.update(PWTask.self, key: 1, json: Data(#"{"priority": 30}"#.utf8)) }
        #expect(wire.object == (try JSONDecoder().decode(PWTask.self, from: Data(#"{"id": 1, "priority": 30}"#.utf8))))
        let high = PWPriority.high
        #expect(db.objects(PWTask.self).filter(#Predicate { $0.priority == high }).map(\.id) == [1])
        // JSONDecoder refuses 2 (no priority has wire value 2): so does the update, and nothing changes.
        #expect(throws: StrataError.self) { try db.write { tx in try tx.update(PWTask.self, key: 1, json: Data(#"{"priority": 2}"#.utf8)) } }
        #expect(try db.object(PWTask.self, key: 1)?.priority == .high)
    }

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
