import Foundation
import StrataStorage
import Testing

@testable import Strata

// Indexes whose value is reached through an optional struct, or is an optional array (FORMAT.md
// §8.3, `taggedValues`): a nil on the way must be a value of its own, never the key of a present one.
// Before, a nil on the way was 0x00 and a present leaf its bare encoding, which can be 0x00 too
// (`false`) or begin with it (an unsigned number, an empty string): a unique index refused
// objects whose values differ, and took two nil arrays for one value.

struct TaggedAddress: Codable, Sendable, Equatable {
    var isPrimary: Bool
    var zip: UInt64
    var tags: [Bool]
    var city = "Paris"
}

struct TaggedOwner: Model, Equatable {
    static let uniqueIndexes: [PartialKeyPath<TaggedOwner> & Sendable] = [\.labels, \.address?.tags]
    static let indexes: [PartialKeyPath<TaggedOwner> & Sendable] = [\.address?.zip, \.address?.isPrimary]
    static let indexDescriptors: [IndexDescriptor<TaggedOwner>] = [
        .unique(\.address?.zip, \.name), .on(\.address?.city, \.name, collation: .caseInsensitive),
    ]
    var id: UInt64
    var name: String
    var address: TaggedAddress?
    var labels: [Bool]?
}

/// A unique flag in an optional struct: nil, false and true, once each.
struct TaggedFlag: Model, Equatable {
    static let uniqueIndexes: [PartialKeyPath<TaggedFlag> & Sendable] = [\.address?.isPrimary]
    var id: Int
    var address: TaggedAddress?
}

/// A note without an index, then (same model name) with one on its text.
struct LongNote: Model {
    var id: Int
    var text: String
}

struct LongNoteIndexed: Model {
    static var modelName: String { "LongNote" }
    static let indexes: [PartialKeyPath<LongNoteIndexed> & Sendable] = [\.text]
    var id: Int
    var text: String
}

struct OptionalPathIndexTests {
    static func owners() -> [TaggedOwner] {
        [
            TaggedOwner(id: 1, name: "ABCDEFG", address: nil, labels: nil),
            TaggedOwner(id: 2, name: "", address: TaggedAddress(isPrimary: false, zip: 0x0041_4243_4445_4647, tags: []), labels: [false]),
            TaggedOwner(id: 3, name: "c", address: TaggedAddress(isPrimary: true, zip: 5, tags: [false]), labels: nil),
        ]
    }

    /// An object whose keys are the same in both layouts but for `address?.tags` (present).
    static let plain = TaggedOwner(id: 4, name: "d", address: TaggedAddress(isPrimary: true, zip: 7, tags: [true]), labels: [true])

    /// Objects whose values differ as Swift reads them (`address?.isPrimary` nil and false; nil
    /// and `[false]` labels; two nil arrays; a nil zip and name "ABCDEFG" against a zip whose
    /// bytes spell it and name "") are all stored, and a unique index still refuses real
    /// duplicates: two nil `address?.isPrimary`, two `true`.
    @Test func uniqueIndexesTellNilOnTheWayFromPresentValues() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let db = try Database(path: path, models: [TaggedOwner.self], options: StoreOptions(durability: .noSync))
        let all = Self.owners()
        try db.write { tx in try tx.insert(contentsOf: all) }
        #expect(Array(db.objects(TaggedOwner.self)).sorted { $0.id < $1.id } == all.sorted { $0.id < $1.id })
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
        let flags = [nil, false, true].enumerated().map { i, flag in
            TaggedFlag(id: i, address: flag.map { TaggedAddress(isPrimary: $0, zip: 0, tags: []) })
        }
        let flagDB = try Database(store: db.store, models: [TaggedFlag.self])
        try flagDB.write { tx in try tx.insert(contentsOf: flags) }
        #expect(Array(flagDB.objects(TaggedFlag.self)).sorted { $0.id < $1.id } == flags)
        for (i, flag) in flags.enumerated() {
            #expect(throws: StrataError.self) { try flagDB.write { tx in try tx.insert(TaggedFlag(id: 10 + i, address: flag.address)) } }
        }
        // Duplicates as Swift compares the values are still refused.
        #expect(throws: StrataError.self) {
            try db.write { tx in try tx.insert(TaggedOwner(id: 9, name: "x", address: TaggedAddress(isPrimary: true, zip: 9, tags: [false]), labels: nil)) }
        }
        #expect(throws: StrataError.self) {
            try db.write { tx in try tx.insert(TaggedOwner(id: 9, name: "ABCDEFG", address: nil, labels: nil)) }
        }
        #expect(throws: StrataError.self) {
            try db.write { tx in try tx.insert(TaggedOwner(id: 9, name: "e", address: nil, labels: [false])) }
        }
    }

    /// Queries on the tagged indexes answer as `predicate.evaluate` does, for equality, nil and
    /// ranges, with every object's value spelled out.
    @Test func queriesOnTaggedIndexesMatchFoundation() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let db = try Database(path: path, models: [TaggedOwner.self], options: StoreOptions(durability: .noSync))
        let all = Self.owners() + [Self.plain]
        try db.write { tx in try tx.insert(contentsOf: all) }
        let five: UInt64? = 5
        let predicates: [Predicate<TaggedOwner>] = [
            #Predicate { $0.address?.isPrimary == false },
            #Predicate { $0.address?.isPrimary == true },
            #Predicate { $0.address?.isPrimary == nil },
            #Predicate { $0.address?.zip == five },
            #Predicate { $0.address?.zip == nil },
            #Predicate { $0.address?.zip == 0x0041_4243_4445_4647 && $0.name == "" },
            #Predicate { $0.address?.zip == nil && $0.name == "ABCDEFG" },
            #Predicate { ($0.address?.zip ?? 0) > 4 },
            #Predicate { $0.address?.city == "Paris" },
            #Predicate { $0.address?.city == "Paris" && $0.name == "c" },
            #Predicate { $0.address?.city == nil && $0.name == "ABCDEFG" },
        ]
        for (i, predicate) in predicates.enumerated() {
            let expected = try all.filter { try predicate.evaluate($0) }.map(\.id).sorted()
            let got = db.objects(TaggedOwner.self).filter(predicate).map(\.id).sorted()
            #expect(got == expected, "predicate \(i)")
            #expect(try db.objects(TaggedOwner.self).filter(predicate).fetchCount() == expected.count, "count of predicate \(i)")
        }
    }

    /// The stored schema marks exactly the indexes whose layout differs (`taggedValues`); a plain
    /// index on a top-level field is written as before.
    @Test func theCatalogMarksTaggedIndexes() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let db = try Database(path: path, models: [TaggedOwner.self, TaggedFlag.self, RoomMessage.self], options: StoreOptions(durability: .noSync))
        let schemas = try StoredObjects.schemas(in: db.store)
        let owner = try #require(schemas.first { $0.name == "TaggedOwner" })
        #expect(owner.indexes.allSatisfy { $0.isTagged }, "\(owner.indexes)")
        #expect(schemas.first { $0.name == "TaggedFlag" }?.indexes.map(\.kind) == [.taggedValues])
        let messages = try #require(schemas.first { $0.name == "RoomMessage" })
        #expect(messages.indexes.allSatisfy { $0.kind == nil }, "\(messages.indexes)")
    }

    /// A file whose indexes were written before the tags (no `taggedValues` in the catalog,
    /// entries of the old layout) has them rebuilt by a read-write open, at a lower schema
    /// version too, and is refused by a read-only one with a message that says why.
    @Test func indexesWrittenBeforeTheTagsAreRebuilt() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        // The old layout held id 1 (every value nil) beside this one, not beside ids 2 or 3.
        let all = [Self.owners()[0], Self.plain]
        do {
            // At schema version 2: the rebuild below is by an open at version 0 (a widget, a
            // tool), which may apply it, as it changes no declaration.
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            let db = try Database(store: store, models: [TaggedOwner.self], schemaVersion: 2)
            try db.write { tx in try tx.insert(contentsOf: all) }
            db.close()
        }
        // Rewrite the catalog and the index trees as a build before the tags left them.
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let catalog = try #require(try txn.tree(Catalog.schemaTree))
            let entry = try #require(try catalog.get(Array("TaggedOwner".utf8)))
            var schema = try entry.withUnsafeBytes { try Catalog.decode($0) }
            for i in schema.indexes.indices { schema.indexes[i].kind = nil }
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            _ = try catalog.put(Array("TaggedOwner".utf8), Array(try encoder.encode(schema)))
            for index in schema.indexes {
                let tree = try #require(try txn.tree(index.treeName(model: "TaggedOwner")))
                var keys: [[UInt8]] = []
                try tree.makeCursor().forEach { key, _ in
                    keys.append(Array(key))
                    return true
                }
                for key in keys { _ = try tree.delete(key) }
                for owner in all {
                    let records = try #require(try txn.tree("m:TaggedOwner"))
                    let record = try #require(try records.get(Self.key(owner.id)))
                    let pairs = try record.withUnsafeBytes {
                        try IndexEntries.entries($0, schema: schema.object, index: index, primaryKey: Self.key(owner.id)).pairs
                    }
                    for pair in pairs { _ = try tree.put(Array(pair.key), Array(pair.value)) }
                }
            }
        }
        store.close()
        // The old entries are consistent with the old catalog.
        do {
            let old = try Store(path: path, options: StoreOptions(durability: .noSync, readOnly: true))
            #expect(try StoredObjects.check(in: old).problems.isEmpty)
            old.close()
        }
        do {
            let readOnly = try Store(path: path, options: StoreOptions(readOnly: true))
            defer { readOnly.close() }
            #expect {
                _ = try Database(store: readOnly, models: [TaggedOwner.self])
            } throws: { error in
                "\(error)".contains("through an optional")
            }
        }
        let db = try Database(path: path, models: [TaggedOwner.self], options: StoreOptions(durability: .noSync))
        #expect(try StoredObjects.schemas(in: db.store).first { $0.name == "TaggedOwner" }?.indexes.allSatisfy { $0.isTagged } == true)
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
        try db.write { tx in try tx.insert(contentsOf: Self.owners().dropFirst()) }
        let got = db.objects(TaggedOwner.self).filter(#Predicate { $0.address?.isPrimary == false }).map(\.id)
        #expect(got == [2])
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
    }

    /// An index built as the database opens (newly declared, or rebuilt for a new layout) over a
    /// value too long for its keys names the object and the index, as a write would, and leaves
    /// the file as it was.
    @Test func anIndexBuiltAtOpenNamesAValueTooLongForItsKeys() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [LongNote.self], options: StoreOptions(durability: .noSync))
            let limit = try db.store.write { txn in txn.maxKeySize }
            try db.write { tx in try tx.insert(contentsOf: [LongNote(id: 1, text: "short"), LongNote(id: 2, text: String(repeating: "x", count: limit))]) }
            db.close()
        }
        #expect {
            _ = try Database(path: path, models: [LongNoteIndexed.self], options: StoreOptions(durability: .noSync))
        } throws: { error in
            guard case StrataError.invalidInput(let message) = error else { return false }
            return message.contains("i:LongNote:text") && message.contains("2") && message.contains("as the database opened")
        }
        let db = try Database(path: path, models: [LongNote.self], options: StoreOptions(durability: .noSync))
        #expect(try db.objects(LongNote.self).fetchCount() == 2)
        #expect(try StoredObjects.schemas(in: db.store).first { $0.name == "LongNote" }?.indexes.isEmpty == true)
    }

    static func key(_ id: UInt64) -> [UInt8] {
        var out: [UInt8] = []
        KeyEncoding.appendUInt(id, to: &out)
        return out
    }
}
