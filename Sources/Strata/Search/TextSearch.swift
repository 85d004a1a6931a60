import Foundation

/// What a full-text search looks for in a string field: every word (the default), any word, or a
/// phrase. Words are read as a full-text index reads text (FORMAT.md §8.5): split on word
/// boundaries and folded, so `"CAFÉ"` finds `"café"`. A word followed directly by `*` is a prefix:
/// `"hel*"` finds `"hello"` and `"help"`. A search with no words finds nothing.
///
/// ```swift
/// let hits = db.objects(Message.self)
///     .search(\.text, "lunch tomorrow")                   // both words, anywhere
///     .filter(#Predicate { $0.roomId == 7 })
///     .sorted(by: SortDescriptor(\.createdAt, order: .reverse))
///     .prefix(50)
/// let either = db.objects(Message.self).search(\.text, .anyWord("lunch dinner"))
/// let exact = db.objects(Message.self).search(\.text, .phrase("see you tomorrow"))
/// ```
public struct TextSearch: Sendable, Hashable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// How the words of a search combine.
    ///
    /// ```swift
    /// let search = TextSearch("see you", mode: .phrase)
    /// print(search.mode.rawValue)   // phrase
    /// ```
    public enum Mode: String, Sendable, Hashable {
        /// Every word appears in the text, in any order.
        case allWords
        /// At least one word appears.
        case anyWord
        /// The words appear one after another, in this order.
        case phrase
    }

    /// The words looked for, as written (`*` after a word makes it a prefix).
    public var text: String
    /// How the words combine.
    public var mode: Mode

    /// A search for the words of `text`, combined by `mode`.
    ///
    /// ```swift
    /// let search = TextSearch("hello wor*", mode: .anyWord)
    /// ```
    public init(_ text: String, mode: Mode = .allWords) {
        self.text = text
        self.mode = mode
    }

    /// Every word of the literal: `search(\.text, "lunch tomorrow")`.
    public init(stringLiteral text: String) { self.init(text) }

    /// Every word of `text` (the default for a plain string).
    ///
    /// ```swift
    /// let both = db.objects(Message.self).search(\.text, .allWords("lunch tom*"))   // as "lunch tom*"
    /// ```
    public static func allWords(_ text: String) -> TextSearch { TextSearch(text, mode: .allWords) }
    /// Any word of `text`.
    ///
    /// ```swift
    /// let either = db.objects(Message.self).search(\.text, .anyWord("lunch dinner"))
    /// ```
    public static func anyWord(_ text: String) -> TextSearch { TextSearch(text, mode: .anyWord) }
    /// The words of `text`, consecutive and in order.
    ///
    /// ```swift
    /// let exact = db.objects(Message.self).search(\.text, .phrase("see you tomorrow"))
    /// ```
    public static func phrase(_ text: String) -> TextSearch { TextSearch(text, mode: .phrase) }

    /// The mode and the text, as `explain()` shows them: `allWords("lunch tom*")`.
    public var description: String { "\(mode.rawValue)(\(jsonString(text)))" }
}

/// One word of a search: a whole word, or a prefix of words.
struct SearchTerm: Hashable, Sendable {
    /// Folded NFC UTF-8, as the index stores words.
    let word: [UInt8]
    let isPrefix: Bool

    func matches(_ candidate: [UInt8]) -> Bool {
        isPrefix ? candidate.starts(with: word) : candidate == word
    }

    var text: String { String(decoding: word, as: UTF8.self) + (isPrefix ? "*" : "") }
}

/// A search read into terms, and its meaning on a text's words: the definition every way of
/// answering it (the index, encoded records, decoded objects) must agree with.
struct ParsedSearch: Sendable, Hashable, CustomStringConvertible {
    let mode: TextSearch.Mode
    /// In the order written (repeats kept: a phrase may repeat a word).
    let terms: [SearchTerm]
    /// Each term once, in first-seen order (what relevance adds up): kept, since every plan and
    /// every read of the index asks for it.
    let distinctTerms: [SearchTerm]

    init(_ search: TextSearch) {
        mode = search.mode
        var terms: [SearchTerm] = []
        // Pieces between `*`s: a piece followed by a `*` that ends in a word ends in a word
        // written directly before the `*`, a prefix. (`*` is no word scalar, so no word spans two
        // pieces.)
        let pieces = search.text.split(separator: "*", omittingEmptySubsequences: false)
        for (n, piece) in pieces.enumerated() {
            let words = WordTokenizer.words(String(piece))
            let prefix = n < pieces.count - 1 && WordTokenizer.endsInWord(piece)
            for (i, word) in words.enumerated() {
                terms.append(SearchTerm(word: word, isPrefix: prefix && i == words.count - 1))
            }
        }
        self.terms = terms
        // (Hashed: a search's text comes from a caller, and may have 100,000 words.)
        var seen = Set<SearchTerm>()
        distinctTerms = terms.filter { seen.insert($0).inserted }
    }

    /// Whether a text with these words matches.
    func matches(words: [[UInt8]]) -> Bool {
        if terms.isEmpty { return false }
        switch mode {
        case .allWords:
            return distinctTerms.allSatisfy { term in words.contains(where: term.matches) }
        case .anyWord:
            return terms.contains { term in words.contains(where: term.matches) }
        case .phrase:
            guard words.count >= terms.count else { return false }
            for start in 0...(words.count - terms.count) {
                if terms.indices.allSatisfy({ terms[$0].matches(words[start + $0]) }) { return true }
            }
            return false
        }
    }

    func matches(text: String?) -> Bool {
        guard let text else { return false }
        return matches(words: WordTokenizer.words(text))
    }

    var description: String {
        let words = terms.map(\.text).joined(separator: " ")
        return "\(mode.rawValue)(\(jsonString(words)))"
    }
}
