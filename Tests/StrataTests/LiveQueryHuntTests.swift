import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Strata

// Live results of queries that are exactly #Predicate / SortDescriptor (and searches, collations,
// distinct, windows), checked after every commit against a plain-array reference: each change set
// applied to the previous delivery gives the query re-run, and modifications are exactly the kept
// objects whose stored value changed (ObservingChanges.md). Shapes the other differential tests do
// not run: compound-index prefixes with ranges and sorts on the next field in both directions and
// with offsets, optional and nested and enum sorts, searches with filters and windows, collated
// windows, distinct, empty and past-the-end windows; writes through upserts, partial JSON updates,
// delete(where:), DBIO and batches.
//
//   STRATA_LQ_SEED, STRATA_LQ_TXNS.

enum LQShapes {
    static func all() -> [LQShape] {
        let one = 1, two = 2, zero = 0
        let groups = [0, 2]
        let x = "x"
        let cutoff = Date(timeIntervalSinceReferenceDate: 1)
        return [
            LQShape(name: "group == 1 && score >= 2, score↑", predicate: #Predicate { $0.group == one && $0.score >= 2 }, sort: [SortDescriptor(\.score)]),
            LQShape(
                name: "group == 1 && score >= 2, score↓ prefix 4", predicate: #Predicate { $0.group == one && $0.score >= 2 },
                sort: [SortDescriptor(\.score, order: .reverse)], limit: 4),
            LQShape(
                name: "group == 2, when↓ offset 2 prefix 5", predicate: #Predicate { $0.group == two }, sort: [SortDescriptor(\.when, order: .reverse)],
                offset: 2, limit: 5),
            LQShape(
                name: "group in [0,2] && score < 4, score↓ when↑", predicate: #Predicate { groups.contains($0.group) && $0.score < 4 },
                sort: [SortDescriptor(\.score, order: .reverse), SortDescriptor(\.when)]),
            LQShape(name: "group == 0, price↓ (optional)", predicate: #Predicate { $0.group == zero }, sort: [SortDescriptor(\.price, order: .reverse)]),
            LQShape(name: "all, price↑ prefix 7", sort: [SortDescriptor(\.price)], limit: 7),
            LQShape(name: "all, pri↑ (enum, declaration order) score↓", sort: [SortDescriptor(\.pri), SortDescriptor(\.score, order: .reverse)]),
            LQShape(name: "all, dims.w↓", sort: [SortDescriptor(\.dims.w, order: .reverse)]),
            LQShape(name: "score > 0, dims.h↓ (nested optional)", predicate: #Predicate { $0.score > 0 }, sort: [SortDescriptor(\.dims.h, order: .reverse)]),
            LQShape(
                name: "search beta && score > 1, when↑ prefix 3", predicate: #Predicate { $0.score > 1 }, sort: [SortDescriptor(\.when)],
                search: ("beta", false), limit: 3),
            LQShape(name: "search gam* && group == 1", predicate: #Predicate { $0.group == one }, search: ("gam*", false)),
            LQShape(name: "search any delta alpha*, score↓", sort: [SortDescriptor(\.score, order: .reverse)], search: ("delta alpha*", true), offset: 1),
            LQShape(
                name: "group != 1, title natural↑ offset 1 prefix 6", predicate: #Predicate { $0.group != one }, collation: (.natural, false), offset: 1,
                limit: 6),
            LQShape(name: "group == 2, title caseInsensitive↓", predicate: #Predicate { $0.group == two }, collation: (.caseInsensitive, true)),
            LQShape(name: "all, title natural↓ (no window)", collation: (.natural, true)),
            LQShape(
                name: "when >= 1, when↓ distinct score", predicate: #Predicate { $0.when >= cutoff }, sort: [SortDescriptor(\.when, order: .reverse)],
                distinctScore: true),
            LQShape(name: "prefix 0", sort: [SortDescriptor(\.score)], limit: 0),
            LQShape(name: "offset past the end", offset: 1_000),
            LQShape(name: "tags contains x, id↓", predicate: #Predicate { $0.tags.contains(x) }, sort: [SortDescriptor(\.id, order: .reverse)]),
            LQShape(
                name: "price != nil && price! > 0, price↑ score↓", predicate: #Predicate { $0.price != nil && $0.price! > 0 },
                sort: [SortDescriptor(\.price), SortDescriptor(\.score, order: .reverse)]),
            LQShape(name: "group == 1, score↑ prefix 1", predicate: #Predicate { $0.group == one }, sort: [SortDescriptor(\.score)], limit: 1),
        ] + helpers()
    }

    /// Shapes with the helper filters, which observers must treat like predicates.
    static func helpers() -> [LQShape] {
        let two = 2
        return [
            LQShape(
                name: "title matching contains \"ROOM\" [c], score↑", sort: [SortDescriptor(\.score)],
                helper: ({ $0.filter(\.title, matching: .contains("ROOM"), options: [.caseInsensitive]) }, { $0.title.lowercased().contains("room") })),
            LQShape(
                name: "title matching beginsWith \"ba\" [c], when↓", sort: [SortDescriptor(\.when, order: .reverse)],
                helper: ({ $0.filter(\.title, matching: .beginsWith("ba"), options: [.caseInsensitive]) }, { $0.title.lowercased().hasPrefix("ba") })),
            LQShape(
                name: "title matching equals \"apple\" (plain), id↑", sort: [SortDescriptor(\.id)],
                helper: ({ $0.filter(\.title, matching: .equals("apple")) }, { $0.title == "apple" })),
            LQShape(
                name: "pri equals .urgent && group == 2, score↓", predicate: #Predicate { $0.group == two }, sort: [SortDescriptor(\.score, order: .reverse)],
                helper: ({ $0.filter(\.pri, equals: .urgent) }, { $0.pri == .urgent })),
            LQShape(
                name: "price equals nil, dims.w↑", sort: [SortDescriptor(\.dims.w)],
                helper: ({ $0.filter(\.price, equals: nil) }, { $0.price == nil })),
            LQShape(
                name: "tags contains y, score↑ prefix 5", sort: [SortDescriptor(\.score)], limit: 5,
                helper: ({ $0.filter(\.tags, contains: "y") }, { $0.tags.contains("y") })),
            LQShape(
                name: "dims equals (1, nil), no sort",
                helper: ({ $0.filter(\.dims, equals: LQDims(w: 1, h: nil)) }, { $0.dims == LQDims(w: 1, h: nil) })),
        ]
    }
}

/// The random writes: each kind of write the API has, applied to the plain model too.
struct LQWriter {
    var rng: SeededRandom
    var model: [Int: LQItem] = [:]
    var nextId = 1

    mutating func pick() -> Int? {
        let keys = model.keys.sorted()
        return keys.isEmpty ? nil : keys[rng.below(keys.count)]
    }

    mutating func mutate(_ item: inout LQItem) {
        let fresh = LQItem.random(id: item.id, &rng)
        switch rng.below(7) {
        case 0: item.score = fresh.score
        case 1: item.group = fresh.group
        case 2: item.price = fresh.price
        case 3: item.title = fresh.title
        case 4: item.body = fresh.body
        case 5: item.dims = fresh.dims
        default: item = fresh
        }
    }

    /// One transaction of 1...4 operations, or one DBIO run.
    mutating func transaction(_ db: Database) throws {
        if rng.below(6) == 0 { return try dbio(db) }
        try db.write { tx in
            for _ in 0..<(1 + rng.below(4)) { try operation(tx) }
        }
    }

    mutating func operation(_ tx: Transaction) throws {
        switch rng.below(9) {
        case 0, 1:
            let item = LQItem.random(id: nextId, &rng)
            nextId += 1
            model[item.id] = item
            try tx.insert(item)
        case 2:
            guard let id = pick() else { return }
            model[id] = nil
            _ = try tx.delete(LQItem.self, key: id)
        case 3:
            // An upsert: sometimes the very same value (no stored change), sometimes a new one.
            guard let id = pick(), var item = model[id] else { return }
            if rng.below(2) == 0 { mutate(&item) }
            model[id] = item
            try tx.upsert(item)
        case 4:
            // A partial JSON update of a top-level field or of a nested field.
            guard let id = pick(), var item = model[id] else { return }
            switch rng.below(3) {
            case 0:
                item.score = rng.below(6)
                try tx.update(LQItem.self, key: id, json: Data(#"{"score": \#(item.score)}"#.utf8))
            case 1:
                item.dims.w = rng.below(4)
                try tx.update(LQItem.self, key: id, json: Data(#"{"dims": {"w": \#(item.dims.w)}}"#.utf8))
            default:
                item.price = nil
                try tx.update(LQItem.self, key: id, json: Data(#"{"price": null}"#.utf8))
            }
            model[id] = item
        case 5:
            let group = rng.below(3), score = rng.below(6)
            let doomed = model.values.filter { $0.group == group && $0.score == score }.map(\.id)
            for id in doomed { model[id] = nil }
            _ = try tx.delete(LQItem.self, where: #Predicate { $0.group == group && $0.score == score })
        default:
            guard let id = pick(), var item = model[id] else { return }
            mutate(&item)
            model[id] = item
            let stored = item
            _ = try tx.update(LQItem.self, key: id) { $0 = stored }
        }
    }

    mutating func dbio(_ db: Database) throws {
        let fresh = LQItem.random(id: nextId, &rng)
        nextId += 1
        model[fresh.id] = fresh
        var io = DBWrite.insert(fresh).map { _ in () }
        if let id = pick(), id != fresh.id, var item = model[id] {
            item.score = rng.below(6)
            item.group = rng.below(3)
            model[id] = item
            let score = item.score, group = item.group
            io = io.zip(
                DBWrite.update(LQItem.self, key: id) {
                    $0.score = score; $0.group = group
                }
            ).map { _ in () }
        }
        if let id = pick(), id != fresh.id, rng.below(2) == 0 {
            model[id] = nil
            io = io.flatMap { _ in DBWrite.delete(LQItem.self, key: id).map { _ in () } }
        }
        try db.run(io)
    }
}

@Suite struct LiveQueryHuntTests {
    static func env(_ name: String) -> Int? { ProcessInfo.processInfo.environment[name].flatMap { Int($0) } }

    /// Runs every shape's observer through `transactions` random commits on `db`, waiting after
    /// each commit until every observer shows the reference, then checks every delivery.
    static func run(
        _ db: Database, writingTo writeDB: Database? = nil, seed: UInt64, transactions: Int, shapes: [LQShape],
        between: (Int) throws -> Void = { _ in }
    ) throws -> [String] {
        let observed = db
        let db = writeDB ?? db
        var writer = LQWriter(rng: SeededRandom(seed: seed))
        let history = LQHistory()
        try db.write { tx in
            for _ in 0..<30 {
                let item = LQItem.random(id: writer.nextId, &writer.rng)
                writer.nextId += 1
                writer.model[item.id] = item
                try tx.insert(item)
            }
        }
        history.record(db.store.latestVersion, writer.model)
        let sinks = shapes.map { _ in LQSink() }
        var tokens: [NotificationToken] = []
        for (k, shape) in shapes.enumerated() {
            let sink = sinks[k]
            tokens.append(shape.build(observed.objects(LQItem.self)).observe(on: DispatchQueue(label: "lq.\(k)")) { sink.receive($0) })
        }
        defer { for t in tokens { t.invalidate() } }
        var failures: [String] = []
        func settle(_ label: String) throws {
            let all = writer.model.values.sorted { $0.id < $1.id }
            for (k, shape) in shapes.enumerated() {
                let expected = try shape.reference(all)
                let ok = LQWait.until { sinks[k].all.last.map { $0.kind != "update" && $0.kind != "initial" || $0.objects == expected } ?? false }
                if !ok {
                    failures.append(
                        "seed \(seed) \(label) [\(shape.name)]: observer shows \(sinks[k].all.last?.objects.map(\.id) ?? []) after 20 s, expected \(expected.map(\.id))"
                    )
                }
            }
        }
        try settle("initial")
        for round in 0..<transactions {
            try writer.transaction(db)
            history.record(db.store.latestVersion, writer.model)
            try between(round)
            try settle("round \(round)")
            if failures.count > 10 { break }
        }
        print("live query hunt: seed \(seed), \(transactions) transactions, deliveries per observer \(sinks.map { $0.all.count })")
        for (k, shape) in shapes.enumerated() {
            var checker = LQChecker()
            checker.check("seed \(seed) [\(shape.name)]", sinks[k].all) { v in history.objects(at: v).flatMap { try? shape.reference($0) } }
            failures += checker.failures
        }
        return failures
    }

    @Test func observedQueriesFollowTheReferenceThroughRandomWrites() throws {
        let seed = UInt64(Self.env("STRATA_LQ_SEED") ?? 20_261_205)
        let db = try Database.inMemory(models: [LQItem.self])
        let failures = try Self.run(db, seed: seed, transactions: Self.env("STRATA_LQ_TXNS") ?? 40, shapes: LQShapes.all())
        for f in failures.prefix(15) { print(f) }
        #expect(failures.isEmpty, "seed \(seed): \(failures.count) failures, first: \(failures.first ?? "")")
    }

    /// The plain queries agree with the reference on every shape (not live): a sanity check of the
    /// reference itself, over a few random states.
    @Test func queriesMatchTheReference() throws {
        let seed: UInt64 = 77
        var writer = LQWriter(rng: SeededRandom(seed: seed))
        let db = try Database.inMemory(models: [LQItem.self])
        var failures: [String] = []
        for round in 0..<12 {
            if round == 0 {
                try db.write { tx in
                    for _ in 0..<40 {
                        let item = LQItem.random(id: writer.nextId, &writer.rng)
                        writer.nextId += 1
                        writer.model[item.id] = item
                        try tx.insert(item)
                    }
                }
            } else {
                try writer.transaction(db)
            }
            let all = writer.model.values.sorted { $0.id < $1.id }
            #expect(try db.objects(LQItem.self).sorted(by: SortDescriptor(\.id)).fetch() == all, "seed \(seed) round \(round): the stored objects")
            for shape in LQShapes.all() {
                let got = try shape.build(db.objects(LQItem.self)).fetch()
                let expected = try shape.reference(all)
                if got != expected { failures.append("seed \(seed) round \(round) [\(shape.name)]: got \(got.map(\.id)) expected \(expected.map(\.id))") }
                let count = try shape.build(db.objects(LQItem.self)).fetchCount()
                if count != expected.count { failures.append("seed \(seed) round \(round) [\(shape.name)]: fetchCount \(count) expected \(expected.count)") }
            }
        }
        for f in failures.prefix(15) { print(f) }
        #expect(failures.isEmpty, "\(failures.count) failures, first: \(failures.first ?? "")")
    }

    /// The same through a second handle of a file (its commits reach the first handle's
    /// observers, ObservingChanges.md "Across processes" and `observeCommits`: "the commits made
    /// through any handle of it in this process"), with `store.compact()` every few commits
    /// (compaction moves pages, not objects: observers hear nothing of it).
    @Test func observersOfOneHandleFollowWritesOfAnotherAndCompaction() throws {
        let seed = UInt64(Self.env("STRATA_LQ_SEED") ?? 20_261_206)
        let path = LQWait.tempPath("two")
        defer { LQWait.remove(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = .milliseconds(20)
        let a = try Database(path: path, models: [LQItem.self], options: options)
        defer { a.close() }
        let b = try Database(path: path, models: [LQItem.self], options: options)
        defer { b.close() }
        let failures = try Self.run(a, writingTo: b, seed: seed, transactions: Self.env("STRATA_LQ_TXNS") ?? 40, shapes: LQShapes.all()) { round in
            if round % 8 == 7 { _ = try (round % 16 == 7 ? a : b).store.compact() }
        }
        for f in failures.prefix(15) { print(f) }
        #expect(failures.isEmpty, "seed \(seed): \(failures.count) failures, first: \(failures.first ?? "")")
    }

    /// Results never change (Queries.md "Lazy results": bound to one snapshot): made before a
    /// burst of writes on another thread and compactions, and read only during and after them, every
    /// shape's count, subscripts, pages, iteration, keys, aggregates and further filters still
    /// describe the commit they were made on.
    @Test func resultsReadDuringWritesDescribeTheirSnapshot() throws {
        let seed: UInt64 = 4242
        let path = LQWait.tempPath("snap")
        defer { LQWait.remove(path) }
        let db = try Database(path: path, models: [LQItem.self], options: StoreOptions(durability: .noSync))
        defer { db.close() }
        var writer = LQWriter(rng: SeededRandom(seed: seed))
        try db.write { tx in
            for _ in 0..<200 {
                let item = LQItem.random(id: writer.nextId, &writer.rng)
                writer.nextId += 1
                writer.model[item.id] = item
                try tx.insert(item)
            }
        }
        let all = writer.model.values.sorted { $0.id < $1.id }
        let shapes = LQShapes.all()
        let held = shapes.map { $0.build(db.objects(LQItem.self)) }
        let version = db.store.latestVersion
        let done = Atomic<Bool>(false)
        let writerError = Mutex<String?>(nil)
        let thread = Thread { [writer] in
            var w = writer
            do {
                for round in 0..<60 {
                    try w.transaction(db)
                    if round % 20 == 19 { _ = try db.store.compact() }
                }
            } catch {
                writerError.withLock { $0 = "\(error)" }
            }
            done.store(true, ordering: .sequentiallyConsistent)
        }
        thread.start()
        var failures: [String] = []
        var passes = 0
        let one = 1
        repeat {
            passes += 1
            for (k, shape) in shapes.enumerated() {
                let r = held[k]
                let expected = try shape.reference(all)
                let label = "seed \(seed) pass \(passes) [\(shape.name)]"
                if r.version != version { failures.append("\(label): version \(r.version ?? 0), made at \(version)") }
                if r.count != expected.count { failures.append("\(label): count \(r.count), expected \(expected.count)") }
                let n = min(r.count, expected.count)
                if n > 0 {
                    if r[n - 1] != expected[n - 1] { failures.append("\(label): last element \(r[n - 1].id), expected \(expected[n - 1].id)") }
                    let page = r.objects(in: (n / 2)..<n)
                    if page != Array(expected[(n / 2)..<n]) { failures.append("\(label): objects(in:) \(page.map(\.id))") }
                }
                if Array(r) != expected { failures.append("\(label): iteration \(Array(r).map(\.id)), expected \(expected.map(\.id))") }
                if r.keys != expected.map(\.id) { failures.append("\(label): keys \(r.keys)") }
                if r.max(of: \.score) != expected.map(\.score).max() { failures.append("\(label): max(of: score) \(r.max(of: \.score) as Any)") }
                if r.sum(of: \.score) != expected.reduce(0, { $0 + $1.score }) { failures.append("\(label): sum(of: score) \(r.sum(of: \.score))") }
                let refined = r.filter(#Predicate { $0.group == one })
                let expectedRefined = try shape.reference(all.filter { $0.group == 1 })
                // (A window applies after every filter: the refined query is the shape with one more filter.)
                if Array(refined) != expectedRefined {
                    failures.append("\(label): refined by group == 1 gives \(Array(refined).map(\.id)), expected \(expectedRefined.map(\.id))")
                }
            }
        } while !done.load(ordering: .sequentiallyConsistent) && failures.isEmpty && passes < 200
        while !done.load(ordering: .sequentiallyConsistent) { usleep(1_000) }
        #expect(writerError.withLock { $0 } == nil)
        for f in failures.prefix(15) { print(f) }
        #expect(failures.isEmpty, "\(failures.count) failures, first: \(failures.first ?? "")")
    }

    /// `changes` as an AsyncSequence under bursts of commits (merged into fewer changes): applying
    /// each change to a mirror, as ObservingChanges.md's `apply` does, keeps it equal to the
    /// query; closing the database ends every loop after `.error(.databaseClosed)`.
    @Test func asyncChangesMirrorTheQueryAndEndAtClose() async throws {
        let seed: UInt64 = 9090
        let db = try Database.inMemory(models: [LQItem.self])
        var writer = LQWriter(rng: SeededRandom(seed: seed))
        let shapes = Array(LQShapes.all().prefix(14))
        let mirrors = shapes.map { _ in LQBoxedMirror() }
        var loops: [Task<Void, Never>] = []
        for (k, shape) in shapes.enumerated() {
            let stream = shape.build(db.objects(LQItem.self)).changes
            let mirror = mirrors[k]
            loops.append(
                Task {
                    for await change in stream { mirror.apply(change) }
                    mirror.finished()
                })
        }
        #expect(await LQWait.untilAsync { mirrors.allSatisfy { $0.state.withLock { $0.initialized } } })
        for _ in 0..<5 {
            for _ in 0..<10 { try writer.transaction(db) }
            let all = writer.model.values.sorted { $0.id < $1.id }
            for (k, shape) in shapes.enumerated() {
                let expected = try shape.reference(all)
                let ok = await LQWait.untilAsync { mirrors[k].state.withLock { $0.mirror == expected } }
                #expect(
                    ok,
                    "seed \(seed) [\(shape.name)]: mirror \(mirrors[k].state.withLock { $0.mirror.map(\.id) }), expected \(expected.map(\.id)); \(mirrors[k].state.withLock { $0.problems })"
                )
            }
        }
        db.close()
        for loop in loops { await loop.value }
        for (k, shape) in shapes.enumerated() {
            let s = mirrors[k].state.withLock { $0 }
            #expect(s.problems.isEmpty, "[\(shape.name)]: \(s.problems)")
            #expect(
                s.ended && s.lastWasClosed,
                "[\(shape.name)]: the loop did not end after .error(.databaseClosed): ended \(s.ended), last closed \(s.lastWasClosed)")
        }
    }
}

/// A mirror kept by applying changes, as the documentation's `apply` does.
final class LQBoxedMirror: Sendable {
    struct State {
        var mirror: [LQItem] = []
        var initialized = false
        var ended = false
        var lastWasClosed = false
        var problems: [String] = []
    }
    let state = Mutex(State())

    func apply(_ change: ResultsChange<LQItem>) {
        state.withLock { s in
            s.lastWasClosed = false
            switch change {
            case .initial(let r):
                if s.initialized { s.problems.append("second .initial") }
                s.mirror = Array(r)
                s.initialized = true
            case .update(let r, let d, let i, let m):
                let delivery = LQDelivery(kind: "update", version: r.version ?? 0, objects: Array(r), deletions: d, insertions: i, modifications: m)
                if let problem = LQChecker.apply(s.mirror, delivery) { s.problems.append(problem) }
                s.mirror = delivery.objects
            case .error(let e):
                if case .databaseClosed = e { s.lastWasClosed = true } else { s.problems.append("error \(e)") }
            }
        }
    }

    func finished() { state.withLock { $0.ended = true } }
}
