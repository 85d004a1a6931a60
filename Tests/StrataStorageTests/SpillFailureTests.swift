import Foundation
import Testing

@testable import StrataStorage

/// A spill that fails after a write: the write is in the tree, yet reported failed. Caught, it
/// must not be committed (it was, before the review of 2026-12-06).
@Suite struct SpillFailureTests {
    @Test func aWriteWhoseSpillFailedIsNeverCommitted() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .full)
        options.transactionMemory = 64 * 4096
        let (store, faulty) = try openFaulty(path, options)
        _ = try store.write { txn in try txn.createTree("t").put([0], [0]) }
        var failedAt: Int?
        #expect(throws: StorageError.self) {
            try store.write { txn in
                let tree = try txn.createTree("t")
                faulty.failWrite(in: 1)
                for key in 1..<UInt64(5000) where failedAt == nil {
                    do {
                        try tree.put(bigEndianKey(key), [UInt8](repeating: 1, count: 300))
                    } catch {
                        failedAt = Int(key)
                    }
                }
            }
        }
        faulty.clearFaults()
        #expect(failedAt != nil, "no write failed")
        #expect(try store.read { txn in try #require(try txn.tree("t")).count } == 1)
        #expect(try store.check().isOK)
    }
}
