import StrataStorage

/// Walks the postings of one search term in a full-text index (FORMAT.md §8.5), block by block:
/// a whole word's in primary-key order, a prefix's word by word. Nothing is allocated or copied
/// per posting or per block: blocks are read in place.
struct PostingCursor {
    /// The key bytes every block of the term starts with: the whole word's key encoding, or the
    /// prefix's bytes.
    let prefix: [UInt8]
    let isPrefix: Bool
    let cursor: Cursor
    private(set) var block = PostingBlockReader()
    /// Whether the cursor is on a posting (`first` or `seek` found one, and `next` did not run out).
    private(set) var isOn = false
    /// Whether the tree cursor has moved on to the entry after the block being read (`seek` looked
    /// at where the next block starts), and whether there was one.
    private var ahead = false
    private var aheadFound = false
    /// When the cursor has moved ahead: whether it is on a block of the term, and that block's
    /// first primary key (its key after the prefix), which the seeks that follow compare against.
    private var aheadOnTerm = false
    private var aheadKey = ReusedBytes()
    /// The prefix, then the target of the last seek of the tree (a buffer reused from seek to seek).
    private var probe = ReusedBytes()

    init(_ term: SearchTerm, in tree: some KeyValueTree, keyLength: Int? = nil) throws {
        block.keyLength = keyLength
        isPrefix = term.isPrefix
        if term.isPrefix {
            prefix = term.word
        } else {
            var key: [UInt8] = []
            KeyEncoding.appendBytes(term.word, to: &key)
            prefix = key
        }
        cursor = try tree.makeCursor()
    }

    /// The current posting's primary key (a copy; `withPrimaryKey` reads it in place).
    var primaryKey: [UInt8] { block.primaryKey }

    /// Calls `body` with the current posting's primary key, valid during the call.
    @inline(__always)
    func withPrimaryKey<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try block.withPrimaryKey(body) }

    /// The current posting's primary key against `target`: <0, 0, >0.
    func compareKey(_ target: [UInt8]) -> Int { block.compareKey(target) }

    /// `seek(atLeast: target)`, then whether the posting it reached is the target's: true when
    /// it is, false when it is past it (`target` then becomes its key), nil when the term ran out.
    /// (One mutating call, so that an intersection's cursors in an array are never copied.)
    mutating func meet(_ target: inout [UInt8]) throws -> Bool? {
        guard try seek(atLeast: target) else { return nil }
        if compareKey(target) == 0 { return true }
        copyKey(into: &target)
        return false
    }

    /// Makes `array` a copy of the current posting's primary key, in place when the lengths match.
    func copyKey(into array: inout [UInt8]) {
        block.withPrimaryKey { key in
            if array.count == key.count {
                array.withUnsafeMutableBytes { $0.copyMemory(from: key) }
            } else {
                array = Array(key)
            }
        }
    }

    /// Moves to the term's first posting; false when it has none.
    mutating func first() throws -> Bool {
        guard try cursor.seek(prefix) else { return stop() }
        return try enter()
    }

    /// Moves to the next posting; false after the last.
    mutating func next() throws -> Bool {
        guard isOn else { return false }
        if try block.next() { return true }
        guard try moveToNextEntry() else { return stop() }
        return try enterFollowing()
    }

    /// Reads the rest of the current block, so that damage in it throws: an intersection that
    /// ends because another word ran out may have stopped on a misread key of this block.
    mutating func readBlockToEnd() throws {
        guard isOn else { return }
        while try block.next() {}
    }

    /// `enter` for the block after the one just read through: a whole word's next block must
    /// start above the last key read, or the blocks overlap (damage, which would repeat texts or
    /// skip them).
    private mutating func enterFollowing() throws -> Bool {
        guard !isPrefix, block.keyCount > 0, onTerm else { return try enter() }
        // (The next block's first key is its key's tail, as `enter` checks.)
        if block.compareKey(UnsafeRawBufferPointer(rebasing: cursor.key[prefix.count...])) >= 0 {
            throw PostingBlocks.corrupt("starts at or below the last key of the block before it")
        }
        return try enter()
    }

    /// Moves the tree cursor to the entry after the block being read (unless `seek` already did).
    private mutating func moveToNextEntry() throws -> Bool {
        if ahead {
            ahead = false
            return aheadFound
        }
        return try cursor.next()
    }

    /// The number of postings of the term, from the blocks' heads (no posting is read), counting
    /// at most `cap`.
    func count(cap: Int) throws -> Int {
        var total = 0
        var more = try cursor.seek(prefix)
        while more, onTerm, total < cap {
            try checkWord()
            total += try PostingBlockReader.count(cursor.value)
            more = try cursor.next()
        }
        return min(total, cap)
    }

    /// Moves to the first posting whose primary key is at least `target`, forward from where the
    /// cursor is (it never moves back): within the block when the target is below where the next
    /// block starts, else by a seek of the tree for the last block whose first key is at most the
    /// target (a common word's cursor, led by a rare word's, skips blocks it has no use for).
    /// Whole words only.
    mutating func seek(atLeast target: [UInt8]) throws -> Bool {
        if isOn {
            if block.compareKey(target) >= 0 { return true }
            if !ahead {
                aheadFound = try cursor.next()
                ahead = true
                aheadOnTerm = aheadFound && onTerm
                if aheadOnTerm { aheadKey.set(UnsafeRawBufferPointer(rebasing: cursor.key[prefix.count...])) }
            }
            let nextIsTerms = aheadOnTerm
            let order = nextIsTerms ? aheadKey.withBytes { a in target.withUnsafeBytes { KeyEncoding.compare(a, $0) } } : 1
            if order > 0 {
                // Below the next block's first key: in this block, or the next block's first.
                if try block.next(atLeast: target) { return true }
                ahead = false
                return nextIsTerms ? try enterFollowing() : stop()
            }
            ahead = false
            if order == 0 {
                // The next block starts at the target: this one is read to its end first (damage
                // in it throws), as `next` reads it, and the next must start above its last key.
                try readBlockToEnd()
                return try enterFollowing()
            }
        }
        // (On a posting, the tree cursor is here on the next block, which starts below the
        // target.) A target up to four blocks further on is reached by stepping the tree cursor, an
        // entry a step, rather than by a seek: two-word searches make many such short jumps.
        var landed = false
        if isOn {
            for _ in 0..<4 {
                guard try cursor.next() else { break }
                if !onTerm {
                    landed = true
                    break
                }
                let order = tailOrder(target)
                if order == 0 { return try enter() }
                if order > 0 {
                    landed = true
                    break
                }
            }
        }
        if !landed { prefix.withUnsafeBytes { p in target.withUnsafeBytes { probe.set(p, $0) } } }
        let found = try landed || probe.withBytes { try isOn ? cursor.seekForward($0) : cursor.seek($0) }
        if !landed, found, onTerm, tailOrder(target) == 0 { return try enter() }
        // The block before the landing place begins below the target and may hold it.
        let back = found ? try cursor.prev() : try cursor.last()
        if back, onTerm {
            guard try enter() else { return false }
            if try block.compareKey(target) >= 0 || block.next(atLeast: target) { return true }
        }
        // Past that block: the next one, if it is the term's, starts above the target.
        if !back && landed { prefix.withUnsafeBytes { p in target.withUnsafeBytes { probe.set(p, $0) } } }
        guard try back ? cursor.next() : probe.withBytes({ try cursor.seek($0) }) else { return stop() }
        return try enter()
    }

    /// Whether the tree cursor is on an entry of the term (a block of its word, or of a word with
    /// its prefix).
    private var onTerm: Bool { PostingBlocks.hasPrefix(cursor.key, prefix) }

    /// The tree cursor's key after the term's prefix (a block's first primary key) against
    /// `target`: <0, 0, >0. The cursor is on the term.
    private func tailOrder(_ target: [UInt8]) -> Int {
        KeyEncoding.compare(UnsafeRawBufferPointer(rebasing: cursor.key[prefix.count...]), target)
    }

    /// Reads the block the cursor is on, if it is the term's, and moves to its first posting.
    private mutating func enter() throws -> Bool {
        ahead = false
        guard onTerm else { return stop() }
        let wordEnd = try checkWord()
        // In place: a search reads its postings within one evaluation, during which nothing
        // writes to the tree (a write transaction's deferred writes were applied when the cursor
        // first moved), so the pages under the block stay put while the cursor moves on.
        try block.load(key: cursor.key, wordEnd: wordEnd, value: cursor.value, inPlace: true)
        isOn = try block.next()
        return isOn
    }

    /// Where the word of the cursor's key ends; throws when the key is not a block's.
    @discardableResult
    private func checkWord() throws -> Int {
        if !isPrefix { return prefix.count }
        guard let end = PostingBlocks.wordEnd(cursor.key), end < cursor.key.count else {
            throw PostingBlocks.corrupt("has a key without a word and a primary key")
        }
        return end
    }

    private mutating func stop() -> Bool {
        isOn = false
        return false
    }
}
