// The walker under `Store.check()` and `Store.treeStats()`: one pass over a snapshot's trees
// that marks which page is used by what.
//
// Everything here reads a file that may be corrupt. It goes through the engine's throwing,
// bounds-checked accessors (`Node`, `PageMap`, `Meta.decode`, `FreeListFormat`), never follows a
// page reference outside the file, never visits a page twice (so reference cycles end), and turns
// every error into a reported problem instead of stopping or crashing.

/// Walks one snapshot's trees, marking which page is used by what.
final class Inspector {
    let store: Store
    let txn: ReadTransaction
    let meta: Meta
    let pages: PageMap
    let pageSize: Int
    let pageCount: UInt64
    /// Pages the file really holds, at most `pageCount`: nothing at or past it is read.
    let readable: UInt64
    let fileSize: UInt64
    let verify: Bool
    let maxProblems: Int
    let maxKey: Int
    /// Who uses each page below `readable`: 0 nobody, else an owner code.
    var owners: [UInt32]
    var problems: [CheckProblem] = []
    var omitted = 0
    var warnings: [CheckProblem] = []
    /// Tree names by slot: 0 the catalog, 1 the free-page tree, 2... the named trees.
    var slotNames = ["(catalog)", "(free pages)"]
    var freeChunks: [(freedBy: UInt64, entries: [FreeEntry], leaf: PageNo)] = []

    static let metaOwner: UInt32 = 1
    static let recordOwner: UInt32 = 2
    static let freeOwner: UInt32 = 3
    static func nodeOwner(_ slot: Int) -> UInt32 { UInt32(truncatingIfNeeded: 8 + 2 * slot) }
    static func overflowOwner(_ slot: Int) -> UInt32 { UInt32(truncatingIfNeeded: 9 + 2 * slot) }

    init(store: Store, txn: ReadTransaction, verify: Bool, maxProblems: Int) throws {
        self.store = store
        self.txn = txn
        self.meta = txn.meta
        self.pageSize = txn.meta.pageSize
        self.pageCount = txn.meta.pageCount
        self.fileSize = try store.env.file.size()
        self.readable = min(txn.meta.pageCount, fileSize / UInt64(txn.meta.pageSize))
        // Reads through the snapshot's map, limited to pages the file holds (a map access past
        // the end of the file would fault).
        self.pages = PageMap(base: txn.pages.base, pageSize: txn.meta.pageSize, limit: readable, isWrite: false)
        self.verify = verify
        self.maxProblems = max(maxProblems, 1)
        self.maxKey = Limits.maxKeySize(pageSize: txn.meta.pageSize)
        self.owners = [UInt32](repeating: 0, count: Int(readable))
        if readable > 0 { owners[0] = Inspector.metaOwner }
        if readable > 1 { owners[1] = Inspector.metaOwner }
    }

    // MARK: Reporting

    func problem(_ page: UInt64?, _ message: String) {
        if problems.count < maxProblems {
            problems.append(CheckProblem(page: page, message: message))
        } else {
            omitted += 1
        }
    }

    private func ownerName(_ code: UInt32) -> String {
        switch code {
        case 0: return "nothing"
        case Inspector.metaOwner: return "a meta page"
        case Inspector.recordOwner: return "the commit record"
        case Inspector.freeOwner: return "a free page"
        default:
            let slot = Int((code - 8) / 2)
            let isOverflow = (code - 8) % 2 == 1
            let tree: String
            switch slot {
            case 0: tree = "the catalog"
            case 1: tree = "the free-page tree"
            default: tree = slot < slotNames.count ? "tree '\(slotNames[slot])'" : "tree #\(slot)"
            }
            return isOverflow ? "an overflow page of \(tree)" : "a page of \(tree)"
        }
    }

    /// Marks `pgno` as used by `code`. False (and a problem) when something already uses it.
    func claim(_ pgno: UInt64, _ code: UInt32, from: UInt64?) -> Bool {
        guard pgno < readable else { return false }
        let existing = owners[Int(pgno)]
        if existing == 0 {
            owners[Int(pgno)] = code
            return true
        }
        if !verify {  // treeStats: only structure matters; a revisit is still a cycle or a shared page
            problem(pgno, "reached twice (as \(ownerName(code)) and as \(ownerName(existing)))")
            return false
        }
        if code == Inspector.freeOwner && existing == Inspector.freeOwner {
            problem(pgno, "listed free twice in the free-page tree")
        } else if code == Inspector.freeOwner {
            problem(pgno, "listed free but used as \(ownerName(existing))")
        } else if existing == Inspector.freeOwner {
            problem(pgno, "used as \(ownerName(code)) but listed free")
        } else {
            problem(pgno, "used twice: as \(ownerName(existing)) and as \(ownerName(code))" + (from.map { " (referenced from page \($0))" } ?? ""))
        }
        return false
    }

    /// Whether a reference to `count` pages at `pgno` stays inside the file. Reports when not.
    func inBounds(_ pgno: UInt64, count: UInt64 = 1, from: UInt64?, what: String) -> Bool {
        if pgno < 2 || pgno >= pageCount || count > pageCount - pgno {
            let span = count == 1 ? "page \(pgno)" : "pages \(pgno)..<\(pgno &+ count)"
            problem(from ?? pgno, "\(what) refers to \(span), outside 2..<\(pageCount)")
            return false
        }
        if pgno + count > readable {
            problem(pgno, "\(what) lies past the end of the file (\(readable) whole pages)")
            return false
        }
        return true
    }

    /// Page number, transaction id and (when verifying) checksum of a page or run inside the file.
    func checkHeader(_ pgno: UInt64, run: Int, expectedTxn: UInt64? = nil) {
        let p = pages.base + Int(pgno) * pageSize
        let named = p.u64(PageHeader.pageNumber)
        if named != pgno { problem(pgno, "header names page \(named) (a misdirected write?)") }
        let written = p.u64(PageHeader.txnid)
        if let expectedTxn, written != expectedTxn {
            problem(pgno, "written by transaction \(written), expected \(expectedTxn)")
        } else if written > meta.txnid {
            problem(pgno, "written by transaction \(written), newer than the snapshot's \(meta.txnid)")
        }
        if verify {
            let computed = pageChecksum(p, byteCount: run * pageSize)
            let stored = p.u64(PageHeader.checksum)
            if computed != stored {
                problem(pgno, "checksum mismatch (stored \(hex(stored)), computed \(hex(computed)))" + (run > 1 ? " over the \(run)-page run" : ""))
            }
        }
    }

    // MARK: Trees

    private struct Walk {
        let slot: Int
        var stats: TreeStats
        var leafDepth: Int?
        let keyLengths: ClosedRange<Int>
    }

    /// Walks the tree at `root`, calling `leaf` with each entry's key, its value (nil when it
    /// cannot be read) and its leaf page.
    private func walkTree(
        slot: Int, name: String, kind: TreeKind, root: PageNo, keyLengths: ClosedRange<Int>,
        leaf visitor: (UnsafeRawBufferPointer, UnsafeRawBufferPointer?, PageNo) -> Void
    ) -> TreeStats {
        var walk = Walk(slot: slot, stats: TreeStats(name: name, kind: kind, pageSize: pageSize), leafDepth: nil, keyLengths: keyLengths)
        walk.stats.root = root
        if root != 0 {
            visit(root, from: nil, depth: 0, lower: nil, upper: nil, walk: &walk, leaf: visitor)
        }
        walk.stats.depth = (walk.leafDepth ?? -1) + 1
        return walk.stats
    }

    /// Checks the subtree at `pgno` and returns how many entries it holds, nil when a problem
    /// left it uncounted (so a parent's recorded count is not compared with a partial one).
    @discardableResult
    private func visit(
        _ pgno: PageNo, from parent: PageNo?, depth: Int,
        lower: UnsafeRawBufferPointer?, upper: UnsafeRawBufferPointer?, walk: inout Walk,
        leaf visitor: (UnsafeRawBufferPointer, UnsafeRawBufferPointer?, PageNo) -> Void
    ) -> UInt64? {
        let what = parent == nil ? "the root of \(slotLabel(walk.slot))" : "a child pointer"
        guard inBounds(pgno, from: parent, what: what) else { return nil }
        if depth >= maxTreeDepth {
            problem(pgno, "\(slotLabel(walk.slot)) is deeper than \(maxTreeDepth) levels")
            return nil
        }
        guard claim(pgno, Inspector.nodeOwner(walk.slot), from: parent) else { return nil }
        checkHeader(pgno, run: 1)
        let node: Node
        do {
            node = try pages.node(pgno)
            try node.validateAll()
        } catch {
            problem(pgno, reason(error))
            return nil
        }
        if node.isLeaf {
            walk.stats.leafPages += 1
            walk.stats.leafBytesUsed += node.usedBytes
            if let expected = walk.leafDepth {
                if expected != depth { problem(pgno, "leaf at depth \(depth) of \(slotLabel(walk.slot)), other leaves at depth \(expected)") }
            } else {
                walk.leafDepth = depth
            }
            if node.count == 0 {
                problem(pgno, parent == nil ? "empty root leaf (an empty tree has root 0)" : "empty leaf below a branch")
            }
        } else {
            walk.stats.branchPages += 1
            if !node.isCounted && meta.formatVersion >= 3 {
                problem(pgno, "an uncounted format-2 branch in a format-\(meta.formatVersion) file")
            }
        }

        var previous: UnsafeRawBufferPointer?
        var keys: [UnsafeRawBufferPointer] = []
        keys.reserveCapacity(node.count)
        for i in 0..<node.count {
            let key: UnsafeRawBufferPointer
            do { key = try node.key(i) } catch { problem(pgno, reason(error)); return nil }
            keys.append(key)
            if !node.isLeaf && i == 0 {
                if !key.isEmpty { problem(pgno, "entry 0 of a branch has a \(key.count)-byte key, expected none") }
                continue
            }
            if node.isLeaf && !walk.keyLengths.contains(key.count) {
                problem(pgno, "key \(i) is \(key.count) bytes, outside \(walk.keyLengths.lowerBound)...\(walk.keyLengths.upperBound)")
            }
            if let previous, compareBytes(previous, key) >= 0 {
                problem(pgno, "key \(i) \(preview(key)) is not above key \(i - 1) \(preview(previous))")
            }
            if let lower, compareBytes(key, lower) < 0 {
                problem(pgno, "key \(i) \(preview(key)) is below its parent's separator \(preview(lower))")
            }
            if let upper, compareBytes(key, upper) >= 0 {
                problem(pgno, "key \(i) \(preview(key)) is not below the next separator \(preview(upper))")
            }
            previous = key
        }

        if node.isLeaf {
            for i in 0..<node.count {
                walk.stats.entries += 1
                var value: UnsafeRawBufferPointer?
                do {
                    let stored = try node.value(i)
                    if case .overflow(let run, let length) = stored {
                        if checkOverflow(run, length: length, from: pgno, walk: &walk) {
                            value = try pages.overflow(run, length: length)
                        }
                    } else {
                        value = try pages.resolve(stored)
                    }
                } catch {
                    problem(pgno, reason(error))
                }
                visitor(keys[i], value, pgno)
            }
            return UInt64(node.count)
        }
        var total: UInt64? = 0
        for i in 0..<node.count {
            let child: PageNo
            do { child = try node.child(i) } catch { problem(pgno, reason(error)); total = nil; continue }
            let actual = visit(
                child, from: pgno, depth: depth + 1,
                lower: i == 0 ? lower : keys[i],
                upper: i + 1 < node.count ? keys[i + 1] : upper,
                walk: &walk, leaf: visitor)
            guard let actual else { total = nil; continue }
            total = total.map { $0 &+ actual }
            if let recorded = try? node.childCount(i), recorded != actual {
                problem(pgno, "entry \(i) records \(recorded) entries below child \(child), which holds \(actual)")
            }
        }
        return total
    }

    /// Checks and claims an overflow run. True when its value can be read.
    private func checkOverflow(_ run: PageNo, length: Int, from leaf: PageNo, walk: inout Walk) -> Bool {
        guard inBounds(run, from: leaf, what: "an overflow reference") else { return false }
        let p = pages.base + Int(run) * pageSize
        let type = p.u8(PageHeader.type)
        if type != PageType.overflow.rawValue {
            problem(run, "expected an overflow page (referenced from page \(leaf)), found \(pageTypeName(type))")
            _ = claim(run, Inspector.overflowOwner(walk.slot), from: leaf)
            return false
        }
        let count = UInt64(p.u32(PageHeader.runPages))
        let expected = (PageHeader.size + length + pageSize - 1) / pageSize
        guard count > 0, inBounds(run, count: count, from: leaf, what: "an overflow run of \(count) pages") else {
            if count == 0 { problem(run, "overflow run of 0 pages") }
            _ = claim(run, Inspector.overflowOwner(walk.slot), from: leaf)
            return false
        }
        if Int(count) != expected {
            problem(run, "overflow run of \(count) pages for a \(length)-byte value, which needs \(expected)")
        }
        // Claim the whole run. A first page already claimed means the run was reached before
        // (and checked then); inside the run, report only the first conflict.
        let code = Inspector.overflowOwner(walk.slot)
        guard claim(run, code, from: leaf) else { return false }
        var conflictReported = false
        for page in (run + 1)..<(run + count) {
            if owners[Int(page)] == 0 {
                owners[Int(page)] = code
            } else if !conflictReported {
                _ = claim(page, code, from: leaf)
                conflictReported = true
            }
        }
        walk.stats.overflowPages += Int(count)
        checkHeader(run, run: Int(count))
        return Int(count) * pageSize >= PageHeader.size + length
    }

    private func slotLabel(_ slot: Int) -> String {
        switch slot {
        case 0: return "the catalog"
        case 1: return "the free-page tree"
        default: return slot < slotNames.count ? "tree '\(slotNames[slot])'" : "tree #\(slot)"
        }
    }

    /// The catalog, every named tree, and the free-page tree, with entry counts compared to what
    /// the meta page and the catalog record.
    func walkAllTrees() -> [TreeStats] {
        var catalogEntries: [(name: String, info: TreeInfo, leaf: PageNo)] = []
        let catalog = walkTree(slot: 0, name: "(catalog)", kind: .catalog, root: meta.catalog.root, keyLengths: 1...255) { key, value, leaf in
            let name = String(decoding: key, as: UTF8.self)
            guard name.utf8.elementsEqual(key) else {
                problem(leaf, "catalog key \(preview(key)) is not a UTF-8 tree name")
                return
            }
            guard let value else { return }
            do {
                catalogEntries.append((name, try TreeInfo.decode(value, name: name), leaf))
            } catch {
                problem(leaf, reason(error))
            }
        }
        if verify && catalog.entries != meta.catalog.count {
            problem(nil, "the catalog holds \(catalog.entries) trees but the meta page says \(meta.catalog.count)")
        }

        var result: [TreeStats] = []
        for entry in catalogEntries {
            let slot = slotNames.count
            slotNames.append(entry.name)
            if verify && (entry.info.root == 0) != (entry.info.count == 0) {
                problem(entry.leaf, "tree '\(entry.name)' has root \(entry.info.root) but \(entry.info.count) entries")
            }
            let stats = walkTree(slot: slot, name: entry.name, kind: .user, root: entry.info.root, keyLengths: 1...maxKey) { _, _, _ in }
            if verify && stats.entries != entry.info.count {
                problem(
                    entry.info.root == 0 ? entry.leaf : entry.info.root,
                    "tree '\(entry.name)' holds \(stats.entries) entries but its catalog entry says \(entry.info.count)")
            }
            result.append(stats)
        }

        let freeTree = walkTree(
            slot: 1, name: "(free pages)", kind: .freePages, root: meta.free.root,
            keyLengths: FreeListFormat.keySize...FreeListFormat.keySize
        ) { key, value, leaf in
            guard let value else { return }
            do {
                let freedBy = try FreeListFormat.decodeKey(key, page: leaf)
                freeChunks.append((freedBy, try FreeListFormat.decodeEntries(value, page: leaf), leaf))
            } catch {
                problem(leaf, reason(error))
            }
        }
        if verify && freeTree.entries != meta.free.count {
            problem(nil, "the free-page tree holds \(freeTree.entries) chunks but the meta page says \(meta.free.count)")
        }
        result.append(catalog)
        result.append(freeTree)
        return result
    }

    func reason(_ error: any Error) -> String {
        if let e = error as? StorageError, case .corrupt(_, let reason) = e { return reason }
        return "\(error)"
    }
}
