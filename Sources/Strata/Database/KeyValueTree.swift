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
    func tree(named name: String) throws -> WriteTree? { try txn.tree(name) }
}

extension KeyValueTree {
    func view(_ key: [UInt8]) throws -> UnsafeRawBufferPointer? {
        try key.withUnsafeBytes { try get($0) }
    }
}
