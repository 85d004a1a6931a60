import Testing
import Foundation
@testable import Strata

struct AggregateTests {
    @Test func aggregatesMatchArrays() throws {
        let db = try Database.inMemory(models: [Item.self])
        let items = QueryTests.makeItems(1500, seed: 99)
        try db.write { tx in try tx.insert(contentsOf: items) }
        for c in 0..<10 {
            let expected = items.filter { $0.category == c }
            let results = db.objects(Item.self).filter(#Predicate { $0.category == c })
            #expect(results.count == expected.count)
            #expect(abs(results.sum(of: \.score) - expected.reduce(0) { $0 + $1.score }) < 1e-9)
            #expect(results.min(of: \.score) == expected.map(\.score).min())
            #expect(results.max(of: \.name) == expected.map(\.name).max())
            #expect(results.max(of: \.rank) == expected.compactMap(\.rank).max())
            #expect(results.average(of: \.category) == (expected.isEmpty ? nil : Double(c)))
            // Exact index answers: the plan needs no residual, so count reads only the index.
            let s = 0.5
            let wide = db.objects(Item.self).filter(#Predicate { $0.score > s })
            #expect(wide.count == items.filter { $0.score > s }.count)
        }
        let all = db.objects(Item.self)
        #expect(all.count == items.count)
        #expect(abs(all.sum(of: \.score) - items.reduce(0) { $0 + $1.score }) < 1e-9)
        #expect(all.average(of: \.score).map { abs($0 - items.reduce(0) { $0 + $1.score } / Double(items.count)) < 1e-9 } == true)
        #expect(db.objects(Item.self).filter(#Predicate { $0.category == 99 }).average(of: \.score) == nil)
    }
}

struct NaNAggregateItem: Model {
    static let indexes: [PartialKeyPath<NaNAggregateItem> & Sendable] = [\.d]
    var id: Int
    var d: Double
    var od: Double?
    var at: Date
}

/// `min(of:)` and `max(of:)` follow the documented sort order, where NaN is above every number,
/// whatever the order of the results: the first element of the results sorted by the field.
struct NaNAggregateTests {
    func same(_ a: Double?, _ b: Double?) -> Bool { a == b || (a?.isNaN == true && b?.isNaN == true) }

    @Test func minAndMaxAgreeWithTheSortOrder() throws {
        let patterns: [[Double]] = [[.nan, 1, 0], [1, .nan, 0], [0, 1, .nan], [.nan, .nan], [.nan], [2, -1, .infinity, .nan, -.infinity], [3, 1]]
        for pattern in patterns {
            let db = try Database.inMemory(models: [NaNAggregateItem.self])
            try db.write { tx in
                for (k, value) in pattern.enumerated() {
                    try tx.insert(
                        NaNAggregateItem(id: k, d: value, od: k == 0 ? nil : value, at: Date(timeIntervalSinceReferenceDate: value)))
                }
            }
            let orders: [Results<NaNAggregateItem>] = [
                db.objects(NaNAggregateItem.self),
                db.objects(NaNAggregateItem.self).sorted(by: SortDescriptor(\.id, order: .reverse)),
                db.objects(NaNAggregateItem.self).filter(#Predicate { $0.id >= 0 }),
            ]
            let ascending = try db.objects(NaNAggregateItem.self).sorted(by: SortDescriptor(\.d)).fetch()
            let descending = try db.objects(NaNAggregateItem.self).sorted(by: SortDescriptor(\.d, order: .reverse)).fetch()
            for results in orders {
                #expect(same(results.min(of: \.d), ascending.first?.d), "min \(pattern)")
                #expect(same(results.max(of: \.d), descending.first?.d), "max \(pattern)")
                #expect(same(results.min(of: \.at)?.timeIntervalSinceReferenceDate, ascending.first?.d), "min date \(pattern)")
                #expect(same(results.max(of: \.at)?.timeIntervalSinceReferenceDate, descending.first?.d), "max date \(pattern)")
                let present = db.objects(NaNAggregateItem.self).filter(#Predicate { $0.od != nil })
                let presentUp = try present.sorted(by: SortDescriptor(\.d)).fetch().first?.od
                let presentDown = try present.sorted(by: SortDescriptor(\.d, order: .reverse)).fetch().first?.od
                #expect(same(results.min(of: \.od), presentUp), "min optional \(pattern)")
                #expect(same(results.max(of: \.od), presentDown), "max optional \(pattern)")
            }
        }
    }
}
