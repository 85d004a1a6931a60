import Testing
@testable import StrataStorage
import Foundation

/// Freed pages return to use: a rewrite workload reaches a steady file size, with or without a
/// snapshot held open, and free space survives reopen.
@Suite struct PageReuseTests {
    static let keys = TestEnv.int("STRATA_REUSE_KEYS", default: 100_000)
    static let commits = max(4, TestEnv.int("STRATA_REUSE_COMMITS", default: 100))

    static func value(_ key: Int, generation: Int) -> [UInt8] {
        var v = bigEndianKey(UInt64(key) << 16 | UInt64(generation & 0xFFFF))
        v += [UInt8](repeating: UInt8(truncatingIfNeeded: key &+ generation), count: 24)
        return v
    }

    struct Run: Sendable {
        let path: String
        let store: Store
        /// Page count and file size after each rewrite commit.
        let pages: [UInt64]
        let sizes: [UInt64]
        let held: ReadTransaction?
        let hot: [Int]
        var steady: UInt64 { pages[pages.count - 1] }
        var middle: UInt64 { pages[pages.count / 2 - 1] }
    }

    /// Loads `keys` keys, then rewrites the keys in `hot` with new values, once per commit, for
    /// `commits` commits (noSync), optionally with a snapshot of the loaded tree held throughout.
    static func run(path: String, keys: Int, hot: [Int], commits: Int, holdSnapshot: Bool) throws -> Run {
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<keys { try tree.put(bigEndianKey(UInt64(k)), value(k, generation: 0)) }
        }
        let held = holdSnapshot ? try store.beginRead() : nil
        let hotKeys = hot.map { bigEndianKey(UInt64($0)) }
        var buffer = [UInt8](repeating: 0, count: 32)
        var pages: [UInt64] = []
        var sizes: [UInt64] = []
        for generation in 1...commits {
            try store.write { txn in
                let tree = try txn.createTree("data")
                for (i, k) in hot.enumerated() {
                    // value(k, generation) without allocating: the rewrite loop is the test's hot path.
                    let head = (UInt64(k) << 16 | UInt64(generation & 0xFFFF)).bigEndian
                    buffer.withUnsafeMutableBytes { b in
                        b.storeBytes(of: head, as: UInt64.self)
                        for j in 8..<32 { b[j] = UInt8(truncatingIfNeeded: k &+ generation) }
                    }
                    try hotKeys[i].withUnsafeBytes { kb in try buffer.withUnsafeBytes { vb in _ = try tree.put(kb, vb) } }
                }
            }
            pages.append(try store.stats().pageCount)
            sizes.append(fileSizeOf(path))
        }
        return Run(path: path, store: store, pages: pages, sizes: sizes, held: held, hot: hot)
    }

    /// The workload: the same 10% of a 100k-key tree (a contiguous hot range) rewritten for
    /// `commits` commits (100 by default; the 200 with STRATA_REUSE_COMMITS=200: the size
    /// is steady by commit 50 either way) without readers. Shared by the tests below, computed once.
    static let baseline: Result<Run, any Error> = Result {
        let path = temporaryPath("reuseBaseline")
        // The file is unlinked once measured (the open store keeps it alive), so that it is cleaned up
        // whichever tests use it; the checks below read it through the store or a copy.
        defer { removeStoreFiles(path) }
        return try run(path: path, keys: keys, hot: Array(0..<(keys / 10)), commits: commits, holdSnapshot: false)
    }

    @Test func rewriteWorkloadReachesSteadySize() throws {
        let run = try Self.baseline.get()
        let store = run.store
        print(
            "PageReuseTests (no reader): pages after commit 1: \(run.pages[0]), \(run.pages.count / 2): \(run.middle), \(run.pages.count): \(run.steady); file \(run.sizes[run.sizes.count - 1]) bytes"
        )
        // Steady: the last half of the commits does not grow the file.
        #expect(run.steady <= run.middle + 2, "pages grew from \(run.middle) to \(run.steady) in the last \(run.pages.count / 2) commits")
        #expect(run.sizes[run.sizes.count - 1] <= run.sizes[run.sizes.count / 2 - 1] + 2 * UInt64(store.pageSize))
        // And the steady size is a small multiple of the data, not of the commit count.
        #expect(run.steady <= run.pages[0] * 3 / 2, "steady size \(run.steady) pages vs \(run.pages[0]) after the first rewrite")

        // Every key holds its newest value.
        try store.read { txn in
            let tree = try #require(try txn.tree("data"))
            #expect(tree.count == Self.keys)
            for k in stride(from: 0, to: Self.keys, by: 997) {
                let generation = k < Self.keys / 10 ? Self.commits : 0
                #expect(try tree.get(bigEndianKey(UInt64(k))) == Self.value(k, generation: generation))
            }
        }

        // Free space survives reopen. The baseline's handle stays open (it is shared), so reopen a
        // byte-for-byte copy of the file, which gets its own environment.
        let before = try store.stats()
        #expect(before.freePages > 0)
        let copyPath = temporaryPath()
        defer { removeStoreFiles(copyPath) }
        try store.copy(to: copyPath, compacting: false)
        let reopened = try Store(path: copyPath)
        let after = try reopened.stats()
        #expect(after.freePages == before.freePages)
        #expect(after.pageCount == before.pageCount)
        #expect(after.pendingPages == 0)
        // And is used: another rewrite round grows nothing.
        try reopened.write(durability: .noSync) { txn in
            let tree = try txn.createTree("data")
            for k in 0..<(Self.keys / 10) { try tree.put(bigEndianKey(UInt64(k)), Self.value(k, generation: 9999)) }
        }
        #expect(try reopened.stats().pageCount <= after.pageCount + 2)
    }

    /// Free space recorded in the file is the same after a real close and reopen.
    @Test func freeSpaceSurvivesReopen() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var before: StoreStats
        do {
            let run = try Self.run(path: path, keys: 20_000, hot: Array(0..<2000), commits: 10, holdSnapshot: false)
            _ = try run.store.write { try $0.createTree("data").delete(bigEndianKey(5000)) }
            before = try run.store.stats()
        }
        let store = try Store(path: path)
        let after = try store.stats()
        #expect(before.freePages > 0)
        #expect(after.freePages == before.freePages)
        #expect(after.pageCount == before.pageCount)
        #expect(after.txnid == before.txnid)
    }

    /// The same workload with a snapshot of the loaded tree held open from the start.
    @Test func heldSnapshotPinsOnlyWhatItSees() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let run = try Self.run(path: path, keys: Self.keys, hot: Array(0..<(Self.keys / 10)), commits: Self.commits, holdSnapshot: true)
        let steady = try Self.baseline.get().steady
        print(
            "PageReuseTests (held snapshot): pages after commit 1: \(run.pages[0]), \(run.pages.count / 2): \(run.middle), \(run.pages.count): \(run.steady) (no-reader steady size \(steady)); file \(run.sizes[run.sizes.count - 1]) bytes"
        )

        // The held snapshot pins its own pages, but pages written and freed again by later commits
        // are reused: the file stays bounded and stops growing.
        #expect(run.steady * 2 <= steady * 5, "with a held snapshot the file reached \(run.steady) pages, over 2.5× the steady \(steady)")
        #expect(run.steady <= run.middle + 2, "pages grew from \(run.middle) to \(run.steady) in the last \(run.pages.count / 2) commits")
        try checkHeldSnapshot(run, keys: Self.keys)
    }

    /// Shared checks of a run with a held snapshot: it reads its original values, stats name it as
    /// the holder of the pending pages, and ending it frees them for reuse.
    func checkHeldSnapshot(_ run: Run, keys: Int) throws {
        let store = run.store
        let held = try #require(run.held)
        let tree = try #require(try held.tree("data"))
        #expect(tree.count == keys)
        var k = 0
        var mismatches = 0
        try tree.forEach { key, value in
            if bigEndianValue(key) != UInt64(k) || !value.elementsEqual(Self.value(k, generation: 0)) { mismatches += 1 }
            k += 1
            return true
        }
        #expect(k == keys)
        #expect(mismatches == 0, "\(mismatches) entries of the held snapshot changed")

        let stats = try store.stats()
        #expect(stats.pendingPages > 0)
        let holder = stats.pendingHolders.first { $0.reader.txnid == held.txnid }
        #expect(holder != nil, "pendingHolders \(stats.pendingHolders) does not name snapshot \(held.txnid)")
        #expect(holder?.reader.pid == UInt64(getpid()))
        #expect(holder.map { $0.pages == stats.pendingPages } ?? false)
        #expect(store.readers().contains { $0.txnid == held.txnid })

        held.end()
        let released = try store.stats()
        #expect(released.pendingPages == 0)
        #expect(released.pendingHolders.isEmpty)
        #expect(released.freePages == stats.freePages + stats.pendingPages)
        try store.write { txn in
            let t = try txn.createTree("data")
            for k in run.hot { try t.put(bigEndianKey(UInt64(k)), Self.value(k, generation: 7)) }
        }
        #expect(try store.stats().pageCount <= released.pageCount + 2)
    }

    /// Commits that write more pages than the meta page's inline commit record holds (every tenth key
    /// of the tree rewritten, so every leaf is copied) also reach a steady size: their commit-record
    /// runs are reused like any other page.
    @Test func largeCommitsReachSteadySize() throws {
        let keys = 40_000
        let hot = Array(stride(from: 0, to: keys, by: 10))
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let run = try Self.run(path: path, keys: keys, hot: hot, commits: 80, holdSnapshot: false)
        print("PageReuseTests (large commits): pages after commit 1: \(run.pages[0]), 40: \(run.middle), 80: \(run.steady)")
        #expect(run.steady <= run.middle + 2, "pages grew from \(run.middle) to \(run.steady) in the last 40 commits")
        let stats = try run.store.stats()
        #expect(stats.freePages < stats.pageCount / 2 + 64, "\(stats.freePages) free pages of \(stats.pageCount): free space accumulates")

        let heldPath = temporaryPath()
        defer { removeStoreFiles(heldPath) }
        let held = try Self.run(path: heldPath, keys: keys, hot: hot, commits: 80, holdSnapshot: true)
        print("PageReuseTests (large commits, held snapshot): pages after commit 1: \(held.pages[0]), 40: \(held.middle), 80: \(held.steady)")
        #expect(held.steady * 2 <= run.steady * 5)
        #expect(held.steady <= held.middle + 2, "pages grew from \(held.middle) to \(held.steady) in the last 40 commits")
        try checkHeldSnapshot(held, keys: keys)
    }

    /// Pages freed at commit T stay untouched while a snapshot older than T lives, across many
    /// snapshots of different ages; the free list is exact (used + free + pending = page count).
    @Test func snapshotsOfManyAgesStayIntact() throws {
        let store = try Store.inMemory()
        var rng = SplitMix(seed: 99)
        var held: [(ReadTransaction, [[UInt8]: [UInt8]])] = []
        var model: [[UInt8]: [UInt8]] = [:]
        for round in 0..<120 {
            try store.write { txn in
                let t = try txn.createTree("t")
                for _ in 0..<rng.within(1...60) {
                    let k = bigEndianKey(UInt64(rng.below(3000)))
                    if rng.percent(30) {
                        try t.delete(k)
                        model[k] = nil
                    } else {
                        let v = rng.byteArray(rng.percent(5) ? 5000 : rng.within(0...200))
                        try t.put(k, v)
                        model[k] = v
                    }
                }
            }
            if round % 8 == 0 { held.append((try store.beginRead(), model)) }
            if round % 24 == 23, !held.isEmpty {
                // Let go of a random one.
                let (txn, _) = held.remove(at: rng.below(held.count))
                txn.end()
            }
        }
        for (txn, expected) in held {
            let t = try #require(try txn.tree("t"))
            var got: [[UInt8]: [UInt8]] = [:]
            try t.forEach { k, v in
                got[Array(k)] = Array(v); return true
            }
            #expect(got == expected, "snapshot \(txn.txnid) changed")
        }
        let stats = try store.stats()
        #expect(stats.usedPages + stats.freePages + stats.pendingPages == stats.pageCount)
        #expect(Set(stats.pendingHolders.map(\.reader.txnid)).isSubset(of: Set(held.map(\.0.txnid))))
        for (txn, _) in held { txn.end() }
        #expect(try store.stats().pendingPages == 0)
    }
}

extension PageReuseTests {
    /// A free list that lists a page twice (damage such as the stale chunk fixed on 2026-12-01
    /// left): handing the page out twice would make two trees share it, so the writer refuses the
    /// free list with an error naming the page, and the committed data stays as it was.
    @Test func aPageListedFreeTwiceIsRefusedNotReused() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction = .off
        let store = try Store(path: path, options: options)
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<3_000 { try tree.put(bigEndianKey(UInt64(k)), Self.value(k, generation: 0)) }
        }
        try store.write { txn in
            let tree = try #require(try txn.tree("data"))
            for k in 0..<1_500 { try tree.delete(bigEndianKey(UInt64(k))) }
        }
        // Damage: this commit lists again, among its own frees, a page the free list already has.
        var doubled: PageNo = 0
        try store.write { txn in
            try txn.allocator.loadAll()
            doubled = try #require(txn.allocator.reusablePages.first)
            txn.spare.append(doubled)
        }
        let before = try store.read { txn in try #require(try txn.tree("data")).count }
        var refused: (any Error)?
        do {
            try store.write { txn in
                let tree = try #require(try txn.tree("data"))
                for k in 0..<3_000 { try tree.put(bigEndianKey(UInt64(k)), Self.value(k, generation: 1)) }
            }
        } catch {
            refused = error
        }
        let message = refused.map { "\($0)" } ?? "no error"
        #expect(message.contains("lists page \(doubled) twice"), "writing over a free list that lists page \(doubled) twice: \(message)")
        #expect(try store.read { txn in try #require(try txn.tree("data")).count } == before)
        #expect(try store.check().problems.contains { $0.description.contains("listed free twice") })
    }

    /// The same, with the page listed twice inside one chunk (the writer refused only a page two
    /// chunks list, and handed this one out twice: two parents then shared a page).
    @Test func aPageListedTwiceInOneChunkIsRefusedNotReused() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction = .off
        let store = try Store(path: path, options: options)
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<3_000 { try tree.put(bigEndianKey(UInt64(k)), Self.value(k, generation: 0)) }
        }
        // Damage: this commit's own chunk lists a page twice.
        var doubled: PageNo = 0
        try store.write { txn in
            doubled = try txn.allocate()
            txn.spare += [doubled, doubled]
        }
        let before = try store.read { txn in try #require(try txn.tree("data")).count }
        var refused: (any Error)?
        do {
            try store.write { txn in
                let tree = try #require(try txn.tree("data"))
                for k in 0..<3_000 { try tree.put(bigEndianKey(UInt64(k)), Self.value(k, generation: 1)) }
            }
        } catch {
            refused = error
        }
        let message = refused.map { "\($0)" } ?? "no error"
        #expect(message.contains("lists page \(doubled) twice"), "writing over a free list that lists page \(doubled) twice: \(message)")
        #expect(try store.read { txn in try #require(try txn.tree("data")).count } == before)
        #expect(try store.check().problems.contains { $0.description.contains("listed free twice") })
    }
}

extension PageReuseTests {
    /// A run of `count` free pages is the lowest `count` consecutive reusable pages, as a sorted
    /// scan of the free list finds them, for lengths across the 64-page words of the allocator's
    /// bitmap; taking it removes exactly those pages. (It sorted the whole free list for every run:
    /// a bitmap now.) Random holes of random lengths, seeded.
    @Test func aRunIsTheLowestStretchOfFreePagesLongEnough() throws {
        let seed = SpaceHunt.seed
        var random = SplitMix(seed: seed)
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: SpaceHunt.options(compaction: .off))
        let keys = 6_000
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<keys { try tree.put(bigEndianKey(UInt64(k)), SpaceHunt.value(k, generation: 0, size: random.percent(10) ? 9_000 : 200)) }
        }
        // Holes: stretches of keys deleted, some long enough to free many pages in a row. The
        // first long stretches are always deleted: left to chance, some seeds (5, 777123) freed
        // too few long runs for the test to reach the bitmap's whole words.
        try store.write { txn in
            let tree = try txn.createTree("data")
            var k = 0, longHoles = 0
            while k < keys {
                let long = random.percent(20)
                let length = long ? random.within(100...900) : random.within(1...40)
                if random.percent(50) || (long && longHoles < 6) {
                    for key in k..<min(keys, k + length) { _ = try tree.delete(bigEndianKey(UInt64(key))) }
                    if long { longHoles += 1 }
                }
                k += length
            }
        }
        _ = try store.write { try $0.createTree("other").put([1], [1]) }  // the frees become reusable
        try store.write { txn in
            try txn.allocator.loadAll()
            var free = Set(txn.allocator.reusablePages)
            #expect(free.count > 500, "seed \(seed): only \(free.count) free pages")
            func modelRun(_ count: Int) -> PageNo? {
                let sorted = free.sorted()
                var start = 0
                for i in sorted.indices {
                    if i > 0 && sorted[i] != sorted[i - 1] + 1 { start = i }
                    if i - start + 1 == count { return sorted[start] }
                }
                return nil
            }
            var found = 0, long = 0
            let before = free.count
            for step in 0..<200 {
                let count = random.percent(30) ? random.within(60...200) : random.within(1...12)
                let expected = modelRun(count)
                #expect(try txn.allocator.lowestRun(count) == expected, "seed \(seed) step \(step): lowest run of \(count)")
                let taken = try txn.allocator.allocateRun(count)
                #expect(taken == expected, "seed \(seed) step \(step): run of \(count)")
                if let taken {
                    for p in taken..<(taken + UInt64(count)) { free.remove(p) }
                    found += 1
                    if count >= 64 { long += 1 }
                }
                #expect(Set(txn.allocator.reusablePages) == free, "seed \(seed) step \(step): the free pages after taking a run of \(count)")
            }
            print("PageReuse runs: seed \(seed), \(before) free pages, \(found) of 200 runs found (\(long) of 64 pages or more)")
            #expect(long > 3, "seed \(seed): too few long runs to test the bitmap's whole words")
            txn.abort()
        }
    }
}
