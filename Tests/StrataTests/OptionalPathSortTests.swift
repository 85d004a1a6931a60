import Testing
import Foundation
@testable import Strata

// Sorts on a key path that reaches a non-optional field through an optional struct
// (`\.part?.n` with `part: Part?`, `n: Int`): the key path reads nil where the struct is nil, and
// nil sorts first (last in reverse), on every plan, next to the values whose encodings begin with
// 0x00 as nil's does (Int.min, -infinity, an empty string, a string starting with U+0000).

struct OptionalPathPart: Codable, Sendable, Hashable {
    var n: Int
    var s: String
    var d: Double
}

struct OptionalPathIndexed: Model {
    static let indexes: [PartialKeyPath<OptionalPathIndexed> & Sendable] = [\.part?.n, \.part?.d]
    static let indexDescriptors: [IndexDescriptor<OptionalPathIndexed>] = [.on(\.part?.s, collation: .caseInsensitive), .on(\.k, \.part?.n)]
    var id: Int
    var k: Int
    var part: OptionalPathPart?
}

struct OptionalPathPlain: Model {
    var id: Int
    var k: Int
    var part: OptionalPathPart?
}

@Suite struct OptionalPathSortTests {
    static let parts: [OptionalPathPart?] = [
        nil, OptionalPathPart(n: .min, s: "", d: -.infinity), OptionalPathPart(n: 0, s: "a", d: 0),
        OptionalPathPart(n: .min + 5, s: "\u{0}x", d: -.greatestFiniteMagnitude), nil, OptionalPathPart(n: 5, s: "B", d: 1),
    ]

    static func database() throws -> Database {
        let db = try Database.inMemory(models: [OptionalPathIndexed.self, OptionalPathPlain.self])
        try db.write { tx in
            for (i, part) in parts.enumerated() {
                try tx.insert(OptionalPathIndexed(id: i, k: 1, part: part))
                try tx.insert(OptionalPathPlain(id: i, k: 1, part: part))
            }
        }
        return db
    }

    /// Ids ordered by `SortDescriptor.compare`, ties by id.
    static func expected<M: Model>(_ objects: [M], _ descriptors: [SortDescriptor<M>]) -> [Int] where M.ID == Int {
        objects.sorted { a, b in
            for descriptor in descriptors {
                let r = descriptor.compare(a, b)
                if r != .orderedSame { return r == .orderedAscending }
            }
            return a.id < b.id
        }.map(\.id)
    }

    @Test(arguments: [SortOrder.forward, .reverse])
    func nilStructsSortAsNilOnEveryPlan(order: SortOrder) throws {
        let db = try Self.database()
        let indexed = try db.objects(OptionalPathIndexed.self).fetch()
        let plain = try db.objects(OptionalPathPlain.self).fetch()
        let k = 1
        for descriptors in [[SortDescriptor(\OptionalPathIndexed.part?.n, order: order)], [SortDescriptor(\.part?.d, order: order)]] {
            let want = Self.expected(indexed, descriptors)
            let all = db.objects(OptionalPathIndexed.self)
            #expect(try all.sorted(by: descriptors).fetch().map(\.id) == want, "\(all.sorted(by: descriptors).explain())")
            #expect(try all.sorted(by: descriptors).prefix(4).fetch().map(\.id) == Array(want.prefix(4)))
            let within = all.filter(#Predicate { $0.k == k }).sorted(by: descriptors)
            #expect(try within.fetch().map(\.id) == want, "\(within.explain())")
        }
        for descriptors in [
            [SortDescriptor(\OptionalPathPlain.part?.n, order: order)], [SortDescriptor(\.part?.d, order: order)],
            [SortDescriptor(\.part?.n, order: order), SortDescriptor(\.k, order: order)],
        ] {
            #expect(try db.objects(OptionalPathPlain.self).sorted(by: descriptors).fetch().map(\.id) == Self.expected(plain, descriptors))
        }
        // Case-insensitively: nil, "", "\u{0}x", "a", "B".
        let collated = order == .forward ? [0, 4, 1, 3, 2, 5] : [5, 2, 3, 1, 0, 4]
        let byName = db.objects(OptionalPathIndexed.self).sorted(by: [SortDescriptor(\.part?.s, order: order)], collation: .caseInsensitive)
        #expect(try byName.fetch().map(\.id) == collated, "\(byName.explain())")
        #expect(try byName.prefix(3).fetch().map(\.id) == Array(collated.prefix(3)))
        let plainByName = db.objects(OptionalPathPlain.self).sorted(
            by: [SortDescriptor(\.part?.s, order: order), SortDescriptor(\.k, order: order)], collation: .caseInsensitive)
        #expect(try plainByName.fetch().map(\.id) == collated)
    }
}
