/// Rewrites one field of an encoded record, leaving the others' bytes untouched.
enum RecordPatch {
    static func setting(_ field: FieldSchema, to value: Any, in record: [UInt8], model: String) throws -> [UInt8] {
        var fields = RecordFields()
        try record.withUnsafeBytes { bytes in
            let table = try FieldTable(bytes)
            for entry in table.entries where entry.id != field.id {
                fields.append(id: entry.id, isNil: entry.isNil, bytes: bytes[entry.start..<entry.end])
            }
        }
        var encoded: [UInt8] = []
        try RecordEncoding.encodeValue(value, as: field.type, into: &encoded, context: EncodingContext(model: model, path: [field.name]))
        fields.append(id: field.id, isNil: false, bytes: encoded)
        var out: [UInt8] = []
        fields.serialize(into: &out)
        return out
    }
}
