import Testing
@testable import StrataStorage
import Foundation

/// Model-based hunt over overflow runs and the run allocator (FreeList.swift `allocateRun`,
/// `lowestRunStart`, `runBits`, `runFloors`): values of 1 byte to ~10 pages in several trees,
/// overwrites that grow and shrink (inline <-> run), deletes, nested savepoints kept and rolled
/// back, snapshots held across commits, spilling transactions, compaction and reopening; after
/// every commit the store equals a dictionary model and `check()` reports nothing.
struct RunsHuntConfig {
    var seed: UInt64
    var rounds = 30
    var pageSize: Int? = nil
    var transactionMemory: Int? = nil
    var compaction: Compaction? = nil
    var reopenEvery = 0
    var compactEvery = 0
    var maxPages = 10
}

struct RunsHuntRollback: Error {}

func runsHuntDrive(_ config: RunsHuntConfig, path: String) throws {
    let seed = config.seed
    var rng = SplitMix(seed: seed)
    func options() -> StoreOptions {
        var o = StoreOptions(pageSize: config.pageSize, durability: .noSync)
        if let m = config.transactionMemory { o.transactionMemory = m }
        if let c = config.compaction { o.compaction = c }
        return o
    }
    var store: Store? = try Store(path: path, options: options())
    let pageSize = try store!.stats().pageSize
    let treeNames = ["a", "b", "c"]
    var model: [String: [[UInt8]: [UInt8]]] = [:]

    func value() -> [UInt8] {
        switch rng.below(10) {
        case 0..<3: return rng.byteArray(rng.within(1...60))
        case 3: return rng.byteArray(rng.within(pageSize / 4...pageSize))
        default:
            let pages = rng.within(1...config.maxPages)
            return rng.byteArray(max(1, pages * pageSize - rng.within(0...pageSize / 2)))
        }
    }
    func operate(_ txn: WriteTransaction, _ state: inout [String: [[UInt8]: [UInt8]]]) throws {
        let name = treeNames[rng.below(treeNames.count)]
        let tree = try txn.createTree(name)
        let key = bigEndianKey(UInt64(rng.below(120)))
        if rng.percent(25) {
            _ = try tree.delete(key)
            state[name, default: [:]][key] = nil
        } else {
            let v = value()
            try tree.put(key, v)
            state[name, default: [:]][key] = v
        }
    }
    func nested(_ txn: WriteTransaction, _ state: inout [String: [[UInt8]: [UInt8]]], depth: Int) throws {
        for _ in 0..<rng.within(1...12) {
            if depth < 3, rng.percent(15) {
                var inner = state
                let fails = rng.percent(50)
                do {
                    try txn.savepoint {
                        try nested(txn, &inner, depth: depth + 1)
                        if fails { throw RunsHuntRollback() }
                    }
                    state = inner
                } catch is RunsHuntRollback {}
            } else {
                try operate(txn, &state)
            }
        }
    }

    var held: [(ReadTransaction, [String: [[UInt8]: [UInt8]]])] = []
    for round in 0..<TestEnv.int("RUNS_HUNT_ROUNDS", default: config.rounds) {
        if rng.percent(25) {
            held.append((try store!.beginRead(), model))
        } else if !held.isEmpty, rng.percent(35) {
            held.remove(at: rng.below(held.count))
        }
        var next = model
        let s = store!
        try s.write { txn in
            for _ in 0..<rng.within(3...8) { try nested(txn, &next, depth: 0) }
            if rng.percent(10) {
                // Drop a whole tree (its runs go back at once).
                let name = treeNames[rng.below(treeNames.count)]
                if try txn.tree(name) != nil {
                    _ = try txn.dropTree(name)
                    next[name] = nil
                }
            }
        }
        model = next
        let seen = try s.read { try snapshotContents($0) }.filter { !$0.value.isEmpty }
        let want = model.filter { !$0.value.isEmpty }
        if seen != want {
            Issue.record("seed \(seed): round \(round): store differs from the model")
            return
        }
        for (snapshot, contents) in held {
            let old = try snapshotContents(snapshot).filter { !$0.value.isEmpty }
            if old != contents.filter({ !$0.value.isEmpty }) {
                Issue.record("seed \(seed): round \(round): a held snapshot's values changed")
                return
            }
        }
        let report = try s.check()
        if !report.isOK {
            Issue.record("seed \(seed): round \(round): check: \(report.problems.prefix(3))")
            return
        }
        if config.compactEvery > 0, round % config.compactEvery == config.compactEvery - 1 {
            _ = try s.compact()
            let after = try s.read { try snapshotContents($0) }.filter { !$0.value.isEmpty }
            if after != want {
                Issue.record("seed \(seed): round \(round): compaction changed a value")
                return
            }
            let r2 = try s.check()
            if !r2.isOK { Issue.record("seed \(seed): round \(round): check after compact: \(r2.problems.prefix(3))"); return }
        }
        if config.reopenEvery > 0, round % config.reopenEvery == config.reopenEvery - 1 {
            held.removeAll()
            store = nil
            store = try Store(path: path, options: options())
            let after = try store!.read { try snapshotContents($0) }.filter { !$0.value.isEmpty }
            if after != want {
                Issue.record("seed \(seed): round \(round): reopen changed a value")
                return
            }
        }
    }
    // Everything deleted and compacted: the file shrinks back.
    held.removeAll()
    let s = store!
    try s.write { txn in
        for name in try txn.treeNames() { _ = try txn.dropTree(name) }
    }
    _ = try s.compact()
    let report = try s.check()
    #expect(report.isOK, "seed \(seed): final check: \(report.problems.prefix(3))")
    let stats = try s.stats()
    #expect(stats.pageCount < 40, "seed \(seed): \(stats.pageCount) pages left after deleting everything and compacting")
    #expect(fileSizeOf(path) <= UInt64(max(stats.pageCount, 40)) * UInt64(pageSize), "seed \(seed): file of \(fileSizeOf(path)) bytes")
}

@Suite struct RunsHuntTests {
    static var seeds: [UInt64] {
        let base = UInt64(TestEnv.int("RUNS_HUNT_SEED", default: 0x5EED))
        let count = TestEnv.int("RUNS_HUNT_SEEDS", default: 1)
        return (0..<UInt64(count)).map { base &+ $0 }
    }

    @Test func plain() throws {
        for seed in Self.seeds {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            try runsHuntDrive(RunsHuntConfig(seed: seed, rounds: 25), path: path)
        }
    }

    @Test func spillingSmallPages() throws {
        for seed in Self.seeds {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            try runsHuntDrive(RunsHuntConfig(seed: seed &+ 100, rounds: 25, transactionMemory: 0), path: path)
        }
    }

    @Test func aggressiveCompactionAndReopen() throws {
        for seed in Self.seeds {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            var c = Compaction.automatic
            c.freeFraction = 0.01
            c.pagesPerCommit = 16
            try runsHuntDrive(
                RunsHuntConfig(seed: seed &+ 200, rounds: 25, compaction: c, reopenEvery: 7, compactEvery: 5), path: path)
        }
    }

    /// Idle-time compaction commits from the background thread between the test's commits.
    @Test func idleCompactionBetweenCommits() throws {
        for seed in Self.seeds {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            var c = Compaction.automatic
            c.freeFraction = 0.01
            c.pagesPerCommit = 8
            c.idleDelay = .milliseconds(1)
            try runsHuntDrive(RunsHuntConfig(seed: seed &+ 400, rounds: 25, compaction: c, reopenEvery: 9), path: path)
        }
    }

    @Test func spillingWithCompaction() throws {
        for seed in Self.seeds {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            var c = Compaction.automatic
            c.freeFraction = 0.01
            c.pagesPerCommit = 64
            try runsHuntDrive(
                RunsHuntConfig(seed: seed &+ 300, rounds: 25, transactionMemory: 0, compaction: c, compactEvery: 4),
                path: path)
        }
    }
}

@Suite struct RunsHuntBoundaryTests {
    /// Values at the inline limit and at each run-length boundary (k pages less the overflow
    /// header, +-2), overwriting one another under six keys: every value stays exact and `check`
    /// finds nothing.
    @Test func boundarySizes() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        let pageSize = try store.stats().pageSize
        let inline = Limits.maxInlineEntry(pageSize: pageSize)
        var sizes: [Int] = [0, 1, inline - 20, inline - 12, inline - 11, inline - 10, inline - 9, inline, inline + 1]
        for k in 1...4 { for d in -2...2 { sizes.append(k * pageSize - PageHeader.size + d) } }
        sizes = sizes.filter { $0 >= 0 }
        let seed: UInt64 = 11
        var rng = SplitMix(seed: seed)
        var model: [[UInt8]: [UInt8]] = [:]
        for round in 0..<60 {
            try store.write { txn in
                let t = try txn.createTree("t")
                for _ in 0..<10 {
                    let key: [UInt8] = [UInt8(rng.below(6))]
                    let v = rng.byteArray(sizes[rng.below(sizes.count)])
                    try t.put(key, v)
                    model[key] = v
                }
            }
            let seen = try store.read { try snapshotContents($0) }["t"] ?? [:]
            #expect(seen == model, "seed \(seed): round \(round)")
            let r = try store.check()
            #expect(r.isOK, "seed \(seed): round \(round): \(r.problems.prefix(3))")
            if seen != model || !r.isOK { return }
        }
    }

    /// Across commits, overwriting a 5-page value reuses the freed runs: the file stays small.
    @Test func runsAreReusedAcrossCommits() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        let pageSize = try store.stats().pageSize
        var rng = SplitMix(seed: 3)
        for _ in 0..<100 {
            _ = try store.write { txn in try txn.createTree("t").put([1], rng.byteArray(5 * pageSize - 100)) }
        }
        let stats = try store.stats()
        #expect(stats.pageCount < 60, "\(stats.pageCount) pages for one 5-page value")
    }
}

@Suite struct RunsHuntSpaceTests {
    /// Large values deleted while a snapshot sees them: the snapshot still reads them exactly
    /// while new large values are written (their runs are not handed out), and once it ends a
    /// compaction gives the space back.
    @Test func heldSnapshotPinsRunsThenSpaceReturns() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        let pageSize = try store.stats().pageSize
        let seed: UInt64 = 21
        var rng = SplitMix(seed: seed)
        var model: [[UInt8]: [UInt8]] = [:]
        _ = try store.write { txn in
            let t = try txn.createTree("t")
            for k in 0..<60 {
                let v = rng.byteArray(rng.within(1...8) * pageSize - 200)
                try t.put(bigEndianKey(UInt64(k)), v)
                model[bigEndianKey(UInt64(k))] = v
            }
        }
        var snapshot: ReadTransaction? = try store.beginRead()
        let sizeWithValues = try store.stats().pageCount
        _ = try store.write { txn in _ = try txn.dropTree("t") }
        var current: [[UInt8]: [UInt8]] = [:]
        for round in 0..<10 {
            _ = try store.write { txn in
                let t = try txn.createTree("u")
                for _ in 0..<8 {
                    let key = bigEndianKey(UInt64(rng.below(30)))
                    let v = rng.byteArray(rng.within(1...8) * pageSize - rng.within(1...pageSize / 2))
                    try t.put(key, v)
                    current[key] = v
                }
            }
            let seen = try snapshotContents(snapshot!)["t"] ?? [:]
            #expect(seen == model, "seed \(seed): round \(round): the held snapshot's values changed")
            #expect((try store.read { try snapshotContents($0) }["u"] ?? [:]) == current, "seed \(seed): round \(round)")
            let r = try store.check()
            #expect(r.isOK, "seed \(seed): round \(round): \(r.problems.prefix(3))")
        }
        snapshot = nil
        _ = try store.write { txn in _ = try txn.dropTree("u") }
        _ = try store.compact()
        let after = try store.stats()
        #expect(try store.check().isOK)
        #expect(after.pageCount < 32, "seed \(seed): \(after.pageCount) pages after deleting everything and compacting (\(sizeWithValues) with the values)")
        #expect(after.fileSize <= after.pageCount * UInt64(pageSize) + 64 * 1024, "seed \(seed): file of \(after.fileSize) bytes for \(after.pageCount) pages")
    }
}
