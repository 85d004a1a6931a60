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
}
