import Foundation
import Synchronization
import Testing

@testable import StrataStorage

#if os(Linux)
/// Locks between processes, from a review of several processes on one file (2026-12-07). (Linux:
/// a second descriptor of this process stands in for another process, as open file description
/// locks allow; classic fcntl locks never conflict within a process.)
@Suite struct LockReviewTests {
    /// Two live processes can bear one pid number (containers sharing the volume, each process
    /// 1). The second to open cleared every slot of "its" pid as a dead process's, the first's
    /// live snapshot among them, and its writer could then reuse the pages that snapshot reads.
    /// Another holder of the pid's byte means the slots may be live: they stay.
    @Test func slotsOfALiveProcessBearingThisPidElsewhereStay() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 17)
        let old: UInt64
        do {
            let store = try Store(path: path, options: .countingEveryCommit(durability: .noSync))
            try lockHuntChurn(store, rounds: 3, rng: &rng)
            old = try store.read { $0.txnid }
        }
        // Another process has the file open (so the table is not formatted at the opening).
        let writer = try HelperProcess(path: helper, arguments: ["writer", path, "W", "5", "--gate"])
        #expect(try await writer.readLine() == "ready W")
        let map = try LockHuntLockMap(path: path)
        let slot = map.plantSlot(pid: UInt64(getpid()), txnid: old)
        // The other process with this pid: a descriptor of its own (open file description locks
        // are per descriptor) holding the pid's byte, as that process does.
        let other = try PosixFile(path: LockFileName.path(for: path), mode: .readWrite)
        #expect(try other.lock(offset: LockLayout.pidByte(currentPID()), length: 1, exclusive: false, wait: true))
        let store = try Store(path: path, options: .countingEveryCommit(durability: .noSync))
        try lockHuntChurn(store, rounds: 5, rng: &rng)
        #expect(map.owner(slot) == UInt64(getpid()), "the other process's slot was cleared")
        #expect(store.readers().contains { $0.txnid == old }, "\(store.readers())")
        store.close()
        other.unlock(offset: 0, length: 0)
        writer.send("go")
        try await writer.waitForExit()
        #expect(writer.succeeded, "\(writer.errorOutput())")
    }

    /// A read-write process that opens the file alone replays the commit log before anything
    /// reads it. It took its shared "alive" lock before the replay, and a read-only opening
    /// meanwhile took that for "a process is alive, the page cache holds every commit", skipped
    /// its check and could read pages the replay had not restored yet. The opener holds "alive"
    /// exclusively until the replay is done, and a read-only opening waits for it.
    // (Synchronous: on the test pool, a sleep of 300 ms could last past the opening's whole wait.)
    @Test func aReadOnlyOpeningWaitsForARecoveringOpener() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        do {
            let store = try Store(path: path)
            try store.write { _ = try $0.createTree("t").put([1], [1]) }
        }
        // The recovering opener: "alive" held exclusively by another descriptor.
        let recovering = try PosixFile(path: LockFileName.path(for: path), mode: .readWrite)
        #expect(try recovering.lock(offset: LockLayout.aliveLockByte, length: 1, exclusive: true, wait: false))
        let opened = Self.openReadOnlyInBackground(path)
        usleep(300_000)
        let early = opened.value.load(ordering: .sequentiallyConsistent)
        #expect(!early, "the read-only opening did not wait for the recovery")
        recovering.unlock(offset: 0, length: 0)
        #expect(Self.waitFor(opened))
    }
}

extension LockReviewTests {
    /// A read-only opening that waits for another process's recovery of its file waited while
    /// holding the process-wide registry of environments, so that every other opening in the
    /// process, of any file, waited as long (up to a minute). It now waits before taking it.
    @Test func aReadOnlyOpeningWaitingForARecoveryDoesNotHoldUpOtherFiles() throws {
        let path = temporaryPath()
        let elsewhere = temporaryPath("elsewhere")
        defer {
            removeStoreFiles(path)
            removeStoreFiles(elsewhere)
        }
        for p in [path, elsewhere] {
            let store = try Store(path: p)
            try store.write { _ = try $0.createTree("t").put([1], [1]) }
        }
        let recovering = try PosixFile(path: LockFileName.path(for: path), mode: .readWrite)
        #expect(try recovering.lock(offset: LockLayout.aliveLockByte, length: 1, exclusive: true, wait: false))
        let waitsBefore = Environment.recoveryWaitsBegun.load(ordering: .relaxed)
        let opened = Self.openReadOnlyInBackground(path)
        // Until the opening is inside its wait (otherwise the other file could open before it
        // took the registry, and the test would prove nothing).
        let inside = ContinuousClock.now + .seconds(30)
        while Environment.recoveryWaitsBegun.load(ordering: .relaxed) == waitsBefore && ContinuousClock.now < inside { usleep(1_000) }
        usleep(50_000)
        // The other file opens, read-only and read-write, while the first opening still waits.
        for readOnly in [true, false] {
            let other = try Store(path: elsewhere, options: StoreOptions(readOnly: readOnly))
            #expect(try other.read { try $0.tree("t")?.get([1]) } == [1])
            other.close()
        }
        let early = opened.value.load(ordering: .sequentiallyConsistent)
        #expect(!early, "the first opening did not wait for the recovery")
        recovering.unlock(offset: 0, length: 0)
        #expect(Self.waitFor(opened))
    }
}

extension LockReviewTests {
    /// Opens `path` read-only on a thread of its own and reads tree "t"'s key [1] (which must be
    /// [1]); the flag is set when the opening has ended, whether it opened or not.
    static func openReadOnlyInBackground(_ path: String) -> LockReviewFlag {
        let opened = LockReviewFlag()
        Thread {
            do {
                let store = try Store(path: path, options: StoreOptions(readOnly: true))
                #expect(try store.read { try $0.tree("t")?.get([1]) } == [1])
            } catch {
                Issue.record("read-only opening: \(error)")
            }
            opened.value.store(true, ordering: .sequentiallyConsistent)
        }.start()
        return opened
    }

    /// Whether `flag` is set within 60 s.
    static func waitFor(_ flag: LockReviewFlag) -> Bool {
        let deadline = ContinuousClock.now + .seconds(60)
        while !flag.value.load(ordering: .sequentiallyConsistent) && ContinuousClock.now < deadline { usleep(5_000) }
        return flag.value.load(ordering: .sequentiallyConsistent)
    }
}

final class LockReviewFlag: Sendable {
    let value = Atomic<Bool>(false)
}
#endif
