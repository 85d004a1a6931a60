import Foundation
import Testing

@testable import Strata

/// Findings of the review of 2026-12-07 in the record codec, each checked against a round trip
/// through `JSONEncoder`/`JSONDecoder` of the same objects.
@Suite struct CodecReviewTests {
    /// Days numbered from 0 in Swift, sent as ISO weekday numbers (1-7) by their own Codable.
    enum Weekday: Int, Codable, CaseIterable, Sendable {
        case monday, tuesday, wednesday, thursday, friday, saturday, sunday

        init(from decoder: any Decoder) throws {
            let n = try decoder.singleValueContainer().decode(Int.self)
            guard let day = Weekday(rawValue: n - 1) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "no weekday \(n)"))
            }
            self = day
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(rawValue + 1)
        }
    }

    /// Names that read as `Status(rawValue:)` does not: a wire format's "open"/"closed" for cases
    /// whose raw values are codes, with an unknown name falling back to `.unknown`.
    enum Status: String, Codable, Sendable {
        case open = "O", closed = "C", unknown = "?"

        init(from decoder: any Decoder) throws {
            switch try decoder.singleValueContainer().decode(String.self) {
            case "open": self = .open
            case "closed": self = .closed
            default: self = .unknown
            }
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(self == .open ? "open" : self == .closed ? "closed" : "unknown")
        }
    }

    struct Shift: Model, Equatable {
        static let indexes: [PartialKeyPath<Shift> & Sendable] = [\.day]
        var id: Int
        var day: Weekday
        var status: Status
        var days: [Weekday]
        var next: Weekday?
    }

    /// An enum is stored as its raw value (its own `encode(to:)` is not called), so it is read
    /// back by its raw value: its own `init(from:)` read the raw value as its wire number and
    /// gave another case (`.tuesday` came back `.monday`, `.sunday` `.saturday`), silently.
    @Test func anEnumWithItsOwnCodableReadsBackTheCaseItWasWrittenAs() throws {
        let db = try Database.inMemory(models: [Shift.self])
        var shifts: [Shift] = []
        for (i, day) in Weekday.allCases.enumerated() {
            let status: Status = [.open, .closed, .unknown][i % 3]
            shifts.append(Shift(id: i, day: day, status: status, days: [day, .sunday, .monday], next: i % 2 == 0 ? nil : day))
        }
        // The reference: each object survives JSON.
        for shift in shifts { #expect(try JSONDecoder().decode(Shift.self, from: JSONEncoder().encode(shift)) == shift) }
        try db.write { tx in for shift in shifts { try tx.insert(shift) } }
        #expect(try db.objects(Shift.self).fetch() == shifts)
        let tuesday = Weekday.tuesday
        let tuesdays = try db.objects(Shift.self).filter(#Predicate { $0.day == tuesday }).fetch()
        #expect(tuesdays.map(\.id) == [1] && tuesdays.allSatisfy { $0.day == .tuesday })
    }

    /// A counter whose `encode(to:)` leaves out a zero and whose `init(from:)` reads it back as 0
    /// when absent, asking `contains` first (`guarded`) or with `try?` (otherwise); round-trips
    /// through JSON either way. Indexed, and a nested struct that does the same.
    struct Counter: Model, Equatable {
        static let indexes: [PartialKeyPath<Counter> & Sendable] = [\.count]
        var id: Int
        var count: Int
        var inner: Inner

        struct Inner: Codable, Equatable, Sendable {
            var level: Int
            enum CodingKeys: String, CodingKey { case level }
            init(level: Int) { self.level = level }
            init(from decoder: any Decoder) throws {
                let c = try decoder.container(keyedBy: CodingKeys.self)
                level = (try? c.decode(Int.self, forKey: .level)) ?? 0
            }
            func encode(to encoder: any Encoder) throws {
                var c = encoder.container(keyedBy: CodingKeys.self)
                if level != 0 { try c.encode(level, forKey: .level) }
            }
        }

        enum CodingKeys: String, CodingKey { case id, count, inner }
        init(id: Int, count: Int, level: Int) {
            self.id = id
            self.count = count
            self.inner = Inner(level: level)
        }
        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            id = try c.decode(Int.self, forKey: .id)
            count = c.contains(.count) ? try c.decode(Int.self, forKey: .count) : 0
            inner = try c.decode(Inner.self, forKey: .inner)
        }
        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(id, forKey: .id)
            if count != 0 { try c.encode(count, forKey: .count) }
            try c.encode(inner, forKey: .inner)
        }
    }

    /// Such a field is missing from the records of objects holding the default: queries read it
    /// as nil there (`count == 0` found nothing, the index left those objects out, a sort put 0
    /// before -5). They answer as Foundation's evaluation and SortDescriptor do.
    @Test func aFieldEncodeLeavesOutIsQueriedAsTheObjectReadsIt() throws {
        let counters = [
            Counter(id: 1, count: 0, level: 2), Counter(id: 2, count: 5, level: 0), Counter(id: 3, count: -5, level: 0),
            Counter(id: 4, count: 0, level: 0), Counter(id: 5, count: 1, level: -1),
        ]
        for counter in counters { #expect(try JSONDecoder().decode(Counter.self, from: JSONEncoder().encode(counter)) == counter) }
        let db = try Database.inMemory(models: [Counter.self])
        try db.write { tx in for counter in counters { try tx.insert(counter) } }
        #expect(try db.objects(Counter.self).fetch() == counters)
        let predicates = [
            #Predicate<Counter> { $0.count == 0 }, #Predicate<Counter> { $0.count < 3 }, #Predicate<Counter> { $0.count != 5 },
            #Predicate<Counter> { $0.inner.level == 0 }, #Predicate<Counter> { $0.inner.level >= 0 && $0.count <= 0 },
        ]
        for (i, predicate) in predicates.enumerated() {
            let expected = try counters.filter { try predicate.evaluate($0) }.map(\.id)
            #expect(try db.objects(Counter.self).filter(predicate).fetch().map(\.id) == expected, "predicate \(i)")
            #expect(try db.objects(Counter.self).filter(predicate).fetchCount() == expected.count, "predicate \(i)")
        }
        for sort in [SortDescriptor(\Counter.count), SortDescriptor(\Counter.count, order: .reverse), SortDescriptor(\Counter.inner.level)] {
            #expect(try db.objects(Counter.self).sorted(by: [sort]).fetch().map(\.id) == Self.sorted(counters, by: sort))
        }
    }

    /// The ids of `objects` (inserted in key order) in `sort`'s order, ties in key order.
    static func sorted<M: Model>(_ objects: [M], by sort: SortDescriptor<M>) -> [M.ID] {
        objects.enumerated().sorted { a, b in
            switch sort.compare(a.element, b.element) {
            case .orderedAscending: return true
            case .orderedDescending: return false
            case .orderedSame: return a.offset < b.offset
            }
        }.map(\.element.id)
    }
}
