// Per-tree statistics (depth, pages, entries, leaf fill): what `strata trees` prints.

/// What kind of tree a `TreeStats` describes.
///
/// ```swift
/// let userTrees = try store.treeStats().filter { $0.kind == .user }
/// ```
public enum TreeKind: Sendable, Equatable {
    /// A named tree of the user's keys and values.
    case user
    /// The internal catalog: tree names to their roots and counts.
    case catalog
    /// The internal free-page tree.
    case freePages
}

/// Shape and space use of one tree.
///
/// ```swift
/// for tree in try store.treeStats() where tree.kind == .user {
///     print(tree.name, tree.depth, tree.leafPages, tree.entries, tree.fillFactor)
/// }
/// ```
public struct TreeStats: Sendable, Equatable {
    /// The tree's name; "(catalog)" and "(free pages)" for the internal trees.
    public var name: String
    /// Whether this is a named tree, the catalog or the free-page tree.
    public var kind: TreeKind
    /// Root page, 0 for an empty tree.
    public var root: UInt64
    /// Levels from root to leaf: 0 for an empty tree, 1 for a tree that is a single leaf.
    public var depth: Int
    /// Branch (interior) pages.
    public var branchPages: Int
    /// Leaf pages.
    public var leafPages: Int
    /// Pages of the overflow runs that hold the tree's large values.
    public var overflowPages: Int
    /// Entries found in the leaves.
    public var entries: UInt64
    /// Bytes in use in the leaf pages: headers, slots and live entries.
    public var leafBytesUsed: Int
    /// The file's page size, for `fillFactor`.
    public var pageSize: Int

    /// An empty tree's statistics, to be filled in by a walk of its pages.
    public init(name: String, kind: TreeKind, pageSize: Int) {
        self.name = name
        self.kind = kind
        self.root = 0
        self.depth = 0
        self.branchPages = 0
        self.leafPages = 0
        self.overflowPages = 0
        self.entries = 0
        self.leafBytesUsed = 0
        self.pageSize = pageSize
    }

    /// Every page the tree occupies.
    public var totalPages: Int { branchPages + leafPages + overflowPages }

    /// Used bytes of the leaves over their capacity (leaf pages × page size), 0 for an empty tree.
    public var fillFactor: Double {
        leafPages == 0 ? 0 : Double(leafBytesUsed) / Double(leafPages * pageSize)
    }
}

extension Store {
    /// Depth, pages, entries and leaf fill of every named tree (in name order), followed by the
    /// internal catalog (`kind == .catalog`) and free-page tree (`kind == .freePages`).
    /// Checksums and recorded entry counts are not verified (that is `check()`'s job); a
    /// structural error (a bad page, keys out of order, a page reached twice) throws
    /// `StorageError.corrupt`.
    ///
    /// ```swift
    /// for tree in try store.treeStats() {
    ///     print("\(tree.name): \(tree.entries) entries in \(tree.totalPages) pages")
    /// }
    /// ```
    public func treeStats() throws -> [TreeStats] {
        try read { txn in
            let inspector = try Inspector(store: self, txn: txn, verify: false, maxProblems: 1)
            let trees = inspector.walkAllTrees()
            if let problem = inspector.problems.first {
                throw StorageError.corrupt(page: problem.page ?? 0, reason: problem.message)
            }
            return trees
        }
    }
}
