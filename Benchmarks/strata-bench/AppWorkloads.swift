import Foundation

// The app suite (issue 16): the queries a chat app runs most, answered in time proportional to
// the result — a room's newest page (a compound index), searches (a full-text index), a contacts
// list in case-insensitive order (a collated index) — beside SQLite with its composite index, FTS5
// and an index `COLLATE NOCASE`, on the same data (AppData.swift).

/// An engine the app suite measures, used as an app would use it.
protocol AppEngine: AnyObject {
    /// Files whose sizes the bench reports.
    var dataFiles: [String] { get }
    /// Whether it can search text (SQLite without FTS5 cannot: the search workloads then run on
    /// Strata alone).
    var canSearch: Bool { get }
    func info() -> [(String, String)]
    /// Inserts messages `range` of `data` in one durable transaction.
    func insertMessages(_ range: Range<Int>, _ data: AppData) throws
    func insertContacts(_ range: Range<Int>, _ data: AppData) throws
    /// Runs `body` on one read snapshot (transaction).
    func read<R>(_ body: (any AppReader) throws -> R) throws -> R
}

/// Reads on one snapshot; each visits the objects it returns, decoded, and returns how many.
protocol AppReader {
    /// The newest `limit` messages of `room`, newest first.
    func roomPage(room: Int64, limit: Int, _ visit: (AppMessageValue) -> Void) throws -> Int
    /// The first `limit` messages (by id) holding every word of `words`.
    func search(_ words: [String], limit: Int, _ visit: (AppMessageValue) -> Void) throws -> Int
    /// The number of messages holding `word`.
    func count(word: String) throws -> Int
    /// Contacts `offset..<offset + limit` in case-insensitive name order (ties by id).
    func contacts(offset: Int, limit: Int, _ visit: (AppContactValue) -> Void) throws -> Int
}

enum AppSuite: BenchSuite {
    static let name = "app"

    static let engines = [EngineInfo(id: "strata", title: "Strata"), EngineInfo(id: "sqlite", title: "SQLite")]

    static let loadMessages = WorkloadInfo(
        id: "load_messages", unit: "insert",
        summary: "N messages with their indexes (room and time; words), 20,000 per durable transaction")
    static let loadContacts = WorkloadInfo(
        id: "load_contacts", unit: "insert",
        summary: "the contacts (min(100,000, N/10)) with a case-insensitive name index, one durable transaction")
    static let roomPage = WorkloadInfo(
        id: "room_page", unit: "query",
        summary: "2,000 random rooms (uniform): the newest 50 messages, decoded")
    static let busyRoomPage = WorkloadInfo(
        id: "room_page_busiest", unit: "query",
        summary: "2,000 times the busiest room (~6 % of the messages): the newest 50, decoded")
    static let searchOne = WorkloadInfo(
        id: "search_one_word", unit: "query",
        summary: "200 random words of rank 100-1,000: the first 50 matches by id, decoded")
    static let searchTwo = WorkloadInfo(
        id: "search_two_words", unit: "query",
        summary: "200 random pairs (rank 10-100 and 100-1,000), both words: the first 50 matches, decoded")
    static let countCommon = WorkloadInfo(
        id: "count_common_word", unit: "count",
        summary: "20 counts of the messages holding the most common word (most of them)")
    static let contactsFirst = WorkloadInfo(
        id: "contacts_first_page", unit: "query",
        summary: "1,000 times the first 50 contacts in case-insensitive order, decoded")
    static let contactsMiddle = WorkloadInfo(
        id: "contacts_middle_page", unit: "query",
        summary: "200 pages of 50 contacts from the middle of the list (offset C/2 + 0..<100), decoded")
    static let workloads = [loadMessages, loadContacts, roomPage, busyRoomPage, searchOne, searchTwo, countCommon, contactsFirst, contactsMiddle]

    static let sizes = [SizeInfo(id: "after_load", title: "file size after load")]

    static func describe(_ options: BenchOptions) -> String {
        let data = AppData(seed: options.seed, n: options.n)
        return "\(formatInt(data.messages)) messages in \(formatInt(data.rooms)) rooms of skewed sizes, 4-15 words of a 20,000-word "
            + "Zipf vocabulary each; \(formatInt(data.contacts)) contacts; seed \(options.seed); every commit durable"
    }

    static func unavailable(_ engine: String) -> String? {
        switch engine {
        case "strata": return nil
        case "sqlite":
            switch SQLiteLibrary.load() {
            case .success: return nil
            case .failure(let error): return "sqlite skipped: \(error.description); install it with `\(SQLiteLibrary.installHint)`"
            }
        default: return "unknown engine \(engine)"
        }
    }

    static func files(of engine: String, in directory: String) -> [String] {
        let base = directory + "/app." + engine
        switch engine {
        case "sqlite": return [base, base + "-wal", base + "-shm", base + "-journal"]
        default: return [base, base + "-lock", base + "-log"]
        }
    }

    static func run(engine: String, options: BenchOptions, sink: ResultSink) throws {
        let path = files(of: engine, in: options.directory)[0]
        switch engine {
        case "strata":
            try runWorkloads(try StrataApp(path: path, options: options.strataStoreOptions), options: options, sink: sink)
        case "sqlite":
            switch SQLiteLibrary.load() {
            case .success(let lib): try runWorkloads(try SQLiteApp(lib: lib, path: path), options: options, sink: sink)
            case .failure(let error): throw error
            }
        default:
            throw BenchError("unknown engine \(engine)")
        }
    }

    static func runWorkloads<E: AppEngine>(_ engine: E, options: BenchOptions, sink: ResultSink) throws {
        let data = AppData(seed: options.seed, n: options.n)
        let selected = { (w: WorkloadInfo) in options.workloads?.contains(w.id) ?? true }
        sink.dataFiles = engine.dataFiles

        // Loads always run: everything else reads them.
        let batch = 20_000
        try sink.measure(loadMessages, ops: data.messages, commits: (data.messages + batch - 1) / batch) {
            for start in stride(from: 0, to: data.messages, by: batch) {
                try engine.insertMessages(start..<min(data.messages, start + batch), data)
            }
            return (nil, nil)
        }
        try sink.measure(loadContacts, ops: data.contacts, commits: 1) {
            try engine.insertContacts(0..<data.contacts, data)
            return (nil, nil)
        }
        sink.size("after_load", bytes: engine.dataFiles.map { fileSize($0) ?? 0 }.reduce(0, +))
        for (key, value) in engine.info() { sink.info(key, value) }

        /// `queries` reads on one snapshot, each returning rows folded into an order-sensitive checksum.
        func queries(
            _ workload: WorkloadInfo, _ count: Int, stream: UInt64,
            _ query: (any AppReader, inout SplitMix64, (UInt64) -> Void) throws -> Int
        ) throws {
            guard selected(workload) else { return }
            try sink.measure(workload, ops: count) {
                try engine.read { reader in
                    var rng = data.choices(stream)
                    var rows = 0
                    var sum: UInt64 = 0
                    for _ in 0..<count {
                        rows += try query(reader, &rng) { sum = sum &* 31 &+ $0 }
                    }
                    return (rows, sum)
                }
            }
        }

        let busiest = Int64(0)  // room ⌊R · u^2.5⌋ is 0 for the largest share of u
        try queries(roomPage, 2_000, stream: 1) { reader, rng, add in
            try reader.roomPage(room: Int64(rng.next(below: data.rooms)), limit: 50) { add(checksum($0)) }
        }
        try queries(busyRoomPage, 2_000, stream: 2) { reader, _, add in
            try reader.roomPage(room: busiest, limit: 50) { add(checksum($0)) }
        }
        if engine.canSearch {
            try queries(searchOne, 200, stream: 3) { reader, rng, add in
                try reader.search([data.middleWord(&rng)], limit: 50) { add(checksum($0)) }
            }
            try queries(searchTwo, 200, stream: 4) { reader, rng, add in
                try reader.search([data.commonWord(&rng), data.middleWord(&rng)], limit: 50) { add(checksum($0)) }
            }
            try queries(countCommon, 20, stream: 5) { reader, _, add in
                let n = try reader.count(word: data.mostCommonWord)
                add(UInt64(n))
                return n
            }
        }
        try queries(contactsFirst, 1_000, stream: 6) { reader, _, add in
            try reader.contacts(offset: 0, limit: 50) { add(checksum($0)) }
        }
        try queries(contactsMiddle, 200, stream: 7) { reader, rng, add in
            try reader.contacts(offset: data.contacts / 2 + rng.next(below: 100), limit: 50) { add(checksum($0)) }
        }
    }
}
