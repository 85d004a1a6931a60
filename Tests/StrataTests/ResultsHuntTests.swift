import Testing
import Foundation
import Synchronization
@testable import Strata

// A model-based hunt over Results' positional access, windows and aggregates: random writes in
// several commits, mirrored in a plain dictionary, then random queries (index ranges, compound
// indexes, decoded filters, sorts with ties, distinct, chained windows) whose every positional
// read is compared with the plain-Swift array `objects.filter(evaluate).sorted(...)`. Old
// snapshots are re-checked after later commits. STRATA_RESHUNT_N scales it, STRATA_RESHUNT_SEED
// picks the seed.

protocol RHIndexing: Sendable {}
enum RHIndexed: RHIndexing {}
enum RHPlain: RHIndexing {}

struct RHItem<T: RHIndexing>: Model, Equatable {
    static var indexDescriptors: [IndexDescriptor<RHItem<T>>] {
        T.self == RHIndexed.self
            ? [.on(\.group), .on(\.score), .on(\.rank), .on(\.at), .on(\.small), .on(\.big), .on(\.group, \.at), .on(\.label)] : []
    }
    static var modelName: String { T.self == RHIndexed.self ? "RHIndexed" : "RHPlain" }
    var id: Int
    var group: Int
    var score: Double
    var rank: Int?
    var label: String
    var at: Date
    var small: Int8
    var big: UInt64
    var amount: Int

    static func == (a: RHItem, b: RHItem) -> Bool {
        a.id == b.id && a.group == b.group && (a.score == b.score || (a.score.isNaN && b.score.isNaN)) && a.rank == b.rank
            && a.label.unicodeScalars.elementsEqual(b.label.unicodeScalars) && a.at == b.at && a.small == b.small && a.big == b.big && a.amount == b.amount
    }

    func retagged<U: RHIndexing>(_: U.Type) -> RHItem<U> {
        RHItem<U>(id: id, group: group, score: score, rank: rank, label: label, at: at, small: small, big: big, amount: amount)
    }
}

struct RHRandom {
    var rng: SeededRandom
    mutating func below(_ n: Int) -> Int { n <= 0 ? 0 : rng.below(n) }
    mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
    mutating func pick<C: Collection>(_ c: C) -> C.Element where C.Index == Int { c[c.startIndex + below(c.count)] }
}

enum RHValues {
    static let scores: [Double] = [-1.5, -0.0, 0.0, 1, 2.5, 1e300, -.infinity, .infinity, 7, 7, 3]
    static let labels = ["", "a", "B", "é", "e\u{301}", "Ärger", "room10", "room9", "zz", "a"]
    static let dates: [Date] = [
        .distantPast, Date(timeIntervalSinceReferenceDate: -1), Date(timeIntervalSinceReferenceDate: 0),
        Date(timeIntervalSinceReferenceDate: 1e9), .distantFuture,
    ]
    static let smalls: [Int8] = [.min, -1, 0, 1, 5, .max]
    static let bigs: [UInt64] = [0, 1, 1 << 62, .max - 1, .max]
    static let amounts: [Int] = [0, 1, -1, 1000, -1000, .max, .min, .max - 1]

    static func item(_ r: inout RHRandom, id: Int, nan: Bool) -> RHItem<RHIndexed> {
        RHItem(
            id: id, group: r.below(6), score: nan && r.chance(5) ? .nan : r.pick(scores), rank: r.chance(30) ? nil : r.below(5),
            label: r.pick(labels), at: r.pick(dates), small: r.pick(smalls), big: r.pick(bigs),
            amount: r.chance(90) ? r.below(2001) - 1000 : r.pick(amounts))
    }
}

/// One sort field: its name and the documented order (nil first, NaN above every number).
struct RHSort: Sendable {
    var name: String
    var compare: @Sendable (RHItem<RHIndexed>, RHItem<RHIndexed>) -> ComparisonResult

    func descriptor<T: RHIndexing>(_ order: SortOrder, _: T.Type = T.self) -> SortDescriptor<RHItem<T>> {
        switch name {
        case "group": return SortDescriptor(\.group, order: order)
        case "score": return SortDescriptor(\.score, order: order)
        case "rank": return SortDescriptor(\.rank, order: order)
        case "label": return SortDescriptor(\.label, order: order)
        case "at": return SortDescriptor(\.at, order: order)
        case "small": return SortDescriptor(\.small, order: order)
        case "big": return SortDescriptor(\.big, order: order)
        default: return SortDescriptor(\.id, order: order)
        }
    }

    static func cmp<V: Comparable>(_ x: V, _ y: V) -> ComparisonResult { x < y ? .orderedAscending : (x == y ? .orderedSame : .orderedDescending) }
    static func cmpDouble(_ x: Double, _ y: Double) -> ComparisonResult {
        if x.isNaN || y.isNaN { return x.isNaN == y.isNaN ? .orderedSame : (x.isNaN ? .orderedDescending : .orderedAscending) }
        return cmp(x, y)
    }
    static func cmpOpt<V: Comparable>(_ x: V?, _ y: V?) -> ComparisonResult {
        switch (x, y) {
        case (nil, nil): return .orderedSame
        case (nil, _): return .orderedAscending
        case (_, nil): return .orderedDescending
        case let (x?, y?): return cmp(x, y)
        }
    }

    static let all: [RHSort] = [
        RHSort(name: "group", compare: { cmp($0.group, $1.group) }),
        RHSort(name: "score", compare: { cmpDouble($0.score, $1.score) }),
        RHSort(name: "rank", compare: { cmpOpt($0.rank, $1.rank) }),
        RHSort(name: "label", compare: { cmp($0.label, $1.label) }),
        RHSort(name: "at", compare: { cmp($0.at, $1.at) }),
        RHSort(name: "small", compare: { cmp($0.small, $1.small) }),
        RHSort(name: "big", compare: { cmp($0.big, $1.big) }),
        RHSort(name: "id", compare: { cmp($0.id, $1.id) }),
    ]
}

enum RHWindow: CustomStringConvertible {
    case offset(Int), prefix(Int)
    var description: String {
        switch self {
        case .offset(let k): return ".offset(\(k))"
        case .prefix(let k): return ".prefix(\(k))"
        }
    }
}

/// A random query: predicates (one for each model, the same text), sorts, distinct, windows.
struct RHCase {
    var text: String
    var predicate: Predicate<RHItem<RHIndexed>>?
    var plainPredicate: Predicate<RHItem<RHPlain>>?
    var sorts: [(RHSort, SortOrder)] = []
    var distinctByGroup = false
    var windows: [RHWindow] = []

    var description: String {
        var parts = [text]
        if !sorts.isEmpty { parts.append(".sorted(by: " + sorts.map { "\($0.0.name) \($0.1 == .reverse ? "rev" : "fwd")" }.joined(separator: ", ") + ")") }
        if distinctByGroup { parts.append(".distinct(by: group)") }
        parts += windows.map(\.description)
        return parts.joined()
    }

    static func make(_ r: inout RHRandom) -> RHCase {
        typealias I = RHItem<RHIndexed>
        typealias P = RHItem<RHPlain>
        let g = r.below(6), g2 = r.below(6), k = r.below(5) - 1
        let s = r.pick(RHValues.scores), d = r.pick(RHValues.dates), sm = r.pick(RHValues.smalls), b = r.pick(RHValues.bigs)
        let lo = r.below(40) - 5, hi = lo + r.below(30)
        let list = [g, g2, g]
        let lab = r.pick(RHValues.labels)
        var c: RHCase
        switch r.below(17) {
        case 0: c = RHCase(text: "none", predicate: nil, plainPredicate: nil)
        case 1: c = RHCase(text: "group == \(g)", predicate: #Predicate<I> { $0.group == g }, plainPredicate: #Predicate<P> { $0.group == g })
        case 2: c = RHCase(text: "group < \(g)", predicate: #Predicate<I> { $0.group < g }, plainPredicate: #Predicate<P> { $0.group < g })
        case 3:
            c = RHCase(
                text: "\(list).contains(group)", predicate: #Predicate<I> { list.contains($0.group) }, plainPredicate: #Predicate<P> { list.contains($0.group) }
            )
        case 4: c = RHCase(text: "score > \(s)", predicate: #Predicate<I> { $0.score > s }, plainPredicate: #Predicate<P> { $0.score > s })
        case 5: c = RHCase(text: "score == \(s)", predicate: #Predicate<I> { $0.score == s }, plainPredicate: #Predicate<P> { $0.score == s })
        case 6: c = RHCase(text: "rank == nil", predicate: #Predicate<I> { $0.rank == nil }, plainPredicate: #Predicate<P> { $0.rank == nil })
        case 7:
            c = RHCase(
                text: "rank != nil && rank! > \(k)", predicate: #Predicate<I> { $0.rank != nil && $0.rank! > k },
                plainPredicate: #Predicate<P> { $0.rank != nil && $0.rank! > k })
        case 8:
            c = RHCase(
                text: "label.contains(\(lab.debugDescription))", predicate: #Predicate<I> { $0.label.contains(lab) },
                plainPredicate: #Predicate<P> { $0.label.contains(lab) })
        case 9:
            c = RHCase(
                text: "id >= \(lo) && id < \(hi)", predicate: #Predicate<I> { $0.id >= lo && $0.id < hi },
                plainPredicate: #Predicate<P> { $0.id >= lo && $0.id < hi })
        case 10:
            c = RHCase(
                text: "group == \(g) && at > \(d.timeIntervalSinceReferenceDate)", predicate: #Predicate<I> { $0.group == g && $0.at > d },
                plainPredicate: #Predicate<P> { $0.group == g && $0.at > d })
        case 11: c = RHCase(text: "small <= \(sm)", predicate: #Predicate<I> { $0.small <= sm }, plainPredicate: #Predicate<P> { $0.small <= sm })
        case 12: c = RHCase(text: "big >= \(b)", predicate: #Predicate<I> { $0.big >= b }, plainPredicate: #Predicate<P> { $0.big >= b })
        case 13:
            c = RHCase(
                text: "label == \(lab.debugDescription)", predicate: #Predicate<I> { $0.label == lab }, plainPredicate: #Predicate<P> { $0.label == lab })
        case 14:
            c = RHCase(
                text: "group == \(g) || score < \(s)", predicate: #Predicate<I> { $0.group == g || $0.score < s },
                plainPredicate: #Predicate<P> { $0.group == g || $0.score < s })
        case 15:
            c = RHCase(text: "at <= \(d.timeIntervalSinceReferenceDate)", predicate: #Predicate<I> { $0.at <= d }, plainPredicate: #Predicate<P> { $0.at <= d })
        default:
            c = RHCase(
                text: "group != \(g) && amount > 0", predicate: #Predicate<I> { $0.group != g && $0.amount > 0 },
                plainPredicate: #Predicate<P> { $0.group != g && $0.amount > 0 })
        }
        if r.chance(70) {
            for _ in 0..<(1 + r.below(2)) { c.sorts.append((r.pick(RHSort.all), r.chance(50) ? .reverse : .forward)) }
        }
        c.distinctByGroup = r.chance(10)
        return c
    }

    func windowed(_ r: inout RHRandom, count n: Int) -> RHCase {
        var c = self
        for _ in 0..<r.below(4) {
            let k = r.pick([0, 1, r.below(n + 2), n, n + 1, r.below(n + 2), Int.max, max(0, n - 1)])
            c.windows.append(r.chance(50) ? .offset(k) : .prefix(k))
        }
        return c
    }

    func expected(_ all: [RHItem<RHIndexed>]) throws -> [RHItem<RHIndexed>] {
        var out = try all.filter { try predicate?.evaluate($0) ?? true }
        if !sorts.isEmpty {
            out.sort { a, b in
                for (spec, order) in sorts {
                    var r = spec.compare(a, b)
                    if order == .reverse { r = r == .orderedAscending ? .orderedDescending : (r == .orderedDescending ? .orderedAscending : .orderedSame) }
                    if r != .orderedSame { return r == .orderedAscending }
                }
                return a.id < b.id
            }
        }
        if distinctByGroup {
            var seen = Set<Int>()
            out = out.filter { seen.insert($0.group).inserted }
        }
        for w in windows {
            switch w {
            case .offset(let k): out = Array(out.dropFirst(k))
            case .prefix(let k): out = Array(out.prefix(k))
            }
        }
        return out
    }

    func results<T: RHIndexing>(_ base: Results<RHItem<T>>) -> Results<RHItem<T>> {
        var r = base
        if let p = (predicate as Any?) as? Predicate<RHItem<T>> { r = r.filter(p) }
        if let p = (plainPredicate as Any?) as? Predicate<RHItem<T>> { r = r.filter(p) }
        if !sorts.isEmpty {
            r = r.sorted(by: sorts.map { $0.0.descriptor($0.1, T.self) })
        }
        if distinctByGroup { r = r.distinct(by: \.group) }
        for w in windows {
            switch w {
            case .offset(let k): r = r.offset(k)
            case .prefix(let k): r = r.prefix(k)
            }
        }
        return r
    }
}

@Suite struct ResultsHuntDifferential {
    static func env(_ name: String) -> Int? { ProcessInfo.processInfo.environment[name].flatMap { Int($0) } }

    /// Every positional read of `fresh()` against `expected` (ids); problems appended to `problems`.
    static func check<T: RHIndexing>(
        _ fresh: () -> Results<RHItem<T>>, expected: [RHItem<RHIndexed>], r: inout RHRandom, _ problems: inout [String]
    ) {
        let ids = expected.map(\.id)
        func fail(_ what: String, _ e: Any, _ a: Any) { problems.append("  \(T.self) \(what): expected \(e), got \(a)") }
        let n = ids.count
        let counted = fresh()
        if counted.count != n { fail("count before evaluation", n, counted.count) }
        do {
            let f = try fresh().fetchCount()
            if f != n { fail("fetchCount", n, f) }
        } catch { fail("fetchCount", n, error) }
        do {
            let f = try fresh().fetch().map(\.id)
            if f != ids { fail("fetch", ids.prefix(40), f.prefix(40)) }
        } catch { fail("fetch", ids.prefix(40), error) }
        // Element access: every position of one results value, after `count` was read from the trees.
        if counted.count == n {
            let got = (0..<n).map { counted[$0].id }
            if got != ids { fail("results[i] for every i", ids.prefix(40), got.prefix(40)) }
            if counted.count != n { fail("count after evaluation", n, counted.count) }
        }
        // Element access on results nothing has read yet: the last element, a random one.
        if n > 0 {
            for i in [n - 1, r.below(n), 0] {
                let one = fresh()
                guard one.count == n else { break }
                let got = one[i].id
                if got != ids[i] { fail("fresh results[\(i)]", ids[i], got) }
            }
            if fresh().last?.id != ids.last { fail("last", ids.last as Any, fresh().last?.id as Any) }
        }
        if fresh().first?.id != ids.first { fail("first", ids.first as Any, fresh().first?.id as Any) }
        if fresh().isEmpty != ids.isEmpty { fail("isEmpty", ids.isEmpty, !ids.isEmpty) }
        // Slices and pages at the edges.
        for (lo, hi) in [(0, 0), (n, n), (0, n), (max(0, n - 1), n), (r.below(n + 1), n)] where lo <= hi {
            let s = fresh()
            guard s.count == n else { break }
            let got = s[lo..<hi].map(\.id)
            if got != Array(ids[lo..<hi]) { fail("results[\(lo)..<\(hi)]", ids[lo..<hi], got) }
        }
        for (lo, hi) in [(-3, 2), (n, n + 5), (n + 3, n + 9), (max(0, n - 2), n + 2), (0, Int.max), (Int.min, Int.max), (r.below(n + 1), r.below(n + 1) + n)]
        where lo <= hi {
            let got = fresh().objects(in: lo..<hi).map(\.id)
            let clamped = (lo..<hi).clamped(to: 0..<n)
            if got != Array(ids[clamped]) { fail("objects(in: \(lo)..<\(hi))", ids[clamped], got) }
        }
        let reversed = fresh().reversed().map(\.id)
        if reversed != ids.reversed() { fail("reversed", Array(ids.reversed().prefix(40)), reversed.prefix(40)) }
        let keys = fresh().keys
        if keys != ids { fail("keys", ids.prefix(40), keys.prefix(40)) }
        var it: [Int] = []
        for x in fresh() { it.append(x.id) }
        if it != ids { fail("for-in", ids.prefix(40), it.prefix(40)) }
        if let e = counted.error { fail("error", "nil", e) }
    }

    /// Aggregates of `fresh()` against Swift's own over `expected`.
    static func checkAggregates<T: RHIndexing>(_ fresh: () -> Results<RHItem<T>>, expected: [RHItem<RHIndexed>], _ problems: inout [String]) {
        func fail(_ what: String, _ e: Any, _ a: Any) { problems.append("  \(T.self) \(what): expected \(e), got \(a)") }
        func same(_ a: Double?, _ b: Double?) -> Bool { a == b || (a?.isNaN == true && b?.isNaN == true) }
        // Integer sums: the exact sum when it fits, else an error (whatever the order of addition).
        let exact = expected.reduce(into: (0 as Int, 0 as Int)) { acc, x in
            let (s, o) = acc.0.addingReportingOverflow(x.amount)
            acc.0 = s
            if o { acc.1 += x.amount > 0 ? 1 : -1 }
        }
        let amountSum: Int? = exact.1 == 0 ? exact.0 : nil
        let gotSum = try? fresh().fetchSum(of: \.amount)
        if gotSum != amountSum { fail("fetchSum(amount)", amountSum as Any, gotSum as Any) }
        if fresh().sum(of: \.amount) != (amountSum ?? 0) { fail("sum(amount)", amountSum ?? 0, fresh().sum(of: \.amount)) }
        let groupSum = expected.reduce(0) { $0 + $1.group }
        if fresh().sum(of: \.group) != groupSum { fail("sum(group)", groupSum, fresh().sum(of: \.group)) }
        let bigs = expected.map { Decimal(string: String($0.big))! }.reduce(Decimal(0), +)
        let bigSum: UInt64? = bigs <= Decimal(string: String(UInt64.max))! ? UInt64(String(describing: bigs)) : nil
        let gotBig = try? fresh().fetchSum(of: \.big)
        if gotBig != bigSum { fail("fetchSum(big)", bigSum as Any, gotBig as Any) }
        let smalls = expected.reduce(0) { $0 + Int($1.small) }
        let smallSum: Int8? = Int8(exactly: smalls)
        let gotSmall = try? fresh().fetchSum(of: \.small)
        if gotSmall != smallSum { fail("fetchSum(small)", smallSum as Any, gotSmall as Any) }
        // Min and max in the sort order.
        let byScore = expected.map(\.score).sorted { RHSort.cmpDouble($0, $1) == .orderedAscending }
        if !same(fresh().min(of: \.score), byScore.first) { fail("min(score)", byScore.first as Any, fresh().min(of: \.score) as Any) }
        if !same(fresh().max(of: \.score), byScore.last) { fail("max(score)", byScore.last as Any, fresh().max(of: \.score) as Any) }
        if fresh().min(of: \.small) != expected.map(\.small).min() { fail("min(small)", expected.map(\.small).min() as Any, fresh().min(of: \.small) as Any) }
        if fresh().max(of: \.big) != expected.map(\.big).max() { fail("max(big)", expected.map(\.big).max() as Any, fresh().max(of: \.big) as Any) }
        if fresh().min(of: \.at) != expected.map(\.at).min() { fail("min(at)", expected.map(\.at).min() as Any, fresh().min(of: \.at) as Any) }
        if fresh().max(of: \.at) != expected.map(\.at).max() { fail("max(at)", expected.map(\.at).max() as Any, fresh().max(of: \.at) as Any) }
        if fresh().min(of: \.label) != expected.map(\.label).min() { fail("min(label)", expected.map(\.label).min() as Any, fresh().min(of: \.label) as Any) }
        if fresh().max(of: \.label) != expected.map(\.label).max() { fail("max(label)", expected.map(\.label).max() as Any, fresh().max(of: \.label) as Any) }
        if fresh().min(of: \.rank) != expected.compactMap(\.rank).min() {
            fail("min(rank)", expected.compactMap(\.rank).min() as Any, fresh().min(of: \.rank) as Any)
        }
        if fresh().max(of: \.rank) != expected.compactMap(\.rank).max() {
            fail("max(rank)", expected.compactMap(\.rank).max() as Any, fresh().max(of: \.rank) as Any)
        }
        let avgSmall = expected.isEmpty ? nil : Double(smalls) / Double(expected.count)
        let gotAvg = fresh().average(of: \.small)
        if (gotAvg == nil) != (avgSmall == nil) || abs((gotAvg ?? 0) - (avgSmall ?? 0)) > 1e-9 { fail("average(small)", avgSmall as Any, gotAvg as Any) }
        if (fresh().average(of: \.at) == nil) != expected.isEmpty { fail("average(at) presence", !expected.isEmpty, fresh().average(of: \.at) as Any) }
    }

    @Test func positionsWindowsAndAggregatesMatchSwift() throws {
        let seed = UInt64(Self.env("STRATA_RESHUNT_SEED") ?? 20_261_202)
        let n = Self.env("STRATA_RESHUNT_N") ?? 40
        var r = RHRandom(rng: SeededRandom(seed: seed))
        let db = try Database.inMemory(models: [RHItem<RHIndexed>.self, RHItem<RHPlain>.self])
        var items: [Int: RHItem<RHIndexed>] = [:]
        var nextId = -3
        var problems: [String] = []
        var cases = 0
        // Old snapshots with the objects they saw, re-checked after later commits.
        var kept: [(Snapshot, [RHItem<RHIndexed>])] = []
        for round in 0..<6 {
            try db.write { tx in
                let writes = round == 0 ? n * 2 : 1 + r.below(n)
                for _ in 0..<writes {
                    let keys = items.keys.sorted()
                    switch round == 0 ? 0 : r.below(5) {
                    case 0, 1:
                        nextId += 1 + r.below(2)
                        let t = RHValues.item(&r, id: nextId, nan: round > 2)
                        items[t.id] = t
                        try tx.insert(t)
                        try tx.insert(t.retagged(RHPlain.self))
                    case 2:
                        guard !keys.isEmpty else { continue }
                        let id = r.pick(keys)
                        items[id] = nil
                        _ = try tx.delete(RHItem<RHIndexed>.self, key: id)
                        _ = try tx.delete(RHItem<RHPlain>.self, key: id)
                    default:
                        guard !keys.isEmpty else { continue }
                        let id = r.pick(keys)
                        var t = RHValues.item(&r, id: id, nan: round > 2)
                        if r.chance(50), let old = items[id] { t.label = old.label }
                        items[id] = t
                        let stored = t
                        try tx.update(RHItem<RHIndexed>.self, key: id) { $0 = stored }
                        try tx.upsert(stored.retagged(RHPlain.self))
                    }
                }
            }
            let all = items.values.sorted { $0.id < $1.id }
            kept.append((try db.snapshot(), all))
            for _ in 0..<(n / 2 + 5) {
                cases += 1
                let base = RHCase.make(&r)
                let unwindowed = try base.expected(all)
                let c = base.windowed(&r, count: unwindowed.count)
                let expected = try c.expected(all)
                var here: [String] = []
                Self.check({ c.results(db.objects(RHItem<RHIndexed>.self)) }, expected: expected, r: &r, &here)
                Self.check({ c.results(db.objects(RHItem<RHPlain>.self)) }, expected: expected, r: &r, &here)
                Self.checkAggregates({ c.results(db.objects(RHItem<RHIndexed>.self)) }, expected: expected, &here)
                Self.checkAggregates({ c.results(db.objects(RHItem<RHPlain>.self)) }, expected: expected, &here)
                // Windows chained on top of the results already read.
                let read = c.results(db.objects(RHItem<RHIndexed>.self))
                _ = read.count
                let k = r.below(expected.count + 2), m = r.below(expected.count + 2)
                let chained = read.offset(k).prefix(m).offset(1).map(\.id)
                let want = Array(expected.dropFirst(k).prefix(m).dropFirst(1).map(\.id))
                if chained != want { here.append("  chained .offset(\(k)).prefix(\(m)).offset(1): expected \(want), got \(chained)") }
                if !here.isEmpty { problems.append("round \(round) \(c.description)\n" + here.joined(separator: "\n")) }
            }
            // Old snapshots answer as they did.
            for (snapshot, old) in kept {
                let c = RHCase.make(&r)
                let expected = try c.expected(old)
                var here: [String] = []
                Self.check({ c.results(snapshot.objects(RHItem<RHIndexed>.self)) }, expected: expected, r: &r, &here)
                Self.checkAggregates({ c.results(snapshot.objects(RHItem<RHIndexed>.self)) }, expected: expected, &here)
                if !here.isEmpty { problems.append("round \(round) snapshot v\(snapshot.version) \(c.description)\n" + here.joined(separator: "\n")) }
            }
        }
        if !problems.isEmpty { print(problems.prefix(15).joined(separator: "\n")) }
        #expect(problems.isEmpty, "seed \(seed): \(problems.count) of \(cases) cases failed; first: \(problems.first ?? "")")
    }

    /// Counts inside a write transaction see its own writes (and only after commit do results), and
    /// a snapshot taken before keeps its counts.
    @Test func countsInsideAWriteSeeItsOwnWrites() throws {
        let seed = UInt64(Self.env("STRATA_RESHUNT_SEED") ?? 7)
        let n = Self.env("STRATA_RESHUNT_N") ?? 40
        var r = RHRandom(rng: SeededRandom(seed: seed))
        let db = try Database.inMemory(models: [RHItem<RHIndexed>.self, RHItem<RHPlain>.self])
        var items: [Int: RHItem<RHIndexed>] = [:]
        try db.write { tx in
            for id in 0..<(n * 3) {
                let t = RHValues.item(&r, id: id, nan: true)
                items[id] = t
                try tx.insert(t)
            }
        }
        var problems: [String] = []
        for round in 0..<4 {
            let before = items.values.sorted { $0.id < $1.id }
            let snapshot = try db.snapshot()
            let commit = round % 2 == 0
            var inside = items
            do {
                try db.write { tx in
                    for _ in 0..<(n / 2 + 1) {
                        let keys = inside.keys.sorted()
                        switch r.below(3) {
                        case 0:
                            let id = (keys.last ?? 0) + 1 + r.below(3)
                            let t = RHValues.item(&r, id: id, nan: true)
                            inside[id] = t
                            try tx.insert(t)
                        case 1:
                            guard !keys.isEmpty else { continue }
                            let id = r.pick(keys)
                            inside[id] = nil
                            _ = try tx.delete(RHItem<RHIndexed>.self, key: id)
                        default:
                            guard !keys.isEmpty else { continue }
                            let id = r.pick(keys)
                            let t = RHValues.item(&r, id: id, nan: true)
                            inside[id] = t
                            try tx.update(RHItem<RHIndexed>.self, key: id) { $0 = t }
                        }
                        let now = inside.values.sorted { $0.id < $1.id }
                        for _ in 0..<3 {
                            let c = RHCase.make(&r)
                            let predicate = c.predicate
                            let want = try now.filter { try predicate?.evaluate($0) ?? true }
                            let got = try tx.count(RHItem<RHIndexed>.self, where: predicate)
                            if got != want.count { problems.append("round \(round) in write \(c.text): count expected \(want.count), got \(got)") }
                            let descriptors = c.sorts.map { $0.0.descriptor($0.1, RHIndexed.self) }
                            let objects = try tx.objects(RHItem<RHIndexed>.self, where: predicate, sortedBy: descriptors).map(\.id)
                            var sortedCase = c
                            sortedCase.distinctByGroup = false
                            let wantIds = try sortedCase.expected(now).map(\.id)
                            if objects != wantIds { problems.append("round \(round) in write \(c.description): objects expected \(wantIds), got \(objects)") }
                            // The database still reads the last commit.
                            let outside = db.objects(RHItem<RHIndexed>.self).filter(predicate ?? #Predicate { _ in true }).count
                            let wantOutside = try before.filter { try predicate?.evaluate($0) ?? true }.count
                            if outside != wantOutside { problems.append("round \(round) outside write \(c.text): expected \(wantOutside), got \(outside)") }
                        }
                    }
                    if !commit { throw CancellationError() }
                }
            } catch is CancellationError {}
            if commit { items = inside }
            let after = items.values.sorted { $0.id < $1.id }
            for _ in 0..<5 {
                let c = RHCase.make(&r)
                var p: [String] = []
                Self.check({ c.results(db.objects(RHItem<RHIndexed>.self)) }, expected: try c.expected(after), r: &r, &p)
                Self.check({ c.results(snapshot.objects(RHItem<RHIndexed>.self)) }, expected: try c.expected(before), r: &r, &p)
                if !p.isEmpty { problems.append("round \(round) after \(commit ? "commit" : "rollback") \(c.description)\n" + p.joined(separator: "\n")) }
            }
        }
        if !problems.isEmpty { print(problems.prefix(15).joined(separator: "\n")) }
        #expect(problems.isEmpty, "seed \(seed): \(problems.count) problems; first: \(problems.first ?? "")")
    }
}

struct RHEdge: Model {
    static let indexes: [PartialKeyPath<RHEdge> & Sendable] = [\.i, \.u, \.i8, \.d, \.at, \.oi, \.s, \.dec]
    var id: Int
    var i: Int = 0
    var u: UInt64 = 0
    var i8: Int8 = 0
    var f: Float = 0
    var d: Double = 0
    var dec: Decimal = 0
    var at: Date = Date(timeIntervalSinceReferenceDate: 0)
    var oi: Int?
    var od: Double?
    var s: String = ""
}

@Suite struct ResultsHuntAggregates {
    func database(_ objects: [RHEdge]) throws -> Database {
        let db = try Database.inMemory(models: [RHEdge.self])
        try db.write { tx in for o in objects { try tx.insert(o) } }
        return db
    }

    /// The same objects in every order a query can give them: key order (read from the records), a
    /// reverse sort (decoded), a filter an index answers exactly, and one it does not.
    func shapes(_ db: Database) -> [(String, Results<RHEdge>)] {
        let lowest = Int.min
        return [
            ("all", db.objects(RHEdge.self)),
            ("reverse id", db.objects(RHEdge.self).sorted(by: SortDescriptor(\.id, order: .reverse))),
            ("id >= min", db.objects(RHEdge.self).filter(#Predicate { $0.id >= lowest })),
            ("s != \"\\u{1}\"", db.objects(RHEdge.self).filter(#Predicate { $0.s != "\u{1}" })),
        ]
    }

    /// An integer sum that fits is the sum, whatever order the values are added in: the partial
    /// sums may pass the type's bounds on the way.
    @Test func integerSumsThatFitDoNotDependOnOrder() throws {
        let db = try database([RHEdge(id: 1, i: .max, u: .max, i8: 100), RHEdge(id: 2, i: 1, u: 1, i8: 100), RHEdge(id: 3, i: -1, u: 0, i8: -100)])
        for (name, r) in shapes(db) {
            #expect(try r.fetchSum(of: \.i) == .max, "\(name)")
            #expect(r.sum(of: \.i) == .max, "\(name)")
            #expect(try r.fetchSum(of: \.i8) == 100, "\(name)")
            #expect(throws: StrataError.self, "\(name)") { try r.fetchSum(of: \.u) }
            #expect(r.sum(of: \.u) == 0, "\(name)")
        }
        let low = try database([RHEdge(id: 1, i: .min), RHEdge(id: 2, i: -1)])
        for (name, r) in shapes(low) {
            #expect(throws: StrataError.self, "\(name)") { try r.fetchSum(of: \.i) }
            #expect(r.sum(of: \.i) == 0, "\(name)")
        }
    }

    @Test func emptyAndSingleResults() throws {
        let empty = try database([])
        for (name, r) in shapes(empty) {
            #expect(r.sum(of: \.i) == 0 && r.sum(of: \.d) == 0 && r.sum(of: \.dec) == 0, "\(name)")
            #expect(r.min(of: \.i) == nil && r.max(of: \.s) == nil && r.min(of: \.oi) == nil, "\(name)")
            #expect(r.average(of: \.i) == nil && r.average(of: \.d) == nil && r.average(of: \.at) == nil, "\(name)")
            #expect(r.first == nil && r.last == nil && r.isEmpty && r.keys.isEmpty, "\(name)")
            #expect(r.objects(in: 0..<10).isEmpty, "\(name)")
        }
        let at = Date(timeIntervalSinceReferenceDate: 123.456)
        let one = try database([RHEdge(id: 9, i: .min, i8: .min, f: 1.5, d: -0.0, dec: Decimal(string: "0.10000000000000000001")!, at: at, s: "e\u{301}")])
        for (name, r) in shapes(one) {
            #expect(r.average(of: \.i) == Double(Int.min), "\(name)")
            #expect(r.average(of: \.i8) == -128, "\(name)")
            #expect(r.average(of: \.f) == 1.5, "\(name)")
            #expect(r.average(of: \.at) == at, "\(name)")
            #expect(r.sum(of: \.dec) == Decimal(string: "0.10000000000000000001")!, "\(name)")
            #expect(r.min(of: \.dec) == Decimal(string: "0.10000000000000000001")!, "\(name)")
            #expect(r.max(of: \.s) == "é", "\(name)")
            #expect(r.min(of: \.oi) == nil && r.max(of: \.od) == nil, "\(name)")
            #expect(r.sum(of: \.d).sign == .minus || r.sum(of: \.d) == 0, "\(name)")
        }
    }

    @Test func edgeValuesMatchSwift() throws {
        let objects = [
            RHEdge(id: 1, u: .max, i8: .max, f: .nan, d: .infinity, dec: Decimal(string: "0.1")!, at: .distantFuture, oi: nil, od: nil, s: ""),
            RHEdge(id: 2, u: 0, i8: .min, f: -.infinity, d: -.infinity, dec: Decimal(string: "0.10000000000000000001")!, at: .distantPast, s: "é"),
            RHEdge(
                id: 3, u: 1, i8: 0, f: 2, d: -0.0, dec: Decimal(string: "-12345678901234567890.5")!, at: Date(timeIntervalSinceReferenceDate: 0), oi: 3,
                s: "e\u{301}"),
            RHEdge(
                id: 4, u: 5, i8: 1, f: .greatestFiniteMagnitude, d: 0.0, dec: Decimal.greatestFiniteMagnitude, at: Date(timeIntervalSinceReferenceDate: 0),
                oi: -3, od: 2, s: "a\u{0}b"),
        ]
        let db = try database(objects)
        for (name, r) in shapes(db) {
            #expect(r.max(of: \.u) == .max && r.min(of: \.u) == 0, "\(name)")
            #expect(r.max(of: \.i8) == .max && r.min(of: \.i8) == .min, "\(name)")
            #expect(r.max(of: \.f)?.isNaN == true && r.min(of: \.f) == -.infinity, "\(name)")
            #expect(r.sum(of: \.d).isNaN, "\(name)")
            #expect(r.min(of: \.d) == -.infinity && r.max(of: \.d) == .infinity, "\(name)")
            #expect(r.min(of: \.dec) == Decimal(string: "-12345678901234567890.5")!, "\(name)")
            #expect(r.max(of: \.dec) == Decimal.greatestFiniteMagnitude, "\(name)")
            #expect(r.min(of: \.at) == .distantPast && r.max(of: \.at) == .distantFuture, "\(name)")
            #expect(r.min(of: \.oi) == -3 && r.max(of: \.oi) == 3 && r.min(of: \.od) == 2, "\(name)")
            #expect(r.min(of: \.s) == "" && r.max(of: \.s) == objects.map(\.s).max(), "\(name)")
            #expect(r.sum(of: \.i8) == 0, "\(name)")  // 127 - 128 + 0 + 1
            #expect(r.average(of: \.i8) == 0, "\(name)")
            let decimals = objects.map(\.dec).reduce(0, +)
            #expect(r.sum(of: \.dec) == decimals, "\(name)")
        }
    }
}

struct RHLongKey: Model {
    static let indexes: [PartialKeyPath<RHLongKey> & Sendable] = [\.n, \.tag]
    static let indexDescriptors: [IndexDescriptor<RHLongKey>] = [.on(\.n, \.tag)]
    var id: String
    var n: Int
    var tag: String
}

@Suite struct ResultsHuntLongKeys {
    /// Long string keys (a few entries per page) and long indexed strings: positions from the
    /// counted trees agree with the plain array, after deletes that merge pages.
    @Test func positionsOverLongKeys() throws {
        let n = (ResultsHuntDifferential.env("STRATA_RESHUNT_N") ?? 40) * 4
        var r = RHRandom(rng: SeededRandom(seed: 99))
        let db = try Database.inMemory(models: [RHLongKey.self])
        var items: [String: RHLongKey] = [:]
        let alphabet = ["a", "é", "e\u{301}", "z", "Ω", "😀", "\u{0}", "b"]
        // (Tags leave out the combining accent: Swift's `<` is not a total order with it.)
        func longString(_ length: Int, _ alphabet: [String] = alphabet) -> String {
            var s = ""
            while s.utf8.count < length { s += alphabet[r.below(alphabet.count)] }
            while s.utf8.count > length { s.removeLast() }
            return s
        }
        var problems: [String] = []
        for round in 0..<4 {
            try db.write { tx in
                for _ in 0..<n {
                    if round > 0, r.chance(40), let key = items.keys.sorted().first(where: { _ in r.chance(10) }) {
                        items[key] = nil
                        _ = try tx.delete(RHLongKey.self, key: key)
                        continue
                    }
                    // An index entry holds the value and the key: a long tag only with a short key.
                    let longKey = r.chance(50)
                    var id = longString(longKey ? 900 + r.below(60) : 1 + r.below(40))
                    while (KeyEncoding.encode(id)?.count ?? 0) > 960 { id.removeLast() }  // (a NUL byte takes two)
                    let tag = longString(!longKey && r.chance(30) ? 800 : r.below(5), ["a", "é", "z", "Ω", "😀", "b"])
                    let o = RHLongKey(id: id, n: r.below(4), tag: tag)
                    items[id] = o
                    try tx.upsert(o)
                }
            }
            // Key order is the key encoding's order: the UTF-8 bytes of the canonical (NFC) form.
            func keyOrder(_ a: String, _ b: String) -> Bool {
                a.precomposedStringWithCanonicalMapping.utf8.lexicographicallyPrecedes(b.precomposedStringWithCanonicalMapping.utf8)
            }
            let all = items.values.sorted { keyOrder($0.id, $1.id) }
            let queries: [(String, Results<RHLongKey>, [RHLongKey])] = [
                ("all", db.objects(RHLongKey.self), all),
                ("n == 2", db.objects(RHLongKey.self).filter(#Predicate { $0.n == 2 }), all.filter { $0.n == 2 }),
                (
                    "n by reverse", db.objects(RHLongKey.self).sorted(by: SortDescriptor(\.n, order: .reverse)),
                    all.enumerated().sorted { $0.element.n != $1.element.n ? $0.element.n > $1.element.n : $0.offset < $1.offset }.map(\.element)
                ),
                (
                    "tag by swift", db.objects(RHLongKey.self).sorted(by: SortDescriptor(\.tag)),
                    all.enumerated().sorted { $0.element.tag != $1.element.tag ? $0.element.tag < $1.element.tag : $0.offset < $1.offset }.map(\.element)
                ),
                ("offset 3 prefix 7", db.objects(RHLongKey.self).offset(3).prefix(7), Array(all.dropFirst(3).prefix(7))),
            ]
            for (name, results, expected) in queries {
                let ids = expected.map(\.id)
                if results.count != ids.count { problems.append("round \(round) \(name): count \(results.count), expected \(ids.count)") }
                let got = (0..<min(results.count, ids.count)).map { results[$0].id }
                if got != Array(ids.prefix(got.count)) { problems.append("round \(round) \(name): results[i] differ") }
                if results.keys != ids { problems.append("round \(round) \(name): keys differ") }
                if Array(results.reversed()).map(\.id) != ids.reversed() { problems.append("round \(round) \(name): reversed differ") }
            }
            for _ in 0..<5 where !all.isEmpty {
                let i = r.below(all.count)
                let fresh = db.objects(RHLongKey.self)
                if fresh[i].id != all[i].id { problems.append("round \(round): fresh results[\(i)] differ") }
            }
        }
        #expect(problems.isEmpty, "\(problems.prefix(10))")
    }
}

/// A model whose hand-written Codable stores an `Int` property as text and a `Date` as an ISO
/// string: the stored field's type is not the property's.
struct RHTextual: Model, Equatable {
    var id: Int
    var n: Int
    var when: Date
    var score: Double
    enum CodingKeys: String, CodingKey { case id, n, when, score }
    init(id: Int, n: Int, when: Date, score: Double) {
        self.id = id
        self.n = n
        self.when = when
        self.score = score
    }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        n = Int(try c.decode(String.self, forKey: .n)) ?? -1
        when = Date(timeIntervalSinceReferenceDate: Double(try c.decode(String.self, forKey: .when)) ?? 0)
        score = Double(try c.decode(Int.self, forKey: .score))
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(String(n), forKey: .n)
        try c.encode(String(when.timeIntervalSinceReferenceDate), forKey: .when)
        try c.encode(Int(score), forKey: .score)
    }
}

@Suite struct ResultsHuntTextual {
    @Test func aggregatesAndSortsOfAPropertyStoredAsAnotherType() throws {
        let db = try Database.inMemory(models: [RHTextual.self])
        let objects = [9, 10, 100, 2, -5].enumerated().map {
            RHTextual(id: $0.offset, n: $0.element, when: Date(timeIntervalSinceReferenceDate: Double($0.element)), score: Double($0.element))
        }
        try db.write { tx in for o in objects { try tx.insert(o) } }
        let all = db.objects(RHTextual.self)
        #expect(all.min(of: \.n) == -5)
        #expect(all.max(of: \.n) == 100)
        #expect(all.sum(of: \.n) == 116)
        #expect(all.min(of: \.when) == Date(timeIntervalSinceReferenceDate: -5))
        #expect(all.max(of: \.score) == 100)
        #expect(all.sum(of: \.score) == 116)
        #expect(all.average(of: \.score) == 116.0 / 5)
        #expect(all.sorted(by: SortDescriptor(\.n)).map(\.n) == [-5, 2, 9, 10, 100])
        #expect(all.sorted(by: SortDescriptor(\.n, order: .reverse)).map(\.n) == [100, 10, 9, 2, -5])
        #expect(all.sorted(by: SortDescriptor(\.when)).map(\.n) == [-5, 2, 9, 10, 100])
        #expect(all.sorted(by: SortDescriptor(\.score)).map(\.n) == [-5, 2, 9, 10, 100])
        let nine = 9
        #expect(all.filter(#Predicate { $0.n > nine }).map(\.n) == [10, 100])
        #expect(all.filter(#Predicate { $0.n > nine }).count == 2)
        #expect(all.filter(#Predicate { $0.n == nine }).map(\.id) == [0])
        #expect(all.filter(#Predicate { $0.score > 9.5 }).map(\.n) == [10, 100])
        #expect(all.filter(#Predicate { $0.score > 9.5 }).sorted(by: SortDescriptor(\.n)).prefix(1).map(\.n) == [10])
    }
}

@Suite struct ResultsHuntClosed {
    /// Results and a snapshot taken before `close()` keep answering for their commit while a new
    /// handle on the same file rewrites every object many times (pages freed and reused).
    @Test func snapshotsOutliveTheirHandleWhileAnotherHandleWrites() throws {
        typealias I = RHItem<RHIndexed>
        let path = databasePath()
        var r = RHRandom(rng: SeededRandom(seed: 5))
        let first = try Database(path: path, models: [I.self, RHItem<RHPlain>.self], options: StoreOptions(durability: .noSync))
        let objects = (0..<300).map { RHValues.item(&r, id: $0, nan: false) }
        try first.write { tx in for o in objects { try tx.insert(o) } }
        let snapshot = try first.snapshot()
        let lazyAll = first.objects(I.self)
        let lazyGroup = first.objects(I.self).filter(#Predicate { $0.group == 2 }).sorted(by: SortDescriptor(\.score, order: .reverse))
        let counted = first.objects(I.self).filter(#Predicate { $0.group == 3 })
        #expect(counted.count == objects.filter { $0.group == 3 }.count)
        first.close()
        let second = try Database(path: path, models: [I.self, RHItem<RHPlain>.self], options: StoreOptions(durability: .noSync))
        for round in 0..<10 {
            try second.write { tx in
                _ = try tx.deleteAll(I.self)
                for id in 0..<300 { try tx.insert(RHValues.item(&r, id: id + round * 1000, nan: false)) }
            }
        }
        let group2 = try RHCase(text: "", predicate: #Predicate { $0.group == 2 }, plainPredicate: nil, sorts: [(RHSort.all[1], .reverse)]).expected(objects)
        #expect(lazyAll.map(\.id) == objects.map(\.id))
        #expect(lazyAll[299] == objects[299])
        #expect(lazyGroup.map(\.id) == group2.map(\.id))
        #expect(Array(counted).map(\.id) == objects.filter { $0.group == 3 }.map(\.id))
        #expect(snapshot.objects(I.self).filter(#Predicate { $0.group == 1 }).count == objects.filter { $0.group == 1 }.count)
        #expect(snapshot.objects(I.self).sum(of: \.group) == objects.reduce(0) { $0 + $1.group })
        #expect(try snapshot.object(I.self, key: 17) == objects[17])
        #expect(lazyAll.error == nil && lazyGroup.error == nil && counted.error == nil)
        #expect(second.objects(I.self).count == 300)
        second.close()
    }
}

@Suite struct ResultsHuntStopped {
    /// Results stopped under `withProgress` (the handler said stop, or the task was cancelled)
    /// iterate fewer than `count` elements: copying them into an array ended in the standard
    /// library's "invalid Collection: less than 'count' elements" trap, and appending them in
    /// "underestimatedCount was an overestimate". The copy ends short and `withProgress` throws.
    @Test func copyingResultsStoppedMidwayDoesNotTrap() throws {
        let db = try Database.inMemory(models: [RHItem<RHIndexed>.self, RHItem<RHPlain>.self])
        var r = RHRandom(rng: SeededRandom(seed: 3))
        try db.write { tx in for id in 0..<3_000 { try tx.insert(RHValues.item(&r, id: id, nan: false)) } }
        // (Results evaluated while stopped keep the stop as their error: each copy gets its own.)
        let shapes: [() -> Results<RHItem<RHIndexed>>] = [
            { db.objects(RHItem<RHIndexed>.self) },
            { db.objects(RHItem<RHIndexed>.self).filter(#Predicate { $0.group < 5 }).sorted(by: SortDescriptor(\.score)) },
        ]
        for fresh in shapes {
            // Evaluated before the operation: only the iteration is stopped.
            let evaluated = fresh()
            _ = evaluated.count
            _ = evaluated.first
            for results in [fresh(), evaluated] {
                #expect(throws: CancellationError.self) { try withProgress(every: 100, { $0.completed < 500 }) { Array(results).count } }
            }
            for results in [fresh(), evaluated] {
                #expect(throws: CancellationError.self) { try withProgress(every: 100, { $0.completed < 500 }) { ContiguousArray(results).count } }
            }
            for results in [fresh(), evaluated] {
                #expect(throws: CancellationError.self) {
                    try withProgress(every: 100, { $0.completed < 500 }) { () -> Int in
                        var all = [RHItem<RHIndexed>]()
                        all.append(contentsOf: results)
                        return all.count
                    }
                }
            }
            for results in [fresh(), evaluated] {
                #expect(throws: CancellationError.self) { try withProgress(every: 100, { $0.completed < 500 }) { results.sorted { $0.id > $1.id }.count } }
            }
            let results = fresh()
            // Not stopped: every element.
            let n = results.count
            #expect(try withProgress(every: 100, { _ in true }) { Array(results).count } == n)
            #expect(
                try withProgress(every: 100, { _ in true }) { () -> Int in
                    var all = [RHItem<RHIndexed>]()
                    all.append(contentsOf: results)
                    return all.count
                } == n)
            #expect(Array(results).map(\.id) == results.keys)
            #expect(results.underestimatedCount == n)
        }
    }

    /// The standard library's index loops over results stopped midway: `count` drops to 0 so
    /// that loops over it end, and `endIndex` dropped with it, so `map` (which reads `count` once)
    /// stepped past it and `firstIndex(where:)` never met it: "Index out of bounds", a trap that
    /// killed the process (found by the review of 2026-12-07). They end over placeholders, and
    /// `withProgress` throws.
    @Test func indexLoopsOverResultsStoppedMidwayDoNotTrap() throws {
        typealias I = RHItem<RHIndexed>
        let db = try Database.inMemory(models: [I.self, RHItem<RHPlain>.self])
        var r = RHRandom(rng: SeededRandom(seed: 5))
        try db.write { tx in for id in 0..<3_000 { try tx.insert(RHValues.item(&r, id: id, nan: false)) } }
        let shapes: [() -> Results<I>] = [
            { db.objects(I.self) },
            { db.objects(I.self).filter(#Predicate { $0.group < 5 }).sorted(by: SortDescriptor(\.score)) },
        ]
        for fresh in shapes {
            let evaluated = fresh()
            _ = evaluated.count
            for results in [fresh(), evaluated] {
                #expect(throws: CancellationError.self) { try withProgress(every: 100, { $0.completed < 500 }) { results.map(\.id).count } }
                #expect(throws: CancellationError.self) {
                    try withProgress(every: 100, { $0.completed < 500 }) { results.firstIndex { $0.id == -1 } ?? -1 }
                }
                #expect(throws: CancellationError.self) {
                    try withProgress(every: 100, { $0.completed < 500 }) { () -> Int in
                        _ = results.map(\.id)
                        return results.last?.id ?? -1
                    }
                }
                #expect(throws: CancellationError.self) { try withProgress(every: 100, { $0.completed < 500 }) { results.reversed().map(\.id).count } }
            }
            // Not stopped: the same loops give every element.
            let results = fresh()
            #expect(results.map(\.id) == results.keys)
            #expect(results.last?.id == results.keys.last)
            #expect(results.firstIndex { $0.id == results.keys.last } == results.count - 1)
        }
    }

    /// Results first read inside an operation that was stopped are not that stop's forever: read
    /// again afterwards (they are `Sendable` and may be shared) they give the query's answer and
    /// no error. Evaluation stopped midway kept the stop as the results' failure (empty results
    /// whose error is the cancellation), and an element read as the stop came kept it as `error`.
    @Test func resultsReadWhileStoppedAnswerAfterwards() throws {
        typealias I = RHItem<RHIndexed>
        let db = try Database.inMemory(models: [I.self, RHItem<RHPlain>.self])
        var r = RHRandom(rng: SeededRandom(seed: 4))
        let objects = (0..<3_000).map { RHValues.item(&r, id: $0, nan: false) }
        try db.write { tx in for o in objects { try tx.insert(o) } }
        let lab = "a"
        let shapes: [(String, Results<I>, [Int])] = [
            ("scan", db.objects(I.self), objects.map(\.id)),
            ("decoded filter", db.objects(I.self).filter(#Predicate { $0.label.contains(lab) }), objects.filter { $0.label.contains(lab) }.map(\.id)),
            (
                "record filter, sorted", db.objects(I.self).filter(#Predicate { $0.amount > 0 }).sorted(by: SortDescriptor(\.amount)),
                objects.filter { $0.amount > 0 }.sorted { ($0.amount, $0.id) < ($1.amount, $1.id) }.map(\.id)
            ),
            (
                "sorted by label", db.objects(I.self).sorted(by: SortDescriptor(\.label)),
                try RHCase(text: "", predicate: nil, plainPredicate: nil, sorts: [(RHSort.all[3], .forward)]).expected(objects).map(\.id)
            ),
        ]
        for (name, results, ids) in shapes {
            #expect(throws: CancellationError.self, "\(name)") {
                try withProgress(every: 100, { $0.completed < 300 }) { () -> Int in
                    var n = 0
                    for _ in results { n += 1 }
                    return n
                }
            }
            #expect(results.error == nil, "\(name): \(results.error.map { "\($0)" } ?? "")")
            #expect(results.count == ids.count, "\(name)")
            #expect(results.keys == ids, "\(name)")
            #expect(try results.fetch().map(\.id) == ids, "\(name)")
            #expect(Array(results).map(\.id) == ids, "\(name)")
        }
    }
}

struct RHKeyed<K: Codable & Sendable & Hashable & Comparable>: Model {
    static var indexes: [PartialKeyPath<RHKeyed<K>> & Sendable] { [\.n] }
    var id: K
    var n: Int
    var label: String
}

@Suite struct ResultsHuntKeyTypes {
    /// For each key type: the unsorted results are in key order (Swift's `<` on the keys), and
    /// every position, reverse sort with ties, sort by key and window agree with the array.
    func check<K: Codable & Sendable & Hashable & Comparable>(_ keys: [K], line: Int = #line) throws {
        typealias M = RHKeyed<K>
        let db = try Database.inMemory(models: [M.self])
        var r = RHRandom(rng: SeededRandom(seed: UInt64(line)))
        var objects: [M] = []
        var shuffled = keys
        for i in shuffled.indices.reversed() { shuffled.swapAt(i, r.below(i + 1)) }
        for key in shuffled where !objects.contains(where: { $0.id == key }) {
            objects.append(M(id: key, n: r.below(3), label: ["b", "a", ""][r.below(3)]))
        }
        try db.write { tx in for o in objects { try tx.insert(o) } }
        let byKey = objects.sorted { $0.id < $1.id }
        func tied(_ a: M, _ b: M, _ x: Int, _ y: Int) -> Bool { x != y ? x < y : a.id < b.id }
        let cases: [(String, Results<M>, [M])] = [
            ("all", db.objects(M.self), byKey),
            ("n reverse", db.objects(M.self).sorted(by: SortDescriptor(\.n, order: .reverse)), byKey.sorted { tied($0, $1, -$0.n, -$1.n) }),
            ("n == 1", db.objects(M.self).filter(#Predicate { $0.n == 1 }), byKey.filter { $0.n == 1 }),
            ("id reverse", db.objects(M.self).sorted(by: SortDescriptor(\.id, order: .reverse)), byKey.reversed()),
            (
                "label, id reverse", db.objects(M.self).sorted(by: SortDescriptor(\.label), SortDescriptor(\.id, order: .reverse)),
                byKey.sorted { $0.label != $1.label ? $0.label < $1.label : $1.id < $0.id }
            ),
            ("all offset 1 prefix 3", db.objects(M.self).offset(1).prefix(3), Array(byKey.dropFirst(1).prefix(3))),
            (
                "n reverse offset 2", db.objects(M.self).sorted(by: SortDescriptor(\.n, order: .reverse)).offset(2),
                Array(byKey.sorted { tied($0, $1, -$0.n, -$1.n) }.dropFirst(2))
            ),
        ]
        for (name, results, expected) in cases {
            let ids = expected.map(\.id)
            #expect(results.count == ids.count, "\(K.self) \(name) line \(line)")
            #expect((0..<min(results.count, ids.count)).map { results[$0].id } == ids, "\(K.self) \(name) line \(line)")
            #expect(results.keys == ids, "\(K.self) \(name) line \(line)")
            #expect(results.last?.id == ids.last, "\(K.self) \(name) line \(line)")
            #expect(results.min(of: \.id) == ids.min() && results.max(of: \.id) == ids.max(), "\(K.self) \(name) line \(line)")
            #expect(results.objects(in: 1..<(ids.count + 3)).map(\.id) == Array(ids.dropFirst(1)), "\(K.self) \(name) line \(line)")
        }
    }

    @Test func everyKeyType() throws {
        try check([Int.min, -1, 0, 1, Int.max, 42, -42])
        try check([Int8.min, -1, 0, 1, Int8.max])
        try check([Int16.min, -300, 0, 300, Int16.max])
        try check([Int32.min, -1, 0, 1, Int32.max])
        try check([UInt8.min, 1, 200, UInt8.max])
        try check([UInt16.min, 1, 40_000, UInt16.max])
        try check([UInt32.min, 1, 3_000_000_000, UInt32.max])
        try check([UInt64.min, 1, 1 << 63, (1 << 63) - 1, UInt64.max])
        try check([UInt.min, 1, 1 << 63, UInt.max])
        try check([-Double.infinity, -1e300, -1, -Double.leastNonzeroMagnitude, 0, Double.leastNonzeroMagnitude, 1, 1e300, .infinity])
        try check([Date.distantPast, Date(timeIntervalSinceReferenceDate: -0.5), Date(timeIntervalSinceReferenceDate: 0), .distantFuture])
        try check(["", "a", "B", "Ärger", "\u{0}", "a\u{0}", "a\u{0}b", "😀", "z", "éa", "ea", "ẞ", "\u{10FFFF}"])
        try check([
            UUID(uuidString: "00000000-0000-0000-0000-000000000000")!, UUID(uuidString: "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF")!,
            UUID(uuidString: "80000000-0000-0000-0000-000000000001")!, UUID(uuidString: "7FFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF")!,
            UUID(uuidString: "00000000-0000-0000-0000-000000000001")!,
        ])
    }
}

extension ResultsHuntDifferential {
    /// Counts and queries inside a write after savepoints that throw (undone) and that succeed
    /// (kept), nested, with deletes by predicate: each equals the model's; the commit equals it.
    @Test func countsAcrossSavepoints() throws {
        typealias I = RHItem<RHIndexed>
        let seed = UInt64(Self.env("STRATA_RESHUNT_SEED") ?? 11)
        var r = RHRandom(rng: SeededRandom(seed: seed))
        let db = try Database.inMemory(models: [I.self, RHItem<RHPlain>.self])
        var items: [Int: I] = [:]
        for id in 0..<400 { items[id] = RHValues.item(&r, id: id, nan: false) }
        let initial = items
        try db.write { tx in for o in initial.values { try tx.insert(o) } }
        var problems: [String] = []
        struct Undo: Error {}
        func mutate(_ tx: Transaction, _ model: inout [Int: I], _ r: inout RHRandom) throws {
            for _ in 0..<(5 + r.below(60)) {
                switch r.below(4) {
                case 0:
                    let id = 400 + r.below(400)
                    let t = RHValues.item(&r, id: id, nan: false)
                    model[id] = t
                    try tx.upsert(t)
                case 1:
                    guard let id = model.keys.sorted().dropFirst(r.below(max(1, model.count))).first else { continue }
                    model[id] = nil
                    _ = try tx.delete(I.self, key: id)
                case 2:
                    let g = r.below(6)
                    let removed = model.values.filter { $0.group == g }.count
                    model = model.filter { $0.value.group != g }
                    let n = try tx.delete(I.self, where: #Predicate { $0.group == g })
                    if n != removed { problems.append("delete(where: group == \(g)) removed \(n), expected \(removed)") }
                default:
                    guard let id = model.keys.sorted().dropFirst(r.below(max(1, model.count))).first else { continue }
                    let t = RHValues.item(&r, id: id, nan: false)
                    model[id] = t
                    try tx.update(I.self, key: id) { $0 = t }
                }
            }
        }
        func compare(_ tx: Transaction, _ model: [Int: I], _ r: inout RHRandom, _ at: String) throws {
            let now = model.values.sorted { $0.id < $1.id }
            for _ in 0..<4 {
                let c = RHCase.make(&r)
                let want = try now.filter { try c.predicate?.evaluate($0) ?? true }.count
                let got = try tx.count(I.self, where: c.predicate)
                if got != want { problems.append("\(at) \(c.text): count \(got), expected \(want)") }
            }
        }
        try db.write { tx in
            for round in 0..<12 {
                var inner = items
                let undo = r.chance(50)
                do {
                    try tx.savepoint {
                        try mutate(tx, &inner, &r)
                        try compare(tx, inner, &r, "round \(round) inside")
                        if r.chance(50) {
                            var nested = inner
                            let undoNested = r.chance(50)
                            do {
                                try tx.savepoint {
                                    try mutate(tx, &nested, &r)
                                    try compare(tx, nested, &r, "round \(round) nested")
                                    if undoNested { throw Undo() }
                                }
                            } catch is Undo {}
                            if !undoNested { inner = nested }
                            try compare(tx, inner, &r, "round \(round) after nested \(undoNested ? "undone" : "kept")")
                        }
                        if undo { throw Undo() }
                    }
                } catch is Undo {}
                if !undo { items = inner }
                try compare(tx, items, &r, "round \(round) after \(undo ? "undone" : "kept")")
            }
        }
        let committed = items.values.sorted { $0.id < $1.id }
        for _ in 0..<10 {
            let c = RHCase.make(&r)
            var p: [String] = []
            Self.check({ c.results(db.objects(I.self)) }, expected: try c.expected(committed), r: &r, &p)
            if !p.isEmpty { problems.append("after commit \(c.description)\n" + p.joined(separator: "\n")) }
        }
        #expect(problems.isEmpty, "seed \(seed): \(problems.count) problems; first: \(problems.prefix(5))")
    }
}

struct RHCounted: Model {
    static let indexes: [PartialKeyPath<RHCounted> & Sendable] = [\.group, \.score]
    static let indexDescriptors: [IndexDescriptor<RHCounted>] = [.on(\.group, \.score)]
    var id: Int
    var group: Int
    var score: Double
    var pad: String
}

@Suite struct ResultsHuntTreeCounts {
    /// Range counts read from the counted trees of a many-level index (tens of thousands of
    /// entries), before any evaluation, after bulk deletes, moves between ranges and inserts over
    /// several commits, and on an old snapshot: each equals the model's count, and the element at a
    /// random position equals the model's.
    @Test func rangeCountsOverDeepTrees() throws {
        let n = (ResultsHuntDifferential.env("STRATA_RESHUNT_N") ?? 40) * 125
        var r = RHRandom(rng: SeededRandom(seed: 77))
        let db = try Database.inMemory(models: [RHCounted.self])
        var items: [Int: RHCounted] = [:]
        func make(_ id: Int) -> RHCounted {
            RHCounted(id: id, group: r.below(50), score: Double(r.below(1000)) / 4, pad: String(repeating: "x", count: r.below(40)))
        }
        try db.write { tx in
            for id in 0..<n {
                let o = make(id)
                items[id] = o
                try tx.insert(o)
            }
        }
        var problems: [String] = []
        var old: (Snapshot, [RHCounted])?
        for round in 0..<5 {
            let all = items.values.sorted { $0.id < $1.id }
            for _ in 0..<12 {
                let g = r.below(52) - 1, g2 = g + r.below(10)
                let s = Double(r.below(1000)) / 4, s2 = s + Double(r.below(200)) / 4
                let lo = r.below(n), hi = lo + r.below(n / 2)
                let checks: [(String, Results<RHCounted>, (RHCounted) -> Bool)] = [
                    (
                        "group >= \(g) && group < \(g2)", db.objects(RHCounted.self).filter(#Predicate { $0.group >= g && $0.group < g2 }),
                        { $0.group >= g && $0.group < g2 }
                    ),
                    (
                        "score > \(s) && score <= \(s2)", db.objects(RHCounted.self).filter(#Predicate { $0.score > s && $0.score <= s2 }),
                        { $0.score > s && $0.score <= s2 }
                    ),
                    (
                        "group == \(g) && score < \(s)", db.objects(RHCounted.self).filter(#Predicate { $0.group == g && $0.score < s }),
                        { $0.group == g && $0.score < s }
                    ),
                    ("id in \(lo)..<\(hi)", db.objects(RHCounted.self).filter(#Predicate { $0.id >= lo && $0.id < hi }), { $0.id >= lo && $0.id < hi }),
                ]
                for (name, results, matches) in checks {
                    let expected = all.filter(matches)
                    let counted = results.count
                    if counted != expected.count { problems.append("round \(round) \(name): count \(counted), expected \(expected.count)") }
                    if !expected.isEmpty, counted == expected.count {
                        let i = r.below(expected.count)
                        let sorted = results.sorted(by: SortDescriptor(\.score, order: .reverse))
                        let want = expected.sorted { $0.score != $1.score ? $0.score > $1.score : $0.id < $1.id }
                        if results[i].id != expected[i].id { problems.append("round \(round) \(name): [\(i)] \(results[i].id), expected \(expected[i].id)") }
                        if sorted[i].id != want[i].id {
                            problems.append("round \(round) \(name) by score reverse: [\(i)] \(sorted[i].id), expected \(want[i].id)")
                        }
                        let page = sorted.offset(i).prefix(3).map(\.id)
                        if page != want.dropFirst(i).prefix(3).map(\.id) { problems.append("round \(round) \(name) page at \(i)") }
                    }
                }
            }
            if let (snapshot, before) = old {
                let g = r.below(50)
                let got = snapshot.objects(RHCounted.self).filter(#Predicate { $0.group <= g }).count
                let want = before.filter { $0.group <= g }.count
                if got != want { problems.append("round \(round) old snapshot group <= \(g): \(got), expected \(want)") }
            }
            old = (try db.snapshot(), all)
            // Bulk deletes of a key range and a group, moves between groups, inserts.
            try db.write { tx in
                let from = r.below(n), to = from + r.below(n / 5)
                for id in from..<to where items[id] != nil {
                    items[id] = nil
                    _ = try tx.delete(RHCounted.self, key: id)
                }
                let g = r.below(50)
                let removed = try tx.delete(RHCounted.self, where: #Predicate { $0.group == g })
                let wanted = items.values.filter { $0.group == g }.count
                if removed != wanted { problems.append("round \(round) delete(where: group == \(g)): \(removed), expected \(wanted)") }
                items = items.filter { $0.value.group != g }
                for id in items.keys.sorted() where r.chance(10) {
                    let group = r.below(50), score = Double(r.below(1000)) / 4
                    items[id]?.group = group
                    items[id]?.score = score
                    try tx.update(RHCounted.self, key: id) {
                        $0.group = group
                        $0.score = score
                    }
                }
                for _ in 0..<(n / 10) {
                    let id = n + r.below(n)
                    let o = make(id)
                    items[id] = o
                    try tx.upsert(o)
                }
            }
        }
        #expect(problems.isEmpty, "\(problems.count) problems: \(problems.prefix(8))")
    }
}

extension ResultsHuntDifferential {
    /// One lazy `Results` value read from many threads at once, each read first by a different
    /// API (count from the trees, an element, keys, iteration, a page, an aggregate): every thread
    /// sees the plain array's answers.
    @Test func sharedResultsReadConcurrently() throws {
        typealias I = RHItem<RHIndexed>
        let db = try Database.inMemory(models: [I.self, RHItem<RHPlain>.self])
        var r = RHRandom(rng: SeededRandom(seed: 21))
        let objects = (0..<2_000).map { RHValues.item(&r, id: $0, nan: false) }
        try db.write { tx in for o in objects { try tx.insert(o) } }
        let lab = "a"
        let shapes: [(Results<I>, [Int])] = [
            (db.objects(I.self).offset(7), objects.dropFirst(7).map(\.id)),
            (db.objects(I.self).filter(#Predicate { $0.group == 2 }), objects.filter { $0.group == 2 }.map(\.id)),
            (
                db.objects(I.self).filter(#Predicate { $0.amount > 0 }).sorted(by: SortDescriptor(\.amount, order: .reverse)).prefix(500),
                Array(objects.filter { $0.amount > 0 }.sorted { $0.amount != $1.amount ? $0.amount > $1.amount : $0.id < $1.id }.prefix(500).map(\.id))
            ),
            (db.objects(I.self).filter(#Predicate { $0.label.contains(lab) }), objects.filter { $0.label.contains(lab) }.map(\.id)),
        ]
        let failures = Mutex<[String]>([])
        for (round, (_, ids)) in shapes.enumerated() {
            for _ in 0..<3 {
                let shared = shapes[round].0.filter(#Predicate { _ in true })  // a fresh, unevaluated value
                DispatchQueue.concurrentPerform(iterations: 8) { t in
                    var problems: [String] = []
                    switch t % 6 {
                    case 0: if shared.count != ids.count { problems.append("count") }
                    case 1: if !ids.isEmpty, shared[ids.count - 1].id != ids.last { problems.append("last element") }
                    case 2: if shared.keys != ids { problems.append("keys") }
                    case 3: if shared.map(\.id) != ids { problems.append("map") }
                    case 4: if shared.objects(in: 3..<40).map(\.id) != Array(ids[min(3, ids.count)..<min(40, ids.count)]) { problems.append("page") }
                    default: if shared.sum(of: \.group) != objects.filter({ ids.contains($0.id) }).reduce(0, { $0 + $1.group }) { problems.append("sum") }
                    }
                    if Array(shared).map(\.id) != ids { problems.append("array after") }
                    if shared.error != nil { problems.append("error \(shared.error.map { "\($0)" } ?? "")") }
                    if !problems.isEmpty { failures.withLock { $0.append("shape \(round) thread \(t): \(problems)") } }
                }
            }
        }
        let found = failures.withLock { $0 }
        #expect(found.isEmpty, "\(found.prefix(5))")
    }
}

struct RHAuto: Model {
    static let indexes: [PartialKeyPath<RHAuto> & Sendable] = [\.n]
    var id: Int?
    var n: Int
}

extension ResultsHuntDifferential {
    /// Automatic keys (an optional `Int` id): positions, keys, sorts by the id, aggregates of it
    /// and counts, after deletes, agree with the array.
    @Test func automaticKeys() throws {
        let db = try Database.inMemory(models: [RHAuto.self])
        var r = RHRandom(rng: SeededRandom(seed: 31))
        var stored: [RHAuto] = []
        try db.write { tx in for _ in 0..<300 { stored.append(try tx.insert(RHAuto(id: nil, n: r.below(4)))) } }
        let deleted = Set(stored.compactMap(\.id).filter { _ in r.chance(30) })
        try db.write { tx in for id in deleted { _ = try tx.delete(RHAuto.self, key: id) } }
        try db.write { tx in for _ in 0..<50 { stored.append(try tx.insert(RHAuto(id: nil, n: r.below(4)))) } }
        let all = stored.filter { !deleted.contains($0.id ?? -1) }.sorted { ($0.id ?? 0) < ($1.id ?? 0) }
        let ids = all.map(\.id)
        let results = db.objects(RHAuto.self)
        #expect(results.count == all.count)
        #expect(results.keys == ids)
        #expect((0..<results.count).map { results[$0].id } == ids)
        #expect(results.sorted(by: SortDescriptor(\.id, order: .reverse)).map(\.id) == ids.reversed())
        #expect(results.min(of: \.id) == ids.first! && results.max(of: \.id) == ids.last!)
        let k = 150
        let above = results.filter(#Predicate { $0.id != nil && $0.id! > k })
        #expect(above.count == all.filter { ($0.id ?? 0) > k }.count)
        #expect(above.keys == all.filter { ($0.id ?? 0) > k }.map(\.id))
        let two = results.filter(#Predicate { $0.n == 2 }).sorted(by: SortDescriptor(\.id, order: .reverse)).offset(3).prefix(5)
        #expect(two.map(\.id) == Array(all.filter { $0.n == 2 }.reversed().dropFirst(3).prefix(5)).map(\.id))
        #expect(results.sum(of: \.n) == all.reduce(0) { $0 + $1.n })
    }
}
