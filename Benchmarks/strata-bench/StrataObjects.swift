import Foundation
import Strata

/// Strata through its public object API only: `Database`, `db.write`, `Snapshot.object`,
/// `Results` with `#Predicate` filters, `fetchCount()` and `sum(of:)`. Default options: 4 KiB
/// pages, `.full` durability, single-sync commits.
final class StrataObjects: ObjectEngine {
    let db: Database
    let path: String

    /// Opens a fresh database at `path` (any old file there and its lock file are removed first).
    /// The options it was opened with (what `info()` reports).
    let options: StoreOptions

    init(path: String, options: StoreOptions = StoreOptions()) throws {
        self.options = options
        removeFile(path)
        removeFile(path + "-lock")
        removeFile(path + "-log")
        self.path = path
        self.db = try Database(path: path, models: [Item.self], options: options)
    }

    var dataFiles: [String] { strataDataFiles(path) }

    func write<R>(_ body: (inout Writer) throws -> R) throws -> R {
        try db.write { tx in
            var writer = Writer(tx: tx)
            return try body(&writer)
        }
    }

    func read<R>(slot: Int, _ body: (inout Reader) throws -> R) throws -> R {
        try db.read { snapshot in
            var reader = Reader(snapshot: snapshot)
            return try body(&reader)
        }
    }

    func openReaders(_ count: Int) throws {}

    func info() -> [(String, String)] {
        var facts: [(String, String)] = [
            ("page size", "\(db.store.pageSize)"),
            (
                "durability",
                (options.durability == .full ? "full (fdatasync)" : "noSync")
                    + (options.syncMode == .single ? ", single-sync commits" : ", double-sync commits")
            ),
            ("compaction", options.compaction.isEnabled ? "on" : "off"),
            ("index", "Item.category (static let indexes)"),
        ]
        if let stats = try? db.store.stats() {
            facts.append(("pages used/free/pending", "\(stats.usedPages)/\(stats.freePages)/\(stats.pendingPages)"))
        }
        return facts
    }

    func codec() throws -> Codec? { Codec(coder: try db.recordCoder(for: Item.self)) }

    /// `RecordCoder`: the record bytes Strata stores, the same encode and decode every write and
    /// read of the object API goes through.
    struct Codec: ItemCodec {
        let coder: RecordCoder<Item>

        mutating func encode(_ item: Item) throws -> Int { try coder.encode(item).count }
        mutating func record(_ item: Item) throws -> [UInt8] { try coder.encode(item) }
        mutating func decode(_ record: UnsafeRawBufferPointer, id: Int64) throws -> Item { try coder.decode(record) }
    }

    struct Writer: ObjectWriter {
        let tx: Transaction

        mutating func insert(_ item: Item) throws {
            try tx.insert(item)
        }

        mutating func update(id: Int64, name: String, score: Double) throws -> Bool {
            do {
                try tx.update(Item.self, key: id) { item in
                    item.name = name
                    item.score = score
                }
                return true
            } catch StrataError.notFound {
                return false
            }
        }

        mutating func delete(id: Int64) throws -> Bool {
            try tx.delete(Item.self, key: id)
        }
    }

    struct Reader: ObjectReader {
        let snapshot: Snapshot

        mutating func item(id: Int64) throws -> Item? {
            try snapshot.object(Item.self, key: id)
        }

        /// Iterates `results` as an app would (`for item in results`), then surfaces its error.
        private func visitAll(_ results: Results<Item>, _ visit: (Item) -> Void) throws -> Int {
            var seen = 0
            for item in results {
                visit(item)
                seen += 1
            }
            if let error = results.error { throw error }
            return seen
        }

        mutating func forEach(_ visit: (Item) -> Void) throws -> Int {
            try visitAll(snapshot.objects(Item.self), visit)
        }

        mutating func forEach(category: Int64, _ visit: (Item) -> Void) throws -> Int {
            try visitAll(snapshot.objects(Item.self).filter(#Predicate<Item> { $0.category == category }), visit)
        }

        mutating func count(scoreAbove threshold: Double) throws -> Int {
            try snapshot.objects(Item.self).filter(#Predicate<Item> { $0.score > threshold }).fetchCount()
        }

        mutating func count() throws -> Int {
            try snapshot.objects(Item.self).fetchCount()
        }

        mutating func sumOfScores(category: Int64) throws -> Double {
            // `sum(of:)` cannot throw (a failed query sums to 0); the cross-engine checksum of the
            // sums catches that.
            snapshot.objects(Item.self).filter(#Predicate<Item> { $0.category == category }).sum(of: \.score)
        }
    }
}
