import Testing
import Foundation
import StrataStorage
import StrataTestWorkloads
@testable import Strata

// An app developer's model evolving across versions, checked against a plain Swift model kept
// alongside: every version reopens the file, and every query must answer what
// `predicate.evaluate` and `SortDescriptor.compare` (ties in key order) answer over the plain
// objects. Random data comes from a fixed seed (`STRATA_MIGHUNT_SEED`), printed with any failure;
// the migration of many records takes `STRATA_MIGHUNT_N` objects (2,000 by default).

enum MigrationHunt {
    static let seed = ProcessInfo.processInfo.environment["STRATA_MIGHUNT_SEED"].flatMap(UInt64.init) ?? 20_261_202
    static let count = ProcessInfo.processInfo.environment["STRATA_MIGHUNT_N"].flatMap(Int.init) ?? 2_000

    /// What a query means: `plain` filtered by `predicate`, sorted by `sort` with ties in key
    /// order, then windowed.
    static func expected<M: Model>(_ plain: [M], _ predicate: Predicate<M>?, _ sort: [SortDescriptor<M>], limit: Int?) throws -> [M]
    where M.ID: Comparable {
        var result = try plain.filter { try predicate?.evaluate($0) ?? true }
        result.sort { a, b in
            for descriptor in sort {
                switch descriptor.compare(a, b) {
                case .orderedAscending: return true
                case .orderedDescending: return false
                case .orderedSame: continue
                }
            }
            return a.id < b.id
        }
        if let limit { result = Array(result.prefix(limit)) }
        return result
    }

    /// Runs the query on `source` and checks its objects and its count against the plain model.
    static func check<M: Model & Equatable>(
        _ source: Results<M>, _ plain: [M], _ label: String, where predicate: Predicate<M>? = nil, sort: [SortDescriptor<M>] = [],
        limit: Int? = nil, sourceLocation: SourceLocation = #_sourceLocation
    ) throws where M.ID: Comparable {
        var results = source
        if let predicate { results = results.filter(predicate) }
        if !sort.isEmpty { results = results.sorted(by: sort) }
        if let limit { results = results.prefix(limit) }
        let want = try expected(plain, predicate, sort, limit: limit)
        let got = try results.fetch()
        #expect(
            got == want,
            "\(label) (seed \(seed)): got \(got.count) \(got.prefix(12).map(\.id)), expected \(want.count) \(want.prefix(12).map(\.id)); first differing: \(firstDifference(got, want)); plan: \(results.explain())",
            sourceLocation: sourceLocation)
        #expect(try results.fetchCount() == want.count, "\(label) count (seed \(seed)); plan: \(results.explain())", sourceLocation: sourceLocation)
    }

    static func firstDifference<M: Model & Equatable>(_ got: [M], _ want: [M]) -> String {
        for (a, b) in zip(got, want) where a != b { return "got \(a) expected \(b)" }
        return got.count == want.count ? "none" : "lengths \(got.count) and \(want.count)"
    }

    /// Every object in key order equals the plain model's.
    static func checkAll<M: Model & Equatable>(_ db: Database, _ plain: [M], _ label: String, sourceLocation: SourceLocation = #_sourceLocation) throws
    where M.ID: Comparable {
        let got = try db.objects(M.self).fetch()
        let want = plain.sorted { $0.id < $1.id }
        #expect(got == want, "\(label) (seed \(seed)): \(firstDifference(got, want))", sourceLocation: sourceLocation)
    }

    /// The text a thrown error describes itself with (`StrataError.description`).
    static func message(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch {
            return String(describing: error)
        }
    }

    static func storedSchema(_ path: String, _ model: String) throws -> StoredModelSchema? {
        try StoredObjects.schemas(in: try Store(path: path)).first { $0.name == model }
    }
}

// MARK: - Fields: added, removed, reordered, renamed, widened, made optional

enum MHStatus: String, Codable, Sendable, CaseIterable { case open, blocked, closed }

enum MHFieldsV1 {
    struct Home: Codable, Sendable, Equatable {
        var street: String
        var city: String
    }
    struct Visit: Codable, Sendable, Equatable {
        var place: String
        var minutes: Int
    }
    struct Task: Model, Equatable {
        static let modelName = "MHTask"
        static let indexes: [PartialKeyPath<Task> & Sendable] = [\.priority, \.owner]
        var id: Int
        var title: String
        var owner: String
        var priority: Int32
        var done: Bool
        var legacy: String
        var home: Home
        var visits: [Visit]
    }
}

enum MHFieldsV2 {
    /// `street` removed, `zip` added.
    struct Home: Codable, Sendable, Equatable {
        var city: String
        var zip: String?
    }
    /// `minutes` removed, `rating` added before `place`.
    struct Visit: Codable, Sendable, Equatable {
        var rating: Int?
        var place: String
    }
    struct Extra: Codable, Sendable, Equatable {
        var color: String
        var weight: Double
    }
    /// Fields reordered, `legacy` removed, `priority` widened, `owner` made optional (and still
    /// indexed), `title` renamed in Swift but stored under its old name, new optional fields of
    /// every kind, and `level` new with a default read by a hand-written `init(from:)`.
    struct Task: Model, Equatable {
        static let modelName = "MHTask"
        static let indexes: [PartialKeyPath<Task> & Sendable] = [\.priority, \.owner, \.level]
        var done: Bool
        var id: Int
        var priority: Int64
        var owner: String?
        var heading: String
        var note: String?
        var level: Int
        var status: MHStatus?
        var labels: [String]?
        var home: Home
        var extra: Extra?
        var visits: [Visit]
        enum CodingKeys: String, CodingKey {
            case done, id, priority, owner, heading = "title", note, level, status, labels, home, extra, visits
        }
    }
}

extension MHFieldsV2.Task {
    init(v1: MHFieldsV1.Task) {
        self.init(
            done: v1.done, id: v1.id, priority: Int64(v1.priority), owner: v1.owner, heading: v1.title, note: nil, level: 3, status: nil,
            labels: nil, home: MHFieldsV2.Home(city: v1.home.city, zip: nil), extra: nil,
            visits: v1.visits.map { MHFieldsV2.Visit(rating: nil, place: $0.place) })
    }
}

extension MHFieldsV2.Task {
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        done = try c.decode(Bool.self, forKey: .done)
        id = try c.decode(Int.self, forKey: .id)
        priority = try c.decode(Int64.self, forKey: .priority)
        owner = try c.decodeIfPresent(String.self, forKey: .owner)
        heading = try c.decode(String.self, forKey: .heading)
        note = try c.decodeIfPresent(String.self, forKey: .note)
        level = try c.decodeIfPresent(Int.self, forKey: .level) ?? 3
        status = try c.decodeIfPresent(MHStatus.self, forKey: .status)
        labels = try c.decodeIfPresent([String].self, forKey: .labels)
        home = try c.decode(MHFieldsV2.Home.self, forKey: .home)
        extra = try c.decodeIfPresent(MHFieldsV2.Extra.self, forKey: .extra)
        visits = try c.decode([MHFieldsV2.Visit].self, forKey: .visits)
    }
}

/// Array and dictionary elements that are structs, evolved as a nested struct may be.
enum MHElementsV1 {
    struct Stop: Codable, Sendable, Equatable {
        var street: String
        var city: String
        var minutes: Int
    }
    struct Route: Model, Equatable {
        static let modelName = "MHRoute"
        var id: Int
        var stops: [Stop]
        var byName: [String: Stop]
        var maybe: [Stop]?
    }
}

enum MHElementsV2 {
    /// `street` removed, `note` added first, `minutes` moved before `city`.
    struct Stop: Codable, Sendable, Equatable {
        var note: String?
        var minutes: Int
        var city: String
    }
    struct Route: Model, Equatable {
        static let modelName = "MHRoute"
        var id: Int
        var stops: [Stop]
        var byName: [String: Stop]
        var maybe: [Stop]?
    }
}

enum MHDefaultV1 {
    struct Item: Model, Equatable {
        static let modelName = "MHItem"
        var id: Int
        var name: String
    }
}

enum MHDefaultV2 {
    /// `level` is new and not optional in Swift: `init(from:)` reads a missing one as 3.
    struct Item: Model, Equatable {
        static let modelName = "MHItem"
        static let indexes: [PartialKeyPath<Item> & Sendable] = [\.level]
        var id: Int
        var name: String
        var level: Int
        var kind: MHStatus
        enum CodingKeys: String, CodingKey { case id, name, level, kind }
    }
}

extension MHDefaultV2.Item {
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        name = try c.decode(String.self, forKey: .name)
        level = try c.decodeIfPresent(Int.self, forKey: .level) ?? 3
        kind = try c.decodeIfPresent(MHStatus.self, forKey: .kind) ?? .open
    }
}

enum MHOptionalV1 {
    struct Card: Model, Equatable {
        static let modelName = "MHCard"
        static let indexes: [PartialKeyPath<Card> & Sendable] = [\.owner, \.size]
        static let indexDescriptors: [IndexDescriptor<Card>] = [
            .on(\.owner, \.size), .on(\.label, collation: .caseInsensitive), .unique(\.code),
        ]
        var id: Int
        var owner: String
        var size: Int32
        var label: String
        var code: String
    }
}

enum MHOptionalV2 {
    /// Every indexed field made optional (`size` widened too): no migration, same indexes.
    struct Card: Model, Equatable {
        static let modelName = "MHCard"
        static let indexes: [PartialKeyPath<Card> & Sendable] = [\.owner, \.size]
        static let indexDescriptors: [IndexDescriptor<Card>] = [
            .on(\.owner, \.size), .on(\.label, collation: .caseInsensitive), .unique(\.code),
        ]
        var id: Int
        var owner: String?
        var size: Int64?
        var label: String?
        var code: String?
    }
}

enum MHOptionalV3 {
    /// `owner` required again: that needs a migration.
    struct Card: Model, Equatable {
        static let modelName = "MHCard"
        static let indexes: [PartialKeyPath<Card> & Sendable] = [\.owner, \.size]
        var id: Int
        var owner: String
        var size: Int64?
        var label: String?
        var code: String?
    }
}

// MARK: - Indexes that come and go: one stored shape, a different index set per version

protocol MHNoteVersion: Sendable {
    static var plain: [PartialKeyPath<MHNote<Self>> & Sendable] { get }
    static var unique: [PartialKeyPath<MHNote<Self>> & Sendable] { get }
    static var descriptors: [IndexDescriptor<MHNote<Self>>] { get }
}

struct MHNote<V: MHNoteVersion>: Model, Equatable {
    static var modelName: String { "MHNote" }
    static var indexes: [PartialKeyPath<MHNote> & Sendable] { V.plain }
    static var uniqueIndexes: [PartialKeyPath<MHNote> & Sendable] { V.unique }
    static var indexDescriptors: [IndexDescriptor<MHNote>] { V.descriptors }
    var id: Int
    var room: Int
    var author: String
    var rank: Int
    var text: String
    var tag: String?
    var at: Date

    func converted<W>(to: W.Type) -> MHNote<W> {
        MHNote<W>(id: id, room: room, author: author, rank: rank, text: text, tag: tag, at: at)
    }
}

/// No index.
enum MHNoteV1: MHNoteVersion {
    static var plain: [PartialKeyPath<MHNote<Self>> & Sendable] { [] }
    static var unique: [PartialKeyPath<MHNote<Self>> & Sendable] { [] }
    static var descriptors: [IndexDescriptor<MHNote<Self>>] { [] }
}

/// Single-field, compound, collated and full-text indexes.
enum MHNoteV2: MHNoteVersion {
    static var plain: [PartialKeyPath<MHNote<Self>> & Sendable] { [\.room, \.rank, \.tag] }
    static var unique: [PartialKeyPath<MHNote<Self>> & Sendable] { [] }
    static var descriptors: [IndexDescriptor<MHNote<Self>>] {
        [.on(\.room, \.at), .fullText(\.text), .on(\.author, collation: .caseInsensitive)]
    }
}

/// `room`, full-text and collated dropped; unique single and compound indexes added.
enum MHNoteV3: MHNoteVersion {
    static var plain: [PartialKeyPath<MHNote<Self>> & Sendable] { [\.tag] }
    static var unique: [PartialKeyPath<MHNote<Self>> & Sendable] { [\.rank] }
    static var descriptors: [IndexDescriptor<MHNote<Self>>] { [.unique(\.room, \.rank), .on(\.author, \.room)] }
}

/// A unique index on `author`, which the data repeats.
enum MHNoteV4: MHNoteVersion {
    static var plain: [PartialKeyPath<MHNote<Self>> & Sendable] { [\.tag] }
    static var unique: [PartialKeyPath<MHNote<Self>> & Sendable] { [\.rank, \.author] }
    static var descriptors: [IndexDescriptor<MHNote<Self>>] { [.unique(\.room, \.rank)] }
}

// MARK: - Migrations

enum MHAccountV1 {
    struct Account: Model, Equatable {
        static let modelName = "MHAccount"
        static let uniqueIndexes: [PartialKeyPath<Account> & Sendable] = [\.email]
        var id: Int
        var name: String
        var balance: String  // "12.50"
        var joined: Int  // seconds since 1970
        var email: String
        var nick: String?
        var home: MHFieldsV1.Home
    }
}

enum MHAccountV2 {
    struct Home: Codable, Sendable, Equatable {
        var street: String
        var city: String
        var zip: Int  // new, not optional
    }
    /// `name` stored as `fullName` now, `balance` an Int of cents, `joined` a Date, `nick`
    /// required, `tier` new and required, `home.zip` new and required.
    struct Account: Model, Equatable {
        static let modelName = "MHAccount"
        static let uniqueIndexes: [PartialKeyPath<Account> & Sendable] = [\.email]
        static let indexes: [PartialKeyPath<Account> & Sendable] = [\.cents]
        static let indexDescriptors: [IndexDescriptor<Account>] = [.on(\.tier, \.cents)]
        var id: Int
        var name: String
        var cents: Int
        var joined: Date
        var email: String
        var nick: String
        var tier: Int
        var home: Home
        enum CodingKeys: String, CodingKey {
            case id, name = "fullName", cents = "balance", joined, email, nick, tier, home
        }
    }
}

/// Version 2 with a unique index on `tier`, which the migrated data repeats.
enum MHAccountV2UniqueTier {
    struct Account: Model, Equatable {
        static let modelName = "MHAccount"
        static let uniqueIndexes: [PartialKeyPath<Account> & Sendable] = [\.email, \.tier]
        var id: Int
        var name: String
        var cents: Int
        var joined: Date
        var email: String
        var nick: String
        var tier: Int
        var home: MHAccountV2.Home
        enum CodingKeys: String, CodingKey {
            case id, name = "fullName", cents = "balance", joined, email, nick, tier, home
        }
    }
}

enum MHErrorsV1 {
    struct Visit: Codable, Sendable, Equatable {
        var place: String
        var minutes: Int
    }
    struct Thing: Model {
        static let modelName = "MHThing"
        var id: Int
        var code: String
        var nick: String?
        var count: Int64
        var signedCount: Int
        var home: MHFieldsV1.Home
        var visits: [Visit]
        var byName: [String: Visit]
    }
}

enum MHErrorsV2 {
    struct Home: Codable, Sendable, Equatable {
        var street: String
        var city: Int
    }
    struct Visit: Codable, Sendable, Equatable {
        var place: String
        var minutes: String
    }
    struct Thing: Model {
        static let modelName = "MHThing"
        var id: Int
        var code: Int
        var nick: String
        var count: Int32
        var signedCount: UInt
        var home: Home
        var visits: [Visit]
        var byName: [String: Visit]
        var added: Double
    }
}

// MARK: - The suite

@Suite struct MigrationHuntTests {
    typealias H = MigrationHunt

    static func tasksV1(_ n: Int, seed: UInt64) -> [MHFieldsV1.Task] {
        var random = KillRandom(seed: seed)
        return (0..<n).map { i in
            MHFieldsV1.Task(
                id: i, title: "task \(i)", owner: "o\(random.below(5))", priority: Int32(random.below(12)) - 2, done: random.percent(30),
                legacy: "legacy \(i)", home: MHFieldsV1.Home(street: "s\(i)", city: "c\(random.below(4))"),
                visits: (0..<random.below(3)).map { MHFieldsV1.Visit(place: "p\(random.below(6))", minutes: 10 * $0 + 1) })
        }
    }

    /// The queries every version of the task model must answer as the plain model does.
    static func checkTasks(_ db: Database, _ plain: [MHFieldsV2.Task], _ label: String) throws {
        try H.checkAll(db, plain, label)
        let all = db.objects(MHFieldsV2.Task.self)
        let owner: String? = "o2"
        try H.check(all, plain, "\(label): owner == o2", where: #Predicate { $0.owner == owner })
        try H.check(all, plain, "\(label): owner == nil", where: #Predicate { $0.owner == nil })
        try H.check(all, plain, "\(label): level == 3", where: #Predicate { $0.level == 3 })
        try H.check(all, plain, "\(label): level > 2", where: #Predicate { $0.level > 2 })
        try H.check(
            all, plain, "\(label): priority range, sorted", where: #Predicate { $0.priority >= 0 && $0.priority < 6 },
            sort: [SortDescriptor(\.priority, order: .reverse)])
        try H.check(all, plain, "\(label): home.city", where: #Predicate { $0.home.city == "c1" })
        try H.check(all, plain, "\(label): heading", where: #Predicate { $0.heading == "task 7" })
        try H.check(all, plain, "\(label): note nil and done", where: #Predicate { $0.note == nil && $0.done })
        try H.check(all, plain, "\(label): sorted by level, priority", sort: [SortDescriptor(\.level), SortDescriptor(\.priority)], limit: 25)
        try H.check(all, plain, "\(label): sorted by owner", sort: [SortDescriptor(\.owner)])
        let filtered = all.filter(#Predicate { $0.owner == owner })
        let matching = plain.filter { $0.owner == owner }
        #expect(filtered.sum(of: \.priority) == matching.reduce(0) { $0 + $1.priority }, "\(label) (seed \(H.seed))")
        #expect(all.sum(of: \.level) == plain.reduce(0) { $0 + $1.level }, "\(label) sum of level (seed \(H.seed))")
        #expect(all.min(of: \.level) == plain.map(\.level).min(), "\(label) min of level (seed \(H.seed))")
        #expect(all.max(of: \.priority) == plain.map(\.priority).max(), "\(label) (seed \(H.seed))")
        #expect(all.filter(#Predicate { $0.level == 3 }).count == plain.filter { $0.level == 3 }.count, "\(label) (seed \(H.seed))")
    }

    @Test func fieldsEvolveAcrossVersions() throws {
        let path = databasePath()
        let v1 = Self.tasksV1(300, seed: H.seed)
        do {
            let db = try Database(path: path, models: [MHFieldsV1.Task.self])
            try db.write { tx in for task in v1 { try tx.insert(task) } }
            try H.checkAll(db, v1, "v1")
        }
        // Version 2: only changes that apply by themselves.
        var plain = v1.map(MHFieldsV2.Task.init(v1:))
        do {
            let db = try Database(path: path, models: [MHFieldsV2.Task.self])
            try Self.checkTasks(db, plain, "v2 right after reopen")
            var random = KillRandom(seed: H.seed &+ 1)
            try db.write { tx in
                for i in stride(from: 0, to: plain.count, by: 7) {
                    plain[i].note = "n\(i)"
                    plain[i].level = random.below(6)
                    plain[i].status = .blocked
                    plain[i].labels = ["a", "b\(i % 3)"]
                    plain[i].extra = MHFieldsV2.Extra(color: "red", weight: Double(i) / 4)
                    plain[i].home.zip = "z\(i)"
                    plain[i].visits.append(MHFieldsV2.Visit(rating: 5, place: "new"))
                    if i % 2 == 0 { plain[i].owner = nil }
                    try tx.upsert(plain[i])
                }
                for i in 300..<320 {
                    let task = MHFieldsV2.Task(
                        done: false, id: i, priority: Int64(Int32.max) + Int64(i), owner: i % 3 == 0 ? nil : "o2", heading: "task \(i)", note: nil,
                        level: 3, status: .open, labels: [], home: MHFieldsV2.Home(city: "c1", zip: nil), extra: nil, visits: [])
                    plain.append(task)
                    try tx.insert(task)
                }
            }
            try Self.checkTasks(db, plain, "v2 after writes")
        }
        let db = try Database(path: path, models: [MHFieldsV2.Task.self])
        try Self.checkTasks(db, plain, "v2 reopened")
        let check = try StoredObjects.check(in: db.store)
        #expect(check.problems.isEmpty, "\(check.problems)")
    }

    /// A struct inside an array, an optional array or a dictionary evolves as a nested struct
    /// does: fields removed, added and reordered, and old elements still read their own values.
    @Test func elementStructsEvolve() throws {
        let path = databasePath()
        var random = KillRandom(seed: H.seed &+ 2)
        func stop() -> MHElementsV1.Stop {
            MHElementsV1.Stop(street: "street \(random.below(100))", city: "city \(random.below(9))", minutes: random.below(60))
        }
        let v1 = (0..<40).map { i in
            MHElementsV1.Route(
                id: i, stops: (0..<random.below(4)).map { _ in stop() }, byName: ["a": stop(), "b\(i % 3)": stop()], maybe: i % 2 == 0 ? [stop()] : nil)
        }
        do {
            let db = try Database(path: path, models: [MHElementsV1.Route.self])
            try db.write { tx in for route in v1 { try tx.insert(route) } }
        }
        func convert(_ s: MHElementsV1.Stop) -> MHElementsV2.Stop { MHElementsV2.Stop(note: nil, minutes: s.minutes, city: s.city) }
        var plain = v1.map { MHElementsV2.Route(id: $0.id, stops: $0.stops.map(convert), byName: $0.byName.mapValues(convert), maybe: $0.maybe?.map(convert)) }
        do {
            let db = try Database(path: path, models: [MHElementsV2.Route.self])
            try H.checkAll(db, plain, "v2 elements right after reopen")
            try db.write { tx in
                plain[1].stops.append(MHElementsV2.Stop(note: "x", minutes: 7, city: "city 1"))
                try tx.upsert(plain[1])
            }
            try H.checkAll(db, plain, "v2 elements after a write")
            let city = "city 3"
            let minutes = 30
            try H.check(
                db.objects(MHElementsV2.Route.self), plain, "routes through city 3",
                where: #Predicate { route in route.stops.contains { $0.city == city } })
            try H.check(
                db.objects(MHElementsV2.Route.self), plain, "routes with a long stop",
                where: #Predicate { route in route.stops.contains { $0.minutes > minutes } })
        }
        let db = try Database(path: path, models: [MHElementsV2.Route.self])
        try H.checkAll(db, plain, "v2 elements reopened")
        // Back to version 1's element shape: `street` was removed, so it is a new field now and
        // required: that needs a migration, which must say where.
        let text = H.message { _ = try Database(path: path, models: [MHElementsV1.Route.self]) }
        #expect(text?.contains("MHRoute.stops[].street") == true, "\(text ?? "opened")")
    }

    /// A field new in this version whose `init(from:)` reads a missing value as a default: old
    /// objects decode with the default, and queries, sorts and aggregates must agree.
    @Test func defaultedFieldsQueryAsDecoded() throws {
        let path = databasePath()
        let v1 = (0..<60).map { MHDefaultV1.Item(id: $0, name: "item \($0)") }
        do {
            let db = try Database(path: path, models: [MHDefaultV1.Item.self])
            try db.write { tx in for item in v1 { try tx.insert(item) } }
        }
        var plain = v1.map { MHDefaultV2.Item(id: $0.id, name: $0.name, level: 3, kind: .open) }
        let db = try Database(path: path, models: [MHDefaultV2.Item.self])
        try db.write { tx in
            for i in stride(from: 0, to: 60, by: 4) {
                plain[i].level = i % 8 == 0 ? 3 : 5
                plain[i].kind = i % 8 == 0 ? .open : .closed
                try tx.upsert(plain[i])
            }
        }
        try H.checkAll(db, plain, "defaults")
        let all = db.objects(MHDefaultV2.Item.self)
        let open = MHStatus.open
        try H.check(all, plain, "level == 3", where: #Predicate { $0.level == 3 })
        try H.check(all, plain, "level != 5", where: #Predicate { $0.level != 5 })
        try H.check(all, plain, "level >= 3", where: #Predicate { $0.level >= 3 })
        try H.check(all, plain, "kind == open", where: #Predicate { $0.kind == open })
        let levels = [3, 4]
        try H.check(all, plain, "level in list", where: #Predicate { levels.contains($0.level) })
        try H.check(all, plain, "sorted by level", sort: [SortDescriptor(\.level, order: .reverse)], limit: 10)
        #expect(all.sum(of: \.level) == plain.reduce(0) { $0 + $1.level }, "seed \(H.seed)")
        #expect(all.min(of: \.level) == plain.map(\.level).min(), "seed \(H.seed)")
        #expect(all.filter(#Predicate { $0.level == 3 }).count == plain.filter { $0.level == 3 }.count)
        #expect(try db.snapshot().objects(MHDefaultV2.Item.self).filter(\.level, equals: 3).fetchCount() == plain.filter { $0.level == 3 }.count)
    }

    /// Indexed fields made optional (no migration): the indexes must still find the old objects.
    @Test func indexedFieldsMadeOptional() throws {
        let path = databasePath()
        var random = KillRandom(seed: H.seed &+ 3)
        let v1 = (0..<200).map { i in
            MHOptionalV1.Card(
                id: i, owner: "o\(random.below(6))", size: Int32(random.below(10)), label: ["Ab", "ab", "AB", "cd", "Cd"][random.below(5)], code: "k\(i)")
        }
        do {
            let db = try Database(path: path, models: [MHOptionalV1.Card.self])
            try db.write { tx in for card in v1 { try tx.insert(card) } }
        }
        var plain = v1.map { MHOptionalV2.Card(id: $0.id, owner: $0.owner, size: Int64($0.size), label: $0.label, code: $0.code) }
        let db = try Database(path: path, models: [MHOptionalV2.Card.self])
        try db.write { tx in
            for i in 200..<210 {
                let card = MHOptionalV2.Card(
                    id: i, owner: i % 2 == 0 ? nil : "o1", size: i % 3 == 0 ? nil : 4, label: i % 4 == 0 ? nil : "ab", code: i == 200 ? nil : "k\(i)")
                plain.append(card)
                try tx.insert(card)
            }
        }
        let all = db.objects(MHOptionalV2.Card.self)
        let o1: String? = "o1"
        let four: Int64? = 4
        try H.check(all, plain, "owner == o1", where: #Predicate { $0.owner == o1 })
        try H.check(all, plain, "owner == nil", where: #Predicate { $0.owner == nil })
        try H.check(all, plain, "size == 4", where: #Predicate { $0.size == four })
        try H.check(all, plain, "owner == o1 && size == 4", where: #Predicate { $0.owner == o1 && $0.size == four })
        try H.check(all, plain, "code == k17", where: #Predicate { $0.code == "k17" })
        try H.check(all, plain, "sorted by size", sort: [SortDescriptor(\.size), SortDescriptor(\.id, order: .reverse)])
        let folded = all.filter(\.label, matching: .equals("ab"), options: [.caseInsensitive])
        let want = plain.filter { $0.label?.lowercased() == "ab" }.map(\.id)
        #expect(try folded.fetch().map(\.id) == want, "seed \(H.seed); plan: \(folded.explain())")
        // The unique index still rejects an old code.
        #expect(throws: StrataError.self) {
            try db.write { tx in try tx.insert(MHOptionalV2.Card(id: 999, owner: nil, size: nil, label: nil, code: "k5")) }
        }
        let check = try StoredObjects.check(in: db.store)
        #expect(check.problems.isEmpty, "\(check.problems)")
        // Required again: a migration, which the error names.
        let text = H.message { _ = try Database(path: path, models: [MHOptionalV3.Card.self]) }
        #expect(text?.contains("MHCard.owner: type changed from String? to String") == true, "\(text ?? "opened")")
    }

    /// The same data under four index sets: after each reopen, every query (plain, compound,
    /// collated, full-text, unique) answers as the plain model does.
    @Test func indexesComeAndGoAcrossVersions() throws {
        let path = databasePath()
        var random = KillRandom(seed: H.seed &+ 4)
        let words = ["alpha", "beta", "gamma", "delta", "alps", "bet", "omega"]
        let authors = ["Ana", "ana", "Ben", "bén", "Cy"]
        let base = Date(timeIntervalSince1970: 1_700_000_000)
        let plain1 = (0..<400).map { i in
            MHNote<MHNoteV1>(
                id: i, room: random.below(8), author: authors[random.below(authors.count)], rank: i * 7 % 401,
                text: (0..<1 + random.below(4)).map { _ in words[random.below(words.count)] }.joined(separator: " "),
                tag: random.percent(40) ? nil : "t\(random.below(3))", at: base.addingTimeInterval(Double(random.below(500) * 60)))
        }
        do {
            let db = try Database(path: path, models: [MHNote<MHNoteV1>.self])
            try db.write { tx in for note in plain1 { try tx.insert(note) } }
            try Self.checkNotes(db, plain1, "v1 no index", seed: H.seed)
        }
        for version in 0..<2 {
            // v2, v3, then v2 again and v3 again: every index built, dropped and built again.
            do {
                let db = try Database(path: path, models: [MHNote<MHNoteV2>.self])
                try Self.checkNotes(db, plain1.map { $0.converted(to: MHNoteV2.self) }, "v2 pass \(version)", seed: H.seed &+ UInt64(version))
                try Self.checkSearch(db, plain1.map { $0.converted(to: MHNoteV2.self) }, "v2 pass \(version)")
                let explain = db.objects(MHNote<MHNoteV2>.self).search(\.text, "alpha").explain()
                #expect(explain.contains("fullText") || explain.contains("full text"), "\(explain)")
            }
            do {
                let db = try Database(path: path, models: [MHNote<MHNoteV3>.self])
                try Self.checkNotes(db, plain1.map { $0.converted(to: MHNoteV3.self) }, "v3 pass \(version)", seed: H.seed &+ 10 &+ UInt64(version))
                try Self.checkSearch(db, plain1.map { $0.converted(to: MHNoteV3.self) }, "v3 pass \(version) (no index)")
                let names = try db.store.read { try $0.treeNames() }
                #expect(!names.contains { $0.hasPrefix("i:MHNote:text") || $0 == "i:MHNote:room" }, "\(names)")
                #expect(throws: StrataError.self) {
                    try db.write { tx in try tx.insert(MHNote<MHNoteV3>(id: 1000, room: 0, author: "x", rank: 7, text: "", tag: nil, at: base)) }
                }
            }
        }
        // A unique index over data that repeats its value fails, names the index, and leaves the
        // file as version 3 wrote it.
        let before = try H.storedSchema(path, "MHNote")
        var failure: (any Error)?
        do { _ = try Database(path: path, models: [MHNote<MHNoteV4>.self]) } catch { failure = error }
        guard case StrataError.uniqueViolation(let model, let field, let value)? = failure as? StrataError else {
            Issue.record("expected a unique violation, got \(String(describing: failure))")
            return
        }
        #expect(model == "MHNote" && field.contains("author"), "\(String(describing: failure))")
        // It names the repeated value, and that the index was being built at open.
        let repeated = Dictionary(grouping: plain1, by: \.author).filter { $0.value.count > 1 }.keys
        #expect(repeated.contains { value.hasPrefix("\"\($0)\" (held by ") }, "\(value)")
        #expect(value.contains("found building the new unique index"), "\(value)")
        #expect(try H.storedSchema(path, "MHNote") == before)
        let db = try Database(path: path, models: [MHNote<MHNoteV3>.self])
        try Self.checkNotes(db, plain1.map { $0.converted(to: MHNoteV3.self) }, "v3 after the failed v4", seed: H.seed &+ 20)
        let check = try StoredObjects.check(in: db.store)
        #expect(check.problems.isEmpty, "\(check.problems)")
    }

    static func checkNotes<V: MHNoteVersion>(_ db: Database, _ plain: [MHNote<V>], _ label: String, seed: UInt64) throws {
        try H.checkAll(db, plain, label)
        var random = KillRandom(seed: seed)
        let all = db.objects(MHNote<V>.self)
        for round in 0..<6 {
            let room = random.below(9)
            let rank = random.below(401)
            let rooms = [random.below(8), random.below(8), 11]
            let tag: String? = random.percent(20) ? nil : "t\(random.below(4))"
            let author = ["Ana", "ana", "Ben", "bén", "Cy", "Zed"][random.below(6)]
            let at = Date(timeIntervalSince1970: 1_700_000_000 + Double(random.below(500) * 60))
            let l = "\(label) round \(round)"
            try H.check(all, plain, "\(l): room ==", where: #Predicate { $0.room == room })
            try H.check(
                all, plain, "\(l): room == && at >=", where: #Predicate { $0.room == room && $0.at >= at }, sort: [SortDescriptor(\.at, order: .reverse)])
            try H.check(all, plain, "\(l): room, newest 5", where: #Predicate { $0.room == room }, sort: [SortDescriptor(\.at, order: .reverse)], limit: 5)
            try H.check(all, plain, "\(l): rank range", where: #Predicate { $0.rank >= rank && $0.rank < rank + 40 }, sort: [SortDescriptor(\.rank)])
            try H.check(all, plain, "\(l): rank ==", where: #Predicate { $0.rank == rank })
            try H.check(all, plain, "\(l): room and rank", where: #Predicate { $0.room == room && $0.rank == rank })
            try H.check(all, plain, "\(l): tag ==", where: #Predicate { $0.tag == tag })
            try H.check(
                all, plain, "\(l): tag != nil, sorted by tag", where: #Predicate { $0.tag != nil }, sort: [SortDescriptor(\.tag), SortDescriptor(\.rank)])
            try H.check(all, plain, "\(l): author ==", where: #Predicate { $0.author == author }, sort: [SortDescriptor(\.author)])
            try H.check(all, plain, "\(l): author and room", where: #Predicate { $0.author == author && $0.room >= room })
            try H.check(all, plain, "\(l): rooms IN", where: #Predicate { rooms.contains($0.room) }, sort: [SortDescriptor(\.rank, order: .reverse)])
            try H.check(all, plain, "\(l): or", where: #Predicate { $0.room == room || $0.rank < 20 })
            try H.check(all, plain, "\(l): not", where: #Predicate { !($0.room == room) }, sort: [SortDescriptor(\.at)], limit: 30)
            try H.check(all, plain, "\(l): sorted by author, rank", sort: [SortDescriptor(\.author), SortDescriptor(\.rank, order: .reverse)], limit: 40)
            let inRoom = all.filter(#Predicate { $0.room == room })
            let matching = plain.filter { $0.room == room }
            #expect(inRoom.count == matching.count, "\(l) (seed \(seed))")
            #expect(inRoom.sum(of: \.rank) == matching.reduce(0) { $0 + $1.rank }, "\(l) (seed \(seed))")
            #expect(inRoom.max(of: \.at) == matching.map(\.at).max(), "\(l) (seed \(seed))")
            #expect(inRoom.min(of: \.rank) == matching.map(\.rank).min(), "\(l) (seed \(seed))")
            #expect(inRoom.average(of: \.rank) == (matching.isEmpty ? nil : Double(matching.reduce(0) { $0 + $1.rank }) / Double(matching.count)), "\(l)")
        }
    }

    /// Searches answered with and without a full-text index, against the words of the plain
    /// texts (lowercase ASCII words separated by spaces).
    static func checkSearch<V: MHNoteVersion>(_ db: Database, _ plain: [MHNote<V>], _ label: String) throws {
        let all = db.objects(MHNote<V>.self)
        func words(_ note: MHNote<V>) -> [Substring] { note.text.split(separator: " ") }
        let cases: [(TextSearch, (MHNote<V>) -> Bool)] = [
            ("alpha", { words($0).contains("alpha") }),
            ("alpha beta", { words($0).contains("alpha") && words($0).contains("beta") }),
            ("al*", { words($0).contains { $0.hasPrefix("al") } }),
            (.anyWord("omega bet"), { words($0).contains("omega") || words($0).contains("bet") }),
            (
                .phrase("gamma delta"),
                { n in
                    let w = words(n); return zip(w, w.dropFirst()).contains { $0 == "gamma" && $1 == "delta" }
                }
            ),
        ]
        for (search, matches) in cases {
            let want = plain.filter(matches).map(\.id).sorted()
            let results = all.search(\.text, search).sorted(by: SortDescriptor(\.id))
            #expect(try results.fetch().map(\.id) == want, "\(label): \(search) (seed \(H.seed)); plan \(results.explain())")
            #expect(try results.fetchCount() == want.count, "\(label): \(search)")
            let room3 = all.search(\.text, search).filter(#Predicate { $0.room == 3 })
            #expect(Set(try room3.fetch().map(\.id)) == Set(plain.filter { matches($0) && $0.room == 3 }.map(\.id)), "\(label): \(search) in room 3")
        }
    }

    static func accountsV1(_ n: Int, seed: UInt64) -> [MHAccountV1.Account] {
        var random = KillRandom(seed: seed)
        return (0..<n).map { i in
            MHAccountV1.Account(
                id: i, name: "name \(i)", balance: "\(random.below(300)).\(String(format: "%02d", random.below(100)))", joined: 1_600_000_000 + i * 3600,
                email: "u\(i)@example.com", nick: random.percent(50) ? nil : "nick\(i)", home: MHFieldsV1.Home(street: "s\(i)", city: "c\(random.below(5))"))
        }
    }

    /// The migration of version 1 to version 2, as the app writes it, and the same on the plain model.
    static func migrateAccount(_ old: Migration.OldObject, _ new: inout Migration.MigrationObject) throws {
        let cents = Int64(Self.cents(old["balance"]?.stringValue ?? "0"))
        new["fullName"] = old["name"]
        new["balance"] = .int(cents)
        new["joined"] = .date(Date(timeIntervalSince1970: Double(old["joined"]?.intValue ?? 0)))
        new["nick"] = old["nick"] ?? .string("")
        new["tier"] = .int(cents >= 15_000 ? 2 : 1)
        var home = old["home"]?.objectValue ?? [:]
        home["zip"] = .int(Int64(old.key.intValue ?? 0) % 97)
        new["home"] = .object(home)
        if (old.key.intValue ?? 0) % 50 == 49 { new.delete() }
    }

    static func cents(_ text: String) -> Int {
        let parts = text.split(separator: ".")
        return (Int(parts.first ?? "0") ?? 0) * 100 + (parts.count > 1 ? Int(parts[1]) ?? 0 : 0)
    }

    static func migrated(_ v1: [MHAccountV1.Account]) -> [MHAccountV2.Account] {
        v1.filter { $0.id % 50 != 49 }.map { a in
            let cents = Self.cents(a.balance)
            return MHAccountV2.Account(
                id: a.id, name: a.name, cents: cents, joined: Date(timeIntervalSince1970: Double(a.joined)), email: a.email, nick: a.nick ?? "",
                tier: cents >= 15_000 ? 2 : 1, home: MHAccountV2.Home(street: a.home.street, city: a.home.city, zip: a.id % 97))
        }
    }

    static func checkAccounts(_ db: Database, _ plain: [MHAccountV2.Account], _ label: String) throws {
        try H.checkAll(db, plain, label)
        let all = db.objects(MHAccountV2.Account.self)
        try H.check(all, plain, "\(label): cents range", where: #Predicate { $0.cents >= 10_000 && $0.cents < 20_000 }, sort: [SortDescriptor(\.cents)])
        try H.check(all, plain, "\(label): tier 2 by cents", where: #Predicate { $0.tier == 2 }, sort: [SortDescriptor(\.cents, order: .reverse)], limit: 10)
        try H.check(all, plain, "\(label): email", where: #Predicate { $0.email == "u10@example.com" })
        try H.check(all, plain, "\(label): empty nick", where: #Predicate { $0.nick == "" })
        try H.check(all, plain, "\(label): zip", where: #Predicate { $0.home.zip == 5 })
        let cutoff = Date(timeIntervalSince1970: 1_600_000_000 + 100 * 3600)
        try H.check(all, plain, "\(label): joined before", where: #Predicate { $0.joined < cutoff }, sort: [SortDescriptor(\.joined, order: .reverse)])
        #expect(all.sum(of: \.cents) == plain.reduce(0) { $0 + $1.cents }, "\(label) (seed \(H.seed))")
        #expect(all.filter(#Predicate { $0.tier == 1 }).count == plain.filter { $0.tier == 1 }.count, "\(label)")
    }

    @Test func migrationTransformsRecordsOnce() throws {
        let path = databasePath()
        let v1 = Self.accountsV1(300, seed: H.seed &+ 5)
        do {
            let db = try Database(path: path, models: [MHAccountV1.Account.self])
            try db.write { tx in for a in v1 { try tx.insert(a) } }
        }
        // Without a migration: a clear list of what changed.
        let text = H.message { _ = try Database(path: path, models: [MHAccountV2.Account.self]) }
        for expected in [
            "MHAccount.fullName: new non-optional field String", "MHAccount.balance: type changed from String to Int64",
            "MHAccount.joined: type changed from Int64 to Date", "MHAccount.nick: type changed from String? to String",
            "MHAccount.tier: new non-optional field Int64", "MHAccount.home.zip: new non-optional field Int64",
        ] {
            #expect(text?.contains(expected) == true, "missing \(expected) in \(text ?? "opened")")
        }
        // A migration that forgets a required field names the object and the field.
        let forgot = H.message {
            _ = try Database(path: path, models: [MHAccountV2.Account.self], schemaVersion: 2) { migration in
                try migration.enumerateObjects("MHAccount") { old, new in
                    try Self.migrateAccount(old, &new)
                    new["tier"] = nil
                }
            }
        }
        #expect(forgot?.contains("MHAccount") == true && forgot?.contains("tier") == true, "\(forgot ?? "opened")")
        var runs = 0
        let plain = Self.migrated(v1)
        do {
            let db = try Database(path: path, models: [MHAccountV2.Account.self], schemaVersion: 2) { migration in
                runs += 1
                #expect(migration.oldVersion == 0 && migration.newVersion == 2)
                try migration.enumerateObjects("MHAccount") { old, new in try Self.migrateAccount(old, &new) }
            }
            #expect(runs == 1)
            try Self.checkAccounts(db, plain, "v2 just migrated")
        }
        // Reopening does not migrate again, with the version, without it, or read-only.
        do {
            let db = try Database(path: path, models: [MHAccountV2.Account.self], schemaVersion: 2) { _ in runs += 1 }
            #expect(runs == 1)
            try Self.checkAccounts(db, plain, "v2 reopened")
        }
        do {
            let db = try Database(path: path, models: [MHAccountV2.Account.self])
            try Self.checkAccounts(db, plain, "v2 opened without a version")
        }
        do {
            let db = try Database(store: try Store(path: path, options: StoreOptions(readOnly: true)), models: [MHAccountV2.Account.self], schemaVersion: 2)
            try Self.checkAccounts(db, plain, "v2 read-only")
        }
        #expect(try H.storedSchema(path, "MHAccount")?.schemaVersion == 2)
        // A data-only migration (version 3, same types) runs once.
        var upper = plain
        for i in upper.indices { upper[i].name = upper[i].name.uppercased() }
        do {
            let db = try Database(path: path, models: [MHAccountV2.Account.self], schemaVersion: 3) { migration in
                runs += 1
                try migration.enumerateObjects("MHAccount") { old, new in new["fullName"] = .string(old["fullName"]?.stringValue?.uppercased() ?? "") }
            }
            #expect(runs == 2)
            try Self.checkAccounts(db, upper, "v3 data-only")
        }
        do {
            let db = try Database(path: path, models: [MHAccountV2.Account.self], schemaVersion: 3) { _ in runs += 1 }
            #expect(runs == 2)
            try Self.checkAccounts(db, upper, "v3 reopened")
        }
        // Opening with a lower version does not lower the stored one.
        _ = try Database(path: path, models: [MHAccountV2.Account.self], schemaVersion: 1) { _ in runs += 1 }
        #expect(runs == 2)
        #expect(try H.storedSchema(path, "MHAccount")?.schemaVersion == 3)
    }

    struct Stop: Error, Equatable {}

    /// A migration that throws halfway, or whose result breaks a unique index, changes nothing:
    /// the old types open the file as it was, and a correct migration still runs afterwards.
    @Test func failedMigrationsLeaveTheOldVersion() throws {
        let path = databasePath()
        let v1 = Self.accountsV1(500, seed: H.seed &+ 6)
        do {
            let db = try Database(path: path, models: [MHAccountV1.Account.self])
            try db.write { tx in for a in v1 { try tx.insert(a) } }
        }
        let before = try H.storedSchema(path, "MHAccount")
        var visited = 0
        #expect(throws: Stop()) {
            _ = try Database(path: path, models: [MHAccountV2.Account.self], schemaVersion: 2) { migration in
                try migration.enumerateObjects("MHAccount") { old, new in
                    visited += 1
                    if visited == 250 { throw Stop() }
                    try Self.migrateAccount(old, &new)
                }
            }
        }
        #expect(visited == 250)
        #expect(try H.storedSchema(path, "MHAccount") == before)
        do {
            let db = try Database(path: path, models: [MHAccountV1.Account.self])
            try H.checkAll(db, v1, "v1 after the failed migration")
            try H.check(db.objects(MHAccountV1.Account.self), v1, "v1 email", where: #Predicate { $0.email == "u300@example.com" })
        }
        // The migrated data repeats `tier`: a unique index on it fails the migration.
        var failure: (any Error)?
        do {
            _ = try Database(path: path, models: [MHAccountV2UniqueTier.Account.self], schemaVersion: 2) { migration in
                try migration.enumerateObjects("MHAccount") { old, new in try Self.migrateAccount(old, &new) }
            }
        } catch { failure = error }
        guard case StrataError.uniqueViolation(let model, let field, _)? = failure as? StrataError else {
            Issue.record("expected a unique violation, got \(String(describing: failure))")
            return
        }
        #expect(model == "MHAccount" && field.contains("tier"))
        #expect(try H.storedSchema(path, "MHAccount") == before)
        do {
            let db = try Database(path: path, models: [MHAccountV1.Account.self])
            try H.checkAll(db, v1, "v1 after the unique failure")
        }
        // Now the real migration.
        let db = try Database(path: path, models: [MHAccountV2.Account.self], schemaVersion: 2) { migration in
            try migration.enumerateObjects("MHAccount") { old, new in try Self.migrateAccount(old, &new) }
        }
        try Self.checkAccounts(db, Self.migrated(v1), "v2 after the failures")
    }

    /// `STRATA_MIGHUNT_N` records migrated at once, with progress.
    @Test func migrationOfManyRecords() throws {
        let path = databasePath()
        let n = H.count
        let v1 = Self.accountsV1(n, seed: H.seed &+ 7)
        do {
            let db = try Database(path: path, models: [MHAccountV1.Account.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in for a in v1 { try tx.insert(a) } }
        }
        var reports: [(Int, Int)] = []
        let started = Date()
        let db = try Database(path: path, models: [MHAccountV2.Account.self], schemaVersion: 2, options: StoreOptions(durability: .noSync)) { migration in
            try migration.enumerateObjects("MHAccount", progress: { reports.append(($0, $1)) }) { old, new in try Self.migrateAccount(old, &new) }
        }
        let seconds = Date().timeIntervalSince(started)
        #expect(reports.last.map { $0 == (n, n) } ?? (n == 0), "\(reports)")
        #expect(reports.count == n / 1000 + (n % 1000 == 0 ? 0 : 1), "\(reports)")
        #expect(reports.allSatisfy { $0.1 == n })
        try Self.checkAccounts(db, Self.migrated(v1), "\(n) migrated in \(seconds) s")
        let check = try StoredObjects.check(in: db.store)
        #expect(check.problems.isEmpty, "\(check.problems)")
    }

    /// Every difference that needs a migration is listed, naming the model and the field path
    /// (through nested structs, arrays and dictionaries), the stored type and the new one.
    @Test func incompatibleChangesNameTheFieldPath() throws {
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [MHErrorsV1.Thing.self])
            try db.write { tx in
                try tx.insert(
                    MHErrorsV1.Thing(
                        id: 1, code: "A", nick: nil, count: 5, signedCount: -1, home: MHFieldsV1.Home(street: "s", city: "c"),
                        visits: [MHErrorsV1.Visit(place: "p", minutes: 3)], byName: ["x": MHErrorsV1.Visit(place: "q", minutes: 4)]))
            }
        }
        var failure: (any Error)?
        do { _ = try Database(path: path, models: [MHErrorsV2.Thing.self]) } catch { failure = error }
        guard case StrataError.migrationRequired(let lines)? = failure as? StrataError else {
            Issue.record("expected migrationRequired, got \(String(describing: failure))")
            return
        }
        let expected = [
            "MHThing.code: type changed from String to Int64",
            "MHThing.nick: type changed from String? to String",
            "MHThing.count: type changed from Int64 to Int32",
            "MHThing.signedCount: type changed from Int64 to UInt64",
            "MHThing.home.city: type changed from String to Int64",
            "MHThing.visits[].minutes: type changed from Int64 to String",
            "MHThing.byName[key].minutes: type changed from Int64 to String",
            "MHThing.added: new non-optional field Double (make it optional, or migrate)",
        ]
        for line in expected { #expect(lines.contains(line), "missing \(line) in \(lines)") }
        #expect(lines.count == expected.count, "\(lines)")
        let description = failure.map { String(describing: $0) } ?? ""
        #expect(description.contains("migration required"), "\(description)")
        // Nothing changed: version 1 still opens and reads its object.
        let db = try Database(path: path, models: [MHErrorsV1.Thing.self])
        #expect(try db.object(MHErrorsV1.Thing.self, key: 1)?.visits.first?.minutes == 3)
    }
}

enum MHNestV1 {
    struct Home: Codable, Sendable, Equatable {
        var street: String
        var city: String
    }
    struct Stop: Codable, Sendable, Equatable {
        var place: String
        var minutes: Int
    }
    struct Person: Model, Equatable {
        static let modelName = "MHPerson"
        var id: Int
        var home: Home
        var stops: [Stop]
    }
}

enum MHNestV2 {
    /// `street` removed, `city` an Int now, `zip` new and required.
    struct Home: Codable, Sendable, Equatable {
        var city: Int
        var zip: String
    }
    /// `minutes` a String now.
    struct Stop: Codable, Sendable, Equatable {
        var place: String
        var minutes: String
    }
    struct Person: Model, Equatable {
        static let modelName = "MHPerson"
        static let indexes: [PartialKeyPath<Person> & Sendable] = [\.home.city]
        var id: Int
        var home: Home
        var stops: [Stop]
    }
}

extension MigrationHuntTests {
    /// A migration that rewrites nested structs the way the docs show: read the old struct's
    /// fields, change what changed, store it back.
    @Test func migrationRewritesNestedStructs() throws {
        let path = databasePath()
        let v1 = (0..<30).map { i in
            MHNestV1.Person(
                id: i, home: MHNestV1.Home(street: "street \(i)", city: String(repeating: "c", count: i % 4 + 1)),
                stops: (0..<i % 3).map { MHNestV1.Stop(place: "p\($0)", minutes: i + $0) })
        }
        do {
            let db = try Database(path: path, models: [MHNestV1.Person.self])
            try db.write { tx in for person in v1 { try tx.insert(person) } }
        }
        func stops(_ old: Migration.OldObject) -> StoredValue {
            .array(
                (old["stops"]?.arrayValue ?? []).map { stop in
                    var fields = stop.objectValue ?? [:]
                    fields["minutes"] = .string("\(fields["minutes"]?.intValue ?? -1)m")
                    return .object(fields)
                })
        }
        // Forgetting the nested struct whose field changed type: the error names the field.
        let forgot = H.message {
            _ = try Database(path: path, models: [MHNestV2.Person.self], schemaVersion: 1) { migration in
                try migration.enumerateObjects("MHPerson") { old, new in new["stops"] = stops(old) }
            }
        }
        #expect(forgot?.contains("home.city") == true || forgot?.contains("home.zip") == true, "\(forgot ?? "opened")")
        let db = try Database(path: path, models: [MHNestV2.Person.self], schemaVersion: 1) { migration in
            try migration.enumerateObjects("MHPerson") { old, new in
                var home = old["home"]?.objectValue ?? [:]
                home["city"] = .int(Int64(home["city"]?.stringValue?.count ?? -1))
                home["zip"] = .string("z\(old.key.intValue ?? -1)")
                new["home"] = .object(home)
                new["stops"] = stops(old)
            }
        }
        let plain = v1.map { p in
            MHNestV2.Person(
                id: p.id, home: MHNestV2.Home(city: p.home.city.count, zip: "z\(p.id)"),
                stops: p.stops.map { MHNestV2.Stop(place: $0.place, minutes: "\($0.minutes)m") })
        }
        try H.checkAll(db, plain, "nested structs migrated")
        try H.check(db.objects(MHNestV2.Person.self), plain, "home.city == 2", where: #Predicate { $0.home.city == 2 })
        let check = try StoredObjects.check(in: db.store)
        #expect(check.problems.isEmpty, "\(check.problems)")
    }
}

enum MHDefaultNestV1 {
    struct Box: Codable, Sendable, Equatable {
        var color: String
    }
    struct Parcel: Model, Equatable {
        static let modelName = "MHParcel"
        static let indexes: [PartialKeyPath<Parcel> & Sendable] = [\.nick]
        var id: Int
        var nick: String?
        var box: Box
    }
}

enum MHDefaultNestV2 {
    /// `size` new, read as 1 when missing.
    struct Box: Codable, Sendable, Equatable {
        var color: String
        var size: Int
        enum CodingKeys: String, CodingKey { case color, size }
        init(color: String, size: Int) {
            self.color = color
            self.size = size
        }
        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            color = try c.decode(String.self, forKey: .color)
            size = try c.decodeIfPresent(Int.self, forKey: .size) ?? 1
        }
    }
    struct Label: Codable, Sendable, Equatable {
        var text: String
    }
    /// `nick` no longer optional (a missing one reads as ""), `label` a new struct read as a
    /// default one when missing.
    struct Parcel: Model, Equatable {
        static let modelName = "MHParcel"
        static let indexes: [PartialKeyPath<Parcel> & Sendable] = [\.nick, \.box.size]
        var id: Int
        var nick: String
        var box: Box
        var label: Label
        enum CodingKeys: String, CodingKey { case id, nick, box, label }
        init(id: Int, nick: String, box: Box, label: Label) {
            self.id = id
            self.nick = nick
            self.box = box
            self.label = label
        }
        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            id = try c.decode(Int.self, forKey: .id)
            nick = try c.decodeIfPresent(String.self, forKey: .nick) ?? ""
            box = try c.decode(Box.self, forKey: .box)
            label = try c.decodeIfPresent(Label.self, forKey: .label) ?? Label(text: "none")
        }
    }
}

extension MigrationHuntTests {
    /// Defaults inside nested structs, a defaulted struct, and an optional field made required
    /// with a default: queries answer as the decoded objects do.
    @Test func defaultsNestedAndOnceOptional() throws {
        let path = databasePath()
        let v1 = (0..<40).map { MHDefaultNestV1.Parcel(id: $0, nick: $0 % 3 == 0 ? nil : "n\($0 % 2)", box: MHDefaultNestV1.Box(color: "c\($0 % 4)")) }
        do {
            let db = try Database(path: path, models: [MHDefaultNestV1.Parcel.self])
            try db.write { tx in for parcel in v1 { try tx.insert(parcel) } }
        }
        var plain = v1.map {
            MHDefaultNestV2.Parcel(
                id: $0.id, nick: $0.nick ?? "", box: MHDefaultNestV2.Box(color: $0.box.color, size: 1), label: MHDefaultNestV2.Label(text: "none"))
        }
        let db = try Database(path: path, models: [MHDefaultNestV2.Parcel.self])
        try db.write { tx in
            for i in stride(from: 1, to: 40, by: 5) {
                plain[i].box.size = 2
                plain[i].label.text = "l\(i % 2)"
                try tx.upsert(plain[i])
            }
        }
        try H.checkAll(db, plain, "nested defaults")
        let all = db.objects(MHDefaultNestV2.Parcel.self)
        try H.check(all, plain, "nick empty", where: #Predicate { $0.nick == "" })
        try H.check(all, plain, "nick n1", where: #Predicate { $0.nick == "n1" })
        try H.check(all, plain, "box.size == 1", where: #Predicate { $0.box.size == 1 })
        try H.check(all, plain, "label none", where: #Predicate { $0.label.text == "none" })
        try H.check(all, plain, "sorted by nick", sort: [SortDescriptor(\.nick), SortDescriptor(\.id, order: .reverse)])
        #expect(all.sum(of: \.box.size) == plain.reduce(0) { $0 + $1.box.size })
    }
}

enum MHKeyV1 {
    struct Doc: Model, Equatable {
        static let modelName = "MHDoc"
        var id: String
        var body: String
    }
}

enum MHKeyV2 {
    /// The key an Int now, and the body searchable.
    struct Doc: Model, Equatable {
        static let modelName = "MHDoc"
        static let indexDescriptors: [IndexDescriptor<Doc>] = [.fullText(\.body)]
        var id: Int
        var body: String
    }
}

extension MigrationHuntTests {
    /// A migration stopped through `withProgress` changes nothing; one that changes the key type
    /// and adds a full-text index answers searches right after.
    @Test func cancelledAndKeyChangingMigrations() throws {
        let path = databasePath()
        let n = max(H.count, 1_500)
        let words = ["red", "green", "blue", "cyan"]
        let v1 = (0..<n).map { MHKeyV1.Doc(id: "k\($0)", body: "\(words[$0 % 4]) \(words[($0 / 4) % 4]) item") }
        do {
            let db = try Database(path: path, models: [MHKeyV1.Doc.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in for doc in v1 { try tx.insert(doc) } }
        }
        func migrate(_ migration: Migration) throws {
            try migration.enumerateObjects("MHDoc") { old, new in
                new["id"] = .int(Int64(old.key.stringValue?.dropFirst() ?? "") ?? -1)
            }
        }
        var furthest = 0
        #expect(throws: CancellationError.self) {
            try withProgress(
                every: 100,
                { progress in
                    furthest = max(furthest, progress.completed)
                    return progress.completed < n / 2
                }
            ) {
                _ = try Database(path: path, models: [MHKeyV2.Doc.self], schemaVersion: 1, migration: migrate)
            }
        }
        #expect(furthest >= n / 2 && furthest < n, "stopped at \(furthest) of \(n)")
        do {
            let db = try Database(path: path, models: [MHKeyV1.Doc.self])
            try H.checkAll(db, v1.sorted { $0.id < $1.id }, "v1 after the cancelled migration")
        }
        let db = try Database(path: path, models: [MHKeyV2.Doc.self], schemaVersion: 1, migration: migrate)
        let plain = v1.map { MHKeyV2.Doc(id: Int($0.id.dropFirst()) ?? -1, body: $0.body) }
        try H.checkAll(db, plain, "keys migrated")
        try H.check(db.objects(MHKeyV2.Doc.self), plain, "id range", where: #Predicate { $0.id >= 10 && $0.id < 20 })
        let found = db.objects(MHKeyV2.Doc.self).search(\.body, "red blue").sorted(by: SortDescriptor(\.id))
        let want = plain.filter { $0.body.hasPrefix("red blue") || $0.body.hasPrefix("blue red") }.map(\.id)
        #expect(try found.fetch().map(\.id) == want, "plan \(found.explain())")
        #expect(found.explain().contains("body"), "\(found.explain())")
    }
}
