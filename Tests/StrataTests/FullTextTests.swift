import Testing
import Foundation
import Dispatch
import Synchronization
import StrataStorage
@testable import Strata

// Full-text search (issue 16): the word rules, and a model-based test of searches against a plain
// Swift model of the same semantics (the words each text was built from, searched by the
// documented rules, relevance recomputed by the documented formula), through random inserts,
// updates and deletes, a reopen, with and without a full-text index.
//
//   STRATA_FTS_SEED     seed (default below); every failure names it
//   STRATA_FTS_ROUNDS   rounds of writes then searches (default 5)
//   STRATA_FTS_QUERIES  searches per round (default 60)

struct FTPost: Model {
    static let indexDescriptors: [IndexDescriptor<FTPost>] = [.fullText(\.body), .fullText(\.title), .on(\.board, \.created)]
    var id: Int
    var board: Int
    var created: Date
    var body: String
    var title: String?
}

/// The same data without full-text indexes: every search reads the texts.
struct FTUnindexedPost: Model {
    var id: Int
    var board: Int
    var created: Date
    var body: String
    var title: String?
}

/// One vocabulary entry: how it is written, and the word a full-text index reads it as.
struct FTWord {
    let text: String
    let word: String
}

enum FTData {
    static let vocabulary: [FTWord] = [
        FTWord(text: "Hello", word: "hello"), FTWord(text: "HELLO", word: "hello"), FTWord(text: "h\u{E9}llo", word: "hello"),
        FTWord(text: "he\u{301}llo", word: "hello"), FTWord(text: "\u{FF28}\u{FF45}\u{FF4C}\u{FF4C}\u{FF4F}", word: "hello"),
        FTWord(text: "help", word: "help"), FTWord(text: "helpful", word: "helpful"), FTWord(text: "world", word: "world"),
        FTWord(text: "World", word: "world"), FTWord(text: "wor", word: "wor"), FTWord(text: "Caf\u{E9}", word: "cafe"),
        FTWord(text: "cafe\u{301}", word: "cafe"), FTWord(text: "CAFE", word: "cafe"), FTWord(text: "na\u{EF}ve", word: "naive"),
        FTWord(text: "Stra\u{DF}e", word: "strasse"), FTWord(text: "STRASSE", word: "strasse"), FTWord(text: "can't", word: "can't"),
        FTWord(text: "can\u{2019}t", word: "can\u{2019}t"), FTWord(text: "3.14", word: "3.14"), FTWord(text: "1,000", word: "1,000"),
        FTWord(text: "\u{6771}", word: "\u{6771}"), FTWord(text: "\u{4EAC}", word: "\u{4EAC}"), FTWord(text: "\u{FB01}sh", word: "fish"),
        FTWord(text: "fish", word: "fish"), FTWord(text: "x", word: "x"), FTWord(text: "the", word: "the"), FTWord(text: "The", word: "the"),
        FTWord(text: "e.g", word: "e.g"), FTWord(text: "snake_case", word: "snake_case"), FTWord(text: "\u{C5}NGSTR\u{D6}M", word: "angstrom"),
    ]
    static let separators = [" ", ", ", "! ", " \u{2014} ", "\n", " \u{1F600} ", " (", ") ", "... ", " - "]
}

/// A text and the words it was built from.
struct FTText {
    var text: String
    var words: [String]
}

/// A search, and its terms as the oracle reads them (folded words; prefixes marked).
struct FTSearch {
    var search: TextSearch
    var terms: [(word: String, prefix: Bool)]
    var description: String { "\(search.mode)(\(genDescribe(search.text)))" }

    var distinctTerms: [(word: String, prefix: Bool)] {
        var seen = Set<String>()
        return terms.filter { seen.insert(($0.prefix ? "*" : "") + $0.word).inserted }
    }

    static func matches(_ term: (word: String, prefix: Bool), _ word: String) -> Bool {
        term.prefix ? Array(word.utf8).starts(with: Array(term.word.utf8)) : Array(word.utf8) == Array(term.word.utf8)
    }

    /// The documented meaning, on the words a text was built from.
    func matches(_ words: [String]) -> Bool {
        if terms.isEmpty { return false }
        switch search.mode {
        case .allWords: return distinctTerms.allSatisfy { term in words.contains { FTSearch.matches(term, $0) } }
        case .anyWord: return terms.contains { term in words.contains { FTSearch.matches(term, $0) } }
        case .phrase:
            guard words.count >= terms.count else { return false }
            return (0...(words.count - terms.count)).contains { start in terms.indices.allSatisfy { FTSearch.matches(terms[$0], words[start + $0]) } }
        }
    }

    /// BM25 as TextRanking documents it, over every text of the field (`all`, nil: no text).
    func scores(_ all: [[String]?], of candidates: [[String]]) -> [Double] {
        let texts = all.compactMap { $0 }.filter { !$0.isEmpty }
        let documents = texts.count
        let total = texts.reduce(0) { $0 + $1.count }
        let terms = distinctTerms
        let frequencies = terms.map { term in texts.filter { $0.contains { FTSearch.matches(term, $0) } }.count }
        let k1 = 1.2, b = 0.75
        let n = Double(documents)
        let average = documents > 0 ? Double(total) / n : 0
        return candidates.map { words in
            let norm = average > 0 ? 1 - b + b * Double(words.count) / average : 1
            var score = 0.0
            for (t, term) in terms.enumerated() {
                let count = words.filter { FTSearch.matches(term, $0) }.count
                if count == 0 { continue }
                let tf = Double(count)
                let df = Double(frequencies[t])
                let idf = log(1 + (n - df + 0.5) / (df + 0.5))
                score += idf * tf * (k1 + 1) / (tf + k1 * norm)
            }
            return score
        }
    }
}

struct FTModel {
    var rng: SeededRandom
    var posts: [Int: (post: FTPost, body: [String], title: [String]?)] = [:]
    var nextId = 1

    mutating func pick<T>(_ list: [T]) -> T { list[rng.below(list.count)] }

    mutating func text(maxWords: Int) -> FTText {
        let n = rng.below(maxWords + 1)
        var text = ""
        var words: [String] = []
        for i in 0..<n {
            let entry = pick(FTData.vocabulary)
            if i > 0 || rng.below(3) == 0 { text += pick(FTData.separators) }
            text += entry.text
            words.append(entry.word)
        }
        if rng.below(3) == 0 { text += pick(FTData.separators) }
        return FTText(text: text, words: words)
    }

    mutating func makePost(id: Int) -> (FTPost, [String], [String]?) {
        let body = text(maxWords: 9)
        let title: FTText? = rng.below(4) == 0 ? nil : text(maxWords: 3)
        let post = FTPost(
            id: id, board: rng.below(4), created: Date(timeIntervalSinceReferenceDate: Double(rng.below(20))),
            body: body.text, title: title?.text)
        return (post, body.words, title?.words)
    }

    mutating func insert(_ tx: Transaction) throws {
        let id = nextId
        nextId += 1 + rng.below(3)
        let (post, body, title) = makePost(id: id)
        try tx.insert(post)
        posts[id] = (post, body, title)
    }

    mutating func write(_ tx: Transaction) throws {
        let ids = posts.keys.sorted()
        switch rng.below(10) {
        case 0, 1, 2, 3: try insert(tx)
        case 4 where !ids.isEmpty, 5 where !ids.isEmpty:
            let id = pick(ids)
            #expect(try tx.delete(FTPost.self, key: id))
            posts[id] = nil
        case 6 where !ids.isEmpty:
            // Only the board changes: the texts' entries stay as they are.
            let id = pick(ids)
            let board = rng.below(4)
            try tx.update(FTPost.self, key: id) { $0.board = board }
            posts[id]?.post.board = board
        default:
            guard !ids.isEmpty else { return try insert(tx) }
            let id = pick(ids)
            var (post, body, title) = makePost(id: id)
            // Sometimes keep one text, so that only the other index moves.
            if rng.below(3) == 0, let old = posts[id] {
                post.body = old.post.body
                body = old.body
            }
            try tx.upsert(post)
            posts[id] = (post, body, title)
        }
    }

    mutating func search() -> FTSearch {
        let mode: TextSearch.Mode = pick([.allWords, .allWords, .anyWord, .phrase])
        switch rng.below(14) {
        case 0: return FTSearch(search: TextSearch("", mode: mode), terms: [])
        case 1: return FTSearch(search: TextSearch("!! \u{1F600} ...", mode: mode), terms: [])
        case 2: return FTSearch(search: TextSearch("zebra hello", mode: mode), terms: [("zebra", false), ("hello", false)])
        default: break
        }
        var text = ""
        var terms: [(word: String, prefix: Bool)] = []
        for i in 0..<(1 + rng.below(3)) {
            let entry = pick(FTData.vocabulary)
            if i > 0 { text += pick([" ", "  ", ", ", " - "]) }
            if rng.below(4) == 0 {
                // A prefix of the folded word (not ending in a joiner, which the word rules drop).
                var prefix = String(entry.word.prefix(1 + rng.below(4)))
                while let last = prefix.last, "'.,\u{2019}".contains(last) { prefix.removeLast() }
                if prefix.isEmpty { continue }
                text += prefix + "*"
                terms.append((prefix, true))
            } else {
                text += entry.text
                terms.append((entry.word, false))
            }
        }
        return FTSearch(search: TextSearch(text, mode: mode), terms: terms)
    }
}

struct FullTextTests {
    static var seed: UInt64 { ProcessInfo.processInfo.environment["STRATA_FTS_SEED"].flatMap { UInt64($0) } ?? 20_261_130 }
    static var rounds: Int { ProcessInfo.processInfo.environment["STRATA_FTS_ROUNDS"].flatMap { Int($0) } ?? 5 }
    static var queries: Int { ProcessInfo.processInfo.environment["STRATA_FTS_QUERIES"].flatMap { Int($0) } ?? 60 }

    func words(_ text: String) -> [String] { WordTokenizer.words(text).map { String(decoding: $0, as: UTF8.self) } }

    @Test func wordsFollowTheDocumentedRules() {
        #expect(words("Hello, World!") == ["hello", "world"])
        #expect(words("Caf\u{E9} cafe\u{301} NA\u{CF}VE Stra\u{DF}e \u{FB01}sh") == ["cafe", "cafe", "naive", "strasse", "fish"])
        #expect(
            words("can't can\u{2019}t 3.14 1,000 e.g. end. a,b 'quoted' x'") == [
                "can't", "can\u{2019}t", "3.14", "1,000", "e.g", "end", "a", "b", "quoted", "x",
            ])
        #expect(words("\u{6771}\u{4EAC}\u{30BF}\u{30EF}\u{30FC}\u{306B}") == ["\u{6771}", "\u{4EAC}", "\u{30BF}\u{30EF}\u{30FC}", "\u{306B}"])
        #expect(
            words("snake_case \u{1F600}emoji\u{1F600} \u{FF28}\u{FF45}\u{FF4C}\u{FF4C}\u{FF4F} \u{3A3}\u{391}\u{3A3}") == [
                "snake_case", "emoji", "hello", "\u{3C3}\u{3B1}\u{3C3}",
            ])
        #expect(words("") == [] && words(" \u{1F600} !? \u{0} ") == [])
        // A long word keeps its first 120 bytes' whole scalars.
        #expect(words(String(repeating: "a", count: 300)) == [String(repeating: "a", count: 120)])
        #expect(
            words(String(repeating: "\u{4E00}b", count: 3) + String(repeating: "\u{440}", count: 100)).last == "b" + String(repeating: "\u{440}", count: 59))
    }

    /// The byte-wise ASCII path and the general one give the same words on any ASCII text.
    @Test func theASCIIPathMatchesTheGeneralOne() {
        var rng = SeededRandom(seed: Self.seed)
        let alphabet = Array("aZ09_'.,- !?\t\u{0}:;/\"xyzQ")
        for _ in 0..<3000 {
            let text = String((0..<rng.below(24)).map { _ in alphabet[rng.below(alphabet.count)] })
            let ascii = WordTokenizer.words(text), general = WordTokenizer.generalWords(text)
            #expect(
                ascii == general,
                "seed \(Self.seed): \(genDescribe(text)): \(ascii.map { String(decoding: $0, as: UTF8.self) }) vs \(general.map { String(decoding: $0, as: UTF8.self) })"
            )
            if ascii != general { return }
        }
    }

    @Test func searchesParseWordsPrefixesAndModes() {
        let search = ParsedSearch(TextSearch("Hel* w\u{F6}rld! *  x*y, ca*, can'* \u{6771}*", mode: .phrase))
        #expect(search.terms.map(\.text) == ["hel*", "world", "x*", "y", "ca*", "can", "\u{6771}*"])
        #expect(ParsedSearch("").terms.isEmpty && !ParsedSearch("").matches(text: "anything"))
        #expect(ParsedSearch(.phrase("hello world")).matches(text: "Oh, HELLO  world!"))
        #expect(!ParsedSearch(.phrase("hello world")).matches(text: "world hello"))
        #expect(ParsedSearch(.anyWord("zebra hello")).matches(text: "hello"))
        #expect(!ParsedSearch("zebra hello").matches(text: "hello"))
    }

    /// Random writes and searches, compared with the plain model: ids in order, count, fetch,
    /// first; ranked searches in relevance order; the same with no full-text index; the indexes
    /// checked after every round; a reopen in the middle.
    @Test func searchesMatchThePlainModel() throws {
        let seed = Self.seed
        var model = FTModel(rng: SeededRandom(seed: seed))
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let options = StoreOptions(durability: .noSync)
        var db = try Database(path: path, models: [FTPost.self, FTUnindexedPost.self], options: options)
        var failures = 0
        func fail(_ message: String) {
            failures += 1
            if failures <= 20 { Issue.record(Comment(rawValue: "seed \(seed): \(message)")) }
        }
        var usedIndex = 0
        for round in 0..<Self.rounds {
            if round == 3 {
                db.close()
                db = try Database(path: path, models: [FTPost.self, FTUnindexedPost.self], options: options)
            }
            try db.write { tx in
                for _ in 0..<(round == 0 ? 150 : 60) { try model.write(tx) }
                // The unindexed twin holds the same objects.
                try tx.deleteAll(FTUnindexedPost.self)
                for (post, _, _) in model.posts.values {
                    try tx.insert(FTUnindexedPost(id: post.id, board: post.board, created: post.created, body: post.body, title: post.title))
                }
            }
            let report = try StoredObjects.check(in: db.store)
            if !report.problems.isEmpty { fail("round \(round): check found \(report.problems)") }
            let all = model.posts.values.sorted { $0.post.id < $1.post.id }
            for _ in 0..<Self.queries {
                let search = model.search()
                let onTitle = model.rng.below(4) == 0
                let board: Int? = model.rng.below(3) == 0 ? model.rng.below(4) : nil
                let sort: SortOrder? = [nil, .forward, .reverse][model.rng.below(3)]
                let ranked = model.rng.below(4) == 0
                let limit: Int? = model.rng.below(3) == 0 ? 1 + model.rng.below(8) : nil
                let offset = model.rng.below(4) == 0 ? model.rng.below(5) : 0
                // The oracle.
                let texts = all.map { onTitle ? $0.title : $0.body }
                var matching = all.filter { entry in
                    (board.map { entry.post.board == $0 } ?? true) && (onTitle ? entry.title : entry.body).map(search.matches) ?? false
                }
                let scores = ranked ? search.scores(texts, of: matching.map { (onTitle ? $0.title : $0.body) ?? [] }) : []
                var order = Array(matching.indices)
                order.sort { a, b in
                    if ranked && scores[a] != scores[b] { return scores[a] > scores[b] }
                    if let sort, matching[a].post.created != matching[b].post.created {
                        return sort == .forward ? matching[a].post.created < matching[b].post.created : matching[a].post.created > matching[b].post.created
                    }
                    return matching[a].post.id < matching[b].post.id
                }
                matching = order.map { matching[$0] }
                let expected = Array(matching.map(\.post.id).dropFirst(offset).prefix(limit ?? Int.max))
                // Strata, with and without the index.
                func build<M: Model>(
                    _ base: Results<M>, _ body: KeyPath<M, String> & Sendable, _ title: KeyPath<M, String?> & Sendable,
                    _ boardPath: KeyPath<M, Int> & Sendable, _ created: KeyPath<M, Date> & Sendable
                ) -> Results<M> {
                    var r = onTitle ? base.search(title, search.search, ranked: ranked) : base.search(body, search.search, ranked: ranked)
                    if let board { r = r.filter(boardPath, equals: board) }
                    if let sort { r = r.sorted(by: SortDescriptor(created, order: sort)) }
                    if offset > 0 { r = r.offset(offset) }
                    if let limit { r = r.prefix(limit) }
                    return r
                }
                let text =
                    "\(onTitle ? "title" : "body") \(search.description)\(ranked ? " ranked" : "")\(board.map { " board \($0)" } ?? "")\(sort.map { " sorted \($0)" } ?? "") offset \(offset) limit \(limit.map(String.init) ?? "-")"
                let indexed = build(db.objects(FTPost.self), \.body, \.title, \.board, \.created)
                let plain = build(db.objects(FTUnindexedPost.self), \.body, \.title, \.board, \.created)
                if indexed.explain().contains("(fullText)") { usedIndex += 1 }
                let counted = try build(db.objects(FTPost.self), \.body, \.title, \.board, \.created).fetchCount()
                if counted != expected.count { fail("\(text): count \(counted), expected \(expected.count)") }
                let got = indexed.map(\.id)
                if got != expected { fail("\(text): \(got) expected \(expected)\n  plan: \(indexed.explain())") }
                if try indexed.fetch().map(\.id) != expected { fail("\(text): fetch differs") }
                if indexed.keys != expected { fail("\(text): keys differ") }
                if plain.map(\.id) != expected { fail("\(text) without an index: \(plain.map(\.id)) expected \(expected)") }
                if let error = indexed.error ?? plain.error { fail("\(text): \(error)") }
            }
        }
        // Most searches used the index (the others have no words, or the board's index won).
        #expect(usedIndex > Self.rounds * Self.queries / 3, "seed \(seed): \(usedIndex) searches used the index")
        #expect(failures == 0, "seed \(seed): \(failures) failures")
    }

    @Test func countingAWordReadsOnlyTheIndex() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [FTPost.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in
                for i in 0..<500 {
                    try tx.insert(
                        FTPost(
                            id: i, board: i % 3, created: Date(timeIntervalSinceReferenceDate: Double(i)),
                            body: i % 2 == 0 ? "the cat and the hat" : "a dog", title: nil))
                }
            }
            db.close()
        }
        // Every record made undecodable: counts and keys answered by the index do not notice.
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let records = try #require(try txn.tree("m:FTPost"))
            for i in 0..<500 {
                var key: [UInt8] = []
                KeyEncoding.appendInt(Int64(i), to: &key)
                try records.put(key, [200, 1, 2])
            }
        }
        store.close()
        let db = try Database(path: path, models: [FTPost.self])
        let the = db.objects(FTPost.self).search(\.body, "THE")
        #expect(try the.fetchCount() == 250)
        #expect(try db.objects(FTPost.self).search(\.body, "the hat").fetchCount() == 250)
        #expect(try db.objects(FTPost.self).search(\.body, .anyWord("hat dog")).fetchCount() == 500)
        #expect(db.objects(FTPost.self).search(\.body, "the").prefix(50).keys == Array(stride(from: 0, to: 100, by: 2)))
        #expect(the.explain().contains("index i:FTPost:body(fullText) (full text)"), "\(the.explain())")
        #expect(the.explain().contains("no residual filter"), "\(the.explain())")
        // Reading the objects decodes them, and says so.
        #expect(throws: StrataError.self) { try the.prefix(1).fetch() }
    }

    /// Relevance depends on every text (how long they are on average): an observer of a ranked
    /// search hears of a new order when a text that does not match changes it.
    @Test func rankedObserversFollowOrderChangesMadeByOtherTexts() throws {
        // Find lengths for which adding one long text that does not match reverses A and B.
        func scores(_ k: Int, _ m: Int?) -> (Double, Double) {
            let lengths = [1, 2 + k] + (m.map { [$0] } ?? [])
            let total = lengths.reduce(0, +)
            let a = TextRanking.score(termFrequencies: [1], documentFrequencies: [2], length: 1, documents: lengths.count, totalWords: total)
            let b = TextRanking.score(termFrequencies: [2], documentFrequencies: [2], length: 2 + k, documents: lengths.count, totalWords: total)
            return (a, b)
        }
        var found: (k: Int, m: Int)?
        search: for k in 1...30 {
            for m in 1...300 {
                let (a0, b0) = scores(k, nil), (a1, b1) = scores(k, m)
                if a0 != b0 && a1 != b1 && (a0 > b0) != (a1 > b1) { found = (k, m); break search }
            }
        }
        let (k, m) = try #require(found)
        let db = try Database.inMemory(models: [FTPost.self])
        let date = Date(timeIntervalSinceReferenceDate: 0)
        try db.write { tx in
            try tx.insert(FTPost(id: 1, board: 0, created: date, body: "apple", title: nil))
            try tx.insert(FTPost(id: 2, board: 0, created: date, body: "apple apple" + String(repeating: " x", count: k), title: nil))
        }
        let ranked = db.objects(FTPost.self).search(\.body, "apple", ranked: true)
        let before = ranked.keys
        let latest = Mutex<[Int]>([])
        let delivered = DispatchSemaphore(value: 0)
        let token = ranked.observe(on: DispatchQueue(label: "ranked")) { change in
            switch change {
            case .initial(let results), .update(let results, _, _, _): latest.withLock { $0 = results.map(\.id) }
            case .error: break
            }
            delivered.signal()
        }
        defer { token.invalidate() }
        #expect(delivered.wait(timeout: .now() + 120) == .success)
        #expect(latest.withLock { $0 } == before)
        try db.write { tx in try tx.insert(FTPost(id: 3, board: 0, created: date, body: String(repeating: "y ", count: m), title: nil)) }
        let after = db.objects(FTPost.self).search(\.body, "apple", ranked: true).keys
        #expect(after == before.reversed(), "k \(k) m \(m): \(before) then \(after)")
        #expect(delivered.wait(timeout: .now() + 120) == .success)
        #expect(latest.withLock { $0 } == after)
    }

    @Test func aDamagedFullTextIndexIsFoundByCheck() throws {
        let db = try Database.inMemory(models: [FTPost.self])
        try db.write { tx in
            for i in 0..<20 { try tx.insert(FTPost(id: i, board: 0, created: Date(), body: "word\(i % 3) common", title: "t")) }
        }
        #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
        // Another position in one entry; a missing entry; wrong statistics.
        try db.store.write { txn in
            let tree = try #require(try txn.tree("i:FTPost:body(fullText)"))
            let cursor = try tree.cursor()
            #expect(try cursor.seek(Array("common".utf8)))
            let key = Array(cursor.key)
            var value = Array(cursor.value)
            value[value.count - 1] ^= 1
            try tree.put(key, value)
            #expect(try cursor.seek(Array("word1".utf8)))
            _ = try tree.delete(Array(cursor.key))
            try tree.put([0], TextPostingValue.stats(documents: 3, words: 7))
        }
        let problems = try StoredObjects.check(in: db.store).problems
        #expect(problems.contains { $0.contains("holds other positions") }, "\(problems)")
        #expect(problems.contains { $0.contains("lack their entry in index body (full text)") }, "\(problems)")
        #expect(problems.contains { $0.contains("counts 3 texts of 7 words, the records 20 texts of 40 words") }, "\(problems)")
    }
}

struct FTKeyed: Model {
    static let indexDescriptors: [IndexDescriptor<FTKeyed>] = [.fullText(\.body)]
    var id: String
    var body: String
}

struct FullTextLimitTests {
    /// A word is cut to 120 bytes, but the primary key follows it in the entry: the documented
    /// limit on keys holds, and a longer key is named as the cause.
    @Test func aPrimaryKeyTooLongForTheWordsIsNamed() throws {
        let db = try Database.inMemory(models: [FTKeyed.self])
        let word = String(repeating: "w", count: 200)
        try db.write { tx in try tx.insert(FTKeyed(id: String(repeating: "k", count: 874), body: word)) }
        #expect(try db.objects(FTKeyed.self).search(\.body, TextSearch(String(word.prefix(120)))).fetchCount() == 1)
        do {
            try db.write { tx in try tx.insert(FTKeyed(id: String(repeating: "k", count: 875), body: word)) }
            Issue.record("the insert succeeded")
        } catch let StrataError.invalidInput(message) {
            #expect(message.contains("the primary key (877 bytes encoded)"), "\(message)")
            #expect(message.contains("a primary key encodes to at most 876 bytes"), "\(message)")
        }
        // A short word leaves room for the same key.
        try db.write { tx in try tx.insert(FTKeyed(id: String(repeating: "k", count: 875), body: "short")) }
    }

    /// The tokenizing rules the Queries article spells out.
    @Test func documentedWordBoundaries() {
        func words(_ text: String) -> [String] { WordTokenizer.words(text).map { String(decoding: $0, as: UTF8.self) } }
        #expect(words("don\u{2019}t") != words("don't"))
        #expect(words("co\u{AD}op") == ["co", "op"])
        // ZWJ separates; diacritic folding removes ZWNJ, so the letters around it are one word.
        #expect(words("a\u{200D}b a\u{200C}b") == ["a", "b", "ab"])
        #expect(
            words("\u{6771}'\u{4EAC} \u{306B}.\u{306B} a'\u{6771} \u{6771}'a") == [
                "\u{6771}", "\u{4EAC}", "\u{306B}", "\u{306B}", "a", "\u{6771}", "\u{6771}", "a",
            ])
    }
}
