import Testing
@testable import StrataStorage
import Foundation

/// Hunting the sorted application of deferred writes (d6d0194: a put into the leaf of the
/// previous put searches from that put's index; the 24-byte sort). Every tree state is compared
/// with a plain dictionary: deferred writes must read exactly as if written at once
/// (DeferredWrites.swift's header: "Nothing can tell the difference").
@Suite struct DeferredHuntTests {
    /// Keys crowded into few leaves: a 30-byte common stem (equal first 24 bytes) with short
    /// tails, every prefix of a 40-byte stem (keys that are prefixes of each other), and
    /// big-endian numbers in a narrow range after a word (index-entry-like).
    static func crowdedKeys(_ rng: inout SplitMix) -> [[UInt8]] {
        var keys: [[UInt8]] = []
        let stem = Array("abcdefghijklmnopqrstuvwxyz0123".utf8)  // 30 bytes
        for tail in 0..<120 { keys.append(stem + [UInt8(tail & 0xFF)]) }
        for tail in 0..<40 { keys.append(stem + [0, UInt8(tail)]) }
        keys.append(stem)
        keys.append(Array(stem.prefix(24)))
        keys.append(Array(stem.prefix(24)) + [0])
        keys.append(Array(stem.prefix(23)))
        let long = [UInt8](repeating: 0x6D, count: 40)
        for length in 1...40 { keys.append(Array(long.prefix(length))) }
        for n in 0..<200 { keys.append(Array("w".utf8) + [0] + bigEndianKey(UInt64(1000 + n))) }
        for _ in 0..<60 { keys.append(rng.byteArray(1 + rng.below(30))) }
        return Array(Set(keys))
    }

    static func value(_ rng: inout SplitMix, pageSize: Int) -> [UInt8] {
        switch rng.below(100) {
        case 0..<4: return rng.byteArray(pageSize + rng.below(2 * pageSize))  // overflow
        case 4..<14: return rng.byteArray(pageSize / 4 + rng.below(pageSize / 4))  // splits soon
        case 14..<20: return []
        default: return rng.byteArray(rng.below(40))
        }
    }

    struct Round: CustomStringConvertible, Sendable {
        var seed: UInt64
        var pageSize: Int
        var memory: Int
        var description: String { "seed \(seed) page \(pageSize) memory \(memory)" }
    }

    /// Long sorted runs into few leaves, with repeats of one key in a batch, overflow values,
    /// splits and compaction in the middle, spills (small transaction memory), savepoints,
    /// every read path triggering the application, then commit or abort, reopen and check.
    @Test(arguments: [
        Round(seed: 1, pageSize: 4096, memory: 32 << 20),
        Round(seed: 2, pageSize: 4096, memory: 256 << 10),
        Round(seed: 3, pageSize: 8192, memory: 256 << 10),
        Round(seed: 4, pageSize: 4096, memory: 128 << 10),
    ])
    func crowdedRunsReadAsIfWrittenAtOnce(_ round: Round) throws {
        var rng = SplitMix(seed: round.seed)
        let keys = Self.crowdedKeys(&rng)
        let path = temporaryPath("deferredhunt-\(round.seed)")
        defer { removeStoreFiles(path) }
        var options = StoreOptions(pageSize: round.pageSize, durability: .noSync)
        options.transactionMemory = round.memory
        var store: Store? = try Store(path: path, options: options)
        var committed: [[UInt8]: [UInt8]] = [:]
        var failures = 0
        func fail(_ message: String) {
            failures += 1
            if failures <= 10 { Issue.record(Comment(rawValue: "\(round): \(message)")) }
        }
        func compare(_ tree: WriteTree, _ model: [[UInt8]: [UInt8]], _ what: String) throws {
            var seen: [([UInt8], [UInt8])] = []
            try tree.forEach { k, v in
                seen.append((Array(k), Array(v)))
                return true
            }
            let expected = model.keys.sorted(by: keyLess)
            if seen.map(\.0) != expected {
                fail("\(what): keys \(seen.count) vs \(expected.count) expected")
            } else if !seen.allSatisfy({ model[$0.0] == $0.1 }) {
                fail("\(what): values differ")
            }
            if tree.count != model.count { fail("\(what): count \(tree.count), expected \(model.count)") }
        }
        for t in 0..<10 {
            var model = committed
            let abort = rng.percent(20)
            do {
                try #require(store).write { txn in
                    let tree = try txn.createTree("t")
                    func batch(_ model: inout [[UInt8]: [UInt8]], depth: Int) throws {
                        // A burst of deferred writes, keys drawn from a narrow window of the sorted
                        // pool (so most land in one leaf), one key often several times.
                        let sorted = keys.sorted(by: keyLess)
                        let start = rng.below(sorted.count)
                        let width = 1 + rng.below(60)
                        for _ in 0..<(1 + rng.below(400)) {
                            let key = sorted[min(sorted.count - 1, start + rng.below(width))]
                            if rng.percent(20) {
                                try key.withUnsafeBytes { try tree.deleteLater($0) }
                                model[key] = nil
                            } else {
                                let v = Self.value(&rng, pageSize: round.pageSize)
                                try key.withUnsafeBytes { k in try v.withUnsafeBytes { try tree.putLater(k, $0) } }
                                model[key] = v
                            }
                        }
                        // Then one read path applies them.
                        let probe = sorted[rng.below(sorted.count)]
                        switch rng.below(9) {
                        case 0:
                            if try tree.get(probe) != model[probe] { fail("txn \(t): get") }
                        case 1:
                            let cursor = try tree.cursor()
                            let has = try cursor.first()
                            let first = model.keys.min(by: keyLess)
                            if (has ? Array(cursor.key) : nil) != first { fail("txn \(t): first") }
                        case 2:
                            let cursor = try tree.cursor()
                            let has = try cursor.last()
                            let last = model.keys.max(by: keyLess)
                            if (has ? Array(cursor.key) : nil) != last { fail("txn \(t): last") }
                        case 3:
                            let n = try tree.count(from: probe, to: nil)
                            let expected = model.keys.filter { !keyLess($0, probe) }.count
                            if n != expected { fail("txn \(t): count from probe \(n) vs \(expected)") }
                        case 4:
                            var seen: [[UInt8]] = []
                            try tree.forEach(to: probe, reverse: true) { k, _ in
                                seen.append(Array(k))
                                return seen.count < 30
                            }
                            let expected = Array(model.keys.filter { keyLess($0, probe) }.sorted(by: keyLess).reversed().prefix(30))
                            if seen != expected { fail("txn \(t): reverse forEach below probe") }
                        case 5 where depth < 2:
                            var inner = model
                            let rollBack = rng.percent(50)
                            do {
                                try txn.savepoint {
                                    for _ in 0..<(1 + rng.below(3)) { try batch(&inner, depth: depth + 1) }
                                    if rollBack { throw CancellationError() }
                                }
                                model = inner
                            } catch is CancellationError {}
                        case 6:
                            let v = Self.value(&rng, pageSize: round.pageSize)
                            let isNew = try tree.put(probe, v)
                            if isNew != (model[probe] == nil) { fail("txn \(t): put's answer") }
                            model[probe] = v
                        case 7:
                            let existed = try tree.delete(probe)
                            if existed != (model[probe] != nil) { fail("txn \(t): delete's answer") }
                            model[probe] = nil
                        default:
                            break  // left deferred: the next read or the commit applies them
                        }
                    }
                    for _ in 0..<(3 + rng.below(8)) {
                        try batch(&model, depth: 0)
                        if rng.percent(30) { try compare(tree, model, "txn \(t) inside") }
                    }
                    if abort { throw CancellationError() }
                }
                committed = model
            } catch is CancellationError {
                #expect(abort)
            }
            if rng.percent(40) {
                store = nil
                store = try Store(path: path, options: options)
            }
            let contents = try #require(store).read { txn in try txn.tree("t").map(allEntries) ?? [] }
            if contents.map(\.0) != committed.keys.sorted(by: keyLess) || !contents.allSatisfy({ committed[$0.0] == $0.1 }) {
                fail("after txn \(t): contents differ from the model")
            }
            let count = try #require(store).read { txn in try txn.tree("t")?.count ?? 0 }
            if count != committed.count { fail("after txn \(t): count \(count) vs \(committed.count)") }
        }
        let report = try #require(store).check()
        #expect(report.isOK, "\(round): \(report)")
        #expect(failures == 0, "\(round): \(failures) failures")
    }

    /// One key written many times in one batch, among its neighbours in one leaf: put, put,
    /// delete, put (and the reverse shapes), with the last write deciding.
    @Test func manyWritesToOneKeyInOneBatch() throws {
        let store = try Store.inMemory(options: StoreOptions(pageSize: 4096, durability: .noSync))
        var model: [[UInt8]: [UInt8]] = [:]
        try store.write { txn in
            let tree = try txn.createTree("t")
            for i in 0..<300 {
                let key = Array("k".utf8) + bigEndianKey(UInt64(i * 2))
                try tree.put(key, [UInt8(i & 0xFF)])
                model[key] = [UInt8(i & 0xFF)]
            }
        }
        let shapes: [[Int?]] = [[1, 2, nil, 3], [nil, 1], [1, nil], [nil, nil, 4], [5, 6, 7, 8, 9], [nil, 1, nil]]
        try store.write { txn in
            let tree = try #require(try txn.tree("t"))
            for i in 0..<600 {
                let key = Array("k".utf8) + bigEndianKey(UInt64(i))
                let shape = shapes[i % shapes.count]
                for write in shape {
                    if let write {
                        let v = [UInt8](repeating: UInt8(write), count: (i * 7 + write) % 90)
                        try key.withUnsafeBytes { k in try v.withUnsafeBytes { try tree.putLater(k, $0) } }
                        model[key] = v
                    } else {
                        try key.withUnsafeBytes { try tree.deleteLater($0) }
                        model[key] = nil
                    }
                }
            }
            var seen: [[UInt8]: [UInt8]] = [:]
            try tree.forEach { k, v in
                seen[Array(k)] = Array(v)
                return true
            }
            #expect(seen == model)
            #expect(tree.count == model.count)
        }
        let after = try store.read { txn in try txn.tree("t").map(allEntries) ?? [] }
        #expect(after.map(\.0) == model.keys.sorted(by: keyLess))
        #expect(after.allSatisfy { model[$0.0] == $0.1 })
        #expect(try store.check().isOK)
    }

    /// Rewriting every key of a full tree with values of other sizes in one sorted run: the
    /// leaves fill with garbage and compact (or split) in the middle of the run, entries
    /// that were overflow become inline and back.
    @Test(arguments: [4096, 16384])
    func rewritingEveryKeyWithOtherSizes(pageSize: Int) throws {
        let path = temporaryPath("deferredhunt-rewrite")
        defer { removeStoreFiles(path) }
        var options = StoreOptions(pageSize: pageSize, durability: .noSync)
        options.transactionMemory = 256 << 10
        var model: [[UInt8]: [UInt8]] = [:]
        var rng = SplitMix(seed: 77)
        let keys = (0..<800).map { Array("same-first-24-bytes-here!".utf8) + bigEndianKey(UInt64($0)) }
        do {
            let store = try Store(path: path, options: options)
            for pass in 0..<6 {
                try store.write { txn in
                    let tree = try txn.createTree("t")
                    for (i, key) in keys.enumerated() where (i + pass) % 3 != 0 {
                        let size = pass % 2 == 0 ? 10 + (i % 7) * 60 : (i % 11 == 0 ? pageSize + 100 : 5 + (i % 5))
                        let v = rng.byteArray(size)
                        try key.withUnsafeBytes { k in try v.withUnsafeBytes { try tree.putLater(k, $0) } }
                        model[key] = v
                        if i % 13 == pass {
                            try key.withUnsafeBytes { try tree.deleteLater($0) }
                            model[key] = nil
                        }
                    }
                }
                let entries = try store.read { txn in try txn.tree("t").map(allEntries) ?? [] }
                #expect(entries.map(\.0) == model.keys.sorted(by: keyLess), "pass \(pass)")
                #expect(entries.allSatisfy { model[$0.0] == $0.1 }, "pass \(pass)")
            }
            #expect(try store.check().isOK)
        }
        let reopened = try Store(path: path, options: options)
        let entries = try reopened.read { txn in try txn.tree("t").map(allEntries) ?? [] }
        #expect(entries.count == model.count)
        #expect(try reopened.check().isOK)
    }
}

extension DeferredHuntTests {
    /// Keys of the largest size a page takes (a handful per leaf), sharing their first 24 bytes
    /// and differing only at the end, with values at and past the inline limit: a split every
    /// few puts of the run.
    @Test(arguments: [4096, 8192])
    func longestKeysInSortedRuns(pageSize: Int) throws {
        let store = try Store.inMemory(options: StoreOptions(pageSize: pageSize, durability: .noSync))
        var model: [[UInt8]: [UInt8]] = [:]
        var rng = SplitMix(seed: UInt64(pageSize))
        for pass in 0..<4 {
            try store.write { txn in
                let tree = try txn.createTree("t")
                let maxKey = txn.maxKeySize
                let inline = Limits.maxInlineEntry(pageSize: pageSize)
                for _ in 0..<300 {
                    let n = rng.below(120)
                    let length = [maxKey, maxKey - 1, 25, 24, 23][n % 5]
                    var key = [UInt8](repeating: 0x41, count: length)
                    key[length - 1] = UInt8(n)
                    if length > 2 { key[length - 2] = UInt8(n / 7) }
                    if rng.percent(15) {
                        try key.withUnsafeBytes { try tree.deleteLater($0) }
                        model[key] = nil
                    } else {
                        let size = [0, inline - length - 8, inline - length - 4, inline - length, inline, pageSize * 2][rng.below(6)]
                        let v = rng.byteArray(max(0, size))
                        try key.withUnsafeBytes { k in try v.withUnsafeBytes { try tree.putLater(k, $0) } }
                        model[key] = v
                    }
                }
            }
            let entries = try store.read { txn in try txn.tree("t").map(allEntries) ?? [] }
            #expect(entries.map(\.0) == model.keys.sorted(by: keyLess), "pass \(pass)")
            #expect(entries.allSatisfy { model[$0.0] == $0.1 }, "pass \(pass)")
        }
        #expect(try store.check().isOK)
    }
}
