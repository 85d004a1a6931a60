import Testing
import Foundation
import StrataStorage
@testable import Strata

private struct SVAddress: Codable, Equatable, Sendable {
    var city: String
    var zip: Int
}

private struct SVPerson: Model, Equatable {
    static let indexes: [PartialKeyPath<SVPerson> & Sendable] = [\.age]
    var id: String
    var name: String
    var age: Int
    var count: UInt16
    var home: SVAddress
    var nick: String?
}

/// SVPerson with one more optional field: opening with it gives the field a new id.
private struct SVPersonGrown: Model, Equatable {
    static let modelName = "SVPerson"
    static let indexes: [PartialKeyPath<SVPersonGrown> & Sendable] = [\.age]
    var id: String
    var name: String
    var age: Int
    var count: UInt16
    var home: SVAddress
    var nick: String?
    var extra: String?
}

private func setID(_ name: String, _ id: Int) -> @Sendable (inout ObjectSchema) -> Void {
    { object in
        if let i = object.fields.firstIndex(where: { $0.name == name }) { object.fields[i].id = id }
    }
}

private func nested(_ edit: @escaping @Sendable (inout ObjectSchema) -> Void) -> @Sendable (inout ObjectSchema) -> Void {
    { object in
        guard let i = object.fields.firstIndex(where: { $0.name == "home" }), case .object(var home) = object.fields[i].type else { return }
        edit(&home)
        object.fields[i].type = .object(home)
    }
}

private func setType(_ name: String, _ type: FieldType) -> @Sendable (inout ObjectSchema) -> Void {
    { object in
        if let i = object.fields.firstIndex(where: { $0.name == name }) { object.fields[i].type = type }
    }
}

/// Stored schemas a hostile or damaged file may hold: each is refused when the catalog is read,
/// as a corrupt file, before any of its numbers reaches arithmetic or the record layer.
struct StoredSchemaValidationTests {
    /// A file holding a few SVPerson objects whose stored schema `edit` then rewrites (under the
    /// catalog key SVPerson, whatever the edit does to the name).
    private func file(_ edit: (inout StoredModelSchema) -> Void) throws -> String {
        let path = databasePath()
        let db = try Database(path: path, models: [SVPerson.self], options: StoreOptions(durability: .noSync))
        try db.write { tx in
            for i in 0..<5 {
                try tx.insert(
                    SVPerson(id: "p\(i)", name: "n\(i)", age: i, count: UInt16(i), home: SVAddress(city: "c\(i)", zip: i), nick: i % 2 == 0 ? "k" : nil))
            }
        }
        try db.store.write { txn in
            let schemas = try #require(try txn.tree(Catalog.schemaTree))
            let bytes = try #require(try schemas.get(Array("SVPerson".utf8)))
            var stored = try bytes.withUnsafeBytes { try Catalog.decode($0) }
            edit(&stored)
            try schemas.put(Array("SVPerson".utf8), try Catalog.encode(stored))
        }
        return path
    }

    /// Each damage, and words the error must contain to say what and where.
    private static let damage: [(String, @Sendable (inout StoredModelSchema) -> Void, [String])] = [
        ("field id Int.max", { setID("age", Int.max)(&$0.object) }, ["SVPerson.age", "9223372036854775807"]),
        ("field id -1", { setID("nick", -1)(&$0.object) }, ["SVPerson.nick", "-1"]),
        ("field id above Int32.max", { setID("name", Int(Int32.max) + 1)(&$0.object) }, ["SVPerson.name", "2147483648"]),
        ("field id Int.min", { setID("name", Int.min)(&$0.object) }, ["SVPerson.name"]),
        ("two fields share an id", { setID("age", 1)(&$0.object) }, ["SVPerson.age", "id 1"]),
        ("nested field id -1", { nested(setID("zip", -1))(&$0.object) }, ["SVPerson.home.zip", "-1"]),
        ("nested field id Int.max", { nested(setID("city", Int.max))(&$0.object) }, ["SVPerson.home.city"]),
        ("nested fields share an id", { nested(setID("zip", 0))(&$0.object) }, ["SVPerson.home.zip", "id 0"]),
        ("integer width 0", { setType("count", .int(bits: 0, signed: false))(&$0.object) }, ["SVPerson.count", "0"]),
        ("integer width -1", { setType("count", .int(bits: -1, signed: false))(&$0.object) }, ["SVPerson.count", "-1"]),
        ("integer width 128", { setType("age", .int(bits: 128, signed: true))(&$0.object) }, ["SVPerson.age", "128"]),
        (
            "integer width inside an optional array", { setType("nick", .optional(.array(.int(bits: 7, signed: true))))(&$0.object) },
            ["SVPerson.nick", "7"]
        ),
        ("key integer width", { $0.key = .int(bits: -64, signed: false) }, ["SVPerson", "key", "-64"]),
        ("name differs from its catalog key", { $0.name = "Other" }, ["SVPerson", "Other"]),
        // From the review of 2026-12-07: `strata check` exited 6 (an I/O error) without a report.
        ("index tree name past 255 bytes", { $0.indexes[0].path = String(repeating: "a", count: 300) }, ["SVPerson", "255 bytes"]),
        // A compound index over an object or an array: `check` built every combination of the
        // values (10^10 for two arrays of 100,000).
        (
            "compound index over an object", { $0.indexes.append(IndexSchema(paths: ["age", "home"], unique: false, collation: nil, kind: nil)) },
            ["SVPerson", "age,home", "home"]
        ),
        (
            "compound index over an array",
            {
                setType("nick", .optional(.array(.string)))(&$0.object)
                $0.indexes.append(IndexSchema(paths: ["nick", "age"], unique: false, collation: nil, kind: nil))
            }, ["SVPerson", "nick,age", "nick"]
        ),
    ]

    private func expectCorrupt(_ what: String, _ words: [String], _ body: () throws -> Void) {
        do {
            try body()
            Issue.record("\(what): no error")
        } catch StrataError.corruptRecord(let reason) {
            for word in words { #expect(reason.contains(word), "\(what): \(reason)") }
        } catch {
            Issue.record("\(what): \(error)")
        }
    }

    @Test(arguments: damage.indices)
    func aDamagedStoredSchemaIsACorruptFile(_ i: Int) throws {
        let (what, edit, words) = Self.damage[i]
        let path = try file(edit)
        expectCorrupt(what + ", open", words) { _ = try Database(path: path, models: [SVPerson.self], options: StoreOptions(durability: .noSync)) }
        expectCorrupt(what + ", read-only open", words) { _ = try Database(path: path, models: [SVPerson.self], options: StoreOptions(readOnly: true)) }
        let store = try Store(path: path, options: StoreOptions(readOnly: true))
        expectCorrupt(what + ", schemas", words) { _ = try StoredObjects.schemas(in: store) }
        expectCorrupt(what + ", forEach", words) { try StoredObjects.forEach(in: store, model: "SVPerson") { _, _ in true } }
        let report = try StoredObjects.check(in: store)
        #expect(report.problems.count == 1 && report.problems[0].contains("schema catalog"), "\(what): \(report.problems)")
    }

    /// An old catalog names a computed key's type by its Swift name alone: one of a hundred
    /// thousand `Optional<` layers was parsed by recursion, copying the rest of the name at each
    /// level (gigabytes, then a stack overflow in `strata dump` and `check`). It names no type
    /// Strata stores: the records are listed without decoding their keys' type.
    @Test func aKeyTypeNameOfManyOptionalsIsNoType() throws {
        let layers = 100_000
        let path = try file {
            $0.key = nil
            $0.keyField = "none"
            $0.keyType = String(repeating: "Optional<", count: layers) + "Int" + String(repeating: ">", count: layers)
        }
        let store = try Store(path: path, options: StoreOptions(readOnly: true))
        #expect(try StoredObjects.schemas(in: store).first?.keyFieldType == nil)
        _ = try? StoredObjects.forEach(in: store, model: "SVPerson") { _, _ in true }
        _ = try StoredObjects.check(in: store)
        #expect(FieldType(primitiveTypeName: "Optional<Optional<Int>>") == .optional(.optional(.int(bits: 64, signed: true))))
    }

    /// The largest id is a field id like any other: read, written and queried.
    @Test func theLargestFieldIDWorks() throws {
        let path = try file { setID("nick", Int(Int32.max))(&$0.object) }
        let db = try Database(path: path, models: [SVPerson.self], options: StoreOptions(durability: .noSync))
        try db.write { tx in try tx.insert(SVPerson(id: "q", name: "q", age: 9, count: 1, home: SVAddress(city: "x", zip: 1), nick: "big")) }
        #expect(try db.object(SVPerson.self, key: "q")?.nick == "big")
        #expect(try db.objects(SVPerson.self).filter(#Predicate { $0.nick == "big" }).fetch().map(\.id) == ["q"])
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
    }

    /// A new field after the largest id has no id left: the open says so, rather than storing
    /// an id that records cannot hold.
    @Test func aNewFieldAfterTheLargestIDIsRefused() throws {
        let path = try file { setID("nick", Int(Int32.max))(&$0.object) }
        do {
            _ = try Database(path: path, models: [SVPersonGrown.self], options: StoreOptions(durability: .noSync))
            Issue.record("the open gave the new field an id")
        } catch StrataError.unsupportedType(let model, let field, let reason) {
            #expect(model == "SVPerson")
            #expect(field == "extra")
            #expect(reason.contains("2147483647"), "\(reason)")
        }
        // Nothing was written: the file still opens with the old type.
        let db = try Database(path: path, models: [SVPerson.self], options: StoreOptions(durability: .noSync))
        #expect(db.objects(SVPerson.self).count == 5)
    }
}
