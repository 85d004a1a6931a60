/// LMDB as the raw floor of an object layer on a B+tree: each object packed into one value
/// (`PackedItem`) under its big-endian id in a database `items`, and the category index a
/// `MDB_DUPSORT | MDB_DUPFIXED` database `by_category` mapping the big-endian category to the
/// big-endian ids. Default durable commits (data synced, then meta synced), MDB_NOSUBDIR,
/// MDB_NOTLS, a 64 GiB map; inserts use MDB_NOOVERWRITE (an insert, not an upsert) and no
/// MDB_APPEND (the app does not promise ordered keys). Every read decodes into an `Item`.
final class LMDBObjects: ObjectEngine, @unchecked Sendable {
    // @unchecked: `env` and the dbis are set once in init; LMDB makes the environment safe to share
    // across threads (one writer at a time, read transactions per thread with MDB_NOTLS). `scratch`
    // is used only inside `write`, which LMDB serialises.
    let lib: LMDBLibrary
    let path: String
    private let env: OpaquePointer
    private let items: UInt32
    private let byCategory: UInt32
    private let scratch: UnsafeMutableRawPointer

    init(lib: LMDBLibrary, path: String) throws {
        self.lib = lib
        self.path = path
        let (env, dbis) = try lib.openEnvironment(path: path, databases: [("items", 0), ("by_category", MDB.dupSort | MDB.dupFixed)])
        self.env = env
        items = dbis[0]
        byCategory = dbis[1]
        scratch = UnsafeMutableRawPointer.allocate(byteCount: PackedItem.maxSize, alignment: 8)
    }

    deinit {
        lib.envClose(env)
        scratch.deallocate()
    }

    var dataFiles: [String] { [path] }

    func openReaders(_ count: Int) throws {}

    func write<R>(_ body: (inout Writer) throws -> R) throws -> R {
        var txn: OpaquePointer?
        try lib.check(lib.txnBegin(env, nil, 0, &txn), "mdb_txn_begin")
        var writer = Writer(lib: lib, txn: txn, items: items, byCategory: byCategory, scratch: scratch)
        let result: R
        do {
            result = try body(&writer)
        } catch {
            lib.txnAbort(txn)
            throw error
        }
        try lib.check(lib.txnCommit(txn), "mdb_txn_commit")
        return result
    }

    func read<R>(slot: Int, _ body: (inout Reader) throws -> R) throws -> R {
        var txn: OpaquePointer?
        try lib.check(lib.txnBegin(env, nil, MDB.readOnly, &txn), "mdb_txn_begin (read-only)")
        defer { lib.txnAbort(txn) }
        var reader = Reader(lib: lib, txn: txn, items: items, byCategory: byCategory)
        return try body(&reader)
    }

    func info() -> [(String, String)] {
        lib.facts(env) + [("index", "by_category: MDB_DUPSORT|MDB_DUPFIXED, category → id")]
    }

    func codec() throws -> Codec? { Codec() }

    /// `PackedItem`: the hand-written fixed layout, the floor a generic codec is measured against.
    struct Codec: ItemCodec {
        /// The packed value, as `Writer.insert` packs it (one buffer, reused).
        var scratch = [UInt8](repeating: 0, count: PackedItem.maxSize)

        mutating func encode(_ item: Item) throws -> Int {
            try scratch.withUnsafeMutableBytes { p in
                guard let base = p.baseAddress else { throw BenchError("lmdb: no scratch buffer") }
                return try PackedItem.pack(item, into: base)
            }
        }

        mutating func record(_ item: Item) throws -> [UInt8] {
            let length = try encode(item)
            return Array(scratch[0..<length])
        }

        mutating func decode(_ record: UnsafeRawBufferPointer, id: Int64) throws -> Item {
            try PackedItem.decode(id: id, record)
        }
    }

    struct Writer: ObjectWriter {
        let lib: LMDBLibrary
        let txn: OpaquePointer?
        let items: UInt32
        let byCategory: UInt32
        let scratch: UnsafeMutableRawPointer

        mutating func insert(_ item: Item) throws {
            let length = try PackedItem.pack(item, into: scratch)
            try withBigEndian(item.id) { id in
                var k = MDBVal(id)
                var v = MDBVal(UnsafeRawBufferPointer(start: scratch, count: length))
                let rc = lib.put(txn, items, &k, &v, MDB.noOverwrite)
                if rc == MDB.keyExist { throw BenchError("lmdb: an item with id \(item.id) exists") }
                try lib.check(rc, "mdb_put")
                try withBigEndian(item.category) { category in
                    var ck = MDBVal(category)
                    var iv = MDBVal(id)
                    try lib.check(lib.put(txn, byCategory, &ck, &iv, 0), "mdb_put (index)")
                }
            }
        }

        mutating func update(id: Int64, name: String, score: Double) throws -> Bool {
            try withBigEndian(id) { key in
                var k = MDBVal(key)
                var v = MDBVal()
                let rc = lib.get(txn, items, &k, &v)
                if rc == MDB.notFound { return false }
                try lib.check(rc, "mdb_get")
                var item = try PackedItem.decode(id: id, v.bytes)
                let oldCategory = item.category
                item.name = name
                item.score = score
                let length = try PackedItem.pack(item, into: scratch)
                k = MDBVal(key)
                v = MDBVal(UnsafeRawBufferPointer(start: scratch, count: length))
                try lib.check(lib.put(txn, items, &k, &v, 0), "mdb_put")
                if item.category != oldCategory {
                    try withBigEndian(oldCategory) { category in
                        var ck = MDBVal(category)
                        var iv = MDBVal(key)
                        try lib.check(lib.del(txn, byCategory, &ck, &iv), "mdb_del (index)")
                    }
                    try withBigEndian(item.category) { category in
                        var ck = MDBVal(category)
                        var iv = MDBVal(key)
                        try lib.check(lib.put(txn, byCategory, &ck, &iv, 0), "mdb_put (index)")
                    }
                }
                return true
            }
        }

        mutating func delete(id: Int64) throws -> Bool {
            try withBigEndian(id) { key in
                var k = MDBVal(key)
                var v = MDBVal()
                let rc = lib.get(txn, items, &k, &v)
                if rc == MDB.notFound { return false }
                try lib.check(rc, "mdb_get")
                let category = try PackedItem.category(v.bytes)
                k = MDBVal(key)
                try lib.check(lib.del(txn, items, &k, nil), "mdb_del")
                try withBigEndian(category) { c in
                    var ck = MDBVal(c)
                    var iv = MDBVal(key)
                    try lib.check(lib.del(txn, byCategory, &ck, &iv), "mdb_del (index)")
                }
                return true
            }
        }
    }

    struct Reader: ObjectReader {
        let lib: LMDBLibrary
        let txn: OpaquePointer?
        let items: UInt32
        let byCategory: UInt32

        private func withCursor<R>(_ dbi: UInt32, _ body: (OpaquePointer?) throws -> R) throws -> R {
            var cursor: OpaquePointer?
            try lib.check(lib.cursorOpen(txn, dbi, &cursor), "mdb_cursor_open")
            defer { lib.cursorClose(cursor) }
            return try body(cursor)
        }

        /// The record under the big-endian id `key`, or nil.
        @inline(__always)
        private func record(_ key: UnsafeRawBufferPointer) throws -> UnsafeRawBufferPointer? {
            var k = MDBVal(key)
            var v = MDBVal()
            let rc = lib.get(txn, items, &k, &v)
            if rc == MDB.notFound { return nil }
            try lib.check(rc, "mdb_get")
            return v.bytes
        }

        mutating func item(id: Int64) throws -> Item? {
            try withBigEndian(id) { key in
                try record(key).map { try PackedItem.decode(id: id, $0) }
            }
        }

        /// Visits every record in id order.
        private func scan(_ visit: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws -> Int {
            try withCursor(items) { cursor in
                var k = MDBVal()
                var v = MDBVal()
                var rc = lib.cursorGet(cursor, &k, &v, MDB.first)
                var seen = 0
                while rc == MDB.success {
                    try visit(k.bytes, v.bytes)
                    seen += 1
                    rc = lib.cursorGet(cursor, &k, &v, MDB.next)
                }
                if rc != MDB.notFound { try lib.check(rc, "mdb_cursor_get") }
                return seen
            }
        }

        /// Visits the record of every id the index holds under `category`, in id order.
        private func scan(category: Int64, _ visit: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) throws -> Int {
            try withBigEndian(category) { categoryKey in
                try withCursor(byCategory) { cursor in
                    var k = MDBVal(categoryKey)
                    var v = MDBVal()
                    var rc = lib.cursorGet(cursor, &k, &v, MDB.setKey)
                    var seen = 0
                    while rc == MDB.success {
                        guard let value = try record(v.bytes) else {
                            throw BenchError("lmdb: the category index names a missing item")
                        }
                        try visit(v.bytes, value)
                        seen += 1
                        rc = lib.cursorGet(cursor, &k, &v, MDB.nextDup)
                    }
                    if rc != MDB.notFound { try lib.check(rc, "mdb_cursor_get") }
                    return seen
                }
            }
        }

        mutating func forEach(_ visit: (Item) -> Void) throws -> Int {
            try scan { key, value in visit(try PackedItem.decode(id: try int64(bigEndian: key), value)) }
        }

        mutating func forEach(category: Int64, _ visit: (Item) -> Void) throws -> Int {
            try scan(category: category) { key, value in visit(try PackedItem.decode(id: try int64(bigEndian: key), value)) }
        }

        mutating func count(scoreAbove threshold: Double) throws -> Int {
            var matches = 0
            _ = try scan { _, value in
                if try PackedItem.score(value) > threshold { matches += 1 }
            }
            return matches
        }

        mutating func count() throws -> Int {
            let stat = UnsafeMutableRawPointer.allocate(byteCount: MDB.statSize, alignment: 8)
            defer { stat.deallocate() }
            try lib.check(lib.stat(txn, items, stat), "mdb_stat")
            return stat.load(fromByteOffset: 32, as: Int.self)  // ms_entries
        }

        mutating func sumOfScores(category: Int64) throws -> Double {
            var sum = 0.0
            _ = try scan(category: category) { _, value in sum += try PackedItem.score(value) }
            return sum
        }
    }
}

/// Runs `body` on the 8 big-endian bytes of `value`.
@inline(__always)
func withBigEndian<R>(_ value: Int64, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    let key = bigEndianKey(value)
    return try withUnsafeBytes(of: key) { try body($0) }
}
