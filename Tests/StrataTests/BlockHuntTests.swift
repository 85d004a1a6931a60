import Dispatch
import Foundation
import StrataStorage
import Synchronization
import Testing

@testable import Strata

/// Hunting full-text postings in blocks (FORMAT.md §8.5, PostingMerge, PostingCursor) through the
/// object layer: many texts per word, keys in descending and random order, updates that change
/// only positions, deletes of most texts of a word, huge postings, keys of several types and
/// lengths, savepoints rolled back after a merge, deleteAll, two full-text indexes and two models,
/// transactions over the deferred-write limit, reopen, live observers, damaged blocks. The
/// reference is the documented meaning of a search on each text's words (`FTSearch` over a plain
/// dictionary of the texts) and the same search on a model without a full-text index.
@Suite struct BlockHuntTests {
    struct Note: Model {
        static let indexDescriptors: [IndexDescriptor<Note>] = [.fullText(\.text)]
        var id: Int
        var group: Int
        var text: String
    }

    struct PlainNote: Model {
        var id: Int
        var group: Int
        var text: String
    }

    struct SNote: Model {
        static let indexDescriptors: [IndexDescriptor<SNote>] = [.fullText(\.text)]
        var id: String
        var text: String?
    }

    struct PlainSNote: Model {
        var id: String
        var text: String?
    }

    struct UNote: Model {
        static let indexDescriptors: [IndexDescriptor<UNote>] = [.fullText(\.text)]
        var id: UUID
        var text: String?
    }

    struct PlainUNote: Model {
        var id: UUID
        var text: String?
    }

    struct DNote: Model {
        static let indexDescriptors: [IndexDescriptor<DNote>] = [.fullText(\.text)]
        var id: Date
        var text: String?
    }

    struct PlainDNote: Model {
        var id: Date
        var text: String?
    }

    /// Two full-text indexes on one model.
    struct Multi: Model {
        static let indexDescriptors: [IndexDescriptor<Multi>] = [.fullText(\.title), .fullText(\.body), .on(\.group)]
        var id: Int
        var group: Int
        var title: String?
        var body: String
    }

    static let vocabulary = ["the", "room", "rooms", "roomy", "ro", "lunch", "a", "zz", "call", "\u{E9}t\u{E9}", "r\u{F6}ot", "x1"]

    static func words(_ text: String?) -> [String] {
        guard let text else { return [] }
        return PostingHuntTests.words(text)
    }

    static func oracle(_ search: TextSearch) -> FTSearch {
        let parsed = ParsedSearch(search)
        return FTSearch(search: search, terms: parsed.terms.map { (word: String(decoding: $0.word, as: UTF8.self), prefix: $0.isPrefix) })
    }

    static func text(_ rng: inout SeededRandom) -> String {
        switch rng.below(12) {
        case 0: return ""
        case 1: return Array(repeating: vocabulary[rng.below(vocabulary.count)], count: 30 + rng.below(300)).joined(separator: " ")
        default:
            return (0..<(1 + rng.below(9))).map { _ in vocabulary[min(rng.below(vocabulary.count), rng.below(vocabulary.count))] }.joined(separator: " ")
        }
    }

    static func searches(_ rng: inout SeededRandom) -> [TextSearch] {
        var searches: [TextSearch] = [
            "the", "ro*", "the room", "room the lunch", .anyWord("zz call"), .phrase("the room"), .phrase("room room"), "the absent", "\u{E9}t\u{E9} ro*",
        ]
        for _ in 0..<2 {
            let n = 1 + rng.below(3)
            let words = (0..<n).map { _ in vocabulary[rng.below(vocabulary.count)] + (rng.below(5) == 0 ? "*" : "") }.joined(separator: " ")
            searches.append(TextSearch(words, mode: [.phrase, .allWords, .anyWord, .allWords][rng.below(4)]))
        }
        return searches
    }

    /// Every search (keys, count, a page, ranked) against the model and the model without an index.
    static func verify<M: Model, P: Model>(
        _ db: Database, texts: [M.ID: String?], searches: [TextSearch], tree: String, _ context: String, ranks: Bool = true,
        indexed: (TextSearch, Bool) -> Results<M>, plain: (TextSearch, Bool) -> Results<P>
    ) throws where M.ID: Hashable, P.ID == M.ID {
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(context): \(report.problems.prefix(3))")
        try PostingBlockTests().checkLayout(db, tree: tree, context)
        let tokenized = texts.mapValues { words($0) }
        let all: [[String]?] = texts.values.map { $0.map(words) }
        // The index's statistics (texts with a word, words in all), which ranking reads.
        let documents = tokenized.values.filter { !$0.isEmpty }.count
        let total = tokenized.values.reduce(0) { $0 + $1.count }
        try db.store.read { txn in
            guard let index = try txn.tree(tree) else { return }
            let stats = try TextIndexReader(tree: index).stats()
            #expect(stats.documents == documents && stats.words == total, "\(context): statistics \(stats), expected \((documents, total))")
        }
        for search in searches {
            let oracle = Self.oracle(search)
            let expected = Set(texts.keys.filter { oracle.matches(tokenized[$0] ?? []) })
            let results = indexed(search, false)
            let keys = results.keys
            #expect(results.error == nil, "\(context): \(search): \(String(describing: results.error))")
            #expect(Set(keys) == expected, "\(context): \(search): \(keys.count) found, \(expected.count) expected")
            #expect(keys.count == expected.count, "\(context): \(search): duplicates")
            let scanned = plain(search, false).keys
            #expect(keys == scanned, "\(context): \(search): the order differs from a scan's")
            #expect(try results.fetchCount() == expected.count, "\(context): count of \(search)")
            #expect(
                try indexed(search, false).offset(7).prefix(11).fetch().map(\.id) == Array(scanned.dropFirst(7).prefix(11)), "\(context): page of \(search)")
            // Ranked: the same texts, by relevance as TextRanking documents it.
            guard ranks else { continue }
            let ranked = indexed(search, true).keys
            #expect(Set(ranked) == expected, "\(context): ranked \(search)")
            let scores = oracle.scores(all, of: ranked.map { tokenized[$0] ?? [] })
            let ordered = zip(scores, scores.dropFirst()).allSatisfy { $0 >= $1 - 1e-9 }
            #expect(ordered, "\(context): ranked \(search) out of order: \(scores.prefix(8))")
            let rankedPlain = plain(search, true).keys
            #expect(Set(rankedPlain) == expected, "\(context): ranked \(search) without an index")
        }
    }

    static func verifyNotes(_ db: Database, _ texts: [Int: String], _ searches: [TextSearch], _ context: String) throws {
        try verify(
            db, texts: texts.mapValues { Optional($0) }, searches: searches, tree: "i:Note:text(fullText)", context,
            indexed: { db.objects(Note.self).search(\.text, $0, ranked: $1) }, plain: { db.objects(PlainNote.self).search(\.text, $0, ranked: $1) })
    }

    static func withFile<R>(_ body: (String) throws -> R) rethrows -> R {
        let path = NSTemporaryDirectory() + "strata-blockhunt-\(UUID().uuidString).strata"
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        return try body(path)
    }

    // MARK: Int keys

    /// 1,500 texts written in descending key order, then rounds of random upserts, position-only
    /// updates, deletes, re-inserts and rolled-back savepoints, with a reopen every other round;
    /// at the end, every text of the commonest word deleted but a few, then all.
    @Test func intKeysInEveryOrderAcrossReopens() throws {
        let seed: UInt64 = 0xB10C_4B17
        var rng = SeededRandom(seed: seed)
        try Self.withFile { path in
            var db: Database? = try Database(path: path, models: [Note.self, PlainNote.self])
            var texts: [Int: String] = [:]
            func put(_ tx: Transaction, _ id: Int, _ text: String) throws {
                try tx.upsert(Note(id: id, group: abs(id) % 4, text: text))
                try tx.upsert(PlainNote(id: id, group: abs(id) % 4, text: text))
            }
            try db!.write { tx in
                for id in stride(from: 500, through: -100, by: -1) {
                    let text = "the " + Self.text(&rng)
                    try put(tx, id, text)
                    texts[id] = text
                }
            }
            try Self.verifyNotes(db!, texts, Self.searches(&rng), "seed \(seed) descending load")
            var deleted: [Int] = []
            for round in 0..<3 {
                let current = try #require(db)
                try current.write { tx in
                    for _ in 0..<(150 + rng.below(150)) {
                        let id = rng.below(800) - 200
                        switch rng.below(8) {
                        case 0:
                            if try tx.delete(Note.self, key: id) {
                                _ = try tx.delete(PlainNote.self, key: id)
                                texts[id] = nil
                                deleted.append(id)
                            }
                        case 1 where !deleted.isEmpty:
                            let again = deleted.removeLast()
                            let text = Self.text(&rng)
                            try put(tx, again, text)
                            texts[again] = text
                        case 2:
                            // Only positions change.
                            guard let old = texts[id] else { continue }
                            var words = Self.words(old)
                            for i in words.indices.reversed() where i > 0 { words.swapAt(i, rng.below(i + 1)) }
                            let text = "the " + words.joined(separator: " ")
                            try put(tx, id, text)
                            texts[id] = text
                        case 3:
                            let before = texts
                            do {
                                try tx.savepoint {
                                    for j in 0..<5 { try put(tx, id + j * 37, Self.text(&rng)) }
                                    try tx.savepoint {}  // its start merges the postings
                                    _ = try tx.delete(Note.self, key: id + 1)
                                    try put(tx, id - 1, "the the the")
                                    try tx.savepoint {}
                                    throw CancellationError()
                                }
                            } catch is CancellationError {}
                            texts = before
                        default:
                            let text = Self.text(&rng)
                            try put(tx, id, text)
                            texts[id] = text
                        }
                    }
                }
                try Self.verifyNotes(current, texts, Self.searches(&rng), "seed \(seed) round \(round)")
                if round % 2 == 0 {
                    db = nil
                    db = try Database(path: path, models: [Note.self, PlainNote.self])
                }
            }
            let current = try #require(db)
            // Every text with "the" but every 50th goes, in random order.
            var doomed = texts.filter { Self.words($0.value).contains("the") }.keys.sorted().enumerated().filter { $0.offset % 50 != 0 }.map(\.element)
            for i in doomed.indices.reversed() where i > 0 { doomed.swapAt(i, rng.below(i + 1)) }
            try current.write { tx in
                for id in doomed {
                    _ = try tx.delete(Note.self, key: id)
                    _ = try tx.delete(PlainNote.self, key: id)
                    texts[id] = nil
                }
            }
            try Self.verifyNotes(current, texts, Self.searches(&rng), "seed \(seed) most of the gone")
            try current.write { tx in
                for (id, text) in texts where Self.words(text).contains("the") {
                    _ = try tx.delete(Note.self, key: id)
                    _ = try tx.delete(PlainNote.self, key: id)
                    texts[id] = nil
                }
            }
            try Self.verifyNotes(current, texts, ["the", .anyWord("the room"), "th*"], "seed \(seed) all of the gone")
            // Re-inserting deleted keys with the word again, in descending order.
            try current.write { tx in
                for id in doomed.sorted(by: >).prefix(200) {
                    try put(tx, id, "the again")
                    texts[id] = "the again"
                }
            }
            try Self.verifyNotes(current, texts, Self.searches(&rng), "seed \(seed) re-inserted")
        }
    }

    /// Texts that repeat a word thousands of times (one posting larger than a block) between
    /// small texts with the same word, inserted in random order, then shrunk, grown and deleted.
    @Test func postingsLargerThanABlock() throws {
        var rng = SeededRandom(seed: 99)
        let db = try Database.inMemory(models: [Note.self, PlainNote.self])
        var texts: [Int: String] = [:]
        func big(_ n: Int) -> String { Array(repeating: "room", count: n).joined(separator: " ") + " the end" }
        var ids = Array(0..<120)
        for i in ids.indices.reversed() where i > 0 { ids.swapAt(i, rng.below(i + 1)) }
        try db.write { tx in
            for id in ids {
                let text = id % 10 == 3 ? big(600 + rng.below(1_500)) : "room the " + Self.text(&rng)
                try tx.insert(Note(id: id, group: id % 4, text: text))
                try tx.insert(PlainNote(id: id, group: id % 4, text: text))
                texts[id] = text
            }
        }
        let searches: [TextSearch] = [
            "room", "room the", .phrase("room the"), .phrase("room room the end"), .phrase("the end"), "roo*", .anyWord("end lunch"), "end room zz",
        ]
        try Self.verifyNotes(db, texts, searches, "big postings")
        try db.write { tx in
            for id in ids.prefix(60) {
                let text: String
                switch id % 3 {
                case 0: text = big(2_000)
                case 1: text = "room"
                default:
                    _ = try tx.delete(Note.self, key: id)
                    _ = try tx.delete(PlainNote.self, key: id)
                    texts[id] = nil
                    continue
                }
                try tx.upsert(Note(id: id, group: id % 4, text: text))
                try tx.upsert(PlainNote(id: id, group: id % 4, text: text))
                texts[id] = text
            }
        }
        try Self.verifyNotes(db, texts, searches, "big postings changed")
    }

    // MARK: Other keys

    /// String keys with shared prefixes of every length (and keys that are prefixes of others),
    /// texts set to nil and back, keys near the limit of a model with a full-text index.
    @Test func stringKeysOfEveryLength() throws {
        var rng = SeededRandom(seed: 5_150)
        let db = try Database.inMemory(models: [SNote.self, PlainSNote.self])
        var texts: [String: String?] = [:]
        let long = String(repeating: "k", count: 860)
        func key() -> String {
            switch rng.below(6) {
            case 0: return String(repeating: "a", count: rng.below(40))
            case 1: return long + String(rng.below(100_000))  // near 874 bytes
            case 2: return "m/" + String(repeating: "\u{E9}", count: rng.below(5)) + "/\(rng.below(50))"
            case 3: return "m/\(rng.below(300))"
            case 4: return String(repeating: "z", count: 900 + rng.below(80))  // over 874: only short words
            default: return "m/\(rng.below(30))/" + String(repeating: "0", count: rng.below(4))
            }
        }
        for round in 0..<3 {
            try db.write { tx in
                for _ in 0..<200 {
                    let id = key()
                    let text: String? = rng.below(5) == 0 ? nil : Self.text(&rng)
                    if rng.below(7) == 0 {
                        _ = try tx.delete(SNote.self, key: id)
                        _ = try tx.delete(PlainSNote.self, key: id)
                        texts[id] = nil
                        continue
                    }
                    try tx.upsert(SNote(id: id, text: text))
                    try tx.upsert(PlainSNote(id: id, text: text))
                    texts[id] = .some(text)
                }
            }
            try Self.verify(
                db, texts: texts, searches: Self.searches(&rng), tree: "i:SNote:text(fullText)", "string keys round \(round)",
                indexed: { db.objects(SNote.self).search(\.text, $0, ranked: $1) }, plain: { db.objects(PlainSNote.self).search(\.text, $0, ranked: $1) })
        }
    }

    @Test func uuidAndDateKeys() throws {
        var rng = SeededRandom(seed: 0xDA7E)
        let db = try Database.inMemory(models: [UNote.self, PlainUNote.self, DNote.self, PlainDNote.self])
        var utexts: [UUID: String?] = [:]
        var dtexts: [Date: String?] = [:]
        var uuids: [UUID] = []
        for round in 0..<2 {
            try db.write { tx in
                for _ in 0..<250 {
                    let u: UUID
                    if !uuids.isEmpty && rng.below(3) == 0 {
                        u = uuids[rng.below(uuids.count)]
                    } else {
                        var bytes = (0..<16).map { _ in UInt8(truncatingIfNeeded: rng.below(256)) }
                        if rng.below(2) == 0 { for i in 0..<12 { bytes[i] = 0 } }  // long shared prefixes
                        u = UUID(
                            uuid: (
                                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10], bytes[11],
                                bytes[12], bytes[13], bytes[14], bytes[15]
                            ))
                        uuids.append(u)
                    }
                    let d = Date(timeIntervalSinceReferenceDate: Double(rng.below(4_000) - 2_000) * [1, 0.001, 86_400, 1e9][rng.below(4)])
                    let text: String? = rng.below(6) == 0 ? nil : Self.text(&rng)
                    if rng.below(8) == 0 {
                        _ = try tx.delete(UNote.self, key: u)
                        _ = try tx.delete(PlainUNote.self, key: u)
                        utexts[u] = nil
                        _ = try tx.delete(DNote.self, key: d)
                        _ = try tx.delete(PlainDNote.self, key: d)
                        dtexts[d] = nil
                        continue
                    }
                    try tx.upsert(UNote(id: u, text: text))
                    try tx.upsert(PlainUNote(id: u, text: text))
                    utexts[u] = .some(text)
                    try tx.upsert(DNote(id: d, text: text))
                    try tx.upsert(PlainDNote(id: d, text: text))
                    dtexts[d] = .some(text)
                }
            }
            let searches = Self.searches(&rng)
            try Self.verify(
                db, texts: utexts, searches: searches, tree: "i:UNote:text(fullText)", "uuid round \(round)",
                indexed: { db.objects(UNote.self).search(\.text, $0, ranked: $1) }, plain: { db.objects(PlainUNote.self).search(\.text, $0, ranked: $1) })
            try Self.verify(
                db, texts: dtexts, searches: searches, tree: "i:DNote:text(fullText)", "date round \(round)",
                indexed: { db.objects(DNote.self).search(\.text, $0, ranked: $1) }, plain: { db.objects(PlainDNote.self).search(\.text, $0, ranked: $1) })
        }
    }

    // MARK: Two indexes, two models, deleteAll

    @Test func twoIndexesTwoModelsAndDeleteAll() throws {
        var rng = SeededRandom(seed: 0x2222)
        try Self.withFile { path in
            var db = try Database(path: path, models: [Multi.self, SNote.self, PlainSNote.self])
            var titles: [Int: String?] = [:]
            var bodies: [Int: String?] = [:]
            var snotes: [String: String?] = [:]
            func round(_ tx: Transaction, _ n: Int) throws {
                for _ in 0..<n {
                    let id = rng.below(400)
                    let title: String? = rng.below(4) == 0 ? nil : Self.text(&rng)
                    let body = Self.text(&rng)
                    if rng.below(6) == 0 {
                        _ = try tx.delete(Multi.self, key: id)
                        titles[id] = nil
                        bodies[id] = nil
                    } else {
                        try tx.upsert(Multi(id: id, group: id % 3, title: title, body: body))
                        titles[id] = .some(title)
                        bodies[id] = .some(body)
                    }
                    let s = "n\(id)"
                    try tx.upsert(SNote(id: s, text: body))
                    try tx.upsert(PlainSNote(id: s, text: body))
                    snotes[s] = .some(body)
                }
            }
            func check(_ context: String) throws {
                let searches = Self.searches(&rng)
                let multiBase = db.objects(Multi.self)
                try Self.verify(
                    db, texts: titles, searches: searches, tree: "i:Multi:title(fullText)", "\(context) titles",
                    indexed: { multiBase.search(\.title, $0, ranked: $1) },
                    plain: { multiBase.filter(#Predicate { _ in true }).search(\.title, $0, ranked: $1) })
                try Self.verify(
                    db, texts: bodies.mapValues { $0 }, searches: searches, tree: "i:Multi:body(fullText)", "\(context) bodies",
                    indexed: { multiBase.search(\.body, $0, ranked: $1) }, plain: { multiBase.search(\.body, $0, ranked: $1) })
                try Self.verify(
                    db, texts: snotes, searches: searches, tree: "i:SNote:text(fullText)", "\(context) snotes",
                    indexed: { db.objects(SNote.self).search(\.text, $0, ranked: $1) }, plain: { db.objects(PlainSNote.self).search(\.text, $0, ranked: $1) })
                // Both indexes in one query.
                for (a, b) in [("the", "room"), ("ro*", "zz"), ("a", "a")] {
                    let tokenizedT = titles.mapValues { Self.words($0) }
                    let tokenizedB = bodies.mapValues { Self.words($0) }
                    let oa = Self.oracle(TextSearch(a)), ob = Self.oracle(TextSearch(b))
                    let expected = Set(titles.keys.filter { titles[$0]! != nil && oa.matches(tokenizedT[$0]!) && ob.matches(tokenizedB[$0]!) })
                    let got = db.objects(Multi.self).search(\.title, TextSearch(a)).search(\.body, TextSearch(b))
                    #expect(Set(got.keys) == expected, "\(context): title \(a) body \(b)")
                    #expect(try got.fetchCount() == expected.count, "\(context): count of title \(a) body \(b)")
                }
            }
            try db.write { tx in try round(tx, 250) }
            try check("first")
            // deleteAll with postings still deferred, then new texts in the same transaction.
            try db.write { tx in
                try round(tx, 200)
                try tx.deleteAll(Multi.self)
                titles = [:]
                bodies = [:]
                try round(tx, 300)
            }
            try check("after deleteAll")
            // deleteAll inside a savepoint that rolls back, after the postings were merged.
            try db.write { tx in
                try round(tx, 200)
                let before = (titles, bodies, snotes)
                do {
                    try tx.savepoint {
                        try round(tx, 50)
                        try tx.deleteAll(Multi.self)
                        try round(tx, 50)
                        try tx.savepoint {}
                        throw CancellationError()
                    }
                } catch is CancellationError {}
                (titles, bodies, snotes) = before
                try round(tx, 100)
            }
            try check("after a rolled-back deleteAll")
            db = try Database(path: path, models: [Multi.self, SNote.self, PlainSNote.self])
            try check("reopened")
        }
    }

    // MARK: Over the deferred-write limit

    /// A transaction of 24,000 texts of 10 words goes over the 8 MiB of deferred writes (the postings are
    /// merged midway), then updates to the same words in the same transaction.
    @Test func oneTransactionOverTheDeferredLimit() throws {
        let db = try Database.inMemory(models: [Note.self])
        // About 40 bytes of deferred writes a posting: 24,000 texts of 10 words pass 8 MiB.
        let n = 24_000
        func text(_ i: Int) -> String { "common w\(i % 97) v\(i % 13) common t\(i) a\(i % 5) b\(i % 11) c\(i % 17) d\(i % 19) e\(i % 23) f\(i % 29)" }
        try db.write { tx in
            for i in 0..<n { try tx.insert(Note(id: (i * 7_919) % n, group: 0, text: text((i * 7_919) % n))) }
            // After the limit was passed: change texts in the middle of blocks, and delete some.
            for i in stride(from: 0, to: n, by: 101) { try tx.upsert(Note(id: i, group: 1, text: "changed w\(i % 97)")) }
            for i in stride(from: 50, to: n, by: 997) { _ = try tx.delete(Note.self, key: i) }
        }
        var texts: [Int: String] = [:]
        for i in 0..<n { texts[i] = text(i) }
        for i in stride(from: 0, to: n, by: 101) { texts[i] = "changed w\(i % 97)" }
        for i in stride(from: 50, to: n, by: 997) { texts[i] = nil }
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
        let tokenized = texts.mapValues { Self.words($0) }
        for search: TextSearch in ["common", "w5", "w5 v3", "changed w5", .phrase("w5 v6"), "t123", "t23999", "changed", .anyWord("t1 t2 changed")] {
            let oracle = Self.oracle(search)
            let expected = texts.keys.sorted().filter { oracle.matches(tokenized[$0]!) }
            let results = db.objects(Note.self).search(\.text, search)
            #expect(try results.fetchCount() == expected.count, "count of \(search)")
            #expect(
                try results.offset(expected.count / 2).prefix(20).fetch().map(\.id) == Array(expected.dropFirst(expected.count / 2).prefix(20)), "\(search)")
        }
        // Zig-zags over a tree of many levels (a word per text): every key.
        for search: TextSearch in ["w5", "w5 v3", "t123 common", "common t23999", "a1 b2 c3 d4", "f28 e22 w96", "changed w5 v3", "v12 a4 w96 common"] {
            let oracle = Self.oracle(search)
            #expect(db.objects(Note.self).search(\.text, search).keys == texts.keys.sorted().filter { oracle.matches(tokenized[$0]!) }, "\(search)")
        }
    }

    /// Long primary keys make a few thousand postings pass the 8 MiB of deferred writes, so they
    /// are merged midway; inside a savepoint that rolls back, and a transaction that throws.
    @Test func deferredLimitInsideSavepointsAndFailedTransactions() throws {
        let db = try Database.inMemory(models: [SNote.self, PlainSNote.self])
        var texts: [String: String?] = [:]
        let prefix = String(repeating: "p", count: 780)
        func id(_ i: Int) -> String { prefix + String(format: "%06d", i) }
        let words = (0..<16).map { "w\($0)" }.joined(separator: " ")
        func put(_ tx: Transaction, _ i: Int, _ text: String?) throws {
            try tx.upsert(SNote(id: id(i), text: text))
            try tx.upsert(PlainSNote(id: id(i), text: text))
        }
        try db.write { tx in
            for i in stride(from: 0, to: 800, by: 2) {
                try put(tx, i, "base " + words)
                texts[id(i)] = .some("base " + words)
            }
        }
        try db.write { tx in
            do {
                try tx.savepoint {
                    for i in (0..<900).reversed() { try put(tx, i, "gone " + words) }
                    throw CancellationError()
                }
            } catch is CancellationError {}
            for i in stride(from: 1, to: 400, by: 2) {
                try put(tx, i, "kept w3")
                texts[id(i)] = .some("kept w3")
            }
        }
        let searches: [TextSearch] = ["gone", "kept", "w11 base", .anyWord("gone kept")]
        let verify = { (context: String) in
            try Self.verify(
                db, texts: texts, searches: searches, tree: "i:SNote:text(fullText)", context, ranks: false,
                indexed: { db.objects(SNote.self).search(\.text, $0, ranked: $1) }, plain: { db.objects(PlainSNote.self).search(\.text, $0, ranked: $1) })
        }
        try verify("after a savepoint over the limit rolled back")
        do {
            try db.write { tx in
                for i in 0..<900 { try put(tx, i, "gone " + words) }
                try tx.savepoint {}
                for i in 0..<10 { _ = try tx.delete(SNote.self, key: id(i)) }
                throw CancellationError()
            }
        } catch is CancellationError {}
        try verify("after a transaction over the limit threw")
    }

    /// A whole word's count comes from its blocks' heads: with a window, a filter or a second
    /// word it must still be the number of objects the query returns.
    @Test func countsOfWindowsAndFilters() throws {
        let db = try Database.inMemory(models: [Note.self])
        try db.write { tx in
            for id in (0..<700).reversed() { try tx.insert(Note(id: id, group: id % 4, text: id % 3 == 0 ? "room the" : "room")) }
        }
        let base = db.objects(Note.self).search(\.text, "room")
        #expect(try base.fetchCount() == 700)
        #expect(try base.prefix(10).fetchCount() == 10)
        #expect(try base.offset(695).fetchCount() == 5)
        #expect(try base.offset(10).prefix(20).fetchCount() == 20)
        #expect(try base.offset(800).fetchCount() == 0)
        #expect(try base.filter(#Predicate { $0.group == 1 }).fetchCount() == 175)
        #expect(try db.objects(Note.self).search(\.text, .phrase("room")).prefix(3).fetchCount() == 3)
        #expect(try db.objects(Note.self).search(\.text, "room").search(\.text, "the").fetchCount() == 234)
        #expect(try db.objects(Note.self).filter(#Predicate { $0.id < 100 }).search(\.text, "room").fetchCount() == 100)
        #expect(try base.sorted(by: SortDescriptor(\.group)).prefix(7).fetchCount() == 7)
    }

    /// A primary key as long as a model with a full-text index takes (874 UTF-8 bytes) with a
    /// 120-byte word; one byte more throws naming the key and changes nothing; a longer key with
    /// short words only is stored (ModelsAndSchema.md).
    @Test func keysAtTheLimitOfAFullTextIndex() throws {
        let db = try Database.inMemory(models: [SNote.self])
        let word = String(repeating: "w", count: 130)  // cut to 120 bytes
        let fits = String(repeating: "k", count: 874)
        try db.write { tx in
            try tx.insert(SNote(id: fits, text: word + " x"))
            try tx.insert(SNote(id: fits + "a", text: "x y"))
        }
        #expect(throws: StrataError.self) {
            try db.write { tx in try tx.upsert(SNote(id: fits + "a", text: word + " x")) }
        }
        #expect(throws: StrataError.self) {
            try db.write { tx in try tx.insert(SNote(id: fits + "b", text: "x " + word)) }
        }
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
        #expect(Set(db.objects(SNote.self).search(\.text, "x").keys) == [fits, fits + "a"])
        #expect(db.objects(SNote.self).search(\.text, "w*").keys == [fits])
        #expect(db.objects(SNote.self).search(\.text, "y").keys == [fits + "a"])
        #expect(db.objects(SNote.self).search(\.text, TextSearch(word)).keys == [fits])
        // A failed write inside a transaction (caught) leaves it usable, and its postings out.
        try db.write { tx in
            do { try tx.upsert(SNote(id: fits + "a", text: word + " z")) } catch {}
            try tx.upsert(SNote(id: fits + "c", text: "x z"))
        }
        #expect(db.objects(SNote.self).search(\.text, "z").keys == [fits + "c"])
        #expect(db.objects(SNote.self).search(\.text, "y").keys == [fits + "a"])
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
    }

    struct DocA: Model {
        static var modelName: String { "BHDoc" }
        var id: Int
        var title: String?
        var text: String
    }

    struct DocB: Model {
        static var modelName: String { "BHDoc" }
        static let indexDescriptors: [IndexDescriptor<DocB>] = [.fullText(\.text), .fullText(\.title)]
        var id: Int
        var title: String?
        var text: String
    }

    /// Full-text indexes added to a model that holds texts are built as the database opens
    /// (in batches of 4,096 records, postings merged into blocks); dropped and built again.
    @Test func indexesBuiltOnOpen() throws {
        var rng = SeededRandom(seed: 0xB01D)
        try Self.withFile { path in
            var texts: [Int: String] = [:]
            var titles: [Int: String?] = [:]
            do {
                let db = try Database(path: path, models: [DocA.self])
                try db.write { tx in
                    for id in (0..<5_000).reversed() {
                        let text = Self.text(&rng)
                        let title: String? = id % 3 == 0 ? nil : "t\(id % 7) " + Self.vocabulary[id % Self.vocabulary.count]
                        try tx.insert(DocA(id: id * 2 - 3_000, title: title, text: text))
                        texts[id * 2 - 3_000] = text
                        titles[id * 2 - 3_000] = .some(title)
                    }
                }
            }
            func check(_ context: String) throws {
                let db = try Database(path: path, models: [DocB.self])
                #expect(try StoredObjects.check(in: db.store).problems.isEmpty, "\(context)")
                let tokenized = texts.mapValues { Self.words($0) }
                let tokenizedTitles = titles.mapValues { Self.words($0) }
                for search: TextSearch in ["the", "room the", "ro*", .phrase("the room"), .anyWord("zz x1"), "lunch call"] {
                    let oracle = Self.oracle(search)
                    let expected = texts.keys.sorted().filter { oracle.matches(tokenized[$0]!) }
                    let results = db.objects(DocB.self).search(\.text, search)
                    #expect(results.keys == expected, "\(context): \(search)")
                    #expect(try results.fetchCount() == expected.count, "\(context): count of \(search)")
                }
                for search: TextSearch in ["t3", "t3 room", "t*", .phrase("t6 the")] {
                    let oracle = Self.oracle(search)
                    let expected = titles.keys.sorted().filter { titles[$0]! != nil && oracle.matches(tokenizedTitles[$0]!) }
                    #expect(db.objects(DocB.self).search(\.title, search).keys == expected, "\(context): title \(search)")
                }
                try db.write { tx in
                    for _ in 0..<300 {
                        let id = rng.below(20_000) - 3_000
                        let text = "the " + Self.text(&rng)
                        try tx.upsert(DocB(id: id, title: nil, text: text))
                        texts[id] = text
                        titles[id] = .some(nil)
                    }
                }
            }
            try check("built")
            try check("written after the build")
            do { _ = try Database(path: path, models: [DocA.self]) }  // drops the indexes
            try check("built again")
        }
    }

    /// Extreme Int keys (Int.min encodes to eight zero bytes, right after the word's terminator),
    /// texts changed through `update` (a partial update), `insert(contentsOf:)`, and the same
    /// key written several times in one transaction.
    @Test func extremeKeysPartialUpdatesAndRepeatedWrites() throws {
        var rng = SeededRandom(seed: 0xE87E)
        let db = try Database.inMemory(models: [Note.self, PlainNote.self])
        var texts: [Int: String] = [:]
        let edges = [Int.min, Int.min + 1, Int.min + 255, Int.min + 256, -256, -1, 0, 1, 255, 256, Int.max - 256, Int.max - 1, Int.max]
        var ids = edges + (0..<400).map { _ in Int(truncatingIfNeeded: rng.next()) >> rng.below(60) }
        for i in ids.indices.reversed() where i > 0 { ids.swapAt(i, rng.below(i + 1)) }
        try db.write { tx in
            var unique: [Int: Note] = [:]
            for id in ids { unique[id] = Note(id: id, group: 0, text: "the " + Self.text(&rng)) }
            let notes = ids.compactMap { unique.removeValue(forKey: $0) }  // shuffled, each once
            _ = try tx.insert(contentsOf: notes.filter { $0.id != 0 })
            for note in notes {
                texts[note.id] = note.text
                try tx.upsert(PlainNote(id: note.id, group: 0, text: note.text))
            }
            try tx.upsert(Note(id: 0, group: 0, text: texts[0]!))
        }
        try Self.verifyNotes(db, texts, Self.searches(&rng), "edges inserted")
        try db.write { tx in
            for id in edges + ids.prefix(100) {
                // Three writes of one key in one transaction; the last counts.
                for _ in 0..<3 {
                    let text = Self.text(&rng)
                    switch rng.below(3) {
                    case 0: _ = try tx.update(Note.self, key: id) { $0.text = text }
                    case 1: _ = try tx.upsert(Note(id: id, group: 1, text: text))
                    default: _ = try tx.update(Note.self, key: id) { $0.group += 1 }  // the text stays
                    }
                    if let note = try tx.object(Note.self, key: id) {
                        texts[id] = note.text
                        try tx.upsert(PlainNote(id: id, group: 0, text: note.text))
                    }
                }
            }
        }
        try Self.verifyNotes(db, texts, Self.searches(&rng), "edges updated")
        try db.write { tx in
            for id in edges where id != 0 {
                _ = try tx.delete(Note.self, key: id)
                _ = try tx.delete(PlainNote.self, key: id)
                texts[id] = nil
            }
        }
        try Self.verifyNotes(db, texts, Self.searches(&rng), "edges deleted")
    }

    /// The model of the fixture written before blocks (FullTextUpgradeTests).
    struct OldNote: Model {
        static var modelName: String { "FixtureNote" }
        static let indexDescriptors: [IndexDescriptor<OldNote>] = [.fullText(\.text)]
        var id: Int
        var text: String
    }

    /// An index written before blocks, rebuilt by a read-write open, then written in descending
    /// and random order, deleted and reopened.
    @Test func anUpgradedIndexTakesWritesInEveryOrder() throws {
        var rng = SeededRandom(seed: 0x01D)
        try Self.withFile { path in
            try FileManager.default.copyItem(atPath: FullTextUpgradeTests.fixture, toPath: path)
            var texts = FullTextUpgradeTests.texts
            var db = try Database(path: path, models: [OldNote.self])
            for round in 0..<3 {
                try db.write { tx in
                    for id in (0..<700).reversed() where rng.below(3) == 0 {
                        if rng.below(4) == 0 {
                            _ = try tx.delete(OldNote.self, key: id)
                            texts[id] = nil
                        } else {
                            let text = (0..<(1 + rng.below(5))).map { _ in FullTextUpgradeTests.words[rng.below(FullTextUpgradeTests.words.count)] }.joined(
                                separator: " ")
                            try tx.upsert(OldNote(id: id, text: text))
                            texts[id] = text
                        }
                    }
                }
                #expect(try StoredObjects.check(in: db.store).problems.isEmpty, "round \(round)")
                let tokenized = texts.mapValues { Self.words($0) }
                for search: TextSearch in ["the", "lunch call", .phrase("the room"), .anyWord("thanks tomorrow"), "meet*", "t*", "ok room the"] {
                    let oracle = Self.oracle(search)
                    let expected = texts.keys.sorted().filter { oracle.matches(tokenized[$0]!) }
                    #expect(db.objects(OldNote.self).search(\.text, search).keys == expected, "round \(round): \(search)")
                    #expect(try db.objects(OldNote.self).search(\.text, search).fetchCount() == expected.count, "round \(round): count of \(search)")
                }
                db = try Database(path: path, models: [OldNote.self])
            }
        }
    }

    // MARK: Filters, sorts, windows, counts

    @Test func filtersSortsAndWindowsOverManyBlocks() throws {
        var rng = SeededRandom(seed: 0xF117)
        let db = try Database.inMemory(models: [Note.self, PlainNote.self])
        var texts: [Int: String] = [:]
        try db.write { tx in
            for id in (0..<900).reversed() {
                let text = (id % 3 == 0 ? "the " : "") + Self.text(&rng)
                try tx.insert(Note(id: id * 3 - 1_000, group: id % 5, text: text))
                try tx.insert(PlainNote(id: id * 3 - 1_000, group: id % 5, text: text))
                texts[id * 3 - 1_000] = text
            }
        }
        let tokenized = texts.mapValues { Self.words($0) }
        for search in Self.searches(&rng) + ["the room", "the"] {
            let oracle = Self.oracle(search)
            for group in [0, 3] {
                let matching = texts.keys.filter { oracle.matches(tokenized[$0]!) && abs($0 + 1_000) / 3 % 5 >= group }
                // Sorted by group descending, then by id.
                let expected = matching.sorted { a, b in
                    let ga = (a + 1_000) / 3 % 5, gb = (b + 1_000) / 3 % 5
                    return ga != gb ? ga > gb : a < b
                }
                let r = db.objects(Note.self).search(\.text, search).filter(#Predicate { $0.group >= group }).sorted(
                    by: SortDescriptor(\.group, order: .reverse))
                let p = db.objects(PlainNote.self).search(\.text, search).filter(#Predicate { $0.group >= group }).sorted(
                    by: SortDescriptor(\.group, order: .reverse))
                #expect(r.keys == expected, "\(search) group >= \(group)")
                #expect(p.keys == expected, "\(search) group >= \(group) without an index")
                #expect(try r.fetchCount() == expected.count, "count of \(search) group >= \(group)")
                for (offset, limit) in [(0, 1), (3, 10), (expected.count - 1, 5), (expected.count, 3)] where offset >= 0 {
                    #expect(
                        try r.offset(offset).prefix(limit).fetch().map(\.id) == Array(expected.dropFirst(offset).prefix(limit)),
                        "\(search) window \(offset)+\(limit)")
                }
                let unsorted = db.objects(Note.self).search(\.text, search).filter(#Predicate { $0.group >= group })
                #expect(unsorted.keys == matching.sorted(), "\(search) group >= \(group), key order")
                #expect(try unsorted.offset(2).prefix(30).fetch().map(\.id) == Array(matching.sorted().dropFirst(2).prefix(30)))
            }
        }
    }

    // MARK: Live observers

    @Test func observersOfSearchesFollowBlockChanges() throws {
        var rng = SeededRandom(seed: 0x0B5E)
        let db = try Database.inMemory(models: [Note.self])
        var texts: [Int: String] = [:]
        try db.write { tx in
            for id in (0..<800).reversed() {
                let text = Self.text(&rng)
                try tx.insert(Note(id: id, group: id % 3, text: text))
                texts[id] = text
            }
        }
        let searches: [TextSearch] = ["room", "the room", "ro*", .phrase("room room"), .anyWord("zz call")]
        let latest = Mutex<[Int: [Int]]>([:])
        var tokens: [NotificationToken] = []
        for (i, search) in searches.enumerated() {
            let results = db.objects(Note.self).search(\.text, search).filter(#Predicate { $0.group != 1 })
            tokens.append(
                results.observe(on: DispatchQueue(label: "blockhunt.\(i)")) { change in
                    switch change {
                    case .initial(let r), .update(let r, _, _, _): latest.withLock { $0[i] = r.map(\.id) }
                    case .error: latest.withLock { $0[i] = [-1] }
                    }
                })
        }
        // Ranked windows: compared with the same query run afresh after each write.
        func rankedQuery(_ i: Int) -> Results<Note> {
            switch i {
            case 0: return db.objects(Note.self).search(\.text, "room", ranked: true).prefix(5)
            case 1: return db.objects(Note.self).search(\.text, .anyWord("the zz"), ranked: true).offset(3).prefix(4)
            default: return db.objects(Note.self).search(\.text, "ro*").offset(10).prefix(6)
            }
        }
        let rankedQueries = (0..<3).map(rankedQuery)
        let latestRanked = Mutex<[Int: [Int]]>([:])
        for (i, query) in rankedQueries.enumerated() {
            tokens.append(
                query.observe(on: DispatchQueue(label: "blockhunt.ranked.\(i)")) { change in
                    switch change {
                    case .initial(let r), .update(let r, _, _, _): latestRanked.withLock { $0[i] = r.map(\.id) }
                    case .error: latestRanked.withLock { $0[i] = [-1] }
                    }
                })
        }
        defer { for token in tokens { token.invalidate() } }
        func expected(_ search: TextSearch) -> [Int] {
            let oracle = Self.oracle(search)
            return texts.keys.sorted().filter { texts[$0].map { oracle.matches(Self.words($0)) } ?? false && $0 % 3 != 1 }
        }
        for round in 0..<6 {
            try db.write { tx in
                if round == 4 {
                    // Every block goes at once; a few texts come back.
                    try tx.deleteAll(Note.self)
                    texts = [:]
                }
                if round == 5 {
                    // Deleted one by one, most of the texts of "room" (blocks merged and absorbed).
                    for (id, text) in texts where Self.words(text).contains("room") && id % 5 != 0 {
                        _ = try tx.delete(Note.self, key: id)
                        texts[id] = nil
                    }
                }
                for _ in 0..<(round == 5 ? 10 : 150) {
                    let id = rng.below(900)
                    if rng.below(4) == 0 {
                        _ = try tx.delete(Note.self, key: id)
                        texts[id] = nil
                    } else {
                        let text = Self.text(&rng)
                        try tx.upsert(Note(id: id, group: id % 3, text: text))
                        texts[id] = text
                    }
                }
            }
            let wanted = searches.map(expected)
            let deadline = Date().addingTimeInterval(30)
            var seen: [Int: [Int]] = [:]
            while Date() < deadline {
                seen = latest.withLock { $0 }
                if searches.indices.allSatisfy({ seen[$0] == wanted[$0] }) { break }
                Thread.sleep(forTimeInterval: 0.01)
            }
            let wantedRanked = rankedQueries.indices.map { rankedQuery($0).keys }
            var seenRanked: [Int: [Int]] = [:]
            while Date() < deadline {
                seenRanked = latestRanked.withLock { $0 }
                if rankedQueries.indices.allSatisfy({ seenRanked[$0] == wantedRanked[$0] }) { break }
                Thread.sleep(forTimeInterval: 0.01)
            }
            for i in rankedQueries.indices {
                #expect(seenRanked[i] == wantedRanked[i], "round \(round): ranked observer \(i) has \(seenRanked[i] ?? []), expected \(wantedRanked[i])")
            }
            for i in searches.indices {
                #expect(seen[i] == wanted[i], "round \(round): observer of \(searches[i]) has \(seen[i]?.count ?? -1) ids, expected \(wanted[i].count)")
            }
        }
    }

    /// Readers search snapshots while a writer rewrites the blocks of the same words: in every
    /// snapshot the indexed model and its unindexed twin (written in the same transactions) agree.
    @Test func snapshotsWhileBlocksAreRewritten() throws {
        let db = try Database.inMemory(models: [Note.self, PlainNote.self])
        try db.write { tx in
            for id in 0..<600 {
                try tx.insert(Note(id: id, group: 0, text: "room the"))
                try tx.insert(PlainNote(id: id, group: 0, text: "room the"))
            }
        }
        let done = Atomic<Bool>(false)
        let mismatches = Mutex<[String]>([])
        let reads = Atomic<Int>(0)
        let finished = Atomic<Bool>(false)
        let reader = Thread {
            defer { finished.store(true, ordering: .releasing) }
            let searches: [TextSearch] = ["room", "room the", "ro*", .phrase("the room"), .anyWord("zz lunch")]
            var i = 0
            while !done.load(ordering: .acquiring) || i < 5 {
                do {
                    try db.read { snap in
                        let search = searches[i % searches.count]
                        let a = snap.objects(Note.self).search(\.text, search).keys
                        let b = snap.objects(PlainNote.self).search(\.text, search).keys
                        let n = try snap.objects(Note.self).search(\.text, search).fetchCount()
                        if a != b || n != b.count { mismatches.withLock { $0.append("\(search): \(a.count) indexed, \(b.count) scanned, count \(n)") } }
                    }
                } catch {
                    mismatches.withLock { $0.append("\(error)") }
                }
                i += 1
                reads.add(1, ordering: .relaxed)
            }
        }
        reader.start()
        var rng = SeededRandom(seed: 0x5A95)
        for _ in 0..<40 {
            try db.write { tx in
                for _ in 0..<40 {
                    let id = rng.below(700)
                    let text = Self.text(&rng) + (rng.below(2) == 0 ? " room" : "")
                    try tx.upsert(Note(id: id, group: 0, text: text))
                    try tx.upsert(PlainNote(id: id, group: 0, text: text))
                }
            }
        }
        done.store(true, ordering: .releasing)
        let deadline = Date().addingTimeInterval(30)
        while !finished.load(ordering: .acquiring) && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(finished.load(ordering: .acquiring) && reads.load(ordering: .relaxed) >= 5)
        let failures = mismatches.withLock { $0 }
        #expect(failures.isEmpty, "\(failures.prefix(3))")
    }

    // MARK: Damaged blocks

    /// Builds a database whose word "room" has many blocks, and changes one of them with `damage`
    /// (the block's key and value → the new entries); returns the database.
    static func damaged(_ damage: (_ key: [UInt8], _ value: [UInt8], _ next: (key: [UInt8], value: [UInt8])?) -> [(key: [UInt8], value: [UInt8]?)]) throws
        -> Database
    {
        let db = try Database.inMemory(models: [Note.self])
        try db.write { tx in
            for id in 0..<600 { try tx.insert(Note(id: id, group: 0, text: id % 2 == 0 ? "room the" : "room")) }
        }
        var room: [UInt8] = []
        KeyEncoding.appendBytes(Array("room".utf8), to: &room)
        try db.store.write { txn in
            let tree = try #require(try txn.tree("i:Note:text(fullText)"))
            var blocks: [(key: [UInt8], value: [UInt8])] = []
            try tree.cursor().forEach(from: nil, to: nil, reverse: false) { key, value in
                if key.starts(with: room) { blocks.append((Array(key), Array(value))) }
                return true
            }
            #expect(blocks.count > 4)
            let victim = blocks.count / 2
            for (key, value) in damage(blocks[victim].key, blocks[victim].value, blocks[victim + 1]) {
                if let value { _ = try tree.put(key, value) } else { _ = try tree.delete(key) }
            }
        }
        return db
    }

    static func expectCorrupt(_ db: Database, _ what: String) throws {
        for search: TextSearch in ["room", "room the", "ro*", .phrase("room"), .anyWord("room zz")] {
            do {
                let found = try db.objects(Note.self).search(\.text, search).fetch()
                Issue.record("\(what): \(search) returned \(found.count) objects instead of throwing")
            } catch StrataError.corruptRecord {
            } catch {
                Issue.record("\(what): \(search) threw \(error), not corruptRecord")
            }
        }
        let problems = try StoredObjects.check(in: db.store).problems
        #expect(!problems.isEmpty, "\(what): strata check found nothing")
    }

    @Test func damagedBlocksThrowAndAreReported() throws {
        // The count of postings says one more than the block holds.
        try Self.expectCorrupt(Self.damaged { key, value, _ in [(key, [value[0] + 1] + value.dropFirst())] }, "count too high")
        // The count says one fewer.
        try Self.expectCorrupt(Self.damaged { key, value, _ in [(key, [value[0] - 1] + value.dropFirst())] }, "count too low")
        // The last bytes cut off.
        try Self.expectCorrupt(Self.damaged { key, value, _ in [(key, Array(value.dropLast(2)))] }, "truncated")
        // An empty value.
        try Self.expectCorrupt(Self.damaged { key, _, _ in [(key, [])] }, "empty value")
        // (Blocks that overlap, and damage that a search of several words reads past: in
        // BlockHuntFailingTests.)
    }

    /// A write whose postings go into a damaged block: the merge reads the block, so the commit
    /// throws corruptRecord and nothing of the transaction is stored.
    @Test func aWriteIntoADamagedBlockFailsWhole() throws {
        let db = try Self.damaged { key, value, _ in [(key, Array(value.dropLast(2)))] }
        var victim: Int?
        try db.store.read { txn in
            // The damaged block is the middle one of "room": its first text.
            var room: [UInt8] = []
            KeyEncoding.appendBytes(Array("room".utf8), to: &room)
            var keys: [[UInt8]] = []
            try txn.tree("i:Note:text(fullText)")?.cursor().forEach(from: nil, to: nil, reverse: false) { key, _ in
                if key.starts(with: room) { keys.append(Array(key)) }
                return true
            }
            let key = keys[keys.count / 2]
            var raw: UInt64 = 0
            for byte in key.suffix(8) { raw = raw << 8 | UInt64(byte) }
            victim = Int(Int64(bitPattern: raw ^ (1 << 63)))
        }
        let id = try #require(victim) + 1
        do {
            try db.write { tx in
                try tx.insert(Note(id: 10_000, group: 0, text: "fresh"))
                try tx.upsert(Note(id: id, group: 0, text: "room fresh"))
            }
            Issue.record("a write into a damaged block committed")
        } catch StrataError.corruptRecord {
        } catch {
            Issue.record("threw \(error), not corruptRecord")
        }
        #expect(try db.objects(Note.self).search(\.text, "fresh").fetch().isEmpty)
        #expect(try db.read { try $0.objects(Note.self).filter(#Predicate { $0.id == 10_000 }).fetch() }.isEmpty)
        // A write elsewhere still commits.
        try db.write { tx in try tx.insert(Note(id: 20_000, group: 0, text: "elsewhere")) }
        #expect(db.objects(Note.self).search(\.text, "elsewhere").keys == [20_000])
    }

    /// A posting whose text's record is gone (deleted through the storage API).
    @Test func aPostingWithoutARecord() throws {
        let db = try Self.damaged { _, _, _ in [] }
        try db.store.write { txn in
            var key: [UInt8] = []
            KeyEncoding.appendInt(301, to: &key)
            guard let records = try txn.tree("m:Note") else { throw CancellationError() }
            let removed = try records.delete(key)
            #expect(removed)
        }
        for search: TextSearch in ["room", "room the", "ro*", .phrase("room"), .anyWord("room zz"), "the"] {
            let found = try? db.objects(Note.self).search(\.text, search).fetch()
            // Either an error or the texts that are there; never an object that is not.
            if let found { #expect(!found.map(\.id).contains(301), "\(search)") }
        }
        #expect(!(try StoredObjects.check(in: db.store).problems.isEmpty))
    }
}
