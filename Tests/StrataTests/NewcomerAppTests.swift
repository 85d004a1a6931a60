import Testing
import Foundation
import Dispatch
import StrataTestWorkloads
@testable import Strata

// Small apps written from the documentation alone, as a newcomer would: a chat app with references,
// nested structs, a compound and a full-text index, a repository of DBIO operations, sync batches
// and live results; a reopen and migration story; and the mistakes a newcomer makes. Every answer
// is compared with plain Swift over the same values.

// MARK: - Models of the chat app

enum NAKind: String, Codable, Sendable, CaseIterable { case text, image, system }
enum NAPresence: Int, Codable, Sendable, CaseIterable { case offline = 0, away = 1, online = 2 }

struct NAAttachment: Codable, Sendable, Hashable {
    var name: String
    var bytes: Int
    var mime: String?
}

struct NAUser: Model {
    static let indexes: [PartialKeyPath<NAUser> & Sendable] = [\.presence, \.joined]
    static let uniqueIndexes: [PartialKeyPath<NAUser> & Sendable] = [\.handle]
    var id: UUID
    var handle: String
    var name: String
    var bio: String?
    var presence: NAPresence
    var joined: Date
}

struct NARoom: Model {
    var id: String
    var title: String
    var members: [Ref<NAUser>]
    var topic: String?
}

struct NAMessage: Model {
    static let indexes: [PartialKeyPath<NAMessage> & Sendable] = [\.author, \.tags, \.kind, \.score]
    static let indexDescriptors: [IndexDescriptor<NAMessage>] = [
        .on(\.room, \.createdAt),
        .fullText(\.text),
    ]
    var id: UUID
    var room: Ref<NARoom>
    var author: Ref<NAUser>
    var kind: NAKind
    var text: String
    var tags: [String]
    var attachments: [NAAttachment]
    var createdAt: Date
    var editedAt: Date?
    var score: Int
    var rating: Double?
}

/// A deterministic generator (splitmix64), so every run sees the same data; tests print the seed.
struct NARandom {
    private var base: KillRandom
    init(seed: UInt64) { base = KillRandom(seed: seed) }
    mutating func next() -> UInt64 { base.next() }
    mutating func below(_ n: Int) -> Int { base.below(n) }
    mutating func pick<T>(_ items: [T]) -> T { items[below(items.count)] }
    mutating func uuid() -> UUID {
        let a = next()
        let b = next()
        return withUnsafeBytes(of: (a, b)) { raw in
            UUID(uuid: raw.load(as: uuid_t.self))
        }
    }
}

func naTemporaryPath(_ name: String) -> String {
    NSTemporaryDirectory() + "strata-newcomer-\(name)-\(UUID().uuidString).strata"
}

func naRemove(_ path: String) {
    for suffix in ["", "-lock"] { try? FileManager.default.removeItem(atPath: path + suffix) }
}

/// The expected answer of a query: Foundation's evaluation, sorted by the descriptors with ties in
/// primary-key order.
func naExpected<M: Model>(
    _ all: [M], _ predicate: Predicate<M>?, _ sort: [SortDescriptor<M>], key: (M, M) -> Bool
) throws -> [M] {
    let matching = try all.filter { try predicate?.evaluate($0) ?? true }
    return matching.sorted { a, b in
        for descriptor in sort {
            switch descriptor.compare(a, b) {
            case .orderedAscending: return true
            case .orderedDescending: return false
            case .orderedSame: continue
            }
        }
        return key(a, b)
    }
}

func naUUIDLess(_ a: UUID, _ b: UUID) -> Bool {
    withUnsafeBytes(of: a.uuid) { x in withUnsafeBytes(of: b.uuid) { y in x.lexicographicallyPrecedes(y) } }
}

// MARK: - The chat app

struct NewcomerChatAppTests {
    static let words = [
        "lunch", "tomorrow", "coffee", "tea", "see", "you", "soon", "Café", "CAFE", "naïve", "deploy", "bug", "fix",
        "the", "release", "🎉", "東京", "can't", "e.g", "3.14",
    ]

    struct World {
        var users: [NAUser] = []
        var rooms: [NARoom] = []
        var messages: [UUID: NAMessage] = [:]
    }

    static func makeWorld(seed: UInt64) -> World {
        var rng = NARandom(seed: seed)
        var world = World()
        let base = Date(timeIntervalSince1970: 1_700_000_000)
        for i in 0..<12 {
            world.users.append(
                NAUser(
                    id: rng.uuid(), handle: "user\(i)", name: rng.pick(["Ana", "Ben", "Cleo", "ana", "Émile", ""]),
                    bio: rng.below(3) == 0 ? nil : "bio \(i)", presence: rng.pick(NAPresence.allCases),
                    joined: base.addingTimeInterval(Double(rng.below(1000)) * 60)))
        }
        for r in 0..<4 {
            let members = (0..<3).map { _ in Ref<NAUser>(rng.pick(world.users).id) }
            world.rooms.append(NARoom(id: "room\(r)", title: "Room \(r)", members: members, topic: r == 2 ? nil : "topic \(r)"))
        }
        for _ in 0..<300 {
            let text = (0..<(1 + rng.below(6))).map { _ in rng.pick(words) }.joined(separator: " ")
            let message = NAMessage(
                id: rng.uuid(), room: Ref(rng.pick(world.rooms).id), author: Ref(rng.pick(world.users).id),
                kind: rng.pick(NAKind.allCases), text: text,
                tags: (0..<rng.below(3)).map { _ in rng.pick(["urgent", "", "later", "Urgent"]) },
                attachments: (0..<rng.below(2)).map { _ in
                    NAAttachment(name: "f\(rng.below(5))", bytes: rng.below(5000), mime: rng.below(2) == 0 ? nil : "image/png")
                },
                // Several messages share a timestamp, so ties go by key.
                createdAt: base.addingTimeInterval(Double(rng.below(200))),
                editedAt: rng.below(4) == 0 ? base.addingTimeInterval(Double(rng.below(500))) : nil,
                score: rng.pick([Int.min, Int.max, 0, -1, 1, 42, rng.below(100) - 50]),
                rating: rng.pick([nil, 0.0, -0.0, 1.5, -2.25, Double.nan, Double.infinity, -Double.infinity, 3.0]))
            world.messages[message.id] = message
        }
        return world
    }

    func check(
        _ results: Results<NAMessage>, _ all: [NAMessage], _ predicate: Predicate<NAMessage>?,
        _ sort: [SortDescriptor<NAMessage>], _ context: String
    ) throws {
        let expected = try naExpected(all, predicate, sort) { naUUIDLess($0.id, $1.id) }
        let got = try results.fetch()
        #expect(got.map(\.id) == expected.map(\.id), "\(context)\n\(results.explain())")
        #expect(try results.fetchCount() == expected.count, "\(context) count\n\(results.explain())")
    }

    @Test func queriesMatchPlainSwift() throws {
        let seed: UInt64 = 20_261_202
        let world = Self.makeWorld(seed: seed)
        let db = try Database.inMemory(models: [NAUser.self, NARoom.self, NAMessage.self])
        try db.write { tx in
            try tx.insert(contentsOf: world.users)
            try tx.insert(contentsOf: world.rooms)
            try tx.insert(contentsOf: Array(world.messages.values))
        }
        let all = Array(world.messages.values)
        let room = Ref<NARoom>("room1")
        let author = Ref<NAUser>(world.users[3].id)
        let image = NAKind.image
        let kinds = [NAKind.image, NAKind.system]
        let since = Date(timeIntervalSince1970: 1_700_000_050)
        let maxInt = Int.max
        let minInt = Int.min
        let nan = Double.nan
        let zero = -0.0
        let cases: [(String, Predicate<NAMessage>?, [SortDescriptor<NAMessage>])] = [
            ("room newest", #Predicate { $0.room == room }, [SortDescriptor(\.createdAt, order: .reverse)]),
            ("room since", #Predicate { $0.room == room && $0.createdAt >= since }, [SortDescriptor(\.createdAt)]),
            ("author", #Predicate { $0.author == author }, []),
            ("kind image", #Predicate { $0.kind == image }, [SortDescriptor(\.score)]),
            ("kinds in", #Predicate { kinds.contains($0.kind) }, [SortDescriptor(\.score, order: .reverse)]),
            ("tag urgent", #Predicate { $0.tags.contains("urgent") }, []),
            ("tag empty", #Predicate { $0.tags.contains("") }, []),
            ("score max", #Predicate { $0.score == maxInt }, []),
            ("score min", #Predicate { $0.score == minInt }, []),
            ("score > min", #Predicate { $0.score > minInt }, [SortDescriptor(\.score)]),
            ("score < max", #Predicate { $0.score < maxInt }, [SortDescriptor(\.score, order: .reverse)]),
            ("score range", #Predicate { $0.score >= -1 && $0.score <= 42 }, [SortDescriptor(\.score)]),
            ("rating nil", #Predicate { $0.rating == nil }, []),
            ("rating nan", #Predicate { $0.rating == nan }, []),
            ("rating zero", #Predicate { $0.rating == zero }, []),
            ("rating > 1", #Predicate { $0.rating != nil && $0.rating! > 1 }, [SortDescriptor(\.rating)]),
            ("edited", #Predicate { $0.editedAt != nil }, [SortDescriptor(\.editedAt)]),
            ("edited sort", nil, [SortDescriptor(\.editedAt, order: .reverse)]),
            ("text sort", nil, [SortDescriptor(\.text)]),
            ("text contains", #Predicate { $0.text.contains("Café") }, [SortDescriptor(\.createdAt)]),
            ("text prefix", #Predicate { $0.text.starts(with: "lunch") }, []),
            ("attachments", #Predicate { $0.attachments.count > 0 }, []),
            ("attachment image", #Predicate { $0.attachments.contains { $0.mime == "image/png" } }, []),
            ("or", #Predicate { $0.kind == image || $0.room == room }, [SortDescriptor(\.createdAt)]),
            ("not", #Predicate { !($0.room == room) }, []),
        ]
        for (name, predicate, sort) in cases {
            var results = db.objects(NAMessage.self)
            if let predicate { results = results.filter(predicate) }
            if !sort.isEmpty { results = results.sorted(by: sort) }
            try check(results, all, predicate, sort, "seed \(seed) \(name)")
            // A window over the same query.
            let expected = try naExpected(all, predicate, sort) { naUUIDLess($0.id, $1.id) }
            let page = try results.offset(3).prefix(7).fetch()
            #expect(page.map(\.id) == Array(expected.dropFirst(3).prefix(7)).map(\.id), "seed \(seed) \(name) window")
        }
        // A sort by an optional Double: nil first, NaN above every number, -0.0 ties with 0.0
        // (SortDescriptor.compare alone calls NaN equal to everything, which is no order).
        func rank(_ value: Double?) -> (Int, Double) {
            guard let value else { return (0, 0) }
            return value.isNaN ? (2, 0) : (1, value == 0 ? 0 : value)
        }
        for order in [SortOrder.forward, .reverse] {
            let expected = all.sorted { a, b in
                let (x, y) = (rank(a.rating), rank(b.rating))
                if x != y { return order == .forward ? x < y : y < x }
                return naUUIDLess(a.id, b.id)
            }
            let results = db.objects(NAMessage.self).sorted(by: SortDescriptor(\.rating, order: order))
            #expect(try results.fetch().map(\.id) == expected.map(\.id), "seed \(seed) rating sort \(order)")
            #expect(try results.offset(3).prefix(7).fetch().map(\.id) == expected.dropFirst(3).prefix(7).map(\.id))
        }
    }

    @Test func searchMatchesPlainSwift() throws {
        let seed: UInt64 = 99
        let world = Self.makeWorld(seed: seed)
        let db = try Database.inMemory(models: [NAUser.self, NARoom.self, NAMessage.self])
        try db.write { tx in try tx.insert(contentsOf: Array(world.messages.values)) }
        let all = Array(world.messages.values)
        func words(_ text: String) -> [String] {
            text.split(separator: " ").map { $0.folding(options: [.caseInsensitive, .diacriticInsensitive, .widthInsensitive], locale: nil) }
        }
        let expectations: [(TextSearch, (NAMessage) -> Bool)] = [
            ("cafe", { words($0.text).contains("cafe") }),
            ("lunch tomorrow", { words($0.text).contains("lunch") && words($0.text).contains("tomorrow") }),
            (.anyWord("coffee tea"), { words($0.text).contains("coffee") || words($0.text).contains("tea") }),
            ("naive", { words($0.text).contains("naive") }),
            ("東京", { words($0.text).contains("東京") }),
            ("can't", { words($0.text).contains("can't") }),
            ("tom*", { words($0.text).contains { $0.hasPrefix("tom") } }),
            ("", { _ in false }),
        ]
        for (search, expected) in expectations {
            let got = try db.objects(NAMessage.self).search(\.text, search).fetch()
            let want = all.filter(expected).sorted { naUUIDLess($0.id, $1.id) }
            #expect(got.map(\.id) == want.map(\.id), "seed \(seed) search \(search)")
            let count = try db.objects(NAMessage.self).search(\.text, search).fetchCount()
            #expect(count == want.count, "seed \(seed) search count \(search)")
        }
    }
}

// MARK: - Reopen and migrate

enum NAMigrationV1 {
    struct Note: Model {
        static let modelName = "NANote"
        static let indexes: [PartialKeyPath<Note> & Sendable] = [\.title, \.priority]
        var id: Int?
        var title: String
        var body: String
        var priority: String  // "1", "2", …: v2 makes it an Int
        var created: Date
    }
}

enum NAMigrationV2 {
    struct Note: Model {
        static let modelName = "NANote"
        static let indexes: [PartialKeyPath<Note> & Sendable] = [\.priority, \.heading]
        static let indexDescriptors: [IndexDescriptor<Note>] = [.fullText(\.text)]
        enum CodingKeys: String, CodingKey {
            case id, heading = "title", text = "body", priority, created, pinned
        }
        var id: Int?
        var heading: String
        var text: String
        var priority: Int
        var created: Date
        var pinned: Bool?
    }
}

struct NewcomerMigrationTests {
    @Test func v1ToV2ThenReadOnly() throws {
        let path = naTemporaryPath("migrate")
        defer { naRemove(path) }
        let base = Date(timeIntervalSince1970: 1_000_000)
        do {
            let db = try Database(path: path, models: [NAMigrationV1.Note.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in
                for i in 0..<50 {
                    try tx.insert(
                        NAMigrationV1.Note(
                            id: nil, title: "note \(i % 7)", body: "body words \(i) lunch", priority: "\(i % 4)",
                            created: base.addingTimeInterval(Double(i))))
                }
            }
            db.close()
        }
        // Without a migration the changed type is refused, and says which field.
        #expect {
            _ = try Database(path: path, models: [NAMigrationV2.Note.self])
        } throws: { error in
            guard case StrataError.migrationRequired = error else { return false }
            return "\(error)".contains("priority")
        }
        do {
            let db = try Database(path: path, models: [NAMigrationV2.Note.self], schemaVersion: 2) { migration in
                try migration.enumerateObjects("NANote") { old, new in
                    new["priority"] = .int(Int64(old["priority"]?.stringValue ?? "") ?? -1)
                }
            }
            let notes = try db.objects(NAMigrationV2.Note.self).fetch()
            #expect(notes.count == 50)
            #expect(notes.map(\.id) == (1...50).map { Optional($0) })
            #expect(notes.allSatisfy { $0.pinned == nil })
            let two = 2
            let p2 = db.objects(NAMigrationV2.Note.self).filter(#Predicate { $0.priority == two })
            #expect(p2.map(\.id) == notes.filter { $0.priority == 2 }.map(\.id))
            #expect(p2.explain().contains("index"))
            let heading = "note 3"
            let h = db.objects(NAMigrationV2.Note.self).filter(#Predicate { $0.heading == heading })
            #expect(h.map(\.id) == notes.filter { $0.heading == heading }.map(\.id))
            #expect(try db.objects(NAMigrationV2.Note.self).search(\.text, "lunch").fetchCount() == 50)
            let inserted = try db.write { tx in
                try tx.insert(NAMigrationV2.Note(id: nil, heading: "new", text: "fresh", priority: 9, created: base, pinned: true))
            }
            #expect(inserted.id == 51)
            db.close()
        }
        // Read-only, with the version the app now uses and with none (a widget).
        for version in [2, 0] {
            let db = try Database(
                store: try Store(path: path, options: StoreOptions(readOnly: true)), models: [NAMigrationV2.Note.self],
                schemaVersion: version)
            #expect(db.objects(NAMigrationV2.Note.self).count == 51)
            #expect(throws: (any Error).self) {
                try db.write { tx in try tx.delete(NAMigrationV2.Note.self, key: 1) }
            }
            db.close()
        }
        // Opening v1 types against the v2 file needs a migration again.
        #expect(throws: (any Error).self) {
            _ = try Database(path: path, models: [NAMigrationV1.Note.self])
        }
    }
}

// MARK: - Mistakes a newcomer makes

enum NAMood: Codable, Sendable, Equatable { case happy, sad }  // no raw value

struct NAMoody: Model {
    var id: Int
    var mood: NAMood
}

struct NAMetric: Model {
    static let indexes: [PartialKeyPath<NAMetric> & Sendable] = [\.value, \.count, \.label, \.small]
    static let uniqueIndexes: [PartialKeyPath<NAMetric> & Sendable] = [\.code]
    var id: String
    var value: Double
    var count: Int
    var label: String
    var small: Int8
    var code: String?
}

struct NewcomerMistakeTests {
    @Test func enumWithoutRawValueIsRejectedOrRoundTrips() throws {
        // The documentation lists enums with raw values only; an enum without must not trap.
        do {
            let db = try Database.inMemory(models: [NAMoody.self])
            try db.write { tx in try tx.insert(NAMoody(id: 1, mood: .sad)) }
            #expect(try db.object(NAMoody.self, key: 1)?.mood == .sad)
        } catch let error as StrataError {
            guard case .unsupportedType = error else {
                Issue.record("unexpected error \(error)")
                return
            }
            #expect("\(error)".contains("mood"))
        }
    }

    @Test func writesInsideReadsAndNestedWrites() throws {
        let db = try Database.inMemory(models: [NAMetric.self])
        try db.write { tx in
            try tx.insert(NAMetric(id: "a", value: 1, count: 1, label: "a", small: 1, code: "A"))
            // A nested write joins as a savepoint; a failing one is undone alone.
            #expect(throws: StrataError.self) {
                try db.write { inner in
                    try inner.insert(NAMetric(id: "b", value: 2, count: 2, label: "b", small: 2, code: "B"))
                    try inner.insert(NAMetric(id: "a", value: 3, count: 3, label: "c", small: 3, code: "C"))
                }
            }
            #expect(try tx.count(NAMetric.self) == 1)
            try db.write { inner in try inner.insert(NAMetric(id: "d", value: 4, count: 4, label: "d", small: 4, code: "D")) }
        }
        #expect(db.objects(NAMetric.self).map(\.id) == ["a", "d"])
        // A write from inside a read: on the same thread the snapshot is not a transaction.
        let count = try db.read { snapshot in
            try db.write { tx in try tx.insert(NAMetric(id: "e", value: 5, count: 5, label: "e", small: 5, code: "E")) }
            return snapshot.objects(NAMetric.self).count
        }
        #expect(count == 2)
        #expect(db.objects(NAMetric.self).count == 3)
    }

    @Test func duplicateKeysAndUniqueValues() throws {
        let db = try Database.inMemory(models: [NAMetric.self])
        try db.write { tx in
            try tx.insert(NAMetric(id: "a", value: 1, count: 1, label: "x", small: 1, code: nil))
            #expect {
                try tx.insert(NAMetric(id: "a", value: 2, count: 2, label: "y", small: 2, code: "Z"))
            } throws: { error in
                guard case StrataError.duplicateKey = error else { return false }
                return true
            }
            #expect {
                try tx.insert(NAMetric(id: "b", value: 2, count: 2, label: "y", small: 2, code: nil))
            } throws: { error in
                guard case StrataError.uniqueViolation = error else { return false }
                return true
            }
            try tx.insert(NAMetric(id: "c", value: 2, count: 2, label: "y", small: 2, code: ""))
            #expect(throws: StrataError.self) {
                try tx.upsert(NAMetric(id: "d", value: 2, count: 2, label: "y", small: 2, code: ""))
            }
            // Upserting an object onto its own unique value is fine.
            try tx.upsert(NAMetric(id: "c", value: 3, count: 3, label: "z", small: 3, code: ""))
        }
        #expect(db.objects(NAMetric.self).map(\.id) == ["a", "c"])
        #expect(db.objects(NAMetric.self).filter(#Predicate { $0.code == "" }).map(\.id) == ["c"])
        #expect(db.objects(NAMetric.self).filter(#Predicate { $0.code == nil }).map(\.id) == ["a"])
    }

    @Test func extremeNumbersInIndexesAndPredicates() throws {
        let seed: UInt64 = 31337
        var rng = NARandom(seed: seed)
        let doubles: [Double] = [
            .nan, -.nan, 0, -0.0, .infinity, -.infinity, .leastNonzeroMagnitude, -.leastNonzeroMagnitude, .greatestFiniteMagnitude,
            -.greatestFiniteMagnitude, 1, -1, 0.1, 1e300,
        ]
        let ints: [Int] = [.min, .max, 0, -1, 1, .min + 1, .max - 1]
        let smalls: [Int8] = [.min, .max, 0, -1, 1]
        let labels = ["", " ", "a", "A", "é", "e\u{301}", "\u{0}", "z\u{0}", String(repeating: "x", count: 300), "🎉"]
        var all: [NAMetric] = []
        for i in 0..<200 {
            all.append(
                NAMetric(
                    id: String(format: "k%03d", i), value: rng.pick(doubles), count: rng.pick(ints), label: rng.pick(labels),
                    small: rng.pick(smalls), code: "c\(i)"))
        }
        let db = try Database.inMemory(models: [NAMetric.self])
        try db.write { tx in try tx.insert(contentsOf: all) }
        // Doubles in the order the documentation gives: NaN above every number, -0.0 tied with 0.0
        // (SortDescriptor.compare calls NaN equal to everything, which is no order).
        func rank(_ value: Double) -> (Int, Double) { value.isNaN ? (1, 0) : (0, value == 0 ? 0 : value) }
        func check(
            _ name: String, _ predicate: Predicate<NAMetric>?, _ sort: [SortDescriptor<NAMetric>],
            less: ((NAMetric, NAMetric) -> Bool)? = nil
        ) throws {
            var results = db.objects(NAMetric.self)
            if let predicate { results = results.filter(predicate) }
            if !sort.isEmpty { results = results.sorted(by: sort) }
            var expected = try naExpected(all, predicate, sort) { $0.id < $1.id }
            if let less { expected.sort { less($0, $1) || (!less($1, $0) && $0.id < $1.id) } }
            #expect(try results.fetch().map(\.id) == expected.map(\.id), "seed \(seed) \(name)\n\(results.explain())")
            #expect(try results.fetchCount() == expected.count, "seed \(seed) \(name) count\n\(results.explain())")
            let window = try results.offset(2).prefix(5).fetch()
            #expect(window.map(\.id) == Array(expected.dropFirst(2).prefix(5)).map(\.id), "seed \(seed) \(name) window")
        }
        let notANumber = Double("nan")!  // not the literal: the compiler warns that == .nan is always false
        let negZero = -0.0
        let inf = Double.infinity
        let tiny = Double.leastNonzeroMagnitude
        let imin = Int.min
        let imax = Int.max
        let s8min = Int8.min
        let s8max = Int8.max
        let empty = ""
        let combining = "e\u{301}"
        let nul = "\u{0}"
        try check("nan ==", #Predicate { $0.value == notANumber }, [])
        try check("nan !=", #Predicate { $0.value != notANumber }, [])
        try check("nan <", #Predicate { $0.value < notANumber }, [])
        try check("nan >=", #Predicate { $0.value >= notANumber }, [])
        let up: (NAMetric, NAMetric) -> Bool = { rank($0.value) < rank($1.value) }
        let down: (NAMetric, NAMetric) -> Bool = { rank($1.value) < rank($0.value) }
        try check("-0 ==", #Predicate { $0.value == negZero }, [SortDescriptor(\.value)], less: up)
        try check("-0 <", #Predicate { $0.value < negZero }, [SortDescriptor(\.value, order: .reverse)], less: down)
        try check("-0 <=", #Predicate { $0.value <= negZero }, [SortDescriptor(\.value)], less: up)
        try check("> -0", #Predicate { $0.value > negZero }, [SortDescriptor(\.value)], less: up)
        try check("inf", #Predicate { $0.value == inf || $0.value == -inf }, [])
        try check("tiny", #Predicate { $0.value > 0 && $0.value <= tiny }, [])
        try check("value sort", nil, [SortDescriptor(\.value)], less: up)
        try check("value rsort", nil, [SortDescriptor(\.value, order: .reverse)], less: down)
        try check("int min", #Predicate { $0.count == imin }, [])
        try check("int <= min", #Predicate { $0.count <= imin }, [])
        try check("int > min", #Predicate { $0.count > imin }, [SortDescriptor(\.count)])
        try check("int >= max", #Predicate { $0.count >= imax }, [])
        try check("int < max", #Predicate { $0.count < imax }, [SortDescriptor(\.count, order: .reverse)])
        try check("int sort", nil, [SortDescriptor(\.count), SortDescriptor(\.value)]) {
            ($0.count, rank($0.value).0, rank($0.value).1) < ($1.count, rank($1.value).0, rank($1.value).1)
        }
        try check("int8 min", #Predicate { $0.small == s8min }, [])
        try check("int8 > min", #Predicate { $0.small > s8min && $0.small < s8max }, [SortDescriptor(\.small)])
        try check("int8 widened", #Predicate { $0.small > -2 }, [])
        try check("empty label", #Predicate { $0.label == empty }, [])
        try check("empty label !=", #Predicate { $0.label != empty }, [SortDescriptor(\.label)])
        try check("combining", #Predicate { $0.label == combining }, [])
        try check("nul", #Predicate { $0.label == nul }, [])
        try check("nul prefix", #Predicate { $0.label.starts(with: "z") }, [])
        try check("label sort", nil, [SortDescriptor(\.label, order: .reverse)])
        try check("label contains empty", #Predicate { $0.label.contains("") }, [])
        try check("label starts empty", #Predicate { $0.label.starts(with: "") }, [])
        try check("label range", #Predicate { $0.label >= "a" }, [])
        // Aggregates follow the same values.
        let values = all.map(\.value)
        let results = db.objects(NAMetric.self)
        #expect(results.max(of: \.value)?.isNaN == values.contains { $0.isNaN })
        #expect(results.min(of: \.value) == -.infinity)
        #expect(results.max(of: \.count) == .max)
        #expect(results.min(of: \.small) == .min)
        #expect(results.sum(of: \.count) == 0)  // overflows
        #expect(throws: (any Error).self) { try results.fetchSum(of: \.count) }
    }

    @Test func longStringsNearTheKeyLimit() throws {
        let db = try Database.inMemory(models: [NAMetric.self])
        let limit = Limits.maxKeySize(pageSize: 4096)
        // A primary key of exactly as many bytes as fit, then one more.
        var fitting: String?
        for length in stride(from: limit, through: limit - 16, by: -1) {
            let id = String(repeating: "k", count: length)
            do {
                try db.write { tx in try tx.insert(NAMetric(id: id, value: 0, count: 0, label: "", small: 0, code: nil)) }
                fitting = id
                break
            } catch let error as StrataError {
                guard case .invalidInput = error else {
                    Issue.record("length \(length): \(error)")
                    return
                }
            }
        }
        #expect(fitting != nil)
        if let fitting {
            #expect(try db.object(NAMetric.self, key: fitting)?.id == fitting)
            #expect(db.objects(NAMetric.self).filter(#Predicate { $0.id == fitting }).count == 1)
        }
        // An indexed label too long for its index entry is refused with invalidInput, and changes nothing.
        let long = String(repeating: "é", count: limit)
        #expect {
            try db.write { tx in try tx.insert(NAMetric(id: "long", value: 0, count: 0, label: long, small: 0, code: nil)) }
        } throws: { error in
            guard case StrataError.invalidInput = error else { return false }
            return "\(error)".contains("label")
        }
        #expect(try db.object(NAMetric.self, key: "long") == nil)
        // A long unindexed-path string: a predicate comparing with it is simply false.
        #expect(db.objects(NAMetric.self).filter(#Predicate { $0.label == long }).count == 0)
        #expect(db.objects(NAMetric.self).filter(#Predicate { $0.id == long }).count == 0)
        #expect(try db.object(NAMetric.self, key: long) == nil)
        let missing = try db.write { tx in try tx.delete(NAMetric.self, key: long) }
        #expect(!missing)
    }

    @Test func resultsAfterCloseAndDeletingWhileIterating() throws {
        let path = naTemporaryPath("close")
        defer { naRemove(path) }
        let db = try Database(path: path, models: [NAMetric.self], options: StoreOptions(durability: .noSync))
        try db.write { tx in
            for i in 0..<100 {
                try tx.insert(NAMetric(id: "m\(i)", value: Double(i), count: i, label: "l\(i % 3)", small: 0, code: "c\(i)"))
            }
        }
        // Deleting while iterating a Results: the results are a snapshot and do not move.
        let results = db.objects(NAMetric.self).sorted(by: SortDescriptor(\.count))
        var seen = 0
        for metric in results {
            try db.write { tx in _ = try tx.delete(NAMetric.self, key: metric.id) }
            seen += 1
        }
        #expect(seen == 100)
        #expect(db.objects(NAMetric.self).count == 0)
        try db.write { tx in try tx.insert(NAMetric(id: "z", value: 0, count: 0, label: "", small: 0, code: nil)) }
        let held = db.objects(NAMetric.self)
        let lazy = db.objects(NAMetric.self).filter(#Predicate { $0.count == 0 })
        let token = held.observe(on: DispatchQueue(label: "na.close")) { _ in }
        db.close()
        // Results taken before the close still read their snapshot.
        #expect(held.map(\.id) == ["z"])
        #expect(lazy.count == 1)
        // New reads throw databaseClosed, and the collection API is empty with the error.
        #expect(throws: StrataError.self) { try db.object(NAMetric.self, key: "z") }
        let after = db.objects(NAMetric.self)
        #expect(after.isEmpty)
        #expect(after.error != nil)
        #expect(throws: StrataError.self) { try db.write { tx in try tx.deleteAll(NAMetric.self) } }
        token.invalidate()
    }

    @Test func untranslatablePredicatesStillAnswer() throws {
        let db = try Database.inMemory(models: [NAMetric.self])
        var all: [NAMetric] = []
        for i in 0..<60 {
            all.append(NAMetric(id: "m\(i)", value: Double(i) / 7, count: i - 30, label: "label \(i)", small: Int8(i % 5), code: i == 0 ? nil : "c\(i)"))
        }
        try db.write { tx in try tx.insert(contentsOf: all) }
        let predicates: [(String, Predicate<NAMetric>)] = [
            ("arithmetic", #Predicate { $0.count * 2 + 1 > 10 }),
            ("length", #Predicate { $0.label.count == 8 }),
            ("modulo", #Predicate { $0.count % 3 == 0 }),
            ("ternary", #Predicate { ($0.count > 0 ? $0.value : -$0.value) > 2 }),
            ("compare fields", #Predicate { $0.id == $0.label }),
            ("coalesce", #Predicate { ($0.code ?? "none") == "none" }),
        ]
        for (name, predicate) in predicates {
            let expected = try all.filter { try predicate.evaluate($0) }.map(\.id).sorted()
            let got = try db.objects(NAMetric.self).filter(predicate).fetch().map(\.id)
            #expect(got == expected, "\(name)")
        }
    }
}

// MARK: - The chat app's repository, sync feed and live results

/// Collects deliveries; `@unchecked Sendable`: every access takes `lock`.
final class NAInbox<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [T] = []
    func append(_ item: T) { lock.withLock { items.append(item) } }
    var all: [T] { lock.withLock { items } }
    @discardableResult
    func wait(seconds: Double = 60, until condition: ([T]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition(all) { return true }
            usleep(2000)
        }
        return condition(all)
    }
}

final class NAChatRepository: Sendable {
    let db: Database
    init(db: Database) { self.db = db }

    func roomPage(_ room: String, limit: Int) -> DBRead<[NAMessage]> {
        let ref = Ref<NARoom>(room)
        return DBRead { reader in
            Array(
                try reader.objects(
                    NAMessage.self, where: #Predicate { $0.room == ref }, sortedBy: [SortDescriptor(\.createdAt, order: .reverse)]
                ).prefix(limit))
        }
    }

    func post(_ message: NAMessage) -> DBWrite<NAMessage> {
        DBWrite.insert(message).flatMap { stored in
            DBWrite.update(NARoom.self, key: stored.room.id) { $0.topic = stored.text }.map { _ in stored }
        }
    }
}

struct NewcomerChatLiveTests {
    @Test func syncFeedRepositoryAndObservers() async throws {
        let seed: UInt64 = 4711
        var world = NewcomerChatAppTests.makeWorld(seed: seed)
        let db = try Database.inMemory(models: [NAUser.self, NARoom.self, NAMessage.self])
        let initial = world
        try await db.write { tx in
            try tx.insert(contentsOf: initial.users)
            try tx.insert(contentsOf: initial.rooms)
            try tx.insert(contentsOf: Array(initial.messages.values))
        }
        let room = Ref<NARoom>("room2")
        let query = db.objects(NAMessage.self).filter(#Predicate { $0.room == room }).sorted(by: SortDescriptor(\.createdAt))
        let inbox = NAInbox<(kind: Int, ids: [UUID], d: [Int], i: [Int], m: [Int])>()
        let token = query.observe(on: DispatchQueue(label: "na.live")) { change in
            switch change {
            case .initial(let r): inbox.append((0, r.map(\.id), [], [], []))
            case .update(let r, let d, let i, let m): inbox.append((1, r.map(\.id), d, i, m))
            case .error(let e): Issue.record("seed \(seed) \(e)")
            }
        }
        defer { token.invalidate() }
        func expected() -> [UUID] {
            world.messages.values.filter { $0.room == room }
                .sorted { ($0.createdAt, 0) < ($1.createdAt, 0) || ($0.createdAt == $1.createdAt && naUUIDLess($0.id, $1.id)) }
                .map(\.id)
        }
        #expect(inbox.wait { $0.count >= 1 })
        #expect(inbox.all.first?.ids == expected(), "seed \(seed) initial")

        // The repository posts a message and updates its room in one transaction.
        let repository = NAChatRepository(db: db)
        let newMessage = NAMessage(
            id: UUID(uuidString: "00000000-0000-0000-0000-000000000001")!, room: room, author: Ref(world.users[0].id), kind: .text,
            text: "hello from the repository", tags: [], attachments: [], createdAt: Date(timeIntervalSince1970: 1_700_000_100),
            editedAt: nil, score: 0, rating: nil)
        let stored = try await db.run(repository.post(newMessage))
        world.messages[stored.id] = stored
        world.rooms[2].topic = stored.text
        #expect(try db.object(NARoom.self, key: "room2")?.topic == "hello from the repository")
        let page = try await db.run(repository.roomPage("room2", limit: 5))
        #expect(page.map(\.id) == Array(expected().reversed().prefix(5)), "seed \(seed) page")

        // A sync batch: a partial change of a message's text, a removal and an addition in the room.
        let target = expected()[0]
        let victim = expected()[1]
        let added = UUID(uuidString: "00000000-0000-0000-0000-000000000002")!
        let batch = try ChangeMessage.decode(
            json: Data(
                """
                [{"msg": "changed", "collection": "NAMessage", "id": "\(target.uuidString)", "fields": {"text": "edited", "editedAt": "2026-05-01T12:30:00Z"}},
                 {"msg": "removed", "collection": "NAMessage", "id": "\(victim.uuidString)"},
                 {"msg": "added", "collection": "NAMessage", "id": "\(added.uuidString)", "fields": {"room": "room2", "author": "\(world.users[1].id.uuidString)", "kind": "system", "text": "joined", "tags": ["x"], "attachments": [{"name": "a", "bytes": 3}], "createdAt": "2023-11-14T22:13:20Z", "score": 5}}]
                """.utf8))
        let summary = try db.apply(batch)
        #expect(summary.changed == 1 && summary.removed == 1 && summary.added == 1, "\(summary)")
        world.messages[target]?.text = "edited"
        world.messages[target]?.editedAt = ISO8601DateFormatter().date(from: "2026-05-01T12:30:00Z")
        world.messages[victim] = nil
        let addedObject = try #require(try db.object(NAMessage.self, key: added))
        #expect(addedObject.attachments == [NAAttachment(name: "a", bytes: 3, mime: nil)])
        #expect(addedObject.createdAt == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(addedObject.editedAt == nil && addedObject.rating == nil)
        world.messages[added] = addedObject
        #expect(try db.objects(NAMessage.self).search(\.text, "edited").fetch().map(\.id) == [target])
        #expect(try db.objects(NAMessage.self).search(\.text, "joined").fetch().map(\.id) == [added])

        // A background write with a completion.
        let done = NAInbox<Bool>()
        db.writeAsync(completionQueue: DispatchQueue(label: "na.done")) { tx in
            try tx.update(NAMessage.self, key: target) { $0.score = Int.min }
        } completion: { result in
            if case .failure(let error) = result { Issue.record("\(error)") }
            done.append(true)
        }
        #expect(done.wait { !$0.isEmpty })
        world.messages[target]?.score = Int.min

        // Every delivery applied to the previous array gives the new one, and the last is the query.
        #expect(inbox.wait { $0.last?.ids == expected() }, "seed \(seed) final \(inbox.all.count) deliveries")
        var mirror: [UUID] = []
        for delivery in inbox.all {
            if delivery.kind == 0 {
                mirror = delivery.ids
                continue
            }
            for i in delivery.d.reversed() { mirror.remove(at: i) }
            for i in delivery.i { mirror.insert(delivery.ids[i], at: i) }
            #expect(mirror == delivery.ids, "seed \(seed) change set")
        }
        // The async sequence sees the same query.
        let stream = Task { () -> [UUID]? in
            for await change in query.changes {
                if case .initial(let r) = change { return r.map(\.id) }
            }
            return nil
        }
        #expect(await stream.value == expected())

        // LiveResults on the main actor follows the query.
        let live = await MainActor.run { LiveResults(query) }
        try await db.write { tx in _ = try tx.delete(NAMessage.self, key: target) }
        world.messages[target] = nil
        let deadline = Date().addingTimeInterval(60)
        while await MainActor.run(body: { live.results.map(\.id) }) != expected() && Date() < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(await MainActor.run { live.results.map(\.id) } == expected())
        await MainActor.run { live.stop() }
    }
}

// MARK: - Errors name the field where it is

struct NALine: Codable, Sendable, Equatable {
    var name: String
    var price: Decimal
    var presence: NAPresence?
}

struct NAOrder: Model {
    var id: Int
    var lines: [NALine]
}

struct NAMoodBoard: Model {
    var id: Int
    var moods: [UInt128]
}

struct NewcomerErrorPathTests {
    /// An element's index follows its collection in an error's field path, as partial updates
    /// write it (`lines[1].price`); the record coders and the schema probe wrote `lines.[1].price`.
    @Test func errorsNameElementsAsPartialUpdatesDo() throws {
        let db = try Database.inMemory(models: [NAOrder.self])
        let order = NAOrder(id: 1, lines: [NALine(name: "a", price: 1, presence: nil), NALine(name: "b", price: .nan, presence: nil)])
        #expect {
            try db.write { tx in try tx.insert(order) }
        } throws: { error in
            guard case StrataError.typeMismatch(_, let field, _) = error else { return false }
            return field == "lines[1].price"
        }
        try db.write { tx in try tx.insert(NAOrder(id: 2, lines: [NALine(name: "a", price: 1, presence: .away)])) }
        #expect {
            try db.write { tx in try tx.update(NAOrder.self, key: 2, json: Data(#"{"lines": [{"name": "n", "price": 2, "presence": 9}]}"#.utf8)) }
        } throws: { error in
            guard case StrataError.typeMismatch(_, let field, _) = error else { return false }
            return field == "lines[0].presence"
        }
        #expect {
            _ = try Database.inMemory(models: [NAMoodBoard.self])
        } throws: { error in
            guard case StrataError.unsupportedType(_, let field, _) = error else { return false }
            return field == "moods[]"
        }
    }
}

// MARK: - Automatic keys at the end of their type

struct NANote32: Model {
    var id: Int32?
    var text: String
}

struct NANoteU32: Model {
    var id: UInt32?
    var text: String
}

struct NANote8: Model {
    var id: Int8?
    var text: String
}

struct NANoteU64: Model {
    var id: UInt64?
    var text: String
}

struct NewcomerAutoKeyTests {
    /// An unsigned optional id is an automatic key like `Int?`: the first insert of nil failed with
    /// "1 does not fit UInt64", the key being written into the field as a signed Int64.
    @Test func unsignedAutomaticKeys() throws {
        let db = try Database.inMemory(models: [NANoteU64.self, NANoteU32.self])
        let first = try db.write { tx in
            (try tx.insert(NANoteU64(id: nil, text: "a")), try tx.insert(NANoteU64(id: nil, text: "b")), try tx.upsert(NANoteU32(id: nil, text: "c")))
        }
        #expect(first.0.id == 1 && first.1.id == 2 && first.2.id == 1)
        let sync = try db.write { tx in try tx.upsert(NANoteU64.self, key: nil, json: Data(#"{"text": "d"}"#.utf8)).object }
        #expect(sync.id == 3)
        #expect(try db.run(DBWrite.insert(NANoteU64(id: nil, text: "e"))).id == 4)
        #expect(db.objects(NANoteU64.self).map(\.text) == ["a", "b", "d", "e"])
        #expect(try db.object(NANoteU64.self, key: 3)?.text == "d")
    }

    /// Past the largest key an `Int32?` or `UInt32?` holds, an automatic key says the keys ran
    /// out (as `Int?` does), not that "a stored value does not fit"; and an `Int8?` id, which is
    /// no automatic key, is not refused with a message that recommends "an optional integer".
    @Test func automaticKeysRunOutWithAClearError() throws {
        let db = try Database.inMemory(models: [NANote32.self, NANoteU32.self])
        try db.write { tx in
            try tx.insert(NANote32(id: Int32.max - 1, text: "a"))
            try tx.insert(NANoteU32(id: UInt32.max - 1, text: "a"))
        }
        #expect(try db.write { tx in try tx.insert(NANote32(id: nil, text: "b")).id } == Int32.max)
        #expect(try db.write { tx in try tx.insert(NANoteU32(id: nil, text: "b")).id } == UInt32.max)
        for insert in [
            { try db.write { tx in _ = try tx.insert(NANote32(id: nil, text: "c")) } },
            { try db.write { tx in _ = try tx.insert(NANoteU32(id: nil, text: "c")) } },
        ] as [() throws -> Void] {
            #expect {
                try insert()
            } throws: { error in
                guard case StrataError.invalidQuery(let reason) = error else { return false }
                return reason.contains("auto-increment key space exhausted")
            }
        }
        #expect(db.objects(NANote32.self).count == 2)
        #expect {
            _ = try Database.inMemory(models: [NANote8.self])
        } throws: { error in
            guard case StrataError.unsupportedType(_, "id", let reason) = error else { return false }
            return reason.contains("Int32") && !reason.contains("an optional integer")
        }
    }
}

// MARK: - distinct(by:) and NaN, as documented

struct NAPoint: Codable, Sendable, Hashable {
    var x: Double
}

struct NAReading: Model {
    var id: Int
    var value: Double
    var optional: Double?
    var series: [Double]
    var point: NAPoint
}

struct NewcomerDistinctTests {
    /// A NaN field is one group with every NaN and -0.0 groups with 0.0; an array or struct holding
    /// a NaN is unequal to everything by its own `==`, so each is a group of its own (Queries.md).
    @Test func distinctGroupsNaNFieldsButNotNaNInsideCollections() throws {
        let nan = Double("nan")!
        let db = try Database.inMemory(models: [NAReading.self])
        try db.write { tx in
            try tx.insert(contentsOf: [
                NAReading(id: 1, value: nan, optional: nil, series: [nan], point: NAPoint(x: nan)),
                NAReading(id: 2, value: nan, optional: nan, series: [nan], point: NAPoint(x: nan)),
                NAReading(id: 3, value: -0.0, optional: nan, series: [-0.0], point: NAPoint(x: -0.0)),
                NAReading(id: 4, value: 0.0, optional: 0.0, series: [0.0], point: NAPoint(x: 0.0)),
            ])
        }
        let all = db.objects(NAReading.self)
        #expect(all.distinct(by: \.value).map(\.id) == [1, 3])
        #expect(all.distinct(by: \.optional).map(\.id) == [1, 2, 4])
        #expect(all.distinct(by: \.series).map(\.id) == [1, 2, 3])
        #expect(all.distinct(by: \.point).map(\.id) == [1, 2, 3])
        #expect(all.distinct(by: \.point.x).map(\.id) == [1, 3])
    }
}

// MARK: - What a migration message names

enum NAHomesV1 {
    struct Address: Codable, Sendable {
        var city: String
        var zip: String
    }
    struct Person: Model {
        static let modelName = "NAHomesPerson"
        var id: Int
        var homes: [Address]
        var byName: [String: Address]
    }
}

enum NAHomesV2 {
    struct Address: Codable, Sendable {
        var city: String
        var zip: Int
        var street: String?
    }
    struct Person: Model {
        static let modelName = "NAHomesPerson"
        var id: Int
        var homes: [Address]
        var byName: [String: Address]
    }
}

struct NewcomerMigrationMessageTests {
    /// A changed field inside an array or dictionary of structs is named ("homes[].zip: type
    /// changed from String to Int64"), not the whole field, which read "[Address] to [Address]".
    @Test func migrationRequiredNamesTheFieldInsideACollection() throws {
        let path = naTemporaryPath("homes")
        defer { naRemove(path) }
        do {
            let db = try Database(path: path, models: [NAHomesV1.Person.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in
                try tx.insert(NAHomesV1.Person(id: 1, homes: [.init(city: "a", zip: "1")], byName: ["x": .init(city: "b", zip: "2")]))
            }
            db.close()
        }
        #expect {
            _ = try Database(path: path, models: [NAHomesV2.Person.self])
        } throws: { error in
            guard case StrataError.migrationRequired(let differences) = error else { return false }
            return differences.contains { $0.hasPrefix("NAHomesPerson.homes[].zip: type changed from String to Int64") }
                && differences.contains { $0.hasPrefix("NAHomesPerson.byName[key].zip: type changed from String to Int64") }
                && !differences.contains { $0.contains("[Address] to [Address]") }
        }
    }
}
