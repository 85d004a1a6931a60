import Synchronization

/// A read-only snapshot of the store: it sees the newest commit at the moment it began, for its
/// whole life, whatever writers do meanwhile. Any number may be open at once, on any threads.
/// Beginning and ending one takes no lock and no system call.
///
/// End it promptly (`end()`, or let it go): while it lives, pages its snapshot sees are not reused.
///
/// ```swift
/// let snapshot = try store.beginRead()
/// defer { snapshot.end() }
/// if let users = try snapshot.tree("users"), let name = try users.get(Array("u1".utf8)) {
///     print(String(decoding: name, as: UTF8.self))
/// }
/// ```
public final class ReadTransaction: Sendable {
    let env: Environment
    let pages: PageMap
    let meta: Meta
    /// The reader slot holding this snapshot; nil for a read-only store's snapshot, which is not
    /// registered (ReadOnly.swift).
    private let slot: Int?
    /// For an unregistered snapshot: both meta pages as they were when it began.
    private let metaPages: [UInt8]?
    /// For a read-only snapshot taken while a newer commit was written but not yet published: that
    /// commit's id (see `validate`).
    private let passedOver: UInt64?
    private let ended = Atomic<Bool>(false)

    /// The id of the commit this snapshot sees.
    ///
    /// ```swift
    /// let txn = try store.beginRead()
    /// assert(txn.txnid == store.latestVersion)   // until the next commit
    /// ```
    public var txnid: UInt64 { meta.txnid }

    init(env: Environment) throws {
        self.env = env
        if let readOnly = env.readOnly {
            readOnly.holdShrinkLock(env.file)
            let (meta, mapping, copies): (Meta, MapTable.Mapping, [UInt8])
            let passedOver: UInt64?
            do { (meta, mapping, copies, passedOver) = try env.readOnlySnapshot() } catch { readOnly.releaseShrinkLock(env.file); throw error }
            let needed = Int(meta.pageCount) * env.pageSize
            let map: MapTable.Mapping
            do { map = needed > mapping.length ? try env.maps.ensure(bytes: needed) : mapping } catch { readOnly.releaseShrinkLock(env.file); throw error }
            self.slot = nil
            self.metaPages = copies
            self.passedOver = passedOver
            self.meta = meta
            self.pages = PageMap(base: map.base, pageSize: env.pageSize, limit: meta.pageCount, isWrite: false, newest: meta.txnid)
            return
        }
        self.metaPages = nil
        self.passedOver = nil
        let readers = env.readers
        let slot = try readers.acquire()
        var meta: Meta
        var map: MapTable.Mapping
        var attempts = 0
        while true {
            // Publish the id first, then check it is still the newest: a writer that scanned the
            // table before our store has committed something newer, which the recheck sees.
            let latest = readers.latest
            readers.set(slot, txnid: latest)
            map = env.maps.current
            meta = Meta.fields(map.base + Int(latest % 2) * env.pageSize)
            if meta.txnid == latest && readers.latest == latest { break }
            attempts += 1
            if attempts > 1_000_000 {
                readers.release(slot)
                throw StorageError.internalError("could not pin a snapshot")
            }
        }
        if meta.pageSize != env.pageSize || meta.pageCount < 2 || meta.pageCount > Meta.maxPageCount
            || meta.catalog.root >= meta.pageCount || meta.free.root >= meta.pageCount
        {
            readers.release(slot)
            throw StorageError.corrupt(page: latest(meta), reason: "meta page of transaction \(meta.txnid) has inconsistent fields")
        }
        let needed = Int(meta.pageCount) * env.pageSize
        if needed > map.length {
            do { map = try env.maps.ensure(bytes: needed) } catch { readers.release(slot); throw error }
        }
        self.slot = slot
        self.meta = meta
        self.pages = PageMap(base: map.base, pageSize: env.pageSize, limit: meta.pageCount, isWrite: false, newest: meta.txnid)
    }

    deinit { end() }

    /// Releases the snapshot. Using the transaction or its cursors afterwards is a programming error
    /// the engine does not check on the hot path; `tree(_:)` throws.
    ///
    /// ```swift
    /// let txn = try store.beginRead()
    /// defer { txn.end() }   // lets the writer reuse the pages it saw
    /// ```
    public func end() {
        if !ended.exchange(true, ordering: .sequentiallyConsistent) {
            if let slot { env.readers.release(slot) } else { env.readOnly?.releaseShrinkLock(env.file) }
        }
    }

    /// Throws `StorageError.fileChangedDuringRead` if what this snapshot read so far may not be the
    /// commit it began on: possible only for a snapshot of a read-only store (`StoreOptions.readOnly`),
    /// which cannot register with a writer in another process, after that writer committed twice.
    /// Call it after reading and before trusting the result; `Store.read` does. Registered snapshots
    /// never change, and pass at once.
    ///
    /// ```swift
    /// let snapshot = try readOnlyStore.beginRead()
    /// defer { snapshot.end() }
    /// let names = try snapshot.treeNames()
    /// try snapshot.validate()          // names are those of commit snapshot.txnid
    /// ```
    public func validate() throws {
        guard let metaPages else { return }
        // Through the map, not pread: one comparison and no system call, cheap enough to run after
        // every object a layer above decodes. A shared map and pwrite see one page cache, so
        // another process's meta page shows at once. The fence keeps the loads of the pages read
        // before from moving past these: a reused page read must not pair with an older meta page.
        atomicMemoryFence(ordering: .acquiring)
        let unchanged = metaPages.withUnsafeBytes { memcmpRaw($0.baseAddress!, pages.base, $0.count) == 0 }
        if !unchanged { throw StorageError.fileChangedDuringRead(path: env.path) }
        if let passedOver, let latest = env.readOnly?.lockView?.latest, latest >= passedOver {
            throw StorageError.fileChangedDuringRead(path: env.path)
        }
    }

    /// True for a snapshot that a writer in another process may overtake (one of a read-only
    /// store, `StoreOptions.readOnly`): what it reads is trustworthy only once `validate()` passes
    /// after the read. False for every other snapshot, whose pages never change.
    ///
    /// ```swift
    /// let snapshot = try store.beginRead()
    /// let value = try snapshot.tree("t")?.get([1])
    /// if snapshot.needsValidation { try snapshot.validate() }   // before trusting value
    /// ```
    public var needsValidation: Bool { metaPages != nil }

    /// Whether `validate()` passes.
    var isUnchanged: Bool { (try? validate()) != nil }

    /// The tree called `name`, or nil when there is none.
    ///
    /// ```swift
    /// let users = try store.read { txn in try txn.tree("users")?.count ?? 0 }
    /// ```
    public func tree(_ name: String) throws -> ReadTree? {
        if ended.load(ordering: .relaxed) { throw StorageError.transactionFinished }
        try validateTreeName(name)
        // The name's own UTF-8 bytes, not a copy: an object lookup opens its tree by name each time.
        var name = name
        guard let bytes = try name.withUTF8({ (k) throws in try pages.get(root: meta.catalog.root, key: UnsafeRawBufferPointer(k)) }) else {
            return nil
        }
        return ReadTree(txn: self, name: name, info: try TreeInfo.decode(bytes, name: name, pageCount: meta.pageCount, pageSize: meta.pageSize))
    }

    /// The names of every tree, in byte order.
    ///
    /// ```swift
    /// let names = try store.read { try $0.treeNames() }
    /// ```
    public func treeNames() throws -> [String] {
        if ended.load(ordering: .relaxed) { throw StorageError.transactionFinished }
        return try listTrees(pages: pages, catalogRoot: meta.catalog.root)
    }
}

private func latest(_ meta: Meta) -> UInt64 { meta.txnid % 2 }

/// A tree in a read snapshot.
///
/// ```swift
/// try store.read { txn in
///     guard let items = try txn.tree("items") else { return }
///     print(items.count)
///     try items.forEach(from: [10], to: [20]) { key, value in print(key.count, value.count); return true }
/// }
/// ```
public struct ReadTree: Sendable {
    let txn: ReadTransaction
    /// The tree's name.
    public let name: String
    let info: TreeInfo

    /// Number of entries.
    ///
    /// ```swift
    /// let n = try store.read { try $0.tree("users")?.count ?? 0 }   // no scan
    /// ```
    public var count: Int { Int(clamping: info.count) }  // a corrupt count must not trap

    /// The value under `key`, as a view into the map valid for the life of the transaction.
    ///
    /// ```swift
    /// let length = try store.read { txn in
    ///     try Array("u1".utf8).withUnsafeBytes { try txn.tree("users")?.get($0)?.count }
    /// }
    /// ```
    @inline(__always)
    public func get(_ key: UnsafeRawBufferPointer) throws -> UnsafeRawBufferPointer? {
        try txn.pages.get(root: info.root, key: key)
    }

    /// A copy of the value under `key`.
    ///
    /// ```swift
    /// let value = try store.read { txn in try txn.tree("users")?.get(Array("u1".utf8)) }
    /// ```
    public func get(_ key: [UInt8]) throws -> [UInt8]? {
        try key.withUnsafeBytes { (k) throws -> [UInt8]? in try get(k).map { Array($0) } }
    }

    /// A cursor over the tree.
    ///
    /// ```swift
    /// try store.read { txn in
    ///     guard let cursor = try txn.tree("users")?.cursor() else { return }
    ///     var more = try cursor.first()
    ///     while more { print(Array(cursor.key)); more = try cursor.next() }
    /// }
    /// ```
    public func cursor() -> Cursor {
        Cursor(pages: txn.pages, root: info.root, owner: txn)
    }
}
