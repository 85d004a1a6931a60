import Foundation
import Testing

@testable import Strata

// Bugs found by the CodecEdgeHunt hunt: each test failed before its fix. Models are in this file.

/// A struct with no stored properties: legal `Codable` (JSON `{}`), used as a marker or a
/// placeholder for settings that come later.
struct CENothing: Codable, Sendable, Equatable {}

struct CEEmptyStructs: Model, Equatable {
    var id: Int
    var nothing: CENothing
    var maybe: CENothing?
    var list: [CENothing]
}

/// A field whose coding key is the empty string, indexed.
struct CEEmptyKeyIndexed: Model, Equatable {
    static let indexes: [PartialKeyPath<CEEmptyKeyIndexed> & Sendable] = [\.empty]
    enum CodingKeys: String, CodingKey {
        case id
        case empty = ""
    }
    var id: Int
    var empty: Int
}

@Suite struct CodecEdgeHuntFindingsTests {
    /// ModelsAndSchema.md: a field may be "a nested `Codable` struct, stored inline in the
    /// object", and the list of what is not supported names no empty struct. A struct with no
    /// fields is refused when the database opens ("CENothing decodes nothing"), as a field, an
    /// optional field and an array element alike, although a payload enum's case without values
    /// (`case none`, stored as an empty object) is stored fine and `JSONEncoder`/`JSONDecoder`
    /// round-trip it as `{}`. Expected: it opens and the object reads back equal (and `maybe`
    /// keeps `.some(CENothing())` apart from nil, as JSON does).
    @Test func emptyStructFieldsAreStored() throws {
        let value = CEEmptyStructs(id: 1, nothing: CENothing(), maybe: CENothing(), list: [CENothing(), CENothing()])
        let other = CEEmptyStructs(id: 2, nothing: CENothing(), maybe: nil, list: [])
        #expect(try chJSONRoundTrip(value) == value)
        let db = try Database.inMemory(models: [CEEmptyStructs.self])
        try db.write { tx in try tx.insert(contentsOf: [value, other]) }
        #expect(try db.objects(CEEmptyStructs.self).fetch() == [value, other])
        #expect(try db.objects(CEEmptyStructs.self).filter(#Predicate { $0.maybe == nil }).fetch().map(\.id) == [2])
        // And after a reopen, from the stored schema.
        let path = NSTemporaryDirectory() + "strata-empty-struct-\(UUID().uuidString).strata"
        defer { for suffix in ["", "-lock"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        do {
            let file = try Database(path: path, models: [CEEmptyStructs.self])
            try file.write { tx in try tx.insert(contentsOf: [value, other]) }
            file.close()
        }
        let reopened = try Database(path: path, models: [CEEmptyStructs.self])
        #expect(try reopened.objects(CEEmptyStructs.self).fetch() == [value, other])
        #expect(try StoredObjects.check(in: reopened.store).problems.isEmpty)
        reopened.close()
    }

    /// An index on a field whose coding key is "" is refused at open with a reason that does not
    /// apply: "two renamed fields of one enum type that is not CaseIterable look alike: make the
    /// enum CaseIterable" (the field is an `Int`; there is no enum). Queries on the field work
    /// (evaluated on decoded objects), and indexes on keys " " and "ключ🔑" work. The stored path
    /// "" is the one FieldNames' ProbeMarking.record uses for the root (`tokens[""]`), so the key
    /// path is never matched to its field (Sources/Strata/Schema/FieldNames.swift, `record(_:at:)`
    /// and the `!path.isEmpty` candidate filter in `build`). Expected: the index works, or the
    /// error says that a field stored under an empty name cannot be indexed (rename it in
    /// CodingKeys), as the message already does for a stored name containing '.'.
    @Test func anIndexOnAnEmptyStoredNameWorksOrSaysWhy() throws {
        do {
            let db = try Database.inMemory(models: [CEEmptyKeyIndexed.self])
            let objects = (1...4).map { CEEmptyKeyIndexed(id: $0, empty: 5 - $0) }
            try db.write { tx in try tx.insert(contentsOf: objects) }
            let c = 3
            #expect(try db.objects(CEEmptyKeyIndexed.self).filter(#Predicate { $0.empty < c }).fetch().map(\.id) == [3, 4])
        } catch {
            let text = "\(error)"
            #expect(text.contains("an empty stored name"), "\(text)")
        }
    }
}
