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
    /// Reusable free pages in one run at the end of the file's pages: what a compacting commit
    /// gives back to the file system when compaction is on (`StoreOptions.compaction`: a commit
    /// looks every 16 commits, or after one that freed much; `Store.compact()` at once), unless
    /// commits reuse them first.
    public var freeTailPages: UInt64
    /// Reusable free pages in each eighth of the file's pages, lowest first. Holes low in the file
    /// are where compaction copies pages from the end to; `Store.compact()` can return up to
    /// `freePages` in all, and the pending pages once the snapshots holding them end.
    ///
    /// Eighth `i` holds the pages `p` with `p * 8 / pageCount == i`.
    ///
    /// ```swift
    /// let stats = try store.stats()
    /// print(stats.freePagesByEighth, stats.freeFractionByEighth)   // [12, …, 4_096] [0.02, …, 0.81]
    /// ```
    public var freePagesByEighth: [UInt64]

    /// Pages holding data (every page that is neither free nor pending, meta pages included).
    public var usedPages: UInt64 {
        let unused = freePages + pendingPages
        return pageCount > unused ? pageCount - unused : 0  // a corrupt free list must not trap
    }
    /// Bytes the next writes can reuse without growing the file.
    public var freeBytes: UInt64 { freePages * UInt64(pageSize) }
    /// The share of each eighth of the file's pages that is reusable free (`freePagesByEighth`
    /// over the eighth's size; 0 for an eighth without pages).
    ///
    /// ```swift
    /// let upperHalfFree = try store.stats().freeFractionByEighth.suffix(4).allSatisfy { $0 > 0.5 }
    /// ```
    public var freeFractionByEighth: [Double] {
        freePagesByEighth.indices.map { i in
            // Pages p with p * 8 / pageCount == i: from ceil(i * pageCount / 8) to ceil((i + 1) * pageCount / 8).
            let start = (UInt64(i) * pageCount + 7) / 8
            let end = (UInt64(i + 1) * pageCount + 7) / 8
            return end > start ? Double(freePagesByEighth[i]) / Double(end - start) : 0
        }
    }
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
        let pageCount = txn.meta.pageCount
        var eighths = [UInt64](repeating: 0, count: 8)
        // One bit per page, set for reusable free pages: the free end is the run of set bits at the top.
        var reusable = [UInt64](repeating: 0, count: Int(pageCount / 64) + 1)
        let cursor = Cursor(pages: txn.pages, root: txn.meta.free.root, owner: txn)
        var more = try cursor.first()
        while more {
            let freedBy = try FreeListFormat.decodeKey(cursor.key, page: 0)
            for entry in try FreeListFormat.checkedEntries(cursor.value, freedBy: freedBy, pageCount: pageCount) {
                if isReusable(born: entry.born, freedBy: freedBy, readers: ids) {
                    free += 1
                    eighths[Int(entry.page * 8 / pageCount)] += 1
                    reusable[Int(entry.page / 64)] |= 1 << (entry.page % 64)
                } else {
                    pending += 1
                    for (i, r) in readers.enumerated() where entry.born <= r.txnid && r.txnid < freedBy { holders[i, default: 0] += 1 }
                }
            }
            more = try cursor.next()
        }
        var tail: UInt64 = 0
        while tail < pageCount, reusable[Int((pageCount - 1 - tail) / 64)] & (1 << ((pageCount - 1 - tail) % 64)) != 0 { tail += 1 }
        return StoreStats(
            fileSize: try env.file.size(), pageSize: env.pageSize, pageCount: pageCount,
            freePages: free, pendingPages: pending, txnid: txn.txnid,
            pendingHolders: holders.sorted { $0.key < $1.key }.map { PendingHolder(reader: readers[$0.key], pages: $0.value) },
            freeTailPages: tail, freePagesByEighth: eighths)
    }

    /// Live read snapshots of every process on this file. A read-only store lists them from the
    /// lock file without changing it (and its own snapshots, being unregistered, are not listed).
    public func readers() -> [ReaderSlot] {
        env.liveReaders()
    }
}
