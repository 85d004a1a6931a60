import Testing
@testable import StrataStorage
import Foundation

/// Found by a hunt of the beside writes (2026-12-05): `putBesideDeferred` counted a key against
/// the deferred writes' memory limit only the first time it was kept back, with the size of that
/// first value, so a key's later, larger values were held beyond the limit. Expected
/// (`DeferredWrites.limit`): "Memory the deferred writes of a transaction may hold (all trees
/// together): past it they are all applied, so that a transaction's memory stays bounded". Here
/// 120 beside keys kept with one byte, then with 96 KiB each, hold ~11 MiB > 8 MiB; the tree's
/// `count`, which lags only while writes are kept back, shows whether they were applied.
@Suite struct BesideHuntFindingsTests {
    @Test func growingBesideValuesCountAgainstTheLimit() throws {
        let store = try Store.inMemory(options: StoreOptions(pageSize: 4096, durability: .noSync))
        try store.write { txn in
            let tree = try txn.createTree("t")
            let big = [UInt8](repeating: 7, count: 96 << 10)
            let one: [UInt8] = [1]
            for i in 0..<120 {
                let key = [0xFE] + bigEndianKey(UInt64(i))
                try key.withUnsafeBytes { k in try one.withUnsafeBytes { try tree.putBesideDeferred(k, $0) } }
            }
            for i in 0..<120 {
                let key = [0xFE] + bigEndianKey(UInt64(i))
                try key.withUnsafeBytes { k in try big.withUnsafeBytes { try tree.putBesideDeferred(k, $0) } }
            }
            // 120 × 96 KiB = 11.25 MiB kept back, past the 8 MiB limit: applied by now.
            #expect(120 * big.count > DeferredWrites.limit)
            #expect(tree.count == 120, "the kept-back values hold \(120 * big.count) bytes and were not applied")
        }
    }
}
