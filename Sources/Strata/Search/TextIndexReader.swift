import Foundation

/// Answers a search from a full-text index tree (FORMAT.md §8.5) without reading a record: each
/// word's entries are its texts' primary keys in key order, so the texts with every word are
/// found by walking the rarest word's entries and looking each key up under the other words,
/// stopping at a limit; prefixes, any-word searches and phrases gather each word's entries (with
/// their positions) and combine them.
struct TextIndexReader<T: KeyValueTree> {
    let tree: T

    /// The entries of one term: a whole word's key encoding, or every word with a prefix.
    static func range(_ term: SearchTerm) -> KeyRange {
        if term.isPrefix { return .prefix(term.word) }
        var key: [UInt8] = []
        KeyEncoding.appendBytes(term.word, to: &key)
        return .prefix(key)
    }

    /// The number of entries of `term`, counting at most `cap`.
    func count(_ term: SearchTerm, cap: Int) throws -> Int {
        try Planner.countEntries(tree, [Self.range(term)], cap: cap)
    }

    /// How many texts the search may find, counting at most `cap` entries: the rarest word's for
    /// every word (or a phrase), the sum for any word.
    func estimate(_ search: ParsedSearch, cap: Int) throws -> Int {
        let terms = search.distinctTerms
        if terms.isEmpty { return 0 }
        if search.mode == .anyWord { return min(cap, try terms.reduce(0) { $0 + (try count($1, cap: cap)) }) }
        return try terms.map { try count($0, cap: cap) }.min() ?? 0
    }

    /// One text's entry for a term: its word count and the term's positions in it (a prefix's
    /// words' positions merged).
    struct Posting {
        var words: Int
        var positions: [Int]
    }

    /// Every text holding `term`, by primary key.
    func postings(_ term: SearchTerm) throws -> [[UInt8]: Posting] {
        var found: [[UInt8]: Posting] = [:]
        try Planner.scan(tree, Self.range(term)) { key, value in
            let primaryKey = try IndexEntry.primaryKey(key: key, value: value, unique: false)
            let (words, positions) = try TextPostingValue.read(value)
            if var posting = found[primaryKey] {
                posting.positions = (posting.positions + positions).sorted()
                found[primaryKey] = posting
            } else {
                found[primaryKey] = Posting(words: words, positions: positions)
            }
            return true
        }
        return found
    }

    /// Visits the primary keys of the texts matching `search` in ascending order, while `body`
    /// returns true. One whole word streams its entries' keys (no copy); several whole words
    /// intersect in a zig-zag; the rest gather and combine (`keys`). A key is valid only during
    /// its call.
    func forEachKey(_ search: ParsedSearch, _ body: (UnsafeRawBufferPointer) throws -> Bool) throws {
        let terms = search.distinctTerms
        if terms.isEmpty { return }
        if terms.count == 1, !terms[0].isPrefix, search.mode != .phrase || search.terms.count == 1 {
            let prefix = Self.range(terms[0]).lower ?? []
            try Planner.scan(tree, Self.range(terms[0])) { key, _ in
                // Only a damaged (or, read-only, overtaken) index holds a shorter key in the range.
                guard key.count >= prefix.count else { throw StrataError.corruptRecord("a full-text index entry shorter than its word") }
                return try body(UnsafeRawBufferPointer(rebasing: key[prefix.count...]))
            }
            return
        }
        var stopped = false
        for key in try keys(search) where !stopped {
            stopped = try !key.withUnsafeBytes(body)
        }
    }

    /// The primary keys of the texts matching `search`, ascending; the first `limit` of them
    /// when given.
    func keys(_ search: ParsedSearch, limit: Int? = nil) throws -> [[UInt8]] {
        let terms = search.distinctTerms
        if terms.isEmpty || limit == 0 { return [] }
        if search.mode == .allWords || (search.mode == .phrase && terms.count == 1 && search.terms.count == 1),
            terms.allSatisfy({ !$0.isPrefix })
        {
            return try allWholeWords(terms, limit: limit)
        }
        let maps = try (search.mode == .phrase ? search.terms : terms).map(postings)
        var keys: [[UInt8]]
        switch search.mode {
        case .anyWord:
            var all = Set<[UInt8]>()
            for map in maps { all.formUnion(map.keys) }
            keys = Array(all)
        case .allWords:
            keys = intersection(maps)
        case .phrase:
            keys = intersection(maps).filter { key in
                let lists = maps.map { $0[key]?.positions ?? [] }
                let later = lists.dropFirst().map(Set.init)
                return lists[0].contains { start in later.enumerated().allSatisfy { $0.element.contains(start + $0.offset + 1) } }
            }
        }
        keys.sort { $0.lexicographicallyPrecedes($1) }
        if let limit, keys.count > limit { keys.removeLast(keys.count - limit) }
        return keys
    }

    private func intersection(_ maps: [[[UInt8]: Posting]]) -> [[UInt8]] {
        guard let smallest = maps.min(by: { $0.count < $1.count }) else { return [] }
        return smallest.keys.filter { key in maps.allSatisfy { $0[key] != nil } }
    }

    /// Texts with every one of these whole words, in key order: a zig-zag of one cursor per word
    /// (each word's entries are its texts' keys in order, so a cursor that lags moves straight to
    /// the key another one is at), stopping at `limit`. Rare words make it fast whatever the order.
    private func allWholeWords(_ terms: [SearchTerm], limit: Int?) throws -> [[UInt8]] {
        var zigZag = ZigZag(prefixes: terms.map { Self.range($0).lower ?? [] }, cursors: try terms.map { _ in try tree.makeCursor() })
        var keys: [[UInt8]] = []
        guard try zigZag.reach(0) != nil else { return [] }
        while true {
            // Every other word at the target, or the target moves past it.
            var behind = false
            for i in 1..<zigZag.cursors.count {
                guard let there = try zigZag.reach(i) else { return keys }
                if !there {
                    behind = true
                    break
                }
            }
            if behind {
                guard try zigZag.reach(0) != nil else { return keys }
                continue
            }
            keys.append(zigZag.target)
            if let limit, keys.count >= limit { return keys }
            guard try zigZag.advanceFirst() else { return keys }
        }
    }

    /// The number of texts matching `search`, without building their keys when it is one whole
    /// word (its entries are counted).
    func count(_ search: ParsedSearch) throws -> Int {
        let terms = search.distinctTerms
        if terms.count == 1, search.terms.count == 1, !terms[0].isPrefix {
            return try count(terms[0], cap: Int.max)
        }
        return try keys(search).count
    }

    /// The index's statistics: texts with at least one word, and their words in all.
    func stats() throws -> (documents: Int, words: Int) {
        try TextPostingValue.readStats(try tree.view(TextPostingValue.statsKey))
    }
}

/// The cursors of an intersection and the key they are brought to. A struct with methods, not
/// nested functions capturing the loop's state: captured locals that change are boxed and
/// checked for exclusive access at run time on every use.
private struct ZigZag {
    let prefixes: [[UInt8]]
    let cursors: [Cursor]
    /// The primary key every cursor is brought to (without the word's prefix).
    var target: [UInt8] = []
    var probe: [UInt8] = []
    var positioned: [Bool]

    init(prefixes: [[UInt8]], cursors: [Cursor]) {
        self.prefixes = prefixes
        self.cursors = cursors
        positioned = [Bool](repeating: false, count: cursors.count)
    }

    /// Whether cursor `i` is on an entry of its word.
    private func at(_ i: Int) -> Bool {
        let key = cursors[i].key
        return prefixes[i].withUnsafeBytes { prefix in
            guard key.count >= prefix.count else { return false }
            guard let k = key.baseAddress, let p = prefix.baseAddress else { return prefix.isEmpty }
            return memcmp(k, p, prefix.count) == 0
        }
    }

    /// Makes cursor `i`'s key, without its word's prefix, the target.
    private mutating func takeTarget(from i: Int) {
        target.removeAll(keepingCapacity: true)
        target.append(contentsOf: UnsafeRawBufferPointer(rebasing: cursors[i].key[prefixes[i].count...]))
    }

    /// Cursor `i`'s key (without its word's prefix) compared with the target: <0, 0, >0.
    private func order(_ i: Int) -> Int {
        let key = UnsafeRawBufferPointer(rebasing: cursors[i].key[prefixes[i].count...])
        return target.withUnsafeBytes { KeyEncoding.compare(key, $0) }
    }

    /// Moves cursor `i` to its first text at or after the target: nil when it has no more,
    /// true when it is at the target, false when past it (the target is then its key). A
    /// cursor already there stays; one a few entries behind steps (when the words are about
    /// as common); else it seeks forward from where it is. Nothing is allocated.
    mutating func reach(_ i: Int) throws -> Bool? {
        let cursor = cursors[i]
        var found = false
        if positioned[i] {
            for _ in 0..<2 {
                guard at(i) else { return nil }
                if order(i) >= 0 { found = true; break }
                guard try cursor.next() else { return nil }
            }
        }
        if !found {
            probe.removeAll(keepingCapacity: true)
            probe.append(contentsOf: prefixes[i])
            probe.append(contentsOf: target)
            // Forward from where the cursor is (a leaf search when the text is near), or
            // from the root for the first move.
            guard try positioned[i] ? cursor.seekForward(probe) : cursor.seek(probe) else { return nil }
            positioned[i] = true
        }
        guard at(i) else { return nil }
        if order(i) == 0 { return true }
        takeTarget(from: i)
        return false
    }

    /// Moves the first cursor to its next text, which becomes the target; false at its end.
    mutating func advanceFirst() throws -> Bool {
        guard try cursors[0].next(), at(0) else { return false }
        takeTarget(from: 0)
        return true
    }
}
