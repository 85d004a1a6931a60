/// An ordered position in one tree of a transaction.
///
/// Keys and values are views into the memory map (or the writer's own pages), valid until the
/// transaction ends; in a write transaction, until the next write or savepoint (which may spill
/// the transaction's pages to the file; `changeCount` moves at either). Copy them
/// (`Array(cursor.key)`) to keep them longer.
///
/// ```swift
/// try store.read { txn in
///     let cursor = try txn.tree("users")!.cursor()
///     var more = try cursor.seek(Array("m".utf8))        // first key ≥ "m"
///     while more {
///         print(String(decoding: cursor.key, as: UTF8.self))
///         more = try cursor.next()
///     }
/// }
/// ```
public final class Cursor {
    private let pages: PageMap
    /// The root of a read transaction's tree (fixed for its life).
    private let fixedRoot: PageNo
    /// A write transaction's tree: its root moves as the transaction writes (a split or a merge at
    /// the top, a drop), and a cursor repositioned after a write must start from where it is now.
    private let liveTree: TreeState?
    private var root: PageNo { liveTree?.info.root ?? fixedRoot }
    /// Keeps the transaction (and so the snapshot and the map) alive while the cursor is.
    private let owner: AnyObject
    /// The write transaction of a cursor over one of its trees (nil over a snapshot's).
    private let writer: WriteTransaction?
    /// The path from the root: one frame per level, in a fixed buffer rather than an array, so
    /// stepping touches no reference-counted storage and no exclusivity checks.
    private let frames: UnsafeMutablePointer<Frame>
    // `@exclusivity(unchecked)` on the state read at every step: a cursor is not Sendable and is
    // used by one thread at a time, and no method hands out an inout reference to these, so the
    // runtime's dynamic exclusivity checks (a few percent of a query's time) can never fire.
    @exclusivity(unchecked) private var depth = 0
    /// The leaf of the top frame, validated once when the cursor arrives on it.
    @exclusivity(unchecked) private var leaf: Node?
    @exclusivity(unchecked) private var version: UInt64
    // What the cursor is on, behind getters: a client module that reads a public stored
    // property directly (cross-module optimization lays the class out for it) does not see
    // `@exclusivity(unchecked)` and checks each read at run time, ~100 instructions a time on
    // every step of a zig-zag or a scan.
    @exclusivity(unchecked) private var currentKey = UnsafeRawBufferPointer(start: nil, count: 0)
    @exclusivity(unchecked) private var currentValue = UnsafeRawBufferPointer(start: nil, count: 0)
    @exclusivity(unchecked) private var positioned = false

    /// The key at the cursor. Empty when the cursor is not positioned.
    public var key: UnsafeRawBufferPointer { currentKey }
    /// The value at the cursor. Empty when the cursor is not positioned.
    public var value: UnsafeRawBufferPointer { currentValue }
    /// Whether the cursor is on an entry.
    public var isPositioned: Bool { positioned }

    private struct Frame {
        var pgno: PageNo
        var index: Int
    }

    init(pages: PageMap, root: PageNo, owner: AnyObject) {
        self.pages = pages
        self.fixedRoot = root
        self.liveTree = nil
        self.owner = owner
        self.writer = nil
        self.version = pages.version
        self.frames = .allocate(capacity: maxTreeDepth + 1)
    }

    /// A cursor over a write transaction's tree, following its root as the transaction writes.
    init(pages: PageMap, tree: TreeState, writer: WriteTransaction) {
        self.pages = pages
        self.fixedRoot = 0
        self.liveTree = tree
        self.owner = writer
        self.writer = writer
        self.version = pages.version
        self.frames = .allocate(capacity: maxTreeDepth + 1)
    }

    deinit { frames.deallocate() }

    /// Before positioning: a write transaction's deferred writes to this tree applied
    /// (DeferredWrites.swift), so that the cursor starts from the tree as it is. A cursor kept past
    /// its write transaction's end throws: the tree it followed is committed or gone (its pages
    /// freed), and deferred writes applied then would make pages, and spill them into the file,
    /// for a transaction that no longer holds the writer lock.
    @inline(__always) private func settle() throws {
        guard let writer else { return }
        try writer.checkOpen()
        if let tree = liveTree, tree.hasDeferred { try writer.applyDeferred(tree) }
    }

    @inline(__always) private func push(_ pgno: PageNo, _ index: Int) throws {
        if depth > maxTreeDepth { throw StorageError.corrupt(page: pgno, reason: "tree deeper than \(maxTreeDepth) levels") }
        frames[depth] = Frame(pgno: pgno, index: index)
        depth += 1
    }

    /// Moves to the smallest key. Returns false when the tree is empty.
    ///
    /// ```swift
    /// if try cursor.first() { print("smallest key:", Array(cursor.key)) }
    /// ```
    @discardableResult
    public func first() throws -> Bool {
        try settle()
        reset()
        if root == 0 { return false }
        return try descendEdge(from: root, first: true)
    }

    /// Moves to the largest key. Returns false when the tree is empty.
    ///
    /// ```swift
    /// if try cursor.last() { print("largest key:", Array(cursor.key)) }
    /// ```
    @discardableResult
    public func last() throws -> Bool {
        try settle()
        reset()
        if root == 0 { return false }
        return try descendEdge(from: root, first: false)
    }

    /// Moves to the first key ≥ `target`. Returns false when every key is smaller.
    @discardableResult
    public func seek(_ target: UnsafeRawBufferPointer) throws -> Bool {
        try settle()
        reset()
        if root == 0 { return false }
        return try descend(from: root, to: target)
    }

    /// Moves to the entry under `target` and returns true; returns false, unpositioned, when the
    /// tree has no such key. When the target lies between the first and the last key of the leaf
    /// the cursor is on, that leaf alone is searched (a key in that range can be in no other
    /// leaf): records looked up in about the order they are stored — an index walk's objects, a
    /// search's matches, forwards or backwards — then cost one leaf search each instead of a
    /// descent from the root. A target outside the leaf, ahead of the cursor's key or behind it,
    /// is searched for from the lowest page on the cursor's path whose range holds it: the next
    /// object of an index walk a few leaves on (an ascending walk) or a few leaves back (a
    /// descending one: the newest messages of a room) costs a search of the leaves' parent and
    /// of the leaf.
    ///
    /// ```swift
    /// for key in keysFromAnIndex where try cursor.find(key) { handle(cursor.value) }
    /// ```
    @discardableResult
    public func find(_ target: UnsafeRawBufferPointer) throws -> Bool {
        try settle()
        // (After a write the leaf may no longer be the tree's: `version` says so.)
        if positioned, version == pages.version, depth > 0, let node = leaf, node.count > 0,
            compareBytes(try node.key(0), target) <= 0, compareBytes(target, try node.key(node.count - 1)) <= 0
        {
            let (index, found) = try node.leafSearch(target)
            if found {
                frames[depth - 1].index = index
                return try load(node, index)
            }
            reset()
            return false
        }
        // Outside the leaf: down from the lowest page on the path whose range holds the target.
        // After a write the path may be stale, so `find` starts over from the root.
        guard try version == pages.version ? seekNear(target) : seek(target), compareBytes(key, target) == 0 else {
            reset()
            return false
        }
        return true
    }

    /// Moves to the first key ≥ `target`, searching down from the lowest page on the cursor's path
    /// whose range holds it (`lowestLevel(holding:ahead:)`), or from the root when the cursor is
    /// not positioned.
    private func seekNear(_ target: UnsafeRawBufferPointer) throws -> Bool {
        guard isPositioned, depth > 0, let node = leaf else { return try seek(target) }
        let level = try lowestLevel(holding: target, ahead: compareBytes(key, target) <= 0)
        if level == depth - 1 {
            let (index, _) = try node.leafSearch(target)
            frames[depth - 1].index = index
            if index >= node.count { return try climbForward() }
            return try load(node, index)
        }
        depth = level
        return try descend(from: frames[level].pgno, to: target)
    }

    /// The deepest level of the cursor's path whose page's key range holds `target`, which lies
    /// ahead of the cursor's key (`ahead`) or behind it. Child i of a branch holds the keys from
    /// its entry i (for i > 0; the first child inherits its branch's lower bound) up to below
    /// entry i + 1 (the last child inherits the upper bound). The bounds nest, so walking up from
    /// the leaf's parent the first explicit bound on the target's side that the target does not
    /// cross decides, and every bound it crosses moves the answer up to that level's page. Only
    /// one side can be crossed: every page on the path holds the cursor's key, and the target is
    /// on one side of it.
    private func lowestLevel(holding target: UnsafeRawBufferPointer, ahead: Bool) throws -> Int {
        var deepest = depth - 1
        var level = depth - 2
        while level >= 0 {
            let frame = frames[level]
            let branch = try pages.node(frame.pgno)
            if ahead {
                if frame.index + 1 < branch.count {
                    if compareBytes(target, try branch.key(frame.index + 1)) < 0 { break }
                    deepest = level
                }
            } else if frame.index > 0 {
                if compareBytes(target, try branch.key(frame.index)) >= 0 { break }
                deepest = level
            }
            level -= 1
        }
        return deepest
    }

    /// `find` with the target in an array.
    ///
    /// ```swift
    /// if try cursor.find(Array("u1".utf8)) { print(Array(cursor.value)) }
    /// ```
    @discardableResult
    public func find(_ target: [UInt8]) throws -> Bool {
        try target.withUnsafeBytes { try find($0) }
    }

    /// From page `start` (pushed at the current depth) down to the first key ≥ `target` below it,
    /// or past its last key to the next leaf.
    private func descend(from start: PageNo, to target: UnsafeRawBufferPointer) throws -> Bool {
        var node = try pages.node(start)
        while !node.isLeaf {
            let i = try node.branchSearch(target)
            try push(node.pgno, i)
            node = try pages.node(try node.child(i))
        }
        let (index, _) = try node.leafSearch(target)
        try push(node.pgno, index)
        leaf = node
        if index >= node.count { return try climbForward() }
        return try load(node, index)
    }

    /// Moves to the first key ≥ `target`, like `seek`, searching from where the cursor is when the
    /// target is not behind it: within the current leaf when the leaf's range holds the target,
    /// else down from the lowest page on the cursor's path whose range holds it. A merge or a
    /// zig-zag over sorted keys (several words' entries, intersected) moves a cursor a little
    /// ahead many times; each such move then costs one leaf search instead of a descent from the
    /// root. An unpositioned cursor, or a target behind its key, seeks from the root. Like `next`,
    /// it throws `StorageError.cursorInvalidated` after a write to the transaction.
    ///
    /// ```swift
    /// var more = try cursor.seek(Array("a".utf8))
    /// if more { more = try cursor.seekForward(Array("b".utf8)) }   // first key ≥ "b"
    /// ```
    @discardableResult
    public func seekForward(_ target: UnsafeRawBufferPointer) throws -> Bool {
        if version != pages.version { throw StorageError.cursorInvalidated }
        guard isPositioned, depth > 0, compareBytes(key, target) <= 0 else { return try seek(target) }
        return try seekNear(target)
    }

    /// `seekForward` with the target in an array.
    ///
    /// ```swift
    /// if try cursor.seekForward(Array("b".utf8)) { print(Array(cursor.key)) }
    /// ```
    @discardableResult
    public func seekForward(_ target: [UInt8]) throws -> Bool {
        try target.withUnsafeBytes { try seekForward($0) }
    }

    /// Moves to the first key ≥ `target`.
    ///
    /// ```swift
    /// var more = try cursor.seek(Array("m".utf8))   // first key ≥ "m"
    /// while more { print(Array(cursor.key)); more = try cursor.next() }
    /// ```
    @discardableResult
    public func seek(_ target: [UInt8]) throws -> Bool {
        try target.withUnsafeBytes { try seek($0) }
    }

    /// Moves to the entry at `position` in key order (0 is the smallest key), in time that grows
    /// with the tree's depth, not with `position`: branches record how many entries lie below each
    /// child. Returns false (and leaves the cursor unpositioned) when `position` is negative or not
    /// below the tree's count.
    ///
    /// ```swift
    /// let cursor = try txn.tree("items")!.cursor()
    /// if try cursor.seek(toPosition: 1_000) { print(cursor.key.count) }   // the 1,001st key
    /// ```
    @discardableResult
    public func seek(toPosition position: Int) throws -> Bool {
        try settle()
        reset()
        if root == 0 || position < 0 { return false }
        var remaining = UInt64(position)
        var node = try pages.node(root)
        while !node.isLeaf {
            var chosen: Int?
            for i in 0..<node.count {
                let below = try entries(of: node, child: i)
                if remaining < below { chosen = i; break }
                remaining -= below
            }
            guard let chosen else { reset(); return false }
            try push(node.pgno, chosen)
            node = try pages.node(try node.child(chosen))
        }
        guard remaining < UInt64(node.count) else {
            if depth == 0 { reset(); return false }
            throw StorageError.corrupt(page: node.pgno, reason: "leaf holds \(node.count) entries, its parent counts more")
        }
        try push(node.pgno, Int(remaining))
        leaf = node
        return try load(node, Int(remaining))
    }

    /// The position of the entry under the cursor in key order: how many keys are smaller. Nil
    /// when the cursor is not on an entry.
    ///
    /// ```swift
    /// let cursor = try txn.tree("items")!.cursor()
    /// if try cursor.seek(Array("m".utf8)) { print(try cursor.position()!) }   // keys below "m"
    /// ```
    public func position() throws -> Int? {
        if version != pages.version { throw StorageError.cursorInvalidated }
        guard isPositioned, depth > 0 else { return nil }
        var total = UInt64(frames[depth - 1].index)
        for level in 0..<(depth - 1) {
            let frame = frames[level]
            let node = try pages.node(frame.pgno)
            for i in 0..<min(frame.index, node.count) {
                let (sum, overflow) = total.addingReportingOverflow(try entries(of: node, child: i))
                // Bounded, so that callers may add to a position: only damaged counts get here.
                if overflow || sum > Self.maxEntries {
                    throw StorageError.corrupt(page: frame.pgno, reason: "branch counts add up to more entries than a file can hold")
                }
                total = sum
            }
        }
        return Int(total)
    }

    /// Checks the checksums of the leaf under the cursor and of its value's overflow run (see
    /// `PageMap.verifySealed`): for what a writer acts on without copying it (the free list).
    func verifySealed(leafToo: Bool = true) throws {
        guard isPositioned, depth > 0, let leaf else { return }
        if leafToo { try pages.verifySealed(leaf.pgno) }
        if case .overflow(let run, _) = try leaf.leafEntry(frames[depth - 1].index).value { try pages.verifySealed(run) }
    }

    /// `verifySealed` for every page from the root down to the entry (branches too: a damaged
    /// branch can lead to another tree's sealed pages), each checked once across calls with
    /// the same `verified`.
    func verifyPathSealed(verified: inout Set<PageNo>) throws {
        guard isPositioned, depth > 0, let leaf else { return }
        for level in 0..<depth where verified.insert(frames[level].pgno).inserted {
            try pages.verifySealed(frames[level].pgno)
        }
        if case .overflow(let run, _) = try leaf.leafEntry(frames[depth - 1].index).value { try pages.verifySealed(run) }
    }

    /// The leaf page under the cursor.
    var leafPage: PageNo? { isPositioned ? leaf?.pgno : nil }

    /// The first page of the overflow run holding the current value, nil for a value in the leaf.
    func overflowRun() throws -> PageNo? {
        guard isPositioned, depth > 0, let leaf else { return nil }
        if case .overflow(let run, _) = try leaf.leafEntry(frames[depth - 1].index).value { return run }
        return nil
    }

    /// More entries than any tree holds (2^40 pages of at most 64 KiB).
    static let maxEntries: UInt64 = 1 << 58

    /// Entries below child `i` of a branch: recorded on a counted branch, counted by a walk below
    /// a format-2 branch (a file opened read-only without its upgrade).
    private func entries(of node: Node, child i: Int) throws -> UInt64 {
        if let recorded = try node.childCount(i) { return recorded }
        var seen: Set<PageNo> = []
        return try entries(below: try node.child(i), depth: depth, seen: &seen)
    }

    private func entries(below pgno: PageNo, depth level: Int, seen: inout Set<PageNo>) throws -> UInt64 {
        if level > maxTreeDepth { throw StorageError.corrupt(page: pgno, reason: "tree deeper than \(maxTreeDepth) levels") }
        // A damaged tree may reach a page by two paths: each would be walked again (2^depth walks).
        if !seen.insert(pgno).inserted { throw StorageError.corrupt(page: pgno, reason: "page reached by two paths of one tree") }
        let node = try pages.node(pgno)
        if let count = try node.subtreeCount() { return count }
        var total: UInt64 = 0
        for i in 0..<node.count { total &+= try entries(below: try node.child(i), depth: level + 1, seen: &seen) }
        return total
    }

    /// Moves to the next key. Returns false (and leaves the cursor unpositioned) past the end.
    ///
    /// ```swift
    /// var more = try cursor.first()
    /// while more { handle(cursor.key, cursor.value); more = try cursor.next() }
    /// ```
    @discardableResult
    public func next() throws -> Bool {
        if version != pages.version { throw StorageError.cursorInvalidated }
        guard depth > 0, let node = leaf else { return false }
        let index = frames[depth - 1].index + 1
        if index < node.count {
            frames[depth - 1].index = index
            return try load(node, index)
        }
        let previous = key
        guard try climbForward() else { return false }
        try checkOrder(previous, ascending: true)
        return true
    }

    /// After stepping into another leaf: its key must lie beyond the one before. In a damaged
    /// file whose branches reach one page by two paths, a walk would repeat keys, and with enough
    /// such pages never end (2^depth paths); this costs one comparison per leaf.
    private func checkOrder(_ previous: UnsafeRawBufferPointer, ascending: Bool) throws {
        let order = compareBytes(key, previous)
        if ascending ? order > 0 : order < 0 { return }
        let page = leaf?.pgno ?? 0
        reset()
        throw StorageError.corrupt(page: page, reason: "leaf's keys are out of order with the leaf before it (a page reached by two paths?)")
    }

    /// Moves to the previous key. Returns false (and leaves the cursor unpositioned) before the start.
    ///
    /// ```swift
    /// var more = try cursor.last()   // newest first, for keys that grow with time
    /// while more { handle(cursor.key, cursor.value); more = try cursor.prev() }
    /// ```
    @discardableResult
    public func prev() throws -> Bool {
        if version != pages.version { throw StorageError.cursorInvalidated }
        guard depth > 0, let node = leaf else { return false }
        let index = frames[depth - 1].index - 1
        if index >= 0 {
            frames[depth - 1].index = index
            return try load(node, index)
        }
        // Climb to the first ancestor with a child on the left, then take the rightmost path down.
        depth -= 1
        while depth > 0 {
            let parent = frames[depth - 1]
            if parent.index > 0 {
                frames[depth - 1].index = parent.index - 1
                let parentNode = try pages.node(parent.pgno)
                let previous = key
                guard try descendEdge(from: try parentNode.child(parent.index - 1), first: false) else { return false }
                try checkOrder(previous, ascending: false)
                return true
            }
            depth -= 1
        }
        reset()
        return false
    }

    /// From a leaf whose entries are used up: the next leaf's first entry.
    private func climbForward() throws -> Bool {
        depth -= 1
        while depth > 0 {
            let parent = frames[depth - 1]
            let parentNode = try pages.node(parent.pgno)
            if parent.index + 1 < parentNode.count {
                frames[depth - 1].index = parent.index + 1
                return try descendEdge(from: try parentNode.child(parent.index + 1), first: true)
            }
            depth -= 1
        }
        reset()
        return false
    }

    private func descendEdge(from start: PageNo, first: Bool) throws -> Bool {
        var node = try pages.node(start)
        while true {
            if node.isLeaf {
                if node.count == 0 {
                    // Only an empty root leaf can be empty; anything else is corrupt.
                    if depth == 0 { reset(); return false }
                    throw StorageError.corrupt(page: node.pgno, reason: "empty leaf below a branch")
                }
                let index = first ? 0 : node.count - 1
                try push(node.pgno, index)
                leaf = node
                return try load(node, index)
            }
            let i = first ? 0 : node.count - 1
            try push(node.pgno, i)
            node = try pages.node(try node.child(i))
        }
    }

    @inline(__always) private func load(_ node: Node, _ index: Int) throws -> Bool {
        let entry = try node.leafEntry(index)
        currentKey = entry.key
        switch entry.value {
        case .inline(let bytes): currentValue = bytes
        case .overflow(let page, let length): currentValue = try pages.overflow(page, length: length)
        }
        positioned = true
        return true
    }

    private func reset() {
        depth = 0
        leaf = nil
        positioned = false
        currentKey = UnsafeRawBufferPointer(start: nil, count: 0)
        currentValue = UnsafeRawBufferPointer(start: nil, count: 0)
        version = pages.version
    }
}
