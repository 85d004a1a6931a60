import Foundation

/// The index keys of a record, computed from its bytes and the stored schema alone: what an index
/// on a field path holds for the object. Every write computes its index entries so
/// (IndexEntries), and `strata check` proves every index entry matches its record.
///
/// The encoding of a value at a path (FORMAT.md §8.1, §8.3): a nil leaf, or a nil reached on the
/// way, is `0x00`; an optional leaf's value is `0x01` then its encoding; any other value its
/// encoding alone. An array gives one key per element (none when empty). With `tagged` (an index
/// of kind `taggedValues`), a value reached through an optional struct is
/// encoded as the optional Swift reads it (`0x01` then its encoding), and an array that is nil, or
/// under a nil, gives no key: otherwise a nil on the way and a present value could share a key.
enum RecordIndexKeys {
    static func values(_ record: UnsafeRawBufferPointer, schema: ObjectSchema, path: String, tagged: Bool) throws -> [[UInt8]] {
        let parts = path.split(separator: ".").map(String.init)
        var schema = schema
        var current = record
        var throughOptional = false
        for (i, part) in parts.enumerated() {
            guard let field = schema.field(named: part) else {
                throw StrataError.corruptRecord("the schema has no field \(part) for the index on \(path)")
            }
            guard let (bytes, isNil) = try RecordField.find(field.id, in: current), !isNil else {
                if tagged, case .array = schema.type(atPath: parts[i...].joined(separator: "."))?.unwrapped { return [] }
                return [[0]]
            }
            if i < parts.count - 1 {
                guard case .object(let nested) = field.type.unwrapped else {
                    throw StrataError.corruptRecord("\(part) is not a struct, but the index on \(path) reaches into it")
                }
                throughOptional = throughOptional || field.type.isOptional
                schema = nested
                current = bytes
                continue
            }
            if case .array(let element) = field.type.unwrapped {
                return try CollectionLayout.readArray(bytes).map { item in
                    if item.isNil { return [0] }
                    return try encoded(item.bytes, as: element)
                }
            }
            var out: [UInt8] = tagged && throughOptional && !field.type.isOptional ? [1] : []
            try append(bytes, as: field.type, to: &out)
            return [out]
        }
        return [[0]]
    }

    /// The key encoding of a present value stored as `type`.
    static func encoded(_ bytes: UnsafeRawBufferPointer, as type: FieldType) throws -> [UInt8] {
        var out: [UInt8] = []
        try append(bytes, as: type, to: &out)
        return out
    }

    /// Appends the key encoding of a present value stored as `type`.
    static func append(_ bytes: UnsafeRawBufferPointer, as type: FieldType, to out: inout [UInt8]) throws {
        func fixed(_ count: Int) throws -> UInt64 { try fixedWidthValue(bytes, count: count, place: "\(type) value") }
        switch type {
        case .optional(let inner):
            out.append(1)
            try append(bytes, as: inner, to: &out)
        case .bool: out.append(try fixed(1) != 0 ? 1 : 0)
        case .int(let bits, let signed):
            let raw = try storedInteger(bytes, bits: bits, signed: signed)
            if signed { KeyEncoding.appendInt(Int64(bitPattern: raw), to: &out) } else { KeyEncoding.appendUInt(raw, to: &out) }
        case .double, .date: KeyEncoding.appendDouble(Double(bitPattern: try fixed(8)), to: &out)
        case .float: KeyEncoding.appendDouble(Double(Float(bitPattern: UInt32(try fixed(4)))), to: &out)
        case .string: KeyEncoding.appendBytes(KeyEncoding.normalized(String(decoding: bytes, as: UTF8.self)).utf8, to: &out)
        case .url, .data: KeyEncoding.appendBytes(bytes, to: &out)
        case .uuid:
            guard bytes.count == 16 else { throw StrataError.corruptRecord("UUID of \(bytes.count) bytes") }
            out.append(contentsOf: bytes)
        case .decimal:
            let text = String(decoding: bytes, as: UTF8.self)
            guard let decimal = PrimitiveLayout.decimal(text: text) else {
                throw StrataError.corruptRecord("Decimal \(quotedForError(text)) does not parse")
            }
            KeyEncoding.appendDouble(NSDecimalNumber(decimal: decimal).doubleValue, to: &out)
        case .enumeration(let raw): try append(bytes, as: raw, to: &out)
        case .reference: out.append(contentsOf: bytes)  // stored as the target's key encoding
        case .array, .dictionary, .object:
            throw StrataError.corruptRecord("a \(type) value cannot be an index key")
        }
    }
}
