import Testing
import Foundation
import StrataStorage
@testable import Strata

private struct Twice: Model, Equatable {
    static let modelName = "Twice"
    static let indexes: [PartialKeyPath<Twice> & Sendable] = [\.code, \.group, \.group]
    static let uniqueIndexes: [PartialKeyPath<Twice> & Sendable] = [\.code]
    var id: Int
    var code: String
    var group: Int
}

private struct Once: Model, Equatable {
    static let modelName = "Twice"
    static let uniqueIndexes: [PartialKeyPath<Once> & Sendable] = [\.code]
    static let indexes: [PartialKeyPath<Once> & Sendable] = [\.group]
    var id: Int
    var code: String
    var group: Int
}

/// A field declared in both `indexes` and `uniqueIndexes` (or twice in one list) has one index,
/// the unique one: two indexes of one path would write two kinds of entries into one tree.
struct IndexDeclarationTests {
    @Test func aFieldDeclaredTwiceHasOneUniqueIndex() throws {
        let path = databasePath()
        let db = try Database(path: path, models: [Twice.self], options: StoreOptions(durability: .noSync))
        try db.write { tx in for i in 0..<50 { try tx.insert(Twice(id: i, code: "c\(i)", group: i % 4)) } }
        let info = try db.info(Twice.self)
        #expect(info.stored.indexes == [IndexSchema(path: "code", unique: true), IndexSchema(path: "group", unique: false)])
        #expect(throws: StrataError.self) { try db.write { tx in try tx.insert(Twice(id: 99, code: "c7", group: 0)) } }
        #expect(db.objects(Twice.self).filter(#Predicate { $0.code == "c7" }).count == 1)
        #expect(try db.objects(Twice.self).filter(#Predicate { $0.code == "c7" }).fetch().map(\.id) == [7])
        #expect(db.objects(Twice.self).filter(#Predicate { $0.group == 1 }).count == 13)
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
    }

    /// A file whose stored schema lists one path twice (as a build that allowed it wrote) is
    /// repaired at open: the shared tree is dropped and the remaining index rebuilt.
    @Test func aStoredSchemaWithAPathTwiceIsRebuilt() throws {
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [Once.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in for i in 0..<30 { try tx.insert(Once(id: i, code: "c\(i)", group: i % 3)) } }
            // Rewrite the stored schema as the old build would have: `code` twice, and the shared
            // tree holding a second kind of entry.
            try db.store.write { txn in
                let schemas = try #require(try txn.tree(Catalog.schemaTree))
                let bytes = try #require(try schemas.get(Array("Twice".utf8)))
                var stored = try bytes.withUnsafeBytes { try Catalog.decode($0) }
                stored.indexes.append(IndexSchema(path: "code", unique: false))
                try schemas.put(Array("Twice".utf8), try Catalog.encode(stored))
                try txn.tree("i:Twice:code")?.put(Array("junk".utf8), [])
            }
        }
        let db = try Database(path: path, models: [Once.self], options: StoreOptions(durability: .noSync))
        #expect(try db.info(Once.self).stored.indexes.filter { $0.path == "code" } == [IndexSchema(path: "code", unique: true)])
        #expect(db.objects(Once.self).filter(#Predicate { $0.code == "c4" }).count == 1)
        #expect(try db.objects(Once.self).filter(#Predicate { $0.code == "c4" }).fetch().map(\.id) == [4])
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
    }
}
