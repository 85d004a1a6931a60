import Testing
@testable import StrataStorage
import Foundation
import Synchronization

/// Snapshot isolation: a read transaction sees one commit for its whole life.
@Suite struct SnapshotTests {
    /// A snapshot's count and entries stay exactly as they were while a writer commits many times,
    /// rewriting, deleting, growing, dropping and recreating its trees.
    @Test func snapshotViewDoesNotChange() throws {
        let seed: UInt64 = 0xA11CE
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        var rng = SplitMix(seed: seed)
        try store.write { txn in
            let a = try txn.createTree("a")
            let b = try txn.createTree("b")
            for i in 0..<4000 {
                try a.put(bigEndianKey(UInt64(i)), rng.byteArray(rng.percent(3) ? 6000 : rng.within(0...120)))
                if i % 4 == 0 { try b.put(bigEndianKey(UInt64(i)), [UInt8(i & 0xFF)]) }
            }
        }
        let snapshot = try store.beginRead()
        defer { snapshot.end() }
        let frozen = try snapshotContents(snapshot)
        let frozenNames = try snapshot.treeNames()
        let frozenTxn = snapshot.txnid
        #expect(frozen["a"]?.count == 4000)

        for commit in 0..<150 {
            try store.write { txn in
                let a = try txn.createTree("a")
                for _ in 0..<rng.within(1...200) {
                    let k = bigEndianKey(UInt64(rng.below(8000)))
                    if rng.percent(40) { try a.delete(k) } else { try a.put(k, rng.byteArray(rng.percent(3) ? 7000 : rng.within(0...150))) }
                }
                if commit % 25 == 10 { try txn.dropTree("b") }
                if commit % 25 == 20 {
                    let b = try txn.createTree("b")
                    for i in 0..<300 { try b.put(bigEndianKey(UInt64(i)), [0xBB]) }
                }
                if commit % 40 == 0 { try txn.createTree("c\(commit)").put([1], [2]) }
            }
            // Cheap checks every commit, the whole view every tenth.
            #expect(snapshot.txnid == frozenTxn)
            #expect(try snapshot.tree("a")?.count == frozen["a"]?.count, "seed \(seed) commit \(commit)")
            #expect(try snapshot.tree("b")?.count == frozen["b"]?.count, "seed \(seed) commit \(commit)")
            #expect(try snapshot.treeNames() == frozenNames, "seed \(seed) commit \(commit)")
            let probe = bigEndianKey(UInt64(rng.below(4000)))
            #expect(try snapshot.tree("a")?.get(probe) == frozen["a"]?[probe], "seed \(seed) commit \(commit)")
            if commit % 10 == 9 {
                #expect(try snapshotContents(snapshot) == frozen, "seed \(seed): snapshot changed by commit \(commit)")
            }
        }
        // A new snapshot sees the writer's work; the old one still sees the past.
        try store.read { (now) throws in
            #expect(now.txnid == frozenTxn + 150)
            #expect(try now.treeNames() != frozenNames)
        }
        #expect(try snapshotContents(snapshot) == frozen)
    }

    /// A read inside a write transaction (same thread) sees the last commit, not the uncommitted writes;
    /// a reader on another thread does not see them either.
    @Test func uncommittedWritesAreInvisible() throws {
        let store = try Store.inMemory()
        _ = try store.write { try $0.createTree("t").put([1], [1]) }
        try store.write { txn in
            try txn.createTree("t").put([1], [2])
            try txn.createTree("t").put([2], [2])
            try store.read { (r) throws in
                #expect(try r.tree("t")?.get([1]) == [1])
                #expect(try r.tree("t")?.count == 1)
            }
            let seen = Locked<[UInt8]?>(nil)
            runThreads([
                {
                    let value = try? store.read { r in try r.tree("t")?.get([1]) }
                    seen.withLock { $0 = value ?? nil }
                }
            ])
            #expect(seen.current == [1])
        }
        #expect(try store.read { try $0.tree("t")?.get([1]) } == [2])
    }

    /// 4 reader threads and 1 writer: 100 accounts whose balances always sum to the same total. Each
    /// commit moves amounts between random accounts and reshapes their padding (so pages split, merge
    /// and are reused while readers hold snapshots). Every reader checks the sum and the count on every
    /// snapshot it takes, rereads some snapshots to see they do not move, and shares one snapshot across
    /// threads.
    @Test func concurrentReadersSeeConsistentSums() throws {
        let seed: UInt64 = 0xACC0
        let accounts = 100
        let initial: UInt64 = 1_000_000
        let total = UInt64(accounts) * initial
        let commits = TestEnv.int("STRATA_SNAPSHOT_COMMITS", default: 3000)
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        @Sendable func account(_ i: Int) -> [UInt8] { Array("acct-\(1000 + i)".utf8) }
        @Sendable func encode(_ balance: UInt64, padding: Int) -> [UInt8] { bigEndianKey(balance) + [UInt8](repeating: 0x50, count: padding) }
        @Sendable func balance(_ value: [UInt8]?) throws -> UInt64 {
            guard let value, value.count >= 8 else { throw StorageError.internalError("account value missing") }
            return value.withUnsafeBytes { bigEndianValue($0) }
        }
        try store.write { txn in
            let t = try txn.createTree("accounts")
            for i in 0..<accounts { try t.put(account(i), encode(initial, padding: 200)) }
        }

        let done = Atomic<Bool>(false)
        let failures = Locked<[String]>([])
        let snapshotsChecked = Atomic<Int>(0)
        let distinctCommitsSeen = Atomic<Int>(0)
        @Sendable func fail(_ message: String) { failures.withLock { if $0.count < 20 { $0.append(message) } } }

        /// Sum and count of one snapshot, by full scan, or nil on error.
        @Sendable func audit(_ txn: ReadTransaction) -> (sum: UInt64, count: Int, bytes: Int)? {
            do {
                guard let tree = try txn.tree("accounts") else { return nil }
                var sum: UInt64 = 0
                var count = 0
                var bytes = 0
                try tree.forEach { _, v in
                    sum &+= bigEndianValue(v)
                    count += 1
                    bytes += v.count
                    return true
                }
                if count != tree.count { return nil }
                return (sum, count, bytes)
            } catch {
                return nil
            }
        }

        let writer: @Sendable () -> Void = {
            var rng = SplitMix(seed: seed)
            do {
                for commit in 0..<commits {
                    try store.write { txn in
                        guard let t = try txn.tree("accounts") else { throw StorageError.treeNotFound("accounts") }
                        for _ in 0..<rng.within(1...8) {
                            let from = rng.below(accounts)
                            let to = rng.below(accounts)
                            let fromBalance = try balance(t.get(account(from)))
                            let amount = UInt64(rng.below(Int(min(fromBalance, 50_000)) + 1))
                            try t.put(account(from), encode(fromBalance - amount, padding: rng.within(0...900)))
                            let toBalance = try balance(t.get(account(to)))
                            try t.put(account(to), encode(toBalance + amount, padding: rng.within(0...900)))
                        }
                        // Within the transaction the invariant holds as well.
                        var sum: UInt64 = 0
                        try t.forEach { _, v in
                            sum &+= bigEndianValue(v); return true
                        }
                        if sum != total { fail("writer: sum \(sum) inside commit \(commit)") }
                    }
                }
            } catch {
                fail("writer: \(error)")
            }
            done.store(true, ordering: .releasing)
        }

        let shared = try store.beginRead()
        let sharedAudit = audit(shared)
        let reader: @Sendable (Int) -> Void = { id in
            var rng = SplitMix(seed: seed &+ UInt64(id))
            var lastTxn: UInt64 = 0
            var seen = 0
            while !done.load(ordering: .acquiring) {
                do {
                    let txn = try store.beginRead()
                    if txn.txnid < lastTxn { fail("reader \(id): snapshot \(txn.txnid) older than \(lastTxn)") }
                    if txn.txnid != lastTxn { seen += 1 }
                    lastTxn = txn.txnid
                    guard let first = audit(txn) else { fail("reader \(id): audit of \(txn.txnid) failed"); txn.end(); continue }
                    if first.sum != total || first.count != accounts {
                        fail("reader \(id): snapshot \(txn.txnid) sums to \(first.sum) over \(first.count) accounts")
                    }
                    if rng.percent(10) {
                        // Hold the snapshot while the writer moves on; it must not change at all.
                        usleep(UInt32(rng.within(100...3000)))
                        let again = audit(txn)
                        if again?.sum != first.sum || again?.bytes != first.bytes {
                            fail("reader \(id): snapshot \(txn.txnid) changed while held")
                        }
                    }
                    if rng.percent(20) {
                        let tree = try txn.tree("accounts")
                        let probe = rng.below(accounts)
                        if try tree?.get(account(probe)) == nil { fail("reader \(id): account \(probe) missing") }
                    }
                    // The snapshot shared by every thread never moves either.
                    if rng.percent(5), let s = audit(shared), s.sum != sharedAudit?.sum || s.bytes != sharedAudit?.bytes {
                        fail("reader \(id): shared snapshot changed")
                    }
                    txn.end()
                    snapshotsChecked.add(1, ordering: .relaxed)
                } catch {
                    fail("reader \(id): \(error)")
                }
            }
            distinctCommitsSeen.add(seen, ordering: .relaxed)
        }
        let started = Date()
        runThreads([writer] + (0..<4).map { id in { reader(id) } })
        shared.end()
        let elapsed = Date().timeIntervalSince(started)
        for failure in failures.current { Issue.record("seed \(seed): \(failure)") }
        print(
            "SnapshotTests: \(commits) commits, \(snapshotsChecked.load(ordering: .relaxed)) snapshots audited by 4 readers (\(distinctCommitsSeen.load(ordering: .relaxed)) distinct commits seen) in \(String(format: "%.1f", elapsed)) s"
        )
        #expect(snapshotsChecked.load(ordering: .relaxed) >= 100)
        #expect(distinctCommitsSeen.load(ordering: .relaxed) >= 20)
        let final = try store.read { txn in audit(txn) }
        #expect(final?.sum == total && final?.count == accounts)
        // Pages were reused while readers came and went: the file did not grow with every commit.
        let stats = try store.stats()
        #expect(stats.pendingPages == 0)
        #expect(stats.pageCount < 400, "the file grew to \(stats.pageCount) pages for 100 small accounts")
    }

    /// Many snapshots at once, of different commits, each seeing its own commit.
    @Test func manySnapshotsOfDifferentCommits() throws {
        let store = try Store.inMemory()
        var snapshots: [(ReadTransaction, Int)] = []
        for n in 0..<60 {
            try store.write { txn in
                let t = try txn.createTree("t")
                try t.put(bigEndianKey(UInt64(n)), [UInt8](repeating: UInt8(n), count: 50 + n * 20))
                if n > 0 { try t.delete(bigEndianKey(UInt64(n - 1))) }
                try txn.createTree("counter").put([0], bigEndianKey(UInt64(n)))
            }
            snapshots.append((try store.beginRead(), n))
        }
        for (snapshot, n) in snapshots.reversed() {
            let t = try #require(try snapshot.tree("t"))
            #expect(t.count == 1)
            #expect(try t.get(bigEndianKey(UInt64(n))) == [UInt8](repeating: UInt8(n), count: 50 + n * 20))
            #expect(try snapshot.tree("counter")?.get([0]) == bigEndianKey(UInt64(n)))
            snapshot.end()
            #expect(throws: StorageError.transactionFinished) { _ = try snapshot.tree("t") }
        }
        #expect(store.readers().isEmpty)
    }

    /// A reader table slot per snapshot: the table fills, throws `readersFull`, and frees on `end()`.
    @Test func readerSlotsRunOut() throws {
        var options = StoreOptions(durability: .noSync)
        options.readerSlots = 8
        let store = try Store.inMemory(options: options)
        var open: [ReadTransaction] = []
        for _ in 0..<8 { open.append(try store.beginRead()) }
        #expect(store.readers().count == 8)
        #expect(throws: StorageError.readersFull(slots: 8)) { _ = try store.beginRead() }
        // The writer is not blocked by readers.
        _ = try store.write { try $0.createTree("t").put([1], [1]) }
        open.removeLast().end()
        let again = try store.beginRead()
        #expect(try again.tree("t")?.get([1]) == [1])
        again.end()
        for txn in open { txn.end() }
        #expect(store.readers().isEmpty)
    }
}
