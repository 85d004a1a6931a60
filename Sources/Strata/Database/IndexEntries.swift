import Foundation

/// One entry of an index tree: its key, then its value, in one array. A write builds an entry
/// per index and per word of a text for every object, so two arrays each would double the
/// allocations of the write path, and the entries of a text's words share one array (a message
/// of ten words made ten arrays).
struct IndexPair: Hashable {
    private let storage: [UInt8]
    private let start: Int
    private let keyEnd: Int
    private let end: Int

    /// An entry of `bytes`' first `keyCount` bytes as its key and the rest as its value.
    init(bytes: [UInt8], keyCount: Int) {
        self.init(sharing: bytes, start: 0, keyEnd: keyCount, end: bytes.count)
    }

    /// The entry at `start..<end` of `storage`, its key ending at `keyEnd`.
    init(sharing storage: [UInt8], start: Int, keyEnd: Int, end: Int) {
        self.storage = storage
        self.start = start
        self.keyEnd = keyEnd
        self.end = end
    }

    var key: ArraySlice<UInt8> { storage[start..<keyEnd] }
    var value: ArraySlice<UInt8> { storage[keyEnd..<end] }

    func withKey<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[start..<keyEnd])) }
    }

    func withKeyAndValue<R>(_ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes {
            try body(UnsafeRawBufferPointer(rebasing: $0[start..<keyEnd]), UnsafeRawBufferPointer(rebasing: $0[keyEnd..<end]))
        }
    }

    // Equal entries: equal keys and equal values, wherever they sit in their arrays.
    static func == (a: IndexPair, b: IndexPair) -> Bool {
        a.keyEnd - a.start == b.keyEnd - b.start && a.storage[a.start..<a.end].elementsEqual(b.storage[b.start..<b.end])
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(keyEnd - start)
        storage.withUnsafeBytes { hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: $0[start..<end])) }
    }
}

/// An index resolved against the stored schema once per model, for the write path: an index whose
/// fields are all top-level and not arrays (plain, compound and collated: most indexes) is then
/// read from a record by field ids, with no path to split, no name to look up and no set of
/// combinations to build per object. A class: the write path reads a model's plans
/// on every write, and copying a struct of strings and indirect enums costs more reference
/// counting than the lookup it saves.
final class IndexEntryPlan: Sendable {
    let index: IndexSchema
    /// The indexed fields' ids, stored types and collations (for a string under the index's
    /// collation), in index order, for such an index; nil: `IndexEntries.entries`.
    let direct: [(id: Int, type: FieldType, collation: StringCollation?)]?
    /// The text field's id, for a full-text index on a top-level field.
    let textField: Int?

    init(index: IndexSchema, schema: ObjectSchema) {
        self.index = index
        textField = index.isFullText && !index.path.isNestedPath ? schema.field(named: index.path)?.id : nil
        guard index.kind == nil else {
            direct = nil
            return
        }
        var fields: [(id: Int, type: FieldType, collation: StringCollation?)] = []
        for path in index.paths {
            guard !path.isNestedPath, let field = schema.field(named: path) else { break }
            if case .array = field.type.unwrapped { break }
            fields.append((field.id, field.type, field.type.unwrapped == .string ? index.collation : nil))
        }
        direct = fields.count == index.paths.count ? fields : nil
    }
}

/// The entries an index holds for one record, computed from the record's bytes and the stored
/// schema alone (FORMAT.md §8): what every write puts in every index, and what `strata check`
/// expects of it.
enum IndexEntries {
    /// `entries(_:schema:index:primaryKey:)` through a plan: the same entries.
    static func entries(
        _ record: UnsafeRawBufferPointer, schema: ObjectSchema, plan: IndexEntryPlan, primaryKey: [UInt8]
    ) throws -> (pairs: [IndexPair], words: Int) {
        if let textField = plan.textField {
            guard let (bytes, isNil) = try RecordField.find(textField, in: record), !isNil else { return ([], 0) }
            let words = WordTokenizer.wordList(utf8: bytes)
            return (TextPostingValue.pairs(words: words, primaryKey: primaryKey), words.count)
        }
        guard let direct = plan.direct else { return try entries(record, schema: schema, index: plan.index, primaryKey: primaryKey) }
        // `fieldValues` for each top-level field (its encoding or collation key, or 0x00 for nil
        // or absent), one after another: the one combination `entries` would build.
        var key: [UInt8] = []
        key.reserveCapacity(24 * direct.count + 2 * primaryKey.count + 2)
        for field in direct {
            if let (bytes, isNil) = try RecordField.find(field.id, in: record), !isNil {
                if let collation = field.collation {
                    if field.type.isOptional { key.append(1) }
                    collation.appendEncodedKey(utf8: bytes, to: &key)
                } else {
                    try RecordIndexKeys.append(bytes, as: field.type, to: &key)
                }
            } else {
                key.append(0)
            }
        }
        if !plan.index.unique { key.append(contentsOf: primaryKey) }
        let keyCount = key.count
        IndexEntry.appendValue(primaryKey: primaryKey, unique: plan.index.unique, to: &key)
        return ([IndexPair(bytes: key, keyCount: keyCount)], 0)
    }

    /// The entries of `index` for `record`, and the number of words the record's text has (full
    /// text; 0 otherwise).
    static func entries(
        _ record: UnsafeRawBufferPointer, schema: ObjectSchema, index: IndexSchema,
        primaryKey: [UInt8]
    ) throws -> (pairs: [IndexPair], words: Int) {
        if index.isFullText {
            guard case .present(let bytes, _) = try leaf(record, schema: schema, path: index.path) else { return ([], 0) }
            let words = WordTokenizer.wordList(utf8: bytes)
            return (TextPostingValue.pairs(words: words, primaryKey: primaryKey), words.count)
        }
        // One list of encodings per field (an array field gives one per element), combined.
        var combined: [[UInt8]] = [[]]
        for path in index.paths {
            let values = try fieldValues(record, schema: schema, path: path, collation: index.collation, tagged: index.isTagged)
            var next: [[UInt8]] = []
            next.reserveCapacity(combined.count * values.count)
            for prefix in combined { for value in values { next.append(prefix + value) } }
            combined = next
        }
        var seen = Set<ByteKey>()
        var pairs: [IndexPair] = []
        for value in combined where seen.insert(ByteKey(value)).inserted {
            var bytes = value
            if !index.unique { bytes += primaryKey }
            let keyCount = bytes.count
            IndexEntry.appendValue(primaryKey: primaryKey, unique: index.unique, to: &bytes)
            pairs.append(IndexPair(bytes: bytes, keyCount: keyCount))
        }
        return (pairs, 0)
    }

    /// The encodings of the value at `path` as an index holds it: RecordIndexKeys, except that a
    /// string under a collation is encoded by its collation key (nil still 0x00, a present
    /// optional 0x01 then the key; with `tagged`, a string reached through an optional as well).
    static func fieldValues(
        _ record: UnsafeRawBufferPointer, schema: ObjectSchema, path: String,
        collation: StringCollation?, tagged: Bool
    ) throws -> [[UInt8]] {
        guard let collation, schema.type(atPath: path)?.unwrapped == .string else {
            return try RecordIndexKeys.values(record, schema: schema, path: path, tagged: tagged)
        }
        switch try leaf(record, schema: schema, path: path) {
        case .absent: return [[0]]
        case let .present(bytes, type):
            var out: [UInt8] = type.isOptional || (tagged && schema.nilNeedsTag(atPath: path)) ? [1] : []
            collation.appendEncodedKey(utf8: bytes, to: &out)
            return [out]
        }
    }

    enum Leaf {
        /// Nil, missing, or under a nil struct.
        case absent
        case present(UnsafeRawBufferPointer, FieldType)
    }

    /// The stored bytes of the field at a dotted path.
    static func leaf(_ record: UnsafeRawBufferPointer, schema: ObjectSchema, path: String) throws -> Leaf {
        var schema = schema
        var current = record
        let parts = path.split(separator: ".")
        for (i, part) in parts.enumerated() {
            guard let field = schema.field(named: String(part)) else {
                throw StrataError.corruptRecord("the schema has no field \(part) for the index on \(path)")
            }
            guard let (bytes, isNil) = try RecordField.find(field.id, in: current), !isNil else { return .absent }
            if i == parts.count - 1 { return .present(bytes, field.type) }
            guard case .object(let nested) = field.type.unwrapped else {
                throw StrataError.corruptRecord("\(part) is not a struct, but the index on \(path) reaches into it")
            }
            schema = nested
            current = bytes
        }
        return .absent
    }
}

/// A full-text posting (FORMAT.md §8.5) as a write carries it: the key is a word's key encoding
/// then the primary key; the value is the primary key's length, the text's word count, and the
/// word's positions. The index keeps a word's postings in blocks (`PostingBlocks`), into which
/// `PostingMerge` puts these.
enum TextPostingValue {
    /// The entries of a text with these words, one per distinct word, in word order.
    ///
    /// Equal words are grouped by sorting their positions by (word, position), not through a
    /// dictionary keyed by the words: hashing a byte array feeds every byte through `Hasher`, and
    /// that was the largest single cost of indexing a text. Every entry is written into one
    /// array sized once for the most the text can need (each word's bytes twice, for 0x00
    /// escapes; its key's terminator, the primary key, and four varints of at most ten bytes):
    /// growing arrays, a positions array per word and a copy per append cost more than the rest.
    static func pairs(words: WordList, primaryKey: [UInt8]) -> [IndexPair] {
        let n = words.count
        if n == 0 { return [] }
        let order = sortedWords(words)
        // Where each distinct word's entry starts and its key ends, then the end of everything.
        var marks: [Int] = []
        marks.reserveCapacity(2 * n + 1)
        let bound = 2 * words.bytes.count + n * (2 + primaryKey.count + 40)
        let all = [UInt8](unsafeUninitializedCapacity: bound) { out, initialized in
            guard let base = out.baseAddress else { return }
            var p = base
            words.bytes.withUnsafeBytes { bytes in
                var i = 0
                while i < n {
                    let word = UnsafeRawBufferPointer(rebasing: bytes[words.range(order[i].index)])
                    var j = i + 1
                    while j < n, order[j].prefix == order[i].prefix,
                        KeyEncoding.compare(UnsafeRawBufferPointer(rebasing: bytes[words.range(order[j].index)]), word) == 0
                    {
                        j += 1
                    }
                    marks.append(p - base)
                    // The word's key encoding (KeyEncoding.appendBytes): 0x00 escaped, then 0x00 0x00.
                    for b in word {
                        p.pointee = b
                        p += 1
                        if b == 0 {
                            p.pointee = 0xFF
                            p += 1
                        }
                    }
                    p[0] = 0
                    p[1] = 0
                    p += 2
                    p.update(from: primaryKey, count: primaryKey.count)
                    p += primaryKey.count
                    marks.append(p - base)
                    // The value: the word's positions are `order`'s indices i..<j.
                    storeVarint(UInt64(primaryKey.count), at: &p)
                    storeVarint(UInt64(n), at: &p)
                    storeVarint(UInt64(j - i), at: &p)
                    var last = 0
                    for k in i..<j {
                        storeVarint(UInt64(order[k].index - last), at: &p)
                        last = order[k].index
                    }
                    i = j
                }
            }
            initialized = p - base
        }
        marks.append(all.count)
        var pairs: [IndexPair] = []
        pairs.reserveCapacity(marks.count / 2)
        for k in stride(from: 0, to: marks.count - 1, by: 2) {
            pairs.append(IndexPair(sharing: all, start: marks[k], keyEnd: marks[k + 1], end: marks[k + 2]))
        }
        return pairs
    }

    /// The words' indices ordered by (word, index). Most words differ in their first eight bytes:
    /// compared as one big-endian integer (zero-padded, and a word holds no 0x00, so a shorter word
    /// still sorts first), they are ordered without a call per comparison.
    private static func sortedWords(_ words: WordList) -> [(prefix: UInt64, index: Int)] {
        words.bytes.withUnsafeBytes { bytes in
            func word(_ i: Int) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: bytes[words.range(i)]) }
            func prefix(_ word: UnsafeRawBufferPointer) -> UInt64 {
                var value: UInt64 = 0
                for k in 0..<8 { value = value << 8 | (k < word.count ? UInt64(word[k]) : 0) }
                return value
            }
            func less(_ a: (prefix: UInt64, index: Int), _ b: (prefix: UInt64, index: Int)) -> Bool {
                if a.prefix != b.prefix { return a.prefix < b.prefix }
                let c = KeyEncoding.compare(word(a.index), word(b.index))
                return c != 0 ? c < 0 : a.index < b.index
            }
            var order: [(prefix: UInt64, index: Int)] = []
            order.reserveCapacity(words.count)
            for i in 0..<words.count { order.append((prefix(word(i)), i)) }
            guard order.count <= 32 else {
                order.sort(by: less)
                return order
            }
            // Most texts are short: an insertion sort in place, without the library sort's closure calls.
            order.withUnsafeMutableBufferPointer { order in
                for i in 1..<max(1, order.count) {
                    let item = order[i]
                    var j = i
                    while j > 0 && less(item, order[j - 1]) {
                        order[j] = order[j - 1]
                        j -= 1
                    }
                    order[j] = item
                }
            }
            return order
        }
    }

    /// A posting's word count and positions read back: a value's bytes after the primary key's
    /// length (`pairs`), as a block keeps them (`PostingBlockReader.rest`).
    static func read(_ rest: UnsafeRawBufferPointer) throws -> (words: Int, positions: [Int]) {
        let value = rest
        var reader = ByteReader(value)
        let words = try reader.varint()
        let count = try reader.varint()
        guard count <= UInt64(value.count), words <= UInt64(Int32.max) else { throw StrataError.corruptRecord("a full-text entry's counts exceed its size") }
        var positions: [Int] = []
        positions.reserveCapacity(Int(count))
        var last: UInt64 = 0
        for _ in 0..<Int(count) {
            let delta = try reader.varint()
            guard delta <= UInt64(Int32.max) else { throw StrataError.corruptRecord("a full-text position is out of range") }
            last += delta
            positions.append(Int(last))
        }
        guard last <= words else { throw StrataError.corruptRecord("a full-text position lies past the text's words") }
        return (Int(words), positions)
    }

    /// The key of the statistics entry of a full-text index: one 0x00 byte, which no word's key
    /// starts with (words are never empty and never contain U+0000).
    static let statsKey: [UInt8] = [0]

    /// The statistics value: the number of texts with at least one word, and their words in all.
    static func stats(documents: Int, words: Int) -> [UInt8] {
        var out: [UInt8] = []
        appendVarint(UInt64(max(0, documents)), to: &out)
        appendVarint(UInt64(max(0, words)), to: &out)
        return out
    }

    static func readStats(_ value: UnsafeRawBufferPointer?) throws -> (documents: Int, words: Int) {
        guard let value else { return (0, 0) }
        var reader = ByteReader(value)
        let documents = try reader.varint(), words = try reader.varint()
        guard documents <= UInt64(Int.max / 2), words <= UInt64(Int.max / 2) else { throw StrataError.corruptRecord("full-text statistics out of range") }
        return (Int(documents), Int(words))
    }
}
