import Foundation
import StrataStorage

// A word's postings, stored in blocks (FORMAT.md §8.5): one entry of the full-text index holds a
// run of the word's texts, their primary keys front-coded. An entry per (word, text) cost its word
// and primary key again in every key and a leaf slot each (about 28 bytes for a posting of 4), and
// a B-tree put per distinct word of every text written; a block costs a few bytes per text, and a
// transaction's postings of one word go into its blocks in one rewrite (PostingMerge).

enum PostingBlocks {
    /// Where the word of a block's key ends, after its terminator (§8.1's string encoding): the
    /// primary key of the block's first posting starts there. Nil when the key holds no word.
    static func wordEnd(_ key: UnsafeRawBufferPointer) -> Int? {
        var reader = KeyReader(bytes: key)
        return reader.skipEscaped() ? reader.offset : nil
    }

    /// Whether `key` starts with `prefix` (a word's key encoding, or a search prefix's bytes).
    @inline(__always)
    static func hasPrefix(_ key: UnsafeRawBufferPointer, _ prefix: [UInt8]) -> Bool {
        guard key.count >= prefix.count else { return false }
        return prefix.withUnsafeBytes { p in
            guard let a = key.baseAddress, let b = p.baseAddress else { return true }
            return memcmp(a, b, p.count) == 0
        }
    }

    /// The most bytes a block's value takes before another block starts: small enough that a
    /// write of one posting rewrites little, large enough that keys are a small part of the index,
    /// and always inline in a leaf of the smallest page size (a block holds at least one posting,
    /// which alone may be larger: its value then goes to overflow pages).
    static let maxBlockBytes = 256

    static func budget(keyCount: Int) -> Int {
        max(64, min(maxBlockBytes, Limits.maxKeySize(pageSize: Limits.pageSizes[0]) + 8 - keyCount))
    }

    static func corrupt(_ what: String) -> StrataError {
        .corruptRecord("a full-text index block \(what) (FORMAT.md §8.5; `strata check` lists such damage)")
    }
}

/// Reads the postings of one block in order: each one's primary key and the rest of its posting
/// (the text's word count and the word's positions, as `TextPostingValue.read` takes them). The
/// block is copied in, so the cursor it came from may move on.
struct PostingBlockReader {
    /// The block's key.
    private(set) var key: [UInt8] = []
    /// The block's value.
    private(set) var bytes: [UInt8] = []
    /// The current posting's primary key (key encoding).
    private(set) var primaryKey: [UInt8] = []
    /// Where the current posting's word count and positions lie in `bytes`.
    private(set) var rest: Range<Int> = 0..<0
    /// The postings the block holds.
    private(set) var count = 0
    /// The length of every primary key, when the model's key type fixes it: a posting with
    /// another is damage.
    var keyLength: Int?
    /// Where the key's primary key starts.
    private(set) var wordEnd = 0
    private var offset = 0
    private var firstOffset = 0
    private var left = 0

    /// Starts reading the block `key` → `value`, whose primary key starts at `wordEnd`: before its
    /// first posting.
    mutating func load(key: UnsafeRawBufferPointer, wordEnd: Int, value: UnsafeRawBufferPointer) throws {
        self.key = Array(key)
        bytes = Array(value)
        primaryKey = []
        self.wordEnd = wordEnd
        guard wordEnd < key.count else { throw PostingBlocks.corrupt("has a key without a primary key") }
        (count, firstOffset) = try Self.head(value)
        left = count
        offset = firstOffset
    }

    /// Back to before the first posting.
    mutating func rewind() {
        left = count
        offset = firstOffset
        primaryKey = []
    }

    /// Whether `next` has read every posting.
    var isAtEnd: Bool { left == 0 }

    /// The postings' bytes, after the count.
    var postingBytes: ArraySlice<UInt8> { bytes[firstOffset...] }

    /// The number of postings of the block `value`, read from its head alone.
    static func count(_ value: UnsafeRawBufferPointer) throws -> Int { try head(value).count }

    /// The block's count of postings, and where its first posting starts.
    private static func head(_ value: UnsafeRawBufferPointer) throws -> (count: Int, postings: Int) {
        var reader = ByteReader(value)
        let n = try reader.varint()
        guard n >= 1, n <= UInt64(value.count) else { throw PostingBlocks.corrupt("counts \(n) postings in \(value.count) bytes") }
        return (Int(n), reader.offset)
    }

    /// Moves to the next posting; false after the last. Throws when the block is damaged: a first
    /// posting that is not the key's, primary keys out of order, bytes left over or missing.
    mutating func next() throws -> Bool {
        guard left > 0 else { return false }
        let start = offset
        let step = try bytes.withUnsafeBytes { try Self.step($0, at: start) }
        if left == count {
            // Its key's primary key, all of it shared.
            guard step.shared == key.count - wordEnd, step.suffix.isEmpty else {
                throw PostingBlocks.corrupt("starts with another primary key than its key's")
            }
            primaryKey = Array(key[wordEnd...])
        } else {
            // The longest common prefix with the previous key, then a greater byte.
            guard step.shared <= primaryKey.count, !step.suffix.isEmpty,
                step.shared == primaryKey.count || bytes[step.suffix.lowerBound] > primaryKey[step.shared]
            else { throw PostingBlocks.corrupt("holds primary keys out of order") }
            if step.shared + step.suffix.count == primaryKey.count {
                // Keys of one length (integers): the suffix overwrites the end in place.
                bytes.withUnsafeBytes { source in
                    primaryKey.withUnsafeMutableBytes { key in
                        if let to = key.baseAddress, let from = source.baseAddress {
                            (to + step.shared).copyMemory(from: from + step.suffix.lowerBound, byteCount: step.suffix.count)
                        }
                    }
                }
            } else {
                primaryKey.removeLast(primaryKey.count - step.shared)
                primaryKey.append(contentsOf: bytes[step.suffix])
            }
        }
        if let keyLength, primaryKey.count != keyLength {
            throw PostingBlocks.corrupt("holds a primary key of \(primaryKey.count) bytes, where the model's keys have \(keyLength)")
        }
        rest = step.rest
        offset = step.rest.upperBound
        left -= 1
        if left == 0 && offset != bytes.count { throw PostingBlocks.corrupt("has \(bytes.count - offset) bytes after its last posting") }
        return true
    }

    /// Where the parts of the posting at `offset` lie: the bytes its key shares with the previous
    /// one, its key's suffix, and its word count and positions.
    private static func step(_ raw: UnsafeRawBufferPointer, at offset: Int) throws -> (shared: Int, suffix: Range<Int>, rest: Range<Int>) {
        var reader = ByteReader(raw, offset: offset)
        let shared = try reader.varint()
        let length = try reader.length()
        let suffix = reader.offset..<(reader.offset + length)
        reader.offset += length
        // (Checked against the previous key by the caller; this only keeps it an Int.)
        guard shared <= UInt64(Int32.max) else { throw PostingBlocks.corrupt("shares more key bytes than any key holds") }
        let start = reader.offset
        _ = try reader.varint()
        let n = try reader.varint()
        guard n <= UInt64(raw.count - reader.offset) else { throw PostingBlocks.corrupt("has a posting whose positions run past its end") }
        for _ in 0..<Int(n) { _ = try reader.varint() }
        return (Int(shared), suffix, start..<reader.offset)
    }

    /// The current posting's primary key against `target`: <0, 0, >0.
    func compareKey(_ target: [UInt8]) -> Int { KeyEncoding.compare(primaryKey, target) }

    /// The current posting's word count and positions.
    func posting() throws -> (words: Int, positions: [Int]) {
        try bytes.withUnsafeBytes { try TextPostingValue.read(UnsafeRawBufferPointer(rebasing: $0[rest])) }
    }
}

/// Writes postings, given in primary-key order, into blocks of one word: a block is closed when
/// the next posting would take it past its budget, so postings appended in key order (a load,
/// new messages) fill blocks to the budget and leave at most the last one part full.
///
/// The open block and the previous key live in buffers written through pointers and reused from
/// posting to posting: a transaction's merge encodes every new posting, and arrays appended to
/// (and shared, and grown) cost more than the encoding.
struct PostingBlockWriter {
    /// The word's key encoding, which starts every block's key.
    private(set) var word: [UInt8]
    /// The closed blocks' keys and values, back to back, and where each lies.
    private var done: [UInt8] = []
    private var marks: [(key: Range<Int>, value: Range<Int>)] = []
    /// The open block's postings: `used` bytes of it.
    private var body: [UInt8]
    private var used = 0
    /// The last posting's primary key: `previousCount` bytes of it.
    private var previous: [UInt8] = []
    private var previousCount = 0
    /// The open block's first primary key, which its key ends with.
    private var firstKey: [UInt8] = []
    private var count = 0
    private var budget = 0

    init(word: [UInt8]) {
        self.word = word
        body = [UInt8](repeating: 0, count: PostingBlocks.maxBlockBytes + 64)
    }

    /// Starts over for the blocks of `word`, keeping the memory.
    mutating func reset(word: [UInt8]) {
        self.word = word
        done.removeAll(keepingCapacity: true)
        marks.removeAll(keepingCapacity: true)
        used = 0
        count = 0
    }

    /// The bytes of every block's value so far, the open one's included.
    var size: Int { marks.reduce(used) { $0 + $1.value.count } }

    /// Visits each closed block's key and value, in key order.
    func forEachBlock(_ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Void) rethrows {
        try done.withUnsafeBytes { bytes in
            for mark in marks { try body(UnsafeRawBufferPointer(rebasing: bytes[mark.key]), UnsafeRawBufferPointer(rebasing: bytes[mark.value])) }
        }
    }

    /// Whether the first closed block's key is `key`.
    func firstKey(is key: [UInt8]) -> Bool {
        guard let first = marks.first else { return false }
        return done[first.key].elementsEqual(key)
    }

    /// The closed blocks as arrays (for tests).
    var blocks: [(key: [UInt8], value: [UInt8])] { marks.map { (Array(done[$0.key]), Array(done[$0.value])) } }

    /// Room for `n` more bytes in `body`.
    private mutating func reserve(_ n: Int) {
        if used + n > body.count { body += [UInt8](repeating: 0, count: max(n, body.count)) }
    }

    /// Adds the posting of the text `primaryKey`, after every posting added before (its key is
    /// greater); `rest` is the text's word count and the word's positions.
    mutating func add(primaryKey: UnsafeRawBufferPointer, rest: UnsafeRawBufferPointer) {
        var shared = 0
        if count > 0 {
            let limit = min(previousCount, primaryKey.count)
            previous.withUnsafeBytes { previous in
                while shared < limit && previous[shared] == primaryKey[shared] { shared += 1 }
            }
            let size = varintSize(UInt64(shared)) + varintSize(UInt64(primaryKey.count - shared)) + primaryKey.count - shared + rest.count
            if used + size + varintSize(UInt64(count + 1)) > budget { close() }
        }
        if count == 0 {
            // The first posting's key is the block's: all of it shared, no suffix.
            budget = PostingBlocks.budget(keyCount: word.count + primaryKey.count)
            firstKey = Array(primaryKey)
            shared = primaryKey.count
        }
        reserve(20 + primaryKey.count - shared + rest.count)
        let start = used
        used = body.withUnsafeMutableBufferPointer { buffer -> Int in
            guard let base = buffer.baseAddress else { return start }
            var p = base + start
            storeVarint(UInt64(shared), at: &p)
            storeVarint(UInt64(primaryKey.count - shared), at: &p)
            if let source = primaryKey.baseAddress, shared < primaryKey.count {
                UnsafeMutableRawPointer(p).copyMemory(from: source + shared, byteCount: primaryKey.count - shared)
                p += primaryKey.count - shared
            }
            if let source = rest.baseAddress, !rest.isEmpty {
                UnsafeMutableRawPointer(p).copyMemory(from: source, byteCount: rest.count)
                p += rest.count
            }
            return p - base
        }
        remember(primaryKey)
        count += 1
    }

    /// Keeps `key` as the previous posting's.
    private mutating func remember(_ key: UnsafeRawBufferPointer) {
        if previous.count < key.count { previous = [UInt8](repeating: 0, count: max(key.count, 16)) }
        previous.withUnsafeMutableBytes { buffer in
            if let base = buffer.baseAddress, let source = key.baseAddress { base.copyMemory(from: source, byteCount: key.count) }
        }
        previousCount = key.count
    }

    /// Starts with every posting of the block `reader` has read through, its bytes as they are:
    /// postings added next continue it (a transaction's new texts after a word's last block).
    mutating func adopt(_ reader: PostingBlockReader) {
        guard count == 0, reader.isAtEnd else { return }
        budget = PostingBlocks.budget(keyCount: reader.key.count)
        let postings = reader.postingBytes
        reserve(postings.count)
        body.replaceSubrange(used..<(used + postings.count), with: postings)
        used += postings.count
        firstKey = Array(reader.key[reader.wordEnd...])
        reader.primaryKey.withUnsafeBytes { remember($0) }
        count = reader.count
    }

    /// Adds the posting `reader` is on.
    mutating func add(current reader: PostingBlockReader) {
        reader.primaryKey.withUnsafeBytes { pk in
            reader.bytes.withUnsafeBytes { bytes in add(primaryKey: pk, rest: UnsafeRawBufferPointer(rebasing: bytes[reader.rest])) }
        }
    }

    /// Ends the open block, if it holds a posting. Call before reading `blocks`.
    mutating func close() {
        guard count > 0 else { return }
        let keyStart = done.count
        done.append(contentsOf: word)
        done.append(contentsOf: firstKey)
        let valueStart = done.count
        appendVarint(UInt64(count), to: &done)
        done.append(contentsOf: body[0..<used])
        marks.append((keyStart..<valueStart, valueStart..<done.count))
        used = 0
        count = 0
    }
}

extension KeyEncoding {
    /// The length of every key encoding (§8.1) of `type` when it is fixed (integers, floating
    /// point, dates, UUIDs, Bool; an optional's present value with its tag byte; an enum's raw
    /// value), else nil: a full-text posting whose primary key has another length is damage.
    static func fixedLength(of type: FieldType) -> Int? {
        switch type {
        case .bool: return 1
        case .int, .double, .float, .date: return 8
        case .uuid: return 16
        case .enumeration(let raw): return fixedLength(of: raw)
        // A primary key is never nil: a stored optional key is its tag byte and the value.
        case .optional(let wrapped): return fixedLength(of: wrapped).map { $0 + 1 }
        default: return nil
        }
    }

    /// `compare` of a key in a buffer with one in an array.
    static func compare(_ a: UnsafeRawBufferPointer, _ b: [UInt8]) -> Int {
        b.withUnsafeBytes { compare(a, $0) }
    }

    /// `compare` of two keys in arrays.
    static func compare(_ a: [UInt8], _ b: [UInt8]) -> Int {
        a.withUnsafeBytes { x in b.withUnsafeBytes { compare(x, $0) } }
    }
}
