// Format 2 → 3: branch pages gain the entry count of each child's subtree (FORMAT.md §1.3, §9).
//
// Leaves and overflow runs are the same in both formats, so the upgrade rewrites only branch
// pages: for each tree (the catalog, the free-page tree, every named tree), it lists the leaves in
// key order with the separator key that leads to each, frees the old branches, and builds the
// branch levels again bottom-up, each entry with its child's count. Branches are about one page in
// a hundred, so this reads every leaf's header and writes a small fraction of the file, once, in
// one ordinary commit: a crash during it leaves the format-2 file as it was.

extension WriteTransaction {
    /// Whether this transaction's base commit was written by format 2 (branches without counts).
    var basedOnUncountedBranches: Bool { base.formatVersion < 3 }

    /// Rewrites every tree's branches as counted branches.
    func upgradeToCountedBranches() throws {
        guard basedOnUncountedBranches else { return }
        let names = try treeNames()
        catalog = try countedBranches(catalog, name: "the catalog")
        freeTree = try countedBranches(freeTree, name: "the free-page tree")
        for name in names {
            let tree = try createTree(name)
            try tree.replaceInfo { try countedBranches($0, name: name) }
        }
    }

    private struct Child {
        var page: PageNo
        var count: UInt64
        /// The smallest key that leads to it (empty for the leftmost).
        var low: [UInt8]
    }

    /// The tree `info` with its branches rebuilt as counted branches.
    private func countedBranches(_ info: TreeInfo, name: String) throws -> TreeInfo {
        if try info.root == 0 || pages.node(info.root).isLeaf { return info }
        var level: [Child] = []
        var seen: Set<PageNo> = []  // a damaged tree may reach a page by two paths (2^depth walks)
        func walk(_ pgno: PageNo, low: [UInt8], depth: Int) throws {
            if depth > maxTreeDepth { throw StorageError.corrupt(page: pgno, reason: "tree deeper than \(maxTreeDepth) levels") }
            if !seen.insert(pgno).inserted { throw StorageError.corrupt(page: pgno, reason: "page reached by two paths of one tree") }
            let node = try pages.node(pgno)
            if node.isLeaf {
                level.append(Child(page: pgno, count: UInt64(node.count), low: low))
                return
            }
            for i in 0..<node.count {
                try walk(try node.child(i), low: i == 0 ? low : Array(try node.key(i)), depth: depth + 1)
            }
            try free(pgno)
        }
        try walk(info.root, low: [], depth: 0)
        let total = level.reduce(UInt64(0)) { $0 &+ $1.count }
        if total != info.count {
            throw StorageError.corrupt(page: info.root, reason: "\(name) records \(info.count) entries but its leaves hold \(total)")
        }
        while level.count > 1 {
            var next: [Child] = []
            var current: (page: PageNo, node: MutableNode, low: [UInt8])?
            for child in level {
                if let open = current {
                    let entry = branchEntry(child: child.page, count: child.count, key: child.low)
                    if open.node.fits(entry.count) {
                        entry.withUnsafeBytes { open.node.append($0) }
                        continue
                    }
                    next.append(Child(page: open.page, count: open.node.subtreeCount, low: open.low))
                }
                let page = try allocate()
                let buffer = newDirty(page)
                MutableNode.initialize(buffer, pageSize: pageSize, type: .countedBranch)
                let node = MutableNode(base: buffer, pageSize: pageSize)
                branchEntry(child: child.page, count: child.count, key: []).withUnsafeBytes { node.append($0) }
                current = (page, node, child.low)
            }
            if let open = current { next.append(Child(page: open.page, count: open.node.subtreeCount, low: open.low)) }
            level = next
        }
        return TreeInfo(root: level[0].page, count: info.count)
    }
}
