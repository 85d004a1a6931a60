import StrataStorage

/// Applies a transaction's full-text postings to the index's blocks (FORMAT.md §8.5). Writes keep
/// the form of one entry per (word, text), key word ‖ primary key and value as
/// `TextPostingValue.pairs` makes it (or a delete), and are deferred (`putLater(_:_:mergedBy:)`);
/// when they are applied they arrive here sorted, a word's together, and each block they touch is
/// read and written again once. A transaction that adds a thousand texts with a word rewrites the
/// word's last block and appends new ones, where an entry per text cost a B-tree put each.
final class PostingMerge: DeferredMerge, Sendable {
    /// One for every index: it keeps no state.
    static let shared = PostingMerge()

    func apply(_ writes: DeferredBatch, to tree: WriteTree) throws {
        // One reader and one writer for every word: their buffers are reused.
        var block = PostingBlockReader()
        var out = PostingBlockWriter(word: [])
        var i = 0
        while i < writes.count {
            let key = writes.key(i)
            guard let wordEnd = PostingBlocks.wordEnd(key), wordEnd < key.count else {
                throw PostingBlocks.corrupt("write has a key without a word and a primary key")
            }
            let word = Array(key[..<wordEnd])
            var j = i + 1
            // A word's key encoding ends in its terminator, which no other word's holds there.
            while j < writes.count, PostingBlocks.hasPrefix(writes.key(j), word) { j += 1 }
            try merge(word: word, writes, i..<j, into: tree, &block, &out)
            i = j
        }
    }

    /// Merges the writes `range` (of one word, in key order) into the word's blocks, block by block.
    private func merge(
        word: [UInt8], _ writes: DeferredBatch, _ range: Range<Int>, into tree: WriteTree, _ block: inout PostingBlockReader, _ out: inout PostingBlockWriter
    ) throws {
        var k = range.lowerBound
        while k < range.upperBound {
            // The block the first write falls in, and the key of the one after it (whose writes
            // are for the next round).
            let (found, next) = try locate(word: word, writes.key(k), in: tree, reading: &block)
            let blockKey = found ? block.key : nil
            var end = k
            while end < range.upperBound, next.map({ KeyEncoding.compare(writes.key(end), $0) < 0 }) ?? true {
                end += 1
            }
            out.reset(word: word)
            var w = k
            /// The last write of the run of writes to one key starting at `w` (the one that counts).
            func last(_ w: Int) -> Int {
                var l = w
                while l + 1 < end, KeyEncoding.compare(writes.key(l + 1), writes.key(w)) == 0 { l += 1 }
                return l
            }
            func emit(_ l: Int) throws {
                guard let value = writes.value(l) else { return }
                var reader = ByteReader(value)
                _ = try reader.varint()  // the primary key's length, which the block does not keep
                out.add(
                    primaryKey: UnsafeRawBufferPointer(rebasing: writes.key(l)[word.count...]), rest: UnsafeRawBufferPointer(rebasing: value[reader.offset...]))
            }
            if found {
                // New texts after the block's last (new messages, a load): the block's bytes stay
                // as they are, and only the new postings are encoded.
                while try block.next() {}
                if block.compareKey(UnsafeRawBufferPointer(rebasing: writes.key(k)[word.count...])) < 0 {
                    out.adopt(block)
                } else {
                    block.rewind()
                }
                while !block.isAtEnd, try block.next() {
                    var replaced = false
                    while w < end {
                        let pk = UnsafeRawBufferPointer(rebasing: writes.key(w)[word.count...])
                        let order = -block.compareKey(pk)
                        if order > 0 { break }
                        let l = last(w)
                        try emit(l)
                        w = l + 1
                        if order == 0 {
                            replaced = true
                            break
                        }
                    }
                    if !replaced { out.add(current: block) }
                }
            }
            while w < end {
                let l = last(w)
                try emit(l)
                w = l + 1
            }
            // A block left small by deletes takes in the next one, so that removing texts does not
            // leave a trail of blocks of a posting or two.
            var absorbed = false
            if found, let next, out.size > 0, out.size < PostingBlocks.maxBlockBytes / 4 {
                let cursor = try tree.cursor()
                if try cursor.find(next) {
                    try block.load(key: cursor.key, wordEnd: word.count, value: cursor.value)
                    while try block.next() {
                        out.add(current: block)
                    }
                    absorbed = true
                }
            }
            out.close()
            // (A block whose first posting stays is overwritten by the put.)
            if let blockKey, !out.firstKey(is: blockKey) { try blockKey.withUnsafeBytes { _ = try tree.delete($0) } }
            if absorbed, let next { try next.withUnsafeBytes { _ = try tree.delete($0) } }
            try out.forEachBlock { key, value in _ = try tree.put(key, value) }
            k = end
        }
    }

    /// Finds the block of `word` that a posting under `key` belongs in: the last of the word's
    /// blocks whose key is at most `key`, else (the key precedes them all) the word's first block.
    /// Loads it into `block` and returns whether there is one, and the key of the word's block
    /// after it, if any.
    private func locate(word: [UInt8], _ key: UnsafeRawBufferPointer, in tree: WriteTree, reading block: inout PostingBlockReader) throws -> (Bool, [UInt8]?) {
        let cursor = try tree.cursor()
        func ofWord() -> Bool { PostingBlocks.hasPrefix(cursor.key, word) }
        func load() throws { try block.load(key: cursor.key, wordEnd: word.count, value: cursor.value) }
        func following() throws -> [UInt8]? { try cursor.next() && ofWord() ? Array(cursor.key) : nil }
        if try cursor.seek(key) {
            if ofWord() && KeyEncoding.compare(cursor.key, key) == 0 {
                try load()
                return (true, try following())
            }
            let after = ofWord() ? Array(cursor.key) : nil
            if try cursor.prev(), ofWord() {
                try load()
                return (true, after)
            }
            guard let after, try cursor.find(after) else { return (false, nil) }
            try load()
            return (true, try following())
        }
        guard try cursor.last(), ofWord() else { return (false, nil) }
        try load()
        return (true, nil)
    }
}
