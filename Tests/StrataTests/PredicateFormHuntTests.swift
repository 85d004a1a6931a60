import Testing
import Foundation
import Synchronization
import Dispatch
@testable import Strata

// A hunt for wrong answers in the `#Predicate` forms apps write, through the macro itself (the
// other differentials build expression trees by hand): arithmetic, ternaries, string methods, array
// counts and closures, `Ref.id`, enum raw values, URL, Data, `??`, optional chains two structs
// deep, Sets, field-against-field comparisons. The same forms run on a model with every field
// indexed (single, compound, collated, unique) and on the same model without indexes, against
// `evaluate` and `SortDescriptor.compare` over the same objects: fresh, in a write transaction,
// after reopening, and through observers. STRATA_PREDHUNT_N scales it; STRATA_PREDHUNT_SEED
// picks the seed (printed on failure).

protocol PHIndexing: Sendable { static var on: Bool { get } }
enum PHIndexed: PHIndexing { static let on = true }
enum PHScanned: PHIndexing { static let on = false }

enum PHStatus: String, Codable, Sendable, CaseIterable {
    case open, closed = "Closed", draft = "", accent = "é"
}

/// Comparable in an order that is not its raw values'.
enum PHPrio: Int, Codable, Sendable, CaseIterable, Comparable {
    case low = 5, mid = -1, high = 0
    static func < (a: PHPrio, b: PHPrio) -> Bool { a.order < b.order }
    var order: Int {
        switch self {
        case .low: 0
        case .mid: 1
        case .high: 2
        }
    }
}

struct PHGeo: Codable, Sendable, Hashable {
    var lat: Double
    var label: String
}

struct PHAddress: Codable, Sendable, Hashable {
    var city: String
    var zip: Int?
    var geo: PHGeo?
}

struct PHUser: Model {
    var id: String
    var name: String
}

struct PHItem<I: PHIndexing>: Model {
    static var modelName: String { I.on ? "PHItemIndexed" : "PHItemScanned" }
    static var indexes: [PartialKeyPath<PHItem> & Sendable] {
        guard I.on else { return [] }
        return [
            \.name, \.nick, \.n, \.on, \.big, \.i8, \.u64, \.d, \.od, \.flag, \.oflag, \.status, \.ostatus, \.prio, \.date, \.odate,
            \.url, \.dec, \.data, \.tags, \.nums, \.tagSet, \.author, \.reviewer, \.address.city, \.address.zip, \.address.geo?.lat,
            \.prev?.city, \.prev?.zip, \.prev?.geo?.label,
        ]
    }
    static var uniqueIndexes: [PartialKeyPath<PHItem> & Sendable] { I.on ? [\.uuid] : [] }
    static var indexDescriptors: [IndexDescriptor<PHItem>] {
        guard I.on else { return [] }
        return [
            .on(\.status, \.n), .on(\.author, \.date), .on(\.prev?.city, \.m), .on(\.ostatus, \.od), .on(\.nick, collation: .caseInsensitive),
            .on(\.prio, \.i8),
        ]
    }
    var id: Int
    var name: String
    var nick: String?
    var n: Int  // small, for arithmetic
    var m: Int  // small
    var on: Int?
    var big: Int  // the bounds
    var i8: Int8
    var u64: UInt64
    var d: Double
    var od: Double?
    var flag: Bool
    var oflag: Bool?
    var status: PHStatus
    var ostatus: PHStatus?
    var prio: PHPrio
    var date: Date
    var odate: Date?
    var uuid: UUID
    var url: URL
    var dec: Decimal
    var data: Data
    var tags: [String]
    var nums: [Int]
    var tagSet: Set<String>
    var author: Ref<PHUser>
    var reviewer: Ref<PHUser>?
    var address: PHAddress
    var prev: PHAddress?

    var text: String {
        "{id \(id) name \(genDescribe(name)) nick \(genDescribe(nick as Any)) n \(n) m \(m) on \(on as Any) big \(big) i8 \(i8) u64 \(u64) d \(d) od \(od as Any) "
            + "flag \(flag) oflag \(oflag as Any) status \(status) ostatus \(ostatus as Any) prio \(prio) date \(date.timeIntervalSinceReferenceDate) "
            + "odate \(odate.map { "\($0.timeIntervalSinceReferenceDate)" } ?? "nil") url \(url) dec \(dec) data \(Array(data)) tags \(tags.map(genEscape)) "
            + "nums \(nums) set \(tagSet.sorted().map(genEscape)) author \(genEscape(author.id)) reviewer \(reviewer.map { genEscape($0.id) } ?? "nil") "
            + "address \(address) prev \(prev as Any)}"
    }

    func retagged<J: PHIndexing>(_: J.Type) -> PHItem<J> {
        PHItem<J>(
            id: id, name: name, nick: nick, n: n, m: m, on: on, big: big, i8: i8, u64: u64, d: d, od: od, flag: flag, oflag: oflag,
            status: status, ostatus: ostatus, prio: prio, date: date, odate: odate, uuid: uuid, url: url, dec: dec, data: data, tags: tags,
            nums: nums, tagSet: tagSet, author: author, reviewer: reviewer, address: address, prev: prev)
    }
}

enum PHPools {
    static let users = ["", "ana", "Ana", "bob", "é", "e\u{301}", "zed"]
    static let cities = ["", "Berlin", "berlin", "Zürich", "Zu\u{308}rich", "Oslo", "a\u{0}"]
    static let labels = ["", "x", "X", "home", "ß"]
    static let tags = ["", "a", "A", "sale", "é", "e\u{301}", "😀", "ab"]
    static let urls = ["https://a.example/x", "https://a.example/x/", "file:///tmp/a%20b", "mailto:ana@example.com", "https://b.example/é"]
        .compactMap { URL(string: $0) }
    static let datas: [Data] = [Data(), Data([0]), Data([0, 0]), Data([1, 2, 3]), Data([0xFF]), Data("ab".utf8)]
    static let bigs: [Int] = [.min, .min + 1, -1, 0, 1, .max - 1, .max]
}

struct PHRandom {
    var r: HuntRandom
    init(seed: UInt64) { r = HuntRandom(rng: SeededRandom(seed: seed)) }
    mutating func below(_ n: Int) -> Int { r.below(n) }
    mutating func chance(_ p: Int) -> Bool { r.chance(p) }
    mutating func pick<V>(_ pool: [V]) -> V { r.pick(pool) }
    mutating func small() -> Int { below(11) - 5 }
    mutating func string() -> String { r.string() }
    mutating func geo() -> PHGeo { PHGeo(lat: r.double(), label: pick(PHPools.labels)) }
    mutating func address() -> PHAddress {
        PHAddress(city: pick(PHPools.cities), zip: chance(30) ? nil : below(5) - 1, geo: chance(40) ? nil : geo())
    }

    mutating func item(id: Int) -> PHItem<PHIndexed> {
        PHItem(
            id: id, name: string(), nick: chance(30) ? nil : string(), n: small(), m: small(), on: chance(30) ? nil : small(),
            big: chance(50) ? pick(PHPools.bigs) : small(), i8: r.int8(), u64: r.uint64(), d: r.double(), od: chance(30) ? nil : r.double(),
            flag: chance(50), oflag: chance(30) ? nil : chance(50), status: pick(PHStatus.allCases),
            ostatus: chance(30) ? nil : pick(PHStatus.allCases), prio: pick(PHPrio.allCases), date: r.date(), odate: chance(30) ? nil : r.date(),
            uuid: UUID(), url: pick(PHPools.urls), dec: r.decimal(), data: pick(PHPools.datas),
            tags: (0..<below(4)).map { _ in pick(PHPools.tags) }, nums: (0..<below(4)).map { _ in below(5) - 1 },
            tagSet: Set((0..<below(3)).map { _ in pick(PHPools.tags) }), author: Ref(pick(PHPools.users)),
            reviewer: chance(40) ? nil : Ref(pick(PHPools.users)), address: address(), prev: chance(40) ? nil : address())
    }

    mutating func mutate(_ t: inout PHItem<PHIndexed>) {
        let f = item(id: t.id)
        for _ in 0..<(1 + below(3)) {
            switch below(16) {
            case 0: t.name = f.name
            case 1: t.nick = f.nick
            case 2: (t.n, t.m) = (f.n, f.m)
            case 3: t.on = f.on
            case 4: (t.big, t.i8, t.u64) = (f.big, f.i8, f.u64)
            case 5: (t.d, t.od) = (f.d, f.od)
            case 6: (t.flag, t.oflag) = (f.flag, f.oflag)
            case 7: (t.status, t.ostatus, t.prio) = (f.status, f.ostatus, f.prio)
            case 8: (t.date, t.odate) = (f.date, f.odate)
            case 9: (t.url, t.dec, t.data) = (f.url, f.dec, f.data)
            case 10: (t.tags, t.nums, t.tagSet) = (f.tags, f.nums, f.tagSet)
            case 11: (t.author, t.reviewer) = (f.author, f.reviewer)
            case 12: t.address = f.address
            case 13: t.prev = f.prev
            case 14: t.address.geo = f.address.geo
            default: t.prev?.geo = geo()
            }
        }
    }
}

/// A predicate written with `#Predicate`, and its text.
struct PHForm<M> {
    var text: String
    var predicate: Predicate<M>
}

enum PHForms<I: PHIndexing> {
    typealias M = PHItem<I>
    typealias Make = (inout PHRandom, [M]) -> PHForm<M>

    static func form(_ text: String, _ predicate: Predicate<M>) -> PHForm<M> { PHForm(text: text, predicate: predicate) }

    /// A value of a field of a random stored object, or one from `pool`.
    static func from<V>(_ r: inout PHRandom, _ all: [M], _ pool: [V], _ kp: KeyPath<M, V>) -> V {
        all.isEmpty || r.chance(40) ? r.pick(pool) : r.pick(all)[keyPath: kp]
    }

    static var strings: [Make] {
        [
            { r, all in
                let s = from(&r, all, HuntPools.strings, \.name)
                return form("$0.name == \(genDescribe(s))", #Predicate<M> { $0.name == s })
            },
            { r, all in
                let s = String(from(&r, all, HuntPools.strings, \.name).prefix(r.below(3)))
                return form("$0.name.starts(with: \(genDescribe(s)))", #Predicate<M> { $0.name.starts(with: s) })
            },
            { r, all in
                let s = String(from(&r, all, HuntPools.strings, \.name).suffix(r.below(3)))
                return form("$0.name.contains(\(genDescribe(s)))", #Predicate<M> { $0.name.contains(s) })
            },
            { r, _ in form("$0.name.isEmpty", #Predicate<M> { $0.name.isEmpty }) },
            { r, _ in
                let k = r.below(6)
                return form("$0.name.count > \(k)", #Predicate<M> { $0.name.count > k })
            },
            { r, all in
                let s = from(&r, all, HuntPools.strings, \.name)
                return form("$0.name < \(genDescribe(s)) || $0.name == \(genDescribe(s))", #Predicate<M> { $0.name < s || $0.name == s })
            },
            { r, all in
                let s: String? = r.chance(20) ? nil : from(&r, all, HuntPools.strings, \.name)
                return form("$0.nick == \(genDescribe(s as Any))", #Predicate<M> { $0.nick == s })
            },
            { r, all in
                let s = from(&r, all, HuntPools.strings, \.name)
                return form("($0.nick ?? \"\") == \(genDescribe(s))", #Predicate<M> { ($0.nick ?? "") == s })
            },
            { r, all in
                let s = String(from(&r, all, HuntPools.strings, \.name).prefix(1))
                return form("$0.nick?.starts(with: \(genDescribe(s))) == true", #Predicate<M> { $0.nick?.starts(with: s) == true })
            },
            { r, all in
                let s = String(from(&r, all, HuntPools.strings, \.name).prefix(2))
                return form("$0.nick != nil && $0.nick!.contains(\(genDescribe(s)))", #Predicate<M> { $0.nick != nil && $0.nick!.contains(s) })
            },
            { r, _ in form("$0.nick.flatMap { $0.isEmpty } ?? true", #Predicate<M> { $0.nick.flatMap { $0.isEmpty } ?? true }) },
            { r, _ in form("($0.nick ?? \"-\") == $0.name", #Predicate<M> { ($0.nick ?? "-") == $0.name }) },
            { r, _ in form("$0.name > $0.address.city", #Predicate<M> { $0.name > $0.address.city }) },
            { r, all in
                let list = (0..<r.below(4)).map { _ in from(&r, all, HuntPools.strings, \.name) }
                return form("\(genDescribe(list)).contains($0.name)", #Predicate<M> { list.contains($0.name) })
            },
            { r, all in
                let list: [String?] = (0..<r.below(4)).map { _ in r.chance(25) ? nil : from(&r, all, HuntPools.strings, \.name) }
                return form("\(genDescribe(list)).contains($0.nick)", #Predicate<M> { list.contains($0.nick) })
            },
            { r, all in
                let s = from(&r, all, HuntPools.strings, \.name)
                return form("!($0.nick == \(genDescribe(s)))", #Predicate<M> { !($0.nick == s) })
            },
        ]
    }

    static var numbers: [Make] {
        [
            { r, _ in
                let c = r.below(13) - 6
                return form("$0.n + $0.m > \(c)", #Predicate<M> { $0.n + $0.m > c })
            },
            { r, _ in
                let c = r.below(13) - 6
                return form("$0.n * 2 == \(c)", #Predicate<M> { $0.n * 2 == c })
            },
            { r, _ in
                let c = r.below(3)
                return form("$0.n % 3 == \(c)", #Predicate<M> { $0.n % 3 == c })
            },
            { r, _ in
                let c = r.below(7) - 3
                return form("$0.n - \(c) < 0", #Predicate<M> { $0.n - c < 0 })
            },
            { r, _ in
                let c = r.below(7) - 3
                return form("($0.flag ? $0.n : $0.m) > \(c)", #Predicate<M> { ($0.flag ? $0.n : $0.m) > c })
            },
            { r, _ in
                let c = r.below(7) - 3
                return form("!($0.n > \(c))", #Predicate<M> { !($0.n > c) })
            },
            { r, _ in
                let op = r.below(3)
                switch op {
                case 0: return form("$0.n < $0.m", #Predicate<M> { $0.n < $0.m })
                case 1: return form("$0.n == $0.m", #Predicate<M> { $0.n == $0.m })
                default: return form("$0.n >= $0.m", #Predicate<M> { $0.n >= $0.m })
                }
            },
            { r, _ in
                let c: Int? = r.chance(25) ? nil : r.small()
                return form("$0.on == \(c.map(String.init) ?? "nil")", #Predicate<M> { $0.on == c })
            },
            { r, _ in
                r.chance(50) ? form("$0.on == nil", #Predicate<M> { $0.on == nil }) : form("$0.on != nil", #Predicate<M> { $0.on != nil })
            },
            { r, _ in
                let c = r.small()
                return form("$0.on != nil && $0.on! > \(c)", #Predicate<M> { $0.on != nil && $0.on! > c })
            },
            { r, _ in
                let c = r.small()
                return form("$0.on == nil || $0.on! <= \(c)", #Predicate<M> { $0.on == nil || $0.on! <= c })
            },
            { r, _ in
                let c = r.small()
                return form("($0.on ?? 0) > \(c)", #Predicate<M> { ($0.on ?? 0) > c })
            },
            { r, _ in
                let c = r.small()
                return form("$0.on.flatMap { $0 > \(c) } ?? false", #Predicate<M> { $0.on.flatMap { $0 > c } ?? false })
            },
            { r, _ in
                let c = r.small()
                return form(
                    "if let v = $0.on { v >= \(c) } else { false }",
                    #Predicate<M> {
                        if let v = $0.on { v >= c } else { false }
                    })
            },
            { r, _ in form("($0.on ?? -99) == $0.n", #Predicate<M> { ($0.on ?? -99) == $0.n }) },
            { r, all in
                let c = from(&r, all, PHPools.bigs, \.big)
                switch r.below(4) {
                case 0: return form("$0.big > \(c)", #Predicate<M> { $0.big > c })
                case 1: return form("$0.big <= \(c)", #Predicate<M> { $0.big <= c })
                case 2: return form("$0.big != \(c)", #Predicate<M> { $0.big != c })
                default: return form("$0.big >= \(c) && $0.big < \(c)", #Predicate<M> { $0.big >= c && $0.big < c })
                }
            },
            { r, all in
                let c = from(&r, all, HuntPools.int8s, \.i8)
                let low = Int8.min, high = Int8.max
                switch r.below(4) {
                case 0: return form("$0.i8 > \(c)", #Predicate<M> { $0.i8 > c })
                case 1: return form("$0.i8 < \(c)", #Predicate<M> { $0.i8 < c })
                case 2: return form("$0.i8 > Int8.min", #Predicate<M> { $0.i8 > low })
                default: return form("$0.i8 >= \(c) || $0.i8 == Int8.max", #Predicate<M> { $0.i8 >= c || $0.i8 == high })
                }
            },
            { r, all in
                let c = from(&r, all, HuntPools.uint64s, \.u64)
                let top = UInt64.max
                switch r.below(4) {
                case 0: return form("$0.u64 > \(c)", #Predicate<M> { $0.u64 > c })
                case 1: return form("$0.u64 <= \(c)", #Predicate<M> { $0.u64 <= c })
                case 2: return form("$0.u64 >= UInt64.max", #Predicate<M> { $0.u64 >= top })
                default: return form("$0.u64 != 0 && $0.u64 < \(c)", #Predicate<M> { $0.u64 != 0 && $0.u64 < c })
                }
            },
            { r, all in
                let c = from(&r, all, HuntPools.doubles, \.d)
                let inf = Double.infinity, negInf = -Double.infinity
                switch r.below(6) {
                case 0: return form("$0.d > \(c)", #Predicate<M> { $0.d > c })
                case 1: return form("$0.d <= \(c)", #Predicate<M> { $0.d <= c })
                case 2: return form("$0.d == \(c)", #Predicate<M> { $0.d == c })
                case 3: return form("$0.d != \(c)", #Predicate<M> { $0.d != c })
                case 4: return form("$0.d.isNaN", #Predicate<M> { $0.d.isNaN })
                default: return form("$0.d < .infinity && $0.d > -.infinity", #Predicate<M> { $0.d < inf && $0.d > negInf })
                }
            },
            { r, all in
                let c: Double? = r.chance(20) ? nil : from(&r, all, HuntPools.doubles, \.d)
                switch r.below(3) {
                case 0: return form("$0.od == \(c as Any)", #Predicate<M> { $0.od == c })
                case 1: return form("$0.od != \(c as Any)", #Predicate<M> { $0.od != c })
                default:
                    let k = c ?? 0
                    return form("($0.od ?? -1) >= \(k)", #Predicate<M> { ($0.od ?? -1) >= k })
                }
            },
            { r, _ in form("$0.d == -0.0", #Predicate<M> { $0.d == -0.0 }) },
            { r, _ in form("$0.d * 2 > $0.d", #Predicate<M> { $0.d * 2 > $0.d }) },
            { r, all in
                let c = from(&r, all, HuntPools.decimals, \.dec)
                switch r.below(4) {
                case 0: return form("$0.dec > \(c)", #Predicate<M> { $0.dec > c })
                case 1: return form("$0.dec == \(c)", #Predicate<M> { $0.dec == c })
                case 2: return form("$0.dec <= \(c)", #Predicate<M> { $0.dec <= c })
                default: return form("$0.dec != \(c)", #Predicate<M> { $0.dec != c })
                }
            },
        ]
    }

    static var others: [Make] {
        [
            { r, _ in
                switch r.below(5) {
                case 0: return form("$0.flag", #Predicate<M> { $0.flag })
                case 1: return form("!$0.flag", #Predicate<M> { !$0.flag })
                case 2: return form("$0.oflag == true", #Predicate<M> { $0.oflag == true })
                case 3: return form("$0.oflag != false", #Predicate<M> { $0.oflag != false })
                default: return form("$0.oflag ?? false", #Predicate<M> { $0.oflag ?? false })
                }
            },
            { r, _ in
                let s = r.pick(PHStatus.allCases)
                switch r.below(5) {
                case 0: return form("$0.status == .\(s)", #Predicate<M> { $0.status == s })
                case 1: return form("$0.status != .\(s)", #Predicate<M> { $0.status != s })
                case 2:
                    let raw = s.rawValue
                    return form("$0.status.rawValue == \(genDescribe(raw))", #Predicate<M> { $0.status.rawValue == raw })
                case 3:
                    let raw = String(s.rawValue.prefix(1))
                    return form("$0.status.rawValue.starts(with: \(genDescribe(raw)))", #Predicate<M> { $0.status.rawValue.starts(with: raw) })
                default:
                    let o: PHStatus? = r.chance(30) ? nil : s
                    return form("$0.ostatus == \(o.map { ".\($0)" } ?? "nil")", #Predicate<M> { $0.ostatus == o })
                }
            },
            { r, _ in
                let list = (0..<r.below(3)).map { _ in r.pick(PHStatus.allCases) }
                let olist: [PHStatus?] = list + (r.chance(50) ? [nil] : [])
                return r.chance(50)
                    ? form("\(list).contains($0.status)", #Predicate<M> { list.contains($0.status) })
                    : form("\(olist).contains($0.ostatus)", #Predicate<M> { olist.contains($0.ostatus) })
            },
            { r, _ in
                let p = r.pick(PHPrio.allCases)
                switch r.below(5) {
                case 0: return form("$0.prio > .\(p)", #Predicate<M> { $0.prio > p })
                case 1: return form("$0.prio <= .\(p)", #Predicate<M> { $0.prio <= p })
                case 2: return form("$0.prio == .\(p)", #Predicate<M> { $0.prio == p })
                case 3:
                    let raw = p.rawValue
                    return form("$0.prio.rawValue >= \(raw)", #Predicate<M> { $0.prio.rawValue >= raw })
                default:
                    let i = r.r.int8()
                    return form("$0.prio == .\(p) && $0.i8 > \(i)", #Predicate<M> { $0.prio == p && $0.i8 > i })
                }
            },
            { r, all in
                let c = from(&r, all, HuntPools.dates, \.date)
                switch r.below(6) {
                case 0: return form("$0.date > \(c.timeIntervalSinceReferenceDate)", #Predicate<M> { $0.date > c })
                case 1: return form("$0.date <= \(c.timeIntervalSinceReferenceDate)", #Predicate<M> { $0.date <= c })
                case 2: return form("$0.odate == nil", #Predicate<M> { $0.odate == nil })
                case 3:
                    return form("$0.odate != nil && $0.odate! < \(c.timeIntervalSinceReferenceDate)", #Predicate<M> { $0.odate != nil && $0.odate! < c })
                case 4: return form("$0.date < $0.odate ?? $0.date", #Predicate<M> { $0.date < ($0.odate ?? $0.date) })
                default:
                    let t = c.timeIntervalSinceReferenceDate
                    return form("$0.date.timeIntervalSinceReferenceDate >= \(t)", #Predicate<M> { $0.date.timeIntervalSinceReferenceDate >= t })
                }
            },
            { r, all in
                let u = all.isEmpty ? UUID() : r.pick(all).uuid
                let list = all.isEmpty ? [] : [r.pick(all).uuid, r.pick(all).uuid]
                switch r.below(3) {
                case 0: return form("$0.uuid == <uuid of a stored object>", #Predicate<M> { $0.uuid == u })
                case 1: return form("<2 stored uuids>.contains($0.uuid)", #Predicate<M> { list.contains($0.uuid) })
                default:
                    let p = String(u.uuidString.prefix(1))
                    return form("$0.uuid.uuidString.starts(with: \(genDescribe(p)))", #Predicate<M> { $0.uuid.uuidString.starts(with: p) })
                }
            },
            { r, _ in
                let u = r.pick(PHPools.urls)
                switch r.below(3) {
                case 0: return form("$0.url == \(u)", #Predicate<M> { $0.url == u })
                case 1: return form("$0.url != \(u)", #Predicate<M> { $0.url != u })
                default:
                    let s = r.pick(["a.example", "%20", "é", "mailto"])
                    return form("$0.url.absoluteString.contains(\(genDescribe(s)))", #Predicate<M> { $0.url.absoluteString.contains(s) })
                }
            },
            { r, _ in
                let d = r.pick(PHPools.datas)
                switch r.below(4) {
                case 0: return form("$0.data == \(Array(d))", #Predicate<M> { $0.data == d })
                case 1: return form("$0.data.isEmpty", #Predicate<M> { $0.data.isEmpty })
                case 2: return form("$0.data.count >= 2", #Predicate<M> { $0.data.count >= 2 })
                default: return form("$0.data != \(Array(d))", #Predicate<M> { $0.data != d })
                }
            },
        ]
    }

    static var collections: [Make] {
        [
            { r, _ in
                let s = r.pick(PHPools.tags)
                switch r.below(8) {
                case 0: return form("$0.tags.contains(\(genDescribe(s)))", #Predicate<M> { $0.tags.contains(s) })
                case 1: return form("!$0.tags.contains(\(genDescribe(s)))", #Predicate<M> { !$0.tags.contains(s) })
                case 2: return form("$0.tags.isEmpty", #Predicate<M> { $0.tags.isEmpty })
                case 3: return form("$0.tags.count > 2", #Predicate<M> { $0.tags.count > 2 })
                case 4:
                    return form("$0.tags.contains { $0.starts(with: \(genDescribe(s))) }", #Predicate<M> { $0.tags.contains { $0.starts(with: s) } })
                case 5: return form("$0.tags.allSatisfy { $0 != \(genDescribe(s)) }", #Predicate<M> { $0.tags.allSatisfy { $0 != s } })
                case 6: return form("$0.tags.first == \(genDescribe(s))", #Predicate<M> { $0.tags.first == s })
                default: return form("$0.tags.contains($0.name)", #Predicate<M> { $0.tags.contains($0.name) })
                }
            },
            { r, _ in
                let c = r.below(5) - 1
                switch r.below(4) {
                case 0: return form("$0.nums.contains(\(c))", #Predicate<M> { $0.nums.contains(c) })
                case 1: return form("$0.nums.contains(where: { $0 > \(c) })", #Predicate<M> { $0.nums.contains(where: { $0 > c }) })
                case 2: return form("$0.nums.contains($0.n)", #Predicate<M> { $0.nums.contains($0.n) })
                default: return form("$0.nums.contains(\(c)) || $0.nums.isEmpty", #Predicate<M> { $0.nums.contains(c) || $0.nums.isEmpty })
                }
            },
            { r, _ in
                let s = r.pick(PHPools.tags)
                switch r.below(3) {
                case 0: return form("$0.tagSet.contains(\(genDescribe(s)))", #Predicate<M> { $0.tagSet.contains(s) })
                case 1: return form("$0.tagSet.isEmpty", #Predicate<M> { $0.tagSet.isEmpty })
                default: return form("$0.tagSet.count == 1", #Predicate<M> { $0.tagSet.count == 1 })
                }
            },
            { r, _ in
                let k = r.pick(PHPools.users)
                let ref = Ref<PHUser>(k)
                let oref: Ref<PHUser>? = r.chance(30) ? nil : ref
                switch r.below(7) {
                case 0: return form("$0.author.id == \(genDescribe(k))", #Predicate<M> { $0.author.id == k })
                case 1: return form("$0.author == Ref(\(genDescribe(k)))", #Predicate<M> { $0.author == ref })
                case 2: return form("$0.reviewer?.id == \(genDescribe(k))", #Predicate<M> { $0.reviewer?.id == k })
                case 3: return form("$0.reviewer == \(oref.map { "Ref(\(genDescribe($0.id)))" } ?? "nil")", #Predicate<M> { $0.reviewer == oref })
                case 4: return form("($0.reviewer?.id ?? \"-\") == $0.author.id", #Predicate<M> { ($0.reviewer?.id ?? "-") == $0.author.id })
                case 5:
                    let keys = [k, r.pick(PHPools.users)]
                    return form("\(keys.map(genEscape)).contains($0.author.id)", #Predicate<M> { keys.contains($0.author.id) })
                default: return form("$0.author.id.starts(with: \(genDescribe(k)))", #Predicate<M> { $0.author.id.starts(with: k) })
                }
            },
        ]
    }

    static var nested: [Make] {
        [
            { r, all in
                let c = from(&r, all, PHPools.cities, \.address.city)
                switch r.below(5) {
                case 0: return form("$0.address.city == \(genDescribe(c))", #Predicate<M> { $0.address.city == c })
                case 1: return form("$0.address.city != \(genDescribe(c))", #Predicate<M> { $0.address.city != c })
                case 2: return form("$0.address.city.starts(with: \(genDescribe(c)))", #Predicate<M> { $0.address.city.starts(with: c) })
                case 3: return form("$0.address.city < \(genDescribe(c))", #Predicate<M> { $0.address.city < c })
                default:
                    let list = [c, r.pick(PHPools.cities)]
                    return form("\(list.map(genEscape)).contains($0.address.city)", #Predicate<M> { list.contains($0.address.city) })
                }
            },
            { r, _ in
                let z: Int? = r.chance(25) ? nil : r.below(5) - 1
                let k = z ?? 0
                switch r.below(5) {
                case 0: return form("$0.address.zip == \(z as Any)", #Predicate<M> { $0.address.zip == z })
                case 1: return form("$0.address.zip != \(z as Any)", #Predicate<M> { $0.address.zip != z })
                case 2: return form("($0.address.zip ?? 0) > \(k)", #Predicate<M> { ($0.address.zip ?? 0) > k })
                case 3: return form("$0.address.zip != nil && $0.address.zip! <= \(k)", #Predicate<M> { $0.address.zip != nil && $0.address.zip! <= k })
                default: return form("$0.address.zip == nil", #Predicate<M> { $0.address.zip == nil })
                }
            },
            { r, all in
                let c: String? = r.chance(20) ? nil : from(&r, all, PHPools.cities, \.address.city)
                let k = c ?? ""
                switch r.below(6) {
                case 0: return form("$0.prev?.city == \(genDescribe(c as Any))", #Predicate<M> { $0.prev?.city == c })
                case 1: return form("$0.prev?.city != \(genDescribe(c as Any))", #Predicate<M> { $0.prev?.city != c })
                case 2: return form("$0.prev == nil", #Predicate<M> { $0.prev == nil })
                case 3: return form("$0.prev?.city.starts(with: \(genDescribe(k))) == true", #Predicate<M> { $0.prev?.city.starts(with: k) == true })
                case 4: return form("$0.prev != nil && $0.prev!.city == \(genDescribe(k))", #Predicate<M> { $0.prev != nil && $0.prev!.city == k })
                default: return form("($0.prev?.city ?? \"-\") == $0.address.city", #Predicate<M> { ($0.prev?.city ?? "-") == $0.address.city })
                }
            },
            { r, _ in
                let z: Int? = r.chance(25) ? nil : r.below(5) - 1
                let k = z ?? 0
                switch r.below(5) {
                case 0: return form("$0.prev?.zip == \(z as Any)", #Predicate<M> { $0.prev?.zip == z })
                case 1: return form("$0.prev?.zip != \(z as Any)", #Predicate<M> { $0.prev?.zip != z })
                case 2: return form("$0.prev.flatMap { $0.zip } == nil", #Predicate<M> { $0.prev.flatMap { $0.zip } == nil })
                case 3: return form("($0.prev?.zip ?? -9) >= \(k)", #Predicate<M> { ($0.prev?.zip ?? -9) >= k })
                default:
                    let list: [Int?] = [z, r.below(5) - 1]
                    return form("\(list).contains($0.prev?.zip)", #Predicate<M> { list.contains($0.prev.flatMap { $0.zip }) })
                }
            },
            { r, all in
                let l: Double? = r.chance(20) ? nil : r.r.double()
                let label: String? = r.chance(20) ? nil : r.pick(PHPools.labels)
                switch r.below(6) {
                case 0: return form("$0.address.geo?.lat == \(l as Any)", #Predicate<M> { $0.address.geo?.lat == l })
                case 1: return form("$0.address.geo == nil", #Predicate<M> { $0.address.geo == nil })
                case 2: return form("$0.prev?.geo?.label == \(genDescribe(label as Any))", #Predicate<M> { $0.prev?.geo?.label == label })
                case 3: return form("$0.prev?.geo?.label != \(genDescribe(label as Any))", #Predicate<M> { $0.prev?.geo?.label != label })
                case 4:
                    let k = l ?? 0
                    return form(
                        "$0.address.geo != nil && $0.address.geo!.lat > \(k)", #Predicate<M> { $0.address.geo != nil && $0.address.geo!.lat > k })
                default: return form("$0.prev?.geo?.lat == $0.address.geo?.lat", #Predicate<M> { $0.prev?.geo?.lat == $0.address.geo?.lat })
                }
            },
            { r, all in
                let a: PHAddress? = all.isEmpty || r.chance(30) ? nil : r.pick(all).prev
                let b = all.isEmpty ? r.address() : r.pick(all).address
                switch r.below(3) {
                case 0: return form("$0.prev == <a stored prev>", #Predicate<M> { $0.prev == a })
                case 1: return form("$0.address == <a stored address>", #Predicate<M> { $0.address == b })
                default: return form("($0.prev ?? $0.address) == $0.address", #Predicate<M> { ($0.prev ?? $0.address) == $0.address })
                }
            },
            { r, all in
                let s = r.pick(PHStatus.allCases)
                let c = r.small()
                let city: String? = r.chance(20) ? nil : r.pick(PHPools.cities)
                switch r.below(5) {
                case 0: return form("$0.status == .\(s) && $0.n > \(c)", #Predicate<M> { $0.status == s && $0.n > c })
                case 1: return form("$0.status == .\(s) || $0.n == \(c)", #Predicate<M> { $0.status == s || $0.n == c })
                case 2: return form("$0.prev?.city == \(genDescribe(city as Any)) && $0.m <= \(c)", #Predicate<M> { $0.prev?.city == city && $0.m <= c })
                case 3:
                    let o: PHStatus? = r.chance(30) ? nil : s
                    let d = r.r.double()
                    return form("$0.ostatus == \(o as Any) && $0.od != nil && $0.od! >= \(d)", #Predicate<M> { $0.ostatus == o && $0.od != nil && $0.od! >= d })
                default:
                    let k = r.pick(PHPools.users)
                    let ref = Ref<PHUser>(k)
                    let t = r.r.date()
                    return form(
                        "$0.author == Ref(\(genDescribe(k))) && $0.date < \(t.timeIntervalSinceReferenceDate)",
                        #Predicate<M> { $0.author == ref && $0.date < t })
                }
            },
            { r, _ in
                let c = r.small()
                let s = r.pick(PHPools.tags)
                return form(
                    "($0.n > \(c) && !$0.flag) || ($0.tags.contains(\(genDescribe(s))) && $0.on == nil)",
                    #Predicate<M> { ($0.n > c && !$0.flag) || ($0.tags.contains(s) && $0.on == nil) })
            },
        ]
    }

    static var all: [Make] { strings + numbers + others + collections + nested }
}

// MARK: - Cases and checks

struct PHCase<M: Model> {
    var forms: [PHForm<M>] = []
    var sort: [(spec: HuntSortSpec<M>, order: SortOrder)] = []
    var collation: StringCollation?
    var window: [HuntWindow] = []

    var text: String {
        var parts = forms.map { ".filter(#Predicate { \($0.text) })" }
        if !sort.isEmpty {
            parts.append(
                ".sorted(by: [" + sort.map { "\($0.spec.name) \($0.order == .reverse ? "reverse" : "forward")" }.joined(separator: ", ") + "]"
                    + (collation.map { ", collation: \($0)" } ?? "") + ")")
        }
        for w in window {
            switch w {
            case .offset(let k): parts.append(".offset(\(k))")
            case .prefix(let k): parts.append(".prefix(\(k))")
            }
        }
        return parts.joined()
    }

    var descriptors: [SortDescriptor<M>] { sort.map { $0.spec.make($0.order) } }

    func results(_ base: Results<M>) -> Results<M> {
        var r = base
        for f in forms { r = r.filter(f.predicate) }
        if !sort.isEmpty { r = collation.map { r.sorted(by: descriptors, collation: $0) } ?? r.sorted(by: descriptors) }
        for w in window {
            switch w {
            case .offset(let k): r = r.offset(k)
            case .prefix(let k): r = r.prefix(k)
            }
        }
        return r
    }

    /// The meaning: `evaluate` on every object (in key order, each filter after the previous
    /// passed), sorted by the descriptors with ties by key, then the window.
    func expected(_ all: [M], windowed: Bool = true) throws -> [M] where M.ID: Comparable {
        var out = try all.filter { object in try forms.allSatisfy { try $0.predicate.evaluate(object) } }
        if !sort.isEmpty {
            let descriptors = descriptors
            out.sort { a, b in
                for (k, entry) in sort.enumerated() {
                    let r = huntCompare(a, b, entry.spec, entry.order, descriptors[k], collation)
                    if r != .orderedSame { return r == .orderedAscending }
                }
                return a.id < b.id
            }
        }
        guard windowed else { return out }
        for w in window {
            switch w {
            case .offset(let k): out = Array(out.dropFirst(k))
            case .prefix(let k): out = Array(out.prefix(k))
            }
        }
        return out
    }
}

enum PHSpecs<I: PHIndexing> {
    typealias M = PHItem<I>

    static func sort<V: Comparable>(_ name: String, _ kp: KeyPath<M, V> & Sendable) -> HuntSortSpec<M> {
        var spec = HuntSortSpec<M>(name: name, make: { SortDescriptor(kp, order: $0) }, floating: nil, string: nil)
        if V.self == Double.self { spec.floating = { $0[keyPath: kp] as? Double } }
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

    static var sorts: [HuntSortSpec<M>] {
        [
            sort("id", \.id), sort("name", \.name), sort("nick", \.nick), sort("n", \.n), sort("m", \.m), sort("on", \.on), sort("big", \.big),
            sort("i8", \.i8), sort("u64", \.u64), sort("d", \.d), sort("od", \.od), sort("date", \.date), sort("odate", \.odate),
            sort("dec", \.dec), sort("uuid", \.uuid), sort("prio", \.prio), sort("address.city", \.address.city),
            sort("address.zip", \.address.zip), sort("address.geo?.lat", \.address.geo?.lat), sort("prev?.city", \.prev?.city),
            sort("prev?.zip", \.prev?.zip), sort("prev?.geo?.label", \.prev?.geo?.label), sort("author.id", \.author.id),
            sort("reviewer?.id", \.reviewer?.id),
        ]
    }

    static var aggregates: [HuntAggregate<M>] {
        func minMax<V: Comparable>(_ name: String, _ kp: KeyPath<M, V> & Sendable) -> [HuntAggregate<M>] {
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
        func minMax<V: Comparable>(_ name: String, _ kp: KeyPath<M, V?> & Sendable) -> [HuntAggregate<M>] {
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
        var list = minMax("n", \.n) + minMax("on", \.on) + minMax("big", \.big) + minMax("u64", \.u64) + minMax("d", \.d) + minMax("od", \.od)
        list += minMax("date", \.date) + minMax("odate", \.odate) + minMax("name", \.name) + minMax("nick", \.nick) + minMax("prio", \.prio)
        list += minMax("dec", \.dec) + minMax("address.zip", \.address.zip) + minMax("prev?.city", \.prev?.city)
        list += minMax("address.geo?.lat", \.address.geo?.lat) + minMax("prev?.geo?.label", \.prev?.geo?.label)
        list += [
            HuntAggregate(name: "sum(of: \\.n)") { r, e in
                let x = e.map(\.n).reduce(0, +), y = r.sum(of: \.n)
                return x == y ? nil : ("\(x)", "\(y)")
            },
            HuntAggregate(name: "sum(of: \\.dec)") { r, e in
                let x = e.map(\.dec).reduce(0, +), y = r.sum(of: \.dec)
                return huntSame(x, y) ? nil : ("\(x)", "\(y)")
            },
            HuntAggregate(name: "average(of: \\.m)") { r, e in
                let x: Double? = e.isEmpty ? nil : Double(e.map(\.m).reduce(0, +)) / Double(e.count)
                let y = r.average(of: \.m)
                return huntSame(x, y) ? nil : ("\(x as Any)", "\(y as Any)")
            },
            HuntAggregate(name: "average(of: \\.d)") { r, e in
                let x: Double? = e.isEmpty ? nil : e.map(\.d).reduce(0, +) / Double(e.count)
                let y = r.average(of: \.d)
                return huntSame(x, y) ? nil : ("\(x as Any)", "\(y as Any)")
            },
        ]
        return list
    }

    static func makeCase(_ r: inout PHRandom, _ all: [M], form: Int? = nil) -> PHCase<M> {
        var c = PHCase<M>()
        let makers = PHForms<I>.all
        if let form {
            c.forms = [makers[form](&r, all)]
        } else {
            let n = r.chance(10) ? 0 : 1 + r.below(3)
            c.forms = (0..<n).map { _ in r.pick(makers)(&r, all) }
        }
        let sorts = sorts
        let count = r.chance(20) ? 0 : 1 + r.below(3)
        c.sort = (0..<count).map { _ in (r.pick(sorts), r.chance(50) ? .forward : .reverse) }
        if r.chance(15) { c.collation = r.pick([.caseInsensitive, .natural]) }
        if r.chance(40) {
            c.window = (0..<(1 + r.below(2))).map { _ in
                let k = r.chance(20) ? r.below(3) : r.below(all.count / 2 + 3)
                return r.chance(50) ? .offset(k) : .prefix(k)
            }
        }
        return c
    }
}

struct PHLog {
    var seed: UInt64
    var cases = 0
    var checks = 0
    var failures: [String] = []
    /// Forms whose query threw while `evaluate` did not, with the error.
    var thrown: [String: String] = [:]

    func report(_ name: String) {
        print("\(name): seed \(seed), \(cases) cases, \(checks) checks, \(failures.count) failing, \(thrown.count) forms throwing")
        for (form, error) in thrown.sorted(by: { $0.key < $1.key }).prefix(20) { print("  throws: \(form): \(error)") }
        for f in failures.prefix(25) { print(f) }
    }
}

enum PHCheck {
    /// Runs `c` on `db` in every way the results can be read and compares with the meaning.
    static func run<I: PHIndexing>(_ c: PHCase<PHItem<I>>, db: Database, all: [PHItem<I>], aggregates: [HuntAggregate<PHItem<I>>], log: inout PHLog) {
        typealias M = PHItem<I>
        log.cases += 1
        let fresh = { c.results(db.objects(M.self)) }
        let plan = fresh().explain()
        var problems: [String] = []
        func fail(_ what: String, _ e: String, _ a: String) { problems.append("  \(what): expected \(e), got \(a)") }
        let expected: [M]
        do {
            expected = try c.expected(all)
        } catch {
            if (try? fresh().fetch()) != nil { fail("error", "an error (\(error))", "none") }
            return
        }
        let ids = expected.map(\.id)
        do {
            let got = try fresh().fetch().map(\.id)
            if got != ids {
                let byId = Dictionary(all.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
                let missing = Set(ids).subtracting(got), extra = Set(got).subtracting(ids)
                var detail = ""
                if missing.isEmpty && extra.isEmpty, let k = Array(zip(got, ids)).firstIndex(where: { $0 != $1 }) {
                    detail += "\n    at \(k): expected \(byId[ids[k]]!.text)\n    got \(byId[got[k]]!.text)"
                }
                if !missing.isEmpty {
                    detail += "\n    missing \(missing.count): " + missing.prefix(2).map { byId[$0]!.text }.joined(separator: "\n      ")
                }
                if !extra.isEmpty {
                    detail += "\n    extra \(extra.count): " + extra.prefix(2).map { byId[$0].map(\.text) ?? "\($0)" }.joined(separator: "\n      ")
                }
                fail("fetch ids", "\(ids.count) \(ids.prefix(30))", "\(got.count) \(got.prefix(30))" + detail)
            }
        } catch {
            log.thrown[c.forms.map(\.text).joined(separator: " ; ")] = "\(error)"
            fail("fetch", "\(ids.count) ids", "\(error)")
        }
        do {
            let n = try fresh().fetchCount()
            if n != ids.count { fail("fetchCount", "\(ids.count)", "\(n)") }
        } catch { fail("fetchCount", "\(ids.count)", "\(error)") }
        let lazy = fresh()
        if lazy.count != ids.count { fail("count", "\(ids.count)", "\(lazy.count)") }
        if lazy.keys != ids { fail("keys", "\(ids.prefix(20))", "\(lazy.keys.prefix(20))") }
        if fresh().first?.id != ids.first { fail("first", "\(ids.first as Any)", "\(fresh().first?.id as Any)") }
        if fresh().last?.id != ids.last { fail("last", "\(ids.last as Any)", "\(fresh().last?.id as Any)") }
        if !ids.isEmpty {
            let one = fresh()
            if one.count == ids.count {
                let i = ids.count / 2
                if one[i].id != ids[i] { fail("results[\(i)]", "\(ids[i])", "\(one[i].id)") }
            }
        }
        var iterated: [Int] = []
        for x in fresh() { iterated.append(x.id) }
        if iterated != ids { fail("for-in", "\(ids.prefix(20))", "\(iterated.prefix(20))") }
        log.checks += 8
        for (k, aggregate) in aggregates.enumerated() {
            if let (e, a) = aggregate.check(k % 2 == 0 ? fresh() : lazy, expected) { fail(aggregate.name, e, a) }
            log.checks += 1
        }
        if let error = lazy.error { fail("error", "nil", "\(error)") }
        if !problems.isEmpty {
            log.failures.append(
                "seed \(log.seed) \(M.modelName): \(c.text)\n  plan: \(plan.replacingOccurrences(of: "\n", with: " | "))\n" + problems.joined(separator: "\n"))
        }
    }

    /// The same case through `tx.objects(_:where:sortedBy:)` and `tx.count(_:where:)` (one predicate, no window).
    static func runInTransaction<I: PHIndexing>(_ c: PHCase<PHItem<I>>, tx: Transaction, all: [PHItem<I>], log: inout PHLog) {
        typealias M = PHItem<I>
        guard c.forms.count <= 1 else { return }
        log.cases += 1
        let predicate = c.forms.first?.predicate
        guard let expected = try? c.expected(all, windowed: false).map(\.id) else { return }
        do {
            let got = try tx.objects(M.self, where: predicate, sortedBy: c.collation == nil ? c.descriptors : []).map(\.id)
            let want = c.collation == nil ? expected : try c.expected(all.sorted { $0.id < $1.id }, windowed: false).map(\.id).sorted()
            let gotOrdered = c.collation == nil ? got : got.sorted()
            if gotOrdered != want {
                let byId = Dictionary(all.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
                var detail = ""
                if let k = Array(zip(gotOrdered, want)).firstIndex(where: { $0 != $1 }), let e = byId[want[k]], let g = byId[gotOrdered[k]] {
                    detail = "\n    at \(k): expected \(e.text)\n    got \(g.text)"
                }
                log.failures.append("seed \(log.seed) tx \(M.modelName): \(c.text)\n  expected \(want.prefix(30)), got \(gotOrdered.prefix(30))" + detail)
            }
            let n = try tx.count(M.self, where: predicate)
            if n != expected.count { log.failures.append("seed \(log.seed) tx.count \(M.modelName): \(c.text): expected \(expected.count), got \(n)") }
            log.checks += 2
        } catch {
            log.thrown["tx: " + c.text] = "\(error)"
            log.failures.append("seed \(log.seed) tx \(M.modelName): \(c.text): \(error)")
        }
    }
}

struct PHWorld {
    var random: PHRandom
    var items: [Int: PHItem<PHIndexed>] = [:]
    var nextId = -30

    var indexed: [PHItem<PHIndexed>] { items.values.sorted { $0.id < $1.id } }
    var scanned: [PHItem<PHScanned>] { indexed.map { $0.retagged(PHScanned.self) } }

    /// Random inserts, updates and deletes through `tx`, mirrored in `items`, on both models.
    mutating func writes(_ tx: Transaction, count: Int, insertOnly: Bool = false) throws {
        for _ in 0..<count {
            let keys = items.keys.sorted()
            switch insertOnly ? 0 : random.below(5) {
            case 0, 1:
                nextId += 1 + random.below(3)
                let t = random.item(id: random.chance(5) ? -nextId * 1000 : nextId)
                guard items[t.id] == nil else { continue }
                items[t.id] = t
                try tx.insert(t)
                try tx.insert(t.retagged(PHScanned.self))
            case 2:
                guard let id = keys.isEmpty ? nil : random.pick(keys) else { continue }
                items[id] = nil
                _ = try tx.delete(PHItem<PHIndexed>.self, key: id)
                _ = try tx.delete(PHItem<PHScanned>.self, key: id)
            default:
                guard let id = keys.isEmpty ? nil : random.pick(keys), var t = items[id] else { continue }
                random.mutate(&t)
                // A fresh unique value now and then (unique index on uuid).
                if random.chance(20) { t.uuid = UUID() }
                items[id] = t
                let stored = t
                try tx.update(PHItem<PHIndexed>.self, key: id) { $0 = stored }
                try tx.upsert(stored.retagged(PHScanned.self))
            }
        }
    }
}

@Suite struct PredHuntFormTests {
    static func env(_ name: String) -> Int? { ProcessInfo.processInfo.environment[name].flatMap { Int($0) } }
    static var seed: UInt64 { UInt64(env("STRATA_PREDHUNT_SEED") ?? 20_261_203) }
    static var size: Int { env("STRATA_PREDHUNT_N") ?? 1 }

    /// Every form, a few draws of its constants each, on both models: fresh, inside a write
    /// transaction with uncommitted writes, and after reopening the file.
    @Test func everyFormMatchesEvaluate() throws {
        let seed = Self.seed
        var world = PHWorld(random: PHRandom(seed: seed))
        var log = PHLog(seed: seed)
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let models: [any Model.Type] = [PHItem<PHIndexed>.self, PHItem<PHScanned>.self, PHUser.self]
        var db = try Database(path: path, models: models, options: StoreOptions(durability: .noSync))
        try db.write { tx in try world.writes(tx, count: 40 * Self.size, insertOnly: true) }
        let formCount = PHForms<PHIndexed>.all.count
        for round in 0..<3 {
            if round > 0 {
                try db.write { tx in try world.writes(tx, count: 15 * Self.size) }
            }
            if round == 2 {
                db.close()
                db = try Database(path: path, models: models, options: StoreOptions(durability: .noSync))
            }
            let all = world.indexed, plain = world.scanned
            let aggregates1 = PHSpecs<PHIndexed>.aggregates, aggregates2 = PHSpecs<PHScanned>.aggregates
            for form in 0..<formCount {
                for _ in 0..<Self.size {
                    let state = world.random
                    var r1 = state, r2 = state
                    let c1 = PHSpecs<PHIndexed>.makeCase(&r1, all, form: form)
                    let c2 = PHSpecs<PHScanned>.makeCase(&r2, plain, form: form)
                    world.random = r1
                    let pick = world.random.below(aggregates1.count)
                    PHCheck.run(c1, db: db, all: all, aggregates: [aggregates1[pick]], log: &log)
                    PHCheck.run(c2, db: db, all: plain, aggregates: [aggregates2[pick]], log: &log)
                }
            }
            // Inside a write transaction holding uncommitted writes, rolled back.
            struct Rollback: Error {}
            var working = world
            do {
                try db.write { tx in
                    try working.writes(tx, count: 10)
                    let all = working.indexed, plain = working.scanned
                    for form in 0..<formCount {
                        let state = working.random
                        var r1 = state, r2 = state
                        let c1 = PHSpecs<PHIndexed>.makeCase(&r1, all, form: form)
                        let c2 = PHSpecs<PHScanned>.makeCase(&r2, plain, form: form)
                        working.random = r1
                        PHCheck.runInTransaction(c1, tx: tx, all: all, log: &log)
                        PHCheck.runInTransaction(c2, tx: tx, all: plain, log: &log)
                    }
                    throw Rollback()
                }
            } catch is Rollback {}
            world.random = working.random
        }
        log.report("predhunt forms")
        #expect(log.failures.isEmpty, "seed \(seed): \(log.failures.count) failing, first: \(log.failures.first ?? "")")
    }

    /// Random combinations of the forms (several filters), sorts, collations and windows.
    @Test func combinationsMatchEvaluate() throws {
        let seed = Self.seed &+ 1
        var world = PHWorld(random: PHRandom(seed: seed))
        var log = PHLog(seed: seed)
        let db = try Database.inMemory(models: [PHItem<PHIndexed>.self, PHItem<PHScanned>.self, PHUser.self])
        try db.write { tx in try world.writes(tx, count: 40 * Self.size, insertOnly: true) }
        for round in 0..<3 {
            if round > 0 { try db.write { tx in try world.writes(tx, count: 20 * Self.size) } }
            let all = world.indexed, plain = world.scanned
            let aggregates1 = PHSpecs<PHIndexed>.aggregates, aggregates2 = PHSpecs<PHScanned>.aggregates
            for _ in 0..<(20 * Self.size) {
                let state = world.random
                var r1 = state, r2 = state
                let c1 = PHSpecs<PHIndexed>.makeCase(&r1, all)
                let c2 = PHSpecs<PHScanned>.makeCase(&r2, plain)
                world.random = r1
                let picks = (0..<2).map { _ in world.random.below(aggregates1.count) }
                PHCheck.run(c1, db: db, all: all, aggregates: picks.map { aggregates1[$0] }, log: &log)
                PHCheck.run(c2, db: db, all: plain, aggregates: picks.map { aggregates2[$0] }, log: &log)
            }
        }
        log.report("predhunt combinations")
        #expect(log.failures.isEmpty, "seed \(seed): \(log.failures.count) failing, first: \(log.failures.first ?? "")")
    }
}

extension PHSpecs {
    /// Queries an index may answer by walking in the sort's order (compound, collated), with windows.
    static func walkCase(_ r: inout PHRandom, _ all: [M]) -> PHCase<M> {
        var c = PHCase<M>()
        let order: SortOrder = r.chance(50) ? .forward : .reverse
        switch r.below(6) {
        case 0:
            let s = r.pick(PHStatus.allCases)
            c.forms = [PHForm(text: "$0.status == .\(s)", predicate: #Predicate<M> { $0.status == s })]
            c.sort = [(sort("n", \.n), order)]
        case 1:
            let k = r.pick(PHPools.users)
            let ref = Ref<PHUser>(k)
            c.forms = [PHForm(text: "$0.author == Ref(\(genDescribe(k)))", predicate: #Predicate<M> { $0.author == ref })]
            c.sort = [(sort("date", \.date), order)]
        case 2:
            let o: PHStatus? = r.chance(30) ? nil : r.pick(PHStatus.allCases)
            c.forms = [PHForm(text: "$0.ostatus == \(o as Any)", predicate: #Predicate<M> { $0.ostatus == o })]
            c.sort = [(sort("od", \.od), order)]
        case 3:
            let p = r.pick(PHPrio.allCases)
            let i = r.r.int8()
            c.forms = [PHForm(text: "$0.prio == .\(p) && $0.i8 >= \(i)", predicate: #Predicate<M> { $0.prio == p && $0.i8 >= i })]
            c.sort = [(sort("i8", \.i8), order)]
        case 4:
            let city: String? = r.chance(20) ? nil : r.pick(PHPools.cities)
            c.forms = [PHForm(text: "$0.prev?.city == \(genDescribe(city as Any))", predicate: #Predicate<M> { $0.prev?.city == city })]
            c.sort = [(sort("m", \.m), order)]
        default:
            c.sort = [(sort("nick", \.nick), order)]
            c.collation = .caseInsensitive
            if r.chance(50) {
                let k = r.small()
                c.forms = [PHForm(text: "$0.n > \(k)", predicate: #Predicate<M> { $0.n > k })]
            }
        }
        if r.chance(30) { c.sort.append((sort("id", \.id), r.chance(50) ? .forward : .reverse)) }
        c.window = (0..<(1 + r.below(2))).map { _ in
            let k = r.below(all.count / 3 + 3)
            return r.chance(40) ? .offset(k) : .prefix(k)
        }
        return c
    }
}

extension PredHuntFormTests {
    /// Ordered index walks (compound, collated) with windows, after writes.
    @Test func walksMatchEvaluate() throws {
        let seed = Self.seed &+ 2
        var world = PHWorld(random: PHRandom(seed: seed))
        var log = PHLog(seed: seed)
        let db = try Database.inMemory(models: [PHItem<PHIndexed>.self, PHItem<PHScanned>.self, PHUser.self])
        try db.write { tx in try world.writes(tx, count: 50 * Self.size, insertOnly: true) }
        for round in 0..<3 {
            if round > 0 { try db.write { tx in try world.writes(tx, count: 20 * Self.size) } }
            let all = world.indexed, plain = world.scanned
            for _ in 0..<(20 * Self.size) {
                let state = world.random
                var r1 = state, r2 = state
                let c1 = PHSpecs<PHIndexed>.walkCase(&r1, all)
                let c2 = PHSpecs<PHScanned>.walkCase(&r2, plain)
                world.random = r1
                PHCheck.run(c1, db: db, all: all, aggregates: [], log: &log)
                PHCheck.run(c2, db: db, all: plain, aggregates: [], log: &log)
            }
        }
        log.report("predhunt walks")
        #expect(log.failures.isEmpty, "seed \(seed): \(log.failures.count) failing, first: \(log.failures.first ?? "")")
    }

    /// Observers of random form queries: each delivered change set, applied to the previous
    /// results, gives the query re-run after random inserts, updates and deletes.
    @Test func liveChangeSetsRebuildTheQuery() throws {
        typealias M = PHItem<PHIndexed>
        let seed = Self.seed &+ 3
        var world = PHWorld(random: PHRandom(seed: seed))
        let db = try Database.inMemory(models: [PHItem<PHIndexed>.self, PHItem<PHScanned>.self, PHUser.self])
        try db.write { tx in try world.writes(tx, count: 40, insertOnly: true) }
        var cases: [PHCase<M>] = []
        for k in 0..<(8 * Self.size) {
            cases.append(k % 3 == 0 ? PHSpecs<PHIndexed>.walkCase(&world.random, world.indexed) : PHSpecs<PHIndexed>.makeCase(&world.random, world.indexed))
        }
        let sinks = cases.map { _ in HuntDeliveries<M>() }
        var tokens: [NotificationToken] = []
        for (k, c) in cases.enumerated() {
            let sink = sinks[k]
            tokens.append(
                c.results(db.objects(M.self)).observe(on: DispatchQueue(label: "predhunt.live.\(k)")) { change in sink.changes.withLock { $0.append(change) } })
        }
        defer { for token in tokens { token.invalidate() } }
        var previous: [[M]?] = cases.map { _ in nil }
        var failures: [String] = []
        func ids(_ objects: [M]) -> [Int] { objects.map(\.id) }
        for round in 0...(12 * Self.size) {
            if round > 0 { try db.write { tx in try world.writes(tx, count: 1 + world.random.below(4)) } }
            let all = world.indexed
            let version = db.objects(M.self).version
            for (k, c) in cases.enumerated() {
                let expected = (try? c.expected(all)) ?? []
                let start = Date()
                let unchanged = previous[k].map { ids($0) == ids(expected) } ?? false
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
                    switch change {
                    case .error(let error):
                        failures.append("observer \(k) \(c.text): error \(error)")
                    case .initial(let r):
                        previous[k] = (try? r.fetch()) ?? []
                    case .update(let r, let deletions, let insertions, _):
                        let new = (try? r.fetch()) ?? []
                        guard let old = previous[k] else {
                            failures.append("observer \(k): an update before the initial results")
                            continue
                        }
                        var applied = old
                        var ok = deletions.allSatisfy { $0 < old.count } && Set(deletions).count == deletions.count
                        if ok { for i in deletions.sorted(by: >) { applied.remove(at: i) } }
                        for j in insertions.sorted() where ok {
                            guard j <= applied.count, j < new.count else {
                                ok = false
                                break
                            }
                            applied.insert(new[j], at: j)
                        }
                        if !ok || ids(applied) != ids(new) {
                            failures.append(
                                "observer \(k) \(c.text) round \(round): change set does not rebuild: old \(ids(old)) new \(ids(new)) deletions \(deletions) insertions \(insertions)"
                            )
                        }
                        previous[k] = new
                    }
                }
                if let now = previous[k], ids(now) != ids(expected) {
                    failures.append("observer \(k) \(c.text) round \(round): delivered \(ids(now).prefix(20)), expected \(ids(expected).prefix(20))")
                    previous[k] = expected
                }
            }
        }
        print("predhunt live: seed \(seed), \(cases.count) observers, \(failures.count) failures")
        for f in failures.prefix(20) { print(f) }
        #expect(failures.isEmpty, "seed \(seed): \(failures.first ?? "")")
    }
}

// MARK: - Reduced cases

struct PHPlace: Model {
    var id: Int
    var geo: PHGeo?
}

@Suite struct PredHuntReducedTests {
    /// A sort on a value reached through an optional struct (`\.geo?.lat`) reads an optional: nil
    /// sorts first (last in reverse), before -infinity and -greatestFiniteMagnitude, whose key
    /// encodings begin with 0x00 as nil's does.
    @Test func sortThroughOptionalStructPutsNilFirst() throws {
        let db = try Database.inMemory(models: [PHPlace.self])
        let places = [
            PHPlace(id: 1, geo: nil), PHPlace(id: 2, geo: PHGeo(lat: -.infinity, label: "")),
            PHPlace(id: 3, geo: PHGeo(lat: -.greatestFiniteMagnitude, label: "")), PHPlace(id: 4, geo: PHGeo(lat: 0, label: "")),
        ]
        try db.write { tx in try tx.insert(contentsOf: places) }
        let forward = db.objects(PHPlace.self).sorted(by: SortDescriptor(\.geo?.lat), SortDescriptor(\.id, order: .reverse))
        #expect(forward.map(\.id) == [1, 2, 3, 4])
        let reverse = db.objects(PHPlace.self).sorted(by: SortDescriptor(\.geo?.lat, order: .reverse))
        #expect(reverse.map(\.id) == [4, 3, 2, 1])
        let both = db.objects(PHPlace.self).sorted(by: SortDescriptor(\.geo?.lat, order: .reverse), SortDescriptor(\.id))
        #expect(both.map(\.id) == [4, 3, 2, 1])
        try db.write { tx in
            let forward = try tx.objects(PHPlace.self, sortedBy: [SortDescriptor(\.geo?.lat), SortDescriptor(\.id, order: .reverse)])
            #expect(forward.map(\.id) == [1, 2, 3, 4])
            let reverse = try tx.objects(PHPlace.self, sortedBy: [SortDescriptor(\.geo?.lat, order: .reverse)])
            #expect(reverse.map(\.id) == [4, 3, 2, 1])
        }
    }
}

/// A model whose `init(from:)` normalizes what it reads, as apps do for emails and counters.
struct PHMember: Model {
    static let indexes: [PartialKeyPath<PHMember> & Sendable] = [\.email]
    var id: Int
    var email: String
    var handle: String
    var visits: Int
}

extension PHMember {
    enum CodingKeys: String, CodingKey { case id, email, handle, visits }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        email = try c.decode(String.self, forKey: .email).lowercased()
        handle = try c.decode(String.self, forKey: .handle).trimmingCharacters(in: .whitespaces)
        visits = max(0, try c.decode(Int.self, forKey: .visits))
    }
}

extension PredHuntReducedTests {
    /// Queries mean the predicate on the objects the database gives back, which is what the
    /// type's `init(from:)` makes of the record, not the record's own values.
    @Test func predicatesSeeWhatInitFromDecodes() throws {
        let db = try Database.inMemory(models: [PHMember.self])
        try db.write { tx in
            try tx.insert(PHMember(id: 1, email: "Ana@Example.com", handle: " ana ", visits: -3))
            try tx.insert(PHMember(id: 2, email: "bob@example.com", handle: "bob", visits: 2))
        }
        let stored = try db.objects(PHMember.self).fetch()
        #expect(stored.map(\.email) == ["ana@example.com", "bob@example.com"])
        let email = "ana@example.com"
        let byEmail = db.objects(PHMember.self).filter(#Predicate { $0.email == email })
        #expect(byEmail.map(\.id) == stored.filter { $0.email == email }.map(\.id))
        #expect(byEmail.count == 1)
        let handle = "ana"
        let byHandle = db.objects(PHMember.self).filter(#Predicate { $0.handle == handle })
        #expect(byHandle.map(\.id) == [1])
        let byVisits = db.objects(PHMember.self).filter(#Predicate { $0.visits == 0 })
        #expect(byVisits.map(\.id) == [1])
        try db.write { tx in try tx.insert(PHMember(id: 3, email: "c@example.com", handle: "c", visits: -1)) }
        // Visits -3 and -1 both read 0: a tie, in key order.
        let sorted = db.objects(PHMember.self).sorted(by: SortDescriptor(\.visits, order: .reverse))
        #expect(sorted.map(\.id) == [2, 1, 3])
        #expect(db.objects(PHMember.self).min(of: \.visits) == 0)
        #expect(db.objects(PHMember.self).filter(\.email, equals: "ana@example.com").count == 1)
    }
}

/// An enum that reads raw values it does not know as `.other`, and the next version of it.
enum PHKindV1: String, Codable, Sendable, CaseIterable {
    case a, b, other
    init(from decoder: any Decoder) throws {
        self = PHKindV1(rawValue: try decoder.singleValueContainer().decode(String.self)) ?? .other
    }
}

enum PHKindV2: String, Codable, Sendable, CaseIterable { case a, b, other, c }

struct PHTicketV1: Model {
    static var modelName: String { "PHTicket" }
    static let indexes: [PartialKeyPath<PHTicketV1> & Sendable] = [\.kind]
    var id: Int
    var kind: PHKindV1
    var note: String
}

struct PHTicketV2: Model {
    static var modelName: String { "PHTicket" }
    static let indexes: [PartialKeyPath<PHTicketV2> & Sendable] = [\.kind]
    var id: Int
    var kind: PHKindV2
    var note: String
}

extension PredHuntReducedTests {
    /// A case a newer app wrote reads as the fallback case `init(from:)` maps it to, and
    /// predicates on the enum see that case.
    @Test func predicatesSeeAnEnumsFallbackCase() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [PHTicketV2.self])
            try db.write { tx in
                try tx.insert(PHTicketV2(id: 1, kind: .c, note: ""))
                try tx.insert(PHTicketV2(id: 2, kind: .a, note: ""))
                try tx.insert(PHTicketV2(id: 3, kind: .other, note: ""))
            }
            db.close()
        }
        let db = try Database(path: path, models: [PHTicketV1.self])
        defer { db.close() }
        let stored = try db.objects(PHTicketV1.self).fetch()
        #expect(stored.map(\.kind) == [.other, .a, .other])
        let other = PHKindV1.other, a = PHKindV1.a
        #expect(db.objects(PHTicketV1.self).filter(#Predicate { $0.kind == other }).map(\.id) == [1, 3])
        #expect(db.objects(PHTicketV1.self).filter(#Predicate { $0.kind != a }).map(\.id) == [1, 3])
        #expect(db.objects(PHTicketV1.self).filter(#Predicate { $0.kind == other && $0.note == "" }).count == 2)
        #expect(db.objects(PHTicketV1.self).filter(\.kind, equals: .other).count == 2)
    }
}

struct PHPrice: Model {
    static let indexes: [PartialKeyPath<PHPrice> & Sendable] = [\.amount]
    var id: Int
    var amount: Decimal
}

extension PredHuntReducedTests {
    /// Equal decimals written differently (trailing zeros, exponents, arithmetic results) are one
    /// value to `==`, whichever of them is stored and whichever is asked for.
    @Test func equalDecimalsWrittenDifferentlyMatch() throws {
        let spellings: [[String]] = [
            ["12345678901234567", "12345678901234567.0", "12345678901234567.00"],
            ["123456789012345678901", "123456789012345678901.0000"], ["0.3", "0.30", "0.300000"], ["1000", "1e3", "1000.000"],
            ["9007199254740993", "9007199254740993.0"], ["0.1234567890123456789", "0.12345678901234567890"],
        ]
        let posix = Locale(identifier: "en_US_POSIX")
        var values: [Decimal] = []
        for group in spellings { for s in group { if let d = Decimal(string: s, locale: posix) { values.append(d) } } }
        values.append(Decimal(string: "12345678901234567", locale: posix)! * 10 / 10)
        values.append(Decimal(1) / Decimal(3) * Decimal(3))
        let db = try Database.inMemory(models: [PHPrice.self])
        try db.write { tx in for (k, v) in values.enumerated() { try tx.insert(PHPrice(id: k, amount: v)) } }
        let stored = try db.objects(PHPrice.self).fetch()
        for c in values {
            let expected = stored.filter { $0.amount == c }.map(\.id)
            let got = db.objects(PHPrice.self).filter(#Predicate { $0.amount == c }).map(\.id)
            #expect(got == expected, "amount == \(c)")
            let list = [c]
            let inList = db.objects(PHPrice.self).filter(#Predicate { list.contains($0.amount) }).map(\.id)
            #expect(inList == expected, "[\(c)].contains(amount)")
        }
        // distinct(by:) keeps the first of each group equal by `==`.
        var kept: [PHPrice] = []
        for p in stored where !kept.contains(where: { $0.amount == p.amount }) { kept.append(p) }
        #expect(db.objects(PHPrice.self).distinct(by: \.amount).map(\.id) == kept.map(\.id))
        let sortedKept = db.objects(PHPrice.self).sorted(by: SortDescriptor(\.amount)).distinct(by: \.amount).count
        #expect(sortedKept == kept.count)
    }
}

struct PHNote: Model {
    var id: Int?
    var rank: Int
}

struct PHReading: Model {
    var id: Double
    var v: Int
}

extension PredHuntReducedTests {
    /// Predicates and sorts on auto-increment (`Int?`) and `Double` primary keys, against
    /// `evaluate` (NaN sorts above every number, -0.0 is 0.0).
    @Test func primaryKeyFormsMatchEvaluate() throws {
        let db = try Database.inMemory(models: [PHNote.self, PHReading.self])
        var notes: [PHNote] = []
        try db.write { tx in
            for k in 0..<12 { notes.append(try tx.insert(PHNote(id: nil, rank: k % 4))) }
            for id in [-Double.infinity, -1.5, 0.0, 1, 2.5, .greatestFiniteMagnitude, .infinity, .nan] { try tx.insert(PHReading(id: id, v: 1)) }
        }
        _ = try db.write { tx in try tx.delete(PHNote.self, key: 12) }
        notes.removeLast()
        var problems: [String] = []
        for c in [-1, 0, 1, 5, 11, 12, Int.max] {
            let oc: Int? = c
            let list: [Int?] = [c, nil, 3]
            let forms: [(String, Predicate<PHNote>)] = [
                ("id == \(c)", #Predicate { $0.id == oc }), ("id != \(c)", #Predicate { $0.id != oc }), ("id == nil", #Predicate { $0.id == nil }),
                ("id != nil && id! > \(c)", #Predicate { $0.id != nil && $0.id! > c }), ("(id ?? 0) >= \(c)", #Predicate { ($0.id ?? 0) >= c }),
                ("list.contains(id)", #Predicate { list.contains($0.id) }),
                ("id != nil && id! <= \(c) && rank == 1", #Predicate { $0.id != nil && $0.id! <= c && $0.rank == 1 }),
            ]
            for (text, p) in forms {
                for order in [SortOrder.forward, .reverse] {
                    let expected = try notes.filter { try p.evaluate($0) }.sorted { order == .forward ? $0.id! < $1.id! : $0.id! > $1.id! }.map(\.id)
                    let results = db.objects(PHNote.self).filter(p).sorted(by: SortDescriptor(\.id, order: order))
                    if results.map(\.id) != expected { problems.append("notes \(text) \(order): expected \(expected), got \(results.map(\.id))") }
                    if results.prefix(2).map(\.id) != Array(expected.prefix(2)) { problems.append("notes \(text) \(order) prefix 2") }
                    if results.count != expected.count { problems.append("notes \(text) count") }
                }
            }
        }
        let readings = try db.objects(PHReading.self).fetch()
        func rank(_ d: Double) -> (Int, Double) { d.isNaN ? (1, 0) : (0, d) }
        for c in [-Double.infinity, -1.5, -0.0, 0.0, 1, .infinity, .nan, .greatestFiniteMagnitude] {
            let forms: [(String, Predicate<PHReading>)] = [
                ("id > \(c)", #Predicate { $0.id > c }), ("id >= \(c)", #Predicate { $0.id >= c }), ("id < \(c)", #Predicate { $0.id < c }),
                ("id <= \(c)", #Predicate { $0.id <= c }), ("id == \(c)", #Predicate { $0.id == c }), ("id != \(c)", #Predicate { $0.id != c }),
            ]
            for (text, p) in forms {
                for order in [SortOrder.forward, .reverse] {
                    var expected = try readings.filter { try p.evaluate($0) }
                    expected.sort { order == .forward ? rank($0.id) < rank($1.id) : rank($0.id) > rank($1.id) }
                    let got = db.objects(PHReading.self).filter(p).sorted(by: SortDescriptor(\.id, order: order)).map(\.id)
                    if got.map(\.bitPattern) != expected.map(\.id.bitPattern) {
                        problems.append("readings \(text) \(order): expected \(expected.map(\.id)), got \(got)")
                    }
                }
            }
        }
        #expect(problems.isEmpty, "\(problems.count): \(problems.prefix(8).joined(separator: "\n"))")
    }
}

/// Normalizations that leave ordinary values alone: an empty title, a zero or a huge quantity.
struct PHTask: Model {
    static let indexes: [PartialKeyPath<PHTask> & Sendable] = [\.title, \.quantity]
    var id: Int
    var title: String
    var quantity: Int
    var rating: Double
}

extension PHTask {
    enum CodingKeys: String, CodingKey { case id, title, quantity, rating }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        let title = try c.decode(String.self, forKey: .title)
        self.title = title.isEmpty ? "Untitled" : title
        quantity = min(1000, max(1, try c.decode(Int.self, forKey: .quantity)))
        rating = min(5, try c.decode(Double.self, forKey: .rating))
    }
}

extension PredHuntReducedTests {
    @Test func predicatesSeeDefaultsForEmptyAndOutOfRangeValues() throws {
        let db = try Database.inMemory(models: [PHTask.self])
        try db.write { tx in
            try tx.insert(PHTask(id: 1, title: "", quantity: 0, rating: 9))
            try tx.insert(PHTask(id: 2, title: "Buy", quantity: 5_000, rating: 4))
            try tx.insert(PHTask(id: 3, title: "Untitled", quantity: 1, rating: 5))
        }
        let stored = try db.objects(PHTask.self).fetch()
        let untitled = "Untitled"
        let forms: [(String, Predicate<PHTask>)] = [
            ("title == Untitled", #Predicate { $0.title == untitled }), ("quantity == 1", #Predicate { $0.quantity == 1 }),
            ("quantity <= 1000", #Predicate { $0.quantity <= 1000 }), ("rating == 5", #Predicate { $0.rating == 5 }),
            ("rating > 4.5", #Predicate { $0.rating > 4.5 }),
        ]
        for (text, p) in forms {
            let expected = try stored.filter { try p.evaluate($0) }.map(\.id)
            #expect(db.objects(PHTask.self).filter(p).map(\.id) == expected, "\(text)")
        }
        #expect(db.objects(PHTask.self).max(of: \.quantity) == 1000)
        #expect(db.objects(PHTask.self).sorted(by: SortDescriptor(\.rating), SortDescriptor(\.id, order: .reverse)).map(\.id) == [2, 3, 1])
    }
}

/// A nested struct whose `init(from:)` normalizes a field.
struct PHPostal: Codable, Sendable, Hashable {
    var city: String
    var code: Int
    init(city: String, code: Int) {
        self.city = city
        self.code = code
    }
    enum CodingKeys: String, CodingKey { case city, code }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        city = try c.decode(String.self, forKey: .city).lowercased()
        code = try c.decode(Int.self, forKey: .code)
    }
}

struct PHShop: Model {
    static let indexes: [PartialKeyPath<PHShop> & Sendable] = [\.home.city, \.away?.city, \.home.code]
    var id: Int
    var home: PHPostal
    var away: PHPostal?
}

extension PredHuntReducedTests {
    @Test func predicatesSeeWhatANestedInitFromDecodes() throws {
        let db = try Database.inMemory(models: [PHShop.self])
        try db.write { tx in
            try tx.insert(PHShop(id: 1, home: PHPostal(city: "Berlin", code: 1), away: PHPostal(city: "OSLO", code: 2)))
            try tx.insert(PHShop(id: 2, home: PHPostal(city: "berlin", code: 3), away: nil))
            try tx.insert(PHShop(id: 3, home: PHPostal(city: "Aachen", code: 2), away: PHPostal(city: "oslo", code: 1)))
        }
        let stored = try db.objects(PHShop.self).fetch()
        let berlin = "berlin", oslo: String? = "oslo"
        let forms: [(String, Predicate<PHShop>)] = [
            ("home.city == berlin", #Predicate { $0.home.city == berlin }), ("away?.city == oslo", #Predicate { $0.away?.city == oslo }),
            ("home.city.starts(with: b)", #Predicate { $0.home.city.starts(with: "b") }), ("home.code == 2", #Predicate { $0.home.code == 2 }),
        ]
        for (text, p) in forms {
            let expected = try stored.filter { try p.evaluate($0) }.map(\.id)
            #expect(db.objects(PHShop.self).filter(p).map(\.id) == expected, "\(text)")
        }
        let sorted = db.objects(PHShop.self).sorted(by: SortDescriptor(\.home.city), SortDescriptor(\.id, order: .reverse)).map(\.id)
        #expect(sorted == [3, 2, 1])
        #expect(db.objects(PHShop.self).min(of: \.home.city) == "aachen")
    }
}

/// An `Int` enum with a case at -1 that reads unknown raw values as `.unknown`.
enum PHLevelV1: Int, Codable, Sendable, CaseIterable {
    case unknown = -1, low = 1, high = 2
    init(from decoder: any Decoder) throws {
        self = PHLevelV1(rawValue: try decoder.singleValueContainer().decode(Int.self)) ?? .unknown
    }
}

enum PHLevelV2: Int, Codable, Sendable, CaseIterable { case unknown = -1, low = 1, high = 2, top = 3 }

struct PHAlarmV1: Model {
    static var modelName: String { "PHAlarm" }
    static let indexes: [PartialKeyPath<PHAlarmV1> & Sendable] = [\.level]
    var id: Int
    var level: PHLevelV1
}

struct PHAlarmV2: Model {
    static var modelName: String { "PHAlarm" }
    static let indexes: [PartialKeyPath<PHAlarmV2> & Sendable] = [\.level]
    var id: Int
    var level: PHLevelV2
}

extension PredHuntReducedTests {
    @Test func predicatesSeeAnIntEnumsFallbackCase() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [PHAlarmV2.self])
            try db.write { tx in
                try tx.insert(PHAlarmV2(id: 1, level: .top))
                try tx.insert(PHAlarmV2(id: 2, level: .low))
            }
            db.close()
        }
        let db = try Database(path: path, models: [PHAlarmV1.self])
        defer { db.close() }
        let unknown = PHLevelV1.unknown
        #expect(try db.objects(PHAlarmV1.self).fetch().map(\.level) == [.unknown, .low])
        #expect(db.objects(PHAlarmV1.self).filter(#Predicate { $0.level == unknown }).map(\.id) == [1])
    }
}

/// Amounts rounded to cents when read.
struct PHInvoice: Model {
    static let indexes: [PartialKeyPath<PHInvoice> & Sendable] = [\.total, \.weight]
    var id: Int
    var total: Decimal
    var weight: Double
}

extension PHInvoice {
    enum CodingKeys: String, CodingKey { case id, total, weight }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        var raw = try c.decode(Decimal.self, forKey: .total)
        var rounded = Decimal()
        NSDecimalRound(&rounded, &raw, 2, .plain)
        total = rounded
        weight = (try c.decode(Double.self, forKey: .weight) * 100).rounded() / 100
    }
}

extension PredHuntReducedTests {
    @Test func predicatesSeeRoundedValues() throws {
        let db = try Database.inMemory(models: [PHInvoice.self])
        let posix = Locale(identifier: "en_US_POSIX")
        try db.write { tx in
            try tx.insert(PHInvoice(id: 1, total: Decimal(string: "1.005", locale: posix)!, weight: 2.004))
            try tx.insert(PHInvoice(id: 2, total: Decimal(string: "1.01", locale: posix)!, weight: 2.0))
        }
        let stored = try db.objects(PHInvoice.self).fetch()
        let cents = Decimal(string: "1.01", locale: posix)!
        let forms: [(String, Predicate<PHInvoice>)] = [
            ("total == 1.01", #Predicate { $0.total == cents }), ("weight == 2", #Predicate { $0.weight == 2 }),
            ("weight <= 2", #Predicate { $0.weight <= 2 }),
        ]
        for (text, p) in forms {
            let expected = try stored.filter { try p.evaluate($0) }.map(\.id)
            #expect(db.objects(PHInvoice.self).filter(p).map(\.id) == expected, "\(text)")
        }
    }
}
