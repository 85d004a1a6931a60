import Foundation

/// Orders a search's matches by relevance, most relevant first: Okapi BM25 (k1 = 1.2, b = 0.75)
/// over the search's distinct terms, from the full-text index on the field when there is one, or
/// else from every record's text (slower, the same scores). Its definition, which the tests
/// recompute from plain objects:
///
///     N     texts of the model's objects with at least one word in the field
///     avg   their words in all, divided by N
///     df(t) texts with a word matching term t (a whole word, or any word with a prefix)
///     tf(t) that text's words matching t;  len  its number of words
///     score = Σ over terms, in the order written, of
///             ln(1 + (N − df + 0.5) / (df + 0.5)) · tf · (k1 + 1) / (tf + k1 · (1 − b + b · len / avg))
///
/// (terms a text lacks add nothing; with avg = 0 the length factor is 1). Equal scores tie, and
/// ties go by the query's sort descriptors, then by primary key.
struct TextRanking: Sendable {
    /// The searched field's stored path.
    let path: String
    let search: ParsedSearch

    static let k1 = 1.2
    static let b = 0.75

    static func score(termFrequencies: [Int], documentFrequencies: [Int], length: Int, documents: Int, totalWords: Int) -> Double {
        let n = Double(documents)
        let average = documents > 0 ? Double(totalWords) / n : 0
        let norm = average > 0 ? 1 - b + b * Double(length) / average : 1
        var score = 0.0
        for t in termFrequencies.indices where termFrequencies[t] > 0 {
            let tf = Double(termFrequencies[t])
            let df = Double(documentFrequencies[t])
            let idf = log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf * (k1 + 1) / (tf + k1 * norm)
        }
        return score
    }

    /// The scores of the texts of `keys` (primary keys of objects that matched).
    func scores<M: Model, S: TreeSource>(for keys: [[UInt8]], info: ModelInfo<M>, source: S) throws -> [Double] {
        let terms = search.distinctTerms
        if let i = info.indexes.firstIndex(where: { $0.schema.isFullText && $0.schema.path == path }),
            let tree = try source.tree(named: info.indexTreeNames[i])
        {
            let reader = TextIndexReader(tree: tree, keyLength: info.postingKeyLength)
            let (documents, words) = try reader.stats()
            let figures = try terms.map { try Self.figures(of: $0, for: keys, in: reader) }
            return Self.scores(for: keys.count, figures, documents: documents, totalWords: words)
        }
        // No index: the same figures from every record's text.
        guard let records = try source.tree(named: info.recordTree) else { return keys.map { _ in 0 } }
        let wanted = Set(keys.map(ByteKey.init))
        var documents = 0, totalWords = 0
        var frequencies = [Int](repeating: 0, count: terms.count)
        var perText: [ByteKey: (length: Int, tf: [Int])] = [:]
        try Planner.scan(records, KeyRange(lower: nil, upper: nil)) { key, record in
            guard case .present(let bytes, _) = try IndexEntries.leaf(record, schema: info.stored.object, path: path) else { return true }
            let words = WordTokenizer.words(utf8: bytes)
            if words.isEmpty { return true }
            documents += 1
            totalWords += words.count
            let tf = terms.map { term in words.reduce(0) { $0 + (term.matches($1) ? 1 : 0) } }
            for t in terms.indices where tf[t] > 0 { frequencies[t] += 1 }
            let primaryKey = ByteKey(key)
            if wanted.contains(primaryKey) { perText[primaryKey] = (words.count, tf) }
            return true
        }
        return keys.map { key in
            guard let text = perText[ByteKey(key)] else { return 0 }
            return Self.score(
                termFrequencies: text.tf, documentFrequencies: frequencies, length: text.length,
                documents: documents, totalWords: totalWords)
        }
    }

    /// What a term contributes to the scores: how many texts hold it, and per key (in the order
    /// of the keys asked for) how often the text holds it and the text's word count (nil: not at all).
    struct TermFigures {
        var documents: Int
        var perKey: [(count: Int, words: Int)?]
    }

    /// A whole word's figures are read by one cursor moved forward through the keys in order,
    /// seeking past the texts no key names (a common word's postings are mostly skipped), and its
    /// count of texts from its blocks' heads; a prefix's words are gathered, as a search does.
    static func figures<T: KeyValueTree>(of term: SearchTerm, for keys: [[UInt8]], in reader: TextIndexReader<T>) throws -> TermFigures {
        var perKey = [(count: Int, words: Int)?](repeating: nil, count: keys.count)
        if term.isPrefix {
            let postings = try reader.postings(term)
            for i in keys.indices { perKey[i] = postings[ByteKey(keys[i])].map { ($0.positions.count, $0.words) } }
            return TermFigures(documents: postings.count, perKey: perKey)
        }
        let documents = try reader.count(term, cap: Int.max)
        var cursor = try PostingCursor(term, in: reader.tree, keyLength: reader.keyLength)
        var on = try cursor.first()
        for i in keys.indices.sorted(by: { KeyEncoding.compare(keys[$0], keys[$1]) < 0 }) where on {
            on = try cursor.seek(atLeast: keys[i])
            if on, cursor.compareKey(keys[i]) == 0 {
                let (words, positions) = try cursor.block.posting()
                perKey[i] = (positions.count, words)
            }
        }
        return TermFigures(documents: documents, perKey: perKey)
    }

    /// The scores of `count` texts from each term's figures: plain loops (this runs once per
    /// match, and lazy or mapped sequences here cost a generic metadata lookup per text).
    static func scores(for count: Int, _ figures: [TermFigures], documents: Int, totalWords: Int) -> [Double] {
        let frequencies = figures.map(\.documents)
        var termFrequencies = [Int](repeating: 0, count: figures.count)
        var scores: [Double] = []
        scores.reserveCapacity(count)
        for i in 0..<count {
            var length: Int?
            for t in figures.indices {
                if let found = figures[t].perKey[i] {
                    termFrequencies[t] = found.count
                    if length == nil { length = found.words }
                } else {
                    termFrequencies[t] = 0
                }
            }
            scores.append(
                score(
                    termFrequencies: termFrequencies, documentFrequencies: frequencies, length: length ?? 0, documents: documents,
                    totalWords: totalWords))
        }
        return scores
    }

    /// The keys that put `keys` in this ranking's order (most relevant first), one per key.
    func sortKeys<M: Model, S: TreeSource>(for keys: KeyList, info: ModelInfo<M>, source: S) throws -> [[UInt8]] {
        try scores(for: keys.arrays, info: info, source: source).map(Self.sortKey)
    }

    /// Keys that order by descending score (ascending bytes), to lead a sort.
    static func sortKey(_ score: Double) -> [UInt8] {
        var key: [UInt8] = []
        KeyEncoding.appendDouble(score, to: &key)
        return key.map { ~$0 }
    }
}
