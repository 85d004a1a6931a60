import Testing
@testable import StrataStorage
import Foundation

private struct Rollback: Error {}

/// Savepoints against a model: nested units of a write transaction that fail and roll back on
/// their own, with page reuse, overflow values, tree creation and drops inside them.
@Suite struct SavepointTests {
    typealias Contents = [String: [[UInt8]: [UInt8]]]

    /// With `spilling`, transactions keep at most 64 pages in memory: pages spilled before a
    /// savepoint are changed and freed inside it, pages made inside it are spilled, changed and
    /// freed again, then rolled back or kept, at every depth.
    @Test(arguments: [false, true])
    func randomNestedSavepointsMatchModel(spilling: Bool) throws {
        let seed = UInt64(TestEnv.int("STRATA_SAVEPOINT_SEED", default: 0x5A7E_9014)) &+ (spilling ? 1 : 0)
        let commits = TestEnv.int("STRATA_SAVEPOINT_COMMITS", default: 120)
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: seed)
        var model: Contents = [:]
        var options = StoreOptions(durability: .noSync)
        if spilling { options.transactionMemory = 0 }
        var store = try Store(path: path, options: options)
        var held: ReadTransaction?
        var spills = 0
        var spillsInside = 0  // spills while a savepoint was open
        let names = ["a", "b", "c"]

        // One random operation on both the transaction and the model.
        func operate(_ txn: WriteTransaction, _ state: inout Contents) throws {
            let name = names[rng.below(names.count)]
            switch rng.below(100) {
            case 0..<3:
                try txn.dropTree(name)
                state[name] = nil
            case 3..<60:
                let key = bigEndianKey(UInt64(rng.below(400)))
                let size = rng.percent(5) ? rng.within(5_000...20_000) : rng.within(1...60)
                let value = rng.byteArray(size)
                try txn.createTree(name).put(key, value)
                state[name, default: [:]][key] = value
            default:
                let key = bigEndianKey(UInt64(rng.below(400)))
                if let tree = try txn.tree(name) {
                    let deleted = try tree.delete(key)
                    #expect(deleted == (state[name]?[key] != nil), "seed \(seed): delete \(key) in \(name)")
                    state[name]?[key] = nil
                }
            }
        }

        // A block of operations, with savepoints nested up to `depth` more levels.
        func block(_ txn: WriteTransaction, _ state: inout Contents, depth: Int) throws {
            for _ in 0..<rng.within(1...25) {
                if depth > 0 && rng.percent(15) {
                    var inner = state
                    let fails = rng.percent(40)
                    do {
                        try txn.savepoint {
                            let before = txn.spills
                            try block(txn, &inner, depth: depth - 1)
                            spillsInside += txn.spills - before
                            if fails { throw Rollback() }
                        }
                        state = inner
                    } catch is Rollback {
                        // the model keeps `state`
                    }
                } else {
                    try operate(txn, &state)
                }
            }
        }

        for round in 0..<commits {
            if rng.percent(10) { held = rng.percent(50) ? try store.beginRead() : nil }
            var next = model
            try store.write { txn in
                try block(txn, &next, depth: 3)
                spills += txn.spills
            }
            model = next
            let seen = try store.read { try snapshotContents($0) }
            if seen != model {
                // Name the first difference; the whole contents would bury it.
                let trees = Set(seen.keys).union(model.keys).sorted()
                let tree = trees.first { seen[$0] != model[$0] } ?? "?"
                let keys = Set((seen[tree] ?? [:]).keys).union((model[tree] ?? [:]).keys)
                let key = keys.first { seen[tree]?[$0] != model[tree]?[$0] }
                Issue.record(
                    "seed \(seed): round \(round): tree \(tree) differs from the model at key \(key.map { "\($0)" } ?? "-") (\(seen[tree]?.count ?? -1) entries, model \(model[tree]?.count ?? -1))"
                )
                return
            }
            if round % 40 == 39 {
                held = nil
                store.close()
                store = try Store(path: path, options: options)
            }
        }
        withExtendedLifetime(held) {}  // snapshots were held across commits up to here
        held = nil
        let report = try store.check()
        #expect(report.isOK, "seed \(seed): \(report.problems)")
        #expect(spilling ? spills > 20 : spills == 0, "seed \(seed): \(spills) spills")
        #expect(spilling ? spillsInside > 20 : spillsInside == 0, "seed \(seed): \(spillsInside) spills inside savepoints")
    }

    /// A large write inside one savepoint (an async write, a grouped writer's unit) keeps about
    /// `transactionMemory` in memory, as one outside a savepoint does: the pages it makes are
    /// spilled. Then a second one is rolled back after spilling, and a run of savepoints (a group
    /// of writers) keeps the bound too. The store reads back as written and checks clean.
    @Test func largeWritesInsideSavepointsSpill() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .noSync)
        options.transactionMemory = 0  // the smallest budget: 64 pages
        let store = try Store(path: path, options: options)
        let value = [UInt8](repeating: 7, count: 100)
        var inMemory = 0  // most pages held in memory at once
        func note(_ txn: WriteTransaction) { inMemory = max(inMemory, txn.pages.dirty.count + txn.pages.frozen.count) }
        _ = try store.write { txn in
            let tree = try txn.createTree("t")
            try txn.savepoint {
                for i in 0..<20_000 {
                    try tree.put(bigEndianKey(UInt64(i)), value)
                    if i % 500 == 0 { note(txn) }
                }
            }
            #expect(txn.spills > 5, "\(txn.spills) spills")
            let spilled = txn.spills
            _ = try? txn.savepoint {
                for i in 20_000..<40_000 { try tree.put(bigEndianKey(UInt64(i)), value) }
                for i in stride(from: 0, to: 20_000, by: 3) { _ = try tree.delete(bigEndianKey(UInt64(i))) }
                note(txn)
                throw Rollback()
            }
            #expect(txn.spills > spilled + 10, "\(txn.spills - spilled) spills in the rolled-back savepoint")
            for group in 0..<40 {
                try txn.savepoint {
                    for i in 0..<500 { try tree.put(bigEndianKey(UInt64(40_000 + group * 500 + i)), value) }
                }
                note(txn)
            }
        }
        // 20,000 entries of ~110 bytes fill ~600 leaves; the budget is 64 pages, plus branches
        // and the pages of the savepoint's first spill round.
        #expect(inMemory < 200, "\(inMemory) pages in memory at once")
        let count = try store.read { try $0.tree("t")?.count ?? -1 }
        #expect(count == 40_000)
        #expect(try store.read { try $0.tree("t")?.get(bigEndianKey(20_000)) } == nil)
        #expect(try store.read { try $0.tree("t")?.get(bigEndianKey(3)) } == value)
        let report = try store.check()
        #expect(report.isOK, "\(report.problems)")
    }

    /// A spill as a savepoint begins frees the buffers of pages a cursor or a value read before
    /// it points into, with no write before it that would have ended them: it ends them as a
    /// write does (found by the review of 2026-12-07 of the change above: reads of freed memory).
    @Test func aSpillAsASavepointBeginsEndsViews() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .noSync)
        options.transactionMemory = 0
        let store = try Store(path: path, options: options)
        _ = try store.write { txn in
            let t = try txn.createTree("t")
            // Over half the spill budget made, under all of it.
            var i: UInt64 = 0
            while txn.dirtySinceSpill <= txn.spillPages / 2 + 2 {
                try t.put(bigEndianKey(i), [UInt8](repeating: UInt8(i & 0xFF), count: 1000))
                i += 1
            }
            let spills = txn.spills
            try txn.savepoint {}  // its release counts the pages again
            #expect(txn.spills == spills)
            let cursor = try t.cursor()
            #expect(try cursor.first())
            let stamp = txn.changeCount
            try txn.savepoint {}  // spills as it begins
            #expect(txn.spills == spills + 1)
            #expect(txn.changeCount != stamp)
            #expect(throws: (any Error).self) { try cursor.next() }
        }
    }

    @Test func commitInsideSavepointThrows() throws {
        let store = try Store.inMemory()
        _ = try store.write { txn in
            #expect(throws: StorageError.savepointOpen) {
                try txn.savepoint { try txn.commit() }
            }
            try txn.createTree("t").put([1], [1])
        }
        #expect(try store.read { try $0.tree("t")?.get([1]) } == [1])
    }

    @Test func handleOpenedInsideRolledBackSavepointStaysCorrect() throws {
        let store = try Store.inMemory()
        _ = try store.write { txn in try txn.createTree("t").put([1], [1]) }
        _ = try store.write { txn in
            var kept: WriteTree?
            _ = try? txn.savepoint {
                let tree = try #require(try txn.tree("t"))
                kept = tree
                try tree.put([2], [2])
                try txn.createTree("new").put([9], [9])
                throw Rollback()
            }
            let tree = try #require(kept)
            #expect(try tree.get([2]) == nil)
            #expect(try tree.get([1]) == [1])
            try tree.put([3], [3])
            #expect(try txn.tree("new") == nil)
        }
        let contents = try store.read { try snapshotContents($0) }
        #expect(contents == ["t": [[1]: [1], [3]: [3]]])
    }

    /// A tree opened before a savepoint, dropped and created again inside it: after the rollback
    /// the handle of the re-created tree (a TreeState no longer in `trees`) still accepts writes.
    /// Those go to pages that commit writes but no tree references: lost writes, leaked pages.
    @Test(arguments: [false, true]) func recreatedTreeHandleOrphanedByRollback(reuse: Bool) throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        _ = try store.write { txn in try txn.createTree("t").put([1], [1]) }
        if reuse {
            // Pages on the free list, so that the re-created tree's root is an old page number.
            _ = try store.write { txn in
                let x = try txn.createTree("x")
                for i in 0..<2_000 { try x.put(bigEndianKey(UInt64(i)), [UInt8](repeating: 1, count: 50)) }
            }
            _ = try store.write { txn in try txn.dropTree("x") }
            _ = try store.write { txn in try txn.createTree("y").put([0], [0]) }
        }
        var wrote = false
        _ = try store.write { txn in
            _ = try txn.tree("t")  // opened before the savepoint
            var kept: WriteTree?
            _ = try? txn.savepoint {
                try txn.dropTree("t")
                let again = try txn.createTree("t")
                try again.put([2], [2])
                kept = again
                throw Rollback()
            }
            // Another tree allocates the page number the rolled-back tree's root had.
            try txn.createTree("u").put([5], [5])
            // A handle to a tree created inside a rolled-back savepoint stops working.
            let orphan = try #require(kept)
            do {
                for i in 0..<200 { try orphan.put([3, UInt8(i)], [UInt8](repeating: 7, count: 100)) }
                wrote = true
            } catch {
                #expect(isStorageError(error) { $0 == .treeNotFound("t") }, "\(error)")
            }
        }
        #expect(!wrote, "writes through the orphaned handle were accepted")
        #expect(try store.read { try $0.tree("t")?.get([3, 0]) } == nil)
        let u = try store.read { txn -> [[UInt8]] in
            var keys: [[UInt8]] = []
            try txn.tree("u")?.forEach { k, _ in
                keys.append(Array(k)); return true
            }
            return keys
        }
        #expect(u == [[5]], "tree u holds \(u.count) keys, written through another tree's handle")
        let report = try store.check()
        #expect(report.isOK, "\(report.problems.prefix(3))")
    }
}
