import Testing
import Foundation
import StrataStorage
@testable import Strata

struct SnapshotSharingTests {
    @Test func resultsOfOneCommitShareOneReaderSlot() throws {
        var options = StoreOptions(durability: .noSync)
        options.readerSlots = 8
        let db = try Database(path: databasePath(), models: [Edge.self], options: options)
        try db.write { tx in try tx.insert(contentsOf: (0..<10).map { Edge(id: $0, n: $0) }) }
        // Thousands of results kept at once, all of the same commit: one slot.
        let kept = (0..<3000).map { _ in db.objects(Edge.self).filter(#Predicate { $0.n > 4 }) }
        #expect(kept.allSatisfy { $0.count == 5 && $0.error == nil })
        #expect(try db.object(Edge.self, key: 3)?.n == 3)
        // One slot per distinct commit: with 8 slots, the 8th kept version fails loudly.
        var versions: [Results<Edge>] = []
        var failure: StrataError?
        for i in 10..<30 {
            try db.write { tx in try tx.insert(Edge(id: i, n: i)) }
            let results = db.objects(Edge.self)
            if let error = results.error { failure = error; break }
            versions.append(results)
        }
        let error = try #require(failure)
        #expect("\(error)".contains("reader slots are in use"), "\(error)")
        #expect(throws: StrataError.self) { try db.objects(Edge.self).fetch() }
        versions.removeAll()
        #expect(db.objects(Edge.self).error == nil)
        _ = kept
    }
}
