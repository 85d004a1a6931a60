import Testing
@testable import StrataStorage
import Foundation

// Failing tests found by the big-value hunt (BigValueHuntTests.swift), kept minimal and
// deterministic. Each names what it expects and what happens instead.

@Suite struct BigValueHuntFailingTests {
    /// A small file (here 43 pages of 16 KiB) whose values lie in overflow runs loses most of them
    /// in one commit: the commit leaves well over `freeFraction` of the file free, so (FORMAT.md
    /// §3.1, "When idle") idle-time compaction should give the space back once the writes stop.
    /// It never starts: `leavesHoles` is true only after a commit that checked the free list
    /// (every 16th, or one after a snapshot seen at the last check ended) or that freed at least
    /// 64 pages (`freedMuch`, Compaction.swift), and this delete frees about 23. The file keeps its
    /// 43 pages for 20 used however long it stays idle, though `compact()` gets it to about 20.
    @Test func idleCompactionStartsAfterADeleteThatLeavesMostOfASmallFileFree() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = SpaceHunt.options()
        options.pageSize = 16384
        options.compaction.idleDelay = .milliseconds(5)
        let store = try Store(path: path, options: options)
        defer { store.close() }
        // 12 values of 3 pages each, then 7 of them deleted: about 23 pages freed of 43.
        _ = try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<12 { try tree.put(bigEndianKey(UInt64(k)), SpaceHunt.value(k, generation: 0, size: 40_000)) }
        }
        _ = try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<7 { _ = try tree.delete(bigEndianKey(UInt64(k))) }
        }
        var stats = try store.stats()
        let before = stats.pageCount
        for _ in 0..<40 where stats.pageCount > stats.usedPages + stats.usedPages / 4 + 4 {
            usleep(50_000)
            stats = try store.stats()
        }
        #expect(
            stats.pageCount <= stats.usedPages + stats.usedPages / 4 + 4,
            "idle for 2 s after the delete: \(stats.pageCount) pages (\(before) before) for \(stats.usedPages) used, \(stats.freePages) free")
        try store.compact()
        stats = try store.stats()
        #expect(stats.pageCount <= stats.usedPages + stats.usedPages / 4 + 4, "compact(): \(stats.pageCount) pages for \(stats.usedPages) used")
    }

    /// The big-value hunt's random workload (BigValueHuntTests.randomBigValues) with
    /// STRATA_BIGHUNT_SEED=5, 10 rounds, 4 KiB pages, idle-time compaction: with nothing open and
    /// the writes stopped, idle compaction leaves 381 pages for 159 used (3 of 3 runs), though
    /// compact() then gets the same file to about 300. Reading: the episode's first idle commit
    /// ran while a snapshot lived (the test's polling of `stats()`, or a check) and moved nothing;
    /// `noteStuck` (IdleCompaction.swift) records `readersAtLastLook`, which is only updated when
    /// an idle look finds nothing due, so it keeps a stale, empty set; `[] ⊆ readers` then holds
    /// forever and no later commit at that page count arms the timer again
    /// (`noteCommitForIdleCompaction`). Timing-dependent in principle; deterministic here.
    @Test func idleCompactionIsNotStuckForGoodAfterAnEpisodeThatMovedNothing() throws {
        try BigValueHuntTests.randomBigValues(pageSize: 4096, idle: true, seedBase: 5, rounds: 10)
    }
}
