import Testing
import Foundation
@testable import Strata

struct Item: Model, Equatable {
    static let indexes: [PartialKeyPath<Item> & Sendable] = [\.category, \.score, \.label, \.tags, \.rank]
    var id: Int
    var name: String
    var category: Int
    var score: Double
    var label: String?
    var status: Status
    var tags: [String]
    var rank: Int?
}

struct QueryTests {
    static func makeItems(_ n: Int, seed: UInt64) -> [Item] {
        var rng = SeededRandom(seed: seed)
        let words = ["ant", "bee", "cat", "dog", "émile", "eel", "fox", "Gnu"]
        return (0..<n).map { i in
            Item(
                id: i * 3 - 100, name: words[rng.below(words.count)] + "\(rng.below(50))", category: rng.below(10),
                score: Double(rng.below(1000)) / 1000, label: rng.below(4) == 0 ? nil : words[rng.below(words.count)],
                status: Status.allCases[rng.below(3)], tags: (0..<rng.below(3)).map { _ in words[rng.below(words.count)] },
                rank: rng.below(3) == 0 ? nil : rng.below(20) - 5)
        }
    }

    @Test func randomQueriesMatchArrayFiltering() throws {
        let seed: UInt64 = 20261129
        var rng = SeededRandom(seed: seed)
        let path = databasePath()
        var db = try Database(path: path, models: [Item.self], options: StoreOptions(durability: .noSync))
        var items = QueryTests.makeItems(600, seed: seed)
        try db.write { tx in try tx.insert(contentsOf: items) }
        for round in 0..<300 {
            if round % 100 == 99 {
                // Across reopen: the same queries over the same file.
                db = try Database(path: path, models: [Item.self], options: StoreOptions(durability: .noSync))
            }
            if round % 50 == 49 {
                // Random updates and deletes between rounds.
                try db.write { tx in
                    for _ in 0..<40 {
                        let i = rng.below(items.count)
                        if rng.below(3) == 0 {
                            try tx.delete(Item.self, key: items[i].id)
                            items.remove(at: i)
                        } else {
                            let newCategory = rng.below(10)
                            let newRank: Int? = rng.below(2) == 0 ? nil : rng.below(20)
                            try tx.update(Item.self, key: items[i].id) {
                                $0.category = newCategory; $0.rank = newRank
                            }
                            items[i].category = newCategory
                            items[i].rank = newRank
                        }
                    }
                }
            }
            let c = rng.below(10)
            let s = Double(rng.below(1000)) / 1000
            let word = ["ant", "bee", "cat", "émile", "Gnu"][rng.below(5)]
            let list = [rng.below(10), rng.below(10)]
            let r = rng.below(20) - 5
            let wanted = Status.allCases[rng.below(3)]
            let id = rng.below(600) * 3 - 100
            let (predicate, reference): (Predicate<Item>, (Item) -> Bool) = {
                switch rng.below(16) {
                case 0: return (#Predicate { $0.category == c }, { $0.category == c })
                case 1: return (#Predicate { $0.category != c }, { $0.category != c })
                case 2: return (#Predicate { $0.score < s }, { $0.score < s })
                case 3: return (#Predicate { $0.score >= s && $0.category <= c }, { $0.score >= s && $0.category <= c })
                case 4: return (#Predicate { $0.category == c || $0.score > s }, { $0.category == c || $0.score > s })
                case 5: return (#Predicate { $0.label == word }, { $0.label == word })
                case 6: return (#Predicate { $0.label == nil }, { $0.label == nil })
                case 7: return (#Predicate { $0.name.starts(with: word) }, { $0.name.starts(with: word) })
                case 8: return (#Predicate { $0.name.contains(word) }, { $0.name.contains(word) })
                case 9: return (#Predicate { list.contains($0.category) }, { list.contains($0.category) })
                case 10: return (#Predicate { $0.tags.contains(word) }, { $0.tags.contains(word) })
                case 11: return (#Predicate { $0.status == wanted && $0.category > c }, { $0.status == wanted && $0.category > c })
                case 12: return (#Predicate { $0.rank != nil && $0.rank! > r }, { $0.rank != nil && $0.rank! > r })
                case 13: return (#Predicate { $0.id == id }, { $0.id == id })
                case 14: return (#Predicate { $0.id > id && !($0.category == c) }, { $0.id > id && !($0.category == c) })
                default: return (#Predicate { ($0.rank ?? 0) <= r }, { ($0.rank ?? 0) <= r })
                }
            }()
            var results = db.objects(Item.self).filter(predicate)
            var expected = items.filter(reference).sorted { $0.id < $1.id }
            switch rng.below(4) {
            case 0:
                results = results.sorted(by: SortDescriptor(\.score))
                expected.sort { ($0.score, $0.id) < ($1.score, $1.id) }
            case 1:
                results = results.sorted(by: SortDescriptor(\.category, order: .reverse), SortDescriptor(\.id))
                expected.sort { ($1.category, $0.id) < ($0.category, $1.id) }
            case 2:
                results = results.sorted(by: SortDescriptor(\.rank))
                expected.sort { a, b in
                    switch (a.rank, b.rank) {
                    case (nil, nil): return a.id < b.id
                    case (nil, _): return true
                    case (_, nil): return false
                    case let (x?, y?): return (x, a.id) < (y, b.id)
                    }
                }
            default: break
            }
            let offset = rng.below(3) == 0 ? rng.below(5) : 0
            let limit: Int? = rng.below(3) == 0 ? rng.below(8) : nil
            if offset > 0 { results = results.offset(offset); expected = Array(expected.dropFirst(offset)) }
            if let limit { results = results.prefix(limit); expected = Array(expected.prefix(limit)) }
            let got = try results.fetch()
            #expect(got.map(\.id) == expected.map(\.id), "seed \(seed) round \(round)\n\(results.explain())")
            #expect(results.count == expected.count, "seed \(seed) round \(round)")
        }
    }

    @Test func explainUsesIndexes() throws {
        let db = try Database.inMemory(models: [Item.self])
        try db.write { tx in try tx.insert(contentsOf: QueryTests.makeItems(2000, seed: 7)) }
        let c = 3
        #expect(db.objects(Item.self).filter(#Predicate { $0.category == c }).explain().contains("index i:Item:category"))
        let s = 0.5
        #expect(db.objects(Item.self).filter(#Predicate { $0.score > s }).explain().contains("index i:Item:score"))
        #expect(db.objects(Item.self).filter(#Predicate { $0.id == 5 }).explain().contains("primary key"))
        #expect(db.objects(Item.self).sorted(by: SortDescriptor(\.score)).prefix(5).explain().contains("scan index i:Item:score in ascending order"))
        #expect(db.objects(Item.self).filter(#Predicate { $0.name.contains("a") }).explain().contains("full scan"))
        // Two indexed conditions: the more selective one (equality on score is rarer than a category).
        let exact = 0.123
        let plan = db.objects(Item.self).filter(#Predicate { $0.category == c && $0.score == exact }).explain()
        #expect(plan.contains("index i:Item:score"), "\(plan)")
    }
}

struct SeededRandom {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E3779B97F4A7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) &* 0x94D049BB133111EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}

struct Home: Model {
    static let indexes: [PartialKeyPath<Home> & Sendable] = [\.address.city]
    var id: Int
    var address: Address
    var previous: Address?
}

struct NestedQueryTests {
    @Test func nestedKeyPathsQueryAndIndex() throws {
        let db = try Database.inMemory(models: [Home.self])
        let cities = ["Lyon", "Nice", "Paris"]
        try db.write { tx in
            for i in 0..<90 {
                try tx.insert(
                    Home(
                        id: i, address: Address(street: "s\(i)", city: cities[i % 3], zip: i),
                        previous: i % 2 == 0 ? nil : Address(street: "p", city: cities[(i + 1) % 3], zip: nil)))
            }
        }
        let nice = "Nice"
        let inNice = db.objects(Home.self).filter(#Predicate { $0.address.city == nice })
        #expect(inNice.count == 30)
        #expect(inNice.explain().contains("i:Home:address.city"))
        let movedFromNice = db.objects(Home.self).filter(#Predicate { $0.previous?.city == nice })
        #expect(movedFromNice.map(\.id) == (0..<90).filter { $0 % 2 == 1 && cities[($0 + 1) % 3] == "Nice" })
    }
}
