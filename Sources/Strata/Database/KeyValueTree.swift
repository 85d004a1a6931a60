/// The engine's read and write trees seen alike, so queries run on snapshots and inside write
/// transactions with the same code.
protocol KeyValueTree {
    func get(_ key: UnsafeRawBufferPointer) throws -> UnsafeRawBufferPointer?
    func makeCursor() throws -> Cursor
    var count: Int { get }
}

extension ReadTree: KeyValueTree {
    func makeCursor() throws -> Cursor { cursor() }
}

extension WriteTree: KeyValueTree {
    func makeCursor() throws -> Cursor { try cursor() }
}

/// Where a query reads: a snapshot or the write transaction.
protocol TreeSource {
    associatedtype Tree: KeyValueTree
    func tree(named name: String) throws -> Tree?
}

struct SnapshotTrees: TreeSource {
    let txn: ReadTransaction
    func tree(named name: String) throws -> ReadTree? { try txn.tree(name) }
}

struct WriteTrees: TreeSource {
    let txn: StrataStorage.WriteTransaction

    /// Applies the transaction's deferred index entries first, all at once: applied one tree at
    /// a time as a query opens them, they would invalidate a cursor the query holds on another.
    init(txn: StrataStorage.WriteTransaction) throws {
        self.txn = txn
        try txn.applyDeferredWrites()
    }

    func tree(named name: String) throws -> WriteTree? { try txn.tree(name) }
}

extension KeyValueTree {
    func view(_ key: [UInt8]) throws -> UnsafeRawBufferPointer? {
        try key.withUnsafeBytes { try get($0) }
    }
}
