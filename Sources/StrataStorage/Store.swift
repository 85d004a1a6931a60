import Synchronization

/// A Strata page file: named B+trees of byte keys and values, read through MVCC snapshots and
/// written by one transaction at a time, across threads and processes.
///
/// ```swift
/// let store = try Store(path: "/tmp/demo.strata")
/// try store.write { txn in
///     try txn.createTree("greetings").put(Array("hello".utf8), Array("world".utf8))
/// }
/// let value = try store.read { txn in try txn.tree("greetings")?.get(Array("hello".utf8)) }
/// ```
public final class Store: Sendable {
    let env: Environment
    private let closed = Atomic<Bool>(false)
    /// The handlers of `onClose`. `closed` changes only under this lock, so a handler added after
    /// `close()` sees it and runs at once.
    private let closeHandlers = Mutex<(next: UInt64, all: [UInt64: @Sendable () -> Void])>((1, [:]))
    /// Default durability of `write`.
    public let durability: Durability
    /// Whether this handle was opened with `StoreOptions.readOnly`: `write` throws, and nothing
    /// on disk is changed through it.
    ///
    /// ```swift
    /// let store = try Store(path: "app.strata", options: StoreOptions(readOnly: true))
    /// assert(store.isReadOnly)   // store.write { ... } throws StorageError.readOnly
    /// ```
    public let isReadOnly: Bool
    /// `StoreOptions.transactionMemory`.
    let transactionMemory: Int
    /// `StoreOptions.compaction`.
    let compaction: Compaction

    /// Opens (or creates) the store at `path`. Handles of the same file in one process share one
    /// map, one writer lock and one reader table. The file closes when its last handle and
    /// snapshot are gone; an opening that meets it still closing on another thread waits for that
    /// to finish, and then opens it as a process that has it alone (through recovery). A new file
    /// is created atomically (FORMAT.md §4.1): a crash leaves no file or a complete one. An empty
    /// file that no other process has open is initialised the same way; any other file is never
    /// overwritten.
    ///
    /// A file written by an earlier format that this build can still read (FORMAT.md §9) is
    /// upgraded on its first read-write open, in one commit (durable, whatever `durability` says);
    /// a read-only open reads it as it is.
    ///
    /// ```swift
    /// let store = try Store(path: "/tmp/demo.strata")   // created if missing
    /// ```
    public init(path: String, options: StoreOptions = StoreOptions()) throws {
        try Store.checkPlatform()
        self.env = try Environment.open(path: path, options: options)
        self.durability = options.durability
        self.isReadOnly = options.readOnly
        self.transactionMemory = options.transactionMemory
        self.compaction = options.compaction
        try upgradeIfNeeded()
    }

    /// Opens the store with its page file seen through `wrap` (and, when the open creates the
    /// file, the temporary file the creation writes): the seam tests use to inject failed writes
    /// and syncs, a full disk, or lost writes.
    init(path: String, options: StoreOptions, wrap: @escaping (FileIO) -> FileIO) throws {
        self.env = try Environment.open(path: path, options: options, wrap: wrap)
        self.durability = options.durability
        self.isReadOnly = options.readOnly
        self.transactionMemory = options.transactionMemory
        self.compaction = options.compaction
        try upgradeIfNeeded()
    }

    /// The format-2 → 3 upgrade (Upgrade.swift), when the newest commit is older than format 3.
    /// The writer lock makes two processes opening one old file upgrade it once.
    /// The version is read from the newest meta page, not through a snapshot: opening must not
    /// need a reader slot (every one may be held, by this process or others, and reads are what
    /// should fail then, not the open). A meta page a writer in another process is overwriting
    /// meanwhile is left to the write, which looks again under the writer lock and changes
    /// nothing on a format-3 file.
    private func upgradeIfNeeded() throws {
        if isReadOnly { return }
        if let meta = newestMetaFields(), meta.formatVersion >= 3 { return }
        try write(durability: .full) { txn in try txn.upgradeToCountedBranches() }
    }

    /// The fields of the newest commit's meta page, read without a snapshot (so without a reader
    /// slot); nil when a writer in another process is overwriting that page (two commits later).
    func newestMetaFields() -> Meta? {
        let latest = env.readers.latest
        let meta = Meta.fields(env.maps.current.base + Int(latest % 2) * env.pageSize)
        return meta.txnid == latest ? meta : nil
    }

    /// An in-memory store: the same engine on an anonymous memory-backed file that vanishes when
    /// the store is released.
    ///
    /// ```swift
    /// let cache = try Store.inMemory()
    /// ```
    ///
    /// ```swift
    /// let store = try Store.inMemory()   // for tests
    /// ```
    public static func inMemory(options: StoreOptions = StoreOptions(durability: .noSync)) throws -> Store {
        try checkPlatform()
        return Store(
            env: try Environment.openAnonymous(options: options), durability: options.durability, readOnly: options.readOnly,
            transactionMemory: options.transactionMemory, compaction: options.compaction)
    }

    private init(env: Environment, durability: Durability, readOnly: Bool, transactionMemory: Int, compaction: Compaction) {
        self.env = env
        self.durability = durability
        self.isReadOnly = readOnly
        self.transactionMemory = transactionMemory
        self.compaction = compaction
    }

    private static func checkPlatform() throws {
        if 1.littleEndian != 1 { throw StorageError.internalError("big-endian hosts are not supported") }
    }

    /// The file's path (":memory:" for an in-memory store).
    public var path: String { env.path }
    /// The page size of the file.
    public var pageSize: Int { env.pageSize }
    /// The longest key this store accepts.
    ///
    /// ```swift
    /// let fits = key.count <= store.maxKeySize   // a longer key throws StorageError.invalidKey
    /// ```
    public var maxKeySize: Int { Limits.maxKeySize(pageSize: env.pageSize) }

    var closedFlag: Bool { closed.load(ordering: .relaxed) }

    private func checkOpen() throws {
        if closed.load(ordering: .relaxed) { throw StorageError.closed }
    }

    /// Closes this handle. Transactions already begun finish normally; the file closes when the
    /// last handle and snapshot on it are gone.
    ///
    /// ```swift
    /// store.close()
    /// assert(store.isClosed)
    /// ```
    public func close() {
        // Set under the handlers' lock: whoever sees the store closed and removes its handler
        // finds it already taken, so every handler registered before the close runs.
        let handlers = closeHandlers.withLock { state -> [@Sendable () -> Void] in
            if closed.exchange(true, ordering: .sequentiallyConsistent) { return [] }
            defer { state.all.removeAll() }
            return state.all.sorted { $0.key < $1.key }.map(\.value)
        }
        for handler in handlers { handler() }
    }

    /// Calls `handler` once, on the thread that calls `close()` on this handle (at once, on this
    /// thread, if it was already called), so that whatever follows the store can end: an
    /// observer's stream finishes instead of waiting for commits that will never come. Handlers
    /// run in the order they were added, outside any lock; they must only hand the news off.
    /// Invalidating the token (or releasing it) removes the handler.
    ///
    /// ```swift
    /// let token = store.onClose { continuation.finish() }
    /// store.close()   // the handler has run
    /// ```
    public func onClose(_ handler: @escaping @Sendable () -> Void) -> CloseHandlerToken {
        let id = closeHandlers.withLock { state -> UInt64? in
            if closed.load(ordering: .sequentiallyConsistent) { return nil }
            defer { state.next += 1 }
            state.all[state.next] = handler
            return state.next
        }
        guard let id else {
            handler()
            return CloseHandlerToken {}
        }
        return CloseHandlerToken { [weak self] in
            _ = self?.closeHandlers.withLock { $0.all.removeValue(forKey: id) }
        }
    }

    /// The id of the newest commit (what a snapshot begun now would see).
    ///
    /// ```swift
    /// let before = store.latestVersion
    /// try store.write { txn in _ = try txn.createTree("t") }
    /// assert(store.latestVersion > before)
    /// ```
    public var latestVersion: UInt64 {
        if env.isReadOnly, let snapshot = try? env.readOnlySnapshot() { return snapshot.meta.txnid }
        return env.readers.latest
    }

    /// True while the calling thread is inside `write` on this file (through any handle): a
    /// layer above uses it to join the open transaction instead of deadlocking on a second one.
    public var isWritingOnCurrentThread: Bool {
        env.writerThread.load(ordering: .relaxed) == currentThreadHash()
    }

    // MARK: Transactions

    /// Begins a read snapshot of the newest commit. End it with `end()` or by releasing it.
    ///
    /// ```swift
    /// let txn = try store.beginRead()   // a snapshot kept across calls
    /// defer { txn.end() }
    /// let count = try txn.tree("users")?.count ?? 0
    /// ```
    public func beginRead() throws -> ReadTransaction {
        try checkOpen()
        return try ReadTransaction(env: env)
    }

    /// Runs `body` on a snapshot of the newest commit and returns its result. On a read-only store
    /// whose snapshot a writer in another process may have changed meanwhile, throws
    /// `StorageError.fileChangedDuringRead` instead of `body`'s result or error (see
    /// `StoreOptions.readOnly`).
    ///
    /// ```swift
    /// let names = try store.read { txn in try txn.treeNames() }
    /// ```
    public func read<R>(_ body: (ReadTransaction) throws -> R) throws -> R {
        let txn = try beginRead()
        defer { txn.end() }
        let result: R
        do {
            result = try body(txn)
        } catch {
            // An error found in pages a writer was reusing says nothing about the file.
            if !txn.isUnchanged { throw StorageError.fileChangedDuringRead(path: path) }
            throw error
        }
        try txn.validate()
        return result
    }

    /// Runs `body` while no writer in another process can commit. For a read-only store whose
    /// reads a busy writer keeps overtaking (each `read` throws `fileChangedDuringRead`): reads
    /// inside `body` cannot be overtaken, because writers wait (as for each other) until it
    /// returns. Keep `body` short, and never write to this file from it through another handle:
    /// that write would wait for `body`. Elsewhere (a read-write store, whose snapshots no writer
    /// overtakes, or a platform without open file description locks) it just runs `body`.
    ///
    /// ```swift
    /// let names = try store.holdingWritersOff { try store.read { try $0.treeNames() } }
    /// ```
    public func holdingWritersOff<R>(_ body: () throws -> R) throws -> R {
        try checkOpen()
        guard let readOnly = env.readOnly else { return try body() }
        return try readOnly.holdingWritersOff(body)
    }

    /// Runs `body` in the write transaction and commits it, returning `body`'s result. If `body`
    /// throws, nothing it did is kept and the error is rethrown. One writer at a time: others, in
    /// this process or another, wait. Calling `write` inside `write` throws.
    ///
    /// ```swift
    /// let added = try store.write(durability: .noSync) { txn in
    ///     try txn.createTree("log").insert([0, 0, 0, 1], Array("started".utf8))
    /// }
    /// ```
    public func write<R>(durability: Durability? = nil, _ body: (WriteTransaction) throws -> R) throws -> R {
        try checkOpen()
        if isReadOnly || env.isReadOnly { throw StorageError.readOnly(path: path) }
        let me = currentThreadHash()
        if env.writerThread.load(ordering: .relaxed) == me {
            throw StorageError.nestedWrite
        }
        // Counted from before the lock until the commit is done: idle-time compaction gives way.
        env.activeWriters.add(1, ordering: .relaxed)
        defer { env.activeWriters.subtract(1, ordering: .relaxed) }
        let outcome = try withWriterLocks(waitForOtherProcesses: true) { () throws -> R in
            let txn = try WriteTransaction(
                env: env, durability: durability ?? self.durability, memory: transactionMemory,
                compaction: compaction)
            do {
                let result = try body(txn)
                if !txn.isFinished {
                    try txn.commit()
                    if txn.wantsFollowUp { followUpCompaction(durability: txn.durability) }
                    noteCommitForIdleCompaction(
                        leavesHoles: txn.leavesHoles, freedMuch: txn.freedMuchLately, pageCount: txn.pageCount,
                        readers: { txn.allocator.sortedReaders })
                }
                return result
            } catch {
                txn.abort()
                throw error
            }
        }
        // Waiting for other processes, `withWriterLocks` always runs the body.
        guard let outcome else { throw StorageError.internalError("the writer lock was not taken") }
        return outcome
    }

    /// Runs `body` holding this process's writer lock and, for a file other processes can open,
    /// the lock file's writer byte. Returns nil, without running `body`, when
    /// `waitForOtherProcesses` is false and another process holds that byte.
    func withWriterLocks<R>(waitForOtherProcesses: Bool, _ body: () throws -> R) throws -> R? {
        let me = currentThreadHash()
        return try env.writer.withLock { _ throws -> R? in
            env.writerThread.store(me, ordering: .relaxed)
            defer { env.writerThread.store(0, ordering: .relaxed) }
            if let lockFile = env.lockFile {
                if waitForOtherProcesses {
                    try WriterLock.take(lockFile)
                } else if try !WriterLock.takeIfFree(lockFile) {
                    return nil
                }
            }
            defer { env.lockFile.map(WriterLock.release) }
            try env.discardUnpublishedMeta()
            return try body()
        }
    }
}

/// Removes an `onClose` handler when invalidated or released.
///
/// ```swift
/// var token: CloseHandlerToken? = store.onClose { print("closed") }
/// token = nil   // the handler is gone, like token?.invalidate()
/// ```
public final class CloseHandlerToken: Sendable {
    private let remove: @Sendable () -> Void
    private let active = Atomic<Bool>(true)

    init(remove: @escaping @Sendable () -> Void) { self.remove = remove }

    /// Removes the handler (it will not run). Safe to call more than once.
    public func invalidate() {
        if active.exchange(false, ordering: .sequentiallyConsistent) { remove() }
    }

    deinit { invalidate() }
}
