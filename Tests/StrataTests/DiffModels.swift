import Testing
import Foundation
@testable import Strata

// The query differential tests' models and values: DiffItem (Int keys, every field kind) and DiffKeyed
// (String keys), edge-value pools, and the seeded random source. The tests are in QueryDifferentialTests.swift.

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
    var i: Int  // indexed
    var j: Int  // not indexed
    var i8: Int8
    var u8: UInt8  // indexed
    var u64: UInt64  // indexed
    var d: Double  // indexed
    var f: Float
    var s: String  // indexed
    var t: String
    var date: Date  // indexed
    var oi: Int?  // indexed
    var os: String?
    var b: Bool
    var kind: DiffKind  // indexed
    var tags: [String]  // indexed (one entry per element)
    var inner: DiffInner  // inner.n indexed
    var maybe: DiffInner?
    var code: String  // unique index
    var serial: Int  // unique index
    var small: Int  // bounded, for sums
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
    static let doubles: [Double] = [
        -.infinity, -.greatestFiniteMagnitude, -1.5, -0.0, 0.0, .leastNonzeroMagnitude, 1, 1.5,
        .greatestFiniteMagnitude, .infinity, .nan,
    ]
    static let floats: [Float] = [
        -.infinity, -.greatestFiniteMagnitude, -1.5, -0.0, 0.0, .leastNonzeroMagnitude, 1, 1.5,
        .greatestFiniteMagnitude, .infinity, .nan,
    ]
    static let strings: [String] = [
        "", "a", "A", "ab", "b", "é", "e\u{301}", "cafe\u{301}", "café", "\u{301}", "😀", "👨‍👩‍👧‍👦", "a\u{0}b", "Ä",
        "\u{10FFFF}", "Ana", "JOSÉ", "jose", "José", "bob", "q\u{301}", "\u{2126}", "\u{3A9}",
        String(repeating: "x", count: 300), String(repeating: "é", count: 150) + "z",
    ]
    static let dates: [Date] = [
        .distantPast, .distantFuture, Date(timeIntervalSinceReferenceDate: 0), Date(timeIntervalSinceReferenceDate: 1e12),
        Date(timeIntervalSinceReferenceDate: -1e12), Date(timeIntervalSinceReferenceDate: 0.5),
        Date(timeIntervalSinceReferenceDate: -0.25), Date(timeIntervalSinceReferenceDate: 86_400.000_001),
    ]
    /// Primary keys of DiffKeyed: distinct under `==` (canonical equivalence), so no two collide.
    static let keyedIds: [String] = [
        "", "a", "A", "ab", "b", "é", "cafe\u{301}", "\u{301}", "😀", "👨‍👩‍👧‍👦", "a\u{0}b", "a\u{1}", "Ä", "\u{10FFFF}",
        "\u{FFFF}", "\u{E000}", "z", "zz", "日本", "\u{2126}", "\u{212B}", "한", "q\u{301}", "x\u{0}", String(repeating: "k", count: 300),
    ]
    /// Constants for DiffKeyed ids: the ids, canonically equivalent spellings, prefixes and near misses.
    static let keyedConstants: [String] =
        keyedIds + [
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
