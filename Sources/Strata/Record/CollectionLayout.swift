// Arrays, sets and `[String: T]` inside a record (FORMAT.md §8), written and read in one place:
//
//   array/set:     varint count, count × (varint (length << 1 | isNil), bytes)
//   [String: T]:   varint count, count × (varint keyLength, key, varint (length << 1 | isNil), bytes)

enum CollectionLayout {
    /// Where an encoded element's bytes are in the buffer holding them all (`ElementWriter`).
    struct Span {
        var isNil: Bool
        var start: Int
        var end: Int
    }

    /// Appends an array of encoded elements (in the order given: sets sort theirs first).
    static func appendArray<C: Collection>(_ elements: C, to out: inout [UInt8]) where C.Element == (isNil: Bool, bytes: [UInt8]) {
        appendVarint(UInt64(elements.count), to: &out)
        for e in elements { e.bytes.withUnsafeBufferPointer { appendElement(isNil: e.isNil, $0, to: &out) } }
    }

    /// Appends an array of elements encoded into one buffer, `spans` giving each one's bytes in
    /// `body`, in the order given.
    static func appendArray(_ body: [UInt8], _ spans: [Span], to out: inout [UInt8]) {
        appendVarint(UInt64(spans.count), to: &out)
        body.withUnsafeBufferPointer { body in
            for span in spans { appendElement(isNil: span.isNil, UnsafeBufferPointer(rebasing: body[span.start..<span.end]), to: &out) }
        }
    }

    @inline(__always)
    private static func appendElement(isNil: Bool, _ bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        appendVarint(UInt64(bytes.count) << 1 | (isNil ? 1 : 0), to: &out)
        out.append(contentsOf: bytes)
    }

    /// Appends an array of strings laid out as `appendArray` lays out their UTF-8 bytes, without
    /// an array of encoded elements in between.
    static func appendStrings(_ strings: [String], to out: inout [UInt8]) {
        appendVarint(UInt64(strings.count), to: &out)
        for var string in strings {
            string.withUTF8 { utf8 in
                appendVarint(UInt64(utf8.count) << 1, to: &out)
                out.append(contentsOf: utf8)
            }
        }
    }

    /// Appends a dictionary of encoded values, sorted by key bytes so that equal dictionaries give
    /// equal records.
    static func appendDictionary(_ entries: [(key: String, isNil: Bool, bytes: [UInt8])], to out: inout [UInt8]) {
        let sorted = entries.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        appendVarint(UInt64(sorted.count), to: &out)
        for e in sorted { e.bytes.withUnsafeBufferPointer { appendEntry(e.key, isNil: e.isNil, $0, to: &out) } }
    }

    /// Appends a dictionary whose values were encoded into one buffer: `keys[i]`'s value is
    /// `spans[i]` of `body`. Sorted by key bytes, as above.
    static func appendDictionary(_ keys: [String], _ body: [UInt8], _ spans: [Span], to out: inout [UInt8]) {
        let order = keys.indices.sorted { keys[$0].utf8.lexicographicallyPrecedes(keys[$1].utf8) }
        appendVarint(UInt64(order.count), to: &out)
        body.withUnsafeBufferPointer { body in
            for i in order {
                appendEntry(keys[i], isNil: spans[i].isNil, UnsafeBufferPointer(rebasing: body[spans[i].start..<spans[i].end]), to: &out)
            }
        }
    }

    @inline(__always)
    private static func appendEntry(_ key: String, isNil: Bool, _ bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        appendVarint(UInt64(key.utf8.count), to: &out)
        out.append(contentsOf: key.utf8)
        appendElement(isNil: isNil, bytes, to: &out)
    }

    /// The elements of an encoded array, as views into `bytes`. Lengths are checked: a corrupt
    /// record throws.
    static func readArray(_ bytes: UnsafeRawBufferPointer) throws -> [(isNil: Bool, bytes: UnsafeRawBufferPointer)] {
        var reader = ByteReader(bytes)
        let count = try reader.varint()
        guard count <= UInt64(bytes.count) else { throw StrataError.corruptRecord("array count \(count) exceeds its bytes") }
        var items: [(isNil: Bool, bytes: UnsafeRawBufferPointer)] = []
        items.reserveCapacity(Int(count))
        for _ in 0..<Int(count) {
            let header = try reader.varint()
            guard header >> 1 <= UInt64(bytes.count) else { throw StrataError.corruptRecord("array element runs past its bytes") }
            items.append((header & 1 == 1, try reader.take(Int(header >> 1))))
        }
        return items
    }

    /// The entries of an encoded dictionary, in stored order, values as views into `bytes`.
    static func readDictionary(_ bytes: UnsafeRawBufferPointer) throws -> [(key: String, isNil: Bool, bytes: UnsafeRawBufferPointer)] {
        var reader = ByteReader(bytes)
        let count = try reader.varint()
        guard count <= UInt64(bytes.count) else { throw StrataError.corruptRecord("dictionary count \(count) exceeds its bytes") }
        var entries: [(key: String, isNil: Bool, bytes: UnsafeRawBufferPointer)] = []
        for _ in 0..<Int(count) {
            let key = String(decoding: try reader.take(try reader.length()), as: UTF8.self)
            let header = try reader.varint()
            guard header >> 1 <= UInt64(bytes.count) else { throw StrataError.corruptRecord("dictionary value runs past its bytes") }
            entries.append((key, header & 1 == 1, try reader.take(Int(header >> 1))))
        }
        return entries
    }
}
