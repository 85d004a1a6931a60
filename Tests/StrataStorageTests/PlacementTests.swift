import Testing
@testable import StrataStorage

/// Placement.swift: a small commit's pages are renumbered into runs before they are written, and
/// the file stays whole, the data exact, and the file's size bounded.
@Suite struct PlacementTests {
    static let seed: UInt64 = 20_261_202
    static let commits = max(40, TestEnv.int("STRATA_PLACEMENT_COMMITS", default: 300))

    /// The pages the newest commit wrote, from its meta page's inline record.
    static func newestCommitPages(_ path: String, pageSize: Int) throws -> (txnid: UInt64, pages: [PageNo]) {
        var newest: (txnid: UInt64, pages: [PageNo]) = (0, [])
        for slot in 0..<2 {
            let bytes = try readFileRange(path, at: slot * pageSize, count: pageSize)
            let found = bytes.withUnsafeBytes { m -> (UInt64, [PageNo])? in
                let p = UnsafeRawPointer(m.baseAddress!)
                guard Meta.hasMagic(p) else { return nil }
                let fields = Meta.fields(p)
                guard fields.recordRun == 0 else { return (fields.txnid, []) }
                let count = min(fields.recordCount, Meta.inlineCapacity(pageSize: pageSize))
                return (fields.txnid, (0..<count).map { p.u64(MetaLayout.inlineRecord + fields.recordEntrySize * $0) })
            }
            if let found, found.0 > newest.txnid { newest = found }
        }
        return newest
    }

    static func runs(_ pages: [PageNo]) -> Int {
        let sorted = pages.sorted()
        return sorted.indices.filter { $0 == 0 || sorted[$0] != sorted[$0 - 1] + 1 }.count
    }

    /// Durable one-key commits to two three-level trees (a record and its index, the shape of a one-object
    /// commit): after a few commits, each commit's hot pages (the catalog's and free list's, the
    /// roots) are one run, so it writes in markedly fewer runs than pages, while the file stays
    /// within a few pages of its size and every key reads back as the model says.
    @Test(arguments: [false, true])
    func oneKeyCommitsWriteInFewRuns(holdingSnapshots: Bool) throws {
        let path = temporaryPath("placement-\(holdingSnapshots)")
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
        var pagesWritten = 0, runsWritten = 0, warmedPageCount: UInt64 = 0, middlePageCount: UInt64 = 0
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
            let (_, pages) = try Self.newestCommitPages(path, pageSize: store.pageSize)
            if commit == 20 { warmedPageCount = try store.stats().pageCount }
            if commit == Self.commits / 2 { middlePageCount = try store.stats().pageCount }
            if commit >= 20 {
                pagesWritten += pages.count
                runsWritten += Self.runs(pages)
            }
        }
        let stats = try store.stats()
        print(
            "PlacementTests[held \(holdingSnapshots)]: \(Self.commits) commits, \(pagesWritten) pages in \(runsWritten) runs; \(warmedPageCount) → \(middlePageCount) → \(stats.pageCount) pages"
        )
        #expect(runsWritten * 4 <= pagesWritten * 3, "seed \(Self.seed): \(pagesWritten) pages written in \(runsWritten) runs")
        // Growth for placement is bounded: a few hot runs without snapshots; with them, also what
        // they pin, which stops growing once they come and go at a steady rate.
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

    /// Reopening after placed commits finds the same data (the roots the catalog recorded are the
    /// renumbered ones) and a file `check` finds whole.
    @Test func placedCommitsSurviveReopen() throws {
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
