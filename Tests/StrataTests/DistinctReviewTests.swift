import Foundation
import Testing

@testable import Strata

// distinct(by:) found inconsistent by a review (2026-12-07): NaN is one group, as Queries.md
// says, whatever the other key paths hold.

struct DRPoint: Codable, Sendable, Equatable {  // Equatable, not Hashable
    var x: Int
}

struct DRRow: Model {
    var id: Int
    var value: Double
    var when: Date
    var point: DRPoint
}

struct DistinctReviewTests {
    @Test func nanIsOneGroupBesideAValueThatIsOnlyEquatable() throws {
        let db = try Database.inMemory(models: [DRRow.self])
        let nanDate = Date(timeIntervalSinceReferenceDate: .nan)
        try db.write { tx in
            try tx.insert(contentsOf: [
                DRRow(id: 1, value: .nan, when: nanDate, point: DRPoint(x: 0)),
                DRRow(id: 2, value: .nan, when: nanDate, point: DRPoint(x: 0)),
                DRRow(id: 3, value: -0.0, when: nanDate, point: DRPoint(x: 0)),
                DRRow(id: 4, value: 0.0, when: nanDate, point: DRPoint(x: 0)),
                DRRow(id: 5, value: .nan, when: nanDate, point: DRPoint(x: 1)),
            ])
        }
        let all = db.objects(DRRow.self)
        #expect(all.distinct(by: \.value, \.point).map(\.id) == [1, 3, 5])
        #expect(all.distinct(by: \.when, \.point).map(\.id) == [1, 5])
        // The same groups as without the Equatable-only value, where every value is Hashable.
        #expect(all.distinct(by: \.value).map(\.id) == [1, 3])
    }
}
