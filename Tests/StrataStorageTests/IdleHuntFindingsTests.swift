import StrataTestWorkloads
import Testing
@testable import StrataStorage
import Foundation
import Dispatch

/// Idle-time compaction bugs found by a hunt (IdleCompaction.swift), each failing before its fix;
/// the "suspect" lines name the code as it was then.
@Suite(.serialized) struct IdleHuntFindingsTests {
    /// Two handles of one file in this process share its environment, and so the idle timer
    /// (`IdleCompactionState`, one per file). The timer thread is started by whichever handle's
    /// commit found none running, and holds only that handle (weakly). Handle A commits holes
    /// (its thread starts), handle B then bulk-deletes (armed, but a thread is pending, so none
    /// starts for B), and A is closed (or released) before the delay: the thread sees A closed
    /// and exits, B's holes stay armed with no thread, and the file is never compacted while B
    /// stays open and quiet. SpaceAndCompaction.md: "a commit that ... frees a large part of the
    /// file, starts a timer: once no commit has been made through this process for idleDelay, a
    /// background thread makes compaction commits ... until the file is compact"; "it also stops
    /// when the database is closed" — B, which made the commit, is open. (Likewise the thread
    /// uses A's `idleDelay`, not B's.) Suspect IdleCompaction.swift:53 (a commit through B leaves
    /// the work to a thread holding another handle), :94 (`Handles(self)`) and :119 (`idleStep`
    /// stops on that one handle's close/release though the file is still open through B).
    @Test(arguments: [false, true])
    func closingTheHandleWhoseCommitStartedTheTimerCancelsAnotherHandlesCompaction(release: Bool) async throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let b = try Store(path: path, options: IdleHunt.options(idleMs: 50))
        var model: IdleHunt.Model = [:]
        try IdleHunt.put(b, 0..<20_000, into: &model)
        do {
            var a: Store? = try Store(path: path, options: IdleHunt.options(idleMs: 50))
            // A's commit leaves holes: the timer thread starts, holding A.
            try IdleHunt.delete(a!, 0..<2_000, from: &model)
            // B's bulk delete, within the delay: armed, the thread already pending.
            try IdleHunt.delete(b, 2_000..<20_000, keep: { $0 % 8 == 0 }, from: &model)
            if release { a = nil } else { a!.close() }
            _ = a
        }
        let holed = try b.stats()
        try #require(IdleHunt.isHoled(holed), "the deletes left no holes: \(holed)")
        // Polled until compact, or until the stuck state is reached (holes armed, no timer thread:
        // nothing will ever compact them while no commit comes), for up to 20 s.
        var stats = holed
        _ = try await IdleHunt.poll(seconds: 20) {
            stats = try b.stats()
            return IdleHunt.isCompact(stats) || b.env.idleCompaction.withLock { $0.armed && !$0.pending }
        }
        if !IdleHunt.isCompact(stats) { stats = try await IdleHunt.waitUntilCompact(b, seconds: 1) }
        #expect(IdleHunt.isCompact(stats), "B's bulk delete was never compacted after A \(release ? "went away" : "closed"): \(stats)")
        #expect(try b.read { try CompactionTests.contents($0) } == model)
        try IdleHunt.expectHealthy(b, "B")
        b.close()
    }

    /// A snapshot holds the pages a bulk delete's idle compaction would move, while a commit
    /// listener reads briefly after each commit (what any observer does: Database's observers,
    /// a UI reloading). The idle episode finds nothing to move or trim, yet `idleCompactionIsDue`
    /// says yes (reusable pages above the threshold), so it commits anyway; the listener's short
    /// read of that commit is among the "held" readers the episode then waits on
    /// (`IdleCommit.nothing(held:)` lists every reader, not the ones holding pages), it ends at
    /// once, the episode looks again and commits again: a loop of empty commits (up to 10,000 per
    /// episode) at full CPU for as long as the snapshot lives (here ~120 commits and ~1.3 s of
    /// CPU in 1.5 s). Without the listener the same setup makes 3 commits and ~0.15 s of CPU.
    /// Expected: "never busy-loop" — while a snapshot holds the holes, no commits (or a couple)
    /// and little CPU; once it ends, the file is compacted. Suspect IdleCompaction.swift:151-157
    /// (`.nothing(let held)` → `waitForAnyToEnd` returns `.ended` when any reader ends) with
    /// 214-221 (`noted = readers`, and a compaction commit made when nothing will move).
    @Test func aListenerThatReadsAfterEachCommitMakesTheIdleThreadCommitInALoop() async throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: IdleHunt.options(idleMs: 5))
        var model: IdleHunt.Model = [:]
        try IdleHunt.put(store, 0..<40_000, into: &model)
        let queue = DispatchQueue(label: "idlehunt.listener")
        let token = store.addCommitListener { _ in
            queue.async { _ = try? store.read { try $0.tree("data")?.get(bigEndianKey(4)) } }
        }
        try IdleHunt.delete(store, 0..<40_000, keep: { $0 % 4 == 0 }, from: &model)
        let idleThreads = IdleThreadCPU.idleThread(store)
        #expect(!idleThreads.isEmpty, "no idle compaction thread ran")
        let snapshot = try store.beginRead()
        let version = store.latestVersion
        let cpu0 = IdleThreadCPU.cpu(idleThreads)
        let wall0 = ContinuousClock.now
        try await Task.sleep(for: .milliseconds(1500))
        let cpu = IdleThreadCPU.cpu(idleThreads) - cpu0
        let wall = ContinuousClock.now - wall0
        let commits = store.latestVersion - version
        #expect(commits <= 4, "\(commits) idle compaction commits in \(wall) while a snapshot held the holes")
        #expect(cpu < wall / 5, "\(cpu) of CPU in \(wall) while a snapshot held the holes")
        #expect(try CompactionTests.contents(snapshot) == model)
        snapshot.end()
        let stats = try await IdleHunt.waitUntilCompact(store)
        #expect(IdleHunt.isCompact(stats), "\(stats)")
        #expect(try store.read { try CompactionTests.contents($0) } == model)
        token.invalidate()
        try IdleHunt.expectHealthy(store, "after")
        store.close()
    }

    /// Small deletes of contiguous keys, each freeing under a sixteenth of the file (not
    /// `freedMuch`), ten of them in a row, then quiet: 783 of 1697 pages (46%) end up free, nothing
    /// pending, and the file is never compacted. A commit checks the free list only every 16
    /// commits (`ShrinkLock.checkInterval`) unless the last check found it `moving` or the commit
    /// before freed much, so none of these commits learns that the file is more than an eighth
    /// free: none compacts itself, and `leavesHoles` (`compactionSchedule.moving || freedMuch`)
    /// is false for all, so the idle timer is never armed. (The same after an idle episode that
    /// found nothing to do at that page count.) SpaceAndCompaction.md: "a commit that leaves more
    /// than freeFraction free, or that frees a large part of the file, starts a timer: once no
    /// commit has been made through this process for idleDelay, a background thread makes
    /// compaction commits ... until the file is compact" — each of these commits leaves far more
    /// than an eighth free. Suspect Compaction.swift:153 (the check skipped between intervals)
    /// with :183-186 (`leavesHoles` trusting the last check's `moving`).
    @Test(arguments: [false, true])
    func smallDeletesInARowLeaveTheFileHalfEmptyForGood(afterAStuckEpisode: Bool) async throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: IdleHunt.options(idleMs: 20))
        var model: IdleHunt.Model = [:]
        try IdleHunt.put(store, 0..<20_000, into: &model)
        let pages = try store.stats().pageCount
        let perLeaf = 4096 / 320
        if afterAStuckEpisode {
            // The setup of IdleCompactionTests: an episode that finds nothing to do.
            try IdleHunt.delete(store, 5_000..<(5_000 + Int(pages) / 11 * perLeaf), from: &model)
            let stuck = await IdleHunt.poll { store.env.idleCompaction.withLock { $0.stuckAt != nil && !$0.pending } }
            try #require(stuck, "no idle episode found nothing to do: the setup no longer reaches the case")
        }
        // Small deletes of contiguous keys, each well under a sixteenth of the file.
        let step = Int(pages) / 24 * perLeaf
        var start = 10_000
        while start + step <= 20_000 {
            try IdleHunt.delete(store, start..<(start + step), from: &model)
            start += step
        }
        let holed = try store.stats()
        // Polled until compact, or until nothing is armed and no thread runs (then nothing will
        // compact while no commit comes), for up to 20 s.
        var stats = holed
        _ = try await IdleHunt.poll(seconds: 20) {
            stats = try store.stats()
            return IdleHunt.isCompact(stats) || store.env.idleCompaction.withLock { !$0.armed && !$0.pending }
        }
        if !IdleHunt.isCompact(stats) { stats = try await IdleHunt.waitUntilCompact(store, seconds: 1) }
        #expect(IdleHunt.isCompact(stats), "never compacted after the small deletes: \(holed.freePages) of \(holed.pageCount) free -> \(stats)")
        #expect(try store.read { try CompactionTests.contents($0) } == model)
        try IdleHunt.expectHealthy(store, "after")
        store.close()
    }
}
