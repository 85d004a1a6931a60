import Foundation
import Testing

@testable import Strata

/// The planner weighs indexes by how many entries their ranges hold, read from the counts the
/// branch pages keep: a page of a sorted, filtered query reads what it returns, not the up to
/// 10,000 entries per weighed index it once walked to estimate them.
@Suite struct PlannerEstimateTests {
    struct Reading: Model {
        static let indexDescriptors: [IndexDescriptor<Reading>] = [.on(\.sensor), .on(\.value)]
        var id: Int
        var sensor: Int
        var value: Int
    }

    static let count = 12_000

    static func database() throws -> (Database, [Reading]) {
        let db = try Database.inMemory(models: [Reading.self])
        var all: [Reading] = []
        try db.write { tx in
            for i in 0..<count {
                let reading = Reading(id: i, sensor: i % 40, value: (i &* 7_919) % 5_000)
                all.append(try tx.insert(reading))
            }
        }
        return (db, all)
    }

    /// Entries read (progress units) while running `body`.
    static func entriesRead<R>(_ body: () throws -> R) throws -> (R, Int) {
        var completed = 0
        let result = try withProgress(
            every: 1,
            {
                completed = max(completed, $0.completed); return true
            }, body)
        return (result, completed)
    }

    @Test func aSortedPageReadsItsPageNotTheEstimates() throws {
        let (db, all) = try Self.database()
        let low = 1
        let predicate = #Predicate<Reading> { $0.sensor >= low }
        // Ties keep primary-key order, so the reference breaks them by id.
        let sort = [SortDescriptor(\Reading.value)]
        let (page, read) = try Self.entriesRead {
            try db.objects(Reading.self).filter(predicate).sorted(by: sort).prefix(5).fetch()
        }
        let expected = try all.filter { try predicate.evaluate($0) }.sorted { a, b in
            for descriptor in sort {
                let order = descriptor.compare(a, b)
                if order != .orderedSame { return order == .orderedAscending }
            }
            return a.id < b.id
        }
        #expect(page.map(\.id) == expected.prefix(5).map(\.id))
        // The walk of the value index stops at the fifth match; a handful of entries more.
        let plan = db.objects(Reading.self).filter(predicate).sorted(by: sort).prefix(5).explain()
        #expect(read < 200, "read \(read) entries for a page of 5: \(plan)")
    }

    @Test func explainShowsTheEntriesInTheWeighedRanges() throws {
        let (db, all) = try Self.database()
        for (sensor, top) in [(3, 2_500), (3, 9_000), (0, 5_000)] {
            let results = db.objects(Reading.self).filter(#Predicate { $0.sensor == sensor && $0.value < top })
            let bySensor = all.filter { $0.sensor == sensor }.count
            let byValue = all.filter { $0.value < top }.count
            let explained = results.explain()
            #expect(explained.contains("estimated candidates: \(min(bySensor, byValue))"), "\(explained)")
            #expect(try results.fetch().map(\.id) == all.filter { $0.sensor == sensor && $0.value < top }.map(\.id))
        }
        // Past the cap the estimate says so.
        let wide = db.objects(Reading.self).filter(#Predicate { $0.sensor >= 0 && $0.value >= 0 })
        #expect(wide.explain().contains("estimated candidates: ≥ 10000"))
    }

    /// Two bounds on one indexed field, or on the key, read the range between them: the matches
    /// and a handful of entries, not one side's whole range.
    @Test func twoBoundsOnOneFieldReadTheRangeBetween() throws {
        let (db, all) = try Self.database()
        for (low, high) in [(3, 5), (0, 0), (39, 39), (7, 2), (-5, 100)] {
            let predicate = #Predicate<Reading> { $0.sensor >= low && $0.sensor <= high }
            let expected = try all.filter { try predicate.evaluate($0) }.map(\.id)
            let (found, read) = try Self.entriesRead { try db.objects(Reading.self).filter(predicate).fetch().map(\.id) }
            #expect(found == expected, "\(low)...\(high)")
            #expect(read <= expected.count + 2, "\(low)...\(high): read \(read) entries for \(expected.count) matches")
            #expect(db.objects(Reading.self).filter(predicate).count == expected.count)
        }
        for (low, high) in [(100, 200), (11_990, 20_000), (50, 40)] {
            let predicate = #Predicate<Reading> { $0.id >= low && $0.id < high }
            let expected = try all.filter { try predicate.evaluate($0) }.map(\.id)
            let (found, read) = try Self.entriesRead { try db.objects(Reading.self).filter(predicate).fetch().map(\.id) }
            #expect(found == expected, "ids \(low)..<\(high)")
            #expect(read <= expected.count + 2, "ids \(low)..<\(high): read \(read) entries for \(expected.count) matches")
        }
        // Bounds of different fields: one index, the other condition filtered.
        let mixed = #Predicate<Reading> { $0.sensor >= 38 && $0.value <= 100 }
        #expect(try db.objects(Reading.self).filter(mixed).fetch().map(\.id) == (try all.filter { try mixed.evaluate($0) }.map(\.id)))
    }

    /// A closed range on one field is answered by the index alone: both bounds exact, nothing else
    /// in the predicate. Its count comes from the branch counts (no entry read), and its objects,
    /// sums and the like need no residual filter; anything more in the predicate still filters.
    @Test func aClosedRangeIsCountedFromTheBranches() throws {
        let (db, all) = try Self.database()
        func check(_ predicate: Predicate<Reading>, _ label: String, exact: Bool = true) throws {
            let matches = try all.filter { try predicate.evaluate($0) }
            let results = db.objects(Reading.self).filter(predicate)
            let (counted, read) = try Self.entriesRead { results.count }
            #expect(counted == matches.count, "\(label)")
            if exact {
                #expect(read < 10, "\(label): read \(read) entries to count \(matches.count): \(results.explain())")
                #expect(results.explain().contains("no residual filter"), "\(label): \(results.explain())")
            } else {
                #expect(!results.explain().contains("no residual filter"), "\(label): \(results.explain())")
            }
            #expect(try results.fetch().map(\.id) == matches.map(\.id), "\(label)")
            #expect(results.sum(of: \.value) == matches.reduce(0) { $0 + $1.value }, "\(label)")
        }
        for (low, high) in [(3, 5), (0, 0), (39, 39), (7, 2), (-5, 100), (Int.min, Int.max)] {
            try check(#Predicate { $0.sensor >= low && $0.sensor <= high }, "sensor \(low)...\(high)")
            try check(#Predicate { $0.sensor > low && $0.sensor < high }, "sensor \(low)<..<\(high)")
            let top = high.multipliedReportingOverflow(by: 300).overflow ? high : high * 300
            try check(#Predicate { $0.id >= low && $0.id < top }, "id \(low)..<\(top)")
        }
        let (s, t) = (4, 9)
        // Two filters, equality inside a range, three bounds: still one range of one index.
        try check(#Predicate { $0.sensor >= s }, "chained", exact: true)
        let chained = db.objects(Reading.self).filter(#Predicate { $0.sensor >= s }).filter(#Predicate { $0.sensor < t })
        #expect(Self.isCountedExactly(chained), "\(chained.explain())")
        #expect(chained.count == all.filter { $0.sensor >= s && $0.sensor < t }.count)
        try check(#Predicate { $0.sensor == s && $0.sensor >= 2 }, "equality within a range")
        try check(#Predicate { $0.sensor >= 2 && $0.sensor < t && $0.sensor != 30 }, "with an inequality", exact: false)
        try check(#Predicate { $0.sensor >= 2 && $0.sensor >= s && $0.sensor <= t }, "three bounds")
        // Other conditions: filtered.
        try check(#Predicate { $0.sensor >= 2 && $0.sensor <= t && $0.value < 2_000 }, "and another field", exact: false)
        try check(#Predicate { $0.sensor >= 2 && ($0.sensor <= t || $0.value < 10) }, "and an or", exact: false)
    }

    static func isCountedExactly(_ results: Results<Reading>) -> Bool {
        let read = (try? entriesRead { results.count })?.1 ?? .max
        return read < 10
    }

    struct Post: Model {
        static let indexDescriptors: [IndexDescriptor<Post>] = [.fullText(\.text)]
        var id: Int
        var text: String
    }

    /// Counting a word's matches reads no entries: the word's range is counted from the branches.
    @Test func countingAWordReadsNoEntries() throws {
        let db = try Database.inMemory(models: [Post.self])
        let words = ["common", "rare", "Common", "commonly", "other"]
        var texts: [Int: String] = [:]
        try db.write { tx in
            for i in 0..<3_000 {
                let text = "\(words[i % 5]) \(words[(i / 5) % 5]) x\(i)"
                texts[i] = text
                try tx.insert(Post(id: i, text: text))
            }
        }
        for word in ["common", "rare", "commonly", "absent"] {
            // Words are folded for case: "Common" is the word "common".
            let expected = texts.values.filter { $0.lowercased().split(separator: " ").contains(Substring(word)) }.count
            let (counted, read) = try Self.entriesRead { db.objects(Post.self).search(\.text, .allWords(word)).count }
            #expect(counted == expected, "\(word)")
            #expect(read < 10, "\(word): read \(read) entries")
        }
    }
}
