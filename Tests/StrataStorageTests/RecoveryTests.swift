import Testing
import Foundation
@testable import StrataStorage

/// Recovery's check of the newest commit's own pages.
struct RecoveryTests {
    /// A page that carries the newest commit's transaction id and a checksum valid for its own
    /// bytes, but is not the page that commit wrote (another attempt at the same id left it, and
    /// the real one was lost): the commit record's checksums catch it and open falls back.
    @Test func pageFromAnotherAttemptAtTheSameTransactionIsRejected() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var newest: UInt64 = 0
        var victim: UInt64 = 0
        do {
            let store = try Store(path: path)
            _ = try store.write { try $0.createTree("t").put(Array("a".utf8), Array("first".utf8)) }
            _ = try store.write { try $0.tree("t")!.put(Array("a".utf8), Array("second".utf8)) }
            newest = try store.read { $0.txnid }
            // The leaf of tree t in the newest commit.
            victim = try store.read { txn in
                let catalog = try txn.pages.get(root: txn.meta.catalog.root, key: Array("t".utf8).withUnsafeBytes { $0 })
                return try TreeInfo.decode(try #require(catalog), name: "t").root
            }
        }
        let pageSize = Limits.defaultPageSize
        // Rewrite the leaf's value bytes, then reseal it: same page number, same txnid, valid checksum.
        var page = try readFileRange(path, at: Int(victim) * pageSize, count: pageSize)
        let text = Array("second".utf8)
        let at = try #require((0...(pageSize - text.count)).first { Array(page[$0..<($0 + text.count)]) == text })
        page.replaceSubrange(at..<(at + text.count), with: Array("SECOND".utf8))
        page.withUnsafeMutableBytes { p in
            p.baseAddress!.setU64(PageHeader.checksum, pageChecksum(UnsafeRawPointer(p.baseAddress!), byteCount: pageSize))
        }
        try patchFile(path, at: Int(victim) * pageSize, page)
        let store = try Store(path: path)
        // Open fell back to the commit before: the first value, not the forged one.
        #expect(try store.read { $0.txnid } == newest - 1)
        #expect(try store.read { try $0.tree("t")?.get(Array("a".utf8)) } == Array("first".utf8))
    }
}
