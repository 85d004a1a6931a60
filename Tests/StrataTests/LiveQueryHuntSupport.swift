import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Strata

// Support for LiveQueryHuntTests / LiveQueryHuntFailingTests: a model that reaches compound,
// collated, full-text and nested-field indexes, observer shapes described twice (as a Strata
// query and as a plain-array reference: Foundation's `evaluate`, `SortDescriptor.compare`, ties by
// id), and a checker that applies each delivered change set to the previous delivery.

/// Declaration order is the order (`<`), not the raw values.
enum LQPriority: Int, Codable, Sendable, Comparable, CaseIterable {
    case urgent = 7, normal = 2, low = -1

    static func < (a: LQPriority, b: LQPriority) -> Bool { allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)! }
}

struct LQDims: Codable, Sendable, Equatable {
    var w: Int
    var h: Int?
}

struct LQItem: Model, Equatable {
    static let indexes: [PartialKeyPath<LQItem> & Sendable] = [\.score, \.price, \.pri, \.dims.w, \.tags]
    static let indexDescriptors: [IndexDescriptor<LQItem>] = [
        .on(\.group, \.score),
        .on(\.group, \.when),
        .on(\.group, \.price),
        .fullText(\.body),
        .on(\.title, collation: .natural),
        .on(\.group, \.title, collation: .caseInsensitive),
    ]
    var id: Int
    var group: Int  // 0..<3
    var score: Int  // 0..<6: many ties
    var price: Double?
    var when: Date
    var title: String
    var body: String
    var pri: LQPriority
    var dims: LQDims
    var tags: [String]

    static let prices: [Double?] = [nil, -2.5, 0, 1, 1.5, 3, 100, nil]
    static let dates: [Date] = [-100, 0, 5, 5.5, 86_400].map { Date(timeIntervalSinceReferenceDate: $0) }
    static let titles = ["room9", "Room10", "room09", "apple", "Banana", "banana", "", "x2", "X10", "\u{C4}rger", "cherry"]
    static let bodies = ["alpha beta", "Beta gamma", "delta", "", "gamma ray beta", "alphabet soup", "GAMMA", "beta-beta"]
    static let tagPool = ["x", "y", "z"]

    static func random(id: Int, _ rng: inout SeededRandom) -> LQItem {
        LQItem(
            id: id, group: rng.below(3), score: rng.below(6), price: prices[rng.below(prices.count)], when: dates[rng.below(dates.count)],
            title: titles[rng.below(titles.count)], body: bodies[rng.below(bodies.count)], pri: LQPriority.allCases[rng.below(3)],
            dims: LQDims(w: rng.below(4), h: rng.below(3) == 0 ? nil : rng.below(3)),
            tags: (0..<rng.below(3)).map { _ in tagPool[rng.below(tagPool.count)] })
    }

    /// The words of `body` as the documented full-text rules read these ASCII texts.
    var words: [String] { body.lowercased().split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "_") }).map(String.init) }
}

/// One observed query, described to Strata and to the plain reference.
struct LQShape: Sendable {
    var name: String
    var predicate: Predicate<LQItem>?
    var sort: [SortDescriptor<LQItem>] = []
    /// A collated sort of `title` (replaces `sort`).
    var collation: (StringCollation, reverse: Bool)?
    /// A full-text search of `body`: terms (a trailing `*` is a prefix), all of them or any.
    var search: (text: String, any: Bool)?
    var offset = 0
    var limit: Int?
    var distinctScore = false
    /// A helper filter (`filter(_:matching:options:)`, `filter(_:equals:)`, `filter(_:contains:)`),
    /// added before the predicate, and what it means on a plain object.
    var helper: (build: @Sendable (Results<LQItem>) -> Results<LQItem>, test: @Sendable (LQItem) -> Bool)?

    func build(_ base: Results<LQItem>) -> Results<LQItem> {
        var r = base
        if let search { r = r.search(\.body, search.any ? TextSearch.anyWord(search.text) : TextSearch(search.text)) }
        if let helper { r = helper.build(r) }
        if let predicate { r = r.filter(predicate) }
        if let (collation, reverse) = collation {
            r = r.sorted(by: [SortDescriptor(\.title, order: reverse ? .reverse : .forward)], collation: collation)
        } else if !sort.isEmpty {
            r = r.sorted(by: sort)
        }
        if distinctScore { r = r.distinct(by: \.score) }
        if offset > 0 { r = r.offset(offset) }
        if let limit { r = r.prefix(limit) }
        return r
    }

    func searchMatches(_ item: LQItem) -> Bool {
        guard let search else { return true }
        let terms = search.text.lowercased().split(separator: " ").map(String.init)
        let words = item.words
        func has(_ term: String) -> Bool {
            term.hasSuffix("*") ? words.contains { $0.hasPrefix(String(term.dropLast())) } : words.contains(term)
        }
        return search.any ? terms.contains(where: has) : terms.allSatisfy(has)
    }

    /// The documented meaning: evaluate, sort (ties by id), distinct, window.
    func reference(_ all: [LQItem]) throws -> [LQItem] {
        var matching = try all.filter { try searchMatches($0) && (helper?.test($0) ?? true) && (predicate?.evaluate($0) ?? true) }
        matching.sort { a, b in
            if let (collation, reverse) = collation {
                let order = oracleCollate(a.title, b.title, collation.options)
                if order != .orderedSame { return reverse ? order == .orderedDescending : order == .orderedAscending }
            } else {
                for d in sort {
                    let order = d.compare(a, b)
                    if order != .orderedSame { return order == .orderedAscending }
                }
            }
            return a.id < b.id
        }
        if distinctScore {
            var seen = Set<Int>()
            matching = matching.filter { seen.insert($0.score).inserted }
        }
        let start = min(offset, matching.count)
        let end = limit.map { min(matching.count, start + $0) } ?? matching.count
        return Array(matching[start..<end])
    }
}

/// One delivery, materialized on the observer's queue.
struct LQDelivery: Sendable {
    var kind: String  // "initial", "update", "error"
    var version: UInt64
    var objects: [LQItem]
    var deletions: [Int] = []
    var insertions: [Int] = []
    var modifications: [Int] = []
    var note: String = ""
}

final class LQSink: Sendable {
    let deliveries = Mutex<[LQDelivery]>([])

    func receive(_ change: ResultsChange<LQItem>) {
        switch change {
        case .initial(let r): add(LQSink.materialize("initial", r))
        case .update(let r, let d, let i, let m):
            var delivery = LQSink.materialize("update", r)
            delivery.deletions = d
            delivery.insertions = i
            delivery.modifications = m
            add(delivery)
        case .error(let e): add(LQDelivery(kind: "error", version: 0, objects: [], note: "\(e)"))
        }
    }

    /// Reads the results three ways (iteration, subscripts, count): all must describe one snapshot.
    static func materialize(_ kind: String, _ r: Results<LQItem>) -> LQDelivery {
        let iterated = Array(r)
        var note = ""
        let count = r.count
        if count != iterated.count { note += "count \(count) but iteration gave \(iterated.count); " }
        let subscripted = (0..<min(count, iterated.count)).map { r[$0] }
        if subscripted != Array(iterated.prefix(subscripted.count)) { note += "subscripts differ from iteration; " }
        if let error = r.error { note += "results.error \(error); " }
        return LQDelivery(kind: kind, version: r.version ?? 0, objects: iterated, note: note)
    }

    private func add(_ d: LQDelivery) { deliveries.withLock { $0.append(d) } }

    var all: [LQDelivery] { deliveries.withLock { $0 } }
}

/// Checks a sequence of deliveries: each change set applied to the previous delivery rebuilds
/// this one, modifications are exactly the kept objects whose value changed, and each delivery is
/// the reference at its version.
struct LQChecker {
    var failures: [String] = []

    mutating func check(_ label: String, _ deliveries: [LQDelivery], reference: (UInt64) -> [LQItem]?) {
        var previous: [LQItem]?
        for (n, d) in deliveries.enumerated() {
            let at = "\(label) delivery #\(n) (\(d.kind), v\(d.version))"
            if !d.note.isEmpty { failures.append("\(at): \(d.note)") }
            switch d.kind {
            case "initial":
                if previous != nil { failures.append("\(at): a second .initial") }
            case "update":
                guard let old = previous else {
                    failures.append("\(at): update before initial")
                    break
                }
                if d.deletions.isEmpty && d.insertions.isEmpty && d.modifications.isEmpty { failures.append("\(at): empty change set") }
                if let problem = LQChecker.apply(old, d) { failures.append("\(at): \(problem)") }
            default:
                failures.append("\(at): error \(d.note)")
                continue
            }
            if let expected = reference(d.version), expected != d.objects {
                failures.append("\(at): delivered \(d.objects.map(\.id)) but the reference at that version is \(expected.map(\.id))")
            }
            previous = d.objects
        }
    }

    /// Nil when the change set turns `old` into `d.objects` with exact modifications.
    static func apply(_ old: [LQItem], _ d: LQDelivery) -> String? {
        let new = d.objects
        let context = "old \(old.map(\.id)) new \(new.map(\.id)) del \(d.deletions) ins \(d.insertions) mod \(d.modifications)"
        for list in [d.deletions, d.insertions, d.modifications] where zip(list, list.dropFirst()).contains(where: { $0 >= $1 }) {
            return "indices not ascending: \(context)"
        }
        guard d.deletions.allSatisfy({ $0 >= 0 && $0 < old.count }) else { return "deletion out of range: \(context)" }
        guard d.modifications.allSatisfy({ $0 >= 0 && $0 < new.count }) else { return "modification out of range: \(context)" }
        var applied = old
        for i in d.deletions.reversed() { applied.remove(at: i) }
        let kept = applied
        for j in d.insertions {
            guard j >= 0, j <= applied.count, j < new.count else { return "insertion out of range: \(context)" }
            applied.insert(new[j], at: j)
        }
        guard applied.map(\.id) == new.map(\.id) else { return "change set does not rebuild the new results (gives \(applied.map(\.id))): \(context)" }
        let inserted = Set(d.insertions)
        let keptNew = new.indices.filter { !inserted.contains($0) }
        let changed = zip(kept, keptNew).filter { $0.0 != new[$0.1] }.map(\.1)
        if changed != d.modifications { return "modifications \(d.modifications), but the kept objects that changed are \(changed): \(context)" }
        return nil
    }
}

/// Versions → the model's objects after that commit (the reference's input).
final class LQHistory: Sendable {
    private let states = Mutex<[(version: UInt64, objects: [LQItem])]>([])

    func record(_ version: UInt64, _ objects: [Int: LQItem]) {
        let sorted = objects.values.sorted { $0.id < $1.id }
        states.withLock { $0.append((version, sorted)) }
    }

    /// The objects at `version`: those of the newest recorded commit not after it.
    func objects(at version: UInt64) -> [LQItem]? {
        states.withLock { s in s.last(where: { $0.version <= version })?.objects }
    }
}

enum LQWait {
    /// Polls `done` until it holds or 20 s pass.
    static func until(_ seconds: Double = 20, _ done: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if done() { return true }
            usleep(1_000)
        }
        return done()
    }

    /// `until` for async tests: sleeping the task instead of the thread, so that the tasks the
    /// condition waits for get the cooperative pool (two threads on two cores; blocked by polling
    /// loops under a parallel test run, they never ran).
    static func untilAsync(_ seconds: Double = 30, _ done: () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if done() { return true }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return done()
    }

    static func tempPath(_ tag: String) -> String { NSTemporaryDirectory() + "strata-lqhunt-\(tag)-\(UUID().uuidString).strata" }

    static func remove(_ path: String) { for suffix in ["", "-lock"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
}
