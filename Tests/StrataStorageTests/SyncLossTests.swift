import Foundation
import Synchronization
import Testing

@testable import StrataStorage

/// A page file with Linux's behaviour after a failed `fdatasync` (the "fsyncgate" semantics of
/// Linux 4.13 and later, errseq_t): when a sync fails with EIO, the dirty pages it could not
/// write are marked clean and dropped from writeback, so a later sync succeeds without writing
/// them; after a power loss the disk holds what it held before those writes. The worst case is
/// modelled: every write since the last successful sync is lost for good when a sync fails
/// (unless written again later). The disk is a shadow image updated at each successful sync with
/// the current bytes of the ranges written since; `losePower` puts the image back.
// Unchecked: the mutable state is in `state` (a Mutex), `logs` (a Mutex) and `truncations` (an
// Atomic); `pageFile` is set once by the initializer, before the file is shared.
final class SyncLossFile: ForwardingFile, @unchecked Sendable {
    let inner: any FileIO
    struct State {
        var image: [UInt8]
        var written: [(offset: UInt64, count: Int)] = []
        var failNextSync = false
        var failedSyncs = 0
    }
    let state: Mutex<State>
    /// For the commit log beside a page file: the page file, whose `failNextSync` also fails this
    /// file's next sync (one fault plan for both files).
    private weak var pageFile: SyncLossFile?
    /// For a page file: the commit logs that share its plan, put back with it by `losePower`.
    private let logs = Mutex<[SyncLossFile]>([])

    /// Wraps the commit log `inner` beside `pageFile`, sharing its plan.
    convenience init(_ inner: any FileIO, logOf pageFile: SyncLossFile) throws {
        try self.init(inner)
        self.pageFile = pageFile
        pageFile.logs.withLock { $0.append(self) }
    }

    init(_ inner: any FileIO) throws {
        self.inner = inner
        let size = Int(try inner.size())
        var image = [UInt8](repeating: 0, count: size)
        if size > 0 { try image.withUnsafeMutableBytes { try inner.read(into: $0, at: 0) } }
        state = Mutex(State(image: image))
    }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        try inner.write(bytes, at: offset)
        state.withLock { $0.written.append((offset, bytes.count)) }
    }

    func write(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        try inner.write(buffers, at: offset)
        let total = buffers.reduce(0) { $0 + $1.count }
        state.withLock { $0.written.append((offset, total)) }
    }

    func sync() throws {
        let fail = (pageFile ?? self).state.withLock { s -> Bool in
            if s.failNextSync {
                s.failNextSync = false
                s.failedSyncs += 1
                return true
            }
            return false
        }
        if fail {
            state.withLock { $0.written.removeAll() }  // dropped from writeback: never reach the disk
            throw StorageError.io(operation: "fdatasync", path: path, errno: 5)
        }
        try inner.sync()
        let size = Int(try inner.size())
        let ranges = state.withLock { $0.written }
        var pieces: [(Int, [UInt8])] = []
        for (offset, count) in ranges where Int(offset) < size {
            let n = min(count, size - Int(offset))
            var bytes = [UInt8](repeating: 0, count: n)
            try bytes.withUnsafeMutableBytes { try inner.read(into: $0, at: offset) }
            pieces.append((Int(offset), bytes))
        }
        state.withLock { s in
            if s.image.count < size { s.image += [UInt8](repeating: 0, count: size - s.image.count) }
            if s.image.count > size { s.image.removeLast(s.image.count - size) }
            for (offset, bytes) in pieces { s.image.replaceSubrange(offset..<(offset + bytes.count), with: bytes) }
            s.written.removeAll()
        }
    }

    let truncations = Atomic<Int>(0)
    func truncate(to length: UInt64) throws {
        try inner.truncate(to: length)
        truncations.add(1, ordering: .relaxed)
    }

    /// Power loss: the file becomes the disk image. Call with every store handle released.
    func losePower() throws {
        for log in logs.withLock({ $0 }) { try log.losePower() }
        let image = state.withLock { $0.image }
        try inner.truncate(to: UInt64(image.count))
        try image.withUnsafeBytes { try inner.write($0, at: 0) }
        try inner.sync()
    }
}

@Suite struct SyncLossTests {
    static func open(_ path: String, _ options: StoreOptions) throws -> (Store, SyncLossFile) {
        var options = options
        options.compaction.idleDelay = nil
        let made = Mutex<SyncLossFile?>(nil)
        var failure: (any Error)?
        let store = try Store(path: path, options: options) { inner in
            do {
                if inner.path.hasSuffix("-log"), let pageFile = made.withLock({ $0 }) { return try SyncLossFile(inner, logOf: pageFile) }
                let f = try SyncLossFile(inner)
                made.withLock { $0 = f }
                return f
            } catch {
                failure = error
                return inner
            }
        }
        if let failure { throw failure }
        return (store, try #require(made.withLock { $0 }))
    }

    /// An acknowledged durable commit after a failed sync survives a power loss (found by a hunt).
    ///
    /// Sequence: T-2 durable; T-1 `.noSync` (rewrites many keys, freeing T-2's pages); T durable,
    /// whose first sync (`secureBase`, syncing the unsynced base T-1) fails with EIO, so `write`
    /// throws; T' durable (the retry, same transaction id) succeeds and is acknowledged; then the
    /// power goes. On Linux a failed fdatasync drops the dirty pages it could not write (they are
    /// marked clean; the next sync returns 0 without writing them), so T-1's pages never reached
    /// the disk, and T' (built on them) opened with trees pointing at zeroed pages. Now the page
    /// file writes every page written since the last good sync again before the next sync
    /// (SyncRecovery.swift): after reopening, `check()` is clean and the content is T''s.
    @Test(arguments: [SyncMode.single, SyncMode.double])
    func failedSyncOfANoSyncBaseThenAcknowledgedCommitSurvivesPowerLoss(sync: SyncMode) throws {
        let seed: UInt64 = 0xC0DE ^ (sync == .single ? 1 : 2)
        let path = temporaryPath("huntc-syncloss-\(sync)")
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: seed)
        var (store, file) = try Self.open(path, StoreOptions(durability: .full, syncMode: sync))
        var model: Contents = [:]
        try store.write { txn in try mutate(txn, &model, &rng, operations: TestEnv.int("STRATA_SYNC_LOSS_OPS", default: 3000)) }  // T-2
        try store.write(durability: .noSync) { txn in try mutate(txn, &model, &rng, operations: 1500) }  // T-1
        let acknowledgedNoSync = model
        file.state.withLock { $0.failNextSync = true }
        var attempted = model
        #expect(throws: StorageError.self, "seed \(seed): the commit whose sync failed did not throw") {
            try store.write { txn in try mutate(txn, &attempted, &rng, operations: 300) }  // T: its first sync fails
        }
        #expect(file.state.withLock { $0.failedSyncs } == 1)
        #expect(try contents(of: store) == acknowledgedNoSync, "seed \(seed): the failed commit is visible")
        try store.write { txn in try mutate(txn, &model, &rng, operations: 300) }  // T': acknowledged, durable
        let acknowledged = model
        #expect(try contents(of: store) == acknowledged)
        let environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()
        #expect(environment.environment == nil)
        try file.losePower()

        let reopened: Store
        do {
            reopened = try Store(path: path)
        } catch {
            Issue.record("seed \(seed) \(sync): reopening after the power loss threw \(error)")
            return
        }
        let problems = storeCheckProblems(reopened)
        #expect(problems.isEmpty, "seed \(seed) \(sync): check after the power loss: \(problems)")
        let found: Contents
        do { found = try contents(of: reopened) } catch {
            Issue.record("seed \(seed) \(sync): reading the reopened file threw \(error)")
            return
        }
        #expect(
            found == acknowledged,
            "seed \(seed) \(sync): reopened at transaction \(reopened.latestVersion); the acknowledged durable commit is \(found == acknowledgedNoSync ? "missing (the noSync state)" : "not there (neither it nor an earlier state)")"
        )
    }

    /// The same, with no error reaching the caller (found by a hunt): a `.noSync` commit that
    /// trims the file syncs before cutting it, and when that sync fails the cut is skipped and
    /// `write` returns normally (Compaction.swift `returnFreeTail`). The failed sync dropped the
    /// unsynced pages of the `.noSync` commits; the next durable commit D built on them. Now its
    /// sync writes them again first: D reopens whole after a power loss.
    @Test func swallowedSyncFailureOfATrimmingNoSyncCommitThenDurableCommitSurvivesPowerLoss() throws {
        let path = temporaryPath("huntc-syncloss-trim")
        defer { removeStoreFiles(path) }
        var (store, file) = try Self.open(path, StoreOptions(durability: .full))
        var model: Contents = [:]
        try store.write { txn in _ = try txn.createTree("keep").put([1], [1]) }
        model["keep"] = [[1]: [1]]
        // A, B: .noSync. A loads ~8 MiB; B deletes it all and writes a small tree, and its
        // follow-up commit (`followUpCompaction`, .noSync too) trims the free tail and, before
        // cutting the file, syncs: that sync fails.
        try store.write(durability: .noSync) { txn in
            let t = try txn.createTree("big")
            for i in 0..<2000 { try t.put(bigEndianKey(UInt64(i)), [UInt8](repeating: UInt8(truncatingIfNeeded: i), count: 4000)) }
        }
        let cutsBefore = file.truncations.load(ordering: .relaxed)
        try store.write(durability: .noSync) { txn in
            let t = try txn.createTree("big")
            for i in 0..<2000 { try t.delete(bigEndianKey(UInt64(i))) }
            let small = try txn.createTree("small")
            for i in 0..<3000 { try small.put(bigEndianKey(UInt64(i)), [UInt8](repeating: 7, count: 300)) }
        }
        model["big"] = [:]
        model["small"] = Dictionary(uniqueKeysWithValues: (0..<3000).map { (bigEndianKey(UInt64($0)), [UInt8](repeating: 7, count: 300)) })
        file.state.withLock { $0.failNextSync = true }
        // Small .noSync commits: they move the live pages off the end (commit compaction) until
        // one trims the free tail and, before cutting the file, makes the sync that fails. Or,
        // since a run renews its pin once its commits moved many pages (RunPin.swift), the sync of
        // a renewal fails first: that one is not swallowed, and the commit fails whole.
        var swallowed = true
        for i in 0..<12 where file.state.withLock({ $0.failedSyncs }) == 0 {
            do {
                try store.write(durability: .noSync) { txn in _ = try txn.createTree("small").put(bigEndianKey(UInt64(10_000 + i)), [UInt8(i)]) }
                model["small"]?[bigEndianKey(UInt64(10_000 + i))] = [UInt8(i)]
            } catch let error as StorageError {
                guard case .io = error else { throw error }
                swallowed = false
            }
        }
        let failed = file.state.withLock { $0.failedSyncs }
        let st = try store.stats(); let fsz = try file.size()
        try #require(
            failed == 1,
            "\(st) file \(fsz) cuts \(file.truncations.load(ordering: .relaxed)): the trimming .noSync commit made no sync (no trim): the scenario was not reached"
        )
        if swallowed { #expect(file.truncations.load(ordering: .relaxed) == cutsBefore, "the cut happened despite the failed sync") }
        // D: durable, acknowledged.
        try store.write { txn in _ = try txn.createTree("keep").put([2], [2]) }
        model["keep"]?[[2]] = [2]
        #expect(try contents(of: store) == model)
        let environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()
        #expect(environment.environment == nil)
        try file.losePower()
        let reopened: Store
        do { reopened = try Store(path: path) } catch {
            Issue.record("reopening after the power loss threw \(error)")
            return
        }
        let problems = storeCheckProblems(reopened)
        #expect(problems.isEmpty, "check after the power loss (transaction \(reopened.latestVersion)): \(problems)")
        do {
            let found = try contents(of: reopened)
            #expect(found == model, "reopened at transaction \(reopened.latestVersion): not the acknowledged durable commit")
        } catch {
            Issue.record("reading the reopened file threw \(error)")
        }
    }
}
