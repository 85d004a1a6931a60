import Testing
@testable import StrataStorage
import Foundation

/// Overflow runs taken from a fragmented free list: the allocator keeps a bitmap of the reusable
/// pages and, per run length, where the last search found the lowest run, in step with every
/// other allocation and with savepoints' rollbacks. A page handed out twice would show as one
/// value overwriting another; a page the bitmap forgot, as a file that stops reusing its holes.
@Suite struct RunAllocationTests {
    /// Values of one to six pages over a free list of holes of every length, with single-page
    /// writes, deletes (freeing runs inside the transaction), savepoints kept and rolled back,
    /// snapshots held (their pages stay out of reach) and compactions between: every value stays
    /// exact, and `check` finds no page used twice.
    @Test func runsFromFragmentedFreeListsMatchModel() throws {
        let seed: UInt64 = 0x2A11_0C47
        let rounds = TestEnv.int("STRATA_RUN_ALLOCATION_ROUNDS", default: 24)
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: seed)
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        let pageSize = try store.stats().pageSize
        var model: [[UInt8]: [UInt8]] = [:]

        func pages(_ count: Int) -> Int { count * pageSize - rng.within(64...pageSize / 2) }
        func value() -> [UInt8] {
            rng.percent(20) ? rng.byteArray(rng.within(1...40)) : rng.byteArray(pages(rng.within(1...6)))
        }
        struct Rollback: Error {}

        // Holes of every length: values of one to six pages, every other one deleted.
        try store.write { txn in
            let tree = try txn.createTree("blobs")
            for k in 0..<600 {
                let v = rng.byteArray(pages(1 + k % 6))
                try tree.put(bigEndianKey(UInt64(k)), v)
                model[bigEndianKey(UInt64(k))] = v
            }
        }
        try store.write { txn in
            let tree = try txn.createTree("blobs")
            for k in stride(from: 0, to: 600, by: 2) where rng.percent(80) {
                _ = try tree.delete(bigEndianKey(UInt64(k)))
                model[bigEndianKey(UInt64(k))] = nil
            }
        }

        var held: ReadTransaction?
        var heldContents: [[UInt8]: [UInt8]]?
        for round in 0..<rounds {
            if rng.percent(25) {
                held = try store.beginRead()
                heldContents = model
            } else if rng.percent(30) {
                held = nil
                heldContents = nil
            }
            var next = model
            try store.write { txn in
                let tree = try txn.createTree("blobs")
                func operate(_ state: inout [[UInt8]: [UInt8]]) throws {
                    let key = bigEndianKey(UInt64(rng.below(900)))
                    if rng.percent(25) {
                        _ = try tree.delete(key)
                        state[key] = nil
                    } else {
                        let v = value()
                        try tree.put(key, v)
                        state[key] = v
                    }
                }
                for _ in 0..<rng.within(20...80) {
                    if rng.percent(10) {
                        var inner = next
                        let fails = rng.percent(50)
                        do {
                            try txn.savepoint {
                                for _ in 0..<rng.within(1...15) { try operate(&inner) }
                                if fails { throw Rollback() }
                            }
                            next = inner
                        } catch is Rollback {}
                    } else {
                        try operate(&next)
                    }
                }
            }
            model = next
            let seen = try store.read { try snapshotContents($0) }["blobs"] ?? [:]
            if seen != model {
                let key = Set(seen.keys).union(model.keys).first { seen[$0] != model[$0] }
                Issue.record("seed \(seed): round \(round): the tree differs from the model at key \(key.map { "\($0)" } ?? "-")")
                return
            }
            if let held, let heldContents {
                let old = try snapshotContents(held)["blobs"] ?? [:]
                #expect(old == heldContents, "seed \(seed): round \(round): a held snapshot's values changed")
            }
            if round % 8 == 7 {
                held = nil
                heldContents = nil
                _ = try store.compact()
                let compacted = try store.read { try snapshotContents($0) }["blobs"] ?? [:]
                #expect(compacted == model, "seed \(seed): round \(round): compaction changed a value")
            }
            let report = try store.check()
            #expect(report.isOK, "seed \(seed): round \(round): \(report.problems.prefix(3))")
        }
        // The holes were reused: the file holds little more than its values and their trees.
        held = nil
        _ = try store.compact()
        let live = model.values.reduce(0) { $0 + ($1.count + pageSize - 1) / pageSize }
        let pageCount = try store.stats().pageCount
        #expect(pageCount < UInt64(live) + UInt64(live) / 4 + 64, "seed \(seed): \(pageCount) pages for \(live) pages of values")
    }
}
