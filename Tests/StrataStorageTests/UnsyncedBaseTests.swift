import Foundation
import Synchronization
import Testing

@testable import StrataStorage

/// A durable commit that follows `.noSync` commits must not put the last durable commit at risk:
/// until the unsynced commit it begins from reaches the disk, that older commit's pages and meta
/// slot are what a power loss falls back to (Commit.swift, `secureBase`). Found by an independent
/// review (2026-12-04): before the fix both tests opened the file at the commit before the last
/// durable one.
@Suite struct UnsyncedBaseTests {
    /// T-2 durable, T-1 `.noSync`, T durable and cut by a power loss at its sync, with T's page
    /// writes on the disk and T-1's and T's meta page not.
    @Test(arguments: [SyncMode.double, SyncMode.single])
    func powerLossInADurableCommitAfterANoSyncOneKeepsTheLastDurableCommit(sync: SyncMode) throws {
        let path = temporaryPath("unsynced-base-\(sync)")
        defer { removeStoreFiles(path) }
        var (store, faulty) = try openFaulty(path, StoreOptions(durability: .full, syncMode: sync))
        var rng = SplitMix(seed: 7)
        var model: Contents = [:]
        try store.write { txn in try mutate(txn, &model, &rng, operations: 1000) }
        try store.write { txn in try mutate(txn, &model, &rng, operations: 300) }  // T-2: durable
        let durable = model
        try store.write(durability: .noSync) { txn in try mutate(txn, &model, &rng, operations: 300) }  // T-1
        let unsynced = model
        let before = faulty.state.withLock { $0.journal.count }
        faulty.cutPower(atSync: 1)
        var attempted = model
        _ = try? store.write { txn in try mutate(txn, &attempted, &rng, operations: 300) }
        // losePower numbers the lost pieces newest first: T's meta page (if written), then its pages.
        let (pieces, metaPieces) = faulty.state.withLock { s -> (Int, Int) in
            let mine = s.journal[min(before, s.journal.count)...]
            return (
                mine.reduce(0) { $0 + ($1.old.count + 4095) / 4096 },
                mine.last.map { $0.offset < 2 * 4096 ? ($0.old.count + 4095) / 4096 : 0 } ?? 0
            )
        }
        let environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()
        try faulty.losePower(chunk: 4096) { $0 >= metaPieces && $0 < pieces }
        #expect(environment.environment == nil)
        let reopened = try Store(path: path)
        let found = try contents(of: reopened)
        #expect(
            found == durable || found == unsynced,
            "opened at transaction \(reopened.latestVersion): neither the last durable commit nor the noSync one after it")
        #expect(try reopened.check().isOK)
    }

    /// The same with a one-key durable commit T-2 and several seeds: T-1 rewrites pages T-2's
    /// trees still use, T writes a new tree; only T's writes reach the disk.
    @Test(arguments: [UInt64(1), 2, 3])
    func powerLossAfterANoSyncCommitNeverOpensBeforeTheLastDurableCommit(seed: UInt64) throws {
        let path = temporaryPath("unsynced-sweep-\(seed)")
        defer { removeStoreFiles(path) }
        var (store, faulty) = try openFaulty(path, StoreOptions(durability: .full, syncMode: .double))
        var rng = SplitMix(seed: seed)
        var model: Contents = [:]
        try store.write { txn in try mutate(txn, &model, &rng, operations: 2000) }
        try store.write { txn in _ = try txn.createTree("a").put([1], [1]) }
        var durable = model
        durable["a", default: [:]][[1]] = [1]
        var unsynced = durable
        try store.write(durability: .noSync) { txn in
            for i in 0..<Int(seed % 7 + 1) * 20 {
                let name = ["b", "c"][i % 2]
                let key = bigEndianKey(UInt64(rng.below(4000)))
                if unsynced[name]?[key] != nil {
                    try txn.createTree(name).put(key, [9])
                    unsynced[name]?[key] = [9]
                }
            }
        }
        let before = faulty.state.withLock { $0.journal.count }
        faulty.cutPower(atSync: 1)
        _ = try? store.write { txn in
            for i in 0..<200 { try txn.createTree("z").put(bigEndianKey(UInt64(i)), [UInt8](repeating: 7, count: 200)) }
        }
        let pieces = faulty.state.withLock { s in s.journal[min(before, s.journal.count)...].reduce(0) { $0 + ($1.old.count + 4095) / 4096 } }
        let environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()
        try faulty.losePower(chunk: 4096) { $0 < pieces }
        #expect(environment.environment == nil)
        let reopened = try Store(path: path)
        let found = try contents(of: reopened)
        #expect(found == durable || found == unsynced, "seed \(seed): opened at transaction \(reopened.latestVersion)")
        #expect(try reopened.check().isOK)
    }

    /// A durable commit after a `.noSync` one fails before its meta page is on the disk; a power
    /// loss then keeps only the newest unsynced write. The failed commit must not have zeroed the
    /// meta slot that still held the last durable commit.
    @Test(arguments: [SyncMode.double, SyncMode.single])
    func aFailedCommitAfterANoSyncOneKeepsTheLastDurableCommit(sync: SyncMode) throws {
        let path = temporaryPath("unsynced-spoil-\(sync)")
        defer { removeStoreFiles(path) }
        let made = Mutex<(FaultyFile, MetaWriteFails)?>(nil)
        var options = StoreOptions(durability: .full, syncMode: sync)
        options.compaction.idleDelay = nil
        var store = try Store(path: path, options: options) { inner in
            // The commit log beside the page file shares the page file's fault plan.
            if inner.path.hasSuffix("-log"), let (pageFile, _) = made.withLock({ $0 }) { return FaultyFile(inner, sharing: pageFile) }
            let faulty = FaultyFile(inner)
            let failing = MetaWriteFails(faulty)
            made.withLock { $0 = (faulty, failing) }
            return failing
        }
        let (faulty, metaFail) = try #require(made.withLock { $0 })
        var rng = SplitMix(seed: 5)
        var model: Contents = [:]
        try store.write { txn in try mutate(txn, &model, &rng, operations: 1000) }
        try store.write { txn in try mutate(txn, &model, &rng, operations: 300) }  // T-2: durable
        let durable = model
        try store.write(durability: .noSync) { txn in try mutate(txn, &model, &rng, operations: 300) }  // T-1
        let unsynced = model
        if sync == .double { faulty.failSync(in: 2) } else { metaFail.armed.withLock { $0 = true } }
        var attempted = model
        #expect(throws: StorageError.self) { try store.write { txn in try mutate(txn, &attempted, &rng, operations: 300) } }
        let environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()
        // Of the unsynced writes, only the newest reached the disk.
        try faulty.losePower(chunk: 4096) { $0 == 0 }
        #expect(environment.environment == nil)
        let reopened = try Store(path: path)
        let found = try contents(of: reopened)
        #expect(found == durable || found == unsynced, "opened at transaction \(reopened.latestVersion): the last durable commit is lost")
    }
}

/// Forwards to a `FaultyFile`; once armed, the next write to a meta page (offset below two pages)
/// fails with EIO before writing anything, and disarms.
final class MetaWriteFails: ForwardingFile {
    let faulty: FaultyFile
    var inner: any FileIO { faulty }
    let armed = Mutex(false)
    init(_ inner: FaultyFile) { self.faulty = inner }
    private func check(_ offset: UInt64) throws {
        let fail = armed.withLock { armed -> Bool in
            if armed && offset < 2 * 4096 {
                armed = false
                return true
            }
            return false
        }
        if fail { throw StorageError.io(operation: "pwrite", path: path, errno: 5) }
    }
    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        try check(offset)
        try inner.write(bytes, at: offset)
    }
    func write(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        try check(offset)
        try inner.write(buffers, at: offset)
    }
}
