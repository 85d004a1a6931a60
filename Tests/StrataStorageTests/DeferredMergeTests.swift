import Foundation
import Testing

@testable import StrataStorage

/// A tree whose deferred writes a `DeferredMerge` applies (DeferredWrites.swift): the merge gets
/// every write once, sorted by key with writes to one key in arrival order, at the points deferred
/// writes are applied (a read of the tree, a savepoint's start, the commit, the memory limit), and
/// a rollback discards the writes kept back inside it. The merge here keeps a counter per key:
/// a put adds its value's first byte, a delete resets the key, so that order and completeness show
/// in the totals. The reference is a dictionary updated as each write is made.
@Suite struct DeferredMergeTests {
    /// Adds each put's first byte to the key's stored total (one byte, wrapping); a delete removes
    /// the key. Records each batch it was given.
    final class Adder: DeferredMerge {
        var batches: [[(key: [UInt8], value: [UInt8]?)]] = []

        func apply(_ writes: DeferredBatch, to tree: WriteTree) throws {
            var batch: [(key: [UInt8], value: [UInt8]?)] = []
            for i in 0..<writes.count {
                let key = Array(writes.key(i))
                let value = writes.value(i).map { Array($0) }
                batch.append((key, value))
                if let value {
                    let total = try tree.get(key)?.first ?? 0
                    try tree.put(key, [total &+ (value.first ?? 0)])
                } else {
                    try tree.delete(key)
                }
            }
            batches.append(batch)
        }
    }

    func apply(_ model: inout [[UInt8]: UInt8], _ key: [UInt8], _ value: [UInt8]?) {
        if let value { model[key] = (model[key] ?? 0) &+ (value.first ?? 0) } else { model[key] = nil }
    }

    func contents(_ tree: WriteTree) throws -> [[UInt8]: UInt8] {
        var all: [[UInt8]: UInt8] = [:]
        try tree.cursor().forEach(from: nil, to: nil, reverse: false) { key, value in
            all[Array(key)] = value.first
            return true
        }
        return all
    }

    @Test func mergedWritesArriveSortedOnceAndRollBackWithSavepoints() throws {
        let seed: UInt64 = 0x3E4E
        var rng = SplitMix(seed: seed)
        let path = temporaryPath("deferred-merge")
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        let adder = Adder()
        var committed: [[UInt8]: UInt8] = [:]
        for round in 0..<8 {
            var model = committed
            try store.write { txn in
                let tree = try txn.createTree("counts")
                func write(_ model: inout [[UInt8]: UInt8]) throws {
                    let key = [UInt8(rng.below(4)), UInt8(rng.below(40))]
                    if rng.below(6) == 0 {
                        try key.withUnsafeBytes { try tree.deleteLater($0, mergedBy: adder) }
                        apply(&model, key, nil)
                    } else {
                        let value = [UInt8(1 + rng.below(9))]
                        try key.withUnsafeBytes { k in try value.withUnsafeBytes { try tree.putLater(k, $0, mergedBy: adder) } }
                        apply(&model, key, value)
                    }
                }
                adder.batches = []
                for _ in 0..<200 { try write(&model) }
                // A savepoint's start applies them; a rollback drops those made inside.
                do {
                    try txn.savepoint {
                        var inside = model
                        for _ in 0..<50 { try write(&inside) }
                        #expect(try contents(tree) == inside, "seed \(seed) round \(round): a read inside the savepoint")
                        for _ in 0..<50 { try write(&inside) }
                        throw CancellationError()
                    }
                } catch is CancellationError {}
                #expect(try contents(tree) == model, "seed \(seed) round \(round): after the rollback")
                for _ in 0..<200 { try write(&model) }
                // Each batch the merge got is in key order, ties in arrival order (which the
                // totals check), and none is empty.
                for batch in adder.batches {
                    #expect(!batch.isEmpty)
                    #expect(
                        zip(batch, batch.dropFirst()).allSatisfy { !$1.key.lexicographicallyPrecedes($0.key) },
                        "seed \(seed) round \(round): a batch out of order")
                }
            }
            committed = model
            try store.read { txn in
                var stored: [[UInt8]: UInt8] = [:]
                try txn.tree("counts")?.cursor().forEach(from: nil, to: nil, reverse: false) { key, value in
                    stored[Array(key)] = value.first
                    return true
                }
                #expect(stored == committed, "seed \(seed) round \(round): after the commit")
            }
        }
    }
}
