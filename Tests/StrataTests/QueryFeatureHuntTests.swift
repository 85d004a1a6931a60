import Testing
import Foundation
@testable import Strata

// Independent hunt for wrong answers in the newer query features: compound indexes, collated
// sorts and indexes, full-text search and live results on them. The reference is always
// Foundation (`Predicate.evaluate`, `SortDescriptor.compare`) on a plain array of every object,
// or the documented rules (NaN above every number, -0.0 == 0.0, collations, word rules).
//
// The hunt (2026-12-04) found no wrong answer; these are coverage tests for ground the existing
// differential suites do not reach (random seeds via QF_SEED).

struct QFItem: Model {
    static let indexDescriptors: [IndexDescriptor<QFItem>] = [
        .on(\.group, \.score),
        .on(\.group, \.when),
        .on(\.tag, \.rank),
        .on(\.flag, \.group, \.n),
        .on(\.name, collation: .natural),
        .on(\.group, \.name, collation: .caseInsensitive),
        .fullText(\.text),
    ]
    var id: Int
    var group: Int
    var score: Double
    var when: Date
    var tag: String
    var rank: Int?
    var flag: Bool
    var n: Int
    var name: String
    var text: String
}

/// The words of each vocabulary token, folded, as the documented word rules give them.
enum QFWords {
    static let vocabulary: [(token: String, words: [String])] = [
        ("Hello", ["hello"]), ("help!", ["help"]), ("H\u{C9}LIUM", ["helium"]), ("caf\u{E9}", ["cafe"]), ("CAFE", ["cafe"]),
        ("don't", ["don't"]), ("\u{6771}\u{4EAC}", ["\u{6771}", "\u{4EAC}"]), ("\u{1F600}", []), ("x_y", ["x_y"]), ("3.14", ["3.14"]),
        ("tea", ["tea"]), ("coffee,", ["coffee"]), ("see", ["see"]), ("you", ["you"]), ("soon.", ["soon"]), ("he", ["he"]),
    ]
}

func qfSortKey(_ d: Double) -> Double { d == 0 ? 0 : d }  // -0.0 ties with 0.0

/// Documented Double order: NaN above every number, -0.0 == 0.0.
func qfCompare(_ a: Double, _ b: Double) -> ComparisonResult {
    if a.isNaN && b.isNaN { return .orderedSame }
    if a.isNaN { return .orderedDescending }
    if b.isNaN { return .orderedAscending }
    if a < b { return .orderedAscending }
    if b < a { return .orderedDescending }
    return .orderedSame
}

struct QFWorld {
    var rng: SeededRandom
    var objects: [Int: QFItem] = [:]
    var textWords: [Int: [String]] = [:]
    var nextId = 1

    init(seed: UInt64) { rng = SeededRandom(seed: seed) }

    static let groups: [Int] = [-2, -1, 0, 1, .min, .max]
    static let scores: [Double] = [-0.0, 0.0, 1.5, -1.5, .nan, .infinity, -.infinity, 2.0, 1.5]
    static let dates: [Date] = [
        .distantPast, .distantFuture, Date(timeIntervalSinceReferenceDate: 0), Date(timeIntervalSinceReferenceDate: -1),
        Date(timeIntervalSinceReferenceDate: 1), Date(timeIntervalSinceReferenceDate: 1e9),
    ]
    static let tags = ["", "a", "\u{E9}", "e\u{301}", "A", "ab", "a\u{0}", "\u{1F600}"]
    static let ranks: [Int?] = [nil, -1, 0, 1, .min, .max, 1]
    static let names = ["room9", "room10", "Room010", "ROOM9", "", "apple", "Apple", "\u{C4}pfel", "\u{E9}clair", "Eclair", "b", "B", "a1", "a01"]

    mutating func pick<T>(_ a: [T]) -> T { a[rng.below(a.count)] }

    mutating func make(id: Int) -> QFItem {
        var tokens: [String] = []
        var words: [String] = []
        for _ in 0..<rng.below(5) {
            let v = pick(QFWords.vocabulary)
            tokens.append(v.token)
            words += v.words
        }
        textWords[id] = words
        return QFItem(
            id: id, group: rng.below(3) == 0 ? pick(Self.groups) : rng.below(2), score: pick(Self.scores), when: pick(Self.dates),
            tag: pick(Self.tags), rank: pick(Self.ranks), flag: rng.below(2) == 0, n: rng.below(5) - 2, name: pick(Self.names),
            text: tokens.joined(separator: " "))
    }

    mutating func insert(_ tx: Transaction, count: Int) throws {
        for _ in 0..<count {
            let o = make(id: nextId)
            nextId += 1
            try tx.insert(o)
            objects[o.id] = o
        }
    }

    mutating func randomWrites(_ tx: Transaction, count: Int) throws {
        for _ in 0..<count {
            let keys = objects.keys.sorted()
            switch rng.below(4) {
            case 0:
                try insert(tx, count: 1)
            case 1 where !keys.isEmpty:
                let k = pick(keys)
                try tx.delete(QFItem.self, key: k)
                objects[k] = nil
                textWords[k] = nil
            default:
                guard !keys.isEmpty else { continue }
                let k = pick(keys)
                var o = make(id: k)
                // Keep some fields, move others between prefixes.
                if rng.below(2) == 0 { o.group = objects[k]!.group }
                if rng.below(2) == 0 { o.tag = objects[k]!.tag }
                let updated = o
                try tx.update(QFItem.self, key: k) { $0 = updated }
                objects[k] = o
            }
        }
    }

    var all: [QFItem] { objects.values.sorted { $0.id < $1.id } }
}

/// One query of the hunt: the Strata results and the expected ids computed from plain arrays.
struct QFCase {
    var label: String
    var results: Results<QFItem>
    var expected: [Int]
    var objects: [QFItem] = []
}

enum QFCheck {
    /// Sorted by `compare` with ties by id.
    static func sorted(_ objects: [QFItem], _ compare: (QFItem, QFItem) -> ComparisonResult) -> [QFItem] {
        objects.sorted { a, b in
            switch compare(a, b) {
            case .orderedAscending: return true
            case .orderedDescending: return false
            case .orderedSame: return a.id < b.id
            }
        }
    }

    static func window(_ ids: [Int], offset: Int, limit: Int?) -> [Int] {
        let start = min(offset, ids.count)
        let end = limit.map { min(ids.count, start + $0) } ?? ids.count
        return Array(ids[start..<end])
    }

    /// Every reading of `results` against `expected`; returns a failure text or nil.
    static func verify(_ c: QFCase) -> String? {
        var problems: [String] = []
        let r = c.results
        do {
            let got = try r.fetch().map(\.id)
            if got != c.expected { problems.append("fetch \(got.prefix(30)) vs expected \(c.expected.prefix(30))") }
        } catch { problems.append("fetch threw \(error)") }
        if let n = try? r.fetchCount(), n != c.expected.count { problems.append("fetchCount \(n) vs \(c.expected.count)") }
        let fresh = c.results
        if fresh.count != c.expected.count { problems.append("count \(fresh.count) vs \(c.expected.count)") }
        if r.first?.id != c.expected.first { problems.append("first \(String(describing: r.first?.id)) vs \(String(describing: c.expected.first))") }
        if r.last?.id != c.expected.last { problems.append("last \(String(describing: r.last?.id)) vs \(String(describing: c.expected.last))") }
        if r.count == c.expected.count {
            let byIndex = (0..<r.count).map { r[$0].id }
            if byIndex != c.expected { problems.append("results[i] \(byIndex.prefix(30))") }
            if c.expected.count >= 3 {
                let page = r.objects(in: 1..<(c.expected.count - 1)).map(\.id)
                if page != Array(c.expected[1..<(c.expected.count - 1)]) { problems.append("objects(in:) \(page.prefix(30))") }
            }
        }
        // Aggregates, on the documented orders: NaN above every number.
        let e = c.objects
        let maxScore = e.contains { $0.score.isNaN } ? Double.nan : e.map(\.score).max()
        let minScore = e.allSatisfy { $0.score.isNaN } ? (e.isEmpty ? nil : Double.nan) : e.filter { !$0.score.isNaN }.map(\.score).min()
        func same(_ a: Double?, _ b: Double?) -> Bool { a == b || (a?.isNaN == true && b?.isNaN == true) }
        if !same(r.max(of: \.score), maxScore) {
            problems.append("max(of: score) \(String(describing: r.max(of: \.score))) vs \(String(describing: maxScore))")
        }
        if !same(r.min(of: \.score), minScore) {
            problems.append("min(of: score) \(String(describing: r.min(of: \.score))) vs \(String(describing: minScore))")
        }
        if r.min(of: \.n) != e.map(\.n).min() { problems.append("min(of: n) \(String(describing: r.min(of: \.n))) vs \(String(describing: e.map(\.n).min()))") }
        if r.max(of: \.rank) != e.compactMap(\.rank).max() {
            problems.append("max(of: rank) \(String(describing: r.max(of: \.rank))) vs \(String(describing: e.compactMap(\.rank).max()))")
        }
        if r.max(of: \.when) != e.map(\.when).max() { problems.append("max(of: when)") }
        if r.sum(of: \.n) != e.reduce(0, { $0 + $1.n }) { problems.append("sum(of: n) \(r.sum(of: \.n)) vs \(e.reduce(0) { $0 + $1.n })") }
        if r.keys.count != c.expected.count { problems.append("keys.count \(r.keys.count)") }
        if problems.isEmpty { return nil }
        return "\(c.label)\n    " + problems.joined(separator: "\n    ") + "\n    plan: " + r.explain().replacingOccurrences(of: "\n", with: " | ")
    }
}

extension QFWorld {
    /// A random query on compound, collated and full-text indexes, with its expected ids.
    mutating func makeCase(_ db: Database) -> QFCase {
        let all = self.all
        let base = db.objects(QFItem.self)
        let order: SortOrder = rng.below(2) == 0 ? .forward : .reverse
        let rev = order == .reverse
        func dir(_ c: ComparisonResult) -> ComparisonResult {
            guard rev else { return c }
            switch c {
            case .orderedAscending: return .orderedDescending
            case .orderedDescending: return .orderedAscending
            case .orderedSame: return .orderedSame
            }
        }
        func cmp<T: Comparable>(_ a: T, _ b: T) -> ComparisonResult { a < b ? .orderedAscending : (b < a ? .orderedDescending : .orderedSame) }
        func cmpOpt(_ a: Int?, _ b: Int?) -> ComparisonResult {
            switch (a, b) {
            case (nil, nil): return .orderedSame
            case (nil, _): return .orderedAscending
            case (_, nil): return .orderedDescending
            case let (x?, y?): return cmp(x, y)
            }
        }
        let g = rng.below(4) == 0 ? pick(Self.groups) : rng.below(2)
        var label = ""
        var results: Results<QFItem>
        var expected: [QFItem]
        switch rng.below(16) {
        case 14:
            let lo = pick(Self.scores)
            let list = [g, pick(Self.groups), g]
            let p = #Predicate<QFItem> { list.contains($0.group) && $0.score >= lo }
            label = "group in \(list) && score >= \(lo), unsorted"
            results = base.filter(p)
            expected = all.filter { try! p.evaluate($0) }
        case 15:
            let b = rng.below(2) == 0
            let k = rng.below(5) - 2
            let p = #Predicate<QFItem> { $0.flag == b && $0.group == g && $0.n > k }
            label = "flag == \(b) && group == \(g) && n > \(k), unsorted"
            results = base.filter(p)
            expected = all.filter { try! p.evaluate($0) }
        case 0:
            let x = pick(Self.scores)
            let op = rng.below(5)
            let p: Predicate<QFItem>
            switch op {
            case 0: p = #Predicate { $0.group == g }
            case 1: p = #Predicate { $0.group == g && $0.score > x }
            case 2: p = #Predicate { $0.group == g && $0.score >= x }
            case 3: p = #Predicate { $0.group == g && $0.score < x }
            default: p = #Predicate { $0.group == g && $0.score <= x }
            }
            label = "group == \(g) op\(op) score \(x), sort score \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.score, order: order))
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { dir(qfCompare($0.score, $1.score)) }
        case 1:
            let lo = pick(Self.scores), hi = pick(Self.scores)
            let p = #Predicate<QFItem> { $0.group == g && $0.score > lo && $0.score < hi }
            label = "group == \(g) && score > \(lo) && score < \(hi), sort score \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.score, order: order))
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { dir(qfCompare($0.score, $1.score)) }
        case 2:
            let d = pick(Self.dates)
            let p: Predicate<QFItem> = rng.below(2) == 0 ? #Predicate { $0.group == g && $0.when < d } : #Predicate { $0.group == g && $0.when >= d }
            label = "group == \(g) && when </>= \(d), sort when \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.when, order: order))
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { dir(cmp($0.when, $1.when)) }
        case 3:
            let t = pick(Self.tags)
            let p = #Predicate<QFItem> { $0.tag == t }
            label = "tag == \(t.unicodeScalars.map { String($0.value, radix: 16) }), sort rank \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.rank, order: order))
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { dir(cmpOpt($0.rank, $1.rank)) }
        case 4:
            let t = pick(Self.tags)
            let r = pick(Self.ranks) ?? 0
            let p: Predicate<QFItem> =
                rng.below(2) == 0 ? #Predicate { $0.tag == t && $0.rank != nil && $0.rank! > r } : #Predicate { $0.tag == t && $0.rank == nil }
            label = "tag == \(t.unicodeScalars.map { String($0.value, radix: 16) }) && rank (> \(r) | nil), sort rank \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.rank, order: order))
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { dir(cmpOpt($0.rank, $1.rank)) }
        case 5:
            let b = rng.below(2) == 0
            let p = #Predicate<QFItem> { $0.flag == b && $0.group == g }
            label = "flag == \(b) && group == \(g), sort n \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.n, order: order))
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { dir(cmp($0.n, $1.n)) }
        case 6:
            let b = rng.below(2) == 0
            let k = rng.below(5) - 2, m = rng.below(5) - 2
            let p = #Predicate<QFItem> { $0.flag == b && $0.group == g && $0.n >= k && $0.n < m }
            label = "flag == \(b) && group == \(g) && n in \(k)..<\(m), sort n \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.n, order: order))
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { dir(cmp($0.n, $1.n)) }
        case 7:
            let b = rng.below(2) == 0
            let p = #Predicate<QFItem> { $0.flag == b }
            label = "flag == \(b), sort group, n \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.group, order: order), SortDescriptor(\.n, order: order))
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { a, c in
                let x = dir(cmp(a.group, c.group))
                return x != .orderedSame ? x : dir(cmp(a.n, c.n))
            }
        case 8:
            let p = #Predicate<QFItem> { $0.group == g }
            label = "group == \(g), sort name caseInsensitive \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.name, order: order), collation: .caseInsensitive)
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { dir(oracleCollate($0.name, $1.name, [.caseInsensitive])) }
        case 9:
            let k = rng.below(5) - 2
            let p = #Predicate<QFItem> { $0.n >= k }
            label = "n >= \(k), sort name natural \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.name, order: order), collation: .natural)
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { dir(oracleCollate($0.name, $1.name, StringCollation.natural.options)) }
        case 10:
            let searches: [(TextSearch, ([String]) -> Bool)] = [
                ("hel*", { $0.contains { $0.hasPrefix("hel") } }),
                ("CAF\u{C9}", { $0.contains("cafe") }),
                (.anyWord("tea coffee"), { $0.contains("tea") || $0.contains("coffee") }),
                ("he* tea", { $0.contains { $0.hasPrefix("he") } && $0.contains("tea") }),
                (.phrase("see you"), { w in w.indices.dropLast().contains { w[$0] == "see" && w[$0 + 1] == "you" } }),
                ("\u{6771}", { $0.contains("\u{6771}") }),
                ("don't", { $0.contains("don't") }),
                ("3.14 x_y", { $0.contains("3.14") && $0.contains("x_y") }),
                (.phrase("you so*"), { w in w.indices.dropLast().contains { w[$0] == "you" && w[$0 + 1].hasPrefix("so") } }),
            ]
            let (s, matches) = pick(searches)
            let withGroup = rng.below(2) == 0
            let p = #Predicate<QFItem> { $0.group == g }
            label = "search \(s)\(withGroup ? " && group == \(g)" : ""), sort score \(order)"
            results = base.search(\.text, s)
            if withGroup { results = results.filter(p) }
            results = results.sorted(by: SortDescriptor(\.score, order: order))
            let tw = textWords
            expected = QFCheck.sorted(all.filter { matches(tw[$0.id]!) && (!withGroup || $0.group == g) }) { dir(qfCompare($0.score, $1.score)) }
        case 11:
            let list = [g, pick(Self.groups)]
            let p = #Predicate<QFItem> { list.contains($0.group) }
            label = "group in \(list), sort score \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.score, order: order))
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { dir(qfCompare($0.score, $1.score)) }
        case 12:
            let t = pick(Self.tags)
            let r = pick(Self.ranks)
            let p = #Predicate<QFItem> { $0.tag == t && $0.rank == r }
            label = "tag == \(t.unicodeScalars.map { String($0.value, radix: 16) }) && rank == \(String(describing: r)), sort id \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.id, order: order))
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { dir(cmp($0.id, $1.id)) }
        default:
            let nm = pick(Self.names)
            let p = #Predicate<QFItem> { $0.group == g && $0.name == nm }
            label = "group == \(g) && name == \(nm), sort n \(order)"
            results = base.filter(p).sorted(by: SortDescriptor(\.n, order: order))
            expected = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { dir(cmp($0.n, $1.n)) }
        }
        switch rng.below(8) {
        case 0:
            results = results.distinct(by: \.tag)
            var seen: [String] = []
            expected = expected.filter { o in
                if seen.contains(where: { $0 == o.tag }) { return false }
                seen.append(o.tag)
                return true
            }
            label += " distinct(by: tag)"
        case 1:
            results = results.distinct(by: \.score, \.flag)
            var seen: [(Double, Bool)] = []
            expected = expected.filter { o in
                // A NaN field is one group with every other NaN (documented).
                if seen.contains(where: { ($0.0 == o.score || ($0.0.isNaN && o.score.isNaN)) && $0.1 == o.flag }) { return false }
                seen.append((o.score, o.flag))
                return true
            }
            label += " distinct(by: score, flag)"
        default: break
        }
        var ids = expected.map(\.id)
        if rng.below(2) == 0 {
            let offset = rng.below(3) == 0 ? rng.below(ids.count + 2) : 0
            let limit: Int? = rng.below(3) == 0 ? nil : rng.below(ids.count + 2)
            if offset > 0 { results = results.offset(offset) }
            if let limit { results = results.prefix(limit) }
            ids = QFCheck.window(ids, offset: offset, limit: limit)
            label += " window offset \(offset) limit \(String(describing: limit))"
        }
        let byId = self.objects
        return QFCase(label: label, results: results, expected: ids, objects: ids.map { byId[$0]! })
    }
}

@Suite struct QueryFeatureHuntTests {
    @Test func compoundCollatedAndTextQueriesMatchPlainArrays() throws {
        let seed: UInt64 = ProcessInfo.processInfo.environment["QF_SEED"].flatMap { UInt64($0) } ?? 4242
        var world = QFWorld(seed: seed)
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let options = StoreOptions(durability: .noSync)
        var db = try Database(path: path, models: [QFItem.self], options: options)
        try db.write { tx in try world.insert(tx, count: 150) }
        var failures: [String] = []
        for round in 0..<5 {
            if round > 0 {
                if round == 3 {
                    db.close()
                    db = try Database(path: path, models: [QFItem.self], options: options)
                }
                try db.write { tx in try world.randomWrites(tx, count: 60) }
            }
            for _ in 0..<120 {
                let c = world.makeCase(db)
                if let f = QFCheck.verify(c) { failures.append(f) }
            }
        }
        for f in failures.prefix(8) { Issue.record("seed \(seed): \(f)") }
        #expect(failures.isEmpty, "seed \(seed): \(failures.count) failing cases")
    }
}

// MARK: Live results

/// A value-level fingerprint of an object (NaN-safe, unlike `==`).
func qfShow(_ o: QFItem) -> String {
    "\(o.id)|\(o.group)|\(o.score)|\(o.when.timeIntervalSinceReferenceDate)|\(o.tag.unicodeScalars.map(\.value))|\(String(describing: o.rank))|\(o.flag)|\(o.n)|\(o.name)|\(o.text)"
}

/// Applies each delivered change to a mirror and checks it against the delivered results.
// @unchecked: every stored var is read and written only while `lock` is held.
final class QFMirror: @unchecked Sendable {
    let lock = NSLock()
    var mirror: [QFItem] = []
    var deliveries = 0
    var problems: [String] = []
    let label: String
    init(label: String) { self.label = label }

    func apply(_ change: ResultsChange<QFItem>) {
        lock.lock()
        defer { lock.unlock() }
        deliveries += 1
        switch change {
        case .initial(let results):
            mirror = Array(results)
        case .update(let results, let deletions, let insertions, let modifications):
            let all = Array(results)
            for i in deletions.reversed() {
                guard i < mirror.count else { problems.append("\(label): deletion \(i) out of range \(mirror.count)"); return }
                mirror.remove(at: i)
            }
            for i in insertions {
                guard i <= mirror.count, i < all.count else { problems.append("\(label): insertion \(i) out of range"); return }
                mirror.insert(all[i], at: i)
            }
            for i in modifications {
                guard i < mirror.count, i < all.count else { problems.append("\(label): modification \(i) out of range"); return }
                mirror[i] = all[i]
            }
            if mirror.map(qfShow) != all.map(qfShow) {
                problems.append(
                    "\(label): delivery \(deliveries): mirror after applying d\(deletions) i\(insertions) m\(modifications) is \(mirror.map(\.id)), results \(all.map(\.id))"
                )
                mirror = all
            }
        case .error(let error):
            problems.append("\(label): error \(error)")
        }
    }

    var snapshot: (ids: [String], problems: [String]) {
        lock.lock()
        defer { lock.unlock() }
        return (mirror.map(qfShow), problems)
    }

    var deliveryCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return deliveries
    }
}

struct QFLiveQuery {
    var label: String
    var results: (Database) -> Results<QFItem>
    var expected: ([QFItem], [Int: [String]]) -> [QFItem]
}

extension QFLiveQuery {
    static func all() -> [QFLiveQuery] {
        func cmp<T: Comparable>(_ a: T, _ b: T) -> ComparisonResult { a < b ? .orderedAscending : (b < a ? .orderedDescending : .orderedSame) }
        func rev(_ c: ComparisonResult) -> ComparisonResult { c == .orderedAscending ? .orderedDescending : (c == .orderedDescending ? .orderedAscending : c) }
        let g = 1
        let p = #Predicate<QFItem> { $0.group == g }
        let q = #Predicate<QFItem> { $0.flag == true && $0.group == g }
        return [
            QFLiveQuery(
                label: "group == 1 sort score reverse",
                results: { $0.objects(QFItem.self).filter(p).sorted(by: SortDescriptor(\.score, order: .reverse)) },
                expected: { a, _ in QFCheck.sorted(a.filter { $0.group == g }) { rev(qfCompare($0.score, $1.score)) } }),
            QFLiveQuery(
                label: "group == 1 sort score prefix 5",
                results: { $0.objects(QFItem.self).filter(p).sorted(by: SortDescriptor(\.score)).prefix(5) },
                expected: { a, _ in Array(QFCheck.sorted(a.filter { $0.group == g }) { qfCompare($0.score, $1.score) }.prefix(5)) }),
            QFLiveQuery(
                label: "flag && group == 1 sort n reverse offset 2 prefix 4",
                results: { $0.objects(QFItem.self).filter(q).sorted(by: SortDescriptor(\.n, order: .reverse)).offset(2).prefix(4) },
                expected: { a, _ in Array(QFCheck.sorted(a.filter { $0.flag && $0.group == g }) { rev(cmp($0.n, $1.n)) }.dropFirst(2).prefix(4)) }),
            QFLiveQuery(
                label: "sort name natural",
                results: { $0.objects(QFItem.self).sorted(by: SortDescriptor(\.name), collation: .natural) },
                expected: { a, _ in QFCheck.sorted(a) { oracleCollate($0.name, $1.name, StringCollation.natural.options) } }),
            QFLiveQuery(
                label: "group == 1 sort name caseInsensitive reverse prefix 6",
                results: {
                    $0.objects(QFItem.self).filter(p).sorted(by: SortDescriptor(\.name, order: .reverse), collation: .caseInsensitive).prefix(6)
                },
                expected: { a, _ in
                    Array(QFCheck.sorted(a.filter { $0.group == g }) { rev(oracleCollate($0.name, $1.name, [.caseInsensitive])) }.prefix(6))
                }),
            QFLiveQuery(
                label: "search hel* sort rank",
                results: { $0.objects(QFItem.self).search(\.text, "hel*").sorted(by: SortDescriptor(\.n)) },
                expected: { a, w in QFCheck.sorted(a.filter { w[$0.id]!.contains { $0.hasPrefix("hel") } }) { cmp($0.n, $1.n) } }),
            QFLiveQuery(
                label: "search anyWord tea cafe, prefix 3",
                results: { $0.objects(QFItem.self).search(\.text, .anyWord("tea cafe")).prefix(3) },
                expected: { a, w in Array(a.filter { w[$0.id]!.contains("tea") || w[$0.id]!.contains("cafe") }.prefix(3)) }),
            QFLiveQuery(
                label: "search phrase see you, group == 1",
                results: { $0.objects(QFItem.self).search(\.text, .phrase("see you")).filter(p) },
                expected: { a, w in
                    a.filter { o in
                        let x = w[o.id]!
                        return o.group == g && x.indices.dropLast().contains { x[$0] == "see" && x[$0 + 1] == "you" }
                    }
                }),
        ]
    }
}

extension QueryFeatureHuntTests {
    @Test func liveResultsOnCompoundCollatedAndTextQueriesFollowCommits() throws {
        let seed: UInt64 = ProcessInfo.processInfo.environment["QF_SEED"].flatMap { UInt64($0) } ?? 777
        var world = QFWorld(seed: seed)
        let db = try Database.inMemory(models: [QFItem.self])
        try db.write { tx in try world.insert(tx, count: 40) }
        let queries = QFLiveQuery.all()
        let queue = DispatchQueue(label: "qf.live")
        var tokens: [NotificationToken] = []
        var mirrors: [QFMirror] = []
        for q in queries {
            let m = QFMirror(label: q.label)
            mirrors.append(m)
            tokens.append(q.results(db).observe(on: queue) { m.apply($0) })
        }
        func waitConverged(_ step: Int) -> [String] {
            let all = world.all
            var pending: [String] = []
            let deadline = Date().addingTimeInterval(120)
            repeat {
                pending = []
                for (q, m) in zip(queries, mirrors) {
                    let want = q.expected(all, world.textWords).map(qfShow)
                    let (got, _) = m.snapshot
                    if got != want {
                        pending.append(
                            "\(q.label): step \(step): mirror \(got.map { $0.prefix(while: { $0 != "|" }) }) vs expected \(want.map { $0.prefix(while: { $0 != "|" }) })"
                        )
                    }
                }
                if pending.isEmpty { return [] }
                usleep(2000)
            } while Date() < deadline
            return pending
        }
        var failures: [String] = []
        failures += waitConverged(0)
        for step in 1...60 where failures.count < 5 {
            try db.write { tx in try world.randomWrites(tx, count: 1 + world.rng.below(4)) }
            failures += waitConverged(step)
        }
        for m in mirrors { failures += m.snapshot.problems }
        _ = tokens
        for f in failures.prefix(8) { Issue.record("seed \(seed): \(f)") }
        #expect(failures.isEmpty)
        tokens.forEach { $0.invalidate() }
    }
}

// MARK: Compound indexes over other field types

enum QFKind: Int, Codable, Sendable, CaseIterable { case minus = -1, zero = 0, five = 5 }

struct QFWide: Model {
    static let indexDescriptors: [IndexDescriptor<QFWide>] = [
        .on(\.e, \.u), .on(\.small, \.f), .on(\.on, \.d), .on(\.s, \.small), .on(\.u, \.on, \.small),
    ]
    var id: Int
    var e: QFKind
    var u: UInt64
    var small: Int8
    var f: Float
    var on: Bool
    var d: Date?
    var s: String?
}

func qfShowWide(_ o: QFWide) -> String {
    "\(o.id) e\(o.e.rawValue) u\(o.u) s\(o.small) f\(o.f) \(o.on) d\(String(describing: o.d?.timeIntervalSinceReferenceDate)) s\(String(describing: o.s))"
}

extension QueryFeatureHuntTests {
    @Test func compoundIndexesOverUnsignedFloatEnumAndOptionalFields() throws {
        let seed: UInt64 = ProcessInfo.processInfo.environment["QF_SEED"].flatMap { UInt64($0) } ?? 99
        var rng = SeededRandom(seed: seed)
        func pick<T>(_ a: [T]) -> T { a[rng.below(a.count)] }
        let us: [UInt64] = [0, 1, UInt64(Int64.max), UInt64(Int64.max) + 1, .max, .max - 1, 1 << 40]
        let smalls: [Int8] = [.min, -1, 0, 1, .max]
        let fs: [Float] = [-0.0, 0.0, .nan, .infinity, -.infinity, 1.5, -1.5, .leastNonzeroMagnitude, .greatestFiniteMagnitude]
        let ds: [Date?] = [nil, .distantPast, .distantFuture, Date(timeIntervalSinceReferenceDate: 0), Date(timeIntervalSinceReferenceDate: -0.5)]
        let ss: [String?] = [nil, "", "a", "\u{E9}", "e\u{301}", "\u{0}"]
        var objects: [Int: QFWide] = [:]
        func make(_ id: Int) -> QFWide {
            QFWide(id: id, e: pick(QFKind.allCases), u: pick(us), small: pick(smalls), f: pick(fs), on: rng.below(2) == 0, d: pick(ds), s: pick(ss))
        }
        let db = try Database.inMemory(models: [QFWide.self])
        try db.write { tx in
            for id in 1...200 {
                let o = make(id)
                objects[id] = o
                try tx.insert(o)
            }
        }
        func cmp<T: Comparable>(_ a: T, _ b: T) -> ComparisonResult { a < b ? .orderedAscending : (b < a ? .orderedDescending : .orderedSame) }
        func fcmp(_ a: Float, _ b: Float) -> ComparisonResult { qfCompare(Double(a), Double(b)) }
        func dcmp(_ a: Date?, _ b: Date?) -> ComparisonResult {
            switch (a, b) {
            case (nil, nil): return .orderedSame
            case (nil, _): return .orderedAscending
            case (_, nil): return .orderedDescending
            case let (x?, y?): return cmp(x, y)
            }
        }
        var failures: [String] = []
        for round in 0..<4 {
            if round > 0 {
                try db.write { tx in
                    for _ in 0..<50 {
                        let k = 1 + rng.below(220)
                        if rng.below(4) == 0, objects[k] != nil {
                            try tx.delete(QFWide.self, key: k)
                            objects[k] = nil
                        } else {
                            let o = make(k)
                            try tx.upsert(o)
                            objects[k] = o
                        }
                    }
                }
            }
            let all = objects.values.sorted { $0.id < $1.id }
            for _ in 0..<150 {
                let order: SortOrder = rng.below(2) == 0 ? .forward : .reverse
                func dir(_ c: ComparisonResult) -> ComparisonResult {
                    order == .forward ? c : (c == .orderedAscending ? .orderedDescending : (c == .orderedDescending ? .orderedAscending : c))
                }
                var label: String
                var results: Results<QFWide>
                var expected: [QFWide]
                let base = db.objects(QFWide.self)
                switch rng.below(6) {
                case 0:
                    let e = pick(QFKind.allCases), x = pick(us)
                    let p: Predicate<QFWide> = rng.below(2) == 0 ? #Predicate { $0.e == e && $0.u > x } : #Predicate { $0.e == e && $0.u <= x }
                    label = "e == \(e) && u >/<= \(x), sort u \(order)"
                    results = base.filter(p).sorted(by: SortDescriptor(\.u, order: order))
                    expected = QFCheckWide.sorted(all.filter { try! p.evaluate($0) }) { dir(cmp($0.u, $1.u)) }
                case 1:
                    let k = pick(smalls), x = pick(fs)
                    let p: Predicate<QFWide> = rng.below(2) == 0 ? #Predicate { $0.small == k && $0.f >= x } : #Predicate { $0.small == k && $0.f < x }
                    label = "small == \(k) && f >=/< \(x), sort f \(order)"
                    results = base.filter(p).sorted(by: SortDescriptor(\.f, order: order))
                    expected = QFCheckWide.sorted(all.filter { try! p.evaluate($0) }) { dir(fcmp($0.f, $1.f)) }
                case 2:
                    let b = rng.below(2) == 0
                    let x = pick(ds) ?? Date(timeIntervalSinceReferenceDate: 0)
                    let p: Predicate<QFWide> =
                        rng.below(2) == 0 ? #Predicate { $0.on == b } : #Predicate { $0.on == b && $0.d != nil && $0.d! > x }
                    label = "on == \(b) (&& d > \(x)), sort d \(order)"
                    results = base.filter(p).sorted(by: SortDescriptor(\.d, order: order))
                    expected = QFCheckWide.sorted(all.filter { try! p.evaluate($0) }) { dir(dcmp($0.d, $1.d)) }
                case 3:
                    let s = pick(ss)
                    let p: Predicate<QFWide> = #Predicate { $0.s == s }
                    label = "s == \(String(describing: s?.unicodeScalars.map(\.value))), sort small \(order)"
                    results = base.filter(p).sorted(by: SortDescriptor(\.small, order: order))
                    expected = QFCheckWide.sorted(all.filter { try! p.evaluate($0) }) { dir(cmp($0.small, $1.small)) }
                case 4:
                    let x = pick(us), b = rng.below(2) == 0, k = pick(smalls)
                    let p: Predicate<QFWide> =
                        rng.below(2) == 0 ? #Predicate { $0.u == x && $0.on == b } : #Predicate { $0.u == x && $0.on == b && $0.small >= k }
                    label = "u == \(x) && on == \(b) (&& small >= \(k)), sort small \(order)"
                    results = base.filter(p).sorted(by: SortDescriptor(\.small, order: order))
                    expected = QFCheckWide.sorted(all.filter { try! p.evaluate($0) }) { dir(cmp($0.small, $1.small)) }
                default:
                    let x = pick(us)
                    let p: Predicate<QFWide> = #Predicate { $0.u == x }
                    label = "u == \(x), sort u, small \(order)"
                    results = base.filter(p).sorted(by: SortDescriptor(\.u, order: order), SortDescriptor(\.small, order: order))
                    expected = QFCheckWide.sorted(all.filter { try! p.evaluate($0) }) { a, b in
                        let c = dir(cmp(a.u, b.u))
                        return c != .orderedSame ? c : dir(cmp(a.small, b.small))
                    }
                }
                var ids = expected.map(\.id)
                if rng.below(2) == 0 {
                    let limit = rng.below(ids.count + 2)
                    results = results.prefix(limit)
                    ids = Array(ids.prefix(limit))
                    label += " prefix \(limit)"
                }
                let got = (try? results.fetch().map(\.id)) ?? [-1]
                if got != ids || results.count != ids.count || results.last?.id != ids.last {
                    failures.append("round \(round): \(label): got \(got) (count \(results.count)) expected \(ids)\n    plan: \(results.explain())")
                }
            }
        }
        for f in failures.prefix(6) { Issue.record("seed \(seed): \(f)") }
        #expect(failures.isEmpty, "\(failures.count) failing cases")
    }
}

enum QFCheckWide {
    static func sorted(_ objects: [QFWide], _ compare: (QFWide, QFWide) -> ComparisonResult) -> [QFWide] {
        objects.sorted { a, b in
            switch compare(a, b) {
            case .orderedAscending: return true
            case .orderedDescending: return false
            case .orderedSame: return a.id < b.id
            }
        }
    }
}

// MARK: Full-text probes

struct QFNote: Model {
    static let indexDescriptors: [IndexDescriptor<QFNote>] = [.fullText(\.body), .fullText(\.title)]
    var id: Int
    var body: String?
    var title: String
    var n: Int
}

/// The same fields without indexes: a search reads every text ("the same answers, slower").
struct QFPlainNote: Model {
    var id: Int
    var body: String?
    var title: String
    var n: Int
}

extension QueryFeatureHuntTests {
    @Test func searchesCountRepeatedAndPrefixWordsOnce() throws {
        let db = try Database.inMemory(models: [QFNote.self, QFPlainNote.self])
        let texts: [Int: String?] = [1: "hello help", 2: "hello hello", 3: "Help", 4: "", 5: "hel", 6: nil, 7: "HELLO, Hello... hello!"]
        try db.write { tx in
            for (id, t) in texts {
                try tx.insert(QFNote(id: id, body: t, title: t ?? "", n: id % 3))
                try tx.insert(QFPlainNote(id: id, body: t, title: t ?? "", n: id % 3))
            }
        }
        let cases: [(TextSearch, [Int])] = [
            ("hel*", [1, 2, 3, 5, 7]), ("hello", [1, 2, 7]), (.phrase("hello hello"), [2, 7]), (.phrase("hello"), [1, 2, 7]),
            ("hello hello", [1, 2, 7]), (.anyWord("help hello"), [1, 2, 3, 7]), (.anyWord("hel* hello"), [1, 2, 3, 5, 7]),
            (.phrase("hello hel*"), [1, 2, 7]), (.phrase("hello hello hello"), [7]), ("he*", [1, 2, 3, 5, 7]), ("*", []), ("", []),
        ]
        for (search, want) in cases {
            for (label, r) in [
                ("body indexed", db.objects(QFNote.self).search(\.body, search)), ("title indexed", db.objects(QFNote.self).search(\.title, search)),
            ] {
                #expect(r.map(\.id) == want, "\(label) \(search): elements")
                #expect(r.count == want.count, "\(label) \(search): count")
                #expect(try r.fetchCount() == want.count, "\(label) \(search): fetchCount")
                #expect(r.keys == want, "\(label) \(search): keys")
                let ranked = r.prefix(100)
                #expect(Set(db.objects(QFNote.self).search(\.body, search, ranked: true).map(\.id)) == Set(want), "\(label) \(search): ranked")
                #expect(ranked.count == want.count)
            }
            let plain = db.objects(QFPlainNote.self).search(\.body, search)
            #expect(plain.map(\.id) == want, "no index \(search): elements")
            #expect(try plain.fetchCount() == want.count, "no index \(search): fetchCount")
        }
    }
}

extension QueryFeatureHuntTests {
    /// BM25 as TextRanking documents it, from plain word lists.
    static func bm25(_ words: [Int: [String]], terms: [(String, Bool)]) -> [Int: Double] {
        let docs = words.filter { !$0.value.isEmpty }
        let n = Double(docs.count)
        let avg = docs.isEmpty ? 0 : Double(docs.values.reduce(0) { $0 + $1.count }) / n
        func m(_ w: String, _ t: (String, Bool)) -> Bool { t.1 ? w.hasPrefix(t.0) : w == t.0 }
        var out: [Int: Double] = [:]
        for (id, w) in words {
            var score = 0.0
            for t in terms {
                let tf = Double(w.filter { m($0, t) }.count)
                if tf == 0 { continue }
                let df = Double(docs.values.filter { $0.contains { m($0, t) } }.count)
                let idf = log(1 + (n - df + 0.5) / (df + 0.5))
                let norm = avg > 0 ? 1 - 0.75 + 0.75 * Double(w.count) / avg : 1
                score += idf * tf * 2.2 / (tf + 1.2 * norm)
            }
            out[id] = score
        }
        return out
    }

    @Test func rankedSearchesOrderByRelevanceThenSortThenKey() throws {
        var rng = SeededRandom(seed: 31)
        let vocab = ["tea", "coffee", "teapot", "milk", "Tea", "water"]
        let db = try Database.inMemory(models: [QFNote.self, QFPlainNote.self])
        var words: [Int: [String]] = [:]
        var ns: [Int: Int] = [:]
        try db.write { tx in
            for id in 1...60 {
                let w = (0..<rng.below(6)).map { _ in vocab[rng.below(vocab.count)] }
                words[id] = w.map { $0.lowercased() }
                ns[id] = rng.below(3)
                let text = w.joined(separator: " ")
                try tx.insert(QFNote(id: id, body: text, title: text, n: ns[id]!))
                try tx.insert(QFPlainNote(id: id, body: text, title: text, n: ns[id]!))
            }
        }
        let searches: [(TextSearch, [(String, Bool)], ([String]) -> Bool)] = [
            (.anyWord("tea coffee"), [("tea", false), ("coffee", false)], { $0.contains("tea") || $0.contains("coffee") }),
            ("tea*", [("tea", true)], { $0.contains { $0.hasPrefix("tea") } }),
            ("tea milk", [("tea", false), ("milk", false)], { $0.contains("tea") && $0.contains("milk") }),
            (.anyWord("milk te*"), [("milk", false), ("te", true)], { $0.contains("milk") || $0.contains { $0.hasPrefix("te") } }),
        ]
        for (search, terms, matches) in searches {
            let scores = Self.bm25(words, terms: terms)
            for reverse in [false, true] {
                let order: SortOrder = reverse ? .reverse : .forward
                let expected = words.keys.filter { matches(words[$0]!) }.sorted { a, b in
                    if scores[a]! != scores[b]! { return scores[a]! > scores[b]! }
                    if ns[a]! != ns[b]! { return reverse ? ns[a]! > ns[b]! : ns[a]! < ns[b]! }
                    return a < b
                }
                for window in [(0, 100), (0, 3), (2, 5)] {
                    let want = Array(expected.dropFirst(window.0).prefix(window.1))
                    let indexed = db.objects(QFNote.self).search(\.body, search, ranked: true).sorted(by: SortDescriptor(\.n, order: order))
                        .offset(window.0).prefix(window.1)
                    let plain = db.objects(QFPlainNote.self).search(\.body, search, ranked: true).sorted(by: SortDescriptor(\.n, order: order))
                        .offset(window.0).prefix(window.1)
                    #expect(indexed.map(\.id) == want, "\(search) \(order) \(window): indexed")
                    #expect(plain.map(\.id) == want, "\(search) \(order) \(window): no index")
                    #expect(indexed.count == want.count && (try? indexed.fetchCount()) == want.count, "\(search) \(order) \(window): count")
                }
            }
        }
    }
}

/// Every delivery checked against the plain-array answer for the commit it reflects.
// @unchecked: every stored var is read and written only while `lock` is held.
final class QFVersionedMirror: @unchecked Sendable {
    let lock = NSLock()
    var mirror: [QFItem] = []
    var problems: [String] = []
    var deliveries = 0
    var checked = 0
    let query: QFLiveQuery
    let states: QFStates
    init(query: QFLiveQuery, states: QFStates) {
        self.query = query
        self.states = states
    }

    func apply(_ change: ResultsChange<QFItem>) {
        lock.lock()
        defer { lock.unlock() }
        deliveries += 1
        var delivered: Results<QFItem>?
        switch change {
        case .initial(let results):
            mirror = Array(results)
            delivered = results
        case .update(let results, let deletions, let insertions, let modifications):
            let all = Array(results)
            delivered = results
            var ok = true
            for i in deletions.reversed() where ok {
                if i < mirror.count { mirror.remove(at: i) } else { ok = false }
            }
            for i in insertions where ok {
                if i <= mirror.count && i < all.count { mirror.insert(all[i], at: i) } else { ok = false }
            }
            for i in modifications where ok {
                if i < mirror.count && i < all.count { mirror[i] = all[i] } else { ok = false }
            }
            if !ok || mirror.map(qfShow) != all.map(qfShow) {
                problems.append(
                    "\(query.label): delivery \(deliveries) v\(results.version ?? 0): applying d\(deletions) i\(insertions) m\(modifications) gives \(mirror.map(\.id)), results \(all.map(\.id))"
                )
                mirror = all
            }
        case .error(let error):
            problems.append("\(query.label): error \(error)")
        }
        if let delivered, let v = delivered.version, let state = states.state(v) {
            checked += 1
            let want = query.expected(state.objects, state.words).map(qfShow)
            let got = delivered.map(qfShow)
            if got != want {
                problems.append("\(query.label): v\(v): delivered \(delivered.map(\.id)) vs expected \(query.expected(state.objects, state.words).map(\.id))")
            }
        }
    }
}

// @unchecked: every stored var is read and written only while `lock` is held.
final class QFStates: @unchecked Sendable {
    let lock = NSLock()
    var byVersion: [UInt64: (objects: [QFItem], words: [Int: [String]])] = [:]
    func record(_ v: UInt64, _ objects: [QFItem], _ words: [Int: [String]]) {
        lock.lock()
        byVersion[v] = (objects, words)
        lock.unlock()
    }
    func state(_ v: UInt64) -> (objects: [QFItem], words: [Int: [String]])? {
        lock.lock()
        defer { lock.unlock() }
        return byVersion[v]
    }
}

extension QueryFeatureHuntTests {
    @Test func liveDeliveriesEqualTheQueryAtTheirVersionUnderBursts() throws {
        let seed: UInt64 = ProcessInfo.processInfo.environment["QF_SEED"].flatMap { UInt64($0) } ?? 2024
        var world = QFWorld(seed: seed)
        let db = try Database.inMemory(models: [QFItem.self])
        let states = QFStates()
        try db.write { tx in try world.insert(tx, count: 60) }
        states.record(try db.snapshot().version, world.all, world.textWords)
        let queue = DispatchQueue(label: "qf.live.burst")
        var tokens: [NotificationToken] = []
        var mirrors: [QFVersionedMirror] = []
        for q in QFLiveQuery.all() {
            let m = QFVersionedMirror(query: q, states: states)
            mirrors.append(m)
            tokens.append(q.results(db).observe(on: queue) { m.apply($0) })
        }
        for step in 0..<250 {
            try db.write { tx in try world.randomWrites(tx, count: 1 + world.rng.below(3)) }
            states.record(try db.snapshot().version, world.all, world.textWords)
            if step % 25 == 0 { usleep(3000) }
        }
        // Converge.
        let deadline = Date().addingTimeInterval(120)
        var pending: [String] = []
        repeat {
            pending = []
            for m in mirrors {
                m.lock.lock()
                let got = m.mirror.map(qfShow)
                m.lock.unlock()
                if got != m.query.expected(world.all, world.textWords).map(qfShow) { pending.append(m.query.label) }
            }
            if pending.isEmpty { break }
            usleep(5000)
        } while Date() < deadline
        var failures = pending.map { "did not converge: \($0)" }
        var totalChecked = 0
        for m in mirrors {
            m.lock.lock()
            failures += m.problems
            totalChecked += m.checked
            m.lock.unlock()
        }
        if totalChecked < 40 { failures.append("only \(totalChecked) deliveries checked against their version") }
        for f in failures.prefix(8) { Issue.record("seed \(seed): \(f)") }
        #expect(failures.isEmpty)
        tokens.forEach { $0.invalidate() }
    }
}

// MARK: Throwing filters around searches and walks; collated sorts on a String key

struct QFKeyed: Model {
    static let indexDescriptors: [IndexDescriptor<QFKeyed>] = [.on(\.label, collation: .caseInsensitive)]
    var id: String
    var label: String?
    var n: Int
}

extension QueryFeatureHuntTests {
    @Test func throwingFiltersAroundSearchesAndWalks() throws {
        let db = try Database.inMemory(models: [QFItem.self])
        func item(_ id: Int, group: Int, score: Double, rank: Int?, text: String) -> QFItem {
            QFItem(
                id: id, group: group, score: score, when: Date(timeIntervalSinceReferenceDate: 0), tag: "", rank: rank, flag: true, n: 0, name: "", text: text)
        }
        try db.write { tx in
            try tx.insert(item(1, group: 1, score: 1, rank: 5, text: "tea"))
            try tx.insert(item(2, group: 1, score: 2, rank: nil, text: "coffee"))
            try tx.insert(item(3, group: 2, score: 0, rank: nil, text: "coffee"))
            try tx.insert(item(4, group: 1, score: 3, rank: 1, text: "tea time"))
        }
        let ranked = #Predicate<QFItem> { $0.rank! > 0 }
        // Search first: rank! is evaluated only on the texts with "tea", which all have a rank.
        let ok = db.objects(QFItem.self).search(\.text, "tea").filter(ranked)
        #expect(ok.error == nil && ok.map(\.id) == [1, 4], "\(ok.explain())")
        // Predicate first: it is evaluated on every object, and object 2 has no rank.
        let fails = db.objects(QFItem.self).filter(ranked).search(\.text, "tea")
        #expect(throws: (any Error).self, "\(fails.explain())") { try fails.fetch() }
        // A window does not stop the evaluation: the first match is object 1, object 2 throws.
        let windowed = db.objects(QFItem.self).filter(#Predicate { $0.group == 1 }).filter(ranked).sorted(by: SortDescriptor(\.score)).prefix(1)
        #expect(throws: (any Error).self, "\(windowed.explain())") { try windowed.fetch() }
        let windowedCount = db.objects(QFItem.self).filter(#Predicate { $0.group == 1 }).filter(ranked).prefix(1)
        #expect(throws: (any Error).self, "\(windowedCount.explain())") { try windowedCount.fetchCount() }
    }

    @Test func collatedSortsOnAStringKeyAndAnOptionalField() throws {
        let db = try Database.inMemory(models: [QFKeyed.self])
        let ids = ["b", "B", "a", "A", "\u{E9}", "E", "e\u{301}x", "\u{C9}x", "10", "9", ""]
        let labels: [String?] = [nil, "x", "X", nil, "\u{E9}", "E\u{301}", "", "y", "Y", nil, "x"]
        var all: [QFKeyed] = []
        try db.write { tx in
            for (i, id) in ids.enumerated() {
                let o = QFKeyed(id: id, label: labels[i], n: i % 3)
                try tx.insert(o)
                all.append(o)
            }
        }
        func keyOrder(_ a: String, _ b: String) -> Bool {
            Array(a.precomposedStringWithCanonicalMapping.utf8).lexicographicallyPrecedes(Array(b.precomposedStringWithCanonicalMapping.utf8))
        }
        func labelCompare(_ a: String?, _ b: String?) -> ComparisonResult {
            switch (a, b) {
            case (nil, nil): return .orderedSame
            case (nil, _): return .orderedAscending
            case (_, nil): return .orderedDescending
            case let (x?, y?): return oracleCollate(x, y, [.caseInsensitive])
            }
        }
        for reverse in [false, true] {
            let order: SortOrder = reverse ? .reverse : .forward
            func dir(_ c: ComparisonResult) -> ComparisonResult {
                reverse ? (c == .orderedAscending ? .orderedDescending : (c == .orderedDescending ? .orderedAscending : c)) : c
            }
            let byId = all.sorted { a, b in
                let c = dir(oracleCollate(a.id, b.id, [.caseInsensitive]))
                return c == .orderedSame ? keyOrder(a.id, b.id) : c == .orderedAscending
            }.map(\.id)
            let gotId = db.objects(QFKeyed.self).sorted(by: SortDescriptor(\.id, order: order), collation: .caseInsensitive)
            #expect(gotId.map(\.id) == byId, "id \(order): \(gotId.explain())")
            let byLabel = all.sorted { a, b in
                let c = dir(labelCompare(a.label, b.label))
                return c == .orderedSame ? keyOrder(a.id, b.id) : c == .orderedAscending
            }.map(\.id)
            for limit in [100, 3] {
                let got = db.objects(QFKeyed.self).sorted(by: SortDescriptor(\.label, order: order), collation: .caseInsensitive).prefix(limit)
                #expect(got.map(\.id) == Array(byLabel.prefix(limit)), "label \(order) prefix \(limit): \(got.explain())")
                let nonNil = #Predicate<QFKeyed> { $0.label != nil }
                let got2 = db.objects(QFKeyed.self).filter(nonNil).sorted(by: SortDescriptor(\.label, order: order), collation: .caseInsensitive).prefix(limit)
                #expect(
                    got2.map(\.id) == Array(byLabel.filter { id in all.first { $0.id == id }!.label != nil }.prefix(limit)),
                    "label != nil \(order) prefix \(limit): \(got2.explain())")
            }
        }
    }
}

extension QueryFeatureHuntTests {
    /// Relevance after updates, deletes and texts that become empty or nil: the statistics BM25
    /// reads (texts with a word, their words in all) must follow every write.
    @Test func rankingFollowsUpdatesDeletesAndEmptyTexts() throws {
        var rng = SeededRandom(seed: 77)
        let vocab = ["tea", "coffee", "teapot", "milk", "water", "\u{1F600}", "...", "Tea"]
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        var db = try Database(path: path, models: [QFNote.self, QFPlainNote.self], options: StoreOptions(durability: .noSync))
        var bodies: [Int: String?] = [:]
        func randomText() -> String? {
            if rng.below(6) == 0 { return nil }
            return (0..<rng.below(5)).map { _ in vocab[rng.below(vocab.count)] }.joined(separator: " ")
        }
        func words(_ t: String?) -> [String] {
            guard let t else { return [] }
            return t.split(separator: " ").map { String($0).lowercased() }.filter { $0 != "\u{1F600}" && $0 != "..." }
        }
        var failures: [String] = []
        for round in 0..<8 {
            if round == 5 {
                db.close()
                db = try Database(path: path, models: [QFNote.self, QFPlainNote.self], options: StoreOptions(durability: .noSync))
            }
            try db.write { tx in
                for _ in 0..<(round == 0 ? 40 : 15) {
                    let id = 1 + rng.below(50)
                    if rng.below(4) == 0 && bodies[id] != nil {
                        try tx.delete(QFNote.self, key: id)
                        try tx.delete(QFPlainNote.self, key: id)
                        bodies[id] = nil
                    } else {
                        let t = randomText()
                        try tx.upsert(QFNote(id: id, body: t, title: "", n: 0))
                        try tx.upsert(QFPlainNote(id: id, body: t, title: "", n: 0))
                        bodies[id] = .some(t)
                    }
                }
            }
            let w = bodies.mapValues { words($0) }
            for (search, terms) in [
                (TextSearch.anyWord("tea coffee"), [("tea", false), ("coffee", false)]), (TextSearch("te*"), [("te", true)]),
                (TextSearch.anyWord("milk water tea"), [("milk", false), ("water", false), ("tea", false)]),
            ] {
                let scores = Self.bm25(w, terms: terms)
                let matching = w.keys.filter { (scores[$0] ?? 0) > 0 }
                let want = matching.sorted { scores[$0]! != scores[$1]! ? scores[$0]! > scores[$1]! : $0 < $1 }
                let got = db.objects(QFNote.self).search(\.body, search, ranked: true).map(\.id)
                let plain = db.objects(QFPlainNote.self).search(\.body, search, ranked: true).map(\.id)
                if got != want { failures.append("round \(round) \(search) indexed: \(got) vs \(want)") }
                if plain != want { failures.append("round \(round) \(search) no index: \(plain) vs \(want)") }
            }
        }
        for f in failures.prefix(6) { Issue.record("\(f)") }
        #expect(failures.isEmpty)
    }

    @Test func queriesInsideAWriteSeeItsOwnMovesBetweenPrefixes() throws {
        var world = QFWorld(seed: 5)
        let db = try Database.inMemory(models: [QFItem.self])
        try db.write { tx in try world.insert(tx, count: 80) }
        var failures: [String] = []
        try db.write { tx in
            for step in 0..<30 {
                try world.randomWrites(tx, count: 3)
                let all = world.all
                for g in [0, 1] {
                    let p = #Predicate<QFItem> { $0.group == g }
                    let want = QFCheck.sorted(all.filter { $0.group == g }) { qfCompare($1.score, $0.score) }.map(\.id)
                    let got = try tx.objects(QFItem.self, where: p, sortedBy: [SortDescriptor(\.score, order: .reverse)]).map(\.id)
                    if got != want { failures.append("step \(step) group \(g): \(got) vs \(want)") }
                    let b = true
                    let q = #Predicate<QFItem> { $0.flag == b && $0.group == g && $0.n >= 0 }
                    let want2 = QFCheck.sorted(all.filter { $0.flag && $0.group == g && $0.n >= 0 }) { a, c in
                        a.n < c.n ? .orderedAscending : (a.n > c.n ? .orderedDescending : .orderedSame)
                    }.map(\.id)
                    let got2 = try tx.objects(QFItem.self, where: q, sortedBy: [SortDescriptor(\.n)]).map(\.id)
                    if got2 != want2 { failures.append("step \(step) flag group \(g) n >= 0: \(got2) vs \(want2)") }
                    if try tx.count(QFItem.self, where: q) != want2.count { failures.append("step \(step) count") }
                }
            }
        }
        for f in failures.prefix(6) { Issue.record("\(f)") }
        #expect(failures.isEmpty)
    }
}

extension QueryFeatureHuntTests {
    /// A collated key can be much longer than its string (a digit run is 3 bytes for 1 under
    /// `.numeric`; "ΐ" folds to three scalars): a write whose key is too long must be refused
    /// with `invalidInput` before it changes anything, and everything stored must stay queryable.
    @Test func collatedKeysLongerThanTheirStrings() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let db = try Database(path: path, models: [QFItem.self], options: StoreOptions(durability: .noSync))
        func item(_ id: Int, _ name: String) -> QFItem {
            QFItem(id: id, group: 0, score: 0, when: Date(timeIntervalSinceReferenceDate: 0), tag: "", rank: nil, flag: false, n: 0, name: name, text: "")
        }
        let names = [
            String(repeating: "1a", count: 300), String(repeating: "\u{390}", count: 400), String(repeating: "9", count: 300) + "x",
            String(repeating: "0", count: 500) + "1", String(repeating: "\u{149}", count: 450),
        ]
        var stored: [QFItem] = []
        for (i, name) in names.enumerated() {
            do {
                try db.write { tx in try tx.insert(item(i + 1, name)) }
                stored.append(item(i + 1, name))
            } catch let error as StrataError {
                guard case .invalidInput = error else {
                    Issue.record("name #\(i) (\(name.utf8.count) bytes): \(error), expected invalidInput or success")
                    continue
                }
            }
        }
        try db.write { tx in try tx.insert(item(100, "room9")) }
        stored.append(item(100, "room9"))
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
        let want = QFCheck.sorted(stored) { oracleCollate($0.name, $1.name, StringCollation.natural.options) }.map(\.id)
        #expect(db.objects(QFItem.self).sorted(by: SortDescriptor(\.name), collation: .natural).map(\.id) == want)
        let want2 = QFCheck.sorted(stored) { oracleCollate($0.name, $1.name, [.caseInsensitive]) }.map(\.id)
        let g = 0
        #expect(db.objects(QFItem.self).filter(#Predicate { $0.group == g }).sorted(by: SortDescriptor(\.name), collation: .caseInsensitive).map(\.id) == want2)
    }
}

extension QueryFeatureHuntTests {
    /// The async sequence merges commits while the loop is busy; each change still applies to the
    /// previous results and ends at the query's answer.
    @Test func asyncChangesOnAWindowedWalkAndASearchConverge() async throws {
        let box = QFWorldBox(QFWorld(seed: 404))
        let db = try Database.inMemory(models: [QFItem.self])
        try box.insert(db, 50)
        let queries = [QFLiveQuery.all()[2], QFLiveQuery.all()[4], QFLiveQuery.all()[6]]
        let mirrors = queries.map { QFMirror(label: $0.label) }
        var tasks: [Task<Void, Never>] = []
        for (q, m) in zip(queries, mirrors) {
            let stream = q.results(db).changes
            tasks.append(
                Task {
                    for await change in stream {
                        m.apply(change)
                        try? await Task.sleep(nanoseconds: UInt64.random(in: 0...3_000_000))  // a slow loop: commits merge
                    }
                })
        }
        for _ in 0..<120 { try box.write(db, 2) }
        let world = box.world
        let all = world.all
        // Counted in polls, not wall time: in a parallel run, sync tests can hold every cooperative
        // thread for minutes, during which neither this loop nor the consumers run; each poll
        // (5 ms asleep, 24,000 of them: 2 minutes when nothing else runs) lets the consumers run.
        var pending: [String] = []
        var polls = 0
        repeat {
            pending = zip(queries, mirrors).compactMap { q, m in
                m.snapshot.ids == q.expected(all, world.textWords).map(qfShow) ? nil : q.label
            }
            if pending.isEmpty { break }
            try await Task.sleep(nanoseconds: 5_000_000)
            polls += 1
        } while polls < 24_000
        tasks.forEach { $0.cancel() }
        #expect(pending.isEmpty, "did not converge after \(polls) polls: \(pending); deliveries \(mirrors.map(\.deliveryCount))")
        for m in mirrors { #expect(m.snapshot.problems.isEmpty, "\(m.snapshot.problems.prefix(3))") }
    }
}

// @unchecked: one test uses it, from one task, never concurrently; `Database.write` runs its closure on the
// calling thread before it returns, so `world` is never touched by two threads.
final class QFWorldBox: @unchecked Sendable {
    var world: QFWorld
    init(_ world: QFWorld) { self.world = world }
    func insert(_ db: Database, _ n: Int) throws { try db.write { tx in try self.world.insert(tx, count: n) } }
    func write(_ db: Database, _ n: Int) throws { try db.write { tx in try self.world.randomWrites(tx, count: n) } }
}

extension QueryFeatureHuntTests {
    /// `explain()` names the index each documented plan uses.
    @Test func explainNamesTheIndexes() throws {
        var world = QFWorld(seed: 8)
        let db = try Database.inMemory(models: [QFItem.self])
        try db.write { tx in try world.insert(tx, count: 300) }
        let g = 1
        let walk = db.objects(QFItem.self).filter(#Predicate { $0.group == g }).sorted(by: SortDescriptor(\.score, order: .reverse)).prefix(50).explain()
        #expect(walk.contains("scan index i:QFItem:group,score in descending order"), "\(walk)")
        #expect(walk.contains("no residual filter"), "\(walk)")
        let b = true
        let three = db.objects(QFItem.self).filter(#Predicate { $0.flag == b && $0.group == g }).sorted(by: SortDescriptor(\.n)).explain()
        #expect(three.contains("i:QFItem:flag,group,n"), "\(three)")
        let collated = db.objects(QFItem.self).sorted(by: SortDescriptor(\.name), collation: .natural).prefix(10).explain()
        #expect(collated.contains("i:QFItem:name(natural)"), "\(collated)")
        let collated2 = db.objects(QFItem.self).filter(#Predicate { $0.group == g }).sorted(by: SortDescriptor(\.name), collation: .caseInsensitive).explain()
        #expect(collated2.contains("i:QFItem:group,name(caseInsensitive)"), "\(collated2)")
        let text = db.objects(QFItem.self).search(\.text, "hel*").explain()
        #expect(text.contains("i:QFItem:text(fullText)"), "\(text)")
        let strings = db.objects(QFItem.self).filter(#Predicate { $0.tag == "a" }).sorted(by: SortDescriptor(\.name)).explain()
        #expect(strings.contains("sort: in memory"), "\(strings)")
    }
}

// @unchecked: every stored var is read and written only while `lock` is held.
final class QFNoteMirror: @unchecked Sendable {
    let lock = NSLock()
    var mirror: [QFNote] = []
    var problems: [String] = []
    func apply(_ change: ResultsChange<QFNote>) {
        lock.lock()
        defer { lock.unlock() }
        switch change {
        case .initial(let r): mirror = Array(r)
        case .update(let r, let d, let i, let m):
            let all = Array(r)
            for x in d.reversed() { if x < mirror.count { mirror.remove(at: x) } else { problems.append("deletion \(x)") } }
            for x in i { if x <= mirror.count && x < all.count { mirror.insert(all[x], at: x) } else { problems.append("insertion \(x)") } }
            for x in m { if x < mirror.count && x < all.count { mirror[x] = all[x] } else { problems.append("modification \(x)") } }
            if mirror.map({ "\($0.id)\(String(describing: $0.body))\($0.n)" }) != all.map({ "\($0.id)\(String(describing: $0.body))\($0.n)" }) {
                problems.append("mirror \(mirror.map(\.id)) vs results \(all.map(\.id))")
                mirror = all
            }
        case .error(let e): problems.append("error \(e)")
        }
    }
}

extension QueryFeatureHuntTests {
    /// Live searches on an optional text (nil, empty, words) sorted by a number: kept up to date
    /// incrementally, ending at the query's answer.
    @Test func liveSearchOnAnOptionalTextFollowsNilAndEmptyTexts() throws {
        var rng = SeededRandom(seed: 12)
        let texts: [String?] = [nil, "", "tea", "Tea time", "\u{1F600}", "teapot", "coffee tea", nil, "T\u{C9}A"]
        let db = try Database.inMemory(models: [QFNote.self])
        var notes: [Int: QFNote] = [:]
        let queue = DispatchQueue(label: "qf.note")
        let searches: [(TextSearch, (String?) -> Bool)] = [
            ("tea", { t in (t?.lowercased().replacingOccurrences(of: "\u{E9}", with: "e").split(separator: " ").contains("tea")) ?? false }),
            ("te*", { t in (t?.lowercased().replacingOccurrences(of: "\u{E9}", with: "e").split(separator: " ").contains { $0.hasPrefix("te") }) ?? false }),
        ]
        let mirrors = searches.map { _ in QFNoteMirror() }
        let tokens = zip(searches, mirrors).map { s, m in
            db.objects(QFNote.self).search(\.body, s.0).sorted(by: SortDescriptor(\.n, order: .reverse)).observe(on: queue) { m.apply($0) }
        }
        for _ in 0..<80 {
            try db.write { tx in
                for _ in 0..<(1 + rng.below(3)) {
                    let id = 1 + rng.below(25)
                    if rng.below(5) == 0 {
                        try tx.delete(QFNote.self, key: id)
                        notes[id] = nil
                    } else {
                        let o = QFNote(id: id, body: texts[rng.below(texts.count)], title: "", n: rng.below(4))
                        try tx.upsert(o)
                        notes[id] = o
                    }
                }
            }
        }
        let deadline = Date().addingTimeInterval(120)
        var pending: [String] = []
        repeat {
            pending = []
            for (s, m) in zip(searches, mirrors) {
                let want = notes.values.filter { s.1($0.body) }.sorted { $0.n != $1.n ? $0.n > $1.n : $0.id < $1.id }.map(\.id)
                m.lock.lock()
                let got = m.mirror.map(\.id)
                m.lock.unlock()
                if got != want { pending.append("\(s.0): \(got) vs \(want)") }
            }
            if pending.isEmpty { break }
            usleep(5000)
        } while Date() < deadline
        #expect(pending.isEmpty, "\(pending)")
        for m in mirrors { #expect(m.problems.isEmpty, "\(m.problems.prefix(3))") }
        tokens.forEach { $0.invalidate() }
    }
}

extension QueryFeatureHuntTests {
    /// A date of NaN in a compound index's sorted field: the index walk and the in-memory sort
    /// (forced by a second descriptor) give one order.
    @Test func nanDatesSortAlikeOnEveryPlan() throws {
        let db = try Database.inMemory(models: [QFWide.self])
        let nan = Date(timeIntervalSinceReferenceDate: .nan)
        let ds: [Date?] = [nil, nan, .distantPast, Date(timeIntervalSinceReferenceDate: 0), nan, .distantFuture, nil, Date(timeIntervalSinceReferenceDate: -1)]
        try db.write { tx in
            for (i, d) in ds.enumerated() {
                try tx.insert(QFWide(id: i + 1, e: .zero, u: 0, small: 0, f: 0, on: true, d: d, s: nil))
            }
        }
        let b = true
        for order in [SortOrder.forward, .reverse] {
            let walked = db.objects(QFWide.self).filter(#Predicate { $0.on == b }).sorted(by: SortDescriptor(\.d, order: order))
            let inMemory = db.objects(QFWide.self).filter(#Predicate { $0.on == b }).sorted(by: SortDescriptor(\.d, order: order), SortDescriptor(\.id))
            let scanned = db.objects(QFWide.self).sorted(by: SortDescriptor(\.d, order: order))
            #expect(
                walked.map(\.id) == inMemory.map(\.id),
                "\(order): walk \(walked.map(\.id)) vs in memory \(inMemory.map(\.id))\n\(walked.explain())\n\(inMemory.explain())")
            #expect(scanned.map(\.id) == inMemory.map(\.id), "\(order): scan \(scanned.map(\.id)) vs in memory \(inMemory.map(\.id))")
            for k in 1...4 {
                #expect(walked.prefix(k).map(\.id) == Array(inMemory.map(\.id).prefix(k)), "\(order) prefix \(k)")
            }
        }
    }
}

extension QueryFeatureHuntTests {
    /// `starts(with:)` on the leading field of a compound index (a range of it) and on a field of
    /// a collated compound index, against `Predicate.evaluate`.
    @Test func prefixesOnCompoundAndCollatedFields() throws {
        var world = QFWorld(seed: 21)
        let db = try Database.inMemory(models: [QFItem.self])
        try db.write { tx in try world.insert(tx, count: 200) }
        let all = world.all
        let prefixes = ["", "a", "e", "\u{E9}", "e\u{301}", "A", "a\u{0}", "\u{1F600}", "ro", "Ro", "room1", "\u{C4}"]
        for p in prefixes {
            for g in [0, 1] {
                let preds: [(String, Predicate<QFItem>)] = [
                    ("tag.starts(with:)", #Predicate { $0.tag.starts(with: p) }),
                    ("tag.starts(with:) && rank != nil", #Predicate { $0.tag.starts(with: p) && $0.rank != nil }),
                    ("group == g && name.starts(with:)", #Predicate { $0.group == g && $0.name.starts(with: p) }),
                    ("name.starts(with:)", #Predicate { $0.name.starts(with: p) }),
                ]
                for (label, pred) in preds {
                    let want = try all.filter { try pred.evaluate($0) }.map(\.id)
                    let r = db.objects(QFItem.self).filter(pred)
                    #expect(r.map(\.id) == want && r.count == want.count, "\(label) \(p.unicodeScalars.map(\.value)) g \(g): \(r.explain())")
                    let helper = db.objects(QFItem.self).filter(\.tag, matching: .beginsWith(p))
                    let wantTag = all.filter { $0.tag.starts(with: p) }.map(\.id)
                    #expect(helper.map(\.id) == wantTag, "beginsWith \(p.unicodeScalars.map(\.value))")
                }
            }
        }
    }
}

extension QueryFeatureHuntTests {
    /// IN lists holding nil on optional fields of compound indexes.
    @Test func inListsWithNilOnCompoundOptionalFields() throws {
        var world = QFWorld(seed: 33)
        let db = try Database.inMemory(models: [QFItem.self, QFWide.self])
        try db.write { tx in try world.insert(tx, count: 200) }
        let all = world.all
        for t in QFWorld.tags {
            for list in [[nil, 1], [nil], [Int.min, nil, Int.max], [0, 1]] as [[Int?]] {
                let p = #Predicate<QFItem> { $0.tag == t && list.contains($0.rank) }
                let want = try all.filter { try p.evaluate($0) }.map(\.id)
                let r = db.objects(QFItem.self).filter(p)
                #expect(
                    r.map(\.id) == want && r.count == want.count && (try? r.fetchCount()) == want.count,
                    "tag \(t.unicodeScalars.map(\.value)) rank in \(list): \(r.map(\.id)) vs \(want)\n\(r.explain())")
                let sorted = r.sorted(by: SortDescriptor(\.rank, order: .reverse))
                let wantSorted = QFCheck.sorted(all.filter { try! p.evaluate($0) }) { a, b in
                    let x = a.rank ?? .min, y = b.rank ?? .min
                    if a.rank == nil && b.rank == nil { return .orderedSame }
                    if a.rank == nil { return .orderedDescending }
                    if b.rank == nil { return .orderedAscending }
                    return x > y ? .orderedAscending : (x < y ? .orderedDescending : .orderedSame)
                }.map(\.id)
                #expect(sorted.map(\.id) == wantSorted, "sorted rank reverse, tag \(t.unicodeScalars.map(\.value)) rank in \(list)")
            }
        }
        var objects: [QFWide] = []
        try db.write { tx in
            for i in 1...40 {
                let o = QFWide(
                    id: i, e: .zero, u: UInt64(i % 3), small: 0, f: 0, on: i % 2 == 0,
                    d: i % 4 == 0 ? nil : Date(timeIntervalSinceReferenceDate: Double(i % 5)), s: i % 3 == 0 ? nil : "x")
                objects.append(o)
                try tx.insert(o)
            }
        }
        let b = true
        let one = Date(timeIntervalSinceReferenceDate: 1)
        let dates: [Date?] = [nil, one]
        let strings: [String?] = [nil, "x"]
        let p1 = #Predicate<QFWide> { $0.on == b && dates.contains($0.d) }
        let p2 = #Predicate<QFWide> { strings.contains($0.s) && $0.small == 0 }
        let p3 = #Predicate<QFWide> { $0.s == nil && $0.small == 0 }
        for (label, p) in [("on && d in [nil, 1]", p1), ("s in [nil, x] && small == 0", p2), ("s == nil && small == 0", p3)] {
            let want = try objects.filter { try p.evaluate($0) }.map(\.id)
            let r = db.objects(QFWide.self).filter(p)
            #expect(r.map(\.id) == want && r.count == want.count, "\(label): \(r.map(\.id)) vs \(want)\n\(r.explain())")
        }
    }
}
