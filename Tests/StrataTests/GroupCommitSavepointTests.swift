import Testing
import Foundation
import Dispatch
@testable import Strata

private struct GroupMemo: Model, Equatable {
    static let indexes: [PartialKeyPath<GroupMemo> & Sendable] = [\.text]
    var id: Int
    var text: String
}
private struct Refusal: Error {}

/// A group whose failing writers drop whole models and whose nested writes fail: each failure is
/// undone alone, and the file checks clean.
@Suite struct GroupCommitSavepointTests {
    @Test func groupWithDeleteAllInAFailingEntryAndNestedWrites() async throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path); try? FileManager.default.removeItem(atPath: path + "-lock") }
        let db = try Database(path: path, models: [GroupMemo.self], options: StoreOptions(durability: .noSync))
        try await db.write { tx in for i in 0..<300 { try tx.insert(GroupMemo(id: 1000 + i, text: String(repeating: "x", count: 200) + "\(i)")) } }
        let results = await withTaskGroup(of: (Int, Bool).self) { group in
            for i in 0..<30 {
                group.addTask {
                    do {
                        try await db.write { tx in
                            try tx.insert(GroupMemo(id: i, text: "t\(i)"))
                            if i % 3 == 1 { _ = try tx.deleteAll(GroupMemo.self); try tx.insert(GroupMemo(id: 500 + i, text: "z")); throw Refusal() }
                            if i % 3 == 2 {
                                // nested sync write joins; its failure is undone alone
                                _ = try? db.write { inner in
                                    try inner.insert(GroupMemo(id: 700 + i, text: "n")); _ = try inner.deleteAll(GroupMemo.self); throw Refusal()
                                }
                                try db.run(DBWrite.insert(GroupMemo(id: 800 + i, text: "r")))
                            }
                        }
                        return (i, true)
                    } catch { return (i, false) }
                }
            }
            var out: [Int: Bool] = [:]
            for await (i, ok) in group { out[i] = ok }
            return out
        }
        for i in 0..<30 { #expect(results[i] == (i % 3 != 1), "writer \(i)") }
        let ids = Set(try db.objects(GroupMemo.self).fetch().map(\.id))
        var expected = Set(1000..<1300)
        for i in 0..<30 where i % 3 != 1 { expected.insert(i) }
        for i in 0..<30 where i % 3 == 2 { expected.insert(800 + i) }
        #expect(ids == expected)
        #expect(db.objects(GroupMemo.self).filter(#Predicate { $0.text == "z" }).count == 0)
        let report = try db.store.check()
        #expect(report.isOK, "\(report.problems.prefix(3))")
    }
}

private struct Tally: Model, Equatable {
    var id: Int
    var count: Int
}

/// Concurrent async writers against a model: each write inserts its own objects, bumps a shared
/// tally and sometimes fails after writing. The stored objects must be exactly those of the
/// writes that reported success, and the tally their number: group commit keeps each write
/// atomic on its own.
@Suite struct GroupCommitModelTests {
    @Test func concurrentWritesMatchTheModel() async throws {
        let seed: UInt64 = 0x6C0_77A1
        let tasks = 8
        let writesPerTask = ProcessInfo.processInfo.environment["STRATA_GROUP_WRITES"].flatMap { Int($0) } ?? 60
        let db = try Database.inMemory(models: [GroupMemo.self, Tally.self])
        try await db.write { tx in try tx.insert(Tally(id: 0, count: 0)) }
        let succeeded = await withTaskGroup(of: [Int].self) { group in
            for t in 0..<tasks {
                group.addTask {
                    var rng = SeededGenerator(base: SeededRandom(seed: seed &+ UInt64(t)))
                    var mine: [Int] = []
                    for i in 0..<writesPerTask {
                        let id = t * 10_000 + i
                        let fails = Int.random(in: 0..<100, using: &rng) < 25
                        let nested = Int.random(in: 0..<100, using: &rng) < 30
                        do {
                            try await db.write { tx in
                                try tx.insert(GroupMemo(id: id, text: "w\(id)"))
                                try tx.update(Tally.self, key: 0) { $0.count += 1 }
                                if nested {
                                    // A nested write that fails is undone alone; the write goes on.
                                    _ = try? db.write { inner in
                                        try inner.insert(GroupMemo(id: id + 5_000, text: "nested"))
                                        throw Refusal()
                                    }
                                }
                                if fails { throw Refusal() }
                            }
                            mine.append(id)
                        } catch {
                            #expect(error is Refusal, "seed \(seed): write \(id) failed with \(error)")
                        }
                    }
                    return mine
                }
            }
            var all: [Int] = []
            for await ids in group { all += ids }
            return all
        }
        let stored = try db.objects(GroupMemo.self).fetch().map(\.id)
        let extra = Set(stored).subtracting(succeeded).sorted()
        let missing = Set(succeeded).subtracting(stored).sorted()
        #expect(extra.isEmpty, "seed \(seed): \(extra.count) objects of failed writes stored, e.g. \(extra.prefix(5))")
        #expect(missing.isEmpty, "seed \(seed): \(missing.count) objects of successful writes missing, e.g. \(missing.prefix(5))")
        #expect(try db.object(Tally.self, key: 0)?.count == succeeded.count, "seed \(seed): the tally counts failed writes")
    }
}
