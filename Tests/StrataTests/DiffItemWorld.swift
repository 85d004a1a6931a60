import Testing
import Foundation
@testable import Strata

// The DiffItem world of QueryDifferentialTests: its sorts, filters and aggregates, its data and the
// random cases over it.

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

    static func distinct(
        _ name: String, _ apply: @escaping (Results<DiffItem>) -> Results<DiffItem>,
        _ same: @escaping (DiffItem, DiffItem) -> Bool, _ show: @escaping (DiffItem) -> String
    ) -> DiffDistinctSpec<DiffItem> {
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
        list.append(
            distinct(
                "\\.b, \\.kind", { $0.distinct(by: \.b, \.kind) }, { $0.b == $1.b && $0.kind == $1.kind },
                { genDescribe($0.b as Any) + ", " + genDescribe($0.kind as Any) }))
        list.append(
            distinct(
                "\\.u8, \\.s", { $0.distinct(by: \.u8, \.s) }, { $0.u8 == $1.u8 && $0.s == $1.s },
                { genDescribe($0.u8 as Any) + ", " + genDescribe($0.s as Any) }))
        return list
    }

    static func minMax<V: Comparable>(_ name: String, _ keyPath: KeyPath<DiffItem, V> & Sendable) -> [DiffAggregate<DiffItem>] {
        [
            DiffAggregate(name: "min(of: \\.\(name))") { r, e in
                let x = diffLeast(e.map { $0[keyPath: keyPath] }), y = r.min(of: keyPath)
                return diffSame(x, y) ? nil : (diffShow(x as Any), diffShow(y as Any))
            },
            DiffAggregate(name: "max(of: \\.\(name))") { r, e in
                let x = diffGreatest(e.map { $0[keyPath: keyPath] }), y = r.max(of: keyPath)
                return diffSame(x, y) ? nil : (diffShow(x as Any), diffShow(y as Any))
            },
        ]
    }

    static func minMaxOptional<V: Comparable>(_ name: String, _ keyPath: KeyPath<DiffItem, V?> & Sendable) -> [DiffAggregate<DiffItem>] {
        [
            DiffAggregate(name: "min(of: \\.\(name))") { r, e in
                let x = diffLeast(e.compactMap { $0[keyPath: keyPath] }), y = r.min(of: keyPath)
                return diffSame(x, y) ? nil : (diffShow(x as Any), diffShow(y as Any))
            },
            DiffAggregate(name: "max(of: \\.\(name))") { r, e in
                let x = diffGreatest(e.compactMap { $0[keyPath: keyPath] }), y = r.max(of: keyPath)
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
                    let x: Date? =
                        e.isEmpty ? nil : Date(timeIntervalSinceReferenceDate: e.reduce(0.0) { $0 + $1.date.timeIntervalSinceReferenceDate } / Double(e.count))
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
        return DiffItem(
            id: id, i: random.int(), j: random.int(), i8: random.int8(), u8: random.uint8(), u64: random.uint64(),
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
        func comparable<V: Comparable & Codable & Sendable>(_ name: String, _ kp: KeyPath<DiffItem, V> & Sendable, _ pool: [V], _ small: V) -> GenPredicate<
            DiffItem
        > {
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
            return DiffTestSpec(
                text: ".filter(\\.tags, contains: \(genDescribe(x)))", apply: { $0.filter(\.tags, contains: x) }, matches: { $0.tags.contains(x) })
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
                return DiffTestSpec(
                    text: ".filter(\\.s, matching: \(diffDescribe(match, options)))", apply: { $0.filter(\.s, matching: match, options: options) },
                    matches: { diffStringMatch($0.s, match, options) })
            case 1:
                return DiffTestSpec(
                    text: ".filter(\\.t, matching: \(diffDescribe(match, options)))", apply: { $0.filter(\.t, matching: match, options: options) },
                    matches: { diffStringMatch($0.t, match, options) })
            default:
                return DiffTestSpec(
                    text: ".filter(\\.os, matching: \(diffDescribe(match, options)))", apply: { $0.filter(\.os, matching: match, options: options) },
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
        if random.chance(15) {
            c.tests.append(testSpec(all))
            // Anywhere among the predicates: a throwing predicate after it sees only what it passes.
            c.testsAfter = random.below(predicates + 1)
        }
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
