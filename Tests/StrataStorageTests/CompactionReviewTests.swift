import Foundation
import Testing

@testable import StrataStorage

/// Findings of the review of 2026-12-06 in giving the file's free end back.
@Suite struct CompactionReviewTests {
    /// A cut always shrinks the file, and leaves it where the next commit does not cut again. Past
    /// 512 MiB of pages an eighth was more than the two growth steps that allow a cut: the cut
    /// grew the file (a sparse hole), and then came again at every commit.
    @Test(arguments: [UInt64(1) << 20, 100 << 20, 600 << 20, 2 << 30, 40 << 30])
    func aCutShrinksTheFileAndLastsUntilItGrows(needed: UInt64) {
        let pageSize = 4096
        let step = WriteTransaction.growthStep(needed: needed)
        for toFit in [false, true] {
            for slack: UInt64 in [0, step, 2 * step, 2 * step + 4096, 3 * step, needed / 8 + 4096, needed / 4, needed] {
                let fileSize = needed + slack
                guard let target = WriteTransaction.cutTarget(needed: needed, fileSize: fileSize, pageSize: pageSize, toFit: toFit) else { continue }
                #expect(target < fileSize, "needed \(needed), file \(fileSize), toFit \(toFit): cut to \(target)")
                #expect(target >= needed)
                #expect(target % UInt64(pageSize) == 0)
                // The next commit, with the same pages, leaves the file as it is.
                #expect(
                    WriteTransaction.cutTarget(needed: needed, fileSize: target, pageSize: pageSize, toFit: false) == nil,
                    "needed \(needed): cut to \(target), and again")
            }
            // Far past the pages the file is always cut.
            #expect(WriteTransaction.cutTarget(needed: needed, fileSize: needed * 2 + 3 * step, pageSize: pageSize, toFit: toFit) != nil)
        }
    }

    /// An in-memory store (no commit log) gives back its free end too.
    @Test func anInMemoryStoreShrinks() throws {
        let store = try Store.inMemory()
        try store.write { txn in
            let tree = try txn.createTree("t")
            for key in 0..<UInt64(20_000) { try tree.put(bigEndianKey(key), [UInt8](repeating: 7, count: 200)) }
        }
        let grown = try store.stats().fileSize
        _ = try store.write { txn in try txn.dropTree("t") }
        for key in 0..<UInt64(5) { _ = try store.write { txn in try txn.createTree("s").put(bigEndianKey(key), [1]) } }
        let after = try store.stats().fileSize
        #expect(after < grown / 2, "\(grown) bytes, then \(after) after the tree was dropped")
    }
}
