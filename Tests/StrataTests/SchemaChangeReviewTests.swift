import Foundation
import StrataStorage
import Testing

@testable import Strata

// Schema changes found wrong by a review of reconciliation and migrations (2026-12-07).

struct SCContactV1: Model {
    static var modelName: String { "SCContact" }
    static let uniqueIndexes: [PartialKeyPath<SCContactV1> & Sendable] = [\.email]
    static let indexDescriptors: [IndexDescriptor<SCContactV1>] = [.on(\.email, collation: .caseInsensitive), .fullText(\.email)]
    var id: Int
    var email: String
}

struct SCContactV2: Model {
    static var modelName: String { "SCContact" }
    static let uniqueIndexes: [PartialKeyPath<SCContactV2> & Sendable] = [\.email]
    var id: Int
    var email: String
}

struct SCItemV1: Model {
    static var modelName: String { "SCItem" }
    var id: Int
    var name: String
}

struct SCItemV2: Model {
    static var modelName: String { "SCItem" }
    var id: Int
    var name: String
    var extra: Int
}

/// An optional field whose type changes (String? to Int?).
struct SCScoreV1: Model {
    static var modelName: String { "SCScore" }
    var id: Int
    var score: String?
}

struct SCScoreV2: Model, Equatable {
    static var modelName: String { "SCScore" }
    var id: Int
    var score: Int?
}

struct SCAccountV1: Model {
    static var modelName: String { "SCAccount" }
    var id: String
    var email: String
}

struct SCAccountV2: Model {
    static var modelName: String { "SCAccount" }
    var email: String
    var id: String { email }
}

struct SCAuthorV1: Model {
    static var modelName: String { "SCAuthor" }
    var id: Int
    var name: String
}

struct SCAuthorV2: Model {
    static var modelName: String { "SCAuthor" }
    var id: Int?
    var name: String
}

struct SCBookV1: Model {
    static var modelName: String { "SCBook" }
    var id: Int
    var author: Ref<SCAuthorV1>
    var coauthors: [Ref<SCAuthorV1>]
    var credits: [String: Ref<SCAuthorV1>]
}

struct SCBookV2: Model {
    static var modelName: String { "SCBook" }
    var id: Int
    var author: Ref<SCAuthorV2>
    var coauthors: [Ref<SCAuthorV2>]
    var credits: [String: Ref<SCAuthorV2>]
}

struct SchemaChangeReviewTests {
    /// Dropping an index (collated, full-text) that shares its path with a kept unique index in
    /// another tree keeps the unique index as it is: it was rebuilt into its own full tree, which
    /// failed on every object's own entry, so the file no longer opened.
    @Test func droppingAnIndexKeepsAnotherOnTheSamePath() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [SCContactV1.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try tx.insert(contentsOf: [SCContactV1(id: 1, email: "a@x"), SCContactV1(id: 2, email: "B@x")]) }
            db.close()
        }
        for _ in 0..<2 {
            let db = try Database(path: path, models: [SCContactV2.self], options: StoreOptions(durability: .noSync))
            #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
            let names = try db.store.read { try $0.treeNames() }
            #expect(names.filter { $0.hasPrefix("i:SCContact:") } == ["i:SCContact:email"], "\(names)")
            #expect(throws: StrataError.self) { try db.write { tx in try tx.insert(SCContactV2(id: 3, email: "a@x")) } }
            #expect(db.objects(SCContactV2.self).filter(#Predicate { $0.email == "B@x" }).map(\.id) == [2])
            db.close()
        }
        // And back: the dropped indexes are built again beside the unique one.
        let db = try Database(path: path, models: [SCContactV1.self], options: StoreOptions(durability: .noSync))
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
        #expect(try db.objects(SCContactV1.self).search(\.email, "x").fetchCount() == 2)
    }

    /// A migration whose closure swallows the error of a write that failed after it began
    /// (`insert(contentsOf:)` with a duplicate after a new object) fails the open, as `write`
    /// refuses to commit such a transaction: before, the open committed the half of it.
    @Test func aMigrationThatSwallowsAHalfDoneWriteDoesNotCommit() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [SCItemV1.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try tx.insert(SCItemV1(id: 1, name: "one")) }
            db.close()
        }
        #expect {
            _ = try Database(path: path, models: [SCItemV2.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { migration in
                try migration.enumerateObjects("SCItem") { _, new in new["extra"] = .int(7) }
                _ = try? migration.transaction.insert(contentsOf: [SCItemV2(id: 100, name: "new", extra: 0), SCItemV2(id: 1, name: "dup", extra: 0)])
            }
        } throws: { error in
            guard case StrataError.invalidInput(let message) = error else { return false }
            return message.contains("failed after it had begun")
        }
        let db = try Database(path: path, models: [SCItemV1.self], options: StoreOptions(durability: .noSync))
        #expect(db.objects(SCItemV1.self).map(\.id) == [1])
    }

    /// An `enumerateObjects` that throws after it converted some objects — a moved key colliding,
    /// or the closure's own error — and whose error the migration catches fails the open: the
    /// half-converted model was committed (object 2 deleted from its key and never reinserted).
    @Test(arguments: ["collision", "throwing closure"])
    func aMigrationThatSwallowsAHalfDoneConversionDoesNotCommit(_ failure: String) throws {
        struct Refused: Error {}
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [SCItemV1.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try tx.insert(contentsOf: [1, 2, 3].map { SCItemV1(id: $0, name: "n\($0)") }) }
            db.close()
        }
        #expect(throws: StrataError.self) {
            _ = try Database(path: path, models: [SCItemV2.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { migration in
                _ = try? migration.enumerateObjects("SCItem") { old, new in
                    new["extra"] = .int(7)
                    if failure == "collision" {
                        if old.key != .int(3) { new["id"] = .int(5) }  // 1 and 2 both move to 5
                    } else if old.key == .int(2) {
                        throw Refused()
                    }
                }
                try migration.enumerateObjects("SCItem") { _, new in new["extra"] = .int(7) }
            }
        }
        let db = try Database(path: path, models: [SCItemV1.self], options: StoreOptions(durability: .noSync))
        #expect(db.objects(SCItemV1.self).map(\.id) == [1, 2, 3])
        #expect(db.objects(SCItemV1.self).map(\.name) == ["n1", "n2", "n3"])
    }

    /// An optional field whose type changed, left unconverted by the migration, is named as a
    /// non-optional one is (the docs' promise): it was dropped from every object without a word.
    /// Assigned nil (or a value) it is what the migration says; an object holding nil needs nothing.
    @Test func anOptionalFieldLeftUnconvertedIsNamed() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [SCScoreV1.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try tx.insert(contentsOf: [SCScoreV1(id: 1, score: "5"), SCScoreV1(id: 2, score: nil)]) }
            db.close()
        }
        #expect {
            _ = try Database(path: path, models: [SCScoreV2.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { migration in
                try migration.enumerateObjects("SCScore") { _, _ in }
            }
        } throws: { error in
            guard case StrataError.typeMismatch(let model, let field, let reason) = error else { return false }
            return model == "SCScore 1" && field == "score" && reason.contains("String") && reason.contains("new[\"score\"]")
        }
        let cleared = try Database(path: path, models: [SCScoreV2.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { migration in
            try migration.enumerateObjects("SCScore") { old, new in
                if old.key == .int(1) { new["score"] = nil }
            }
        }
        #expect(cleared.objects(SCScoreV2.self).map(\.score) == [nil, nil])
        let second = databasePath()
        defer { try? FileManager.default.removeItem(atPath: second) }
        do {
            let db = try Database(path: second, models: [SCScoreV1.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try tx.insert(SCScoreV1(id: 1, score: "5")) }
            db.close()
        }
        let converted = try Database(path: second, models: [SCScoreV2.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { migration in
            try migration.enumerateObjects("SCScore") { old, new in new["score"] = old["score"]?.stringValue.flatMap { Int64($0) }.map { .int($0) } }
        }
        #expect(converted.objects(SCScoreV2.self).map(\.score) == [5])
    }

    /// A stored primary key made computed is a difference that needs a migration (which moves
    /// each object to its computed key): before, the open went on with every object under its
    /// old key, where `object(key:)` of the new one found nothing and an insert made a copy.
    @Test func aStoredKeyMadeComputedNeedsAMigration() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [SCAccountV1.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try tx.insert(SCAccountV1(id: "u1", email: "a@x")) }
            db.close()
        }
        #expect {
            _ = try Database(path: path, models: [SCAccountV2.self], options: StoreOptions(durability: .noSync))
        } throws: { error in
            guard case StrataError.migrationRequired(let reasons) = error else { return false }
            return reasons.contains { $0.contains("now computed") }
        }
        let db = try Database(path: path, models: [SCAccountV2.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { _ in }
        #expect(try db.object(SCAccountV2.self, key: "a@x")?.email == "a@x")
        #expect(try db.object(SCAccountV2.self, key: "u1") == nil)
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
    }

    /// A reference to a model whose key type changed (Int made Int?) is written anew as the new
    /// key type encodes it when a migration gives it back (`new["author"] = old["author"]`): the
    /// value equal to the one read was skipped, and the reference kept the old encoding, which
    /// no longer decodes.
    @Test func referencesToAModelWhoseKeyTypeChangedAreRewritten() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [SCAuthorV1.self, SCBookV1.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in
                try tx.insert(SCAuthorV1(id: 1, name: "Ana"))
                try tx.insert(SCBookV1(id: 7, author: Ref(1), coauthors: [Ref(1), Ref(2)], credits: ["editor": Ref(1)]))
            }
            db.close()
        }
        let db = try Database(path: path, models: [SCAuthorV2.self, SCBookV2.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) {
            migration in
            try migration.enumerateObjects("SCBook") { old, new in
                for field in ["author", "coauthors", "credits"] { new[field] = old[field] }
            }
        }
        let book = try #require(try db.object(SCBookV2.self, key: 7))
        #expect(book.author.id == 1)
        #expect(book.coauthors.map(\.id) == [1, 2])
        #expect(book.credits["editor"]?.id == 1)
        #expect(try db.object(SCAuthorV2.self, key: book.author.id)?.name == "Ana")
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
    }
}

/// A compound unique index through an optional struct (so its entries are tagged), and a second
/// struct on another of its paths that the next version makes optional.
struct SCPlace: Codable, Sendable, Equatable { var city: String }
struct SCTag: Codable, Sendable, Equatable { var label: String }

struct SCSpotV1: Model {
    static var modelName: String { "SCSpot" }
    static let indexDescriptors: [IndexDescriptor<SCSpotV1>] = [.unique(\.place?.city, \.tag.label)]
    var id: Int
    var place: SCPlace?
    var tag: SCTag
}

struct SCSpotV2: Model {
    static var modelName: String { "SCSpot" }
    static let indexDescriptors: [IndexDescriptor<SCSpotV2>] = [.unique(\.place?.city, \.tag?.label)]
    var id: Int
    var place: SCPlace?
    var tag: SCTag?
}

extension SchemaChangeReviewTests {
    /// The struct on one path of a tagged compound index made optional: that path's entries now
    /// carry a tag, so the index is rebuilt at open, as a single-field index whose tagging changes
    /// is. Kept, its old entries were not found (a query on both fields missed the object, a
    /// duplicate passed the unique index, an update left the old entry behind).
    @Test func aStructMadeOptionalUnderATaggedCompoundIndexRebuildsIt() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [SCSpotV1.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try tx.insert(SCSpotV1(id: 1, place: SCPlace(city: "A"), tag: SCTag(label: "x"))) }
            db.close()
        }
        let db = try Database(path: path, models: [SCSpotV2.self], options: StoreOptions(durability: .noSync))
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
        let found = db.objects(SCSpotV2.self).filter(#Predicate { $0.place?.city == "A" && $0.tag?.label == "x" })
        #expect(found.map(\.id) == [1])
        #expect(found.count == 1)
        #expect(throws: StrataError.self) {
            try db.write { tx in try tx.insert(SCSpotV2(id: 2, place: SCPlace(city: "A"), tag: SCTag(label: "x"))) }
        }
        try db.write { tx in _ = try tx.update(SCSpotV2.self, key: 1) { $0.tag = SCTag(label: "y") } }
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
        #expect(db.objects(SCSpotV2.self).filter(#Predicate { $0.place?.city == "A" && $0.tag?.label == "x" }).count == 0)
    }
}

/// A `Ref(nil)` to a model with an automatic key, inside a nested struct a migration rewrites.
struct SCAuto: Model {
    var id: Int?
    var name: String
}

struct SCEntry: Codable, Sendable, Equatable {
    var item: Ref<SCAuto>
    var n: Int
}

struct SCHolderV1: Model {
    static var modelName: String { "SCHolder" }
    var id: Int
    var entry: SCEntry
}

struct SCHolderV2: Model {
    static var modelName: String { "SCHolder" }
    var id: Int
    var entry: SCEntry
    var extra: Int
}

extension SchemaChangeReviewTests {
    /// A nested struct read by a migration and written back holds its `Ref(nil)` as read: the nil
    /// key was written as a present one and refused ("expected Int64, found null").
    @Test func aMigrationWritesBackANilReference() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [SCAuto.self, SCHolderV1.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in
                try tx.insert(SCHolderV1(id: 1, entry: SCEntry(item: Ref(nil), n: 1)))
                try tx.insert(SCHolderV1(id: 2, entry: SCEntry(item: Ref(7), n: 1)))
            }
            db.close()
        }
        let db = try Database(path: path, models: [SCAuto.self, SCHolderV2.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) {
            migration in
            try migration.enumerateObjects("SCHolder") { old, new in
                var entry = try #require(old["entry"]?.objectValue)
                entry["n"] = .int(2)
                new["entry"] = .object(entry)
                new["extra"] = .int(1)
            }
        }
        #expect(db.objects(SCHolderV2.self).map(\.entry) == [SCEntry(item: Ref(nil), n: 2), SCEntry(item: Ref(7), n: 2)])
    }
}

/// One stored model under two Swift names (a rename keeping `modelName`), nested struct included.
struct SCMetaA: Codable, Sendable, Equatable { var tag: String }
struct SCMetaB: Codable, Sendable, Equatable { var tag: String }

struct SCNoteA: Model, Equatable {
    static var modelName: String { "SCNote" }
    var id: Int
    var meta: SCMetaA
}

struct SCNoteB: Model, Equatable {
    static var modelName: String { "SCNote" }
    var id: Int
    var meta: SCMetaB
}

extension SchemaChangeReviewTests {
    /// A Swift type renamed, its `modelName` kept, is no schema change: the open wrote the new
    /// names into the catalog, and the handle still open with the old names then failed with
    /// `migrationRequired`; an open at a lower version, and a read-only one, were refused.
    @Test func aRenamedTypeIsNoSchemaChange() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let a = try Database(path: path, models: [SCNoteA.self], schemaVersion: 2, options: StoreOptions(durability: .noSync)) { _ in }
        try a.write { tx in try tx.insert(SCNoteA(id: 1, meta: SCMetaA(tag: "x"))) }
        let b = try Database(path: path, models: [SCNoteB.self], schemaVersion: 2, options: StoreOptions(durability: .noSync)) { _ in }
        #expect(try b.object(SCNoteB.self, key: 1) == SCNoteB(id: 1, meta: SCMetaB(tag: "x")))
        try b.write { tx in try tx.insert(SCNoteB(id: 2, meta: SCMetaB(tag: "y"))) }
        #expect(try a.object(SCNoteA.self, key: 2) == SCNoteA(id: 2, meta: SCMetaA(tag: "y")))
        try a.write { tx in try tx.insert(SCNoteA(id: 3, meta: SCMetaA(tag: "z"))) }
        #expect(b.objects(SCNoteB.self).map(\.meta.tag) == ["x", "y", "z"])
        // A tool or a widget without the version, and a read-only open, under the other name.
        let lower = try Database(path: path, models: [SCNoteB.self], options: StoreOptions(durability: .noSync))
        #expect(lower.objects(SCNoteB.self).count == 3)
        let readOnly = try Database(path: path, models: [SCNoteB.self], options: StoreOptions(readOnly: true))
        #expect(readOnly.objects(SCNoteB.self).count == 3)
        #expect(try a.object(SCNoteA.self, key: 1)?.meta.tag == "x")
    }
}

/// An optional field inside a nested struct whose type changes (String? to Int?).
struct SCInnerV1: Codable, Sendable { var score: String? }
struct SCInnerV2: Codable, Sendable, Equatable { var score: Int? }

struct SCWrapV1: Model {
    static var modelName: String { "SCWrap" }
    var id: Int
    var inner: SCInnerV1
}

struct SCWrapV2: Model {
    static var modelName: String { "SCWrap" }
    var id: Int
    var inner: SCInnerV2
}

extension SchemaChangeReviewTests {
    /// The same inside a nested struct the migration carries over whole: the inner field was
    /// dropped without a word. Given anew (converted, or cleared) it is what the migration says.
    @Test func aNestedOptionalFieldLeftUnconvertedIsNamed() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [SCWrapV1.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try tx.insert(contentsOf: [SCWrapV1(id: 1, inner: SCInnerV1(score: "5")), SCWrapV1(id: 2, inner: SCInnerV1(score: nil))]) }
            db.close()
        }
        #expect {
            _ = try Database(path: path, models: [SCWrapV2.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { migration in
                try migration.enumerateObjects("SCWrap") { _, _ in }
            }
        } throws: { error in
            guard case StrataError.typeMismatch(let model, let field, let reason) = error else { return false }
            return model == "SCWrap 1" && field == "inner.score" && reason.contains("String")
        }
        // Given back as it was read, it is still unconverted.
        #expect(throws: StrataError.self) {
            _ = try Database(path: path, models: [SCWrapV2.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { migration in
                try migration.enumerateObjects("SCWrap") { old, new in new["inner"] = old["inner"] }
            }
        }
        let db = try Database(path: path, models: [SCWrapV2.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { migration in
            try migration.enumerateObjects("SCWrap") { old, new in
                let score = old["inner"]?["score"]?.stringValue.flatMap { Int64($0) }
                new["inner"] = .object(["score": score.map { .int($0) } ?? .null])
            }
        }
        #expect(db.objects(SCWrapV2.self).map(\.inner) == [SCInnerV2(score: 5), SCInnerV2(score: nil)])
    }
}

/// One stored model whose key type (an enum) is renamed.
enum SCDayA: Int, Codable, Sendable { case mon, tue }
enum SCDayB: Int, Codable, Sendable { case mon, tue }

struct SCDayNoteA: Model, Equatable {
    static var modelName: String { "SCDayNote" }
    var id: SCDayA
    var note: String
}

struct SCDayNoteB: Model, Equatable {
    static var modelName: String { "SCDayNote" }
    var id: SCDayB
    var note: String
}

extension SchemaChangeReviewTests {
    /// A renamed key type is no schema change either: "key type changed from SCDayA to SCDayB"
    /// asked for a migration, and refused read-only and lower-version opens.
    @Test func aRenamedKeyTypeIsNoSchemaChange() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let a = try Database(path: path, models: [SCDayNoteA.self], schemaVersion: 2, options: StoreOptions(durability: .noSync)) { _ in }
        try a.write { tx in try tx.insert(SCDayNoteA(id: .tue, note: "x")) }
        let b = try Database(path: path, models: [SCDayNoteB.self], schemaVersion: 2, options: StoreOptions(durability: .noSync)) { _ in }
        #expect(try b.object(SCDayNoteB.self, key: .tue) == SCDayNoteB(id: .tue, note: "x"))
        try b.write { tx in try tx.insert(SCDayNoteB(id: .mon, note: "y")) }
        #expect(try a.object(SCDayNoteA.self, key: .mon)?.note == "y")
        let readOnly = try Database(path: path, models: [SCDayNoteB.self], options: StoreOptions(readOnly: true))
        #expect(readOnly.objects(SCDayNoteB.self).count == 2)
    }
}
