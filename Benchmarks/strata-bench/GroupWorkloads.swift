import Foundation
import Dispatch
import Strata
import Synchronization

/// Group commit (issue 5): many small durable writers at once. Strata only: the comparison is the
/// same writes with and without sharing commits.
///
/// Each workload runs `rounds` rounds of 100 single-object inserts with `.full` durability into a
/// database of N objects (at most 100,000):
/// - `one_by_one`: one `db.write` after another on one thread: one commit and one sync each.
/// - `threads_no_group`: 100 threads call the blocking `db.write` at once; they take the writer in
///   turn, still one commit each (the baseline a server with a thread per request gets).
/// - `group_commit`: 100 tasks call `try await db.write` at once; writes that queue while a commit
///   syncs share the next one.
/// Each workload prints the number of commits it made (fewer is better; 100 × rounds without
/// grouping).
enum GroupSuite: StrataItemSuite {
    static let name = "group"
    static let writers = 100

    static let oneByOne = WorkloadInfo(
        id: "one_by_one", unit: "write",
        summary: "100 durable one-object writes, one transaction each, one after another")
    static let threads = WorkloadInfo(
        id: "threads_no_group", unit: "write",
        summary: "100 threads each make one durable one-object write at once (blocking API)")
    static let grouped = WorkloadInfo(
        id: "group_commit", unit: "write",
        summary: "100 tasks each make one durable one-object write at once (async API, group commit)")
    static let workloads = [oneByOne, threads, grouped]

    static func rounds(_ options: BenchOptions) -> Int { max(1, min(options.n / 10_000, 10)) }

    static func describe(_ options: BenchOptions) -> String {
        "n = \(formatInt(itemCount(options))) Items, \(rounds(options)) rounds of \(writers) writers, .full durability, seed \(options.seed)"
    }

    static func run(engine: String, options: BenchOptions, sink: ResultSink) throws {
        let (db, data) = try loadItems(engine: engine, options: options)
        sink.dataFiles = strataDataFiles(files(of: engine, in: options.directory)[0])
        let n = itemCount(options)
        let rounds = rounds(options)
        var next = n
        let selected = { (w: WorkloadInfo) in options.workloads?.contains(w.id) ?? true }
        /// The items of one round: fresh keys above everything stored.
        func batch() -> [Item] {
            defer { next += writers }
            return (next..<(next + writers)).map { data.item($0) }
        }
        func measure(_ workload: WorkloadInfo, _ round: ([Item]) throws -> Void) throws {
            guard selected(workload) else { return }
            let batches = (0..<rounds).map { _ in batch() }
            let before = db.store.latestVersion
            // The count is the writes stored, which every round must agree on; the commits they
            // took depend on timing (a group commit's batches), and are a stat (as a count, two
            // rounds of `--repeat` always disagreed and failed the run).
            var stored = 0
            let countStored = {
                stored = try db.read { snapshot in try batches.joined().filter { try snapshot.object(Item.self, key: $0.id) != nil }.count }
                return stored
            }
            try sink.measure(workload, ops: rounds * writers, countAfter: countStored) {
                for items in batches { try round(items) }
                return (nil, nil)
            }
            sink.stat(workload.id, "commits", db.store.latestVersion - before)
            note("[strata] \(workload.id): \(db.store.latestVersion - before) commits for \(rounds * writers) writes")
            if stored != rounds * writers { sink.problem("\(workload.id): \(stored) of \(rounds * writers) writes stored") }
        }

        try measure(oneByOne) { items in
            for item in items { try db.write(durability: .full) { tx in try tx.insert(item) } }
        }
        try measure(threads) { items in
            let failures = FailureCount()
            DispatchQueue.concurrentPerform(iterations: items.count) { i in
                do { try db.write(durability: .full) { tx in try tx.insert(items[i]) } } catch { failures.add(1) }
            }
            if failures.value > 0 { throw BenchError("\(failures.value) blocking writes failed") }
        }
        try measure(grouped) { items in
            let done = DispatchSemaphore(value: 0)
            let failures = FailureCount()
            Task {
                await withTaskGroup(of: Void.self) { group in
                    for item in items {
                        group.addTask {
                            do { try await db.write(durability: .full) { tx in try tx.insert(item) } } catch { failures.add(1) }
                        }
                    }
                }
                done.signal()
            }
            done.wait()  // the bench's main thread, not a cooperative one
            if failures.value > 0 { throw BenchError("\(failures.value) async writes failed") }
        }
    }
}

/// Writers that failed, counted from any thread.
final class FailureCount: Sendable {
    private let count = Atomic<Int>(0)
    func add(_ n: Int) { count.add(n, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
