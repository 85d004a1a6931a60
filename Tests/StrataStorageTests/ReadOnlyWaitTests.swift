import Testing
@testable import StrataStorage
import StrataTestWorkloads
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// A read-only snapshot that finds another process's commit written but not yet published waits for
// it, bounded in time, and only while a writer holds the writer lock (ReadOnly.swift,
// `readOnlySnapshot`); a dead writer's unpublished commit delays nothing. From an independent
// review (2026-12-04), whose two failing tests these were.

private func lockLatest(_ path: String) throws -> UInt64 {
    let fd = open(LockFileName.path(for: path), O_RDONLY)
    guard fd >= 0 else { throw StorageError.io(operation: "open lock", path: path, errno: errno) }
    defer { close(fd) }
    var value: UInt64 = 0
    _ = pread(fd, &value, 8, off_t(LockLayout.latestOffset))
    return value
}

/// Sets the lock file's published `latest`, as a writer killed in its sync leaves it.
private func setLockLatest(_ path: String, _ latest: UInt64) throws {
    let fd = open(LockFileName.path(for: path), O_RDWR)
    guard fd >= 0 else { throw StorageError.io(operation: "open lock", path: path, errno: errno) }
    defer { close(fd) }
    var value = latest
    _ = pwrite(fd, &value, 8, off_t(LockLayout.latestOffset))
}

private func milliseconds(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
}

/// Forwards to a file; while `held`, a sync waits (a writer inside a long sync: a slow disk, a big commit).
final class SlowSyncFile: ForwardingFile {
    let inner: any FileIO
    let held = Atomic<Bool>(false)
    let inSync = Atomic<Bool>(false)
    /// The page file's wrapper, for the commit log's: a commit's sync is held whichever file it syncs.
    private let pageFile: SlowSyncFile?
    init(_ inner: any FileIO, logOf pageFile: SlowSyncFile? = nil) {
        self.inner = inner
        self.pageFile = pageFile
    }
    func sync() throws {
        let control = pageFile ?? self
        control.inSync.store(true, ordering: .sequentiallyConsistent)
        while control.held.load(ordering: .sequentiallyConsistent) { usleep(1000) }
        control.inSync.store(false, ordering: .sequentiallyConsistent)
        try inner.sync()
    }
}

final class ReviewFlag: Sendable {
    let value = Atomic<Bool>(false)
}

final class SlowSyncBox: Sendable {
    let file = Mutex<SlowSyncFile?>(nil)
}

@Suite struct ReadOnlyWaitTests {
    /// Beside a writer held in a long sync after a big commit, one snapshot waits about 50 ms and
    /// verifies the commit before once (the wait was 250 tries, each verifying that commit again:
    /// seconds).
    @Test func theWaitForAnUnpublishedCommitIsBoundedInTime() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        try Store(path: path, options: StoreOptions(durability: .noSync)).close()
        // Opened first, the read-only store is an environment of its own beside the writer's below.
        let reader = try Store(path: path, options: StoreOptions(readOnly: true))
        _ = try reader.read { $0.txnid }
        let box = SlowSyncBox()
        let writer = try Store(path: path, options: StoreOptions(durability: .full)) { file in
            if file.path.hasSuffix("-log"), let pageFile = box.file.withLock({ $0 }) { return SlowSyncFile(file, logOf: pageFile) }
            let slow = SlowSyncFile(file)
            box.file.withLock { $0 = slow }
            return slow
        }
        #expect(writer.env !== reader.env)
        // Commit S: a big one (about 1,000 pages), which the reader has not verified.
        try writer.write { txn in
            let t = try txn.createTree("big")
            for i in 0..<4000 { try t.put(Array("k\(i)".utf8), [UInt8](repeating: UInt8(i & 0xFF), count: 900)) }
        }
        let s = writer.env.readers.latest
        // Commit S + 1 stops in its sync, its meta page written.
        let slow = try #require(box.file.withLock { $0 })
        slow.held.store(true, ordering: .sequentiallyConsistent)
        let done = ReviewFlag()
        Thread.detachNewThread {
            _ = try? writer.write { try $0.createTree("small").put([1], [1]) }
            done.value.store(true, ordering: .sequentiallyConsistent)
        }
        while !slow.inSync.load(ordering: .sequentiallyConsistent) { usleep(1000) }
        var seen: UInt64 = 0
        let waited = try milliseconds { seen = try reader.read { $0.txnid } }
        slow.held.store(false, ordering: .sequentiallyConsistent)
        while !done.value.load(ordering: .sequentiallyConsistent) { usleep(1000) }
        let meta = try Recovery.readMeta(file: writer.env.file, slot: s % 2, pageSize: writer.env.pageSize)
        let once = try milliseconds { try Recovery.verifyCommit(meta, map: UnsafeRawPointer(writer.env.maps.current.base), pageSize: writer.env.pageSize) }
        print(
            "ReadOnlyWaitTests: one read-only snapshot beside a writer in its sync took \(waited) ms (txnid \(seen), S = \(s)); verifying commit S once: \(once) ms"
        )
        #expect(seen == s)
        #expect(waited < 1_000, "one read-only snapshot took \(waited) ms, not about 50")
    }

    /// A writer killed during its sync (meta page L written, `latest` still L - 1) while another
    /// process keeps the file open read-write: nobody is inside a commit, and the meta page stays
    /// unpublished until the survivor next writes. A read-only snapshot should not wait for a
    /// publication that cannot come.
    @Test func aDeadWritersUnpublishedCommitDoesNotDelayEveryReadOnlySnapshot() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            for i in 0..<5 { _ = try store.write { try $0.createTree("t").put(Array("k\(i)".utf8), [UInt8(i)]) } }
            store.close()
        }
        // The survivor: a process with the file open read-write (recovery publishes L).
        let survivor = try HelperProcess(path: helper, arguments: ["hold-reader", path])
        let line = try await survivor.readLine()
        #expect(line?.hasPrefix("snapshot ") == true, "\(String(describing: line)) \(survivor.errorOutput())")
        let latest = try lockLatest(path)

        let reader = try Store(path: path, options: StoreOptions(readOnly: true))
        let before = try milliseconds { for _ in 0..<10 { _ = try reader.read { $0.txnid } } }
        // The writer of L died in its sync: L is on disk, `latest` is L - 1.
        try setLockLatest(path, latest - 1)
        var seen: UInt64 = 0
        let after = try milliseconds { for _ in 0..<10 { seen = try reader.read { $0.txnid } } }
        #expect(seen == latest - 1)
        print("ReadOnlyWaitTests: 10 read-only snapshots: \(before) ms published, \(after) ms beside a dead writer's meta page")
        #expect(after < 500, "10 read-only snapshots took \(after) ms (\(before) ms before): each waited for a dead writer's commit")

        survivor.send("go")
        _ = try await survivor.waitForExit(timeout: 60)
        // Nobody has it open now: no wait, the newest verifying commit.
        let alone = try milliseconds { for _ in 0..<10 { seen = try reader.read { $0.txnid } } }
        #expect(alone < 500 && seen == latest, "alone: \(alone) ms, txnid \(seen)")
    }

    /// Beside a writer committing durably without pause (its sync is most of each commit),
    /// one-shot read-only reads are consistent or say the file changed, and none is starved: a read
    /// tried again after each "changed" succeeds in fewer than 50 tries, half the 100 opening allows
    /// itself. (How many tries fail depends on the machine's load against the writer's commit rate:
    /// 1 in 8 to 1 in 18 alone, up to 3 in 5 once under the whole suite, where the longest run of
    /// failures to expect at that rate is about 18.)
    @Test func readOnlyReadsBesideADurableWriterAreExactAndNotStarved() async throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let writer = try await HelperProcess.commitLoop(on: path)
        defer { writer.process.send(SIGKILL) }
        var opened: Store?
        var openFailures = 0
        while opened == nil {
            do { opened = try Store(path: path, options: StoreOptions(readOnly: true)) } catch StorageError.fileChangedDuringRead { openFailures += 1 }
        }
        let reader = opened!
        var ok = 0
        var changed = 0
        // The most "changed" in a row: the tries one read would have needed.
        var failedInARow = 0
        var mostFailedInARow = 0
        var wrong: [String] = []
        let deadline = Date().addingTimeInterval(6)
        var slowest = 0.0
        while Date() < deadline {
            do {
                var result: String?
                let t = try milliseconds {
                    result = try reader.read { txn -> String? in
                        let last = CrashWorkload.u64(try txn.tree("meta")?.get(Array("last".utf8))) ?? 0
                        let keep = try txn.tree("keep")?.count ?? 0
                        let data = try txn.tree("data")?.count ?? 0
                        let expectedData = Int(min(last, CrashWorkload.window)) * CrashWorkload.keysPerTransaction
                        if keep != Int(last) || data != expectedData { return "last \(last) keep \(keep) data \(data)" }
                        var n = 0
                        try txn.tree("keep")?.forEach { _, _ in
                            n += 1
                            return true
                        }
                        return n == keep ? nil : "keep walked \(n) of \(keep)"
                    }
                }
                slowest = max(slowest, t)
                if let result { wrong.append(result) } else { ok += 1 }
                failedInARow = 0
            } catch StorageError.fileChangedDuringRead {
                changed += 1
                failedInARow += 1
                mostFailedInARow = max(mostFailedInARow, failedInARow)
            }
        }
        print(
            "ReadOnlyWaitTests: durable writer: \(openFailures) opens said changed, \(ok) reads ok, \(changed) changed (at most \(mostFailedInARow) in a row), slowest \(slowest) ms, \(wrong.count) wrong"
        )
        #expect(wrong.isEmpty, "inconsistent reads: \(wrong.prefix(5))")
        #expect(ok > 0, "no read succeeded, \(changed) said the file changed")
        #expect(mostFailedInARow < 50, "a read said the file changed \(mostFailedInARow) times in a row (\(ok) ok, \(changed) changed)")
    }
}
