import Testing
import Foundation
import Dispatch
import Synchronization
@testable import Strata

// How the live differential test checks deliveries (against the previous delivery and the query re-run
// on the delivery's snapshot), and the writes it makes (LDWrites, the dictionary model).

// MARK: Checking deliveries

struct LDConfig: Sendable {
    var seed: UInt64 = 20260501
    var transactions = 450
    var objects = 200
    /// Long, because a green run never waits for it (it only bounds a failure): deliveries run
    /// on the shared pool, which long synchronous tests on both cores can keep busy.
    var timeout = 120.0
    var cap = 6
    var oracleEvery = 1
    /// Only these shapes (by index in `LDShape.all()`), to chase one failure.
    var shapes: Set<Int>?

    static func fromEnvironment() -> LDConfig {
        let env = ProcessInfo.processInfo.environment
        var config = LDConfig()
        if let v = env["STRATA_LIVE_DIFF_SEED"].flatMap({ UInt64($0) }) { config.seed = v }
        if let v = env["STRATA_LIVE_DIFF_TXNS"].flatMap({ Int($0) }), v >= 10 { config.transactions = v }
        if let v = env["STRATA_LIVE_DIFF_OBJECTS"].flatMap({ Int($0) }), v >= 1 { config.objects = v }
        if let v = env["STRATA_LIVE_DIFF_TIMEOUT"].flatMap({ Double($0) }), v > 0 { config.timeout = v }
        if let v = env["STRATA_LIVE_DIFF_CAP"].flatMap({ Int($0) }), v >= 1 { config.cap = v }
        if let v = env["STRATA_LIVE_DIFF_ORACLE_EVERY"].flatMap({ Int($0) }), v >= 1 { config.oracleEvery = v }
        if let v = env["STRATA_LIVE_DIFF_SHAPES"] { config.shapes = Set(v.split(separator: ",").compactMap { Int($0) }) }
        return config
    }
}

/// Every object of a snapshot, read once per version for all observers (the plain oracle's input).
final class LDSnapshotObjects: Sendable {
    private let cache = Mutex<[UInt64: [LDThing]]>([:])

    func objects(_ snapshot: Snapshot) -> [LDThing] {
        if let done = cache.withLock({ $0[snapshot.version] }) { return done }
        let all = Array(snapshot.objects(LDThing.self))
        cache.withLock { cache in
            cache[snapshot.version] = all
            if cache.count > 48, let oldest = cache.keys.min() { cache[oldest] = nil }
        }
        return all
    }
}

/// Receives one observer's deliveries (on its private serial queue), checks each one, and keeps
/// only the latest array and the failures. `Sendable`: all mutable state is in a Mutex.
final class LDChecker: Sendable {
    struct State {
        var deliveries = 0
        var previous: [LDThing]?
        var version: UInt64 = 0
        var lastDelivery = ContinuousClock.now
        var failures: [(kind: String, message: String)] = []
        var counts: [String: Int] = [:]
    }

    let index: Int
    let shape: LDShape
    let seed: UInt64
    private let cap: Int
    private let oracleEvery: Int
    private let snapshots: LDSnapshotObjects
    private let state = Mutex(State())

    init(index: Int, shape: LDShape, seed: UInt64, cap: Int, oracleEvery: Int, snapshots: LDSnapshotObjects) {
        self.index = index
        self.oracleEvery = oracleEvery
        self.shape = shape
        self.seed = seed
        self.cap = cap
        self.snapshots = snapshots
    }

    var deliveries: Int { state.withLock { $0.deliveries } }
    var lastDelivery: ContinuousClock.Instant { state.withLock { $0.lastDelivery } }
    /// The latest delivered objects (empty before the first delivery).
    var latest: [LDThing] { state.withLock { $0.previous ?? [] } }
    var failures: [(kind: String, message: String)] { state.withLock { $0.failures } }
    var counts: [String: Int] { state.withLock { $0.counts } }

    private var prefix: String { "seed \(seed), observer \(index) [\(shape.label)]" }

    /// Records a failure: every kind is counted; the first of each kind and then others are kept,
    /// `cap` in all.
    func record(_ kind: String, _ message: String, delivery: Int?) {
        let text = "\(prefix)\(delivery.map { ", delivery #\($0)" } ?? ""): \(kind): \(message)"
        state.withLock { s in
            s.counts[kind, default: 0] += 1
            if s.failures.count < cap || s.counts[kind] == 1 {
                s.failures.append((kind, text))
            }
        }
    }

    func receive(_ change: ResultsChange<LDThing>) {
        switch change {
        case .initial(let results):
            check(results, update: nil)
        case .update(let results, let deletions, let insertions, let modifications):
            check(results, update: (deletions, insertions, modifications))
        case .error(let error):
            let n = state.withLock { s in
                s.deliveries += 1; return s.deliveries
            }
            record("error delivered", "\(error)", delivery: n)
        }
    }

    private func check(_ results: Results<LDThing>, update: (deletions: [Int], insertions: [Int], modifications: [Int])?) {
        let new = Array(results)
        let version = results.version ?? 0
        let (n, previous, previousVersion) = state.withLock { s -> (Int, [LDThing]?, UInt64) in
            s.deliveries += 1
            return (s.deliveries, s.previous, s.version)
        }
        if results.snapshot == nil { record("delivery without snapshot", "results carry no snapshot: \(results.error.map { "\($0)" } ?? "-")", delivery: n) }

        let ids = new.map(\.id)
        if Set(ids).count != ids.count {
            let dups = Dictionary(grouping: ids, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
            record("duplicate objects in delivered results", "ids \(dups) appear more than once (version \(version)): \(LDDiff.ids(ids))", delivery: n)
        }
        // The query re-run on the delivery's own snapshot: by the plain oracle, and when that
        // differs, by Strata too, to tell an observer's fault from the query's.
        if let snapshot = results.snapshot, n == 1 || (n - 1) % oracleEvery == 0 {
            do {
                let plain = try shape.plain(snapshots.objects(snapshot))
                if !LDThing.same(plain, new) {
                    let engine = Array(shape.build(snapshot.objects(LDThing.self)))
                    if !LDThing.same(engine, new) {
                        record(
                            "delivered results differ from the query re-run on the same snapshot",
                            "version \(version): " + LDDiff.describe(expected: engine, delivered: new, expectedName: "db.objects"), delivery: n)
                    }
                    if !LDThing.same(engine, plain) {
                        record(
                            "db.objects query differs from the plain-array oracle",
                            "version \(version): "
                                + LDDiff.describe(expected: plain, delivered: engine, expectedName: "plain oracle", deliveredName: "db.objects"),
                            delivery: n)
                    }
                }
            } catch {
                record("oracle error", "\(error)", delivery: n)
            }
        }

        if let update {
            if previous == nil { record("update before .initial", "first delivery is an update", delivery: n) }
            if version <= previousVersion {
                record("version did not advance", "version \(version) after \(previousVersion)", delivery: n)
            }
            checkChange(previous ?? [], new, update, n: n, version: version)
        } else if previous != nil {
            record(".initial delivered twice", "second .initial at delivery #\(n)", delivery: n)
        }

        state.withLock { s in
            s.previous = new
            s.version = version
            s.lastDelivery = .now
        }
    }

    private func checkChange(
        _ old: [LDThing], _ new: [LDThing], _ change: (deletions: [Int], insertions: [Int], modifications: [Int]),
        n: Int, version: UInt64
    ) {
        let (deletions, insertions, modifications) = change
        let context =
            "version \(version), deletions \(LDDiff.ids(deletions)) insertions \(LDDiff.ids(insertions)) modifications \(LDDiff.ids(modifications)); "
            + "previous \(LDDiff.ids(old.map(\.id))) new \(LDDiff.ids(new.map(\.id)))"
        if deletions.isEmpty && insertions.isEmpty && modifications.isEmpty {
            record("empty change set delivered", context, delivery: n)
        }
        var valid = true
        for (name, list, bound) in [("deletions", deletions, old.count), ("insertions", insertions, new.count), ("modifications", modifications, new.count)] {
            if zip(list, list.dropFirst()).contains(where: { $0 >= $1 }) {
                record("change set indices not strictly ascending or repeated", "\(name) \(LDDiff.ids(list)); " + context, delivery: n)
            }
            if list.contains(where: { $0 < 0 || $0 >= bound }) {
                record("change set index out of range", "\(name) \(LDDiff.ids(list)) with \(bound) objects; " + context, delivery: n)
                valid = false
            }
        }
        if Set(deletions).count != deletions.count || Set(insertions).count != insertions.count { valid = false }
        if !Set(modifications).isDisjoint(with: insertions) {
            record("an index is both inserted and modified", context, delivery: n)
        }
        guard valid else { return }
        // Apply: deletions from the highest, then insertions from the lowest.
        var applied = old
        for i in deletions.sorted(by: >) { applied.remove(at: i) }
        let kept = applied
        for j in insertions.sorted() {
            guard j <= applied.count else {
                record("change set does not rebuild the new results", "insertion \(j) beyond \(applied.count) objects; " + context, delivery: n)
                return
            }
            applied.insert(new[j], at: j)
        }
        if applied.map(\.id) != new.map(\.id) {
            record(
                "change set does not rebuild the new results",
                "applying gives \(LDDiff.ids(applied.map(\.id))); " + context, delivery: n)
            return
        }
        // Kept objects, old → new in order: modified exactly when their (observed) value changed.
        let insertionSet = Set(insertions)
        let keptNew = new.indices.filter { !insertionSet.contains($0) }
        var expected: [Int] = []
        var before: [Int: LDThing] = [:]
        for (old, j) in zip(kept, keptNew) {
            before[j] = old
            if !shape.same(old, new[j]) { expected.append(j) }
        }
        if expected != modifications {
            let show = { (indices: [Int]) -> String in
                let shown = indices.prefix(3).map { j in "\(j): \(before[j]?.short ?? "?") → \(new[j].short)" }
                return "\(indices) " + shown.joined(separator: "; ") + (indices.count > 3 ? "; …" : "")
            }
            record(
                "modifications are not exactly the kept objects that changed",
                "not reported: \(show(Set(expected).subtracting(modifications).sorted())); "
                    + "reported but unchanged\(shape.keyPaths == nil ? "" : " in the observed fields"): \(show(Set(modifications).subtracting(expected).sorted())); "
                    + context,
                delivery: n)
        }
    }
}

enum LDDiff {
    static func ids(_ ids: [Int], limit: Int = 30) -> String {
        ids.count <= limit ? "\(ids)" : "\(Array(ids.prefix(limit))) … (\(ids.count) in all)"
    }

    /// The first difference of two result arrays, with the ids around it.
    static func describe(
        expected: [LDThing], delivered: [LDThing], expectedName: String = "expected", deliveredName: String = "delivered",
        same: (LDThing, LDThing) -> Bool = { $0.same($1) }
    ) -> String {
        let first = (0..<min(expected.count, delivered.count)).first { !same(expected[$0], delivered[$0]) } ?? min(expected.count, delivered.count)
        let from = max(0, first - 3)
        let window = { (things: [LDThing]) -> String in
            let ids = things.map(\.id)
            guard from < ids.count else { return "[] (\(ids.count) in all)" }
            return "…\(Array(ids[from..<min(ids.count, from + 12)]))… (\(ids.count) in all)"
        }
        var text = "first difference at index \(first): \(expectedName) \(window(expected)) vs \(deliveredName) \(window(delivered))"
        if first < expected.count && first < delivered.count && expected[first].id == delivered[first].id {
            text += "; same object, different value: \(expectedName) \(expected[first].short) vs \(deliveredName) \(delivered[first].short)"
        } else {
            if first < expected.count { text += "; \(expectedName)[\(first)] = \(expected[first].short)" }
            if first < delivered.count { text += "; \(deliveredName)[\(first)] = \(delivered[first].short)" }
        }
        return text
    }
}

// MARK: Writes

/// The dictionary model, updated by each write closure as it ends (write closures never overlap:
/// the writer lock, or the writer thread of grouped async writes, runs them one at a time).
final class LDModel: Sendable {
    let objects = Mutex<[Int: LDThing]>([:])
    /// Problems of the write harness itself (unexpected errors, a model out of step).
    let problems = Mutex<[String]>([])

    func problem(_ text: String) { problems.withLock { $0.append(text) } }
}

struct LDRollback: Error {}

enum LDWrites {
    /// Makes the writes of one random transaction in `tx`, mirroring them on a copy of `model`.
    /// Returns the new model and whether the transaction should be thrown away (then the caller
    /// throws `LDRollback`).
    static func run(
        _ tx: Transaction, model: [Int: LDThing], seed: UInt64, objects target: Int, maxOps: Int = 4, rollbackPercent: Int,
        note: (String) -> Void
    ) throws -> (model: [Int: LDThing], rollback: Bool) {
        var rng = SeededRandom(seed: seed)
        var m = model
        let idSpace = target * 2
        func freshID() -> Int {
            for _ in 0..<20 {
                let id = rng.below(idSpace)
                if m[id] == nil { return id }
            }
            return (m.keys.max() ?? 0) + 1
        }
        func update(_ id: Int, _ fields: [LDField], to new: LDThing) throws {
            let stored = try tx.update(LDThing.self, key: id) { object in
                for field in fields { field.copy(from: new, to: &object) }
            }
            if !stored.same(new) { note("update of #\(id) stored \(stored.short), the model expected \(new.short)") }
            m[id] = new
        }
        for _ in 0..<(1 + rng.below(maxOps)) {
            let keys = m.keys.sorted()  // dictionary order varies between runs
            let roll = rng.below(100)
            let someKey = keys.isEmpty ? nil : keys[rng.below(keys.count)]
            guard let id = someKey, !(m.count < target * 9 / 10 && roll < 40), roll >= 14 else {
                let thing = LDThing.random(id: freshID(), &rng)
                try tx.insert(thing)
                m[thing.id] = thing
                continue
            }
            let old = m[id]!
            switch roll {
            case 14..<28:  // one field
                let field = LDField.allCases[rng.below(LDField.allCases.count)]
                var new = old
                field.randomize(&new, &rng)
                try update(id, [field], to: new)
            case 28..<34:  // a partial update of one or two fields, from a dictionary
                let fields = (0..<(1 + rng.below(2))).map { _ in LDField.allCases[rng.below(LDField.allCases.count)] }
                var new = old
                for field in fields { field.randomize(&new, &rng) }
                var patch: [String: Any] = [:]
                for field in fields { field.patch(from: new, into: &patch) }
                let result = try tx.update(LDThing.self, key: id, fields: patch)
                if !result.object.same(new) { note("partial update \(fields) of #\(id) stored \(result.object.short), the model expected \(new.short)") }
                if result.changed == old.same(new) {
                    note("partial update \(fields) of #\(id) says changed: \(result.changed), from \(old.short) to \(new.short)")
                }
                m[id] = new
            case 34..<44:  // several fields
                let fields = (0..<(2 + rng.below(3))).map { _ in LDField.allCases[rng.below(LDField.allCases.count)] }
                var new = old
                for field in fields { field.randomize(&new, &rng) }
                try update(id, fields, to: new)
            case 44..<52:  // only fields the key-path observers do not watch
                let field = LDField.unobserved[rng.below(LDField.unobserved.count)]
                var new = old
                field.randomize(&new, &rng)
                try update(id, [field], to: new)
            case 52..<58:  // identical values
                if rng.below(2) == 0 {
                    try update(id, [LDField.allCases[rng.below(LDField.allCases.count)]], to: old)
                } else {
                    try tx.upsert(old)
                }
            case 58..<64:  // a sort tie or a move: take another object's rank, weight or date
                let other = m[keys[rng.below(keys.count)]]!
                let field = [LDField.rank, .weight, .when, .count][rng.below(4)]
                var new = old
                field.copy(from: other, to: &new)
                try update(id, [field], to: new)
            case 64..<76:  // delete (sometimes a key that is not there)
                if rng.below(8) == 0 {
                    let absent = idSpace + 1 + rng.below(100)
                    if try tx.delete(LDThing.self, key: absent) { note("deleted absent key \(absent)") }
                } else {
                    if try !tx.delete(LDThing.self, key: id) { note("delete of #\(id) found nothing") }
                    m[id] = nil
                }
            case 76..<88:  // upsert: a changed object, or a new one
                let thing = LDThing.random(id: rng.below(3) == 0 ? freshID() : id, &rng)
                try tx.upsert(thing)
                m[thing.id] = thing
            case 88..<92:  // delete(where:)
                let r = rng.below(4), c = rng.below(10)
                let deleted = try tx.delete(LDThing.self, where: #Predicate<LDThing> { $0.rank == r && $0.count == c })
                let gone = m.values.filter { $0.rank == r && $0.count == c }.map(\.id)
                if deleted != gone.count { note("delete(where: rank == \(r) && count == \(c)) deleted \(deleted), the model has \(gone.count)") }
                for key in gone { m[key] = nil }
            case 92..<96:  // a duplicate insert, refused, the transaction goes on
                do {
                    try tx.insert(LDThing.random(id: id, &rng))
                    note("inserting the existing key \(id) did not throw")
                } catch StrataError.duplicateKey {
                }
            default:  // an update whose body changes nothing
                _ = try tx.update(LDThing.self, key: id) { _ in }
            }
        }
        return (m, rng.below(100) < rollbackPercent)
    }

    /// One synchronous transaction (from whatever thread calls it).
    static func syncTransaction(_ db: Database, model: LDModel, seed: UInt64, config: LDConfig, maxOps: Int = 4) {
        do {
            try db.write { tx in
                let start = model.objects.withLock { $0 }
                let (end, rollback) = try run(tx, model: start, seed: seed, objects: config.objects, maxOps: maxOps, rollbackPercent: 5, note: model.problem)
                if rollback { throw LDRollback() }
                model.objects.withLock { $0 = end }
            }
        } catch is LDRollback {
        } catch {
            model.problem("seed \(config.seed): synchronous transaction \(seed) failed: \(error)")
        }
    }
}

final class LDTokens: Sendable {
    let all = Mutex<[NotificationToken]>([])
}

/// Runs `body(i)` on `count` new threads and returns when all have finished.
func ldOnThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) async {
    final class Left: Sendable {
        let value: Atomic<Int>
        init(_ n: Int) { value = Atomic(n) }
    }
    let left = Left(count)
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
        for i in 0..<count {
            let thread = Thread {
                body(i)
                if left.value.subtract(1, ordering: .sequentiallyConsistent).newValue == 0 { done.resume() }
            }
            thread.name = "live-diff-writer-\(i)"
            thread.start()
        }
    }
}
