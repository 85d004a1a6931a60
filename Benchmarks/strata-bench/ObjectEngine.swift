// The object engine seam: each engine the objects suite measures is one adapter to these
// protocols, written the way a careful application would use that engine (Strata through its public
// object API, SQLite through reused prepared statements, LMDB through packed records and a
// duplicate-sorted index). Workloads are generic over the adapter, so every inner loop is
// specialised to concrete calls.

/// A database of `Item` objects, opened on a directory of its own.
protocol ObjectEngine: AnyObject, Sendable {
    associatedtype Writer: ObjectWriter
    associatedtype Reader: ObjectReader
    associatedtype Codec: ItemCodec = NoItemCodec

    /// Files whose sizes the bench reports (the data file, and SQLite's WAL; not lock files).
    var dataFiles: [String] { get }

    /// Runs `body` in one write transaction and commits it durably.
    func write<R>(_ body: (inout Writer) throws -> R) throws -> R

    /// Runs `body` on one read snapshot. `slot` 0 is the main connection; reader threads use
    /// slots 1...count after `openReaders(count)` (SQLite gives each its own connection; the
    /// others share one handle across threads).
    func read<R>(slot: Int, _ body: (inout Reader) throws -> R) throws -> R

    /// Prepares `count` reader slots for threads (outside the timed part).
    func openReaders(_ count: Int) throws

    /// Facts about the engine and its settings for the report ("page size" → "4096").
    func info() -> [(String, String)]

    /// The engine's own record codec, measured alone by `codec_decode` and `codec_encode`; nil
    /// when the engine has none of its own to measure (SQLite's rows are its columns).
    func codec() throws -> Codec?
}

extension ObjectEngine where Codec == NoItemCodec {
    func codec() throws -> NoItemCodec? { nil }
}

/// An `Item` to and from the bytes an engine stores for it, without the engine: the object layer's
/// codec alone (Strata: `RecordCoder`; LMDB: the packed value).
protocol ItemCodec {
    /// Encodes `item` as the engine would store it; returns the record's length.
    mutating func encode(_ item: Item) throws -> Int
    /// The record of `item` (for preparing the decode workload, untimed).
    mutating func record(_ item: Item) throws -> [UInt8]
    /// Decodes a record `record(_:)` made; `id` is the object's key, for engines that keep it there.
    mutating func decode(_ record: UnsafeRawBufferPointer, id: Int64) throws -> Item
}

/// For engines without a codec of their own.
struct NoItemCodec: ItemCodec {
    mutating func encode(_ item: Item) throws -> Int { throw BenchError("no codec") }
    mutating func record(_ item: Item) throws -> [UInt8] { throw BenchError("no codec") }
    mutating func decode(_ record: UnsafeRawBufferPointer, id: Int64) throws -> Item { throw BenchError("no codec") }
}

/// Writes inside one transaction.
protocol ObjectWriter {
    /// Inserts a new object (an existing id is an error).
    mutating func insert(_ item: Item) throws
    /// Changes the name and score of object `id`; false when there is none.
    mutating func update(id: Int64, name: String, score: Double) throws -> Bool
    /// Deletes object `id`; false when there was none.
    mutating func delete(id: Int64) throws -> Bool
}

/// Reads on one snapshot. Every object is decoded into an `Item`.
protocol ObjectReader {
    /// Object `id`, or nil.
    mutating func item(id: Int64) throws -> Item?
    /// Visits every object in id order; returns how many.
    mutating func forEach(_ visit: (Item) -> Void) throws -> Int
    /// Visits every object of `category` through the category index; returns how many.
    mutating func forEach(category: Int64, _ visit: (Item) -> Void) throws -> Int
    /// The number of objects whose score is above `threshold` (score is not indexed).
    mutating func count(scoreAbove threshold: Double) throws -> Int
    /// The number of objects.
    mutating func count() throws -> Int
    /// The sum of the scores of the objects of `category`.
    mutating func sumOfScores(category: Int64) throws -> Double
}
