import Foundation
import StrataStorage
import Testing

@testable import Strata

/// Combining marks with no word open (review of 2026-12-06): the variation selector of an emoji
/// ("❤️" is U+2764 U+FE0F), or of an ideograph, and the combining voicing marks of kana, were
/// words of their own. Queries.md and FORMAT.md §8.5 say emoji are no words: a search for "❤️"
/// found every text with such an emoji, and phrases across one missed.
@Suite struct FullTextMarkTests {
    struct Post: Model {
        static let indexDescriptors: [IndexDescriptor<Post>] = [.fullText(\.text)]
        var id: Int
        var text: String
    }

    @Test func aMarkWithNoWordOpenIsNoWord() {
        func words(_ text: String) -> [String] { WordTokenizer.words(text).map { String(decoding: $0, as: UTF8.self) } }
        #expect(words("I ❤️ NY") == ["i", "ny"])
        #expect(words("❤️") == [])
        #expect(words("⚠️ server down ✔️") == ["server", "down"])
        #expect(words("🏳️‍🌈") == [])
        #expect(words("葛\u{E0100}城") == ["葛", "城"])
        #expect(words("東\u{3099}") == ["東"])
        #expect(words("セ\u{309A}カイ").count == 1)
        // Marks inside a word stay part of it (folding may remove them), as before.
        #expect(words("cafe\u{301} au lait") == ["cafe", "au", "lait"])
        #expect(words("क़िला").count == 1)
    }

    /// A comma joins two digits when marks follow the first (UAX #29 skips them, WB4), as
    /// FORMAT.md §8.5 says; a comma after a letter's marks still separates.
    @Test func marksAfterADigitDoNotPartACommaNumber() {
        func words(_ text: String) -> [String] { WordTokenizer.words(text).map { String(decoding: $0, as: UTF8.self) } }
        // Folding removes most marks first.
        #expect(words("1️⃣,2 and 3,4") == ["1,2", "and", "3,4"])
        // A spacing mark (Devanagari vowel sign AA) stays.
        #expect(words("1\u{093E},2") == ["1\u{093E},2"])
        #expect(words("\u{0967}\u{093E},\u{0968}") == ["\u{0967}\u{093E},\u{0968}"])
        #expect(words("a\u{093E},2") == ["a\u{093E}", "2"])
    }

    @Test func searchesLookPastEmojiWithVariationSelectors() throws {
        let db = try Database.inMemory(models: [Post.self])
        let texts = [1: "I ❤️ NY", 2: "⚠️ server down", 3: "hello"]
        try db.write { tx in for (id, text) in texts { try tx.insert(Post(id: id, text: text)) } }
        let posts = db.objects(Post.self)
        #expect(posts.search(\.text, "❤️").keys.isEmpty)
        #expect(posts.search(\.text, .anyWord("❤️ zzz")).keys.isEmpty)
        #expect(posts.search(\.text, .phrase("I NY")).keys == [1])
        #expect(posts.search(\.text, "down ❤️").keys == [2])
        #expect(posts.search(\.text, "down").keys == [2])
    }

    /// A word is a prefix when written directly before `*`: not when an emoji or a mark with no
    /// word open comes between ("hi ❤️*" searched for `hi*`, review of 2026-12-07).
    @Test func onlyAWordDirectlyBeforeTheStarIsAPrefix() throws {
        let db = try Database.inMemory(models: [Post.self])
        let texts = [1: "hide", 2: "hi there", 3: "héllo", 4: "he"]
        try db.write { tx in for (id, text) in texts { try tx.insert(Post(id: id, text: text)) } }
        let posts = db.objects(Post.self)
        #expect(posts.search(\.text, "hi ❤️*").keys == [2])
        #expect(posts.search(\.text, "hi \u{301}*").keys == [2])
        #expect(posts.search(\.text, "hi*").keys == [1, 2])
        // A mark inside the word before the star keeps it a prefix (folded away: `he*`).
        #expect(posts.search(\.text, "he\u{301}*").keys == [3, 4])
    }

    /// An index written by the older rules (catalog kind `fullTextBlocks`) is refused read-only,
    /// noted by `check`, and rebuilt by the first read-write open.
    @Test func anIndexOfOlderWordsIsRebuilt() throws {
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [Post.self])
            try db.write { tx in
                try tx.insert(Post(id: 1, text: "I ❤️ NY"))
                try tx.insert(Post(id: 2, text: "plain words"))
            }
        }
        // The catalog as an older build left it.
        do {
            let store = try Store(path: path)
            try store.write { txn in
                let tree = try txn.createTree(Catalog.schemaTree)
                var schema = try #require(try Catalog.load(tree)["Post"])
                schema.indexes = schema.indexes.map { index in
                    var index = index
                    if index.kind == .fullText { index.kind = .fullTextMarkWords }
                    return index
                }
                try tree.put(Array("Post".utf8), try Catalog.encode(schema))
            }
        }
        do {
            _ = try Database(path: path, models: [Post.self], options: StoreOptions(readOnly: true))
            Issue.record("a read-only open of an index of older words succeeded")
        } catch StrataError.migrationRequired(let reasons) {
            #expect(reasons.count == 1 && reasons[0].contains("older word rules"), "\(reasons)")
        }
        do {
            let report = try StoredObjects.check(in: try Store(path: path, options: StoreOptions(readOnly: true)))
            #expect(report.problems.isEmpty, "\(report.problems)")
            #expect(report.notes.contains { $0.contains("older builds") && $0.contains("rebuilds it") }, "\(report.notes)")
        }
        let db = try Database(path: path, models: [Post.self])
        #expect(db.objects(Post.self).search(\.text, "❤️").keys.isEmpty)
        #expect(db.objects(Post.self).search(\.text, .phrase("I NY")).keys == [1])
        let kinds = try db.store.read { txn in try Catalog.load(try txn.tree(Catalog.schemaTree))["Post"]?.indexes.map(\.kind) }
        #expect(kinds == [.fullText])
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
    }
}
