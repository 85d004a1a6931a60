import Dispatch
import Foundation
import StrataStorage
import Synchronization
import Testing

@testable import Strata

// Support for the HuntD tests (concurrency and lifecycles): a model, a seeded generator, a checker
// that applies every delivered change set to a mirror of the previous delivery, and polling.

struct HDItem: Model, Equatable {
    static let indexes: [PartialKeyPath<HDItem> & Sendable] = [\.group, \.score]
    var id: Int
    var name: String
    var group: Int
    var score: Int
    var note: String
}

struct HDRng: Sendable {
    var state: UInt64
    init(_ seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }

    mutating func item(id: Int) -> HDItem {
        HDItem(
            id: id, name: ["ana", "ben", "cleo", "dan", "eve", "Ana", "zoë", ""][below(8)], group: below(3),
            score: below(100), note: "n\(below(5))")
    }

    /// One random operation in a write transaction on ids `0..<ids`. Errors (a missing key, a
    /// duplicate) are caught so that the transaction goes on.
    mutating func operate(_ tx: Transaction, ids: Int) throws {
        let id = below(ids)
        switch below(6) {
        case 0, 1: try tx.upsert(item(id: id))
        case 2:
            let score = below(100)
            _ = try? tx.update(HDItem.self, key: id) { $0.score = score }
        case 3:
            let note = "m\(below(4))"
            _ = try? tx.update(HDItem.self, key: id) { $0.note = note }
        case 4: _ = try tx.delete(HDItem.self, key: id)
        default:
            let name = ["ana", "ben", "cleo", "bob"][below(4)]
            _ = try? tx.update(HDItem.self, key: id) { $0.name = name }
        }
    }
}

/// Polls `condition` until it holds or `seconds` pass.
func hdEventually(seconds: Double = 10, _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return condition()
}

/// `hdEventually` for a condition that must come to hold: past `seconds`, it keeps polling while
/// the test pool's threads still get turns (`poolEventually`), so that a loaded two-core machine,
/// whose pool other tests hold for seconds, does not fail the wait. For a condition that may
/// rightly never hold, `hdEventually` gives up at the deadline.
func hdPatiently(seconds: Double = 30, _ condition: () -> Bool) async -> Bool {
    (try? await poolEventually(seconds: seconds, condition)) ?? false
}

/// Blocking version for threads.
func hdEventuallySync(seconds: Double = 10, _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if condition() { return true }
        usleep(2000)
    }
    return condition()
}

func hdPath(_ name: String) -> String {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("huntd-\(UUID().uuidString)")
    try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    return dir.appendingPathComponent("\(name).strata").path
}

/// Applies each delivered change to a mirror of the previous delivery and checks the result.
final class HDMirror: Sendable {
    struct State {
        var mirror: [HDItem]?
        var failures: [String] = []
        var deliveries = 0
        var updates = 0
        var lastVersion: UInt64 = 0
        var errors: [StrataError] = []
        var afterClose = 0
        var closed = false
        var lastFlagged = false
    }

    let label: String
    /// Whether an unchanged object listed as modified is a failure (not with keyPaths).
    let strictModifications: Bool
    /// What is compared (with `keyPaths`, only the observed fields and what places the row).
    let project: @Sendable (HDItem) -> HDItem
    let state = Mutex(State())

    init(_ label: String, strictModifications: Bool = true, project: @escaping @Sendable (HDItem) -> HDItem = { $0 }) {
        self.label = label
        self.strictModifications = strictModifications
        self.project = project
    }

    var mirror: [HDItem]? { state.withLock { $0.mirror } }
    var failures: [String] { state.withLock { $0.failures } }
    var closedCount: Int { state.withLock { s in s.errors.filter { $0 == .databaseClosed }.count } }
    var deliveries: Int { state.withLock { $0.deliveries } }

    func take(_ change: ResultsChange<HDItem>) {
        state.withLock { s in
            s.deliveries += 1
            if s.closed { s.afterClose += 1; s.failures.append("\(label): a delivery after .error(.databaseClosed): \(change)") }
            switch change {
            case .initial(let results):
                if s.mirror != nil { s.failures.append("\(label): a second .initial") }
                s.mirror = Array(results).map(project)
                s.lastVersion = results.version ?? 0
            case .update(let results, let deletions, let insertions, let modifications):
                s.updates += 1
                guard var m = s.mirror else {
                    s.failures.append("\(label): .update before .initial")
                    return
                }
                let new = Array(results).map(project)
                let version = results.version ?? 0
                if version < s.lastVersion { s.failures.append("\(label): version went back \(s.lastVersion) → \(version)") }
                s.lastVersion = version
                func ascending(_ a: [Int]) -> Bool { zip(a, a.dropFirst()).allSatisfy { $0 < $1 } }
                if !ascending(deletions) || !ascending(insertions) || !ascending(modifications) {
                    s.failures.append("\(label): indices not strictly ascending d=\(deletions) i=\(insertions) m=\(modifications)")
                }
                if deletions.isEmpty && insertions.isEmpty && modifications.isEmpty {
                    s.failures.append("\(label): an empty update at v\(version)")
                }
                let old = m
                guard deletions.allSatisfy({ $0 >= 0 && $0 < m.count }) else {
                    s.failures.append("\(label): deletion out of range \(deletions) of \(m.count) at v\(version)")
                    s.mirror = new
                    return
                }
                for i in deletions.reversed() { m.remove(at: i) }
                for i in insertions {
                    guard i >= 0, i <= m.count, i < new.count else {
                        s.failures.append("\(label): insertion out of range \(i) at v\(version)")
                        s.mirror = new
                        return
                    }
                    m.insert(new[i], at: i)
                }
                for i in modifications {
                    guard i >= 0, i < m.count, i < new.count else {
                        s.failures.append("\(label): modification out of range \(i) at v\(version)")
                        s.mirror = new
                        return
                    }
                    if m[i].id != new[i].id { s.failures.append("\(label): modification \(i) names another object at v\(version)") }
                    if strictModifications && m[i] == new[i] && !insertions.contains(i) {
                        s.failures.append("\(label): modification \(i) of an unchanged object \(new[i]) at v\(version)")
                    }
                    m[i] = new[i]
                }
                if m != new {
                    s.failures.append(
                        "\(label): change set does not turn the previous delivery into the new one at v\(version): d=\(deletions) i=\(insertions) m=\(modifications)\n old=\(old.map(\.id))\n got=\(m.map { "\($0.id):\($0.score):\($0.note)" })\n new=\(new.map { "\($0.id):\($0.score):\($0.note)" })"
                    )
                }
                s.mirror = new
            case .error(let error):
                s.errors.append(error)
                if error == .databaseClosed { s.closed = true }
            }
        }
    }
}

/// The observed query shapes: key order (incremental), a filter with a number sort (incremental),
/// a string sort (evaluated again), a window, a reverse sort with a filter.
enum HDQuery: Int, CaseIterable, Sendable {
    case byKey, groupByScore, byName, topTen, reverseNote

    func results(_ db: Database) -> Results<HDItem> {
        apply(db.objects(HDItem.self))
    }

    func apply(_ all: Results<HDItem>) -> Results<HDItem> {
        switch self {
        case .byKey: return all
        case .groupByScore:
            return all.filter(#Predicate { $0.group == 1 }).sorted(by: SortDescriptor(\.score))
        case .byName:
            return all.sorted(by: SortDescriptor(\.name), SortDescriptor(\.score, order: .reverse))
        case .topTen:
            return all.filter(#Predicate { $0.score >= 30 }).sorted(by: SortDescriptor(\.score, order: .reverse)).prefix(10)
        case .reverseNote:
            return all.filter(#Predicate { $0.note != "n0" }).sorted(by: SortDescriptor(\.score, order: .reverse))
        }
    }
}

/// Outcomes of writes of unique ids: true committed, false failed (with a wrong error noted).
final class HDOutcomes: Sendable {
    let outcomes = Mutex<[Int: Bool]>([:])
    let wrongErrors = Mutex<[String]>([])
    let doubles = Mutex<[Int]>([])

    func record(_ id: Int, _ result: Result<Void, any Error>) {
        let again = outcomes.withLock { o -> Bool in
            defer {
                if case .success = result { o[id] = true } else { o[id] = false }
            }
            return o[id] != nil
        }
        if again { doubles.withLock { $0.append(id) } }
        if case .failure(let error) = result, (error as? StrataError) != .databaseClosed {
            wrongErrors.withLock { $0.append("write \(id): \(error)") }
        }
    }
}

/// A counter and notes, shared with tasks and threads.
final class HDBox: Sendable {
    let count = Atomic<Int>(0)
    let notes = Mutex<[String]>([])
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
    func note(_ s: String) { notes.withLock { $0.append(s) } }
    var all: [String] { notes.withLock { $0 } }
}
