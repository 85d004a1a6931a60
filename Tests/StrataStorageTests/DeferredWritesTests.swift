import Testing
@testable import StrataStorage
import Foundation

/// Deferred writes (DeferredWrites.swift) against a dictionary: every read, ordinary write,
/// savepoint, rollback, commit and abort must see exactly what writing at once would have left.
@Suite struct DeferredWritesTests {
    /// Keys that share long prefixes (the sort compares 24 bytes, then whole keys), keys
    /// that are prefixes of each other, zero bytes, and one key no deferred write ever names.
    static func keyPool(_ rng: inout SplitMix) -> [[UInt8]] {
        var pool: [[UInt8]] = []
        for b: UInt8 in [0, 1, 0x7F, 0x80, 0xFF] { pool.append([b]) }
        for length in [2, 7, 8, 9, 15, 16, 17, 23, 24, 25, 40] {
            let stem = [UInt8](repeating: 0x61, count: length)
            pool.append(stem)
            pool.append(stem + [0])
            pool.append(stem + [0, 0])
            pool.append(stem + [0xFF])
        }
        for _ in 0..<300 {
            // A "word" and a big-endian number after it, as index entries are.
            let word = [UInt8](repeating: UInt8(0x61 + rng.below(6)), count: 1 + rng.below(10)) + [0]
            pool.append(word + bigEndianKey(UInt64(rng.below(5000))))
        }
        return pool
    }

    static let besideKey: [UInt8] = [0xFE, 0xFE, 0xFE]

    struct Round {
        var seed: UInt64
        var pageSize: Int
        var memory: Int
    }

    @Test(arguments: [
        Round(seed: 20_261_203, pageSize: 4096, memory: 32 << 20),
        Round(seed: 7, pageSize: 4096, memory: 256 << 10),  // spills while applying
        Round(seed: 99, pageSize: 8192, memory: 256 << 10),
    ])
    func deferredWritesReadAsIfWrittenAtOnce(_ round: Round) throws {
        let transactions = TestEnv.int("STRATA_DEFERRED_TXNS", default: 12)
        let opsPerTransaction = TestEnv.int("STRATA_DEFERRED_OPS", default: 1500)
        var rng = SplitMix(seed: round.seed)
        let pool = Self.keyPool(&rng)
        let path = temporaryPath("deferred-\(round.seed)")
        defer { removeStoreFiles(path) }
        var options = StoreOptions(pageSize: round.pageSize, durability: .noSync)
        options.transactionMemory = round.memory
        var store: Store? = try Store(path: path, options: options)
        var committed: [[UInt8]: [UInt8]] = [:]
        func value(_ rng: inout SplitMix) -> [UInt8] {
            // Mostly small; now and then past a page (an overflow run).
            rng.percent(3) ? rng.byteArray(round.pageSize + rng.below(300)) : rng.byteArray(rng.below(24))
        }
        for t in 0..<transactions {
            var model = committed
            let abort = rng.percent(15)
            do {
                try #require(store).write { txn in
                    let tree = try txn.createTree("t")
                    // Savepoints open here, each with the model as it was when it began.
                    func step(_ model: inout [[UInt8]: [UInt8]], depth: Int) throws {
                        let key = pool[rng.below(pool.count)]
                        switch rng.below(100) {
                        case 0..<40:
                            let v = value(&rng)
                            try key.withUnsafeBytes { k in try v.withUnsafeBytes { try tree.putLater(k, $0) } }
                            model[key] = v
                        case 40..<55:
                            try key.withUnsafeBytes { try tree.deleteLater($0) }
                            model[key] = nil
                        case 55..<62:
                            let v = value(&rng)
                            let isNew = try tree.put(key, v)
                            #expect(isNew == (model[key] == nil), "seed \(round.seed) txn \(t): put's answer")
                            model[key] = v
                        case 62..<67:
                            let existed = try tree.delete(key)
                            #expect(existed == (model[key] != nil), "seed \(round.seed) txn \(t): delete's answer")
                            model[key] = nil
                        case 67..<77:
                            #expect(try tree.get(key) == model[key], "seed \(round.seed) txn \(t): get")
                        case 77..<82:
                            // The key no deferred write names, beside them.
                            let before = try Self.besideKey.withUnsafeBytes { try tree.getBesideDeferred($0) }
                            #expect(before == model[Self.besideKey], "seed \(round.seed) txn \(t): beside before a put")
                            let v = value(&rng)
                            try Self.besideKey.withUnsafeBytes { k in try v.withUnsafeBytes { try tree.putBesideDeferred(k, $0) } }
                            model[Self.besideKey] = v
                            let read = try Self.besideKey.withUnsafeBytes { try tree.getBesideDeferred($0) }
                            #expect(read == v, "seed \(round.seed) txn \(t): beside")
                        case 82..<87:
                            // A range read from a random key.
                            let cursor = try tree.cursor()
                            var more = try cursor.seek(key)
                            let expected = model.keys.filter { !keyLess($0, key) }.sorted(by: keyLess).prefix(20)
                            var seen: [[UInt8]] = []
                            while more && seen.count < 20 {
                                seen.append(Array(cursor.key))
                                #expect(Array(cursor.value) == model[Array(cursor.key)], "seed \(round.seed) txn \(t): cursor value")
                                more = try cursor.next()
                            }
                            #expect(seen == Array(expected), "seed \(round.seed) txn \(t): cursor keys from \(key)")
                        case 87..<90:
                            // A cursor positioned before a deferred write is invalidated by it.
                            let cursor = try tree.cursor()
                            if try cursor.first() {
                                try key.withUnsafeBytes { try tree.deleteLater($0) }
                                model[key] = nil
                                #expect(throws: StorageError.self) { try cursor.next() }
                                let first = try cursor.first()
                                #expect(first == !model.isEmpty)
                                if first { #expect(Array(cursor.key) == model.keys.min(by: keyLess)) }
                            }
                        case 90..<95 where depth < 3:
                            var inner = model
                            let rollBack = rng.percent(40)
                            do {
                                try txn.savepoint {
                                    for _ in 0..<rng.below(30) { try step(&inner, depth: depth + 1) }
                                    if rollBack { throw CancellationError() }
                                }
                                model = inner
                            } catch is CancellationError {
                                // Undone: the model stays as it was.
                            }
                        default:
                            #expect(tree.count >= 0)
                        }
                    }
                    for _ in 0..<opsPerTransaction { try step(&model, depth: 0) }
                    if abort { throw CancellationError() }
                }
                committed = model
            } catch is CancellationError {
                #expect(abort)
            }
            if rng.percent(30) {
                store = nil
                store = try Store(path: path, options: options)
            }
            let contents = try #require(store).read { txn in try txn.tree("t").map(allEntries) ?? [] }
            #expect(contents.map(\.0) == committed.keys.sorted(by: keyLess), "seed \(round.seed) after txn \(t): keys")
            #expect(contents.allSatisfy { committed[$0.0] == $0.1 }, "seed \(round.seed) after txn \(t): values")
            let count = try #require(store).read { txn in try txn.tree("t")?.count ?? 0 }
            #expect(count == committed.count, "seed \(round.seed) after txn \(t): count")
        }
        let report = try #require(store).check()
        #expect(report.isOK, "seed \(round.seed): \(report)")
    }

    /// One large batch (nothing reads the tree until the commit), so the writes go through the
    /// sort for many writes (a radix pass over the first eight bytes, then each run of equal ones):
    /// keys spread over the first byte, keys sharing their first eight bytes and differing later
    /// (or only in length, or by zero bytes), the same key put and deleted several times. With
    /// `prefix`, every key starts with that byte (as an index's keys share a type tag), so one byte
    /// position needs no pass and the passes are odd in number.
    @Test(arguments: [(11, nil), (12, nil), (13, 0x01), (14, 0x80)] as [(UInt64, UInt8?)])
    func aLargeBatchIsAppliedInKeyOrder(seed: UInt64, prefix: UInt8?) throws {
        var rng = SplitMix(seed: seed)
        var pool: [[UInt8]] = []
        for _ in 0..<3000 { pool.append((0..<(1 + rng.below(12))).map { _ in UInt8(rng.below(256)) }) }
        for _ in 0..<3000 {
            // Eight shared bytes, then a tail that sorts them (zero bytes and lengths included).
            pool.append([0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68] + (0..<rng.below(20)).map { _ in UInt8(rng.below(3)) })
        }
        for _ in 0..<1000 { pool.append([0x70, UInt8(rng.below(4))] + bigEndianKey(UInt64(rng.below(100)))) }
        if let prefix { pool = pool.map { [prefix] + $0 } }
        let store = try Store.inMemory(options: StoreOptions(durability: .noSync))
        var model: [[UInt8]: [UInt8]] = [:]
        try store.write { txn in
            let tree = try txn.createTree("t")
            for i in 0..<20_000 {
                let key = pool[rng.below(pool.count)]
                if rng.below(5) == 0 {
                    try key.withUnsafeBytes { try tree.deleteLater($0) }
                    model[key] = nil
                } else {
                    let value = bigEndianKey(UInt64(i))
                    try key.withUnsafeBytes { k in try value.withUnsafeBytes { try tree.putLater(k, $0) } }
                    model[key] = value
                }
            }
        }
        let entries = try store.read { txn in try txn.tree("t").map(allEntries) ?? [] }
        let expected = model.sorted { keyLess($0.key, $1.key) }
        #expect(entries.map(\.0) == expected.map(\.key), "seed \(seed): keys")
        #expect(entries.map(\.1) == expected.map(\.value), "seed \(seed): values")
        #expect(try store.check().isOK, "seed \(seed)")
    }

    @Test func aKeyOverTheLimitThrowsWhenDeferredAndTheTransactionGoesOn() throws {
        let store = try Store.inMemory(options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let tree = try txn.createTree("t")
            let long = [UInt8](repeating: 1, count: txn.maxKeySize + 1)
            let one: [UInt8] = [1], two: [UInt8] = [2], three: [UInt8] = [3]
            #expect(throws: StorageError.self) { try long.withUnsafeBytes { k in try one.withUnsafeBytes { try tree.putLater(k, $0) } } }
            #expect(throws: StorageError.self) { try [UInt8]().withUnsafeBytes { k in try one.withUnsafeBytes { try tree.putLater(k, $0) } } }
            try two.withUnsafeBytes { k in try three.withUnsafeBytes { try tree.putLater(k, $0) } }
        }
        let entries = try store.read { txn in try txn.tree("t").map(allEntries) ?? [] }
        #expect(entries.map(\.0) == [[2]] && entries.map(\.1) == [[3]])
    }

    @Test func droppingATreeDropsItsDeferredWrites() throws {
        let store = try Store.inMemory(options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let tree = try txn.createTree("t")
            let one: [UInt8] = [1], two: [UInt8] = [2]
            try one.withUnsafeBytes { k in try one.withUnsafeBytes { try tree.putLater(k, $0) } }
            #expect(try txn.dropTree("t"))
            let again = try txn.createTree("t")
            try two.withUnsafeBytes { k in try two.withUnsafeBytes { try again.putLater(k, $0) } }
        }
        let entries = try store.read { txn in try txn.tree("t").map(allEntries) ?? [] }
        #expect(entries.map(\.0) == [[2]])
    }
}
