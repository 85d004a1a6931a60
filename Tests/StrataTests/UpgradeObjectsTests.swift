import Testing
import Foundation
import StrataStorage
@testable import Strata

/// The model the format-2 object fixture was written with (Tests/StrataStorageTests/Fixtures).
private struct FixtureItem: Model, Equatable {
    static let indexes: [PartialKeyPath<FixtureItem> & Sendable] = [\.group]
    var id: Int
    var name: String
    var group: Int
}

/// A database written by the format-2 build opens with its objects, indexes and queries intact
/// after the format-3 upgrade, and keeps working.
struct UpgradeObjectsTests {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("StrataStorageTests/Fixtures/v2-objects.strata").path

    /// Ids 0..<3000 less the multiples of 5, as the generator left them.
    static let ids = (0..<3000).filter { $0 % 5 != 0 }

    @Test func format2DatabaseUpgradesWithItsObjects() throws {
        let path = databasePath()
        try FileManager.default.copyItem(atPath: Self.fixture, toPath: path)
        // Read-only first: the objects are there without the upgrade.
        do {
            let db = try Database(path: path, models: [FixtureItem.self], options: StoreOptions(readOnly: true))
            #expect(db.objects(FixtureItem.self).count == Self.ids.count)
            #expect(try db.store.metaPages().first { $0.isCurrent }?.formatVersion == 2)
        }
        let db = try Database(path: path, models: [FixtureItem.self], options: StoreOptions(durability: .noSync))
        #expect(try db.store.metaPages().first { $0.isCurrent }?.formatVersion == strataFormatVersion)
        let all = db.objects(FixtureItem.self).sorted(by: SortDescriptor(\FixtureItem.id)).map { $0 }
        #expect(all == Self.ids.map { FixtureItem(id: $0, name: "item \($0)", group: $0 % 13) })
        let seven = db.objects(FixtureItem.self).filter(#Predicate { $0.group == 7 })
        #expect(seven.count == Self.ids.filter { $0 % 13 == 7 }.count)
        #expect(seven.map(\.id).sorted() == Self.ids.filter { $0 % 13 == 7 })
        // Positions in the record tree after the upgrade.
        let sorted = db.objects(FixtureItem.self).sorted(by: SortDescriptor(\FixtureItem.id))
        #expect(sorted[1_000].id == Self.ids[1_000])
        try db.write { tx in
            try tx.insert(FixtureItem(id: 5, name: "five", group: 7))
            try tx.delete(FixtureItem.self, key: 6)
        }
        #expect(db.objects(FixtureItem.self).filter(#Predicate { $0.group == 7 }).count == seven.count + 1)
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
        let storage = try db.store.check()
        #expect(storage.problems.isEmpty, "\(storage.problems)")
    }
}
