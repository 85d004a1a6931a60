import Foundation
import Synchronization
import Testing

@testable import StrataStorage

/// A page file that records where it was written, and the syncs between.
private final class RecordingFile: ForwardingFile {
    let inner: any FileIO
    let events = Mutex<[(offset: UInt64, count: Int)?]>([])  // nil: a sync
    init(_ inner: any FileIO) { self.inner = inner }
    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        events.withLock { $0.append((offset, bytes.count)) }
        try inner.write(bytes, at: offset)
    }
    func write(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        events.withLock { $0.append((offset, buffers.reduce(0) { $0 + $1.count })) }
        try inner.write(buffers, at: offset)
    }
    func sync() throws {
        events.withLock { $0.append(nil) }
        try inner.sync()
    }
    func isLockedByOthers(offset: Int64, length: Int64) -> Bool? { inner.isLockedByOthers(offset: offset, length: length) }
}

/// Failed writeback across openings ("fsyncgate"): the kernel reports a failed writeback once
/// and leaves the pages clean, so a process that opens the file after the one that wrote them
/// (or after it reopened) must write the newest `.noSync` commit's pages again before its sync,
/// or a durable commit built on them could be acknowledged with them missing from the disk
/// (review of 2026-12-06).
@Suite struct SyncRecoveryReviewTests {
    @Test func anOpeningAloneWritesTheUnsyncedCommitsPagesAgainBeforeItsSync() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        do {
            var options = StoreOptions(durability: .full)
            options.compaction.idleDelay = nil
            let store = try Store(path: path, options: options)
            _ = try store.write { txn in
                let tree = try txn.createTree("t")
                for key in 0..<UInt64(3000) { try tree.put(bigEndianKey(key), [UInt8](repeating: 1, count: 100)) }
            }
            for round in 0..<3 {
                _ = try store.write(durability: .noSync) { txn in
                    let tree = try txn.createTree("t")
                    for key in stride(from: UInt64(round), to: 3000, by: 97) { try tree.put(bigEndianKey(key), [UInt8](repeating: 2, count: 100)) }
                }
            }
        }
        // The pages the newest commit's record lists (its own and the run's it carries).
        let pageSize = 4096
        let file = try #require(try PosixFile.openExisting(path, mode: .readOnly))
        let size = Int(try file.size())
        let map = try file.map(length: size, writable: false)
        defer { file.unmap(map, length: size) }
        let meta = try Recovery.choose(file: file, map: map, fileSize: UInt64(size), pageSize: pageSize)
        #expect(meta.unsynced)
        let listed = Set(try Recovery.commitRecord(meta, map: map, pageSize: pageSize).map(\.page))
        #expect(listed.count > 3)
        let recorder = Mutex<RecordingFile?>(nil)
        var options = StoreOptions()
        options.compaction.idleDelay = nil
        _ = try Store(path: path, options: options) { inner in
            if inner.path.hasSuffix("-log") { return inner }
            let file = RecordingFile(inner)
            recorder.withLock { $0 = file }
            return file
        }
        let events = try #require(recorder.withLock { $0 }).events.withLock { $0 }
        // Every listed page written before the opening's last sync (the one after the replay).
        let lastSync = try #require(events.lastIndex { $0 == nil })
        var written = Set<PageNo>()
        for case let event? in events[..<lastSync] {
            for page in (event.offset / UInt64(pageSize))..<((event.offset + UInt64(event.count)) / UInt64(pageSize)) { written.insert(page) }
        }
        #expect(listed.isSubset(of: written), "not written again: \(listed.subtracting(written).sorted())")
    }
}
