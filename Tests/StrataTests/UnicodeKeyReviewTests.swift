import Foundation
import Testing

@testable import Strata

// Strings Swift's `==` calls equal through combining marks of Unicode 16 and later, which
// Foundation's normalization on Linux (CoreFoundation's tables) did not order: found by a review
// (2026-12-07).

struct UKNamed: Model, Equatable {
    static let indexDescriptors: [IndexDescriptor<UKNamed>] = [.on(\.name), .unique(\.tag), .on(\.title, collation: .caseInsensitive)]
    var id: Int
    var name: String
    var tag: String
    var title: String
}

struct UKKeyed: Model, Equatable {
    var id: String
    var n: Int
}

struct UnicodeKeyReviewTests {
    /// Pairs of spellings `==` calls equal: a mark of Unicode 16 (U+0897 ARABIC PEPET, class 230;
    /// U+10D69 GARAY, class 230) around one of class 220 (U+0316), in either order.
    static let pairs: [(String, String)] = [
        ("a\u{316}\u{897}", "a\u{897}\u{316}"),
        ("a\u{316}\u{10D69}", "a\u{10D69}\u{316}"),
        ("é\u{316}\u{897}x", "e\u{301}\u{897}\u{316}x"),
    ]

    @Test func theSpellingsAreEqualInSwift() {
        for (a, b) in Self.pairs { #expect(a == b) }
    }

    /// Equality through a plain index, `contains` on a list, and on a field with a case-insensitive
    /// collated index answer as `predicate.evaluate` does, for either spelling.
    @Test func indexedEqualityFindsEverySpellingOfAString() throws {
        let db = try Database.inMemory(models: [UKNamed.self])
        var all: [UKNamed] = []
        for (i, (a, _)) in Self.pairs.enumerated() { all.append(UKNamed(id: i, name: a, tag: "t\(i)" + a, title: "T" + a)) }
        try db.write { tx in try tx.insert(contentsOf: all) }
        for (a, b) in Self.pairs {
            for spelling in [a, b] {
                let title = "T" + spelling
                let predicates = [
                    #Predicate<UKNamed> { $0.name == spelling },
                    #Predicate<UKNamed> { [spelling].contains($0.name) },
                    #Predicate<UKNamed> { $0.title == title },
                ]
                for predicate in predicates {
                    let expected = try all.filter { try predicate.evaluate($0) }.map(\.id)
                    #expect(!expected.isEmpty)
                    #expect(
                        try db.objects(UKNamed.self).filter(predicate).fetch().map(\.id) == expected,
                        "\(spelling.unicodeScalars.map { String($0.value, radix: 16) })")
                    #expect(try db.objects(UKNamed.self).filter(predicate).fetchCount() == expected.count)
                }
            }
        }
    }

    /// A unique index refuses the other spelling of a value it holds; a String primary key finds
    /// the object under either spelling, and refuses a second object under the other.
    @Test func uniqueIndexesAndPrimaryKeysTakeEverySpellingAsOne() throws {
        let db = try Database.inMemory(models: [UKNamed.self, UKKeyed.self])
        for (i, (a, b)) in Self.pairs.enumerated() {
            try db.write { tx in try tx.insert(UKNamed(id: 10 * i, name: "n", tag: a, title: "x")) }
            #expect(throws: StrataError.self) { try db.write { tx in try tx.insert(UKNamed(id: 10 * i + 1, name: "n", tag: b, title: "x")) } }
            try db.write { tx in try tx.insert(UKKeyed(id: a, n: i)) }
            #expect(try db.object(UKKeyed.self, key: b)?.n == i)
            #expect(throws: StrataError.self) { try db.write { tx in try tx.insert(UKKeyed(id: b, n: -1)) } }
        }
    }
}
