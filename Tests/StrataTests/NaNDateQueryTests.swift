import Testing
import Foundation
@testable import Strata

// A date of NaN in range conditions. `Date` defines only `<`, so its `<=` and `>=` are
// `!(b < a)` and `!(a < b)`: unlike a Double NaN, a date of NaN is `<=` and `>=` every date, and
// `#Predicate` evaluates it so. Every plan must agree.

struct NaNDateEvent: Model {
    static let indexes: [PartialKeyPath<NaNDateEvent> & Sendable] = [\.at]
    static let indexDescriptors: [IndexDescriptor<NaNDateEvent>] = [.on(\.room, \.at)]
    var id: Int
    var room: Int
    var at: Date
}

struct NaNDatePlainEvent: Model {
    var id: Int
    var room: Int
    var at: Date
}

@Suite struct NaNDateQueryTests {
    static let dates: [Date] = [
        Date(timeIntervalSinceReferenceDate: .nan), .distantPast, Date(timeIntervalSinceReferenceDate: 0), .distantFuture,
        Date(timeIntervalSinceReferenceDate: .infinity), Date(timeIntervalSinceReferenceDate: -.infinity), Date(timeIntervalSinceReferenceDate: .nan),
    ]

    @Test func rangesOnDatesMatchEvaluationWithNaN() throws {
        let db = try Database.inMemory(models: [NaNDateEvent.self, NaNDatePlainEvent.self])
        try db.write { tx in
            for (i, at) in Self.dates.enumerated() {
                try tx.insert(NaNDateEvent(id: i, room: 1, at: at))
                try tx.insert(NaNDatePlainEvent(id: i, room: 1, at: at))
            }
        }
        let all = try db.objects(NaNDateEvent.self).fetch()
        let plain = try db.objects(NaNDatePlainEvent.self).fetch()
        let room = 1
        for c in Self.dates {
            let predicates: [(Predicate<NaNDateEvent>, Predicate<NaNDatePlainEvent>)] = [
                (#Predicate { $0.at >= c }, #Predicate { $0.at >= c }), (#Predicate { $0.at <= c }, #Predicate { $0.at <= c }),
                (#Predicate { $0.at > c }, #Predicate { $0.at > c }), (#Predicate { $0.at < c }, #Predicate { $0.at < c }),
                (#Predicate { $0.at == c }, #Predicate { $0.at == c }),
                (#Predicate { $0.room == room && $0.at >= c }, #Predicate { $0.room == room && $0.at >= c }),
                (#Predicate { $0.room == room && $0.at <= c }, #Predicate { $0.room == room && $0.at <= c }),
            ]
            for (indexed, scanned) in predicates {
                let expected = try all.filter { try indexed.evaluate($0) }.map(\.id)
                #expect(try plain.filter { try scanned.evaluate($0) }.map(\.id) == expected)
                let results = db.objects(NaNDateEvent.self).filter(indexed)
                #expect(try results.fetch().map(\.id) == expected, "\(c.timeIntervalSinceReferenceDate): \(results.explain())")
                #expect(try results.fetchCount() == expected.count, "\(c.timeIntervalSinceReferenceDate): \(results.explain())")
                #expect(try db.objects(NaNDatePlainEvent.self).filter(scanned).fetch().map(\.id) == expected)
                let walked = results.sorted(by: SortDescriptor(\.at, order: .reverse)).prefix(3)
                let expectedWalk = Array(
                    all.filter { try! indexed.evaluate($0) }.sorted { a, b in
                        let x = a.at.timeIntervalSinceReferenceDate, y = b.at.timeIntervalSinceReferenceDate
                        if x.isNaN != y.isNaN { return x.isNaN }  // NaN above every date: first in reverse
                        return x != y && !x.isNaN ? x > y : a.id < b.id
                    }.prefix(3)
                ).map(\.id)
                #expect(try walked.fetch().map(\.id) == expectedWalk, "\(c.timeIntervalSinceReferenceDate): \(walked.explain())")
            }
        }
    }
}
