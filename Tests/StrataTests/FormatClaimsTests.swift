import Foundation
import StrataStorage
import Testing

@testable import Strata

// FORMAT.md's claims about index entries, checked against what is written (a review of FORMAT.md
// against the code, 2026-12-07).

struct FCTagged: Model {
    static let indexes: [PartialKeyPath<FCTagged> & Sendable] = [\.tags]
    var id: Int
    var tags: [String]
}

struct FormatClaimsTests {
    /// §8: "An index on an array field has one entry per distinct element".
    @Test func anArrayIndexHasOneEntryPerDistinctElement() throws {
        let db = try Database.inMemory(models: [FCTagged.self])
        try db.write { tx in
            try tx.insert(contentsOf: [FCTagged(id: 1, tags: ["a", "a", "b"]), FCTagged(id: 2, tags: []), FCTagged(id: 3, tags: ["b"])])
        }
        let entries = try db.store.read { txn in try txn.tree("i:FCTagged:tags")?.count }
        #expect(entries == 3)  // a·1, b·1, b·3
        #expect(db.objects(FCTagged.self).filter(#Predicate { $0.tags.contains("a") }).map(\.id) == [1])
    }
}
