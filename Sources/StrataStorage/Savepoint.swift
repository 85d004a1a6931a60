// Savepoints: a part of a write transaction that can be undone on its own.
//
// Pages are copy-on-write against committed snapshots already; a savepoint extends the same rule
// to the writer's own pages. Opening one moves every dirty page into `PageMap.frozen`: still
// readable, but the next write to such a page copies it to a new page, exactly as for a committed
// page. So nothing made before the savepoint is modified in place while it is open, and rolling
// back is: drop the pages made since, make the frozen pages dirty again, restore the few counters
// and tree roots saved at the start. Releasing merges the frozen pages back; those freed since the
// savepoint become reusable then (not before: a rollback would need them).
//
// Nested savepoints stack: each remembers which pages it froze and which frozen pages were freed
// while it was innermost.
//
// Pages made inside a savepoint may be spilled (Spill.swift) like any: no snapshot sees them, and
// a rollback only has to forget them. Each savepoint lists the pages it spilled of its own
// (`spilledHere`); only those are changed in place or reused at once while it is innermost. A
// page spilled before it began is read-only to it, as a frozen page is.

/// What a savepoint restores.
struct Savepoint {
    let pageCount: UInt64
    let catalog: TreeInfo
    let freeTree: TreeInfo
    let spare: [PageNo]
    let freedCount: Int
    let allocator: FreePageAllocator.State
    let trees: [TreeName: SavedTree]
    /// The pages this savepoint moved from dirty to frozen.
    let frozenHere: [PageNo]
    /// Frozen pages (first page, page count) freed while this savepoint was the innermost.
    var freedFrozen: [(PageNo, Int)] = []
    /// Pages made inside this savepoint (or inner ones released into it) and spilled: its own.
    var spilledHere: Set<PageNo> = []
}

struct SavedTree {
    let state: TreeState
    let info: TreeInfo
    let modified: Bool
    let dropped: Bool
    let changedKeys: Set<[UInt8]>?
}

extension WriteTransaction {
    /// Runs `body` as a unit inside this transaction: if it throws, everything it wrote is undone
    /// and the error rethrown, and the transaction goes on as it was before `body`. Savepoints nest.
    ///
    /// ```swift
    /// try store.write { txn in
    ///     let log = try txn.createTree("log")
    ///     try log.put([1], [1])
    ///     _ = try? txn.savepoint { try log.put([2], [2]); throw CancellationError() }
    ///     // [1] is stored, [2] is not
    /// }
    /// ```
    public func savepoint<R>(_ body: () throws -> R) throws -> R {
        try beginSavepoint()
        let result: R
        do {
            result = try body()
        } catch {
            if !isFinished { rollbackSavepoint() }
            throw error
        }
        try releaseSavepoint()
        return result
    }

    func beginSavepoint() throws {
        try checkOpen()
        // Applied now, so that the pages hold everything from before, and all that a rollback
        // finds deferred was written inside.
        try applyAllDeferred()
        // The pages about to be frozen are not spilled while the savepoint is open: spilled now if
        // due, so that a run of savepoints (grouped writes) does not pile them up in memory.
        try spillIfNeeded()
        var saved: [TreeName: SavedTree] = [:]
        for (name, state) in trees {
            saved[name] = SavedTree(
                state: state, info: state.info, modified: state.modified, dropped: state.dropped,
                changedKeys: state.changedKeys)
        }
        let frozenHere = pages.dirty.pageNumbers
        if pages.frozen.isEmpty {
            swap(&pages.frozen, &pages.dirty)
        } else {
            pages.frozen.mergeKeepingExisting(pages.dirty)
            pages.dirty.removeAll(keepingCapacity: true)
        }
        savepoints.append(
            Savepoint(
                pageCount: pageCount, catalog: catalog, freeTree: freeTree, spare: spare,
                freedCount: freed.count, allocator: allocator.state, trees: saved,
                frozenHere: frozenHere))
    }

    /// Undoes everything since the innermost savepoint began, and closes it.
    func rollbackSavepoint() {
        guard let savepoint = savepoints.popLast() else { return }
        discardAllDeferred()
        if let failure = deferredFailure, failure.depth > savepoints.count { deferredFailure = nil }  // undone with the rest
        for (_, buffer) in pages.dirty { buffer.deallocate() }
        pages.dirty.removeAll(keepingCapacity: true)
        // Made inside: their numbers go back with the allocator's state, their bytes are garbage.
        for pgno in savepoint.spilledHere { pages.spilled[pgno] = nil }
        for pgno in savepoint.frozenHere {
            if let buffer = pages.frozen.removeValue(forKey: pgno) { thaw(pgno, buffer) }
        }
        pageCount = savepoint.pageCount
        catalog = savepoint.catalog
        freeTree = savepoint.freeTree
        spare = savepoint.spare
        spareRuns += 1
        freed.removeSubrange(savepoint.freedCount...)
        allocator.state = savepoint.allocator
        for (name, state) in trees where savepoint.trees[name] == nil {
            // Opened inside the savepoint: back to what the restored catalog says, so that a handle
            // kept from inside stays right (or, for a tree created inside, stops working).
            let stored = try? Array(name.name.utf8).withUnsafeBytes { (k) throws -> TreeInfo? in
                try pages.get(root: catalog.root, key: k).map { try TreeInfo.decode($0, name: name.name) }
            }
            state.modified = false
            if let info = stored ?? nil {
                state.info = info
                state.dropped = false
                state.changedKeys = tracksChangedKeys ? [] : nil
            } else {
                state.info = .empty
                state.dropped = true
                trees[name] = nil
            }
        }
        for (name, saved) in savepoint.trees {
            if let current = trees[name], current !== saved.state {
                // Dropped and created again inside: the new state's pages are gone; its handles must fail.
                current.info = .empty
                current.dropped = true
                current.modified = false
            }
            saved.state.info = saved.info
            saved.state.modified = saved.modified
            saved.state.dropped = saved.dropped
            saved.state.changedKeys = saved.changedKeys
            trees[name] = saved.state
        }
        pages.version &+= 1
    }

    /// Keeps everything since the innermost savepoint began, and closes it.
    func releaseSavepoint() throws {
        guard let savepoint = savepoints.popLast() else { return }
        var freedHere: [PageNo: Int] = [:]
        var freedBelow: [(PageNo, Int)] = []
        let frozenHere = Set(savepoint.frozenHere)
        for (pgno, count) in savepoint.freedFrozen {
            if frozenHere.contains(pgno) { freedHere[pgno] = count } else { freedBelow.append((pgno, count)) }
        }
        for pgno in savepoint.frozenHere {
            guard let buffer = pages.frozen.removeValue(forKey: pgno) else { continue }
            if let count = freedHere[pgno] {
                // Made in the enclosing scope and freed in this one: as for any own page, reusable now.
                buffer.deallocate()
                for p in pgno..<(pgno + UInt64(count)) { spare.append(p) }
                if count > 1 { spareRuns += 1 }
            } else {
                thaw(pgno, buffer)
            }
        }
        if !savepoints.isEmpty && !savepoint.spilledHere.isEmpty {
            // Its own spilled pages are the enclosing scope's own now.
            savepoints[savepoints.count - 1].spilledHere.formUnion(savepoint.spilledHere)
        }
        for (pgno, count) in freedBelow {
            if ownsSpilled(pgno) {
                // Spilled by the scope this one closes into (or before any savepoint): free now.
                try free(pgno, pages: count)
            } else {
                savepoints[savepoints.count - 1].freedFrozen.append((pgno, count))
            }
        }
    }

    /// Makes a frozen page dirty again, and so spillable: counted as made since the last spill,
    /// or the pages a run of savepoints leaves behind would pile up without ever asking for one.
    private func thaw(_ pgno: PageNo, _ buffer: UnsafeMutableRawPointer) {
        pages.dirty[pgno] = buffer
        dirtySinceSpill += runPages(buffer)
    }

    /// Whether `pgno`, a spilled page, was made in the innermost open scope (or no savepoint is
    /// open): then it may be changed in place and reused at once, as a dirty page.
    func ownsSpilled(_ pgno: PageNo) -> Bool {
        savepoints.isEmpty || savepoints[savepoints.count - 1].spilledHere.contains(pgno)
    }
}
