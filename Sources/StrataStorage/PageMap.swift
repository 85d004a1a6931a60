// A transaction's view of pages: committed pages straight from the memory map, and, for the
// writer, its own dirty copies first.

/// Deepest tree the engine follows; a deeper descent means a page reference cycle in a corrupt file.
let maxTreeDepth = 48

/// `@unchecked Sendable`: a read transaction's map never changes after init (`dirty` stays empty,
/// `limit` fixed), so sharing it across threads is safe. A write transaction's map is mutated only
/// by the thread running that transaction: `WriteTransaction` is not Sendable and never escapes
/// the `write` closure.
final class PageMap: @unchecked Sendable {
    let base: UnsafeRawPointer
    let pageSize: Int
    /// Pages below this number are readable from the map (the snapshot's page count).
    let limit: UInt64
    let isWrite: Bool
    /// The snapshot's transaction id: a committed page it reaches sealed by a later transaction
    /// was reused while this snapshot's tree still pointed at it (damage, never a commit's doing),
    /// and is refused rather than read as another commit's entries. `.max` checks nothing.
    let newest: UInt64
    // `@exclusivity(unchecked)` on the writer's state, which every page read looks at: only the
    // thread running the write transaction touches it (see above), never through overlapping
    // inout accesses, so the runtime's dynamic exclusivity checks can never fire.
    /// The writer's own pages (single pages and overflow runs), keyed by first page number.
    @exclusivity(unchecked) var dirty = PageTable<UnsafeMutableRawPointer>()
    /// Writer pages made before the innermost open savepoint: readable, but copied on write like
    /// committed pages, so that rolling back to the savepoint finds them as they were.
    @exclusivity(unchecked) var frozen = PageTable<UnsafeMutableRawPointer>()
    /// Writer pages already written to their place in the file (`WriteTransaction.spill`), with the
    /// checksum they were sealed with: read through the map, even past `limit`.
    @exclusivity(unchecked) var spilled = PageTable<UInt64>()
    /// Bumped on every write, so that cursors notice their tree changed under them.
    @exclusivity(unchecked) var version: UInt64 = 0

    init(base: UnsafeRawPointer, pageSize: Int, limit: UInt64, isWrite: Bool, newest: UInt64 = .max) {
        self.base = base
        self.pageSize = pageSize
        self.limit = limit
        self.isWrite = isWrite
        self.newest = newest
    }

    @inline(__always) func page(_ pgno: PageNo) throws -> UnsafeRawPointer {
        if isWrite {
            if let d = dirty[pgno] { return UnsafeRawPointer(d) }
            if !frozen.isEmpty, let f = frozen[pgno] { return UnsafeRawPointer(f) }
        }
        if pgno < 2 || pgno >= limit {
            if isWrite, !spilled.isEmpty, spilled[pgno] != nil { return base + Int(pgno) * pageSize }
            throw StorageError.corrupt(page: pgno, reason: "page reference outside the file's 2..<\(limit) pages")
        }
        let p = base + Int(pgno) * pageSize
        // (A writer's spilled pages carry its own id; they are the only ones past `newest` it reads.)
        if p.u64(PageHeader.txnid) > newest, !(isWrite && !spilled.isEmpty && spilled[pgno] != nil) {
            throw StorageError.corrupt(
                page: pgno,
                reason:
                    "written by transaction \(p.u64(PageHeader.txnid)), newer than the snapshot's \(newest): the page was reused while this commit still used it"
            )
        }
        return p
    }

    @inline(__always) func node(_ pgno: PageNo) throws -> Node {
        try Node(try page(pgno), pgno: pgno, pageSize: pageSize)
    }

    /// True for a page this write transaction made (dirty, frozen or spilled), which may lie past `limit`.
    func isOwned(_ pgno: PageNo) -> Bool {
        dirty[pgno] != nil || (!frozen.isEmpty && frozen[pgno] != nil) || (!spilled.isEmpty && spilled[pgno] != nil)
    }

    /// Throws when the committed page (or overflow run) at `pgno` no longer matches the checksum its
    /// commit sealed it with. Reads do not check (FORMAT.md §5); a writer does before it builds on
    /// a page — copying it into a new page would seal the damage with a valid checksum, and a
    /// damaged free list would hand out pages in use. This transaction's own pages are not sealed
    /// yet and pass.
    func verifySealed(_ pgno: PageNo) throws {
        if isWrite && isOwned(pgno) { return }
        let p = try page(pgno)
        let run = p.u8(PageHeader.type) == PageType.overflow.rawValue ? try overflowRun(pgno).pages : 1
        if pageChecksum(p, byteCount: run * pageSize) != p.u64(PageHeader.checksum) {
            throw StorageError.corrupt(page: pgno, reason: "checksum mismatch: the page changed after its commit wrote it")
        }
    }

    /// The first page of the overflow run at `pgno` and its page count, checked: the page is an
    /// overflow page and the run ends inside the file (or is this writer's own).
    func overflowRun(_ pgno: PageNo) throws -> (page: UnsafeRawPointer, pages: Int) {
        let p = try page(pgno)
        if p.u8(PageHeader.type) != PageType.overflow.rawValue {
            throw StorageError.corrupt(page: pgno, reason: "expected an overflow page, found type \(p.u8(PageHeader.type))")
        }
        let pages = UInt64(p.u32(PageHeader.runPages))
        if pages == 0 || (!(isWrite && isOwned(pgno)) && pgno + pages > limit) {
            throw StorageError.corrupt(page: pgno, reason: "overflow run of \(pages) pages runs past the file end")
        }
        return (p, Int(pages))
    }

    /// The bytes of an overflow value, checked against its run header.
    func overflow(_ pgno: PageNo, length: Int) throws -> UnsafeRawBufferPointer {
        let (p, pages) = try overflowRun(pgno)
        if PageHeader.size + length > pages * pageSize {
            throw StorageError.corrupt(page: pgno, reason: "value of \(length) bytes does not fit its \(pages)-page overflow run")
        }
        return UnsafeRawBufferPointer(start: p + PageHeader.size, count: length)
    }

    /// The bytes of a leaf value, wherever it lives.
    @inline(__always) func resolve(_ value: LeafValue) throws -> UnsafeRawBufferPointer {
        switch value {
        case .inline(let bytes): return bytes
        case .overflow(let page, let length): return try overflow(page, length: length)
        }
    }

    /// Finds `key` in the tree rooted at `root`.
    func get(root: PageNo, key: UnsafeRawBufferPointer) throws -> UnsafeRawBufferPointer? {
        if root == 0 { return nil }
        var node = try self.node(root)
        var depth = 0
        while !node.isLeaf {
            depth += 1
            if depth > maxTreeDepth { throw StorageError.corrupt(page: node.pgno, reason: "tree deeper than \(maxTreeDepth) levels (a reference cycle?)") }
            node = try self.node(try node.child(try node.branchSearch(key)))
        }
        let (index, found) = try node.leafSearch(key)
        if !found { return nil }
        return try resolve(try node.value(index))
    }
}
