import Testing
import Foundation
@testable import Strata

struct User: Model, Equatable {
    static let indexes: [PartialKeyPath<User> & Sendable] = [\.age, \.status]
    static let uniqueIndexes: [PartialKeyPath<User> & Sendable] = [\.email]
    var id: String
    var email: String
    var age: Int
    var status: Status
    var nickname: String?
}

struct Note: Model, Equatable {
    var id: Int?
    var text: String
    var author: Ref<User>?
}

func databasePath(_ name: String = #function) -> String {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("strata-db-tests-\(getpid())")
    try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    return dir.appendingPathComponent("\(name.filter { $0.isLetter })-\(UInt32.random(in: 0...UInt32.max)).strata").path
}

struct DatabaseTests {
    @Test func insertReadUpdateDelete() throws {
        let db = try Database.inMemory(models: [User.self, Note.self])
        let ana = User(id: "u1", email: "ana@x", age: 30, status: .online, nickname: nil)
        try db.write { tx in
            try tx.insert(ana)
            try tx.insert(User(id: "u2", email: "ben@x", age: 25, status: .away, nickname: "b"))
            #expect(throws: StrataError.duplicateKey(model: "User", key: "u1")) { try tx.insert(ana) }
            #expect(throws: StrataError.self) { try tx.insert(User(id: "u3", email: "ana@x", age: 1, status: .away)) }
            // The failed inserts left the transaction usable and wrote nothing.
            #expect(try tx.count(User.self) == 2)
            try tx.update(User.self, key: "u1") { $0.age = 31 }
            #expect(throws: StrataError.notFound(model: "User", key: "zz")) { try tx.update(User.self, key: "zz") { $0.age = 0 } }
        }
        #expect(try db.object(User.self, key: "u1")?.age == 31)
        #expect(db.objects(User.self).count == 2)
        let older = db.objects(User.self).filter(#Predicate { $0.age > 26 })
        #expect(older.map(\.id) == ["u1"])
        let sorted = db.objects(User.self).sorted(by: SortDescriptor(\.age))
        #expect(sorted.map(\.id) == ["u2", "u1"])
        try db.write { tx in
            #expect(try tx.delete(User.self, key: "u2"))
            #expect(try !tx.delete(User.self, key: "u2"))
            // The freed email may be taken again.
            try tx.insert(User(id: "u4", email: "ben@x", age: 40, status: .offline))
        }
        #expect(db.objects(User.self).keys == ["u1", "u4"])
    }

    @Test func autoIncrementReturnsStoredObject() throws {
        let db = try Database.inMemory(models: [User.self, Note.self])
        let notes = try db.write { tx in
            try (0..<3).map { try tx.insert(Note(id: nil, text: "n\($0)", author: Ref("u1"))) }
        }
        #expect(notes.map(\.id) == [1, 2, 3])
        #expect(try db.object(Note.self, key: 2)?.text == "n1")
        #expect(try db.object(Note.self, key: 3)?.author == Ref("u1"))
    }

    @Test func writesAreVisibleInsideAndRolledBackOnThrow() throws {
        let db = try Database.inMemory(models: [User.self, Note.self])
        struct Boom: Error {}
        #expect(throws: Boom.self) {
            try db.write { tx in
                try tx.insert(User(id: "a", email: "a", age: 1, status: .online))
                #expect(try tx.object(User.self, key: "a") != nil)
                #expect(try tx.objects(User.self, where: #Predicate { $0.age == 1 }).count == 1)
                throw Boom()
            }
        }
        #expect(try db.object(User.self, key: "a") == nil)
    }

    @Test func reopenKeepsDataAndSchema() throws {
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [User.self, Note.self])
            try db.write { tx in
                for i in 0..<500 { try tx.insert(User(id: "u\(i)", email: "e\(i)", age: i % 50, status: .online)) }
            }
        }
        let db = try Database(path: path, models: [User.self, Note.self])
        #expect(db.objects(User.self).count == 500)
        #expect(db.objects(User.self).filter(#Predicate { $0.age == 7 }).count == 10)
        try db.write { tx in try tx.deleteAll(User.self) }
        #expect(db.objects(User.self).count == 0)
    }
}

/// A model whose primary key is a computed property over a stored field.
struct Account: Model, Equatable {
    var email: String
    var balance: Int
    var id: String { email }
}

enum KeyChange {
    struct Account: Model {
        static let modelName = "Account"
        var id: Int
        var balance: Int
    }
}

struct ComputedKeyTests {
    @Test func computedIDIsThePrimaryKey() throws {
        let path = databasePath()
        let db = try Database(path: path, models: [Account.self])
        try db.write { tx in
            try tx.insert(Account(email: "b@x", balance: 2))
            try tx.insert(Account(email: "a@x", balance: 1))
            #expect(throws: StrataError.duplicateKey(model: "Account", key: "a@x")) { try tx.insert(Account(email: "a@x", balance: 9)) }
        }
        #expect(try db.object(Account.self, key: "a@x")?.balance == 1)
        #expect(db.objects(Account.self).keys == ["a@x", "b@x"])
        let wanted = "b@x"
        let found = db.objects(Account.self).filter(#Predicate { $0.id == wanted })
        #expect(found.map(\.balance) == [2])
        #expect(found.explain().contains("primary key"))
        // Changing the key's type is not additive.
        #expect {
            _ = try Database(path: path, models: [KeyChange.Account.self])
        } throws: { error in
            guard case StrataError.migrationRequired(let differences) = error else { return false }
            return differences.contains { $0.contains("key type changed") }
        }
    }
}

struct DeleteWhereTests {
    @Test func deleteWhereRemovesExactlyTheMatches() throws {
        let db = try Database.inMemory(models: [Item.self])
        let items = QueryTests.makeItems(300, seed: 5)
        try db.write { tx in try tx.insert(contentsOf: items) }
        let cut = 0.5
        let removed = try db.write { tx in try tx.delete(Item.self, where: #Predicate { $0.score < cut }) }
        #expect(removed == items.filter { $0.score < cut }.count)
        #expect(db.objects(Item.self).map(\.id) == items.filter { $0.score >= cut }.map(\.id).sorted())
        // Indexes follow: nothing found through the score index below the cut.
        #expect(db.objects(Item.self).filter(#Predicate { $0.score < cut }).count == 0)
        let c = 3
        #expect(db.objects(Item.self).filter(#Predicate { $0.category == c }).count == items.filter { $0.score >= cut && $0.category == c }.count)
    }
}

/// A NaN date is a legal `Date`, but Foundation's `description` traps on it: messages and
/// explanations that show one must not.
private struct NaNDated: Model {
    static let indexDescriptors: [IndexDescriptor<NaNDated>] = [.unique(\.at)]
    var id: Date
    var at: Date
}

extension DatabaseTests {
    @Test func nanDatesInErrorsAndExplanationsAreDescribed() throws {
        let db = try Database.inMemory(models: [NaNDated.self])
        let nan = Date(timeIntervalSinceReferenceDate: .nan)
        try db.write { tx in try tx.insert(NaNDated(id: nan, at: nan)) }
        do {
            try db.write { tx in try tx.insert(NaNDated(id: nan, at: Date())) }
            Issue.record("a second NaN key was accepted")
        } catch let error as StrataError {
            #expect("\(error)".contains("nan"), "\(error)")
        }
        do {
            try db.write { tx in try tx.insert(NaNDated(id: Date(), at: nan)) }
            Issue.record("a second NaN in a unique index was accepted")
        } catch let error as StrataError {
            #expect("\(error)".contains("nan"), "\(error)")
        }
        let results = db.objects(NaNDated.self).filter(#Predicate { $0.at == nan })
        #expect(results.count == 0)
        #expect(results.explain().contains("nan"), "\(results.explain())")
    }
}

extension DatabaseTests {
    /// Every way of opening a database reports an engine failure as `StrataError.storage`.
    @Test func openingAFileThatIsNotADatabaseThrowsAStrataErrorEveryWay() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(repeating: 0x5A, count: 16_384).write(to: URL(fileURLWithPath: path))
        #expect(throws: StrataError.self) { try Database(path: path, models: [User.self]) }
        #expect(throws: StrataError.self) { try Database(path: path, models: [User.self], schemaVersion: 2) { _ in } }
    }

    /// The stored-schema check every snapshot makes compares bytes, a change of one byte included
    /// (a handle must not go on with a schema another handle changed in place).
    @Test func storedSchemaComparisonSeesEveryByte() {
        let schema: [UInt8] = Array("Doc:id,name;index name".utf8)
        func same(_ other: [UInt8]) -> Bool { other.withUnsafeBytes { ModelRegistry.sameBytes($0, schema) } }
        #expect(same(schema))
        for i in schema.indices {
            var changed = schema
            changed[i] ^= 0x20
            #expect(!same(changed), "byte \(i)")
        }
        #expect(!same(Array(schema.dropLast())))
        #expect(!same(schema + [0]))
        #expect(!same([]))
        #expect([UInt8]().withUnsafeBytes { ModelRegistry.sameBytes($0, []) })
    }
}
