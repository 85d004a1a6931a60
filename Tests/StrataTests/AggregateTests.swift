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
