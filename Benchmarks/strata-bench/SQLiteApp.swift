import Foundation

/// SQLite as a careful chat app uses it: WAL, `synchronous=FULL`, a composite index on
/// (room, created), an FTS5 table over the texts (external content, `unicode61 remove_diacritics
/// 2`: folded for case and diacritics, as Strata's words are), an index on `name COLLATE NOCASE`,
/// prepared statements reused. FTS5 is checked at run time: without it the searches are skipped.
final class SQLiteApp: AppEngine {
    let lib: SQLiteLibrary
    let path: String
    let connection: SQLiteConnection
    let canSearch: Bool
    private var fts5Error: String?
    private let begin, beginWrite, commit, rollback: SQLiteStatement
    private let insertMessage, insertContact: SQLiteStatement
    private var insertText: SQLiteStatement?
    private let roomPage, contacts: SQLiteStatement
    private var search, count: SQLiteStatement?

    init(lib: SQLiteLibrary, path: String) throws {
        self.lib = lib
        self.path = path
        for file in [path, path + "-wal", path + "-shm", path + "-journal"] { removeFile(file) }
        let c = try SQLiteConnection(lib: lib, path: path)
        connection = c
        guard try c.text("PRAGMA journal_mode=WAL")?.lowercased() == "wal" else { throw BenchError("sqlite: journal_mode=WAL refused") }
        try c.exec("PRAGMA synchronous=FULL; PRAGMA busy_timeout=5000")
        try c.exec(
            """
            CREATE TABLE messages(id INTEGER PRIMARY KEY, room INTEGER NOT NULL, author INTEGER NOT NULL, created REAL NOT NULL, text TEXT NOT NULL);
            CREATE INDEX messages_room_created ON messages(room, created);
            CREATE TABLE contacts(id INTEGER PRIMARY KEY, name TEXT NOT NULL, phone TEXT NOT NULL);
            CREATE INDEX contacts_name ON contacts(name COLLATE NOCASE);
            """)
        do {
            try c.exec("CREATE VIRTUAL TABLE messages_fts USING fts5(text, content='messages', content_rowid='id', tokenize='unicode61 remove_diacritics 2')")
            canSearch = true
        } catch {
            fts5Error = "\(error)"
            canSearch = false
            note("[sqlite] FTS5 is not available in the loaded libsqlite3 (\(error)): the search workloads run on Strata alone")
        }
        begin = try c.prepare("BEGIN")
        beginWrite = try c.prepare("BEGIN IMMEDIATE")
        commit = try c.prepare("COMMIT")
        rollback = try c.prepare("ROLLBACK")
        insertMessage = try c.prepare("INSERT INTO messages(id, room, author, created, text) VALUES (?1, ?2, ?3, ?4, ?5)")
        insertContact = try c.prepare("INSERT INTO contacts(id, name, phone) VALUES (?1, ?2, ?3)")
        roomPage = try c.prepare("SELECT id, room, author, created, text FROM messages WHERE room = ?1 ORDER BY created DESC LIMIT ?2")
        contacts = try c.prepare("SELECT id, name, phone FROM contacts ORDER BY name COLLATE NOCASE, id LIMIT ?1 OFFSET ?2")
        if canSearch {
            insertText = try c.prepare("INSERT INTO messages_fts(rowid, text) VALUES (?1, ?2)")
            search = try c.prepare(
                """
                SELECT m.id, m.room, m.author, m.created, m.text FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
                WHERE messages_fts MATCH ?1 ORDER BY messages_fts.rowid LIMIT ?2
                """)
            count = try c.prepare("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?1")
        }
    }

    var dataFiles: [String] { [path, path + "-wal"] }

    func info() -> [(String, String)] {
        var facts: [(String, String)] = [("version", lib.version), ("fts5", canSearch ? "yes" : "no (\(fts5Error ?? "?"))")]
        func plan(_ sql: String) -> String {
            guard let statement = try? connection.prepare("EXPLAIN QUERY PLAN " + sql) else { return "-" }
            var lines: [String] = []
            while (try? statement.step()) == true { lines.append(statement.text(3)) }
            return lines.joined(separator: "; ")
        }
        facts.append(("room page plan", plan("SELECT id FROM messages WHERE room = 1 ORDER BY created DESC LIMIT 50")))
        facts.append(("contacts plan", plan("SELECT id FROM contacts ORDER BY name COLLATE NOCASE, id LIMIT 50 OFFSET 50")))
        if canSearch {
            facts.append(
                (
                    "search plan",
                    plan(
                        "SELECT m.id FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid WHERE messages_fts MATCH 'the' ORDER BY messages_fts.rowid LIMIT 50"
                    )
                ))
        }
        return facts
    }

    private func write(_ body: () throws -> Void) throws {
        try beginWrite.run()
        do {
            try body()
            try commit.run()
        } catch {
            try? rollback.run()
            throw error
        }
    }

    func insertMessages(_ range: Range<Int>, _ data: AppData) throws {
        try write {
            for i in range {
                let m = data.message(i)
                try insertMessage.bind(1, m.id)
                try insertMessage.bind(2, m.room)
                try insertMessage.bind(3, m.author)
                try insertMessage.bind(4, m.created)
                var text = m.text
                try text.withUTF8 { utf8 in
                    try insertMessage.bindText(5, UnsafeRawBufferPointer(utf8))
                    try insertMessage.run()
                    if let insertText {
                        try insertText.bind(1, m.id)
                        try insertText.bindText(2, UnsafeRawBufferPointer(utf8))
                        try insertText.run()
                    }
                }
            }
        }
    }

    func insertContacts(_ range: Range<Int>, _ data: AppData) throws {
        try write {
            for i in range {
                let c = data.contact(i)
                try insertContact.bind(1, c.id)
                var name = c.name, phone = c.phone
                try name.withUTF8 { n in
                    try phone.withUTF8 { p in
                        try insertContact.bindText(2, UnsafeRawBufferPointer(n))
                        try insertContact.bindText(3, UnsafeRawBufferPointer(p))
                        try insertContact.run()
                    }
                }
            }
        }
    }

    func read<R>(_ body: (any AppReader) throws -> R) throws -> R {
        try begin.run()
        defer { try? commit.run() }
        return try body(Reader(app: self))
    }

    struct Reader: AppReader {
        let app: SQLiteApp

        private func messages(_ statement: SQLiteStatement, _ body: (AppMessageValue) -> Void) throws -> Int {
            defer { statement.reset() }
            var n = 0
            while try statement.step() {
                body(
                    AppMessageValue(
                        id: statement.int64(0), room: statement.int64(1), author: statement.int64(2),
                        created: statement.double(3), text: statement.text(4)))
                n += 1
            }
            return n
        }

        func roomPage(room: Int64, limit: Int, _ body: (AppMessageValue) -> Void) throws -> Int {
            try app.roomPage.bind(1, room)
            try app.roomPage.bind(2, Int64(limit))
            return try messages(app.roomPage, body)
        }

        /// Each word quoted: an FTS5 string, never an operator.
        private static func match(_ words: [String]) -> String { words.map { "\"\($0)\"" }.joined(separator: " ") }

        func search(_ words: [String], limit: Int, _ body: (AppMessageValue) -> Void) throws -> Int {
            guard let search = app.search else { throw BenchError("sqlite: no FTS5") }
            var query = Self.match(words)
            return try query.withUTF8 { utf8 in
                try search.bindText(1, UnsafeRawBufferPointer(utf8))
                try search.bind(2, Int64(limit))
                return try messages(search, body)
            }
        }

        func count(word: String) throws -> Int {
            guard let count = app.count else { throw BenchError("sqlite: no FTS5") }
            var query = Self.match([word])
            return try query.withUTF8 { utf8 in
                try count.bindText(1, UnsafeRawBufferPointer(utf8))
                defer { count.reset() }
                guard try count.step() else { throw BenchError("sqlite: count returned no row") }
                return Int(count.int64(0))
            }
        }

        func contacts(offset: Int, limit: Int, _ body: (AppContactValue) -> Void) throws -> Int {
            let statement = app.contacts
            try statement.bind(1, Int64(limit))
            try statement.bind(2, Int64(offset))
            defer { statement.reset() }
            var n = 0
            while try statement.step() {
                body(AppContactValue(id: statement.int64(0), name: statement.text(1), phone: statement.text(2)))
                n += 1
            }
            return n
        }
    }
}
