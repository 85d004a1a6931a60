/// Reads one field of an encoded record without decoding the rest, and without allocating.
enum RecordField {
    /// The bytes of field `id` and whether it is a stored nil; nil when the record lacks it.
    static func find(_ id: Int, in record: UnsafeRawBufferPointer) throws -> (UnsafeRawBufferPointer, Bool)? {
        var reader = ByteReader(record)
        let count = try reader.varint()
        guard count <= UInt64(record.count) else { throw StrataError.corruptRecord("field count \(count) exceeds the record size") }
        var valueOffset = 0
        var found: (offset: Int, length: Int, isNil: Bool)?
        // A negative id (never in a checked schema) becomes a value above any `header >> 1`, so
        // it is a field no record has rather than a trap.
        let wanted = UInt64(truncatingIfNeeded: id)
        for _ in 0..<Int(count) {
            let header = try reader.varint()
            let length = try reader.length()
            if found == nil && header >> 1 == wanted { found = (valueOffset, length, header & 1 == 1) }
            valueOffset += length
        }
        guard let found else { return nil }
        let start = reader.offset + found.offset
        guard start + found.length <= record.count else { throw StrataError.corruptRecord("field \(id) runs past the end of the record") }
        return (UnsafeRawBufferPointer(rebasing: record[start..<(start + found.length)]), found.isNil)
    }
}
