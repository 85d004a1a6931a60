import Testing
@testable import StrataStorage
import Foundation
import Synchronization

/// Damage that an independent hostile-file test found the engine trusting: a huge count or id in a
/// resealed meta page, branch counts that add up past any file, one page reached by two paths of a
/// tree, and a damaged page that a write copied (sealing the damage) or a damaged free list it
/// used. Each must give a typed error — or the previous commit — never a trap, a hang, or a write.
@Suite struct HostileFileTests {
    static let pageSize = CorruptionTests.pageSize

    /// A store with tree "t" of `count` entries (a root branch over several leaves). The damage is
    /// done while it is open, through the file (its map shows it): opened afterwards, a damaged
    /// page of the newest commit would make recovery fall back to the commit before.
    static func store(_ path: String, count: Int = 2_000) throws -> Store {
        var options = StoreOptions(pageSize: pageSize, durability: .noSync)
        options.compaction = .off
        let store = try Store(path: path, options: options)
        try store.write { txn in
            let t = try txn.createTree("t")
            for i in 0..<count { try t.put(bigEndianKey(UInt64(i)), [UInt8](repeating: UInt8(i & 0xFF), count: 40)) }
        }
        return store
    }

    static func root(_ path: String) throws -> PageNo {
        try Store(path: path, options: StoreOptions(readOnly: true)).read { try #require(try $0.tree("t")).info.root }
    }

    /// Edits page `pgno` of the file through `edit` (its checksum left stale: reads do not check).
    static func patchPage(_ path: String, _ pgno: PageNo, _ edit: (UnsafeMutableRawPointer) -> Void) throws {
        var page = try CorruptionTests.page(path, pgno)
        page.withUnsafeMutableBytes { edit($0.baseAddress!) }
        try patchFile(path, at: Int(pgno) * pageSize, page)
    }

    /// A file longer than any map (exabytes, sparse, on a filesystem that allows it: tmpfs here)
    /// throws when it is mapped: doubling its size for the map's reservation overflowed and
    /// trapped every opening (read-only, as the `strata` tool opens, and read-write).
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/dev/shm"), "needs tmpfs at /dev/shm"), arguments: [true, false])
    func aFileLongerThanAnyMapThrowsWhenOpened(readOnly: Bool) throws {
        let path = "/dev/shm/strata-exabyte-\(getpid())-\(readOnly)"
        defer { removeStoreFiles(path) }
        do {
            let store = try Store(path: path)
            try store.write { txn in _ = try txn.createTree("t").put([1], [1]) }
            store.close()
        }
        let file = try #require(FileHandle(forUpdatingAtPath: path))
        defer { try? file.close() }
        do { try file.truncate(atOffset: 3 << 60) } catch { return }  // (a filesystem that refuses: nothing to test)
        #expect(throws: StorageError.self) { _ = try Store(path: path, options: StoreOptions(readOnly: readOnly)) }
    }

    @Test func hugeCommitRecordCountFallsBack() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let (a, _, txnA, txnB) = try CorruptionTests.twoCommits(path)
        var meta = try CorruptionTests.page(path, txnB % 2)
        meta.withUnsafeMutableBytes {
            $0.baseAddress!.setU64(MetaLayout.recordRun, 5)
            $0.baseAddress!.setU32(MetaLayout.recordCount, UInt32.max)
        }
        CorruptionTests.resealMeta(&meta)
        try patchFile(path, at: Int(txnB % 2) * Self.pageSize, meta)
        let store = try Store(path: path)
        #expect(try store.stats().txnid == txnA)
        #expect(try contents(of: store) == a)
    }

    @Test func transactionIdNearTheTopIsRefused() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let (a, _, txnA, txnB) = try CorruptionTests.twoCommits(path)
        var meta = try CorruptionTests.page(path, txnB % 2)
        meta.withUnsafeMutableBytes {
            $0.baseAddress!.setU64(PageHeader.txnid, txnB % 2 == 1 ? UInt64.max : UInt64.max - 1)
            $0.baseAddress!.setU32(MetaLayout.recordCount, 0)
        }
        CorruptionTests.resealMeta(&meta)
        try patchFile(path, at: Int(txnB % 2) * Self.pageSize, meta)
        let store = try Store(path: path)
        #expect(try store.stats().txnid == txnA)
        #expect(try contents(of: store) == a)
        _ = try store.write { txn in try txn.createTree("after").put([1], [1]) }  // the next id is txnA + 1
        #expect(try store.stats().txnid == txnA + 1)
    }

    @Test(arguments: [UInt64.max, UInt64.max / 2, 1 << 60])
    func branchCountsPastAnyFileThrow(count: UInt64) throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Self.store(path)
        let root = try Self.root(path)
        try Self.patchPage(path, root) { MutableNode(base: $0, pageSize: Self.pageSize).setChildCount(0, count) }
        try store.read { txn in
            let t = try #require(try txn.tree("t"))
            #expect(throws: StorageError.self) { _ = try t.cursor().count(from: [0xFF], to: nil) }
            #expect(throws: StorageError.self) { _ = try t.cursor().rank(of: [0xFF]) }
            #expect(throws: StorageError.self) { _ = try t.count(from: nil, to: nil) }
        }
        #expect(try !store.check().isOK)
    }

    /// A root whose second child is its first: walks must stop (a tree of such pages has 2^depth
    /// paths), with an error.
    @Test func aPageReachedByTwoPathsStopsEveryWalk() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Self.store(path)
        let root = try Self.root(path)
        try Self.patchPage(path, root) { p in
            let node = MutableNode(base: p, pageSize: Self.pageSize)
            node.setChild(1, (try? Node(UnsafeRawPointer(p), pgno: root, pageSize: Self.pageSize).child(0)) ?? 0)
        }
        #expect(throws: StorageError.self) { try store.read { txn in try #require(try txn.tree("t")).forEach { _, _ in true } } }
        #expect(throws: StorageError.self) {
            try store.read { txn in
                let cursor = try #require(try txn.tree("t")).cursor()
                var more = try cursor.last()
                while more { more = try cursor.prev() }
            }
        }
        #expect(throws: StorageError.self) { try store.write { txn in _ = try txn.dropTree("t") } }
        let copy = path + ".copy"
        defer { removeStoreFiles(copy) }
        #expect(throws: StorageError.self) { try store.copy(to: copy) }
        #expect(try !store.check().isOK)
    }

    /// A drop of a damaged tree whose error the caller catches and then commits (`try?
    /// tx.deleteAll(…)`) frees nothing: the tree stays whole on disk, no page of it goes on the
    /// free list while the catalog still points at it, so later commits cannot hand its pages
    /// out again. The file holds the same problem after as before, and nothing new.
    @Test func aCaughtFailedDropFreesNothing() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Self.store(path)
        let root = try Self.root(path)
        try Self.patchPage(path, root) { p in
            let node = MutableNode(base: p, pageSize: Self.pageSize)
            node.setChild(1, (try? Node(UnsafeRawPointer(p), pgno: root, pageSize: Self.pageSize).child(0)) ?? 0)
        }
        // (Less the line naming the newest commit, whose number moves.)
        func problems() throws -> [String] { try store.check().problems.map(\.description).filter { !$0.contains("newest commit") } }
        let before = try problems()
        #expect(!before.isEmpty)
        try store.write { txn in
            #expect(throws: StorageError.self) { try txn.dropTree("t") }
            let tree = try txn.tree("t")
            #expect(tree?.count == 2_000)
        }
        // Commits that allocate pages: none of them may be one of the damaged tree's.
        for round in 0..<4 {
            try store.write { txn in
                let other = try txn.tree("u") ?? txn.createTree("u")
                for i in 0..<1_000 { try other.put(bigEndianKey(UInt64(round * 1_000 + i)), [UInt8](repeating: 7, count: 60)) }
            }
        }
        let after = try problems()
        #expect(after == before, "before: \(before)\nafter: \(after)")
    }

    /// A write into a leaf whose page is damaged (its checksum no longer matches) throws and
    /// changes nothing the file would keep, when the caller catches the error and commits: a
    /// large value's overflow run was made before the path was copied, and stayed in the file,
    /// neither used nor free; and an insert or a delete that failed after copying the root left
    /// the tree out of the catalog, which then pointed at the freed root. Put, insert-if-absent
    /// and delete.
    @Test(arguments: ["put", "insert", "delete"]) func aCaughtWriteOverADamagedLeafChangesNothing(operation: String) throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Self.store(path)
        let root = try Self.root(path)
        let leaf = try store.read { txn in try Node(try txn.pages.page(root), pgno: root, pageSize: Self.pageSize).child(1) }
        try Self.patchPage(path, leaf) { p in
            p.storeBytes(of: p.load(fromByteOffset: Self.pageSize - 1, as: UInt8.self) ^ 0xFF, toByteOffset: Self.pageSize - 1, as: UInt8.self)
        }
        func problems() throws -> [String] { try store.check().problems.map(\.description).filter { !$0.contains("newest commit") } }
        let before = try problems()
        #expect(!before.isEmpty)
        let key = try store.read { txn in Array(try Node(try txn.pages.page(leaf), pgno: leaf, pageSize: Self.pageSize).key(0)) }
        let large = [UInt8](repeating: 9, count: 5_000)
        // Listeners hear that any key of the tree may have changed (its root moved; a delete
        // whose rebalancing failed would have removed its key), not that none did.
        let heard = Mutex<[CommitEvent]>([])
        let listener = store.addCommitListener { event in heard.withLock { $0.append(event) } }
        defer { listener.invalidate() }
        try store.write { txn in
            let t = try #require(try txn.tree("t"))
            #expect(throws: StorageError.self) {
                switch operation {
                case "put": try t.put(key, large)
                case "insert": _ = try t.insert(key + [0], large)  // sorts in the same leaf, not in it yet
                default: try t.delete(key)
                }
            }
            try txn.createTree("u").put([1], [1])
        }
        let event = try #require(heard.withLock { $0.first })
        // (A put notes its key before it starts, so its listeners hear of that key.)
        if operation != "put" {
            #expect(event.changedTrees.contains("t"))
            #expect(event.changedKeys["t"] == nil, "\(event.changedKeys)")
        }
        // Commits that allocate pages: none of them may be one the tree still uses.
        for round in 0..<3 {
            try store.write { txn in
                let other = try #require(try txn.tree("u"))
                for i in 0..<1_000 { try other.put(bigEndianKey(UInt64(round * 1_000 + i)), [UInt8](repeating: 7, count: 60)) }
            }
        }
        let after = try problems()
        #expect(after == before, "before: \(before)\nafter: \(after)")
    }

    /// A format-2 file's branches carry no counts: positions and range counts walk below them,
    /// and that walk must stop at a page reached twice too. Here, under the root's first child
    /// (a branch over leaves), leaves 1-4 become copies of that branch, each with every child the
    /// next one (the last's: leaf 0), and its children but the first lead to the first copy: a
    /// walk below it visited leaf 0 n^4 times (n ≈ 100 children; hours at five levels).
    @Test func aFormat2BranchReachingAPageTwiceStopsCounting() throws {
        let (dir, path) = try UpgradeTests.copy("v2-trees.strata")
        defer { removeDirectory(dir) }
        let store = try Store(path: path, options: StoreOptions(readOnly: true))
        let root = try store.read { try #require(try $0.tree("many")).info.root }
        func children(_ page: [UInt8], _ pgno: PageNo) throws -> (leaves: Bool, [PageNo]) {
            try page.withUnsafeBytes { raw in
                let node = try Node(raw.baseAddress!, pgno: pgno, pageSize: Self.pageSize)
                if node.isLeaf { return (true, []) }
                let below = try (0..<node.count).map { try node.child($0) }
                let first = try Node(try CorruptionTests.page(path, below[0]).withUnsafeBytes { $0.baseAddress! }, pgno: below[0], pageSize: Self.pageSize)
                return (first.isLeaf, below)
            }
        }
        var branch = root
        var page = try CorruptionTests.page(path, branch)
        var (overLeaves, below) = try children(page, branch)
        while !overLeaves {
            branch = below[0]
            page = try CorruptionTests.page(path, branch)
            (overLeaves, below) = try children(page, branch)
        }
        #expect(branch != root && below.count > 50, "\(below.count) leaves under page \(branch)")
        let chain = Array(below[1...4])
        for (level, pgno) in chain.enumerated() {
            var copy = page
            copy.withUnsafeMutableBytes { raw in
                raw.baseAddress!.setU64(PageHeader.pageNumber, pgno)
                let node = MutableNode(base: raw.baseAddress!, pageSize: Self.pageSize)
                for i in below.indices { node.setChild(i, level + 1 < chain.count ? chain[level + 1] : below[0]) }
            }
            try patchFile(path, at: Int(pgno) * Self.pageSize, copy)
        }
        try Self.patchPage(path, branch) { p in
            let node = MutableNode(base: p, pageSize: Self.pageSize)
            for i in 1..<below.count { node.setChild(i, chain[0]) }
        }
        try store.read { txn in
            let many = try #require(try txn.tree("many"))
            #expect(throws: StorageError.self) { _ = try many.cursor().seek(toPosition: 13_000) }
            #expect(throws: StorageError.self) { _ = try many.count(from: UpgradeTests.key(19_000), to: nil) }
        }
    }

    /// The same damage in a newer commit only: comparing the two snapshots (what observers of
    /// other processes' commits do) walks the differing subtrees, and stops there too.
    @Test func aPageReachedByTwoPathsStopsTheComparisonOfSnapshots() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Self.store(path)
        let older = try store.beginRead()
        defer { older.end() }
        try store.write { txn in _ = try txn.createTree("t").put([0xFF], [1]) }
        let root = try Self.root(path)
        try Self.patchPage(path, root) { p in
            let first = (try? Node(UnsafeRawPointer(p), pgno: root, pageSize: Self.pageSize).child(0)) ?? 0
            let node = MutableNode(base: p, pageSize: Self.pageSize)
            node.setChild(1, first)
            node.setChild(2, first)
        }
        #expect(throws: StorageError.self) { _ = try store.read { try $0.changedKeys(in: "t", since: older) } }
    }

    /// A leaf damaged after its commit wrote it: a write that would copy it into a new page (and
    /// seal it whole) throws instead, as does a compacting copy; `check` still sees the damage.
    @Test func aWriteNeverSealsADamagedPage() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Self.store(path)
        let root = try Self.root(path)
        let leaf = try CorruptionTests.page(path, root).withUnsafeBytes { try Node($0.baseAddress!, pgno: root, pageSize: Self.pageSize).child(0) }
        try Self.patchPage(path, leaf) {
            $0.storeBytes(of: $0.load(fromByteOffset: Self.pageSize - 3, as: UInt8.self) ^ 1, toByteOffset: Self.pageSize - 3, as: UInt8.self)
        }
        let before = try store.stats().txnid
        #expect(throws: StorageError.self) { try store.write { txn in try txn.createTree("t").put(bigEndianKey(0), [7]) } }
        #expect(try store.stats().txnid == before)
        let copy = path + ".copy"
        defer { removeStoreFiles(copy) }
        #expect(throws: StorageError.self) { try store.copy(to: copy) }
        #expect(try !store.check().isOK)
    }

    /// A bit flipped in a page of the free list: the writer must not hand out what the damaged
    /// chunk lists (a page still in use, perhaps), and nothing of the write is committed.
    @Test func aDamagedFreeListIsNotUsed() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Self.store(path)
        try store.write { txn in _ = try txn.dropTree("t") }  // many pages freed, listed at the commit
        let freeRoot = try store.read { $0.meta.free.root }
        try #require(freeRoot != 0)
        try Self.patchPage(path, freeRoot) {
            $0.storeBytes(of: $0.load(fromByteOffset: Self.pageSize - 5, as: UInt8.self) ^ 0x10, toByteOffset: Self.pageSize - 5, as: UInt8.self)
        }
        let before = try store.stats().txnid
        #expect(throws: StorageError.self) {
            try store.write { txn in
                let t = try txn.createTree("new")
                for i in 0..<2_000 { try t.put(bigEndianKey(UInt64(i)), [UInt8](repeating: 1, count: 100)) }
            }
        }
        #expect(try store.read { $0.txnid } == before)
    }
}
