import Foundation
import StrataStorage
import Synchronization
import Testing

@testable import Strata

// Concurrency and lifecycle mends found by a review (2026-12-07): a listener released inside the
// listeners' lock, a second loop over one `changes` stream, a progress handler reading the results
// it reports on. The first and the last stopped the process ("Recursive call to lock Mutex").

struct CRItem: Model, Equatable {
    var id: Int
    var name: String
}

struct ConcurrencyReviewTests {
    /// A commit block that holds another observation's token: removing the block releases that
    /// token, whose deinit removes its own listener, which must not happen inside the lock.
    @Test func aListenerHoldingAnotherTokenIsRemoved() throws {
        let db = try Database.inMemory(models: [CRItem.self])
        var inner: NotificationToken? = db.observe(CRItem.self, key: 1) { _ in }
        let commits: NotificationToken? = db.observeCommits { [inner] _ in _ = inner }
        inner = nil
        commits?.invalidate()
        #expect(db.store.commitListenerCount == 0)

        let store = try Store.inMemory()
        var first: CommitListenerToken? = store.addCommitListener { _ in }
        let second = store.addCommitListener { [first] _ in _ = first }
        first = nil
        second.invalidate()
        #expect(store.commitListenerCount == 0)
    }

    /// Two loops over one stream (it is Sendable): both end when the database closes, and a
    /// change goes to one of them.
    @Test func twoLoopsOverOneChangesStreamBothEnd() async throws {
        let db = try Database.inMemory(models: [CRItem.self])
        let stream = db.objects(CRItem.self).changes
        let ended = HDBox()
        let heard = HDBox()
        let loops = (0..<2).map { _ in
            Task {
                for await _ in stream { heard.add() }
                ended.add()
            }
        }
        #expect(await hdPatiently(seconds: 60) { heard.value >= 1 })  // the initial result
        try await db.write { tx in try tx.insert(CRItem(id: 1, name: "a")) }
        #expect(await hdPatiently(seconds: 60) { heard.value >= 2 })
        db.close()
        #expect(await hdPatiently(seconds: 60) { ended.value == 2 }, "ended: \(ended.value)")
        for loop in loops { loop.cancel() }
    }

    /// A progress handler that reads the results being evaluated gets no answer from them (an
    /// error, the results not evaluated again inside themselves); read after, they are whole.
    @Test func aProgressHandlerReadingItsOwnResults() throws {
        let db = try Database.inMemory(models: [CRItem.self])
        let items = (0..<60).map { CRItem(id: $0, name: "n\(59 - $0)") }
        try db.write { tx in try tx.insert(contentsOf: items) }
        let results = db.objects(CRItem.self).filter(#Predicate { $0.name.contains("n") }).sorted(by: SortDescriptor(\.name))
        var inside: [String?] = []
        let names = try withProgress(
            every: 10,
            { _ in
                inside.append(results.first?.name)
                return true
            }
        ) { results.map(\.name) }
        let expected = items.map(\.name).sorted()
        #expect(names == expected)
        #expect(!inside.isEmpty && inside.allSatisfy { $0 == nil })
        #expect(results.first?.name == expected.first)
        #expect(results.count == 60)
    }

    /// The same for results the trees can count (no filter to evaluate, or one an index answers):
    /// their count was handed out as the length, and the position it allowed read an empty list
    /// ("Index out of range"). Counted before the evaluation, a position below that count reads a
    /// placeholder inside, and the object after.
    @Test func aProgressHandlerReadingCountableResults() throws {
        let db = try Database.inMemory(models: [CRItem.self])
        let items = (0..<60).map { CRItem(id: $0, name: "n\(59 - $0)") }
        try db.write { tx in try tx.insert(contentsOf: items) }
        let sorted = db.objects(CRItem.self).sorted(by: SortDescriptor(\.name))
        var inside: [String?] = []
        let names = try withProgress(
            every: 10,
            { _ in
                inside.append(sorted.first?.name)
                return true
            }
        ) { try sorted.fetch().map(\.name) }
        #expect(names == items.map(\.name).sorted())
        #expect(!inside.isEmpty && inside.allSatisfy { $0 == nil })

        let counted = db.objects(CRItem.self).sorted(by: SortDescriptor(\.name, order: .reverse))
        #expect(counted.count == 60)
        var read = 0
        _ = try withProgress(
            every: 10,
            { _ in
                _ = counted[5]
                read += 1
                return true
            }
        ) { try counted.fetch() }
        #expect(read > 0)
        #expect(counted[5].name == items.map(\.name).sorted().reversed()[5])
    }

    /// One thread counts results from the trees while another's evaluation of them fails (a
    /// record that does not decode): the count handed out is kept by the failed outcome (its
    /// positions read placeholders), or not handed out. Noted after the failure was stored, it
    /// let positions below it read an empty list ("Index out of range"; found by reading: the
    /// window is narrow, and 20,000 rounds did not hit it before the fix). Kept as a stress check
    /// of counting beside a failing evaluation (STRATA_RESULTS_RACE_ROUNDS rounds, 300 by default).
    @Test func aCountBesideAFailingEvaluation() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [Counted.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in for i in 0..<10 { try tx.insert(Counted(id: i, group: 0, label: "x", score: Double(i))) } }
            db.close()
        }
        _ = try Store(path: path).write { txn in try txn.tree("m:Counted")?.put(try #require(KeyEncoding.encode(4)), [1, 2, 3]) }
        let db = try Database(path: path, models: [Counted.self])
        let rounds = Int(ProcessInfo.processInfo.environment["STRATA_RESULTS_RACE_ROUNDS"] ?? "") ?? 300
        for _ in 0..<rounds {
            let results = db.objects(Counted.self).sorted(by: SortDescriptor(\.score))
            DispatchQueue.concurrentPerform(iterations: 2) { thread in
                if thread == 0 {
                    _ = results.first
                } else {
                    let n = results.count
                    for i in 0..<n { _ = results[i] }
                }
            }
            #expect(results.error != nil)
        }
    }

    /// A handler that runs a query of its own is not called again from inside itself.
    @Test func aProgressHandlerRunningAQueryIsNotReentered() throws {
        let db = try Database.inMemory(models: [CRItem.self])
        try db.write { tx in try tx.insert(contentsOf: (0..<60).map { CRItem(id: $0, name: "n\($0)") }) }
        var depth = 0
        var deepest = 0
        var calls = 0
        var reports: [OperationProgress] = []
        let count = try withProgress(
            every: 5,
            { progress in
                depth += 1
                defer { depth -= 1 }
                deepest = max(deepest, depth)
                calls += 1
                reports.append(progress)
                _ = db.objects(CRItem.self).filter(#Predicate { $0.name.contains("1") }).map(\.id)
                return true
            }
        ) { db.objects(CRItem.self).filter(#Predicate { $0.name.contains("n") }).map(\.id).count }
        #expect(count == 60)
        #expect(calls > 0)
        #expect(deepest == 1)
        // The outer operation's reports are its own (a scan, then the decoding): each phase in
        // one run, counting up, never past its total. (The handler's query reset them: the
        // scan went past its total, and went on as "decode".)
        var runs: [[OperationProgress]] = []
        for report in reports {
            if runs.last?.last?.phase == report.phase { runs[runs.count - 1].append(report) } else { runs.append([report]) }
        }
        #expect(runs.map { $0[0].phase } == ["scan", "decode"], "\(reports)")
        for run in runs {
            #expect(run.map(\.completed) == Array(stride(from: 5, through: 60, by: 5)), "\(reports)")
            #expect(run.allSatisfy { $0.total == run[0].total }, "\(reports)")
        }
    }
}
