import Testing
@testable import StrataStorage
import Foundation

/// When idle-time compaction starts (IdleCompaction.swift): the holes a commit leaves are
/// compacted once the writes stop, whatever happened between that commit and the quiet time —
/// a writer that came and went without committing, or an earlier episode that found nothing to do
/// at the same page count.
@Suite struct IdleCompactionTests {
    /// Writes `keys` 300-byte values in one commit; returns them.
    static func load(_ store: Store, keys: Int) throws -> [[UInt8]: [UInt8]] {
        var model: [[UInt8]: [UInt8]] = [:]
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<keys {
                let v = CompactionTests.value(k, generation: 0, size: 300)
                try tree.put(bigEndianKey(UInt64(k)), v)
                model[bigEndianKey(UInt64(k))] = v
            }
        }
        return model
    }

    /// Deletes the keys in `range` in one commit.
    static func delete(_ store: Store, _ range: Range<Int>, from model: inout [[UInt8]: [UInt8]]) throws {
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in range {
                _ = try tree.delete(bigEndianKey(UInt64(k)))
                model[bigEndianKey(UInt64(k))] = nil
            }
        }
    }

    /// Polls the file's page count (a snapshot of `stats()` would pin pages, so the size) until it
    /// is within 1.25 times the pages in use, for up to 30 s (a loaded machine delays the thread).
    static func waitUntilCompact(_ store: Store, _ path: String) async throws -> StoreStats {
        let deadline = ContinuousClock.now + .seconds(30)
        var stats = try store.stats()
        while stats.pageCount > stats.usedPages + stats.usedPages / 4 + 64, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            stats = try store.stats()
        }
        return stats
    }

    struct Abort: Error {}

    /// A write transaction that is open through the idle delay after a commit left holes, and then
    /// aborts, commits nothing: the thread that found a writer at work must look again after it,
    /// not give up (nothing else would arm it: no commit follows).
    @Test func aWriterThatAbortsDuringTheIdleDelayDoesNotCancelCompaction() async throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = .milliseconds(30)
        let store = try Store(path: path, options: options)
        var model = try Self.load(store, keys: 20_000)
        try Self.delete(store, 2_000..<16_000, from: &model)
        let holed = try store.stats()
        #expect(holed.pageCount > holed.usedPages * 2, "the delete left no holes: \(holed)")
        // Opened at once (well within the delay), held for ten delays, then rolled back.
        #expect(throws: Abort.self) {
            try store.write { txn in
                try txn.createTree("data").put(bigEndianKey(999_999), [1])
                Thread.sleep(forTimeInterval: 0.3)
                throw Abort()
            }
        }
        let stats = try await Self.waitUntilCompact(store, path)
        #expect(stats.pageCount <= stats.usedPages + stats.usedPages / 4 + 64, "idle compaction never ran after the aborted write: \(stats)")
        #expect(try store.read { try CompactionTests.contents($0) } == model)
        try CompactionTests.expectHealthy(store, "after idle compaction")
        store.close()
    }

    /// An idle episode that finds nothing to move notes the page count, so that later commits at
    /// that size that leave a few holes do not wake it for nothing. A bulk delete leaves the page
    /// count as it was, though, and frees much: it must arm the timer all the same.
    @Test func aBulkDeleteAtAPageCountWhereAnEpisodeFoundNothingStillCompacts() async throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = .milliseconds(20)
        let store = try Store(path: path, options: options)
        var model = try Self.load(store, keys: 20_000)
        // Frees a sixteenth of the file or more (it leaves holes, so it arms the timer) but less
        // than an eighth (not enough for an idle episode to move anything).
        let pages = try store.stats().pageCount
        let perLeaf = 4096 / 320
        try Self.delete(store, 5_000..<(5_000 + Int(pages) / 11 * perLeaf), from: &model)
        // The episode runs and finds nothing to do (nothing moves: no commit is made).
        let version = store.latestVersion
        let deadline = ContinuousClock.now + .seconds(30)
        while store.env.idleCompaction.withLock({ $0.stuckAt == nil || $0.pending }), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let stuck = try #require(store.env.idleCompaction.withLock { $0.stuckAt }, "no idle episode found nothing to do: the setup no longer reaches the case")
        #expect(store.latestVersion == version, "the idle episode committed: the setup no longer reaches the case")
        // The bulk delete, at the same page count.
        try Self.delete(store, 10_000..<20_000, from: &model)
        try #require(try store.stats().pageCount == stuck.pageCount, "the bulk delete changed the page count: the setup no longer reaches the case")
        let stats = try await Self.waitUntilCompact(store, path)
        #expect(stats.pageCount <= stats.usedPages + stats.usedPages / 4 + 64, "idle compaction never ran after the bulk delete: \(stats)")
        #expect(try store.read { try CompactionTests.contents($0) } == model)
        try CompactionTests.expectHealthy(store, "after idle compaction")
        store.close()
    }
}
