import Foundation
import Dispatch
import Strata

/// Live results (issue 4): how long a commit takes to reach an observer, and what observers cost
/// the writer. Strata only: the peers have no change notifications to compare with.
///
/// - `delivery_latency`: an observer of every object sorted by score (N objects, at most 100,000);
///   20 times, one object's score is updated in its own durable commit and the clock runs from
///   the commit's start until the observer's block receives the change. ops/s is deliveries per
///   second, so 1 / ops/s is the mean latency.
/// - `commits_0_observers`, `commits_1_observer`, `commits_10_observers`: 10,000 small transactions
///   (one object's score each, `.noSync` so the disk does not hide the CPU cost) with 0, 1 or 10
///   observers, each watching one category (about 1 % of the objects, through the index).
enum LiveSuite: StrataItemSuite {
    static let name = "live"

    static let latency = WorkloadInfo(id: "delivery_latency", unit: "delivery",
        summary: "one-object update to delivery, observer of all objects sorted by score (N ≤ 100,000)")
    static let commits0 = WorkloadInfo(id: "commits_0_observers", unit: "commit",
        summary: "10,000 one-object noSync commits, no observer")
    static let commits1 = WorkloadInfo(id: "commits_1_observer", unit: "commit",
        summary: "10,000 one-object noSync commits, 1 observer of one category")
    static let commits10 = WorkloadInfo(id: "commits_10_observers", unit: "commit",
        summary: "10,000 one-object noSync commits, 10 observers of one category each")
    static let workloads = [latency, commits0, commits1, commits10]
    /// Commits per throughput workload: enough for a steady rate (a fraction of a second each).
    static let commits = 10_000

    static func describe(_ options: BenchOptions) -> String {
        "n = \(formatInt(itemCount(options))) Items, seed \(options.seed); observers recompute off the writer's path"
    }

    static func run(engine: String, options: BenchOptions, sink: ResultSink) throws {
        let (db, data) = try loadItems(engine: engine, options: options)
        sink.dataFiles = [files(of: engine, in: options.directory)[0]]
        let n = itemCount(options)
        let selected = { (w: WorkloadInfo) in options.workloads?.contains(w.id) ?? true }

        if selected(latency) {
            let received = DispatchSemaphore(value: 0)
            let token = db.objects(Item.self).sorted(by: SortDescriptor(\.score)).observe(on: DispatchQueue(label: "bench.observer")) { _ in
                received.signal()
            }
            received.wait()   // the initial results
            try sink.measure(latency, ops: 20, commits: 20) {
                for k in 0..<20 {
                    let id = data.id((k * 7919) % n)
                    let score = Double(k) / 20
                    try db.write { tx in _ = try tx.update(Item.self, key: id) { $0.score = score } }
                    received.wait()
                }
                return (nil, nil)
            }
            token.invalidate()
        }

        for (workload, observers) in [(commits0, 0), (commits1, 1), (commits10, 10)] where selected(workload) {
            let ready = DispatchSemaphore(value: 0)
            var tokens: [NotificationToken] = []
            for o in 0..<observers {
                let category = Int64(o)
                tokens.append(db.objects(Item.self).filter(#Predicate { $0.category == category }).observe(on: DispatchQueue(label: "bench.o\(o)")) { change in
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
}
