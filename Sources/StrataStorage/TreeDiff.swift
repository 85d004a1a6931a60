// Changes between two snapshots of a tree, found by walking only the pages that differ.
//
// Copy-on-write trees share every unchanged subtree by page number: a commit copies the path to
// each page it changes and leaves every other page where it was. So two versions of a tree are a
// sorted merge of their entries in which any subtree that both sides reach under the same page
// number can be skipped whole. The walk expands a side only where the two differ: two roots that
// differ are opened, their children compared by page number, and only the children that differ
// are opened in turn. Changing one key of a million-entry tree costs a root-to-leaf path on each
// side, not a scan.
//
// Why the same page number means the same content: a page is never written while a snapshot that
// can see it lives (FORMAT.md §2, reuse rule). Both snapshots are alive during the walk, so a page
// the older one sees cannot have been freed and reused by any commit before the newer one: if
// both trees reach page P, they reach the same bytes. (A read-only store's snapshots are not
// registered, so there the caller must validate both snapshots after the walk.)

/// How a key differs between two snapshots of a tree.
///
/// ```swift
/// try newer.forEachChange(in: "users", since: older) { change, key, _, _ in
///     if change == .deleted { forget(Array(key)) }
///     return true
/// }
/// ```
public enum KeyChange: Sendable, Equatable {
    /// In the newer snapshot only.
    case inserted
    /// In the older snapshot only.
    case deleted
    /// In both, with different values.
    case updated
}

/// The merge of two versions of one tree. Internal: the public entry points are on
/// `ReadTransaction`, and the cross-process commit watcher (CommitWatch.swift) calls it with
/// pinned versions that are not transactions.
struct TreeDiff {
    /// Pages (or overflow runs) read by the walk, both sides together; tests use it to show that
    /// only the pages that differ are read.
    private(set) var pagesRead = 0

    /// Calls `visit` for every key whose value differs between the tree at `oldRoot` (read through
    /// `oldPages`) and the tree at `newRoot` (through `newPages`), in ascending key order, until
    /// it returns false. Returns false when stopped. The buffers are views valid during the call.
    mutating func run(
        old oldPages: PageMap, root oldRoot: PageNo, new newPages: PageMap, root newRoot: PageNo,
        _ visit: (KeyChange, UnsafeRawBufferPointer, UnsafeRawBufferPointer?, UnsafeRawBufferPointer?) throws -> Bool
    ) throws -> Bool {
        if oldRoot == newRoot { return true }  // the same tree (or both empty)
        var a = try Side(pages: oldPages, root: oldRoot, pagesRead: &pagesRead)
        var b = try Side(pages: newPages, root: newRoot, pagesRead: &pagesRead)
        while true {
            switch (a.current, b.current) {
            case (.end, .end):
                return true
            case (.sub(let p, _, _), .sub(let q, _, _)) where p == q:
                // The same subtree on both sides: nothing in it differs.
                try a.advance()
                try b.advance()
            case (.entry(let ka, let va), .entry(let kb, let vb)):
                let order = compareBytes(ka, kb)
                if order < 0 {
                    if try !visit(.deleted, ka, try oldPages.resolve(va), nil) { return false }
                    try a.advance()
                } else if order > 0 {
                    if try !visit(.inserted, kb, nil, try newPages.resolve(vb)) { return false }
                    try b.advance()
                } else {
                    if try !sameValue(va, oldPages, vb, newPages) {
                        if try !visit(.updated, ka, try oldPages.resolve(va), try newPages.resolve(vb)) { return false }
                    }
                    try a.advance()
                    try b.advance()
                }
            case (.end, .entry(let kb, let vb)):
                if try !visit(.inserted, kb, nil, try newPages.resolve(vb)) { return false }
                try b.advance()
            case (.entry(let ka, let va), .end):
                if try !visit(.deleted, ka, try oldPages.resolve(va), nil) { return false }
                try a.advance()
            case (.end, .sub):
                try b.expand(pagesRead: &pagesRead)
            case (.sub, .end):
                try a.expand(pagesRead: &pagesRead)
            case (.sub(_, _, let lo), .entry(let kb, let vb)):
                // The subtree's keys are all ≥ lo: an entry below lo has no partner on that side.
                if let lo, compareBytes(lo, kb) > 0 {
                    if try !visit(.inserted, kb, nil, try newPages.resolve(vb)) { return false }
                    try b.advance()
                } else {
                    try a.expand(pagesRead: &pagesRead)
                }
            case (.entry(let ka, let va), .sub(_, _, let lo)):
                if let lo, compareBytes(lo, ka) > 0 {
                    if try !visit(.deleted, ka, try oldPages.resolve(va), nil) { return false }
                    try a.advance()
                } else {
                    try b.expand(pagesRead: &pagesRead)
                }
            case (.sub(_, let ha, let la), .sub(_, let hb, let lb)):
                // Open the taller subtree first (a tree that grew a level keeps its old subtrees
                // one level down), then the one that starts first, so that equal subtrees meet.
                if ha != hb {
                    if ha > hb { try a.expand(pagesRead: &pagesRead) } else { try b.expand(pagesRead: &pagesRead) }
                } else {
                    let order = Side.compareLower(la, lb)
                    if order <= 0 { try a.expand(pagesRead: &pagesRead) }
                    if order >= 0 { try b.expand(pagesRead: &pagesRead) }
                }
            }
        }
    }

    /// Whether two leaf values hold the same bytes. The same overflow run on both sides is the
    /// same value (see the file comment); anything else is compared byte for byte.
    private mutating func sameValue(_ a: LeafValue, _ pa: PageMap, _ b: LeafValue, _ pb: PageMap) throws -> Bool {
        if case .overflow(let p, let la) = a, case .overflow(let q, let lb) = b, p == q, la == lb { return true }
        let x = try pa.resolve(a)
        let y = try pb.resolve(b)
        if case .overflow = a { pagesRead += 1 }
        if case .overflow = b { pagesRead += 1 }
        return x.count == y.count && compareBytes(x, y) == 0
    }

    /// One side of the merge: the path from the root to the current item.
    private struct Side {
        enum Item {
            /// A whole subtree not yet opened: its page, its height (0 for a leaf) and the lowest
            /// key it may hold (nil: no lower bound).
            case sub(PageNo, Int, UnsafeRawBufferPointer?)
            case entry(UnsafeRawBufferPointer, LeafValue)
            case end
        }

        struct Frame {
            var node: Node
            var index: Int
            /// Height of `node` (0 for a leaf).
            var height: Int
            /// The lowest key `node` may hold (the bound of its first child or entry).
            var lower: UnsafeRawBufferPointer?
        }

        let pages: PageMap
        private var frames: [Frame] = []
        private(set) var current: Item = .end
        /// The last entry's key: each must be above it. In a damaged file whose branches reach one
        /// page by two paths, entries would repeat, and with enough such pages the walk never ends.
        private var lastKey: UnsafeRawBufferPointer?

        init(pages: PageMap, root: PageNo, pagesRead: inout Int) throws {
            self.pages = pages
            guard root != 0 else { return }
            // The tree's height, from its leftmost path (every leaf is at the same depth).
            var height = 0
            var node = try pages.node(root)
            pagesRead += 1
            while !node.isLeaf {
                height += 1
                if height > maxTreeDepth { throw StorageError.corrupt(page: node.pgno, reason: "tree deeper than \(maxTreeDepth) levels") }
                node = try pages.node(try node.child(0))
                pagesRead += 1
            }
            current = .sub(root, height, nil)
            frames.reserveCapacity(height + 1)
            try open(root, height: height, lower: nil, pagesRead: &pagesRead)
        }

        /// Nil sorts first: no bound is below every key.
        static func compareLower(_ a: UnsafeRawBufferPointer?, _ b: UnsafeRawBufferPointer?) -> Int {
            switch (a, b) {
            case (nil, nil): return 0
            case (nil, _): return -1
            case (_, nil): return 1
            case (let x?, let y?): return compareBytes(x, y)
            }
        }

        /// Replaces the current subtree by its first child or entry.
        mutating func expand(pagesRead: inout Int) throws {
            guard case .sub(let page, let height, let lower) = current else { return }
            try open(page, height: height, lower: lower, pagesRead: &pagesRead)
        }

        private mutating func open(_ page: PageNo, height: Int, lower: UnsafeRawBufferPointer?, pagesRead: inout Int) throws {
            if frames.count > maxTreeDepth { throw StorageError.corrupt(page: page, reason: "tree deeper than \(maxTreeDepth) levels") }
            let node = try pages.node(page)
            pagesRead += 1
            if node.isLeaf != (height == 0) {
                throw StorageError.corrupt(
                    page: page, reason: "a \(node.isLeaf ? "leaf" : "branch") where the tree's height puts a \(height == 0 ? "leaf" : "branch")")
            }
            if node.count == 0 {
                // Only a root leaf may be empty.
                if !frames.isEmpty { throw StorageError.corrupt(page: page, reason: "empty leaf below a branch") }
                current = .end
                return
            }
            frames.append(Frame(node: node, index: 0, height: height, lower: lower))
            try load()
        }

        /// Moves past the current item (a subtree is skipped whole).
        mutating func advance() throws {
            while var top = frames.popLast() {
                top.index += 1
                if top.index < top.node.count {
                    frames.append(top)
                    return try load()
                }
            }
            current = .end
        }

        private mutating func load() throws {
            guard let top = frames.last else { current = .end; return }
            if top.node.isLeaf {
                let entry = try top.node.leafEntry(top.index)
                if let lastKey, compareBytes(entry.key, lastKey) <= 0 {
                    throw StorageError.corrupt(page: top.node.pgno, reason: "keys out of order with those before them (a page reached by two paths?)")
                }
                lastKey = entry.key
                current = .entry(entry.key, entry.value)
            } else {
                let lower = top.index == 0 ? top.lower : try top.node.key(top.index)
                current = .sub(try top.node.child(top.index), top.height - 1, lower)
            }
        }
    }
}

extension ReadTransaction {
    /// Calls `body` for every key of tree `name` whose value differs between `older` and this
    /// snapshot, in ascending key order, until it returns false (then returns false). Only the
    /// pages that differ between the two versions are read, so the cost follows the size of the
    /// change, not of the tree. A tree missing from a snapshot counts as empty there; a tree
    /// dropped and created again is compared entry by entry. Values are views valid during the
    /// call (nil on the side that lacks the key). Both snapshots must be of this store and open.
    ///
    /// ```swift
    /// let before = try store.beginRead()
    /// try store.write { txn in try txn.createTree("users").put(Array("u9".utf8), Array("Ivo".utf8)) }
    /// let after = try store.beginRead()
    /// try after.forEachChange(in: "users", since: before) { change, key, old, new in
    ///     print(change, String(decoding: key, as: UTF8.self))   // inserted u9
    ///     return true
    /// }
    /// ```
    @discardableResult
    public func forEachChange(
        in name: String, since older: ReadTransaction,
        _ body: (
            _ change: KeyChange, _ key: UnsafeRawBufferPointer,
            _ oldValue: UnsafeRawBufferPointer?, _ newValue: UnsafeRawBufferPointer?
        ) throws -> Bool
    ) throws -> Bool {
        try checkComparable(older)
        let oldRoot = try older.tree(name)?.info.root ?? 0
        let newRoot = try tree(name)?.info.root ?? 0
        var diff = TreeDiff()
        let finished = try diff.run(old: older.pages, root: oldRoot, new: pages, root: newRoot, body)
        try older.validate()
        try validate()
        return finished
    }

    /// The keys of tree `name` whose value differs between `older` and this snapshot, ascending;
    /// nil when there are more than `limit` (the walk stops there).
    ///
    /// ```swift
    /// if let keys = try after.changedKeys(in: "users", since: before, limit: 10_000) { print(keys.count) }
    /// ```
    public func changedKeys(in name: String, since older: ReadTransaction, limit: Int = .max) throws -> [[UInt8]]? {
        var keys: [[UInt8]] = []
        let finished = try forEachChange(in: name, since: older) { _, key, _, _ in
            if keys.count >= limit { return false }
            keys.append(Array(key))
            return true
        }
        return finished ? keys : nil
    }

    /// The names of the trees created, dropped or written between `older` and this snapshot
    /// (found the same way, from the catalog tree), ascending. A tree whose pages compaction moved
    /// (Compaction.swift) is listed too, though `forEachChange` finds no key changed in it.
    ///
    /// ```swift
    /// print(try after.changedTrees(since: before))   // ["users"]
    /// ```
    public func changedTrees(since older: ReadTransaction) throws -> [String] {
        try checkComparable(older)
        var names: [String] = []
        var diff = TreeDiff()
        _ = try diff.run(old: older.pages, root: older.meta.catalog.root, new: pages, root: meta.catalog.root) { _, key, _, _ in
            names.append(String(decoding: key, as: UTF8.self))
            return true
        }
        try older.validate()
        try validate()
        return names
    }

    /// Pages read by `forEachChange` for tree `name` (for tests).
    func pagesReadByDiff(in name: String, since older: ReadTransaction) throws -> Int {
        var diff = TreeDiff()
        _ = try diff.run(
            old: older.pages, root: try older.tree(name)?.info.root ?? 0,
            new: pages, root: try tree(name)?.info.root ?? 0
        ) { _, _, _, _ in true }
        return diff.pagesRead
    }

    private func checkComparable(_ older: ReadTransaction) throws {
        if older.env !== env {
            throw StorageError.internalError("changes can only be found between two snapshots of the same store")
        }
    }
}
