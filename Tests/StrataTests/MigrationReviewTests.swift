import Foundation
import StrataStorage
import Testing

@testable import Strata

/// Findings of the review of 2026-12-06 in migrations and keys.
@Suite struct MigrationReviewTests {
    struct NoteV1: Model {
        static let modelName = "Note"
        static let uniqueIndexes: [PartialKeyPath<NoteV1> & Sendable] = [\.slug]
        var id: Int
        var slug: String
    }

    /// The same model with automatic keys: the key's type is now `Int?`, whose encoding differs.
    struct NoteV2: Model {
        static let modelName = "Note"
        static let uniqueIndexes: [PartialKeyPath<NoteV2> & Sendable] = [\.slug]
        var id: Int?
        var slug: String
    }

    /// A key type changed by a migration that leaves the objects as they are: each record moves to
    /// the key its id now encodes to. Before, they stayed under the old encoding: `object(key:)`
    /// found nothing, an automatic key threw `corruptRecord`, and an upsert made a second object.
    @Test func aMigrationThatChangesTheKeyTypeMovesTheRecords() throws {
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [NoteV1.self])
            try db.write { tx in for i in 1...5 { try tx.insert(NoteV1(id: i * 10, slug: "n\(i)")) } }
        }
        let db = try Database(path: path, models: [NoteV2.self], schemaVersion: 1) { _ in }
        #expect(try db.object(NoteV2.self, key: 30)?.slug == "n3")
        try db.write { tx in
            try tx.upsert(NoteV2(id: 30, slug: "n3"))
            try tx.insert(NoteV2(id: nil, slug: "n6"))
        }
        let all: [NoteV2] = try db.objects(NoteV2.self).fetch()
        #expect(all.count == 6)
        #expect(all.compactMap { $0.id }.sorted() == [10, 20, 30, 40, 50, 51])
        let second: [NoteV2] = try db.objects(NoteV2.self).filter(#Predicate<NoteV2> { $0.slug == "n2" }).fetch()
        #expect(second.map { $0.id } == [20])
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
    }

    struct Legacy: Model {
        static let indexes: [PartialKeyPath<Legacy> & Sendable] = [\.tag]
        static let uniqueIndexes: [PartialKeyPath<Legacy> & Sendable] = [\.code]
        var id: Int
        var tag: String
        var code: String
    }

    struct Other: Model {
        var id: Int
    }

    /// `Migration.deleteAll` of a model the opening does not list empties its indexes too (they
    /// are not rebuilt after the migration): its index named deleted objects, and a unique one
    /// refused their values.
    @Test func deletingAllObjectsOfAModelNotOpenedEmptiesItsIndexes() throws {
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [Legacy.self, Other.self])
            try db.write { tx in for i in 0..<20 { try tx.insert(Legacy(id: i, tag: "t\(i % 3)", code: "c\(i)")) } }
        }
        _ = try Database(path: path, models: [Other.self], schemaVersion: 1) { migration in try migration.deleteAll("Legacy") }
        let db = try Database(path: path, models: [Legacy.self, Other.self], schemaVersion: 1) { _ in }
        func tagged() -> Results<Legacy> { db.objects(Legacy.self).filter(#Predicate<Legacy> { $0.tag == "t1" }) }
        #expect(tagged().count == 0)
        #expect(try tagged().fetch().isEmpty)
        try db.write { tx in try tx.insert(Legacy(id: 100, tag: "t1", code: "c1")) }
        #expect(try tagged().fetch().map { $0.id } == [100])
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
    }

    struct Reading: Model {
        var id: Double
        var value: Int
    }

    /// A NaN key (all NaNs share one key) reads back by that key, and updates.
    @Test func aNaNKeyReadsBackAndUpdates() throws {
        let path = databasePath()
        let db = try Database(path: path, models: [Reading.self])
        try db.write { tx in try tx.insert(Reading(id: Double.nan, value: 1)) }
        #expect(try db.object(Reading.self, key: Double.nan)?.value == 1)
        try db.write { tx in try tx.upsert(Reading(id: Double.nan, value: 2)) }
        #expect(try db.object(Reading.self, key: Double.nan)?.value == 2)
        #expect(db.objects(Reading.self).count == 1)
    }
}
