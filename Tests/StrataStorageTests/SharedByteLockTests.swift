import Foundation
import Testing

@testable import StrataStorage

/// `SharedByteLock` holds its byte while any of this process's holders does: two reads that read
/// every page of a snapshot on two threads share the shrink lock, and the first to end must not
/// drop it under the other (the locks of one open file description do not nest).
struct SharedByteLockTests {
    #if os(Linux)
    @Test func theByteStaysLockedUntilTheLastHolderReleases() throws {
        let path = temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let file = try PosixFile(path: path, create: true)
        // Another open file description of the file: its open file description locks conflict
        // with `file`'s as another process's would.
        let other = try PosixFile(path: path, create: false)
        let lock = SharedByteLock(offset: ShrinkLock.offset)
        #expect(other.isLockedByOthers(offset: ShrinkLock.offset) == false)
        lock.take(file)
        lock.take(file)
        #expect(other.isLockedByOthers(offset: ShrinkLock.offset) == true)
        lock.release(file)
        #expect(other.isLockedByOthers(offset: ShrinkLock.offset) == true, "the first release dropped the second holder's lock")
        lock.release(file)
        #expect(other.isLockedByOthers(offset: ShrinkLock.offset) == false)
    }
    #endif
}
