import Testing
import Foundation
import Dispatch
import Synchronization
@testable import Strata

// A differential test of live results: an observed query must behave exactly as the query re-run
// after each commit. For every observer shape (filters, sorts, windows, distinct, key paths), every
// delivered change set is checked against the previously delivered array and against the query
// re-run on the very snapshot the delivery came from; at quiescence the observer's latest results
// must equal a fresh `db.objects(...)` query, and that query must equal a plain-array oracle
// (`Predicate.evaluate` + `SortDescriptor.compare`, ties by id, NaN above every number) over a
// dictionary model maintained alongside the writes. Three more observers start while two
// threads write, and a dozen objects are watched one by one (`db.observe(_:key:)`: the changed
// fields named exactly, deletion delivered, the latest value equal to the stored one).
//
// Writes: random transactions (inserts, updates of one or several fields, partial updates from
// dictionaries, updates of fields some observers ignore, identical writes, moves across sort
// positions and filters, deletes, upserts, delete(where:), refused duplicate inserts, rolled-back
// transactions), 40 % in bursts from one
// thread, 5 % one single-write transaction at a time with a checkpoint after each, 25 % from two
// threads at once (through two handles of the file), 30 % as async writes from many tasks at once
// (group commit merges them; some throw and are rolled back alone). Checkpoints follow every burst.
// The writes are seeded; with several writers, their interleaving is not.
//
// Knobs (environment):
//   STRATA_LIVE_DIFF_SEED          the seed (default 20260501); printed in every failure
//   STRATA_LIVE_DIFF_TXNS          write transactions in all (default 450)
//   STRATA_LIVE_DIFF_OBJECTS       objects written first (default 200)
//   STRATA_LIVE_DIFF_TIMEOUT       seconds a checkpoint waits at most (default 10)
//   STRATA_LIVE_DIFF_CAP           failures reported per observer (default 6; every kind is counted)
//   STRATA_LIVE_DIFF_ORACLE_EVERY  compare every n-th delivery with the query re-run on its own
//                                  snapshot (default 1: every delivery)
//   STRATA_LIVE_DIFF_SHAPES        only these observers, e.g. "12,25" (indices in LDShape.all())

// MARK: The test

/// Checks one `db.observe(LDThing.self, key:)`: every `.changed` names exactly the fields whose
/// stored value differs from the previous delivery (or from the object when observation began),
/// nothing follows `.deleted`, and at checkpoints the latest value is the stored one (or
/// `.deleted` was delivered if the object is gone). `Sendable`: all mutable state is in a Mutex.
final class LDObjectChecker: Sendable {
    struct State {
        var latest: LDThing
        var deleted = false
        var deliveries = 0
        var failures: [String] = []
        var counts: [String: Int] = [:]
    }

    let key: Int
    let seed: UInt64
    private let cap: Int
    private let state: Mutex<State>

    init(key: Int, baseline: LDThing, seed: UInt64, cap: Int) {
        self.key = key
        self.seed = seed
        self.cap = cap
        state = Mutex(State(latest: baseline))
    }

    var deliveries: Int { state.withLock { $0.deliveries } }
    var failures: [String] { state.withLock { $0.failures } }
    var counts: [String: Int] { state.withLock { $0.counts } }
    var label: String { "object observer of #\(key)" }
    var deleted: Bool { state.withLock { $0.deleted } }

    func record(_ kind: String, _ message: String, delivery: Int?) {
        let text = "seed \(seed), \(label)\(delivery.map { ", delivery #\($0)" } ?? ""): \(kind): \(message)"
        state.withLock { s in
            s.counts[kind, default: 0] += 1
            if s.failures.count < cap || s.counts[kind] == 1 { s.failures.append(text) }
        }
    }

    func receive(_ change: ObjectChange<LDThing>) {
        let (n, previous, deleted) = state.withLock { s -> (Int, LDThing, Bool) in
            s.deliveries += 1
            return (s.deliveries, s.latest, s.deleted)
        }
        if deleted { record("delivery after .deleted", "\(change)", delivery: n) }
        switch change {
        case .changed(let object, let fields):
            let expected = previous.changedFields(to: object)
            if object.id != key { record("wrong object", object.short, delivery: n) }
            if fields.isEmpty || Set(fields) != expected || Set(fields).count != fields.count {
                record(
                    ".changed does not name exactly the changed fields",
                    "fields \(fields), expected \(expected.sorted()): \(previous.short) → \(object.short)", delivery: n)
            }
            state.withLock { $0.latest = object }
        case .deleted:
            state.withLock { $0.deleted = true }
        case .error(let error):
            record("error delivered", "\(error)", delivery: n)
        }
    }

    /// At a checkpoint: the stored object (nil if there is none).
    func check(stored: LDThing?, label: String) {
        let (latest, deleted) = state.withLock { ($0.latest, $0.deleted) }
        if deleted { return }  // observation ended; the key may have been used again since
        guard let stored else {
            record("deletion not delivered", "\(label): #\(key) is gone, last delivered \(latest.short)", delivery: nil)
            return
        }
        if !latest.same(stored) {
            record("object observer does not converge to the stored object", "\(label): delivered \(latest.short), stored \(stored.short)", delivery: nil)
        }
    }
}

/// The database, its observers and the checkpoints where they must agree with fresh queries.
/// Used only by the test's task.
final class LDRun {
    let db: Database
    let model: LDModel
    private(set) var checkers: [LDChecker]
    private(set) var queues: [DispatchQueue]
    let config: LDConfig
    let snapshots = LDSnapshotObjects()
    var tokens: [NotificationToken] = []
    /// Tokens of observers started on a writer's thread.
    let lateTokens = LDTokens()
    private(set) var objectCheckers: [LDObjectChecker] = []
    /// How many objects are watched one by one at any time.
    let objectsObserved = 12
    private let objectQueue = DispatchQueue(label: "live-diff-object-observers")
    /// Observers that did not converge at some checkpoint: not waited for again (a broken one
    /// would cost a timeout at every checkpoint), only checked once the others have converged.
    var diverged = Set<Int>()
    var checkpoints = 0
    var checkpointTime: Duration = .zero

    init(db: Database, model: LDModel, shapes: [(index: Int, shape: LDShape)], config: LDConfig) {
        self.db = db
        self.model = model
        self.config = config
        let snapshots = self.snapshots
        checkers = shapes.map {
            LDChecker(index: $0.index, shape: $0.shape, seed: config.seed, cap: config.cap, oracleEvery: config.oracleEvery, snapshots: snapshots)
        }
        queues = checkers.map { DispatchQueue(label: "live-diff-observer-\($0.index)") }
    }

    func observe() {
        for (checker, queue) in zip(checkers, queues) { tokens.append(LDRun.start(checker, on: queue, db: db)) }
    }

    /// Observes objects one by one (`db.observe(_:key:)`) from their current value.
    func observeObjects(_ keys: [Int]) throws {
        for key in keys {
            guard let baseline = try db.object(LDThing.self, key: key), !objectCheckers.contains(where: { $0.key == key && !$0.deleted }) else { continue }
            let checker = LDObjectChecker(key: key, baseline: baseline, seed: config.seed, cap: config.cap)
            objectCheckers.append(checker)
            tokens.append(db.observe(LDThing.self, key: key, on: objectQueue) { checker.receive($0) })
        }
        db.observerQueue.sync {}  // each observer has read its object: writes from now on are changes
    }

    static func start(_ checker: LDChecker, on queue: DispatchQueue, db: Database) -> NotificationToken {
        checker.shape.build(db.objects(LDThing.self)).observe(on: queue, keyPaths: checker.shape.keyPaths) { change in checker.receive(change) }
    }

    /// Checkers (and their queues) for observers the caller starts later, with `start`; they are
    /// part of every checkpoint from now on.
    func addLate(_ shapes: [(index: Int, shape: LDShape)]) -> [(LDChecker, DispatchQueue)] {
        let late = shapes.map {
            (
                LDChecker(
                    index: $0.index, shape: $0.shape, seed: config.seed, cap: config.cap, oracleEvery: config.oracleEvery,
                    snapshots: snapshots), DispatchQueue(label: "live-diff-observer-\($0.index)")
            )
        }
        checkers += late.map(\.0)
        queues += late.map(\.1)
        return late
    }

    var deliveries: Int { checkers.map(\.deliveries).reduce(0, +) + objectCheckers.map(\.deliveries).reduce(0, +) }

    /// Lets the observer machinery go idle: the hub's pass (after its gather delay), then every
    /// observer's queue, again until a round delivers nothing. A gather thread descheduled longer
    /// than the sleep can make this return early; `checkpoint` then polls.
    func drain() async throws {
        var rounds = 0
        while true {
            let before = deliveries
            try await Task.sleep(for: .milliseconds(3))
            db.observerQueue.sync {}
            for queue in queues { queue.sync {} }
            objectQueue.sync {}
            rounds += 1
            if deliveries == before || rounds >= 100 { return }
        }
    }

    /// Waits until every observer's latest delivery equals a fresh query of its shape.
    ///
    /// With `oracle`, the fresh queries (`db.objects` with the observer's shape) are also checked
    /// against the plain oracle over the dictionary model, and the model against the database.
    /// Without it (after single transactions, where checkpoints are many), an observer that
    /// equals the plain oracle over the model is taken as converged, and `db.objects` only runs
    /// for the others (decoding is what a checkpoint costs in a debug build).
    func checkpoint(_ label: String, oracle: Bool) async throws {
        let began = ContinuousClock.now
        defer {
            checkpoints += 1
            checkpointTime += ContinuousClock.now - began
        }
        try await drain()
        let snapshot = try db.snapshot()
        let models = model.objects.withLock { $0 }.values.sorted { $0.id < $1.id }
        var plain: [[LDThing]?] = []
        for checker in checkers {
            do {
                plain.append(try checker.shape.plain(models))
            } catch {
                checker.record("oracle error", "\(error)", delivery: nil)
                plain.append(nil)
            }
        }
        var freshQueries: [Int: [LDThing]] = [:]
        func fresh(_ i: Int) -> [LDThing] {
            if let done = freshQueries[i] { return done }
            let results = Array(checkers[i].shape.build(snapshot.objects(LDThing.self)))
            freshQueries[i] = results
            return results
        }
        if oracle {
            let stored = Array(snapshot.objects(LDThing.self))
            if !LDThing.same(stored, models) {
                model.problem(
                    "seed \(config.seed), \(label): the dictionary model is out of step with the database: "
                        + LDDiff.describe(expected: models, delivered: stored, expectedName: "model", deliveredName: "database"))
            }
            for (i, checker) in checkers.enumerated() {
                if let expected = plain[i], !LDThing.same(expected, fresh(i)) {
                    checker.record(
                        "db.objects query differs from the plain-array oracle over the dictionary model",
                        "\(label), version \(snapshot.version): "
                            + LDDiff.describe(expected: expected, delivered: fresh(i), expectedName: "plain oracle", deliveredName: "db.objects"),
                        delivery: nil)
                }
            }
        }
        func converged(_ i: Int) -> Bool {
            let latest = checkers[i].latest
            if !oracle, let expected = plain[i], checkers[i].shape.same(latest, expected) { return true }
            return checkers[i].shape.same(latest, fresh(i))
        }
        var pending = Set(checkers.indices).filter { !converged($0) }
        let start = ContinuousClock.now
        let deadline = start + .seconds(config.timeout)
        while !pending.subtracting(diverged).isEmpty && ContinuousClock.now < deadline {
            // Deliveries stopped a while ago and some observers still differ: they will not
            // converge (nothing is being written). A while is long: the queues deliver on the
            // shared pool, which long synchronous tests on both cores can keep busy for seconds.
            let waitingFor = pending.subtracting(diverged)
            if ContinuousClock.now - start > .seconds(15)
                && waitingFor.allSatisfy({ ContinuousClock.now - checkers[$0].lastDelivery > .seconds(15) })
            {
                break
            }
            try await Task.sleep(for: .milliseconds(10))
            try await drain()
            pending = pending.filter { !converged($0) }
        }
        for i in pending {
            let checker = checkers[i]
            checker.record(
                "observer does not converge to a fresh query at quiescence",
                "\(label), version \(snapshot.version), latest delivery #\(checker.deliveries): "
                    + LDDiff.describe(
                        expected: fresh(i), delivered: checker.latest, expectedName: "fresh db.objects", deliveredName: "observer",
                        same: checker.shape.same),
                delivery: nil)
        }
        diverged.formUnion(pending)
        for checker in objectCheckers { checker.check(stored: try snapshot.object(LDThing.self, key: checker.key), label: label) }
        // Deleted objects end their observers: observe others, so that `objectsObserved` stay watched.
        let watched = objectCheckers.filter { !$0.deleted }.count
        if watched < objectsObserved {
            let free = models.map(\.id).filter { id in !objectCheckers.contains { $0.key == id && !$0.deleted } }
            try observeObjects(Array(free.prefix(objectsObserved - watched)))
        }
    }
}

@Suite struct LiveDifferentialTests {
    @Test func liveResultsAreTheQueryRerunAfterEachCommit() async throws {
        let config = LDConfig.fromEnvironment()
        let seed = config.seed
        let started = ContinuousClock.now
        let path = databasePath()
        let db = try Database(path: path, models: [LDThing.self], options: StoreOptions(durability: .noSync))
        let model = LDModel()
        var rng = SeededRandom(seed: seed)
        let initial = (0..<config.objects).map { LDThing.random(id: $0, &rng) }
        try await db.write { tx in try tx.insert(contentsOf: initial) }
        model.objects.withLock { m in for thing in initial { m[thing.id] = thing } }

        let shapes = LDShape.all().enumerated().map { (index: $0.offset, shape: $0.element) }.filter { config.shapes?.contains($0.index) ?? true }
        let run = LDRun(db: db, model: model, shapes: shapes, config: config)
        run.observe()
        try run.observeObjects(Array(stride(from: 0, to: config.objects, by: max(1, config.objects / run.objectsObserved))))
        final class Counter: Sendable { let commits = Atomic<Int>(0) }
        let counter = Counter()
        let commitToken = db.observeCommits(on: DispatchQueue(label: "live-diff-commits")) { _ in counter.commits.add(1, ordering: .relaxed) }
        let deadline = ContinuousClock.now + .seconds(config.timeout)
        while run.checkers.contains(where: { $0.deliveries == 0 }) && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        for checker in run.checkers where checker.deliveries == 0 {
            checker.record("no .initial", "nothing delivered within \(config.timeout) s", delivery: nil)
        }

        var txn: UInt64 = 0
        func nextSeeds(_ n: Int) -> [UInt64] {
            defer { txn += UInt64(n) }
            return (0..<UInt64(n)).map { seed &* 1_000_003 &+ txn &+ $0 &+ 1 }
        }
        func split(_ total: Int, _ parts: Int) -> [Int] { (0..<parts).map { total / parts + ($0 < total % parts ? 1 : 0) } }
        var phases: [String] = []
        var phaseStart = ContinuousClock.now
        func phaseDone(_ name: String) {
            phases.append("\(name) \((ContinuousClock.now - phaseStart).formatted(.units(allowed: [.seconds], fractionalPart: .show(length: 1))))")
            phaseStart = ContinuousClock.now
        }

        // 1. One thread, synchronous transactions, in bursts the observers merge.
        let burstSizes = split(config.transactions * 40 / 100, 3)
        for (burst, size) in burstSizes.enumerated() {
            let seeds = nextSeeds(size)
            await ldOnThreads(1) { _ in
                for s in seeds { LDWrites.syncTransaction(db, model: model, seed: s, config: config) }
            }
            try await run.checkpoint("after synchronous burst \(burst + 1)", oracle: true)
        }
        phaseDone("bursts")

        // 1b. One single-write transaction at a time, each followed by a checkpoint: change sets
        // of one commit, and commits an observer may judge irrelevant.
        for s in nextSeeds(config.transactions * 5 / 100) {
            LDWrites.syncTransaction(db, model: model, seed: s, config: config, maxOps: 1)
            try await run.checkpoint("after single transaction \(s)", oracle: false)
        }
        try await run.checkpoint("after single transactions", oracle: true)
        phaseDone("single")

        // 2. Two threads at once, the second through another handle of the same file (whose
        // commits the observers of the first must see too).
        let other = try Database(path: path, models: [LDThing.self], options: StoreOptions(durability: .noSync))
        let handles = [db, other]
        // Three observers also start while the first burst runs, from a third thread.
        let late = run.addLate(LDShape.late().enumerated().map { (index: 100 + $0.offset, shape: $0.element) })
        for (burst, size) in split(config.transactions * 25 / 100, 2).enumerated() {
            let seeds = nextSeeds(size)
            let halves = [seeds.enumerated().filter { $0.offset % 2 == 0 }.map(\.element), seeds.enumerated().filter { $0.offset % 2 == 1 }.map(\.element)]
            let starting = burst == 0 ? late : []
            let lateTokens = run.lateTokens
            await ldOnThreads(3) { t in
                if t == 2 {
                    for (i, (checker, queue)) in starting.enumerated() {
                        usleep(UInt32(2_000 + 3_000 * i))
                        let token = LDRun.start(checker, on: queue, db: db)
                        lateTokens.all.withLock { $0.append(token) }
                    }
                    return
                }
                for s in halves[t] { LDWrites.syncTransaction(handles[t], model: model, seed: s, config: config) }
            }
            try await run.checkpoint("after two-thread burst \(burst + 1)", oracle: true)
        }
        phaseDone("two threads")

        // 3. Grouped async writes: many tasks at once, committed together, some thrown away alone.
        let grouped = config.transactions - Int(txn)
        var groupedWrites = 0
        let commitsBefore = counter.commits.load(ordering: .relaxed)
        for (wave, size) in split(grouped, 3).enumerated() {
            let seeds = nextSeeds(size)
            let outcomes = await withTaskGroup(of: (Bool, String?).self) { group -> [(Bool, String?)] in
                for s in seeds {
                    let objects = config.objects
                    group.addTask {
                        do {
                            try await db.write { tx in
                                let start = model.objects.withLock { $0 }
                                let (end, rollback) = try LDWrites.run(tx, model: start, seed: s, objects: objects, rollbackPercent: 15, note: model.problem)
                                if rollback { throw LDRollback() }
                                model.objects.withLock { $0 = end }
                            }
                            return (true, nil)
                        } catch is LDRollback {
                            return (false, nil)
                        } catch {
                            return (false, "grouped write \(s) failed: \(error)")
                        }
                    }
                }
                var all: [(Bool, String?)] = []
                for await outcome in group { all.append(outcome) }
                return all
            }
            groupedWrites += outcomes.filter(\.0).count
            for case (_, let problem?) in outcomes { model.problem("seed \(seed): \(problem)") }
            try await run.checkpoint("after grouped async wave \(wave + 1)", oracle: true)
        }
        let groupedCommits = counter.commits.load(ordering: .relaxed) - commitsBefore
        phaseDone("grouped")

        // Report.
        for problem in model.problems.withLock({ $0 }) { Issue.record("write harness: \(problem)") }
        var summary: [String] = []
        for checker in run.checkers {
            let counts = checker.counts
            if !counts.isEmpty {
                summary.append(
                    "  observer \(checker.index) [\(checker.shape.label)]: "
                        + counts.sorted { $0.key < $1.key }.map { "\($0.value)× \($0.key)" }.joined(separator: "; "))
            }
            for failure in checker.failures { Issue.record(Comment(rawValue: failure.message)) }
            let more = counts.values.reduce(0, +) - checker.failures.count
            if more > 0 { Issue.record("seed \(seed), observer \(checker.index) [\(checker.shape.label)]: \(more) more failure(s) not shown") }
        }
        for checker in run.objectCheckers {
            let counts = checker.counts
            if !counts.isEmpty {
                summary.append("  \(checker.label): " + counts.sorted { $0.key < $1.key }.map { "\($0.value)× \($0.key)" }.joined(separator: "; "))
            }
            for failure in checker.failures { Issue.record(Comment(rawValue: failure)) }
        }
        let seconds = { (d: Duration) in d.formatted(.units(allowed: [.seconds], fractionalPart: .show(length: 1))) }
        print(
            "LiveDifferential: seed \(seed), \(txn) transactions, \(config.objects) objects, \(run.checkers.count) observers, "
                + "\(run.objectCheckers.count) object observers (\(run.objectCheckers.map(\.deliveries).reduce(0, +)) deliveries, "
                + "\(run.objectCheckers.filter(\.deleted).count) deleted), \(run.deliveries) deliveries in all, \(groupedWrites) kept grouped writes in \(groupedCommits) commits, "
                + "\(run.checkpoints) checkpoints (\(seconds(run.checkpointTime))); \(phases.joined(separator: ", ")); \(seconds(ContinuousClock.now - started))"
        )
        if !summary.isEmpty { print("LiveDifferential failures by observer (seed \(seed)):\n" + summary.joined(separator: "\n")) }
        run.tokens.forEach { $0.invalidate() }
        run.lateTokens.all.withLock { $0.forEach { $0.invalidate() } }
        commitToken.invalidate()
    }
}

// MARK: Minimal reproductions of what the differential test finds

/// Each mismatch class the differential test found, reduced to a few objects and writes. They
/// state the contract (README "Live results", `Results.sorted`: ties keep primary-key order), so
/// they fail until the bug is fixed.
@Suite struct LiveDifferentialReproductions {
    static func thing(_ id: Int, rank: Int = 0, count: Int = 0) -> LDThing {
        LDThing(
            id: id, rank: rank, count: count, weight: 0, ratio: 0, name: "", note: "", when: Date(timeIntervalSinceReferenceDate: 0),
            level: nil, kind: .red, tags: [], inner: LDInner(x: 0, label: ""))
    }

    /// What one observer delivered: ids, and the change set of updates.
    struct Seen: Sendable, Equatable {
        var ids: [Int]
        var deletions: [Int] = []
        var insertions: [Int] = []
        var modifications: [Int] = []
    }

    final class Watch: Sendable {
        let inbox = Inbox<Seen>()
        let queue = DispatchQueue(label: "live-diff-repro")
        let token: NotificationToken
        let db: Database

        init(_ results: Results<LDThing>, db: Database, keyPaths: [PartialKeyPath<LDThing> & Sendable]? = nil) {
            self.db = db
            let inbox = self.inbox
            token = results.observe(on: queue, keyPaths: keyPaths) { change in
                switch change {
                case .initial(let r): inbox.append(Seen(ids: r.map(\.id)))
                case .update(let r, let d, let i, let m): inbox.append(Seen(ids: r.map(\.id), deletions: d, insertions: i, modifications: m))
                case .error(let error): Issue.record("\(error)")
                }
            }
        }

        /// Waits until the observers are idle: the hub's gather delay and pass, then this queue.
        func settle() {
            for _ in 0..<3 {
                usleep(20_000)
                db.observerQueue.sync {}
                queue.sync {}
            }
        }

        var all: [Seen] { inbox.all }
    }

    /// Reverse sort by an indexed field with equal values. The query walks the index backwards,
    /// so ties come out in descending key order ([3, 2, 1]) — unlike the same sort with a filter
    /// on an indexed field, sorted in memory ([1, 2, 3]); the observer maintains the results
    /// incrementally assuming ascending ties, misplaces the updated object and keeps its old row:
    /// [3, 2, 1] → [2, 3, 2, 1] → [1, 2, 3, 2, 1].
    @Test func reverseSortOnAnIndexedFieldWithTies() throws {
        let db = try Database.inMemory(models: [LDThing.self])
        try db.write { tx in for id in 1...3 { try tx.insert(Self.thing(id)) } }
        let byRankReverse = db.objects(LDThing.self).sorted(by: SortDescriptor(\.rank, order: .reverse))
        #expect(byRankReverse.map(\.id) == [1, 2, 3], "ties keep primary-key order")
        #expect(
            byRankReverse.map(\.id)
                == db.objects(LDThing.self).filter(#Predicate { $0.rank <= 2 })
                .sorted(by: SortDescriptor(\.rank, order: .reverse)).map(\.id), "an indexed filter does not change the order of ties")

        let watch = Watch(byRankReverse, db: db)
        watch.settle()
        try db.write { tx in try tx.update(LDThing.self, key: 2) { $0.count = 1 } }
        watch.settle()
        try db.write { tx in try tx.update(LDThing.self, key: 1) { $0.count = 1 } }
        watch.settle()
        let fresh = db.objects(LDThing.self).sorted(by: SortDescriptor(\.rank, order: .reverse)).map(\.id)
        let seen = watch.all
        #expect(seen.count == 3)
        for delivery in seen { #expect(Set(delivery.ids).count == delivery.ids.count, "no object twice: \(delivery.ids)") }
        #expect(seen.last?.ids == fresh, "the observer ends on the query's results: \(seen.map(\.ids))")
        #expect(
            seen.dropFirst().allSatisfy { $0.deletions.isEmpty && $0.insertions.isEmpty && $0.modifications.count == 1 },
            "updates that move nothing are one modification each: \(seen)")
        watch.token.invalidate()
    }

    /// A filtered window with an offset. Deleting an object before the window, or updating it out
    /// of the filter, shifts the window, but the observer judges the commit irrelevant (the object
    /// was not in the window and does not match now) and delivers nothing.
    @Test func filteredWindowWithAnOffset() throws {
        let db = try Database.inMemory(models: [LDThing.self])
        try db.write { tx in for id in 0..<10 { try tx.insert(Self.thing(id, rank: 1, count: id)) } }
        let window = db.objects(LDThing.self).filter(#Predicate { $0.rank != 0 }).sorted(by: SortDescriptor(\.count)).offset(2).prefix(3)
        let watch = Watch(window, db: db)
        watch.settle()
        try db.write { tx in try tx.delete(LDThing.self, key: 0) }
        watch.settle()
        #expect(watch.all.last?.ids == [3, 4, 5], "after deleting #0: \(watch.all)")
        try db.write { tx in try tx.update(LDThing.self, key: 1) { $0.rank = 0 } }
        watch.settle()
        #expect(watch.all.last?.ids == [4, 5, 6], "after filtering out #1: \(watch.all)")
        watch.token.invalidate()
    }

    /// `observe(keyPaths: [\.inner.x])`: a commit that changes only `inner.label` is delivered as
    /// a modification (the observer watches the whole top-level field `inner`, by design of
    /// ResultsObserver, but the README promises that changes to other fields deliver nothing).
    @Test func keyPathIntoANestedStruct() throws {
        let db = try Database.inMemory(models: [LDThing.self])
        try db.write { tx in for id in 0..<3 { try tx.insert(Self.thing(id)) } }
        let watch = Watch(db.objects(LDThing.self), db: db, keyPaths: [\.inner.x])
        watch.settle()
        try db.write { tx in try tx.update(LDThing.self, key: 1) { $0.inner.label = "only the label" } }
        watch.settle()
        #expect(watch.all.count == 1, "a change outside inner.x delivers nothing: \(watch.all)")
        try db.write { tx in try tx.update(LDThing.self, key: 1) { $0.inner.x = 5 } }
        watch.settle()
        #expect(watch.all.last == Seen(ids: [0, 1, 2], modifications: [1]))
        watch.token.invalidate()
    }
}
