import Testing
@testable import StrataStorage
import Foundation

/// Findings of the run-allocator hunt (see RunsHuntTests.swift), each failing before its fix.
@Suite struct RunsHuntFindingsTests {
    /// A transaction that overwrote one 5-page value 200 times left a file of ~1,000 pages for 5
    /// live ones: `WriteTransaction.allocate(_:)` (BTreeWrite.swift) took a run only from the
    /// committed free list or the end of the file, never from `spare`, the pages this transaction
    /// wrote and freed again (each overwrite frees the previous run there). As `allocate` says
    /// ("this transaction's own freed pages first"), and as single-page values already did (the
    /// second half), a run written and freed in the transaction is reused by the next run of that
    /// length, so the file stays near its live size.
    @Test func runsFreedInTheSameTransactionAreReused() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = nil
        let store = try Store(path: path, options: options)
        let pageSize = try store.stats().pageSize
        var rng = SplitMix(seed: 7)
        var last: [UInt8] = []
        try store.write { txn in
            let t = try txn.createTree("t")
            for _ in 0..<200 {
                last = rng.byteArray(5 * pageSize - 100)
                try t.put([1], last)
            }
        }
        #expect(try store.read { try $0.tree("t")?.get([1]) } == last)
        let runs = try store.stats()
        #expect(runs.pageCount < 60, "200 overwrites of one 5-page value in one transaction: \(runs.pageCount) pages")

        // Contrast: single overflow pages are reused from `spare` (passes).
        let path2 = temporaryPath("singles")
        defer { removeStoreFiles(path2) }
        let store2 = try Store(path: path2, options: options)
        try store2.write { txn in
            let t = try txn.createTree("t")
            for _ in 0..<200 { try t.put([1], rng.byteArray(pageSize - 100)) }
        }
        let singles = try store2.stats()
        #expect(singles.pageCount < 60, "200 overwrites of one 1-page value: \(singles.pageCount) pages")
    }
}
