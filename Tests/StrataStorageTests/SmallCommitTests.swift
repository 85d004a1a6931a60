import Testing
@testable import StrataStorage

/// Many small durable commits (the shape of one-object writes): the file stays whole, the data
/// exact, and the file's size bounded, with and without snapshots held across commits.
@Suite struct SmallCommitTests {
    static let seed: UInt64 = 20_261_202
    static let commits = max(40, TestEnv.int("STRATA_SMALL_COMMITS", default: 300))

    /// Durable one-key commits to two three-level trees (a record and its index, the shape of a
    /// one-object commit): the file stays within a few pages of its size, as each commit reuses
    /// the pages the ones before it freed, and every key reads back as the model says.
    @Test(arguments: [false, true])
    func oneKeyCommitsKeepTheFileBounded(holdingSnapshots: Bool) throws {
        let path = temporaryPath("small-commits-\(holdingSnapshots)")
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .full))
        var model: [[UInt8]: [UInt8]] = [:]
        var index: [[UInt8]: [UInt8]] = [:]
        try store.write { txn in
            txn.durability = .noSync
            let records = try txn.createTree("records")
            let byValue = try txn.createTree("index")
            for k in 0..<30_000 {
                let key = bigEndianKey(UInt64(k)), value = [UInt8](repeating: UInt8(k & 0xFF), count: 60)
                try records.put(key, value)
                model[key] = value
                let entry = bigEndianKey(UInt64(k &* 7_919 % 30_000))
                try byValue.put(entry, [1])
                index[entry] = [1]
            }
        }
        var rng = SplitMix(seed: Self.seed)
        var warmedPageCount: UInt64 = 0, middlePageCount: UInt64 = 0
        var held: [ReadTransaction] = []
        defer { for r in held { r.end() } }
        for commit in 0..<Self.commits {
            let key = bigEndianKey(UInt64(rng.within(0...29_999)))
            let value = [UInt8](repeating: UInt8(truncatingIfNeeded: commit), count: 60)
            let entry = bigEndianKey(UInt64(rng.within(0...29_999)))
            try store.write { txn in
                try txn.tree("records")!.put(key, value)
                try txn.tree("index")!.put(entry, [2])
            }
            model[key] = value
            index[entry] = [2]
            if holdingSnapshots && commit % 25 == 0 {
                // A snapshot held over the next 50 commits pins the pages it sees.
                held.append(try store.beginRead())
                if held.count > 2 { held.removeFirst().end() }
            }
            if commit == 20 { warmedPageCount = try store.stats().pageCount }
            if commit == Self.commits / 2 { middlePageCount = try store.stats().pageCount }
        }
        let stats = try store.stats()
        print(
            "SmallCommitTests[held \(holdingSnapshots)]: \(Self.commits) commits; \(warmedPageCount) → \(middlePageCount) → \(stats.pageCount) pages"
        )
        // Growth is bounded: a few pages without snapshots; with them, also what they pin, which
        // stops growing once they come and go at a steady rate.
        if holdingSnapshots {
            #expect(
                stats.pageCount <= middlePageCount + middlePageCount / 10,
                "seed \(Self.seed): \(warmedPageCount) → \(middlePageCount) → \(stats.pageCount) pages")
        } else {
            #expect(stats.pageCount <= warmedPageCount + 64, "seed \(Self.seed): \(warmedPageCount) → \(stats.pageCount) pages")
        }
        let report = try store.check()
        #expect(report.problems.isEmpty, "seed \(Self.seed): \(report.problems.prefix(3))")
        try store.read { txn in
            let records = try #require(try txn.tree("records"))
            let byValue = try #require(try txn.tree("index"))
            #expect(records.count == model.count && byValue.count == index.count)
            for (key, value) in model { #expect(try records.get(key) == value, "seed \(Self.seed)") }
            for (key, value) in index { #expect(try byValue.get(key) == value, "seed \(Self.seed)") }
        }
    }

    /// One-key durable commits through the commit log load the whole free list for compaction's
    /// check only every `ShrinkLock.checkInterval` commits. Each such commit pins its base (the
    /// log's last frame), a different commit every time; that pin holds no page of the free list,
    /// and counting it among the snapshots made every commit see "a snapshot has ended" and load
    /// the whole list (9 % of a one-object commit's time at 1,000,000 objects).
    @Test func oneKeyCommitsCheckTheFreeListOnlyNowAndThen() throws {
        let path = temporaryPath("small-commits-checks")
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .full)
        options.compaction.idleDelay = nil
        let store = try Store(path: path, options: options)
        try store.write { txn in
            txn.durability = .noSync
            let records = try txn.createTree("records")
            for k in 0..<30_000 { try records.put(bigEndianKey(UInt64(k)), [UInt8](repeating: 1, count: 60)) }
        }
        var checks: [Int] = []
        for commit in 0..<(3 * ShrinkLock.checkInterval) {
            try store.write { txn in _ = try txn.tree("records")!.put(bigEndianKey(UInt64(commit * 97)), [2]) }
            if store.env.compactionSchedule.commitsUntilCheck == ShrinkLock.checkInterval { checks.append(commit) }
        }
        #expect(store.env.commitLog?.pinned(base: try store.read { $0.txnid }) != nil, "the commits did not go through the log")
        #expect(checks.count <= 4, "commits that loaded the whole free list: \(checks)")
    }

    /// Reopening after small commits (deletes among them, and trees made along the way) finds the
    /// same data and a file `check` finds whole.
    @Test func smallCommitsSurviveReopen() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var model: [[UInt8]: [UInt8]] = [:]
        var rng = SplitMix(seed: Self.seed ^ 1)
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .full))
            try store.write { txn in
                let tree = try txn.createTree("t")
                for k in 0..<5_000 {
                    try tree.put(bigEndianKey(UInt64(k)), [UInt8(k & 0xFF)])
                    model[bigEndianKey(UInt64(k))] = [UInt8(k & 0xFF)]
                }
            }
            for i in 0..<60 {
                let key = bigEndianKey(UInt64(rng.within(0...9_999)))
                if i % 7 == 3, model[key] != nil {
                    _ = try store.write { txn in try txn.tree("t")!.delete(key) }
                    model[key] = nil
                } else {
                    try store.write { txn in
                        try txn.createTree("t").put(key, [UInt8(i)])
                        try txn.createTree("side\(i % 3)").put(key, [UInt8(i)])
                    }
                    model[key] = [UInt8(i)]
                }
            }
            store.close()
        }
        let store = try Store(path: path, options: StoreOptions(durability: .full))
        #expect(try store.check().problems.isEmpty)
        try store.read { txn in
            let tree = try #require(try txn.tree("t"))
            #expect(tree.count == model.count)
            let cursor = tree.cursor()
            var seen: [[UInt8]: [UInt8]] = [:]
            var more = try cursor.first()
            while more {
                seen[Array(cursor.key)] = Array(cursor.value)
                more = try cursor.next()
            }
            #expect(seen == model, "seed \(Self.seed ^ 1)")
        }
    }
}
