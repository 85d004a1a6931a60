import Foundation

/// Answers a search from a full-text index tree (FORMAT.md §8.5) without reading a record: each
/// word's postings are its texts' primary keys in key order (in blocks, `PostingCursor`), so the
/// texts with every word are found by walking the rarest word's postings and moving the other
/// words' cursors forward to each key, stopping at a limit; prefixes, any-word searches and
/// phrases gather each word's postings (with their positions) and combine them.
struct TextIndexReader<T: KeyValueTree> {
    let tree: T
    /// The length every primary key of the model has, when its type fixes one (`ModelInfo.postingKeyLength`):
    /// a posting naming a key of another length is damage, and throws.
    var keyLength: Int? = nil

    /// The number of postings of `term`, counting at most `cap`: read from the blocks' heads.
    func count(_ term: SearchTerm, cap: Int) throws -> Int {
        try PostingCursor(term, in: tree, keyLength: keyLength).count(cap: cap)
    }

    /// How many texts the search may find, counting at most `cap` postings: the rarest word's for
    /// every word (or a phrase), the sum for any word.
    func estimate(_ search: ParsedSearch, cap: Int) throws -> Int {
        let terms = search.distinctTerms
        if terms.isEmpty { return 0 }
        if search.mode == .anyWord { return min(cap, try terms.reduce(0) { $0 + (try count($1, cap: cap)) }) }
        return try terms.map { try count($0, cap: cap) }.min() ?? 0
    }

    /// One text's posting for a term: its word count and the term's positions in it (a prefix's
    /// words' positions merged).
    struct Posting {
        var words: Int
        var positions: [Int]
    }

    /// Every text holding `term`, by primary key.
    func postings(_ term: SearchTerm) throws -> [ByteKey: Posting] {
        var found: [ByteKey: Posting] = [:]
        var cursor = try PostingCursor(term, in: tree, keyLength: keyLength)
        let control = Self.beginScan()
        defer { control?.endScan() }
        var more = try cursor.first()
        while more {
            try control?.step()
            let (words, positions) = try cursor.block.posting()
            // (A prefix's words each add their positions in one text; a whole word's postings
            // come once per text.)
            found[ByteKey(cursor.primaryKey), default: Posting(words: words, positions: [])].positions.append(contentsOf: positions)
            more = try cursor.next()
        }
        if term.isPrefix {
            // By index, in place: iterating `keys` would share the storage and copy it.
            var i = found.values.startIndex
            while i != found.values.endIndex {
                found.values[i].positions.sort()
                found.values.formIndex(after: &i)
            }
        }
        return found
    }

    /// Visits the primary keys of the texts matching `search` in ascending order, while `body`
    /// returns true. One whole word streams its postings' keys (no copy); several whole words
    /// intersect in a zig-zag; the rest gather and combine (`keys`). A key is valid only during
    /// its call.
    func forEachKey(_ search: ParsedSearch, _ body: (UnsafeRawBufferPointer) throws -> Bool) throws {
        let terms = search.distinctTerms
        if terms.isEmpty { return }
        if terms.count == 1, !terms[0].isPrefix, search.mode != .phrase || search.terms.count == 1 {
            var cursor = try PostingCursor(terms[0], in: tree, keyLength: keyLength)
            let control = Self.beginScan()
            defer { control?.endScan() }
            var more = try cursor.first()
            while more {
                try control?.step()
                guard try cursor.withPrimaryKey(body) else { return }
                more = try cursor.next()
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
        // Each distinct word's postings read once, however often a phrase repeats it (a phrase of
        // one word 20,000 times read it 20,000 times, and held every copy).
        let maps = try terms.map(postings)
        var keys: [ByteKey]
        switch search.mode {
        case .anyWord:
            var all = Set<ByteKey>()
            for map in maps { all.formUnion(map.keys) }
            keys = Array(all)
        case .allWords:
            keys = intersection(maps)
        case .phrase:
            let slots = Dictionary(uniqueKeysWithValues: terms.enumerated().map { ($0.element, $0.offset) })
            let order = search.terms.compactMap { slots[$0] }
            keys = intersection(maps).filter { key in
                guard let first = maps[order[0]][key] else { return false }
                let sets = maps.map { Set($0[key]?.positions ?? []) }
                return first.positions.contains { start in order.indices.dropFirst().allSatisfy { sets[order[$0]].contains(start + $0) } }
            }
        }
        keys.sort { KeyEncoding.compare($0.bytes, $1.bytes) < 0 }
        if let limit, keys.count > limit { keys.removeLast(keys.count - limit) }
        return keys.map(\.bytes)
    }

    private func intersection(_ maps: [[ByteKey: Posting]]) -> [ByteKey] {
        guard let smallest = maps.min(by: { $0.count < $1.count }) else { return [] }
        return smallest.keys.filter { key in maps.allSatisfy { $0[key] != nil } }
    }

    /// Texts with every one of these whole words, in key order: a zig-zag of one cursor per word
    /// (each word's postings are its texts' keys in order, so a cursor that lags moves straight
    /// to the key another one is at), stopping at `limit`. Rare words make it fast whatever the
    /// order.
    private func allWholeWords(_ terms: [SearchTerm], limit: Int?) throws -> [[UInt8]] {
        var cursors = try terms.map { try PostingCursor($0, in: tree, keyLength: keyLength) }
        var keys: [[UInt8]] = []
        guard try cursors[0].first() else { return [] }
        // The target is a buffer of its own, overwritten in place: sharing a cursor's key would
        // make the cursor copy it at its next posting.
        var target: [UInt8] = []
        cursors[0].copyKey(into: &target)
        var i = 1
        // `agreed` cursors in a row are at the target; the first one to pass it moves the target.
        var agreed = 1
        while true {
            if agreed == cursors.count {
                keys.append(target)
                if let limit, keys.count >= limit { return keys }
                guard try cursors[0].next() else { return try Self.ended(&cursors, keys) }
                cursors[0].copyKey(into: &target)
                agreed = 1
                i = 1
                continue
            }
            guard let met = try cursors[i].meet(&target) else { return try Self.ended(&cursors, keys) }
            agreed = met ? agreed + 1 : 1
            i = (i + 1) % cursors.count
        }
    }

    /// `keys`, once every cursor has read its current block to the end: the intersection ended
    /// because a word ran out, and a damaged block of another word may have led it there with a
    /// misread key (which then throws rather than cut the answer short).
    private static func ended(_ cursors: inout [PostingCursor], _ keys: [[UInt8]]) throws -> [[UInt8]] {
        for i in cursors.indices { try cursors[i].readBlockToEnd() }
        return keys
    }

    /// Reading a term's postings is a scan for progress and cancellation (`withProgress`), as
    /// reading index entries is: each posting a unit.
    private static func beginScan() -> OperationControl? {
        let control = OperationControl.current
        control?.begin("scan", total: nil, scan: true)
        return control
    }

    /// The number of texts matching `search`, without building their keys when it is one whole
    /// word (its blocks' heads are added up).
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
