import Testing
import Foundation
@testable import Strata

// Differential tests: Strata's queries must give exactly what Foundation gives for the same
// `#Predicate` and `SortDescriptor` over a plain Swift array (the oracle). Predicates are generated
// at run time (PredicateGenerator.swift) over edge values of every field kind, and every way of
// reading results is compared: ids in order, keys, count, first, fetch, fetchCount, aggregates,
// and the write transaction's own queries, on fresh data, after random writes and after reopening
// the file.
//
//   randomQueriesMatchFoundation          random cases over DiffItem (Int keys, every field kind)
//   stringKeysMatchFoundation             random cases over DiffKeyed (String keys)
//   edgeConstantsMatchFoundation          every bound against every operator; every sort both ways
//   stringMatchingMatchesItsDocumentation filter(_:matching:options:) against its documented calls
//   knownIssue…                           the issue tracker's reproductions
//
//   STRATA_DIFF_CASES   number of random cases (default 400)
//   STRATA_DIFF_SEED    seed (default below); every failure message names it
//   STRATA_DIFF_GUARD=1 compare `count` with `fetch().count` before `map`, which traps ("Index out
//                       of range") when the two disagree; off by default, so a count bug crashes
//                       the run, as it would crash a user's `map`
//   STRATA_DIFF_LOG     a file to append every failing case to (the issues stop at 30 per test)
//
// The only semantics implemented by hand: NaN sorts above every number (Strata's definition;
// Foundation has no order for it), and the documented `filter(_:matching:options:)` helper, whose
// oracle is the Foundation calls it documents. Two things are left out of generation because
// Foundation itself misbehaves on them (see DiffStrings).

enum DiffKind: String, Codable, Sendable, CaseIterable {
    case alpha, beta, gamma
    case blank = ""
    case accent = "é"
}

struct DiffInner: Codable, Sendable, Hashable {
    var n: Int
    var name: String
}

struct DiffItem: Model {
    static let indexes: [PartialKeyPath<DiffItem> & Sendable] = [\.i, \.u8, \.u64, \.d, \.s, \.date, \.oi, \.kind, \.tags, \.inner.n]
    static let uniqueIndexes: [PartialKeyPath<DiffItem> & Sendable] = [\.code, \.serial]
    var id: Int
    var i: Int          // indexed
    var j: Int          // not indexed
    var i8: Int8
    var u8: UInt8       // indexed
    var u64: UInt64     // indexed
    var d: Double       // indexed
    var f: Float
    var s: String       // indexed
    var t: String
    var date: Date      // indexed
    var oi: Int?        // indexed
    var os: String?
    var b: Bool
    var kind: DiffKind  // indexed
    var tags: [String]  // indexed (one entry per element)
    var inner: DiffInner        // inner.n indexed
    var maybe: DiffInner?
    var code: String    // unique index
    var serial: Int     // unique index
    var small: Int      // bounded, for sums
}

/// A model with a String primary key, for key ranges on strings.
struct DiffKeyed: Model {
    static let indexes: [PartialKeyPath<DiffKeyed> & Sendable] = [\.n, \.s]
    var id: String
    var n: Int
    var s: String
}

/// A compact text of an object for failure messages, strings escaped.
protocol DiffDescribable {
    var diffText: String { get }
}

extension DiffItem: DiffDescribable {
    var diffText: String {
        func inner(_ x: DiffInner?) -> String { x.map { "(\($0.n), \(genDescribe($0.name)))" } ?? "nil" }
        return "{id: \(id), i: \(i), j: \(j), i8: \(i8), u8: \(u8), u64: \(u64), d: \(d), f: \(f), s: \(genDescribe(s)), t: \(genDescribe(t)), "
            + "date: \(genDescribe(date)), oi: \(genDescribe(oi as Any)), os: \(genDescribe(os as Any)), b: \(b), kind: \(genDescribe(kind)), "
            + "tags: \(genDescribe(tags)), inner: \(inner(self.inner)), maybe: \(inner(maybe)), code: \(genDescribe(code)), serial: \(serial), small: \(small)}"
    }
}

extension DiffKeyed: DiffDescribable {
    var diffText: String { "{id: \(genDescribe(id)), n: \(n), s: \(genDescribe(s))}" }
}

// MARK: - Edge values

enum DiffPools {
    static let ints: [Int] = [.min, .min + 1, -1, 0, 1, 2, 7, .max - 1, .max]
    static let int8s: [Int8] = [-128, -127, -1, 0, 1, 126, 127]
    static let uint8s: [UInt8] = [0, 1, 127, 128, 254, 255]
    static let uint64s: [UInt64] = [0, 1, 1 << 63 - 1, 1 << 63, .max - 1, .max]
    static let doubles: [Double] = [-.infinity, -.greatestFiniteMagnitude, -1.5, -0.0, 0.0, .leastNonzeroMagnitude, 1, 1.5,
                                    .greatestFiniteMagnitude, .infinity, .nan]
    static let floats: [Float] = [-.infinity, -.greatestFiniteMagnitude, -1.5, -0.0, 0.0, .leastNonzeroMagnitude, 1, 1.5,
                                  .greatestFiniteMagnitude, .infinity, .nan]
    static let strings: [String] = [
        "", "a", "A", "ab", "b", "é", "e\u{301}", "cafe\u{301}", "café", "\u{301}", "😀", "👨‍👩‍👧‍👦", "a\u{0}b", "Ä",
        "\u{10FFFF}", "Ana", "JOSÉ", "jose", "José", "bob", "q\u{301}", "\u{2126}", "\u{3A9}",
        String(repeating: "x", count: 300), String(repeating: "é", count: 150) + "z",
    ]
    static let dates: [Date] = [.distantPast, .distantFuture, Date(timeIntervalSinceReferenceDate: 0), Date(timeIntervalSinceReferenceDate: 1e12),
                                Date(timeIntervalSinceReferenceDate: -1e12), Date(timeIntervalSinceReferenceDate: 0.5),
                                Date(timeIntervalSinceReferenceDate: -0.25), Date(timeIntervalSinceReferenceDate: 86_400.000_001)]
    /// Primary keys of DiffKeyed: distinct under `==` (canonical equivalence), so no two collide.
    static let keyedIds: [String] = [
        "", "a", "A", "ab", "b", "é", "cafe\u{301}", "\u{301}", "😀", "👨‍👩‍👧‍👦", "a\u{0}b", "a\u{1}", "Ä", "\u{10FFFF}",
        "\u{FFFF}", "\u{E000}", "z", "zz", "日本", "\u{2126}", "\u{212B}", "한", "q\u{301}", "x\u{0}", String(repeating: "k", count: 300),
    ]
    /// Constants for DiffKeyed ids: the ids, canonically equivalent spellings, prefixes and near misses.
    static let keyedConstants: [String] = keyedIds + [
        "e\u{301}", "café", "\u{3A9}", "\u{C5}", "A\u{30A}", "\u{1112}\u{1161}\u{11AB}", "c", "caf", "cafe", "a\u{0}", "aa", "\u{10FFFF}\u{10FFFF}",
    ]
}

/// Swift's `String` ordering is not a total order on this toolchain: "éb" (precomposed, then an
/// ASCII letter) and "e\u{301}" are neither `<`, `==` nor `>` (likewise "\u{3A9}x" and "\u{2126}").
/// Foundation's `evaluate` inherits that, so no store could agree with it on such pairs; the
/// generated strings avoid them, so that every ordering the oracle uses is well defined.
enum DiffStrings {
    static func consistent(_ a: String, _ b: String) -> Bool {
        (a < b ? 1 : 0) + (a == b ? 1 : 0) + (b < a ? 1 : 0) == 1
    }

    static func consistent<S: Sequence<String>>(_ s: String, with others: S) -> Bool {
        others.allSatisfy { consistent(s, $0) }
    }

    /// Data strings: the edge pool, and short combinations that order consistently with it and
    /// with each other.
    static let universe: [String] = {
        var out = DiffPools.strings
        for a in ["a", "b", "é", "Ana"] {
            for b in ["b", "e\u{301}", "😀", "\u{0}"] where consistent(a + b, with: out) { out.append(a + b) }
        }
        return out
    }()
}

// MARK: - Random values

struct DiffRandom {
    var rng: SeededRandom

    mutating func below(_ n: Int) -> Int { rng.below(n) }
    mutating func chance(_ percent: Int) -> Bool { rng.below(100) < percent }
    mutating func pick<T>(_ pool: [T]) -> T { pool[rng.below(pool.count)] }

    /// A pool value, a value from the data, or a small number: edge constants and ones that hit.
    mutating func constant<T>(_ pool: [T], _ data: [T], _ small: T) -> T {
        let r = below(100)
        if r < 40 || data.isEmpty { return pick(pool) }
        if r < 85 { return pick(data) }
        return small
    }

    mutating func int() -> Int { chance(30) ? pick(DiffPools.ints) : below(41) - 20 }
    mutating func int8() -> Int8 { chance(40) ? pick(DiffPools.int8s) : Int8(below(21) - 10) }
    mutating func uint8() -> UInt8 { chance(40) ? pick(DiffPools.uint8s) : UInt8(below(20)) }
    mutating func uint64() -> UInt64 { chance(40) ? pick(DiffPools.uint64s) : UInt64(below(20)) }
    mutating func double() -> Double { chance(40) ? pick(DiffPools.doubles) : Double(below(41) - 20) / 4 }
    mutating func float() -> Float { chance(40) ? pick(DiffPools.floats) : Float(below(41) - 20) / 4 }
    mutating func string() -> String { chance(75) ? pick(DiffPools.strings) : pick(DiffStrings.universe) }
    mutating func date() -> Date { chance(50) ? pick(DiffPools.dates) : Date(timeIntervalSinceReferenceDate: Double(below(41) - 20) * 1_000.5) }
    mutating func inner() -> DiffInner { DiffInner(n: below(101) - 50, name: string()) }

    /// A substring for `contains` / `starts(with:)`: a pool string, a prefix or slice of a data
    /// string (by characters or by scalars, which can split a character), or "".
    mutating func fragment(_ data: [String]) -> String {
        let r = below(100)
        if r < 15 || data.isEmpty { return "" }
        if r < 45 { return pick(DiffPools.strings + ["e", "\u{301}", "ANA", "ana", "os", "😀", "x"]) }
        let source = pick(data)
        if r < 70 {
            let chars = Array(source)
            let start = chars.isEmpty ? 0 : below(chars.count)
            let end = start + below(chars.count - start + 1)
            return String(chars[start..<end])
        }
        let scalars = Array(source.unicodeScalars)
        let start = scalars.isEmpty ? 0 : below(scalars.count)
        let end = start + below(min(4, scalars.count - start) + 1)
        var out = ""
        out.unicodeScalars.append(contentsOf: scalars[start..<end])
        return out
    }
}

// MARK: - Case specs (generic over the model)

/// One sort descriptor's choice: the descriptor and, for floating point, the key the oracle
/// orders NaN by (Strata's definition: NaN above every number, equal to NaN).
struct DiffSortSpec<M> {
    let name: String
    let make: (SortOrder) -> SortDescriptor<M>
    /// The sorted value of an object, for failure messages.
    let show: (M) -> String
    var nanKey: ((M) -> Double)?
    /// For a String sort in the case's collation: the oracle's comparison (ascending).
    var collated: ((M, M) -> ComparisonResult)?
}

struct DiffDistinctSpec<M: Model> {
    let name: String
    let apply: (Results<M>) -> Results<M>
    let same: (M, M) -> Bool
    let show: (M) -> String
}

/// A condition added with one of the library's helpers, with its documented meaning.
struct DiffTestSpec<M: Model> {
    let text: String
    let apply: (Results<M>) -> Results<M>
    let matches: (M) -> Bool
}

enum DiffWindow {
    case offset(Int), prefix(Int)
}

/// An aggregate: its name and a comparison of Strata's answer with the oracle's (nil when equal).
struct DiffAggregate<M: Model> {
    let name: String
    let compare: (Results<M>, [M]) -> (expected: String, actual: String)?
}

/// A generated predicate, built once.
struct DiffFilter<M> {
    let text: String
    let predicate: Predicate<M>
    let mayThrow: Bool

    init(_ generated: GenPredicate<M>) {
        text = generated.text
        predicate = generated.predicate
        mayThrow = generated.mayThrow
    }
}

struct DiffCase<M: Model> {
    var predicates: [DiffFilter<M>] = []
    var tests: [DiffTestSpec<M>] = []
    var sort: [(spec: DiffSortSpec<M>, order: SortOrder)] = []
    var distinct: DiffDistinctSpec<M>?
    var window: [DiffWindow] = []
    var filterAfterSort = false
    /// Sorts with `sorted(by:collation:)` (its String sort specs carry the oracle's comparison).
    var collation: StringCollation?

    var descriptors: [SortDescriptor<M>] { sort.map { $0.spec.make($0.order) } }

    var text: String {
        var parts: [String] = []
        for p in predicates { parts.append(".filter(#Predicate { \(p.text) })") }
        for t in tests { parts.append(t.text) }
        if !sort.isEmpty {
            parts.append(".sorted(by: " + sort.map { "\($0.spec.name)\($0.order == .reverse ? " reverse" : "")" }.joined(separator: ", ")
                         + (collation.map { ", collation: \($0)" } ?? "") + ")")
        }
        if let distinct { parts.append(".distinct(by: \(distinct.name))") }
        for w in window {
            switch w {
            case .offset(let k): parts.append(".offset(\(k))")
            case .prefix(let k): parts.append(".prefix(\(k))")
            }
        }
        return parts.joined(separator: " ")
    }

    func results(_ base: Results<M>) -> Results<M> {
        var r = base
        func sorted(_ r: Results<M>) -> Results<M> {
            collation.map { r.sorted(by: descriptors, collation: $0) } ?? r.sorted(by: descriptors)
        }
        if filterAfterSort && !sort.isEmpty { r = sorted(r) }
        for p in predicates { r = r.filter(p.predicate) }
        for t in tests { r = t.apply(r) }
        if !filterAfterSort && !sort.isEmpty { r = sorted(r) }
        if let distinct { r = distinct.apply(r) }
        for w in window {
            switch w {
            case .offset(let k): r = r.offset(k)
            case .prefix(let k): r = r.prefix(k)
            }
        }
        return r
    }
}

/// Foundation's answer: the objects in primary-key order, filtered by `evaluate`, sorted by
/// `SortDescriptor.compare` (ties by key), de-duplicated, windowed.
enum DiffOracle {
    struct Thrown: Error { let error: any Error }

    static func matches<M: Model>(_ c: DiffCase<M>, _ object: M) throws -> Bool {
        for t in c.tests where !t.matches(object) { return false }
        for p in c.predicates where try !p.predicate.evaluate(object) { return false }
        return true
    }

    static func ordered<M: Model>(_ a: M, _ b: M, _ sort: [(spec: DiffSortSpec<M>, order: SortOrder)], _ descriptors: [SortDescriptor<M>]) -> Bool
        where M.ID: Comparable {
        for (k, entry) in sort.enumerated() {
            var result: ComparisonResult
            if let collated = entry.spec.collated {
                result = collated(a, b)
                if entry.order == .reverse && result != .orderedSame { result = result == .orderedAscending ? .orderedDescending : .orderedAscending }
            } else if let key = entry.spec.nanKey, key(a).isNaN || key(b).isNaN {
                let x = key(a).isNaN, y = key(b).isNaN
                result = x && y ? .orderedSame : (x ? .orderedDescending : .orderedAscending)
                if entry.order == .reverse && result != .orderedSame { result = result == .orderedAscending ? .orderedDescending : .orderedAscending }
            } else {
                result = descriptors[k].compare(a, b)
            }
            if result == .orderedAscending { return true }
            if result == .orderedDescending { return false }
        }
        return a.id < b.id
    }

    /// Matches after filter, sort and distinct, before the window.
    static func unwindowed<M: Model>(_ c: DiffCase<M>, all: [M]) throws -> [M] where M.ID: Comparable {
        var out: [M] = []
        for object in all {
            do {
                if try matches(c, object) { out.append(object) }
            } catch {
                throw Thrown(error: error)
            }
        }
        if !c.sort.isEmpty {
            let descriptors = c.descriptors
            out.sort { ordered($0, $1, c.sort, descriptors) }
        }
        if let distinct = c.distinct {
            var kept: [M] = []
            for object in out where !kept.contains(where: { distinct.same($0, object) }) { kept.append(object) }
            out = kept
        }
        return out
    }

    static func windowed<M>(_ objects: [M], _ window: [DiffWindow]) -> [M] {
        var out = objects
        for w in window {
            switch w {
            case .offset(let k): out = Array(out.dropFirst(k))
            case .prefix(let k): out = Array(out.prefix(k))
            }
        }
        return out
    }
}

/// Equality for the test's purpose: NaN equals NaN; -0.0 equals 0.0 (by `==`).
func diffSame<V: Equatable>(_ a: V, _ b: V) -> Bool {
    if a == b { return true }
    if let x = a as? Double, let y = b as? Double { return x.isNaN && y.isNaN }
    if let x = a as? Float, let y = b as? Float { return x.isNaN && y.isNaN }
    return false
}

func diffShow(_ value: Any) -> String { genDescribe(value) }

// MARK: - Log

/// One differing check of a case.
struct DiffMismatch {
    let check: String
    let expected: String
    let actual: String
}

/// Failures (one issue per failing case, capped), per-check counts and per-plan counts for one
/// test run. With STRATA_DIFF_LOG set, every failing case is also appended to that file.
final class DiffLog {
    let test: String
    let seed: UInt64
    let cap = 30
    var recorded = 0
    var failingCases = 0
    var failuresByCheck: [String: Int] = [:]
    var plans: [String: Int] = [:]
    var accesses: [String: Int] = [:]
    var residuals: [String: Int] = [:]
    var cases = 0
    var oracleSeconds = 0.0
    var strataSeconds = 0.0
    let logPath = ProcessInfo.processInfo.environment["STRATA_DIFF_LOG"]

    init(test: String, seed: UInt64) {
        self.test = test
        self.seed = seed
    }

    /// Appends to STRATA_DIFF_LOG (O_APPEND: tests running in parallel do not overwrite each other).
    func append(_ text: String) {
        guard let logPath, let file = fopen(logPath, "a") else { return }
        fputs(text, file)
        fclose(file)
    }

    func fail(_ check: String, case number: Int, _ description: String, plan: String = "", expected: String, actual: String) {
        fail(case: number, description, plan: plan, [DiffMismatch(check: check, expected: expected, actual: actual)])
    }

    func fail(case number: Int, _ description: String, plan: String = "", _ mismatches: [DiffMismatch]) {
        guard !mismatches.isEmpty else { return }
        failingCases += 1
        for m in mismatches { failuresByCheck[m.check, default: 0] += 1 }
        var message = "\(test) seed \(seed) case \(number): " + mismatches.map(\.check).joined(separator: ", ") + " differ\n  query: \(description)"
        if !plan.isEmpty { message += "\n  plan: " + plan.replacingOccurrences(of: "\n", with: " | ") }
        for m in mismatches { message += "\n  \(m.check): expected \(m.expected)\n  \(String(repeating: " ", count: m.check.count))  actual   \(m.actual)" }
        append(message + "\n\n")
        guard recorded < cap else { return }
        recorded += 1
        Issue.record(Comment(rawValue: message))
    }

    /// Classifies `explain()`: how candidates are reached and how the residual filter runs.
    func plan(_ explain: String) {
        let lines = explain.split(separator: "\n").map(String.init)
        let access: String
        if lines.contains(where: { $0.hasPrefix("scan index") }) {
            access = "ordered index walk"
        } else if lines.contains(where: { $0.hasPrefix("full scan") }) {
            access = "full scan"
        } else if lines.contains(where: { $0.hasPrefix("union") }) {
            access = "union"
        } else if lines.contains(where: { $0.hasPrefix("primary key") }) {
            access = "primary key range"
        } else if lines.contains(where: { $0.hasPrefix("index") }) {
            access = lines.contains(where: { $0.contains("(unique)") }) ? "unique index range" : "index range"
        } else {
            access = "other: \(lines.first ?? "")"
        }
        let residual: String
        if lines.contains("no filter") {
            residual = "no filter"
        } else if lines.contains(where: { $0.hasPrefix("no residual filter") }) {
            residual = "exact (no residual)"
        } else if lines.contains(where: { $0.contains("evaluated on encoded records") }) {
            residual = "residual on encoded records"
        } else if lines.contains(where: { $0.contains("evaluated on decoded objects") }) {
            residual = "residual on decoded objects"
        } else {
            residual = "other"
        }
        accesses[access, default: 0] += 1
        residuals[residual, default: 0] += 1
        plans["\(access) / \(residual)", default: 0] += 1
    }

    func summary() -> String {
        func line(_ counts: [String: Int]) -> String {
            counts.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ")
        }
        var text = "\(test) seed \(seed): \(cases) cases, \(failingCases) failing (oracle \(Int(oracleSeconds * 1000)) ms, Strata \(Int(strataSeconds * 1000)) ms)"
        if !failuresByCheck.isEmpty { text += " [\(line(failuresByCheck))]" }
        text += "\n  access: \(line(accesses))\n  residual: \(line(residuals))\n  plans: \(line(plans))"
        return text
    }
}

enum DiffEnvironment {
    static func int(_ name: String) -> Int? { ProcessInfo.processInfo.environment[name].flatMap { Int($0) } }
    static var seed: UInt64 { ProcessInfo.processInfo.environment["STRATA_DIFF_SEED"].flatMap { UInt64($0) } ?? 20_251_130 }
    static var cases: Int { int("STRATA_DIFF_CASES") ?? 400 }
    static var guardMap: Bool { ProcessInfo.processInfo.environment["STRATA_DIFF_GUARD"] == "1" }
}

// MARK: - Comparing one case

enum DiffCheck {
    /// Runs `c` against `db` every way results can be read, and compares with the oracle over
    /// `all` (the objects in primary-key order). Each way starts from fresh results where it has
    /// a path of its own (count before evaluation, first, aggregates), so no cache hides it.
    static func run<M: Model & DiffDescribable>(_ c: DiffCase<M>, number: Int, db: Database, all: [M], aggregates: [DiffAggregate<M>], log: DiffLog)
        where M.ID: Comparable & Hashable {
        log.cases += 1
        let fresh = { c.results(db.objects(M.self)) }
        let explain = fresh().explain()
        log.plan(explain)
        var mismatches: [DiffMismatch] = []
        func fail(_ check: String, _ expected: String, _ actual: String) {
            mismatches.append(DiffMismatch(check: check, expected: expected, actual: actual))
        }
        defer { log.fail(case: number, c.text, plan: explain, mismatches) }

        let expected: [M]
        let oracleStart = Date()
        var strataStart = Date()
        defer { log.strataSeconds += Date().timeIntervalSince(strataStart) }
        do {
            defer {
                strataStart = Date()
                log.oracleSeconds += strataStart.timeIntervalSince(oracleStart)
            }
            expected = DiffOracle.windowed(try DiffOracle.unwindowed(c, all: all), c.window)
        } catch {
            // Foundation throws (a force unwrap of nil): Strata must report an error.
            do {
                let got = try fresh().fetch()
                fail("error where evaluate throws", "an error (\(error))", "no error, \(got.count) objects: \(got.map(\.id).prefix(12))")
            } catch {}
            if fresh().error == nil { fail("Results.error where evaluate throws", "an error", "nil") }
            return
        }
        let ids = expected.map(\.id)
        let byId = Dictionary(all.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        // Lists of ids, grouped by what came back, so one wrong answer read five ways is one line.
        var lists: [(check: String, ids: [M.ID])] = []
        func list(_ check: String, _ got: [M.ID]) { if got != ids { lists.append((check, got)) } }

        // Count first, on results nothing has evaluated yet (the count path: index entries or
        // encoded records, nothing decoded).
        let counted: Int?
        do {
            counted = try fresh().fetchCount()
            if counted != ids.count { fail("fetchCount()", "\(ids.count)", "\(counted ?? -1)") }
        } catch {
            counted = nil
            fail("fetchCount() throws", "\(ids.count)", "\(error)")
        }
        // `map` and `Array(_:)` on results that have not run yet: they take `count` from the count
        // path, then read the elements, and trap when the two disagree (STRATA_DIFF_GUARD=1 checks
        // first and reports instead). The other reads then hit the evaluated results.
        let results = fresh()
        if DiffEnvironment.guardMap {
            let objects = (try? fresh().fetch()) ?? []
            if counted == objects.count {
                list("results.map(\\.id)", results.map(\.id))
            } else {
                fail("count vs elements (map and Array(results) would trap)", "count == fetch().count == \(ids.count)",
                     "count \(counted ?? -1), fetch().count \(objects.count)")
            }
        } else {
            list("results.map(\\.id)", results.map(\.id))
        }
        do {
            list("fetch()", try results.fetch().map(\.id))
        } catch {
            fail("fetch() throws", describe(ids), "\(error)")
        }
        let count = results.count
        if count != ids.count { fail("count", "\(ids.count)", "\(count)") }
        list("Array(results)", Array(results).map(\.id))
        if let error = results.error { fail("Results.error", "nil", "\(error)") }
        list("keys", results.keys)
        var iterated: [M.ID] = []
        for object in results { iterated.append(object.id) }
        list("for-in", iterated)
        // `first` has a path of its own (one row) only for a plain scan.
        let first = (c.predicates.isEmpty && c.tests.isEmpty && c.sort.isEmpty && c.distinct == nil ? fresh() : results).first?.id
        if first != ids.first { fail("first", "\(ids.first.map { "\($0)" } ?? "nil")", "\(first.map { "\($0)" } ?? "nil")") }
        // Aggregates: alternately on results that have not run (the path that reads one field of
        // each record when the plan is exact) and on the evaluated ones.
        for (k, aggregate) in aggregates.enumerated() {
            if let (e, a) = aggregate.compare(k % 2 == 0 ? fresh() : results, expected) { fail(aggregate.name, e, a) }
        }
        var groups: [(checks: [String], ids: [M.ID])] = []
        for (check, got) in lists {
            if let k = groups.firstIndex(where: { $0.ids == got }) { groups[k].checks.append(check) } else { groups.append(([check], got)) }
        }
        for group in groups {
            fail(group.checks.joined(separator: ", "), describe(ids), describe(group.ids) + "\n" + difference(c, expected: ids, actual: group.ids, byId))
        }
    }

    /// Where two id lists part: the first differing position with each object's sort and
    /// distinct values, and the ids only one side has, with their objects.
    static func difference<M: Model & DiffDescribable>(_ c: DiffCase<M>, expected: [M.ID], actual: [M.ID], _ byId: [M.ID: M]) -> String {
        func values(_ id: M.ID) -> String {
            guard let object = byId[id] else { return "\(id) (not an object)" }
            var parts = c.sort.map { "\($0.spec.name)=\($0.spec.show(object))" }
            if let distinct = c.distinct { parts.append("distinct=\(distinct.show(object))") }
            return "\(id)" + (parts.isEmpty ? "" : " (" + parts.joined(separator: ", ") + ")")
        }
        var lines: [String] = []
        if let p = (0..<min(expected.count, actual.count)).first(where: { expected[$0] != actual[$0] }) ?? (expected.count == actual.count ? nil : min(expected.count, actual.count)),
           p < expected.count, p < actual.count {
            lines.append("    first difference at position \(p): expected \(values(expected[p])), actual \(values(actual[p]))")
            if p > 0 { lines.append("    before it: \(values(expected[p - 1]))") }
        }
        let e = Set(expected), a = Set(actual)
        let missing = expected.filter { !a.contains($0) }, extra = actual.filter { !e.contains($0) }
        if !missing.isEmpty { lines.append("    missing \(missing.count): " + missing.prefix(3).map { byId[$0]?.diffText ?? "\($0)" }.joined(separator: "; ")) }
        if !extra.isEmpty { lines.append("    extra \(extra.count): " + extra.prefix(3).map { byId[$0]?.diffText ?? "\($0)" }.joined(separator: "; ")) }
        if actual.count != Set(actual).count { lines.append("    actual has repeated ids") }
        return lines.joined(separator: "\n")
    }

    static func describe<ID>(_ ids: [ID]) -> String {
        ids.count <= 40 ? "\(ids.count) ids \(ids)" : "\(ids.count) ids \(ids.prefix(40))…"
    }
}

// MARK: - Specs for DiffItem

enum DiffItemSpecs {
    static func sort<V: Comparable>(_ name: String, _ keyPath: KeyPath<DiffItem, V> & Sendable) -> DiffSortSpec<DiffItem> {
        DiffSortSpec(name: name, make: { SortDescriptor(keyPath, order: $0) }, show: { genDescribe($0[keyPath: keyPath]) })
    }

    static func sort<V: Comparable>(_ name: String, _ keyPath: KeyPath<DiffItem, V?> & Sendable) -> DiffSortSpec<DiffItem> {
        DiffSortSpec(name: name, make: { SortDescriptor(keyPath, order: $0) }, show: { genDescribe($0[keyPath: keyPath] as Any) })
    }

    static func sort(_ name: String, _ keyPath: KeyPath<DiffItem, String> & Sendable, _ comparator: String.StandardComparator) -> DiffSortSpec<DiffItem> {
        DiffSortSpec(name: name, make: { SortDescriptor(keyPath, comparator: comparator, order: $0) }, show: { genDescribe($0[keyPath: keyPath]) })
    }

    static var sorts: [DiffSortSpec<DiffItem>] {
        var d = sort("d", \.d)
        d.nanKey = { $0.d }
        var f = sort("f", \.f)
        f.nanKey = { Double($0.f) }
        return [
            sort("id", \.id), sort("i", \.i), sort("j", \.j), sort("i8", \.i8), sort("u8", \.u8), sort("u64", \.u64), d, f,
            sort("s", \.s), sort("s (lexical)", \.s, .lexical), sort("t", \.t),
            sort("date", \.date), sort("oi", \.oi), sort("inner.n", \.inner.n), sort("inner.name", \.inner.name),
            sort("serial", \.serial), sort("code (lexical)", \.code, .lexical), sort("small", \.small),
        ]
    }

    static func distinct(_ name: String, _ apply: @escaping (Results<DiffItem>) -> Results<DiffItem>,
                         _ same: @escaping (DiffItem, DiffItem) -> Bool, _ show: @escaping (DiffItem) -> String) -> DiffDistinctSpec<DiffItem> {
        DiffDistinctSpec(name: name, apply: apply, same: same, show: show)
    }

    static var distincts: [DiffDistinctSpec<DiffItem>] {
        var list: [DiffDistinctSpec<DiffItem>] = []
        list.append(distinct("\\.i", { $0.distinct(by: \.i) }, { $0.i == $1.i }, { genDescribe($0.i as Any) }))
        list.append(distinct("\\.s", { $0.distinct(by: \.s) }, { $0.s == $1.s }, { genDescribe($0.s as Any) }))
        list.append(distinct("\\.d", { $0.distinct(by: \.d) }, { diffSame($0.d, $1.d) }, { genDescribe($0.d as Any) }))
        list.append(distinct("\\.f", { $0.distinct(by: \.f) }, { diffSame($0.f, $1.f) }, { genDescribe($0.f as Any) }))
        list.append(distinct("\\.oi", { $0.distinct(by: \.oi) }, { $0.oi == $1.oi }, { genDescribe($0.oi as Any) }))
        list.append(distinct("\\.os", { $0.distinct(by: \.os) }, { $0.os == $1.os }, { genDescribe($0.os as Any) }))
        list.append(distinct("\\.b", { $0.distinct(by: \.b) }, { $0.b == $1.b }, { genDescribe($0.b as Any) }))
        list.append(distinct("\\.kind", { $0.distinct(by: \.kind) }, { $0.kind == $1.kind }, { genDescribe($0.kind as Any) }))
        list.append(distinct("\\.date", { $0.distinct(by: \.date) }, { $0.date == $1.date }, { genDescribe($0.date as Any) }))
        list.append(distinct("\\.tags", { $0.distinct(by: \.tags) }, { $0.tags == $1.tags }, { genDescribe($0.tags as Any) }))
        list.append(distinct("\\.inner", { $0.distinct(by: \.inner) }, { $0.inner == $1.inner }, { genDescribe($0.inner as Any) }))
        list.append(distinct("\\.inner.n", { $0.distinct(by: \.inner.n) }, { $0.inner.n == $1.inner.n }, { genDescribe($0.inner.n as Any) }))
        list.append(distinct("\\.maybe", { $0.distinct(by: \.maybe) }, { $0.maybe == $1.maybe }, { genDescribe($0.maybe as Any) }))
        list.append(distinct("\\.b, \\.kind", { $0.distinct(by: \.b, \.kind) }, { $0.b == $1.b && $0.kind == $1.kind }, { genDescribe($0.b as Any) + ", " + genDescribe($0.kind as Any) }))
        list.append(distinct("\\.u8, \\.s", { $0.distinct(by: \.u8, \.s) }, { $0.u8 == $1.u8 && $0.s == $1.s }, { genDescribe($0.u8 as Any) + ", " + genDescribe($0.s as Any) }))
        return list
    }

    static func minMax<V: Comparable>(_ name: String, _ keyPath: KeyPath<DiffItem, V> & Sendable) -> [DiffAggregate<DiffItem>] {
        [
            DiffAggregate(name: "min(of: \\.\(name))") { r, e in
                let x = e.map { $0[keyPath: keyPath] }.min(), y = r.min(of: keyPath)
                return diffSame(x, y) ? nil : (diffShow(x as Any), diffShow(y as Any))
            },
            DiffAggregate(name: "max(of: \\.\(name))") { r, e in
                let x = e.map { $0[keyPath: keyPath] }.max(), y = r.max(of: keyPath)
                return diffSame(x, y) ? nil : (diffShow(x as Any), diffShow(y as Any))
            },
        ]
    }

    static func minMaxOptional<V: Comparable>(_ name: String, _ keyPath: KeyPath<DiffItem, V?> & Sendable) -> [DiffAggregate<DiffItem>] {
        [
            DiffAggregate(name: "min(of: \\.\(name))") { r, e in
                let x = e.compactMap { $0[keyPath: keyPath] }.min(), y = r.min(of: keyPath)
                return diffSame(x, y) ? nil : (diffShow(x as Any), diffShow(y as Any))
            },
            DiffAggregate(name: "max(of: \\.\(name))") { r, e in
                let x = e.compactMap { $0[keyPath: keyPath] }.max(), y = r.max(of: keyPath)
                return diffSame(x, y) ? nil : (diffShow(x as Any), diffShow(y as Any))
            },
        ]
    }

    static func sum<V: AdditiveArithmetic>(_ name: String, _ keyPath: KeyPath<DiffItem, V> & Sendable) -> DiffAggregate<DiffItem> {
        DiffAggregate(name: "sum(of: \\.\(name))") { r, e in
            let x = e.map { $0[keyPath: keyPath] }.reduce(.zero, +), y = r.sum(of: keyPath)
            return diffSame(x, y) ? nil : (diffShow(x), diffShow(y))
        }
    }

    static func averageFloating<V: BinaryFloatingPoint>(_ name: String, _ keyPath: KeyPath<DiffItem, V> & Sendable) -> DiffAggregate<DiffItem> {
        DiffAggregate(name: "average(of: \\.\(name))") { r, e in
            let x: V? = e.isEmpty ? nil : e.map { $0[keyPath: keyPath] }.reduce(.zero, +) / V(e.count)
            let y = r.average(of: keyPath)
            return diffSame(x, y) ? nil : (diffShow(x as Any), diffShow(y as Any))
        }
    }

    static var aggregates: [DiffAggregate<DiffItem>] {
        minMax("i", \.i) + minMax("d", \.d) + minMax("f", \.f) + minMax("s", \.s)
        + minMax("date", \.date) + minMax("u64", \.u64) + minMax("i8", \.i8) + minMax("u8", \.u8) + minMax("inner.n", \.inner.n)
        + minMax("serial", \.serial) + minMaxOptional("oi", \.oi) + minMaxOptional("os", \.os) + [
            sum("d", \.d), sum("f", \.f), sum("small", \.small), sum("inner.n", \.inner.n),
            averageFloating("d", \.d), averageFloating("f", \.f),
            DiffAggregate(name: "average(of: \\.small)") { r, e in
                let x: Double? = e.isEmpty ? nil : e.reduce(0.0) { $0 + Double($1.small) } / Double(e.count)
                let y = r.average(of: \.small)
                return diffSame(x, y) ? nil : (diffShow(x as Any), diffShow(y as Any))
            },
            DiffAggregate(name: "average(of: \\.date)") { r, e in
                let x: Date? = e.isEmpty ? nil : Date(timeIntervalSinceReferenceDate: e.reduce(0.0) { $0 + $1.date.timeIntervalSinceReferenceDate } / Double(e.count))
                let y = r.average(of: \.date)
                return diffSame(x, y) ? nil : (diffShow(x as Any), diffShow(y as Any))
            },
        ]
    }
}

/// `filter(_:matching:options:)` as its documentation defines it (Sources/Strata/Query/Helpers.swift):
/// with options, both strings folded by Foundation's `folding(options:locale:)`; then `==`,
/// `starts(with:)`, `contains` and a reversed `starts(with:)` on `Character`s, as `#Predicate`.
func diffStringMatch(_ value: String?, _ match: StringMatch, _ options: StringMatchOptions) -> Bool {
    guard let value else { return false }
    var flags: String.CompareOptions = []
    if options.contains(.caseInsensitive) { flags.insert(.caseInsensitive) }
    if options.contains(.diacriticInsensitive) { flags.insert(.diacriticInsensitive) }
    func fold(_ s: String) -> String { options.isEmpty ? s : s.folding(options: flags, locale: nil) }
    let folded = fold(value)
    func characters(_ s: String) -> [Character] { Array(s) }
    switch match {
    case .equals(let s): return folded == fold(s)
    case .contains(let s):
        let needle = characters(fold(s)), haystack = characters(folded)
        if needle.isEmpty { return true }
        guard needle.count <= haystack.count else { return false }
        return (0...(haystack.count - needle.count)).contains { Array(haystack[$0..<($0 + needle.count)]) == needle }
    case .beginsWith(let s): return characters(folded).starts(with: characters(fold(s)))
    case .endsWith(let s): return characters(folded).reversed().starts(with: characters(fold(s)).reversed())
    }
}

func diffDescribe(_ match: StringMatch, _ options: StringMatchOptions) -> String {
    let m: String
    switch match {
    case .equals(let s): m = ".equals(\(genDescribe(s)))"
    case .contains(let s): m = ".contains(\(genDescribe(s)))"
    case .beginsWith(let s): m = ".beginsWith(\(genDescribe(s)))"
    case .endsWith(let s): m = ".endsWith(\(genDescribe(s)))"
    }
    var o: [String] = []
    if options.contains(.caseInsensitive) { o.append(".caseInsensitive") }
    if options.contains(.diacriticInsensitive) { o.append(".diacriticInsensitive") }
    return "\(m), options: [\(o.joined(separator: ", "))]"
}

// MARK: - Generating DiffItem data and cases

struct DiffItemWorld {
    var random: DiffRandom
    /// The oracle's copy of the stored objects, by key.
    var items: [Int: DiffItem] = [:]
    var serials: Set<Int> = []
    var codeCounter = 0
    var includeThrowing = true

    init(seed: UInt64) { random = DiffRandom(rng: SeededRandom(seed: seed)) }

    var all: [DiffItem] { items.values.sorted { $0.id < $1.id } }

    // MARK: Data

    mutating func freshId() -> Int {
        while true {
            let id: Int
            switch random.below(10) {
            case 0: id = random.pick(DiffPools.ints)
            case 1: id = Int(truncatingIfNeeded: random.rng.next())
            default: id = random.below(2001) - 1000
            }
            if items[id] == nil { return id }
        }
    }

    mutating func freshSerial() -> Int {
        while true {
            let serial = random.chance(20) ? random.pick(DiffPools.ints) : random.below(100_000) - 50_000
            if !serials.contains(serial) { return serial }
        }
    }

    mutating func freshCode() -> String {
        while true {
            codeCounter += 1
            let code = random.pick(DiffPools.strings.filter { $0.count < 10 }) + "#\(codeCounter)"
            if DiffStrings.consistent(code, with: DiffStrings.universe) && DiffStrings.consistent(code, with: items.values.map(\.code)) { return code }
        }
    }

    mutating func makeItem(id: Int) -> DiffItem {
        let serial = freshSerial()
        let code = freshCode()
        return DiffItem(id: id, i: random.int(), j: random.int(), i8: random.int8(), u8: random.uint8(), u64: random.uint64(),
                        d: random.double(), f: random.float(), s: random.string(), t: random.string(), date: random.date(),
                        oi: random.chance(30) ? nil : random.int(), os: random.chance(30) ? nil : random.string(), b: random.chance(50),
                        kind: random.pick(DiffKind.allCases), tags: tags(), inner: random.inner(), maybe: random.chance(30) ? nil : random.inner(),
                        code: code, serial: serial, small: random.below(2001) - 1000)
    }

    mutating func tags() -> [String] {
        (0..<random.below(4)).map { _ in random.pick(["a", "é", "e\u{301}", "", "😀", "b", "Ana"]) }
    }

    /// Changes a few fields of `item` (never its key); unique fields get fresh values.
    mutating func mutate(_ item: inout DiffItem) {
        for _ in 0..<(1 + random.below(4)) {
            switch random.below(20) {
            case 0: item.i = random.int()
            case 1: item.j = random.int()
            case 2: item.i8 = random.int8()
            case 3: item.u8 = random.uint8()
            case 4: item.u64 = random.uint64()
            case 5: item.d = random.double()
            case 6: item.f = random.float()
            case 7: item.s = random.string()
            case 8: item.t = random.string()
            case 9: item.date = random.date()
            case 10: item.oi = random.chance(40) ? nil : random.int()
            case 11: item.os = random.chance(40) ? nil : random.string()
            case 12: item.b.toggle()
            case 13: item.kind = random.pick(DiffKind.allCases)
            case 14: item.tags = tags()
            case 15: item.inner = random.inner()
            case 16: item.maybe = random.chance(40) ? nil : random.inner()
            case 17: item.code = freshCode()
            case 18:
                serials.remove(item.serial)
                item.serial = freshSerial()
            default: item.small = random.below(2001) - 1000
            }
        }
        serials.insert(item.serial)
    }

    mutating func insertNew() -> DiffItem {
        let item = makeItem(id: freshId())
        items[item.id] = item
        serials.insert(item.serial)
        return item
    }

    mutating func initial(_ n: Int) -> [DiffItem] {
        var out: [DiffItem] = []
        // Every integer bound as a key.
        for id in DiffPools.ints where items[id] == nil {
            let item = makeItem(id: id)
            items[id] = item
            serials.insert(item.serial)
            out.append(item)
        }
        while out.count < n { out.append(insertNew()) }
        return out
    }

    /// Random writes through `tx`, mirrored in `items`.
    mutating func randomWrites(_ tx: Transaction, count: Int) throws {
        for _ in 0..<count {
            let keys = Array(items.keys).sorted()
            switch random.below(10) {
            case 0, 1:
                try tx.insert(insertNew())
            case 2, 3:
                guard !keys.isEmpty else { continue }
                let id = random.pick(keys)
                serials.remove(items[id]!.serial)
                items[id] = nil
                #expect(try tx.delete(DiffItem.self, key: id))
            case 4:
                // A whole replacement through upsert.
                guard !keys.isEmpty else { continue }
                let id = random.pick(keys)
                serials.remove(items[id]!.serial)
                var item = makeItem(id: id)
                item.id = id
                serials.insert(item.serial)
                items[id] = item
                try tx.upsert(item)
            default:
                guard let id = keys.isEmpty ? nil : random.pick(keys), var item = items[id] else { continue }
                mutate(&item)
                items[id] = item
                let stored = item
                try tx.update(DiffItem.self, key: id) { $0 = stored }
            }
        }
    }

    // MARK: Predicates

    mutating func leaf(_ all: [DiffItem]) -> GenPredicate<DiffItem> {
        var r = random
        defer { random = r }
        func op() -> GenOp { r.pick(GenOp.allCases) }
        func comparable<V: Comparable & Codable & Sendable>(_ name: String, _ kp: KeyPath<DiffItem, V> & Sendable, _ pool: [V], _ small: V) -> GenPredicate<DiffItem> {
            let c = r.constant(pool, all.map { $0[keyPath: kp] }, small)
            return Gen.compare(name, kp, op(), c, constantFirst: r.chance(15))
        }
        func list<V: Equatable & Codable & Sendable>(_ name: String, _ kp: KeyPath<DiffItem, V> & Sendable, _ pool: [V], _ small: V) -> GenPredicate<DiffItem> {
            let values = all.map { $0[keyPath: kp] }
            let n = r.below(5)
            return Gen.inList(name, kp, (0..<n).map { _ in r.constant(pool, values, small) })
        }
        let strings = all.map(\.s) + all.map(\.t)
        switch r.below(30) {
        case 0, 1: return comparable("id", \.id, DiffPools.ints, r.int())
        case 2, 3: return comparable("i", \.i, DiffPools.ints, r.int())
        case 4: return comparable("j", \.j, DiffPools.ints, r.int())
        case 5: return comparable("i8", \.i8, DiffPools.int8s, r.int8())
        case 6: return comparable("u8", \.u8, DiffPools.uint8s, r.uint8())
        case 7: return comparable("u64", \.u64, DiffPools.uint64s, r.uint64())
        case 8, 9: return comparable("d", \.d, DiffPools.doubles, r.double())
        case 10: return comparable("f", \.f, DiffPools.floats, r.float())
        case 11, 12: return comparable("s", \.s, DiffPools.strings, r.string())
        case 13: return comparable("t", \.t, DiffPools.strings, r.string())
        case 14: return comparable("date", \.date, DiffPools.dates, r.date())
        case 15:
            if r.chance(35) { return Gen.isNil("oi", \.oi, negated: r.chance(50), nilFirst: r.chance(20)) }
            let c: Int? = r.chance(15) ? nil : r.constant(DiffPools.ints, all.compactMap(\.oi), r.int())
            return Gen.equal("oi", \.oi, c, negated: r.chance(30), constantFirst: r.chance(15))
        case 16:
            if r.chance(35) { return Gen.isNil("os", \.os, negated: r.chance(50), nilFirst: false) }
            let c: String? = r.chance(15) ? nil : r.constant(DiffPools.strings, all.compactMap(\.os), r.string())
            return Gen.equal("os", \.os, c, negated: r.chance(30), constantFirst: false)
        case 17:
            switch r.below(3) {
            case 0: return Gen.boolField("b", \.b)
            case 1: return Gen.not(Gen.boolField("b", \.b))
            default: return Gen.equal("b", \.b, r.chance(50), negated: r.chance(30), constantFirst: r.chance(20))
            }
        case 18: return Gen.equal("kind", \.kind, r.pick(DiffKind.allCases), negated: r.chance(30), constantFirst: r.chance(15))
        case 19: return Gen.arrayContains("tags", \.tags, r.chance(70) ? r.pick(["a", "é", "e\u{301}", "", "😀", "b", "Ana", "zz"]) : r.fragment(strings))
        case 20:
            switch r.below(9) {
            case 0: return list("i", \.i, DiffPools.ints, r.int())
            case 1: return list("id", \.id, DiffPools.ints, r.int())
            case 2: return list("s", \.s, DiffPools.strings, r.string())
            case 3: return list("kind", \.kind, DiffKind.allCases, .alpha)
            case 4: return list("oi", \.oi, DiffPools.ints.map { Optional($0) } + [nil], nil)
            case 5: return list("u8", \.u8, DiffPools.uint8s, r.uint8())
            case 6: return list("d", \.d, DiffPools.doubles, r.double())
            case 7: return list("code", \.code, ["", "a#1"], "x")
            default: return list("date", \.date, DiffPools.dates, r.date())
            }
        case 21, 22:
            switch r.below(4) {
            case 0, 1: return Gen.stringContains("s", \.s, r.fragment(strings))
            case 2: return Gen.stringContains("t", \.t, r.fragment(strings))
            default: return Gen.nestedStringContains("inner.name", \.inner, \.name, r.fragment(all.map(\.inner.name)))
            }
        case 23:
            switch r.below(4) {
            case 0: return Gen.startsWith("s", \.s, r.fragment(strings))
            case 1: return Gen.startsWith("t", \.t, r.fragment(strings))
            case 2: return Gen.startsWith("code", \.code, r.fragment(all.map(\.code)))
            default: return Gen.nestedStartsWith("inner.name", \.inner, \.name, r.fragment(all.map(\.inner.name)))
            }
        case 24:
            if r.chance(60) {
                let c = r.constant(DiffPools.ints, all.map(\.inner.n), r.below(101) - 50)
                return Gen.nestedCompare("inner.n", \.inner, \.n, op(), c)
            }
            return Gen.nestedCompare("inner.name", \.inner, \.name, op(), r.constant(DiffPools.strings, all.map(\.inner.name), r.string()))
        case 25:
            switch r.below(4) {
            case 0:
                let c: Int? = r.chance(20) ? nil : r.constant(DiffPools.ints, all.compactMap(\.maybe?.n), r.below(101) - 50)
                return Gen.flatMapEqual("maybe?.n", \.maybe, \.n, c, negated: r.chance(30))
            case 1:
                let c: String? = r.chance(20) ? nil : r.constant(DiffPools.strings, all.compactMap(\.maybe?.name), r.string())
                return Gen.flatMapEqual("maybe?.name", \.maybe, \.name, c, negated: r.chance(30))
            case 2: return Gen.isNil("maybe", \.maybe, negated: r.chance(50), nilFirst: false)
            default: return Gen.flatMapContains("maybe?.name", \.maybe, \.name, r.fragment(all.compactMap(\.maybe?.name)))
            }
        case 26:
            if r.chance(50) { return comparable("serial", \.serial, DiffPools.ints, r.int()) }
            return comparable("code", \.code, DiffPools.strings, r.string())
        case 27:
            switch r.below(4) {
            case 0: return Gen.fields("i", \.i, op(), "j", \.j)
            case 1: return Gen.fields("d", \.d, op(), "d", \.d)
            case 2: return Gen.fields("s", \.s, op(), "t", \.t)
            default: return Gen.coalesce("oi", \.oi, r.int(), op(), r.int())
            }
        case 28:
            let c = r.constant(DiffPools.ints, all.compactMap(\.oi), r.int())
            // Unguarded force unwraps throw on nil; only sometimes, so most cases compare results.
            return Gen.forceUnwrap("oi", \.oi, op(), c, guarded: !(includeThrowing && r.chance(25)))
        default: return comparable("small", \.small, [-1000, 0, 1000], r.below(2001) - 1000)
        }
    }

    mutating func tree(_ all: [DiffItem], depth: Int) -> GenPredicate<DiffItem> {
        if depth == 0 || random.chance(40) { return leaf(all) }
        switch random.below(5) {
        case 0, 1: return Gen.and(tree(all, depth: depth - 1), tree(all, depth: depth - 1))
        case 2, 3: return Gen.or(tree(all, depth: depth - 1), tree(all, depth: depth - 1))
        default: return Gen.not(tree(all, depth: depth - 1))
        }
    }

    mutating func testSpec(_ all: [DiffItem]) -> DiffTestSpec<DiffItem> {
        switch random.below(5) {
        case 0:
            let x = random.constant(DiffPools.strings, all.map(\.s), random.string())
            return DiffTestSpec(text: ".filter(\\.s, equals: \(genDescribe(x)))", apply: { $0.filter(\.s, equals: x) }, matches: { $0.s == x })
        case 1:
            let x: Int? = random.chance(30) ? nil : random.constant(DiffPools.ints, all.compactMap(\.oi), random.int())
            return DiffTestSpec(text: ".filter(\\.oi, equals: \(genDescribe(x as Any)))", apply: { $0.filter(\.oi, equals: x) }, matches: { $0.oi == x })
        case 2:
            let x = random.pick(["a", "é", "e\u{301}", "", "😀", "b", "Ana", "zz"])
            return DiffTestSpec(text: ".filter(\\.tags, contains: \(genDescribe(x)))", apply: { $0.filter(\.tags, contains: x) }, matches: { $0.tags.contains(x) })
        case 3:
            let x = random.pick(DiffKind.allCases)
            return DiffTestSpec(text: ".filter(\\.kind, equals: \(genDescribe(x)))", apply: { $0.filter(\.kind, equals: x) }, matches: { $0.kind == x })
        default:
            let fragment = random.chance(50) ? random.fragment(all.map(\.s)) : random.pick(["ANA", "ana", "JOSE", "jose", "é", "E", "cafe", "CAFÉ"])
            let match: StringMatch
            switch random.below(4) {
            case 0: match = .equals(random.chance(50) ? fragment : random.pick(all.map(\.s) + ["ana", "JOSE", "cafe"]))
            case 1: match = .contains(fragment)
            case 2: match = .beginsWith(fragment)
            default: match = .endsWith(fragment)
            }
            let options = StringMatchOptions(rawValue: random.below(4))
            switch random.below(3) {
            case 0:
                return DiffTestSpec(text: ".filter(\\.s, matching: \(diffDescribe(match, options)))", apply: { $0.filter(\.s, matching: match, options: options) },
                                    matches: { diffStringMatch($0.s, match, options) })
            case 1:
                return DiffTestSpec(text: ".filter(\\.t, matching: \(diffDescribe(match, options)))", apply: { $0.filter(\.t, matching: match, options: options) },
                                    matches: { diffStringMatch($0.t, match, options) })
            default:
                return DiffTestSpec(text: ".filter(\\.os, matching: \(diffDescribe(match, options)))", apply: { $0.filter(\.os, matching: match, options: options) },
                                    matches: { diffStringMatch($0.os, match, options) })
            }
        }
    }

    mutating func sortSpecs() -> [(spec: DiffSortSpec<DiffItem>, order: SortOrder)] {
        let n = random.chance(35) ? 0 : (random.chance(65) ? 1 : 2)
        return (0..<n).map { _ in (random.pick(DiffItemSpecs.sorts), random.chance(50) ? .forward : .reverse) }
    }

    /// A random query: 0–2 predicates, sometimes a helper filter, a sort, distinct and a window.
    mutating func makeCase(_ all: [DiffItem]) -> DiffCase<DiffItem> {
        var c = DiffCase<DiffItem>()
        let predicates = random.chance(8) ? 0 : (random.chance(80) ? 1 : 2)
        for _ in 0..<predicates { c.predicates.append(DiffFilter(tree(all, depth: random.below(4)))) }
        if random.chance(15) { c.tests.append(testSpec(all)) }
        c.sort = sortSpecs()
        c.filterAfterSort = random.chance(20)
        if random.chance(15) { c.distinct = random.pick(DiffItemSpecs.distincts) }
        return c
    }

    /// Windows sized against the unwindowed result, so that they land before, inside and past its end.
    mutating func window(for count: Int) -> [DiffWindow] {
        guard random.chance(35) else { return [] }
        return (0..<(1 + random.below(2))).map { _ in
            let k = random.chance(20) ? random.below(3) : random.below(count + 3)
            return random.chance(50) ? .offset(k) : .prefix(k)
        }
    }

    mutating func aggregates() -> [DiffAggregate<DiffItem>] {
        (0..<2).map { _ in random.pick(DiffItemSpecs.aggregates) }
    }
}

// MARK: - Tests

struct QueryDifferentialTests {
    /// Random predicates, sorts, distinct and windows over DiffItem: fresh data, after rounds of
    /// random writes, inside write transactions with uncommitted writes, and after reopening.
    @Test func randomQueriesMatchFoundation() throws {
        let seed = DiffEnvironment.seed
        let total = DiffEnvironment.cases
        let log = DiffLog(test: "randomQueriesMatchFoundation", seed: seed)
        var world = DiffItemWorld(seed: seed)
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let options = StoreOptions(durability: .noSync)
        var db = try Database(path: path, models: [DiffItem.self], options: options)
        #expect(DiffStrings.universe.allSatisfy { DiffStrings.consistent($0, with: DiffStrings.universe) })
        let initial = world.initial(300)
        try db.write { tx in try tx.insert(contentsOf: initial) }

        let rounds = 5
        var number = 0
        for round in 0..<rounds {
            if round > 0 {
                if round == 3 {
                    // Across reopen: the same file, a new handle.
                    db.close()
                    db = try Database(path: path, models: [DiffItem.self], options: options)
                }
                let before = world
                do {
                    try db.write { tx in try world.randomWrites(tx, count: 60) }
                } catch {
                    world = before
                    Issue.record("seed \(seed) round \(round): random writes failed: \(error)")
                }
            }
            var all = world.all
            let perRound = total / rounds + (round < total % rounds ? 1 : 0)
            // Most of a round on the committed state; the rest inside a write transaction.
            let inTransaction = perRound / 5
            for _ in 0..<(perRound - inTransaction) {
                number += 1
                var c = world.makeCase(all)
                if let before = try? DiffOracle.unwindowed(c, all: all) { c.window = world.window(for: before.count) }
                DiffCheck.run(c, number: number, db: db, all: all, aggregates: world.aggregates(), log: log)
            }
            number = try transactionCases(count: inTransaction, first: number, db: db, world: &world, log: log)
            all = world.all
            // The committed state is what the file holds: a direct check of every object.
            let stored = db.objects(DiffItem.self).map(\.id)
            if stored != all.map(\.id) { log.fail("stored keys after round", case: number, "round \(round)", expected: "\(all.count) ids", actual: "\(stored.count) ids") }
        }
        print(log.summary())
    }

    /// Cases run through `tx.objects(_:where:sortedBy:)` and `tx.count(_:where:)` on a transaction
    /// holding uncommitted random writes; the transaction then commits or rolls back at random.
    func transactionCases(count: Int, first: Int, db: Database, world: inout DiffItemWorld, log: DiffLog) throws -> Int {
        struct Rollback: Error {}
        var number = first
        let committed = world
        var working = world
        do {
            try db.write { tx in
                try working.randomWrites(tx, count: 25)
                let all = working.all
                for _ in 0..<count {
                    number += 1
                    log.cases += 1
                    var c = DiffCase<DiffItem>()
                    let predicate = working.random.chance(10) ? nil : DiffFilter(working.tree(all, depth: working.random.below(4)))
                    c.predicates = predicate.map { [$0] } ?? []
                    c.sort = working.sortSpecs()
                    let expected: [DiffItem]
                    do {
                        expected = try DiffOracle.unwindowed(c, all: all)
                    } catch {
                        continue
                    }
                    let text = "tx: " + c.text
                    do {
                        let got = try tx.objects(DiffItem.self, where: predicate?.predicate, sortedBy: c.descriptors).map(\.id)
                        if got != expected.map(\.id) {
                            log.fail("tx.objects(_:where:sortedBy:)", case: number, text, expected: "\(expected.count) ids \(expected.map(\.id).prefix(40))",
                                     actual: "\(got.count) ids \(got.prefix(40))")
                        }
                    } catch {
                        log.fail("tx.objects throws", case: number, text, expected: "\(expected.count) ids", actual: "\(error)")
                    }
                    do {
                        let n = try tx.count(DiffItem.self, where: predicate?.predicate)
                        if n != expected.count { log.fail("tx.count(_:where:)", case: number, text, expected: "\(expected.count)", actual: "\(n)") }
                    } catch {
                        log.fail("tx.count throws", case: number, text, expected: "\(expected.count)", actual: "\(error)")
                    }
                }
                if working.random.chance(50) {
                    // Before rolling back: `delete(_:where:)` removes exactly what the predicate matches.
                    number += 1
                    log.cases += 1
                    let doomed = DiffFilter(working.tree(all, depth: working.random.below(3)))
                    if let expected = try? all.filter({ try doomed.predicate.evaluate($0) }) {
                        let text = "tx.delete(DiffItem.self, where: #Predicate { \(doomed.text) })"
                        let deleted = try tx.delete(DiffItem.self, where: doomed.predicate)
                        let gone = Set(expected.map(\.id))
                        let left = try tx.objects(DiffItem.self).map(\.id)
                        let expectedLeft = all.map(\.id).filter { !gone.contains($0) }
                        var mismatches: [DiffMismatch] = []
                        if deleted != expected.count { mismatches.append(DiffMismatch(check: "delete(_:where:) count", expected: "\(expected.count)", actual: "\(deleted)")) }
                        if left != expectedLeft {
                            mismatches.append(DiffMismatch(check: "objects left after delete(_:where:)", expected: DiffCheck.describe(expectedLeft), actual: DiffCheck.describe(left)))
                        }
                        log.fail(case: number, text, mismatches)
                    }
                    throw Rollback()
                }
            }
            world = working
        } catch is Rollback {
            // Nothing was written: the committed objects stay; the generator keeps its progress.
            var kept = committed
            kept.random = working.random
            kept.codeCounter = working.codeCounter
            world = kept
        }
        return number
    }
}

// MARK: - String primary keys

extension DiffKeyed {
    static var sorts: [DiffSortSpec<DiffKeyed>] {
        [
            DiffSortSpec(name: "id", make: { SortDescriptor(\DiffKeyed.id, order: $0) }, show: { genDescribe($0.id) }),
            DiffSortSpec(name: "id (lexical)", make: { SortDescriptor(\DiffKeyed.id, comparator: .lexical, order: $0) }, show: { genDescribe($0.id) }),
            DiffSortSpec(name: "n", make: { SortDescriptor(\DiffKeyed.n, order: $0) }, show: { "\($0.n)" }),
            DiffSortSpec(name: "s", make: { SortDescriptor(\DiffKeyed.s, order: $0) }, show: { genDescribe($0.s) }),
        ]
    }

    static var distincts: [DiffDistinctSpec<DiffKeyed>] {
        [
            DiffDistinctSpec(name: "\\.n", apply: { $0.distinct(by: \.n) }, same: { $0.n == $1.n }, show: { "\($0.n)" }),
            DiffDistinctSpec(name: "\\.s", apply: { $0.distinct(by: \.s) }, same: { $0.s == $1.s }, show: { genDescribe($0.s) }),
        ]
    }

    static var aggregates: [DiffAggregate<DiffKeyed>] {
        func minMax<V: Comparable>(_ name: String, _ keyPath: KeyPath<DiffKeyed, V> & Sendable) -> [DiffAggregate<DiffKeyed>] {
            [
                DiffAggregate(name: "min(of: \\.\(name))") { r, e in
                    let x = e.map { $0[keyPath: keyPath] }.min(), y = r.min(of: keyPath)
                    return x == y ? nil : (diffShow(x as Any), diffShow(y as Any))
                },
                DiffAggregate(name: "max(of: \\.\(name))") { r, e in
                    let x = e.map { $0[keyPath: keyPath] }.max(), y = r.max(of: keyPath)
                    return x == y ? nil : (diffShow(x as Any), diffShow(y as Any))
                },
            ]
        }
        return minMax("id", \.id) + minMax("n", \.n) + minMax("s", \.s)
    }
}

struct DiffKeyedWorld {
    var random: DiffRandom
    var objects: [String: DiffKeyed] = [:]
    var counter = 0

    init(seed: UInt64) { random = DiffRandom(rng: SeededRandom(seed: seed)) }

    var all: [DiffKeyed] { objects.values.sorted { $0.id < $1.id } }

    mutating func make(_ id: String) -> DiffKeyed {
        DiffKeyed(id: id, n: random.int(), s: random.string())
    }

    mutating func freshId() -> String {
        while true {
            counter += 1
            let id = random.pick(["k", "é", "e\u{301}x", "😀", "a\u{0}", ""]) + "\(counter)"
            if objects[id] == nil && DiffStrings.consistent(id, with: DiffPools.keyedConstants) && DiffStrings.consistent(id, with: objects.keys) { return id }
        }
    }

    mutating func leaf(_ all: [DiffKeyed]) -> GenPredicate<DiffKeyed> {
        let ids = all.map(\.id)
        switch random.below(10) {
        case 0, 1, 2:
            let c = random.constant(DiffPools.keyedConstants, ids, freshId())
            return Gen.compare("id", \.id, random.pick(GenOp.allCases), c, constantFirst: random.chance(15))
        case 3:
            return Gen.inList("id", \.id, (0..<random.below(4)).map { _ in random.constant(DiffPools.keyedConstants, ids, "") })
        case 4:
            return Gen.startsWith("id", \.id, random.chance(50) ? random.pick(DiffPools.keyedConstants) : random.fragment(ids))
        case 5:
            return Gen.stringContains("id", \.id, random.fragment(ids))
        case 6, 7:
            let c = random.constant(DiffPools.ints, all.map(\.n), random.int())
            return Gen.compare("n", \.n, random.pick(GenOp.allCases), c, constantFirst: false)
        case 8:
            let c = random.constant(DiffPools.strings, all.map(\.s), random.string())
            return Gen.compare("s", \.s, random.pick(GenOp.allCases), c, constantFirst: false)
        default:
            return Gen.startsWith("s", \.s, random.fragment(all.map(\.s)))
        }
    }

    mutating func tree(_ all: [DiffKeyed], depth: Int) -> GenPredicate<DiffKeyed> {
        if depth == 0 || random.chance(45) { return leaf(all) }
        switch random.below(5) {
        case 0, 1: return Gen.and(tree(all, depth: depth - 1), tree(all, depth: depth - 1))
        case 2, 3: return Gen.or(tree(all, depth: depth - 1), tree(all, depth: depth - 1))
        default: return Gen.not(tree(all, depth: depth - 1))
        }
    }

    mutating func makeCase(_ all: [DiffKeyed]) -> DiffCase<DiffKeyed> {
        var c = DiffCase<DiffKeyed>()
        if !random.chance(8) { c.predicates.append(DiffFilter(tree(all, depth: random.below(3)))) }
        let sorts = DiffKeyed.sorts
        c.sort = (0..<(random.chance(40) ? 0 : 1 + random.below(2))).map { _ in (random.pick(sorts), random.chance(50) ? .forward : .reverse) }
        if random.chance(15) { c.distinct = random.pick(DiffKeyed.distincts) }
        return c
    }
}

extension QueryDifferentialTests {
    /// A String primary key: key ranges, `starts(with:)` and lists on ids that are empty, contain
    /// NUL, combining marks, emoji, the last scalar, and canonically equivalent spellings.
    @Test func stringKeysMatchFoundation() throws {
        let seed = DiffEnvironment.seed
        let log = DiffLog(test: "stringKeysMatchFoundation", seed: seed)
        var world = DiffKeyedWorld(seed: seed &+ 1)
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        var db = try Database(path: path, models: [DiffKeyed.self], options: StoreOptions(durability: .noSync))
        #expect(DiffPools.keyedConstants.allSatisfy { DiffStrings.consistent($0, with: DiffPools.keyedConstants) })
        for id in DiffPools.keyedIds { world.objects[id] = world.make(id) }
        for _ in 0..<40 {
            let id = world.freshId()
            world.objects[id] = world.make(id)
        }
        let initial = world.all
        try db.write { tx in try tx.insert(contentsOf: initial) }

        // A canonically equivalent spelling is the same key, as it is the same `String`.
        for (stored, other) in [("é", "e\u{301}"), ("cafe\u{301}", "café"), ("\u{2126}", "\u{3A9}"), ("\u{212B}", "A\u{30A}"), ("한", "\u{1112}\u{1161}\u{11AB}")] {
            #expect(stored == other)
            #expect(try db.object(DiffKeyed.self, key: other)?.id == stored, "object(key: \(genDescribe(other)))")
            #expect(throws: StrataError.self, "inserting \(genDescribe(other)) next to \(genDescribe(stored))") {
                try db.write { tx in try tx.insert(DiffKeyed(id: other, n: 0, s: "")) }
            }
        }

        let total = max(30, DiffEnvironment.cases / 4)
        var number = 0
        for round in 0..<3 {
            if round == 1 {
                try db.write { tx in
                    for _ in 0..<20 {
                        let keys = world.all.map(\.id)
                        switch world.random.below(3) {
                        case 0:
                            let object = world.make(world.freshId())
                            world.objects[object.id] = object
                            try tx.insert(object)
                        case 1:
                            let id = world.random.pick(keys)
                            world.objects[id] = nil
                            #expect(try tx.delete(DiffKeyed.self, key: id))
                        default:
                            let id = world.random.pick(keys)
                            let n = world.random.int(), s = world.random.string()
                            world.objects[id]?.n = n
                            world.objects[id]?.s = s
                            try tx.update(DiffKeyed.self, key: id) { $0.n = n; $0.s = s }
                        }
                    }
                }
            }
            if round == 2 {
                db.close()
                db = try Database(path: path, models: [DiffKeyed.self], options: StoreOptions(durability: .noSync))
            }
            let all = world.all
            for _ in 0..<(total / 3) {
                number += 1
                var c = world.makeCase(all)
                if let before = try? DiffOracle.unwindowed(c, all: all), world.random.chance(30) {
                    c.window = [world.random.chance(50) ? .offset(world.random.below(before.count + 2)) : .prefix(world.random.below(before.count + 2))]
                }
                DiffCheck.run(c, number: number, db: db, all: all, aggregates: [world.random.pick(DiffKeyed.aggregates)], log: log)
            }
        }
        print(log.summary())
    }

    /// `filter(_:matching:options:)`, every `StringMatch` case with and without the options, on an
    /// indexed, an unindexed and an optional field, against the Foundation calls it documents
    /// (`compare(_:options:)` and `range(of:options:)`).
    @Test func stringMatchingMatchesItsDocumentation() throws {
        let seed = DiffEnvironment.seed
        let log = DiffLog(test: "stringMatchingMatchesItsDocumentation", seed: seed)
        let db = try Database.inMemory(models: [DiffItem.self])
        let values = ["", "Ana", "ANA", "ana", "JOSÉ", "jose", "José", "Jose\u{301}", "cafe\u{301}", "café", "bob", "é", "e\u{301}", "Ä", "a\u{0}b", "😀"]
        var objects: [DiffItem] = []
        for (k, value) in values.enumerated() {
            var item = DiffItem.plain(id: k)
            item.s = value
            item.t = values[(k + 3) % values.count]
            item.os = k % 4 == 0 ? nil : values[(k + 7) % values.count]
            item.code = "c\(k)"
            item.serial = k
            objects.append(item)
        }
        try db.write { tx in try tx.insert(contentsOf: objects) }
        let needles = ["", "ana", "ANA", "jose", "JOSE", "José", "cafe", "CAFÉ", "e", "\u{301}", "ob", "a\u{0}"]
        var number = 0
        for needle in needles {
            for match in [StringMatch.equals(needle), .contains(needle), .beginsWith(needle), .endsWith(needle)] {
                for raw in 0..<4 {
                    let options = StringMatchOptions(rawValue: raw)
                    let specs: [DiffTestSpec<DiffItem>] = [
                        DiffTestSpec(text: ".filter(\\.s, matching: \(diffDescribe(match, options)))", apply: { $0.filter(\.s, matching: match, options: options) },
                                     matches: { diffStringMatch($0.s, match, options) }),
                        DiffTestSpec(text: ".filter(\\.t, matching: \(diffDescribe(match, options)))", apply: { $0.filter(\.t, matching: match, options: options) },
                                     matches: { diffStringMatch($0.t, match, options) }),
                        DiffTestSpec(text: ".filter(\\.os, matching: \(diffDescribe(match, options)))", apply: { $0.filter(\.os, matching: match, options: options) },
                                     matches: { diffStringMatch($0.os, match, options) }),
                    ]
                    for spec in specs {
                        number += 1
                        var c = DiffCase<DiffItem>()
                        c.tests = [spec]
                        DiffCheck.run(c, number: number, db: db, all: objects, aggregates: [], log: log)
                    }
                }
            }
        }
        print(log.summary())
    }
}

extension DiffItem {
    /// An object with plain values, for hand-written cases.
    static func plain(id: Int) -> DiffItem {
        DiffItem(id: id, i: 0, j: 0, i8: 0, u8: 0, u64: 0, d: 0, f: 0, s: "", t: "", date: Date(timeIntervalSinceReferenceDate: 0), oi: nil, os: nil,
                 b: false, kind: .alpha, tags: [], inner: DiffInner(n: 0, name: ""), maybe: nil, code: "code\(id)", serial: id, small: 0)
    }
}

// MARK: - Edge constants, every bound against every operator

extension QueryDifferentialTests {
    /// Every bound of every ordered key and indexed field against every operator, alone (so the
    /// plan is exact when the index can be: no residual filter to hide a wrong range), and a
    /// sort on each sortable field in both directions: the cases random generation reaches
    /// only rarely.
    @Test func edgeConstantsMatchFoundation() throws {
        let seed = DiffEnvironment.seed
        let log = DiffLog(test: "edgeConstantsMatchFoundation", seed: seed)
        var world = DiffItemWorld(seed: seed &+ 2)
        let db = try Database.inMemory(models: [DiffItem.self])
        let initial = world.initial(120)
        try db.write { tx in try tx.insert(contentsOf: initial) }
        let all = world.all

        var cases: [(DiffCase<DiffItem>, [DiffAggregate<DiffItem>])] = []
        func add(_ p: GenPredicate<DiffItem>, _ aggregates: [DiffAggregate<DiffItem>]) {
            var c = DiffCase<DiffItem>()
            c.predicates = [DiffFilter(p)]
            cases.append((c, aggregates))
        }
        func bounds<V: Comparable & Codable & Sendable>(_ name: String, _ keyPath: KeyPath<DiffItem, V> & Sendable, _ values: [V]) {
            let aggregates = DiffItemSpecs.minMax(name, keyPath)
            for op in GenOp.allCases {
                for value in values {
                    add(Gen.compare(name, keyPath, op, value, constantFirst: false), aggregates)
                }
            }
        }
        bounds("id", \.id, [Int.min, Int.max])
        bounds("i", \.i, [Int.min, Int.max])
        bounds("serial", \.serial, [Int.min, Int.max])
        bounds("u64", \.u64, [UInt64.min, UInt64.max])
        bounds("u8", \.u8, [UInt8.min, UInt8.max])
        bounds("i8", \.i8, [Int8.min, Int8.max])
        bounds("d", \.d, [-Double.infinity, Double.infinity, Double.nan, -0.0])
        bounds("date", \.date, [Date.distantPast, Date.distantFuture])
        bounds("s", \.s, ["", "\u{10FFFF}", "\u{10FFFF}\u{10FFFF}"])
        bounds("code", \.code, ["", "\u{10FFFF}"])
        for value in [nil, Int.min, Int.max] as [Int?] {
            add(Gen.equal("oi", \.oi, value, negated: false, constantFirst: false), DiffItemSpecs.minMaxOptional("oi", \.oi))
            add(Gen.equal("oi", \.oi, value, negated: true, constantFirst: false), DiffItemSpecs.minMaxOptional("oi", \.oi))
        }
        for spec in DiffItemSpecs.sorts {
            for order in [SortOrder.forward, .reverse] {
                var c = DiffCase<DiffItem>()
                c.sort = [(spec, order)]
                cases.append((c, []))
            }
        }
        for (number, (c, aggregates)) in cases.enumerated() {
            DiffCheck.run(c, number: number + 1, db: db, all: all, aggregates: aggregates, log: log)
        }
        print(log.summary())
    }
}

// MARK: - The known issues, as the issue tracker states them

extension QueryDifferentialTests {
    /// `$0.n > Int.max` on an indexed field and on the primary key: nothing matches.
    @Test func knownIssueGreaterThanLargestValue() throws {
        let log = DiffLog(test: "knownIssueGreaterThanLargestValue", seed: 0)
        let db = try Database.inMemory(models: [DiffItem.self, DiffKeyed.self])
        var items: [DiffItem] = []
        for (id, value) in [(1, 1), (Int.max, Int.max), (5, 5)] {
            var item = DiffItem.plain(id: id)
            item.i = value
            item.u64 = value == Int.max ? .max : UInt64(value)
            items.append(item)
        }
        let keyed = [DiffKeyed(id: "1", n: 1, s: ""), DiffKeyed(id: "2", n: Int.max, s: ""), DiffKeyed(id: "3", n: 5, s: "")]
        try db.write { tx in
            try tx.insert(contentsOf: items)
            try tx.insert(contentsOf: keyed)
        }
        let big = Int.max
        var number = 0
        for predicate in [Gen.compare("i", \DiffItem.i, .gt, big, constantFirst: false), Gen.compare("id", \DiffItem.id, .gt, big, constantFirst: false),
                          Gen.compare("u64", \DiffItem.u64, .gt, UInt64.max, constantFirst: false)] {
            number += 1
            var c = DiffCase<DiffItem>()
            c.predicates = [DiffFilter(predicate)]
            DiffCheck.run(c, number: number, db: db, all: items, aggregates: DiffItemSpecs.minMax("i", \.i) + DiffItemSpecs.minMax("id", \.id), log: log)
        }
        var c = DiffCase<DiffKeyed>()
        c.predicates = [DiffFilter(Gen.compare("n", \DiffKeyed.n, .gt, big, constantFirst: false))]
        DiffCheck.run(c, number: number + 1, db: db, all: keyed, aggregates: DiffKeyed.aggregates, log: log)
    }

    /// A reverse sort on an indexed field keeps ties in primary-key order.
    @Test func knownIssueReverseSortTies() throws {
        let log = DiffLog(test: "knownIssueReverseSortTies", seed: 0)
        let db = try Database.inMemory(models: [DiffItem.self])
        let items = [(1, 7), (2, 7), (3, 7), (4, 1)].map { id, n in
            var item = DiffItem.plain(id: id)
            item.i = n
            return item
        }
        try db.write { tx in try tx.insert(contentsOf: items) }
        var c = DiffCase<DiffItem>()
        c.sort = [(DiffItemSpecs.sort("i", \.i), .reverse)]
        DiffCheck.run(c, number: 1, db: db, all: items, aggregates: [], log: log)
    }

    /// `$0.s.contains("")` matches every object; `contains("\u{301}")` does not match "cafe\u{301}"
    /// (its last character is "é", not U+0301).
    @Test func knownIssueStringContains() throws {
        let log = DiffLog(test: "knownIssueStringContains", seed: 0)
        let db = try Database.inMemory(models: [DiffItem.self])
        let items = ["cafe\u{301}", "abc", ""].enumerated().map { k, s in
            var item = DiffItem.plain(id: k)
            item.s = s
            return item
        }
        try db.write { tx in try tx.insert(contentsOf: items) }
        for (number, needle) in ["", "\u{301}", "e"].enumerated() {
            var c = DiffCase<DiffItem>()
            c.predicates = [DiffFilter(Gen.stringContains("s", \.s, needle))]
            DiffCheck.run(c, number: number + 1, db: db, all: items, aggregates: [], log: log)
        }
    }

    /// `filter(\.s, matching: .contains("ANA"), options: .caseInsensitive)` finds "Ana".
    @Test func knownIssueCaseInsensitiveContains() throws {
        let log = DiffLog(test: "knownIssueCaseInsensitiveContains", seed: 0)
        let db = try Database.inMemory(models: [DiffItem.self])
        let items = ["Ana", "JOSÉ", "bob"].enumerated().map { k, s in
            var item = DiffItem.plain(id: k)
            item.s = s
            return item
        }
        try db.write { tx in try tx.insert(contentsOf: items) }
        var c = DiffCase<DiffItem>()
        c.tests = [DiffTestSpec(text: ".filter(\\.s, matching: .contains(\"ANA\"), options: .caseInsensitive)",
                                apply: { $0.filter(\.s, matching: .contains("ANA"), options: .caseInsensitive) },
                                matches: { diffStringMatch($0.s, .contains("ANA"), .caseInsensitive) })]
        DiffCheck.run(c, number: 1, db: db, all: items, aggregates: [], log: log)
    }
}
