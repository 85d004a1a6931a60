import Foundation
import StrataStorage
import Testing

@testable import Strata

/// A file whose pages are sound but whose object trees disagree (a record under another object's
/// key, a key that is no key): the object layer says so with `corruptRecord` and never spreads the
/// damage to other objects. Found by an independent hunt (2026-12-04) that wrote such trees with
/// the engine and then used the database.
@Suite struct DamagedObjectTests {
    struct DUser: Model {
        static let uniqueIndexes: [PartialKeyPath<DUser> & Sendable] = [\.email]
        var id: String
        var email: String
        var age: Int
    }

    struct DNote: Model {
        var id: Int?
        var text: String
    }

    /// The key of a String id (KeyEncoding: the bytes, then the terminator).
    static func key(_ id: String) -> [UInt8] { Array(id.utf8) + [0, 0] }

    /// A database with users u1…u3 and notes 1…3, closed; then `damage` applied with the engine.
    static func damaged(_ name: String, _ damage: (WriteTransaction) throws -> Void) throws -> String {
        let path = databasePath(name)
        do {
            let db = try Database(path: path, models: [DUser.self, DNote.self])
            try db.write { tx in
                for i in 1...3 { try tx.insert(DUser(id: "u\(i)", email: "u\(i)@x", age: 20 + i)) }
                for i in 1...3 { try tx.insert(DNote(id: i, text: "note \(i)")) }
            }
            db.close()
        }
        let store = try Store(path: path)
        try store.write { try damage($0) }
        store.close()
        return path
    }

    /// u2's record holds u1's bytes: deleting (or updating) u2 must not remove u1's unique entry,
    /// which would hide u1 from queries on the index and let a second "u1@x" in.
    @Test(arguments: ["delete", "update"])
    func aRecordThatDisagreesWithItsUniqueIndexLeavesTheOtherObjectsEntry(change: String) throws {
        let path = try Self.damaged("unique") { txn in
            let records = try #require(try txn.tree("m:DUser"))
            try records.put(Self.key("u2"), try #require(try records.get(Self.key("u1"))))
        }
        defer { Self.remove(path) }
        let db = try Database(path: path, models: [DUser.self, DNote.self])
        #expect(throws: StrataError.self) {
            try db.write { tx in
                if change == "delete" {
                    _ = try tx.delete(DUser.self, key: "u2")
                } else {
                    try tx.update(DUser.self, key: "u2") { $0.age = 99 }
                }
            }
        }
        #expect(db.objects(DUser.self).filter(#Predicate { $0.email == "u1@x" }).count == 1)
        #expect(throws: StrataError.self) { try db.write { try $0.insert(DUser(id: "u9", email: "u1@x", age: 1)) } }
    }

    /// u2's record holds u1's object: reading u2 by key, updating it (in Swift or from fields) all
    /// report damage instead of handing out u1 as u2 or blaming the caller for changing the key.
    @Test func aRecordUnderAnotherObjectsKeyIsDamageWhenReadByKey() throws {
        let path = try Self.damaged("wrongkey") { txn in
            let records = try #require(try txn.tree("m:DUser"))
            try records.put(Self.key("u2"), try #require(try records.get(Self.key("u1"))))
        }
        defer { Self.remove(path) }
        let db = try Database(path: path, models: [DUser.self, DNote.self])
        func expectDamage(_ what: String, _ body: () throws -> Void) {
            do {
                try body()
                Issue.record("\(what) succeeded")
            } catch let error as StrataError {
                guard case .corruptRecord(let message) = error else {
                    Issue.record("\(what): expected corruptRecord, got \(error)")
                    return
                }
                #expect(message.contains("u2") && message.contains("u1"), "\(what): \(message)")
            } catch {
                Issue.record("\(what): \(error)")
            }
        }
        expectDamage("Database.object") { _ = try db.object(DUser.self, key: "u2") }
        expectDamage("Transaction.object") { try db.write { _ = try $0.object(DUser.self, key: "u2") } }
        expectDamage("Snapshot.object") { try db.read { _ = try $0.object(DUser.self, key: "u2") } }
        expectDamage("update") { try db.write { _ = try $0.update(DUser.self, key: "u2") { $0.age = 1 } } }
        expectDamage("partial update") { try db.write { _ = try $0.update(DUser.self, key: "u2", fields: ["age": 1]) } }
        #expect(try db.object(DUser.self, key: "u1")?.age == 21)
        #expect(try db.object(DUser.self, key: "u3")?.age == 23)
    }

    /// A record whose field table does not parse (a field count larger than the record) is damage
    /// named with its model, and read by key, with its key: the reason alone ("field count 200
    /// exceeds the record size") said neither.
    @Test func anUnparseableRecordIsNamedWithItsModelAndKey() throws {
        let path = try Self.damaged("unparseable") { txn in
            let records = try #require(try txn.tree("m:DUser"))
            try records.put(Self.key("u2"), [200, 1, 2])
        }
        defer { Self.remove(path) }
        let db = try Database(path: path, models: [DUser.self, DNote.self])
        for (what, read) in [
            ("Database.object", { _ = try db.object(DUser.self, key: "u2") }),
            ("Snapshot.object", { try db.read { _ = try $0.object(DUser.self, key: "u2") } }),
        ] as [(String, () throws -> Void)] {
            do {
                try read()
                Issue.record("\(what) succeeded")
            } catch StrataError.corruptRecord(let message) {
                #expect(message.contains("DUser") && message.contains("u2") && message.contains("field count"), "\(what): \(message)")
            }
        }
        // A scan reads it as a placeholder and says which model in `error`.
        let all = db.objects(DUser.self)
        _ = Array(all)
        #expect("\(all.error.map { "\($0)" } ?? "")".contains("DUser"), "\(String(describing: all.error))")
    }

    /// The largest key of an auto-increment model is not an integer key: the next insert reports
    /// the damage, not a duplicate of key 1.
    @Test func anUndecodableLargestKeyIsReportedAsDamage() throws {
        let path = try Self.damaged("autoincrement") { txn in
            try #require(try txn.tree("m:DNote")).put([0xFF], [0])
        }
        defer { Self.remove(path) }
        let db = try Database(path: path, models: [DUser.self, DNote.self])
        do {
            try db.write { try $0.insert(DNote(id: nil, text: "new")) }
            Issue.record("the insert succeeded")
        } catch let error as StrataError {
            guard case .corruptRecord(let message) = error else {
                Issue.record("expected corruptRecord, got \(error)")
                return
            }
            #expect(message.contains("DNote"), "\(message)")
        }
    }

    static func remove(_ path: String) {
        for suffix in ["", "-lock"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    /// A declared index whose tree is gone: queries scan instead of finding nothing, and writes
    /// that would maintain it report the damage instead of making it anew without its entries.
    @Test func aMissingIndexTreeIsNeverTakenForAnEmptyIndex() throws {
        let path = try Self.damaged("missing") { txn in
            let name = try #require(try txn.treeNames().first { $0.hasPrefix("i:DUser") })
            try txn.dropTree(name)
        }
        defer { Self.remove(path) }
        let db = try Database(path: path, models: [DUser.self, DNote.self])
        let matches = db.objects(DUser.self).filter(#Predicate { $0.email == "u1@x" })
        #expect(try matches.fetch().map(\.id) == ["u1"])
        #expect(matches.count == 1)
        #expect(try db.objects(DUser.self).sorted(by: SortDescriptor(\.email)).fetch().map(\.id) == ["u1", "u2", "u3"])
        #expect(throws: StrataError.self) { try db.write { try $0.insert(DUser(id: "u9", email: "u1@x", age: 1)) } }
        #expect(db.objects(DUser.self).count == 3)
    }

    struct DPrice: Model {
        static let indexes: [PartialKeyPath<DPrice> & Sendable] = [\.price]
        var id: Int
        var price: Decimal
        var note: String
    }

    /// A stored Decimal whose text is a number followed by anything else ("12abc", "1.2.3", "12 "):
    /// every reader (typed decoding, a partial update, the index key a delete removes) reports
    /// damage, where `Decimal(string:)` alone would read the number in front (12) as the value.
    @Test(arguments: ["12abc", "1.2.3", "12   ", "-1-23", "9e9e9"])
    func aDecimalTextWithTrailingBytesIsDamage(text: String) throws {
        let path = databasePath("decimal")
        defer { Self.remove(path) }
        do {
            let db = try Database(path: path, models: [DPrice.self])
            // Stored as the text "12345" (5 bytes), replaced below by a damaged text as long.
            try db.write { try $0.insert(DPrice(id: 1, price: Decimal(12345), note: "n")) }
            try db.write { try $0.insert(DPrice(id: 2, price: Decimal(7), note: "m")) }
            db.close()
        }
        let store = try Store(path: path)
        try store.write { (txn) throws in
            let records = try #require(try txn.tree("m:DPrice"))
            var found = false
            let cursor = try records.cursor()
            var more = try cursor.first()
            while more && !found {
                var value = Array(cursor.value)
                if let at = value.firstRange(of: Array("12345".utf8)) {
                    value.replaceSubrange(at, with: Array(text.utf8))
                    try records.put(Array(cursor.key), value)
                    found = true
                } else {
                    more = try cursor.next()
                }
            }
            #expect(found, "the record does not hold the text 12345")
        }
        store.close()
        let db = try Database(path: path, models: [DPrice.self])
        func expectDamage(_ what: String, _ body: () throws -> Void) {
            do {
                try body()
                Issue.record("\(what) read \(text) as a Decimal")
            } catch let error as StrataError {
                guard case .corruptRecord(let message) = error else {
                    Issue.record("\(what): \(error)")
                    return
                }
                #expect(message.contains("Decimal"), "\(what): \(message)")
            } catch {
                Issue.record("\(what): \(error)")
            }
        }
        expectDamage("fetch") { _ = try db.objects(DPrice.self).filter(#Predicate { $0.id == 1 }).fetch() }
        expectDamage("partial update") { try db.write { _ = try $0.update(DPrice.self, key: 1, fields: ["note": "x"]) } }
        expectDamage("delete") { try db.write { _ = try $0.delete(DPrice.self, key: 1) } }
        #expect(try db.objects(DPrice.self).filter(#Predicate { $0.id == 2 }).fetch().map(\.price) == [7])
    }

    /// The strict reading accepts every text a Decimal's `description` writes, extremes included.
    @Test func everyDecimalsTextReadsBack() throws {
        let values: [Decimal] = [
            0, -0.5, 1, -1, .greatestFiniteMagnitude, -.greatestFiniteMagnitude, .leastNonzeroMagnitude,
            -.leastNonzeroMagnitude, .leastFiniteMagnitude, try #require(Decimal(string: "1e-100")),
            try #require(Decimal(string: "123456789012345678901234567890.12345678")), .pi,
        ]
        for value in values {
            #expect(PrimitiveLayout.decimal(text: value.description) == value, "\(value.description)")
        }
    }

    /// An error quoting a damaged value quotes its start, not all of it.
    @Test func errorsQuoteAtMostTheStartOfAValue() {
        let long = String(repeating: "\u{1}", count: 1 << 20)
        let quoted = quotedForError(long)
        #expect(quoted.utf8.count < 2_000, "\(quoted.utf8.count) bytes")
        #expect(quoted.hasSuffix("(1048576 bytes)"))
        #expect(quotedForError("short") == "\"short\"")
    }
}

extension DamagedObjectTests {
    struct DPlace: Codable, Sendable, Equatable {
        var city: String
        var zip: String
    }

    struct DProfile: Model, Equatable {
        var id: String
        var name: String
        var age: Int
        var place: DPlace?
    }

    /// The damage done to p1's stored record.
    enum ProfileDamage: String, CaseIterable, Sendable {
        /// `age` (required) is not in the record.
        case requiredFieldAbsent
        /// `age` is stored as nil.
        case requiredFieldNil
        /// `place.zip` (required in the nested struct) is not in the nested record.
        case nestedRequiredFieldAbsent
        /// `age` holds an integer with bytes left over.
        case valueDoesNotFit
    }

    /// The record `bytes` with field `id` rewritten by `change` (nil: left out).
    static func rewriting(_ bytes: [UInt8], field id: Int, _ change: ([UInt8]) throws -> (isNil: Bool, bytes: [UInt8])?) throws -> [UInt8] {
        try bytes.withUnsafeBytes { record in
            var fields = RecordFields()
            for entry in try FieldTable(record).entries {
                let old = Array(record[entry.start..<entry.end])
                if entry.id != id {
                    fields.append(id: entry.id, isNil: entry.isNil, bytes: old)
                } else if let new = try change(old) {
                    fields.append(id: entry.id, isNil: new.isNil, bytes: new.bytes)
                }
            }
            var out: [UInt8] = []
            fields.serialize(into: &out)
            return out
        }
    }

    /// A partial update of an object whose stored record does not decode reports the damage
    /// (`corruptRecord`, naming the model and the key), whatever the fields given: it reported
    /// `incompleteUpdate` ("the new nested value lacks required fields age") for a required field
    /// missing from the stored record, and `typeMismatch` for a stored value that does not decode,
    /// both read as faults of the caller's input. The object is left as it was; fields that repair
    /// the record (the missing one given) still update it, and a nested struct created without its
    /// required fields is still `incompleteUpdate`.
    @Test(arguments: ProfileDamage.allCases)
    func aPartialUpdateOfADamagedRecordReportsTheDamage(damage: ProfileDamage) throws {
        let path = databasePath("partialdamage")
        defer { Self.remove(path) }
        let ids: (age: Int, place: Int, zip: Int)
        do {
            let db = try Database(path: path, models: [DProfile.self])
            try db.write { tx in
                try tx.insert(DProfile(id: "p1", name: "Ana", age: 30, place: DPlace(city: "Lisbon", zip: "1000")))
                try tx.insert(DProfile(id: "p2", name: "Bea", age: 40, place: nil))
            }
            let schema = try db.info(DProfile.self).stored.object
            let place = try #require(schema.field(named: "place"))
            guard case .object(let nested) = place.type.unwrapped else {
                Issue.record("place is stored as \(place.type)")
                return
            }
            ids = (try #require(schema.field(named: "age")).id, place.id, try #require(nested.field(named: "zip")).id)
            db.close()
        }
        try Store(path: path).write { txn in
            let records = try #require(try txn.tree("m:DProfile"))
            let stored = try #require(try records.get(Self.key("p1")))
            let damaged: [UInt8]
            switch damage {
            case .requiredFieldAbsent: damaged = try Self.rewriting(stored, field: ids.age) { _ in nil }
            case .requiredFieldNil: damaged = try Self.rewriting(stored, field: ids.age) { _ in (true, []) }
            case .nestedRequiredFieldAbsent:
                damaged = try Self.rewriting(stored, field: ids.place) { (false, try Self.rewriting($0, field: ids.zip) { _ in nil }) }
            case .valueDoesNotFit: damaged = try Self.rewriting(stored, field: ids.age) { (false, $0 + [1, 2]) }
            }
            try records.put(Self.key("p1"), damaged)
        }
        let db = try Database(path: path, models: [DProfile.self])
        let updates: [(String, (Transaction) throws -> Void)] = [
            ("update json", { _ = try $0.update(DProfile.self, key: "p1", json: Data(#"{"name": "Ann"}"#.utf8)) }),
            ("upsert json", { _ = try $0.upsert(DProfile.self, key: "p1", json: Data(#"{"name": "Ann"}"#.utf8)) }),
            ("update fields", { _ = try $0.update(DProfile.self, key: "p1", fields: ["name": "Ann"]) }),
            ("upsert fields", { _ = try $0.upsert(DProfile.self, key: "p1", fields: ["name": "Ann"]) }),
            ("update nested", { _ = try $0.update(DProfile.self, key: "p1", json: Data(#"{"place": {"city": "Porto"}}"#.utf8)) }),
        ]
        for (what, body) in updates {
            do {
                try db.write { try body($0) }
                Issue.record("\(damage) \(what): succeeded")
            } catch StrataError.corruptRecord(let message) {
                #expect(message.contains("DProfile") && message.contains("p1"), "\(damage) \(what): \(message)")
            } catch {
                Issue.record("\(damage) \(what): expected corruptRecord, got \(error)")
            }
        }
        // Nothing was written: the record reads as damaged as before.
        #expect(throws: StrataError.self) { _ = try db.object(DProfile.self, key: "p1") }
        // A healthy object's nested struct created without its required fields is the caller's.
        #expect(throws: StrataError.incompleteUpdate(model: "DProfile", key: "p2", missing: ["place.zip"])) {
            try db.write { _ = try $0.update(DProfile.self, key: "p2", json: Data(#"{"place": {"city": "Faro"}}"#.utf8)) }
        }
        // Fields that give what the record lacks repair it.
        let repair = damage == .nestedRequiredFieldAbsent ? #"{"place": {"city": "Porto", "zip": "4000"}}"# : #"{"age": 31}"#
        try db.write { _ = try $0.update(DProfile.self, key: "p1", json: Data(repair.utf8)) }
        #expect(try db.object(DProfile.self, key: "p1")?.name == "Ana")
    }
}
