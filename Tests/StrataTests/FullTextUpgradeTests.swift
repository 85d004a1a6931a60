import Foundation
import StrataStorage
import Testing

@testable import Strata

/// The model the full-text fixture was written with (Tests/StrataStorageTests/Fixtures).
private struct FixtureNote: Model, Equatable {
    static let indexDescriptors: [IndexDescriptor<FixtureNote>] = [.fullText(\.text)]
    var id: Int
    var text: String
}

/// A database whose full-text index was written before blocks (one entry per word and text,
/// catalog kind `fullText`, FORMAT.md §8.5): refused read-only with the reason, noted by `strata
/// check`, rebuilt in blocks by the first read-write open, and searched right after.
struct FullTextUpgradeTests {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("StrataStorageTests/Fixtures/fts-entries.strata").path

    static let words = ["the", "lunch", "call", "room", "meeting", "ok", "thanks", "tomorrow"]

    /// The texts as the generator left them: ids 0..<600 less the multiples of 4.
    static let texts: [Int: String] = Dictionary(
        uniqueKeysWithValues: (0..<600).filter { $0 % 4 != 0 }.map { id in
            (id, (0..<(1 + id % 6)).map { words[(id * 7 + $0 * 3) % words.count] }.joined(separator: " "))
        })

    @Test func anIndexOfEntriesIsRebuiltInBlocks() throws {
        let path = databasePath()
        try FileManager.default.copyItem(atPath: Self.fixture, toPath: path)
        do {
            _ = try Database(path: path, models: [FixtureNote.self], options: StoreOptions(readOnly: true))
            Issue.record("a read-only open of an index written before blocks succeeded")
        } catch StrataError.migrationRequired(let reasons) {
            #expect(reasons.count == 1 && reasons[0].contains("full-text index on text") && reasons[0].contains("read-write open rebuilds it"), "\(reasons)")
        }
        do {
            let store = try Store(path: path, options: StoreOptions(readOnly: true))
            let report = try StoredObjects.check(in: store)
            #expect(report.problems.isEmpty, "\(report.problems)")
            #expect(report.notes.contains { $0.contains("full-text index on text") && $0.contains("rebuilds it") }, "\(report.notes)")
        }
        let db = try Database(path: path, models: [FixtureNote.self], options: StoreOptions(durability: .noSync))
        #expect(db.objects(FixtureNote.self).count == Self.texts.count)
        let searches: [TextSearch] = ["lunch", "the call", .phrase("the room"), .anyWord("thanks tomorrow"), "meet*", "absent"]
        for search in searches {
            let parsed = ParsedSearch(search)
            let oracle = FTSearch(search: search, terms: parsed.terms.map { (word: String(decoding: $0.word, as: UTF8.self), prefix: $0.isPrefix) })
            let expected = Self.texts.keys.sorted().filter { oracle.matches(PostingHuntTests.words(Self.texts[$0] ?? "")) }
            #expect(!expected.isEmpty || search == "absent")
            let results = db.objects(FixtureNote.self).search(\.text, search)
            #expect(results.keys == expected, "\(search)")
            #expect(try results.fetchCount() == expected.count, "count of \(search)")
        }
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty && report.notes.isEmpty, "\(report.problems) \(report.notes)")
        try db.store.read { txn in
            let catalog = try Catalog.load(try txn.tree(Catalog.schemaTree))
            #expect(catalog["FixtureNote"]?.indexes.map(\.kind) == [.fullText])
        }
        try db.write { tx in
            try tx.insert(FixtureNote(id: 4, text: "lunch lunch"))
            _ = try tx.delete(FixtureNote.self, key: 1)
        }
        var texts = Self.texts
        texts[4] = "lunch lunch"
        texts[1] = nil
        #expect(db.objects(FixtureNote.self).search(\.text, "lunch").keys == texts.keys.sorted().filter { texts[$0]!.contains("lunch") })
        // Read-only now opens: the index is in blocks.
        let reader = try Database(path: path, models: [FixtureNote.self], options: StoreOptions(readOnly: true))
        #expect(try reader.objects(FixtureNote.self).search(\.text, "the").fetchCount() == texts.values.filter { $0.contains("the") }.count)
    }
}
