import Foundation
import Testing

@testable import StrataStorage

#if canImport(Glibc)
import Glibc
#endif

/// A reader slot whose owner is no process here (`kill` fails: another PID namespace, as in a
/// container sharing the volume) but holds its pid's byte in the lock file is live: its
/// snapshot's pages must not be reused (review of 2026-12-06: the slot was cleared). Once the byte
/// is free the slot is cleared.
@Suite struct ReaderNamespaceTests {
    @Test func aSlotWhoseOwnerHoldsItsPidByteIsLiveThoughNoSuchProcessIsHere() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path)
        _ = try store.write { txn in try txn.createTree("t").put([1], [1]) }
        // A pid no process here has.
        let foreign = try #require((4_000_000..<4_190_000).lazy.map { Int32($0) }.first { kill($0, 0) == -1 && errno == ESRCH })
        let other = try #require(try PosixFile.openExisting(LockFileName.path(for: path), mode: .readWrite))
        #expect(try other.lock(offset: LockLayout.pidByte(UInt64(foreign)), length: 1, exclusive: false, wait: false))
        let readers = store.env.readers
        let slot = try readers.acquire()
        readers.set(slot, txnid: 1)
        // The slot as that process would have it.
        var owner = UInt64(foreign).littleEndian
        try withUnsafeBytes(of: &owner) { bytes in
            try other.write(bytes, at: UInt64(LockLayout.slotsOffset + slot * LockLayout.slotStride + LockLayout.slotOwner))
        }
        #expect(readers.liveReaders().contains { $0.slot == slot && $0.pid == UInt64(foreign) && $0.txnid == 1 })
        other.unlock(offset: LockLayout.pidByte(UInt64(foreign)), length: 1)
        #expect(!readers.liveReaders().contains { $0.slot == slot })
    }
}
