import Foundation
import StrataStorage
import Testing

@testable import Strata

// Partial updates found wrong by a review of the layer (2026-12-07), checked against JSONDecoder
// and the typed writes.

/// ModelsAndSchema's pattern: a counter left out of the JSON (and the record) while it is 0.
struct PRTally: Model, Equatable {
    var id: Int
    var name: String
    var hits: Int

    enum CodingKeys: String, CodingKey { case id, name, hits }

    init(id: Int, name: String, hits: Int) {
        self.id = id
        self.name = name
        self.hits = hits
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        name = try c.decode(String.self, forKey: .name)
        hits = (try? c.decode(Int.self, forKey: .hits)) ?? 0
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(name, forKey: .name)
        if hits != 0 { try c.encode(hits, forKey: .hits) }
    }
}

struct PartialReviewTests {
    /// A required field `init(from:)` does without, left out by `encode(to:)`, is no missing
    /// field: updates of such an object, and objects created without it, read as JSONDecoder
    /// reads the merged JSON (they threw `incompleteUpdate` / `incompleteObject`).
    @Test func aFieldInitFromDoesWithoutMayBeLeftOut() throws {
        let db = try Database.inMemory(models: [PRTally.self])
        try db.write { tx in try tx.insert(contentsOf: [PRTally(id: 1, name: "a", hits: 0), PRTally(id: 2, name: "b", hits: 3)]) }
        // Each patch applies to what the one before left; the third JSON is each object's then.
        let cases: [(Int, String, String)] = [
            (1, #"{"name": "b"}"#, #"{"id": 1, "name": "b"}"#),
            (1, #"{"hits": 4}"#, #"{"id": 1, "name": "b", "hits": 4}"#),
            (2, #"{"hits": 0}"#, #"{"id": 2, "name": "b", "hits": 0}"#),
            (2, #"{"name": "c"}"#, #"{"id": 2, "name": "c"}"#),
        ]
        for (key, patch, merged) in cases {
            let result = try db.write { tx in try tx.update(PRTally.self, key: key, json: Data(patch.utf8)) }
            let expected = try JSONDecoder().decode(PRTally.self, from: Data(merged.utf8))
            #expect(result.object == expected, "\(patch)")
            #expect(try db.object(PRTally.self, key: key) == expected, "\(patch)")
        }
        let created = try db.write { tx in try tx.upsert(PRTally.self, key: 9, json: Data(#"{"name": "new"}"#.utf8)) }
        #expect(created.created && created.object == PRTally(id: 9, name: "new", hits: 0))
        // A field it needs is still missing.
        #expect(throws: StrataError.self) { try db.write { tx in try tx.upsert(PRTally.self, key: 10, json: Data(#"{"hits": 2}"#.utf8)) } }
    }

    /// Fields that change a computed id (`var id: String { email }`) are the fields' error, as a
    /// typed update changing the key is: it was reported as a damaged stored record.
    @Test func fieldsChangingAComputedKeyAreATypeMismatch() throws {
        let db = try Database.inMemory(models: [Account.self])
        try db.write { tx in try tx.insert(Account(email: "a@x", balance: 1)) }
        #expect {
            try db.write { tx in try tx.update(Account.self, key: "a@x", json: Data(#"{"email": "c@x"}"#.utf8)) }
        } throws: { error in
            guard case StrataError.typeMismatch(_, _, let reason) = error else { return false }
            return reason.contains("c@x")
        }
        #expect(try db.object(Account.self, key: "a@x") == Account(email: "a@x", balance: 1))
        // A change that keeps the key is an update like any.
        let result = try db.write { tx in try tx.update(Account.self, key: "a@x", json: Data(#"{"email": "a@x", "balance": 5}"#.utf8)) }
        #expect(result.object == Account(email: "a@x", balance: 5))
    }
}

/// A reference to a model whose key (PWDay's Weekday) has its own Codable: JSONEncoder writes a
/// `Ref` as the key's wire form, `rawValue + 1`.
struct PRDayRef: Model, Equatable {
    var id: Int
    var day: Ref<PWDay>
    var days: [Ref<PWDay>]
}

extension PartialReviewTests {
    /// A `Ref` given in JSON, in a change message or as itself reads as JSONDecoder and a typed
    /// write have it: the key's wire form was taken for its raw value, storing a reference to the
    /// next day (and refusing 7, Sunday).
    @Test func aReferenceToAnEnumKeyReadsItsWireForm() throws {
        let db = try Database.inMemory(models: [PWDay.self, PRDayRef.self])
        try db.write { tx in try tx.insert(PRDayRef(id: 1, day: Ref(.monday), days: [])) }
        for patch in [#"{"day": 2}"#, #"{"day": 7}"#, #"{"days": [1, 7, 3]}"#, #"{"day": 1, "days": []}"#] {
            let stored = try #require(try db.object(PRDayRef.self, key: 1))
            let before = try JSONSerialization.jsonObject(with: JSONEncoder().encode(stored)) as! [String: Any]
            let merged = before.merging(try JSONSerialization.jsonObject(with: Data(patch.utf8)) as! [String: Any]) { $1 }
            let expected = try JSONDecoder().decode(PRDayRef.self, from: JSONSerialization.data(withJSONObject: merged))
            let result = try db.write { tx in try tx.update(PRDayRef.self, key: 1, json: Data(patch.utf8)) }
            #expect(result.object == expected, "\(patch)")
            #expect(try db.object(PRDayRef.self, key: 1) == expected, "\(patch)")
        }
        let given = try db.write { tx in try tx.update(PRDayRef.self, key: 1, fields: ["day": Ref<PWDay>(.friday)]) }
        #expect(given.object.day.id == .friday)
        try db.apply([ChangeMessage(.changed, model: "PRDayRef", key: .int(1), fields: ["day": .int(3)])])
        #expect(try db.object(PRDayRef.self, key: 1)?.day.id == .wednesday)  // 3 on the wire
        // What no case has on the wire is refused, naming the field.
        #expect(throws: StrataError.self) { try db.write { tx in try tx.update(PRDayRef.self, key: 1, json: Data(#"{"day": 0}"#.utf8)) } }
        // Queries on the stored references find them by the key a typed insert writes.
        try db.write { tx in try tx.insert(PRDayRef(id: 2, day: Ref(.tuesday), days: [Ref(.sunday)])) }
        let tuesday = Ref<PWDay>(.tuesday)
        let wednesday = Ref<PWDay>(.wednesday)
        #expect(db.objects(PRDayRef.self).filter(#Predicate { $0.day == tuesday }).map(\.id) == [2])
        #expect(db.objects(PRDayRef.self).filter(#Predicate { $0.day == wednesday }).map(\.id) == [1])
    }

    /// Null, or `cleared`, for a required field `init(from:)` does without reads as JSONDecoder
    /// reads it (the field's default), as leaving the field out does: it was refused as "null
    /// given for a non-optional".
    @Test func nullForAFieldInitFromDoesWithoutIsItsDefault() throws {
        let db = try Database.inMemory(models: [PRTally.self])
        try db.write { tx in try tx.insert(PRTally(id: 2, name: "b", hits: 3)) }
        let result = try db.write { tx in try tx.update(PRTally.self, key: 2, json: Data(#"{"hits": null}"#.utf8)) }
        let expected = try JSONDecoder().decode(PRTally.self, from: Data(#"{"id": 2, "name": "b", "hits": null}"#.utf8))
        #expect(result.object == expected)
        #expect(try db.object(PRTally.self, key: 2) == expected)
        try db.write { tx in _ = try tx.update(PRTally.self, key: 2) { $0.hits = 5 } }
        try db.apply([ChangeMessage(.changed, model: "PRTally", key: .int(2), cleared: ["hits"])])
        #expect(try db.object(PRTally.self, key: 2) == PRTally(id: 2, name: "b", hits: 0))
        // A field it needs is still refused null.
        #expect(throws: StrataError.self) { try db.write { tx in try tx.update(PRTally.self, key: 2, json: Data(#"{"name": null}"#.utf8)) } }
    }
}

/// A reference to a model keyed by a raw-value struct whose own Codable writes "u:" + its raw
/// value (QueryReviewTests' QRUserID): JSONEncoder writes the `Ref` as "u:b", and the key is "b".
struct PRNote: Model, Equatable {
    var id: Int
    var doc: Ref<QRDoc>
}

extension PartialReviewTests {
    /// The reference given as JSON, or as itself, is read through the key type's own Codable, as
    /// JSONDecoder reads it: it was stored under the key "u:b", a reference to nothing.
    @Test func aReferenceToARawValueStructKeyReadsItsCodableForm() throws {
        let db = try Database.inMemory(models: [QRDoc.self, PRNote.self])
        let a = QRUserID(rawValue: "a"), b = QRUserID(rawValue: "b")
        try db.write { tx in
            try tx.insert(QRDoc(id: a, owner: a, editor: nil))
            try tx.insert(QRDoc(id: b, owner: b, editor: nil))
            try tx.insert(PRNote(id: 1, doc: Ref(a)))
        }
        let patched = try db.write { tx in try tx.update(PRNote.self, key: 1, json: Data(#"{"doc": "u:b"}"#.utf8)) }
        let expected = try JSONDecoder().decode(PRNote.self, from: Data(#"{"id": 1, "doc": "u:b"}"#.utf8))
        #expect(patched.object == expected)
        #expect(try db.object(PRNote.self, key: 1)?.doc.id == b)
        #expect(try db.object(QRDoc.self, key: try #require(try db.object(PRNote.self, key: 1)).doc.id)?.id == b)
        let given = try db.write { tx in try tx.update(PRNote.self, key: 1, fields: ["doc": Ref<QRDoc>(a)]) }
        #expect(given.object.doc.id == a)
        try db.apply([ChangeMessage(.changed, model: "PRNote", key: .int(1), fields: ["doc": .string("u:b")])])
        #expect(try db.object(PRNote.self, key: 1)?.doc.id == b)
    }
}

/// A model whose id is computed from an enum with its own Codable (`rawValue + 1` on the wire).
struct PRBoard: Model, Equatable {
    var status: CodecReviewTests.Weekday
    var name: String
    var id: CodecReviewTests.Weekday { status }
}

struct PRCard: Model, Equatable {
    var id: Int
    var board: Ref<PRBoard>
}

extension PartialReviewTests {
    /// A reference to a model with a computed enum id is read in the id's wire form too (the
    /// target has no id field to read it as; the probe's finding at the `Ref`'s path converts it).
    @Test func aReferenceToAComputedEnumKeyReadsItsWireForm() throws {
        let db = try Database.inMemory(models: [PRBoard.self, PRCard.self])
        try db.write { tx in
            try tx.insert(PRBoard(status: .monday, name: "a"))
            try tx.insert(PRBoard(status: .tuesday, name: "b"))
            try tx.insert(PRCard(id: 1, board: Ref(.tuesday)))
        }
        let result = try db.write { tx in try tx.update(PRCard.self, key: 1, json: Data(#"{"board": 1}"#.utf8)) }
        let expected = try JSONDecoder().decode(PRCard.self, from: Data(#"{"id": 1, "board": 1}"#.utf8))
        #expect(result.object == expected)
        #expect(try db.object(PRCard.self, key: 1)?.board.id == .monday)
    }
}
