import Testing
@testable import StrataStorage
import Foundation

/// Cursors and range scans on deterministic trees deep enough to have several levels.
@Suite struct CursorTests {
    /// Keys "k00000…", "k00002…", … (even numbers), so that odd numbers fall between keys; padded to
    /// 150 bytes so that few fit in a page and the tree has several levels.
    static func key(_ i: Int) -> [UInt8] {
        Array("k\(String(repeating: "0", count: max(0, 5 - String(i).count)))\(i)".utf8) + [UInt8](repeating: 0x2E, count: 144)
    }
    static func value(_ i: Int) -> [UInt8] {
        // Mostly small values, every 97th an overflow value, so cursors cross overflow entries too.
        i % 97 == 0 ? [UInt8](repeating: UInt8(truncatingIfNeeded: i), count: 5000 + i % 300) : Array("v\(i)".utf8)
    }
    static let count = 6000

    static func makeStore(pageSize: Int = 4096) throws -> Store {
        let store = try Store.inMemory(options: StoreOptions(pageSize: pageSize, durability: .noSync))
        try store.write { txn in
            let tree = try txn.createTree("t")
            // Insert in a scrambled order so pages split in the middle, not only at the edge.
            var order = Array(0..<count)
            var rng = SplitMix(seed: 7)
            for i in stride(from: order.count - 1, to: 0, by: -1) { order.swapAt(i, rng.below(i + 1)) }
            for i in order { try tree.put(key(2 * i), value(2 * i)) }
            _ = try txn.createTree("empty")
        }
        return store
    }

    @Test func emptyTree() throws {
        let store = try Self.makeStore()
        try store.read { txn in
            let tree = try #require(try txn.tree("empty"))
            #expect(tree.count == 0)
            let cursor = tree.cursor()
            #expect(!cursor.isPositioned)
            #expect(try cursor.next() == false)
            #expect(try cursor.prev() == false)
            #expect(try cursor.first() == false)
            #expect(try cursor.last() == false)
            #expect(try cursor.seek([0]) == false)
            #expect(!cursor.isPositioned && cursor.key.count == 0 && cursor.value.count == 0)
            var visited = 0
            try tree.forEach { _, _ in
                visited += 1; return true
            }
            try tree.forEach(from: [1], to: [9], reverse: true) { _, _ in
                visited += 1; return true
            }
            #expect(visited == 0)
        }
    }

    @Test func fullIterationBothWays() throws {
        let store = try Self.makeStore()
        try store.read { txn in
            let tree = try #require(try txn.tree("t"))
            #expect(tree.count == Self.count)
            let shape = try treeShape(txn, "t")
            #expect(shape.depth >= 3, "the test tree should have several levels, has \(shape.depth)")
            let cursor = tree.cursor()
            var i = 0
            var more = try cursor.first()
            while more {
                #expect(Array(cursor.key) == Self.key(2 * i) && Array(cursor.value) == Self.value(2 * i), "entry \(i)")
                i += 1
                more = try cursor.next()
            }
            #expect(i == Self.count)
            #expect(!cursor.isPositioned)
            #expect(try cursor.next() == false, "next() past the end stays off the tree")
            i = Self.count
            more = try cursor.last()
            while more {
                i -= 1
                #expect(Array(cursor.key) == Self.key(2 * i) && Array(cursor.value) == Self.value(2 * i), "entry \(i)")
                more = try cursor.prev()
            }
            #expect(i == 0)
            #expect(try cursor.prev() == false, "prev() before the start stays off the tree")
        }
    }

    /// seek lands on the first key ≥ the target: exact keys, keys between, before the first, after the last.
    @Test func seekSemantics() throws {
        let store = try Self.makeStore()
        try store.read { txn in
            let tree = try #require(try txn.tree("t"))
            let cursor = tree.cursor()
            for n in stride(from: -1, to: 2 * Self.count + 1, by: 1) {
                let target: [UInt8] = n < 0 ? [0x00] : Self.key(n)
                let found = try cursor.seek(target)
                let expected = n < 0 ? 0 : (n + 1) / 2
                if expected < Self.count {
                    #expect(found && Array(cursor.key) == Self.key(2 * expected), "seek(\(n))")
                } else {
                    #expect(!found && !cursor.isPositioned, "seek(\(n)) past the last key")
                }
            }
            #expect(try cursor.seek([0xFF]) == false)
            #expect(try cursor.seek(Array("k".utf8)) && Array(cursor.key) == Self.key(0), "a proper prefix sorts first")
        }
    }

    /// Stepping back and forth around every position, across leaf and branch boundaries.
    /// `seekForward` lands where `seek` lands, for targets just ahead (same leaf), a few leaves
    /// ahead, far ahead, past the end, equal to the current key, between keys and behind the
    /// current key, in a tree of three or more levels, and in a write transaction's tree as it
    /// changes (where a write invalidates the cursor and the next seek starts over).
    @Test func seekForwardLandsWhereSeekDoes() throws {
        let seed: UInt64 = 20_261_201
        let store = try Self.makeStore()
        let sorted = (0..<Self.count).map { Self.key(2 * $0) }
        func target(_ rng: inout SplitMix, from current: Int) -> [UInt8] {
            // An index into the key space of 2 × count (odd: between two keys), at a jump of
            // 0, 1, a few, a few hundred or anything (behind too), or past the end.
            let jump: Int
            switch rng.below(6) {
            case 0: jump = 0
            case 1: jump = 1
            case 2: jump = rng.below(20)
            case 3: jump = rng.below(600)
            case 4: jump = rng.below(2 * Self.count) - Self.count
            default: jump = 2 * Self.count
            }
            return Self.key(max(0, min(2 * Self.count + 1, current + jump)))
        }
        try store.read { txn in
            let tree = try #require(try txn.tree("t"))
            var rng = SplitMix(seed: seed)
            let cursor = tree.cursor()
            let fresh = tree.cursor()
            var at = 0
            for step in 0..<4000 {
                let goal = target(&rng, from: at)
                let moved = try cursor.seekForward(goal)
                let expected = try fresh.seek(goal)
                let model = sorted.firstIndex { !$0.lexicographicallyPrecedes(goal) }
                #expect(moved == expected && moved == (model != nil), "seed \(seed) step \(step)")
                if moved {
                    #expect(Array(cursor.key) == Array(fresh.key) && Array(cursor.value) == Array(fresh.value), "seed \(seed) step \(step)")
                    #expect(model.map { sorted[$0] } == Array(cursor.key), "seed \(seed) step \(step)")
                    // The cursor goes on from there as from a seek.
                    #expect(try cursor.next() == fresh.next(), "seed \(seed) step \(step)")
                    #expect(Array(cursor.key) == Array(fresh.key), "seed \(seed) step \(step)")
                    at = (model ?? 0) * 2
                } else {
                    #expect(!cursor.isPositioned, "seed \(seed) step \(step)")
                    _ = try cursor.seek(Self.key(0))
                    at = 0
                }
            }
        }
        try store.write { txn in
            // In a write transaction: the same, until a write, after which the cursor (like
            // `next`) says it is invalid rather than reading the tree as it was.
            let tree = try #require(try txn.tree("t"))
            var rng = SplitMix(seed: seed ^ 1)
            let cursor = try tree.cursor()
            _ = try cursor.seek(Self.key(0))
            for step in 0..<300 {
                let goal = target(&rng, from: 2 * rng.below(Self.count))
                let moved = try cursor.seekForward(goal)
                let fresh = try tree.cursor()
                #expect(moved == (try fresh.seek(goal)), "seed \(seed) step \(step)")
                if moved { #expect(Array(cursor.key) == Array(fresh.key), "seed \(seed) step \(step)") }
                if !moved { _ = try cursor.seek(Self.key(0)) }
            }
            try tree.put(Self.key(1), [1])
            #expect(throws: StorageError.cursorInvalidated) { try cursor.seekForward(Self.key(3)) }
        }
    }

    /// `find` says whether a key is in the tree and lands on it, as `get` and `seek` do, for keys
    /// looked up near the last (same leaf, either direction), at the first and last key of a leaf,
    /// between keys (absent, inside the leaf's range), far away and past either end; in a write
    /// transaction's tree too, where a write between two finds must be seen by the second.
    @Test func findAgreesWithGetAndSeek() throws {
        let seed: UInt64 = 20_261_204
        let store = try Self.makeStore()
        let present = Set((0..<Self.count).map { 2 * $0 })
        func goal(_ rng: inout SplitMix, near current: Int) -> Int {
            switch rng.below(5) {
            case 0: return max(-1, min(2 * Self.count + 1, current + rng.below(7) - 3))
            case 1: return max(-1, min(2 * Self.count + 1, current + rng.below(200) - 100))
            case 2: return rng.below(2 * Self.count + 2)
            case 3: return rng.below(2) == 0 ? -1 : 2 * Self.count + 1  // before the first, after the last
            default: return current
            }
        }
        func keyOf(_ n: Int) -> [UInt8] { n < 0 ? [0x20] : Self.key(n) }
        try store.read { txn in
            let tree = try #require(try txn.tree("t"))
            var rng = SplitMix(seed: seed)
            let cursor = tree.cursor()
            var at = Self.count
            for step in 0..<6000 {
                let n = goal(&rng, near: at)
                let key = keyOf(n)
                let found = try cursor.find(key)
                #expect(found == present.contains(n), "seed \(seed) step \(step) key \(n)")
                #expect(found == (try tree.get(key) != nil), "seed \(seed) step \(step) key \(n)")
                if found {
                    #expect(Array(cursor.key) == key && Array(cursor.value) == Self.value(n), "seed \(seed) step \(step) key \(n)")
                    // It goes on from there as a cursor that sought the key does.
                    let fresh = tree.cursor()
                    _ = try fresh.seek(key)
                    let direction = rng.below(2) == 0
                    #expect(try (direction ? cursor.next() : cursor.prev()) == (direction ? fresh.next() : fresh.prev()), "seed \(seed) step \(step)")
                    #expect(Array(cursor.key) == Array(fresh.key), "seed \(seed) step \(step)")
                    at = n
                } else {
                    #expect(!cursor.isPositioned, "seed \(seed) step \(step)")
                    if rng.below(3) == 0 { _ = try cursor.find(Self.key(2 * rng.below(Self.count))) }
                }
            }
        }
        try store.write { txn in
            let tree = try #require(try txn.tree("t"))
            var rng = SplitMix(seed: seed ^ 1)
            var model = present
            let cursor = try tree.cursor()
            var at = Self.count
            for step in 0..<1500 {
                let n = goal(&rng, near: at)
                if rng.below(4) == 0, n >= 0, n <= 2 * Self.count {
                    // A write beside the cursor's leaf: the next find must see the tree as it is.
                    if model.contains(n) {
                        try tree.delete(Self.key(n))
                        model.remove(n)
                    } else {
                        try tree.put(Self.key(n), Self.value(n))
                        model.insert(n)
                    }
                }
                let found = try cursor.find(keyOf(n))
                #expect(found == model.contains(n), "seed \(seed) step \(step) key \(n)")
                if found { #expect(Array(cursor.value) == Self.value(n), "seed \(seed) step \(step) key \(n)") }
                at = max(0, n)
            }
        }
    }

    /// `find` walked downwards with strides of every size (a descending index walk's objects: the
    /// newest messages of a room) over a tree five levels deep, so that the target is searched for
    /// from the leaf, its parent or any page above; present keys and absent ones between them,
    /// against the sorted model, in a read snapshot and in a write transaction's tree.
    @Test func findWalkingDownwardsAgreesWithTheModel() throws {
        let seed: UInt64 = 20_261_207
        func key(_ n: Int) -> [UInt8] {
            Array("k\(String(repeating: "0", count: max(0, 6 - String(n).count)))\(n)".utf8) + [UInt8](repeating: 0x2E, count: 380)
        }
        let count = 12_000
        let store = try Store.inMemory(options: StoreOptions(pageSize: 4096, durability: .noSync))
        try store.write { txn in
            let tree = try txn.createTree("t")
            var rng = SplitMix(seed: seed)
            var order = Array(0..<count)
            for i in stride(from: order.count - 1, to: 0, by: -1) { order.swapAt(i, rng.below(i + 1)) }
            for i in order { try tree.put(key(2 * i), Array("v\(2 * i)".utf8)) }
        }
        #expect(try store.treeStats().first { $0.name == "t" }?.depth ?? 0 >= 4)
        func walk(_ tree: ([UInt8]) throws -> [UInt8]?, _ cursor: Cursor, _ rng: inout SplitMix, present: (Int) -> Bool) throws {
            var n = 2 * count + 1
            var step = 0
            while n >= -1 {
                let k = n < 0 ? [UInt8(0x20)] : key(n)
                let found = try cursor.find(k)
                #expect(found == present(n), "seed \(seed) step \(step) key \(n)")
                #expect(found == (try tree(k) != nil), "seed \(seed) step \(step) key \(n)")
                if found { #expect(Array(cursor.key) == k && Array(cursor.value) == Array("v\(n)".utf8), "seed \(seed) step \(step) key \(n)") }
                // Strides within a leaf, to the next leaves, across a parent's and a grandparent's range.
                switch rng.below(4) {
                case 0: n -= 1 + rng.below(4)
                case 1: n -= 1 + rng.below(40)
                case 2: n -= 1 + rng.below(400)
                default: n -= 1 + rng.below(4000)
                }
                step += 1
            }
        }
        try store.read { txn in
            let tree = try #require(try txn.tree("t"))
            for round in 0..<8 {
                var rng = SplitMix(seed: seed &+ UInt64(round))
                try walk({ try tree.get($0) }, tree.cursor(), &rng) { $0 >= 0 && $0 % 2 == 0 && $0 < 2 * count }
            }
        }
        try store.write { txn in
            let tree = try #require(try txn.tree("t"))
            var rng = SplitMix(seed: seed ^ 1)
            try walk({ try tree.get($0) }, try tree.cursor(), &rng) { $0 >= 0 && $0 % 2 == 0 && $0 < 2 * count }
        }
    }

    @Test func zigZagAcrossPageBoundaries() throws {
        let store = try Self.makeStore()
        try store.read { txn in
            let tree = try #require(try txn.tree("t"))
            let cursor = tree.cursor()
            for i in 0..<Self.count {
                #expect(try cursor.seek(Self.key(2 * i)))
                if i > 0 {
                    #expect(try cursor.prev() && Array(cursor.key) == Self.key(2 * (i - 1)), "prev from \(i)")
                    #expect(try cursor.next() && Array(cursor.key) == Self.key(2 * i), "next back to \(i)")
                }
                if i + 1 < Self.count {
                    #expect(try cursor.next() && Array(cursor.key) == Self.key(2 * (i + 1)), "next from \(i)")
                    #expect(try cursor.prev() && Array(cursor.key) == Self.key(2 * i), "prev back to \(i)")
                } else {
                    #expect(try cursor.next() == false)
                }
            }
        }
    }

    /// forEach bounds: half-open [lower, upper), absent bounds, empty and inverted ranges, early stop.
    @Test func boundedRanges() throws {
        let store = try Self.makeStore()
        func collect(_ tree: ReadTree, _ lower: Int?, _ upper: Int?, reverse: Bool, limit: Int = .max) throws -> [Int] {
            var result: [Int] = []
            try tree.forEach(from: lower.map(Self.key), to: upper.map(Self.key), reverse: reverse) { k, v in
                let n = Int(String(decoding: k[1..<6], as: UTF8.self)) ?? -1
                #expect(Array(v) == Self.value(n))
                result.append(n)
                return result.count < limit
            }
            return result
        }
        func expected(_ lower: Int?, _ upper: Int?, reverse: Bool, limit: Int = .max) -> [Int] {
            let all = (0..<Self.count).map { 2 * $0 }.filter { n in (lower.map { n >= $0 } ?? true) && (upper.map { n < $0 } ?? true) }
            return Array((reverse ? all.reversed() : all).prefix(limit))
        }
        try store.read { txn in
            let tree = try #require(try txn.tree("t"))
            let cases: [(Int?, Int?)] = [
                (nil, nil), (0, nil), (nil, 0), (1, 2), (2, 3), (2, 2), (3, 3), (100, 50), (101, 2001), (100, 2000),
                (nil, 1), (nil, 2 * Self.count), (2 * Self.count - 2, nil), (2 * Self.count - 1, nil), (2 * Self.count + 5, nil),
                (5000, 5001), (4999, 5001), (11_000, 99_999),
            ]
            for (lower, upper) in cases {
                for reverse in [false, true] {
                    #expect(
                        try collect(tree, lower, upper, reverse: reverse) == expected(lower, upper, reverse: reverse),
                        "forEach(from: \(String(describing: lower)), to: \(String(describing: upper)), reverse: \(reverse))")
                    #expect(
                        try collect(tree, lower, upper, reverse: reverse, limit: 3) == expected(lower, upper, reverse: reverse, limit: 3),
                        "early stop of forEach(from: \(String(describing: lower)), to: \(String(describing: upper)), reverse: \(reverse))")
                }
            }
        }
    }

    /// A write transaction's cursor sees its own uncommitted writes and is invalidated by the next write.
    @Test func writeCursorSeesOwnWritesAndIsInvalidated() throws {
        let store = try Self.makeStore()
        try store.write { txn in
            let tree = try #require(try txn.tree("t"))
            try tree.put(Self.key(1), [1])
            #expect(try tree.delete(Self.key(2)))
            let cursor = try tree.cursor()
            #expect(try cursor.first())
            #expect(Array(cursor.key) == Self.key(0))
            #expect(try cursor.next() && Array(cursor.key) == Self.key(1) && Array(cursor.value) == [1])
            #expect(try cursor.next() && Array(cursor.key) == Self.key(4), "the deleted key is skipped")
            try tree.put(Self.key(3), [3])
            #expect(throws: StorageError.cursorInvalidated) { try cursor.next() }
            #expect(throws: StorageError.cursorInvalidated) { try cursor.prev() }
            // Repositioning makes it usable again and it sees the new write.
            #expect(try cursor.seek(Self.key(2)) && Array(cursor.key) == Self.key(3))
            #expect(try cursor.next() && Array(cursor.key) == Self.key(4))
            // A failed write (nothing changed) or a read does not invalidate it.
            #expect(try tree.insert(Self.key(4), [9]) == false)
            _ = try tree.get(Self.key(0))
            #expect(try cursor.next() && Array(cursor.key) == Self.key(6))
            #expect(try tree.delete(Self.key(99_999)) == false)
            #expect(try cursor.prev() && Array(cursor.key) == Self.key(4))
            // Dropping another tree counts as a write to the transaction.
            #expect(try txn.dropTree("empty"))
            #expect(throws: StorageError.cursorInvalidated) { try cursor.next() }
            txn.abort()
        }
        // The aborted changes never happened.
        try store.read { txn in
            let tree = try #require(try txn.tree("t"))
            #expect(try tree.get(Self.key(1)) == nil)
            #expect(try tree.get(Self.key(2)) == Self.value(2))
            #expect(try txn.tree("empty") != nil)
        }
    }

    /// A write transaction's cursor repositioned after writes that moved the tree's root (the
    /// tree grew from one leaf to several levels, then lost most of it again) finds what a new
    /// cursor finds: it descends from the tree's root as it is now, not as it was when made.
    @Test func writeCursorRepositionsFromTheCurrentRoot() throws {
        let store = try Store.inMemory(options: StoreOptions(pageSize: 4096, durability: .noSync))
        try store.write { txn in
            let tree = try txn.createTree("grow")
            try tree.put(Self.key(0), [0])
            let cursor = try tree.cursor()
            #expect(try cursor.first() && Array(cursor.key) == Self.key(0))
            for round in 0..<3 {
                // Round 0 and 1 add keys (the root splits); round 2 deletes most of them.
                for i in 1..<2000 {
                    if round < 2 {
                        try tree.put(Self.key(2 * i + round), [UInt8(truncatingIfNeeded: i)])
                    } else if i % 7 != 0 {
                        _ = try tree.delete(Self.key(2 * i))
                    }
                }
                let fresh = try tree.cursor()
                for probe in stride(from: 0, to: 4100, by: 37) {
                    let moved = try cursor.seek(Self.key(probe))
                    #expect(moved == (try fresh.seek(Self.key(probe))), "round \(round) probe \(probe)")
                    if moved { #expect(Array(cursor.key) == Array(fresh.key), "round \(round) probe \(probe)") }
                }
                #expect(try cursor.first() == fresh.first() && Array(cursor.key) == Array(fresh.key), "round \(round)")
                #expect(try cursor.last() == fresh.last() && Array(cursor.key) == Array(fresh.key), "round \(round)")
                #expect(try cursor.seek(toPosition: 100) == fresh.seek(toPosition: 100) && Array(cursor.key) == Array(fresh.key), "round \(round)")
                try tree.put(Self.key(1), [1])  // a write between rounds: the cursor is invalid until repositioned
            }
            _ = try txn.dropTree("grow")
            #expect(try cursor.seek(Self.key(0)) == false, "a dropped tree has no keys")
        }
    }

    /// Keys and values are views valid for the life of a read transaction, even after the cursor moves
    /// and the writer commits over them.
    @Test func viewsStayValidForTheTransaction() throws {
        let store = try Self.makeStore()
        let txn = try store.beginRead()
        defer { txn.end() }
        let tree = try #require(try txn.tree("t"))
        let cursor = tree.cursor()
        var views: [(UnsafeRawBufferPointer, UnsafeRawBufferPointer, Int)] = []
        var more = try cursor.first()
        var i = 0
        while more {
            if i % 50 == 0 { views.append((cursor.key, cursor.value, 2 * i)) }
            i += 1
            more = try cursor.next()
        }
        try store.write { w in
            let t = try #require(try w.tree("t"))
            for n in 0..<Self.count where n % 3 == 0 { try t.delete(Self.key(2 * n)) }
            for n in 0..<Self.count where n % 3 == 1 { try t.put(Self.key(2 * n), [UInt8](repeating: 0xEE, count: 300)) }
        }
        for _ in 0..<3 {
            try store.write { w in
                let t = try #require(try w.tree("t"))
                for n in 0..<500 { try t.put(Self.key(2 * n + 1), [UInt8](repeating: 0xAB, count: 100)) }
                for n in 0..<500 { try t.delete(Self.key(2 * n + 1)) }
            }
        }
        for (k, v, n) in views {
            #expect(Array(k) == Self.key(n) && Array(v) == Self.value(n), "view of entry \(n) changed")
        }
    }

    /// A cursor keeps its transaction alive: the snapshot stays readable while only the cursor holds it.
    @Test func cursorKeepsSnapshotAlive() throws {
        let store = try Self.makeStore()
        var cursor2: Cursor?
        do {
            let txn = try store.beginRead()
            cursor2 = try #require(try txn.tree("t")).cursor()
        }
        let c = try #require(cursor2)
        #expect(try c.first() && Array(c.key) == Self.key(0))
        #expect(try c.last() && Array(c.key) == Self.key(2 * (Self.count - 1)))
    }

    /// Trees with long keys (few entries per page) and 32 KiB pages (many entries per page).
    @Test(arguments: [4096, 32768])
    func iterationWithLongKeys(pageSize: Int) throws {
        let store = try Store.inMemory(options: StoreOptions(pageSize: pageSize, durability: .noSync))
        let maxKey = store.maxKeySize
        var keys: [[UInt8]] = []
        var rng = SplitMix(seed: UInt64(pageSize) &+ 3)
        for _ in 0..<400 {
            var key = rng.byteArray(rng.within(1...maxKey))
            if rng.percent(10) { key = Array(key.prefix(1)) }
            keys.append(key)
        }
        let sorted = Array(Set(keys)).sorted(by: keyLess)
        try store.write { txn in
            let tree = try txn.createTree("long")
            for k in keys { try tree.put(k, Array(k.suffix(3))) }
        }
        try store.read { txn in
            let tree = try #require(try txn.tree("long"))
            #expect(try allEntries(tree).map(\.0) == sorted)
            var reversed: [[UInt8]] = []
            try tree.forEach(reverse: true) { k, _ in
                reversed.append(Array(k)); return true
            }
            #expect(reversed == sorted.reversed())
            let cursor = tree.cursor()
            for (i, k) in sorted.enumerated() {
                #expect(try cursor.seek(k) && Array(cursor.key) == k)
                if i > 0 { #expect(try cursor.prev() && Array(cursor.key) == sorted[i - 1]) }
            }
        }
    }
}
