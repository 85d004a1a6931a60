import Testing
import Foundation
@testable import Strata

// Decimal fields in indexes and `distinct`: their key is the nearest Double as
// `NSDecimalNumber.doubleValue` computes it, which is neither exact nor monotonic, so no answer may
// depend on the key's order or on two keys being different.

struct DecimalPrice: Model {
    static let indexes: [PartialKeyPath<DecimalPrice> & Sendable] = [\.price]
    static let indexDescriptors: [IndexDescriptor<DecimalPrice>] = [.on(\.shop, \.price)]
    var id: Int
    var shop: Int
    var price: Decimal
}

@Suite struct DecimalQueryTests {
    static let texts = [
        "0.1", "0.10000000000000000001", "0.09999999999999999999", "0.21", "0.21000000000000000000001", "0.3", "-0.1", "1",
        "123456789012345678901234567890", "123456789012345678901234567891",
    ]
    static let values = texts.map { Decimal(string: $0, locale: Locale(identifier: "en_US_POSIX"))! }

    static func database() throws -> Database {
        let db = try Database.inMemory(models: [DecimalPrice.self])
        try db.write { tx in
            for (i, price) in values.enumerated() { try tx.insert(DecimalPrice(id: i, shop: 1, price: price)) }
        }
        return db
    }

    @Test func rangesOnAnIndexedDecimalMatchEvaluation() throws {
        let db = try Self.database()
        let all = try db.objects(DecimalPrice.self).fetch()
        var checked = 0
        for c in Self.values {
            let shop = 1
            let predicates: [Predicate<DecimalPrice>] = [
                #Predicate { $0.price < c }, #Predicate { $0.price <= c }, #Predicate { $0.price > c }, #Predicate { $0.price >= c },
                #Predicate { $0.price == c }, #Predicate { $0.shop == shop && $0.price > c }, #Predicate { $0.shop == shop && $0.price < c },
            ]
            for predicate in predicates {
                let expected = try all.filter { try predicate.evaluate($0) }.map(\.id)
                let results = db.objects(DecimalPrice.self).filter(predicate)
                #expect(try results.fetch().map(\.id) == expected, "\(c): \(results.explain())")
                #expect(try results.fetchCount() == expected.count, "\(c): \(results.explain())")
                checked += 1
            }
        }
        #expect(checked == Self.values.count * 7)
    }

    @Test func equalDecimalsFindEachOtherWhateverTheirRepresentation() throws {
        let db = try Self.database()
        let thirty = Decimal(sign: .plus, exponent: -2, significand: 30)  // 0.30
        let tenth = Decimal(sign: .plus, exponent: -21, significand: Decimal(string: "100000000000000000000")!)  // 0.1
        #expect(try db.objects(DecimalPrice.self).filter(#Predicate { $0.price == thirty }).fetch().map(\.id) == [5])
        #expect(try db.objects(DecimalPrice.self).filter(#Predicate { $0.price == tenth }).fetch().map(\.id) == [0])
    }

    @Test func distinctKeepsDecimalsThatShareANearestDouble() throws {
        let db = try Self.database()
        let kept = try db.objects(DecimalPrice.self).distinct(by: \.price).fetch().map(\.id)
        #expect(kept == Array(Self.values.indices))
        let optional: [Decimal?] = [nil, Self.values[0], Self.values[1], nil]
        #expect(Distinct.firstOfEachGroup(optional, by: [\Decimal?.self]) == [0, 1, 2])
    }
}
