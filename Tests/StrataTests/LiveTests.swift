import Testing
import Foundation
import Dispatch
import Synchronization
@testable import Strata

/// Collects what an observer delivers, for tests. `@unchecked Sendable`: every access takes `lock`.
final class Inbox<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [T] = []

    func append(_ item: T) { lock.lock(); items.append(item); lock.unlock() }
    var all: [T] { lock.lock(); defer { lock.unlock() }; return items }

    /// Waits (polling) until `condition` holds for the items, or `seconds` pass.
    @discardableResult
    func wait(seconds: Double = 120, until condition: ([T]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition(all) { return true }
            usleep(2000)
        }
        return condition(all)
    }
}

/// Applies a change set to the previous array: deletions highest first, then insertions lowest first.
func apply<T>(_ old: [T], deletions: [Int], insertions: [Int], new: [T]) -> [T] {
    var array = old
    for i in deletions.sorted(by: >) { array.remove(at: i) }
    for j in insertions.sorted() { array.insert(new[j], at: j) }
    return array
}

/// One delivery, kept as plain values so the test holds no snapshots.
struct Delivery: Sendable {
    var initial: Bool
    var objects: [Item]
    var version: UInt64
    var deletions: [Int]
    var insertions: [Int]
    var modifications: [Int]
}

extension Inbox where T == Delivery {
    /// Observes `query` on a queue of its own, keeping every delivery as plain values; an error is
    /// recorded as an issue, prefixed with `context`.
    func observe(_ query: Results<Item>, context: String) -> NotificationToken {
        query.observe(on: DispatchQueue(label: "observer")) { change in
            switch change {
            case .initial(let r):
                self.append(Delivery(initial: true, objects: Array(r), version: r.version ?? 0, deletions: [], insertions: [], modifications: []))
            case .update(let r, let d, let i, let m):
                self.append(Delivery(initial: false, objects: Array(r), version: r.version ?? 0, deletions: d, insertions: i, modifications: m))
            case .error(let error): Issue.record("\(context): \(error)")
            }
        }
    }
}

struct ChangeSetTests {
    @Test func randomChangeSetsRebuildTheNewArray() {
        var rng = SeededRandom(seed: 4242)
        for round in 0..<2000 {
            let old = (0..<rng.below(30)).map { _ in rng.below(40) }.reduce(into: [Int]()) { if !$0.contains($1) { $0.append($1) } }
            var new = old.filter { _ in rng.below(4) != 0 }
            for _ in 0..<rng.below(6) { let v = rng.below(60); if !new.contains(v) { new.insert(v, at: rng.below(new.count + 1)) } }
            if new.count > 1 && rng.below(2) == 0 { new.swapAt(rng.below(new.count), rng.below(new.count)) }
            let changed = Set(new.filter { _ in rng.below(5) == 0 })
            let oldRows = old.map { ChangeSet.Row(key: [UInt8($0)], fingerprint: $0) }
            let newRows = new.map { ChangeSet.Row(key: [UInt8($0)], fingerprint: changed.contains($0) ? $0 + 1000 : $0) }
            let change = ChangeSet.between(oldRows, newRows)
            #expect(apply(old, deletions: change.deletions, insertions: change.insertions, new: new) == new, "round \(round)")
            let kept = Set(new.indices).subtracting(change.insertions)
            #expect(Set(change.modifications) == kept.filter { changed.contains(new[$0]) }, "round \(round)")
        }
    }
}

struct LiveResultsTests {
    /// Over 500 random write transactions, observers with random filters, sorts and limits: every
    /// delivered change applied to the previous array gives the new results, and the modified
    /// indices are exactly the kept objects whose value changed.
    @Test func changeSetsAreExactUnderRandomWrites() throws {
        let seed: UInt64 = 777
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [Item.self])
        var model = Dictionary(uniqueKeysWithValues: QueryTests.makeItems(200, seed: seed).map { ($0.id, $0) })
        try db.write { tx in try tx.insert(contentsOf: Array(model.values)) }

        let queries: [Results<Item>] = [
            db.objects(Item.self),
            db.objects(Item.self).sorted(by: SortDescriptor(\.score)),
            db.objects(Item.self).filter(#Predicate { $0.category < 5 }).sorted(by: SortDescriptor(\.name), SortDescriptor(\.id)),
            db.objects(Item.self).filter(#Predicate { $0.score > 0.5 }).prefix(20),
            db.objects(Item.self).sorted(by: SortDescriptor(\.category, order: .reverse), SortDescriptor(\.id)).offset(3).prefix(30),
            // Maintained incrementally (key-ordered, no window): a filter with a two-key sort, and a filter alone.
            db.objects(Item.self).filter(#Predicate { $0.score > 0.3 }).sorted(by: SortDescriptor(\.category, order: .reverse), SortDescriptor(\.score)),
            db.objects(Item.self).filter(#Predicate { $0.category == 3 || $0.name.starts(with: "renamed") }),
        ]
        // Each delivered Results keeps its snapshot (a reader slot) alive: keep arrays, not Results.
        let inboxes = queries.map { _ in Inbox<Delivery>() }
        var tokens: [NotificationToken] = []
        for (query, inbox) in zip(queries, inboxes) { tokens.append(inbox.observe(query, context: "seed \(seed)")) }
        for round in 0..<500 {
            try db.write { tx in
                for _ in 0..<(1 + rng.below(4)) {
                    let keys = model.keys.sorted()  // dictionary order varies between runs
                    switch rng.below(5) {
                    case 0:
                        let id = 10_000 + round * 10 + rng.below(10)
                        let item = Item(
                            id: id, name: "new\(rng.below(100))", category: rng.below(10), score: Double(rng.below(1000)) / 1000,
                            label: nil, status: .online, tags: [], rank: nil)
                        if model[id] == nil { try tx.insert(item); model[id] = item }
                    case 1:
                        if let id = keys.randomElement(using: &rng.generator) { try tx.delete(Item.self, key: id); model[id] = nil }
                    case 2:
                        if let id = keys.randomElement(using: &rng.generator) {
                            let score = Double(rng.below(1000)) / 1000
                            model[id] = try tx.update(Item.self, key: id) { $0.score = score }
                        }
                    case 3:
                        if let id = keys.randomElement(using: &rng.generator), let same = model[id] { try tx.upsert(same) }  // identical value
                    default:
                        if let id = keys.randomElement(using: &rng.generator) {
                            let name = "renamed\(rng.below(100))"
                            let category = rng.below(10)
                            model[id] = try tx.update(Item.self, key: id) {
                                $0.name = name; $0.category = category
                            }
                        }
                    }
                }
            }
        }
        // A last commit that changes every observed query, so each one's final delivery is at the
        // newest version.
        try db.write { tx in
            for (id, category) in [(-1000, 0), (-999, 9)] {
                let sentinel = Item(id: id, name: "renamed-sentinel", category: category, score: 0.99, label: nil, status: .online, tags: [], rank: nil)
                try tx.insert(sentinel)
                model[id] = sentinel
            }
        }
        let latest = try db.snapshot().version
        for (q, inbox) in inboxes.enumerated() {
            let done = inbox.wait { items in items.last.map { !$0.initial && $0.version == latest } ?? false }
            #expect(done, "seed \(seed): observer \(q) never caught up")
            var current: [Item] = []
            for (n, delivery) in inbox.all.enumerated() {
                switch delivery.initial {
                case true:
                    #expect(n == 0)
                    current = delivery.objects
                case false:
                    let (new, deletions, insertions, modifications) = (delivery.objects, delivery.deletions, delivery.insertions, delivery.modifications)
                    #expect(!(deletions.isEmpty && insertions.isEmpty && modifications.isEmpty), "seed \(seed): empty change delivered")
                    #expect(
                        apply(current, deletions: deletions, insertions: insertions, new: new).map(\.id) == new.map(\.id),
                        "seed \(seed) observer \(q) delivery \(n)")
                    let kept = apply(current, deletions: deletions, insertions: [], new: new)
                    let keptIndices = new.indices.filter { !insertions.contains($0) }
                    let changed = Set(zip(keptIndices, kept).filter { new[$0.0] != $0.1 }.map(\.0))
                    #expect(Set(modifications) == changed, "seed \(seed) observer \(q) delivery \(n)")
                    current = new
                }
            }
            let fresh = try db.snapshot()
            let expected = Results<Item>(snapshot: fresh, query: queries[q].query)
            #expect(current == Array(expected), "seed \(seed): observer \(q) ends on the database's state")
        }
        tokens.forEach { $0.invalidate() }
    }

    /// A changed object that keeps its place among the unchanged rows is a modification, also
    /// when another changed object of the same gap moves away (the incremental path compared the
    /// gap's changed rows as a whole, and reported it deleted and inserted where it stood).
    @Test func aChangedObjectThatKeepsItsPlaceIsAModification() throws {
        func item(_ id: Int, _ score: Double) -> Item {
            Item(id: id, name: "n\(id)", category: 0, score: score, label: nil, status: .online, tags: [], rank: nil)
        }
        // X A B C Y by score; each case: one commit, then the change set a list view expects.
        let cases: [(String, (Transaction) throws -> Void, [Int], [Int], [Int])] = [
            (
                "rename A, B to the front",
                { tx in
                    _ = try tx.update(Item.self, key: 2) { $0.name = "A2" }
                    _ = try tx.update(Item.self, key: 3) { $0.score = 0.05 }
                }, [2], [0], [2]
            ),
            (
                "A rewritten as it was, B to the end",
                { tx in
                    try tx.upsert(item(2, 0.2))
                    _ = try tx.update(Item.self, key: 3) { $0.score = 0.9 }
                }, [2], [4], []
            ),
            (
                "rename A and C, B to the front",
                { tx in
                    _ = try tx.update(Item.self, key: 2) { $0.name = "A2" }
                    _ = try tx.update(Item.self, key: 4) { $0.name = "C2" }
                    _ = try tx.update(Item.self, key: 3) { $0.score = 0.05 }
                }, [2], [0], [2, 3]
            ),
        ]
        for (name, write, deletions, insertions, modifications) in cases {
            let db = try Database.inMemory(models: [Item.self])
            try db.write { tx in try tx.insert(contentsOf: [item(1, 0.1), item(2, 0.2), item(3, 0.3), item(4, 0.35), item(5, 0.4)]) }
            let inbox = Inbox<Delivery>()
            let token = inbox.observe(db.objects(Item.self).sorted(by: SortDescriptor(\.score)), context: name)
            #expect(inbox.wait { $0.count == 1 })
            try db.write { tx in try write(tx) }
            #expect(inbox.wait { $0.count == 2 }, "\(name)")
            let update = try #require(inbox.all.last)
            #expect(update.deletions == deletions && update.insertions == insertions && update.modifications == modifications, "\(name): \(update)")
            token.invalidate()
        }
    }

    @Test func keyPathsFilterDeliveries() throws {
        let db = try Database.inMemory(models: [Item.self])
        try db.write { tx in try tx.insert(contentsOf: QueryTests.makeItems(20, seed: 1)) }
        let inbox = Inbox<ResultsChange<Item>>()
        let token = db.objects(Item.self).observe(on: DispatchQueue(label: "o"), keyPaths: [\.score]) { inbox.append($0) }
        #expect(inbox.wait { $0.count == 1 })
        let first = try #require(db.objects(Item.self).first)
        try db.write { tx in try tx.update(Item.self, key: first.id) { $0.name = "only the name" } }
        try db.write { tx in try tx.update(Item.self, key: first.id) { $0.score = 0.123456 } }
        #expect(inbox.wait { $0.count == 2 })
        usleep(100_000)
        #expect(inbox.all.count == 2, "the name-only commit delivered nothing")
        if case .update(_, let d, let i, let m)? = inbox.all.last {
            #expect(d.isEmpty && i.isEmpty && m == [0])
        } else {
            Issue.record("expected an update")
        }
        token.invalidate()
    }

    @Test func commitsDuringADeliveryMergeIntoOneChange() throws {
        let db = try Database.inMemory(models: [Item.self])
        try db.write { tx in try tx.insert(contentsOf: QueryTests.makeItems(10, seed: 2)) }
        let queue = DispatchQueue(label: "slow observer")
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let inbox = Inbox<ResultsChange<Item>>()
        let token = db.objects(Item.self).observe(on: queue) { change in
            if case .initial = change {
                started.signal()
                gate.wait()  // hold the queue while commits land
            }
            inbox.append(change)
        }
        started.wait()  // the initial results are computed: every commit below comes after them
        for i in 0..<8 {
            try db.write { tx in try tx.insert(Item(id: 5000 + i, name: "n", category: 1, score: 0, label: nil, status: .away, tags: [], rank: nil)) }
        }
        gate.signal()
        #expect(
            inbox.wait { items in
                guard case .update(let results, _, _, _)? = items.last else { return false }
                return results.count == 18
            })
        let updates = inbox.all.dropFirst().count
        #expect(updates >= 1 && updates <= 2, "8 commits gave \(updates) updates")
        token.invalidate()
    }

    @Test func invalidationAndCloseStopDelivery() throws {
        let path = databasePath()
        let db = try Database(path: path, models: [Item.self], options: StoreOptions(durability: .noSync))
        let inbox = Inbox<ResultsChange<Item>>()
        let token = db.objects(Item.self).observe(on: DispatchQueue(label: "o")) { inbox.append($0) }
        #expect(inbox.wait { $0.count == 1 })
        token.invalidate()
        try db.write { tx in try tx.insert(QueryTests.makeItems(1, seed: 3)[0]) }
        usleep(100_000)
        #expect(inbox.all.count == 1)

        // A second handle of the same file notifies observers of the first; closing stops them,
        // after one last `.error(.databaseClosed)`.
        let other = try Database(path: path, models: [Item.self], options: StoreOptions(durability: .noSync))
        let seen = Inbox<ResultsChange<Item>>()
        let live = db.objects(Item.self).observe(on: DispatchQueue(label: "o2")) { seen.append($0) }
        #expect(seen.wait { $0.count == 1 })
        try other.write { tx in try tx.insert(QueryTests.makeItems(2, seed: 4)[1]) }
        #expect(seen.wait { $0.count == 2 })
        db.close()
        try other.write { tx in try tx.deleteAll(Item.self) }
        usleep(100_000)
        #expect(seen.wait { $0.count >= 3 })
        #expect(seen.all.count == 3)
        guard case .error(.databaseClosed)? = seen.all.last else {
            Issue.record("the last delivery after close is \(String(describing: seen.all.last))")
            return
        }
        _ = live
    }

    /// An observation that fails at once (a model not passed to `Database(models:)`, a closed
    /// database) delivers its error later on the queue: a token invalidated before then stops it,
    /// as `invalidate()` promises (it ran regardless, found by the review of 2026-12-07).
    @Test func anErrorQueuedBeforeInvalidateIsNotDelivered() throws {
        struct Unlisted: Model { var id: Int }
        let db = try Database.inMemory(models: [Item.self])
        let queue = DispatchQueue(label: "o")
        queue.suspend()
        let unlisted = Inbox<ResultsChange<Unlisted>>()
        db.objects(Unlisted.self).observe(on: queue) { unlisted.append($0) }.invalidate()
        db.close()
        let closed = Inbox<ResultsChange<Item>>()
        db.objects(Item.self).observe(on: queue) { closed.append($0) }.invalidate()
        // Not invalidated: its error arrives (the queue runs the blocks above first).
        let kept = Inbox<ResultsChange<Item>>()
        let token = db.objects(Item.self).observe(on: queue) { kept.append($0) }
        queue.resume()
        #expect(kept.wait { $0.count == 1 })
        #expect(unlisted.all.isEmpty && closed.all.isEmpty, "\(unlisted.all) \(closed.all)")
        withExtendedLifetime(token) {}
    }

    @Test func observersLeaveNothingBehind() throws {
        let db = try Database.inMemory(models: [Item.self])
        #expect(db.store.commitListenerCount == 0)
        var tokens: [NotificationToken] = []
        let inbox = Inbox<Int>()
        for _ in 0..<5 { tokens.append(db.objects(Item.self).observe(on: DispatchQueue(label: "o")) { _ in inbox.append(1) }) }
        tokens.append(db.observe(Item.self, key: 1) { _ in })
        tokens.append(db.observeCommits { _ in })
        // Results observers share one listener (the database's hub); the others have one each.
        #expect(db.store.commitListenerCount == 3)
        #expect(db.observers.count == 5)
        #expect(inbox.wait { $0.count == 5 })
        tokens[0].invalidate()
        #expect(db.observers.count == 4)
        #expect(db.store.commitListenerCount == 3)
        tokens.removeAll()  // releasing a token stops its observer too
        #expect(db.observers.count == 0)
        #expect(db.store.commitListenerCount == 0)
        // The hub's gather thread ends once nobody observes (it checks every second).
        for _ in 0..<300 where db.observers.gatherThreadRunning { usleep(10_000) }
        #expect(!db.observers.gatherThreadRunning)
    }

    /// Observers created while commits run get `.initial` first, always (found in review: a pass
    /// could refresh an observer whose initial evaluation was still queued).
    @Test func initialIsAlwaysTheFirstDelivery() throws {
        let db = try Database.inMemory(models: [Item.self])
        try db.write { tx in try tx.insert(contentsOf: QueryTests.makeItems(50, seed: 1)) }
        let keys = try db.objects(Item.self).fetch().map(\.id)
        let stop = Atomic<Bool>(false)
        let writerDone = DispatchSemaphore(value: 0)
        Thread {
            var n = 0
            while !stop.load(ordering: .relaxed) {
                n += 1
                let key = keys[n % keys.count], score = Double(n % 997) / 997
                _ = try? db.write { tx in _ = try tx.update(Item.self, key: key) { $0.score = score } }
            }
            writerDone.signal()
        }.start()
        let observers = 600
        var wrongFirst = 0
        for _ in 0..<observers {
            let first = Mutex<Bool?>(nil)
            let got = DispatchSemaphore(value: 0)
            let token = db.objects(Item.self).observe(on: DispatchQueue(label: "first")) { change in
                let isFirst = first.withLock { state -> Bool in
                    guard state == nil else { return false }
                    if case .initial = change { state = true } else { state = false }
                    return true
                }
                if isFirst { got.signal() }
            }
            #expect(got.wait(timeout: .now() + 120) == .success)
            if first.withLock({ $0 }) != true { wrongFirst += 1 }
            token.invalidate()
        }
        stop.store(true, ordering: .relaxed)
        writerDone.wait()
        #expect(wrongFirst == 0, "\(wrongFirst) of \(observers) observers got an update before .initial")
    }

    @Test func asyncSequenceEndsWithItsTask() async throws {
        let db = try Database.inMemory(models: [Item.self])
        let results = db.objects(Item.self)
        let received = Inbox<Int>()
        let task = Task {
            for await change in results.changes {
                // The commit below lands either before the initial evaluation or after it.
                switch change {
                case .initial(let r), .update(let r, _, _, _): received.append(r.count)
                case .error: break
                }
            }
        }
        try await Task.sleep(nanoseconds: 50_000_000)
        try await db.write { tx in try tx.insert(QueryTests.makeItems(1, seed: 9)[0]) }
        // Poll without blocking a cooperative thread: the consuming task needs one to run.
        for _ in 0..<1000 where !received.all.contains(1) { try await Task.sleep(nanoseconds: 10_000_000) }
        #expect(received.all.contains(1))
        task.cancel()
        _ = await task.value
        let before = received.all
        try await db.write { tx in try tx.deleteAll(Item.self) }
        try await Task.sleep(nanoseconds: 100_000_000)
        #expect(received.all == before, "nothing after the task was cancelled")
    }

    @Test func objectObservationReportsFieldsAndDeletion() throws {
        let db = try Database.inMemory(models: [Item.self])
        let item = QueryTests.makeItems(1, seed: 11)[0]
        try db.write { tx in try tx.insert(item) }
        let inbox = Inbox<ObjectChange<Item>>()
        let token = db.observe(Item.self, key: item.id, on: DispatchQueue(label: "o")) { inbox.append($0) }
        usleep(50_000)
        try db.write { tx in try tx.upsert(item) }  // identical: nothing
        try db.write { tx in
            try tx.update(Item.self, key: item.id) {
                $0.score = 0.75; $0.rank = 3
            }
        }
        #expect(inbox.wait { $0.count == 1 })
        if case .changed(let changed, let fields)? = inbox.all.first {
            #expect(changed.score == 0.75 && Set(fields) == ["score", "rank"])
        } else {
            Issue.record("expected .changed")
        }
        try db.write { tx in try tx.delete(Item.self, key: item.id) }
        #expect(inbox.wait { $0.count == 2 })
        if case .deleted? = inbox.all.last {} else { Issue.record("expected .deleted") }
        token.invalidate()
        let commits = Inbox<DatabaseChange>()
        let watch = db.observeCommits(on: DispatchQueue(label: "c")) { commits.append($0) }
        try db.write { tx in try tx.insert(item) }
        #expect(commits.wait { $0.first?.models == ["Item"] })
        watch.invalidate()
    }

    /// The chat client: 10,000 single-user status updates written in batches; the user list's
    /// observer gets few change sets, each reporting every changed user once, and ends equal to
    /// the database.
    @Test func burstOfStatusUpdates() throws {
        let db = try Database.inMemory(models: [Author.self])
        try db.write { tx in for i in 0..<1000 { try tx.insert(Author(id: String(format: "u%04d", i), name: "online", mentor: nil)) } }
        let inbox = Inbox<ResultsChange<Author>>()
        let users = db.objects(Author.self)
        let token = users.observe(on: DispatchQueue(label: "users")) { inbox.append($0) }
        #expect(inbox.wait { $0.count == 1 })
        var rng = SeededRandom(seed: 17)
        for _ in 0..<100 {
            try db.write { tx in
                for _ in 0..<100 {
                    let id = String(format: "u%04d", rng.below(1000))
                    let status = ["online", "away", "busy"][rng.below(3)]
                    try tx.update(Author.self, key: id) { $0.name = status }
                }
            }
        }
        let latest = try db.snapshot().version
        #expect(
            inbox.wait { items in
                guard case .update(let r, _, _, _)? = items.last else { return false }
                return r.version == latest
            })
        let updates = inbox.all.dropFirst()
        #expect(updates.count <= 100)
        for case .update(_, let d, let i, let m) in updates {
            #expect(d.isEmpty && i.isEmpty && Set(m).count == m.count)
        }
        if case .update(let last, _, _, _)? = inbox.all.last {
            #expect(Array(last) == Array(db.objects(Author.self)))
        }
        token.invalidate()
    }
}

extension SeededRandom {
    var generator: SeededGenerator {
        get { SeededGenerator(base: self) }
        set { self = newValue.base }
    }
}

struct SeededGenerator: RandomNumberGenerator {
    var base: SeededRandom
    mutating func next() -> UInt64 { base.next() }
}
