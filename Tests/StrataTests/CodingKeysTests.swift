import Testing
import Foundation
import Dispatch
@testable import Strata

// Models whose stored names are not their property names: server field names through
// `CodingKeys` (Rocket.Chat style), a primary key stored as `_id`, nested renamed fields, two
// properties whose names are swapped, and a hand-written `init(from:)` in its own order.

struct CKUser: Model, Equatable {
    var id: String
    var name: String
    enum CodingKeys: String, CodingKey { case id = "_id", name = "username" }
}

enum CKKind: String, Codable, Sendable, CaseIterable { case plain, system, thread }

struct CKMeta: Codable, Sendable, Equatable {
    var kind: CKKind
    var score: Int
    var pinned: Bool
    enum CodingKeys: String, CodingKey { case kind = "k", score = "sc", pinned = "p" }
}

struct CKMessage: Model, Equatable {
    static let indexes: [PartialKeyPath<CKMessage> & Sendable] = [\.roomId, \.tags, \.meta.score, \.created, \.author]
    static let uniqueIndexes: [PartialKeyPath<CKMessage> & Sendable] = [\.slug]
    var id: String
    var roomId: String
    var text: String
    var created: Date
    var slug: String
    var tags: [String]
    var author: Ref<CKUser>?
    var meta: CKMeta
    var edited: Bool
    var hidden: Bool
    /// Swapped with `second`: a name that exists, on the other property.
    var first: Int
    var second: Int
    enum CodingKeys: String, CodingKey {
        case id = "_id", roomId = "rid", text = "msg", created = "ts", slug = "s", tags = "t", author = "u", meta = "m"
        case edited = "e", hidden = "h", first = "second", second = "first"
    }
}

/// Decodes its fields in an order of its own, under names of its own.
struct CKHand: Model, Equatable {
    static let indexes: [PartialKeyPath<CKHand> & Sendable] = [\.label]
    var id: Int
    var label: String
    var rank: Int
    enum Keys: String, CodingKey { case id = "key", label = "l", rank = "r" }
    init(id: Int, label: String, rank: Int) { self.id = id; self.label = label; self.rank = rank }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        rank = try c.decode(Int.self, forKey: .rank)
        label = try c.decode(String.self, forKey: .label)
        id = try c.decode(Int.self, forKey: .id)
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Keys.self)
        try c.encode(id, forKey: .id)
        try c.encode(label, forKey: .label)
        try c.encode(rank, forKey: .rank)
    }
}

struct CodingKeysTests {
    static let base = Date(timeIntervalSinceReferenceDate: 800_000_000.25)

    func message(_ i: Int, room: String) -> CKMessage {
        CKMessage(
            id: "m\(i)", roomId: room, text: "text \(i)", created: Self.base.addingTimeInterval(Double(i)), slug: "s\(i)",
            tags: i % 2 == 0 ? ["even"] : ["odd"], author: Ref("u\(i % 3)"),
            meta: CKMeta(kind: CKKind.allCases[i % 3], score: i * 10, pinned: i % 4 == 0),
            edited: i % 2 == 1, hidden: i % 5 == 0, first: i, second: -i)
    }

    func database() throws -> (Database, [CKMessage]) {
        let db = try Database.inMemory(models: [CKMessage.self, CKUser.self, CKHand.self])
        let messages = (0..<30).map { message($0, room: $0 % 3 == 0 ? "general" : "random") }
        try db.write { tx in
            try tx.insert(contentsOf: messages)
            for u in 0..<3 { try tx.insert(CKUser(id: "u\(u)", name: "user\(u)")) }
        }
        return (db, messages)
    }

    @Test func keyPathsNameTheStoredFields() {
        #expect(fieldPath(of: \CKMessage.roomId as PartialKeyPath<CKMessage>) == "rid")
        #expect(fieldPath(of: \CKMessage.id as PartialKeyPath<CKMessage>) == "_id")
        #expect(fieldPath(of: \CKMessage.meta.score as PartialKeyPath<CKMessage>) == "m.sc")
        #expect(fieldPath(of: \CKMessage.meta.kind as PartialKeyPath<CKMessage>) == "m.k")
        #expect(fieldPath(of: \CKMessage.meta.pinned as PartialKeyPath<CKMessage>) == "m.p")
        #expect(fieldPath(of: \CKMessage.meta as PartialKeyPath<CKMessage>) == "m")
        #expect(fieldPath(of: \CKMessage.edited as PartialKeyPath<CKMessage>) == "e")
        #expect(fieldPath(of: \CKMessage.hidden as PartialKeyPath<CKMessage>) == "h")
        #expect(fieldPath(of: \CKMessage.first as PartialKeyPath<CKMessage>) == "second")
        #expect(fieldPath(of: \CKMessage.second as PartialKeyPath<CKMessage>) == "first")
        #expect(fieldPath(of: \CKMessage.author as PartialKeyPath<CKMessage>) == "u")
        #expect(fieldPath(of: \CKMessage.tags as PartialKeyPath<CKMessage>) == "t")
        #expect(fieldPath(of: \CKHand.rank as PartialKeyPath<CKHand>) == "r")
        #expect(fieldPath(of: \CKHand.id as PartialKeyPath<CKHand>) == "key")
        #expect(FieldNames.keyPath(of: CKMessage.self) == "_id")
    }

    @Test func renamedFieldsAreIndexedQueriedAndSorted() throws {
        let (db, messages) = try database()
        let room = "general"
        let inRoom = db.objects(CKMessage.self).filter(#Predicate { $0.roomId == room })
        #expect(inRoom.explain().contains("i:CKMessage:rid"), "\(inRoom.explain())")
        #expect(inRoom.keys == messages.filter { $0.roomId == room }.map(\.id).sorted())
        #expect(inRoom.count == 10)
        let byKey = db.objects(CKMessage.self).filter(#Predicate { $0.id == "m7" })
        #expect(byKey.explain().contains("primary key"), "\(byKey.explain())")
        #expect(byKey.map(\.text) == ["text 7"])
        let scored = db.objects(CKMessage.self).filter(#Predicate { $0.meta.score > 200 })
        #expect(scored.explain().contains("i:CKMessage:m.sc"), "\(scored.explain())")
        #expect(Set(scored.keys) == Set(messages.filter { $0.meta.score > 200 }.map(\.id)))
        let even = db.objects(CKMessage.self).filter(#Predicate { $0.tags.contains("even") })
        #expect(even.count == 15)
        let newest = db.objects(CKMessage.self).sorted(by: SortDescriptor(\.created, order: .reverse)).prefix(3)
        #expect(newest.explain().contains("i:CKMessage:ts"), "\(newest.explain())")
        #expect(newest.keys == ["m29", "m28", "m27"])
        let swapped = db.objects(CKMessage.self).filter(#Predicate { $0.first == 4 && $0.second == -4 })
        #expect(swapped.keys == ["m4"])
        let flags = db.objects(CKMessage.self).filter(#Predicate { $0.edited && !$0.hidden })
        #expect(Set(flags.keys) == Set(messages.filter { $0.edited && !$0.hidden }.map(\.id)))
        let kind = CKKind.thread
        let threads = db.objects(CKMessage.self).filter(#Predicate { $0.meta.kind == kind })
        #expect(threads.count == 10)
        #expect(db.objects(CKMessage.self).filter(\.text, matching: .beginsWith("TEXT 1"), options: .caseInsensitive).count == 11)
        #expect(db.objects(CKMessage.self).filter(\.roomId, equals: "random").count == 20)
        #expect(db.objects(CKMessage.self).sum(of: \.first) == (0..<30).reduce(0, +))
        #expect(db.objects(CKMessage.self).max(of: \.second) == 0)
        #expect(db.objects(CKMessage.self).distinct(by: \.roomId).count == 2)
        let hands = try Database.inMemory(models: [CKHand.self])
        try hands.write { tx in try tx.insert(contentsOf: (0..<5).map { CKHand(id: $0, label: "l\($0 % 2)", rank: -$0) }) }
        let ones = hands.objects(CKHand.self).filter(#Predicate { $0.label == "l1" }).sorted(by: SortDescriptor(\.rank))
        #expect(ones.explain().contains("i:CKHand:l"))
        #expect(ones.keys == [3, 1])
    }

    @Test func uniqueRenamedIndexAndBacklinks() throws {
        let (db, _) = try database()
        #expect(throws: StrataError.self) {
            try db.write { tx in try tx.insert(message(99, room: "x").with { $0.slug = "s3" }) }
        }
        let byU1 = try db.snapshot().backlinks(CKMessage.self, via: \.author, to: "u1")
        #expect(byU1.explain().contains("i:CKMessage:u"), "\(byU1.explain())")
        #expect(byU1.count == 10)
    }

    @Test func keyPathObservationWatchesTheRenamedField() throws {
        let (db, _) = try database()
        let inbox = Inbox<[Int]>()
        let token = db.objects(CKMessage.self).observe(on: DispatchQueue(label: "ck"), keyPaths: [\.text]) { change in
            switch change {
            case .initial: inbox.append([])
            case .update(_, _, _, let modifications): inbox.append(modifications)
            case .error: inbox.append([-1])
            }
        }
        defer { token.invalidate() }
        #expect(inbox.wait { $0.count == 1 })
        try db.write { tx in try tx.update(CKMessage.self, key: "m2") { $0.meta.score = 12345 } }  // another field
        try db.write { tx in try tx.update(CKMessage.self, key: "m3") { $0.text = "changed" } }
        #expect(inbox.wait { $0.count >= 2 })
        usleep(50_000)
        // Ids sort as strings: m0, m1, m10…m19, m2, m20…: m3 is at index 23.
        #expect(inbox.all.dropFirst().map { $0 } == [[23]], "\(inbox.all)")
    }

    @Test func changeMessagesAndJSONUseTheStoredKeyName() throws {
        let (db, _) = try database()
        let summary = try db.apply(
            try ChangeMessage.decode(
                json: Data(
                    """
                    [{"msg": "added", "collection": "CKUser", "id": "u9", "fields": {"username": "nine"}},
                     {"msg": "changed", "collection": "CKMessage", "id": "m1", "fields": {"msg": "edited", "m": {"sc": 7}}},
                     {"msg": "removed", "collection": "CKMessage", "id": "m2"}]
                    """.utf8)))
        #expect(summary.added == 1 && summary.changed == 1 && summary.removed == 1)
        #expect(try db.object(CKUser.self, key: "u9") == CKUser(id: "u9", name: "nine"))
        let m1 = try #require(try db.object(CKMessage.self, key: "m1"))
        #expect(m1.text == "edited" && m1.meta.score == 7 && m1.meta.kind == .system)
        #expect(try db.object(CKMessage.self, key: "m2") == nil)
        try db.write { tx in
            let r = try tx.upsert(CKUser.self, key: "u10", json: Data(#"{"_id": "u10", "username": "ten"}"#.utf8))
            #expect(r.created)
            #expect(throws: StrataError.self) { try tx.update(CKUser.self, key: "u10", json: Data(#"{"_id": "other"}"#.utf8)) }
        }
        #expect(try db.object(CKUser.self, key: "u10")?.name == "ten")
    }
}

extension CKMessage {
    func with(_ change: (inout CKMessage) -> Void) -> CKMessage {
        var copy = self
        change(&copy)
        return copy
    }
}
