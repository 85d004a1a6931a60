import Foundation
import Testing

@testable import Strata

// The schema probe and the stored key found wrong by a review (2026-12-07).

/// A property wrapper around a string, coded as the bare string.
@propertyWrapper struct SPRBox: Codable, Sendable, Hashable {
    var wrappedValue: String
    init(wrappedValue: String) { self.wrappedValue = wrappedValue }
    init(from decoder: any Decoder) throws { wrappedValue = try decoder.singleValueContainer().decode(String.self) }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(wrappedValue)
    }
}

/// An `id` behind a property wrapper (Mirror names its storage `_id`).
struct SPRWrappedKey: Model, Equatable {
    @SPRBox var id: String
    var name: String
}

/// A computed `id` beside a stored field coded "id" (a server's payload).
struct SPRPost: Model, Equatable {
    var id: Int { postID }
    var postID: Int
    var title: String
    enum CodingKeys: String, CodingKey {
        case postID = "id"
        case title
    }
}

/// A raw-value enum that is not CaseIterable.
enum SPRPriority: String, Codable, Sendable { case low, high, urgent }

/// Two properties of that enum with their coding keys crossed: `priority` is stored as "p2" and
/// `legacyPriority` under the name "priority".
struct SPRTask: Model, Equatable {
    static let indexes: [PartialKeyPath<SPRTask> & Sendable] = [\.priority]
    var id: Int
    var priority: SPRPriority
    var legacyPriority: SPRPriority
    enum CodingKeys: String, CodingKey {
        case id
        case priority = "p2"
        case legacyPriority = "priority"
    }
}

/// The same crossing done by a hand-written `init(from:)` and `encode(to:)`.
struct SPRHandTask: Model, Equatable {
    var id: Int
    var priority: SPRPriority
    var legacyPriority: SPRPriority
    enum Keys: String, CodingKey { case id, p2, priority }
    init(id: Int, priority: SPRPriority, legacyPriority: SPRPriority) {
        self.id = id
        self.priority = priority
        self.legacyPriority = legacyPriority
    }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        id = try c.decode(Int.self, forKey: .id)
        legacyPriority = try c.decode(SPRPriority.self, forKey: .priority)
        priority = try c.decode(SPRPriority.self, forKey: .p2)
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Keys.self)
        try c.encode(id, forKey: .id)
        try c.encode(legacyPriority, forKey: .priority)
        try c.encode(priority, forKey: .p2)
    }
}

struct SchemaProbeReviewTests {
    /// A model whose key is not a stored field of its own name reopens: the catalog records a
    /// computed key, and a field coded "id" (the wrapper's, or another property's) was taken for
    /// the key at the next open, which then asked for a migration every time.
    @Test func modelsWhoseKeyIsNotAFieldNamedIdReopen() throws {
        let path = NSTemporaryDirectory() + "strata-schema-review-\(UUID().uuidString).strata"
        defer { for suffix in ["", "-lock"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        do {
            let db = try Database(path: path, models: [SPRWrappedKey.self, SPRPost.self])
            try db.write { tx in
                try tx.insert(SPRWrappedKey(id: "a", name: "x"))
                try tx.insert(SPRPost(postID: 7, title: "t"))
            }
            db.close()
        }
        for round in 0..<2 {
            let db = try Database(path: path, models: [SPRWrappedKey.self, SPRPost.self])
            #expect(try db.object(SPRWrappedKey.self, key: "a") == SPRWrappedKey(id: "a", name: "x"))
            #expect(try db.object(SPRPost.self, key: 7) == SPRPost(postID: 7, title: round == 0 ? "t" : "u"))
            #expect(db.objects(SPRWrappedKey.self).filter(#Predicate { $0.id == "a" }).count == 1)
            try db.write { tx in try tx.update(SPRPost.self, key: 7) { $0.title = "u" } }
            db.close()
        }
    }

    /// Queries and an index on one of two properties of an enum type that is not CaseIterable,
    /// whose coding keys cross (one property's key is the other's name), read that property's
    /// field: the probe's shared first case had let the same-name rule map `priority` to the
    /// field of `legacyPriority`. Against `predicate.evaluate`.
    @Test func crossedCodingKeysOfOneEnumTypeReadTheirOwnFields() throws {
        let db = try Database.inMemory(models: [SPRTask.self, SPRHandTask.self])
        var tasks: [SPRTask] = []
        var hand: [SPRHandTask] = []
        let cases: [SPRPriority] = [.low, .high, .urgent]
        for (i, (p, l)) in cases.flatMap({ p in cases.map { (p, $0) } }).enumerated() {
            tasks.append(SPRTask(id: i, priority: p, legacyPriority: l))
            hand.append(SPRHandTask(id: i, priority: p, legacyPriority: l))
        }
        try db.write { tx in
            try tx.insert(contentsOf: tasks)
            try tx.insert(contentsOf: hand)
        }
        for value in cases {
            let onTask = [#Predicate<SPRTask> { $0.priority == value }, #Predicate<SPRTask> { $0.legacyPriority == value }]
            for predicate in onTask {
                let expected = try tasks.filter { try predicate.evaluate($0) }.map(\.id)
                #expect(try db.objects(SPRTask.self).filter(predicate).fetch().map(\.id).sorted() == expected, "\(value)")
            }
            let onHand = [#Predicate<SPRHandTask> { $0.priority == value }, #Predicate<SPRHandTask> { $0.legacyPriority == value }]
            for predicate in onHand {
                let expected = try hand.filter { try predicate.evaluate($0) }.map(\.id)
                #expect(try db.objects(SPRHandTask.self).filter(predicate).fetch().map(\.id).sorted() == expected, "\(value)")
            }
        }
    }
}

/// A wrapper around a reference, coded as the bare reference.
@propertyWrapper struct SPRRefBox<Target: Model>: Codable, Sendable, Hashable where Target.ID: Hashable {
    var wrappedValue: Ref<Target>
    init(wrappedValue: Ref<Target>) { self.wrappedValue = wrappedValue }
    init(from decoder: any Decoder) throws { wrappedValue = try decoder.singleValueContainer().decode(Ref<Target>.self) }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(wrappedValue)
    }
}

struct SPRAuthor: Model, Equatable {
    var id: Int
    var name: String
}

struct SPRBook: Model, Equatable {
    var id: Int
    @SPRRefBox var author: Ref<SPRAuthor>
}

extension SchemaProbeReviewTests {
    /// A `Ref` behind a property wrapper is stored as the reference it wraps, as a wrapper of any
    /// other stored type is: every insert threw "expected a Ref with a storable key".
    @Test func aWrappedReferenceIsStored() throws {
        let db = try Database.inMemory(models: [SPRAuthor.self, SPRBook.self])
        try db.write { tx in
            try tx.insert(SPRAuthor(id: 7, name: "Ann"))
            try tx.insert(SPRBook(id: 1, author: Ref(7)))
            try tx.insert(SPRBook(id: 2, author: Ref(8)))
        }
        #expect(try db.object(SPRBook.self, key: 1) == SPRBook(id: 1, author: Ref(7)))
        let ann = Ref<SPRAuthor>(7)
        #expect(db.objects(SPRBook.self).filter(#Predicate { $0.author == ann }).map(\.id) == [1])
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
    }
}

extension SchemaProbeReviewTests {
    /// `upsert(_:key:json:)` takes a wrapped id (`@SPRBox var id`) from `key`, as any id: it threw
    /// `incompleteObject [id]`. So does a computed id read from a field coded "id" (SPRPost).
    @Test func anUpsertTakesAWrappedIdFromItsKey() throws {
        let db = try Database.inMemory(models: [SPRWrappedKey.self, SPRPost.self])
        let created = try db.write { tx in try tx.upsert(SPRWrappedKey.self, key: "k", json: Data(#"{"name": "x"}"#.utf8)) }
        #expect(created.created && created.object == SPRWrappedKey(id: "k", name: "x"))
        #expect(try db.object(SPRWrappedKey.self, key: "k") == SPRWrappedKey(id: "k", name: "x"))
        let post = try db.write { tx in try tx.upsert(SPRPost.self, key: 7, json: Data(#"{"title": "t"}"#.utf8)) }
        #expect(post.created && post.object.id == 7 && post.object.title == "t")
    }
}
