import Foundation
import Testing

@testable import Strata

// Results against what they say of themselves (a review of Results as a collection, 2026-12-07).

struct RRRow: Model, Equatable {
    static let indexes: [PartialKeyPath<RRRow> & Sendable] = [\.n]
    var id: Int
    var n: Int
    var rank: Int?
}

struct ResultsReviewTests {
    /// `explain()` says an ordered index walk stops when the window is full only when it does: a
    /// predicate that may throw is evaluated on every object (as Foundation would), and distinct
    /// drops duplicates after the walk; distinct is described too.
    @Test func explainSaysWhetherTheWalkStops() throws {
        let db = try Database.inMemory(models: [RRRow.self])
        try db.write { tx in try tx.insert(contentsOf: (0..<20).map { RRRow(id: $0, n: 20 - $0, rank: $0 % 3 == 0 ? nil : $0) }) }
        let plain = db.objects(RRRow.self).sorted(by: SortDescriptor(\.n)).prefix(2)
        #expect(plain.explain().contains("stopping when the window is full"), "\(plain.explain())")
        let throwing = db.objects(RRRow.self).filter(#Predicate { $0.rank! > 3 }).sorted(by: SortDescriptor(\.n)).prefix(1)
        #expect(throwing.explain().contains("scan index"), "\(throwing.explain())")
        #expect(!throwing.explain().contains("stopping when the window is full"), "\(throwing.explain())")
        #expect(throwing.explain().contains(", to its end"), "\(throwing.explain())")
        // (It walks to its end: the nil rank of the object with n 2 throws, as evaluate does.)
        #expect(throws: (any Error).self) { try throwing.fetch() }
        let distinct = db.objects(RRRow.self).sorted(by: SortDescriptor(\.n)).distinct(by: \.rank).prefix(3)
        #expect(distinct.explain().contains("distinct by rank"), "\(distinct.explain())")
        #expect(!distinct.explain().contains("stopping when the window is full"), "\(distinct.explain())")
    }

    /// A later `distinct(by:)` replaces an earlier one, as documented (as `sorted(by:)` does).
    @Test func aLaterDistinctReplacesAnEarlierOne() throws {
        let db = try Database.inMemory(models: [RRRow.self])
        try db.write { tx in try tx.insert(contentsOf: [RRRow(id: 1, n: 1, rank: 1), RRRow(id: 2, n: 1, rank: 2), RRRow(id: 3, n: 2, rank: 1)]) }
        #expect(db.objects(RRRow.self).distinct(by: \.n).distinct(by: \.rank).map(\.id) == [1, 2])
        #expect(db.objects(RRRow.self).distinct(by: \.n, \.rank).map(\.id) == [1, 2, 3])
    }
}
