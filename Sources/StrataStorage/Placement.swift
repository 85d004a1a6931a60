// Placement: while compacting, a commit's own pages are renumbered into the lowest free pages.
//
// Copy-on-write numbers each page as it is first touched, from wherever the free list has one.
// A compacting commit (Compaction.swift) allocates lowest page first, but pages it touched before
// it started to compact, and the catalog and free-list pages its own bookkeeping makes, may still
// sit near the end of the file: `placePages` moves them into the lowest free pages, so that they
// do not keep the end of the file from being trimmed. FORMAT.md §3.
//
// Until 2026-12-02 every small durable commit was also renumbered, its pages into runs, because a
// sync cost more for every separate stretch it wrote. Once the writer stopped reading the file's
// times (FileIO.swift, `size()`), which had made every sync write the inode too, that saving no
// longer showed while the renumbering cost more CPU than the rest of the commit: one-object commits
// at N = 1,000,000, three alternated pairs, 309-343 ms per 1,000 with it and 276-319 ms without,
// 180-195 ms and 131-156 ms of CPU.

extension WriteTransaction {
    /// Commits with more dirty pages than this are left as they are: their pages were mostly
    /// allocated lowest first already, and renumbering them would cost CPU for little.
    static let placementLimit = 64

    /// While compacting (`allocator.prefersLow`), renumbers this transaction's dirty leaves and
    /// branches into the lowest free pages. Returns whether it did; the caller then writes the
    /// catalog (the trees' roots moved) and the free list (the pages taken and given back) again.
    func placePages() throws -> Bool {
        guard allocator.prefersLow, savepoints.isEmpty, pages.frozen.isEmpty, pages.spilled.isEmpty else { return false }
        var movable: [PageNo] = []
        for (pgno, buffer) in pages.dirty {
            let type = UnsafeRawPointer(buffer).u8(PageHeader.type)
            if type == PageType.leaf.rawValue || type == PageType.countedBranch.rawValue {
                movable.append(pgno)
            } else if type != PageType.overflow.rawValue {
                return false  // not a page this writer makes: leave it alone
            }
            if movable.count > WriteTransaction.placementLimit { return false }
        }
        guard movable.count >= 2 else { return false }
        movable.sort()

        var free = Set(allocator.reusablePages)
        free.formUnion(spare)
        free.formUnion(movable)
        let candidates = free.sorted()
        var moved: [PageNo: PageNo] = [:]
        for (old, new) in zip(movable, candidates.prefix(movable.count)) where old != new { moved[old] = new }
        if moved.isEmpty { return false }
        let targets = movable.map { moved[$0] ?? $0 }

        // Account for the numbers: taken from the free list or from spare, or given back to spare.
        let movableSet = Set(movable)
        let targetSet = Set(targets)
        let spareSet = Set(spare)
        let end = pageCount
        allocator.take(targetSet.subtracting(movableSet).subtracting(spareSet).filter { $0 < end })
        spare.removeAll { targetSet.contains($0) }
        for page in movable where !targetSet.contains(page) { spare.append(page) }
        spareRuns += 1  // (neighbours among them make runs)
        // Pages this transaction added at the end of the file and no longer uses: not added.
        let unused = Set(spare), before = pageCount
        while pageCount > base.pageCount, unused.contains(pageCount - 1) { pageCount -= 1 }
        if pageCount < before { spare.removeAll { $0 >= pageCount } }

        var buffers: [(PageNo, UnsafeMutableRawPointer)] = []
        buffers.reserveCapacity(moved.count)
        for (old, new) in moved {
            guard let buffer = pages.dirty.removeValue(forKey: old) else {
                throw StorageError.internalError("placement lost dirty page \(old)")
            }
            buffers.append((new, buffer))
        }
        for (new, buffer) in buffers { pages.dirty[new] = buffer }
        for (_, buffer) in pages.dirty where UnsafeRawPointer(buffer).u8(PageHeader.type) == PageType.countedBranch.rawValue {
            let node = MutableNode(base: buffer, pageSize: pageSize)
            for i in 0..<node.count {
                if let new = moved[node.child(i)] { node.setChild(i, new) }
            }
        }
        for state in trees.values {
            if let new = moved[state.info.root] { state.info.root = new }
        }
        if let new = moved[catalog.root] { catalog.root = new }
        if let new = moved[freeTree.root] { freeTree.root = new }
        pages.version &+= 1
        return true
    }
}
