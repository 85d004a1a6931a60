// SQLite, loaded at run time with dlopen("libsqlite3.so.0"); never linked, so the package keeps no
// dependencies and the bench runs without it (measuring the other engines).
//
// Signatures and constants are those of sqlite3.h (3.x). Every handle is an opaque pointer; text
// and blob parameters are bound with SQLITE_STATIC (a null destructor): the bench keeps the bytes
// alive until the statement has stepped, and rebinds every parameter before stepping again.

/// sqlite3.h constants used here.
enum SQLite {
    static let ok: Int32 = 0
    static let row: Int32 = 100
    static let done: Int32 = 101
    // sqlite3_open_v2 flags
    static let openReadWrite: Int32 = 0x0000_0002
    static let openCreate: Int32 = 0x0000_0004
    static let openNoMutex: Int32 = 0x0000_8000
    // column types
    static let null: Int32 = 5
}

/// The library's entry points, resolved with dlsym.
final class SQLiteLibrary: Sendable {
    typealias Destructor = @convention(c) (UnsafeMutableRawPointer?) -> Void
    typealias Open = @convention(c) (UnsafePointer<CChar>?, UnsafeMutablePointer<OpaquePointer?>?, Int32, UnsafePointer<CChar>?) -> Int32
    typealias Close = @convention(c) (OpaquePointer?) -> Int32
    typealias Exec =
        @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, OpaquePointer?, UnsafeMutableRawPointer?, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) ->
        Int32
    typealias Prepare =
        @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, Int32, UnsafeMutablePointer<OpaquePointer?>?, UnsafeMutablePointer<UnsafePointer<CChar>?>?) ->
        Int32
    typealias StatementCall = @convention(c) (OpaquePointer?) -> Int32
    typealias BindInt64 = @convention(c) (OpaquePointer?, Int32, Int64) -> Int32
    typealias BindDouble = @convention(c) (OpaquePointer?, Int32, Double) -> Int32
    typealias BindBytes = @convention(c) (OpaquePointer?, Int32, UnsafeRawPointer?, Int32, Destructor?) -> Int32
    typealias ColumnInt64 = @convention(c) (OpaquePointer?, Int32) -> Int64
    typealias ColumnDouble = @convention(c) (OpaquePointer?, Int32) -> Double
    typealias ColumnPointer = @convention(c) (OpaquePointer?, Int32) -> UnsafeRawPointer?
    typealias ColumnInt32 = @convention(c) (OpaquePointer?, Int32) -> Int32
    typealias Errmsg = @convention(c) (OpaquePointer?) -> UnsafePointer<CChar>?
    typealias Libversion = @convention(c) () -> UnsafePointer<CChar>?
    typealias Changes = @convention(c) (OpaquePointer?) -> Int32

    static let soname = "libsqlite3.so.0"
    static let installHint = "apt-get install libsqlite3-0"

    let openV2: Open
    let closeV2: Close
    let exec: Exec
    let prepare: Prepare
    let step: StatementCall
    let reset: StatementCall
    let finalize: StatementCall
    let bindInt64: BindInt64
    let bindDouble: BindDouble
    let bindText: BindBytes
    let bindBlob: BindBytes
    let columnInt64: ColumnInt64
    let columnDouble: ColumnDouble
    let columnText: ColumnPointer
    let columnBlob: ColumnPointer
    let columnBytes: ColumnInt32
    let columnType: ColumnInt32
    let errmsg: Errmsg
    let libversion: Libversion
    let changes: Changes

    /// Loads the library, or explains why it could not.
    static func load() -> Result<SQLiteLibrary, BenchError> {
        // STRATA_BENCH_SQLITE names another library file (a custom build) to load instead.
        return PeerLibrary.load(soname: soname, override: "STRATA_BENCH_SQLITE") { try SQLiteLibrary(library: $0) }
    }

    private init(library: PeerLibrary) throws {
        openV2 = try library.symbol("sqlite3_open_v2", as: Open.self)
        closeV2 = try library.symbol("sqlite3_close_v2", as: Close.self)
        exec = try library.symbol("sqlite3_exec", as: Exec.self)
        prepare = try library.symbol("sqlite3_prepare_v2", as: Prepare.self)
        step = try library.symbol("sqlite3_step", as: StatementCall.self)
        reset = try library.symbol("sqlite3_reset", as: StatementCall.self)
        finalize = try library.symbol("sqlite3_finalize", as: StatementCall.self)
        bindInt64 = try library.symbol("sqlite3_bind_int64", as: BindInt64.self)
        bindDouble = try library.symbol("sqlite3_bind_double", as: BindDouble.self)
        bindText = try library.symbol("sqlite3_bind_text", as: BindBytes.self)
        bindBlob = try library.symbol("sqlite3_bind_blob", as: BindBytes.self)
        columnInt64 = try library.symbol("sqlite3_column_int64", as: ColumnInt64.self)
        columnDouble = try library.symbol("sqlite3_column_double", as: ColumnDouble.self)
        columnText = try library.symbol("sqlite3_column_text", as: ColumnPointer.self)
        columnBlob = try library.symbol("sqlite3_column_blob", as: ColumnPointer.self)
        columnBytes = try library.symbol("sqlite3_column_bytes", as: ColumnInt32.self)
        columnType = try library.symbol("sqlite3_column_type", as: ColumnInt32.self)
        errmsg = try library.symbol("sqlite3_errmsg", as: Errmsg.self)
        libversion = try library.symbol("sqlite3_libversion", as: Libversion.self)
        changes = try library.symbol("sqlite3_changes", as: Changes.self)
    }

    var version: String {
        libversion().map { String(cString: $0) } ?? "unknown"
    }
}

/// One connection. Used by one thread at a time (opened with SQLITE_OPEN_NOMUTEX, as a connection
/// pool gives each thread its own).
final class SQLiteConnection {
    let lib: SQLiteLibrary
    let handle: OpaquePointer

    init(lib: SQLiteLibrary, path: String) throws {
        self.lib = lib
        var db: OpaquePointer?
        let rc = lib.openV2(path, &db, SQLite.openReadWrite | SQLite.openCreate | SQLite.openNoMutex, nil)
        guard rc == SQLite.ok, let db else {
            let message = db.flatMap { lib.errmsg($0) }.map { String(cString: $0) } ?? "error \(rc)"
            if let db { _ = lib.closeV2(db) }
            throw BenchError("sqlite: cannot open \(path): \(message)")
        }
        self.handle = db
    }

    deinit { _ = lib.closeV2(handle) }

    var lastError: String { lib.errmsg(handle).map { String(cString: $0) } ?? "unknown error" }

    @inline(__always)
    func check(_ rc: Int32, _ what: @autoclosure () -> String) throws {
        if rc != SQLite.ok { throw BenchError("sqlite: \(what()) failed: \(lastError) (\(rc))") }
    }

    /// Runs `sql` (one or more statements, results ignored).
    func exec(_ sql: String) throws {
        try check(lib.exec(handle, sql, nil, nil, nil), sql)
    }

    /// The single text value `sql` returns (for PRAGMAs).
    func text(_ sql: String) throws -> String? {
        let statement = try prepare(sql)
        defer { statement.reset() }
        guard try statement.step() else { return nil }
        return statement.text(0)
    }

    func prepare(_ sql: String) throws -> SQLiteStatement {
        var statement: OpaquePointer?
        try check(lib.prepare(handle, sql, -1, &statement, nil), "prepare \(sql)")
        guard let statement else { throw BenchError("sqlite: prepare \(sql) returned no statement") }
        return SQLiteStatement(connection: self, handle: statement, sql: sql)
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    var changes: Int { Int(lib.changes(handle)) }
}

/// A prepared statement, reused: bind, step, reset.
final class SQLiteStatement {
    let connection: SQLiteConnection
    let handle: OpaquePointer
    let sql: String
    private var lib: SQLiteLibrary { connection.lib }

    init(connection: SQLiteConnection, handle: OpaquePointer, sql: String) {
        self.connection = connection
        self.handle = handle
        self.sql = sql
    }

    deinit { _ = connection.lib.finalize(handle) }

    @inline(__always)
    func bind(_ index: Int32, _ value: Int64) throws {
        try connection.check(lib.bindInt64(handle, index, value), "bind \(index) of \(sql)")
    }

    @inline(__always)
    func bind(_ index: Int32, _ value: Double) throws {
        try connection.check(lib.bindDouble(handle, index, value), "bind \(index) of \(sql)")
    }

    /// Binds text without copying: `bytes` must stay valid until the statement has stepped.
    @inline(__always)
    func bindText(_ index: Int32, _ bytes: UnsafeRawBufferPointer) throws {
        try connection.check(lib.bindText(handle, index, bytes.baseAddress, Int32(bytes.count), nil), "bind \(index) of \(sql)")
    }

    /// Binds a blob without copying: `bytes` must stay valid until the statement has stepped.
    @inline(__always)
    func bindBlob(_ index: Int32, _ bytes: UnsafeRawBufferPointer) throws {
        try connection.check(lib.bindBlob(handle, index, bytes.baseAddress, Int32(bytes.count), nil), "bind \(index) of \(sql)")
    }

    /// Steps once: true with a row to read, false when done.
    @inline(__always)
    func step() throws -> Bool {
        let rc = lib.step(handle)
        if rc == SQLite.row { return true }
        if rc == SQLite.done { return false }
        _ = lib.reset(handle)
        throw BenchError("sqlite: step of \(sql) failed: \(connection.lastError) (\(rc))")
    }

    /// Steps a statement that returns no rows, then resets it.
    @inline(__always)
    func run() throws {
        defer { reset() }
        if try step() { throw BenchError("sqlite: \(sql) returned a row") }
    }

    @inline(__always)
    func reset() { _ = lib.reset(handle) }

    @inline(__always)
    func int64(_ column: Int32) -> Int64 { lib.columnInt64(handle, column) }

    @inline(__always)
    func double(_ column: Int32) -> Double { lib.columnDouble(handle, column) }

    @inline(__always)
    func isNull(_ column: Int32) -> Bool { lib.columnType(handle, column) == SQLite.null }

    /// The bytes of a text column (valid until the next step or reset).
    @inline(__always)
    func textBytes(_ column: Int32) -> UnsafeRawBufferPointer {
        let p = lib.columnText(handle, column)  // sqlite3_column_text first, then _bytes (sqlite3.h)
        let n = lib.columnBytes(handle, column)
        return UnsafeRawBufferPointer(start: p, count: p == nil ? 0 : Int(max(0, n)))
    }

    /// The bytes of a blob column (valid until the next step or reset).
    @inline(__always)
    func blobBytes(_ column: Int32) -> UnsafeRawBufferPointer {
        let p = lib.columnBlob(handle, column)
        let n = lib.columnBytes(handle, column)
        return UnsafeRawBufferPointer(start: p, count: p == nil ? 0 : Int(max(0, n)))
    }

    func text(_ column: Int32) -> String {
        String(decoding: textBytes(column), as: UTF8.self)
    }
}
