/// The one write transaction of a store, alive inside `Store.write`. It sees its own writes.
/// Throwing out of the closure, or calling `abort()`, leaves no trace.
///
/// ```swift
/// try store.write { txn in
///     let users = try txn.createTree("users")
///     try users.put(Array("u1".utf8), Array("Ana".utf8))
///     try users.delete(Array("u2".utf8))
/// }
/// ```
public final class WriteTransaction {
    let env: Environment
    let pages: PageMap
    let pageSize: Int
    /// The id this transaction commits as.
    public let txnid: UInt64
    /// How this commit reaches the disk; set by `Store.write`, changeable until commit.
    ///
    /// ```swift
    /// try store.write { txn in
    ///     txn.durability = .noSync   // this commit only
    ///     try txn.createTree("cache").put(Array("k".utf8), Array("v".utf8))
    /// }
    /// ```
    public var durability: Durability
    let base: Meta
    // `@exclusivity(unchecked)` on the state every tree operation reads and changes (as on
    // PageMap's): a WriteTransaction is not Sendable and never leaves the thread running
    // `Store.write`, and no code here passes one of these properties inout while also reading
    // it, so the runtime's dynamic exclusivity checks (a few percent of every write) cannot fire.
    @exclusivity(unchecked) var pageCount: UInt64
    @exclusivity(unchecked) var catalog: TreeInfo
    @exclusivity(unchecked) var freeTree: TreeInfo
    @exclusivity(unchecked) var trees: [TreeName: TreeState] = [:]
    @exclusivity(unchecked) var allocator: FreePageAllocator!
    /// Pages this transaction allocated and freed again: reusable at once.
    @exclusivity(unchecked) var spare: [PageNo] = []
    /// Counts the times runs of pages went into `spare` (or `spare` was restored), so that a
    /// search for a run there that failed is not repeated before one may have come
    /// (`takeSpareRun`): the run length that failed, at which count.
    @exclusivity(unchecked) var spareRuns = 0
    @exclusivity(unchecked) var spareRunMiss: (spareRuns: Int, count: Int)?
    /// Committed pages this transaction stopped using.
    @exclusivity(unchecked) var freed: [FreeEntry] = []
    /// Set while the commit writes the free list, so that the fixpoint converges (see Commit.swift).
    @exclusivity(unchecked) var committingFreeList = false
    /// Chunks of this transaction's own frees that `writeFreeList` has put in the free tree so
    /// far. Kept across its calls: a later call with fewer own frees (after `trimFreeTail` took
    /// some back) must delete the chunks past its own count, or their stale entries stay listed.
    var ownFreeChunks = 0
    @exclusivity(unchecked) var path: [PathStep] = []
    /// Counts the paths recorded into `path`: a search that changes nothing (a delete of an absent
    /// key, an insert of a present one) records its own path without moving `pages.version`.
    @exclusivity(unchecked) var pathRecordings = 0
    /// Counts splits and merges: a path recorded before one may no longer lead where it did.
    @exclusivity(unchecked) var shapeChanges = 0
    /// The error of an application of deferred writes that failed halfway (DeferredWrites.swift),
    /// or of a spill after a write (Spill.swift), and how many savepoints were open then: the
    /// transaction refuses to commit, and to apply deferred writes, until a rollback below that
    /// depth undoes it.
    @exclusivity(unchecked) var deferredFailure: (error: any Error, depth: Int)?
    /// About what the deferred writes of every tree hold (not lowered when one tree's are applied
    /// alone: reaching the limit early is harmless).
    @exclusivity(unchecked) var deferredMemory = 0
    @exclusivity(unchecked) var fileSize: UInt64
    /// The base commit's record run, freed if this transaction commits anything.
    var previousRecordRun: (PageNo, Int)?
    let scratch: UnsafeMutableRawPointer
    let splitScratch: UnsafeMutableRawPointer
    let entryScratch: UnsafeMutableRawPointer
    @exclusivity(unchecked) private(set) var isFinished = false
    /// Open savepoints, innermost last (see Savepoint.swift).
    @exclusivity(unchecked) var savepoints: [Savepoint] = []
    /// Dirty pages (counting each page of a run) above which `spillIfNeeded` writes some out.
    let spillPages: Int
    /// Of `pages.version`'s changes, those made applying deferred writes (`writeCount`).
    @exclusivity(unchecked) var deferredApplyChanges: UInt64 = 0
    /// Pages made since the last spill (an upper bound on growth: frees are not subtracted).
    @exclusivity(unchecked) var dirtySinceSpill = 0
    /// Pages the map of this transaction covers: only those can be spilled and read back.
    let mappedPages: UInt64
    /// Spills so far and the pages they wrote (for tests and statistics).
    var spills = 0
    /// Whether this transaction has synced the file since it began (`secureBase`).
    var baseSecured = false
    /// Whether the commit log's last frame is pinned for this transaction (CommitLog.pinned): its
    /// pages are then never reused, and a generation in the log need not end before this
    /// transaction writes. Without the pin, `secureLog` ends any generation first.
    let logPinned: Bool
    /// Whether `secureLog` has ended the log's generation for this transaction (or found none),
    /// or made this `.noSync` transaction's base its one frame (`basePinned`).
    var logSecured = false
    var basePinned = false
    /// The commit the log's pin keeps whole when it is older than this transaction's base (a
    /// `.noSync` run after it): the pages only it sees are held (`RunPin.swift`). Nil once released.
    var runPin: UInt64?
    /// The committed page each copied page was copied from (`touch`): the commit log may write the
    /// copy as a patch against it (`patchBases`).
    var origins: [PageNo: PageNo] = [:]
    var spilledPages = 0
    /// Whether commit listeners want the changed keys: without any, writes do not collect them.
    let tracksChangedKeys: Bool
    /// When this commit trims and moves pages (Compaction.swift).
    let compaction: Compaction
    /// Set by `Store.compact()`: this commit moves every movable page and commits even if
    /// nothing else changed.
    var forceCompaction = false
    /// Set for `Store.followUpCompaction`: this commit checks for a free tail and holes now, and
    /// commits even if nothing else changed.
    var compactNow = false
    /// Set for idle-time compaction: once durable, the commit cuts the file down to its pages and
    /// an eighth, without the slack that keeps ordinary commits from cutting and regrowing it.
    var cutsToFit = false
    /// What compaction did in this transaction (for tests and statistics).
    var movedPages = 0
    var trimmedPages = 0
    var truncations = 0

    init(
        env: Environment, durability: Durability, memory: Int = StoreOptions().transactionMemory,
        compaction: Compaction = .automatic
    ) throws {
        self.env = env
        self.compaction = compaction
        self.spillPages = max(64, memory / env.pageSize)
        self.pageSize = env.pageSize
        self.durability = durability
        // A listener added while this transaction runs gets its trees as changed anywhere (nil keys).
        self.tracksChangedKeys = env.commitListeners.count > 0
        let latest = env.readers.latest
        var map = env.maps.current
        let metaPointer = map.base + Int(latest % 2) * env.pageSize
        let meta = try Meta.decode(metaPointer, slot: latest % 2, pageSize: env.pageSize, path: env.path)
        if meta.txnid != latest {
            throw StorageError.corrupt(page: latest % 2, reason: "meta page holds transaction \(meta.txnid), expected \(latest)")
        }
        self.base = meta
        self.txnid = latest + 1
        self.pageCount = meta.pageCount
        self.catalog = meta.catalog
        self.freeTree = meta.free
        self.fileSize = try env.file.size()
        if fileSize < meta.pageCount * UInt64(pageSize) {
            throw StorageError.truncated(path: env.path, expectedBytes: meta.pageCount * UInt64(pageSize), actualBytes: fileSize)
        }
        map = try env.maps.ensure(bytes: Int(meta.pageCount) * pageSize)
        self.pages = PageMap(base: map.base, pageSize: pageSize, limit: meta.pageCount, isWrite: true, newest: meta.txnid)
        self.mappedPages = UInt64(map.length / pageSize)
        self.scratch = .allocate(byteCount: pageSize, alignment: 16)
        self.splitScratch = .allocate(byteCount: pageSize, alignment: 16)
        self.entryScratch = .allocate(byteCount: pageSize, alignment: 16)
        let readers = env.readers
        // The commit a replay of the commit log would bring back is kept whole, as if a snapshot of it were open.
        let pinned = env.commitLog?.pinnedAtBegin(base: meta.txnid, asking: durability == .noSync)
        self.logPinned = pinned != nil
        self.runPin = pinned.flatMap { $0 < meta.txnid ? $0 : nil }
        self.allocator = FreePageAllocator(pages: pages, baseRoot: meta.free.root, base: meta.txnid, hint: env.freeScanHint) {
            let live = readers.liveReaders().map(\.txnid)
            return pinned.map { live + [$0] } ?? live
        }
        if meta.recordRun != 0 {
            let run = try pages.page(meta.recordRun)
            let count = Int(run.u32(PageHeader.runPages))
            if run.u8(PageHeader.type) != PageType.commitRecord.rawValue || count == 0 || meta.recordRun + UInt64(count) > meta.pageCount {
                throw StorageError.corrupt(page: meta.recordRun, reason: "commit record run header is invalid")
            }
            previousRecordRun = (meta.recordRun, count)
        }
        try renewRunPinIfHoldingMuch()
    }

    deinit {
        releaseBuffers()
        scratch.deallocate()
        splitScratch.deallocate()
        entryScratch.deallocate()
    }

    func releaseBuffers() {
        // A cursor kept past the transaction's end must not read the buffers freed here.
        pages.version &+= 1
        for (_, buffer) in pages.dirty { buffer.deallocate() }
        pages.dirty.removeAll()
        for (_, buffer) in pages.frozen { buffer.deallocate() }
        pages.frozen.removeAll()
        savepoints.removeAll()
    }

    func checkOpen() throws {
        if isFinished { throw StorageError.transactionFinished }
    }

    func finish() { isFinished = true }

    // MARK: Trees

    func state(_ name: String) throws -> TreeState? {
        if let state = trees[TreeName(name)] { return state.dropped ? nil : state }
        try validateTreeName(name)
        let key = Array(name.utf8)
        guard let bytes = try key.withUnsafeBytes({ (k) throws in try pages.get(root: catalog.root, key: k) }) else { return nil }
        // Its counts are bounded by the pages the file (or this transaction, which may have
        // written the catalog already: compaction, a savepoint's restart) can hold.
        let info = try TreeInfo.decode(bytes, name: name, pageCount: max(pages.limit, pageCount), pageSize: pageSize)
        let state = TreeState(name: name, info: info, tracksKeys: tracksChangedKeys)
        trees[TreeName(name)] = state
        return state
    }

    /// The longest key a tree of this file takes (`Limits.maxKeySize` at the file's page size):
    /// a longer one makes `put` and `insert` throw `StorageError.invalidKey` before they change
    /// anything.
    ///
    /// ```swift
    /// guard key.count <= txn.maxKeySize else { throw MyError.keyTooLong }
    /// ```
    public var maxKeySize: Int { Limits.maxKeySize(pageSize: pageSize) }

    /// Grows with every write in this transaction (puts, deletes, drops, rollbacks): a value view
    /// read while it had some value stays valid as long as it has that value.
    ///
    /// ```swift
    /// let stamp = txn.changeCount
    /// let view = try tree.get(key)
    /// // ... code that may or may not write ...
    /// if txn.changeCount == stamp { use(view) }
    /// ```
    public var changeCount: UInt64 { pages.version }

    /// The tree called `name`, or nil when there is none.
    ///
    /// ```swift
    /// try store.write { txn in
    ///     guard let users = try txn.tree("users") else { return }
    ///     try users.put(Array("u1".utf8), Array("Ana".utf8))
    /// }
    /// ```
    public func tree(_ name: String) throws -> WriteTree? {
        try checkOpen()
        return try state(name).map { WriteTree(txn: self, state: $0) }
    }

    /// The tree called `name`, created empty when missing.
    ///
    /// ```swift
    /// try store.write { txn in try txn.createTree("users").put(Array("u1".utf8), Array("Ana".utf8)) }
    /// ```
    public func createTree(_ name: String) throws -> WriteTree {
        try checkOpen()
        if let existing = try state(name) { return WriteTree(txn: self, state: existing) }
        try validateTreeName(name)
        // A tree dropped earlier in this transaction and made again lost every key it had: the
        // new state must not list its keys (an empty list would tell listeners that nothing of
        // it changed, and `deleteAll` would reach no observer).
        let droppedHere = trees[TreeName(name)]?.dropped == true
        let state = TreeState(name: name, info: .empty, tracksKeys: tracksChangedKeys && !droppedHere)
        state.modified = true
        trees[TreeName(name)] = state
        return WriteTree(txn: self, state: state)
    }

    /// Deletes the tree called `name` and frees all its pages. Returns false when there was none.
    ///
    /// ```swift
    /// let existed = try store.write { txn in try txn.dropTree("cache") }
    /// ```
    @discardableResult
    public func dropTree(_ name: String) throws -> Bool {
        try checkOpen()
        guard let state = try state(name) else { return false }
        // (A damaged tree throws here with nothing freed and the tree as it was.)
        try freeTree(state.info.root)
        state.deferred = DeferredWrites()  // (nothing of the tree is left for them to change)
        state.beside = []
        state.info = .empty
        state.dropped = true
        state.modified = true
        pages.version &+= 1
        return true
    }

    /// The names of every tree, in byte order, including those created in this transaction.
    ///
    /// ```swift
    /// try store.write { txn in
    ///     for name in try txn.treeNames() where name.hasPrefix("tmp.") { _ = try txn.dropTree(name) }
    /// }
    /// ```
    public func treeNames() throws -> [String] {
        try checkOpen()
        var names = Set(try listTrees(pages: pages, catalogRoot: catalog.root).map(TreeName.init))
        for (name, state) in trees {
            if state.dropped { names.remove(name) } else { names.insert(name) }
        }
        return names.map(\.name).sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
    }

    /// Abandons every change. The store is left as it was before the transaction began.
    ///
    /// ```swift
    /// try store.write { txn in
    ///     try txn.createTree("draft").put(Array("k".utf8), Array("v".utf8))
    ///     if cancelled { txn.abort() }   // nothing of this transaction is kept
    /// }
    /// ```
    public func abort() {
        finish()
        releaseBuffers()
    }
}

/// A tree open in the write transaction.
///
/// ```swift
/// let items = try txn.createTree("items")
/// try items.put([1], [42])
/// let inserted = try items.insert([1], [43])   // false: key exists, nothing changes
/// ```
public struct WriteTree {
    let txn: WriteTransaction
    let state: TreeState

    /// The tree's name.
    public var name: String { state.name }
    /// Number of entries.
    ///
    /// ```swift
    /// let n = try store.write { txn in try txn.createTree("users").count }
    /// ```
    public var count: Int { Int(clamping: state.info.count) }  // a corrupt count must not trap

    private func check() throws {
        try txn.checkOpen()
        if state.dropped { throw StorageError.treeNotFound(state.name) }
    }

    /// `check`, then the deferred writes applied: what every read and every ordinary write of
    /// the tree starts with.
    @inline(__always)
    private func settle() throws {
        try check()
        try txn.applyDeferred(state)
    }

    /// Stores `value` under `key`, replacing any value there. Returns true when the key is new.
    @discardableResult
    public func put(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool {
        try settle()
        // Refused before the tree is marked changed: a caught refusal commits nothing.
        try txn.checkEntry(key: key, value: value)
        state.modified = true
        state.noteChange(key)
        let added = try txn.put(&state.info, key: key, value: value)
        try txn.spillIfNeeded()
        return added
    }

    /// Stores `value` under `key`, replacing any value there. Returns true when the key is new.
    ///
    /// ```swift
    /// let isNew = try store.write { txn in try txn.createTree("users").put(Array("u1".utf8), Array("Ana".utf8)) }
    /// ```
    @discardableResult
    public func put(_ key: [UInt8], _ value: [UInt8]) throws -> Bool {
        try key.withUnsafeBytes { (k) throws -> Bool in
            try value.withUnsafeBytes { (v) throws -> Bool in try put(k, v) }
        }
    }

    /// Stores `value` only if `key` is absent. Returns false (and changes nothing) when it exists.
    public func insert(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool {
        try settle()
        try txn.checkEntry(key: key, value: value)
        return try writing(key) { try txn.put(&state.info, key: key, value: value, overwrite: false) }
    }

    /// Stores `value` only if `key` is absent. Returns false (and changes nothing) when it exists.
    ///
    /// ```swift
    /// let inserted = try store.write { txn in try txn.createTree("users").insert(Array("u1".utf8), Array("Ana".utf8)) }
    /// // false, and nothing changed, when "u1" was already there
    /// ```
    public func insert(_ key: [UInt8], _ value: [UInt8]) throws -> Bool {
        try key.withUnsafeBytes { (k) throws -> Bool in
            try value.withUnsafeBytes { (v) throws -> Bool in try insert(k, v) }
        }
    }

    /// Runs a change of the tree's pages that marks the tree modified only once it succeeded (a
    /// key already there, or not there, changes nothing). Should it throw after it copied part of
    /// the path (a damaged page below stopped it), the tree's root has moved and its old pages are
    /// freed: the tree goes into the catalog at commit all the same, or a caller who caught the
    /// error and committed would leave the catalog pointing at freed pages, handed out again later.
    /// What changed is then unknown (a delete whose rebalancing failed has removed its key):
    /// listeners hear that any key of the tree may have.
    @inline(__always)
    private func changing<R>(_ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch {
            state.modified = true
            state.changedKeys = nil
            throw error
        }
    }

    /// Removes `key`. Returns false when it was not there.
    @discardableResult
    public func delete(_ key: UnsafeRawBufferPointer) throws -> Bool {
        try settle()
        return try writing(key) { try txn.delete(&state.info, key: key) }
    }

    /// Runs `body`, an insert or delete of `key` that says whether it changed the tree; when it
    /// did, the tree goes into the catalog at commit, listeners hear of the key, and the
    /// transaction spills if it holds too many pages. The key is copied first (when listeners hear
    /// of keys): the change may rebuild or free the page a view of it points into (a cursor's key
    /// deleted, a value of the tree inserted as a key: listeners heard of a neighbour's key).
    private func writing(_ key: UnsafeRawBufferPointer, _ body: () throws -> Bool) throws -> Bool {
        let copy: [UInt8]? = state.changedKeys == nil ? nil : Array(key)
        guard try changing(body) else { return false }
        state.modified = true
        if let copy { copy.withUnsafeBytes { state.noteChange($0) } }
        try txn.spillIfNeeded()
        return true
    }

    /// Removes `key`, showing its value to `inspect` first, in the same descent of the tree;
    /// returns false (without calling `inspect`) when it was not there. The view is valid only
    /// during the call, and throwing from `inspect` leaves the tree as it was. (Should `inspect`
    /// write to the transaction, or search it for a write, the key is looked for again after it,
    /// and deleted if still there.)
    ///
    /// ```swift
    /// var removed: [UInt8]?
    /// try store.write { txn in
    ///     try Array("u1".utf8).withUnsafeBytes { key in
    ///         _ = try txn.tree("users")?.delete(key) { value in removed = Array(value) }
    ///     }
    /// }
    /// ```
    @discardableResult
    public func delete(_ key: UnsafeRawBufferPointer, inspectingValue inspect: (UnsafeRawBufferPointer) throws -> Void) throws -> Bool {
        try settle()
        guard let (leaf, index) = try txn.findForDelete(state.info.root, key: key) else { return false }
        // Shown before anything is written, and outside any access to the tree's state: `inspect`
        // may read this tree, or even write to the transaction, which makes the recorded path stale.
        let version = txn.pages.version, recording = txn.pathRecordings
        try inspect(try txn.pages.resolve(try txn.pages.node(leaf).value(index)))
        try check()  // (`inspect` may have aborted the transaction or dropped the tree)
        if txn.pages.version != version || txn.pathRecordings != recording { return try delete(key) }
        return try writing(key) {
            try txn.removeFound(&state.info, leaf: leaf, index: index)
            return true
        }
    }

    /// Removes `key`. Returns false when it was not there.
    ///
    /// ```swift
    /// let existed = try store.write { txn in try txn.tree("users")?.delete(Array("u1".utf8)) ?? false }
    /// ```
    @discardableResult
    public func delete(_ key: [UInt8]) throws -> Bool {
        try key.withUnsafeBytes { (k) throws -> Bool in try delete(k) }
    }

    /// The value under `key`, as a view valid until the next write or savepoint in this
    /// transaction (a savepoint may spill the transaction's pages, freeing their buffers).
    public func get(_ key: UnsafeRawBufferPointer) throws -> UnsafeRawBufferPointer? {
        try settle()
        return try txn.pages.get(root: state.info.root, key: key)
    }

    /// A copy of the value under `key`.
    ///
    /// ```swift
    /// try store.write { txn in
    ///     let users = try txn.createTree("users")
    ///     let old = try users.get(Array("u1".utf8))   // sees this transaction's writes
    /// }
    /// ```
    public func get(_ key: [UInt8]) throws -> [UInt8]? {
        try key.withUnsafeBytes { (k) throws -> [UInt8]? in try get(k).map { Array($0) } }
    }

    /// A cursor over the tree as it is now. Any later write to the transaction invalidates it
    /// (`next` and `prev` throw `cursorInvalidated`) until it is repositioned (`seek`, `first`,
    /// `last`), which starts from the tree as it is then.
    ///
    /// ```swift
    /// try store.write { txn in
    ///     let cursor = try txn.createTree("users").cursor()
    ///     if try cursor.last() { print("largest key:", Array(cursor.key)) }
    /// }
    /// ```
    public func cursor() throws -> Cursor {
        try settle()
        return Cursor(pages: txn.pages, tree: state, writer: txn)
    }

    /// Replaces the tree's root and count (the format upgrade rebuilds its branches; its entries
    /// do not change).
    func replaceInfo(_ change: (TreeInfo) throws -> TreeInfo) throws {
        try settle()
        let updated = try change(state.info)
        if updated != state.info {
            txn.pages.version &+= 1
            state.info = updated
            state.modified = true
        }
    }
}

extension WriteTree {
    /// Stores `value` under `key` later, in key order with the tree's other deferred writes
    /// (DeferredWrites.swift): before anything reads the tree, writes it otherwise, opens a
    /// savepoint or commits. For many writes in random key order (index entries). Until then
    /// `count` leaves them out. A key or value over the limits throws now, as `put` would.
    package func putLater(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws {
        try check()
        try checkSizes(key, value)
        state.deferred.put(key, value)
        try deferred(key, memory: DeferredWrites.memory(key: key.count, value: value.count))
    }

    /// `putLater`, with the tree's deferred writes applied by `merge` rather than put one by one:
    /// `value` is merged under `key` in the merge's own way. Every deferred write of the tree must
    /// then go through `merge` (this and `deleteLater(_:mergedBy:)`).
    package func putLater(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, mergedBy merge: any DeferredMerge) throws {
        if state.merge !== merge { state.merge = merge }
        try putLater(key, value)
    }

    /// `deleteLater`, applied by `merge` as `putLater(_:_:mergedBy:)` is.
    package func deleteLater(_ key: UnsafeRawBufferPointer, mergedBy merge: any DeferredMerge) throws {
        if state.merge !== merge { state.merge = merge }
        try deleteLater(key)
    }

    /// Removes `key` (if there) later, as `putLater` stores.
    package func deleteLater(_ key: UnsafeRawBufferPointer) throws {
        try check()
        if key.count == 0 { return }  // (no such key can be stored)
        state.deferred.delete(key)
        try deferred(key, memory: DeferredWrites.memory(key: key.count, value: 0))
    }

    /// A key or value over the limits throws when kept back, as `put` would.
    private func checkSizes(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws {
        let maxKey = txn.maxKeySize
        if key.count == 0 || key.count > maxKey { throw StorageError.invalidKey(length: key.count, maximum: maxKey) }
        if value.count > Limits.maxValueSize { throw StorageError.valueTooLarge(length: value.count, maximum: Limits.maxValueSize) }
    }

    private func deferred(_ key: UnsafeRawBufferPointer, memory: Int) throws {
        // A write for cursors and value views as much as one applied now.
        txn.pages.version &+= 1
        state.modified = true
        state.noteChange(key)
        txn.deferredMemory += memory
        if txn.deferredMemory > DeferredWrites.limit { try txn.applyAllDeferred() }
    }

    /// `get`, leaving the deferred writes deferred: the caller vouches that none is for `key`.
    /// Sees what `putBesideDeferred` stored.
    package func getBesideDeferred(_ key: UnsafeRawBufferPointer) throws -> [UInt8]? {
        try check()
        if let i = state.besideIndex(key) { return state.beside[i].value }
        return try txn.pages.get(root: state.info.root, key: key).map(Array.init)
    }

    /// `put`, leaving the deferred writes deferred: the caller vouches that none is for `key`
    /// (the two commute then). Kept back too, as the key's latest value, and applied with the
    /// deferred writes: a counter rewritten after every deferred batch of entries (a full-text
    /// index's statistics, once per text) then costs a list update, not a descent.
    package func putBesideDeferred(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws {
        try check()
        try checkSizes(key, value)
        // Counted against the deferred writes' limit as what is held: a new key as one write, a
        // new value of a kept key by how much it outgrows the one it replaces.
        var memory = 0
        if let i = state.besideIndex(key) {
            memory = max(0, value.count - state.beside[i].value.count)
            state.beside[i].value = Array(value)
        } else {
            state.beside.append((Array(key), Array(value)))
            memory = DeferredWrites.memory(key: key.count, value: value.count)
        }
        try deferred(key, memory: memory)
    }
}

/// A tree's state inside a write transaction.
final class TreeState {
    let name: String
    // Unchecked for the reason given on WriteTransaction's state: only its thread touches it.
    @exclusivity(unchecked) var info: TreeInfo
    @exclusivity(unchecked) var modified = false
    /// Writes kept back to be applied in key order (DeferredWrites.swift).
    @exclusivity(unchecked) var deferred = DeferredWrites()
    /// What applies `deferred`, when not `applySorted` (`putLater(_:_:mergedBy:)`).
    @exclusivity(unchecked) var merge: (any DeferredMerge)?
    /// Puts kept back beside them (`putBesideDeferred`): the latest value of each key. A list:
    /// a tree has one or two such keys, found by comparing bytes, with no array made to look one up.
    @exclusivity(unchecked) var beside: [(key: [UInt8], value: [UInt8])] = []

    func besideIndex(_ key: UnsafeRawBufferPointer) -> Int? {
        beside.firstIndex { entry in entry.key.withUnsafeBytes { compareBytes($0, key) == 0 } }
    }
    /// Whether anything is kept back.
    var hasDeferred: Bool { !deferred.isEmpty || !beside.isEmpty }
    var dropped = false {
        didSet { if dropped { changedKeys = nil } }
    }
    /// Keys this transaction wrote or deleted, for commit listeners; nil once there are more than
    /// `changedKeyLimit` (or the tree was dropped), and when no listener was registered as the
    /// transaction began: then "anything may have changed".
    @exclusivity(unchecked) var changedKeys: Set<[UInt8]>?
    static let changedKeyLimit = 10_000

    @inline(__always) func noteChange(_ key: UnsafeRawBufferPointer) {
        guard let count = changedKeys?.count else { return }
        if count >= TreeState.changedKeyLimit {
            changedKeys = nil
        } else {
            changedKeys?.insert(Array(key))  // in place: optional chaining keeps the set unique
        }
    }

    init(name: String, info: TreeInfo, tracksKeys: Bool) {
        self.name = name
        self.info = info
        self.changedKeys = tracksKeys ? [] : nil
    }
}

func validateTreeName(_ name: String) throws {
    let length = name.utf8.count
    if length == 0 || length > 255 { throw StorageError.invalidTreeName(name) }
}

/// Names in the catalog tree at `catalogRoot`.
func listTrees(pages: PageMap, catalogRoot: PageNo) throws -> [String] {
    var names: [String] = []
    let cursor = Cursor(pages: pages, root: catalogRoot, owner: pages)
    var more = try cursor.first()
    while more {
        names.append(String(decoding: cursor.key, as: UTF8.self))
        more = try cursor.next()
    }
    return names
}
