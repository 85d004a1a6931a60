// The key-value engine seam: each engine the kv suite measures is one adapter to these protocols.
// Workloads are generic over the adapter, so with whole-module optimisation every inner loop is
// specialised to concrete calls: no existential or dynamic dispatch stands between the workload
// and the engine.

/// A key-value engine with one named table, opened on a directory of its own.
protocol KVEngine: AnyObject, Sendable {
    associatedtype Writer: KVWriter
    associatedtype Reader: KVReader

    /// Files whose sizes the bench reports (the data file; not lock files).
    var dataFiles: [String] { get }

    /// Runs `body` in one write transaction and commits it durably (the engine's durable default).
    func write<R>(_ body: (inout Writer) throws -> R) throws -> R

    /// Runs `body` on one read snapshot.
    func read<R>(_ body: (Reader) throws -> R) throws -> R

    /// The table's entry count, from the engine's own bookkeeping (no scan).
    func entryCount() throws -> Int

    /// Facts about the engine and its settings for the report ("page size" → "4096").
    func info() -> [(String, String)]
}

/// Writes inside one transaction.
protocol KVWriter {
    /// Stores `value` under `key`, replacing any value there.
    mutating func put(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws
    /// Removes `key`; false when it was absent.
    mutating func delete(_ key: UnsafeRawBufferPointer) throws -> Bool
}

/// Reads on one snapshot. Returned buffers are views valid for the snapshot's life.
protocol KVReader {
    /// The value under `key`, or nil.
    func get(_ key: UnsafeRawBufferPointer) throws -> UnsafeRawBufferPointer?
    /// Visits up to `limit` entries from the first key ≥ `key`, in order, with a new cursor (as an
    /// application's range query would); returns how many it visited.
    func scan(
        from key: UnsafeRawBufferPointer, limit: Int,
        _ visit: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Void
    ) throws -> Int
    /// Visits every entry in key order; returns how many.
    func scanAll(_ visit: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Void) throws -> Int
}
