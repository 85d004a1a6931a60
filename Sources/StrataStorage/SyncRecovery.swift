import Synchronization

// Writing again after a failed sync.
//
// When fdatasync fails (EIO) on Linux, the kernel marks the pages it could not write clean and
// drops them from writeback; the next fdatasync succeeds without writing them ("fsyncgate",
// errseq_t). The engine's rule "a failed sync fails its commit, and the next commit tries again"
// then breaks: the pages of the commits made since the last sync that succeeded (`.noSync`
// commits, which a durable commit builds on, or a commit whose sync failed) may never reach the
// disk, while the next successful sync makes a later commit that points at them durable. A power
// loss then leaves that commit's trees pointing at pages that are not on disk.
//
// So the page file remembers which of its pages were written since the last sync that succeeded,
// and after a failed sync, the next sync first writes each of them again, read back from the page
// cache (which still holds what was written, as the map shows it), then syncs. What no engine
// without a log can do is recover a page the kernel evicted after the failure: a read then comes
// from the disk. Durability.md says so.

/// A page file that writes again, before its next sync, every page written since the last sync
/// that succeeded, once a sync has failed.
final class SyncRecoveringFile: FileIO {
    let inner: any FileIO

    /// 4 KiB pieces of the file written since the last successful sync (a bit each), the words
    /// of `written` that hold any (cleared at a good sync: a commit then costs its own pages, not
    /// the file's size), and whether a sync failed since.
    private struct State {
        var written: [UInt64] = []
        var touched: [Int] = []
        var syncFailed = false
    }
    private let state = Mutex(State())
    private static let granule: UInt64 = 4096

    init(_ inner: any FileIO) { self.inner = inner }

    var path: String { inner.path }

    /// Whether nothing was written through this file since its last sync that succeeded.
    var isClean: Bool { state.withLock { $0.touched.isEmpty && !$0.syncFailed } }

    /// The page size, once known: each successful sync then notes the two meta pages' checksums.
    private let metaPageSize = Mutex<Int?>(nil)
    private let syncedMetas = Mutex<(UInt64, UInt64)?>(nil)

    func noteMetas(pageSize: Int) { metaPageSize.withLock { $0 = pageSize } }

    /// Whether both meta pages (as the page cache has them) still hold what they held at the last
    /// successful sync: else some process wrote one since (a commit of another process, or a
    /// meta page spoiled after a failed commit), which may not be on the disk.
    func metasUnchangedSinceSync() -> Bool {
        guard let pageSize = metaPageSize.withLock({ $0 }), let synced = syncedMetas.withLock({ $0 }),
            let now = try? Recovery.metaChecksums(file: inner, pageSize: pageSize)
        else { return false }
        return now == synced
    }

    func size() throws -> UInt64 { try inner.size() }
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws { try inner.read(into: buffer, at: offset) }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        // Noted first: a write that fails halfway may have changed part of the range.
        note(offset, UInt64(bytes.count))
        try inner.write(bytes, at: offset)
    }

    func write(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        note(offset, UInt64(buffers.reduce(0) { $0 + $1.count }))
        try inner.write(buffers, at: offset)
    }

    func sync() throws {
        if state.withLock({ $0.syncFailed }) { try writeAgain() }
        do {
            try inner.sync()
        } catch {
            state.withLock { $0.syncFailed = true }
            throw error
        }
        state.withLock { s in
            for w in s.touched { s.written[w] = 0 }
            s.touched.removeAll(keepingCapacity: true)
            s.syncFailed = false
        }
        let noted = metaPageSize.withLock { $0 }.flatMap { try? Recovery.metaChecksums(file: inner, pageSize: $0) }
        syncedMetas.withLock { $0 = noted }
    }

    func truncate(to length: UInt64) throws {
        try inner.truncate(to: length)
        // Pieces past the end are gone; the one the end cuts stays noted.
        state.withLock { s in
            let first = (length + Self.granule - 1) / Self.granule
            let word = Int(first / 64)
            guard word < s.written.count else { return }
            s.written[word] &= (1 << (first % 64)) &- 1
            for w in (word + 1)..<s.written.count { s.written[w] = 0 }
        }
    }

    func map(length: Int, writable: Bool) throws -> UnsafeMutableRawPointer { try inner.map(length: length, writable: writable) }
    func unmap(_ address: UnsafeMutableRawPointer, length: Int) { inner.unmap(address, length: length) }
    func lock(offset: Int64, length: Int64, exclusive: Bool, wait: Bool) throws -> Bool {
        try inner.lock(offset: offset, length: length, exclusive: exclusive, wait: wait)
    }
    func unlock(offset: Int64, length: Int64) { inner.unlock(offset: offset, length: length) }
    func isLockedByOthers(offset: Int64, length: Int64) -> Bool? { inner.isLockedByOthers(offset: offset, length: length) }

    /// Notes the pages of the commits in the meta slots made with `.noSync` (their own pages, the
    /// run's pages they carry, their record runs and meta pages) as written since the last good
    /// sync, and has the next sync write them again. Another process wrote them, or this one
    /// before it opened the file again; a failed writeback, reported to that process or to nobody,
    /// may have left them clean in the page cache and not on the disk, and this file's own
    /// memory of what it wrote does not hold them. Called by an opening alone before its sync
    /// (which the failure, reported once, no longer fails), and after a sync over a `.noSync`
    /// base failed (found by the review of 2026-12-06). A page the kernel evicted since is read
    /// from the disk: the commit then fails its checksums, as without this.
    func noteUnsyncedCommits(pageSize: Int) throws {
        let ranges = try Recovery.listedPages(file: inner, pageSize: pageSize) { $0.unsynced }
        for range in ranges { note(range.lowerBound * UInt64(pageSize), UInt64(range.count) * UInt64(pageSize)) }
        if !ranges.isEmpty { state.withLock { $0.syncFailed = true } }
    }

    private func note(_ offset: UInt64, _ count: UInt64) {
        guard count > 0 else { return }
        let first = offset / Self.granule
        let last = (offset + count - 1) / Self.granule
        state.withLock { s in
            let words = Int(last / 64) + 1
            if s.written.count < words { s.written += [UInt64](repeating: 0, count: words - s.written.count) }
            for g in first...last {
                let w = Int(g / 64)
                if s.written[w] == 0 { s.touched.append(w) }
                s.written[w] |= 1 << (g % 64)
            }
        }
    }

    /// Writes every noted piece again with what the file holds now, in runs of adjacent pieces.
    private func writeAgain() throws {
        let written = state.withLock { $0.written }
        let size = try inner.size()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var g: UInt64 = 0
        let total = UInt64(written.count) * 64
        while g < total {
            guard written[Int(g / 64)] & (1 << (g % 64)) != 0 else {
                g += 1
                continue
            }
            var end = g + 1
            while end < total, end - g < UInt64(buffer.count) / Self.granule, written[Int(end / 64)] & (1 << (end % 64)) != 0 { end += 1 }
            let offset = g * Self.granule
            if offset < size {
                let count = Int(min(end * Self.granule, size) - offset)
                try buffer.withUnsafeMutableBytes { raw in
                    let piece = UnsafeMutableRawBufferPointer(rebasing: raw[0..<count])
                    try inner.read(into: piece, at: offset)
                    try inner.write(UnsafeRawBufferPointer(piece), at: offset)
                }
            }
            g = end
        }
    }
}
