// Spilling: a write transaction of any size holds a bounded amount of memory.
//
// A page this transaction allocated is invisible to every reader (and to recovery) until the meta
// page of its commit points at it, so it may be written to its final place in the file before the
// commit, like LMDB's spilled pages. When more than `spillPages` pages were made since the last
// spill, every dirty leaf and overflow run is sealed and written (sorted by page number, adjacent
// pages in one vectored write) and its buffer freed; branches stay in memory (about one page in a
// hundred, and on every path). A spilled page that is changed again comes back into memory under
// the same number (`touch`); one that is freed is reusable at once. The commit writes what is still
// dirty and lists spilled and dirty pages alike in its record, so recovery verifies them the same
// way; an abort leaves the spilled pages as garbage in pages no commit references.
//
// Inside a savepoint, the pages made in it are spilled the same way (frozen ones, made before it,
// stay in memory), and the savepoint lists them: a rollback forgets them, and pages spilled before
// it began are copied on write like frozen ones, so rolling back finds them as they were
// (Savepoint.swift).

extension WriteTransaction {
    /// Spills when enough pages were made since the last spill. Called after each tree operation,
    /// when no view into a dirty page is in use.
    @inline(__always)
    func spillIfNeeded() throws {
        guard dirtySinceSpill > spillPages && !committingFreeList else { return }
        do {
            try spill()
        } catch {
            // The write that called this is in the tree, yet reported failed: the transaction must
            // not commit it (found by the review of 2026-12-06), as after deferred writes applied
            // in part, unless the open savepoint that holds it is rolled back.
            deferredFailure = (error, savepoints.count)
            throw error
        }
    }

    /// Writes every dirty leaf and overflow run the map covers to its place, and frees its buffer.
    func spill() throws {
        var victims: [(pgno: PageNo, buffer: UnsafeMutableRawPointer)] = []
        var kept = 0
        for (pgno, buffer) in pages.dirty {
            let run = runPages(buffer)
            if UnsafeRawPointer(buffer).u8(PageHeader.type) == PageType.countedBranch.rawValue || pgno + UInt64(run) > mappedPages {
                kept += run
            } else {
                victims.append((pgno, buffer))
            }
        }
        // At least half the budget made anew before the next spill, whatever stays.
        dirtySinceSpill = min(kept, spillPages / 2)
        if victims.isEmpty { return }
        victims.sort { $0.pgno < $1.pgno }
        for victim in victims { seal(victim.buffer, as: victim.pgno) }
        let writes = victims.map { ($0.pgno, UnsafeRawBufferPointer(start: $0.buffer, count: runPages($0.buffer) * pageSize)) }
        try secureBeforeWriting()
        try writePages(writes, file: env.file)
        try growFile(around: writes, file: env.file)
        for victim in victims {
            pages.spilled[victim.pgno] = UnsafeRawPointer(victim.buffer).u64(PageHeader.checksum)
            pages.dirty[victim.pgno] = nil
            victim.buffer.deallocate()
        }
        if !savepoints.isEmpty { savepoints[savepoints.count - 1].spilledHere.formUnion(victims.lazy.map(\.pgno)) }
        // Views into the freed buffers (cursors, values read) end as they do at a write: a spill
        // as a savepoint begins follows no write that would have ended them.
        pages.version &+= 1
        spills += 1
        spilledPages += writes.reduce(0) { $0 + $1.1.count / pageSize }
    }
}
