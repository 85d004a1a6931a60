// Linux only: where fcntl locks are classic (Apple platforms), a lock this process holds is not
// one that another descriptor of it can see, so the test could not ask.
#if os(Linux)
import Foundation
import Synchronization
import Testing

@testable import StrataStorage

/// A page file that notes, at each map, whether a writer in another process would find the shrink
/// byte locked (asked through a descriptor of its own, as that writer's would be), and which maps
/// were undone again.
private final class CutWatchingFile: ForwardingFile {
    let inner: any FileIO
    private let other: PosixFile
    let maps = Mutex<[(address: UInt, lockedForOthers: Bool?, unmapped: Bool)]>([])

    init(_ inner: any FileIO, other: PosixFile) {
        self.inner = inner
        self.other = other
    }

    func map(length: Int, writable: Bool) throws -> UnsafeMutableRawPointer {
        let address = try inner.map(length: length, writable: writable)
        let locked = other.isLockedByOthers(offset: ShrinkLock.offset, length: 1)
        maps.withLock { $0.append((UInt(bitPattern: address), locked, false)) }
        return address
    }
    func unmap(_ address: UnsafeMutableRawPointer, length: Int) {
        maps.withLock { maps in
            if let i = maps.lastIndex(where: { $0.address == UInt(bitPattern: address) && !$0.unmapped }) { maps[i].unmapped = true }
        }
        inner.unmap(address, length: length)
    }
    func isLockedByOthers(offset: Int64, length: Int64) -> Bool? { inner.isLockedByOthers(offset: offset, length: length) }
}

/// Hands the wrapper made inside `Store.init` back to the test.
private final class WrapperBox: Sendable {
    let file = Mutex<CutWatchingFile?>(nil)
}

struct ReadOnlyLogCheckTests {
    /// A read-only opening with no read-write process alive checks that the page file holds what
    /// the commit log made durable (`LogReplay.checkApplied`), by mapping the file and reading it.
    /// It did so without holding cuts off: a read-write opening beginning meanwhile could cut the
    /// file's end under that map (SIGBUS; carried in the notes of 2026-12-06). Every map the
    /// check makes is now under the shared lock of the shrink byte, as a snapshot's reads are.
    @Test func theLogCheckOfAReadOnlyOpeningHoldsCutsOff() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        do {
            let store = try Store(path: path)
            for round in 0..<6 {
                try store.write { txn in
                    let tree = try txn.tree("t") ?? txn.createTree("t")
                    for k in 0..<50 { try tree.put([UInt8(round), UInt8(k)], [UInt8](repeating: UInt8(k), count: 300)) }
                }
            }
            // A `.noSync` commit after the last frame: closing then leaves the log in place.
            _ = try store.write(durability: .noSync) { txn in try txn.tree("t")?.put([99], [99]) }
            store.close()
        }
        try #require(FileManager.default.fileExists(atPath: CommitLog.path(for: path)), "no commit log left to check")
        let other = try PosixFile(path: path, mode: .readOnly)
        let box = WrapperBox()
        let store = try Store(path: path, options: StoreOptions(readOnly: true)) { inner in
            let file = CutWatchingFile(inner, other: other)
            box.file.withLock { $0 = file }
            return file
        }
        defer { store.close() }
        #expect(try store.read { try $0.tree("t")?.get([99]) } == [99])
        let file = try #require(box.file.withLock { $0 })
        // The maps undone before the opening returned are the check's (the store's own map lives on).
        let checks = file.maps.withLock { $0 }.filter(\.unmapped)
        try #require(!checks.isEmpty, "the opening made no check of the log")
        guard let asked = checks.first?.lockedForOthers else { return }  // no open file description locks here
        #expect(asked, "the check mapped the page file while a writer elsewhere could cut it")
        #expect(checks.allSatisfy { $0.lockedForOthers == true })
        // And none is left behind.
        #expect(other.isLockedByOthers(offset: ShrinkLock.offset, length: 1) == false)
    }
}
#endif
