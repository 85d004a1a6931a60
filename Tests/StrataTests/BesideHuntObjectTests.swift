import Testing
import Foundation
import StrataStorage
@testable import Strata

/// Hunting the full-text statistics kept back with the deferred postings (9e19659): after random
/// writes, some inside savepoints that roll back, `StoredObjects.check` (which recounts the
/// statistics from the records) finds nothing, and ranked searches order as BM25 over the plain
/// model (FullTextTests' `FTModel` and `FTSearch.scores`, the documented formula) says.
@Suite struct BesideHuntObjectTests {
    struct Round: CustomStringConvertible, Sendable {
        var seed: UInt64
        var reopen: Bool
        var description: String { "seed \(seed)\(reopen ? " reopen" : "")" }
    }

    @Test(arguments: [Round(seed: 11, reopen: false), Round(seed: 12, reopen: true), Round(seed: 13, reopen: true)])
    func statisticsSurviveSavepointRollbacks(_ round: Round) throws {
        var model = FTModel(rng: SeededRandom(seed: round.seed))
        let path = databasePath("besidehunt\(round.seed)")
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        let options = StoreOptions(durability: .noSync)
        var db: Database? = try Database(path: path, models: [FTPost.self], options: options)
        var failures = 0
        func fail(_ message: String) {
            failures += 1
            if failures <= 10 { Issue.record(Comment(rawValue: "\(round): \(message)")) }
        }
        for t in 0..<8 {
            let abort = model.rng.below(6) == 0
            let before = model.posts, beforeNext = model.nextId
            do {
                try #require(db).write { tx in
                    for _ in 0..<(t == 0 ? 60 : 25) {
                        switch model.rng.below(6) {
                        case 0:
                            // Writes inside a savepoint that rolls back: the model forgets them.
                            let saved = model.posts, savedNext = model.nextId
                            _ = try? tx.savepoint {
                                for _ in 0..<(1 + model.rng.below(6)) { try model.write(tx) }
                                throw CancellationError()
                            }
                            model.posts = saved
                            model.nextId = savedNext
                        case 1:
                            // A savepoint that is kept, with a rolled-back one inside it.
                            try tx.savepoint {
                                try model.write(tx)
                                let saved = model.posts, savedNext = model.nextId
                                _ = try? tx.savepoint {
                                    try model.write(tx)
                                    try model.write(tx)
                                    throw CancellationError()
                                }
                                model.posts = saved
                                model.nextId = savedNext
                                try model.write(tx)
                            }
                        case 2:
                            // A read between writes applies the kept-back writes.
                            let ids = try tx.objects(FTPost.self, where: nil).map(\.id)
                            if ids != model.posts.keys.sorted() { fail("txn \(t): objects inside the write") }
                        default:
                            try model.write(tx)
                        }
                    }
                    if abort { throw CancellationError() }
                }
            } catch is CancellationError {
                model.posts = before
                model.nextId = beforeNext
            }
            if round.reopen && t % 3 == 2 {
                db?.close()
                db = nil
                db = try Database(path: path, models: [FTPost.self], options: options)
            }
            let database = try #require(db)
            let report = try StoredObjects.check(in: database.store)
            if !report.problems.isEmpty { fail("after txn \(t): check: \(report.problems.prefix(3))") }
            // Ranked searches in the model's order (scores equal within 1e-9 are ties, put in key order).
            let all = model.posts.values.sorted { $0.post.id < $1.post.id }
            for _ in 0..<10 {
                let search = model.search()
                let texts = all.map { $0.body as [String]? }
                let matching = all.filter { search.matches($0.body) }
                let scores = search.scores(texts, of: matching.map(\.body))
                let order = matching.indices.sorted { a, b in
                    if abs(scores[a] - scores[b]) > 1e-9 { return scores[a] > scores[b] }
                    return matching[a].post.id < matching[b].post.id
                }
                let expected = order.map { matching[$0].post.id }
                let got = database.objects(FTPost.self).search(\.body, search.search, ranked: true).keys
                if got != expected { fail("after txn \(t): ranked \(search.description): \(got) expected \(expected)") }
            }
        }
        #expect(failures == 0, "\(round): \(failures) failures")
    }

    /// deleteAll inside a savepoint that rolls back, then more writes: the index's statistics
    /// are those of the objects that are left.
    @Test func deleteAllRolledBackKeepsTheStatistics() throws {
        let db = try Database.inMemory(models: [FTPost.self])
        let date = Date(timeIntervalSinceReferenceDate: 0)
        try db.write { tx in
            for i in 0..<20 { try tx.insert(FTPost(id: i, board: 0, created: date, body: "one two three \(i)", title: nil)) }
        }
        try db.write { tx in
            try tx.insert(FTPost(id: 100, board: 0, created: date, body: "four five", title: "x"))
            _ = try? tx.savepoint {
                try tx.deleteAll(FTPost.self)
                try tx.insert(FTPost(id: 200, board: 0, created: date, body: "six", title: nil))
                throw CancellationError()
            }
            try tx.insert(FTPost(id: 101, board: 0, created: date, body: "seven eight nine ten", title: nil))
            try tx.savepoint {
                try tx.deleteAll(FTPost.self)
                try tx.insert(FTPost(id: 300, board: 0, created: date, body: "eleven twelve", title: "y z"))
            }
            try tx.insert(FTPost(id: 301, board: 0, created: date, body: "thirteen", title: nil))
        }
        let problems = try StoredObjects.check(in: db.store).problems
        #expect(problems.isEmpty, "\(problems)")
        #expect(db.objects(FTPost.self).keys == [300, 301])
    }
}
