import Testing
@testable import StrataStorage
import Foundation

// `Store.check()`, `treeStats()` and `describePage(_:)` (Check.swift, TreeStats.swift, PageDescription.swift), and the `strata` tool
// that prints them. Healthy stores after random workloads must check clean; corrupted ones must
// report the damage (never crash).
//
// One file of about 670 lines for one idea: the corruption cases share the page-patching helpers below.

/// Reads page `pgno`, lets `edit` change it, optionally reseals its checksum (so that only the
/// structural damage remains), and writes it back in place.
private func patchPage(_ path: String, pageSize: Int, _ pgno: UInt64, reseal: Bool, _ edit: (UnsafeMutableRawPointer) -> Void) throws {
    var bytes = try readFileRange(path, at: Int(pgno) * pageSize, count: pageSize)
    try #require(bytes.count == pageSize)
    bytes.withUnsafeMutableBytes { p in
        edit(p.baseAddress!)
        if reseal { p.baseAddress!.setU64(PageHeader.checksum, pageChecksum(UnsafeRawPointer(p.baseAddress!), byteCount: pageSize)) }
    }
    try patchFile(path, at: Int(pgno) * pageSize, bytes)
    if reseal {
        // Damage that passes every checksum: also update the page's entry in the commit records
        // that list it, so that open still trusts the commit and only `check` can find the damage.
        let checksum = bytes.withUnsafeBytes { UnsafeRawPointer($0.baseAddress!).u64(PageHeader.checksum) }
        for slot in 0..<2 {
            var meta = try readFileRange(path, at: slot * pageSize, count: pageSize)
            let changed = meta.withUnsafeMutableBytes { m -> Bool in
                let fields = Meta.fields(UnsafeRawPointer(m.baseAddress!))
                guard Meta.hasMagic(UnsafeRawPointer(m.baseAddress!)), fields.recordRun == 0, fields.recordEntrySize == 16 else { return false }
                var found = false
                for i in 0..<min(fields.recordCount, Meta.inlineCapacity(pageSize: pageSize)) {
                    let entry = m.baseAddress! + MetaLayout.inlineRecord + 16 * i
                    if UnsafeRawPointer(entry).u64(0) == pgno {
                        entry.setU64(8, checksum)
                        found = true
                    }
                }
                if found { m.baseAddress!.setU64(PageHeader.checksum, pageChecksum(UnsafeRawPointer(m.baseAddress!), byteCount: pageSize)) }
                return found
            }
            if changed { try patchFile(path, at: slot * pageSize, meta) }
        }
    }
}

/// Root of tree `name` and the first leaf under it, at the newest commit.
private func rootAndFirstLeaf(_ store: Store, _ name: String) throws -> (root: UInt64, leaf: UInt64) {
    try store.read { txn in
        let tree = try #require(try txn.tree(name))
        var pgno = tree.info.root
        var node = try txn.pages.node(pgno)
        while !node.isLeaf {
            pgno = try node.child(0)
            node = try txn.pages.node(pgno)
        }
        return (tree.info.root, pgno)
    }
}

private func expectHealthy(_ store: Store, _ context: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> CheckReport {
    let report = try store.check()
    #expect(report.isOK, "\(context): \(report.problems.prefix(8).map(\.description))", sourceLocation: sourceLocation)
    // Every page below the page count is accounted for exactly once.
    #expect(UInt64(report.pages.total) == report.pageCount, "\(context): \(report.pages) vs \(report.pageCount) pages", sourceLocation: sourceLocation)
    #expect(report.pages.leaked == 0, sourceLocation: sourceLocation)
    return report
}

struct CheckTests {
    // MARK: Healthy stores

    @Test func emptyAndFreshStoresCheckClean() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        var report = try expectHealthy(store, "fresh")
        #expect(report.pageCount == 2 && report.pages.meta == 2)
        #expect(report.metas.count == 2 && report.metas.allSatisfy(\.isValid))
        #expect(report.metas.filter(\.isCurrent).count == 1)
        try store.write { txn in _ = try txn.createTree("empty") }
        report = try expectHealthy(store, "one empty tree")
        #expect(report.trees.first { $0.name == "empty" }?.depth == 0)

        let memory = try Store.inMemory()
        try memory.write { txn in _ = try txn.createTree("t").put([1], [2]) }
        _ = try expectHealthy(memory, "in-memory")
    }

    @Test func randomWorkloadsCheckClean() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 0xC0FFEE)
        var model: [String: [[UInt8]: [UInt8]]] = [:]
        var store = try Store(path: path, options: StoreOptions(durability: .noSync))
        var held: ReadTransaction?
        let names = ["alpha", "beta", "gamma", "delta"]
        for round in 0..<60 {
            try store.write { txn in
                if round % 17 == 16 {
                    // Drop a tree now and then (freeing all its pages, overflow runs included).
                    let victim = names[rng.below(names.count)]
                    let dropped = try txn.dropTree(victim)
                    #expect(dropped == (model.removeValue(forKey: victim) != nil))
                }
                for _ in 0..<rng.within(20...300) {
                    let name = names[rng.below(names.count)]
                    let tree = try txn.createTree(name)
                    var entries = model[name] ?? [:]
                    let key = Array("k\(rng.below(2500))".utf8)
                    if rng.percent(30) {
                        try tree.delete(key)
                        entries.removeValue(forKey: key)
                    } else {
                        let size = rng.percent(5) ? rng.within(1000...20000) : rng.below(150)
                        let value = rng.byteArray(size)
                        try tree.put(key, value)
                        entries[key] = value
                    }
                    model[name] = entries
                }
            }
            // Hold a snapshot across a stretch of commits: its pages stay pending, not leaked.
            if round == 10 { held = try store.beginRead() }
            if round == 40 { held?.end(); held = nil }
            if round % 6 == 5 {
                let report = try expectHealthy(store, "round \(round)")
                for (name, entries) in model {
                    #expect(report.trees.first { $0.name == name && $0.kind == .user }?.entries == UInt64(entries.count))
                }
            }
            if round % 20 == 19 {
                store = try Store(path: path, options: StoreOptions(durability: .noSync))
            }
        }
        held?.end()
        let report = try expectHealthy(store, "end")
        #expect(report.pages.overflow > 0)
        #expect(report.pages.free > 0)
    }

    @Test func ascendingLoadsAndDeletesFromBothEndsCheckClean() throws {
        // Ascending keys take the append path (a right branch may start with one child); deleting
        // from the tail and the head then empties edge leaves and merges branches.
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let t = try txn.createTree("seq")
            for i in 0..<20_000 { try t.put(bigEndianKey(UInt64(i)), [UInt8](repeating: 7, count: 40)) }
        }
        _ = try expectHealthy(store, "after the ascending load")
        var low: UInt64 = 0
        var high: UInt64 = 20_000
        for round in 0..<40 {
            try store.write { txn in
                let t = try #require(try txn.tree("seq"))
                for _ in 0..<300 where high > low {
                    if round % 2 == 0 { high -= 1; try t.delete(bigEndianKey(high)) } else { try t.delete(bigEndianKey(low)); low += 1 }
                }
                // Append a few again, so the right edge keeps splitting.
                for _ in 0..<50 { try t.put(bigEndianKey(high), [1]); high += 1 }
            }
            let report = try expectHealthy(store, "round \(round)")
            #expect(report.trees.first { $0.name == "seq" }?.entries == high - low)
        }
    }

    @Test func rightEdgeBranchWithOneChildThenDeletes() throws {
        // An ascending load splits a full branch at the right edge by starting a new branch with
        // one child. Stop right there, then delete the keys of that one child.
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        let loaded = try store.write { txn -> UInt64 in
            let t = try txn.createTree("seq")
            var i: UInt64 = 0
            while i < 1_000_000 {
                try t.put(bigEndianKey(i), [UInt8](repeating: 3, count: 40))
                i += 1
                let root = try txn.pages.node(t.state.info.root)
                if root.isLeaf || root.count < 2 { continue }
                let last = try txn.pages.node(try root.child(root.count - 1))
                if !last.isLeaf && last.count == 1 { break }
            }
            return i
        }
        #expect(loaded < 1_000_000, "the load never left a one-child branch at the right edge")
        _ = try expectHealthy(store, "after the load")
        var high = loaded
        for _ in 0..<3 {
            try store.write { txn in
                let t = try #require(try txn.tree("seq"))
                for _ in 0..<40 where high > 0 { high -= 1; try t.delete(bigEndianKey(high)) }
            }
            let report = try expectHealthy(store, "after deleting down to \(high)")
            #expect(report.trees.first { $0.name == "seq" }?.entries == high)
            let count = try store.read { txn in try allEntries(#require(try txn.tree("seq"))).count }
            #expect(UInt64(count) == high)
        }
    }

    @Test func deletingTheHeadOfALargeAscendingTree() throws {
        // Full branches from an ascending load: the leftmost branch cannot merge with its full
        // sibling, shrinks to a single child, and that child then empties (entry 0 of the root
        // goes away).
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        let total: UInt64 = 100_000
        try store.write { txn in
            let t = try txn.createTree("seq")
            for i in 0..<total { try t.put(bigEndianKey(i), bigEndianKey(i)) }
        }
        var low: UInt64 = 0
        while low < total {
            try store.write { txn in
                let t = try #require(try txn.tree("seq"))
                for _ in 0..<4000 where low < total { try t.delete(bigEndianKey(low)); low += 1 }
            }
            let report = try expectHealthy(store, "after deleting below \(low)")
            #expect(report.trees.first { $0.name == "seq" }?.entries == total - low)
            try store.read { txn in
                let cursor = try #require(try txn.tree("seq")).cursor()
                let found = try cursor.first()
                #expect(found == (low < total))
                if found { #expect(Array(cursor.key) == bigEndianKey(low)) }
            }
        }
    }

    @Test func checkWhileAWriterCommits() throws {
        // The check reads one snapshot; commits made meanwhile (both meta slots rewritten, pages
        // reused) must not make it report problems.
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let t = try txn.createTree("t")
            for i in 0..<3000 { try t.put(Array("k\(i)".utf8), [UInt8](repeating: 1, count: 50)) }
        }
        let done = Locked(false)
        let failures = Locked<[String]>([])
        runThreads([
            {
                var rng = SplitMix(seed: 5)
                for round in 0..<300 {
                    do {
                        try store.write { txn in
                            let t = try txn.createTree("t")
                            for _ in 0..<20 {
                                let key = Array("k\(rng.below(3000))".utf8)
                                if rng.percent(20) { try t.delete(key) } else { try t.put(key, rng.byteArray(rng.percent(5) ? 6000 : 50)) }
                            }
                        }
                    } catch {
                        failures.withLock { $0.append("write \(round): \(error)") }
                    }
                }
                done.withLock { $0 = true }
            },
            {
                var checks = 0
                while !done.current || checks < 3 {
                    do {
                        let report = try store.check()
                        if !report.isOK { failures.withLock { $0.append("check of \(report.txnid): \(report.problems.prefix(5))") } }
                    } catch {
                        failures.withLock { $0.append("check threw: \(error)") }
                    }
                    checks += 1
                }
            },
        ])
        #expect(failures.current.isEmpty, "\(failures.current.prefix(5))")
        _ = try expectHealthy(store, "after the writer")
    }

    @Test func copiesCheckClean() throws {
        let path = temporaryPath()
        let pageCopy = path + ".pages"
        let compacted = path + ".compact"
        defer { for p in [path, pageCopy, compacted] { removeStoreFiles(p) } }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        var rng = SplitMix(seed: 11)
        for _ in 0..<10 {
            try store.write { txn in
                let t = try txn.createTree("t")
                for _ in 0..<200 { try t.put(Array("k\(rng.below(1500))".utf8), rng.byteArray(rng.percent(4) ? 7000 : 60)) }
                for _ in 0..<50 { try t.delete(Array("k\(rng.below(1500))".utf8)) }
            }
        }
        try store.copy(to: pageCopy, compacting: false)
        try store.copy(to: compacted, compacting: true)
        let original = try expectHealthy(store, "original")
        let copy = try expectHealthy(try Store(path: pageCopy, options: StoreOptions(createIfMissing: false)), "page copy")
        // A page copy leaves the other meta slot empty: worth a warning, not a problem.
        #expect(copy.warnings.contains { $0.message.contains("all zero") }, "\(copy.warnings)")
        let small = try expectHealthy(try Store(path: compacted, options: StoreOptions(createIfMissing: false)), "compacted copy")
        #expect(small.trees.first { $0.name == "t" }?.entries == original.trees.first { $0.name == "t" }?.entries)
        #expect(small.pageCount <= original.pageCount)
    }

    @Test func largeCommitWithARecordRunChecksClean() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let t = try txn.createTree("big")
            for i in 0..<30_000 { try t.put(Array("key-\(i)".utf8), [UInt8](repeating: UInt8(i & 0xFF), count: 60)) }
        }
        var report = try expectHealthy(store, "big commit")
        #expect(report.pages.commitRecord > 0, "a commit of \(report.pageCount) pages should need a record run")
        // The next commit frees the record run into the free list.
        try store.write { txn in _ = try txn.createTree("big").put([0], [0]) }
        report = try expectHealthy(store, "after the big commit")
        #expect(report.pages.commitRecord == 0)
    }

    // MARK: Corruption

    @Test func flippedLeafBytesAreAChecksumProblem() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var leaf: UInt64 = 0
        var pageSize = 0
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            pageSize = store.pageSize
            try store.write { txn in
                let a = try txn.createTree("a")
                for i in 0..<2000 { try a.put(Array("a\(i)".utf8), Array("value \(i)".utf8)) }
            }
            // A later commit that does not touch tree "a": the damaged leaf is not the newest
            // commit's, so open keeps that commit and check must find the damage. Durable: a
            // commit inside a run of `.noSync` commits lists the run's pages it uses, and a
            // damaged one takes opening back to the commit before the run (RunPin.swift).
            try store.write(durability: .full) { txn in _ = try txn.createTree("b").put([1], [1]) }
            leaf = try rootAndFirstLeaf(store, "a").leaf
        }
        try patchPage(path, pageSize: pageSize, leaf, reseal: false) { p in
            let off = pageSize - 5
            p.storeBytes(of: p.load(fromByteOffset: off, as: UInt8.self) ^ 0xFF, toByteOffset: off, as: UInt8.self)
        }
        let store = try Store(path: path, options: StoreOptions(createIfMissing: false))
        let report = try store.check()
        #expect(!report.isOK)
        #expect(report.problems.contains { $0.page == leaf && $0.message.contains("checksum mismatch") }, "\(report.problems)")
    }

    /// The meta page of the commit before the current one, damaged so that its checksum fails
    /// (its header intact): a note, not a problem. Readers never see that commit, and a crash that
    /// tears the next commit's meta page before its first sector reaches the disk leaves exactly
    /// this (the old header, a checksum that fails), which must not make `check` call a healthy
    /// file corrupt.
    @Test func spoiledOlderMetaPageIsANote() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var older: UInt64 = 0
        var pageSize = 0
        do {
            // Durable commits: closing then leaves no commit log, whose replay at the next opening
            // would write its frame's meta page over the damaged one (after `.noSync` commits).
            let store = try Store(path: path)
            pageSize = store.pageSize
            for i in 0..<3 { try store.write { txn in _ = try txn.createTree("t").put([UInt8(i + 1)], [1]) } }
            older = (try store.read { $0.txnid } + 1) % 2
        }
        try patchPage(path, pageSize: pageSize, older, reseal: false) { p in p.setU64(MetaLayout.pageCount, 12345) }
        let store = try Store(path: path, options: StoreOptions(createIfMissing: false))
        let report = try store.check()
        #expect(report.isOK, "\(report.problems)")
        #expect(
            report.warnings.contains { $0.page == older && $0.message.contains("does not verify") && $0.message.contains("checksum") },
            "\(report.warnings)")
        #expect(report.metas[Int(older)].isValid == false)
        #expect(report.metas[Int(1 - older)].isCurrent)
        #expect(try store.metaNotes() == report.warnings)
    }

    @Test func keysOutOfOrderAreAStructureProblem() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var leaf: UInt64 = 0
        var pageSize = 0
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            pageSize = store.pageSize
            try store.write { txn in
                let t = try txn.createTree("t")
                for i in 0..<3000 { try t.put(Array("key\(100_000 + i)".utf8), [0]) }
            }
            try store.write { txn in _ = try txn.createTree("other").put([1], [1]) }
            leaf = try rootAndFirstLeaf(store, "t").leaf
        }
        // Swap the first two slots of the leaf: its keys are then out of order. Reseal, so that
        // only the structure is wrong.
        try patchPage(path, pageSize: pageSize, leaf, reseal: true) { p in
            let s0 = UnsafeRawPointer(p).u16(PageHeader.size)
            let s1 = UnsafeRawPointer(p).u16(PageHeader.size + 2)
            p.setU16(PageHeader.size, s1)
            p.setU16(PageHeader.size + 2, s0)
        }
        let store = try Store(path: path, options: StoreOptions(createIfMissing: false))
        let report = try store.check()
        #expect(report.problems.contains { $0.page == leaf && $0.message.contains("is not above key") }, "\(report.problems)")
        #expect(!report.problems.contains { $0.message.contains("checksum") })
    }

    @Test func sharedChildAndLeakedPageAreReported() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var root: UInt64 = 0
        var pageSize = 0
        var first: UInt64 = 0
        var second: UInt64 = 0
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            pageSize = store.pageSize
            try store.write { txn in
                let t = try txn.createTree("t")
                for i in 0..<3000 { try t.put(Array("key\(100_000 + i)".utf8), [0]) }
            }
            try store.write { txn in _ = try txn.createTree("other").put([1], [1]) }
            root = try rootAndFirstLeaf(store, "t").root
            (first, second) = try store.read { txn in
                let node = try txn.pages.node(root)
                try #require(!node.isLeaf && node.count >= 2)
                return (try node.child(0), try node.child(1))
            }
        }
        // Point the root's second child at its first: the first is reached twice, the second
        // (and whatever was below it) is reached by nothing.
        try patchPage(path, pageSize: pageSize, root, reseal: true) { p in
            let off = Int(UnsafeRawPointer(p).u16(PageHeader.size + 2))
            p.setU64(off, first)
        }
        let store = try Store(path: path, options: StoreOptions(createIfMissing: false))
        let report = try store.check()
        #expect(report.problems.contains { $0.page == first && $0.message.contains("used twice") }, "\(report.problems)")
        #expect(report.problems.contains { $0.page == second && $0.message.contains("leaked") }, "\(report.problems)")
        #expect(report.pages.leaked >= 1)
    }

    @Test func freeListNamingAUsedPageIsReported() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var pageSize = 0
        var freeRoot: UInt64 = 0
        var catalogRoot: UInt64 = 0
        var listed: UInt64 = 0
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            pageSize = store.pageSize
            for i in 0..<4 { try store.write { txn in _ = try txn.createTree("t").put([UInt8(i + 1)], [UInt8](repeating: 1, count: 100)) } }
            (freeRoot, catalogRoot, listed) = try store.read { txn in
                let node = try txn.pages.node(txn.meta.free.root)
                try #require(node.isLeaf && node.count > 0)
                guard case .inline(let value) = try node.value(0) else { throw StorageError.internalError("overflow chunk") }
                let entries = try FreeListFormat.decodeEntries(value, page: 0)
                return (txn.meta.free.root, txn.meta.catalog.root, try #require(entries.first).page)
            }
        }
        // Rewrite the first free entry to name the catalog root: that page is then both used and
        // free, and the page the entry named is accounted for by nothing.
        try patchPage(path, pageSize: pageSize, freeRoot, reseal: true) { p in
            let node = try? Node(UnsafeRawPointer(p), pgno: freeRoot, pageSize: pageSize)
            guard let node, case .inline(let value)? = try? node.value(0), let start = value.baseAddress else { return }
            p.setU64(start - UnsafeRawPointer(p), catalogRoot)
        }
        let store = try Store(path: path, options: StoreOptions(createIfMissing: false))
        let report = try store.check()
        #expect(report.problems.contains { $0.page == catalogRoot && $0.message.contains("listed free") }, "\(report.problems)")
        #expect(report.problems.contains { $0.page == listed && $0.message.contains("leaked") }, "\(report.problems)")
    }

    @Test func wrongCatalogCountIsReported() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var pageSize = 0
        var catalogRoot: UInt64 = 0
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            pageSize = store.pageSize
            try store.write { txn in
                let t = try txn.createTree("t")
                for i in 0..<10 { try t.put([UInt8(i + 1)], [0]) }
            }
            try store.write { txn in _ = try txn.createTree("u").put([1], [1]) }
            try store.write { txn in _ = try txn.createTree("u").put([2], [1]) }
            catalogRoot = try store.read { $0.meta.catalog.root }
        }
        // Tree "t" is the catalog's first entry: claim 11 entries instead of 10.
        try patchPage(path, pageSize: pageSize, catalogRoot, reseal: true) { p in
            guard let node = try? Node(UnsafeRawPointer(p), pgno: catalogRoot, pageSize: pageSize),
                case .inline(let value)? = try? node.value(0), let start = value.baseAddress
            else { return }
            p.setU64(start - UnsafeRawPointer(p) + 8, 11)
        }
        let store = try Store(path: path, options: StoreOptions(createIfMissing: false))
        let report = try store.check()
        #expect(report.problems.contains { $0.message.contains("tree 't' holds 10 entries but its catalog entry says 11") }, "\(report.problems)")
        // The reads that trust the count still work; treeStats reports what the leaves hold.
        let stats = try store.treeStats()
        #expect(stats.first { $0.name == "t" }?.entries == 10)
    }

    @Test func randomDamageNeverCrashes() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var pageSize = 0
        var pageCount: UInt64 = 0
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            pageSize = store.pageSize
            var rng = SplitMix(seed: 7)
            for _ in 0..<5 {
                try store.write { txn in
                    let t = try txn.createTree("t")
                    for _ in 0..<400 { try t.put(Array("k\(rng.below(3000))".utf8), rng.byteArray(rng.percent(3) ? 9000 : rng.below(100))) }
                }
            }
            pageCount = try store.read { $0.meta.pageCount }
        }
        let pristine = try readFileBytes(path)
        var rng = SplitMix(seed: 99)
        var found = 0
        for trial in 0..<40 {
            var bytes = pristine
            // Damage a few random bytes of one non-meta page.
            let page = 2 + rng.below(Int(pageCount) - 2)
            for _ in 0..<rng.within(1...8) { bytes[page * pageSize + rng.below(pageSize)] ^= UInt8(1 + rng.below(255)) }
            removeStoreFiles(path)
            try writeFileBytes(path, bytes)
            do {
                let store = try Store(path: path, options: StoreOptions(createIfMissing: false))
                let report = try store.check()
                if !report.isOK { found += 1 }
                _ = try? store.treeStats()
                _ = try? store.describePage(UInt64(page))
            } catch let error as StorageError {
                // Open may refuse the file (the newest commit and the previous one both damaged).
                found += 1
                _ = error
            }
            _ = trial
        }
        // Every damaged page is either reachable (checksum) or free (not checked): most trials see it.
        #expect(found > 0)
    }

    // MARK: treeStats and describePage

    @Test func treeStatsAndDescribePageOnAKnownStore() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let fruits = try txn.createTree("fruits")
            try fruits.put(Array("apple".utf8), Array("red".utf8))
            try fruits.put(Array("banana".utf8), Array("yellow".utf8))
            try fruits.put(Array("cherry".utf8), [UInt8](repeating: 0xAB, count: 10_000))
            try fruits.put([0x00, 0xFF], [0x01, 0x02])
        }
        let stats = try store.treeStats()
        #expect(stats.map(\.name) == ["fruits", "(catalog)", "(free pages)"])
        let fruits = try #require(stats.first)
        #expect(fruits.kind == .user && fruits.depth == 1 && fruits.branchPages == 0 && fruits.leafPages == 1)
        #expect(fruits.entries == 4)
        #expect(fruits.overflowPages == (32 + 10_000 + store.pageSize - 1) / store.pageSize)
        #expect(fruits.fillFactor > 0 && fruits.fillFactor < 0.2)
        let catalog = stats[1]
        #expect(catalog.kind == .catalog && catalog.entries == 1 && catalog.depth == 1)
        #expect(stats[2].kind == .freePages)

        let root = try rootAndFirstLeaf(store, "fruits").root
        let text = try store.describePage(root)
        #expect(text.contains("page \(root): leaf"), "\(text)")
        #expect(text.contains("checksum ok"))
        #expect(text.contains("key \"apple\" (5 B) value \"red\" (3 B)"), "\(text)")
        #expect(text.contains("key 0x00ff (2 B) value 0x0102 (2 B)"), "\(text)")
        #expect(text.contains("value in overflow run at page"), "\(text)")

        let run = try store.read { txn -> UInt64 in
            let node = try txn.pages.node(root)
            let (index, found) = try Array("cherry".utf8).withUnsafeBytes { try node.leafSearch($0) }
            try #require(found)
            guard case .overflow(let run, _) = try node.value(index) else { throw StorageError.internalError("not overflow") }
            return run
        }
        let overflowText = try store.describePage(run)
        #expect(overflowText.contains("overflow run of 3 pages"), "\(overflowText)")

        let meta = try store.describePage(try store.read { $0.txnid } % 2)
        #expect(meta.contains("meta (current)") && meta.contains("format version  \(strataFormatVersion)"), "\(meta)")

        // A commit of more pages than its meta lists inline writes a commit-record run: its pages
        // are listed by number (not their checksums, which format 2 stores beside them).
        try store.write { txn in
            let big = try txn.createTree("big")
            for i in 0..<20_000 { try big.put(bigEndianKey(UInt64(i)), [UInt8](repeating: 7, count: 100)) }
        }
        let (recordRun, pageCount) = try store.read { ($0.meta.recordRun, $0.meta.pageCount) }
        try #require(recordRun != 0, "the big commit should have needed a record run")
        let recordText = try store.describePage(recordRun)
        #expect(recordText.contains("commit record run"), "\(recordText)")
        let listedLine = try #require(recordText.split(separator: "\n").first { $0.contains("lists (first page):") })
        let listed = listedLine.split(separator: ":")[1].split(separator: " ").compactMap { UInt64($0) }
        #expect(listed.count > 64 / 2 && listed.allSatisfy { $0 >= 2 && $0 < pageCount }, "\(listedLine)")

        #expect(throws: InspectError.self) { try store.describePage(1_000_000) }
        let metas = try store.metaPages()
        #expect(metas.count == 2 && metas.filter(\.isCurrent).count == 1)
    }

    // MARK: The strata tool

    @Test(.enabled(if: strataToolPath() != nil, "the strata executable is not built next to the tests; run `swift build` first"))
    func strataToolExitCodes() throws {
        let tool = try #require(strataToolPath())
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var leaf: UInt64 = 0
        var pageSize = 0
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            pageSize = store.pageSize
            try store.write { txn in
                let t = try txn.createTree("t")
                for i in 0..<2000 { try t.put(Array("k\(i)".utf8), Array("v\(i)".utf8)) }
            }
            // Durable, so that the leaf damaged below is not a page of the newest commit's run.
            try store.write(durability: .full) { txn in _ = try txn.createTree("u").put([1], [1]) }
            leaf = try rootAndFirstLeaf(store, "t").leaf
        }
        var result = try runTool(tool, ["check", path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("ok"))
        for command in ["info", "trees", "readers"] {
            result = try runTool(tool, [command, path])
            #expect(result.status == 0, "\(command): \(result)")
        }
        result = try runTool(tool, ["page", path, String(leaf)])
        #expect(result.status == 0 && result.stdout.contains("leaf"), "\(result)")

        let missing = path + ".missing"
        result = try runTool(tool, ["check", missing])
        #expect(result.status == 2, "\(result)")
        #expect(!FileManager.default.fileExists(atPath: missing), "check must not create the file")

        let foreign = path + ".foreign"
        try writeFileBytes(foreign, Array(repeating: 0x5A, count: 10_000))
        defer { removeStoreFiles(foreign) }
        result = try runTool(tool, ["check", foreign])
        #expect(result.status == 3, "\(result)")
        #expect(result.stderr.contains("not a Strata database"), "\(result)")

        try patchPage(path, pageSize: pageSize, leaf, reseal: false) { p in p.setU8(pageSize - 1, UnsafeRawPointer(p).u8(pageSize - 1) ^ 0x40) }
        result = try runTool(tool, ["check", path])
        #expect(result.status == 5, "\(result)")
        #expect(result.stdout.contains("page \(leaf): checksum mismatch"), "\(result)")

        // Both meta pages spoiled: the file cannot be opened at all.
        for slot: UInt64 in [0, 1] {
            try patchPage(path, pageSize: pageSize, slot, reseal: false) { p in p.setU64(MetaLayout.catalogCount, 999) }
        }
        result = try runTool(tool, ["check", path])
        #expect(result.status == 4, "\(result)")
        result = try runTool(tool, ["info", path])
        #expect(result.status == 4, "\(result)")

        result = try runTool(tool, ["bogus"])
        #expect(result.status == 1, "\(result)")
        result = try runTool(tool, ["help"])
        #expect(result.status == 0 && result.stdout.contains("usage"), "\(result)")
    }
}
