// Arrays, sets and `[String: T]` inside a record (FORMAT.md §8), written and read in one place:
//
//   array/set:     varint count, count × (varint (length << 1 | isNil), bytes)
//   [String: T]:   varint count, count × (varint keyLength, key, varint (length << 1 | isNil), bytes)

enum CollectionLayout {
    /// Appends an array of encoded elements (in the order given: sets sort theirs first).
    static func appendArray<C: Collection>(_ elements: C, to out: inout [UInt8]) where C.Element == (isNil: Bool, bytes: [UInt8]) {
        appendVarint(UInt64(elements.count), to: &out)
        for e in elements {
            appendVarint(UInt64(e.bytes.count) << 1 | (e.isNil ? 1 : 0), to: &out)
            out.append(contentsOf: e.bytes)
        }
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
        for e in sorted {
            appendVarint(UInt64(e.key.utf8.count), to: &out)
            out.append(contentsOf: e.key.utf8)
            appendVarint(UInt64(e.bytes.count) << 1 | (e.isNil ? 1 : 0), to: &out)
            out.append(contentsOf: e.bytes)
        }
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
