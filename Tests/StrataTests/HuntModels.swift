import Testing
import Foundation
@testable import Strata

// Models of HuntDifferentialTests: one generic model whose indexes are switched on or off by its
// tag type, so that the same data and the same queries run on index-backed plans and on scans.

protocol HuntIndexing: Sendable {
    static var indexed: Bool { get }
}

enum HuntIndexed: HuntIndexing {
    static var indexed: Bool { true }
}

enum HuntScanned: HuntIndexing {
    static var indexed: Bool { false }
}

/// Declaration order is the order (`<`), not the raw values.
enum HuntLevel: Int, Codable, Sendable, Comparable, CaseIterable {
    case high = 9, low = 1, mid = 5, none = -3

    static func < (a: HuntLevel, b: HuntLevel) -> Bool {
        allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
    }
}

enum HuntColor: String, Codable, Sendable, CaseIterable {
    case red, green, blue
    case empty = ""
}

struct HuntAddress: Codable, Sendable, Hashable {
    var city: String
    var zip: Int?
    var level: HuntLevel?
}

struct HuntOwner: Model {
    var id: String
    var name: String
}

struct HuntThing<T: HuntIndexing>: Model {
    static var modelName: String { T.indexed ? "HuntThingIndexed" : "HuntThingScanned" }
    static var indexes: [PartialKeyPath<HuntThing> & Sendable] {
        guard T.indexed else { return [] }
        return [
            \.a, \.b, \.i8, \.u64, \.d, \.od, \.f, \.date, \.odate, \.flag, \.ob, \.name, \.oname, \.level, \.olevel, \.color, \.dec,
            \.uuid, \.owner, \.home.city, \.nums,
        ]
    }
    static var indexDescriptors: [IndexDescriptor<HuntThing>] {
        guard T.indexed else { return [] }
        return [
            .on(\.a, \.date), .on(\.flag, \.d), .on(\.a, \.b, \.i8), .on(\.name, collation: .caseInsensitive),
            .on(\.oname, collation: .natural), .on(\.a, \.name, collation: .caseInsensitive),
        ]
    }

    var id: Int
    var a: Int
    var b: Int?
    var i8: Int8
    var u64: UInt64
    var d: Double
    var od: Double?
    var f: Float
    var date: Date
    var odate: Date?
    var flag: Bool
    var ob: Bool?
    var name: String
    var oname: String?
    var level: HuntLevel
    var olevel: HuntLevel?
    var color: HuntColor?
    var dec: Decimal
    var uuid: UUID
    var owner: Ref<HuntOwner>?
    var home: HuntAddress
    var address: HuntAddress?
    var nums: [Int]

    /// Not stored.
    var computed: Int { a * 1000 + Int(i8) }

    func retagged<U: HuntIndexing>(_: U.Type) -> HuntThing<U> {
        HuntThing<U>(
            id: id, a: a, b: b, i8: i8, u64: u64, d: d, od: od, f: f, date: date, odate: odate, flag: flag, ob: ob, name: name, oname: oname,
            level: level, olevel: olevel, color: color, dec: dec, uuid: uuid, owner: owner, home: home, address: address, nums: nums)
    }

    var text: String {
        "{id \(id) a \(a) b \(genDescribe(b as Any)) i8 \(i8) u64 \(u64) d \(d) od \(genDescribe(od as Any)) f \(f) date \(genDescribe(date)) "
            + "odate \(genDescribe(odate as Any)) flag \(flag) ob \(genDescribe(ob as Any)) name \(genDescribe(name)) oname \(genDescribe(oname as Any)) "
            + "level \(level) olevel \(genDescribe(olevel as Any)) color \(genDescribe(color as Any)) dec \(dec) uuid \(uuid) "
            + "owner \(owner.map { $0.id } ?? "nil") home \(home) address \(address.map { "\($0)" } ?? "nil") nums \(nums)}"
    }
}

enum HuntPools {
    static let ints: [Int] = [.min, .min + 1, -1, 0, 1, 2, 999, .max - 1, .max]
    static let int8s: [Int8] = [-128, -127, -1, 0, 1, 126, 127]
    static let uint64s: [UInt64] = [0, 1, 1 << 63 - 1, 1 << 63, .max - 1, .max]
    static let doubles: [Double] = [
        -.infinity, -.greatestFiniteMagnitude, -1.5, -0.0, 0.0, .leastNonzeroMagnitude, 1, 1.5, .greatestFiniteMagnitude, .infinity, .nan,
    ]
    static let floats: [Float] = [-.infinity, -1.5, -0.0, 0.0, .leastNonzeroMagnitude, 1, .greatestFiniteMagnitude, .infinity, .nan]
    static let dates: [Date] = [
        .distantPast, .distantFuture, Date(timeIntervalSinceReferenceDate: 0), Date(timeIntervalSinceReferenceDate: -0.25),
        Date(timeIntervalSinceReferenceDate: 0.5), Date(timeIntervalSinceReferenceDate: 1e12), Date(timeIntervalSinceReferenceDate: -1e12),
        Date(timeIntervalSinceReferenceDate: .nan), Date(timeIntervalSinceReferenceDate: .infinity), Date(timeIntervalSinceReferenceDate: -.infinity),
    ]
    /// Strings that order consistently with each other under Swift's `<`.
    static let strings: [String] = {
        let raw = [
            "", "a", "A", "apple", "Apple", "APPLE", "Banana", "banana", "cherry", "Äpfel", "äpfel", "straße", "STRASSE", "Strasse", "room9",
            "room10", "Room10", "room010", "é", "e\u{301}", "E", "zebra", "ζ", "😀", " a", "a b", "a\u{0}", "ab", "Ab",
        ]
        var out: [String] = []
        for s in raw where DiffStrings.consistent(s, with: out) { out.append(s) }
        return out
    }()
    static let decimals: [Decimal] = [
        "0", "0.1", "0.10000000000000000001", "0.09999999999999999999", "1", "1.00000000000000000000001", "-1.5", "-2.25", "123456789.123456789",
        "99999999999999999999999999999999999999", "-99999999999999999999999999999999999999", "0.3", "7",
    ].map { Decimal(string: $0, locale: Locale(identifier: "en_US_POSIX"))! }
    static let uuids: [UUID] = [
        "00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000001", "80000000-0000-0000-0000-000000000000",
        "7FFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "12345678-9ABC-DEF0-1234-56789ABCDEF0",
    ].map { UUID(uuidString: $0)! }
    static let owners = ["", "ana", "bob", "é", "zed"]
    static let cities = ["", "Berlin", "berlin", "Zürich", "Zu\u{308}rich", "Oslo", "oslo"]
}

struct HuntRandom {
    var rng: SeededRandom
    mutating func below(_ n: Int) -> Int { rng.below(n) }
    mutating func chance(_ percent: Int) -> Bool { rng.below(100) < percent }
    mutating func pick<V>(_ pool: [V]) -> V { pool[rng.below(pool.count)] }

    mutating func int() -> Int { chance(20) ? pick(HuntPools.ints) : below(9) - 4 }
    mutating func int8() -> Int8 { chance(40) ? pick(HuntPools.int8s) : Int8(below(7) - 3) }
    mutating func uint64() -> UInt64 { chance(40) ? pick(HuntPools.uint64s) : UInt64(below(6)) }
    mutating func double() -> Double { chance(40) ? pick(HuntPools.doubles) : Double(below(9) - 4) / 2 }
    mutating func float() -> Float { chance(40) ? pick(HuntPools.floats) : Float(below(9) - 4) / 2 }
    mutating func date() -> Date { chance(50) ? pick(HuntPools.dates) : Date(timeIntervalSinceReferenceDate: Double(below(9) - 4) * 1000.5) }
    mutating func string() -> String { pick(HuntPools.strings) }
    mutating func decimal() -> Decimal { chance(70) ? pick(HuntPools.decimals) : Decimal(below(9) - 4) / 4 }
    mutating func uuid() -> UUID { pick(HuntPools.uuids) }
    mutating func address() -> HuntAddress {
        HuntAddress(city: pick(HuntPools.cities), zip: chance(30) ? nil : below(5), level: chance(30) ? nil : pick(HuntLevel.allCases))
    }

    mutating func thing(id: Int) -> HuntThing<HuntIndexed> {
        HuntThing(
            id: id, a: below(6), b: chance(30) ? nil : int(), i8: int8(), u64: uint64(), d: double(), od: chance(30) ? nil : double(),
            f: float(), date: date(), odate: chance(30) ? nil : date(), flag: chance(50), ob: chance(30) ? nil : chance(50), name: string(),
            oname: chance(30) ? nil : string(), level: pick(HuntLevel.allCases), olevel: chance(30) ? nil : pick(HuntLevel.allCases),
            color: chance(25) ? nil : pick(HuntColor.allCases), dec: decimal(), uuid: uuid(),
            owner: chance(30) ? nil : Ref(pick(HuntPools.owners)), home: address(), address: chance(35) ? nil : address(),
            nums: (0..<below(4)).map { _ in below(5) - 1 })
    }

    mutating func mutate(_ t: inout HuntThing<HuntIndexed>) {
        let fresh = thing(id: t.id)
        for _ in 0..<(1 + below(3)) {
            switch below(22) {
            case 0: t.a = fresh.a
            case 1: t.b = fresh.b
            case 2: t.i8 = fresh.i8
            case 3: t.u64 = fresh.u64
            case 4: t.d = fresh.d
            case 5: t.od = fresh.od
            case 6: t.f = fresh.f
            case 7: t.date = fresh.date
            case 8: t.odate = fresh.odate
            case 9: t.flag = fresh.flag
            case 10: t.ob = fresh.ob
            case 11: t.name = fresh.name
            case 12: t.oname = fresh.oname
            case 13: t.level = fresh.level
            case 14: t.olevel = fresh.olevel
            case 15: t.color = fresh.color
            case 16: t.dec = fresh.dec
            case 17: t.uuid = fresh.uuid
            case 18: t.owner = fresh.owner
            case 19: t.home = fresh.home
            case 20: t.address = fresh.address
            default: t.nums = fresh.nums
            }
        }
    }
}
