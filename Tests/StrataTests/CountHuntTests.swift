import Testing
import Foundation
@testable import Strata

// A seeded model-based differential of counts, windows and aggregates: Strata answers `count`
// from index branch counts and aggregates from one field of each record; the reference is a
// plain Swift array filtered with `predicate.evaluate` (and, for text, the word rules of
// FORMAT.md §8.5 via `THWords.words`), in primary-key order.
//
//   STRATA_COUNTHUNT_SEED  seed (default below); every failure names it
//
// Dates are shown by their seconds: Foundation's `Date.description` traps on a NaN date.

enum CHKind: String, Codable, Sendable, CaseIterable { case alpha, beta, gamma, blank = "" }

struct CHItem: Model {
    static let indexes: [PartialKeyPath<CHItem> & Sendable] = [\.n, \.small, \.d, \.date, \.name, \.kind, \.opt, \.tags]
    static let indexDescriptors: [IndexDescriptor<CHItem>] = [
        .on(\.group, \.rank), .on(\.title, collation: .caseInsensitive), .fullText(\.text),
    ]
    var id: Int
    var n: Int
    var small: Int8
    var d: Double
    var date: Date
    var name: String
    var title: String
    var kind: CHKind
    var opt: Int?
    var group: Int
    var rank: Int
    var tags: [String]
    var text: String
}

struct CHQuery {
    var label: String
    var pred: Predicate<CHItem>
    var search: TextSearch?
    var textMatch: (@Sendable ([String]) -> Bool)?
    var distinct = false
    var offset: Int?
    var limit: Int?
    /// The index entries an index access on a single condition reads (for `explain()`), when known.
    var entries: (@Sendable ([CHItem]) -> Int)?
    /// The same for a search alone.
    var textEntries: (@Sendable ([CHItem]) -> Int)?
}

struct CHGen {
    var rng: SeededRandom
    var idSpan = 140
    mutating func below(_ n: Int) -> Int { rng.below(n) }
    mutating func chance(_ p: Int) -> Bool { rng.below(100) < p }
    mutating func pick<V>(_ a: [V]) -> V { a[rng.below(a.count)] }

    static let ints: [Int] = [.min, .min + 1, -1, 0, 1, .max - 1, .max]
    static let int8s: [Int8] = [.min, .min + 1, -1, 0, 1, .max - 1, .max]
    static let doubles: [Double] = [-.infinity, -1.5, -0.0, 0.0, 1.5, .infinity, .nan]
    static let dates: [Date] = [
        .distantPast, .distantFuture, Date(timeIntervalSinceReferenceDate: .nan), Date(timeIntervalSinceReferenceDate: .infinity),
        Date(timeIntervalSinceReferenceDate: 0), Date(timeIntervalSinceReferenceDate: -0.5),
    ]
    static let names = ["", "a", "A", "b", "ab", "é", "e\u{301}"]
    static let titles = ["", "apple", "Apple", "APPLE", "banana", "Banana", "straße", "STRASSE"]
    static let tagPool = ["x", "y", "z", ""]
    static let vocab = ["apple", "Apple", "APRICOT", "app", "banana", "cherry", "fig", "figs", "Fig"]
    static let separators = [" ", ", ", "! ", "  ", " - "]

    mutating func int() -> Int { chance(15) ? pick(Self.ints) : below(9) - 4 }
    mutating func int8() -> Int8 { chance(30) ? pick(Self.int8s) : Int8(below(7) - 3) }
    mutating func double() -> Double { chance(25) ? pick(Self.doubles) : Double(below(9) - 4) / 2 }
    mutating func date() -> Date { chance(25) ? pick(Self.dates) : Date(timeIntervalSinceReferenceDate: Double(below(9) - 4) * 1000.5) }
    mutating func text() -> String {
        var s = ""
        for i in 0..<below(5) { s += (i == 0 ? "" : pick(Self.separators)) + pick(Self.vocab) }
        return s
    }
    mutating func key(_ model: [Int: CHItem]) -> Int? {
        let keys = model.keys.sorted()
        return keys.isEmpty ? nil : keys[below(keys.count)]
    }
    mutating func id() -> Int { chance(3) ? pick([Int.min, Int.max, Int.min + 1]) : below(idSpan) - 10 }

    mutating func item(_ id: Int) -> CHItem {
        CHItem(
            id: id, n: int(), small: int8(), d: double(), date: date(), name: pick(Self.names), title: pick(Self.titles),
            kind: pick(CHKind.allCases), opt: chance(30) ? nil : int(), group: below(4), rank: chance(20) ? pick(Self.ints) : below(7) - 3,
            tags: (0..<below(4)).map { _ in pick(Self.tagPool) }, text: text())
    }

    mutating func query() -> CHQuery {
        var q = baseQuery()
        if chance(25) {
            let w = pick(["apple", "fig", "banana", "apricot", "nothing"])
            let w2 = pick(["apple", "fig", "cherry", "figs"])
            let p = pick(["ap", "fi", "app", "z", "apple"])
            switch below(5) {
            case 0:
                q.search = TextSearch(w)
                q.textMatch = { $0.contains(w) }
            case 1:
                q.search = TextSearch("\(w) \(w2)")
                q.textMatch = { $0.contains(w) && $0.contains(w2) }
            case 2:
                q.search = TextSearch("\(p)*")
                q.textMatch = { $0.contains { $0.hasPrefix(p) } }
            case 3:
                q.search = .anyWord("\(w) \(w2)")
                q.textMatch = { $0.contains(w) || $0.contains(w2) }
            default:
                q.search = .phrase("\(w) \(w2)")
                q.textMatch = { words in words.indices.dropLast().contains { words[$0] == w && words[$0 + 1] == w2 } }
            }
            if chance(40) {
                q.pred = #Predicate { _ in true }
                q.label = "true"
                q.entries = nil
                // The estimate of a search alone: the entries of its terms' ranges (a prefix's
                // range holds one entry per distinct word of a text that starts with it).
                let terms: [(String, Bool)] = q.search!.text.split(separator: " ").map {
                    $0.hasSuffix("*") ? (String($0.dropLast()), true) : (String($0), false)
                }
                let mode = q.search!.mode
                q.textEntries = { items in
                    let counts = terms.map { term in
                        items.reduce(0) { total, item in
                            let words = Set(THWords.words(item.text))
                            return total + (term.1 ? words.filter { $0.hasPrefix(term.0) }.count : (words.contains(term.0) ? 1 : 0))
                        }
                    }
                    return mode == .anyWord ? counts.reduce(0, +) : (counts.min() ?? 0)
                }
            }
            q.label += " search \(q.search!)"
        }
        if chance(10) { q.distinct = true }
        if chance(35) { q.offset = pick([0, 1, 3, 50, 1000, Int.max]) }
        if chance(35) { q.limit = pick([0, 1, 2, 10, 1000, Int.max]) }
        return q
    }

    mutating func baseQuery() -> CHQuery {
        let v = int(), v2 = int(), s = int8(), x = double(), x2 = double(), dt = date(), dt2 = date()
        let name = pick(Self.names), title = pick(Self.titles), tag = pick(Self.tagPool), kind = pick(CHKind.allCases)
        let g = below(5), r = chance(30) ? pick(Self.ints) : below(7) - 3, id1 = id(), id2 = id()
        let list = (0..<below(4)).map { _ in int() }
        switch below(38) {
        case 0: return CHQuery(label: "n == \(v)", pred: #Predicate { $0.n == v }, entries: { $0.filter { $0.n == v }.count })
        case 1: return CHQuery(label: "n in \(list)", pred: #Predicate { list.contains($0.n) }, entries: { $0.filter { list.contains($0.n) }.count })
        case 2:
            return CHQuery(
                label: "n >= \(v) && n <= \(v2)", pred: #Predicate { $0.n >= v && $0.n <= v2 })
        case 3: return CHQuery(label: "n > \(v)", pred: #Predicate { $0.n > v }, entries: { $0.filter { $0.n > v }.count })
        case 4: return CHQuery(label: "n < \(v)", pred: #Predicate { $0.n < v }, entries: { $0.filter { $0.n < v }.count })
        case 5: return CHQuery(label: "n != \(v)", pred: #Predicate { $0.n != v })
        case 6: return CHQuery(label: "n == \(v) || d > \(x)", pred: #Predicate { $0.n == v || $0.d > x })
        case 7: return CHQuery(label: "small >= \(s)", pred: #Predicate { $0.small >= s }, entries: { $0.filter { $0.small >= s }.count })
        case 8: return CHQuery(label: "small < \(s)", pred: #Predicate { $0.small < s }, entries: { $0.filter { $0.small < s }.count })
        case 9: return CHQuery(label: "d >= \(x)", pred: #Predicate { $0.d >= x })
        case 10: return CHQuery(label: "d > \(x) && d <= \(x2)", pred: #Predicate { $0.d > x && $0.d <= x2 })
        case 11: return CHQuery(label: "d == \(x)", pred: #Predicate { $0.d == x })
        case 12:
            return CHQuery(
                label: "date >= \(dt.timeIntervalSinceReferenceDate) && date < \(dt2.timeIntervalSinceReferenceDate)",
                pred: #Predicate { $0.date >= dt && $0.date < dt2 })
        case 13: return CHQuery(label: "date <= \(dt.timeIntervalSinceReferenceDate)", pred: #Predicate { $0.date <= dt })
        case 14: return CHQuery(label: "kind == \(kind)", pred: #Predicate { $0.kind == kind }, entries: { $0.filter { $0.kind == kind }.count })
        case 15: return CHQuery(label: "kind != \(kind)", pred: #Predicate { $0.kind != kind })
        case 16: return CHQuery(label: "name == \(name.debugDescription)", pred: #Predicate { $0.name == name })
        case 17: return CHQuery(label: "title == \(title.debugDescription)", pred: #Predicate { $0.title == title })
        case 18: return CHQuery(label: "opt == nil", pred: #Predicate { $0.opt == nil }, entries: { $0.filter { $0.opt == nil }.count })
        case 19: return CHQuery(label: "opt != nil", pred: #Predicate { $0.opt != nil })
        case 20: return CHQuery(label: "opt == \(v)", pred: #Predicate { $0.opt == v }, entries: { $0.filter { $0.opt == v }.count })
        case 21: return CHQuery(label: "opt != nil && opt! > \(v)", pred: #Predicate { $0.opt != nil && $0.opt! > v })
        case 22:
            return CHQuery(
                label: "group == \(g) && rank >= \(r)", pred: #Predicate { $0.group == g && $0.rank >= r },
                entries: { $0.filter { $0.group == g && $0.rank >= r }.count })
        case 23:
            return CHQuery(
                label: "group == \(g) && rank < \(r)", pred: #Predicate { $0.group == g && $0.rank < r },
                entries: { $0.filter { $0.group == g && $0.rank < r }.count })
        case 24:
            return CHQuery(
                label: "tags contains \(tag.debugDescription)", pred: #Predicate { $0.tags.contains(tag) },
                entries: { $0.filter { $0.tags.contains(tag) }.count })
        case 25: return CHQuery(label: "id >= \(id1) && id < \(id2)", pred: #Predicate { $0.id >= id1 && $0.id < id2 })
        case 27: return CHQuery(label: "n > \(v) || n < \(v2)", pred: #Predicate { $0.n > v || $0.n < v2 })
        case 28: return CHQuery(label: "n == \(v) || n == \(v)", pred: #Predicate { $0.n == v || $0.n == v })
        case 29: return CHQuery(label: "id == \(id1) || id == \(id1) || id >= \(id2)", pred: #Predicate { $0.id == id1 || $0.id == id1 || $0.id >= id2 })
        case 30:
            let ids = [id1, id1, id2]
            return CHQuery(label: "id in \(ids)", pred: #Predicate { ids.contains($0.id) })
        case 31:
            return CHQuery(label: "kind == \(kind) || tags contains \(tag.debugDescription)", pred: #Predicate { $0.kind == kind || $0.tags.contains(tag) })
        case 32:
            let tags = [tag, tag, "y"]
            return CHQuery(label: "tags in \(tags)", pred: #Predicate { $0.tags.contains { tags.contains($0) } })
        // Two indexed conditions: the planner weighs both, and explain() shows the smaller.
        case 34:
            return CHQuery(
                label: "n == \(v) && kind == \(kind)", pred: #Predicate { $0.n == v && $0.kind == kind },
                entries: { items in min(items.filter { $0.n == v }.count, items.filter { $0.kind == kind }.count) })
        case 35:
            return CHQuery(
                label: "small >= \(s) && tags contains \(tag.debugDescription)", pred: #Predicate { $0.small >= s && $0.tags.contains(tag) },
                entries: { items in min(items.filter { $0.small >= s }.count, items.filter { $0.tags.contains(tag) }.count) })
        case 36:
            return CHQuery(
                label: "opt == nil && group == \(g) && rank < \(r)", pred: #Predicate { $0.opt == nil && $0.group == g && $0.rank < r },
                entries: { items in min(items.filter { $0.opt == nil }.count, items.filter { $0.group == g && $0.rank < r }.count) })
        default: return CHQuery(label: "true", pred: #Predicate { _ in true })
        }
    }
}

enum CHRef {
    static func eq(_ a: Double?, _ b: Double?) -> Bool {
        switch (a, b) {
        case (nil, nil): return true
        case let (x?, y?): return x == y || (x.isNaN && y.isNaN)
        default: return false
        }
    }
    /// Sort-order min/max: NaN above every number, first of equal values.
    static func least<V: Comparable>(_ values: [V]) -> V? {
        let numbers = values.filter { $0 == $0 }
        guard let first = numbers.first else { return values.first }
        return numbers.dropFirst().reduce(first) { $1 < $0 ? $1 : $0 }
    }
    static func greatest<V: Comparable>(_ values: [V]) -> V? {
        if let nan = values.first(where: { $0 != $0 }) { return nan }
        guard let first = values.first else { return nil }
        return values.dropFirst().reduce(first) { $0 < $1 ? $1 : $0 }
    }
    static func sum<I: FixedWidthInteger>(_ values: [I]) -> I? {
        let wide = values.reduce(Int128(0)) { $0 + Int128($1) }
        return I(exactly: wide)
    }

    static func expected(_ q: CHQuery, _ model: [Int: CHItem]) throws -> [CHItem] {
        var out = try model.values.sorted { $0.id < $1.id }.filter { try q.pred.evaluate($0) }
        if let match = q.textMatch { out = out.filter { match(THWords.words($0.text)) } }
        if q.distinct {
            var seen = Set<CHKind>()
            out = out.filter { seen.insert($0.kind).inserted }
        }
        if let o = q.offset { out = Array(out.dropFirst(o)) }
        if let l = q.limit { out = Array(out.prefix(l)) }
        return out
    }

    static func check(_ q: CHQuery, _ model: [Int: CHItem], snapshot make0: () -> Results<CHItem>, _ ctx: String, light: Bool = false, failures: inout Int)
        throws
    {
        func make() -> Results<CHItem> {
            var r = make0().filter(q.pred)
            if let s = q.search { r = r.search(\.text, s) }
            if q.distinct { r = r.distinct(by: \.kind) }
            if let o = q.offset { r = r.offset(o) }
            if let l = q.limit { r = r.prefix(l) }
            return r
        }
        let exp = try expected(q, model)
        let ids = exp.map(\.id)
        let where_ = "\(ctx) query [\(q.label)] offset \(q.offset.map(String.init) ?? "-") limit \(q.limit.map(String.init) ?? "-") distinct \(q.distinct)"
        func expect(_ ok: Bool, _ what: @autoclosure () -> String) {
            if !ok {
                failures += 1
                if failures <= 12 { Issue.record("\(where_): \(what())") }
            }
        }
        let c = make().count
        expect(c == exp.count, "count \(c) expected \(exp.count)")
        let fc = try make().fetchCount()
        expect(fc == exp.count, "fetchCount \(fc) expected \(exp.count)")
        let keys = make().keys
        expect(keys.count == ids.count && keys == ids, "keys \(keys) expected \(ids)")
        let nSum = try? make().fetchSum(of: \.n)
        expect(nSum == sum(exp.map(\.n)), "n fetchSum \(String(describing: nSum)) expected \(String(describing: sum(exp.map(\.n))))")
        checkEstimates(q, model, make0, expect)
        if light { return }
        let fetched = try make().fetch().map(\.id)
        expect(fetched == ids, "fetch \(fetched) expected \(ids)")
        expect(make().isEmpty == exp.isEmpty, "isEmpty \(make().isEmpty)")
        expect(make().first?.id == exp.first?.id, "first \(String(describing: make().first?.id)) expected \(String(describing: exp.first?.id))")
        // Aggregates, each on fresh results (no decoded objects cached).
        let mn = make().min(of: \.n), mx = make().max(of: \.n)
        expect(mn == exp.map(\.n).min() && mx == exp.map(\.n).max(), "n min/max \(String(describing: mn))/\(String(describing: mx))")
        let sSum = try? make().fetchSum(of: \.small)
        expect(sSum == sum(exp.map(\.small)), "small fetchSum \(String(describing: sSum)) expected \(String(describing: sum(exp.map(\.small))))")
        expect(make().sum(of: \.small) == (sum(exp.map(\.small)) ?? 0), "small sum \(make().sum(of: \.small))")
        let nAvg = make().average(of: \.n)
        let nAvgExp: Double? = exp.isEmpty ? nil : exp.reduce(0.0) { $0 + Double($1.n) } / Double(exp.count)
        expect(eq(nAvg, nAvgExp), "n average \(String(describing: nAvg)) expected \(String(describing: nAvgExp))")
        let dMin = make().min(of: \.d), dMax = make().max(of: \.d)
        expect(eq(dMin, least(exp.map(\.d))) && eq(dMax, greatest(exp.map(\.d))), "d min/max \(String(describing: dMin))/\(String(describing: dMax))")
        let dSum = make().sum(of: \.d)
        expect(eq(dSum, exp.reduce(0.0) { $0 + $1.d }), "d sum \(dSum)")
        let dAvg = make().average(of: \.d)
        expect(eq(dAvg, exp.isEmpty ? nil : exp.reduce(0.0) { $0 + $1.d } / Double(exp.count)), "d average \(String(describing: dAvg))")
        let tMin = make().min(of: \.date), tMax = make().max(of: \.date), tAvg = make().average(of: \.date)
        let tAvgExp =
            exp.isEmpty ? nil : Date(timeIntervalSinceReferenceDate: exp.reduce(0.0) { $0 + $1.date.timeIntervalSinceReferenceDate } / Double(exp.count))
        expect(
            eq(tMin?.timeIntervalSinceReferenceDate, least(exp.map(\.date))?.timeIntervalSinceReferenceDate)
                && eq(tMax?.timeIntervalSinceReferenceDate, greatest(exp.map(\.date))?.timeIntervalSinceReferenceDate),
            "date min/max \(String(describing: tMin?.timeIntervalSinceReferenceDate))/\(String(describing: tMax?.timeIntervalSinceReferenceDate))")
        expect(
            eq(tAvg?.timeIntervalSinceReferenceDate, tAvgExp?.timeIntervalSinceReferenceDate),
            "date average \(String(describing: tAvg?.timeIntervalSinceReferenceDate)) expected \(String(describing: tAvgExp?.timeIntervalSinceReferenceDate))")
        let oMin = make().min(of: \.opt), oMax = make().max(of: \.opt)
        let opts = exp.compactMap(\.opt)
        expect(oMin == opts.min() && oMax == opts.max(), "opt min/max \(String(describing: oMin))/\(String(describing: oMax))")
    }

    static func checkEstimates(_ q: CHQuery, _ model: [Int: CHItem], _ make0: () -> Results<CHItem>, _ expect: (Bool, @autoclosure () -> String) -> Void) {
        // explain(): the estimate of a single-condition index access is its entries in range.
        if let entries = q.entries, q.search == nil, !q.distinct {
            let text = make0().filter(q.pred).explain()
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("estimated candidates: ") }), !line.contains("≥") {
                let shown = Int(line.dropFirst("estimated candidates: ".count))
                let truth = entries(Array(model.values))
                expect(shown == truth, "explain estimate \(String(describing: shown)), true entries \(truth): \(text)")
            }
        }
        if let entries = q.textEntries, !q.distinct {
            let text = make0().search(\.text, q.search!).explain()
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("estimated candidates: ") }), !line.contains("≥") {
                let shown = Int(line.dropFirst("estimated candidates: ".count))
                let truth = entries(Array(model.values))
                expect(shown == truth, "explain estimate \(String(describing: shown)), true entries \(truth): \(text)")
            }
        }
    }

    /// The same query inside a write transaction (`tx.count`, `tx.objects`; no windows there).
    static func checkTx(_ q: CHQuery, _ model: [Int: CHItem], _ tx: Transaction, _ ctx: String, failures: inout Int) throws {
        var plain = q
        plain.search = nil
        plain.textMatch = nil
        plain.distinct = false
        plain.offset = nil
        plain.limit = nil
        let ids = try expected(plain, model).map(\.id)
        let c = try tx.count(CHItem.self, where: q.pred)
        let objs = try tx.objects(CHItem.self, where: q.pred).map(\.id)
        if c != ids.count || objs != ids {
            failures += 1
            if failures <= 12 { Issue.record("\(ctx) tx query [\(q.label)]: count \(c) objects \(objs) expected \(ids)") }
        }
    }
}

@Suite struct CountHuntTests {
    static func path() -> String { NSTemporaryDirectory() + "strata-counthunt-\(UUID().uuidString).strata" }
    static func remove(_ path: String) {
        for suffix in ["", "-lock"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    static var seed: UInt64 { UInt64(ProcessInfo.processInfo.environment["STRATA_COUNTHUNT_SEED"] ?? "") ?? 0xC0_0A7 }

    /// One random write, applied to the transaction and the model alike.
    static func write(_ g: inout CHGen, _ tx: Transaction, _ model: inout [Int: CHItem]) throws {
        switch g.below(6) {
        case 0, 1:
            let id = g.id()
            let item = g.item(id)
            if model[id] == nil {
                try tx.insert(item)
                model[id] = item
            } else {
                try tx.upsert(item)
                model[id] = item
            }
        case 2:
            let item = g.item(g.id())
            try tx.upsert(item)
            model[item.id] = item
        case 3:
            guard let key = g.key(model) else { return }
            let fresh = g.item(key)
            let which = g.below(6)
            try tx.update(CHItem.self, key: key) { o in
                switch which {
                case 0: o.n = fresh.n
                case 1: o.d = fresh.d; o.date = fresh.date
                case 2: o.opt = fresh.opt; o.small = fresh.small
                case 3: o.text = fresh.text
                case 4: o.tags = fresh.tags; o.kind = fresh.kind
                default: o.group = fresh.group; o.rank = fresh.rank; o.title = fresh.title
                }
            }
            var o = model[key]!
            switch which {
            case 0: o.n = fresh.n
            case 1: o.d = fresh.d; o.date = fresh.date
            case 2: o.opt = fresh.opt; o.small = fresh.small
            case 3: o.text = fresh.text
            case 4: o.tags = fresh.tags; o.kind = fresh.kind
            default: o.group = fresh.group; o.rank = fresh.rank; o.title = fresh.title
            }
            model[key] = o
        default:
            let key = g.chance(80) ? (g.key(model) ?? 0) : g.id()
            try tx.delete(CHItem.self, key: key)
            model[key] = nil
        }
    }

    struct Rollback: Error {}

    @Test func countsWindowsAndAggregatesMatchTheModel() throws {
        try Self.run(seed: Self.seed, load: 110, queries: 90, rounds: 6, writes: 20)
    }

    /// Enough objects for index trees of several levels (branch counts at work), fewer queries.
    @Test func countsOnLargerTreesMatchTheModel() throws {
        try Self.run(seed: Self.seed &+ 1, load: 1500, queries: 24, rounds: 2, writes: 300, idSpan: 2500, light: true)
    }

    static func run(seed: UInt64, load: Int, queries: Int, rounds: Int, writes: Int, idSpan: Int = 140, light: Bool = false) throws {
        var g = CHGen(rng: SeededRandom(seed: seed), idSpan: idSpan)
        let path = Self.path()
        defer { Self.remove(path) }
        var model: [Int: CHItem] = [:]
        var failures = 0
        do {
            let db = try Database(path: path, models: [CHItem.self], options: StoreOptions(durability: .noSync))
            // 1. A bulk load, then snapshot queries.
            try db.write { tx in for _ in 0..<load { try Self.write(&g, tx, &model) } }
            let held = try db.snapshot()
            let heldModel = model
            for _ in 0..<queries {
                let q = g.query()
                try CHRef.check(q, model, snapshot: { db.objects(CHItem.self) }, "seed \(seed) after load", light: light, failures: &failures)
            }
            // 2. Random write transactions; queries on snapshots and inside the writes.
            for round in 0..<rounds {
                try db.write { tx in
                    for _ in 0..<(5 + g.below(writes)) { try Self.write(&g, tx, &model) }
                    for _ in 0..<20 {
                        try CHRef.checkTx(g.query(), model, tx, "seed \(seed) round \(round) in tx", failures: &failures)
                    }
                    // A savepoint rolled back leaves the transaction's view as it was.
                    var scratch = model
                    do {
                        try tx.savepoint {
                            for _ in 0..<(3 + g.below(8)) { try Self.write(&g, tx, &scratch) }
                            for _ in 0..<5 {
                                try CHRef.checkTx(g.query(), scratch, tx, "seed \(seed) round \(round) inside savepoint", failures: &failures)
                            }
                            throw Rollback()
                        }
                    } catch is Rollback {}
                    for _ in 0..<15 {
                        try CHRef.checkTx(g.query(), model, tx, "seed \(seed) round \(round) after rollback", failures: &failures)
                    }
                    // A savepoint kept.
                    try tx.savepoint { for _ in 0..<3 { try Self.write(&g, tx, &model) } }
                    for _ in 0..<10 {
                        try CHRef.checkTx(g.query(), model, tx, "seed \(seed) round \(round) after kept savepoint", failures: &failures)
                    }
                }
                for _ in 0..<(queries / 3) {
                    try CHRef.check(g.query(), model, snapshot: { db.objects(CHItem.self) }, "seed \(seed) round \(round)", light: light, failures: &failures)
                }
            }
            // A snapshot held across the writes answers as the data it saw.
            for _ in 0..<(queries / 3) {
                try CHRef.check(g.query(), heldModel, snapshot: { held.objects(CHItem.self) }, "seed \(seed) held snapshot", light: light, failures: &failures)
            }
            db.close()
        }
        // 3. After a reopen.
        let db = try Database(path: path, models: [CHItem.self], options: StoreOptions(durability: .noSync))
        for _ in 0..<queries {
            try CHRef.check(g.query(), model, snapshot: { db.objects(CHItem.self) }, "seed \(seed) after reopen", light: light, failures: &failures)
        }
        db.close()
        #expect(failures == 0, "seed \(seed): \(failures) mismatches")
    }
}
