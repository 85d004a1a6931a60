/// Space accounting of a store at one snapshot.
///
/// ```swift
/// let stats = try store.stats()
/// print(stats.fileSize, stats.usedPages, stats.freePages, stats.pendingPages)
/// ```
public struct StoreStats: Sendable, Equatable {
    /// Bytes of the page file on disk.
    public var fileSize: UInt64
    /// Bytes per page.
    public var pageSize: Int
    /// Pages the newest commit accounts for (used, free, or pending); the file holds at least these.
    public var pageCount: UInt64
    /// Free pages that the next write can reuse.
    public var freePages: UInt64
    /// Free pages that a live snapshot may still see: reusable once those snapshots end.
    public var pendingPages: UInt64
    /// The newest commit's transaction id.
    public var txnid: UInt64
    /// Snapshots that hold pending pages, with the number of pages each holds.
    public var pendingHolders: [PendingHolder]

    /// Pages holding data (every page that is neither free nor pending, meta pages included).
    public var usedPages: UInt64 {
        let unused = freePages + pendingPages
        return pageCount > unused ? pageCount - unused : 0  // a corrupt free list must not trap
    }
    /// Bytes the next writes can reuse without growing the file.
    public var freeBytes: UInt64 { freePages * UInt64(pageSize) }
}

/// A live snapshot that keeps freed pages from being reused.
///
/// ```swift
/// for holder in try store.stats().pendingHolders {
///     print("pid \(holder.reader.pid) at version \(holder.reader.txnid) holds \(holder.pages) pages")
/// }
/// ```
public struct PendingHolder: Sendable, Equatable {
    /// The snapshot: its reader slot, process and transaction id.
    public var reader: ReaderSlot
    /// Pages freed after this snapshot began that it can still see.
    public var pages: UInt64
}

extension Store {
    /// Space accounting at the newest commit: file size, free pages, and pages held by snapshots.
    ///
    /// ```swift
    /// let stats = try store.stats()
    /// print("\(stats.fileSize) bytes, \(stats.freeBytes) reusable, \(stats.pendingPages) pages held by readers")
    /// ```
    public func stats() throws -> StoreStats {
        try read { txn in try stats(txn) }
    }

    private func stats(_ txn: ReadTransaction) throws -> StoreStats {
        let readers = env.liveReaders().filter { $0.txnid != txn.txnid || $0.pid != currentPID() }
        let ids = readers.map(\.txnid).sorted()
        var free: UInt64 = 0
        var pending: UInt64 = 0
        var holders: [Int: UInt64] = [:]
        let cursor = Cursor(pages: txn.pages, root: txn.meta.free.root, owner: txn)
        var more = try cursor.first()
        while more {
            let freedBy = try FreeListFormat.decodeKey(cursor.key, page: 0)
            for entry in try FreeListFormat.checkedEntries(cursor.value, freedBy: freedBy, pageCount: txn.meta.pageCount) {
                if isReusable(born: entry.born, freedBy: freedBy, readers: ids) {
                    free += 1
                } else {
                    pending += 1
                    for (i, r) in readers.enumerated() where entry.born <= r.txnid && r.txnid < freedBy { holders[i, default: 0] += 1 }
                }
            }
            more = try cursor.next()
        }
        return StoreStats(
            fileSize: try env.file.size(), pageSize: env.pageSize, pageCount: txn.meta.pageCount,
            freePages: free, pendingPages: pending, txnid: txn.txnid,
            pendingHolders: holders.sorted { $0.key < $1.key }.map { PendingHolder(reader: readers[$0.key], pages: $0.value) })
    }

    /// Live read snapshots of every process on this file. A read-only store lists them from the
    /// lock file without changing it (and its own snapshots, being unregistered, are not listed).
    public func readers() -> [ReaderSlot] {
        env.liveReaders()
    }
}
