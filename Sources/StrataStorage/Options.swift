/// How a commit reaches the disk.
public enum Durability: Sendable, Equatable {
    /// The commit survives a crash or power loss once `write` returns (fdatasync; F_FULLFSYNC on Apple).
    case full
    /// No sync: fast, for bulk loads and tests. A power loss may lose recent commits; a process
    /// crash loses nothing the kernel already has.
    case noSync
}

/// How many syncs a durable commit makes.
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
    /// and whatever an existing file has.
    public var pageSize: Int?
    /// Default durability of commits; `Store.write(durability:)` overrides it per transaction.
    public var durability: Durability = .full
    /// Sync protocol of durable commits.
    public var syncMode: SyncMode = .single
    /// Create the file when it does not exist.
    public var createIfMissing = true
    /// Reader slots in the lock file, for a file this process creates the lock file for.
    public var readerSlots = LockLayout.defaultSlots

    public init(pageSize: Int? = nil, durability: Durability = .full, syncMode: SyncMode = .single, createIfMissing: Bool = true) {
        self.pageSize = pageSize
        self.durability = durability
        self.syncMode = syncMode
        self.createIfMissing = createIfMissing
    }
}
