import Testing
import Foundation
import StrataStorage
@testable import Strata

// Compound indexes (issue 16): declaration, stored schema, maintenance, planning, `strata check`,
// migrations. The differential tests (CompoundDifferentialTests) compare their plans with
// Foundation on generated queries.

struct RoomMessage: Model, Equatable {
    static let indexDescriptors: [IndexDescriptor<RoomMessage>] = [
        .on(\.roomId, \.createdAt),
        .unique(\.roomId, \.seq),
    ]
    var id: Int
    var roomId: Int
    var seq: Int
    var createdAt: Date
    var text: String
}

/// RoomMessage's stored shape without its compound indexes (same model name), for migrations.
struct PlainRoomMessage: Model {
    static var modelName: String { "RoomMessage" }
    var id: Int
    var roomId: Int
    var seq: Int
    var createdAt: Date
    var text: String
}

struct BadArrayCompound: Model {
    static let indexDescriptors: [IndexDescriptor<BadArrayCompound>] = [.on(\.a, \.tags)]
    var id: Int
    var a: Int
    var tags: [String]
}

struct BadFullText: Model {
    static let indexDescriptors: [IndexDescriptor<BadFullText>] = [.fullText(\.shout)]
    var id: Int
    var name: String
    var shout: String { name.uppercased() }  // computed: not stored, so not indexable
}

struct BadCollation: Model {
    static let indexDescriptors: [IndexDescriptor<BadCollation>] = [.on(\.a, \.b, collation: .caseInsensitive)]
    var id: Int
    var a: Int
    var b: Double
}

struct ConflictingIndexes: Model {
    static let indexDescriptors: [IndexDescriptor<ConflictingIndexes>] = [.on(\.a, \.b), .unique(\.a, \.b)]
    var id: Int
    var a: Int
    var b: Int
}

struct CompoundIndexTests {
    /// 6 rooms, several messages per room sharing a timestamp (ties go by key in both directions).
    func messages() -> [RoomMessage] {
        (0..<240).map { i in
            RoomMessage(
                id: 1000 - i * 3, roomId: i % 6, seq: i / 6, createdAt: Date(timeIntervalSinceReferenceDate: Double((i / 6) % 13)),
                text: "message \(i)")
        }
    }

    func expected(_ all: [RoomMessage], room: Int, newestFirst: Bool) -> [Int] {
        all.filter { $0.roomId == room }.sorted { a, b in
            if a.createdAt != b.createdAt { return newestFirst ? a.createdAt > b.createdAt : a.createdAt < b.createdAt }
            return a.id < b.id
        }.map(\.id)
    }

    @Test func aRoomsNewestPageWalksTheCompoundIndex() throws {
        let db = try Database.inMemory(models: [RoomMessage.self])
        let all = messages()
        try db.write { tx in try tx.insert(contentsOf: all) }
        for room in [0, 3, 5, 9] {
            for newestFirst in [true, false] {
                let results = db.objects(RoomMessage.self)
                    .filter(#Predicate { $0.roomId == room })
                    .sorted(by: SortDescriptor(\.createdAt, order: newestFirst ? .reverse : .forward))
                #expect(results.map(\.id) == expected(all, room: room, newestFirst: newestFirst))
                #expect(results.prefix(7).map(\.id) == Array(expected(all, room: room, newestFirst: newestFirst).prefix(7)))
                #expect(results.offset(5).prefix(7).keys == Array(expected(all, room: room, newestFirst: newestFirst).dropFirst(5).prefix(7)))
                let plan = results.prefix(50).explain()
                #expect(
                    plan.contains(
                        "scan index i:RoomMessage:roomId,createdAt in \(newestFirst ? "descending" : "ascending") order (sort by createdAt) within roomId == \(room)"
                    ), "\(plan)")
                #expect(plan.contains("no residual filter"), "\(plan)")
            }
        }
        // A range on the second field narrows the walk; the count is answered by the index alone.
        let since = Date(timeIntervalSinceReferenceDate: 6)
        let recent = db.objects(RoomMessage.self).filter(#Predicate { $0.roomId == 2 && $0.createdAt >= since })
        let ids = all.filter { $0.roomId == 2 && $0.createdAt >= since }.map(\.id).sorted()
        #expect(recent.count == ids.count)
        #expect(recent.keys == ids)
        let plan = recent.explain()
        #expect(plan.contains("index i:RoomMessage:roomId,createdAt compound for roomId == 2, createdAt >= "), "\(plan)")
        #expect(plan.contains("no residual filter"), "\(plan)")
        // A condition the index cannot hold is a residual filter.
        let texts = db.objects(RoomMessage.self).filter(#Predicate { $0.roomId == 2 && $0.text.contains("1") })
        #expect(texts.map(\.id) == all.filter { $0.roomId == 2 && $0.text.contains("1") }.map(\.id).sorted())
        #expect(texts.explain().contains("residual filter"))
    }

    @Test func countsOnACompoundIndexDecodeNothing() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let all = messages()
        do {
            let db = try Database(path: path, models: [RoomMessage.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try tx.insert(contentsOf: all) }
            db.close()
        }
        // Every record of room 4 made undecodable: a count the index answers does not notice.
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let records = try #require(try txn.tree("m:RoomMessage"))
            for message in all where message.roomId == 4 {
                var key: [UInt8] = []
                KeyEncoding.appendInt(Int64(message.id), to: &key)
                try records.put(key, [200, 1, 2])
            }
        }
        store.close()
        let db = try Database(path: path, models: [RoomMessage.self])
        let cutoff = Date(timeIntervalSinceReferenceDate: 3)
        let counted = db.objects(RoomMessage.self).filter(#Predicate { $0.roomId == 4 && $0.createdAt > cutoff })
        #expect(try counted.fetchCount() == all.filter { $0.roomId == 4 && $0.createdAt > cutoff }.count)
        #expect(counted.keys.count == counted.count)
        // Reading the objects does decode them, and says so.
        #expect(throws: StrataError.self) { try counted.fetch() }
    }

    @Test func uniqueCompoundIndexesRejectDuplicatePairs() throws {
        let db = try Database.inMemory(models: [RoomMessage.self])
        let date = Date(timeIntervalSinceReferenceDate: 0)
        try db.write { tx in
            try tx.insert(RoomMessage(id: 1, roomId: 1, seq: 1, createdAt: date, text: "a"))
            try tx.insert(RoomMessage(id: 2, roomId: 2, seq: 1, createdAt: date, text: "b"))  // another room: fine
            #expect(throws: StrataError.uniqueViolation(model: "RoomMessage", field: "roomId, seq", value: "1, 1")) {
                try tx.insert(RoomMessage(id: 3, roomId: 1, seq: 1, createdAt: date, text: "c"))
            }
            #expect(throws: StrataError.self) { try tx.update(RoomMessage.self, key: 2) { $0.roomId = 1 } }
            // The failures wrote nothing; a free pair is fine, and so is rewriting an object's own.
            try tx.update(RoomMessage.self, key: 2) {
                $0.seq = 2; $0.roomId = 1
            }
            try tx.update(RoomMessage.self, key: 1) { $0.text = "a2" }
            #expect(try tx.count(RoomMessage.self) == 2)
        }
        #expect(db.objects(RoomMessage.self).filter(#Predicate { $0.roomId == 1 && $0.seq == 2 }).keys == [2])
        try db.write { tx in
            try tx.delete(RoomMessage.self, key: 1)
            try tx.insert(RoomMessage(id: 3, roomId: 1, seq: 1, createdAt: date, text: "c"))  // freed by the delete
        }
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
    }

    @Test func theStoredSchemaRecordsCompoundIndexesAndOldCatalogsStillRead() throws {
        let db = try Database.inMemory(models: [RoomMessage.self])
        let stored = try #require(try StoredObjects.schemas(in: db.store).first)
        #expect(stored.indexes.map(\.summary) == ["roomId, createdAt", "roomId, seq (unique)"])
        #expect(stored.indexes[0].fields == ["roomId", "createdAt"])
        #expect(stored.indexes[0].treeName(model: "RoomMessage") == "i:RoomMessage:roomId,createdAt")
        // A catalog entry written before compound indexes existed decodes as the single-field index it was.
        let old = try JSONDecoder().decode(IndexSchema.self, from: Data(#"{"path":"roomId","unique":false}"#.utf8))
        #expect(old == IndexSchema(path: "roomId", unique: false))
        #expect(old.isSingleValue && old.paths == ["roomId"])
        // ... and single-field indexes are written as before (no new keys).
        let json = String(
            decoding: try Catalog.encode(
                StoredModelSchema(
                    name: "X", keyType: "Int", keyField: "id", key: nil, object: ObjectSchema(typeName: "X", fields: []),
                    indexes: [IndexSchema(path: "a", unique: true)], schemaVersion: 0)), as: UTF8.self)
        #expect(json.contains(#""indexes":[{"path":"a","unique":true}]"#), "\(json)")
    }

    @Test func addingAndDroppingACompoundIndexMigratesByItself() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let all = messages()
        do {
            let db = try Database(path: path, models: [PlainRoomMessage.self])
            try db.write { tx in
                for m in all { try tx.insert(PlainRoomMessage(id: m.id, roomId: m.roomId, seq: m.seq, createdAt: m.createdAt, text: m.text)) }
            }
            db.close()
        }
        do {
            let db = try Database(path: path, models: [RoomMessage.self])
            let names = try db.store.read { try $0.treeNames() }
            #expect(names.contains("i:RoomMessage:roomId,createdAt") && names.contains("i:RoomMessage:roomId,seq"))
            let report = try StoredObjects.check(in: db.store)
            #expect(report.problems.isEmpty, "\(report.problems)")
            #expect(report.indexEntries == 2 * all.count)
            let page = db.objects(RoomMessage.self).filter(#Predicate { $0.roomId == 1 }).sorted(by: SortDescriptor(\.createdAt, order: .reverse)).prefix(10)
            #expect(page.map(\.id) == Array(expected(all, room: 1, newestFirst: true).prefix(10)))
            db.close()
        }
        do {
            let db = try Database(path: path, models: [PlainRoomMessage.self])
            let names = try db.store.read { try $0.treeNames() }
            #expect(!names.contains { $0.hasPrefix("i:RoomMessage") }, "\(names)")
            #expect(try StoredObjects.schemas(in: db.store).first?.indexes.isEmpty == true)
            db.close()
        }
    }

    @Test func aDamagedCompoundIndexIsFoundByCheck() throws {
        let db = try Database.inMemory(models: [RoomMessage.self])
        try db.write { tx in try tx.insert(contentsOf: messages().prefix(30)) }
        try db.store.write { txn in
            let tree = try #require(try txn.tree("i:RoomMessage:roomId,createdAt"))
            let cursor = try tree.cursor()
            #expect(try cursor.first())
            _ = try tree.delete(Array(cursor.key))
        }
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.contains { $0.contains("lack their entry in index roomId, createdAt") }, "\(report.problems)")
    }

    @Test func declarationsThatCannotBeIndexedThrowNamingTheField() throws {
        #expect(
            throws: StrataError.unsupportedType(
                model: "BadArrayCompound", field: "tags", reason: "a compound or collated index needs stored values, not [String]")
        ) {
            try Database.inMemory(models: [BadArrayCompound.self])
        }
        #expect(throws: StrataError.self) { try Database.inMemory(models: [BadFullText.self]) }
        #expect(throws: StrataError.self) { try Database.inMemory(models: [BadCollation.self]) }
    }

    /// An index declared both plain and unique is one unique index (as a field in both `indexes`
    /// and `uniqueIndexes` is).
    @Test func anIndexDeclaredPlainAndUniqueIsUnique() throws {
        let db = try Database.inMemory(models: [ConflictingIndexes.self])
        #expect(try db.info(ConflictingIndexes.self).stored.indexes.map(\.unique) == [true])
        try db.write { tx in try tx.insert(ConflictingIndexes(id: 1, a: 1, b: 2)) }
        #expect(throws: StrataError.self) { try db.write { tx in try tx.insert(ConflictingIndexes(id: 2, a: 1, b: 2)) } }
    }
}
