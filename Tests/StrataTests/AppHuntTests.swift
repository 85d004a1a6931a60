import Testing
import Foundation
import Dispatch
import Synchronization
@testable import Strata

// Exploratory tests of the app-facing layer: composed operations, background writes, partial
// JSON updates and change messages, live observation. Randomised parts are model-based (a plain
// Swift dictionary is the reference), seeded, and sized by STRATA_APPHUNT_N (and seeded by
// STRATA_APPHUNT_SEED); every failure names its seed.
//
// - AppHuntChangeMessages: `tx.apply` is all or nothing even when its caller catches the error.
// - AppHuntRandomWrites: sync, composed, background and change-message writes against a
//   dictionary; observers apply every change set to a copy.
// - AppHuntComposition: compositions folded from many parts run (and are freed) without deep
//   recursion; one composition runs on many threads; results keep their exact values.
// - AppHuntObserverChurn: observers start and stop (some inside their own block) during writes.
// - AppHuntDeleteAll: `deleteAll` reaches results and object observers.
// - AppHuntSlowStream: a slow `for await` loop holds one change, not one snapshot per commit;
//   stream observations end on cancel, drop and close.

struct AHPerson: Model, Equatable {
    static let indexes: [PartialKeyPath<AHPerson> & Sendable] = [\.name, \.age]
    static let uniqueIndexes: [PartialKeyPath<AHPerson> & Sendable] = [\.email]
    var id: String
    var name: String
    var email: String
    var age: Int
    var nick: String?
}

private func person(_ id: String, _ name: String, age: Int = 30, nick: String? = nil) -> AHPerson {
    AHPerson(id: id, name: name, email: "\(id)@x", age: age, nick: nick)
}

private func appHuntSize(_ fallback: Int) -> Int {
    ProcessInfo.processInfo.environment["STRATA_APPHUNT_N"].flatMap(Int.init) ?? fallback
}

@Suite struct AppHuntChangeMessages {
    func seeded() throws -> Database {
        let db = try Database.inMemory(models: [AHPerson.self])
        try db.write { tx in try tx.insert(contentsOf: [person("a", "Ana"), person("b", "Ben")]) }
        return db
    }

    /// The guide promises `tx.apply` is all-or-nothing like `db.apply` ("all of it, or, if one
    /// message throws, none of it. `tx.apply` does the same inside a transaction of yours"): a
    /// caller that catches its error and goes on must not commit the messages before the bad one.
    @Test func aCaughtBatchErrorLeavesNothingOfTheBatch() throws {
        let db = try seeded()
        let batch = [
            ChangeMessage(.changed, model: "AHPerson", key: .string("a"), fields: ["name": .string("Anabel")]),
            ChangeMessage(.added, model: "AHPerson", key: .string("c"), fields: ["name": .string("Cy"), "email": .string("c@x"), "age": .int(4)]),
            ChangeMessage(.removed, model: "AHPerson", key: .string("b")),
            ChangeMessage(.changed, model: "AHPerson", key: .string("zz"), fields: ["name": .string("nobody")]),  // notFound
        ]
        var caught: (any Error)?
        try db.write { tx in
            do { try tx.apply(batch) } catch { caught = error }
            try tx.insert(person("d", "Dee"))
        }
        #expect(caught != nil)
        #expect(try db.object(AHPerson.self, key: "a")?.name == "Ana")
        #expect(try db.object(AHPerson.self, key: "b") != nil)
        #expect(try db.object(AHPerson.self, key: "c") == nil)
        #expect(try db.object(AHPerson.self, key: "d") != nil)
    }
}

/// An error of the test's own, thrown midway through compositions and background writes.
private struct AHAbort: Error, Equatable {}

/// Deliveries and problems, shared with observer queues. `@unchecked Sendable`: every access holds
/// `lock`.
private final class AHMirror: @unchecked Sendable {
    private let lock = NSLock()
    private var mirror: [AHPerson] = []
    private var delivered: [AHPerson] = []
    private var problems: [String] = []
    private var count = 0

    func receive(_ change: ResultsChange<AHPerson>) {
        lock.withLock {
            count += 1
            switch change {
            case .initial(let results):
                mirror = Array(results)
                delivered = mirror
            case .update(let results, let deletions, let insertions, let modifications):
                let new = Array(results)
                var copy = mirror
                for i in deletions.reversed() {
                    guard copy.indices.contains(i) else { problems.append("deletion \(i) out of range"); return }
                    copy.remove(at: i)
                }
                for i in insertions {
                    guard i <= copy.count, new.indices.contains(i) else { problems.append("insertion \(i) out of range"); return }
                    copy.insert(new[i], at: i)
                }
                for i in modifications {
                    guard copy.indices.contains(i), new.indices.contains(i) else { problems.append("modification \(i) out of range"); return }
                    copy[i] = new[i]
                }
                if copy != new {
                    problems.append("change set d\(deletions) i\(insertions) m\(modifications) gives \(copy.map(\.id)), results are \(new.map(\.id))")
                }
                // The writer skips identical writes: an update that changes nothing is not delivered.
                if deletions.isEmpty && insertions.isEmpty && modifications.isEmpty { problems.append("empty update") }
                mirror = new
                delivered = new
            case .error(let error):
                problems.append("error \(error)")
            }
        }
    }

    var state: (delivered: [AHPerson], problems: [String], count: Int) { lock.withLock { (delivered, problems, count) } }
}

/// Completion calls of background writes, by write number.
private final class AHCompletions: @unchecked Sendable {
    private let lock = NSLock()
    private var calls: [Int: [Result<Int, AHAbort>]] = [:]
    private var wrongQueue = 0
    func record(_ n: Int, _ result: Result<Int, any Error>, onQueue: Bool) {
        lock.withLock {
            if !onQueue { wrongQueue += 1 }
            calls[n, default: []].append(result.mapError { _ in AHAbort() })
        }
    }
    var state: (calls: [Int: [Result<Int, AHAbort>]], wrongQueue: Int) { lock.withLock { (calls, wrongQueue) } }
}

@Suite struct AppHuntRandomWrites {
    static let names = ["Ana", "Ben", "Cy", "Dee", "Eve", "Fay"]

    /// Random sync writes, composed writes that may fail midway, background writes (some
    /// failing) and change-message batches (some bad), against a dictionary; an observer of a
    /// filtered, sorted, limited query applies every change set to its copy and must get the
    /// delivered results, and ends on the query's final answer.
    @Test func writesOfEveryKindMatchAPlainDictionary() async throws {
        let seed: UInt64 = ProcessInfo.processInfo.environment["STRATA_APPHUNT_SEED"].flatMap { UInt64($0) } ?? 0xA11_5EED
        let steps = appHuntSize(300)
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [AHPerson.self])
        var model: [String: AHPerson] = [:]
        let shape: @Sendable (Results<AHPerson>) -> Results<AHPerson> = {
            $0.filter(#Predicate { $0.age >= 20 }).sorted(by: SortDescriptor(\.age, order: .reverse), SortDescriptor(\.name)).prefix(5)
        }
        let query = shape(db.objects(AHPerson.self))
        let whole = db.objects(AHPerson.self).sorted(by: SortDescriptor(\.name))
        let mirror = AHMirror()
        let wholeMirror = AHMirror()
        let token = query.observe(on: DispatchQueue(label: "ah.observer")) { mirror.receive($0) }
        let wholeToken = whole.observe(on: DispatchQueue(label: "ah.observer2")) { wholeMirror.receive($0) }
        let completionQueue = DispatchQueue(label: "ah.completions")
        let queueKey = DispatchSpecificKey<Int>()
        completionQueue.setSpecific(key: queueKey, value: 7)
        let completions = AHCompletions()
        var expectedAsync: [Int: Result<Int, AHAbort>] = [:]
        var asyncIssued = 0

        func randomPerson() -> AHPerson {
            let id = "k\(rng.below(12))"
            let name = Self.names[rng.below(Self.names.count)]
            let nick: String? = rng.below(3) == 0 ? nil : "n\(rng.below(3))"
            return AHPerson(id: id, name: name, email: "\(name)\(rng.below(4))@x", age: rng.below(40), nick: nick)
        }
        /// Applies an upsert to `m` as the database would: nil when it violates the unique email.
        func upserted(_ p: AHPerson, in m: [String: AHPerson]) -> [String: AHPerson]? {
            if m.values.contains(where: { $0.email == p.email && $0.id != p.id }) { return nil }
            var m = m
            m[p.id] = p
            return m
        }
        func waitForBackground() async throws {
            _ = try await poolEventually { completions.state.calls.count >= asyncIssued }
        }

        for step in 0..<steps {
            let kind = rng.below(5)
            switch kind {
            case 0:  // a sync write of one to three upserts and deletes
                await Task.yield()
                try await waitForBackground()
                var next: [String: AHPerson]? = model
                var ops: [(AHPerson?, String)] = []
                for _ in 0..<(1 + rng.below(3)) {
                    if rng.below(25) == 0 {
                        ops.append((nil, ""))  // deleteAll
                        next = next.map { _ in [:] }
                    } else if rng.below(4) == 0 {
                        let id = "k\(rng.below(12))"
                        ops.append((nil, id))
                        next?[id] = nil
                    } else {
                        let p = randomPerson()
                        ops.append((p, p.id))
                        next = next.flatMap { upserted(p, in: $0) }
                    }
                }
                do {
                    let writeSync: () throws -> Void = {
                        try db.write { tx in
                            for (p, id) in ops {
                                if let p {
                                    try tx.upsert(p)
                                } else if id.isEmpty {
                                    try tx.deleteAll(AHPerson.self)
                                } else {
                                    try tx.delete(AHPerson.self, key: id)
                                }
                            }
                        }
                    }
                    try writeSync()
                    #expect(next != nil, "seed \(seed) step \(step): the write should have failed")
                } catch {
                    #expect(next == nil, "seed \(seed) step \(step): \(error)")
                }
                if let next { model = next }
            case 1:  // a composed write, maybe failing midway with an error of its own
                try await waitForBackground()
                let a = randomPerson()
                let b = randomPerson()
                let fail = rng.below(3) == 0
                var next = upserted(a, in: model).flatMap { upserted(b, in: $0) }
                let read = DBRead.count(AHPerson.self)
                let io = DBWrite.upsert(a).flatMap { _ in read }.flatMap { n -> DBWrite<Int> in
                    if fail { return DBWrite { _ in throw AHAbort() } }
                    return DBWrite.upsert(b).map { _ in n }
                }
                if fail { next = nil }
                do {
                    let runSync: () throws -> Int = { try db.run(io) }
                    let counted = try runSync()
                    #expect(next != nil, "seed \(seed) step \(step): the composition should have failed")
                    // The read inside the write sees the write's own upsert of a.
                    if let afterA = upserted(a, in: model) { #expect(counted == afterA.count, "seed \(seed) step \(step)") }
                } catch {
                    #expect(next == nil, "seed \(seed) step \(step): \(error)")
                }
                if let next { model = next }
            case 2, 3:  // background writes, issued together; they run in order
                for _ in 0..<(1 + rng.below(4)) {
                    let p = randomPerson()
                    let fail = rng.below(4) == 0
                    let n = asyncIssued
                    asyncIssued += 1
                    if !fail, let next = upserted(p, in: model) {
                        model = next
                        expectedAsync[n] = .success(n)
                    } else {
                        expectedAsync[n] = .failure(AHAbort())
                    }
                    db.writeAsync(completionQueue: completionQueue) { tx in
                        try tx.upsert(p)
                        if fail { throw AHAbort() }
                        return n
                    } completion: { result in
                        completions.record(n, result, onQueue: DispatchQueue.getSpecific(key: queueKey) == 7)
                    }
                }
            default:  // a change-message batch, maybe with a bad message
                try await waitForBackground()
                var next: [String: AHPerson]? = model
                var batch: [ChangeMessage] = []
                for _ in 0..<(1 + rng.below(4)) {
                    let p = randomPerson()
                    switch rng.below(4) {
                    case 0:
                        batch.append(ChangeMessage(.removed, model: "AHPerson", key: .string(p.id)))
                        next?[p.id] = nil
                    case 1:
                        batch.append(ChangeMessage(.changed, model: "AHPerson", key: .string(p.id), fields: ["age": .int(Int64(p.age))]))
                        if var old = next?[p.id] {
                            old.age = p.age
                            next?[p.id] = old
                        } else {
                            next = nil
                        }
                    case 2:
                        batch.append(ChangeMessage(.changed, model: "AHPerson", key: .string(p.id), fields: ["name": .string(p.name)], cleared: ["nick"]))
                        if var old = next?[p.id] {
                            old.name = p.name
                            old.nick = nil
                            next?[p.id] = old
                        } else {
                            next = nil
                        }
                    default:
                        var fields: [String: JSONValue] = ["name": .string(p.name), "email": .string(p.email), "age": .int(Int64(p.age))]
                        if let nick = p.nick { fields["nick"] = .string(nick) }
                        batch.append(ChangeMessage(.added, model: "AHPerson", key: .string(p.id), fields: fields))
                        if let old = next?[p.id] {
                            var merged = p
                            if p.nick == nil { merged.nick = old.nick }  // not given: kept
                            next = next.flatMap { upserted(merged, in: $0) }
                        } else {
                            next = next.flatMap { upserted(p, in: $0) }
                        }
                    }
                }
                do {
                    let applySync: () throws -> Void = { try db.write { tx in _ = try tx.apply(batch) } }
                    try applySync()
                    #expect(next != nil, "seed \(seed) step \(step): the batch should have failed")
                } catch {
                    #expect(next == nil, "seed \(seed) step \(step): \(error)")
                }
                if let next { model = next }
            }
            let stored = try db.objects(AHPerson.self).fetch()
            if kind != 2 && kind != 3 {
                let expected = model.values.sorted { $0.id < $1.id }
                #expect(stored.sorted { $0.id < $1.id } == expected, "seed \(seed) step \(step) kind \(kind)")
                if stored.sorted(by: { $0.id < $1.id }) != expected { break }
            }
        }
        try await waitForBackground()
        let (calls, wrongQueue) = completions.state
        #expect(wrongQueue == 0, "seed \(seed)")
        for n in 0..<asyncIssued {
            #expect(calls[n]?.count == 1, "seed \(seed): background write \(n) completed \(calls[n]?.count ?? 0) times")
            #expect(calls[n]?.first == expectedAsync[n], "seed \(seed): background write \(n)")
        }
        let expected = model.values.sorted { $0.id < $1.id }
        #expect(try db.objects(AHPerson.self).fetch().sorted { $0.id < $1.id } == expected, "seed \(seed)")
        // (`query` and `whole` answer for the empty database they were made on.)
        let finalQuery = try shape(db.objects(AHPerson.self)).fetch()
        let finalWhole = try db.objects(AHPerson.self).sorted(by: SortDescriptor(\.name)).fetch()
        _ = try await poolEventually { mirror.state.delivered == finalQuery && wholeMirror.state.delivered == finalWhole }
        #expect(mirror.state.delivered == finalQuery, "seed \(seed)")
        #expect(wholeMirror.state.delivered == finalWhole, "seed \(seed)")
        #expect(mirror.state.problems.isEmpty, "seed \(seed): \(mirror.state.problems.prefix(5))")
        #expect(wholeMirror.state.problems.isEmpty, "seed \(seed): \(wholeMirror.state.problems.prefix(5))")
        print(
            "AppHunt random writes: seed \(seed), \(steps) steps, \(asyncIssued) background writes, \(mirror.state.count)+\(wholeMirror.state.count) deliveries"
        )
        _ = (token, wholeToken)
    }
}

@Suite struct AppHuntComposition {
    /// A composition folded from many parts nests as deep as it has parts: running it must not
    /// recurse once per part (a closure per level overflowed the stack at about 30,000 parts).
    @Test func compositionsFoldedFromManyPartsRun() throws {
        let n = appHuntSize(50_000)
        let db = try Database.inMemory(models: [AHPerson.self])
        // Left-nested: io = io.then(next), as a loop over rows builds it.
        var io = DBWrite<Int>.just(0)
        for i in 0..<n { io = io.then(DBWrite.insert(person("k\(i)", "N\(i % 7)", age: i % 90))).map { _ in i } }
        #expect(try db.run(io) == n - 1)
        #expect(db.objects(AHPerson.self).count == n)
        // Right-nested through flatMap, with reads joined to the write.
        var counting = DBRead<Int>.just(0)
        for _ in 0..<n { counting = counting.flatMap { v in DBRead.just(v + 1) } }
        #expect(try db.run(counting) == n)
        // (A composition captured by a closure of the caller's own nests through those closures,
        // which Swift releases one level per call: kept shallow here.)
        var nested = DBWrite<Int>.just(0)
        for _ in 0..<min(n, 1_000) {
            let inner = nested
            nested = DBRead<Int>.just(1).flatMap { one in inner.map { $0 + one } }
        }
        #expect(try db.run(nested) == min(n, 1_000))
        // zip chains and sequence.
        var zipped = DBRead<Int>.just(0)
        for i in 0..<n { zipped = zipped.zip(DBRead.just(i)).map { $0 + $1 } }
        #expect(try db.run(zipped) == (0..<n).reduce(0, +))
        let all = DBRead.sequence((0..<n).map { DBRead.just($0) })
        #expect(try db.run(all) == Array(0..<n))
    }

    /// A composition is a value: one built once runs on many threads at once, each run on its own
    /// snapshot, while copies of it are made and released.
    @Test func oneCompositionRunsOnManyThreadsAtOnce() async throws {
        let db = try Database.inMemory(models: [AHPerson.self])
        let fill: () throws -> Void = { try db.write { tx in _ = try tx.insert(contentsOf: (0..<50).map { person("k\($0)", "N\($0 % 5)", age: $0) }) } }
        try fill()
        var io = DBRead.count(AHPerson.self).zip(DBRead.object(AHPerson.self, key: "k7")).map { $0 + ($1?.age ?? 0) }
        for _ in 0..<200 { io = io.flatMap { v in DBRead.just(v).map { $0 } } }
        let shared = io
        let rounds = appHuntSize(300)
        let threads = 4
        let finished = DispatchSemaphore(value: 0)
        let wrong = Atomic<Int>(0)
        for _ in 0..<threads {
            Thread {
                for _ in 0..<rounds {
                    var copy: DBRead<Int>? = shared.map { $0 }
                    if (try? db.run(shared)) != 57 { wrong.add(1, ordering: .relaxed) }
                    if let c = copy, (try? db.run(c)) != 57 { wrong.add(1, ordering: .relaxed) }
                    copy = nil
                    _ = copy
                }
                finished.signal()
            }.start()
        }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Thread {
                for _ in 0..<threads { finished.wait() }
                done.resume()
            }.start()
        }
        #expect(wrong.load(ordering: .relaxed) == 0)
    }

    /// Results of every shape come back through the composition as they were made: optionals
    /// (nested ones too), tuples, Void, existentials.
    @Test func resultsKeepTheirExactValues() throws {
        let db = try Database.inMemory(models: [AHPerson.self])
        try db.write { tx in try tx.insert(person("a", "Ana")) }
        let doubleNil: Int?? = .some(nil)
        #expect(try db.run(DBRead.just(doubleNil)) == .some(nil))
        #expect(try db.run(DBRead<Int??>.just(nil)) == nil)
        #expect(try db.run(DBRead.just(doubleNil).map { $0 }) == .some(nil))
        let missing = try db.run(DBRead.object(AHPerson.self, key: "zz").zip(DBRead.object(AHPerson.self, key: "a")))
        #expect(missing.0 == nil && missing.1?.name == "Ana")
        let any: any Sendable = 5
        #expect(try db.run(DBRead.just(any).map { $0 as? Int }) == 5)
        let triple = try db.run(DBRead.zip(DBRead.just(1), DBRead.just("b"), DBRead.count(AHPerson.self)))
        #expect(triple == (1, "b", 1))
        try db.run(DBWrite.insert(person("b", "Ben")).discardingResult())
        #expect(try db.run(DBRead.sequence([DBRead<Int>]())) == [])
        #expect(try db.run(DBRead.count(AHPerson.self)) == 2)
    }
}

/// Deliveries after an observer's own block invalidated its token.
private final class AHSelfStop: @unchecked Sendable {
    private let lock = NSLock()
    var token: NotificationToken?
    private var deliveries = 0
    private var afterStop = 0
    private var stopped = false
    func receive(stopAfter: Int) {
        let stopNow: NotificationToken? = lock.withLock {
            if stopped { afterStop += 1; return nil }
            deliveries += 1
            guard deliveries >= stopAfter else { return nil }
            stopped = true
            let t = token
            token = nil
            return t
        }
        // Invalidated (and released) inside its own block.
        stopNow?.invalidate()
    }
    var state: (deliveries: Int, afterStop: Int, stopped: Bool) { lock.withLock { (deliveries, afterStop, stopped) } }
}

@Suite struct AppHuntObserverChurn {
    /// Observers of several shapes start and stop (some from inside their own block) while a
    /// writer thread commits: every change set of every observer rebuilds its results, no block
    /// runs after its token was invalidated, and the observers still running end on the query's
    /// final answer.
    @Test func observersComeAndGoWhileWritesHappen() async throws {
        let seed: UInt64 = ProcessInfo.processInfo.environment["STRATA_APPHUNT_SEED"].flatMap { UInt64($0) } ?? 0xC0FFEE
        let writes = appHuntSize(300)
        let db = try Database.inMemory(models: [AHPerson.self])
        let shapes: [@Sendable (Results<AHPerson>) -> Results<AHPerson>] = [
            { $0.sorted(by: SortDescriptor(\.name)) },
            { $0.filter(#Predicate { $0.age >= 20 }).sorted(by: SortDescriptor(\.age, order: .reverse), SortDescriptor(\.name)).prefix(4) },
            { $0.sorted(by: SortDescriptor(\.age)).offset(2).prefix(3) },
            { $0.filter(#Predicate { $0.nick != nil }) },
            { $0.sorted(by: SortDescriptor(\.name)).distinct(by: \.name) },
            { $0.sorted(by: SortDescriptor(\.email, order: .reverse)) },
        ]
        let writerDone = DispatchSemaphore(value: 0)
        let writer = Thread {
            var rng = SeededRandom(seed: seed)
            for _ in 0..<writes {
                _ = try? db.write { tx in
                    for _ in 0..<(1 + rng.below(3)) {
                        let id = "k\(rng.below(15))"
                        if rng.below(4) == 0 {
                            try tx.delete(AHPerson.self, key: id)
                        } else {
                            let name = AppHuntRandomWrites.names[rng.below(AppHuntRandomWrites.names.count)]
                            let p = AHPerson(id: id, name: name, email: "\(id)-\(rng.below(3))@x", age: rng.below(40), nick: rng.below(2) == 0 ? nil : "n")
                            try tx.upsert(p)
                        }
                    }
                }
                if rng.below(10) == 0 { usleep(200) }
            }
            writerDone.signal()
        }
        writer.start()
        var rng = SeededRandom(seed: seed ^ 0xFF)
        var live: [(shape: Int, mirror: AHMirror, token: NotificationToken)] = []
        var retired: [AHMirror] = []
        var selfStopping: [AHSelfStop] = []
        var rounds = 0
        while writerDone.wait(timeout: .now()) == .timedOut {
            rounds += 1
            let shape = rng.below(shapes.count)
            let mirror = AHMirror()
            let queue = DispatchQueue(label: "ah.churn.\(rounds)")
            live.append((shape, mirror, shapes[shape](db.objects(AHPerson.self)).observe(on: queue) { mirror.receive($0) }))
            if rng.below(3) == 0, !live.isEmpty {
                let gone = live.remove(at: rng.below(live.count))
                gone.token.invalidate()
                retired.append(gone.mirror)
            }
            if rng.below(4) == 0 {
                let stopper = AHSelfStop()
                let stopAfter = 1 + rng.below(3)
                stopper.token = shapes[rng.below(shapes.count)](db.objects(AHPerson.self)).observe(on: queue) { _ in stopper.receive(stopAfter: stopAfter) }
                selfStopping.append(stopper)
            }
            try await Task.sleep(nanoseconds: UInt64(200_000 + rng.below(2_000_000)))
        }
        for (shape, mirror, _) in live {
            let expected = try shapes[shape](db.objects(AHPerson.self)).fetch()
            _ = try await poolEventually { mirror.state.delivered == expected }
            #expect(mirror.state.delivered == expected, "seed \(seed) shape \(shape)")
        }
        for mirror in live.map(\.mirror) + retired {
            let problems = mirror.state.problems
            #expect(problems.isEmpty, "seed \(seed): \(problems.prefix(3))")
        }
        // Let queued blocks run, then no self-stopped observer may have run after its stop.
        try await Task.sleep(nanoseconds: 50_000_000)
        for stopper in selfStopping {
            #expect(stopper.state.afterStop == 0, "seed \(seed)")
        }
        print(
            "AppHunt observer churn: seed \(seed), \(writes) writes, \(rounds) rounds, \(live.count) live, \(retired.count) retired, \(selfStopping.filter { $0.state.stopped }.count)/\(selfStopping.count) stopped themselves"
        )
        _ = live.map(\.token)
    }
}

private final class AHLog: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []
    func add(_ s: String) { lock.withLock { lines.append(s) } }
    var all: [String] { lock.withLock { lines } }
}

@Suite struct AppHuntDeleteAll {
    /// `deleteAll` drops the model's trees and makes them again: its commit must still reach
    /// observers of the model's results and objects as the deletions it is.
    @Test func observersHearDeleteAll() async throws {
        let db = try Database.inMemory(models: [AHPerson.self])
        let seed: () throws -> Void = { try db.write { tx in _ = try tx.insert(contentsOf: [person("a", "Ana"), person("b", "Ben", age: 10)]) } }
        try seed()
        let log = AHLog()
        let queue = DispatchQueue(label: "ah.deleteAll")
        let mirror = AHMirror()
        let sorted = db.objects(AHPerson.self).sorted(by: SortDescriptor(\.name))
        let windowMirror = AHMirror()
        let window = db.objects(AHPerson.self).filter(#Predicate { $0.age > 5 }).sorted(by: SortDescriptor(\.name)).prefix(5)
        let results = sorted.observe(on: queue) { mirror.receive($0) }
        let windowed = window.observe(on: queue) { windowMirror.receive($0) }
        let object = db.observe(AHPerson.self, key: "a", on: queue) { change in
            if case .deleted = change { log.add("deleted") }
        }
        // Each observer has its initial state before the write.
        let start = Date()
        while (mirror.state.count == 0 || windowMirror.state.count == 0) && Date().timeIntervalSince(start) < 120 {
            try await Task.sleep(nanoseconds: 2_000_000)
        }
        db.observerQueue.sync {}
        let deleteAll: () throws -> Int = { try db.write { tx in try tx.deleteAll(AHPerson.self) } }
        #expect(try deleteAll() == 2)
        _ = try await poolEventually { mirror.state.delivered.isEmpty && windowMirror.state.delivered.isEmpty && !log.all.isEmpty }
        #expect(mirror.state.delivered.isEmpty, "the sorted results never heard deleteAll")
        #expect(windowMirror.state.delivered.isEmpty, "the window never heard deleteAll")
        #expect(log.all == ["deleted"], "the object observer never heard deleteAll")
        #expect(mirror.state.problems.isEmpty && windowMirror.state.problems.isEmpty)
        _ = (results, windowed, object)
    }
}

@Suite struct AppHuntSlowStream {
    /// A `for await` loop slower than the writer: commits that land while it is busy merge into
    /// its next change, as they do for a slow `observe` block. Buffering a change per commit held
    /// a snapshot per commit, until every reader slot of the file was taken and every read of the
    /// database failed.
    @Test func aSlowStreamConsumerHoldsOneChange() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ah-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        var options = StoreOptions(durability: .noSync)
        options.readerSlots = 32
        let db = try Database(path: dir.appendingPathComponent("db.strata").path, models: [AHPerson.self], options: options)
        let sorted: @Sendable (Results<AHPerson>) -> Results<AHPerson> = { $0.sorted(by: SortDescriptor(\.age)) }
        var iterator = sorted(db.objects(AHPerson.self)).changes.makeAsyncIterator()
        let mirror = AHMirror()
        if let first = await iterator.next() { mirror.receive(first) }
        let writes = appHuntSize(200)
        // Commits land one by one while the consumer is busy, each after the observer took in the one before.
        for i in 0..<writes {
            let write: () throws -> Void = { try db.write { tx in _ = try tx.upsert(person("k\(i % 20)", "N\(i)", age: (i * 7) % 50)) } }
            try write()
            if i % 10 == 0 { db.observerQueue.sync {} }
        }
        try await Task.sleep(nanoseconds: 200_000_000)
        db.observerQueue.sync {}
        let expected = try sorted(db.objects(AHPerson.self)).fetch()  // fails when the stream holds every slot
        var deliveries = 0
        while mirror.state.delivered != expected, deliveries < writes + 1, let change = await iterator.next() {
            mirror.receive(change)
            deliveries += 1
        }
        #expect(mirror.state.delivered == expected)
        #expect(mirror.state.problems.isEmpty, "\(mirror.state.problems.prefix(3))")
        #expect(deliveries <= 3, "\(deliveries) changes were buffered for a consumer that was busy for \(writes) commits")
    }
}

extension AppHuntSlowStream {
    /// A stream's observation ends when its consuming task is cancelled (while it waits for a
    /// change, or before it asks), when the stream is dropped unconsumed, and after the close's
    /// `databaseClosed`, which is its last element.
    @Test func streamObservationsEnd() async throws {
        let db = try Database.inMemory(models: [AHPerson.self])
        func waitForObservers(_ n: Int) async throws {
            for _ in 0..<12_000 where db.observers.count != n { try await Task.sleep(nanoseconds: 10_000_000) }
            #expect(db.observers.count == n)
        }
        // Cancelled while waiting.
        let heard = HDBox()
        let waiting = Task {
            var count = 0
            for await _ in db.objects(AHPerson.self).changes {
                count += 1
                heard.add()
            }
            return count
        }
        try await waitForObservers(1)
        #expect(try await poolEventually { heard.value == 1 })  // the initial results arrived
        try await Task.sleep(nanoseconds: 50_000_000)
        waiting.cancel()
        #expect(await waiting.value == 1)  // the initial results, then nothing
        try await waitForObservers(0)
        // Dropped without being consumed.
        var dropped: AsyncStream<ResultsChange<AHPerson>>? = db.objects(AHPerson.self).changes
        try await waitForObservers(1)
        dropped = nil
        _ = dropped
        try await waitForObservers(0)
        // Cancelled before asking.
        let stream = db.objects(AHPerson.self).changes
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            var count = 0
            for await _ in stream { count += 1 }
            return count
        }
        #expect(await early.value == 0)
        try await waitForObservers(0)
        // Closed: databaseClosed is the last element.
        let closingHeard = HDBox()
        let closing = Task {
            var last: ResultsChange<AHPerson>?
            var count = 0
            for await change in db.objects(AHPerson.self).sorted(by: SortDescriptor(\.age)).changes {
                last = change
                count += 1
                closingHeard.add()
            }
            if case .error(.databaseClosed)? = last { return count }
            return -1
        }
        try await waitForObservers(1)
        #expect(try await poolEventually { closingHeard.value >= 1 })  // the initial results arrived
        let write: () throws -> Void = { try db.write { tx in _ = try tx.insert(person("a", "Ana")) } }
        try write()
        try await Task.sleep(nanoseconds: 50_000_000)
        db.close()
        let count = await closing.value
        #expect(count >= 2, "initial, maybe the insert, then databaseClosed")
        try await waitForObservers(0)
    }
}
