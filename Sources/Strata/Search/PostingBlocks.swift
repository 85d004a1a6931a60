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

/// Bytes copied in over and over (a block, a key): storage that only grows, and how much of it
/// holds them. Emptying and refilling an array costs more than the copy of a few hundred bytes.
/// Or, when their owner says they stay put while they are read (`refer(to:)`), no copy at all.
struct ReusedBytes {
    private var storage: [UInt8] = []
    /// Bytes read where they are (`refer(to:)`), instead of `storage`'s.
    private var external: UnsafeRawBufferPointer?
    private(set) var count = 0

    /// Makes these bytes `first` followed by `second`.
    mutating func set(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0)) {
        external = nil
        let total = first.count + second.count
        if storage.count < total { storage = [UInt8](repeating: 0, count: max(total, 2 * storage.count, 64)) }
        storage.withUnsafeMutableBytes { out in
            if let a = first.baseAddress, let to = out.baseAddress { to.copyMemory(from: a, byteCount: first.count) }
            if let b = second.baseAddress, let to = out.baseAddress { (to + first.count).copyMemory(from: b, byteCount: second.count) }
        }
        count = total
    }

    /// Makes these bytes `bytes`, read where they are: the caller keeps them valid and unchanged
    /// until the next `set` or `refer(to:)`.
    mutating func refer(to bytes: UnsafeRawBufferPointer) {
        external = bytes
        count = bytes.count
    }

    /// Calls `body` with the bytes, valid during the call.
    @inline(__always)
    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        if let external { return try body(external) }
        return try storage.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }

    /// A copy of the bytes.
    var array: [UInt8] { withBytes { Array($0) } }
}

/// Reads the postings of one block in order: each one's primary key and the rest of its posting
/// (the text's word count and the word's positions, as `TextPostingValue.read` takes them). The
/// block is copied in, so the cursor it came from may move on and the tree be written to; or read
/// in place, when the caller knows its bytes stay put (`load(key:wordEnd:value:inPlace:)`).
///
/// Reading postings is most of a search's time (a two-word search over a million texts reads
/// thousands), so the block, its key and the current primary key live in buffers reused from block
/// to block, and `next(atLeast:)` scans a block's postings in one pass over its bytes, comparing
/// each key in place.
struct PostingBlockReader {
    /// The block's key and value.
    private var blockKey = ReusedBytes()
    private var value = ReusedBytes()
    /// The current posting's primary key (key encoding): the first `keyCount` bytes of `keyBuffer`,
    /// which only grows.
    private var keyBuffer: [UInt8] = []
    private(set) var keyCount = 0
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
    /// first posting. The block is copied in, unless `inPlace`: then the caller keeps `key` and
    /// `value` valid and unchanged while the block is read (a view of a snapshot's pages, or of a
    /// write transaction's while nothing writes to it), and no byte is copied.
    mutating func load(key: UnsafeRawBufferPointer, wordEnd: Int, value: UnsafeRawBufferPointer, inPlace: Bool = false) throws {
        if inPlace {
            blockKey.refer(to: key)
            self.value.refer(to: value)
        } else {
            blockKey.set(key)
            self.value.set(value)
        }
        keyCount = 0
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
        keyCount = 0
    }

    /// Whether `next` has read every posting.
    var isAtEnd: Bool { left == 0 }

    /// The block's key (a copy).
    var key: [UInt8] { blockKey.array }

    /// The block's value (a copy).
    var bytes: [UInt8] { value.array }

    /// The number of bytes of the block's key.
    var keyByteCount: Int { blockKey.count }

    /// Calls `body` with the postings' bytes, after the count.
    func withPostingBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try value.withBytes { try body(UnsafeRawBufferPointer(rebasing: $0[firstOffset...])) }
    }

    /// Calls `body` with the current posting's word count and positions, as stored.
    func withRest<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try value.withBytes { try body(UnsafeRawBufferPointer(rebasing: $0[rest])) }
    }

    /// The current posting's primary key (a copy; `withPrimaryKey` reads it in place).
    var primaryKey: [UInt8] { Array(keyBuffer[0..<keyCount]) }

    /// Calls `body` with the current posting's primary key, valid during the call.
    @inline(__always)
    func withPrimaryKey<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try keyBuffer.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<keyCount])) }
    }

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
    mutating func next() throws -> Bool { try next(atLeast: nil) }

    /// Moves on to the next posting whose primary key is at least `target` (the next posting when
    /// `target` is nil); false when the block ends first, every posting of it read. Every posting
    /// passed over is checked as `next` checks it.
    mutating func next(atLeast target: UnsafeRawBufferPointer?) throws -> Bool {
        while left > 0 {
            if left == count {
                try readFirst()
                if target.map({ compareKey($0) >= 0 }) ?? true { return true }
                continue
            }
            switch try scan(atLeast: target) {
            case .found: return true
            case .ended: return false
            case .needs(let length): grow(to: length)
            }
        }
        return false
    }

    /// `next(atLeast:)` with an array.
    mutating func next(atLeast target: [UInt8]) throws -> Bool {
        try target.withUnsafeBytes { try next(atLeast: $0) }
    }

    /// The first posting: its primary key is all of the block key's, none of it in the posting.
    private mutating func readFirst() throws {
        let (shared, suffixCount, restStart) = try value.withBytes { raw -> (Int, Int, Int) in
            var p = offset
            let shared = try Self.varint(raw, &p)
            let suffixCount = try Self.varint(raw, &p)
            return (shared, suffixCount, p)
        }
        guard shared == blockKey.count - wordEnd, suffixCount == 0 else {
            throw PostingBlocks.corrupt("starts with another primary key than its key's")
        }
        grow(to: shared)
        keyBuffer.withUnsafeMutableBytes { out in
            blockKey.withBytes { source in
                out.copyMemory(from: UnsafeRawBufferPointer(rebasing: source[wordEnd...]))
            }
        }
        keyCount = shared
        try checkLength()
        let end = try value.withBytes { raw in
            var p = restStart
            try Self.skipRest(raw, &p)
            return p
        }
        try finish(rest: restStart..<end)
    }

    private enum Scan {
        case found, ended
        /// The next key needs a buffer of this length; nothing was read.
        case needs(Int)
    }

    /// Reads postings after the first in one pass over the block's bytes until one is at least
    /// `target` (the first one read, without a target) or the block ends.
    ///
    /// Against a target it keeps how many leading bytes the current key shares with it, and
    /// whether the key is below it: a posting's key departs from the one before at its `shared`
    /// length with a greater byte, so a departure before the agreeing bytes end puts the new key
    /// above the target, one after puts it below, and only a departure right there needs a look
    /// at the bytes that follow.
    private mutating func scan(atLeast target: UnsafeRawBufferPointer?) throws -> Scan {
        var left = self.left, offset = self.offset, keyCount = self.keyCount
        var rest = self.rest
        defer {
            self.left = left
            self.offset = offset
            self.keyCount = keyCount
            self.rest = rest
        }
        let fixed = keyLength ?? -1
        return try value.withBytes { raw in
            try keyBuffer.withUnsafeMutableBytes { buffer in
                // (Neither is empty: a block holds at least its count, and the first posting's
                // key is at least a byte, `load` having checked the key has one.)
                guard let source = raw.baseAddress, let out = buffer.baseAddress else { throw PostingBlocks.corrupt("is empty") }
                let end = raw.count
                var agree = 0, below = true
                if let target { (agree, below) = Self.agreement(out, keyCount, target, from: 0) }
                while left > 0 {
                    var p = offset
                    let shared = try Self.varint(raw, &p)
                    let suffix = try Self.varint(raw, &p)
                    guard suffix <= end - p else { throw PostingBlocks.corrupt("has a posting whose key runs past its end") }
                    // The longest common prefix with the previous key, then a greater byte.
                    guard shared <= keyCount, suffix > 0,
                        shared == keyCount || source.load(fromByteOffset: p, as: UInt8.self) > out.load(fromByteOffset: shared, as: UInt8.self)
                    else { throw PostingBlocks.corrupt("holds primary keys out of order") }
                    if shared + suffix > buffer.count { return .needs(shared + suffix) }
                    if suffix == 1 {
                        out.storeBytes(of: source.load(fromByteOffset: p, as: UInt8.self), toByteOffset: shared, as: UInt8.self)
                    } else {
                        (out + shared).copyMemory(from: source + p, byteCount: suffix)
                    }
                    keyCount = shared + suffix
                    if fixed >= 0 && keyCount != fixed { throw Self.wrongLength(keyCount, fixed) }
                    p += suffix
                    let restStart = p
                    // (`skipRest`, written out over the pointer: through the buffer it measured
                    // 11% more instructions for a two-word search.)
                    try Self.skipVarints(1, source, end, &p)
                    let positions = try Self.varint(raw, &p)
                    guard positions <= end - p else { throw PostingBlocks.corrupt("has a posting whose positions run past its end") }
                    try Self.skipVarints(positions, source, end, &p)
                    rest = restStart..<p
                    offset = p
                    left -= 1
                    if left == 0 && offset != end { throw PostingBlocks.corrupt("has \(end - offset) bytes after its last posting") }
                    guard let target, below, shared >= agree else { return .found }
                    if shared > agree { continue }
                    (agree, below) = Self.agreement(out, keyCount, target, from: agree)
                    if !below { return .found }
                }
                return .ended
            }
        }
    }

    /// How many leading bytes `key` (`count` of them) shares with `target`, given that the first
    /// `from` agree, and whether it orders below it.
    @inline(__always)
    private static func agreement(_ key: UnsafeMutableRawPointer, _ count: Int, _ target: UnsafeRawBufferPointer, from: Int) -> (Int, Bool) {
        let n = min(count, target.count)
        var i = from
        while i < n {
            let a = key.load(fromByteOffset: i, as: UInt8.self), b = target[i]
            if a != b { return (i, a < b) }
            i += 1
        }
        return (n, count < target.count)
    }

    /// Moves `p` past `n` varints, by their last bytes.
    @inline(__always)
    private static func skipVarints(_ n: Int, _ source: UnsafeRawPointer, _ end: Int, _ p: inout Int) throws {
        var left = n
        while left > 0 {
            guard p < end else { throw PostingBlocks.corrupt("has a posting that runs past its end") }
            if source.load(fromByteOffset: p, as: UInt8.self) < 0x80 { left -= 1 }
            p += 1
        }
    }

    /// Makes the key buffer hold at least `length` bytes, keeping the current key.
    private mutating func grow(to length: Int) {
        if keyBuffer.count < length { keyBuffer.append(contentsOf: repeatElement(0, count: max(length, 2 * keyBuffer.count, 16) - keyBuffer.count)) }
    }

    private func checkLength() throws {
        if let keyLength, keyCount != keyLength { throw Self.wrongLength(keyCount, keyLength) }
    }

    private static func wrongLength(_ count: Int, _ fixed: Int) -> StrataError {
        PostingBlocks.corrupt("holds a primary key of \(count) bytes, where the model's keys have \(fixed)")
    }

    private mutating func finish(rest: Range<Int>) throws {
        self.rest = rest
        offset = rest.upperBound
        left -= 1
        if left == 0 && offset != value.count { throw PostingBlocks.corrupt("has \(value.count - offset) bytes after its last posting") }
    }

    /// A varint of the block at `p`, moving `p` past it; one byte is the common case.
    @inline(__always)
    private static func varint(_ raw: UnsafeRawBufferPointer, _ p: inout Int) throws -> Int {
        guard p < raw.count else { throw PostingBlocks.corrupt("has a posting that runs past its end") }
        let byte = raw[p]
        if byte < 0x80 {
            p += 1
            return Int(byte)
        }
        var reader = ByteReader(raw, offset: p)
        let value = try reader.varint()
        // (Checked against the key and the block by the callers; this only keeps it an Int.)
        guard value <= UInt64(Int32.max) else { throw PostingBlocks.corrupt("has a length larger than any block") }
        p = reader.offset
        return Int(value)
    }

    /// Moves `p` past a posting's word count and positions, by their varints' last bytes (high
    /// bit clear); `posting()` reads and checks them when they are wanted.
    private static func skipRest(_ raw: UnsafeRawBufferPointer, _ p: inout Int) throws {
        guard let source = raw.baseAddress else { throw PostingBlocks.corrupt("is empty") }
        try skipVarints(1, source, raw.count, &p)
        let n = try varint(raw, &p)
        guard n <= raw.count - p else { throw PostingBlocks.corrupt("has a posting whose positions run past its end") }
        try skipVarints(n, source, raw.count, &p)
    }

    /// The current posting's primary key against `target`: <0, 0, >0.
    func compareKey(_ target: [UInt8]) -> Int { target.withUnsafeBytes { compareKey($0) } }

    /// The current posting's primary key against `target`: <0, 0, >0.
    func compareKey(_ target: UnsafeRawBufferPointer) -> Int { withPrimaryKey { KeyEncoding.compare($0, target) } }

    /// The current posting's word count and positions.
    func posting() throws -> (words: Int, positions: [Int]) {
        try withRest { try TextPostingValue.read($0) }
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
        budget = PostingBlocks.budget(keyCount: reader.keyByteCount)
        reader.withPostingBytes { postings in
            reserve(postings.count)
            body.replaceSubrange(used..<(used + postings.count), with: postings)
            used += postings.count
        }
        firstKey = Array(reader.key[reader.wordEnd...])
        reader.withPrimaryKey { remember($0) }
        count = reader.count
    }

    /// Adds the posting `reader` is on.
    mutating func add(current reader: PostingBlockReader) {
        reader.withPrimaryKey { pk in reader.withRest { rest in add(primaryKey: pk, rest: rest) } }
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
