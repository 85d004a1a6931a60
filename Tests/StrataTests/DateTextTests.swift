import Testing
import Foundation
@testable import Strata

struct DateTextTests {
    @Test func wholeSecondsMatchFoundationsISO8601() {
        // Foundation's calendar is Julian before 1582-10-15: distantPast is its 0001-01-01.
        #expect(ISO8601.format(Date.distantPast) == "0001-01-01T00:00:00Z")
        #expect(ISO8601.format(Date(timeIntervalSince1970: -12_219_292_800)) == "1582-10-15T00:00:00Z")
        #expect(ISO8601.format(Date(timeIntervalSince1970: -12_219_292_801)) == "1582-10-04T23:59:59Z")
        #expect(ISO8601.format(Date(timeIntervalSince1970: 253_402_300_800)) == "+010000-01-01T00:00:00Z")
        var rng = SeededRandom(seed: 8601)
        let lower = Date.distantPast.timeIntervalSinceReferenceDate  // 0001-01-01 (Julian)
        let upper = Date(timeIntervalSince1970: 253_402_300_799).timeIntervalSinceReferenceDate  // 9999-12-31T23:59:59
        let reform = Date(timeIntervalSince1970: -12_219_292_800).timeIntervalSinceReferenceDate
        for i in 0..<6000 {
            // A third of them within two months of the reform.
            let t = i % 3 == 0 ? reform + Double(rng.below(10_368_000)) - 5_184_000 : (lower + Double(rng.below(Int(upper - lower)))).rounded(.down)
            let date = Date(timeIntervalSinceReferenceDate: t)
            #expect(ISO8601.format(date) == date.formatted(.iso8601), "t = \(t)")
        }
    }

    /// Text reads as `JSONDecoder` (`.iso8601`) reads it, before the Gregorian reform too: dates
    /// before 1582-10-15 are Julian (1500-02-29 exists), the ten dates that never existed read as
    /// Julian dates, and a time zone's offset applies to the date as written.
    @Test func textReadsAsJSONDecoderReadsIt() throws {
        struct Stamp: Codable { var d: Date }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        var texts = [
            "0000-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "0004-02-29T12:00:00Z", "0100-02-29T00:00:00Z", "1000-06-15T12:00:00Z",
            "1500-02-29T23:59:59Z", "1582-10-04T23:59:59Z", "1582-10-05T00:00:00Z", "1582-10-14T23:59:59Z", "1582-10-15T00:00:00Z",
            "1582-10-15T00:30:00+01:00", "1582-10-14T23:30:00-01:00", "1582-10-04T23:30:00-02:00", "1600-02-29T00:00:00Z", "1700-03-01T00:00:00Z",
        ]
        var rng = SeededRandom(seed: 1582)
        func pad(_ n: Int, _ width: Int) -> String { String(repeating: "0", count: max(0, width - String(n).count)) + String(n) }
        for _ in 0..<3000 {
            let year = [rng.below(1600), 1582, 1582, 1583, rng.below(10_000)][rng.below(5)]
            let month = year == 1582 && rng.below(2) == 0 ? 10 : 1 + rng.below(12)
            let day = 1 + rng.below(month == 2 ? (year % 4 == 0 ? 29 : 28) : 30)
            let zone = ["Z", "+01:00", "-05:30", "+14:00", "-00:01"][rng.below(5)]
            texts.append("\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(rng.below(24), 2)):\(pad(rng.below(60), 2)):\(pad(rng.below(60), 2))\(zone)")
        }
        for text in texts {
            let reference = try? decoder.decode(Stamp.self, from: Data("{\"d\":\"\(text)\"}".utf8)).d
            let read = PatchEncoder.parseISO8601(text)
            #expect(read == reference, "\(text): \(read?.timeIntervalSince1970 ?? .nan) against JSONDecoder's \(reference?.timeIntervalSince1970 ?? .nan)")
            if let read, let reference, read == reference, let back = ISO8601.format(read) {
                #expect(ISO8601.parse(back) == read, "\(text) → \(back)")
            }
        }
    }

    @Test func everyDateReadsBackToTheSameDouble() {
        var rng = SeededRandom(seed: 20261130)
        var samples: [Double] = [
            0, -0.5, 0.125, 1e-9, Double.leastNonzeroMagnitude, -1e-300, 817_654_321.123456789, -978_307_200.000001,
            Date.distantPast.timeIntervalSinceReferenceDate, Date.distantFuture.timeIntervalSinceReferenceDate, 1e12, -1e12, 4e15,
        ]
        for _ in 0..<5000 {
            let scale = [1.0, 1e3, 1e6, 1e9, 1e12][rng.below(5)]
            samples.append((Double(rng.below(2_000_001)) - 1_000_000) / 1_000_000 * scale + Double(rng.below(1000)) / 997)
        }
        for t in samples {
            let date = Date(timeIntervalSinceReferenceDate: t)
            guard let text = ISO8601.format(date) else {
                Issue.record("no text for \(t)")
                continue
            }
            let back = ISO8601.parse(text)
            #expect(
                back?.timeIntervalSinceReferenceDate.bitPattern == t.bitPattern || (t == 0 && back?.timeIntervalSinceReferenceDate == 0),
                "\(t) → \(text) → \(back?.timeIntervalSinceReferenceDate ?? .nan)")
        }
        #expect(ISO8601.format(Date(timeIntervalSinceReferenceDate: .nan)) == nil)
        #expect(ISO8601.format(Date(timeIntervalSinceReferenceDate: 0.125)) == "2001-01-01T00:00:00.125Z")
        #expect(ISO8601.format(Date(timeIntervalSinceReferenceDate: -0.25)) == "2000-12-31T23:59:59.75Z")
    }

    @Test func offsetsAndFractionsParseLikeFoundation() throws {
        for text in [
            "2024-05-01T12:30:00Z", "2024-05-01T12:30:00+02:00", "2024-05-01T12:30:00-0530", "2024-02-29T00:00:00Z",
            "1999-12-31T23:59:59.5Z", "2024-05-01T12:30:00.125+02:00",
        ] {
            let foundation = try Date.ISO8601FormatStyle(includingFractionalSeconds: text.contains(".")).parse(text)
            #expect(ISO8601.parse(text) == foundation, "\(text)")
        }
        for bad in [
            "", "2024-13-01T00:00:00Z", "2023-02-29T00:00:00Z", "1700-02-29T00:00:00Z", "2024-05-01", "2024-05-01T12:30:00", "2024-05-01T12:30:00Zjunk", "x",
        ] {
            #expect(ISO8601.parse(bad) == nil, "\(bad)")
        }
    }

    @Test func exportedDatesLoadBackExactlyAndEJSONIsRead() throws {
        struct Event: Model, Equatable { var id: Int; var at: Date; var seen: Date? }
        let db = try Database.inMemory(models: [Event.self])
        let at = Date(timeIntervalSinceReferenceDate: 817_654_321.000123456)
        try db.write { tx in try tx.insert(Event(id: 1, at: at, seen: nil)) }
        // The exported text of the date, fed back as JSON, is the same Date.
        let text = StoredValue.date(at).json
        #expect(text == "\"2026-11-29T14:12:01.0001235Z\"", "\(text)")
        try db.write { tx in
            _ = try tx.update(Event.self, key: 1, json: Data(#"{"at": \#(text), "seen": {"$date": 1714566600000}}"#.utf8))
        }
        let event = try #require(try db.object(Event.self, key: 1))
        #expect(event.at.timeIntervalSinceReferenceDate.bitPattern == at.timeIntervalSinceReferenceDate.bitPattern)
        #expect(event.seen == Date(timeIntervalSince1970: 1_714_566_600))
        try db.write { tx in
            _ = try tx.update(Event.self, key: 1, json: Data(#"{"seen": {"$date": {"$numberLong": "1714566600500"}}}"#.utf8))
        }
        #expect(try db.object(Event.self, key: 1)?.seen == Date(timeIntervalSince1970: 1_714_566_600.5))
        #expect(throws: StrataError.self) {
            try db.write { tx in _ = try tx.update(Event.self, key: 1, json: Data(#"{"seen": {"$date": true}}"#.utf8)) }
        }
    }
}
