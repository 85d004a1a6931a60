import Foundation
import StrataStorage
import Testing

@testable import Strata

struct FWPerson: Model, Equatable {
    static let indexDescriptors: [IndexDescriptor<FWPerson>] = [.on(\.name), .unique(\.email), .fullText(\.bio)]
    var id: Int
    var name: String
    var email: String
    var bio: String
}

struct FWKeyed: Model, Equatable {
    var id: String
    var note: String
}

/// A write that fails leaves no trace: one that fails before it changes anything (a value too long
/// for its index, a key too long for the file, a duplicate) leaves the transaction usable; one that fails after
/// it began (an `insert(contentsOf:)` whose later object is refused) makes the transaction refuse
/// to commit, unless a savepoint undid it. Checked against the objects written and `check`.
struct FailedWriteTests {
    static let long = String(repeating: "x", count: 1_000)

    func person(_ id: Int, name: String = "ana", email: String? = nil, bio: String = "hello world") -> FWPerson {
        FWPerson(id: id, name: name, email: email ?? "p\(id)@example.com", bio: bio)
    }

    /// Every stored person, and the file checks clean (every record has its index entries).
    func stored(_ path: String) throws -> [FWPerson] {
        let db = try Database(path: path, models: [FWPerson.self, FWKeyed.self])
        defer { db.close() }
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
        return try db.objects(FWPerson.self).fetch()
    }

    func expectInvalidInput(_ mentioning: String, _ body: () throws -> Void) {
        do {
            try body()
            Issue.record("expected an invalidInput error mentioning \(mentioning)")
        } catch StrataError.invalidInput(let reason) {
            #expect(reason.contains(mentioning), "\(reason)")
        } catch {
            Issue.record("expected invalidInput mentioning \(mentioning), got \(error)")
        }
    }

    @Test func valuesTooLongForTheirIndexChangeNothingAndTheTransactionGoesOn() throws {
        let path = databasePath()
        let db = try Database(path: path, models: [FWPerson.self, FWKeyed.self])
        try db.write { tx in
            try tx.insert(person(1))
            expectInvalidInput("FWPerson.name") { try tx.insert(person(2, name: Self.long)) }
            expectInvalidInput("FWPerson.email") { try tx.insert(person(3, email: Self.long)) }
            // A long word is cut for the full-text index (FORMAT.md §8.5): nothing to refuse.
            try tx.insert(person(4, bio: "see " + Self.long))
            expectInvalidInput("FWPerson.name") { try tx.update(FWPerson.self, key: 1) { $0.name = Self.long } }
            expectInvalidInput("FWPerson.email") { try tx.upsert(person(1, email: Self.long)) }
            expectInvalidInput("primary key") { try tx.insert(FWKeyed(id: String(repeating: "k", count: 5_000), note: "")) }
            // The transaction is still usable, and sees exactly what succeeded.
            try tx.insert(person(5, name: "bo"))
            #expect(try tx.objects(FWPerson.self, sortedBy: [SortDescriptor(\.id)]).map(\.id) == [1, 4, 5])
        }
        #expect(try db.objects(FWPerson.self).filter(#Predicate { $0.name == "ana" }).fetch().map(\.id) == [1, 4])
        #expect(try db.objects(FWPerson.self).search(\.bio, "hello").fetchCount() == 2)
        db.close()
        #expect(try stored(path) == [person(1), person(4, bio: "see " + Self.long), person(5, name: "bo")])
    }

    @Test func aWriteThatFailedHalfwayCannotCommit() throws {
        let path = databasePath()
        let db = try Database(path: path, models: [FWPerson.self, FWKeyed.self])
        try db.write { tx in try tx.insert(person(1)) }
        do {
            try db.write { tx in
                // Objects 2 and 3 go in; the copy of 1 is refused: the batch is half done.
                #expect(throws: StrataError.self) { try tx.insert(contentsOf: [person(2), person(3), person(1)]) }
                // Every write after that is refused too, and so is the commit.
                expectInvalidInput("failed after it had begun") { try tx.insert(person(9)) }
            }
            Issue.record("the transaction committed after a half-done write")
        } catch StrataError.invalidInput(let reason) {
            #expect(reason.contains("nothing of it is committed"), "\(reason)")
        }
        #expect(try db.objects(FWPerson.self).fetch().map(\.id) == [1])
        db.close()
        #expect(try stored(path).map(\.id) == [1])
    }

    @Test func aSavepointUndoesAHalfDoneWriteAndTheTransactionGoesOn() throws {
        let path = databasePath()
        let db = try Database(path: path, models: [FWPerson.self, FWKeyed.self])
        try db.write { tx in
            try tx.insert(person(1))
            #expect(throws: StrataError.self) { try tx.savepoint { try tx.insert(contentsOf: [person(2), person(1)]) } }
            // A savepoint whose body caught the half-done write's error is undone as well.
            #expect(throws: StrataError.self) {
                try tx.savepoint { _ = try? tx.insert(contentsOf: [person(3), person(1)]) }
            }
            // A nested write joins as a savepoint: the same.
            #expect(throws: StrataError.self) {
                try db.write { inner in _ = try? inner.insert(contentsOf: [person(4), person(1)]) }
            }
            try tx.insert(person(5))
        }
        #expect(try db.objects(FWPerson.self).fetch().map(\.id) == [1, 5])
        db.close()
        #expect(try stored(path).map(\.id) == [1, 5])
    }

    /// A write that fails before changing anything, after a query inside the transaction applied
    /// the deferred index entries of earlier writes (bookkeeping, no change of its own), leaves
    /// the transaction usable: a `delete(where:)` whose predicate throws, an `update` whose
    /// closure reads through the transaction and refuses. Both made the commit fail, losing the
    /// earlier writes (found by the review of 2026-12-07).
    @Test func aFailureAfterAQueryAppliedDeferredEntriesLeavesTheTransactionUsable() throws {
        struct Refused: Error {}
        let path = databasePath()
        let db = try Database(path: path, models: [FWPerson.self, FWKeyed.self])
        try db.write { tx in
            try tx.insert(person(1, name: "n0"))
            #expect(throws: (any Error).self) { try tx.delete(FWPerson.self, where: #Predicate { 10 / ($0.id - 1) > 1 }) }
            try tx.insert(person(2))
            #expect(throws: Refused.self) {
                try tx.update(FWPerson.self, key: 1) { p in
                    if try tx.count(FWPerson.self) > 0 { throw Refused() }
                    p.name = "never"
                }
            }
            try tx.insert(person(3))
        }
        #expect(try db.objects(FWPerson.self).fetch().map(\.id) == [1, 2, 3])
        #expect(try db.object(FWPerson.self, key: 1)?.name == "n0")
        db.close()
        #expect(try stored(path).map(\.id) == [1, 2, 3])
    }

    /// An update whose closure makes a whole write of its own (an insert), then fails before
    /// the update changes anything — a unique violation, the closure's own error, a changed id —
    /// leaves the transaction usable: it was taken for a write half done, and the commit refused
    /// (the insert and every earlier write were lost).
    @Test(arguments: ["unique", "thrown", "id"]) func anUpdateWhoseClosureWroteThenFailedLeavesTheTransactionUsable(failure: String) throws {
        struct Refused: Error {}
        let db = try Database.inMemory(models: [FWPerson.self, FWKeyed.self])
        try db.write { tx in
            try tx.insert(person(1, email: "x@e"))
            try tx.insert(person(2, email: "y@e"))
            #expect(throws: (any Error).self) {
                try tx.update(FWPerson.self, key: 1) { p in
                    try tx.insert(FWKeyed(id: "audit", note: "tried"))
                    switch failure {
                    case "unique": p.email = "y@e"
                    case "thrown": throw Refused()
                    default: p.id = 9
                    }
                }
            }
            try tx.insert(person(3, email: "z@e"))
        }
        #expect(try db.objects(FWPerson.self).fetch().map(\.email) == ["x@e", "y@e", "z@e"])
        #expect(try db.object(FWKeyed.self, key: "audit") != nil)
        #expect(try db.objects(FWPerson.self).filter(#Predicate { $0.email == "x@e" }).fetch().map(\.id) == [1])
    }
}
