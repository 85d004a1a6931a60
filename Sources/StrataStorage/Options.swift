/// How a commit reaches the disk.
///
/// ```swift
/// let store = try Store(path: "/tmp/load.strata", options: StoreOptions(durability: .noSync))
/// try store.write(durability: .full) { txn in _ = try txn.createTree("done") }   // this one is durable
/// ```
public enum Durability: Sendable, Equatable {
    /// The commit survives a crash or power loss once `write` returns (fdatasync; F_FULLFSYNC on Apple).
    case full
    /// No sync: fast, for bulk loads and tests. A power loss may lose recent commits; a process
    /// crash loses nothing the kernel already has.
    case noSync
}

/// How many syncs a durable commit makes.
///
/// ```swift
/// let store = try Store(path: "app.strata", options: StoreOptions(syncMode: .double))
/// ```
public enum SyncMode: Sendable, Equatable {
    /// Pages and meta written together, then one sync; the meta's commit record proves the pages
    /// whole on open. The default.
    case single
    /// Pages synced, then the meta written and synced (LMDB's protocol).
    case double
}

/// Settings for opening a store.
///
/// ```swift
/// var options = StoreOptions()
/// options.durability = .noSync          // bulk load
/// let store = try Store(path: "/tmp/load.strata", options: options)
/// ```
public struct StoreOptions: Sendable, Equatable {
    /// Page size for a new file (one of `Limits.pageSizes`); nil uses the default for new files
    /// and whatever an existing file has. Any other value makes opening throw
    /// `StorageError.invalidOption`.
    public var pageSize: Int?
    /// Default durability of commits; `Store.write(durability:)` overrides it per transaction.
    public var durability: Durability = .full
    /// Sync protocol of durable commits.
    public var syncMode: SyncMode = .single
    /// Create the file when it does not exist.
    public var createIfMissing = true
    /// Reader slots in the lock file, for a file this process creates the lock file for: 1 to
    /// 1,048,576 (opening throws `StorageError.invalidOption` otherwise).
    public var readerSlots = LockLayout.defaultSlots
    /// Open an existing file for reading only, changing nothing on disk: the file is opened
    /// O_RDONLY and never created, grown or written, the lock file is never created or written
    /// (so a read-only directory or file is fine), and `write` throws `StorageError.readOnly`.
    /// `createIfMissing` is ignored. Each snapshot sees the newest commit whose pages verify
    /// (FORMAT.md §4), like the first process to open a file after a crash.
    ///
    /// A read-only store cannot register its snapshots in the lock file, so a writer in another
    /// process may reuse pages one of them reads. It notices instead: `read` (and `check`, `stats`,
    /// `copy`, …) throw `StorageError.fileChangedDuringRead` when a writer committed twice during
    /// the snapshot, and a snapshot from `beginRead` can be checked with `validate()`. (Opening
    /// takes snapshots until one holds, 100 at most, so it throws that only beside writers that
    /// overtake every one of them; `Store.holdingWritersOff` makes writers wait while a read runs,
    /// for reads that a writer overtakes every time.) A snapshot begun while another process's
    /// commit is in its sync waits for that commit, up to 50 ms, and sees it. In a process
    /// that already has the file open read-write, a read-only handle shares that opening and its
    /// snapshots are registered like any other. (A `Database` on a read-only store reads the
    /// stored schemas and refuses, with `migrationRequired`, models whose schema it would have to
    /// write; its reads check their snapshot and run again, or report `fileChangedDuringRead`.)
    ///
    /// ```swift
    /// let store = try Store(path: "app.strata", options: StoreOptions(readOnly: true))
    /// let names = try store.read { try $0.treeNames() }   // retry on .fileChangedDuringRead
    /// ```
    public var readOnly = false
    /// Bytes of changed pages a write transaction keeps in memory before it writes the older ones
    /// to their places in the file (they are invisible to readers until the commit's meta page
    /// points at them) and reads them back through the map if it changes them again: a
    /// transaction of any size holds about this much. Spilling pauses while a savepoint is open.
    /// A page changed again after it was written early is written again at the next spill, so a
    /// transaction that writes keys in random order over a tree many times larger than this budget
    /// writes close to one page per key (a 1M-key random load of a 262 MiB tree wrote 3.3 GiB);
    /// keys in order, or a larger budget, avoid that. Default 32 MiB; at least 64 pages.
    ///
    /// ```swift
    /// var options = StoreOptions(durability: .noSync)
    /// options.transactionMemory = 8 << 20   // a bulk load that holds 8 MiB of pages at a time
    /// ```
    public var transactionMemory = 32 << 20
    /// When commits give space back: by default a commit trims free pages off the end of the file
    /// (truncating it, in steps, once the commit is durable), and while more than an eighth of the
    /// pages are free it also moves a bounded number of live pages from the end into the holes
    /// (Compaction.swift, FORMAT.md §3.1). `.off` lets the file only grow; `Store.compact()`
    /// compacts on demand either way.
    ///
    /// ```swift
    /// var options = StoreOptions()
    /// options.compaction = Compaction(freeFraction: 0.05, pagesPerCommit: 256)
    /// ```
    public var compaction = Compaction.automatic

    /// Options with these settings; the rest (`readerSlots`, `transactionMemory`, `compaction`) keep
    /// their defaults and can be set as properties.
    ///
    /// ```swift
    /// let store = try Store(path: "/tmp/load.strata", options: StoreOptions(durability: .noSync))
    /// ```
    public init(
        pageSize: Int? = nil, durability: Durability = .full, syncMode: SyncMode = .single, createIfMissing: Bool = true,
        readOnly: Bool = false
    ) {
        self.pageSize = pageSize
        self.durability = durability
        self.syncMode = syncMode
        self.createIfMissing = createIfMissing
        self.readOnly = readOnly
    }
}

extension StoreOptions {
    /// The most reader slots a lock file holds (64 bytes each: a 64 MiB lock file).
    static let maxReaderSlots = 1 << 20

    /// Throws `StorageError.invalidOption` for the first setting outside what the engine accepts,
    /// before anything is opened: a value that would overflow or trap later (a NaN fraction, a slot
    /// count whose lock file size overflows) is named here instead.
    func validate() throws {
        if let size = pageSize, !Limits.pageSizes.contains(size) {
            let sizes = Limits.pageSizes.map(String.init).joined(separator: ", ")
            throw StorageError.invalidOption(name: "pageSize", reason: "\(size) is not one of \(sizes) (or nil)")
        }
        if !(1...Self.maxReaderSlots).contains(readerSlots) {
            throw StorageError.invalidOption(name: "readerSlots", reason: "\(readerSlots) is not in 1...\(Self.maxReaderSlots)")
        }
        if !(compaction.freeFraction.isFinite && (0...1).contains(compaction.freeFraction)) {
            throw StorageError.invalidOption(
                name: "compaction.freeFraction", reason: "\(compaction.freeFraction) is not a fraction in 0...1")
        }
        if !(1...Compaction.maxPagesPerCommit).contains(compaction.pagesPerCommit) {
            throw StorageError.invalidOption(
                name: "compaction.pagesPerCommit", reason: "\(compaction.pagesPerCommit) is not in 1...\(Compaction.maxPagesPerCommit)")
        }
        // The idle thread sleeps this long between looks: shorter, and it spins.
        if let delay = compaction.idleDelay, delay < .milliseconds(1) {
            throw StorageError.invalidOption(name: "compaction.idleDelay", reason: "\(delay) is under 1 ms (nil: no background compaction)")
        }
    }
}
