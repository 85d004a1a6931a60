import Testing
@testable import StrataStorage
import Foundation

// The changes between two snapshots (TreeDiff.swift) against a model: random transactions on a
// few trees (inserts that split leaves and branches, range deletes that empty and merge them,
// overwrites with the same value, overflow values growing and shrinking, trees dropped, created
// empty, and dropped and created again in one commit), with snapshots of earlier commits held
// open and compared with the newest one.
//
// Knobs: STRATA_DIFF_SEED (default 0xD1FF), STRATA_DIFF_TXNS (transactions, default 250).

@Suite struct TreeDiffTests {
    typealias Contents = [String: [[UInt8]: [UInt8]]]
    static let names = ["a", "b", "c"]

    /// What the model says changed between two versions of one tree.
    static func expected(_ old: [[UInt8]: [UInt8]], _ new: [[UInt8]: [UInt8]]) -> [[UInt8]: (KeyChange, [UInt8]?, [UInt8]?)] {
        var out: [[UInt8]: (KeyChange, [UInt8]?, [UInt8]?)] = [:]
        for (k, v) in old {
            if let w = new[k] {
                if v != w { out[k] = (.updated, v, w) }
            } else {
                out[k] = (.deleted, v, nil)
            }
        }
        for (k, w) in new where old[k] == nil { out[k] = (.inserted, nil, w) }
        return out
    }

    @Test func changesMatchTheModelUnderRandomTransactions() throws {
        let seed = UInt64(TestEnv.int("STRATA_DIFF_SEED", default: 0xD1FF))
        let txns = TestEnv.int("STRATA_DIFF_TXNS", default: 250)
        var rng = SplitMix(seed: seed)
        // Compaction moves pages of trees no commit wrote, which changedTrees then reports (its
        // documented behaviour, checked with keys in CompactionTests); here every report must be a write.
        var options = StoreOptions(durability: .noSync)
        options.compaction = .off
        let store = try Store.inMemory(options: options)
        var model: Contents = [:]
        // Held snapshots with the model at their commit, and the trees each commit touched.
        var held: [(txn: ReadTransaction, contents: Contents)] = []
        var touchedAt: [UInt64: Set<String>] = [:]
        var checks = 0, maxPages = 0

        func value() -> [UInt8] {
            switch rng.below(12) {
            case 0: return rng.byteArray(rng.within(1_100...9_000))  // an overflow run
            case 1: return []
            default: return rng.byteArray(rng.below(60))
            }
        }
        func key(_ n: Int) -> [UInt8] { Array(String(format: "k%06d", n).utf8) }

        for round in 0..<txns {
            let context = "seed \(seed) (STRATA_DIFF_SEED), transaction \(round)"
            var touched = Set<String>()
            try store.write { txn in
                for _ in 0..<rng.within(1...4) {
                    let name = Self.names[rng.below(Self.names.count)]
                    touched.insert(name)
                    switch rng.below(20) {
                    case 0:
                        try txn.dropTree(name)
                        model[name] = nil
                    case 1:
                        // Dropped and created again in one commit, with other contents.
                        try txn.dropTree(name)
                        let tree = try txn.createTree(name)
                        var fresh: [[UInt8]: [UInt8]] = [:]
                        for _ in 0..<rng.below(80) {
                            let k = key(rng.below(3000)), v = value()
                            try tree.put(k, v)
                            fresh[k] = v
                        }
                        model[name] = fresh
                    case 2, 3:
                        // A run of new keys: leaves and branches split.
                        let tree = try txn.createTree(name)
                        let start = rng.below(3000)
                        for n in start..<(start + rng.within(50...400)) {
                            let k = key(n), v = rng.byteArray(rng.below(40))
                            try tree.put(k, v)
                            model[name, default: [:]][k] = v
                        }
                    case 4:
                        // A range deleted: leaves empty and merge.
                        let tree = try txn.createTree(name)
                        let start = rng.below(3000)
                        for n in start..<(start + rng.within(50...600)) {
                            try tree.delete(key(n))
                            model[name, default: [:]][key(n)] = nil
                        }
                    case 5:
                        // The same values written again: no change.
                        let tree = try txn.createTree(name)
                        if model[name] == nil { model[name] = [:] }
                        for (k, v) in (model[name] ?? [:]).prefix(20) { try tree.put(k, v) }
                    default:
                        let tree = try txn.createTree(name)
                        if model[name] == nil { model[name] = [:] }
                        for _ in 0..<rng.within(1...12) {
                            let k = key(rng.below(3000))
                            if rng.percent(25) {
                                try tree.delete(k)
                                model[name]?[k] = nil
                            } else {
                                let v = value()
                                try tree.put(k, v)
                                model[name]?[k] = v
                            }
                        }
                    }
                }
            }
            let newest = try store.beginRead()
            // A transaction that changed nothing commits nothing: its trees join the last commit's.
            touchedAt[newest.txnid, default: []].formUnion(touched)
            held.append((newest, model))
            if held.count > 6 { held.remove(at: rng.below(held.count - 1)) }  // keep the newest

            // Compare the newest with every held snapshot.
            for (older, oldContents) in held where older.txnid != newest.txnid {
                for name in Self.names {
                    let want = Self.expected(oldContents[name] ?? [:], model[name] ?? [:])
                    var got: [[UInt8]: (KeyChange, [UInt8]?, [UInt8]?)] = [:]
                    var previous: [UInt8]?
                    var ordered = true
                    try newest.forEachChange(in: name, since: older) { change, key, old, new in
                        let k = Array(key)
                        if let p = previous, !keyLess(p, k) { ordered = false }
                        previous = k
                        #expect(got[k] == nil, "\(context): key reported twice")
                        got[k] = (change, old.map { Array($0) }, new.map { Array($0) })
                        return true
                    }
                    #expect(ordered, "\(context): tree \(name) changes since \(older.txnid) not in ascending key order")
                    let missing = want.keys.filter { got[$0] == nil }.count
                    let extra = got.keys.filter { want[$0] == nil }.count
                    #expect(
                        missing == 0 && extra == 0,
                        "\(context): tree \(name) since \(older.txnid): \(missing) changed keys not reported, \(extra) reported that did not change (model: \(want.count))"
                    )
                    for (k, w) in want {
                        guard let g = got[k] else { continue }
                        #expect(
                            g.0 == w.0 && g.1 == w.1 && g.2 == w.2,
                            "\(context): tree \(name) since \(older.txnid): key \(k) reported as \(g.0), the model says \(w.0)")
                    }
                    maxPages = max(maxPages, try newest.pagesReadByDiff(in: name, since: older))
                    checks += 1
                }
                // Changed trees: every tree whose contents or existence differ, and otherwise only
                // trees some commit in between wrote.
                let changed = Set(try newest.changedTrees(since: older))
                var written = Set<String>()
                for t in (older.txnid + 1)...newest.txnid { written.formUnion(touchedAt[t] ?? []) }
                for name in Self.names {
                    let differs = oldContents[name] != model[name]
                    if differs { #expect(changed.contains(name), "\(context): tree \(name) differs since \(older.txnid) but is not among \(changed)") }
                    if changed.contains(name) {
                        #expect(written.contains(name), "\(context): tree \(name) reported changed since \(older.txnid), but no commit wrote it")
                    }
                }
            }
        }
        print("TreeDiffTests: \(checks) tree comparisons over \(txns) transactions, at most \(maxPages) pages read by one (seed \(seed))")
    }

    /// Changing one key of a large tree reads a path on each side, not the tree; and a limit stops
    /// the walk.
    @Test func oneChangeReadsOnlyThePathsThatDiffer() throws {
        let store = try Store.inMemory()
        try store.write { txn in
            let t = try txn.createTree("big")
            for n in 0..<50_000 { try t.put(bigEndianKey(UInt64(n)), Array(repeating: UInt8(n % 251), count: 40)) }
        }
        let before = try store.beginRead()
        let depth = try treeShape(before, "big").depth
        try store.write { txn in _ = try txn.createTree("big").put(bigEndianKey(31_337), [1, 2, 3]) }
        let after = try store.beginRead()
        let keys = try after.changedKeys(in: "big", since: before)
        #expect(keys == [bigEndianKey(31_337)])
        let pages = try after.pagesReadByDiff(in: "big", since: before)
        // The leftmost path on each side to learn the height, then the changed path on each side.
        #expect(pages <= 4 * depth, "\(pages) pages read for one changed key in a tree of depth \(depth)")
        #expect(try after.changedTrees(since: before) == ["big"])
        #expect(try after.changedKeys(in: "big", since: after) == [])

        try store.write { txn in
            let t = try txn.createTree("big")
            for n in 0..<300 { try t.delete(bigEndianKey(UInt64(n * 7))) }
        }
        let later = try store.beginRead()
        #expect(try later.changedKeys(in: "big", since: before, limit: 100) == nil)
        #expect(try later.changedKeys(in: "big", since: before, limit: 301)?.count == 301)  // 300 deletions and the update
        var seen = 0
        let finished = try later.forEachChange(in: "big", since: before) { _, _, _, _ in
            seen += 1
            return seen < 10
        }
        #expect(!finished && seen == 10)
        print("TreeDiffTests: one changed key of 50,000 (depth \(depth)): \(pages) pages read")
    }

    @Test func snapshotsOfAnotherStoreAreRefused() throws {
        let one = try Store.inMemory()
        let two = try Store.inMemory()
        let a = try one.beginRead(), b = try two.beginRead()
        #expect(throws: StorageError.self) { try a.changedTrees(since: b) }
    }
}
