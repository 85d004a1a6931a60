// The writer lock across processes, taken in turn.
//
// Byte 0 of the lock file is the writer lock (FORMAT.md §6). An fcntl lock is not fair: when the
// holder lets go, a process waiting for it is woken, but the holder, still running, takes it again
// before the woken one gets to ask, and a process that commits in a loop (an import, a sync) kept
// another's write waiting for as long as the loop ran (half a second measured here beside a writer
// of durable commits; without end beside one of `.noSync` commits). So a process that has to wait
// queues first on byte 2, the turn byte, holding it while it waits for byte 0; a process that finds
// byte 0 free still lets it go when another holds the turn byte, and queues behind it. The holder
// of the turn is thus next, whatever the writer before it does.

enum WriterLock {
    /// Takes the writer lock, waiting its turn behind any process already waiting. `exclusive`
    /// false: held shared, as a read-only process holding writers off holds it (ReadOnly.swift),
    /// which waits its turn too, holding the turn byte shared (its descriptor is read-only, and
    /// such readers may wait together; a writer asking sees the byte held all the same).
    static func take(_ lockFile: FileIO, exclusive: Bool = true) throws {
        if try takeIfFree(lockFile, exclusive: exclusive) { return }
        _ = try lockFile.lock(offset: LockLayout.writerTurnByte, length: 1, exclusive: exclusive, wait: true)
        defer { lockFile.unlock(offset: LockLayout.writerTurnByte, length: 1) }
        _ = try lockFile.lock(offset: LockLayout.writerLockByte, length: 1, exclusive: exclusive, wait: true)
    }

    /// Takes the writer lock if it is free and no other process is waiting for it; false otherwise.
    static func takeIfFree(_ lockFile: FileIO, exclusive: Bool = true) throws -> Bool {
        guard try lockFile.lock(offset: LockLayout.writerLockByte, length: 1, exclusive: exclusive, wait: false) else { return false }
        // (Where the question cannot be asked, nobody is taken to be waiting: the lock as before.)
        if lockFile.isLockedByOthers(offset: LockLayout.writerTurnByte, length: 1) == true {
            lockFile.unlock(offset: LockLayout.writerLockByte, length: 1)
            return false
        }
        return true
    }

    static func release(_ lockFile: FileIO) {
        lockFile.unlock(offset: LockLayout.writerLockByte, length: 1)
    }
}
