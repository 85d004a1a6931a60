import Foundation
import StrataStorage
import Testing

@testable import Strata

/// Full-text postings in blocks (FORMAT.md §8.5, `PostingMerge`, `PostingCursor`): words with
/// hundreds of postings over many blocks, written in random key order, updated, deleted, inside
/// savepoints that roll back, and across a reopen. The reference is the documented meaning of a
/// search on each text's words (`FTSearch`) over a plain dictionary of the texts; `strata check`
/// recomputes every posting from the records, and the blocks' layout is checked as FORMAT.md
/// states it (every block within its budget unless it holds one posting, none empty, keys in
/// order). Size: STRATA_POSTING_BLOCK_ROUNDS (default 6).
@Suite struct PostingBlockTests {
    struct Note: Model {
        static let indexDescriptors: [IndexDescriptor<Note>] = [.fullText(\.text)]
        var id: Int64
        var text: String
    }

    /// String keys share long prefixes, so front coding keeps little of each.
    struct Tagged: Model {
        static let indexDescriptors: [IndexDescriptor<Tagged>] = [.fullText(\.text)]
        var id: String
        var text: String?
    }

    static let vocabulary = ["the", "a", "to", "room", "rooms", "roomy", "lunch", "call", "ok", "\u{E9}t\u{E9}", "x\u{0}y", "zz"]
    static let rounds = ProcessInfo.processInfo.environment["STRATA_POSTING_BLOCK_ROUNDS"].flatMap { Int($0) } ?? 6

    /// A text: mostly a few common words, sometimes a word repeated many times (a long posting,
    /// so blocks hold few), sometimes nothing.
    static func text(_ rng: inout SeededRandom) -> String {
        switch rng.below(10) {
        case 0: return ""
        case 1: return Array(repeating: vocabulary[rng.below(vocabulary.count)], count: 20 + rng.below(200)).joined(separator: " ")
        default:
            // Zipf-like: low indices far more often.
            return (0..<(1 + rng.below(8))).map { _ in vocabulary[min(rng.below(vocabulary.count), rng.below(vocabulary.count))] }.joined(separator: " ")
        }
    }

    static func words(_ text: String?) -> [String] {
        guard let text else { return [] }
        return WordTokenizer.words(text).map { String(decoding: $0, as: UTF8.self) }
    }

    static func searches(_ rng: inout SeededRandom) -> [TextSearch] {
        var searches: [TextSearch] = [
            "the", "a to", "room*", "roo*", "\u{E9}t\u{E9}", "x\u{0}y zz", .anyWord("lunch call"), .phrase("the a"), "absent", "the absent",
        ]
        for _ in 0..<6 {
            let n = 1 + rng.below(3)
            let words = (0..<n).map { _ in vocabulary[rng.below(vocabulary.count)] }.joined(separator: " ")
            searches.append(TextSearch(words, mode: [.phrase, .allWords, .anyWord, .allWords][rng.below(4)]))
        }
        return searches
    }

    /// Every search, its count and a page of it (offset, prefix) against the model.
    func verifyInt(_ db: Database, _ texts: [Int64: String], _ searches: [TextSearch], _ context: String) throws {
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(context): \(report.problems.prefix(3))")
        let tokenized = texts.mapValues { Self.words($0) }
        for search in searches {
            let parsed = ParsedSearch(search)
            let oracle = FTSearch(search: search, terms: parsed.terms.map { (word: String(decoding: $0.word, as: UTF8.self), prefix: $0.isPrefix) })
            let expected = texts.keys.sorted().filter { oracle.matches(tokenized[$0] ?? []) }
            let results = db.objects(Note.self).search(\.text, search)
            #expect(results.keys == expected, "\(context): \(search)")
            #expect(try results.fetchCount() == expected.count, "\(context): count of \(search)")
            #expect(try results.offset(5).prefix(9).fetch().map(\.id) == Array(expected.dropFirst(5).prefix(9)), "\(context): page of \(search)")
        }
    }

    /// The blocks as FORMAT.md §8.5 lays them out.
    func checkLayout(_ db: Database, tree name: String, _ context: String) throws {
        try db.store.read { txn in
            guard let tree = try txn.tree(name) else { return }
            var reader = PostingBlockReader()
            var blocks = 0
            var postings = 0
            try tree.cursor().forEach(from: nil, to: nil, reverse: false) { key, value in
                if key.elementsEqual([0]) { return true }
                blocks += 1
                let wordEnd = try #require(PostingBlocks.wordEnd(key), "\(context): a block key without a word")
                try reader.load(key: key, wordEnd: wordEnd, value: value)
                var n = 0
                while try reader.next() { n += 1 }
                postings += n
                #expect(n >= 1, "\(context): an empty block")
                if n > 1 {
                    #expect(value.count <= PostingBlocks.budget(keyCount: key.count), "\(context): a block of \(n) postings takes \(value.count) bytes")
                }
                return true
            }
            #expect(blocks <= postings)
        }
    }

    @Test func randomWritesAgainstTheModel() throws {
        let seed: UInt64 = 0x0B10_C4ED
        var rng = SeededRandom(seed: seed)
        let path = NSTemporaryDirectory() + "strata-postingblocks-\(UUID().uuidString).strata"
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        var db: Database? = try Database(path: path, models: [Note.self])
        var texts: [Int64: String] = [:]
        for round in 0..<Self.rounds {
            let context = "seed \(seed) round \(round)"
            let current = try #require(db)
            try current.write { tx in
                for _ in 0..<(100 + rng.below(400)) {
                    let id = Int64(rng.below(1_500)) - 200
                    switch rng.below(6) {
                    case 0:
                        if try tx.delete(Note.self, key: id) { texts[id] = nil }
                    case 1:
                        // A savepoint that rolls back leaves the postings as they were.
                        let before = texts
                        do {
                            try tx.savepoint {
                                let text = Self.text(&rng)
                                try tx.upsert(Note(id: id, text: text))
                                try tx.savepoint {}  // (its start applies the deferred postings)
                                try tx.upsert(Note(id: id + 1, text: Self.text(&rng)))
                                throw CancellationError()
                            }
                        } catch is CancellationError {}
                        texts = before
                    default:
                        let text = Self.text(&rng)
                        try tx.upsert(Note(id: id, text: text))
                        texts[id] = text
                    }
                }
            }
            try verifyInt(current, texts, Self.searches(&rng), context)
            try checkLayout(current, tree: "i:Note:text(fullText)", context)
            if round % 2 == 1 {
                db = nil
                db = try Database(path: path, models: [Note.self])
            }
        }
        // Deleting almost everything leaves blocks that still read right (small ones taken in by
        // their neighbours).
        let current = try #require(db)
        try current.write { tx in
            for id in texts.keys.sorted() where id % 7 != 0 {
                _ = try tx.delete(Note.self, key: id)
                texts[id] = nil
            }
        }
        try verifyInt(current, texts, Self.searches(&rng), "seed \(seed) after deletes")
        try checkLayout(current, tree: "i:Note:text(fullText)", "seed \(seed) after deletes")
    }

    /// String keys with long shared prefixes and optional texts; each transaction adds postings
    /// in random order to blocks in the middle of each word. Also with keys of about 800 bytes,
    /// which a prefix or phrase search gathers into sets and dictionaries (and each block holds
    /// one posting).
    @Test(arguments: ["message/2026-12-05/", String(repeating: "m", count: 780) + "/"])
    func stringKeysAndOptionalTexts(_ keyPrefix: String) throws {
        let seed: UInt64 = 77
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [Tagged.self])
        var texts: [String: String] = [:]
        for round in 0..<Self.rounds {
            try db.write { tx in
                for _ in 0..<200 {
                    let id = keyPrefix + String(repeating: "0", count: rng.below(3)) + "\(rng.below(800))"
                    if rng.below(5) == 0 {
                        try tx.upsert(Tagged(id: id, text: nil))
                        texts[id] = nil
                    } else {
                        let text = Self.text(&rng)
                        try tx.upsert(Tagged(id: id, text: text))
                        texts[id] = text
                    }
                }
            }
            let context = "seed \(seed) round \(round)"
            let report = try StoredObjects.check(in: db.store)
            #expect(report.problems.isEmpty, "\(context): \(report.problems.prefix(3))")
            let tokenized = texts.mapValues { Self.words($0) }
            for search in Self.searches(&rng) {
                let parsed = ParsedSearch(search)
                let oracle = FTSearch(search: search, terms: parsed.terms.map { (word: String(decoding: $0.word, as: UTF8.self), prefix: $0.isPrefix) })
                let expected = Set(texts.keys.filter { oracle.matches(tokenized[$0] ?? []) })
                let results = db.objects(Tagged.self).search(\.text, search)
                #expect(Set(try results.fetch().map(\.id)) == expected, "\(context): \(search)")
                #expect(try results.fetchCount() == expected.count, "\(context): count of \(search)")
            }
            try checkLayout(db, tree: "i:Tagged:text(fullText)", context)
        }
    }

    /// Two words whose postings interleave over many blocks: every page of the intersection
    /// (a zig-zag that seeks into the middle of blocks) and a rare word against a common one.
    @Test func intersectionsSeekAcrossBlocks() throws {
        let db = try Database.inMemory(models: [Note.self])
        var texts: [Int64: String] = [:]
        try db.write { tx in
            for id in Int64(0)..<3_000 {
                var words: [String] = []
                if id % 2 == 0 { words.append("even") }
                if id % 3 == 0 { words.append("three") }
                if id % 250 == 7 { words.append("rare") }
                if id % 5 == 0 { words.append(Array(repeating: "long", count: 40).joined(separator: " ")) }
                words.append("all")
                texts[id] = words.joined(separator: " ")
            }
            // In reverse order, so that every posting goes in front of the word's blocks.
            for (id, text) in texts.sorted(by: { $0.key > $1.key }) { try tx.insert(Note(id: id, text: text)) }
        }
        let searches: [TextSearch] = ["even three", "three even", "rare all", "all rare", "even three long", "rare three", "even rare long", "long"]
        try verifyInt(db, texts, searches, "interleaved")
        for offset in [0, 1, 49, 50, 499, 998, 999, 1_000] {
            let expected = texts.keys.sorted().filter { $0 % 6 == 0 }
            #expect(
                try db.objects(Note.self).search(\.text, "even three").offset(offset).prefix(50).fetch().map(\.id)
                    == Array(expected.dropFirst(offset).prefix(50)), "offset \(offset)")
        }
        try checkLayout(db, tree: "i:Note:text(fullText)", "interleaved")
    }
}
