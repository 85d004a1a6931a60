import Foundation
import Synchronization
import Testing

@testable import Strata

// Work that grew with what a caller passes, found by a review of limits (2026-12-07).

struct LimitsReviewTests {
    /// A phrase that repeats a word reads that word's postings once: each repeat read them again
    /// and held every copy (a phrase of one word 20,000 times over 2,000 texts: 4·10⁷ entries).
    /// Counted by the scan steps the progress handler sees, not timed. The answers are the texts
    /// holding the words in a row.
    @Test func aRepeatedPhraseWordIsReadOnce() throws {
        let db = try Database.inMemory(models: [FTPost.self])
        let bodies = (0..<600).map { i in i % 100 == 0 ? "a a a b" : i % 10 == 0 ? "b a a" : "a b" }
        try db.write { tx in
            try tx.insert(contentsOf: bodies.enumerated().map { FTPost(id: $0.offset, board: 0, created: Date(timeIntervalSince1970: 0), body: $0.element) })
        }
        for repeats in [1, 2, 3, 4, 300] {
            let phrase = Array(repeating: "a", count: repeats).joined(separator: " ")
            let expected = bodies.indices.filter { (" " + bodies[$0] + " ").contains(" " + phrase + " ") }
            var steps = 0
            let found = try withProgress(
                every: 1,
                { _ in
                    steps += 1
                    return true
                }
            ) { db.objects(FTPost.self).search(\.body, .phrase(phrase)).keys }
            #expect(found == expected, "\(repeats) times")
            // One read of "a"'s 600 postings (and the objects' keys); 300 reads made 180,000.
            #expect(steps < 5_000, "\(repeats) times: \(steps) steps")
        }
    }
}

struct LRItem: Model, Equatable {
    var id: Int
    var tag: Int
}

extension LimitsReviewTests {
    /// Filters chained one by one (an "exclude these" list built in a loop) are evaluated without
    /// recursing once per filter: on a thread of 512 KiB of stack (a secondary thread's size on
    /// Apple platforms), thousands of them made the planner, the record filter and the condition
    /// tree's release recurse that deep.
    @Test func thousandsOfChainedFiltersRunOnASmallStack() throws {
        let db = try Database.inMemory(models: [LRItem.self])
        try db.write { tx in try tx.insert(contentsOf: (0..<50).map { LRItem(id: $0, tag: $0 % 10) }) }
        let count = Int(ProcessInfo.processInfo.environment["STRATA_CHAINED_FILTERS"] ?? "") ?? 5_000
        let outcome = Mutex<Result<[Int], any Error>?>(nil)
        let thread = Thread {
            var results = db.objects(LRItem.self)
            for excluded in 0..<count {
                let tag = 10 + excluded
                results = results.filter(#Predicate { $0.tag != tag })
            }
            let r = Result { try results.filter(#Predicate { $0.tag < 3 }).fetch().map(\.id) }
            outcome.withLock { $0 = r }
        }
        thread.stackSize = 1 << 19
        thread.start()
        #expect(hdEventuallySync(seconds: 600) { outcome.withLock { $0 != nil } })
        let ids = try outcome.withLock { $0 }?.get()
        #expect(ids == (0..<50).filter { $0 % 10 < 3 })
    }
}
