import Testing
@testable import StrataStorage
import Foundation
import Synchronization

/// The public surface of `Store`: in-memory stores, page sizes, durability, abort, nested writes,
/// the tree catalog, copies and compaction, the append fast path, closing and stats.
@Suite struct StoreAPITests {
    /// `delete(_:inspectingValue:)` shows the value (inline or in overflow pages) before removing
    /// it; a throw from the inspector leaves the tree and the file exactly as they were, and an
    /// inspector that writes (even to the same tree, splitting its pages) makes it look again.
    /// Tree names that Swift's `String` equality calls equal ("\u{E9}", "e\u{301}") are two trees
    /// (the catalog keys names by their bytes): a write transaction took one for the other, the
    /// second's writes went into the first, and `treeNames()` listed one (review of 2026-12-07).
    @Test func canonicallyEquivalentTreeNamesAreTwoTrees() throws {
        let store = try Store.inMemory()
        let (precomposed, decomposed) = ("\u{E9}", "e\u{301}")
        _ = try store.write { txn in
            try txn.createTree(precomposed).put([1], [1])
            try txn.createTree(decomposed).put([2], [2])
            #expect(try txn.treeNames().count == 2)
            #expect(try txn.tree(decomposed)?.get([1]) == nil)
        }
        try store.read { (txn) throws -> Void in
            #expect(try txn.tree(precomposed)?.get([1]) == [1])
            #expect(try txn.tree(precomposed)?.get([2]) == nil)
            #expect(try txn.tree(decomposed)?.get([2]) == [2])
        }
        _ = try store.write { txn in
            _ = try txn.tree(precomposed)
            #expect(try txn.tree(decomposed)?.get([2]) == [2])
            #expect(try txn.dropTree(decomposed))
            #expect(try txn.treeNames() == [precomposed])
        }
        #expect(try store.read { try $0.tree(precomposed)?.get([1]) } == [1])
    }

    /// An idle delay under 1 ms made the background compaction thread spin (it sleeps that long
    /// between looks): refused when the store opens (review of 2026-12-07).
    @Test func anIdleDelayUnderAMillisecondIsRefused() throws {
        for delay: Duration in [.zero, .microseconds(999), .milliseconds(-5)] {
            var options = StoreOptions(durability: .noSync)
            options.compaction.idleDelay = delay
            #expect(throws: StorageError.self) { _ = try Store.inMemory(options: options) }
        }
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = .milliseconds(1)
        _ = try Store.inMemory(options: options)
    }

    /// A cursor of a write transaction kept past its end (abort, or the commit) read the dirty
    /// buffers the end freed (review of 2026-12-07): it now throws.
    @Test func aCursorKeptPastItsWriteTransactionThrows() throws {
        let store = try Store.inMemory()
        var kept: Cursor?
        _ = try store.write { txn in
            let t = try txn.createTree("t")
            for i in 0..<50 { try t.put(bigEndianKey(UInt64(i)), [UInt8](repeating: 1, count: 60)) }
            let cursor = try t.cursor()
            #expect(try cursor.first())
            kept = try t.cursor()
            _ = try kept?.first()
            txn.abort()
            #expect(throws: (any Error).self) { try cursor.next() }
        }
        _ = try store.write { txn in
            let t = try txn.createTree("t")
            for i in 0..<50 { try t.put(bigEndianKey(UInt64(i)), [UInt8](repeating: 2, count: 60)) }
            kept = try t.cursor()
            _ = try kept?.first()
        }
        #expect(throws: (any Error).self) { try kept?.next() }
    }

    @Test func deleteShowsTheValueFirst() throws {
        struct Refused: Error {}
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        var model: [[UInt8]: [UInt8]] = [:]
        try store.write { txn in
            let t = try txn.createTree("t")
            for i in 0..<3000 {
                let value = [UInt8](repeating: UInt8(i & 0xFF), count: i % 97 == 0 ? 9000 : 1 + i % 40)
                try t.put(bigEndianKey(UInt64(i)), value)
                model[bigEndianKey(UInt64(i))] = value
            }
        }
        try store.write { txn in
            let t = try #require(try txn.tree("t"))
            for i in stride(from: 0, to: 3000, by: 3) {
                let key = bigEndianKey(UInt64(i))
                var seen: [UInt8]?
                let deleted = try key.withUnsafeBytes { k in try t.delete(k) { seen = Array($0) } }
                #expect(deleted && seen == model[key], "key \(i)")
                model[key] = nil
                // Refused: still there, unchanged.
                let next = bigEndianKey(UInt64(i + 1))
                #expect(throws: Refused.self) { try next.withUnsafeBytes { k in try t.delete(k) { _ in throw Refused() } } }
                #expect(try t.get(next) == model[next])
            }
            var called = false
            #expect(try !Array([9, 9, 9]).withUnsafeBytes { k in try t.delete(k) { _ in called = true } })
            #expect(!called, "a missing key shows nothing")
            // An inspector that writes: the key is looked for again (and gone if it removed it).
            for i in stride(from: 2, to: 3000, by: 30) {
                let key = bigEndianKey(UInt64(i))
                let extra = bigEndianKey(UInt64(100_000 + i))
                let deleted = try key.withUnsafeBytes { k in
                    try t.delete(k) { _ in
                        for j in 0..<40 { try t.put(bigEndianKey(UInt64(200_000 + i * 40 + j)), [UInt8](repeating: 7, count: 90)) }
                        try t.put(extra, [1])
                    }
                }
                #expect(deleted, "key \(i)")
                model[key] = nil
                model[extra] = [1]
                for j in 0..<40 { model[bigEndianKey(UInt64(200_000 + i * 40 + j))] = [UInt8](repeating: 7, count: 90) }
                let next = bigEndianKey(UInt64(i + 3))
                let removedTwice = try next.withUnsafeBytes { k in try t.delete(k) { _ in _ = try t.delete(next) } }
                #expect(!removedTwice, "key \(i + 3): the inspector removed it")
                model[next] = nil
            }
            #expect(t.count == model.count)
        }
        // An inspector that aborts the transaction: nothing more is written.
        #expect(throws: StorageError.transactionFinished) {
            try store.write { txn in
                let t = try #require(try txn.tree("t"))
                try bigEndianKey(1).withUnsafeBytes { k in _ = try t.delete(k) { _ in txn.abort() } }
            }
        }
        #expect(try contents(of: store) == ["t": model])
        let report = try store.check()
        #expect(report.isOK, "\(report.problems.prefix(4).map(\.description))")
    }

    /// An inspector that only searches — a delete of an absent key, an insert of a present one, in
    /// this tree or another — records the path of its own search without changing anything: the
    /// delete must not then follow that path (it removed a child of the root, or linked a copy of
    /// our leaf in place of another leaf).
    @Test(arguments: ["other tree, absent delete", "other tree, present insert", "same tree, absent delete", "same tree, present insert"])
    func anInspectorsSearchDoesNotRedirectTheDelete(_ inspector: String) throws {
        let store = try Store.inMemory()
        var model: [[UInt8]: [UInt8]] = [:]
        try store.write { txn in
            let t = try txn.createTree("t")
            for i in 0..<2_000 {
                try t.put(bigEndianKey(UInt64(i)), [UInt8](repeating: UInt8(i & 0xFF), count: 40))
                model[bigEndianKey(UInt64(i))] = [UInt8](repeating: UInt8(i & 0xFF), count: 40)
            }
            // A one-leaf tree (an empty path) and a deeper one.
            try txn.createTree("u").put([1], [1])
        }
        try store.write { txn in
            let t = try #require(try txn.tree("t")), u = try #require(try txn.tree("u"))
            for victim in [UInt64(0), 700, 1_999] {
                let key = bigEndianKey(victim)
                let deleted = try key.withUnsafeBytes { k in
                    try t.delete(k) { _ in
                        switch inspector {
                        case "other tree, absent delete": _ = try u.delete([9])
                        case "other tree, present insert": _ = try u.insert([1], [2])
                        case "same tree, absent delete": _ = try t.delete(bigEndianKey(victim < 1_000 ? 5_000 : 0) + [0])
                        default: _ = try t.insert(bigEndianKey(victim < 1_000 ? 1_500 : 10), [0])
                        }
                    }
                }
                #expect(deleted)
                model[key] = nil
                #expect(t.count == model.count, "after deleting \(victim)")
            }
            for (key, value) in model { #expect(try t.get(key) == value, "key \(key)") }
            #expect(try u.get([1]) == [1])
        }
        #expect(try contents(of: store)["t"] == model)
        let report = try store.check()
        #expect(report.isOK, "\(report.problems.prefix(4).map(\.description))")
    }

    /// A cursor kept past its write transaction positions itself no more: it throws
    /// `transactionFinished`, and writes deferred before the abort are never applied (applying them
    /// made pages, and could spill them into the file, for a transaction holding no writer lock).
    @Test func aCursorKeptPastItsWriteTransactionRefusesToMove() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in _ = try txn.createTree("t").put([1], [1]) }
        for ending in ["abort", "commit"] {
            var kept: Cursor?
            try store.write { txn in
                let t = try #require(try txn.tree("t"))
                kept = try t.cursor()
                let key: [UInt8] = ending == "abort" ? [3] : [2]
                try key.withUnsafeBytes { k in try key.withUnsafeBytes { try t.putLater(k, $0) } }
                if ending == "abort" { txn.abort() }
            }
            let cursor = try #require(kept)
            #expect(throws: StorageError.transactionFinished, "\(ending)") { try cursor.first() }
            #expect(throws: StorageError.transactionFinished, "\(ending)") { try cursor.seek([2]) }
            #expect(throws: StorageError.transactionFinished, "\(ending)") { try cursor.find([1]) }
            #expect(throws: StorageError.transactionFinished, "\(ending)") { try cursor.last() }
            #expect(throws: StorageError.transactionFinished, "\(ending)") { try cursor.seek(toPosition: 0) }
        }
        // The aborted transaction's deferred write never landed; the committed one's did.
        #expect(try contents(of: store) == ["t": [[1]: [1], [2]: [2]]])
        #expect(try store.check().isOK)
    }

    @Test func inMemoryStore() throws {
        let store = try Store.inMemory()
        #expect(store.path == ":memory:")
        try store.write { txn in
            let t = try txn.createTree("t")
            for i in 0..<5000 { try t.put(bigEndianKey(UInt64(i)), [UInt8](repeating: UInt8(i & 0xFF), count: i % 7 == 0 ? 5000 : 20)) }
        }
        #expect(try store.read { try $0.tree("t")?.count } == 5000)
        // Independent of any other in-memory store.
        let other = try Store.inMemory()
        #expect(try other.read { try $0.treeNames() } == [])
        // It can be copied to a file, which then opens like any other.
        for compacting in [true, false] {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            try store.copy(to: path, compacting: compacting)
            let copy = try Store(path: path)
            #expect(try contents(of: copy) == contents(of: store), "compacting \(compacting)")
        }
        let stats = try store.stats()
        #expect(stats.pageCount > 2 && stats.fileSize >= stats.pageCount * UInt64(stats.pageSize))
    }

    /// A copy leaves nothing but itself in its directory: the compacting copy's temporary store,
    /// which commits with `.noSync`, left its commit log behind (`…-copying-PID-N-log`).
    @Test(arguments: [true, false]) func aCopyLeavesOnlyTheCopy(compacting: Bool) throws {
        let source = temporaryPath()
        defer { removeStoreFiles(source) }
        let store = try Store(path: source, options: StoreOptions(durability: .noSync))
        try store.write { txn in for k in 0..<2_000 { try txn.createTree("t").put(bigEndianKey(UInt64(k)), [UInt8](repeating: 1, count: 50)) } }
        let directory = try temporaryDirectory()
        defer { removeDirectory(directory) }
        let destination = directory + "/copy.strata"
        try store.copy(to: destination, compacting: compacting)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        #expect(names.allSatisfy { $0 == "copy.strata" || $0 == "copy.strata-lock" }, "\(names)")
        #expect(try Store(path: destination).read { try $0.tree("t")?.count } == 2_000)
    }

    @Test(arguments: Limits.pageSizes)
    func pageSizes(pageSize: Int) throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: UInt64(pageSize))
        var model: Contents = [:]
        do {
            let store = try Store(path: path, options: StoreOptions(pageSize: pageSize, durability: .noSync))
            #expect(store.pageSize == pageSize)
            #expect(store.maxKeySize == Limits.maxKeySize(pageSize: pageSize))
            try store.write { txn in
                try mutate(txn, &model, &rng, operations: 3000)
                let t = try txn.createTree("edge")
                let longKey = [UInt8](repeating: 0xAB, count: store.maxKeySize)
                let bigValue = rng.byteArray(3 * pageSize + 17)
                try t.put(longKey, bigValue)
                try t.put([1], [])
                model["edge"] = [longKey: bigValue, [1]: []]
            }
            let stats = try store.stats()
            #expect(stats.pageSize == pageSize)
            #expect(fileSizeOf(path) % UInt64(pageSize) == 0)
            #expect(fileSizeOf(path) >= stats.pageCount * UInt64(pageSize))
        }
        // Reopened without saying: the file's page size is used.
        let store = try Store(path: path)
        #expect(store.pageSize == pageSize)
        #expect(try contents(of: store) == model)
        let meta = try readFileRange(path, at: 0, count: 64)
        #expect(meta.withUnsafeBytes { $0.baseAddress!.u32(MetaLayout.pageSize) } == UInt32(pageSize))
    }

    /// Durability per store and per transaction, observed by counting syncs through the I/O seam.
    @Test func durabilityPerTransaction() throws {
        for mode in [SyncMode.single, .double] {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            let (store, faulty) = try openFaulty(path, StoreOptions(durability: .full, syncMode: mode))
            let perCommit = mode == .single ? 1 : 2
            func syncs(_ body: () throws -> Void) rethrows -> Int {
                let before = faulty.syncs
                try body()
                return faulty.syncs - before
            }
            #expect(try syncs { _ = try store.write { try $0.createTree("t").put([1], [1]) } } == perCommit, "\(mode): default .full")
            // A `.noSync` commit syncs nothing, but the first of a run makes the commit before it
            // the commit log's frame (CommitLog.pin): one sync of the log, unless that commit went
            // through the log already (`.single`).
            let runStart = mode == .single ? 0 : 1
            #expect(try syncs { _ = try store.write(durability: .noSync) { try $0.createTree("t").put([2], [2]) } } == runStart, "\(mode): per-call .noSync")
            #expect(
                try syncs {
                    try store.write { txn in
                        txn.durability = .noSync; try txn.createTree("t").put([3], [3])
                    }
                } == 0, "\(mode): set inside")
            // The first durable commit after .noSync ones syncs them before it writes (secureBase),
            // and ends the log's generation, whose last frame the run's pin kept (the page file and
            // the log once more): a replay of that frame after a power loss in this commit would
            // go back to the run's start over pages this commit reuses.
            #expect(try syncs { _ = try store.write(durability: .full) { try $0.createTree("t").put([4], [4]) } } == perCommit + 1 + 2)
            #expect(try syncs { _ = try store.write(durability: .full) { try $0.createTree("t").put([5], [5]) } } == perCommit)
            // A transaction that changes nothing writes and syncs nothing and keeps the id.
            let txnid = try store.stats().txnid
            let writes = faulty.writes
            #expect(try syncs { try store.write { txn in _ = try txn.tree("t")?.get([1]) } } == 0)
            #expect(faulty.writes == writes)
            #expect(try store.stats().txnid == txnid)
        }
        // A store whose default is .noSync, with durable transactions on request.
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let (store, faulty) = try openFaulty(path, StoreOptions(durability: .noSync))
        #expect(store.durability == .noSync)
        var before = faulty.syncs
        _ = try store.write { try $0.createTree("t").put([1], [1]) }
        // The run's first commit: the log's frame of the commit it began from, one sync.
        #expect(faulty.syncs == before + 1)
        before = faulty.syncs
        try store.write { txn in
            txn.durability = .full; try txn.createTree("t").put([2], [2])
        }
        // One for the .noSync commit before it (secureBase), two to end the generation that
        // pinned the run (the page file and the log), one for itself (through the log).
        #expect(faulty.syncs == before + 4)
        before = faulty.syncs
        try store.write { txn in
            txn.durability = .full; try txn.createTree("t").put([3], [3])
        }
        #expect(faulty.syncs == before + 1)
    }

    struct Oops: Error, Equatable {}

    /// Aborting, or throwing out of `write`, leaves no trace: content, ids, page counts and the file.
    @Test func abortAndThrowLeaveNoTrace() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        var rng = SplitMix(seed: 31)
        var model: Contents = [:]
        try store.write { txn in try mutate(txn, &model, &rng, operations: 2000) }
        let stats = try store.stats()
        let bytes = try readFileBytes(path)

        func scribble(_ txn: WriteTransaction) throws {
            var scratch = model
            try mutate(txn, &scratch, &rng, operations: 3000)
            _ = try txn.createTree("new").put([1], [1])
            #expect(try txn.dropTree("a"))
            #expect(try txn.tree("a") == nil)
            #expect(try txn.tree("new")?.get([1]) == [1])
        }
        // abort(): write returns normally with the closure's value, the transaction is finished.
        var escaped: WriteTree?
        let result = try store.write { txn -> Int in
            try scribble(txn)
            escaped = try txn.tree("b")
            txn.abort()
            #expect(throws: StorageError.transactionFinished) { _ = try txn.createTree("x") }
            #expect(throws: StorageError.transactionFinished) { _ = try txn.treeNames() }
            return 42
        }
        #expect(result == 42)
        // A tree handle smuggled out of the transaction is dead.
        let smuggled = try #require(escaped)
        #expect(throws: StorageError.transactionFinished) { try smuggled.put([7], [7]) }
        #expect(throws: StorageError.transactionFinished) { _ = try smuggled.get([7]) }
        // Throwing: the error comes back out unchanged.
        #expect(throws: Oops()) {
            try store.write { txn in
                try scribble(txn)
                throw Oops()
            }
        }
        // An engine error thrown inside (and not caught) aborts too.
        #expect(throws: StorageError.self) {
            try store.write { txn in
                try scribble(txn)
                try txn.createTree("t").put([], [1])
            }
        }
        #expect(try contents(of: store) == model)
        #expect(try store.stats() == stats)
        #expect(try readFileBytes(path) == bytes, "an aborted transaction wrote to the file")
        // The next transaction works.
        try store.write { txn in try mutate(txn, &model, &rng, operations: 100) }
        #expect(try contents(of: store) == model)
        #expect(try store.stats().txnid == stats.txnid + 1)
        // Writes after a committed write transaction's end are refused too.
        var committed: WriteTransaction?
        try store.write { txn in
            committed = txn; try txn.createTree("c").put([1], [1])
        }
        #expect(throws: StorageError.transactionFinished) { _ = try #require(committed).createTree("late") }
    }

    /// `write` inside `write` on the same thread throws instead of deadlocking; on another thread it
    /// waits for the first writer.
    @Test func nestedAndConcurrentWriters() throws {
        let store = try Store.inMemory()
        var innerRan = false
        // Caught inside: the outer transaction goes on and commits.
        try store.write { txn in
            try txn.createTree("t").put([1], [1])
            #expect(throws: StorageError.nestedWrite) {
                try store.write { _ in innerRan = true }
            }
            try txn.createTree("t").put([2], [2])
        }
        #expect(!innerRan)
        #expect(try store.read { try $0.tree("t")?.count } == 2)
        // Not caught: the outer transaction aborts.
        #expect(throws: StorageError.self) {
            try store.write { txn in
                try txn.createTree("t").put([3], [3])
                try store.write { _ in }
            }
        }
        #expect(try store.read { try $0.tree("t")?.get([3]) } == nil)
        // A second handle on the same file counts as the same writer lock.
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let a = try Store(path: path, options: StoreOptions(durability: .noSync))
        let b = try Store(path: path)
        #expect(throws: StorageError.self) { try a.write { _ in try b.write { _ in } } }

        // Another thread waits for the writer instead of failing.
        let order = Locked<[String]>([])
        runThreads([
            {
                try? a.write { txn in
                    order.withLock { $0.append("first begins") }
                    usleep(300_000)
                    try txn.createTree("w").put([1], [1])
                    order.withLock { $0.append("first ends") }
                }
            },
            {
                usleep(50_000)
                try? b.write { txn in
                    order.withLock { $0.append("second begins") }
                    let first = try txn.tree("w")?.get([1])
                    order.withLock { $0.append(first == [1] ? "second sees first" : "second does not see first") }
                    try txn.createTree("w").put([2], [2])
                }
            },
        ])
        #expect(order.current == ["first begins", "first ends", "second begins", "second sees first"])
        #expect(try a.read { try $0.tree("w")?.count } == 2)
    }

    @Test func treeCatalog() throws {
        let store = try Store.inMemory()
        let names = ["b", "a", "Zed", "ä-umlaut", "a/b", "a b", String(repeating: "n", count: 255), "🙂"]
        try store.write { txn in
            for (i, name) in names.enumerated() { try txn.createTree(name).put([UInt8(i)], [UInt8(i)]) }
            // createTree of an existing tree returns it, data and all.
            #expect(try txn.createTree("b").get([0]) == [0])
            #expect(try txn.treeNames() == names.sorted { keyLess(Array($0.utf8), Array($1.utf8)) })
            for bad in ["", String(repeating: "x", count: 256)] {
                #expect(throws: StorageError.invalidTreeName(bad)) { _ = try txn.createTree(bad) }
                #expect(throws: StorageError.invalidTreeName(bad)) { _ = try txn.tree(bad) }
            }
            #expect(try txn.tree("missing") == nil)
            #expect(try txn.dropTree("missing") == false)
        }
        try store.read { (txn) throws in
            #expect(try txn.treeNames() == names.sorted { keyLess(Array($0.utf8), Array($1.utf8)) })
            #expect(try txn.tree("🙂")?.get([7]) == [7])
            #expect(try txn.tree("missing") == nil)
        }
        // Drop, recreate in the same transaction: the new tree is empty. A handle from before the
        // drop is dead.
        let before = try store.beginRead()
        defer { before.end() }
        try store.write { txn in
            let old = try #require(try txn.tree("a"))
            #expect(try txn.dropTree("a"))
            #expect(throws: StorageError.treeNotFound("a")) { try old.put([9], [9]) }
            #expect(throws: StorageError.treeNotFound("a")) { _ = try old.get([1]) }
            let new = try txn.createTree("a")
            #expect(new.count == 0)
            #expect(try new.get([1]) == nil)
            try new.put([5], [5])
            #expect(try txn.dropTree("b"))
            #expect(try txn.dropTree("b") == false)
        }
        try store.read { (txn) throws in
            #expect(try txn.tree("a")?.count == 1)
            #expect(try txn.tree("a")?.get([5]) == [5])
            #expect(try txn.tree("b") == nil)
            #expect(!(try txn.treeNames()).contains("b"))
        }
        // A snapshot from before still sees the old trees.
        #expect(try before.tree("b")?.get([0]) == [0])
        #expect(try before.tree("a")?.get([1]) == [1])
    }

    /// Dropping a tree frees every page of it, overflow runs included.
    @Test func dropFreesAllPages() throws {
        let store = try Store.inMemory()
        _ = try store.write { try $0.createTree("keep").put([1], [1]) }
        let empty = try store.stats()
        var rng = SplitMix(seed: 77)
        try store.write { txn in
            let t = try txn.createTree("big")
            for i in 0..<20_000 { try t.put(bigEndianKey(UInt64(i)), rng.byteArray(i % 50 == 0 ? 9000 : 60)) }
        }
        let full = try store.stats()
        let shape = try store.read { try treeShape($0, "big") }
        let treePages = UInt64(shape.leaves + shape.branches + shape.overflowPages)
        #expect(full.usedPages >= empty.usedPages + treePages)
        try store.write { (txn) throws in #expect(try txn.dropTree("big")) }
        let dropped = try store.stats()
        print(
            "StoreAPITests: tree of \(treePages) pages (\(shape.leaves) leaves, \(shape.branches) branches, \(shape.overflowPages) overflow); used pages \(empty.usedPages) → \(full.usedPages) → \(dropped.usedPages) after drop, free \(dropped.freePages)"
        )
        #expect(dropped.freePages >= full.freePages + treePages)
        // Only the free list's own pages remain in use beyond the empty store's.
        #expect(dropped.usedPages <= empty.usedPages + treePages / 20 + 4)
        // Recording the freed pages takes a few free-list pages, nothing more.
        #expect(dropped.pageCount <= full.pageCount + treePages / 50 + 4)
        // And the freed pages are reused.
        try store.write { txn in
            let t = try txn.createTree("again")
            for i in 0..<10_000 { try t.put(bigEndianKey(UInt64(i)), rng.byteArray(60)) }
        }
        #expect(try store.stats().pageCount == dropped.pageCount)
    }

    /// Copies of both kinds, made while another thread keeps committing, are consistent snapshots.
    @Test func copyWhileWriting() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        /// Commit n leaves: counter = n; data holds keys max(0, n-300)..<n with values derived from the key;
        /// a big value every 100th key.
        @Sendable func value(_ k: Int) -> [UInt8] { [UInt8](repeating: UInt8(truncatingIfNeeded: k), count: k % 100 == 0 ? 6000 : 40 + k % 50) }
        @Sendable func commit(_ n: Int) throws {
            try store.write { txn in
                try txn.createTree("counter").put([0], bigEndianKey(UInt64(n)))
                let data = try txn.createTree("data")
                try data.put(bigEndianKey(UInt64(n - 1)), value(n - 1))
                if n > 300 { try data.delete(bigEndianKey(UInt64(n - 301))) }
                if n % 50 == 0 { try txn.createTree("t\(n / 50 % 3)").put(bigEndianKey(UInt64(n)), [1]) }
            }
        }
        for n in 1...400 { try commit(n) }
        func check(_ copyPath: String, context: String) throws {
            let copy = try Store(path: copyPath)
            try copy.read { txn in
                let counter = try #require(try txn.tree("counter")?.get([0]), "\(context): no counter")
                let n = Int(counter.withUnsafeBytes { bigEndianValue($0) })
                let data = try #require(try txn.tree("data"))
                #expect(data.count == min(n, 300), "\(context): at commit \(n)")
                var k = max(0, n - 300)
                var ok = true
                try data.forEach { key, v in
                    if bigEndianValue(key) != UInt64(k) || !v.elementsEqual(value(k)) { ok = false }
                    k += 1
                    return true
                }
                #expect(ok && k == n, "\(context): data of commit \(n)")
            }
        }
        let stop = Locked(false)
        let committed = Locked(400)
        let copies = Locked<[(String, Bool)]>([])
        runThreads([
            {
                var n = 401
                while !stop.current {
                    do { try commit(n) } catch { Issue.record("writer: \(error)"); return }
                    committed.withLock { $0 = n }
                    n += 1
                }
            },
            {
                for i in 0..<6 {
                    let compacting = i % 2 == 0
                    let copyPath = temporaryPath("copy\(i)")
                    do { try store.copy(to: copyPath, compacting: compacting) } catch { Issue.record("copy \(i): \(error)") }
                    copies.withLock { $0.append((copyPath, compacting)) }
                    usleep(20_000)
                }
                stop.withLock { $0 = true }
            },
        ])
        #expect(committed.current > 410, "the writer hardly ran while copying")
        for (copyPath, compacting) in copies.current {
            defer { removeStoreFiles(copyPath) }
            try check(copyPath, context: "copy (compacting \(compacting))")
        }
        // With the writer stopped, copies hold exactly the source's content.
        for compacting in [true, false] {
            let copyPath = temporaryPath()
            defer { removeStoreFiles(copyPath) }
            try store.copy(to: copyPath, compacting: compacting)
            #expect(try contents(of: Store(path: copyPath)) == contents(of: store))
            // The destination must not exist.
            #expect(throws: StorageError.io(operation: "create copy", path: copyPath, errno: 17)) {
                try store.copy(to: copyPath, compacting: compacting)
            }
        }
    }

    /// After many deletes the compacted copy is much smaller; a page copy keeps the free space.
    @Test func compactedCopyIsSmaller() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        var rng = SplitMix(seed: 4)
        try store.write { txn in
            let t = try txn.createTree("t")
            for i in 0..<30_000 { try t.put(bigEndianKey(UInt64(i)), rng.byteArray(100)) }
        }
        try store.write { txn in
            let t = try #require(try txn.tree("t"))
            for i in 0..<30_000 where i % 5 != 0 { try t.delete(bigEndianKey(UInt64(i))) }
        }
        let source = try store.stats()
        let compact = temporaryPath()
        let plain = temporaryPath()
        defer { removeStoreFiles(compact); removeStoreFiles(plain) }
        try store.copy(to: compact, compacting: true)
        try store.copy(to: plain, compacting: false)
        let compactSize = fileSizeOf(compact)
        let plainSize = fileSizeOf(plain)
        print("StoreAPITests: source \(source.fileSize) bytes (\(source.freePages) free pages), page copy \(plainSize), compacted copy \(compactSize)")
        #expect(compactSize * 3 < source.fileSize, "compacted copy \(compactSize) bytes vs source \(source.fileSize)")
        #expect(plainSize == source.pageCount * UInt64(source.pageSize))
        let c = try Store(path: compact)
        let p = try Store(path: plain)
        #expect(try contents(of: c) == contents(of: store))
        #expect(try contents(of: p) == contents(of: store))
        #expect(try p.stats().freePages == source.freePages)
        #expect(try c.stats().freePages * 10 < source.freePages)
        // Both copies are writable stores.
        _ = try c.write { try $0.createTree("t").put([1], [1]) }
        _ = try p.write { try $0.createTree("t").put([1], [1]) }
    }

    /// Ascending 8-byte keys with 100-byte values fill leaves at least 90% (the append fast path).
    @Test func appendFastPathFillsLeaves() throws {
        let keys = TestEnv.int("STRATA_APPEND_KEYS", default: 1_000_000)
        let store = try Store.inMemory()
        let value = [UInt8](repeating: 0x61, count: 100)
        let started = Date()
        try store.write { txn in
            let t = try txn.createTree("ids")
            var key = [UInt8](repeating: 0, count: 8)
            try value.withUnsafeBytes { v in
                for i in 0..<keys {
                    key.withUnsafeMutableBytes { $0.storeBytes(of: UInt64(i).bigEndian, as: UInt64.self) }
                    try key.withUnsafeBytes { k in _ = try t.put(k, v) }
                }
            }
        }
        let shape = try store.read { try treeShape($0, "ids") }
        print(
            "StoreAPITests: append of \(keys) ascending keys in \(String(format: "%.1f", Date().timeIntervalSince(started))) s: \(shape.leaves) leaves, \(shape.branches) branches, depth \(shape.depth), leaf fill \(String(format: "%.1f", shape.leafFill * 100))% (\(String(format: "%.1f", shape.leafFillExcludingLast * 100))% without the last leaf)"
        )
        #expect(shape.entries == keys)
        #expect(shape.leafFill >= 0.90, "leaf fill \(shape.leafFill)")

        // The same in many small commits (each starts a fresh write path at the right edge).
        let batched = try Store.inMemory()
        let total = min(keys, 100_000)
        for batch in stride(from: 0, to: total, by: 5000) {
            try batched.write { txn in
                let t = try txn.createTree("ids")
                for i in batch..<min(total, batch + 5000) { try t.put(bigEndianKey(UInt64(i)), value) }
            }
        }
        let batchedShape = try batched.read { try treeShape($0, "ids") }
        print("StoreAPITests: \(total) ascending keys in commits of 5000: leaf fill \(String(format: "%.1f", batchedShape.leafFill * 100))%")
        #expect(batchedShape.leafFill >= 0.90, "leaf fill \(batchedShape.leafFill) across commits")

        // For contrast, random order leaves pages about 70% full; the check is only that the
        // fast path is what makes the difference.
        let random = try Store.inMemory()
        var order = Array(0..<total)
        var rng = SplitMix(seed: 1)
        for i in stride(from: order.count - 1, to: 0, by: -1) { order.swapAt(i, rng.below(i + 1)) }
        try random.write { txn in
            let t = try txn.createTree("ids")
            for i in order { try t.put(bigEndianKey(UInt64(i)), value) }
        }
        let randomShape = try random.read { try treeShape($0, "ids") }
        print("StoreAPITests: \(total) keys in random order: leaf fill \(String(format: "%.1f", randomShape.leafFill * 100))%")
        #expect(randomShape.leafFill < batchedShape.leafFill)
    }

    @Test func closedStore() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path)
        let other = try Store(path: path)
        _ = try store.write { try $0.createTree("t").put([1], [1]) }
        let snapshot = try store.beginRead()
        store.close()
        #expect(throws: StorageError.closed) { _ = try store.beginRead() }
        #expect(throws: StorageError.closed) { try store.read { _ in } }
        #expect(throws: StorageError.closed) { try store.write { _ in } }
        // A snapshot begun before, and other handles, are unaffected.
        #expect(try snapshot.tree("t")?.get([1]) == [1])
        snapshot.end()
        _ = try other.write { try $0.createTree("t").put([2], [2]) }
        #expect(try other.read { try $0.tree("t")?.count } == 2)
    }

    /// `onClose` handlers run once, in order, on the closing thread; one added after the close runs
    /// at once; an invalidated or released one never runs; another handle's close tells nobody here.
    @Test func closeHandlers() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path)
        let other = try Store(path: path)
        let heard = Mutex<[String]>([])
        let first = store.onClose { heard.withLock { $0.append("first") } }
        let dropped = store.onClose { heard.withLock { $0.append("dropped") } }
        var released: CloseHandlerToken? = store.onClose { heard.withLock { $0.append("released") } }
        let second = store.onClose { heard.withLock { $0.append("second") } }
        let elsewhere = other.onClose { heard.withLock { $0.append("other") } }
        dropped.invalidate()
        released = nil
        other.close()
        #expect(heard.withLock { $0 } == ["other"])
        store.close()
        store.close()
        #expect(heard.withLock { $0 } == ["other", "first", "second"])
        let late = store.onClose { heard.withLock { $0.append("late") } }
        #expect(heard.withLock { $0 } == ["other", "first", "second", "late"])
        withExtendedLifetime((first, second, elsewhere, late, released)) {}
    }

    /// Two handles on one file share one environment: a commit through one is visible through the other.
    @Test func handlesShareTheFile() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let a = try Store(path: path, options: StoreOptions(durability: .noSync))
        let b = try Store(path: path)
        #expect(a.env === b.env)
        _ = try a.write { try $0.createTree("t").put([1], [1]) }
        #expect(try b.read { try $0.tree("t")?.get([1]) } == [1])
        _ = try b.write { try $0.createTree("t").put([2], [2]) }
        #expect(try a.read { try $0.tree("t")?.count } == 2)
    }

    @Test func statsAndBasics() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        let fresh = try store.stats()
        #expect(fresh.pageCount == 2)
        #expect(fresh.freePages == 0 && fresh.pendingPages == 0)
        #expect(fresh.usedPages == 2)
        #expect(fresh.fileSize == 2 * UInt64(fresh.pageSize))
        #expect(fresh.pendingHolders.isEmpty)
        #expect(store.readers().isEmpty)
        try store.write { txn in
            let t = try txn.createTree("t")
            #expect(try t.put([1], []) == true)
            #expect(try t.put([1], [2]) == false)
            #expect(try t.insert([1], [3]) == false)
            #expect(try t.get([1]) == [2])
            #expect(try t.insert([2], []) == true)
            #expect(try t.delete([3]) == false)
            #expect(t.count == 2)
        }
        try store.read { (txn) throws in
            let t = try #require(try txn.tree("t"))
            #expect(try t.get([2]) == [], "an empty value is not a missing key")
            #expect(try t.get([3]) == nil)
            #expect(try t.get([]) == nil)
        }
        let after = try store.stats()
        #expect(after.txnid == fresh.txnid + 1)
        #expect(after.pageCount > 2)
        let snapshot = try store.beginRead()
        #expect(store.readers().map(\.txnid) == [snapshot.txnid])
        #expect(store.readers().first?.pid == UInt64(getpid()))
        snapshot.end()
        #expect(store.readers().isEmpty)
    }
}
