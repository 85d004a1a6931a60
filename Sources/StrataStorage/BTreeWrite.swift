// Copy-on-write B+tree updates. A page that a committed snapshot can see is never modified: the
// writer copies the path from the root to the leaf ("touch"), frees the old pages into this
// commit's free-list record, and edits its own copies. Splits and merges then work on dirty pages.

struct PathStep {
    var pgno: PageNo
    var index: Int
}

extension WriteTransaction {
    // MARK: Pages

    /// A new dirty buffer of `pages` pages for page number `pgno`.
    func newDirty(_ pgno: PageNo, pages count: Int = 1) -> UnsafeMutableRawPointer {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: count * pageSize, alignment: 4096)
        pages.dirty[pgno] = buffer
        dirtySinceSpill += count
        return buffer
    }

    /// A page number for `count` pages: this transaction's own freed pages first, then the
    /// committed free list, then the end of the file.
    func allocate(_ count: Int = 1) throws -> PageNo {
        if count == 1 {
            if allocator.prefersLow, !committingFreeList, let i = spare.indices.min(by: { spare[$0] < spare[$1] }),
                allocator.lowestReusable.map({ spare[i] < $0 }) ?? true
            {
                // Compacting: the lowest page wins (Compaction.swift).
                return spare.remove(at: i)
            }
            if !committingFreeList, let page = spare.popLast() { return page }
            if let page = try allocator.allocateOne() { return page }
        } else {
            // (Compacting, runs go to the lowest stretch: the committed free list's.)
            if !allocator.prefersLow, !committingFreeList, let page = takeSpareRun(count) { return page }
            if let page = try allocator.allocateRun(count) { return page }
        }
        let page = pageCount
        pageCount += UInt64(count)
        return page
    }

    /// `count` consecutive pages from `spare`'s newest entries: a run this transaction wrote and
    /// freed (a large value overwritten) is appended there, and the next value of that size
    /// takes it again instead of growing the file. The entries are looked at as a set of pages,
    /// and the shortest stretch long enough wins (the lowest of equal ones), so that a shorter
    /// value does not cut up the run the next longer one needs. Only the newest entries are
    /// looked at, so that the search stays short however many pages the transaction has freed.
    private func takeSpareRun(_ count: Int) -> PageNo? {
        guard spare.count >= count else { return nil }
        // No run has come since a search for one this long or shorter found none: single pages
        // alone (a transaction's split leaves) would make every large value sort the window.
        if let miss = spareRunMiss, miss.spareRuns == spareRuns, count >= miss.count { return nil }
        let floor = max(0, spare.count - max(count, 256))
        var window = (floor..<spare.count).map { (page: spare[$0], index: $0) }
        window.sort { $0.page < $1.page }
        var best: (start: Int, length: Int)?
        var i = 0
        while i < window.count {
            var j = i + 1
            while j < window.count, window[j].page == window[j - 1].page &+ 1 { j += 1 }
            if j - i >= count, best.map({ j - i < $0.length }) ?? true {
                best = (i, j - i)
                if j - i == count { break }
            }
            i = j
        }
        guard let best else {
            spareRunMiss = (spareRuns, count)
            return nil
        }
        let taken = Set(window[best.start..<(best.start + count)].map(\.index))
        var kept: [PageNo] = []
        kept.reserveCapacity(spare.count - floor - count)
        for k in floor..<spare.count where !taken.contains(k) { kept.append(spare[k]) }
        spare.replaceSubrange(floor..<spare.count, with: kept)
        return window[best.start].page
    }

    /// Frees a page or run this transaction no longer references.
    func free(_ pgno: PageNo, pages count: Int = 1) throws {
        if let buffer = pages.dirty.removeValue(forKey: pgno) {
            // Written by this transaction: no snapshot has seen it, so it is reusable at once.
            buffer.deallocate()
            for p in pgno..<(pgno + UInt64(count)) { spare.append(p) }
            if count > 1 { spareRuns += 1 }
            return
        }
        if !pages.spilled.isEmpty, pages.spilled[pgno] != nil {
            if ownsSpilled(pgno) {
                // Written early by this transaction (in this scope), never committed: reusable at once.
                pages.spilled[pgno] = nil
                if !savepoints.isEmpty { savepoints[savepoints.count - 1].spilledHere.remove(pgno) }
                for p in pgno..<(pgno + UInt64(count)) { spare.append(p) }
                if count > 1 { spareRuns += 1 }
            } else {
                // Spilled before the savepoint: the savepoint may need it back (as for frozen pages).
                savepoints[savepoints.count - 1].freedFrozen.append((pgno, count))
            }
            return
        }
        if !savepoints.isEmpty, pages.frozen[pgno] != nil {
            // Made before the savepoint: reusable only once the savepoint is released.
            savepoints[savepoints.count - 1].freedFrozen.append((pgno, count))
            return
        }
        let born = min(try pages.page(pgno).u64(PageHeader.txnid), txnid - 1)
        for p in pgno..<(pgno + UInt64(count)) { freed.append(FreeEntry(page: p, born: born)) }
    }

    /// Makes `pgno` writable: returns it if already dirty, otherwise a dirty copy under a new number.
    func touch(_ pgno: PageNo) throws -> (PageNo, UnsafeMutableRawPointer) {
        if let buffer = pages.dirty[pgno] { return (pgno, buffer) }
        if !pages.spilled.isEmpty, pages.spilled[pgno] != nil, ownsSpilled(pgno) {
            // This transaction's own page (this scope's), written early: back into memory under
            // the same number (no snapshot sees it), to be written again at commit or at the next spill.
            let source = try pages.page(pgno)  // before `newDirty` makes the page read as the new buffer
            let buffer = newDirty(pgno)
            buffer.copyMemory(from: source, byteCount: pageSize)
            pages.spilled[pgno] = nil
            if !savepoints.isEmpty { savepoints[savepoints.count - 1].spilledHere.remove(pgno) }
            return (pgno, buffer)
        }
        let source = try pages.page(pgno)
        let node = try Node(source, pgno: pgno, pageSize: pageSize)
        // Opening a format-2 file for writing upgrades every branch first (Upgrade.swift).
        if !node.isLeaf && !node.isCounted {
            throw StorageError.corrupt(page: pgno, reason: "a format-2 branch page in a file written as format \(strataFormatVersion)")
        }
        try node.validateAll()
        try pages.verifySealed(pgno)
        let newPage = try allocate()
        let buffer = newDirty(newPage)
        buffer.copyMemory(from: source, byteCount: pageSize)
        origins[newPage] = pgno
        try free(pgno)
        env.insertHints.move(from: pgno, to: newPage)
        return (newPage, buffer)
    }

    private func dirtyPage(_ pgno: PageNo) throws -> UnsafeMutableRawPointer {
        guard let buffer = pages.dirty[pgno] else { throw StorageError.internalError("page \(pgno) on the write path is not dirty") }
        return buffer
    }

    /// Copies the path from the root to the leaf that holds `key`, recording it in `path`.
    func touchPath(_ tree: inout TreeInfo, key: UnsafeRawBufferPointer) throws -> (PageNo, UnsafeMutableRawPointer) {
        path.removeAll(keepingCapacity: true)
        var (pgno, page) = try touch(tree.root)
        tree.root = pgno
        while UnsafeRawPointer(page).u8(PageHeader.type) == PageType.countedBranch.rawValue {
            if path.count >= maxTreeDepth { throw StorageError.corrupt(page: pgno, reason: "tree deeper than \(maxTreeDepth) levels") }
            let node = try Node(page, pgno: pgno, pageSize: pageSize)
            let index = try node.branchSearch(key)
            path.append(PathStep(pgno: pgno, index: index))
            let child = try node.child(index)
            let (childPage, childBuffer) = try touch(child)
            if childPage != child { MutableNode(base: page, pageSize: pageSize).setChild(index, childPage) }
            pgno = childPage
            page = childBuffer
        }
        return (pgno, page)
    }

    // MARK: Put

    /// Throws what `put` refuses (an empty or too long key, a too large value), before anything.
    func checkEntry(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws {
        let maxKey = Limits.maxKeySize(pageSize: pageSize)
        if key.count == 0 || key.count > maxKey { throw StorageError.invalidKey(length: key.count, maximum: maxKey) }
        if value.count > Limits.maxValueSize { throw StorageError.valueTooLarge(length: value.count, maximum: Limits.maxValueSize) }
    }

    /// Stores `value` under `key`. Returns true when the key is new. With `overwrite` false an
    /// existing key is left alone and false is returned.
    @discardableResult
    func put(_ tree: inout TreeInfo, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, overwrite: Bool = true) throws -> Bool {
        try checkEntry(key: key, value: value)
        if !overwrite && tree.root != 0 { return try insertNew(&tree, key: key, value: value) }
        pages.version &+= 1
        let entry = try makeLeafEntry(key: key, value: value)
        if tree.root == 0 {
            let pgno = try allocate()
            let page = newDirty(pgno)
            MutableNode.initialize(page, pageSize: pageSize, type: .leaf)
            MutableNode(base: page, pageSize: pageSize).append(entry)
            tree.root = pgno
            tree.count = 1
            return true
        }
        let (pgno, page) = try withEntry(entry) { try touchPath(&tree, key: key) }
        return try putInLeaf(&tree, entry: entry, key: key, pgno: pgno, page: page).added
    }

    /// Runs `body`, which copies the path for `entry` (made first, so that a large value's run
    /// takes the free pages before the path's copies split them up). Should it throw (a damaged
    /// page on the path), the run goes again: nothing would refer to it, and a caller who caught
    /// the error and committed would leave it in the file for good, neither used nor free.
    @inline(__always)
    private func withEntry<R>(_ entry: UnsafeRawBufferPointer, _ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch {
            if entry[2] & LeafEntry.overflowFlag != 0 {
                let run = UnsafeRawPointer(entry.baseAddress!).u64(LeafEntry.headerSize + Int(UnsafeRawPointer(entry.baseAddress!).u16(0)))
                try? freeOverflow(run)
            }
            throw error
        }
    }

    /// The rest of `put` once the leaf `pgno` is writable and `path` leads to it, searching from
    /// `hint` when given (see `Node.leafSearch(_:from:)`). Returns whether the key is new, and
    /// the entry's index, nil when the leaf split.
    @inline(__always)
    private func putInLeaf(
        _ tree: inout TreeInfo, entry: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer, pgno: PageNo, page: UnsafeMutableRawPointer,
        hint: Int? = nil
    ) throws -> (added: Bool, index: Int?) {
        let leaf = try Node(page, pgno: pgno, pageSize: pageSize)
        let (index, found) = try hint.map { try leaf.leafSearch(key, from: $0) } ?? leaf.leafSearch(key)
        if found {
            if case .overflow(let run, _) = try leaf.value(index) { try freeOverflow(run) }
            MutableNode(base: page, pageSize: pageSize).remove(at: index, entrySize: try leaf.entrySize(index))
        } else {
            tree.count &+= 1  // wrapping: a corrupt count read from the file must not trap
            // One more entry below every branch on the path (a split below resets its own counts).
            for step in path { MutableNode(base: try dirtyPage(step.pgno), pageSize: pageSize).addChildCount(step.index, 1) }
        }
        let shape = shapeChanges
        try insert(entry, level: path.count, pgno: pgno, index: index, tree: &tree)
        return (!found, shapeChanges == shape ? index : nil)
    }

    // MARK: Deferred writes, applied in key order (DeferredWrites.swift)

    /// Applies `deferred` in key order. A put whose key falls in the leaf the previous put went
    /// to (below the leaf's upper bound, which its path gives) goes straight there, without a
    /// descent: the recorded path stays right until a split or a merge changes the tree's shape,
    /// a spill writes its pages out, or another descent (a delete) overwrites it.
    func applySorted(_ tree: inout TreeInfo, _ deferred: DeferredWrites) throws {
        let sorted = deferred.sorted()
        // The leaf of the last put and its buffer (which stays put until a spill or a split).
        var finger: (pgno: PageNo, page: UnsafeMutableRawPointer)? = nil
        var upper: [UInt8]? = nil  // that leaf's exclusive upper bound; nil: the rightmost leaf
        var placed: Int? = nil  // the last put's index in `finger`: the next key sorts at or above it
        let all = sorted.bytes
        for write in sorted.writes {
            let key = UnsafeRawBufferPointer(rebasing: all[write.start..<(write.start + write.keyLength)])
            let shape = shapeChanges, spilled = spills
            if write.isDelete {
                _ = try delete(&tree, key: key)
                finger = nil
            } else {
                let value = UnsafeRawBufferPointer(rebasing: all[(write.start + write.keyLength)..<(write.start + write.keyLength + write.valueLength)])
                // (Keys and values were checked against the limits when deferred.)
                if tree.root == 0 {
                    _ = try put(&tree, key: key, value: value)
                    finger = nil
                } else {
                    pages.version &+= 1
                    let entry = try makeLeafEntry(key: key, value: value)
                    if let leaf = finger, upper.map({ $0.withUnsafeBytes { compareBytes(key, $0) < 0 } }) ?? true {
                        placed = try putInLeaf(&tree, entry: entry, key: key, pgno: leaf.pgno, page: leaf.page, hint: placed).index
                    } else {
                        let (pgno, page) = try touchPath(&tree, key: key)
                        placed = try putInLeaf(&tree, entry: entry, key: key, pgno: pgno, page: page).index
                        finger = (pgno, page)
                        upper = try upperBoundOfPath()
                    }
                }
            }
            try spillIfNeeded()
            if shapeChanges != shape || spills != spilled { finger = nil }
        }
    }

    /// The smallest key above the leaf `path` leads to: the separator right of the deepest step
    /// that has a sibling to its right; nil for the rightmost leaf.
    private func upperBoundOfPath() throws -> [UInt8]? {
        for step in path.reversed() {
            let node = try Node(try dirtyPage(step.pgno), pgno: step.pgno, pageSize: pageSize)
            if step.index + 1 < node.count { return Array(try node.key(step.index + 1)) }
        }
        return nil
    }

    /// `put` without overwriting, in one descent: the search goes down once, reading only and
    /// recording the path, so that an existing key changes nothing; a new key then makes that same
    /// path writable without searching again.
    private func insertNew(_ tree: inout TreeInfo, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws -> Bool {
        let (leaf, index, found) = try findPath(tree.root, key: key)
        if found { return false }
        pages.version &+= 1
        let entry = try makeLeafEntry(key: key, value: value)
        let (pgno, _) = try withEntry(entry) { try touchRecordedPath(&tree, leaf: leaf) }
        tree.count &+= 1  // wrapping: a corrupt count read from the file must not trap
        for step in path { MutableNode(base: try dirtyPage(step.pgno), pageSize: pageSize).addChildCount(step.index, 1) }
        try insert(entry, level: path.count, pgno: pgno, index: index, tree: &tree)
        return true
    }

    /// Finds where `key` belongs without writing: records the branch path from `root` in `path`
    /// (page and child index per level) and returns the leaf, the key's index in it and whether it
    /// is there.
    private func findPath(_ root: PageNo, key: UnsafeRawBufferPointer) throws -> (leaf: PageNo, index: Int, found: Bool) {
        path.removeAll(keepingCapacity: true)
        pathRecordings &+= 1
        var pgno = root
        var node = try pages.node(pgno)
        while !node.isLeaf {
            if path.count >= maxTreeDepth { throw StorageError.corrupt(page: pgno, reason: "tree deeper than \(maxTreeDepth) levels") }
            let index = try node.branchSearch(key)
            path.append(PathStep(pgno: pgno, index: index))
            pgno = try node.child(index)
            node = try pages.node(pgno)
        }
        let (index, found) = try node.leafSearch(key)
        return (pgno, index, found)
    }

    /// Makes the path `findPath` recorded writable from the root down (as `touchPath`, without
    /// searching: the indices stay valid, since a copy has the same entries), pointing each
    /// parent at its child's copy and `path` at the copies. Returns the leaf's copy.
    private func touchRecordedPath(_ tree: inout TreeInfo, leaf: PageNo) throws -> (PageNo, UnsafeMutableRawPointer) {
        var (pgno, page) = try touch(tree.root)
        tree.root = pgno
        for level in path.indices {
            path[level].pgno = pgno
            let child = level + 1 < path.count ? path[level + 1].pgno : leaf
            let (childPage, childBuffer) = try touch(child)
            if childPage != child { MutableNode(base: page, pageSize: pageSize).setChild(path[level].index, childPage) }
            pgno = childPage
            page = childBuffer
        }
        return (pgno, page)
    }

    /// Serialises a leaf entry into `entryScratch`, moving a large value to a new overflow run.
    private func makeLeafEntry(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws -> UnsafeRawBufferPointer {
        let e = entryScratch
        e.setU16(0, UInt16(key.count))
        e.setU8(3, 0)
        e.setU32(4, UInt32(value.count))
        e.advanced(by: LeafEntry.headerSize).copyMemory(from: key.baseAddress!, byteCount: key.count)
        let valueStart = LeafEntry.headerSize + key.count
        if valueStart + value.count <= Limits.maxInlineEntry(pageSize: pageSize) {
            e.setU8(2, 0)
            if value.count > 0 { (e + valueStart).copyMemory(from: value.baseAddress!, byteCount: value.count) }
            return UnsafeRawBufferPointer(start: e, count: valueStart + value.count)
        }
        let runPages = (PageHeader.size + value.count + pageSize - 1) / pageSize
        let run = try allocate(runPages)
        let buffer = newDirty(run, pages: runPages)
        buffer.initializeMemory(as: UInt8.self, repeating: 0, count: PageHeader.size)
        buffer.setU8(PageHeader.type, PageType.overflow.rawValue)
        buffer.setU32(PageHeader.runPages, UInt32(runPages))
        (buffer + PageHeader.size).copyMemory(from: value.baseAddress!, byteCount: value.count)
        let tail = runPages * pageSize - PageHeader.size - value.count
        if tail > 0 { (buffer + PageHeader.size + value.count).initializeMemory(as: UInt8.self, repeating: 0, count: tail) }
        e.setU8(2, LeafEntry.overflowFlag)
        e.setU64(valueStart, run)
        return UnsafeRawBufferPointer(start: e, count: valueStart + 8)
    }

    private func freeOverflow(_ run: PageNo) throws {
        try free(run, pages: try pages.overflowRun(run).pages)
    }

    /// Inserts `entry` at `index` of the dirty page `pgno` at depth `level` of `path`, splitting
    /// upwards as needed.
    private func insert(_ entry: UnsafeRawBufferPointer, level: Int, pgno: PageNo, index: Int, tree: inout TreeInfo) throws {
        let page = try dirtyPage(pgno)
        let node = MutableNode(base: page, pageSize: pageSize)
        if node.insert(entry, at: index, scratch: scratch) {
            noteInsert(pgno, index)
            return
        }
        let lastInsert = env.insertHints.hint(pgno).map(Int.init)
        shapeChanges &+= 1

        // Split. Work from a copy so entries can be rebuilt into the original page.
        splitScratch.copyMemory(from: page, byteCount: pageSize)
        let old = try Node(splitScratch, pgno: pgno, pageSize: pageSize)
        var entries: [UnsafeRawBufferPointer] = []
        entries.reserveCapacity(old.count + 1)
        for i in 0..<old.count { entries.append(try old.entryBytes(i)) }
        entries.insert(entry, at: index)
        let n = entries.count

        // Keys arriving in ascending order at the right edge of the tree (auto-increment ids, bulk
        // loads) leave the left page full and start a new one with just the new entry.
        var appendAtEdge = index == n - 1
        if appendAtEdge {
            for step in path[0..<level] {
                if step.index != Int(try dirtyPage(step.pgno).u16PageCount) - 1 { appendAtEdge = false; break }
            }
        }
        // Keys arriving in order in the middle of the tree (the newest entry of each of many
        // groups: a word's postings, a room's messages by time) insert at one spot of a page over
        // and over: when the previous insert into this page went just before or just after this
        // one, the entries on either side of the spot will get no more company. The new entry
        // then goes with the smaller side, and the larger leaves as a page that stays full; an
        // even split would leave a trail of half-empty pages behind every group's end, which is
        // most of an index's pages (InnoDB's last-insert split works the same way).
        let total = entries.reduce(0) { $0 + $1.count + 2 }
        let capacity = pageSize - PageHeader.size
        func fits(_ split: Int) -> Bool {
            guard split >= 1 && split <= n - 1 else { return false }
            let left = entries[0..<split].reduce(0) { $0 + $1.count + 2 }
            return left <= capacity && total - left <= capacity
        }
        /// The split that puts the new entry with the smaller side of its spot (split at `index`:
        /// with the entries above; at `index + 1`: with those below), or the other if only it fits.
        func besideSpot() -> Int? {
            let below = entries[0..<index].reduce(0) { $0 + $1.count + 2 }
            let above = total - below - (entry.count + 2)
            let (preferred, other) = above <= below ? (index, index + 1) : (index + 1, index)
            return fits(preferred) ? preferred : fits(other) ? other : nil
        }
        var split: Int
        if appendAtEdge {
            split = n - 1
        } else if let lastInsert, lastInsert == index - 1 || lastInsert == index, let chosen = besideSpot() {
            split = chosen
        } else {
            var acc = 0
            split = 1
            for i in 0..<n {
                acc += entries[i].count + 2
                if acc * 2 >= total { split = i + 1; break }
            }
            split = max(1, min(split, n - 1))
        }

        let rightPage = try allocate()
        let right = newDirty(rightPage)
        MutableNode.initialize(right, pageSize: pageSize, type: old.isLeaf ? .leaf : .countedBranch)
        node.rebuild(entries[0..<split])
        let rightNode = MutableNode(base: right, pageSize: pageSize)
        var separator: [UInt8]
        if old.isLeaf {
            let first = entries[split]
            separator = Array(
                UnsafeRawBufferPointer(
                    rebasing: first[LeafEntry.headerSize..<(LeafEntry.headerSize + Int(UInt16(littleEndian: first.loadUnaligned(as: UInt16.self))))]))
            rightNode.rebuild(entries[split...])
        } else {
            // The first key of the right branch moves up; its entry keeps only the child and count.
            let first = entries[split]
            let keyLength = Int(UInt16(littleEndian: first.loadUnaligned(fromByteOffset: BranchEntry.keyLengthOffset, as: UInt16.self)))
            separator = Array(UnsafeRawBufferPointer(rebasing: first[BranchEntry.headerSize..<(BranchEntry.headerSize + keyLength)]))
            let head = branchEntry(
                child: first.loadUnaligned(as: UInt64.self),
                count: first.loadUnaligned(fromByteOffset: BranchEntry.countOffset, as: UInt64.self), key: [])
            head.withUnsafeBytes { rightNode.append($0) }
            for e in entries[(split + 1)...] { rightNode.append(e) }
        }

        if index < split { noteInsert(pgno, index) } else { noteInsert(rightPage, index - split) }

        let leftCount = node.subtreeCount
        let parentEntry = branchEntry(child: rightPage, count: rightNode.subtreeCount, key: separator)
        if level == 0 {
            let rootPage = try allocate()
            let root = newDirty(rootPage)
            MutableNode.initialize(root, pageSize: pageSize, type: .countedBranch)
            let rootNode = MutableNode(base: root, pageSize: pageSize)
            branchEntry(child: pgno, count: leftCount, key: []).withUnsafeBytes { rootNode.append($0) }
            parentEntry.withUnsafeBytes { rootNode.append($0) }
            tree.root = rootPage
            return
        }
        let parent = path[level - 1]
        // The parent's entry for the left half counts only what stayed.
        MutableNode(base: try dirtyPage(parent.pgno), pageSize: pageSize).setChildCount(parent.index, leftCount)
        try parentEntry.withUnsafeBytes { (e) throws in
            try insert(e, level: level - 1, pgno: parent.pgno, index: parent.index + 1, tree: &tree)
        }
    }

    /// Records where an insert into `pgno` went, for the next split of that page (InsertHints.swift).
    @inline(__always)
    private func noteInsert(_ pgno: PageNo, _ index: Int) {
        env.insertHints.note(pgno, index)
    }

    func branchEntry(child: PageNo, count: UInt64, key: [UInt8]) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: BranchEntry.headerSize + key.count)
        bytes.withUnsafeMutableBytes { p in
            p.baseAddress!.setU64(0, child)
            p.baseAddress!.setU64(BranchEntry.countOffset, count)
            p.baseAddress!.setU16(BranchEntry.keyLengthOffset, UInt16(key.count))
            if !key.isEmpty { (p.baseAddress! + BranchEntry.headerSize).copyMemory(from: key, byteCount: key.count) }
        }
        return bytes
    }

    // MARK: Delete

    /// Removes `key`. Returns false when it was not there.
    @discardableResult
    func delete(_ tree: inout TreeInfo, key: UnsafeRawBufferPointer) throws -> Bool {
        guard let (leaf, index) = try findForDelete(tree.root, key: key) else { return false }
        try removeFound(&tree, leaf: leaf, index: index)
        return true
    }

    /// The leaf and slot holding `key`, with the path to it recorded for `removeFound`; nil when
    /// the key is not there. One descent, and nothing is copied for a missing key.
    func findForDelete(_ root: PageNo, key: UnsafeRawBufferPointer) throws -> (leaf: PageNo, index: Int)? {
        if key.count == 0 || root == 0 { return nil }
        let (leaf, index, found) = try findPath(root, key: key)
        return found ? (leaf, index) : nil
    }

    /// Removes the entry `findForDelete` found, along the path it recorded: nothing may have
    /// written to the transaction in between (`pages.version` tells), nor recorded another path
    /// (`pathRecordings`).
    func removeFound(_ tree: inout TreeInfo, leaf leafPage: PageNo, index: Int) throws {
        pages.version &+= 1
        let (pgno, page) = try touchRecordedPath(&tree, leaf: leafPage)
        // (A copy has its source's entries in the same slots, so `index` still points at the key.)
        let leaf = try Node(page, pgno: pgno, pageSize: pageSize)
        if case .overflow(let run, _) = try leaf.value(index) { try freeOverflow(run) }
        MutableNode(base: page, pageSize: pageSize).remove(at: index, entrySize: try leaf.entrySize(index))
        tree.count &-= 1  // wrapping: a corrupt count read from the file must not trap
        for step in path { MutableNode(base: try dirtyPage(step.pgno), pageSize: pageSize).addChildCount(step.index, -1) }
        try rebalance(level: path.count, pgno: pgno, tree: &tree)
    }

    /// Merges an underfull page with a sibling when both fit in one page, then looks at the parent.
    /// A root branch left with one child is replaced by that child; an empty root leaf empties the tree.
    private func rebalance(level: Int, pgno: PageNo, tree: inout TreeInfo) throws {
        shapeChanges &+= 1
        let page = try dirtyPage(pgno)
        let node = try Node(page, pgno: pgno, pageSize: pageSize)
        if level == 0 {
            if node.isLeaf {
                if node.count == 0 {
                    try free(pgno)
                    tree.root = 0
                }
            } else if node.count == 1 {
                tree.root = try node.child(0)
                try free(pgno)
                // A root left with a single child by an earlier degenerate state collapses too.
                while tree.root != 0 {
                    let root = try pages.node(tree.root)
                    if root.isLeaf || root.count != 1 { break }
                    let only = try root.child(0)
                    try free(tree.root)
                    tree.root = only
                }
            }
            return
        }
        if node.count == 0 {
            // An empty leaf below a branch: it had no sibling to merge with (its parent has no
            // other child). Unlink it rather than leave it for cursors to trip over.
            try removeEmpty(level: level, pgno: pgno, tree: &tree)
            return
        }
        let parentStep = path[level - 1]
        if node.usedBytes >= pageSize / 4 { return }
        let parentPage = try dirtyPage(parentStep.pgno)
        let parent = try Node(parentPage, pgno: parentStep.pgno, pageSize: pageSize)
        if parent.count >= 2 {
            let index = parentStep.index
            let siblingIndex = index > 0 ? index - 1 : index + 1
            let sibling = try parent.child(siblingIndex)
            let rightIndex = max(index, siblingIndex)
            // Whether the two fit in one page, read from the sibling as it is: copying it first
            // would write a page for nothing whenever they do not.
            let siblingNode = try pages.node(sibling)
            let separatorLength = node.isLeaf ? 0 : try parent.key(rightIndex).count
            if node.usedBytes + siblingNode.usedBytes - PageHeader.size + separatorLength <= pageSize {
                // The left page is rebuilt in place, so a left sibling is copied; a right sibling
                // is only read, then freed.
                let leftPage: PageNo, leftBuffer: UnsafeMutableRawPointer, right: Node, rightPage: PageNo
                if index > 0 {
                    let (siblingPage, siblingBuffer) = try touch(sibling)
                    if siblingPage != sibling { MutableNode(base: parentPage, pageSize: pageSize).setChild(siblingIndex, siblingPage) }
                    (leftPage, leftBuffer) = (siblingPage, siblingBuffer)
                    (right, rightPage) = (try Node(page, pgno: pgno, pageSize: pageSize), pgno)
                } else {
                    try siblingNode.validateAll()  // as `touch` would have, before its entries are read
                    (leftPage, leftBuffer) = (pgno, page)
                    (right, rightPage) = (siblingNode, sibling)
                }
                splitScratch.copyMemory(from: leftBuffer, byteCount: pageSize)
                let leftCopy = try Node(splitScratch, pgno: leftPage, pageSize: pageSize)
                var entries: [UnsafeRawBufferPointer] = []
                entries.reserveCapacity(leftCopy.count + right.count)
                for i in 0..<leftCopy.count { entries.append(try leftCopy.entryBytes(i)) }
                var rekeyed: [UInt8] = []
                if node.isLeaf {
                    for i in 0..<right.count { entries.append(try right.entryBytes(i)) }
                } else {
                    // The right page's first child had an implicit key; it becomes the separator.
                    rekeyed = branchEntry(child: try right.child(0), count: try right.childCount(0) ?? 0, key: Array(try parent.key(rightIndex)))
                    entries.append(UnsafeRawBufferPointer(start: nil, count: 0))  // placeholder, replaced below
                    for i in 1..<right.count { entries.append(try right.entryBytes(i)) }
                }
                let leftNode = MutableNode(base: leftBuffer, pageSize: pageSize)
                rekeyed.withUnsafeBytes { r in
                    if !node.isLeaf { entries[leftCopy.count] = r }
                    leftNode.rebuild(entries[...])
                }
                let parentNode = MutableNode(base: parentPage, pageSize: pageSize)
                parentNode.remove(at: rightIndex, entrySize: try parent.entrySize(rightIndex))
                parentNode.setChildCount(rightIndex - 1, leftNode.subtreeCount)
                try free(rightPage)
                if path[level - 1].index >= rightIndex { path[level - 1].index -= 1 }
            }
        }
        try rebalance(level: level - 1, pgno: parentStep.pgno, tree: &tree)
    }

    /// Unlinks the empty page `pgno` at depth `level` from its parent, together with the chain of
    /// ancestors that had nothing else below them, then rebalances the first ancestor that keeps
    /// children. A chain that reaches the root empties the tree.
    private func removeEmpty(level start: Int, pgno: PageNo, tree: inout TreeInfo) throws {
        var level = start
        var victim = pgno
        while level > 0 {
            let step = path[level - 1]
            let parent = try Node(try dirtyPage(step.pgno), pgno: step.pgno, pageSize: pageSize)
            if parent.count > 1 { break }
            try free(victim)
            victim = step.pgno
            level -= 1
        }
        try free(victim)
        if level == 0 {
            tree.root = 0
            return
        }
        let step = path[level - 1]
        let parentPage = try dirtyPage(step.pgno)
        let parent = try Node(parentPage, pgno: step.pgno, pageSize: pageSize)
        let mutable = MutableNode(base: parentPage, pageSize: pageSize)
        mutable.remove(at: step.index, entrySize: try parent.entrySize(step.index))
        if step.index == 0 {
            // Entry 0 of a branch has no key: drop the one the new first entry brought along.
            let shifted = try Node(parentPage, pgno: step.pgno, pageSize: pageSize)
            let child = try shifted.child(0)
            let count = try shifted.childCount(0) ?? 0
            mutable.remove(at: 0, entrySize: try shifted.entrySize(0))
            let inserted = branchEntry(child: child, count: count, key: []).withUnsafeBytes { mutable.insert($0, at: 0, scratch: scratch) }
            if !inserted { throw StorageError.internalError("no room to rewrite entry 0 of page \(step.pgno)") }
        }
        try rebalance(level: level - 1, pgno: step.pgno, tree: &tree)
    }

    // MARK: Drop

    /// Frees every page of a tree: all of it, or (when a page of a damaged tree cannot be read, is
    /// reached twice or lies too deep) nothing. The walk finds every page before the first is
    /// freed, so that a caller who catches the error and commits (`try? tx.deleteAll(…)`) commits
    /// the tree whole rather than half of its pages on the free list while the catalog still
    /// points at them. Should a free fail after the walk (it reads nothing the walk did not), the
    /// transaction cannot commit (`deferredFailure`).
    func freeTree(_ root: PageNo) throws {
        if root == 0 { return }
        var runs: [(page: PageNo, count: Int)] = []
        var stack: [(PageNo, Int)] = [(root, 0)]
        // A damaged tree may reach a page twice (a child or an overflow run twice, runs that
        // overlap): never free a page twice.
        var seen: Set<PageNo> = []
        func claim(_ first: PageNo, _ count: Int) throws {
            for p in first..<(first &+ UInt64(count)) where !seen.insert(p).inserted {
                throw StorageError.corrupt(page: p, reason: "page reached by two paths of one tree")
            }
            runs.append((first, count))
        }
        while let (pgno, depth) = stack.popLast() {
            if depth > maxTreeDepth { throw StorageError.corrupt(page: pgno, reason: "tree deeper than \(maxTreeDepth) levels") }
            try claim(pgno, 1)
            let node = try pages.node(pgno)
            for i in 0..<node.count {
                if node.isLeaf {
                    if case .overflow(let run, _) = try node.value(i) { try claim(run, try pages.overflowRun(run).pages) }
                } else {
                    stack.append((try node.child(i), depth + 1))
                }
            }
        }
        do {
            for run in runs { try free(run.page, pages: run.count) }
        } catch {
            deferredFailure = (error, savepoints.count)
            throw error
        }
    }
}

extension UnsafeMutableRawPointer {
    /// Slot count of a branch or leaf page.
    var u16PageCount: UInt16 { UnsafeRawPointer(self).u16(PageHeader.count) }
}
