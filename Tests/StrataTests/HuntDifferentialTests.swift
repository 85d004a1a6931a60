import Testing
import Foundation
import Synchronization
import Dispatch
@testable import Strata

// A differential test of sorts (several descriptors, optionals, custom Comparable enums, Decimal,
// UUID, computed and nested key paths, collations), windows and element access, aggregates and
// distinct, on a model whose fields are all indexed (HuntThing<HuntIndexed>) and on the same model
// without indexes (HuntThing<HuntScanned>), against Foundation's `evaluate` and
// `SortDescriptor.compare` on the same objects. STRATA_HUNT_SEED, STRATA_HUNT_CASES and
// STRATA_HUNT_OBJECTS make it larger.

struct HuntSortSpec<M> {
    var name: String
    var make: (SortOrder) -> SortDescriptor<M>
    /// A Double or Float field: its value (nil when the optional is nil), for the NaN rule.
    var floating: ((M) -> Double?)?
    /// A String field: its value (nil when nil), for collations.
    var string: ((M) -> String?)?
}

struct HuntDistinct<M: Model> {
    var name: String
    var apply: (Results<M>) -> Results<M>
    var same: (M, M) -> Bool
}

struct HuntAggregate<M: Model> {
    var name: String
    /// nil when they agree, or (expected, actual).
    var check: (Results<M>, [M]) -> (String, String)?
}

enum HuntWindow {
    case offset(Int), prefix(Int)
}

struct HuntCase<M: Model> {
    var predicates: [GenPredicate<M>] = []
    var sort: [(spec: HuntSortSpec<M>, order: SortOrder)] = []
    var collation: StringCollation?
    var filterAfterSort = false
    var distinct: HuntDistinct<M>?
    var window: [HuntWindow] = []

    var text: String {
        var parts = predicates.map { ".filter(#Predicate { \($0.text) })" }
        if !sort.isEmpty {
            let s = ".sorted(by: [" + sort.map { "\($0.spec.name) \($0.order == .reverse ? "reverse" : "forward")" }.joined(separator: ", ") + "]"
            parts.insert(s + (collation.map { ", collation: \($0)" } ?? "") + ")", at: filterAfterSort ? 0 : parts.count)
        }
        if let distinct { parts.append(".distinct(by: \(distinct.name))") }
        for w in window {
            switch w {
            case .offset(let k): parts.append(".offset(\(k))")
            case .prefix(let k): parts.append(".prefix(\(k))")
            }
        }
        return parts.joined()
    }

    func results(_ base: Results<M>) -> Results<M> {
        var r = base
        let descriptors = sort.map { $0.spec.make($0.order) }
        func sorted(_ r: Results<M>) -> Results<M> { collation.map { r.sorted(by: descriptors, collation: $0) } ?? r.sorted(by: descriptors) }
        if filterAfterSort && !sort.isEmpty { r = sorted(r) }
        for p in predicates { r = r.filter(p.predicate) }
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

    /// Foundation's answer: objects in key order, filtered by `evaluate`, sorted by the documented
    /// order (ties by key), de-duplicated, windowed.
    func expected(_ all: [M]) throws -> [M] where M.ID: Comparable {
        var out = try all.filter { object in try predicates.allSatisfy { try $0.predicate.evaluate(object) } }
        if !sort.isEmpty {
            let descriptors = sort.map { $0.spec.make($0.order) }
            out.sort { a, b in
                for (k, entry) in sort.enumerated() {
                    let r = huntCompare(a, b, entry.spec, entry.order, descriptors[k], collation)
                    if r != .orderedSame { return r == .orderedAscending }
                }
                return a.id < b.id
            }
        }
        if let distinct {
            var kept: [M] = []
            for object in out where !kept.contains(where: { distinct.same($0, object) }) { kept.append(object) }
            out = kept
        }
        for w in window {
            switch w {
            case .offset(let k): out = Array(out.dropFirst(k))
            case .prefix(let k): out = Array(out.prefix(k))
            }
        }
        return out
    }
}

func huntCompare<M>(_ a: M, _ b: M, _ spec: HuntSortSpec<M>, _ order: SortOrder, _ descriptor: SortDescriptor<M>, _ collation: StringCollation?)
    -> ComparisonResult
{
    var r: ComparisonResult
    if let collation, let string = spec.string {
        let x = string(a), y = string(b)
        switch (x, y) {
        case (nil, nil): r = .orderedSame
        case (nil, _): r = .orderedAscending
        case (_, nil): r = .orderedDescending
        case let (x?, y?):
            var kx: [UInt8] = [], ky: [UInt8] = []
            collation.appendEncodedKey(x, to: &kx)
            collation.appendEncodedKey(y, to: &ky)
            r = kx == ky ? .orderedSame : (kx.lexicographicallyPrecedes(ky) ? .orderedAscending : .orderedDescending)
        }
    } else if let floating = spec.floating {
        func rank(_ v: Double?) -> Int { v.map { $0.isNaN ? 2 : 1 } ?? 0 }
        let x = rank(floating(a)), y = rank(floating(b))
        if x == 1 && y == 1 { return descriptor.compare(a, b) }
        r = x == y ? .orderedSame : (x < y ? .orderedAscending : .orderedDescending)
    } else {
        return descriptor.compare(a, b)
    }
    if order == .reverse && r != .orderedSame { r = r == .orderedAscending ? .orderedDescending : .orderedAscending }
    return r
}

func huntSame<V>(_ a: V, _ b: V) -> Bool {
    if let x = a as? Double, let y = b as? Double { return x == y || (x.isNaN && y.isNaN) }
    if let x = a as? Float, let y = b as? Float { return x == y || (x.isNaN && y.isNaN) }
    if let x = a as? Decimal, let y = b as? Decimal { return x == y || (x.isNaN && y.isNaN) }
    if let x = a as? Date, let y = b as? Date {
        return x == y || (x.timeIntervalSinceReferenceDate.isNaN && y.timeIntervalSinceReferenceDate.isNaN)
    }
    if let x = a as? any OptionalValue, let y = b as? any OptionalValue {
        switch (x.wrappedAny, y.wrappedAny) {
        case (nil, nil): return true
        case let (u?, v?): return huntSame(u, v)
        default: return false
        }
    }
    if let x = a as? AnyHashable, let y = b as? AnyHashable { return x == y }
    return "\(a)" == "\(b)"
}

/// The documented minimum and maximum: NaN above every number.
func huntLeast<V: Comparable>(_ values: [V]) -> V? { values.filter { $0 == $0 }.min() ?? values.first }
func huntGreatest<V: Comparable>(_ values: [V]) -> V? { values.first { $0 != $0 } ?? values.max() }

enum HuntSpecs<T: HuntIndexing> {
    typealias M = HuntThing<T>

    static func sort<V: Comparable>(_ name: String, _ kp: KeyPath<M, V> & Sendable) -> HuntSortSpec<M> {
        var spec = HuntSortSpec<M>(name: name, make: { SortDescriptor(kp, order: $0) }, floating: nil, string: nil)
        if V.self == Double.self { spec.floating = { $0[keyPath: kp] as? Double } }
        if V.self == Float.self { spec.floating = { ($0[keyPath: kp] as? Float).map(Double.init) } }
        if V.self == String.self { spec.string = { $0[keyPath: kp] as? String } }
        if V.self == Date.self { spec.floating = { ($0[keyPath: kp] as? Date)?.timeIntervalSinceReferenceDate } }
        return spec
    }

    static func sort<V: Comparable>(_ name: String, _ kp: KeyPath<M, V?> & Sendable) -> HuntSortSpec<M> {
        var spec = HuntSortSpec<M>(name: name, make: { SortDescriptor(kp, order: $0) }, floating: nil, string: nil)
        if V.self == Double.self { spec.floating = { $0[keyPath: kp].map { $0 as! Double } } }
        if V.self == String.self { spec.string = { $0[keyPath: kp].map { $0 as! String } } }
        if V.self == Date.self { spec.floating = { $0[keyPath: kp].map { ($0 as! Date).timeIntervalSinceReferenceDate } } }
        return spec
    }

    static func lexical(_ name: String, _ kp: KeyPath<M, String> & Sendable) -> HuntSortSpec<M> {
        HuntSortSpec<M>(name: name, make: { SortDescriptor(kp, comparator: .lexical, order: $0) }, floating: nil, string: { $0[keyPath: kp] })
    }

    static var sorts: [HuntSortSpec<M>] {
        [
            sort("id", \.id), sort("a", \.a), sort("b", \.b), sort("i8", \.i8), sort("u64", \.u64), sort("d", \.d), sort("od", \.od),
            sort("f", \.f), sort("date", \.date), sort("odate", \.odate), sort("name", \.name), lexical("name (lexical)", \.name),
            sort("oname", \.oname), sort("level", \.level), sort("olevel", \.olevel), sort("dec", \.dec), sort("uuid", \.uuid),
            sort("home.city", \.home.city), sort("home.zip", \.home.zip), sort("address?.city", \.address?.city),
            sort("address?.zip", \.address?.zip), sort("address?.level", \.address?.level), sort("computed", \.computed),
        ]
    }

    static func distinct(_ name: String, _ apply: @escaping (Results<M>) -> Results<M>, _ same: @escaping (M, M) -> Bool) -> HuntDistinct<M> {
        HuntDistinct(name: name, apply: apply, same: same)
    }

    static var distincts: [HuntDistinct<M>] {
        [
            distinct("\\.a", { $0.distinct(by: \.a) }, { $0.a == $1.a }),
            distinct("\\.b", { $0.distinct(by: \.b) }, { $0.b == $1.b }),
            distinct("\\.dec", { $0.distinct(by: \.dec) }, { $0.dec == $1.dec }),
            distinct("\\.level", { $0.distinct(by: \.level) }, { $0.level == $1.level }),
            distinct("\\.olevel", { $0.distinct(by: \.olevel) }, { $0.olevel == $1.olevel }),
            distinct("\\.owner", { $0.distinct(by: \.owner) }, { $0.owner == $1.owner }),
            distinct("\\.address", { $0.distinct(by: \.address) }, { $0.address == $1.address }),
            distinct("\\.home.city", { $0.distinct(by: \.home.city) }, { $0.home.city == $1.home.city }),
            distinct("\\.uuid", { $0.distinct(by: \.uuid) }, { $0.uuid == $1.uuid }),
            distinct("\\.od", { $0.distinct(by: \.od) }, { huntSame($0.od, $1.od) }),
            distinct("\\.date", { $0.distinct(by: \.date) }, { huntSame($0.date, $1.date) }),
            distinct("\\.computed", { $0.distinct(by: \.computed) }, { $0.computed == $1.computed }),
            distinct("\\.nums", { $0.distinct(by: \.nums) }, { $0.nums == $1.nums }),
            distinct("\\.flag, \\.color", { $0.distinct(by: \.flag, \.color) }, { $0.flag == $1.flag && $0.color == $1.color }),
        ]
    }

    static func minMax<V: Comparable>(_ name: String, _ kp: KeyPath<M, V> & Sendable) -> [HuntAggregate<M>] {
        [
            HuntAggregate(name: "min(of: \\.\(name))") { r, e in
                let x = huntLeast(e.map { $0[keyPath: kp] }), y = r.min(of: kp)
                return huntSame(x, y) ? nil : ("\(x as Any)", "\(y as Any)")
            },
            HuntAggregate(name: "max(of: \\.\(name))") { r, e in
                let x = huntGreatest(e.map { $0[keyPath: kp] }), y = r.max(of: kp)
                return huntSame(x, y) ? nil : ("\(x as Any)", "\(y as Any)")
            },
        ]
    }

    static func minMax<V: Comparable>(_ name: String, _ kp: KeyPath<M, V?> & Sendable) -> [HuntAggregate<M>] {
        [
            HuntAggregate(name: "min(of: \\.\(name))") { r, e in
                let x = huntLeast(e.compactMap { $0[keyPath: kp] }), y = r.min(of: kp)
                return huntSame(x, y) ? nil : ("\(x as Any)", "\(y as Any)")
            },
            HuntAggregate(name: "max(of: \\.\(name))") { r, e in
                let x = huntGreatest(e.compactMap { $0[keyPath: kp] }), y = r.max(of: kp)
                return huntSame(x, y) ? nil : ("\(x as Any)", "\(y as Any)")
            },
        ]
    }

    static func intSum<V: FixedWidthInteger>(_ name: String, _ kp: KeyPath<M, V> & Sendable) -> HuntAggregate<M> {
        HuntAggregate(name: "sum(of: \\.\(name))") { r, e in
            var total = V.zero
            var overflow = false
            for v in e.map({ $0[keyPath: kp] }) {
                let (s, o) = total.addingReportingOverflow(v)
                if o { overflow = true; break }
                total = s
            }
            let y = r.sum(of: kp)
            let thrown: Bool
            do { _ = try r.fetchSum(of: kp); thrown = false } catch { thrown = true }
            if (overflow ? 0 : total) != y || thrown != overflow {
                return ("\(overflow ? "0, fetchSum throws" : "\(total)")", "\(y)\(thrown ? ", fetchSum throws" : "")")
            }
            return nil
        }
    }

    static func sum<V: AdditiveArithmetic>(_ name: String, _ kp: KeyPath<M, V> & Sendable) -> HuntAggregate<M> {
        HuntAggregate(name: "sum(of: \\.\(name))") { r, e in
            let x = e.map { $0[keyPath: kp] }.reduce(.zero, +), y = r.sum(of: kp)
            return huntSame(x, y) ? nil : ("\(x)", "\(y)")
        }
    }

    static var aggregates: [HuntAggregate<M>] {
        var list = minMax("a", \.a) + minMax("b", \.b) + minMax("i8", \.i8) + minMax("u64", \.u64) + minMax("d", \.d) + minMax("od", \.od)
        list += minMax("f", \.f) + minMax("date", \.date) + minMax("odate", \.odate) + minMax("name", \.name) + minMax("oname", \.oname)
        list += minMax("level", \.level) + minMax("olevel", \.olevel) + minMax("dec", \.dec) + minMax("uuid", \.uuid)
        list += minMax("computed", \.computed) + minMax("home.city", \.home.city) + minMax("address?.zip", \.address?.zip)
        list += [
            intSum("a", \.a), intSum("i8", \.i8), intSum("u64", \.u64), intSum("computed", \.computed), sum("d", \.d), sum("f", \.f),
            sum("dec", \.dec),
            HuntAggregate(name: "average(of: \\.d)") { r, e in
                let x: Double? = e.isEmpty ? nil : e.map(\.d).reduce(0, +) / Double(e.count)
                let y = r.average(of: \.d)
                return huntSame(x, y) ? nil : ("\(x as Any)", "\(y as Any)")
            },
            HuntAggregate(name: "average(of: \\.i8)") { r, e in
                let x: Double? = e.isEmpty ? nil : e.reduce(0.0) { $0 + Double($1.i8) } / Double(e.count)
                let y = r.average(of: \.i8)
                return huntSame(x, y) ? nil : ("\(x as Any)", "\(y as Any)")
            },
            HuntAggregate(name: "average(of: \\.date)") { r, e in
                let x: Date? =
                    e.isEmpty ? nil : Date(timeIntervalSinceReferenceDate: e.reduce(0.0) { $0 + $1.date.timeIntervalSinceReferenceDate } / Double(e.count))
                let y = r.average(of: \.date)
                return huntSame(x, y) ? nil : ("\(x as Any)", "\(y as Any)")
            },
            HuntAggregate(name: "count") { r, e in r.count == e.count ? nil : ("\(e.count)", "\(r.count)") },
        ]
        return list
    }

    // MARK: Predicates

    static func leaf(_ r: inout HuntRandom, _ all: [M]) -> GenPredicate<M> {
        func op() -> GenOp { r.pick(GenOp.allCases) }
        func from<V>(_ pool: [V], _ kp: KeyPath<M, V>) -> V { all.isEmpty || r.chance(40) ? r.pick(pool) : r.pick(all)[keyPath: kp] }
        switch r.below(34) {
        case 0: return Gen.compare("a", \M.a, op(), r.below(8) - 1, constantFirst: r.chance(20))
        case 1:
            switch r.below(3) {
            case 0: return Gen.isNil("b", \M.b, negated: r.chance(50), nilFirst: r.chance(20))
            case 1: return Gen.equal("b", \M.b, r.chance(20) ? nil : r.int(), negated: r.chance(30), constantFirst: false)
            default: return Gen.forceUnwrap("b", \M.b, op(), r.int(), guarded: true)
            }
        case 2: return Gen.compare("i8", \M.i8, op(), from(HuntPools.int8s, \.i8), constantFirst: r.chance(20))
        case 3: return Gen.compare("u64", \M.u64, op(), from(HuntPools.uint64s, \.u64), constantFirst: false)
        case 4: return Gen.compare("d", \M.d, op(), from(HuntPools.doubles, \.d), constantFirst: r.chance(20))
        case 5: return Gen.equal("od", \M.od, r.chance(20) ? nil : r.double(), negated: r.chance(30), constantFirst: false)
        case 6: return Gen.compare("f", \M.f, op(), r.float(), constantFirst: false)
        case 7: return Gen.compare("date", \M.date, op(), from(HuntPools.dates, \.date), constantFirst: false)
        case 8:
            if r.chance(50) { return Gen.isNil("odate", \M.odate, negated: r.chance(50), nilFirst: false) }
            return Gen.equal("odate", \M.odate, r.chance(20) ? nil : r.date(), negated: r.chance(30), constantFirst: false)
        case 9: return r.chance(50) ? Gen.boolField("flag", \M.flag) : Gen.not(Gen.boolField("flag", \M.flag))
        case 10: return Gen.equal("ob", \M.ob, r.chance(30) ? nil : r.chance(50), negated: r.chance(30), constantFirst: r.chance(20))
        case 11: return Gen.compare("name", \M.name, op(), r.string(), constantFirst: false)
        case 12:
            return r.chance(50)
                ? Gen.stringContains("name", \M.name, r.pick(["", "a", "pp", "e", "room1", "ß", "Ä"]))
                : Gen.startsWith("name", \M.name, r.pick(["", "a", "A", "room", "é", "e", "st"]))
        case 13:
            if r.chance(40) { return Gen.isNil("oname", \M.oname, negated: r.chance(50), nilFirst: false) }
            return Gen.equal("oname", \M.oname, r.chance(20) ? nil : r.string(), negated: r.chance(30), constantFirst: false)
        case 14: return Gen.compare("level", \M.level, op(), r.pick(HuntLevel.allCases), constantFirst: r.chance(20))
        case 15: return Gen.equal("olevel", \M.olevel, r.chance(20) ? nil : r.pick(HuntLevel.allCases), negated: r.chance(30), constantFirst: false)
        case 16: return Gen.equal("color", \M.color, r.chance(20) ? nil : r.pick(HuntColor.allCases), negated: r.chance(30), constantFirst: false)
        case 17, 18: return Gen.compare("dec", \M.dec, op(), from(HuntPools.decimals, \.dec), constantFirst: r.chance(20))
        case 19: return Gen.compare("uuid", \M.uuid, op(), r.uuid(), constantFirst: false)
        case 20:
            if r.chance(30) { return Gen.isNil("owner", \M.owner, negated: r.chance(50), nilFirst: false) }
            return Gen.equal(
                "owner", \M.owner, r.chance(15) ? nil : Ref(r.pick(HuntPools.owners + ["nobody"])), negated: r.chance(30), constantFirst: r.chance(20))
        case 21: return Gen.nestedCompare("home.city", \M.home, \HuntAddress.city, op(), r.pick(HuntPools.cities))
        case 22:
            return r.chance(50)
                ? Gen.nestedStringContains("home.city", \M.home, \HuntAddress.city, r.pick(["", "erl", "ü", "u\u{308}", "O"]))
                : Gen.nestedStartsWith("home.city", \M.home, \HuntAddress.city, r.pick(["", "B", "b", "Zu", "Zü"]))
        case 23:
            switch r.below(4) {
            case 0: return Gen.flatMapEqual("address?.zip", \M.address, \HuntAddress.zip, r.chance(20) ? nil : Optional(r.below(5)), negated: r.chance(30))
            case 1:
                return Gen.flatMapEqual("address?.city", \M.address, \HuntAddress.city, r.chance(20) ? nil : r.pick(HuntPools.cities), negated: r.chance(30))
            case 2:
                return Gen.flatMapEqual(
                    "address?.level", \M.address, \HuntAddress.level, r.chance(20) ? nil : r.pick(HuntLevel.allCases), negated: r.chance(30))
            default: return Gen.isNil("address", \M.address, negated: r.chance(50), nilFirst: false)
            }
        case 24: return Gen.arrayContains("nums", \M.nums, r.below(6) - 2)
        case 25:
            switch r.below(7) {
            case 0: return Gen.inList("a", \M.a, (0..<r.below(4)).map { _ in r.below(8) - 1 })
            case 1: return Gen.inList("level", \M.level, (0..<r.below(3)).map { _ in r.pick(HuntLevel.allCases) })
            case 2: return Gen.inList("color", \M.color, (0..<r.below(3)).map { _ in r.chance(20) ? nil : r.pick(HuntColor.allCases) })
            case 3: return Gen.inList("dec", \M.dec, (0..<r.below(3)).map { _ in r.decimal() })
            case 4: return Gen.inList("uuid", \M.uuid, (0..<r.below(3)).map { _ in r.uuid() })
            case 5: return Gen.inList("owner", \M.owner, (0..<r.below(3)).map { _ in r.chance(20) ? nil : Ref(r.pick(HuntPools.owners)) })
            default: return Gen.inList("name", \M.name, (0..<r.below(3)).map { _ in r.string() })
            }
        case 26: return Gen.compare("computed", \M.computed, op(), r.pick(all.isEmpty ? [0] : all.map(\.computed)), constantFirst: false)
        case 27:
            return Gen.nestedCompare("home.level", \M.home, \HuntAddress.level, op(), r.chance(30) ? nil : r.pick(HuntLevel.allCases), comparableOptional: true)
        case 28: return Gen.compare("id", \M.id, op(), all.isEmpty || r.chance(30) ? r.int() : r.pick(all).id, constantFirst: r.chance(20))
        case 29: return Gen.fields("a", \M.a, op(), "computed", \M.computed)
        case 30: return Gen.coalesce("b", \M.b, r.int(), op(), r.int())
        case 31: return Gen.equal("home", \M.home, r.address(), negated: r.chance(30), constantFirst: false)
        case 32: return Gen.equal("address", \M.address, r.chance(30) ? nil : r.address(), negated: r.chance(30), constantFirst: false)
        default: return Gen.compare("f", \M.f, op(), r.float(), constantFirst: true)
        }
    }

    static func tree(_ r: inout HuntRandom, _ all: [M], depth: Int) -> GenPredicate<M> {
        if depth == 0 || r.chance(40) { return leaf(&r, all) }
        switch r.below(5) {
        case 0, 1: return Gen.and(tree(&r, all, depth: depth - 1), tree(&r, all, depth: depth - 1))
        case 2, 3: return Gen.or(tree(&r, all, depth: depth - 1), tree(&r, all, depth: depth - 1))
        default: return Gen.not(tree(&r, all, depth: depth - 1))
        }
    }

    static func makeCase(_ r: inout HuntRandom, _ all: [M]) -> HuntCase<M> {
        var c = HuntCase<M>()
        let n = r.chance(20) ? 0 : (r.chance(75) ? 1 : 2)
        for _ in 0..<n { c.predicates.append(tree(&r, all, depth: r.below(3))) }
        let sorts = sorts
        let count = r.chance(15) ? 0 : 1 + r.below(4)
        c.sort = (0..<count).map { _ in (r.pick(sorts), r.chance(50) ? .forward : .reverse) }
        if r.chance(25) {
            c.collation = r.pick([.caseInsensitive, .natural, StringCollation([.caseInsensitive, .numeric]), StringCollation([.diacriticInsensitive])])
        }
        c.filterAfterSort = r.chance(20)
        if r.chance(15) { c.distinct = r.pick(distincts) }
        if r.chance(40) {
            c.window = (0..<(1 + r.below(2))).map { _ in
                let k = r.chance(20) ? r.below(3) : r.below(all.count / 2 + 3)
                return r.chance(50) ? .offset(k) : .prefix(k)
            }
        }
        return c
    }
}

extension Gen {
    /// `$0.<outer>.<inner> op c` on an optional comparable inner value: only `==` and `!=` exist.
    static func nestedCompare<M, O, V: Equatable & Codable & Sendable>(
        _ name: String, _ outer: KeyPath<M, O> & Sendable, _ inner: KeyPath<O, V?> & Sendable, _ op: GenOp, _ c: V?, comparableOptional: Bool
    ) -> GenPredicate<M> {
        let negated = op == .ne || op == .lt || op == .gt
        return GenPredicate(
            text: "$0.\(name) \(negated ? "!=" : "==") \(genDescribe(c as Any))",
            build: { v in equate(nested(v, outer, inner), PredicateExpressions.build_Arg(c), negated: negated) })
    }
}

struct HuntLog {
    var cases = 0
    var checks = 0
    var failures: [String] = []
    var planKinds: [String: Int] = [:]
}

@Suite struct HuntDifferentialTests {
    static func env(_ name: String) -> Int? { ProcessInfo.processInfo.environment[name].flatMap { Int($0) } }

    /// Runs `c` on `db` and compares every read with `expected`.
    static func check<T: HuntIndexing>(
        _ c: HuntCase<HuntThing<T>>, db: Database, all: [HuntThing<T>], aggregates: [HuntAggregate<HuntThing<T>>], positions: [Int],
        number: Int, log: inout HuntLog
    ) {
        typealias M = HuntThing<T>
        log.cases += 1
        let fresh = { c.results(db.objects(M.self)) }
        let plan = fresh().explain()
        let kind = plan.split(separator: "\n").first.map { String($0.prefix(24)) } ?? ""
        log.planKinds[kind, default: 0] += 1
        var problems: [String] = []
        func fail(_ what: String, _ e: String, _ a: String) { problems.append("  \(what): expected \(e), got \(a)") }
        let expected: [M]
        do {
            expected = try c.expected(all)
        } catch {
            if (try? fresh().fetch()) != nil { fail("error", "an error", "none") }
            return
        }
        let ids = expected.map(\.id)
        do {
            let n = try fresh().fetchCount()
            if n != ids.count { fail("fetchCount", "\(ids.count)", "\(n)") }
        } catch { fail("fetchCount", "\(ids.count)", "\(error)") }
        do {
            let got = try fresh().fetch().map(\.id)
            if got != ids {
                let byId = Dictionary(all.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
                let k = Array(zip(got, ids)).firstIndex { $0 != $1 } ?? min(got.count, ids.count)
                var detail = "first difference at \(k)"
                if k < ids.count { detail += "\n    expected \(byId[ids[k]]!.text)" }
                if k < got.count { detail += "\n    got      \(byId[got[k]].map(\.text) ?? "\(got[k])")" }
                let missing = Set(ids).subtracting(got), extra = Set(got).subtracting(ids)
                if !missing.isEmpty { detail += "\n    missing \(missing.count): " + missing.prefix(3).map { byId[$0]!.text }.joined(separator: "; ") }
                if !extra.isEmpty { detail += "\n    extra \(extra.count): " + extra.prefix(3).map { byId[$0].map(\.text) ?? "\($0)" }.joined(separator: "; ") }
                fail("fetch ids", "\(ids.count) \(ids.prefix(30))", "\(got.count) \(got.prefix(30))\n  " + detail)
            }
        } catch { fail("fetch", "\(ids.count)", "\(error)") }
        log.checks += 2
        let lazy = fresh()
        if lazy.count != ids.count { fail("count", "\(ids.count)", "\(lazy.count)") }
        if lazy.keys != ids { fail("keys", "\(ids.prefix(20))", "\(lazy.keys.prefix(20))") }
        // Element access on results nothing has read yet.
        for p in positions where !ids.isEmpty {
            let i = p % ids.count
            let one = fresh()
            // (Reading past the end traps, as for any collection: only within what count says.)
            guard one.count == ids.count else { break }
            let got = one[i].id
            if got != ids[i] { fail("results[\(i)]", "\(ids[i])", "\(got)") }
            let lo = p % (ids.count + 1), hi = min(ids.count, lo + p % 7)
            let sliced = fresh()
            guard sliced.count == ids.count else { break }
            let slice = sliced[lo..<hi].map(\.id)
            if slice != Array(ids[lo..<hi]) { fail("results[\(lo)..<\(hi)]", "\(ids[lo..<hi])", "\(slice)") }
            let page = fresh().objects(in: lo..<(lo + p % 9)).map(\.id)
            if page != Array(ids[lo..<min(ids.count, lo + p % 9)]) {
                fail("objects(in: \(lo)..<\(lo + p % 9))", "\(ids[lo..<min(ids.count, lo + p % 9)])", "\(page)")
            }
            log.checks += 3
        }
        if fresh().first?.id != ids.first { fail("first", "\(ids.first as Any)", "\(fresh().first?.id as Any)") }
        if fresh().last?.id != ids.last { fail("last", "\(ids.last as Any)", "\(fresh().last?.id as Any)") }
        var it: [Int] = []
        for x in fresh() { it.append(x.id) }
        if it != ids { fail("for-in", "\(ids.prefix(20))", "\(it.prefix(20))") }
        log.checks += 5
        for (k, aggregate) in aggregates.enumerated() {
            let r = k % 2 == 0 ? fresh() : lazy
            if let (e, a) = aggregate.check(r, expected) { fail(aggregate.name, e, a) }
            log.checks += 1
        }
        if let error = lazy.error { fail("error", "nil", "\(error)") }
        if !problems.isEmpty {
            log.failures.append(
                "case \(number) on \(M.modelName): \(c.text)\n  plan: \(plan.replacingOccurrences(of: "\n", with: " | "))\n" + problems.joined(separator: "\n"))
        }
    }

    @Test func sortsWindowsAggregatesMatchFoundation() throws {
        let seed = UInt64(Self.env("STRATA_HUNT_SEED") ?? 20_261_202)
        let casesPerRound = Self.env("STRATA_HUNT_CASES") ?? 25
        let objects = Self.env("STRATA_HUNT_OBJECTS") ?? 60
        let rounds = Self.env("STRATA_HUNT_ROUNDS") ?? 3
        var random = HuntRandom(rng: SeededRandom(seed: seed))
        let db = try Database.inMemory(models: [HuntThing<HuntIndexed>.self, HuntThing<HuntScanned>.self, HuntOwner.self])
        var items: [Int: HuntThing<HuntIndexed>] = [:]
        var nextId = -20
        var log = HuntLog()
        for round in 0..<rounds {
            // Writes, mirrored in `items`.
            try db.write { tx in
                let n = round == 0 ? objects : 1 + random.below(objects / 3 + 1)
                for _ in 0..<n {
                    let keys = items.keys.sorted()
                    switch round == 0 ? 0 : random.below(5) {
                    case 0, 1:
                        nextId += 1 + random.below(3)
                        let t = random.thing(id: random.chance(5) ? -nextId * 1000 : nextId)
                        guard items[t.id] == nil else { continue }
                        items[t.id] = t
                        try tx.insert(t)
                        try tx.insert(t.retagged(HuntScanned.self))
                    case 2:
                        guard let id = keys.isEmpty ? nil : random.pick(keys) else { continue }
                        items[id] = nil
                        _ = try tx.delete(HuntThing<HuntIndexed>.self, key: id)
                        _ = try tx.delete(HuntThing<HuntScanned>.self, key: id)
                    default:
                        guard let id = keys.isEmpty ? nil : random.pick(keys), var t = items[id] else { continue }
                        random.mutate(&t)
                        items[id] = t
                        let stored = t
                        try tx.update(HuntThing<HuntIndexed>.self, key: id) { $0 = stored }
                        try tx.upsert(stored.retagged(HuntScanned.self))
                    }
                }
            }
            let all = items.values.sorted { $0.id < $1.id }
            let plain = all.map { $0.retagged(HuntScanned.self) }
            for k in 0..<casesPerRound {
                let number = round * casesPerRound + k
                let state = random
                var r1 = state, r2 = state
                let c1 = HuntSpecs<HuntIndexed>.makeCase(&r1, all)
                let c2 = HuntSpecs<HuntScanned>.makeCase(&r2, plain)
                random = r1
                let aggregates1 = HuntSpecs<HuntIndexed>.aggregates, aggregates2 = HuntSpecs<HuntScanned>.aggregates
                let picks = (0..<3).map { _ in random.below(aggregates1.count) }
                let positions = (0..<2).map { _ in random.below(1000) }
                Self.check(c1, db: db, all: all, aggregates: picks.map { aggregates1[$0] }, positions: positions, number: number, log: &log)
                Self.check(c2, db: db, all: plain, aggregates: picks.map { aggregates2[$0] }, positions: positions, number: number, log: &log)
            }
        }
        print("hunt: seed \(seed), \(log.cases) cases, \(log.checks) checks, \(log.failures.count) failing; plans \(log.planKinds.sorted { $0.key < $1.key })")
        for f in log.failures.prefix(40) { print(f) }
        #expect(log.failures.isEmpty, "seed \(seed): \(log.failures.count) failing cases, first: \(log.failures.first ?? "")")
    }
}

/// One observer's deliveries, kept for the test thread (Mutex: delivered on the observer's queue).
final class HuntDeliveries<M: Model>: Sendable {
    let changes = Mutex<[ResultsChange<M>]>([])
}

extension HuntDifferentialTests {
    /// Live results of random queries after random writes: each delivery's change set, applied to
    /// the previous delivery, gives the query re-run, and its modifications are exactly the kept
    /// objects whose stored value changed.
    @Test func liveChangeSetsRebuildTheQuery() throws {
        typealias M = HuntThing<HuntIndexed>
        let seed = UInt64(Self.env("STRATA_HUNT_SEED") ?? 20_261_203)
        let observers = Self.env("STRATA_HUNT_OBSERVERS") ?? 16
        let transactions = Self.env("STRATA_HUNT_TXNS") ?? 30
        var random = HuntRandom(rng: SeededRandom(seed: seed))
        let db = try Database.inMemory(models: [M.self, HuntOwner.self])
        var items: [Int: M] = [:]
        var nextId = 0
        try db.write { tx in
            for _ in 0..<40 {
                nextId += 1
                let t = random.thing(id: nextId)
                items[t.id] = t
                try tx.insert(t)
            }
        }
        var all = items.values.sorted { $0.id < $1.id }
        var cases: [HuntCase<M>] = []
        for _ in 0..<observers {
            var c = HuntSpecs<HuntIndexed>.makeCase(&random, all)
            c.predicates.removeAll { $0.mayThrow }
            cases.append(c)
        }
        let sinks = cases.map { _ in HuntDeliveries<M>() }
        var tokens: [NotificationToken] = []
        for (k, c) in cases.enumerated() {
            let sink = sinks[k]
            tokens.append(
                c.results(db.objects(M.self)).observe(on: DispatchQueue(label: "hunt.live.\(k)")) { change in sink.changes.withLock { $0.append(change) } })
        }
        defer { for token in tokens { token.invalidate() } }
        var previous: [[M]?] = cases.map { _ in nil }
        var failures: [String] = []
        var checked = 0
        func text(_ objects: [M]) -> [Int] { objects.map(\.id) }
        for round in 0...transactions {
            if round > 0 {
                try db.write { tx in
                    for _ in 0..<(1 + random.below(4)) {
                        let keys = items.keys.sorted()
                        switch random.below(4) {
                        case 0:
                            nextId += 1
                            let t = random.thing(id: nextId)
                            items[t.id] = t
                            try tx.insert(t)
                        case 1:
                            guard let id = keys.isEmpty ? nil : random.pick(keys) else { continue }
                            items[id] = nil
                            _ = try tx.delete(M.self, key: id)
                        default:
                            guard let id = keys.isEmpty ? nil : random.pick(keys), var t = items[id] else { continue }
                            random.mutate(&t)
                            items[id] = t
                            let stored = t
                            try tx.update(M.self, key: id) { $0 = stored }
                        }
                    }
                }
            }
            all = items.values.sorted { $0.id < $1.id }
            let version = db.objects(M.self).version
            for (k, c) in cases.enumerated() {
                // Wait for the delivery of this version (none comes when the results stay the same).
                let expected = (try? c.expected(all)) ?? []
                let start = Date()
                let unchanged = previous[k].map { text($0) == text(expected) } ?? false
                var latest: [ResultsChange<M>] = []
                while Date().timeIntervalSince(start) < (unchanged ? 0.005 : 10) {
                    latest = sinks[k].changes.withLock { $0 }
                    if let last = latest.last {
                        let v: UInt64?
                        switch last {
                        case .initial(let r), .update(let r, _, _, _): v = r.version
                        case .error: v = version
                        }
                        if v == version { break }
                    }
                    Thread.sleep(forTimeInterval: 0.002)
                }
                sinks[k].changes.withLock { $0.removeFirst(latest.count) }
                for change in latest {
                    checked += 1
                    switch change {
                    case .error(let error):
                        failures.append("observer \(k) \(c.text): error \(error)")
                    case .initial(let r):
                        previous[k] = (try? r.fetch()) ?? []
                    case .update(let r, let deletions, let insertions, let modifications):
                        let new = (try? r.fetch()) ?? []
                        guard let old = previous[k] else {
                            failures.append("observer \(k): an update before the initial results")
                            continue
                        }
                        var applied = old
                        var ok = deletions.allSatisfy { $0 < old.count } && Set(deletions).count == deletions.count
                        if ok { for i in deletions.sorted(by: >) { applied.remove(at: i) } }
                        let kept = applied
                        for j in insertions.sorted() where ok {
                            guard j <= applied.count, j < new.count else { ok = false; break }
                            applied.insert(new[j], at: j)
                        }
                        if !ok || text(applied) != text(new) {
                            failures.append(
                                "observer \(k) \(c.text) round \(round): change set does not rebuild: old \(text(old)) new \(text(new)) deletions \(deletions) insertions \(insertions)"
                            )
                        } else {
                            let inserted = Set(insertions)
                            let keptNew = new.indices.filter { !inserted.contains($0) }
                            let changed = zip(kept, keptNew).filter { $0.0.text != new[$0.1].text }.map(\.1)
                            if changed != modifications {
                                failures.append("observer \(k) \(c.text) round \(round): modifications \(modifications), changed \(changed)")
                            }
                        }
                        previous[k] = new
                    }
                }
                if latest.isEmpty && round == 0 { failures.append("observer \(k): no initial delivery") }
                if let now = previous[k], text(now) != text(expected) {
                    failures.append(
                        "observer \(k) \(c.text) round \(round): delivered \(text(now).prefix(20)) (\(now.count)), expected \(text(expected).prefix(20)) (\(expected.count))"
                    )
                    previous[k] = expected
                }
            }
        }
        print("hunt live: seed \(seed), \(observers) observers, \(transactions) transactions, \(checked) deliveries, \(failures.count) failures")
        for f in failures.prefix(20) { print(f) }
        #expect(failures.isEmpty, "seed \(seed): \(failures.first ?? "")")
    }
}
