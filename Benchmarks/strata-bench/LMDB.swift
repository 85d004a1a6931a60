// LMDB, loaded at run time with dlopen("liblmdb.so.0"); never linked, so the package keeps no
// dependencies and the bench runs without it (measuring Strata alone).
//
// Constants, struct layouts and signatures are those of lmdb.h (0.9.x):
//   typedef struct MDB_val { size_t mv_size; void *mv_data; } MDB_val;
//   typedef struct MDB_stat { unsigned int ms_psize, ms_depth; size_t ms_branch_pages,
//                             ms_leaf_pages, ms_overflow_pages, ms_entries; } MDB_stat;
//   MDB_cursor_op: MDB_FIRST = 0, MDB_GET_CURRENT = 4, MDB_NEXT = 8, MDB_NEXT_DUP = 9,
//                  MDB_SET_KEY = 16, MDB_SET_RANGE = 17.

/// MDB_val. Two word-sized fields: the same layout as the C struct (checked when loading). The C
/// entry points take it as a raw pointer (a Swift struct cannot appear in a @convention(c) type).
struct MDBVal {
    var size: Int
    var data: UnsafeMutableRawPointer?

    init() {
        size = 0
        data = nil
    }

    init(_ bytes: UnsafeRawBufferPointer) {
        size = bytes.count
        data = UnsafeMutableRawPointer(mutating: bytes.baseAddress)
    }

    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: data, count: size) }
}

/// lmdb.h constants used here.
enum MDB {
    static let success: Int32 = 0
    static let notFound: Int32 = -30798
    static let keyExist: Int32 = -30799
    // mdb_env_open flags
    static let noSubdir: UInt32 = 0x4000
    static let noSync: UInt32 = 0x10000
    static let readOnly: UInt32 = 0x20000
    static let noTLS: UInt32 = 0x200000
    // mdb_dbi_open flags
    static let dupSort: UInt32 = 0x04
    static let dupFixed: UInt32 = 0x10
    static let create: UInt32 = 0x40000
    // mdb_put flags
    static let noOverwrite: UInt32 = 0x10
    // MDB_cursor_op
    static let first: UInt32 = 0
    static let getCurrent: UInt32 = 4
    static let next: UInt32 = 8
    static let nextDup: UInt32 = 9
    static let setKey: UInt32 = 16
    static let setRange: UInt32 = 17
    /// sizeof(MDB_stat) on LP64: two unsigned ints and four size_t.
    static let statSize = 40
}

/// The library's entry points, resolved with dlsym.
final class LMDBLibrary: Sendable {
    typealias EnvCreate = @convention(c) (UnsafeMutablePointer<OpaquePointer?>?) -> Int32
    typealias EnvSetMapsize = @convention(c) (OpaquePointer?, Int) -> Int32
    typealias EnvSetMaxreaders = @convention(c) (OpaquePointer?, UInt32) -> Int32
    typealias EnvSetMaxdbs = @convention(c) (OpaquePointer?, UInt32) -> Int32
    typealias EnvOpen = @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, UInt32, UInt32) -> Int32
    typealias EnvClose = @convention(c) (OpaquePointer?) -> Void
    typealias EnvStat = @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Int32
    typealias TxnBegin = @convention(c) (OpaquePointer?, OpaquePointer?, UInt32, UnsafeMutablePointer<OpaquePointer?>?) -> Int32
    typealias TxnCommit = @convention(c) (OpaquePointer?) -> Int32
    typealias TxnAbort = @convention(c) (OpaquePointer?) -> Void
    typealias DbiOpen = @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, UInt32, UnsafeMutablePointer<UInt32>?) -> Int32
    typealias Stat = @convention(c) (OpaquePointer?, UInt32, UnsafeMutableRawPointer?) -> Int32
    typealias Put = @convention(c) (OpaquePointer?, UInt32, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, UInt32) -> Int32
    typealias Get = @convention(c) (OpaquePointer?, UInt32, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Int32
    typealias Del = @convention(c) (OpaquePointer?, UInt32, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Int32
    typealias CursorOpen = @convention(c) (OpaquePointer?, UInt32, UnsafeMutablePointer<OpaquePointer?>?) -> Int32
    typealias CursorClose = @convention(c) (OpaquePointer?) -> Void
    typealias CursorGet = @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, UInt32) -> Int32
    typealias Strerror = @convention(c) (Int32) -> UnsafeMutablePointer<CChar>?
    typealias Version =
        @convention(c) (UnsafeMutablePointer<Int32>?, UnsafeMutablePointer<Int32>?, UnsafeMutablePointer<Int32>?) -> UnsafeMutablePointer<CChar>?

    static let soname = "liblmdb.so.0"
    static let installHint = "apt-get install liblmdb0"

    let envCreate: EnvCreate
    let envSetMapsize: EnvSetMapsize
    let envSetMaxreaders: EnvSetMaxreaders
    let envSetMaxdbs: EnvSetMaxdbs
    let envOpen: EnvOpen
    let envClose: EnvClose
    let envStat: EnvStat
    let txnBegin: TxnBegin
    let txnCommit: TxnCommit
    let txnAbort: TxnAbort
    let dbiOpen: DbiOpen
    let stat: Stat
    let put: Put
    let get: Get
    let del: Del
    let cursorOpen: CursorOpen
    let cursorClose: CursorClose
    let cursorGet: CursorGet
    let strerrorFn: Strerror
    let versionFn: Version

    /// A new environment at `path` with the bench's settings (MDB_NOSUBDIR, MDB_NOTLS, a 64 GiB
    /// map, 126 readers) and `databases` opened in one transaction (a nil name is the main
    /// database); their handles in the same order.
    func openEnvironment(path: String, databases: [(name: String?, flags: UInt32)]) throws -> (env: OpaquePointer, dbis: [UInt32]) {
        removeFile(path)
        removeFile(path + "-lock")
        var env: OpaquePointer?
        try check(envCreate(&env), "mdb_env_create")
        guard let env else { throw BenchError("lmdb: mdb_env_create returned no environment") }
        do {
            try check(envSetMapsize(env, LMDBKV.mapSize), "mdb_env_set_mapsize")
            try check(envSetMaxreaders(env, 126), "mdb_env_set_maxreaders")
            if databases.contains(where: { $0.name != nil }) {
                try check(envSetMaxdbs(env, UInt32(databases.count)), "mdb_env_set_maxdbs")
            }
            try check(envOpen(env, path, MDB.noSubdir | MDB.noTLS, 0o644), "mdb_env_open \(path)")
            var txn: OpaquePointer?
            try check(txnBegin(env, nil, 0, &txn), "mdb_txn_begin")
            var dbis: [UInt32] = []
            for database in databases {
                var dbi: UInt32 = 0
                let rc = dbiOpen(txn, database.name, database.flags | MDB.create, &dbi)
                if rc != MDB.success {
                    txnAbort(txn)
                    try check(rc, "mdb_dbi_open")
                }
                dbis.append(dbi)
            }
            try check(txnCommit(txn), "mdb_txn_commit")
            return (env, dbis)
        } catch {
            envClose(env)
            throw error
        }
    }

    /// The facts every LMDB column of a report shows: version, page size, durability.
    func facts(_ env: OpaquePointer) -> [(String, String)] {
        var facts: [(String, String)] = [("version", version)]
        let stat = UnsafeMutableRawPointer.allocate(byteCount: MDB.statSize, alignment: 8)
        defer { stat.deallocate() }
        if envStat(env, stat) == MDB.success {
            facts.append(("page size", "\(stat.load(fromByteOffset: 0, as: UInt32.self))"))
        }
        facts.append(("durability", "default (data synced, then meta synced), MDB_NOTLS, 64 GiB map"))
        return facts
    }

    /// Loads the library, or explains why it could not.
    static func load() -> Result<LMDBLibrary, BenchError> {
        guard MemoryLayout<MDBVal>.size == 16, MemoryLayout<MDBVal>.offset(of: \MDBVal.data) == 8,
            MemoryLayout<Int>.size == 8
        else {
            return .failure(BenchError("LMDB bindings assume a 64-bit platform"))
        }
        // STRATA_BENCH_LMDB names another library file (a custom build) to load instead.
        return PeerLibrary.load(soname: soname, override: "STRATA_BENCH_LMDB") { try LMDBLibrary(library: $0) }
    }

    private init(library: PeerLibrary) throws {
        envCreate = try library.symbol("mdb_env_create", as: EnvCreate.self)
        envSetMapsize = try library.symbol("mdb_env_set_mapsize", as: EnvSetMapsize.self)
        envSetMaxreaders = try library.symbol("mdb_env_set_maxreaders", as: EnvSetMaxreaders.self)
        envSetMaxdbs = try library.symbol("mdb_env_set_maxdbs", as: EnvSetMaxdbs.self)
        envOpen = try library.symbol("mdb_env_open", as: EnvOpen.self)
        envClose = try library.symbol("mdb_env_close", as: EnvClose.self)
        envStat = try library.symbol("mdb_env_stat", as: EnvStat.self)
        txnBegin = try library.symbol("mdb_txn_begin", as: TxnBegin.self)
        txnCommit = try library.symbol("mdb_txn_commit", as: TxnCommit.self)
        txnAbort = try library.symbol("mdb_txn_abort", as: TxnAbort.self)
        dbiOpen = try library.symbol("mdb_dbi_open", as: DbiOpen.self)
        stat = try library.symbol("mdb_stat", as: Stat.self)
        put = try library.symbol("mdb_put", as: Put.self)
        get = try library.symbol("mdb_get", as: Get.self)
        del = try library.symbol("mdb_del", as: Del.self)
        cursorOpen = try library.symbol("mdb_cursor_open", as: CursorOpen.self)
        cursorClose = try library.symbol("mdb_cursor_close", as: CursorClose.self)
        cursorGet = try library.symbol("mdb_cursor_get", as: CursorGet.self)
        strerrorFn = try library.symbol("mdb_strerror", as: Strerror.self)
        versionFn = try library.symbol("mdb_version", as: Version.self)
    }

    func message(_ code: Int32) -> String {
        strerrorFn(code).map { String(cString: $0) } ?? "error \(code)"
    }

    /// Throws unless `code` is MDB_SUCCESS.
    @inline(__always)
    func check(_ code: Int32, _ what: @autoclosure () -> String) throws {
        if code != MDB.success { throw BenchError("lmdb: \(what()) failed: \(message(code)) (\(code))") }
    }

    var version: String {
        versionFn(nil, nil, nil).map { String(cString: $0) } ?? "unknown"
    }
}

/// LMDB with default durable commits (no MDB_NOSYNC, no MDB_NOMETASYNC: data pages synced, then
/// the meta page written and synced), MDB_NOSUBDIR (one data file plus `-lock`), MDB_NOTLS so that
/// read transactions are not tied to threads, and a 64 GiB map so the map never fills.
final class LMDBKV: KVEngine, @unchecked Sendable {
    // @unchecked: `env` and `dbi` are set once in init; LMDB itself makes the environment safe to
    // share across threads (one writer at a time, read transactions per thread with MDB_NOTLS).
    static let mapSize = 64 << 30

    let lib: LMDBLibrary
    let path: String
    private let env: OpaquePointer
    private let dbi: UInt32

    init(lib: LMDBLibrary, path: String) throws {
        self.lib = lib
        self.path = path
        let (env, dbis) = try lib.openEnvironment(path: path, databases: [(nil, 0)])
        self.env = env
        self.dbi = dbis[0]
    }

    deinit { lib.envClose(env) }

    var dataFiles: [String] { [path] }

    func write<R>(_ body: (inout Writer) throws -> R) throws -> R {
        var txn: OpaquePointer?
        try lib.check(lib.txnBegin(env, nil, 0, &txn), "mdb_txn_begin")
        var writer = Writer(lib: lib, txn: txn, dbi: dbi)
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

    func read<R>(_ body: (Reader) throws -> R) throws -> R {
        var txn: OpaquePointer?
        try lib.check(lib.txnBegin(env, nil, MDB.readOnly, &txn), "mdb_txn_begin (read-only)")
        defer { lib.txnAbort(txn) }
        return try body(Reader(lib: lib, txn: txn, dbi: dbi))
    }

    func entryCount() throws -> Int {
        try read { reader in
            let stat = UnsafeMutableRawPointer.allocate(byteCount: MDB.statSize, alignment: 8)
            defer { stat.deallocate() }
            try lib.check(lib.stat(reader.txn, dbi, stat), "mdb_stat")
            return stat.load(fromByteOffset: 32, as: Int.self)  // ms_entries
        }
    }

    func info() -> [(String, String)] { lib.facts(env) }

    struct Writer: KVWriter {
        let lib: LMDBLibrary
        let txn: OpaquePointer?
        let dbi: UInt32

        @inline(__always)
        mutating func put(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws {
            var k = MDBVal(key)
            var v = MDBVal(value)
            try lib.check(lib.put(txn, dbi, &k, &v, 0), "mdb_put")
        }

        @inline(__always)
        mutating func delete(_ key: UnsafeRawBufferPointer) throws -> Bool {
            var k = MDBVal(key)
            let rc = lib.del(txn, dbi, &k, nil)
            if rc == MDB.notFound { return false }
            try lib.check(rc, "mdb_del")
            return true
        }
    }

    struct Reader: KVReader {
        let lib: LMDBLibrary
        let txn: OpaquePointer?
        let dbi: UInt32

        @inline(__always)
        func get(_ key: UnsafeRawBufferPointer) throws -> UnsafeRawBufferPointer? {
            var k = MDBVal(key)
            var v = MDBVal()
            let rc = lib.get(txn, dbi, &k, &v)
            if rc == MDB.notFound { return nil }
            try lib.check(rc, "mdb_get")
            return v.bytes
        }

        private func withCursor<R>(_ body: (OpaquePointer?) throws -> R) throws -> R {
            var cursor: OpaquePointer?
            try lib.check(lib.cursorOpen(txn, dbi, &cursor), "mdb_cursor_open")
            defer { lib.cursorClose(cursor) }
            return try body(cursor)
        }

        func scan(
            from key: UnsafeRawBufferPointer, limit: Int,
            _ visit: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Void
        ) throws -> Int {
            try withCursor { cursor in
                var k = MDBVal(key)
                var v = MDBVal()
                var rc = lib.cursorGet(cursor, &k, &v, MDB.setRange)
                var seen = 0
                while rc == MDB.success && seen < limit {
                    visit(k.bytes, v.bytes)
                    seen += 1
                    if seen < limit { rc = lib.cursorGet(cursor, &k, &v, MDB.next) }
                }
                if rc != MDB.notFound { try lib.check(rc, "mdb_cursor_get") }
                return seen
            }
        }

        func scanAll(_ visit: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Void) throws -> Int {
            try withCursor { cursor in
                var k = MDBVal()
                var v = MDBVal()
                var rc = lib.cursorGet(cursor, &k, &v, MDB.first)
                var seen = 0
                while rc == MDB.success {
                    visit(k.bytes, v.bytes)
                    seen += 1
                    rc = lib.cursorGet(cursor, &k, &v, MDB.next)
                }
                if rc != MDB.notFound { try lib.check(rc, "mdb_cursor_get") }
                return seen
            }
        }
    }
}
