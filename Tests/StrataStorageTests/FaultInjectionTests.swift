import Testing
@testable import StrataStorage
import Foundation
import Synchronization

/// A `FileIO` wrapper that injects faults into the page file: a failed (or half-done) Nth write, a
/// failed Nth sync, a full disk (ENOSPC past a size limit), a power cut (every write and sync fails
/// from some write on), and power loss: every write since the last successful sync is journaled with
/// the bytes it replaced, and `losePower` puts those bytes back, for all of them or a random subset,
/// chunk by chunk (a page, or a 512-byte sector for torn pages).
///
/// The files one store opens through the same wrapping closure (the page file, and the commit log
/// beside it) share one fault plan (`FaultPlan`): writes and syncs are counted across both, a fault
/// strikes whichever file's operation reaches its number, a power cut stops both, and power loss
/// puts back each file's unsynced writes (a sync of one file makes only that file's writes durable).
final class FaultyFile: FileIO {
    let inner: any FileIO

    struct State {
        /// Write and sync calls so far (both write methods count as one write each).
        var writes = 0
        var syncs = 0
        var reads = 0
        /// The write with this number fails with `writeErrno`, after writing half its bytes when `partial`.
        var failWrite: Int?
        var writeErrno: Int32 = 5
        var partial = false
        /// The sync with this number fails (EIO) and makes nothing durable.
        var failSync: Int?
        /// From the write with this number on, the power is off: writes do nothing (the one that
        /// crosses may be half-done when `partial`) and writes and syncs fail.
        var cutPowerAtWrite: Int?
        var cutPowerAtSync: Int?
        var powerOff = false
        /// Writes or growth past this many bytes fail with ENOSPC (the part below the limit is written).
        var diskLimit: UInt64?
        var failReads = false
        /// Bytes replaced by each write since its file's last good sync, oldest first.
        var journal: [(file: ObjectIdentifier, offset: UInt64, old: [UInt8])] = []
        /// Each file's size at its last good sync (or when it was wrapped).
        var sizeAtSync: [ObjectIdentifier: UInt64] = [:]
        /// The wrapped files of the plan, for putting bytes back (their wrappers refer to the plan).
        var files: [ObjectIdentifier: any FileIO] = [:]
    }

    let state: FaultPlan
    private var id: ObjectIdentifier { ObjectIdentifier(inner) }

    /// Wraps `inner` with a plan of its own, or with `sharing`'s plan.
    init(_ inner: any FileIO, sharing: FaultyFile? = nil) {
        self.inner = inner
        let size = (try? inner.size()) ?? 0
        self.state = sharing?.state ?? FaultPlan()
        let id = ObjectIdentifier(inner)
        state.withLock { s in
            s.sizeAtSync[id] = size
            s.files[id] = inner
        }
    }

    var path: String { inner.path }

    func size() throws -> UInt64 { try inner.size() }

    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws {
        let fail = state.withLock { s -> Bool in
            s.reads += 1
            return s.failReads
        }
        if fail { throw StorageError.io(operation: "pread", path: path, errno: 5) }
        try inner.read(into: buffer, at: offset)
    }

    /// The bytes currently at `offset ..< offset + count`, zeros past the end of the file.
    private func currentBytes(at offset: UInt64, count: Int) throws -> [UInt8] {
        var old = [UInt8](repeating: 0, count: count)
        let size = try inner.size()
        if offset < size {
            let available = Int(min(UInt64(count), size - offset))
            try old.withUnsafeMutableBytes { (b) throws in
                try inner.read(into: UnsafeMutableRawBufferPointer(rebasing: b[0..<available]), at: offset)
            }
        }
        return old
    }

    private enum WriteOutcome { case ok, fail(Int32, partial: Bool), limit(UInt64), off(partial: Bool) }

    /// Applies the fault plan to one write of `count` bytes at `offset`.
    private func plan(offset: UInt64, count: Int) -> WriteOutcome {
        state.withLock { s -> WriteOutcome in
            s.writes += 1
            if s.powerOff { return .off(partial: false) }
            if let cut = s.cutPowerAtWrite, s.writes >= cut {
                s.powerOff = true
                return .off(partial: s.partial)
            }
            if s.failWrite == s.writes { return .fail(s.writeErrno, partial: s.partial) }
            if let limit = s.diskLimit, offset + UInt64(count) > limit { return .limit(limit) }
            return .ok
        }
    }

    private func journaled(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        let old = try currentBytes(at: offset, count: bytes.count)
        let id = self.id
        state.withLock { $0.journal.append((id, offset, old)) }
        try inner.write(bytes, at: offset)
    }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        switch plan(offset: offset, count: bytes.count) {
        case .ok:
            try journaled(bytes, at: offset)
        case .fail(let errno, let partial):
            if partial { try journaled(UnsafeRawBufferPointer(rebasing: bytes[0..<(bytes.count / 2)]), at: offset) }
            throw StorageError.io(operation: "pwrite", path: path, errno: errno)
        case .limit(let limit):
            if offset < limit { try journaled(UnsafeRawBufferPointer(rebasing: bytes[0..<Int(limit - offset)]), at: offset) }
            throw StorageError.io(operation: "pwrite", path: path, errno: 28)
        case .off(let partial):
            if partial { try journaled(UnsafeRawBufferPointer(rebasing: bytes[0..<(bytes.count / 2)]), at: offset) }
            throw StorageError.io(operation: "pwrite", path: path, errno: 5)
        }
    }

    func write(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        // One call, one fault decision; the bytes go down one buffer at a time so they can be journaled.
        let total = buffers.reduce(0) { $0 + $1.count }
        var joined = [UInt8]()
        joined.reserveCapacity(total)
        for b in buffers { joined.append(contentsOf: b) }
        try joined.withUnsafeBytes { (all) throws in
            switch plan(offset: offset, count: total) {
            case .ok:
                try journaled(all, at: offset)
            case .fail(let errno, let partial):
                if partial { try journaled(UnsafeRawBufferPointer(rebasing: all[0..<(total / 2)]), at: offset) }
                throw StorageError.io(operation: "pwritev", path: path, errno: errno)
            case .limit(let limit):
                if offset < limit { try journaled(UnsafeRawBufferPointer(rebasing: all[0..<Int(min(UInt64(total), limit - offset))]), at: offset) }
                throw StorageError.io(operation: "pwritev", path: path, errno: 28)
            case .off(let partial):
                if partial { try journaled(UnsafeRawBufferPointer(rebasing: all[0..<(total / 2)]), at: offset) }
                throw StorageError.io(operation: "pwritev", path: path, errno: 5)
            }
        }
    }

    func sync() throws {
        let outcome = state.withLock { s -> Bool in
            s.syncs += 1
            if let cut = s.cutPowerAtSync, s.syncs >= cut { s.powerOff = true }
            return !s.powerOff && s.failSync != s.syncs
        }
        if !outcome { throw StorageError.io(operation: "fdatasync", path: path, errno: 5) }
        try inner.sync()
        let size = try inner.size()
        let id = self.id
        state.withLock { s in
            s.journal.removeAll { $0.file == id }
            s.sizeAtSync[id] = size
        }
    }

    func truncate(to length: UInt64) throws {
        let outcome = state.withLock { s -> Int32? in
            if s.powerOff { return 5 }
            if let limit = s.diskLimit, length > limit { return 28 }
            return nil
        }
        if let errno = outcome { throw StorageError.io(operation: "ftruncate", path: path, errno: errno) }
        try inner.truncate(to: length)
    }

    func map(length: Int, writable: Bool) throws -> UnsafeMutableRawPointer { try inner.map(length: length, writable: writable) }
    func unmap(_ address: UnsafeMutableRawPointer, length: Int) { inner.unmap(address, length: length) }
    func lock(offset: Int64, length: Int64, exclusive: Bool, wait: Bool) throws -> Bool {
        try inner.lock(offset: offset, length: length, exclusive: exclusive, wait: wait)
    }
    func unlock(offset: Int64, length: Int64) { inner.unlock(offset: offset, length: length) }
    func isLockedByOthers(offset: Int64, length: Int64) -> Bool? { inner.isLockedByOthers(offset: offset, length: length) }

    // MARK: Controls

    var writes: Int { state.withLock { $0.writes } }
    var syncs: Int { state.withLock { $0.syncs } }
    var unsyncedWrites: Int { state.withLock { $0.journal.count } }

    /// Fails the `n`th write from now (1 = the next one).
    func failWrite(in n: Int, errno: Int32 = 5, partial: Bool = false) {
        state.withLock { s in
            s.failWrite = s.writes + n
            s.writeErrno = errno
            s.partial = partial
        }
    }

    /// Fails the `n`th sync from now.
    func failSync(in n: Int) { state.withLock { $0.failSync = $0.syncs + n } }

    /// Cuts the power at the `n`th write from now (that write half-done when `partial`).
    func cutPower(atWrite n: Int, partial: Bool = false) {
        state.withLock { s in
            s.cutPowerAtWrite = s.writes + n
            s.partial = partial
        }
    }

    /// Cuts the power when the `n`th sync from now is attempted: it makes nothing durable.
    func cutPower(atSync n: Int) { state.withLock { $0.cutPowerAtSync = $0.syncs + n } }

    func setDiskLimit(_ bytes: UInt64?) { state.withLock { $0.diskLimit = bytes } }
    func setFailReads(_ fail: Bool) { state.withLock { $0.failReads = fail } }

    func clearFaults() {
        state.withLock { s in
            s.failWrite = nil
            s.failSync = nil
            s.cutPowerAtWrite = nil
            s.cutPowerAtSync = nil
            s.powerOff = false
            s.diskLimit = nil
            s.partial = false
            s.failReads = false
        }
    }

    /// Power loss: writes since the last successful sync are lost. With `keep` nil all of them are
    /// (and the file shrinks back to its synced size); otherwise each `chunk`-byte piece of each
    /// lost write survives when `keep` says so. Call with every store handle on the file released.
    func losePower(chunk: Int = 4096, keep: ((Int) -> Bool)? = nil) throws {
        let (journal, sizeAtSync, files) = state.withLock { s in
            let j = s.journal
            s.journal.removeAll()
            s.powerOff = false
            s.cutPowerAtWrite = nil
            s.cutPowerAtSync = nil
            return (j, s.sizeAtSync, s.files)
        }
        var piece = 0
        // Newest first, so that a place written twice ends up with its oldest surviving content.
        for entry in journal.reversed() {
            guard let file = files[entry.file] else { continue }
            var start = 0
            while start < entry.old.count {
                let end = min(entry.old.count, start + chunk)
                let lose = keep.map { !$0(piece) } ?? true
                piece += 1
                if lose {
                    try entry.old[start..<end].withUnsafeBytes { (b) throws in try file.write(b, at: entry.offset + UInt64(start)) }
                }
                start = end
            }
        }
        // This file, and every file that lost writes (a file renamed into place, such as a
        // creation's temporary one, may be another name of this one: it is left as it is).
        var touched = Set(journal.map(\.file))
        touched.insert(id)
        for fileID in touched {
            guard let file = files[fileID] else { continue }
            if keep == nil, let synced = sizeAtSync[fileID], try file.size() > synced { try file.truncate(to: synced) }
            try file.sync()
            let size = try file.size()
            state.withLock { $0.sizeAtSync[fileID] = size }
        }
    }
}

/// The fault plan the files of one store share (see `FaultyFile`).
final class FaultPlan: Sendable {
    private let mutex = Mutex(FaultyFile.State())
    func withLock<R, E: Error>(_ body: (inout sending FaultyFile.State) throws(E) -> sending R) throws(E) -> sending R { try mutex.withLock(body) }
}

/// Holds a weak reference so a test can check that a store's environment is gone before reopening.
final class WeakEnvironmentRef {
    weak var environment: Environment?
    init(_ environment: Environment) { self.environment = environment }
}

/// Opens `path` with its page file seen through a new `FaultyFile`. Without idle-time compaction:
/// a background commit would use up a fault armed for the test's own next commit.
func openFaulty(_ path: String, _ options: StoreOptions) throws -> (Store, FaultyFile) {
    var created: FaultyFile?
    var options = options
    options.compaction.idleDelay = nil
    let store = try Store(path: path, options: options) { inner in
        let faulty = FaultyFile(inner, sharing: created)
        created = faulty
        return faulty
    }
    return (store, try #require(created))
}

/// The store's whole content: tree name → entries.
typealias Contents = [String: [[UInt8]: [UInt8]]]

func contents(of store: Store) throws -> Contents {
    try store.read { try snapshotContents($0) }
}

/// Random puts and deletes in a few trees, applied to the transaction and to `model`.
func mutate(_ txn: WriteTransaction, _ model: inout Contents, _ rng: inout SplitMix, operations: Int, keySpace: Int = 4000) throws {
    for _ in 0..<operations {
        let name = ["a", "b", "c"][rng.below(3)]
        let tree = try txn.createTree(name)
        if model[name] == nil { model[name] = [:] }
        let key = bigEndianKey(UInt64(rng.below(keySpace)))
        if rng.percent(25) {
            try tree.delete(key)
            model[name]?[key] = nil
        } else {
            let value = rng.byteArray(rng.percent(2) ? rng.within(1500...12_000) : rng.within(0...90))
            try tree.put(key, value)
            model[name]?[key] = value
        }
    }
}

/// How a fault-injection test opens its store: the sync protocol, and whether transactions spill
/// (keep at most 64 pages in memory, so their commits' pages are mostly written before the commit,
/// and a fault can strike a spill).
struct FaultMode: Sendable, CustomStringConvertible, CustomTestStringConvertible {
    var sync: SyncMode
    var spilling = false

    static let all = [FaultMode(sync: .single), FaultMode(sync: .double), FaultMode(sync: .single, spilling: true)]

    var options: StoreOptions {
        var options = StoreOptions(durability: .full, syncMode: sync)
        if spilling { options.transactionMemory = 0 }
        return options
    }

    var description: String { "\(sync)\(spilling ? " spilling" : "")" }
    var testDescription: String { description }
}

@Suite struct FaultInjectionTests {
    /// Opens, seeds with `initial` operations committed durably, and returns the pieces.
    static func seeded(_ mode: FaultMode, seed: UInt64, initial: Int = 3000) throws -> (
        path: String, store: Store, faulty: FaultyFile, model: Contents, rng: SplitMix
    ) {
        let path = temporaryPath("fault\(mode)")
        let (store, faulty) = try openFaulty(path, mode.options)
        var rng = SplitMix(seed: seed)
        var model: Contents = [:]
        try store.write { txn in try mutate(txn, &model, &rng, operations: initial) }
        return (path, store, faulty, model, rng)
    }

    /// Checks that a failed commit threw the injected error, left the previous commit readable (also
    /// to a snapshot taken before it), and that the next transaction commits; returns the new model.
    static func expectFailedCommitRecovers(
        _ store: Store, _ faulty: FaultyFile, _ model: inout Contents, _ rng: inout SplitMix,
        errno: Int32, operations: Int, context: String
    ) throws -> Bool {
        let before = try store.stats()
        let snapshot = try store.beginRead()
        defer { snapshot.end() }
        var attempted = model
        do {
            try store.write { txn in try mutate(txn, &attempted, &rng, operations: operations) }
            model = attempted  // the fault was not reached: the commit went through
            return false
        } catch let error as StorageError {
            guard case .io(_, _, let got) = error, got == errno else {
                Issue.record("\(context): commit threw \(error), expected an I/O error with errno \(errno)")
                return true
            }
        }
        faulty.clearFaults()
        // The previous state is what this process reads, in old and new snapshots.
        #expect(try contents(of: store) == model, "\(context): the failed commit is visible")
        #expect(try snapshotContents(snapshot) == model, "\(context): the snapshot from before changed")
        #expect(try store.stats().txnid == before.txnid, "\(context): the transaction id moved")
        // The next transaction works and commits.
        try store.write { txn in try mutate(txn, &model, &rng, operations: 300) }
        #expect(try contents(of: store) == model, "\(context): the commit after the failure")
        #expect(try store.stats().txnid == before.txnid + 1)
        return true
    }

    /// Drops every handle, checks the environment is gone, then reopens `path` (without faults) and
    /// compares the content with `expected`.
    static func reopenAndCheck(_ path: String, _ environment: WeakEnvironmentRef, expected: [Contents], context: String) throws -> Int? {
        #expect(environment.environment == nil, "\(context): the environment outlived its handles")
        let store = try Store(path: path)
        let found = try contents(of: store)
        let index = expected.firstIndex(of: found)
        #expect(index != nil, "\(context): after reopening, the content matches none of the \(expected.count) acceptable states")
        return index
    }

    /// The Nth write of a commit fails (EIO, whole or half-done), for every write the commit makes.
    @Test(arguments: FaultMode.all)
    func failedWriteLeavesPreviousState(mode: FaultMode) throws {
        var (path, store, faulty, model, rng) = try Self.seeded(mode, seed: 11)
        defer { removeStoreFiles(path) }
        var failures = 0
        for partial in [false, true] {
            for n in 1...40 {
                faulty.failWrite(in: n, partial: partial)
                let failed = try Self.expectFailedCommitRecovers(
                    store, faulty, &model, &rng, errno: 5, operations: 400,
                    context: "\(mode) write \(n) partial \(partial)")
                faulty.clearFaults()
                if !failed { break }
                failures += 1
            }
        }
        #expect(failures >= 4, "the commits made too few writes to test")
        let environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()  // release the faulty handle
        _ = faulty
        _ = try Self.reopenAndCheck(path, environment, expected: [model], context: "\(mode) after failed writes")
    }

    /// The first (and, in double mode, the second) sync of a commit fails.
    @Test(arguments: FaultMode.all)
    func failedSyncLeavesPreviousState(mode: FaultMode) throws {
        var (path, store, faulty, model, rng) = try Self.seeded(mode, seed: 12)
        defer { removeStoreFiles(path) }
        for n in 1...(mode.sync == .single ? 1 : 2) {
            faulty.failSync(in: n)
            let failed = try Self.expectFailedCommitRecovers(store, faulty, &model, &rng, errno: 5, operations: 200, context: "\(mode) sync \(n)")
            #expect(failed, "\(mode): sync \(n) of a durable commit was not attempted")
        }
        // A noSync commit makes no sync, so a sync fault does not touch it; but the first of a run
        // makes the commit before it the commit log's frame (CommitLog.pin), unless the log holds
        // it already (a durable commit that went through the log): that sync failing fails the
        // commit, which then changes nothing.
        faulty.failSync(in: 1)
        var attempted = model
        do {
            try store.write(durability: .noSync) { txn in try mutate(txn, &attempted, &rng, operations: 50) }
            model = attempted
            #expect(mode.sync == .single && !mode.spilling, "\(mode): the run's first commit did not pin the durable commit before it")
        } catch let error as StorageError {
            guard case .io = error else { throw error }
            #expect(!(mode.sync == .single && !mode.spilling), "\(mode): a .noSync commit after a logged one synced")
            #expect(try contents(of: store) == model, "\(mode): the failed .noSync commit left a trace")
        }
        faulty.clearFaults()
        try store.write { txn in try mutate(txn, &model, &rng, operations: 50) }
        let environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()
        _ = try Self.reopenAndCheck(path, environment, expected: [model], context: "\(mode) after failed syncs")
    }

    /// A full disk: growing the file fails with ENOSPC; the store stays usable and, once space is
    /// freed, commits again.
    @Test(arguments: FaultMode.all)
    func diskFull(mode: FaultMode) throws {
        var (path, store, faulty, model, rng) = try Self.seeded(mode, seed: 13)
        defer { removeStoreFiles(path) }
        let size = try faulty.size()
        faulty.setDiskLimit(size + 8 * 4096)
        // Small commits fit in free pages and the slack; big ones eventually need more room.
        var sawENOSPC = false
        for attempt in 0..<20 {
            let failed = try Self.expectFailedCommitRecovers(
                store, faulty, &model, &rng, errno: 28, operations: 2000,
                context: "\(mode) disk full attempt \(attempt)")
            if failed { sawENOSPC = true; break }
        }
        #expect(sawENOSPC, "\(mode): the disk never filled up")
        // expectFailedCommitRecovers cleared the limit and committed again; do one more big one.
        try store.write { txn in try mutate(txn, &model, &rng, operations: 3000) }
        let environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()
        _ = try Self.reopenAndCheck(path, environment, expected: [model], context: "\(mode) after a full disk")
    }

    /// A read error while opening is reported as an I/O error, not a crash or a wrong answer.
    @Test func readErrorOnOpen() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        do {
            let store = try Store(path: path)
            _ = try store.write { try $0.createTree("t").put([1], [1]) }
        }
        #expect(throws: StorageError.io(operation: "pread", path: path, errno: 5)) {
            _ = try Store(path: path, options: StoreOptions()) { inner in
                let faulty = FaultyFile(inner)
                faulty.setFailReads(true)
                return faulty
            }
        }
        #expect(try Store(path: path).read { try $0.tree("t")?.get([1]) } == [1])
    }

    /// Power loss after durable commits and a few noSync ones: every unsynced write is lost, and the
    /// store opens at the last synced commit with all its data. A later durable commit makes the
    /// noSync ones before it durable too.
    @Test(arguments: FaultMode.all)
    func powerLossLosesOnlyUnsyncedCommits(mode: FaultMode) throws {
        var (path, store, faulty, model, rng) = try Self.seeded(mode, seed: 21)
        defer { removeStoreFiles(path) }
        for _ in 0..<3 { try store.write { txn in try mutate(txn, &model, &rng, operations: 500) } }
        var synced = model
        var states = [model]
        for _ in 0..<4 {
            // A run syncs only to pin (or renew the pin of) the commit it began from (RunPin.swift),
            // which is durable from then on.
            let before = (model, faulty.syncs)
            try store.write(durability: .noSync) { txn in try mutate(txn, &model, &rng, operations: 500) }
            if faulty.syncs > before.1 { synced = before.0 }
            states.append(model)
        }
        #expect(faulty.unsyncedWrites > 0)
        var environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()
        try faulty.losePower()
        let index = try Self.reopenAndCheck(path, environment, expected: states, context: "\(mode) lost noSync commits")
        #expect(index.map { states[$0] } == synced, "\(mode): opened at state \(String(describing: index)), not the last one synced")

        // noSync commits followed by a durable one all survive.
        (store, faulty) = try openFaulty(path, mode.options)
        model = synced
        for _ in 0..<3 { try store.write(durability: .noSync) { txn in try mutate(txn, &model, &rng, operations: 300) } }
        try store.write { txn in try mutate(txn, &model, &rng, operations: 10) }
        environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()
        try faulty.losePower()
        _ = try Self.reopenAndCheck(path, environment, expected: [model], context: "\(mode) noSync then full")
    }

    /// The power goes off at each write of a durable commit in turn (the write torn in half or not),
    /// and every unsynced write is lost: the store opens at the previous commit.
    @Test(arguments: FaultMode.all)
    func powerCutDuringCommit(mode: FaultMode) throws {
        var (path, store, faulty, model, rng) = try Self.seeded(mode, seed: 22)
        defer { removeStoreFiles(path) }
        var cuts = 0
        for n in 1...30 {
            faulty.cutPower(atWrite: n, partial: n % 2 == 0)
            var attempted = model
            do {
                try store.write { txn in try mutate(txn, &attempted, &rng, operations: 400) }
                faulty.clearFaults()
                break  // the commit made fewer than n writes
            } catch let error as StorageError {
                guard case .io = error else { Issue.record("\(mode) cut \(n): \(error)"); break }
            }
            cuts += 1
            let environment = WeakEnvironmentRef(store.env)
            store = try Store.inMemory()
            try faulty.losePower()
            _ = try Self.reopenAndCheck(path, environment, expected: [model], context: "\(mode) power cut at write \(n)")
            (store, faulty) = try openFaulty(path, mode.options)
        }
        #expect(cuts >= 3)
    }

    /// Power loss that keeps a random subset of the unsynced writes, page by page or 512-byte sector
    /// by sector (torn pages), at a random point of a durable commit (a write or a sync). The store
    /// must open at the previous commit or, if everything of the new one happened to reach the disk,
    /// at the new one: never anything else, and never an error.
    @Test(arguments: FaultMode.all)
    func randomPartialPowerLoss(mode: FaultMode) throws {
        let seed: UInt64 = mode.sync == .single ? (mode.spilling ? 0xB0_0003 : 0xB0_0001) : 0xB0_0002
        let iterations = TestEnv.int("STRATA_POWER_LOSS_ITERATIONS", default: 40)
        var (path, store, faulty, model, rng) = try Self.seeded(mode, seed: seed, initial: 6000)
        defer { removeStoreFiles(path) }
        var openedAtNew = 0
        var openedAtOld = 0
        var recordRuns = 0
        for iteration in 0..<iterations {
            // A large commit sometimes (rewriting much of a tree, so its record needs a run of pages).
            let large = iteration % 3 == 0
            let writesBefore = faulty.writes
            let syncsBefore = faulty.syncs
            // Find out how many writes and syncs such a commit makes by making the same kind first.
            try store.write { txn in try mutate(txn, &model, &rng, operations: large ? 9000 : 300, keySpace: large ? 12_000 : 4000) }
            if try newestRecordRun(store) != 0 { recordRuns += 1 }
            let writesPerCommit = faulty.writes - writesBefore
            let syncsPerCommit = faulty.syncs - syncsBefore
            if rng.percent(50) {
                faulty.cutPower(atWrite: rng.within(1...max(1, writesPerCommit)), partial: rng.percent(50))
            } else {
                faulty.cutPower(atSync: rng.within(1...max(1, syncsPerCommit)))
            }
            var attempted = model
            var committed = false
            do {
                try store.write { txn in try mutate(txn, &attempted, &rng, operations: large ? 9000 : 300, keySpace: large ? 12_000 : 4000) }
                committed = true
            } catch let error as StorageError {
                guard case .io = error else { Issue.record("seed \(seed) iteration \(iteration): \(error)"); return }
            }
            if committed {
                // This commit made fewer writes or syncs than the one measured: the cut never came.
                faulty.clearFaults()
                model = attempted
                continue
            }
            let environment = WeakEnvironmentRef(store.env)
            store = try Store.inMemory()
            let chunk = rng.percent(30) ? 512 : 4096
            var keepRng = SplitMix(seed: seed &+ UInt64(iteration))
            let keepShare = rng.within(0...100)
            try faulty.losePower(chunk: chunk) { _ in keepRng.percent(keepShare) }
            let index = try Self.reopenAndCheck(
                path, environment, expected: [model, attempted],
                context: "seed \(seed) iteration \(iteration) (\(mode), chunk \(chunk), keep \(keepShare)%)")
            if index == 1 { model = attempted; openedAtNew += 1 } else { openedAtOld += 1 }
            if index == nil { return }
            (store, faulty) = try openFaulty(path, mode.options)
            // The reopened store is fully writable.
            try store.write { txn in try mutate(txn, &model, &rng, operations: 50) }
        }
        print(
            "FaultInjectionTests (\(mode)): \(iterations) partial power losses: opened at the previous commit \(openedAtOld) times, at the torn commit \(openedAtNew) times; \(recordRuns) commits used a record run"
        )
        #expect(recordRuns > 0, "no commit was large enough to need a commit-record run")
    }
}

/// The newest commit's record run (0 when its record is inline).
func newestRecordRun(_ store: Store) throws -> UInt64 {
    try store.read { txn in txn.meta.recordRun }
}
