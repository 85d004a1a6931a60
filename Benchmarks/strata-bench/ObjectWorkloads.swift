import CodableFloor
import Foundation
import Synchronization

// The objects suite (issue 6): Strata's object API beside SQLite and LMDB, on the same `Item`
// objects and the same random choices from one seed (ObjectData.swift).

/// How much work each objects workload does for a given N.
struct ObjectPlan: Sendable {
    let n: Int
    /// Durable transactions of one new object each (1,000 from N = 10,000 up).
    let individualCommits: Int
    /// Durable transactions of `batchSize` new objects (100 × 1,000 from N = 100,000 up).
    let batchCommits: Int
    let batchSize: Int
    /// Queries of one random category each (indexed_query and aggregate).
    let queries = 100
    /// Counts of all objects.
    let counts = 100
    /// Reader threads, each doing N/threads random point reads.
    let threads = 2
    /// Durable transactions of `updateSize` updates of random objects (as the batches).
    let updateCommits: Int
    let updateSize: Int
    /// Random objects deleted (N/2), in `deleteCommits` durable transactions.
    let deletes: Int
    let deleteCommits: Int

    init(n: Int) {
        self.n = n
        individualCommits = min(1000, max(1, n / 10))
        batchCommits = min(100, max(1, n / 100))
        batchSize = min(1000, max(1, n / 100))
        updateCommits = batchCommits
        updateSize = batchSize
        deletes = n / 2
        deleteCommits = max(1, min(10, deletes))
    }

    var readsPerThread: Int { max(1, n / threads) }
    /// Objects after the three write workloads (when all ran).
    var written: Int { n + individualCommits + batchCommits * batchSize }
}

/// Hits and checksum, summed over reader threads.
final class ObjectReadTotals: Sendable {
    let value = Mutex<(hits: Int, sum: UInt64)>((0, 0))
}

enum ObjectsSuite: BenchSuite {
    static let name = "objects"

    static let engines = [
        EngineInfo(id: "strata", title: "Strata"),
        EngineInfo(id: "sqlite", title: "SQLite"),
        EngineInfo(id: "lmdb", title: "LMDB"),
    ]

    static let bulkInsert = WorkloadInfo(
        id: "bulk_insert", unit: "insert",
        summary: "N objects inserted in one durable transaction")
    static let individualWrites = WorkloadInfo(
        id: "individual_writes", unit: "commit",
        summary: "1,000 durable transactions of one new object each")
    static let batchWrites = WorkloadInfo(
        id: "batch_writes", unit: "insert",
        summary: "100 durable transactions of 1,000 new objects each")
    static let pointReads = WorkloadInfo(
        id: "point_reads", unit: "read",
        summary: "N reads of random loaded ids in one snapshot, each decoded to an Item")
    static let rangeScan = WorkloadInfo(
        id: "range_scan", unit: "object",
        summary: "every object in id order, decoded")
    static let indexedQuery = WorkloadInfo(
        id: "indexed_query", unit: "query",
        summary: "100 random categories: every object of the category through the index, decoded")
    static let unindexedFilter = WorkloadInfo(
        id: "unindexed_filter", unit: "object",
        summary: "count of objects with score > 0.9 (not indexed; ops are objects scanned)")
    static let count = WorkloadInfo(
        id: "count", unit: "count",
        summary: "100 counts of every object, a read transaction each")
    static let aggregate = WorkloadInfo(
        id: "aggregate", unit: "query",
        summary: "100 random categories: the sum of score over the category")
    static let concurrentReads = WorkloadInfo(
        id: "concurrent_reads", unit: "read",
        summary: "2 threads, N/2 random point reads each, a snapshot (SQLite: a connection) per thread")
    static let updates = WorkloadInfo(
        id: "updates", unit: "update",
        summary: "100 durable transactions of 1,000 random objects, changing score and name")
    static let deletes = WorkloadInfo(
        id: "deletes", unit: "delete",
        summary: "N/2 random objects deleted in 10 durable transactions")

    static let codecDecode = WorkloadInfo(
        id: "codec_decode", unit: "object",
        summary: "N records of 4,096 distinct Items decoded from memory, the codec alone (no engine; SQLite has none)",
        perOp: true)
    static let codecEncode = WorkloadInfo(
        id: "codec_encode", unit: "object",
        summary: "N Items (4,096 distinct, made beforehand) encoded to records, the codec alone (no engine; SQLite has none)",
        perOp: true)
    static let codableFloorDecode = WorkloadInfo(
        id: "codable_floor_decode", unit: "object",
        summary: "codec_decode's Items through a Decoder that reads no bytes (Codable's dispatch and the String and Data alone; in Strata's process)",
        perOp: true)
    static let codableFloorEncode = WorkloadInfo(
        id: "codable_floor_encode", unit: "object",
        summary: "codec_encode's Items through an Encoder that writes nothing (Codable's dispatch alone; in Strata's process)",
        perOp: true)

    static let harnessMake = WorkloadInfo(
        id: "harness_make", unit: "object",
        summary: "the bench's own work inside the write rows' clocks: N Items made as the writes make them, no engine",
        perOp: true)
    static let harnessCheck = WorkloadInfo(
        id: "harness_check", unit: "object",
        summary: "the bench's own work inside the read rows' clocks: N Items (4,096 distinct) checksummed as the reads check them, no engine",
        perOp: true)

    static let workloads = [
        bulkInsert, individualWrites, batchWrites, pointReads, rangeScan, indexedQuery,
        unindexedFilter, count, aggregate, concurrentReads, updates, deletes,
        codecDecode, codecEncode, codableFloorDecode, codableFloorEncode, harnessMake, harnessCheck,
    ]

    /// Distinct objects the codec workloads cycle through: enough to leave the caches' favourites
    /// behind, few enough to make beforehand.
    static let codecDistinct = 4096

    static let sizes = [
        SizeInfo(id: "after_load", title: "file size after load"),
        SizeInfo(id: "at_end", title: "file size at end"),
        SizeInfo(id: "after_idle", title: "file size after idle"),
    ]

    static func describe(_ options: BenchOptions) -> String {
        let plan = ObjectPlan(n: options.n)
        return "n = \(formatInt(plan.n)) Items (id, 16-32 char name, category 0-99 indexed, score, \(ItemData.blobSize)-byte blob), seed \(options.seed); "
            + "\(formatInt(plan.individualCommits)) individual commits, \(plan.batchCommits) × \(formatInt(plan.batchSize)) batch commits, "
            + "\(plan.updateCommits) × \(formatInt(plan.updateSize)) updates, \(formatInt(plan.deletes)) deletes in \(plan.deleteCommits) commits, "
            + "\(plan.threads) reader threads; every commit durable"
    }

    static func unavailable(_ engine: String) -> String? {
        switch engine {
        case "strata":
            return nil
        case "sqlite":
            switch SQLiteLibrary.load() {
            case .success: return nil
            case .failure(let error): return "sqlite skipped: \(error.description); install it with `\(SQLiteLibrary.installHint)`"
            }
        case "lmdb":
            switch LMDBLibrary.load() {
            case .success: return nil
            case .failure(let error): return "lmdb skipped: \(error.description); install it with `\(LMDBLibrary.installHint)`"
            }
        default:
            return "unknown engine \(engine)"
        }
    }

    static func files(of engine: String, in directory: String) -> [String] {
        let base = directory + "/objects." + engine
        switch engine {
        case "sqlite": return [base, base + "-wal", base + "-shm", base + "-journal"]
        default: return [base, base + "-lock", base + "-log"]
        }
    }

    static func run(engine: String, options: BenchOptions, sink: ResultSink) throws {
        let path = files(of: engine, in: options.directory)[0]
        switch engine {
        case "strata":
            try runWorkloads(try StrataObjects(path: path, options: options.strataStoreOptions), options: options, sink: sink)
        case "sqlite":
            switch SQLiteLibrary.load() {
            case .success(let lib): try runWorkloads(try SQLiteObjects(lib: lib, path: path), options: options, sink: sink)
            case .failure(let error): throw error
            }
        case "lmdb":
            switch LMDBLibrary.load() {
            case .success(let lib): try runWorkloads(try LMDBObjects(lib: lib, path: path), options: options, sink: sink)
            case .failure(let error): throw error
            }
        default:
            throw BenchError("unknown engine \(engine)")
        }
    }

    /// The workloads, in issue 6's order, on one engine. The bulk insert always runs (everything
    /// else reads or extends what it wrote); the rest run when selected.
    static func runWorkloads<E: ObjectEngine>(_ engine: E, options: BenchOptions, sink: ResultSink) throws {
        let plan = ObjectPlan(n: options.n)
        let data = ItemData(seed: options.seed)
        let selected = { (w: WorkloadInfo) in options.workloads?.contains(w.id) ?? true }
        /// Objects the database should hold now.
        var objects = 0
        /// Next unused data index for inserts.
        var nextIndex = 0
        sink.dataFiles = engine.dataFiles

        func reportSize(_ id: String) {
            let sizes = engine.dataFiles.map { fileSize($0) ?? 0 }
            sink.size(id, bytes: sizes.reduce(0, +))
            if sizes.count > 1 {
                let parts = zip(engine.dataFiles, sizes).map { file, bytes in
                    "\(file.split(separator: "/").last.map(String.init) ?? file) \(formatBytes(bytes))"
                }
                sink.info("files \(id)", parts.joined(separator: " + "))
            }
        }

        func expect(_ what: String, _ actual: Int, _ expected: Int) {
            if actual != expected { sink.problem("\(what): \(actual), expected \(expected)") }
        }

        func insert(_ range: Range<Int>, commits: Int) throws {
            let perCommit = range.count / max(1, commits)
            for c in 0..<commits {
                let first = range.lowerBound + c * perCommit
                let last = c == commits - 1 ? range.upperBound : first + perCommit
                try engine.write { writer in
                    for i in first..<last { try writer.insert(data.item(i)) }
                }
            }
        }

        // 1. Bulk insert.
        try sink.measure(bulkInsert, ops: plan.n, commits: 1) {
            try insert(0..<plan.n, commits: 1)
            return (nil, nil)
        }
        objects += plan.n
        nextIndex = plan.n
        reportSize("after_load")

        // 2. Individual durable commits.
        if selected(individualWrites) {
            let range = nextIndex..<(nextIndex + plan.individualCommits)
            try sink.measure(individualWrites, ops: plan.individualCommits, commits: plan.individualCommits) {
                try insert(range, commits: plan.individualCommits)
                return (nil, nil)
            }
            objects += range.count
            nextIndex = range.upperBound
        }

        // 3. Batched durable commits.
        if selected(batchWrites) {
            let range = nextIndex..<(nextIndex + plan.batchCommits * plan.batchSize)
            try sink.measure(batchWrites, ops: range.count, commits: plan.batchCommits) {
                try insert(range, commits: plan.batchCommits)
                return (nil, nil)
            }
            objects += range.count
            nextIndex = range.upperBound
        }

        // 4. Random point reads by primary key, one snapshot.
        if selected(pointReads) {
            try sink.measure(pointReads, ops: plan.n) {
                let (hits, sum) = try engine.read(slot: 0) { reader -> (Int, UInt64) in
                    var rng = data.choices(1)
                    var hits = 0
                    var sum: UInt64 = 0
                    for _ in 0..<plan.n {
                        if let item = try reader.item(id: data.id(rng.next(below: plan.n))) {
                            hits += 1
                            sum &+= checksum(item)
                        }
                    }
                    return (hits, sum)
                }
                expect("\(pointReads.id) objects found", hits, plan.n)
                return (hits, sum)
            }
        }

        // 5. Every object in key order.
        if selected(rangeScan) {
            let expected = objects
            try sink.measure(rangeScan, ops: expected) {
                let (seen, sum) = try engine.read(slot: 0) { reader -> (Int, UInt64) in
                    var sum: UInt64 = 0
                    var previous = Int64.min
                    var ordered = true
                    let seen = try reader.forEach { item in
                        sum &+= checksum(item)
                        if item.id <= previous { ordered = false }
                        previous = item.id
                    }
                    if !ordered { sink.problem("\(rangeScan.id): objects not in id order") }
                    return (seen, sum)
                }
                expect("\(rangeScan.id) objects", seen, expected)
                return (seen, sum)
            }
        }

        // 6. Every object of 100 random categories, through the index.
        if selected(indexedQuery) {
            try sink.measure(indexedQuery, ops: plan.queries) {
                var rng = data.choices(2)
                var seen = 0
                var sum: UInt64 = 0
                for _ in 0..<plan.queries {
                    let category = Int64(rng.next(below: ItemData.categories))
                    var wrong = 0
                    seen += try engine.read(slot: 0) { reader in
                        try reader.forEach(category: category) { item in
                            sum &+= checksum(item)
                            if item.category != category { wrong += 1 }
                        }
                    }
                    if wrong > 0 { sink.problem("\(indexedQuery.id): \(wrong) objects outside category \(category)") }
                }
                return (seen, sum)
            }
        }

        // 7. Count with a condition on an unindexed field.
        if selected(unindexedFilter) {
            try sink.measure(unindexedFilter, ops: objects) {
                let matches = try engine.read(slot: 0) { reader in try reader.count(scoreAbove: ItemData.scoreThreshold) }
                return (matches, nil)
            }
        }

        // 8. Count every object, 100 times.
        if selected(count) {
            try sink.measure(count, ops: plan.counts) {
                var last = 0
                for _ in 0..<plan.counts {
                    last = try engine.read(slot: 0) { reader in try reader.count() }
                }
                expect("\(count.id) objects", last, objects)
                return (last, nil)
            }
        }

        // 9. Sum of score over 100 random categories.
        if selected(aggregate) {
            try sink.measure(aggregate, ops: plan.queries) {
                var rng = data.choices(3)
                var sum: UInt64 = 0
                for _ in 0..<plan.queries {
                    let category = Int64(rng.next(below: ItemData.categories))
                    let total = try engine.read(slot: 0) { reader in try reader.sumOfScores(category: category) }
                    sum &+= roundedSum(total)
                }
                return (nil, sum)
            }
        }

        // 10. Random point reads from several threads, a snapshot each.
        if selected(concurrentReads) {
            try engine.openReaders(plan.threads)
            let total = ObjectReadTotals()
            let perThread = plan.readsPerThread
            let n = plan.n
            try sink.measure(concurrentReads, ops: perThread * plan.threads) {
                try runOnThreads(plan.threads) { t in
                    let (hits, sum) = try engine.read(slot: t + 1) { reader -> (Int, UInt64) in
                        var rng = data.choices(UInt64(4 + t))
                        var hits = 0
                        var sum: UInt64 = 0
                        for _ in 0..<perThread {
                            if let item = try reader.item(id: data.id(rng.next(below: n))) {
                                hits += 1
                                sum &+= checksum(item)
                            }
                        }
                        return (hits, sum)
                    }
                    total.value.withLock {
                        $0.hits += hits; $0.sum &+= sum
                    }
                }
                let (hits, sum) = total.value.withLock { $0 }
                expect("\(concurrentReads.id) objects found", hits, perThread * plan.threads)
                return (hits, sum)
            }
        }

        // 11. Durable transactions of random updates (name and score).
        if selected(updates) {
            // Checked by what they left: every object, read back after the clock stops.
            let everyObject = {
                try engine.read(slot: 0) { reader -> UInt64 in
                    var sum: UInt64 = 0
                    _ = try reader.forEach { sum &+= checksum($0) }
                    return sum
                }
            }
            try sink.measure(updates, ops: plan.updateCommits * plan.updateSize, commits: plan.updateCommits, checksumAfter: everyObject) {
                var rng = data.choices(6)
                var found = 0
                var k = 0
                for _ in 0..<plan.updateCommits {
                    found += try engine.write { writer -> Int in
                        var found = 0
                        for _ in 0..<plan.updateSize {
                            let id = data.id(rng.next(below: plan.n))
                            let change = data.update(k)
                            k += 1
                            if try writer.update(id: id, name: change.name, score: change.score) { found += 1 }
                        }
                        return found
                    }
                }
                expect("\(updates.id) objects found", found, plan.updateCommits * plan.updateSize)
                return (found, nil)
            }
        }

        // 12. Delete N/2 distinct random loaded objects in 10 durable transactions.
        if selected(deletes) {
            var rng = data.choices(7)
            let permutation = Permutation(n: plan.n, rng: &rng)
            var deleted = 0
            try sink.measure(deletes, ops: plan.deletes, commits: plan.deleteCommits, countAfter: { try engine.read(slot: 0) { try $0.count() } }) {
                let perCommit = plan.deletes / plan.deleteCommits
                for c in 0..<plan.deleteCommits {
                    let first = c * perCommit
                    let last = c == plan.deleteCommits - 1 ? plan.deletes : first + perCommit
                    deleted += try engine.write { writer -> Int in
                        var deleted = 0
                        for i in first..<last where try writer.delete(id: data.id(permutation[i])) { deleted += 1 }
                        return deleted
                    }
                }
                return (nil, nil)
            }
            objects -= deleted
            expect("objects deleted", deleted, plan.deletes)
            expect("objects after the deletes (engine's own count)", try engine.read(slot: 0) { try $0.count() }, objects)
        }
        reportSize("at_end")
        // What the engine's file becomes once the writes stop, with the database still open:
        // until its size has not changed for a second (at most 20 s).
        do {
            let total = { engine.dataFiles.map { fileSize($0) ?? 0 }.reduce(0, +) }
            var last = total()
            var stableSince = ContinuousClock.now
            let deadline = stableSince + .seconds(20)
            while ContinuousClock.now - stableSince < .seconds(1) && ContinuousClock.now < deadline {
                Thread.sleep(forTimeInterval: 0.05)
                let now = total()
                if now != last { last = now; stableSince = ContinuousClock.now }
            }
        }
        reportSize("after_idle")

        // 13, 14. The codec alone: no tree, no transaction, the records in memory.
        if selected(codecDecode) || selected(codecEncode), var codec = try engine.codec() {
            let items = (0..<min(plan.n, codecDistinct)).map { data.item($0) }
            // The records back to back in one buffer, as on a page.
            var bytes: [UInt8] = []
            var spans: [Range<Int>] = []
            for item in items {
                let record = try codec.record(item)
                spans.append(bytes.count..<(bytes.count + record.count))
                bytes += record
            }
            // Untimed: every record decodes to its object (the timed passes only fold a few fields).
            try bytes.withUnsafeBytes { all in
                for (item, span) in zip(items, spans) where try codec.decode(UnsafeRawBufferPointer(rebasing: all[span]), id: item.id) != item {
                    sink.problem("codec: object \(item.id) does not survive encode and decode")
                    break
                }
            }
            if selected(codecDecode) {
                try sink.measure(codecDecode, ops: plan.n) {
                    var sum: UInt64 = 0
                    try bytes.withUnsafeBytes { all in
                        var i = 0
                        for _ in 0..<plan.n {
                            let item = try codec.decode(UnsafeRawBufferPointer(rebasing: all[spans[i]]), id: items[i].id)
                            sum &+= UInt64(bitPattern: item.id) ^ item.score.bitPattern ^ UInt64(item.name.utf8.count) ^ UInt64(item.blob.count)
                            i += 1
                            if i == items.count { i = 0 }
                        }
                    }
                    return (plan.n, sum)
                }
            }
            if selected(codecEncode) {
                var total = 0
                try sink.measure(codecEncode, ops: plan.n) {
                    var i = 0
                    for _ in 0..<plan.n {
                        total &+= try codec.encode(items[i])
                        i += 1
                        if i == items.count { i = 0 }
                    }
                    return (plan.n, nil)
                }
                sink.stat(codecEncode.id, "record_bytes_mean", UInt64(total / max(1, plan.n)))
            }
        }
        if engine is StrataObjects, selected(codableFloorDecode) || selected(codableFloorEncode) {
            try measureCodableFloor(plan: plan, data: data, selected: selected, sink: sink)
        }
        // What every engine's write and read rows include besides the engine (measured once, in
        // Strata's process): set a row's time per object against it before comparing engines
        // whose own work is of its size (LMDB's).
        if engine is StrataObjects, selected(harnessMake) {
            try sink.measure(harnessMake, ops: plan.n) {
                var sum: UInt64 = 0
                for i in 0..<plan.n { sum &+= UInt64(bitPattern: data.item(i).id) }
                return (plan.n, sum)
            }
        }
        if engine is StrataObjects, selected(harnessCheck) {
            let items = (0..<min(plan.n, codecDistinct)).map { data.item($0) }
            try sink.measure(harnessCheck, ops: plan.n) {
                var sum: UInt64 = 0
                var i = 0
                for _ in 0..<plan.n {
                    sum &+= checksum(items[i])
                    i += 1
                    if i == items.count { i = 0 }
                }
                return (plan.n, sum)
            }
        }
        for (key, value) in engine.info() { sink.info(key, value) }
    }

    /// The codec workloads' Items through coders that read and write nothing (CodableFloor): what
    /// Swift's Codable costs any codec, to set `codec_decode` and `codec_encode` against.
    private static func measureCodableFloor(plan: ObjectPlan, data: ItemData, selected: (WorkloadInfo) -> Bool, sink: ResultSink) throws {
        let items = (0..<min(plan.n, codecDistinct)).map { data.item($0) }
        // Each Item's values, in the order its synthesized init(from:) asks for them; the strings'
        // and blobs' bytes back to back in one buffer, as a record's are.
        var bytes: [UInt8] = []
        var spans: [(name: Range<Int>, blob: Range<Int>)] = []
        for item in items {
            let name = bytes.count..<(bytes.count + item.name.utf8.count)
            bytes += item.name.utf8
            let blob = bytes.count..<(bytes.count + item.blob.count)
            bytes += item.blob
            spans.append((name, blob))
        }
        try bytes.withUnsafeBytes { all in
            var values: [FloorValue] = []
            for (item, span) in zip(items, spans) {
                values += [
                    .int(item.id), .string(UnsafeRawBufferPointer(rebasing: all[span.name])), .int(item.category), .double(item.score),
                    .data(UnsafeRawBufferPointer(rebasing: all[span.blob])),
                ]
            }
            let fields = 5
            try values.withUnsafeBufferPointer { values in
                let decoder = FloorDecoder()
                func of(_ i: Int) -> UnsafeBufferPointer<FloorValue> { UnsafeBufferPointer(rebasing: values[(i * fields)..<((i + 1) * fields)]) }
                // Untimed: every value list makes its Item (so the floor decodes what codec_decode does).
                for (i, item) in items.enumerated() where try decoder.decode(Item.self, values: of(i)) != item {
                    sink.problem("codable floor: object \(item.id) does not come back from its values")
                    break
                }
                guard selected(codableFloorDecode) else { return }
                try sink.measure(codableFloorDecode, ops: plan.n) {
                    var sum: UInt64 = 0
                    var i = 0
                    for _ in 0..<plan.n {
                        let item = try decoder.decode(Item.self, values: of(i))
                        sum &+= UInt64(bitPattern: item.id) ^ item.score.bitPattern ^ UInt64(item.name.utf8.count) ^ UInt64(item.blob.count)
                        i += 1
                        if i == items.count { i = 0 }
                    }
                    return (plan.n, sum)
                }
            }
        }
        if selected(codableFloorEncode) {
            let encoder = FloorEncoder()
            try sink.measure(codableFloorEncode, ops: plan.n) {
                var i = 0
                for _ in 0..<plan.n {
                    try encoder.encode(items[i])
                    i += 1
                    if i == items.count { i = 0 }
                }
                return (plan.n, nil)
            }
            sink.stat(codableFloorEncode.id, "sum", encoder.sum)
        }
    }
}
