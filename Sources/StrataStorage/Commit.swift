// Commit: trees into the catalog, the free list into its tree, then pages and meta to disk.
//
// Order of writes (FORMAT.md, "Commit"):
//   1. every dirty page, sealed with its page number, this transaction's id and its checksum;
//   2. the meta page into slot txnid % 2, listing the pages of step 1 (the commit record);
//   3. one sync (`SyncMode.single`), or a sync before and after the meta (`SyncMode.double`).
// No page a committed snapshot can see is ever overwritten, so the previous meta and its tree stay
// intact whatever happens to this commit. On open, the newest meta is trusted only if every page
// of its commit record carries its number, its transaction id and a matching checksum.

extension WriteTransaction {
    func commit() throws {
        try checkOpen()
        if !savepoints.isEmpty { throw StorageError.savepointOpen }
        try applyAllDeferred()
        finish()
        defer { releaseBuffers() }
        // A durable transaction makes the `.noSync` commits it began from durable, first: also
        // when it changes nothing, and so that compaction may use the pages a run's pin held.
        if durability == .full { try secureBase() }

        // Compaction moves pages before the catalog records the trees' roots (Compaction.swift).
        let mustCommit = forceCompaction || compactNow
        let changed = changedPages || trees.values.contains(where: \.modified)
        let compacting = changed || mustCommit ? try compactIfDue(force: forceCompaction, now: compactNow) : false

        try writeCatalog()
        if !mustCommit && !changedPages {
            // Nothing changed: no write and no new transaction id.
            return
        }
        if let (run, count) = previousRecordRun {
            // The previous commit's record is only needed while that commit is the newest.
            try free(run, pages: count)
        }

        try writeFreeList()
        if try placePages() {
            try writeCatalog()
            try writeFreeList()
        }
        if compacting, try trimFreeTail() { try writeFreeList() }
        // Before the record: whether it carries the run's pages depends on it (RunPin.swift).
        try secureBeforeWriting()
        var carried = try carriedRecord()
        let recordRun = try reserveRecordRun(carrying: carried.count)

        // Seal every dirty page. The record lists them with the pages spilled earlier (Spill.swift)
        // and, in a run of `.noSync` commits, the run's earlier pages this commit still uses.
        let dirty = pages.dirty.sorted { $0.key < $1.key }
        for (pgno, buffer) in dirty { seal(buffer, as: pgno) }
        var record = dirty.map { RecordEntry(page: $0.key, checksum: UnsafeRawPointer($0.value).u64(PageHeader.checksum)) }
        if !carried.isEmpty {
            // Less the pages the free list's last passes freed.
            let gone = Set(freed.lazy.map(\.page))
            carried.removeAll { gone.contains($0.page) }
        }
        if !pages.spilled.isEmpty || !carried.isEmpty {
            record += pages.spilled.map { RecordEntry(page: $0.key, checksum: $0.value) }
            record += carried
            record.sort { $0.page < $1.page }
        }

        var meta = Meta(
            txnid: txnid, pageSize: pageSize, pageCount: pageCount, catalog: catalog, free: freeTree,
            recordRun: 0, recordCount: record.count, unsynced: durability == .noSync)
        var writes = dirty.map { (pgno, buffer) -> (PageNo, UnsafeRawBufferPointer) in
            (pgno, UnsafeRawBufferPointer(start: buffer, count: runPages(buffer) * pageSize))
        }
        var recordBuffer: UnsafeMutableRawPointer?
        defer { recordBuffer?.deallocate() }
        if let (run, count) = recordRun {
            // Too many pages to list in the meta page: list them in the run `reserveRecordRun`
            // allocated, which the next commit frees.
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: count * pageSize, alignment: 4096)
            buffer.initializeMemory(as: UInt8.self, repeating: 0, count: count * pageSize)
            buffer.setU64(PageHeader.pageNumber, run)
            buffer.setU64(PageHeader.txnid, txnid)
            buffer.setU8(PageHeader.type, PageType.commitRecord.rawValue)
            buffer.setU32(PageHeader.runPages, UInt32(count))
            for (i, entry) in record.enumerated() { entry.store(to: buffer + PageHeader.size + meta.recordEntrySize * i, version: meta.formatVersion) }
            buffer.setU64(PageHeader.checksum, pageChecksum(UnsafeRawPointer(buffer), byteCount: count * pageSize))
            recordBuffer = buffer
            meta.recordRun = run
            writes.append((run, UnsafeRawBufferPointer(start: buffer, count: count * pageSize)))
        }

        let file = env.file
        // A small durable commit syncs a frame of the commit log, not the page file (CommitLog.swift).
        let log = env.commitLog
        let pages = writes.reduce(0) { $0 + $1.1.count / pageSize }
        var logged =
            durability == .full && env.syncMode == .single && recordRun == nil && self.pages.spilled.isEmpty
            && log?.accepts(entries: writes.count, pages: pages) == true
        if logged, let log {
            logged = try log.prepare(base: base.txnid, pages: pages, pageFile: file)
        }
        // A durable commit that does not go through the log ends its generation first: a replay
        // must never take the file back past it. (A pinned `.noSync` one leaves it, see
        // `CommitLog.pinned`; an unpinned one ended it in `secureLog`.)
        if !logged, durability == .full, let log { try log.end(pageFile: file) }
        try writePages(writes, file: file)
        try growFile(around: writes, file: file)

        let metaBuffer = UnsafeMutableRawPointer.allocate(byteCount: pageSize, alignment: 4096)
        defer { metaBuffer.deallocate() }
        meta.encode(into: metaBuffer, inlineRecord: meta.recordRun == 0 ? record : [])
        let metaBytes = UnsafeRawBufferPointer(start: metaBuffer, count: pageSize)
        let metaOffset = (txnid % 2) * UInt64(pageSize)
        var metaWritten = false
        do {
            if durability == .full && env.syncMode == .double { try file.sync() }
            metaWritten = true
            try file.write(metaBytes, at: metaOffset)
            if logged, let log {
                try log.append(txnid: txnid, images: writes, bases: patchBases(for: writes, in: log), meta: metaBytes)
            } else if durability == .full {
                try file.sync()
            }
        } catch {
            // The meta may be in the page cache and reach the disk later with pages that did not:
            // spoil it so that reopening picks the previous commit. Best effort; the error stands.
            // Not before the meta was written: the slot then still holds the commit before the
            // previous one, which may be the newest durable commit (after `.noSync` commits).
            if metaWritten {
                try? env.spoilMeta(at: metaOffset)
                // The slot spoiled may have held the meta of the log's last frame: a replay would
                // then take the file back to that frame, past the `.noSync` commits after it.
                if logPinned || basePinned { try? log?.end(pageFile: file) }
            }
            throw error
        }
        log?.committed(txnid)
        noteRunPinHolds()
        env.readers.publish(latest: txnid)
        env.freeScanHint = allocator.nextHint
        returnFreeTail()
        _ = try? env.maps.ensure(bytes: Int(pageCount) * pageSize)
        env.commitListeners.notify {
            let changed = trees.values.filter(\.modified)
            var keys: [String: Set<[UInt8]>] = [:]
            for state in changed { if let set = state.changedKeys { keys[state.name] = set } }
            return CommitEvent(txnid: txnid, changedTrees: Set(changed.map(\.name)), changedKeys: keys)
        }
    }

    /// What must be on the disk before this transaction writes its first page (a spill, or its
    /// commit): a durable one's unsynced base (`secureBase`), and any generation of the commit log
    /// its pages could overwrite (`secureLog`).
    func secureBeforeWriting() throws {
        if durability == .full { try secureBase() }
        try secureLog()
    }

    /// Ends the commit log's generation before this transaction writes its first page, unless the
    /// generation's last frame is pinned for it. Unpinned, it may reuse a page that frame's commit
    /// sees (freed by a `.noSync` commit after it, of this process or another): a replay after a
    /// power loss would then bring back a commit whose page was overwritten. Costs a read of the
    /// log's first bytes when it holds no generation.
    ///
    /// An unpinned `.noSync` transaction starts a run: it makes its base the log's frame instead
    /// (`CommitLog.pin`), so that a power loss in the run can always take the file back to it.
    ///
    /// With no log to pin the base in (a file that is not a log under its name, a log that could
    /// not be created), nothing would keep a power loss in the run from taking the file back past
    /// the newest durable commit (whose meta slot and pages the run may overwrite): the
    /// transaction is then made durable itself (`durability` becomes `.full`), as Durability.md says.
    func secureLog() throws {
        if logPinned || logSecured { return }
        if durability == .noSync {
            try pinBase()
            if !basePinned, env.commitLog != nil {
                durability = .full
                try secureBase()
            }
        }
        if !basePinned { try env.commitLog?.end(pageFile: env.file) }
        logSecured = true
    }

    /// Syncs the file before this transaction overwrites anything, when the commit it began from
    /// was made with `.noSync`. Until that commit is on the disk the newest durable commit is an
    /// older one, whose pages the unsynced commit may have freed (and this one reuses) and whose
    /// meta slot this commit writes: a power loss in the middle of this commit could otherwise
    /// take the file back past a commit `write` had acknowledged as durable. Called before a
    /// durable transaction spills or commits its pages (a `.noSync` one is part of the unsynced
    /// run, and Durability.md says what a power loss may take then).
    func secureBase() throws {
        if !base.unsynced || baseSecured { return }
        do {
            try env.file.sync()
        } catch {
            // The run may be another process's, or this one's from before it opened the file
            // again: its pages are then not among those the next sync writes again by itself.
            try? (env.file as? SyncRecoveringFile)?.noteUnsyncedCommits(pageSize: pageSize)
            throw error
        }
        baseSecured = true
        // The run is on the disk: the commit its pin kept whole is no longer needed (RunPin.swift).
        if let pin = runPin {
            // But the log's generation still ends with the pinned commit's frame until a new one
            // overwrites it, after this transaction has written its pages: a power loss between the
            // two would replay the frame, taking the file back past the run to a commit whose pages
            // this one reused. End it before the pin goes (the file was just synced).
            try env.commitLog?.end(pageFile: env.file)
            runPin = nil
            allocator.release(snapshot: pin)
        }
    }

    /// Records every modified tree's root and count in the catalog (or removes a dropped tree).
    private func writeCatalog() throws {
        for state in trees.values where state.modified {
            let key = Array(state.name.utf8)
            try key.withUnsafeBytes { (k) throws in
                if state.dropped {
                    _ = try delete(&catalog, key: k)
                } else {
                    try state.info.encoded().withUnsafeBytes { (v) throws in
                        _ = try put(&catalog, key: k, value: v)
                    }
                }
            }
        }
    }

    /// Whether this transaction wrote, spilled, freed or allocated any page.
    private var changedPages: Bool {
        !pages.dirty.isEmpty || !pages.spilled.isEmpty || !freed.isEmpty || !spare.isEmpty || pageCount != base.pageCount
    }

    /// Allocates the commit-record run when this commit wrote more pages than its meta page lists
    /// inline. It is allocated like any other run (from the free list when that has room), so the
    /// runs of successive large commits reuse freed pages instead of growing the file by a run per
    /// commit; then the free list is brought up to date again. That can dirty a few more pages, so
    /// it repeats with a larger run until the record fits. Once a run is reserved it is used, even
    /// if the record would now fit inline, so that no allocated page goes unaccounted for.
    private func reserveRecordRun(carrying carried: Int) throws -> (PageNo, Int)? {
        var reserved: (run: PageNo, count: Int)?
        for attempt in 0..<16 {
            // (The carried entries only get fewer as the free list frees more.)
            let entries = pages.dirty.count + pages.spilled.count + carried
            if reserved == nil && entries <= Meta.inlineCapacity(pageSize: pageSize) { return nil }
            let needed = (PageHeader.size + 16 * entries + pageSize - 1) / pageSize
            if let reserved, reserved.count >= needed { return reserved }
            if let (run, count) = reserved {
                // Too small: it becomes a page range this commit allocated and freed unused.
                for page in run..<(run + UInt64(count)) { spare.append(page) }
                spareRuns += 1
            }
            let count = needed + attempt
            reserved = (try allocate(count), count)
            try writeFreeList()
        }
        throw StorageError.internalError("commit record run reservation did not converge")
    }

    /// The pages of `writes` that were copied from a page the log's generation holds the last
    /// image of (`origins`, `CommitLog.holdsImage`), with that page's bytes in the map, for the
    /// commit log's patches (LogPatch.swift): a replay rebuilds the page on that image and never
    /// reads it from the page file, where it may have been reused since.
    func patchBases(for writes: [(PageNo, UnsafeRawBufferPointer)], in log: CommitLog) -> [PageNo: (page: PageNo, bytes: UnsafeRawPointer)] {
        var bases: [PageNo: (page: PageNo, bytes: UnsafeRawPointer)] = [:]
        for (pgno, bytes) in writes where bytes.count == pageSize {
            guard let origin = origins[pgno], origin >= 2, origin < base.pageCount, origin < mappedPages, pages.dirty[origin] == nil else { continue }
            let p = pages.base + Int(origin) * pageSize
            let born = p.u64(PageHeader.txnid)
            guard p.u64(PageHeader.pageNumber) == origin, born > log.startTxnid, born <= base.txnid, log.holdsImage(of: origin, p) else { continue }
            bases[pgno] = (origin, p)
        }
        return bases
    }

    /// Makes the file cover every page of this commit with blocks the filesystem has allocated,
    /// and then some: a sync that must also commit the allocation of new blocks (appending, or
    /// writing into a hole left by `ftruncate`) costs several times one that only flushes data
    /// (FORMAT.md §4.3). So when the file must grow, it grows by a step (an eighth of its size,
    /// 1 MiB to 64 MiB) of written zeros, which later commits overwrite in place; this commit's
    /// own pages are not written twice. Pages past `pageCount` belong to no commit.
    func growFile(around writes: [(PageNo, UnsafeRawBufferPointer)], file: FileIO) throws {
        let needed = pageCount * UInt64(pageSize)
        if fileSize >= needed { return }
        let step = WriteTransaction.growthStep(needed: needed)
        let target = (needed + step + UInt64(pageSize) - 1) / UInt64(pageSize) * UInt64(pageSize)
        // The ranges from the old end to the target that this commit did not write.
        var gaps: [(start: UInt64, end: UInt64)] = []
        var cursor = fileSize
        for (pgno, bytes) in writes.sorted(by: { $0.0 < $1.0 }) {
            let start = pgno * UInt64(pageSize), end = start + UInt64(bytes.count)
            if end <= cursor { continue }
            if start > cursor { gaps.append((cursor, start)) }
            cursor = max(cursor, end)
        }
        if cursor < target { gaps.append((cursor, target)) }
        for gap in gaps { try file.writeZeros(from: gap.start, to: gap.end) }
        fileSize = target
    }

    /// Stamps a dirty page or run with its number, this transaction's id and its checksum (§5).
    func seal(_ buffer: UnsafeMutableRawPointer, as pgno: PageNo) {
        buffer.setU64(PageHeader.pageNumber, pgno)
        buffer.setU64(PageHeader.txnid, txnid)
        buffer.setU64(PageHeader.checksum, pageChecksum(UnsafeRawPointer(buffer), byteCount: runPages(buffer) * pageSize))
    }

    /// Pages in the run starting at `buffer` (1 unless it is an overflow run).
    func runPages(_ buffer: UnsafeMutableRawPointer) -> Int {
        let p = UnsafeRawPointer(buffer)
        return p.u8(PageHeader.type) == PageType.overflow.rawValue ? Int(p.u32(PageHeader.runPages)) : 1
    }

    /// Writes page runs sorted by number, joining neighbours into one vectored write.
    func writePages(_ writes: [(PageNo, UnsafeRawBufferPointer)], file: FileIO) throws {
        var i = 0
        while i < writes.count {
            let start = writes[i].0
            var batch = [writes[i].1]
            var next = start + UInt64(writes[i].1.count / pageSize)
            i += 1
            while i < writes.count && writes[i].0 == next && batch.count < 512 {
                batch.append(writes[i].1)
                next += UInt64(writes[i].1.count / pageSize)
                i += 1
            }
            try file.write(batch, at: start * UInt64(pageSize))
        }
    }

    /// Records this commit's frees and the committed chunks its allocations consumed.
    ///
    /// Writing the free-page tree itself allocates and frees pages, which changes what must be
    /// written; so it repeats until a pass changes nothing. While it runs, allocation skips this
    /// transaction's spare pages, so the set of freed pages only grows and the set of committed
    /// free pages only shrinks: the loop converges, in practice in two or three passes.
    func writeFreeList() throws {
        committingFreeList = true
        let capacity = FreeListFormat.chunkCapacity(pageSize: pageSize)
        for _ in 0..<64 {
            let before = (allocator.allocations, freed.count, spare.count, pageCount)
            for chunk in allocator.chunks where chunk.modified {
                try chunk.key.withUnsafeBytes { (k) throws in
                    let entries = chunk.entries
                    if entries.isEmpty {
                        _ = try delete(&freeTree, key: k)
                    } else {
                        try FreeListFormat.encode(entries[...]).withUnsafeBytes { (v) throws in
                            _ = try put(&freeTree, key: k, value: v)
                        }
                    }
                }
            }
            var own = freed
            own.reserveCapacity(freed.count + spare.count)
            for page in spare { own.append(FreeEntry(page: page, born: txnid)) }
            let chunkCount = (own.count + capacity - 1) / capacity
            for c in 0..<chunkCount {
                let slice = own[(c * capacity)..<min(own.count, (c + 1) * capacity)]
                try FreeListFormat.key(freedBy: txnid, chunk: UInt32(c)).withUnsafeBytes { (k) throws in
                    try FreeListFormat.encode(slice).withUnsafeBytes { (v) throws in
                        _ = try put(&freeTree, key: k, value: v)
                    }
                }
            }
            if chunkCount < ownFreeChunks {
                for c in chunkCount..<ownFreeChunks {
                    try FreeListFormat.key(freedBy: txnid, chunk: UInt32(c)).withUnsafeBytes { (k) throws in
                        _ = try delete(&freeTree, key: k)
                    }
                }
            }
            // Exactly those now: the ones past `chunkCount` were deleted above.
            ownFreeChunks = chunkCount
            let after = (allocator.allocations, freed.count, spare.count, pageCount)
            if before == after { return }
        }
        throw StorageError.internalError("free-list update did not converge")
    }
}
