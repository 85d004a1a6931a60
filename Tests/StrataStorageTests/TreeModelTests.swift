import Testing
@testable import StrataStorage
import Foundation

/// A tree as the model sees it: sorted keys and a dictionary of values.
struct ModelTree {
    var keys: [[UInt8]] = []
    var values: [[UInt8]: [UInt8]] = [:]

    var count: Int { keys.count }

    /// First index whose key is ≥ `key`.
    func lowerBound(_ key: [UInt8]) -> Int {
        var low = 0
        var high = keys.count
        while low < high {
            let mid = (low + high) >> 1
            if keyLess(keys[mid], key) { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// Stores `value`; returns true when the key is new.
    @discardableResult
    mutating func put(_ key: [UInt8], _ value: [UInt8]) -> Bool {
        if values.updateValue(value, forKey: key) != nil { return false }
        keys.insert(key, at: lowerBound(key))
        return true
    }

    @discardableResult
    mutating func delete(_ key: [UInt8]) -> Bool {
        if values.removeValue(forKey: key) == nil { return false }
        keys.remove(at: lowerBound(key))
        return true
    }

    /// Indices of keys in `lower ..< upper`, ascending.
    func range(_ lower: [UInt8]?, _ upper: [UInt8]?) -> Range<Int> {
        let start = lower.map(lowerBound) ?? 0
        let end = upper.map(lowerBound) ?? keys.count
        return start..<max(start, end)
    }
}

/// Model-based randomized test of the B+trees against Swift collections.
@Suite struct TreeModelTests {
    static let treeNames = ["alpha", "beta", "gamma", "delta-tree-with-a-longer-name"]

    /// A pool of keys: 1-byte keys, a family of keys that are prefixes of each other, short random
    /// keys, medium keys and long keys up to `maxKeySize` (several of exactly that size).
    static func keyPool(maxKeySize: Int, rng: inout SplitMix) -> [[UInt8]] {
        var pool: [[UInt8]] = []
        for b: UInt8 in [0, 1, 0x41, 0x7F, 0x80, 0xFE, 0xFF] { pool.append([b]) }
        for _ in 0..<40 { pool.append([UInt8(truncatingIfNeeded: rng.next())]) }
        for length in 1...64 {
            pool.append([UInt8](repeating: 0x70, count: length))
            pool.append([UInt8](repeating: 0x70, count: length) + [0x00])
            pool.append([UInt8](repeating: 0x70, count: length) + [0xFF])
        }
        for _ in 0..<8 { pool.append(rng.byteArray(maxKeySize)) }
        pool.append([UInt8](repeating: 0xFF, count: maxKeySize))
        pool.append([UInt8](repeating: 0x00, count: maxKeySize))
        while pool.count < 5000 {
            let roll = rng.below(100)
            let length = roll < 80 ? rng.within(2...24) : roll < 95 ? rng.within(25...300) : rng.within(301...maxKeySize)
            pool.append(rng.byteArray(length))
        }
        return pool
    }

    /// Values from 0 bytes to 40 KiB: mostly small, some around the inline limit, some overflow runs
    /// of several pages.
    static func randomValue(_ rng: inout SplitMix) -> [UInt8] {
        let roll = rng.below(1000)
        let size: Int
        if roll < 60 {
            size = 0
        } else if roll < 400 {
            size = rng.within(1...16)
        } else if roll < 760 {
            size = rng.within(17...200)
        } else if roll < 930 {
            size = rng.within(201...1500)
        } else if roll < 985 {
            size = rng.within(1501...9000)
        } else {
            size = rng.within(9001...40 * 1024)
        }
        return rng.byteArray(size)
    }

    struct Abort: Error {}

    /// Runs the randomized model test; returns a description of the first mismatch for the seed message.
    ///
    /// With `spilling`, transactions keep at most 64 pages in memory (`transactionMemory`), so
    /// nearly every transaction writes pages early, reads them back and changes them again.
    @Test(arguments: [false, true])
    func randomizedOperationsMatchModel(spilling: Bool) throws {
        let seed: UInt64 = spilling ? 0x5EED_0002 : 0x5EED_0001
        let totalOps = TestEnv.int("STRATA_MODEL_OPS", default: 100_000) / (spilling ? 2 : 1)
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: seed)
        var options = StoreOptions(durability: .noSync)
        options.pageSize = 4096
        if spilling { options.transactionMemory = 0 }
        var spills = 0
        var store: Store? = try Store(path: path, options: options)
        let maxKey = try #require(store).maxKeySize
        #expect(maxKey == Limits.maxKeySize(pageSize: 4096))
        let pool = Self.keyPool(maxKeySize: maxKey, rng: &rng)
        var model: [String: ModelTree] = [:]
        var ops = 0
        var transactions = 0
        var reopens = 0
        var aborts = 0
        var drops = 0
        var scans = 0
        var cursorWalks = 0
        var overflowPuts = 0
        var peakEntries = 0
        var peakPages: UInt64 = 0

        func randomKey(_ rng: inout SplitMix) -> [UInt8] { pool[rng.below(pool.count)] }
        func randomBound(_ rng: inout SplitMix) -> [UInt8]? {
            if rng.percent(20) { return nil }
            // Half the bounds are keys in the pool (often present), half fresh bytes (absent).
            return rng.percent(50) ? randomKey(&rng) : rng.byteArray(rng.within(1...12))
        }

        /// A bounded range scan compared with the model, both directions.
        func checkScan(_ cursor: () throws -> Cursor, _ tree: ModelTree, _ rng: inout SplitMix, context: String) throws {
            var lower = randomBound(&rng)
            var upper = randomBound(&rng)
            if let l = lower, let u = upper, keyLess(u, l), rng.percent(80) { swap(&lower, &upper) }
            let reverse = rng.percent(50)
            let limit = rng.percent(10) ? Int.max : rng.within(1...40)
            let range = tree.range(lower, upper)
            var expected = Array(range)
            if reverse { expected.reverse() }
            if expected.count > limit { expected = Array(expected[0..<limit]) }
            var got: [([UInt8], [UInt8])] = []
            try cursor().forEach(from: lower, to: upper, reverse: reverse) { k, v in
                got.append((Array(k), Array(v)))
                return got.count < limit
            }
            let ok =
                got.count == expected.count
                && zip(got, expected).allSatisfy { pair in
                    pair.0.0 == tree.keys[pair.1] && pair.0.1 == tree.values[tree.keys[pair.1]]
                }
            #expect(
                ok,
                "seed \(seed) op \(ops) \(context): forEach(from: \(lower.map { "\($0.count)B" } ?? "nil"), to: \(upper.map { "\($0.count)B" } ?? "nil"), reverse: \(reverse), limit \(limit)) returned \(got.count) entries, expected \(expected.count)"
            )
            let counted = try cursor().count(from: lower, to: upper)
            #expect(
                counted == range.count,
                "seed \(seed) op \(ops) \(context): count(from: \(lower.map { "\($0.count)B" } ?? "nil"), to: \(upper.map { "\($0.count)B" } ?? "nil")) is \(counted), expected \(range.count)"
            )
            scans += 1
        }

        /// A random walk of a raw cursor (first/last/seek, next/prev) compared with the model.
        func checkCursorWalk(_ cursor: Cursor, _ tree: ModelTree, _ rng: inout SplitMix, context: String) throws {
            var index: Int?
            func expectAt(_ moved: Bool, _ what: String) {
                if let i = index, i >= 0, i < tree.count {
                    let key = tree.keys[i]
                    let ok = moved && cursor.isPositioned && Array(cursor.key) == key && Array(cursor.value) == tree.values[key]
                    #expect(ok, "seed \(seed) op \(ops) \(context): \(what) should be at index \(i) of \(tree.count)")
                    let position = Result { try cursor.position() }
                    #expect((try? position.get()) == i, "seed \(seed) op \(ops) \(context): after \(what), position() is \(position), expected \(i)")
                } else {
                    #expect(!moved && !cursor.isPositioned, "seed \(seed) op \(ops) \(context): \(what) should be off the tree")
                    index = nil
                }
            }
            let start = rng.below(5)
            if start == 4 {
                // Positions on the tree, at its ends and just off them.
                let target = rng.percent(20) ? [-1, 0, tree.count - 1, tree.count][rng.below(4)] : rng.within(0...max(0, tree.count - 1))
                index = target
                expectAt(try cursor.seek(toPosition: target), "seek(toPosition: \(target))")
                if target >= 0 && target < tree.count {
                    let rank = try cursor.rank(of: tree.keys[target])
                    #expect(rank == target, "seed \(seed) op \(ops) \(context): rank of key \(target) is \(rank)")
                    index = target
                    expectAt(try cursor.seek(toPosition: target), "seek(toPosition: \(target)) again")
                }
            } else if start == 0 {
                index = 0
                expectAt(try cursor.first(), "first()")
            } else if start == 1 {
                index = tree.count - 1
                expectAt(try cursor.last(), "last()")
            } else {
                let target = randomBound(&rng) ?? randomKey(&rng)
                index = tree.lowerBound(target)
                expectAt(try cursor.seek(target), "seek(\(target.count)B)")
            }
            for _ in 0..<rng.within(1...30) {
                if rng.percent(55) {
                    index = index.map { $0 + 1 }
                    expectAt(try cursor.next(), "next()")
                } else {
                    index = index.map { $0 - 1 }
                    expectAt(try cursor.prev(), "prev()")
                }
            }
            cursorWalks += 1
        }

        /// Everything in the store equals the model: names, counts, every entry both ways.
        func verifyAll(_ store: Store, context: String) throws {
            // The structural check includes every branch's recorded subtree counts.
            let report = try store.check(maxProblems: 5)
            #expect(report.problems.isEmpty, "seed \(seed) \(context): check found \(report.problems)")
            try store.read { txn in
                let names = try txn.treeNames()
                let expectedNames = model.keys.sorted { keyLess(Array($0.utf8), Array($1.utf8)) }
                #expect(names == expectedNames, "seed \(seed) \(context): tree names")
                for (name, tree) in model {
                    let t = try #require(try txn.tree(name), "seed \(seed) \(context): tree \(name) missing")
                    #expect(t.count == tree.count, "seed \(seed) \(context): \(name) count")
                    var i = 0
                    var ok = true
                    try t.forEach { k, v in
                        if i >= tree.count || !k.elementsEqual(tree.keys[i]) || !v.elementsEqual(tree.values[tree.keys[i]] ?? []) { ok = false; return false }
                        i += 1
                        return true
                    }
                    #expect(ok && i == tree.count, "seed \(seed) \(context): \(name) ascending scan differs at entry \(i)")
                    i = tree.count
                    ok = true
                    try t.forEach(reverse: true) { k, v in
                        i -= 1
                        if i < 0 || !k.elementsEqual(tree.keys[i]) || !v.elementsEqual(tree.values[tree.keys[i]] ?? []) { ok = false; return false }
                        return true
                    }
                    #expect(ok && i == 0, "seed \(seed) \(context): \(name) descending scan differs at entry \(i)")
                }
            }
        }

        while ops < totalOps {
            transactions += 1
            let txnOps = rng.percent(20) ? rng.within(1...5) : rng.within(20...600)
            // Alternate growing and shrinking phases, so the trees swing between large and small
            // and pages split and merge throughout.
            let growing = (transactions / 60) % 2 == 0
            let putLimit = growing ? 440 : 200
            let insertLimit = growing ? 560 : 280
            let deleteLimit = growing ? 640 : 720
            let abortKind = rng.percent(3) ? rng.within(1...2) : 0
            let before = model
            do {
                try #require(store).write { txn in
                    for _ in 0..<txnOps {
                        ops += 1
                        let name = Self.treeNames[rng.below(Self.treeNames.count)]
                        let roll = rng.below(1000)
                        if roll < putLimit {
                            let key = randomKey(&rng)
                            let value = Self.randomValue(&rng)
                            if value.count > 1000 { overflowPuts += 1 }
                            let isNew = try txn.createTree(name).put(key, value)
                            let expectedNew = model[name, default: ModelTree()].put(key, value)
                            #expect(isNew == expectedNew, "seed \(seed) op \(ops): put returned \(isNew)")
                        } else if roll < insertLimit {
                            let key = randomKey(&rng)
                            let value = Self.randomValue(&rng)
                            let inserted = try txn.createTree(name).insert(key, value)
                            let exists = model[name, default: ModelTree()].values[key] != nil
                            #expect(inserted == !exists, "seed \(seed) op \(ops): insert returned \(inserted), key exists: \(exists)")
                            if !exists { model[name, default: ModelTree()].put(key, value) }
                        } else if roll < deleteLimit {
                            let key = randomKey(&rng)
                            let deleted = try txn.tree(name)?.delete(key) ?? false
                            let expected = model[name]?.delete(key) ?? false
                            #expect(deleted == expected, "seed \(seed) op \(ops): delete returned \(deleted)")
                        } else if roll < 840 {
                            let key = randomKey(&rng)
                            let got = try txn.tree(name)?.get(key)
                            #expect(got == model[name]?.values[key], "seed \(seed) op \(ops): get in write transaction")
                        } else if roll < 900 {
                            if let tree = try txn.tree(name) {
                                try checkScan({ try tree.cursor() }, model[name] ?? ModelTree(), &rng, context: "write scan of \(name)")
                            } else {
                                #expect(model[name] == nil, "seed \(seed) op \(ops): tree \(name) missing")
                            }
                        } else if roll < 960 {
                            if let tree = try txn.tree(name) {
                                try checkCursorWalk(try tree.cursor(), model[name] ?? ModelTree(), &rng, context: "write cursor of \(name)")
                            }
                        } else if roll < 980 {
                            // Rejected keys: empty and one byte too long, through put and insert.
                            let bad: [UInt8] = rng.percent(50) ? [] : rng.byteArray(maxKey + 1 + rng.below(3))
                            let tree = try txn.createTree(name)
                            if model[name] == nil { model[name] = ModelTree() }
                            #expect(throws: StorageError.invalidKey(length: bad.count, maximum: maxKey)) {
                                if rng.percent(50) { try tree.put(bad, [1, 2, 3]) } else { _ = try tree.insert(bad, [1]) }
                            }
                            #expect(try tree.get(bad) == nil)
                            #expect(try tree.delete(bad) == false)
                        } else if roll < 981 && rng.percent(5) {
                            let dropped = try txn.dropTree(name)
                            #expect(dropped == (model[name] != nil), "seed \(seed) op \(ops): dropTree returned \(dropped)")
                            model[name] = nil
                            #expect(try txn.tree(name) == nil)
                            drops += 1
                        } else {
                            let names = try txn.treeNames()
                            #expect(names == model.keys.sorted { keyLess(Array($0.utf8), Array($1.utf8)) }, "seed \(seed) op \(ops): treeNames in write")
                        }
                    }
                    spills += txn.spills
                    if abortKind == 1 { txn.abort() }
                    if abortKind == 2 { throw Abort() }
                }
            } catch is Abort {}
            if abortKind != 0 {
                model = before
                aborts += 1
            }
            peakEntries = max(peakEntries, model.values.reduce(0) { $0 + $1.count })
            if transactions % 50 == 0 { peakPages = max(peakPages, try #require(store).stats().pageCount) }

            // Reads through a fresh snapshot.
            try #require(store).read { txn in
                for (name, tree) in model {
                    let t = try txn.tree(name)
                    #expect(t?.count == tree.count, "seed \(seed) txn \(transactions): count of \(name)")
                }
                for _ in 0..<8 {
                    ops += 1
                    let name = Self.treeNames[rng.below(Self.treeNames.count)]
                    guard let tree = model[name], let t = try txn.tree(name) else { continue }
                    let roll = rng.below(10)
                    if roll < 5 {
                        let key = rng.percent(70) && tree.count > 0 ? tree.keys[rng.below(tree.count)] : randomKey(&rng)
                        #expect(try t.get(key) == tree.values[key], "seed \(seed) op \(ops): get from snapshot")
                    } else if roll < 8 {
                        try checkScan({ t.cursor() }, tree, &rng, context: "snapshot scan of \(name)")
                    } else {
                        try checkCursorWalk(t.cursor(), tree, &rng, context: "snapshot cursor of \(name)")
                    }
                }
            }
            if transactions % 97 == 0 {
                try verifyAll(try #require(store), context: "after transaction \(transactions)")
            }
            if rng.percent(2) {
                // Close and reopen: drop every handle so the next open reads the file afresh.
                weak let environment = try #require(store).env
                store = nil
                #expect(environment == nil, "seed \(seed): the environment outlived its last handle")
                store = try Store(path: path, options: options)
                try verifyAll(try #require(store), context: "after reopen \(reopens)")
                reopens += 1
            }
        }
        let s = try #require(store)
        try verifyAll(s, context: "at the end")
        print(
            "TreeModelTests: seed \(seed): \(ops) operations in \(transactions) transactions, \(aborts) aborted, \(reopens) reopens, \(drops) drops, \(scans) range scans, \(cursorWalks) cursor walks, \(overflowPuts) overflow puts; peak \(peakEntries) entries, \(peakPages) pages; final sizes \(model.mapValues(\.count))"
        )
        #expect(ops >= totalOps)
        if spilling { #expect(spills > 100, "seed \(seed): only \(spills) spills") } else { #expect(spills == 0) }
        #expect(reopens >= 3 || totalOps < 50_000)

        // Deleting everything gives the pages back.
        let full = try s.stats()
        try s.write { txn in
            for (i, name) in model.keys.sorted().enumerated() {
                guard let tree = try txn.tree(name), let keys = model[name]?.keys else { continue }
                if i % 2 == 0 {
                    // Key by key, in an order that merges pages from both sides.
                    for (j, key) in keys.enumerated() where j % 2 == 0 { #expect(try tree.delete(key)) }
                    for (j, key) in keys.enumerated().reversed() where j % 2 == 1 { #expect(try tree.delete(key)) }
                    #expect(tree.count == 0)
                } else {
                    #expect(try txn.dropTree(name))
                }
            }
        }
        // Durable: it ends the run of `.noSync` commits, whose pin would hold the pages the run
        // freed that the commit before it saw (up to 64 here, RunPin.swift).
        _ = try s.write(durability: .full) { txn in try txn.createTree("marker").put([1], [1]) }
        let empty = try s.stats()
        print(
            "TreeModelTests: full store \(full.pageCount) pages (\(full.usedPages) used, \(full.freePages) free); after deleting everything \(empty.usedPages) used, \(empty.freePages) free"
        )
        #expect(empty.pendingPages == 0)
        // Compaction may have trimmed the freed pages off the file instead of keeping them free.
        #expect(empty.usedPages < full.usedPages, "seed \(seed): deleting everything freed no pages")
        #expect(empty.usedPages * 20 <= full.pageCount, "seed \(seed): \(empty.usedPages) pages still used after deleting everything (of \(full.pageCount))")
        try s.read { txn in
            #expect(
                try txn.treeNames() == ["marker"]
                    || Set(try txn.treeNames()) == Set(model.keys.sorted().enumerated().filter { $0.offset % 2 == 0 }.map(\.element) + ["marker"]))
            for name in try txn.treeNames() where name != "marker" {
                let tree = try #require(try txn.tree(name))
                #expect(tree.count == 0)
                #expect(try tree.cursor().first() == false)
            }
        }
        // Refilling with less data than before reuses the freed pages instead of growing the file:
        // compaction may have trimmed most of them, but the file grows only once those left are
        // used (but for the few committed pages the refill itself copied and freed: the catalog's,
        // the free list's).
        var refill = SplitMix(seed: seed ^ 0xFFFF)
        try s.write { txn in
            let tree = try txn.createTree("refill")
            for i in 0..<2000 { try tree.put(bigEndianKey(UInt64(i)), refill.byteArray(refill.within(0...300))) }
        }
        let refilled = try s.stats()
        let grew = refilled.pageCount > empty.pageCount
        #expect(
            !grew || refilled.freePages <= 8,
            "seed \(seed): refilling grew the file from \(empty.pageCount) to \(refilled.pageCount) pages and left \(refilled.freePages) of \(empty.freePages) free"
        )
    }

    /// Keys from 1 byte to `maxKeySize` work at every page size; an empty or over-long key is rejected.
    @Test(arguments: Limits.pageSizes)
    func keyLimits(pageSize: Int) throws {
        let store = try Store.inMemory(options: StoreOptions(pageSize: pageSize, durability: .noSync))
        let maxKey = store.maxKeySize
        #expect(maxKey == Limits.maxKeySize(pageSize: pageSize))
        #expect(maxKey >= 998)
        var rng = SplitMix(seed: UInt64(pageSize))
        var expected: [[UInt8]: [UInt8]] = [:]
        try store.write { txn in
            let tree = try txn.createTree("keys")
            for length in [1, 2, 7, 100, maxKey - 1, maxKey] {
                for _ in 0..<60 {
                    let key = rng.byteArray(length)
                    let value = rng.percent(30) ? rng.byteArray(rng.within(0...(3 * pageSize))) : rng.byteArray(rng.within(0...40))
                    try tree.put(key, value)
                    expected[key] = value
                }
            }
            for bad in [[], rng.byteArray(maxKey + 1), rng.byteArray(maxKey + 1000)] as [[UInt8]] {
                #expect(throws: StorageError.invalidKey(length: bad.count, maximum: maxKey)) { try tree.put(bad, [1]) }
                #expect(throws: StorageError.invalidKey(length: bad.count, maximum: maxKey)) { _ = try tree.insert(bad, []) }
            }
            #expect(tree.count == expected.count)
        }
        try store.read { txn in
            let tree = try #require(try txn.tree("keys"))
            let entries = try allEntries(tree)
            #expect(entries.map(\.0) == expected.keys.sorted(by: keyLess))
            #expect(entries.allSatisfy { expected[$0.0] == $0.1 })
        }
    }

    /// A value that does not fit in a leaf is rejected past `Limits.maxValueSize` without reading it.
    @Test func valueTooLargeIsRejected() throws {
        let store = try Store.inMemory()
        let size = Limits.maxValueSize + 1
        // A read-only, never-touched anonymous mapping: the engine must reject the length up front.
        let address = try #require(mmap(nil, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0))
        #expect(address != MAP_FAILED)
        defer { munmap(address, size) }
        let huge = UnsafeRawBufferPointer(start: address, count: size)
        try store.write { txn in
            let tree = try txn.createTree("t")
            #expect(throws: StorageError.valueTooLarge(length: size, maximum: Limits.maxValueSize)) {
                try [UInt8]([1]).withUnsafeBytes { k in try tree.put(k, huge) }
            }
            #expect(tree.count == 0)
        }
    }

    /// A 64 MiB + 1 byte value round-trips through commit, a snapshot and a reopen, and its pages are
    /// reused after it is replaced.
    @Test func hugeValueRoundTrip() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let size = 64 * 1024 * 1024 + 1
        var rng = SplitMix(seed: 64)
        let big = rng.byteArray(size)
        let key: [UInt8] = Array("huge".utf8)
        func same(_ stored: UnsafeRawBufferPointer?) -> Bool {
            guard let stored, stored.count == size else { return false }
            return big.withUnsafeBytes { memcmp($0.baseAddress!, stored.baseAddress!, size) == 0 }
        }
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            try store.write { txn in
                let tree = try txn.createTree("big")
                try tree.put([1], [1])
                _ = try big.withUnsafeBytes { v in try key.withUnsafeBytes { k in try tree.put(k, v) } }
                try tree.put([0xFF], [2])
                #expect(try key.withUnsafeBytes { same(try tree.get($0)) })
            }
            try store.read { txn in
                let tree = try #require(try txn.tree("big"))
                #expect(try key.withUnsafeBytes { same(try tree.get($0)) })
                let cursor = tree.cursor()
                #expect(try cursor.seek(key))
                #expect(same(cursor.value))
                #expect(try cursor.next() && Array(cursor.key) == [0xFF])
            }
        }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.read { txn in
            let tree = try #require(try txn.tree("big"))
            #expect(tree.count == 3)
            #expect(try key.withUnsafeBytes { same(try tree.get($0)) })
        }
        let before = try store.stats()
        _ = try store.write { txn in try txn.createTree("big").put(key, [7]) }
        let after = try store.stats()
        let runPages = UInt64((PageHeader.size + size + store.pageSize - 1) / store.pageSize)
        #expect(after.freePages >= before.freePages + runPages, "the replaced value's \(runPages) pages were not freed")
        // A second huge value fits in the freed run instead of growing the file.
        _ = try store.write { txn in
            try big.withUnsafeBytes { v in try [UInt8](Array("again".utf8)).withUnsafeBytes { k in try txn.createTree("big").put(k, v) } }
        }
        let again = try store.stats()
        // Only the free-page tree's own copy-on-write may need fresh pages, not a second run.
        #expect(again.pageCount < after.pageCount + runPages / 20, "the file grew from \(after.pageCount) to \(again.pageCount) pages")
        try store.read { txn in
            let tree = try #require(try txn.tree("big"))
            #expect(try tree.get(key) == [7])
            #expect(try Array("again".utf8).withUnsafeBytes { same(try tree.get($0)) })
        }
    }
}
