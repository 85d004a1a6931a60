import Synchronization

// The raw key-value suite: redb's published benchmark (its lmdb_benchmark), scaled by --n.
// Every engine gets the same keys, values and random choices from one seed (see RNG.swift).

/// Keys found and checksum, summed over reader threads.
final class ReadTotals: Sendable {
    let value = Mutex<(hits: Int, sum: UInt64)>((0, 0))
}

/// How much work each kv workload does for a given N.
struct KVPlan: Sendable {
    let n: Int
    /// Durable transactions of one insert each (redb's 1,000 from N = 10,000 up).
    let individualCommits: Int
    /// Durable transactions of `batchSize` inserts (redb's 100 × 1,000 from N = 100,000 up).
    let batchCommits: Int
    let batchSize: Int
    /// Random range reads (N/2), each of `rangeLength` entries.
    let ranges: Int
    let rangeLength = 10
    /// Reader threads, each doing N/threads random reads.
    let threads = 2

    init(n: Int) {
        self.n = n
        individualCommits = min(1000, max(1, n / 10))
        batchCommits = min(100, max(1, n / 100))
        batchSize = min(1000, max(1, n / 100))
        ranges = max(1, n / 2)
    }

    var readsPerThread: Int { max(1, n / threads) }
    var removals: Int { n / 2 }
}

enum KVSuite: BenchSuite {
    static let name = "kv"

    static let engines = [
        EngineInfo(id: "strata", title: "Strata"),
        EngineInfo(id: "lmdb", title: "LMDB"),
    ]

    static let bulkLoad = WorkloadInfo(
        id: "bulk_load", unit: "insert",
        summary: "N random keys inserted in one transaction, committed durably")
    static let individualWrites = WorkloadInfo(
        id: "individual_writes", unit: "commit",
        summary: "1,000 durable transactions of one insert each")
    static let batchWrites = WorkloadInfo(
        id: "batch_writes", unit: "insert",
        summary: "100 durable transactions of 1,000 inserts each")
    static let count = WorkloadInfo(
        id: "count", unit: "entry",
        summary: "a full scan counting every entry with a cursor")
    static let randomReads = WorkloadInfo(
        id: "random_reads", unit: "read",
        summary: "N point reads of random loaded keys in one snapshot, each value checksummed")
    static let randomReadsAgain = WorkloadInfo(
        id: "random_reads_again", unit: "read",
        summary: "the same N reads again (warm)")
    static let rangeReads = WorkloadInfo(
        id: "range_reads", unit: "range",
        summary: "N/2 range reads of 10 entries from a random loaded key, a new cursor each")
    static let threadedReads = WorkloadInfo(
        id: "random_reads_2_threads", unit: "read",
        summary: "2 threads, N/2 random point reads each, a snapshot per thread")
    static let removeHalf = WorkloadInfo(
        id: "remove_half", unit: "delete",
        summary: "N/2 loaded keys deleted in one transaction, committed durably")

    static let workloads = [
        bulkLoad, individualWrites, batchWrites, count, randomReads, randomReadsAgain,
        rangeReads, threadedReads, removeHalf,
    ]

    static let sizes = [
        SizeInfo(id: "after_load", title: "file size after load"),
        SizeInfo(id: "at_end", title: "file size at end"),
    ]

    static func describe(_ options: BenchOptions) -> String {
        let plan = KVPlan(n: options.n)
        return "n = \(formatInt(plan.n)), \(KVData.keySize)-byte random keys, \(KVData.valueSize)-byte random values, seed \(options.seed); "
            + "\(formatInt(plan.individualCommits)) individual commits, \(plan.batchCommits) × \(formatInt(plan.batchSize)) batch commits, "
            + "\(formatInt(plan.ranges)) ranges of \(plan.rangeLength), \(plan.threads) reader threads"
    }

    static func unavailable(_ engine: String) -> String? {
        switch engine {
        case "strata":
            return nil
        case "lmdb":
            switch LMDBLibrary.load() {
            case .success: return nil
            case .failure(let error):
                return "lmdb skipped: \(error.description); install it with `\(LMDBLibrary.installHint)`"
            }
        default:
            return "unknown engine \(engine)"
        }
    }

    static func files(of engine: String, in directory: String) -> [String] {
        let base = directory + "/kv." + (engine == "strata" ? "strata" : engine)
        return [base, base + "-lock", base + "-log"]
    }

    static func run(engine: String, options: BenchOptions, sink: ResultSink) throws {
        let path = files(of: engine, in: options.directory)[0]
        switch engine {
        case "strata":
            try runWorkloads(try StrataKV(path: path, options: options.strataStoreOptions), options: options, sink: sink)
        case "lmdb":
            switch LMDBLibrary.load() {
            case .success(let lib): try runWorkloads(try LMDBKV(lib: lib, path: path), options: options, sink: sink)
            case .failure(let error): throw error
            }
        default:
            throw BenchError("unknown engine \(engine)")
        }
    }

    /// The workloads, in redb's order, on one engine. The bulk load always runs (everything else
    /// reads or extends what it wrote); the rest run when selected.
    static func runWorkloads<E: KVEngine>(_ engine: E, options: BenchOptions, sink: ResultSink) throws {
        let plan = KVPlan(n: options.n)
        let data = KVData(seed: options.seed)
        let selected = { (w: WorkloadInfo) in options.workloads?.contains(w.id) ?? true }

        let keyBuffer = UnsafeMutableRawPointer.allocate(byteCount: KVData.keySize, alignment: 8)
        let valueBuffer = UnsafeMutableRawPointer.allocate(byteCount: KVData.valueSize, alignment: 8)
        defer {
            keyBuffer.deallocate()
            valueBuffer.deallocate()
        }
        let key = UnsafeRawBufferPointer(start: keyBuffer, count: KVData.keySize)
        let value = UnsafeRawBufferPointer(start: valueBuffer, count: KVData.valueSize)
        /// Entries the table should hold now.
        var entries = 0
        /// Next unused data index for inserts.
        var nextIndex = 0
        sink.dataFiles = engine.dataFiles

        func insert(_ writer: inout E.Writer, _ i: Int) throws {
            data.key(i, into: keyBuffer)
            data.value(i, into: valueBuffer)
            try writer.put(key, value)
        }

        func reportSize(_ id: String) {
            let bytes = engine.dataFiles.reduce(UInt64(0)) { $0 + (fileSize($1) ?? 0) }
            sink.size(id, bytes: bytes)
        }

        func expect(_ what: String, _ actual: Int, _ expected: Int) {
            if actual != expected { sink.problem("\(what): \(actual), expected \(expected)") }
        }

        // 1. Bulk load.
        try sink.measure(bulkLoad, ops: plan.n, commits: 1) {
            try engine.write { writer in
                for i in 0..<plan.n { try insert(&writer, i) }
            }
            return (nil, nil)
        }
        entries += plan.n
        nextIndex = plan.n
        reportSize("after_load")

        // 2. Individual durable commits.
        if selected(individualWrites) {
            let first = nextIndex
            try sink.measure(individualWrites, ops: plan.individualCommits, commits: plan.individualCommits) {
                for c in 0..<plan.individualCommits {
                    try engine.write { writer in try insert(&writer, first + c) }
                }
                return (nil, nil)
            }
            entries += plan.individualCommits
            nextIndex += plan.individualCommits
        }

        // 3. Batched durable commits.
        if selected(batchWrites) {
            let first = nextIndex
            try sink.measure(batchWrites, ops: plan.batchCommits * plan.batchSize, commits: plan.batchCommits) {
                for b in 0..<plan.batchCommits {
                    try engine.write { writer in
                        for j in 0..<plan.batchSize { try insert(&writer, first + b * plan.batchSize + j) }
                    }
                }
                return (nil, nil)
            }
            entries += plan.batchCommits * plan.batchSize
            nextIndex += plan.batchCommits * plan.batchSize
        }

        // 4. Count by full scan.
        if selected(count) {
            let expected = entries
            try sink.measure(count, ops: expected) {
                let (seen, bytes) = try engine.read { reader -> (Int, UInt64) in
                    var bytes: UInt64 = 0
                    let seen = try reader.scanAll { _, v in bytes &+= UInt64(v.count) }
                    return (seen, bytes)
                }
                return (seen, bytes)
            }
            let counted = try engine.entryCount()
            expect("entries after the writes (engine's own count)", counted, expected)
        }

        // 5. Random point reads, twice, the same sequence.
        for workload in [randomReads, randomReadsAgain] where selected(workload) {
            try sink.measure(workload, ops: plan.n) {
                let (hits, sum) = try engine.read { reader -> (Int, UInt64) in
                    var rng = data.choices(1)
                    var hits = 0
                    var sum: UInt64 = 0
                    for _ in 0..<plan.n {
                        data.key(rng.next(below: plan.n), into: keyBuffer)
                        if let v = try reader.get(key) {
                            hits += 1
                            sum &+= checksum(v)
                        }
                    }
                    return (hits, sum)
                }
                expect("\(workload.id) keys found", hits, plan.n)
                return (hits, sum)
            }
        }

        // 6. Random range reads.
        if selected(rangeReads) {
            try sink.measure(rangeReads, ops: plan.ranges) {
                try engine.read { reader -> (Int?, UInt64?) in
                    var rng = data.choices(2)
                    var seen = 0
                    var sum: UInt64 = 0
                    for _ in 0..<plan.ranges {
                        data.key(rng.next(below: plan.n), into: keyBuffer)
                        seen += try reader.scan(from: key, limit: plan.rangeLength) { k, v in
                            sum &+= checksum(v) &+ checksum(k)
                        }
                    }
                    return (seen, sum)
                }
            }
        }

        // 7. Random reads from several threads, a snapshot each.
        if selected(threadedReads) {
            let total = ReadTotals()
            let perThread = plan.readsPerThread
            let n = plan.n
            try sink.measure(threadedReads, ops: perThread * plan.threads) {
                try runOnThreads(plan.threads) { t in
                    let buffer = UnsafeMutableRawPointer.allocate(byteCount: KVData.keySize, alignment: 8)
                    defer { buffer.deallocate() }
                    let threadKey = UnsafeRawBufferPointer(start: buffer, count: KVData.keySize)
                    let (hits, sum) = try engine.read { reader -> (Int, UInt64) in
                        var rng = data.choices(UInt64(3 + t))
                        var hits = 0
                        var sum: UInt64 = 0
                        for _ in 0..<perThread {
                            data.key(rng.next(below: n), into: buffer)
                            if let v = try reader.get(threadKey) {
                                hits += 1
                                sum &+= checksum(v)
                            }
                        }
                        return (hits, sum)
                    }
                    total.value.withLock {
                        $0.hits += hits; $0.sum &+= sum
                    }
                }
                let (hits, sum) = total.value.withLock { $0 }
                expect("\(threadedReads.id) keys found", hits, perThread * plan.threads)
                return (hits, sum)
            }
        }

        // 8. Remove half of the loaded keys in one transaction.
        if selected(removeHalf) {
            var deleted = 0
            try sink.measure(removeHalf, ops: plan.removals, commits: 1, countAfter: { try engine.entryCount() }) {
                deleted = try engine.write { writer -> Int in
                    var deleted = 0
                    for i in 0..<plan.removals {
                        data.key(i, into: keyBuffer)
                        if try writer.delete(key) { deleted += 1 }
                    }
                    return deleted
                }
                return (nil, nil)
            }
            entries -= deleted
            expect("keys deleted", deleted, plan.removals)
            expect("entries after removal (engine's own count)", try engine.entryCount(), entries)
        }
        reportSize("at_end")
        for (key, value) in engine.info() { sink.info(key, value) }
    }
}
