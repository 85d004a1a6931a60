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
//
// The harness: DiffModels.swift (models, edge values, random source), DiffCases.swift (a case, the
// oracle, the comparison, generic over the model), DiffItemWorld.swift (DiffItem's specs and data).

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
            if stored != all.map(\.id) {
                log.fail("stored keys after round", case: number, "round \(round)", expected: "\(all.count) ids", actual: "\(stored.count) ids")
            }
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
                            log.fail(
                                "tx.objects(_:where:sortedBy:)", case: number, text, expected: "\(expected.count) ids \(expected.map(\.id).prefix(40))",
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
                        if deleted != expected.count {
                            mismatches.append(DiffMismatch(check: "delete(_:where:) count", expected: "\(expected.count)", actual: "\(deleted)"))
                        }
                        if left != expectedLeft {
                            mismatches.append(
                                DiffMismatch(
                                    check: "objects left after delete(_:where:)", expected: DiffCheck.describe(expectedLeft), actual: DiffCheck.describe(left)))
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
        for (stored, other) in [
            ("é", "e\u{301}"), ("cafe\u{301}", "café"), ("\u{2126}", "\u{3A9}"), ("\u{212B}", "A\u{30A}"), ("한", "\u{1112}\u{1161}\u{11AB}"),
        ] {
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
                            try tx.update(DiffKeyed.self, key: id) {
                                $0.n = n; $0.s = s
                            }
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
                        DiffTestSpec(
                            text: ".filter(\\.s, matching: \(diffDescribe(match, options)))", apply: { $0.filter(\.s, matching: match, options: options) },
                            matches: { diffStringMatch($0.s, match, options) }),
                        DiffTestSpec(
                            text: ".filter(\\.t, matching: \(diffDescribe(match, options)))", apply: { $0.filter(\.t, matching: match, options: options) },
                            matches: { diffStringMatch($0.t, match, options) }),
                        DiffTestSpec(
                            text: ".filter(\\.os, matching: \(diffDescribe(match, options)))", apply: { $0.filter(\.os, matching: match, options: options) },
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
        DiffItem(
            id: id, i: 0, j: 0, i8: 0, u8: 0, u64: 0, d: 0, f: 0, s: "", t: "", date: Date(timeIntervalSinceReferenceDate: 0), oi: nil, os: nil,
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
        for predicate in [
            Gen.compare("i", \DiffItem.i, .gt, big, constantFirst: false), Gen.compare("id", \DiffItem.id, .gt, big, constantFirst: false),
            Gen.compare("u64", \DiffItem.u64, .gt, UInt64.max, constantFirst: false),
        ] {
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
        c.tests = [
            DiffTestSpec(
                text: ".filter(\\.s, matching: .contains(\"ANA\"), options: .caseInsensitive)",
                apply: { $0.filter(\.s, matching: .contains("ANA"), options: .caseInsensitive) },
                matches: { diffStringMatch($0.s, .contains("ANA"), .caseInsensitive) })
        ]
        DiffCheck.run(c, number: 1, db: db, all: items, aggregates: [], log: log)
    }
}
