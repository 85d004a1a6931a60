import Testing
@testable import StrataStorage
import Foundation

/// A page written to the file holds only what the database put there: the unused space of a page
/// made new (a split's right half, a new root, a new tree's first leaf) is zeros, not whatever the
/// process's heap held in the buffer before. Such bytes (another database's records, a network
/// buffer, a password) would otherwise go to disk and into every copy of the file, as LMDB's
/// `MDB_NOMEMINIT` documents for the option that allows it.
@Suite struct PageBytesTests {
    static let marker = Array("HEAP-JUNK-OF-THE-PROCESS".utf8)

    /// Fills and frees page-sized, page-aligned buffers on this thread, as the heap would hold
    /// them after other work of the app: the transaction's new pages are then likely to reuse them.
    static func dirtyTheHeap(buffers: Int, pageSize: Int) {
        var held: [UnsafeMutableRawPointer] = []
        for _ in 0..<buffers {
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: pageSize, alignment: 4096)
            var at = 0
            while at + marker.count <= pageSize {
                marker.withUnsafeBytes { (buffer + at).copyMemory(from: $0.baseAddress!, byteCount: marker.count) }
                at += marker.count
            }
            held.append(buffer)
        }
        for buffer in held { buffer.deallocate() }
    }

    @Test(arguments: [4096, 16384])
    func newPagesCarryNoHeapBytes(pageSize: Int) throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(pageSize: pageSize)
        options.compaction.idleDelay = nil
        let store = try Store(path: path, options: options)
        var rng = SplitMix(seed: 11)
        for round in 0..<6 {
            Self.dirtyTheHeap(buffers: 3000, pageSize: pageSize)
            try store.write { txn in
                // New trees (a first leaf each, and catalog splits), then splits of leaves and
                // branches under random keys, and a large value's overflow run.
                for t in 0..<40 { _ = try txn.createTree("t\(round)-\(t)").put([UInt8(t)], [1]) }
                let tree = try txn.createTree("many")
                for _ in 0..<3000 {
                    let key = (0..<(4 + rng.below(40))).map { _ in UInt8(rng.below(256)) }
                    try tree.put(key, [UInt8](repeating: UInt8(round), count: rng.below(60)))
                }
                try tree.put([0xFF, UInt8(round)], [UInt8](repeating: 7, count: pageSize * 2 + 123))
            }
        }
        store.close()
        let bytes = try readFileBytes(path)
        let found = bytes.firstRange(of: Self.marker).map { $0.lowerBound }
        #expect(found == nil, "heap bytes at offset \(found ?? 0) (page \((found ?? 0) / pageSize)) of the file")
    }
}
