import Testing
import Foundation
import StrataStorage
@testable import Strata

struct Tallied: Model, Equatable {
    static let indexes: [PartialKeyPath<Tallied> & Sendable] = [\.group, \.rank, \.tags, \.code, \.score]
    static let uniqueIndexes: [PartialKeyPath<Tallied> & Sendable] = [\.code]
    var id: Int
    var group: Int
    var rank: Int?
    var tags: [String]
    var code: String
    var score: Double
}

/// Counts taken from the trees' subtree counts (before results are evaluated, and in a write
/// transaction) equal the counts of the evaluated results and of `Predicate.evaluate` over every
/// object, for plans whose ranges could name an object twice or overlap too.
struct TreeCountTests {
    static let tagSets: [[String]] = [[], ["a"], ["a", "b"], ["b", "a", "a"], ["c"]]

    static func objects() -> [Tallied] {
        (0..<3_000).map { (i: Int) -> Tallied in
            let rank: Int? = i % 7 == 0 ? nil : i % 50
            let score: Double = i % 11 == 0 ? -0.0 : Double(i % 40) - 20
            return Tallied(id: i, group: i % 17, rank: rank, tags: tagSets[i % 5], code: "c\(i)", score: score)
        }
    }

    static let groups335 = [3, 3, 5]
    static let groups91 = [9, 1]
    static let ids112 = [1, 1, 2]
    static let zeros = [0.0, -0.0]
    static let predicates: [(String, Predicate<Tallied>)] = [
        ("group == 3", #Predicate { $0.group == 3 }),
        ("group < 4", #Predicate { $0.group < 4 }),
        ("group >= 16", #Predicate { $0.group >= 16 }),
        ("group > 9223372036854775807", #Predicate { $0.group > 9_223_372_036_854_775_807 }),
        (
            "[3, 3, 5].contains(group)",
            {
                let l = groups335; return #Predicate<Tallied> { l.contains($0.group) }
            }()
        ),
        (
            "[9, 1].contains(group)",
            {
                let l = groups91; return #Predicate<Tallied> { l.contains($0.group) }
            }()
        ),
        ("rank == nil", #Predicate { $0.rank == nil }),
        ("rank != nil", #Predicate { $0.rank != nil }),
        ("rank == 10", #Predicate { $0.rank == 10 }),
        ("tags.contains(a)", #Predicate { $0.tags.contains("a") }),
        ("code == c42", #Predicate { $0.code == "c42" }),
        ("code == missing", #Predicate { $0.code == "missing" }),
        ("id < 100", #Predicate { $0.id < 100 }),
        ("id >= 2990", #Predicate { $0.id >= 2990 }),
        (
            "[1, 1, 2].contains(id)",
            {
                let l = ids112; return #Predicate<Tallied> { l.contains($0.id) }
            }()
        ),
        ("score == 0", #Predicate { $0.score == 0 }),
        ("score == -0.0", #Predicate { $0.score == -0.0 }),
        (
            "[0.0, -0.0].contains(score)",
            {
                let l = zeros; return #Predicate<Tallied> { l.contains($0.score) }
            }()
        ),
        ("score <= -19", #Predicate { $0.score <= -19 }),
    ]

    @Test func countsFromTreesMatchEvaluation() throws {
        let all = Self.objects()
        let db = try Database.inMemory(models: [Tallied.self])
        try db.write { tx in for o in all { try tx.insert(o) } }
        for (name, predicate) in Self.predicates {
            let expected = try all.filter { try predicate.evaluate($0) }.count
            for (offset, limit) in [(0, nil), (5, nil), (0, 7), (3, 2)] as [(Int, Int?)] {
                var results = db.objects(Tallied.self).filter(predicate).offset(offset)
                if let limit { results = results.prefix(limit) }
                let window = min(limit ?? .max, max(0, expected - offset))
                #expect(results.count == window, "\(name) offset \(offset) limit \(limit ?? -1): count before evaluation")
                #expect(try results.fetch().count == window, "\(name) offset \(offset) limit \(limit ?? -1): evaluated")
                #expect(results.count == window, "\(name) offset \(offset) limit \(limit ?? -1): count after evaluation")
            }
            #expect(try db.objects(Tallied.self).filter(predicate).fetchCount() == expected, "\(name): fetchCount")
            _ = try? db.write { tx in
                #expect(try tx.count(Tallied.self, where: predicate) == expected, "\(name): in a write transaction")
                // Uncommitted changes are counted too.
                try tx.delete(Tallied.self, key: 3)
                let less = try predicate.evaluate(all[3]) ? 1 : 0
                #expect(try tx.count(Tallied.self, where: predicate) == expected - less, "\(name): after an uncommitted delete")
                throw CancellationError()
            }
        }
    }
}
