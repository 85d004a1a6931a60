/// Rewrites one field of an encoded record, leaving the others' bytes untouched.
enum RecordPatch {
    static func setting(_ field: FieldSchema, to value: Any, in record: [UInt8], model: String) throws -> [UInt8] {
        var fields = RecordFields()
        try record.withUnsafeBytes { bytes in
            let table = try FieldTable(bytes)
            for entry in table.entries where entry.id != field.id {
                fields.entries.append((entry.id, entry.isNil, Array(bytes[entry.start..<entry.end])))
            }
        }
        var encoded: [UInt8] = []
        try RecordEncoding.encodeValue(value, as: field.type, into: &encoded, context: EncodingContext(model: model, path: [field.name]))
        fields.entries.append((field.id, false, encoded))
        var out: [UInt8] = []
        fields.serialize(into: &out)
        return out
    }
}
