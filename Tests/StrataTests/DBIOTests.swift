import Testing
import Foundation
import Dispatch
@testable import Strata

struct Member: Model, Equatable {
    static let indexes: [PartialKeyPath<Member> & Sendable] = [\.name, \.age]
    static let uniqueIndexes: [PartialKeyPath<Member> & Sendable] = [\.email]
    var id: String
    var name: String
    var email: String
    var age: Int
}

struct Badge: Model, Equatable {
    var id: Int?  // auto-increment
    var owner: String
}

private func member(_ id: String, _ name: String, age: Int) -> Member {
    Member(id: id, name: name, email: "\(id)@x", age: age)
}

/// A value handed back from another thread. `@unchecked Sendable`: every access holds `lock`.
private final class SharedCount: @unchecked Sendable {
    private let lock = NSLock()
    private var stored = 0
    func set(_ value: Int) { lock.withLock { stored = value } }
    var value: Int { lock.withLock { stored } }
}

/// An error of the caller's own, to check that closures' errors reach `run` unchanged.
private struct Custom: Error, Equatable {}

struct DBIOTests {
    func seeded() throws -> Database {
        let db = try Database.inMemory(models: [Member.self, Badge.self])
        try db.write { tx in
            try tx.insert(contentsOf: [member("a", "Ana", age: 30), member("b", "Ben", age: 17), member("c", "Cy", age: 45)])
        }
        return db
    }

    func version(_ db: Database) throws -> UInt64 { try db.snapshot().version }

    // MARK: Mode typing (compile time: each annotation is the type the overloads must produce)

    @Test func modeTyping() throws {
        let db = try seeded()
        let readA: DBRead<Member?> = DBRead.object(Member.self, key: "a")
        let count: DBRead<Int> = DBRead.count(Member.self)
        let insertD: DBWrite<Member> = DBWrite.insert(member("d", "Dee", age: 20))

        // just, in both modes, from the bare type alias and as an implicit member.
        let r0: DBRead<Int> = DBRead.just(1)
        let w0: DBWrite<String> = DBWrite.just("x")
        let r0b: DBRead<Int> = .just(2)

        // map keeps the mode.
        let r1: DBRead<String?> = readA.map { $0?.name }
        let w1: DBWrite<String> = insertD.map { $0.name }

        // flatMap, all four combinations, one-expression and multi-statement closures, no context.
        let rr1 = readA.flatMap { _ in DBRead.count(Member.self) }
        let rr2 = readA.flatMap { found in
            let age = found?.age ?? 0
            return DBRead.count(Member.self, where: #Predicate { $0.age < age })
        }
        let rw1 = readA.flatMap { found in DBWrite.update(Member.self, key: found?.id ?? "a") { $0.age += 1 } }
        let rw2 = readA.flatMap { found in
            let key = found?.id ?? "a"
            return DBWrite.delete(Member.self, key: key)
        }
        let wr1 = insertD.flatMap { stored in DBRead.object(Member.self, key: stored.id) }
        let wr2 = insertD.flatMap { stored in
            let key = stored.id
            return DBRead.count(Member.self, where: #Predicate { $0.id == key })
        }
        let ww1 = insertD.flatMap { stored in DBWrite.update(Member.self, key: stored.id) { $0.age += 1 } }
        let ww2 = insertD.flatMap { stored in
            var changed = stored
            changed.name = "Dee!"
            return DBWrite.upsert(changed)
        }
        let _: DBRead<Int> = rr1
        let _: DBRead<Int> = rr2
        let _: DBWrite<Member> = rw1
        let _: DBWrite<Bool> = rw2
        let _: DBWrite<Member?> = wr1
        let _: DBWrite<Int> = wr2
        let _: DBWrite<Member> = ww1
        let _: DBWrite<Member> = ww2
        // Implicit members in a closure: the annotation picks the overload.
        let rImplicit: DBRead<Int> = readA.flatMap { _ in .just(7) }
        let wImplicit: DBWrite<Int> = insertD.flatMap { _ in .just(7) }
        let wImplicit2: DBWrite<Int> = insertD.flatMap { _ in .count(Member.self) }
        // Without an annotation, a member that exists in both modes keeps the narrower one.
        let rImplicit2 = readA.flatMap { _ in .just(7) }
        let rImplicit3 = readA.flatMap { found in
            let age = found?.age ?? 0
            return .just(age)
        }
        let rImplicit4 = readA.zip(.just(1))
        let wImplicit3 = insertD.flatMap { _ in .count(Member.self) }
        let wImplicit4 = insertD.then(.just(1))
        let _: DBRead<Int> = rImplicit2
        let _: DBRead<Int> = rImplicit3
        let _: DBRead<(Member?, Int)> = rImplicit4
        let _: DBWrite<Int> = wImplicit3
        let _: DBWrite<Int> = wImplicit4

        // zip and then, all four combinations.
        let zrr = readA.zip(count)
        let zrw = readA.zip(insertD)
        let zwr = insertD.zip(count)
        let zww = insertD.zip(DBWrite.delete(Member.self, key: "b"))
        let _: DBRead<(Member?, Int)> = zrr
        let _: DBWrite<(Member?, Member)> = zrw
        let _: DBWrite<(Member, Int)> = zwr
        let _: DBWrite<(Member, Bool)> = zww
        let trr: DBRead<Int> = readA.then(count)
        let trw: DBWrite<Member> = readA.then(insertD)
        let twr: DBWrite<Int> = insertD.then(count)
        let tww: DBWrite<Bool> = insertD.then(DBWrite.delete(Member.self, key: "b"))

        // Static zip and sequence; a read widened to sit among writes.
        let z2: DBRead<(Member?, Int)> = DBRead.zip(readA, count)
        let z3: DBRead<(Int, Int, Member?)> = DBRead.zip(.count(Member.self), .count(Badge.self), .object(Member.self, key: "c"))
        let zw: DBWrite<(Member, Int)> = DBWrite.zip(insertD, count.asWrite)
        let sr: DBRead<[Int]> = DBRead.sequence([count, count.map { $0 * 2 }])
        let sw: DBWrite<[Int]> = DBWrite.sequence([count.asWrite, DBWrite.delete(Member.self, where: #Predicate { $0.age < 18 })])
        let wide: DBWrite<Member?> = readA.asWrite
        let _: DBWrite<Void> = insertD.discardingResult()

        // Custom operations.
        let customRead = DBRead { reader in try reader.count(Member.self) }
        let customRead2 = DBRead { reader in
            let all = try reader.objects(Member.self, sortedBy: [SortDescriptor(\.age)])
            return all.map(\.name)
        }
        let customWrite = DBWrite { tx in try tx.delete(Member.self, key: "zz") }
        let _: DBRead<Int> = customRead
        let _: DBRead<[String]> = customRead2
        let _: DBWrite<Bool> = customWrite

        // run's result types follow the composition's.
        let _: Int = try db.run(r0)
        let _: String = try db.run(w0)
        #expect(try db.run(r0b) == 2)
        #expect(try db.run(r1) == "Ana")
        #expect(try db.run(rr1) == 3)
        #expect(try db.run(rr2) == 1)  // Ben is under 30
        #expect(try db.run(rImplicit) == 7)
        #expect(try db.run(zrr) == (member("a", "Ana", age: 30), 3))
        #expect(try db.run(trr) == 3)
        #expect(try db.run(z2).1 == 3)
        #expect(try db.run(z3) == (3, 0, member("c", "Cy", age: 45)))
        #expect(try db.run(sr) == [3, 6])
        #expect(try db.run(customRead) == 3)
        #expect(try db.run(customRead2) == ["Ben", "Ana", "Cy"])
        #expect(try db.run(wide) == member("a", "Ana", age: 30))
        #expect(try db.run(customWrite) == false)
        #expect(try db.run(rw1).age == 31)
        // Each of these inserts Dee; remove her between runs.
        let reset = DBWrite.delete(Member.self, key: "d")
        #expect(try db.run(w1) == "Dee")
        try db.run(reset)
        #expect(try db.run(wr1)?.name == "Dee")
        try db.run(reset)
        #expect(try db.run(wr2) == 1)
        try db.run(reset)
        #expect(try db.run(ww1).age == 21)
        try db.run(reset)
        #expect(try db.run(ww2).name == "Dee!")
        try db.run(reset)
        #expect(try db.run(wImplicit) == 7)
        try db.run(reset)
        #expect(try db.run(wImplicit2) == 4)  // sees its own insert
        try db.run(reset)
        #expect(try db.run(zwr).1 == 4)
        try db.run(reset)
        #expect(try db.run(twr) == 4)
        try db.run(reset)
        #expect(try db.run(zw).1 == 4)
        try db.run(reset)
        #expect(try db.run(zrw).0?.age == 31)
        try db.run(reset)
        #expect(try db.run(trw).id == "d")
        try db.run(reset)
        #expect(try db.run(rw2) == true)  // deletes Ana
        #expect(try db.run(zww) == (member("d", "Dee", age: 20), true))  // Dee back, Ben gone
        try db.run(reset)
        #expect(try db.run(tww) == false)  // Ben already gone
        #expect(try db.run(sw) == [2, 0])
        #expect(try db.run(DBRead.objects(Member.self)).map(\.id) == ["c", "d"])
    }

    // MARK: Transactions

    /// A read-typed operation joined to a write is handed a reader, not the transaction: cast
    /// back, it wrote outside any savepoint, and its throw did not undo the write (review of
    /// 2026-12-07). It still reads the transaction's own writes.
    @Test func aReadJoinedToAWriteCannotWrite() throws {
        let db = try seeded()
        let sneaky = DBRead<Int> { reader in
            if let tx = reader as? Transaction { try tx.insert(member("z", "Zed", age: 1)) }
            #expect(!(reader is Transaction))
            throw Custom()
        }
        let sees = DBRead<Member?> { reader in try reader.object(Member.self, key: "d") }
        let seen = try db.write { tx in
            _ = try? tx.run(sneaky)
            try tx.insert(member("d", "Di", age: 20))
            return try tx.run(sees)
        }
        #expect(seen?.name == "Di")
        #expect(try db.object(Member.self, key: "z") == nil)
    }

    /// Nor through reflection: the reader's stored transaction is not among its children.
    @Test func aReadJoinedToAWriteCannotReachItsTransactionByReflection() throws {
        let db = try seeded()
        let sneaky = DBRead<Int> { reader in
            let found = Mirror(reflecting: reader).descendant("tx") as? Transaction
            #expect(found == nil)
            if let tx = found { try tx.insert(member("z", "Zed", age: 1)) }
            throw Custom()
        }
        try db.write { tx in _ = try? tx.run(sneaky) }
        #expect(try db.object(Member.self, key: "z") == nil)
    }

    @Test func oneTransactionPerRun() throws {
        let db = try seeded()
        let before = try version(db)
        let both = DBWrite.insert(member("d", "Dee", age: 20)).then(DBWrite.insert(member("e", "Eve", age: 21)))
        let stored = try db.run(both, durability: .noSync)
        #expect(stored.id == "e")
        #expect(try version(db) == before + 1)
        #expect(try db.run(DBRead.count(Member.self)) == 5)
        // A run of only reads commits nothing.
        _ = try db.run(DBRead.count(Member.self).zip(DBRead.objects(Member.self)))
        #expect(try version(db) == before + 1)
    }

    @Test func failureInTheMiddleRollsBackTheWhole() throws {
        let db = try seeded()
        let before = try version(db)
        let io = DBWrite.insert(member("d", "Dee", age: 20))
            .then(DBWrite.insert(member("a", "Again", age: 1)))  // duplicate key
            .then(DBWrite.insert(member("e", "Eve", age: 21)))
        #expect(throws: StrataError.duplicateKey(model: "Member", key: "a")) { try db.run(io) }
        #expect(try version(db) == before)
        #expect(try db.run(DBRead.objects(Member.self)).map(\.id) == ["a", "b", "c"])
        #expect(try db.object(Member.self, key: "a")?.name == "Ana")

        // A caller's own error in a custom step rolls back too, and arrives unchanged.
        let custom = DBWrite.delete(Member.self, where: #Predicate { $0.age > 0 }).then(DBWrite<Void> { _ in throw Custom() })
        #expect(throws: Custom()) { try db.run(custom) }
        #expect(try db.run(DBRead.count(Member.self)) == 3)
        #expect(try version(db) == before)
    }

    @Test func nestedRunsJoinTheOpenWrite() throws {
        let db = try seeded()
        let before = try version(db)
        try db.write { tx in
            try tx.insert(member("d", "Dee", age: 20))
            // A read run inside the write joins it and sees its writes.
            #expect(try db.run(DBRead.count(Member.self)) == 4)
            #expect(try db.run(DBRead.object(Member.self, key: "d"))?.name == "Dee")
            // A write run joins it: no second transaction (which would throw nestedWrite).
            try db.run(DBWrite.insert(member("e", "Eve", age: 21)))
            try tx.run(DBWrite.update(Member.self, key: "e") { $0.age = 22 })
            #expect(try tx.run(DBRead.object(Member.self, key: "e"))?.age == 22)
            // A run nested in a run's custom step joins the same transaction as well.
            let nested = DBWrite { _ in try db.run(DBWrite.insert(member("f", "Fay", age: 23))) }
            try db.run(nested)
            #expect(try tx.count(Member.self) == 6)
            // Another thread sees nothing of the write yet. (A `DispatchQueue.sync` would not do:
            // it runs the block on this thread, which is the writer, so its runs would join.)
            let outsideCount = SharedCount()
            let done = DispatchSemaphore(value: 0)
            Thread {
                outsideCount.set((try? db.run(DBRead.count(Member.self))) ?? -1)
                done.signal()
            }.start()
            #expect(done.wait(timeout: .now() + 120) == .success)
            #expect(outsideCount.value == 3)
        }
        #expect(try version(db) == before + 1)
        #expect(try db.run(DBRead.count(Member.self)) == 6)

        // A joined run's writes go when the outer write rolls back.
        #expect(throws: Custom()) {
            try db.write { _ in
                try db.run(DBWrite.deleteAll(Member.self))
                throw Custom()
            }
        }
        #expect(try db.run(DBRead.count(Member.self)) == 6)
        #expect(try version(db) == before + 1)
    }

    @Test func aJoinedCompositionThatFailsIsUndoneAlone() throws {
        let db = try seeded()
        let version = try db.snapshot().version
        let failing = DBWrite.insert(member("d", "Di", age: 20)).then(DBWrite.insert(member("a", "dup", age: 1)))
        try db.write { tx in
            try tx.insert(member("e", "Eve", age: 50))
            #expect(throws: StrataError.duplicateKey(model: "Member", key: "a")) { try db.run(failing) }
            #expect(throws: StrataError.duplicateKey(model: "Member", key: "a")) { try tx.run(failing) }
            #expect(try tx.object(Member.self, key: "d") == nil, "the composition's first insert is undone")
            try tx.insert(member("f", "Fay", age: 60))
        }
        #expect(try db.snapshot().version == version + 1)
        #expect(try db.run(DBRead.objects(Member.self, sortedBy: [SortDescriptor(\.id)])).map(\.id) == ["a", "b", "c", "e", "f"])
    }

    @Test func asyncRuns() async throws {
        let db = try seeded()
        let stored = try await db.run(DBWrite.insert(member("d", "Di", age: 20)).zip(DBRead.count(Member.self, where: nil)))
        #expect(stored.0.id == "d" && stored.1 == 4)
        let adults = try await db.run(DBRead.count(Member.self, where: #Predicate { $0.age >= 18 }))
        #expect(adults == 3)
        await #expect(throws: StrataError.duplicateKey(model: "Member", key: "a")) {
            try await db.run(DBWrite.insert(member("x", "X", age: 1)).then(DBWrite.insert(member("a", "dup", age: 1))))
        }
        #expect(try await db.run(DBRead.object(Member.self, key: "x")) == nil)
    }

    @Test func readRunsBesideAnOpenWriter() throws {
        let db = try seeded()
        let committed = try version(db)
        let inside = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        let writer = Thread {
            _ = try? db.write { tx in
                try tx.insert(member("w", "Writer", age: 99))
                inside.signal()
                // The guard: a read that wrongly waited for the writer lock is freed after 10 s,
                // so a bug fails the time check below instead of hanging the suite.
                _ = release.wait(timeout: .now() + 120)
            }
            finished.signal()
        }
        writer.start()
        #expect(inside.wait(timeout: .now() + 120) == .success)

        let start = Date()
        let io = DBRead.object(Member.self, key: "w")
            .zip(DBRead.count(Member.self))
            .zip(DBRead { _ in db.store.isWritingOnCurrentThread })
        let ((open, count), holdsWriter) = try db.run(io)
        let elapsed = Date().timeIntervalSince(start)
        release.signal()
        #expect(elapsed < 5)
        #expect(open == nil)  // the open write is not visible
        #expect(count == 3)  // the last commit is
        #expect(holdsWriter == false)
        #expect(try db.snapshot().version >= committed)
        #expect(finished.wait(timeout: .now() + 120) == .success)
        #expect(try db.run(DBRead.count(Member.self)) == 4)
    }

    @Test func aReadSeesOneCommitThroughout() throws {
        let db = try seeded()
        // Between the two counts another thread commits; the read stays on its snapshot.
        let io = DBRead.count(Member.self)
            .zip(
                DBRead { _ in
                    let done = DispatchSemaphore(value: 0)
                    let other = Thread {
                        _ = try? db.run(DBWrite.insert(member("x", "Xi", age: 1)))
                        done.signal()
                    }
                    other.start()
                    return done.wait(timeout: .now() + 120) == .success
                }
            )
            .zip(DBRead.count(Member.self))
        let ((first, committed), second) = try db.run(io)
        #expect(committed)
        #expect(first == 3)
        #expect(second == 3)
        #expect(try db.run(DBRead.count(Member.self)) == 4)
    }

    // MARK: Ready-made operations

    @Test func readyMadeReads() throws {
        let db = try seeded()
        #expect(try db.run(DBRead.object(Member.self, key: "b")) == member("b", "Ben", age: 17))
        #expect(try db.run(DBRead.object(Member.self, key: "zz")) == nil)
        let adults = DBRead.objects(Member.self, where: #Predicate { $0.age >= 18 }, sortedBy: [SortDescriptor(\.name, order: .reverse)])
        #expect(try db.run(adults).map(\.id) == ["c", "a"])
        #expect(try db.run(DBRead.objects(Member.self, sortedBy: [SortDescriptor(\.age)])).map(\.id) == ["b", "a", "c"])
        #expect(try db.run(DBRead.objects(Member.self, where: #Predicate { $0.name.starts(with: "C") })).map(\.id) == ["c"])
        #expect(try db.run(DBRead.count(Member.self)) == 3)
        #expect(try db.run(DBRead.count(Member.self, where: #Predicate { $0.age < 18 })) == 1)
        // The same reads through a transaction.
        let (inTransaction, minors) = try db.write { tx in
            (try tx.run(adults).map(\.id), try tx.run(DBRead.count(Member.self, where: #Predicate { $0.age < 18 })))
        }
        #expect(inTransaction == ["c", "a"])
        #expect(minors == 1)
        // ObjectReader's short forms on both readers.
        let snapshot = try db.snapshot()
        #expect(try snapshot.objects(Member.self, where: nil).count == 3)
        #expect(try snapshot.count(Member.self) == 3)
        #expect(snapshot.objects(Member.self).count == 3)  // still the lazy Results
    }

    @Test func readyMadeWrites() throws {
        let db = try seeded()
        #expect(try db.run(DBWrite.insert(member("d", "Dee", age: 20))) == member("d", "Dee", age: 20))
        let many = try db.run(DBWrite.insert(contentsOf: [member("e", "Eve", age: 21), member("f", "Fay", age: 22)]))
        #expect(many.map(\.id) == ["e", "f"])
        let badge = try db.run(DBWrite.insert(Badge(id: nil, owner: "a")))
        #expect(badge.id == 1)  // the stored object, key assigned

        #expect(try db.run(DBWrite.upsert(member("g", "Gus", age: 5))).id == "g")  // inserts
        #expect(try db.run(DBWrite.upsert(member("g", "Gus", age: 6))).age == 6)  // replaces
        #expect(try db.object(Member.self, key: "g")?.age == 6)

        #expect(try db.run(DBWrite.update(Member.self, key: "a") { $0.age += 1 }).age == 31)
        #expect(try db.object(Member.self, key: "a")?.age == 31)
        #expect(throws: StrataError.notFound(model: "Member", key: "zz")) {
            try db.run(DBWrite.update(Member.self, key: "zz") { $0.age += 1 })
        }

        #expect(try db.run(DBWrite.delete(Member.self, key: "g")) == true)
        #expect(try db.run(DBWrite.delete(Member.self, key: "g")) == false)
        #expect(try db.run(DBWrite.delete(Member.self, where: #Predicate { $0.age < 21 })) == 2)  // Ben, Dee
        #expect(try db.run(DBRead.objects(Member.self)).map(\.id) == ["a", "c", "e", "f"])
        #expect(throws: StrataError.uniqueViolation(model: "Member", field: "email", value: "a@x")) {
            try db.run(DBWrite.upsert(Member(id: "h", name: "Hal", email: "a@x", age: 1)))
        }
        #expect(try db.run(DBWrite.deleteAll(Member.self)) == 4)
        #expect(try db.run(DBRead.count(Member.self)) == 0)
    }

    @Test func customOperations() throws {
        let db = try seeded()
        let names = DBRead { reader in
            try reader.objects(Member.self, where: #Predicate { $0.age >= 18 }, sortedBy: [SortDescriptor(\.name)]).map(\.name)
        }
        #expect(try db.run(names) == ["Ana", "Cy"])
        let birthdays = DBWrite { tx in
            var changed = 0
            for adult in try tx.objects(Member.self, where: #Predicate { $0.age >= 18 }) {
                try tx.update(Member.self, key: adult.id) { $0.age += 1 }
                changed += 1
            }
            return changed
        }
        let io = birthdays.zip(DBRead { reader in try reader.objects(Member.self, sortedBy: [SortDescriptor(\.age)]).map(\.age) })
        let (changed, ages) = try db.run(io)
        #expect(changed == 2)
        #expect(ages == [17, 31, 46])  // the read saw the write before it
        // Built once, run again: a DBIO is a description, not a result.
        #expect(try db.run(io).1 == [17, 32, 47])
    }

    @Test func errorsAreTyped() throws {
        let db = try seeded()
        #expect(throws: Custom()) { try db.run(DBRead<Int> { _ in throw Custom() }) }
        db.close()
        #expect(throws: StrataError.databaseClosed) { try db.run(DBRead.count(Member.self)) }
        #expect(throws: StrataError.databaseClosed) { try db.run(DBWrite.insert(member("d", "Dee", age: 1))) }
    }
}
