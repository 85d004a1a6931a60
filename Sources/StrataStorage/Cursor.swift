/// An ordered position in one tree of a transaction.
///
/// Keys and values are views into the memory map (or the writer's own pages), valid until the
/// transaction ends; in a write transaction, until the next write. Copy them (`Array(cursor.key)`)
/// to keep them longer.
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
    private let root: PageNo
    /// Keeps the transaction (and so the snapshot and the map) alive while the cursor is.
    private let owner: AnyObject
    private var stack: [(pgno: PageNo, index: Int)] = []
    private var leaf: Node?
    private var version: UInt64
    /// The key at the cursor. Empty when the cursor is not positioned.
    public private(set) var key = UnsafeRawBufferPointer(start: nil, count: 0)
    /// The value at the cursor. Empty when the cursor is not positioned.
    public private(set) var value = UnsafeRawBufferPointer(start: nil, count: 0)
    /// Whether the cursor is on an entry.
    public private(set) var isPositioned = false

    init(pages: PageMap, root: PageNo, owner: AnyObject) {
        self.pages = pages
        self.root = root
        self.owner = owner
        self.version = pages.version
    }

    /// Moves to the smallest key. Returns false when the tree is empty.
    @discardableResult
    public func first() throws -> Bool {
        try descend(toEdge: .first)
    }

    /// Moves to the largest key. Returns false when the tree is empty.
    @discardableResult
    public func last() throws -> Bool {
        try descend(toEdge: .last)
    }

    /// Moves to the first key ≥ `target`. Returns false when every key is smaller.
    @discardableResult
    public func seek(_ target: UnsafeRawBufferPointer) throws -> Bool {
        reset()
        if root == 0 { return false }
        var node = try pages.node(root)
        while !node.isLeaf {
            if stack.count >= maxTreeDepth { throw StorageError.corrupt(page: node.pgno, reason: "tree deeper than \(maxTreeDepth) levels") }
            let i = try node.branchSearch(target)
            stack.append((node.pgno, i))
            node = try pages.node(try node.child(i))
        }
        let (index, _) = try node.leafSearch(target)
        stack.append((node.pgno, index))
        leaf = node
        if index >= node.count { return try next(advancing: false) }
        return try load()
    }

    /// Moves to the first key ≥ `target`.
    @discardableResult
    public func seek(_ target: [UInt8]) throws -> Bool {
        try target.withUnsafeBytes { (t) throws -> Bool in try seek(t) }
    }

    /// Moves to the next key. Returns false (and leaves the cursor unpositioned) past the end.
    @discardableResult
    public func next() throws -> Bool {
        try checkVersion()
        return try next(advancing: true)
    }

    /// Moves to the previous key. Returns false (and leaves the cursor unpositioned) before the start.
    @discardableResult
    public func prev() throws -> Bool {
        try checkVersion()
        guard isPositioned || !stack.isEmpty else { return false }
        guard var top = stack.popLast() else { return false }
        if top.index > 0 {
            top.index -= 1
            stack.append(top)
            return try load()
        }
        // Climb to the first ancestor with a child on the left, then take the rightmost path down.
        while let parent = stack.popLast() {
            if parent.index > 0 {
                stack.append((parent.pgno, parent.index - 1))
                let parentNode = try pages.node(parent.pgno)
                return try descendEdge(from: try parentNode.child(parent.index - 1), first: false)
            }
        }
        reset()
        return false
    }

    private func next(advancing: Bool) throws -> Bool {
        guard var top = stack.popLast() else { return false }
        if advancing { top.index += 1 }
        if let leaf, top.index < leaf.count {
            stack.append(top)
            return try load()
        }
        while let parent = stack.popLast() {
            let parentNode = try pages.node(parent.pgno)
            if parent.index + 1 < parentNode.count {
                stack.append((parent.pgno, parent.index + 1))
                return try descendEdge(from: try parentNode.child(parent.index + 1), first: true)
            }
        }
        reset()
        return false
    }

    private enum Edge { case first, last }

    private func descend(toEdge edge: Edge) throws -> Bool {
        reset()
        if root == 0 { return false }
        return try descendEdge(from: root, first: edge == .first)
    }

    private func descendEdge(from start: PageNo, first: Bool) throws -> Bool {
        var node = try pages.node(start)
        while true {
            if stack.count >= maxTreeDepth { throw StorageError.corrupt(page: node.pgno, reason: "tree deeper than \(maxTreeDepth) levels") }
            if node.isLeaf {
                leaf = node
                if node.count == 0 {
                    // Only an empty root leaf can be empty; anything else is corrupt.
                    if stack.isEmpty { reset(); return false }
                    throw StorageError.corrupt(page: node.pgno, reason: "empty leaf below a branch")
                }
                stack.append((node.pgno, first ? 0 : node.count - 1))
                return try load()
            }
            let i = first ? 0 : node.count - 1
            stack.append((node.pgno, i))
            node = try pages.node(try node.child(i))
        }
    }

    private func load() throws -> Bool {
        guard let top = stack.last else { return false }
        if leaf?.pgno != top.pgno { leaf = try pages.node(top.pgno) }
        guard let leaf, leaf.isLeaf, top.index < leaf.count else {
            throw StorageError.corrupt(page: top.pgno, reason: "cursor reached a non-leaf or an index past the page")
        }
        key = try leaf.key(top.index)
        value = try pages.resolve(try leaf.value(top.index))
        isPositioned = true
        version = pages.version
        return true
    }

    private func reset() {
        stack.removeAll(keepingCapacity: true)
        leaf = nil
        isPositioned = false
        key = UnsafeRawBufferPointer(start: nil, count: 0)
        value = UnsafeRawBufferPointer(start: nil, count: 0)
        version = pages.version
    }

    private func checkVersion() throws {
        if version != pages.version { throw StorageError.cursorInvalidated }
    }
}
