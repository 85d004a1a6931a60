import Testing
@testable import StrataStorage
import Foundation

/// Files that give space back (Compaction.swift): commits trim the free end of the file and move
/// pages from the end into holes, with readers open, without changing what any snapshot sees.
@Suite struct CompactionTests {
    static func value(_ key: Int, generation: Int, size: Int = 100) -> [UInt8] {
        var v = bigEndianKey(UInt64(key) << 16 | UInt64(generation & 0xFFFF))
        v += [UInt8](repeating: UInt8(truncatingIfNeeded: key &+ generation), count: max(0, size - 8))
        return v
    }

    /// Every entry of tree `name` in a snapshot, in key order.
    static func contents(_ txn: ReadTransaction, _ name: String = "data") throws -> [[UInt8]: [UInt8]] {
        var all: [[UInt8]: [UInt8]] = [:]
        guard let tree = try txn.tree(name) else { return all }
        let cursor = tree.cursor()
        var more = try cursor.first()
        while more {
            all[Array(cursor.key)] = Array(cursor.value)
            more = try cursor.next()
        }
        return all
    }

    static func expectHealthy(_ store: Store, _ context: String) throws {
        let report = try store.check()
        #expect(report.problems.isEmpty, "\(context): \(report.problems.prefix(3))")
    }

    @Test func deletingNinetyPercentShrinksTheFileWithinAFewCommits() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        let keys = 60_000
        var model: [[UInt8]: [UInt8]] = [:]
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<keys {
                try tree.put(bigEndianKey(UInt64(k)), Self.value(k, generation: 0))
                model[bigEndianKey(UInt64(k))] = Self.value(k, generation: 0)
            }
        }
        let loaded = fileSizeOf(path)
        var random = SplitMix(seed: 90)
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<keys where random.below(10) != 0 {
                _ = try tree.delete(bigEndianKey(UInt64(k)))
                model[bigEndianKey(UInt64(k))] = nil
            }
        }
        var commits = 0
        var sizes: [UInt64] = []
        // "A handful of later commits": one small write each.
        for i in 0..<8 {
            _ = try store.write { txn in try txn.createTree("other").put(bigEndianKey(UInt64(i)), [1, 2, 3]) }
            commits += 1
            sizes.append(fileSizeOf(path))
        }
        let stats = try store.stats()
        let live = stats.usedPages * UInt64(stats.pageSize)
        print(
            "Compaction 90% delete: loaded \(loaded) bytes, after deletes and \(commits) commits: \(sizes); live \(live) bytes, \(stats.pageCount) pages, \(stats.freePages) free"
        )
        #expect(fileSizeOf(path) * 2 <= live * 3, "file \(fileSizeOf(path)) bytes vs \(live) live")
        #expect(try store.read { try Self.contents($0) } == model)
        try Self.expectHealthy(store, "after compaction")
        // And the file reopens as it is.
        let copy = temporaryPath()
        defer { removeStoreFiles(copy) }
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        let reopened = try Store(path: copy)
        #expect(try reopened.read { try Self.contents($0) } == model)
        try Self.expectHealthy(reopened, "reopened")
    }

    /// A snapshot held through a churn of updates: the file stays within its bound, the snapshot
    /// reads what it saw at the start, and the space comes back once it ends.
    @Test func churnWithAHeldReaderStaysBoundedAndShrinksAfter() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        let keys = 10_000
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<keys { try tree.put(bigEndianKey(UInt64(k)), Self.value(k, generation: 0)) }
        }
        let held = try store.beginRead()
        let seen = try Self.contents(held)
        let seenPages = try store.stats().usedPages
        var random = SplitMix(seed: 14)
        var maxSize: UInt64 = 0
        // Updates over 10,000 live objects, 50 per commit: 100,000 by default, each object updated
        // ten times; STRATA_CHURN_COMMITS=4000 runs the issue's 200,000.
        let commits = TestEnv.int("STRATA_CHURN_COMMITS", default: 2_000)
        for generation in 1...commits {
            try store.write { txn in
                let tree = try txn.createTree("data")
                for _ in 0..<50 {
                    let k = random.below(keys)
                    try tree.put(bigEndianKey(UInt64(k)), Self.value(k, generation: generation))
                }
            }
            maxSize = max(maxSize, fileSizeOf(path))
        }
        let live = try store.stats().usedPages
        let pending = try store.stats().pendingPages
        print("Compaction churn: held snapshot sees \(seenPages) pages; now \(live) used (\(pending) pending), file max \(maxSize) bytes")
        // Live data plus what the snapshot sees, with a quarter to spare (and one growth step).
        let bound = (live + seenPages) * UInt64(store.pageSize) * 5 / 4 + (1 << 20)
        #expect(maxSize <= bound, "file reached \(maxSize) bytes, bound \(bound)")
        #expect(try Self.contents(held) == seen)
        held.end()
        for i in 0..<10 { _ = try store.write { txn in try txn.createTree("data").put(bigEndianKey(UInt64(i)), Self.value(i, generation: 9999)) } }
        let after = try store.stats()
        let usedBytes = after.usedPages * UInt64(after.pageSize)
        print("Compaction churn: after the reader ended, file \(fileSizeOf(path)) bytes, \(after.pageCount) pages, \(after.usedPages) used")
        // The pages are compact again; the file keeps at most two growth steps (1 MiB each at this size) beyond them.
        #expect(after.pageCount * 2 <= after.usedPages * 3, "\(after.pageCount) pages for \(after.usedPages) used")
        #expect(fileSizeOf(path) <= after.pageCount * UInt64(after.pageSize) + (2 << 20), "file \(fileSizeOf(path)) vs \(usedBytes) used")
        try Self.expectHealthy(store, "after churn")
    }

    /// Random puts (inline and overflow values) and deletes with aggressive compaction, against a
    /// dictionary; snapshots taken along the way must keep reading what they saw, every few
    /// commits the file checks clean, and a reopened copy reads the model.
    @Test func randomWritesWithAggressiveCompactionMatchTheModel() throws {
        let seed = UInt64(TestEnv.int("STRATA_COMPACTION_SEED", default: 20261201))
        let rounds = TestEnv.int("STRATA_COMPACTION_ROUNDS", default: 150)
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction = Compaction(freeFraction: 0.01, pagesPerCommit: 8)
        let store = try Store(path: path, options: options)
        var random = SplitMix(seed: seed)
        var model: [[UInt8]: [UInt8]] = [:]
        var snapshots: [(ReadTransaction, [[UInt8]: [UInt8]])] = []
        var moved = 0
        for round in 0..<rounds {
            let shrinking = (round / 30) % 2 == 1
            try store.write { txn in
                let tree = try txn.createTree("data")
                for _ in 0..<random.within(1...400) {
                    let k = bigEndianKey(UInt64(random.below(5_000)))
                    if random.percent(shrinking ? 70 : 30) {
                        _ = try tree.delete(k)
                        model[k] = nil
                    } else {
                        let size = random.percent(3) ? random.within(3_000...20_000) : random.within(8...300)
                        let v = Self.value(random.below(1 << 20), generation: round, size: size)
                        try tree.put(k, v)
                        model[k] = v
                    }
                }
                if random.percent(5) {
                    _ = try txn.dropTree("side")
                } else if random.percent(10) {
                    try txn.createTree("side").put(bigEndianKey(UInt64(round)), [UInt8](repeating: 7, count: 50))
                }
                moved += txn.movedPages
            }
            if random.percent(10) { snapshots.append((try store.beginRead(), model)) }
            if snapshots.count > 3 || (random.percent(20) && !snapshots.isEmpty) {
                let (snapshot, expected) = snapshots.removeFirst()
                #expect(try Self.contents(snapshot) == expected, "seed \(seed): snapshot \(snapshot.txnid) changed")
                // Moved pages are no change: the diff since the snapshot is exactly the model's.
                let changed = try store.read { try $0.changedKeys(in: "data", since: snapshot) }
                let differing = Set(expected.keys).union(model.keys).filter { expected[$0] != model[$0] }
                #expect(changed.map(Set.init) == differing, "seed \(seed): diff since \(snapshot.txnid)")
                snapshot.end()
            }
            if round % 25 == 24 {
                #expect(try store.read { try Self.contents($0) } == model, "seed \(seed), round \(round)")
                try Self.expectHealthy(store, "seed \(seed), round \(round)")
            }
        }
        for (snapshot, expected) in snapshots {
            #expect(try Self.contents(snapshot) == expected, "seed \(seed): snapshot \(snapshot.txnid) changed")
            snapshot.end()
        }
        print("Compaction model: seed \(seed), \(rounds) rounds, \(try store.stats().pageCount) pages at the end")
        #expect(try store.read { try Self.contents($0) } == model, "seed \(seed)")
        try Self.expectHealthy(store, "seed \(seed), end")
        let copy = temporaryPath()
        defer { removeStoreFiles(copy) }
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        #expect(try Store(path: copy).read { try Self.contents($0) } == model, "seed \(seed), reopened")
    }

    @Test func compactionOffNeverShrinksAndCompactDoes() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Self.storeWithoutCompaction(path)
        try Self.fill(store)
        let big = try Self.thinOut(store, path: path)
        #expect(fileSizeOf(path) >= big, "compaction .off shrank the file")
        let model = try store.read { try Self.contents($0) }
        let report = try store.compact()
        let stats = try store.stats()
        print("Compaction compact(): \(report.bytesBefore) → \(report.bytesAfter) bytes in \(report.commits) commits; \(stats.usedPages) used pages")
        #expect(report.bytesAfter < report.bytesBefore / 3)
        #expect(report.bytesAfter * 2 <= stats.usedPages * UInt64(stats.pageSize) * 3 + (2 << 20))
        #expect(try store.read { try Self.contents($0) } == model)
        try Self.expectHealthy(store, "after compact()")
    }

    /// An unregistered (read-only) snapshot keeps the file from being truncated under it.
    @Test func aReadOnlySnapshotKeepsTheFileWhole() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            try Self.fill(store)
        }
        // Opened read-only first, the read-only handle has its own environment (unregistered snapshots).
        // Through another path to the same file: what holds the file back is the file, not its name.
        let link = path + "-link"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
        defer { try? FileManager.default.removeItem(atPath: link) }
        let reader = try Store(path: link, options: StoreOptions(readOnly: true))
        let snapshot = try reader.beginRead()
        let seen = try Self.contents(snapshot)
        let writer = try Store(path: path, options: StoreOptions(durability: .noSync))
        let big = try Self.thinOut(writer, path: path)
        #expect(fileSizeOf(path) >= big, "the file was truncated under a read-only snapshot")
        // Its pages may have been reused (it would then throw fileChangedDuringRead), never cut off.
        if (try? snapshot.validate()) != nil { #expect(try Self.contents(snapshot) == seen) }
        snapshot.end()
        for i in 0..<8 { _ = try writer.write { txn in try txn.createTree("other").put(bigEndianKey(UInt64(i)), [2]) } }
        #expect(fileSizeOf(path) < big, "the file did not shrink once the snapshot ended")
    }
}

extension CompactionTests {
    /// A store that never compacts by itself.
    static func storeWithoutCompaction(_ path: String) throws -> Store {
        var options = StoreOptions(durability: .noSync)
        options.compaction = .off
        return try Store(path: path, options: options)
    }

    /// 40,000 keys with their values in tree "data".
    static func fill(_ store: Store) throws {
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<40_000 { try tree.put(bigEndianKey(UInt64(k)), Self.value(k, generation: 0)) }
        }
    }

    /// Deletes nine keys in ten of `fill`, then makes eight small commits (in which compaction, if on,
    /// trims and returns the freed end); returns the file's size right after the deletion.
    static func thinOut(_ store: Store, path: String) throws -> UInt64 {
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<40_000 where k % 10 != 0 { _ = try tree.delete(bigEndianKey(UInt64(k))) }
        }
        let big = fileSizeOf(path)
        for i in 0..<8 { _ = try store.write { txn in try txn.createTree("other").put(bigEndianKey(UInt64(i)), [1]) } }
        return big
    }

    /// A read-only snapshot holds back the truncation of its own file only: another file written by
    /// the same process shrinks as usual (the two once shared one process-wide count).
    @Test func aReadOnlySnapshotOfAnotherFileDoesNotStopShrinking() throws {
        let path = temporaryPath()
        let other = temporaryPath()
        defer { removeStoreFiles(path); removeStoreFiles(other) }
        do {
            let store = try Store(path: other, options: StoreOptions(durability: .noSync))
            _ = try store.write { txn in try txn.createTree("data").put([1], [1]) }
        }
        let reader = try Store(path: other, options: StoreOptions(readOnly: true))
        let snapshot = try reader.beginRead()
        defer { snapshot.end() }
        let writer = try Store(path: path, options: StoreOptions(durability: .noSync))
        try Self.fill(writer)
        let big = try Self.thinOut(writer, path: path)
        #expect(fileSizeOf(path) < big / 2, "a read-only snapshot of another file kept this one from shrinking")
        #expect(try snapshot.tree("data")?.get([1]) == [1])
    }
}

extension CompactionTests {
    /// A read-only snapshot in another process keeps the file whole too (it share-locks the page
    /// file's shrink byte, which the writer must take exclusively to truncate); once it ends, the
    /// file shrinks at the next commits. Also when that process opened the file again meanwhile
    /// and let the handle go: closing a descriptor of the file once dropped every classic fcntl
    /// lock the process held on it, the shrink lock with them, and the writer then cut the file
    /// under the snapshot (SIGBUS in the reader).
    @Test(arguments: [[], ["--reopen-read-only"], ["--reopen-read-write"]])
    func aReadOnlySnapshotInAnotherProcessKeepsTheFileWhole(reopen: [String]) async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try Self.fill(store)
        let checksum = try store.read { try helperChecksum($0) }

        let reader = try HelperProcess(path: helper, arguments: ["hold-reader", path, "--read-only"] + reopen)
        let line = try #require(try await reader.readLine(), "hold-reader printed nothing: \(reader.errorOutput())")
        try #require(line.hasPrefix("snapshot ") && line.split(separator: " ").count == 4, "unexpected line '\(line)'")
        #expect(line.split(separator: " ")[2] == "\(checksum)")

        let big = try Self.thinOut(store, path: path)
        #expect(fileSizeOf(path) >= big, "the file was truncated under another process's read-only snapshot")
        reader.send("reread")
        let recheck = try await reader.readLine()
        try await reader.waitForExit()
        // Its pages may have been reused (it then says so), never cut off (the map would fault).
        #expect(recheck == "recheck \(checksum)" || recheck == "recheck changed", "the snapshot changed under the other process: \(recheck ?? "-")")
        #expect(reader.succeeded, "hold-reader ended with \(reader.status): \(reader.errorOutput())")

        for i in 0..<8 { _ = try store.write { txn in try txn.createTree("other").put(bigEndianKey(UInt64(i)), [2]) } }
        #expect(fileSizeOf(path) < big / 2, "the file did not shrink once the other process's snapshot ended")
    }
}

extension CompactionTests {
    /// `stats()` says where the free pages are: the run at the end (what a compacting commit returns)
    /// and per eighth of the file, in agreement with its total.
    @Test func statsShowWhereTheFreePagesAre() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Self.storeWithoutCompaction(path)
        try Self.fill(store)
        // A second tree written after the first lies above it: dropped, its pages free the end.
        try store.write { txn in
            let tree = try txn.createTree("last")
            for k in 0..<10_000 { try tree.put(bigEndianKey(UInt64(k)), Self.value(k, generation: 1)) }
        }
        _ = try store.write { txn in try txn.dropTree("last") }
        _ = try store.write { txn in try txn.createTree("other").put([1], [1]) }  // the drop's pages become reusable
        let stats = try store.stats()
        #expect(stats.freePagesByEighth.count == 8)
        #expect(stats.freePagesByEighth.reduce(0, +) == stats.freePages)
        #expect(stats.freePagesByEighth[7] > stats.freePagesByEighth[0], "\(stats.freePagesByEighth)")
        // The writer's own view of the free end (the run its trim would remove) agrees.
        let writersTail = try store.write { txn in
            defer { txn.abort() }
            return try txn.freeTailPages()
        }
        #expect(stats.freeTailPages == writersTail && stats.freeTailPages > 0, "stats \(stats.freeTailPages), writer \(writersTail)")

        // With compaction on, the next commit gives the free end back.
        var on = StoreOptions(durability: .noSync)
        on.compaction = .automatic
        store.close()
        let compacting = try Store(path: path, options: on)
        _ = try compacting.write { txn in try txn.createTree("other").put([2], [2]) }
        let after = try compacting.stats()
        #expect(
            after.pageCount + stats.freeTailPages <= stats.pageCount + 8,
            "\(stats.pageCount) pages, \(stats.freeTailPages) free at the end; \(after.pageCount) after")
    }
}

extension CompactionTests {
    /// Each eighth's share is its free pages over its own size, whatever the page count.
    @Test(arguments: [UInt64(1), 2, 7, 12, 13, 64, 100_003])
    func freeFractionsDivideByEachEighthsSize(pageCount: UInt64) {
        var sizes = [UInt64](repeating: 0, count: 8)
        for p in 0..<pageCount { sizes[Int(p * 8 / pageCount)] += 1 }
        #expect(sizes.reduce(0, +) == pageCount)
        let full = StoreStats(
            fileSize: 0, pageSize: 4096, pageCount: pageCount, freePages: pageCount, pendingPages: 0, txnid: 1,
            pendingHolders: [], freeTailPages: pageCount, freePagesByEighth: sizes)
        #expect(full.freeFractionByEighth == sizes.map { $0 == 0 ? 0 : 1 }, "\(sizes)")
    }
}

extension CompactionTests {
    /// Deletes half the keys of `fill` at random, then rewrites every key left: each commit copies
    /// most leaves, so the live pages end up spread over a file about twice their size. Returns
    /// what the tree holds.
    static func spreadOut(_ store: Store, seed: UInt64) throws -> [[UInt8]: [UInt8]] {
        var model: [[UInt8]: [UInt8]] = [:]
        for k in 0..<40_000 { model[bigEndianKey(UInt64(k))] = Self.value(k, generation: 0) }
        var random = SplitMix(seed: seed)
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<40_000 where random.below(2) == 0 {
                _ = try tree.delete(bigEndianKey(UInt64(k)))
                model[bigEndianKey(UInt64(k))] = nil
            }
        }
        try store.write { txn in
            let tree = try txn.createTree("data")
            for key in model.keys.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
                let k = Int(key.reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
                try tree.put(key, Self.value(k, generation: 1))
                model[key] = Self.value(k, generation: 1)
            }
        }
        return model
    }

    /// The bytes of the pages in use, and the file's size.
    static func liveAndFile(_ store: Store, _ path: String) throws -> (live: UInt64, file: UInt64) {
        let stats = try store.stats()
        return (stats.usedPages * UInt64(stats.pageSize), fileSizeOf(path))
    }

    /// Once the writes stop, a background thread compacts a file its last commits left full of
    /// holes (IdleCompaction.swift): without another write, it ends within 1.5 times its live
    /// pages, with every entry intact; with `idleDelay` nil it stays as the commits left it.
    @Test func aFileLeftWithHolesShrinksOnceTheWritingStops() throws {
        let seed: UInt64 = 4_242
        var results: [Bool: (live: UInt64, file: UInt64, commits: UInt64)] = [:]
        for idle in [false, true] {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            var options = StoreOptions(durability: .noSync)
            options.compaction.idleDelay = idle ? .milliseconds(100) : nil
            let store = try Store(path: path, options: options)
            try Self.fill(store)
            let model = try Self.spreadOut(store, seed: seed)
            let version = store.latestVersion
            if !idle {
                // (Checked without idle compaction only: with it, a slow rewrite may already have
                // given the thread a quiet moment to start in.)
                let spread = try Self.liveAndFile(store, path)
                #expect(spread.file * 2 > spread.live * 3, "seed \(seed): the writes left no holes to fill: \(spread)")
            }
            // Wait for the file to be compact (idle), or long enough that it would have been;
            // looking only at the file's size (a snapshot, as `stats()` takes, would pin pages).
            let deadline = ContinuousClock.now + .seconds(idle ? 30 : 2)
            let target = try Self.liveAndFile(store, path).live * 3 / 2
            while ContinuousClock.now < deadline {
                Thread.sleep(forTimeInterval: 0.05)
                if idle && fileSizeOf(path) <= target { break }
            }
            let now = try Self.liveAndFile(store, path)
            results[idle] = (now.live, now.file, store.latestVersion - version)
            #expect(try store.read { try Self.contents($0) } == model, "idle \(idle), seed \(seed)")
            try Self.expectHealthy(store, "idle \(idle), seed \(seed)")
            store.close()
        }
        print("Idle compaction: \(results)")
        let idle = try #require(results[true]), off = try #require(results[false])
        #expect(idle.file * 2 <= idle.live * 3, "with idle compaction: file \(idle.file) bytes vs \(idle.live) live")
        #expect(idle.commits > 0)
        #expect(off.commits == 0, "without idle compaction, nothing was written in the background")
        #expect(off.file * 2 > off.live * 3, "the control shrank without idle compaction: \(off)")
    }

    /// Writes keep working, and stay exact, while idle compaction commits between them: a writer
    /// that pauses longer than the idle delay, again and again, against a plain dictionary.
    @Test func writesBetweenIdleCompactionsMatchTheModel() throws {
        let seed: UInt64 = 77
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = .milliseconds(20)
        let store = try Store(path: path, options: options)
        let start = store.latestVersion
        try Self.fill(store)
        var model = try Self.spreadOut(store, seed: seed)
        var random = SplitMix(seed: seed)
        for round in 0..<30 {
            try store.write { txn in
                let tree = try txn.createTree("data")
                for _ in 0..<200 {
                    let k = random.below(40_000)
                    let key = bigEndianKey(UInt64(k))
                    if random.below(3) == 0 {
                        _ = try tree.delete(key)
                        model[key] = nil
                    } else {
                        try tree.put(key, Self.value(k, generation: round + 2))
                        model[key] = Self.value(k, generation: round + 2)
                    }
                }
            }
            // Sometimes long enough for the background thread to start compacting.
            Thread.sleep(forTimeInterval: random.below(3) == 0 ? 0.04 : 0.001)
            #expect(try store.read { try Self.contents($0) } == model, "seed \(seed), round \(round)")
        }
        // The writer's pauses gave the background thread room at least once.
        #expect(store.latestVersion - start > 3 + 30, "seed \(seed): no idle-time compaction commit between the writes")
        try Self.expectHealthy(store, "seed \(seed)")
        store.close()
    }
}

extension CompactionTests {
    /// A commit writes its free list again after `trimFreeTail` took back the pages it had
    /// allocated and freed unused at the end of the file: its own frees then need fewer free-list
    /// chunks than the first write put in the tree, and the chunks past the new count must go, or
    /// their stale entries name pages past the new end (and pages twice). Done here by hand,
    /// exactly as the commit does it, with enough own pages for three chunks before and one after.
    @Test func freeListWrittenAgainWithFewerOwnFreesLeavesNoStaleChunk() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction = .off  // only the trim done below
        let store = try Store(path: path, options: options)
        try store.write { txn in
            let tree = try txn.createTree("data")
            for k in 0..<600 { try tree.put(bigEndianKey(UInt64(k)), Self.value(k, generation: 0, size: 1_500)) }
        }
        // Reusable pages for the free list's own copies, so that it does not grow the file.
        try store.write { txn in
            let tree = try #require(try txn.tree("data"))
            for k in 0..<200 { try tree.delete(bigEndianKey(UInt64(k))) }
        }
        let expected = try store.read { try Self.contents($0) }
        let capacity = FreeListFormat.chunkCapacity(pageSize: 4096)
        let before = try store.read { $0.meta.pageCount }
        try store.write { txn in
            let end = txn.pageCount
            let extra = UInt64(2 * capacity + 5)
            txn.spare += Array(end..<(end + extra))
            txn.pageCount += extra
            try txn.writeFreeList()
            #expect(txn.pageCount == end + extra, "the free list's copies grew the file: the test no longer trims only unused pages")
            // What trimFreeTail does with them.
            txn.spare.removeAll { $0 >= end }
            txn.pageCount = end
        }
        #expect(try store.read { $0.meta.pageCount } == before)
        try Self.expectHealthy(store, "after taking back \(2 * capacity + 5) own free pages")
        #expect(try store.read { try Self.contents($0) } == expected)
    }
}
