import Testing
@testable import StrataStorage

/// BTreeWrite.swift's choice of split points: keys that arrive in ascending (or descending) order
/// inside the tree — the newest entry of each of many groups, as a word's postings or a room's
/// messages by time — leave full pages behind them, where an even split would leave half-empty
/// ones; random keys still split evenly; and the tree reads back exactly as the model says.
@Suite struct SplitPointTests {
    static let seed: UInt64 = 20_261_202

    /// A key of group `group` (big-endian, so groups sort apart) and sequence number `seq` in it.
    static func key(group: Int, seq: Int) -> [UInt8] {
        bigEndianKey(UInt64(group)) + bigEndianKey(UInt64(seq))
    }

    static func fill(_ store: Store, _ name: String) throws -> Double {
        let stats = try store.treeStats().first { $0.name == name }
        return try #require(stats).fillFactor
    }

    /// Groups whose sizes follow a Zipf-like law, each growing at its end (or its start, descending),
    /// in random order of groups: every group's end page receives inserts at one position.
    @Test(arguments: [false, true])
    func groupedRunsLeaveFullPages(descending: Bool) throws {
        let path = temporaryPath("split-groups-\(descending)")
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        var rng = SplitMix(seed: Self.seed)
        let groups = 40
        var next = [Int](repeating: 0, count: groups)
        var model: [[UInt8]: [UInt8]] = [:]
        // Several transactions: a page keeps its hint when a later one copies it.
        for _ in 0..<4 {
            try store.write { txn in
                let tree = try txn.createTree("grouped")
                for _ in 0..<15_000 {
                    // Group g drawn with weight ~ 1/(g+1).
                    var g = 0
                    while g < groups - 1 && rng.next() % UInt64(g + 2) != 0 { g += 1 }
                    let seq = descending ? 1_000_000 - next[g] : next[g]
                    next[g] += 1
                    let key = Self.key(group: g, seq: seq)
                    let value = [UInt8](repeating: UInt8(truncatingIfNeeded: seq), count: 1 + Int(rng.next() % 12))
                    try tree.put(key, value)
                    model[key] = value
                }
            }
        }
        let fill = try Self.fill(store, "grouped")
        #expect(fill > 0.75, "seed \(Self.seed): grouped runs left the tree \(Int(fill * 100)) % full")
        try expectTree(store, "grouped", equals: model)
    }

    /// Random keys (with some overwrites and deletes) split evenly: the tree stays about as full as
    /// a B-tree of random inserts is (~69 %), and exact.
    @Test func randomKeysStillSplitEvenly() throws {
        let path = temporaryPath("split-random")
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        var rng = SplitMix(seed: Self.seed ^ 1)
        var model: [[UInt8]: [UInt8]] = [:]
        try store.write { txn in
            let tree = try txn.createTree("random")
            for i in 0..<40_000 {
                let key = bigEndianKey(rng.next() % 100_000)
                if i % 10 == 9, let victim = model.keys.first {
                    _ = try tree.delete(victim)
                    model[victim] = nil
                    continue
                }
                let value = [UInt8](repeating: UInt8(truncatingIfNeeded: i), count: 1 + Int(rng.next() % 40))
                try tree.put(key, value)
                model[key] = value
            }
        }
        let fill = try Self.fill(store, "random")
        #expect(fill > 0.6, "seed \(Self.seed ^ 1): random keys left the tree \(Int(fill * 100)) % full")
        try expectTree(store, "random", equals: model)
    }

    /// Every key of `model` in order, and nothing else, and the file checks clean.
    func expectTree(_ store: Store, _ name: String, equals model: [[UInt8]: [UInt8]]) throws {
        let expected = model.sorted { $0.key.lexicographicallyPrecedes($1.key) }
        var found: [([UInt8], [UInt8])] = []
        try store.read { txn in
            let tree = try #require(try txn.tree(name))
            try tree.cursor().forEach(from: nil, to: nil, reverse: false) { key, value in
                found.append((Array(key), Array(value)))
                return true
            }
            #expect(tree.count == model.count)
        }
        #expect(found.count == expected.count)
        for (a, b) in zip(found, expected) where a.0 != b.key || a.1 != b.value {
            Issue.record("entry \(a.0) differs from the model's \(b.key)")
            break
        }
        let report = try store.check()
        #expect(report.problems.isEmpty, "\(report.problems.prefix(3))")
    }
}
