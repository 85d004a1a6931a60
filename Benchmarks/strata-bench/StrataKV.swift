import StrataStorage

/// StrataStorage through its public API, with `StoreOptions()` defaults: 4 KiB pages (the default
/// for new files), `.full` durability, single-sync commits.
final class StrataKV: KVEngine {
    static let treeName = "bench"

    let store: Store
    let path: String

    /// Opens a fresh store at `path` (any old file there and its lock file are removed first).
    /// The options it was opened with (what `info()` reports).
    let options: StoreOptions

    init(path: String, options: StoreOptions = StoreOptions()) throws {
        self.options = options
        removeFile(path)
        removeFile(path + "-lock")
        removeFile(path + "-log")
        self.path = path
        self.store = try Store(path: path, options: options)
    }

    var dataFiles: [String] { strataDataFiles(path) }

    func write<R>(_ body: (inout Writer) throws -> R) throws -> R {
        try store.write { txn in
            var writer = Writer(tree: try txn.createTree(StrataKV.treeName))
            return try body(&writer)
        }
    }

    func read<R>(_ body: (Reader) throws -> R) throws -> R {
        try store.read { txn in
            guard let tree = try txn.tree(StrataKV.treeName) else {
                throw BenchError("strata: tree \(StrataKV.treeName) is missing")
            }
            return try body(Reader(tree: tree))
        }
    }

    func entryCount() throws -> Int {
        try store.read { txn in try txn.tree(StrataKV.treeName)?.count ?? 0 }
    }

    func info() -> [(String, String)] {
        var facts: [(String, String)] = [
            ("page size", "\(store.pageSize)"),
            (
                "durability",
                (options.durability == .full ? "full (fdatasync)" : "noSync")
                    + (options.syncMode == .single ? ", single-sync commits" : ", double-sync commits")
            ),
            ("compaction", options.compaction.isEnabled ? "on" : "off"),
        ]
        if let stats = try? store.stats() {
            facts.append(("pages used/free/pending", "\(stats.usedPages)/\(stats.freePages)/\(stats.pendingPages)"))
        }
        return facts
    }

    struct Writer: KVWriter {
        let tree: WriteTree

        @inline(__always)
        mutating func put(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws {
            try tree.put(key, value)
        }

        @inline(__always)
        mutating func delete(_ key: UnsafeRawBufferPointer) throws -> Bool {
            try tree.delete(key)
        }
    }

    struct Reader: KVReader {
        let tree: ReadTree

        @inline(__always)
        func get(_ key: UnsafeRawBufferPointer) throws -> UnsafeRawBufferPointer? {
            try tree.get(key)
        }

        func scan(
            from key: UnsafeRawBufferPointer, limit: Int,
            _ visit: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Void
        ) throws -> Int {
            let cursor = tree.cursor()
            var more = try cursor.seek(key)
            var seen = 0
            while more && seen < limit {
                visit(cursor.key, cursor.value)
                seen += 1
                if seen < limit { more = try cursor.next() }
            }
            return seen
        }

        func scanAll(_ visit: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Void) throws -> Int {
            let cursor = tree.cursor()
            var more = try cursor.first()
            var seen = 0
            while more {
                visit(cursor.key, cursor.value)
                seen += 1
                more = try cursor.next()
            }
            return seen
        }
    }
}
