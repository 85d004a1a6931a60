import Foundation
import Dispatch
import Strata

/// Live results (issue 4): how long a commit takes to reach an observer, and what observers cost
/// the writer. Strata only: the peers have no change notifications to compare with.
///
/// - `delivery_latency`: an observer of every object sorted by score (N objects, at most 100,000);
///   100 times, one object's score is updated in its own durable commit and the clock runs from
///   the commit's start until the observer's block receives the change. ops/s is deliveries per
///   second, so 1 / ops/s is the mean latency; p50 and p99 are printed below the table.
/// - `cross_process_latency`: the same, the updates made by another process (`strata-bench
///   live-writer`, LiveWriter.swift), which stamps each object with the time its transaction
///   began; the observer here is woken by the lock file's commit signal and finds the change by
///   comparing snapshots. The writer is told to write the next update once the previous one was
///   delivered, so ops/s also counts that message.
/// - `commits_0_observers`, `commits_1_observer`, `commits_10_observers`: 10,000 small transactions
///   (one object's score each, `.noSync` so the disk does not hide the CPU cost) with 0, 1 or 10
///   observers, each watching one category (about 1 % of the objects, through the index).
enum LiveSuite: StrataItemSuite {
    static let name = "live"

    static let latency = WorkloadInfo(
        id: "delivery_latency", unit: "delivery",
        summary: "one-object update to delivery, observer of all objects sorted by score (N ≤ 100,000)")
    static let crossLatency = WorkloadInfo(
        id: "cross_process_latency", unit: "delivery",
        summary: "the same update made by another process: commit signal, snapshot diff, delivery")
    /// Deliveries timed per latency workload.
    static let latencySamples = 100
    static let commits0 = WorkloadInfo(
        id: "commits_0_observers", unit: "commit",
        summary: "10,000 one-object noSync commits, no observer")
    static let commits1 = WorkloadInfo(
        id: "commits_1_observer", unit: "commit",
        summary: "10,000 one-object noSync commits, 1 observer of one category")
    static let commits10 = WorkloadInfo(
        id: "commits_10_observers", unit: "commit",
        summary: "10,000 one-object noSync commits, 10 observers of one category each")
    static let workloads = [latency, crossLatency, commits0, commits1, commits10]
    /// Commits per throughput workload: enough for a steady rate (a fraction of a second each).
    static let commits = 10_000

    static func describe(_ options: BenchOptions) -> String {
        "n = \(formatInt(itemCount(options))) Items, seed \(options.seed); observers recompute off the writer's path"
    }

    static func run(engine: String, options: BenchOptions, sink: ResultSink) throws {
        let (db, data) = try loadItems(engine: engine, options: options)
        sink.dataFiles = strataDataFiles(files(of: engine, in: options.directory)[0])
        let n = itemCount(options)
        let selected = { (w: WorkloadInfo) in options.workloads?.contains(w.id) ?? true }

        if selected(latency) {
            try measureLatency(latency, db: db, data: data, n: n, sink: sink, writer: nil)
        }
        if selected(crossLatency) {
            let writer = try LiveWriterProcess(path: files(of: engine, in: options.directory)[0])
            try measureLatency(crossLatency, db: db, data: data, n: n, sink: sink, writer: writer)
            try writer.finish()
        }

        for (workload, observers) in [(commits0, 0), (commits1, 1), (commits10, 10)] where selected(workload) {
            // (Cross-process latency kept a second process; commits here are this process's alone.)
            let ready = DispatchSemaphore(value: 0)
            var tokens: [NotificationToken] = []
            for o in 0..<observers {
                let category = Int64(o)
                tokens.append(
                    db.objects(Item.self).filter(#Predicate { $0.category == category }).observe(on: DispatchQueue(label: "bench.o\(o)")) { change in
                        if case .initial = change { ready.signal() }
                    })
            }
            for _ in 0..<observers { ready.wait() }
            try sink.measure(workload, ops: LiveSuite.commits, commits: LiveSuite.commits) {
                for k in 0..<LiveSuite.commits {
                    let id = data.id((k * 104_729) % n)
                    // Each workload writes other values than the one before: an update that stores
                    // identical bytes writes nothing, and the commit would measure nothing.
                    let score = Double((k + observers * 337) % 1000) / 1000
                    try db.write(durability: .noSync) { tx in _ = try tx.update(Item.self, key: id) { $0.score = score } }
                }
                return (nil, nil)
            }
            tokens.forEach { $0.invalidate() }
        }
    }

    /// Times `latencySamples` one-object updates from commit start to delivery, made here or by
    /// `writer`, and reports their p50 and p99 as stats.
    static func measureLatency(
        _ workload: WorkloadInfo, db: Database, data: ItemData, n: Int, sink: ResultSink,
        writer: LiveWriterProcess?
    ) throws {
        let received = DispatchSemaphore(value: 0)
        let samples = LatencySamples()
        let since = LatencyStamp.now()
        let token = db.objects(Item.self).sorted(by: SortDescriptor(\.score)).observe(on: DispatchQueue(label: "bench.observer")) { change in
            let now = LatencyStamp.now()
            if case .update(let results, _, let insertions, let modifications) = change {
                for i in insertions + modifications {
                    if let start = LatencyStamp.read(results[i].blob), start > since, start <= now { samples.add(now - start) }
                }
            }
            received.signal()
        }
        defer { token.invalidate() }
        received.wait()  // the initial results
        let count = latencySamples
        var missed = 0
        try sink.measure(workload, ops: count, commits: count) {
            for k in 0..<count {
                let id = data.id((k * 7919) % n)
                let score = Double(k) / Double(count) + (writer == nil ? 0 : 0.5 / Double(count))
                if let writer {
                    writer.update(id, score: score)
                } else {
                    let start = LatencyStamp.now()
                    try db.write { tx in
                        _ = try tx.update(Item.self, key: id) { item in
                            item.score = score
                            LatencyStamp.stamp(&item.blob, start)
                        }
                    }
                }
                if received.wait(timeout: .now() + .seconds(10)) == .timedOut {
                    missed = count - k  // nothing arrives: stop rather than wait for each of the rest
                    break
                }
            }
            return (nil, nil)
        }
        if missed > 0 { sink.problem("\(workload.id): an update was not delivered within 10 s; \(missed) of \(count) not measured") }
        let sorted = samples.sorted
        if sorted.count < count { sink.problem("\(workload.id): \(sorted.count) latencies measured for \(count) updates") }
        guard !sorted.isEmpty else { return }
        func percentile(_ p: Double) -> UInt64 { sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)] }
        sink.stat(workload.id, "latency_p50_ns", percentile(0.50))
        sink.stat(workload.id, "latency_p99_ns", percentile(0.99))
        sink.stat(workload.id, "latency_max_ns", sorted[sorted.count - 1])
        sink.stat(workload.id, "latency_samples", UInt64(sorted.count))
        note(
            "[strata] \(pad(workload.id, 22)) p50 \(formatFixed(Double(percentile(0.5)) / 1e6, 2)) ms, p99 \(formatFixed(Double(percentile(0.99)) / 1e6, 2)) ms, max \(formatFixed(Double(sorted[sorted.count - 1]) / 1e6, 2)) ms over \(sorted.count) deliveries"
        )
    }
}

/// Latencies gathered on the observer's queue. `@unchecked Sendable`: every access holds `lock`.
final class LatencySamples: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [UInt64] = []
    func add(_ value: UInt64) { lock.lock(); values.append(value); lock.unlock() }
    var sorted: [UInt64] { lock.lock(); defer { lock.unlock() }; return values.sorted() }
}
