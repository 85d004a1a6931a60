import Testing
import Foundation
import StrataStorage
@testable import Strata

/// Hunting full-text entries written by `TextPostingValue.pairs` (d22e275) through the object
/// layer: texts whose word counts and positions need two- and three-byte varints, words cut at 120
/// bytes, non-ASCII and combining text, texts with no words, updates that only move words. The
/// reference is the documented meaning (FullTextTests' `FTSearch.matches` on the words of each
/// text) and the same search on a model without a full-text index; `StoredObjects.check`
/// recomputes every entry from the records.
@Suite struct PostingHuntTests {
    struct Doc: Model {
        static let indexDescriptors: [IndexDescriptor<Doc>] = [.fullText(\.body)]
        var id: Int
        var body: String
    }

    struct PlainDoc: Model {
        var id: Int
        var body: String
    }

    static func words(_ text: String) -> [String] { WordTokenizer.words(text).map { String(decoding: $0, as: UTF8.self) } }

    /// Writes `texts` to both models, then checks every search against the documented meaning.
    func verify(_ db: Database, _ texts: [Int: String], _ searches: [TextSearch], _ context: String, checkPlain: Bool = true) throws {
        let problems = try StoredObjects.check(in: db.store).problems
        #expect(problems.isEmpty, "\(context): \(problems.prefix(3))")
        let tokenized = texts.mapValues(Self.words)
        for search in searches {
            let parsed = ParsedSearch(search)
            let terms = parsed.terms.map { (word: String(decoding: $0.word, as: UTF8.self), prefix: $0.isPrefix) }
            let oracle = FTSearch(search: search, terms: terms)
            let expected = texts.keys.sorted().filter { oracle.matches(tokenized[$0]!) }
            let indexed = db.objects(Doc.self).search(\.body, search)
            let plain = db.objects(PlainDoc.self).search(\.body, search)
            #expect(indexed.keys == expected, "\(context): \(search)")
            #expect(try indexed.fetchCount() == expected.count, "\(context): count of \(search)")
            if checkPlain { #expect(plain.keys == expected, "\(context): \(search) without an index") }
        }
    }

    func write(_ db: Database, _ texts: [Int: String]) throws {
        try db.write { tx in
            for (id, text) in texts {
                try tx.upsert(Doc(id: id, body: text))
                try tx.upsert(PlainDoc(id: id, body: text))
            }
        }
    }

    /// 20,000 words: the word count, a word's position count and positions past 16,383 take
    /// three-byte varints; 200 and 300 words two bytes.
    @Test func longTextsWithManyRepeats() throws {
        let db = try Database.inMemory(models: [Doc.self, PlainDoc.self])
        var long = Array(repeating: "alpha beta", count: 10_000)
        long[9_000] = "gamma delta"  // positions 18,000 and 18,001
        let texts: [Int: String] = [
            1: long.joined(separator: " "),
            2: Array(repeating: "alpha", count: 300).joined(separator: " ") + " beta",
            3: (0..<200).map { "w\($0 % 150)" }.joined(separator: " "),
            4: "beta alpha",
        ]
        try write(db, texts)
        let searches: [TextSearch] = [
            .phrase("alpha beta"), .phrase("beta alpha"), .phrase("gamma delta"), .phrase("delta alpha beta"), .phrase("beta gamma"),
            .phrase("alpha alpha beta"), .phrase("alpha gamma"), .phrase("w149 w0"), .phrase("w149 w150"), .phrase("w49 w50 w51"),
            "alpha", "gam*", .anyWord("delta w3"),
        ]
        try verify(db, texts, searches, "inserted", checkPlain: false)
        // Only positions change: the same words in another order.
        var moved = long
        moved[9_000] = "delta gamma"
        let updated: [Int: String] = [
            1: moved.joined(separator: " "), 2: "beta " + Array(repeating: "alpha", count: 300).joined(separator: " "), 3: texts[3]!, 4: "alpha beta",
        ]
        try write(db, updated)
        try verify(db, updated, searches, "positions moved", checkPlain: false)
        let ranked = db.objects(Doc.self).search(\.body, "gamma", ranked: true).keys
        #expect(ranked == [1])
    }

    /// Words cut at 120 bytes: two words equal in their first 120 bytes are one word, and a
    /// phrase of such words matches by the cut words; multi-byte scalars are not split.
    @Test func longWordsAreCut() throws {
        let db = try Database.inMemory(models: [Doc.self, PlainDoc.self])
        let a120 = String(repeating: "a", count: 120)
        let texts: [Int: String] = [
            1: a120 + "xyz " + a120 + "b",
            2: a120 + " " + a120,
            3: String(repeating: "\u{4E00}", count: 50) + " end",
            4: String(repeating: "\u{440}", count: 100) + " " + String(repeating: "\u{440}", count: 61),
            5: "e\u{301}te\u{301} \u{E9}t\u{E9} cafe\u{301}",
        ]
        #expect(Self.words(texts[1]!) == [a120, a120])
        try write(db, texts)
        let searches: [TextSearch] = [
            .phrase(a120 + " " + a120), TextSearch(a120 + "zzz"), .phrase(a120 + "q " + a120 + "r"),
            TextSearch(String(repeating: "\u{4E00}", count: 40)), TextSearch(String(repeating: "\u{4E00}", count: 40) + "*"),
            TextSearch(String(repeating: "\u{440}", count: 60)),
            .phrase(String(repeating: "\u{440}", count: 70) + " " + String(repeating: "\u{440}", count: 60)),
            TextSearch("\u{E9}t\u{E9}"), .phrase("ete cafe"), TextSearch("caf*"),
        ]
        try verify(db, texts, searches, "long words")
    }

    /// Texts that tokenize to no words: no entries, and not counted as documents; an update
    /// from words to none and back.
    @Test func textsWithNoWords() throws {
        let db = try Database.inMemory(models: [Doc.self, PlainDoc.self])
        var texts: [Int: String] = [1: "", 2: " \u{1F600} !? ... \u{0} ", 3: "one two", 4: "two"]
        try write(db, texts)
        try verify(db, texts, ["two", .anyWord("one two"), "!?"], "no words")
        texts[3] = "\u{2014}\u{2014}"
        texts[1] = "one"
        try write(db, texts)
        try verify(db, texts, ["two", "one", .phrase("one two")], "words to none")
        let ranked = db.objects(Doc.self).search(\.body, .anyWord("one two"), ranked: true).keys
        #expect(Set(ranked) == [1, 4])
    }

    /// Random texts over a small vocabulary with many repeats and long runs (some over 128 and
    /// 16,384 words), updated by moving words around, against the model.
    @Test func randomTextsAgainstTheModel() throws {
        let seed: UInt64 = 20_261_205
        var rng = SeededRandom(seed: seed)
        let vocabulary = ["a", "b", "ab", "abc", "x\u{301}", "\u{E9}", "caf\u{E9}", "cafe\u{301}", "longwordlongword", "longwordlongwor", "9", "\u{6771}"]
        let db = try Database.inMemory(models: [Doc.self, PlainDoc.self])
        var texts: [Int: String] = [:]
        func text() -> String {
            let n = [0, 1, 3, 20, 130, 400, 2_000][rng.below(7)]
            return (0..<n).map { _ in vocabulary[rng.below(vocabulary.count)] }.joined(separator: rng.below(2) == 0 ? " " : ", ")
        }
        for round in 0..<3 {
            var changed: [Int: String] = [:]
            for id in 0..<8 where round == 0 || rng.below(2) == 0 {
                if let old = texts[id], rng.below(2) == 0 {
                    // The same words, shuffled: only positions change.
                    var words = Self.words(old)
                    for i in words.indices.reversed() where i > 0 { words.swapAt(i, rng.below(i + 1)) }
                    changed[id] = words.joined(separator: " ")
                } else {
                    changed[id] = text()
                }
            }
            texts.merge(changed) { $1 }
            try write(db, changed)
            var searches: [TextSearch] = []
            for _ in 0..<12 {
                let n = 1 + rng.below(3)
                let words = (0..<n).map { _ in vocabulary[rng.below(vocabulary.count)] }.joined(separator: " ")
                searches.append(TextSearch(words, mode: [.phrase, .allWords, .anyWord, .phrase][rng.below(4)]))
            }
            try verify(db, texts, searches, "seed \(seed) round \(round)")
        }
    }
}
