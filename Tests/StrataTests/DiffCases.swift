import Testing
import Foundation
@testable import Strata

// How one differential case is described, run against Strata and against the Foundation oracle, and
// compared; generic over the model, so CompoundDifferentialTests and QueryDifferentialTests share it.

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
    /// How many of the predicates are added before the helper tests (nil: all of them). The
    /// query is the `&&` of its filters in the order added, so the oracle evaluates them so too.
    var testsAfter: Int?
    var sort: [(spec: DiffSortSpec<M>, order: SortOrder)] = []
    var distinct: DiffDistinctSpec<M>?
    var window: [DiffWindow] = []
    var filterAfterSort = false
    /// Sorts with `sorted(by:collation:)` (its String sort specs carry the oracle's comparison).
    var collation: StringCollation?

    var descriptors: [SortDescriptor<M>] { sort.map { $0.spec.make($0.order) } }

    /// Where the tests go among the predicates.
    private var split: Int { min(testsAfter ?? predicates.count, predicates.count) }

    /// The predicates before the tests, then the tests, then the rest.
    var ordered: (before: ArraySlice<DiffFilter<M>>, after: ArraySlice<DiffFilter<M>>) {
        (predicates[..<split], predicates[split...])
    }

    var text: String {
        var parts: [String] = []
        for p in ordered.before { parts.append(".filter(#Predicate { \(p.text) })") }
        for t in tests { parts.append(t.text) }
        for p in ordered.after { parts.append(".filter(#Predicate { \(p.text) })") }
        if !sort.isEmpty {
            parts.append(
                ".sorted(by: " + sort.map { "\($0.spec.name)\($0.order == .reverse ? " reverse" : "")" }.joined(separator: ", ")
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
        for p in ordered.before { r = r.filter(p.predicate) }
        for t in tests { r = t.apply(r) }
        for p in ordered.after { r = r.filter(p.predicate) }
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
        // Left to right, stopping at the first false, as `&&` does.
        for p in c.ordered.before where try !p.predicate.evaluate(object) { return false }
        for t in c.tests where !t.matches(object) { return false }
        for p in c.ordered.after where try !p.predicate.evaluate(object) { return false }
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

/// The documented minimum and maximum: in the sort order, where NaN (a value unequal to itself)
/// is above every number. So the minimum ignores NaN unless every value is NaN, and the maximum
/// is NaN when any value is.
func diffLeast<V: Comparable>(_ values: [V]) -> V? { values.filter { $0 == $0 }.min() ?? values.first }
func diffGreatest<V: Comparable>(_ values: [V]) -> V? { values.first { $0 != $0 } ?? values.max() }

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
        var text =
            "\(test) seed \(seed): \(cases) cases, \(failingCases) failing (oracle \(Int(oracleSeconds * 1000)) ms, Strata \(Int(strataSeconds * 1000)) ms)"
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
                fail(
                    "count vs elements (map and Array(results) would trap)", "count == fetch().count == \(ids.count)",
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
        if let p = (0..<min(expected.count, actual.count)).first(where: { expected[$0] != actual[$0] })
            ?? (expected.count == actual.count ? nil : min(expected.count, actual.count)),
            p < expected.count, p < actual.count
        {
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
