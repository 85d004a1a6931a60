import Testing
import Foundation
import StrataStorage
@testable import Strata

private struct ROPlain: Model, Equatable {
    var id: Int
    var name: String
}

private struct ROIndexed: Model, Equatable {
    static let modelName = "ROPlain"
    static let indexes: [PartialKeyPath<ROIndexed> & Sendable] = [\.name]
    var id: Int
    var name: String
}

private struct ROOther: Model {
    var id: Int
}

/// A database opened on a read-only store reads what the file holds and writes nothing; a model
/// whose stored schema would need a change is refused with the reason, not written.
struct ReadOnlyDatabaseTests {
    @Test func readsWithoutWritingAndRefusesSchemaChanges() throws {
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [ROPlain.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in for i in 0..<10 { try tx.insert(ROPlain(id: i, name: "n\(i)")) } }
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        do {
            let db = try Database(path: path, models: [ROPlain.self], options: StoreOptions(readOnly: true))
            #expect(db.objects(ROPlain.self).count == 10)
            #expect(try db.object(ROPlain.self, key: 3) == ROPlain(id: 3, name: "n3"))
            #expect(throws: (any Error).self) { try db.write { tx in try tx.insert(ROPlain(id: 99, name: "x")) } }
        }
        for models: [any Model.Type] in [[ROPlain.self, ROOther.self], [ROIndexed.self]] {
            #expect {
                _ = try Database(path: path, models: models, options: StoreOptions(readOnly: true))
            } throws: { error in
                guard case StrataError.migrationRequired(let reasons) = error else { return false }
                return reasons.contains { $0.contains("read-only") }
            }
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before, "a read-only open changed the file")
    }
}
