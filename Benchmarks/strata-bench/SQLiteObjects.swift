import Foundation

/// SQLite used the way a careful app would: WAL mode, `synchronous=FULL` (every commit durable),
/// `INTEGER PRIMARY KEY`, an index on `category`, every statement prepared once and reused, write
/// transactions `BEGIN IMMEDIATE`, a connection of its own per reader thread (a pool), and every
/// row decoded into the same `Item` struct. Everything else is SQLite's default (page size 4096,
/// cache_size -2000, no mmap).
final class SQLiteObjects: ObjectEngine, @unchecked Sendable {
    // @unchecked: `readers` is filled by `openReaders` before any reader thread starts, and each
    // connection (with its statements) is used by one thread at a time: slot 0 by the main thread,
    // slot t by reader thread t.
    let lib: SQLiteLibrary
    let path: String
    private let main: Statements
    private var readers: [Statements] = []

    static let schema = """
        CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT NOT NULL, category INTEGER NOT NULL,
                           score REAL NOT NULL, blob BLOB NOT NULL);
        CREATE INDEX items_category ON items(category);
        """

    init(lib: SQLiteLibrary, path: String) throws {
        self.lib = lib
        self.path = path
        for file in [path, path + "-wal", path + "-shm", path + "-journal"] { removeFile(file) }
        let connection = try SQLiteConnection(lib: lib, path: path)
        let mode = try connection.text("PRAGMA journal_mode=WAL")
        guard mode?.lowercased() == "wal" else { throw BenchError("sqlite: journal_mode=WAL gave \(mode ?? "nothing")") }
        try SQLiteObjects.configure(connection)
        try connection.exec(SQLiteObjects.schema)
        main = try Statements(connection)
    }

    /// Per-connection settings (journal_mode=WAL is stored in the file; these are not).
    private static func configure(_ connection: SQLiteConnection) throws {
        try connection.exec("PRAGMA synchronous=FULL; PRAGMA busy_timeout=5000")
    }

    var dataFiles: [String] { [path, path + "-wal"] }

    func openReaders(_ count: Int) throws {
        while readers.count < count {
            let connection = try SQLiteConnection(lib: lib, path: path)
            try SQLiteObjects.configure(connection)
            readers.append(try Statements(connection))
        }
    }

    func write<R>(_ body: (inout Writer) throws -> R) throws -> R {
        try main.beginWrite.run()
        var writer = Writer(s: main)
        do {
            let result = try body(&writer)
            try main.commit.run()
            return result
        } catch {
            try? main.rollback.run()
            throw error
        }
    }

    func read<R>(slot: Int, _ body: (inout Reader) throws -> R) throws -> R {
        guard slot == 0 || slot <= readers.count else { throw BenchError("sqlite: reader slot \(slot) was not opened") }
        let s = slot == 0 ? main : readers[slot - 1]
        try s.beginRead.run()
        var reader = Reader(s: s)
        do {
            let result = try body(&reader)
            try s.commit.run()
            return result
        } catch {
            try? s.rollback.run()
            throw error
        }
    }

    func info() -> [(String, String)] {
        var facts: [(String, String)] = [("version", lib.version)]
        for pragma in ["journal_mode", "synchronous", "page_size", "cache_size", "mmap_size"] {
            if let value = try? main.connection.text("PRAGMA \(pragma)") { facts.append((pragma, value)) }
        }
        return facts
    }

    /// One connection and its prepared statements.
    final class Statements {
        let connection: SQLiteConnection
        let beginRead: SQLiteStatement
        let beginWrite: SQLiteStatement
        let commit: SQLiteStatement
        let rollback: SQLiteStatement
        let insert: SQLiteStatement
        let update: SQLiteStatement
        let delete: SQLiteStatement
        let byID: SQLiteStatement
        let all: SQLiteStatement
        let byCategory: SQLiteStatement
        let countAbove: SQLiteStatement
        let countAll: SQLiteStatement
        let sumByCategory: SQLiteStatement

        init(_ c: SQLiteConnection) throws {
            connection = c
            beginRead = try c.prepare("BEGIN")
            beginWrite = try c.prepare("BEGIN IMMEDIATE")
            commit = try c.prepare("COMMIT")
            rollback = try c.prepare("ROLLBACK")
            insert = try c.prepare("INSERT INTO items(id, name, category, score, blob) VALUES (?1, ?2, ?3, ?4, ?5)")
            update = try c.prepare("UPDATE items SET name = ?1, score = ?2 WHERE id = ?3")
            delete = try c.prepare("DELETE FROM items WHERE id = ?1")
            byID = try c.prepare("SELECT id, name, category, score, blob FROM items WHERE id = ?1")
            all = try c.prepare("SELECT id, name, category, score, blob FROM items ORDER BY id")
            byCategory = try c.prepare("SELECT id, name, category, score, blob FROM items WHERE category = ?1 ORDER BY id")
            countAbove = try c.prepare("SELECT count(*) FROM items WHERE score > ?1")
            countAll = try c.prepare("SELECT count(*) FROM items")
            sumByCategory = try c.prepare("SELECT sum(score) FROM items WHERE category = ?1")
        }
    }

    struct Writer: ObjectWriter {
        let s: Statements

        mutating func insert(_ item: Item) throws {
            let insert = s.insert
            try insert.bind(1, item.id)
            try insert.bind(3, item.category)
            try insert.bind(4, item.score)
            var name = item.name
            try name.withUTF8 { utf8 in
                try insert.bindText(2, UnsafeRawBufferPointer(utf8))
                try item.blob.withUnsafeBytes { blob in
                    try insert.bindBlob(5, blob)
                    try insert.run()
                }
            }
        }

        mutating func update(id: Int64, name: String, score: Double) throws -> Bool {
            let update = s.update
            try update.bind(2, score)
            try update.bind(3, id)
            var name = name
            try name.withUTF8 { utf8 in
                try update.bindText(1, UnsafeRawBufferPointer(utf8))
                try update.run()
            }
            return s.connection.changes > 0
        }

        mutating func delete(id: Int64) throws -> Bool {
            try s.delete.bind(1, id)
            try s.delete.run()
            return s.connection.changes > 0
        }
    }

    struct Reader: ObjectReader {
        let s: Statements

        /// The current row of a `SELECT id, name, category, score, blob` as an `Item`.
        @inline(__always)
        private func decode(_ statement: SQLiteStatement) throws -> Item {
            let blob = statement.blobBytes(4)
            guard let base = blob.baseAddress else { throw BenchError("sqlite: item \(statement.int64(0)) has no blob") }
            return Item(
                id: statement.int64(0),
                name: String(decoding: statement.textBytes(1), as: UTF8.self),
                category: statement.int64(2),
                score: statement.double(3),
                blob: Data(bytes: base, count: blob.count))
        }

        mutating func item(id: Int64) throws -> Item? {
            let byID = s.byID
            defer { byID.reset() }
            try byID.bind(1, id)
            return try byID.step() ? try decode(byID) : nil
        }

        private func visitRows(_ statement: SQLiteStatement, _ visit: (Item) -> Void) throws -> Int {
            defer { statement.reset() }
            var seen = 0
            while try statement.step() {
                visit(try decode(statement))
                seen += 1
            }
            return seen
        }

        mutating func forEach(_ visit: (Item) -> Void) throws -> Int {
            try visitRows(s.all, visit)
        }

        mutating func forEach(category: Int64, _ visit: (Item) -> Void) throws -> Int {
            try s.byCategory.bind(1, category)
            return try visitRows(s.byCategory, visit)
        }

        private func single(_ statement: SQLiteStatement) throws -> SQLiteStatement {
            guard try statement.step() else {
                statement.reset()
                throw BenchError("sqlite: \(statement.sql) returned no row")
            }
            return statement
        }

        mutating func count(scoreAbove threshold: Double) throws -> Int {
            defer { s.countAbove.reset() }
            try s.countAbove.bind(1, threshold)
            return Int(try single(s.countAbove).int64(0))
        }

        mutating func count() throws -> Int {
            defer { s.countAll.reset() }
            return Int(try single(s.countAll).int64(0))
        }

        mutating func sumOfScores(category: Int64) throws -> Double {
            defer { s.sumByCategory.reset() }
            try s.sumByCategory.bind(1, category)
            let row = try single(s.sumByCategory)
            return row.isNull(0) ? 0 : row.double(0)
        }
    }
}
