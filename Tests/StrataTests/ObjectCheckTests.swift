import Testing
import Foundation
import StrataStorage
@testable import Strata

/// A String primary key's encoding.
private func key(_ id: String) -> [UInt8] {
    var bytes: [UInt8] = []
    KeyEncoding.appendBytes(id.utf8, to: &bytes)
    return bytes
}

struct ObjectCheckTests {
    /// A file with renamed, nested, array, optional, unique and reference indexes, some references
    /// dangling.
    func seeded() throws -> String {
        let path = databasePath()
        let db = try Database(path: path, models: [CKMessage.self, CKUser.self, Keyed<String>.self], options: StoreOptions(durability: .noSync))
        try db.write { tx in
            for i in 0..<40 {
                try tx.insert(
                    CKMessage(
                        id: "m\(i)", roomId: i % 2 == 0 ? "a" : "é", text: "t\(i)", created: Date(timeIntervalSinceReferenceDate: Double(i)),
                        slug: "s\(i)", tags: i % 3 == 0 ? [] : ["x", "e\u{301}"], author: i % 4 == 0 ? nil : Ref("u\(i % 5)"),
                        meta: CKMeta(kind: .plain, score: i, pinned: false), edited: false, hidden: true, first: i, second: -i))
            }
            for u in 0..<3 { try tx.insert(CKUser(id: "u\(u)", name: "n\(u)")) }
            try tx.insert(Keyed(id: "user-1", label: "a", next: Ref("seq-10")))
        }
        return path
    }

    @Test func aHealthyFileHasNoProblemsAndNotesDanglingReferences() throws {
        let report = try StoredObjects.check(in: try Store(path: try seeded()))
        #expect(report.problems.isEmpty, "\(report.problems)")
        #expect(report.objects == 44)
        #expect(report.indexEntries > 0)
        // u3 and u4 do not exist; Keyed's "seq-10" neither.
        #expect(
            report.notes.contains { $0.contains("CKMessage.u → CKUser: \((0..<40).filter { $0 % 4 != 0 && $0 % 5 >= 3 }.count) reference") }, "\(report.notes)")
        #expect(report.notes.contains { $0.contains("seq-10") }, "\(report.notes)")
    }

    @Test func damageIsFound() throws {
        // A missing index entry, an extra one, a record that does not decode, a key that is not
        // its record's id: each written straight into the trees.
        let cases: [(String, (StrataStorage.WriteTransaction) throws -> Void)] = [
            (
                "lack their entry",
                { txn in
                    let tree = try #require(try txn.tree("i:CKMessage:rid"))
                    let cursor = try tree.cursor()
                    #expect(try cursor.first())
                    _ = try tree.delete(Array(cursor.key))
                }
            ),
            (
                "no record gives",
                { txn in
                    var key: [UInt8] = []
                    KeyEncoding.appendBytes("zz".utf8, to: &key)
                    KeyEncoding.appendBytes("m999".utf8, to: &key)
                    try txn.tree("i:CKMessage:rid")?.put(key, [6])
                }
            ),
            ("does not decode", { txn in try txn.tree("m:CKUser")?.put(key("u1"), [200, 1, 2]) }),
            (
                "does not match its key",
                { txn in
                    let records = try #require(try txn.tree("m:CKUser"))
                    let record = try #require(try records.get(key("u2")))
                    try records.put(key("u9"), record)
                }
            ),
            (
                "also another object's",
                { txn in
                    // Two records with one slug: the second's unique entry then names the first.
                    let records = try #require(try txn.tree("m:CKMessage"))
                    let one = try #require(try records.get(key("m1")))
                    let info = try Database.inMemory(models: [CKMessage.self]).recordCoder(for: CKMessage.self)
                    var copy = try info.decode(one)
                    copy.id = "m2"
                    try records.put(key("m2"), try info.encode(copy))
                }
            ),
        ]
        for (expected, damage) in cases {
            let path = try seeded()
            try Store(path: path).write { txn in try damage(txn) }
            let report = try StoredObjects.check(in: try Store(path: path))
            #expect(report.problems.contains { $0.contains(expected) }, "\(expected): \(report.problems)")
        }
    }
}

extension ObjectCheckTests {
    @Test func strataCheckRunsTheObjectCheck() throws {
        guard let tool = toolExecutable() else {
            Issue.record("the strata executable was not found next to the test bundle")
            return
        }
        let healthy = try seeded()
        let ok = try runTool(tool, ["check", healthy])
        #expect(ok.status == 0, "\(ok.output)")
        #expect(ok.output.contains("objects: 44 objects"), "\(ok.output)")
        #expect(ok.output.contains("note: CKMessage.u → CKUser"), "\(ok.output)")
        let damaged = try seeded()
        _ = try Store(path: damaged).write { txn in try txn.tree("m:CKUser")?.put(key("u1"), [200, 1, 2]) }
        let bad = try runTool(tool, ["check", damaged])
        #expect(bad.status == 5, "\(bad.output)")
        #expect(bad.output.contains("problem: CKUser u1: the record does not decode"), "\(bad.output)")
    }
}

extension ObjectCheckTests {
    /// More problems than the report lists are counted whole, by the report and by `strata check`
    /// (which said "found 51 problems" for 60: the 50 listed and the line counting the rest).
    @Test func problemsBeyondTheListAreCounted() throws {
        let damaged = try seeded()
        _ = try Store(path: damaged).write { txn in
            for i in 0..<40 { _ = try txn.tree("m:CKMessage")?.put(key("m\(i)"), [200, 1, 2]) }
            for u in 0..<3 { _ = try txn.tree("m:CKUser")?.put(key("u\(u)"), [200, 1, 2]) }
        }
        let report = try StoredObjects.check(in: try Store(path: damaged), limit: 10)
        #expect(report.omittedProblems > 0 && report.problems.count == 11)
        let whole = try StoredObjects.check(in: try Store(path: damaged), limit: 10_000)
        #expect(whole.omittedProblems == 0)
        #expect(report.problemCount == whole.problems.count, "\(whole.problems.count)")
        guard let tool = toolExecutable() else {
            Issue.record("the strata executable was not found next to the test bundle")
            return
        }
        let bad = try runTool(tool, ["check", damaged])
        #expect(bad.status == 5)
        #expect(bad.output.contains("check found \(whole.problems.count) problems"), "\(bad.output.suffix(300))")
    }

    @Test func strataSchemaListsNestedFields() throws {
        guard let tool = toolExecutable() else {
            Issue.record("the strata executable was not found next to the test bundle")
            return
        }
        let out = try runTool(tool, ["schema", try seeded()])
        #expect(out.status == 0, "\(out.output)")
        for line in ["m.k", "m.sc", "m.p", "_id"] {
            #expect(out.output.contains("  \(line) "), "\(line): \(out.output)")
        }
        #expect(out.output.contains("primary key"), "\(out.output)")
    }
}

extension ObjectCheckTests {
    /// A record under another object's key (written straight into the record tree, as damage
    /// would leave it) is a problem naming the model, the key and the id the record holds, for
    /// every kind of key: a renamed key field, an optional (auto-increment) Int, a UUID, a Date,
    /// an enum. Reads by key refuse such a record (`recordUnderWrongKey`); the check said only
    /// that the field "does not match its key", without the id that is there instead.
    @Test func aRecordUnderAnotherObjectsKeyNamesTheKeyAndTheStoredID() throws {
        let path = databasePath()
        let (first, second) = (UUID(), UUID())
        let (early, late) = (Date(timeIntervalSince1970: 1_000), Date(timeIntervalSince1970: 2_000))
        do {
            let db = try Database(
                path: path, models: [CKUser.self, Keyed<Int?>.self, Keyed<UUID>.self, Keyed<Date>.self, Keyed<Colour>.self],
                options: StoreOptions(durability: .noSync))
            try db.write { tx in
                try tx.insert(CKUser(id: "a", name: "Ana"))
                try tx.insert(CKUser(id: "b", name: "Bea"))
                try tx.insert(Keyed<Int?>(id: nil, label: "one", next: nil))  // assigned 1
                try tx.insert(Keyed<Int?>(id: nil, label: "two", next: nil))  // assigned 2
                try tx.insert(Keyed(id: first, label: "x", next: nil))
                try tx.insert(Keyed(id: second, label: "y", next: nil))
                try tx.insert(Keyed(id: early, label: "x", next: nil))
                try tx.insert(Keyed(id: late, label: "y", next: nil))
                try tx.insert(Keyed(id: Colour.red, label: "x", next: nil))
                try tx.insert(Keyed(id: Colour.green, label: "y", next: nil))
            }
            db.close()
        }
        let healthy = try StoredObjects.check(in: try Store(path: path))
        #expect(healthy.problems.isEmpty, "\(healthy.problems)")
        // In every record tree, the first key (in key order) gets the second key's record.
        try Store(path: path).write { txn in
            for name in try txn.treeNames() where name.hasPrefix("m:") {
                let records = try #require(try txn.tree(name))
                let cursor = try records.cursor()
                #expect(try cursor.first())
                let firstKey = Array(cursor.key)
                #expect(try cursor.next())
                try records.put(firstKey, Array(cursor.value))
            }
        }
        let report = try StoredObjects.check(in: try Store(path: path))
        let (low, high) = first.uuidString < second.uuidString ? (first, second) : (second, first)
        let expected = [
            #"CKUser a: the record's _id field does not match its key: the record stored under key "a" holds the object with _id "b""#,
            "under key 1 holds the object with id 2",
            #"under key "\#(low.uuidString)" holds the object with id "\#(high.uuidString)""#,
            #"under key "1970-01-01T00:16:40Z" holds the object with id "1970-01-01T00:33:20Z""#,
            // Enum keys are ordered by raw value: "green" before "red".
            #"under key "green" holds the object with id "red""#,
        ]
        for text in expected {
            #expect(report.problems.contains { $0.contains(text) }, "\(text): \(report.problems)")
        }
        #expect(report.problems.count == expected.count, "\(report.problems)")

        guard let tool = toolExecutable() else {
            Issue.record("the strata executable was not found next to the test bundle")
            return
        }
        let checked = try runTool(tool, ["check", path])
        #expect(checked.status == 5, "\(checked.output)")
        #expect(checked.output.contains("problem: " + expected[0]), "\(checked.output)")
    }
}

/// Keys with control characters or line separators in `check`'s problems and notes: shown escaped,
/// so that every problem and note stays one line (a dangling reference to "a\nb" split a note).
@Suite struct ObjectCheckKeyTextTests {
    @Test func keysThatBreakLinesAreShownEscaped() throws {
        let path = databasePath()
        let odd = ["line\nbreak", "tab\there", "nul\u{0}", "sep\u{2028}arator", "del\u{7F}", "plain é"]
        do {
            let db = try Database(path: path, models: [Keyed<String>.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in
                for (i, key) in odd.enumerated() { try tx.insert(Keyed(id: key, label: "\(i)", next: Ref("missing " + key))) }
            }
            db.close()
        }
        let healthy = try StoredObjects.check(in: try Store(path: path))
        #expect(healthy.problems.isEmpty, "\(healthy.problems)")
        #expect(!healthy.notes.isEmpty)
        for note in healthy.notes { #expect(!note.contains { $0.isNewline }, "\(note.debugDescription)") }
        // Damage naming each key: every record moved under the next key.
        try Store(path: path).write { txn in
            let name = try #require(try txn.treeNames().first { $0.hasPrefix("m:") })
            let records = try #require(try txn.tree(name))
            var pairs: [([UInt8], [UInt8])] = []
            let cursor = try records.cursor()
            var more = try cursor.first()
            while more {
                pairs.append((Array(cursor.key), Array(cursor.value)))
                more = try cursor.next()
            }
            for i in pairs.indices { try records.put(pairs[i].0, pairs[(i + 1) % pairs.count].1) }
        }
        let report = try StoredObjects.check(in: try Store(path: path))
        #expect(report.problems.count >= odd.count, "\(report.problems)")
        for line in report.problems + report.notes { #expect(!line.contains { $0.isNewline }, "\(line.debugDescription)") }
        // Plain keys read as they are; the others as JSON strings.
        #expect(report.problems.contains { $0.contains("Keyed<String> plain é:") }, "\(report.problems)")
        #expect(report.problems.contains { $0.contains(#"Keyed<String> "line\nbreak":"#) }, "\(report.problems)")
    }
}

struct CKSmall: Model {
    var id: Int
    var small: Int8
}

extension ObjectCheckTests {
    /// A stored integer wider than its field (300 in an `Int8`), which the app's typed read
    /// refuses, is damage to the check and to `strata dump`: both read it as 300.
    @Test func anIntegerWiderThanItsFieldIsDamage() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [CKSmall.self])
            try db.write { tx in try tx.insert(CKSmall(id: 1, small: 100)) }
            db.close()
        }
        let store = try Store(path: path)
        try store.write { txn in
            let records = try #require(try txn.tree("m:CKSmall"))
            var key: [UInt8] = []
            KeyEncoding.appendInt(1, to: &key)
            var record = try #require(try records.get(key))
            // 100 is the zigzag varint C8 01; 300 is D8 04, as long.
            let at = try #require((0..<(record.count - 1)).first { record[$0] == 0xC8 && record[$0 + 1] == 0x01 })
            record[at] = 0xD8
            record[at + 1] = 0x04
            try records.put(key, record)
        }
        let report = try StoredObjects.check(in: store)
        #expect(report.problems.contains { $0.contains("does not fit Int8") }, "\(report.problems)")
        store.close()
        let db = try Database(path: path, models: [CKSmall.self])
        #expect(throws: StrataError.self) { _ = try db.object(CKSmall.self, key: 1) }
    }
}
