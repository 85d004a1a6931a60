// Placement: a small commit's pages are renumbered into runs before they are written.
//
// A durable commit's sync costs more for every separate stretch of the file it writes. On the
// project's test machine (ext4 on a virtual disk, 2026-12-01) eight scattered 4 KiB pages and a
// meta page took 0.85-0.98 ms to write and sync; with four of them side by side 0.69-0.78 ms, all
// eight side by side 0.38-0.43 ms. Copy-on-write numbers each page as it is first touched, from
// wherever the free list has one, so a one-object commit's eight pages landed in eight places.
// Once the commit knows its pages, `placePages` moves the hot ones (the catalog's and the free
// list's, and each changed tree's root: the pages the next commit frees again) into one run of
// free pages, so that what the next commits free is a run again; the leaves and lower branches,
// which live on for many commits, stay where they are unless a run holds them too. FORMAT.md §3.

extension WriteTransaction {
    /// Commits with more dirty pages than this are left as they are: their pages were allocated
    /// mostly in runs already (the free list's order, or the end of the file), and renumbering
    /// them would cost CPU for little.
    static let placementLimit = 64
    /// Reusable pages of the free list loaded at most to look for runs, newest chunks first (the
    /// pages the latest commits freed, among them the runs they placed their hot pages in), and
    /// chunks loaded at most for them. Measured at 3,000,000 objects (1,000 one-object commits
    /// after a bulk load): loading the oldest chunks first up to 1,024 pages took 31 chunks and
    /// 172 µs of CPU per commit, a fifth of the commit's time.
    static let placementSearch = 128
    static let placementChunks = 16
    /// Commits with up to this many dirty pages may take a run at the end of the file when the
    /// free list offers none: the file grows by at most this much for it, and compaction bounds
    /// the free pages that accumulate (Compaction.swift).
    static let placementGrowthLimit = 64

    /// Renumbers this transaction's dirty leaves and branches into adjacent free pages when that
    /// makes fewer runs to write, or, while compacting (`allocator.prefersLow`), into the lowest
    /// free pages, so that the commit's own pages do not keep the end of the file from being
    /// trimmed. Returns whether it did; the caller then writes the catalog (the trees' roots moved)
    /// and the free list (the pages taken and given back) again.
    func placePages() throws -> Bool {
        let lowest = allocator.prefersLow
        // Runs matter to a sync; without one the placement would only cost CPU.
        guard lowest || durability == .full, savepoints.isEmpty, pages.frozen.isEmpty, pages.spilled.isEmpty else { return false }
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
        let runsNow = pageRuns(movable).count
        if !lowest && runsNow == 1 { return false }

        if !lowest { try allocator.loadNewest(reusable: WriteTransaction.placementSearch, maxChunks: WriteTransaction.placementChunks) }
        var free = Set(allocator.reusablePages)
        free.formUnion(spare)
        free.formUnion(movable)
        let candidates = free.sorted()
        var moved: [PageNo: PageNo] = [:]
        var grow: UInt64 = 0
        if lowest {
            // Compacting: the lowest pages, so that the end of the file can be trimmed.
            for (old, new) in zip(movable, candidates.prefix(movable.count)) where old != new { moved[old] = new }
        } else {
            guard let plan = adjacentPlan(movable, candidates: candidates) else { return false }
            moved = plan.moved
            grow = plan.grow
        }
        if moved.isEmpty { return false }
        let targets = movable.map { moved[$0] ?? $0 }
        if !lowest && pageRuns(targets.sorted()).count >= runsNow { return false }

        // Account for the numbers: taken from the free list, from spare or from past the end of
        // the file, or given back to spare.
        let movableSet = Set(movable)
        let targetSet = Set(targets)
        let spareSet = Set(spare)
        let end = pageCount
        allocator.take(targetSet.subtracting(movableSet).subtracting(spareSet).filter { $0 < end })
        pageCount += grow
        spare.removeAll { targetSet.contains($0) }
        for page in movable where !targetSet.contains(page) { spare.append(page) }
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

    /// New numbers for `movable` (sorted): the whole commit in one run of `candidates` when one
    /// holds it; else its hot pages (`hotPages`) in the smallest run that holds them, filled up
    /// with the others, branches first, and the rest where they are. With no such run, the hot
    /// pages go to the end of the file (`grow` pages), once: from the next commits on, the hot
    /// pages each commit frees are such a run.
    private func adjacentPlan(_ movable: [PageNo], candidates: [PageNo]) -> (moved: [PageNo: PageNo], grow: UInt64)? {
        let runs = pageRuns(candidates)
        let hotSet = hotPages()
        let hot = movable.filter { hotSet.contains($0) }
        let isBranch = { (pgno: PageNo) -> Bool in
            self.pages.dirty[pgno].map { UnsafeRawPointer($0).u8(PageHeader.type) == PageType.countedBranch.rawValue } ?? false
        }
        let rest = movable.filter { !hotSet.contains($0) && isBranch($0) } + movable.filter { !hotSet.contains($0) && !isBranch($0) }
        var run: (start: PageNo, count: Int)
        var grow: UInt64 = 0
        if let whole = WriteTransaction.smallestRun(holding: movable.count, in: runs) {
            run = whole
        } else if let hotRun = WriteTransaction.smallestRun(holding: max(hot.count, 1), in: runs) {
            run = hotRun
        } else if hot.count <= WriteTransaction.placementGrowthLimit && allocator.isFullyLoaded {
            // Only with the whole free list in view: a run elsewhere in it would serve without
            // growing the file.
            run = (pageCount, hot.count)
            grow = UInt64(hot.count)
        } else {
            return nil
        }
        let inRun = Array((hot + rest).prefix(run.count))
        let runRange = run.start..<(run.start + UInt64(inRun.count))
        var moved: [PageNo: PageNo] = [:]
        for (i, old) in inRun.enumerated() where old != run.start + UInt64(i) { moved[old] = run.start + UInt64(i) }
        // Pages left out of the run keep their numbers, unless the run took them: then they take
        // the numbers the pages moved into the run had (there are at least as many).
        var released = inRun.filter { !runRange.contains($0) }
        for old in (hot + rest).dropFirst(inRun.count) where runRange.contains(old) {
            guard let new = released.popLast() else { return nil }
            moved[old] = new
        }
        return (moved, grow)
    }

    /// Every dirty page of the catalog and the free-page tree, and every modified tree's root: the
    /// pages the next commit that writes the same trees frees again.
    private func hotPages() -> Set<PageNo> {
        var hot = Set<PageNo>()
        for state in trees.values where state.modified && pages.dirty[state.info.root] != nil { hot.insert(state.info.root) }
        var stack = [catalog.root, freeTree.root]
        while let pgno = stack.popLast() {
            guard let buffer = pages.dirty[pgno], hot.insert(pgno).inserted else { continue }
            if UnsafeRawPointer(buffer).u8(PageHeader.type) == PageType.countedBranch.rawValue {
                let node = MutableNode(base: buffer, pageSize: pageSize)
                for i in 0..<node.count { stack.append(node.child(i)) }
            }
        }
        return hot
    }

    /// The maximal runs of consecutive numbers in `sorted` (ascending, no duplicates).
    private func pageRuns(_ sorted: [PageNo]) -> [(start: PageNo, count: Int)] {
        var runs: [(start: PageNo, count: Int)] = []
        for page in sorted {
            if let last = runs.last, last.start + UInt64(last.count) == page {
                runs[runs.count - 1].count += 1
            } else {
                runs.append((page, 1))
            }
        }
        return runs
    }

    /// The smallest of `runs` that holds `count` pages (the lowest of equals), or nil.
    static func smallestRun(holding count: Int, in runs: [(start: PageNo, count: Int)]) -> (start: PageNo, count: Int)? {
        var best: (start: PageNo, count: Int)?
        for run in runs where run.count >= count {
            if let b = best, b.count <= run.count { continue }
            best = run
        }
        return best
    }
}
