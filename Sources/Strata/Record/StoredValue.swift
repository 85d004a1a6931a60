import Foundation

/// A stored value read without its Swift type, from the schema in the file alone: what migrations
/// see of old records, and what `strata dump` prints.
public indirect enum StoredValue: Equatable, Sendable, CustomStringConvertible {
    case null
    case bool(Bool)
    case int(Int64)
    case uint(UInt64)
    case double(Double)
    case string(String)
    case data(Data)
    case date(Date)
    case uuid(UUID)
    case decimal(Decimal)
    case url(String)
    /// A reference: the target model and its key, as text.
    case reference(model: String, key: String)
    case array([StoredValue])
    /// A nested struct or a `[String: T]`, fields by name.
    case object([String: StoredValue])

    public var description: String { json }

    /// The value as JSON text (dates as ISO 8601, data as base64, keys sorted).
    public var json: String {
        switch self {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .int(let i): return String(i)
        case .uint(let u): return String(u)
        case .double(let d): return d.isFinite ? "\(d)" : "\"\(d)\""
        case .string(let s): return jsonString(s)
        case .data(let d): return jsonString(d.base64EncodedString())
        case .date(let d): return jsonString(d.formatted(.iso8601))
        case .uuid(let u): return jsonString(u.uuidString)
        case .decimal(let d): return d.description
        case .url(let u): return jsonString(u)
        case let .reference(_, key): return jsonString(key)
        case .array(let values): return "[" + values.map(\.json).joined(separator: ",") + "]"
        case .object(let fields):
            return "{" + fields.sorted { $0.key < $1.key }.map { jsonString($0.key) + ":" + $0.value.json }.joined(separator: ",") + "}"
        }
    }

    /// Convenience accessors for migrations.
    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    public var intValue: Int64? {
        switch self {
        case .int(let i): return i
        case .uint(let u): return Int64(exactly: u)
        default: return nil
        }
    }
    public var doubleValue: Double? {
        switch self {
        case .double(let d): return d
        case .int(let i): return Double(i)
        case .uint(let u): return Double(u)
        default: return nil
        }
    }
    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }
    public subscript(field: String) -> StoredValue? { if case .object(let f) = self { return f[field] } else { return nil } }
}

func jsonString(_ s: String) -> String {
    var out = "\""
    for scalar in s.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        default:
            if scalar.value < 0x20 {
                out += String(format: "\\u%04x", scalar.value)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out + "\""
}

enum UntypedDecoding {
    /// Decodes a record into field values by name, following the stored schema. Removed fields are
    /// included (under their old names) when `includeRemoved`.
    static func decode(_ bytes: UnsafeRawBufferPointer, schema: ObjectSchema, includeRemoved: Bool = false) throws -> [String: StoredValue] {
        let table = try FieldTable(bytes)
        var result: [String: StoredValue] = [:]
        for field in schema.fields where includeRemoved || !field.removed {
            guard let entry = table.entries.first(where: { $0.id == field.id }) else { continue }
            if entry.isNil {
                result[field.name] = .null
                continue
            }
            result[field.name] = try value(UnsafeRawBufferPointer(rebasing: bytes[entry.start..<entry.end]), type: field.type)
        }
        return result
    }

    static func value(_ bytes: UnsafeRawBufferPointer, type: FieldType) throws -> StoredValue {
        func fixed(_ count: Int) throws -> UInt64 { try fixedWidthValue(bytes, count: count, place: "\(type) value") }
        switch type {
        case .optional(let inner): return try value(bytes, type: inner)
        case .bool: return .bool(try fixed(1) != 0)
        case .int(_, let signed):
            var reader = ByteReader(bytes)
            let raw = try reader.varint()
            return signed ? .int(unzigzag(raw)) : .uint(raw)
        case .double: return .double(Double(bitPattern: try fixed(8)))
        case .float: return .double(Double(Float(bitPattern: UInt32(try fixed(4)))))
        case .string: return .string(String(decoding: bytes, as: UTF8.self))
        case .data: return .data(Data(bytes))
        case .date: return .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: try fixed(8))))
        case .uuid:
            guard bytes.count == 16 else { throw StrataError.corruptRecord("UUID of \(bytes.count) bytes") }
            var uuid = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)).uuid
            withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: bytes) }
            return .uuid(UUID(uuid: uuid))
        case .decimal: return .decimal(Decimal(string: String(decoding: bytes, as: UTF8.self), locale: Locale(identifier: "en_US_POSIX")) ?? 0)
        case .url: return .url(String(decoding: bytes, as: UTF8.self))
        case .enumeration(let raw): return try value(bytes, type: raw)
        case .reference(let model): return .reference(model: model, key: describeKey(bytes))
        case .object(let schema): return .object(try decode(bytes, schema: schema))
        case .array(let element):
            return .array(try CollectionLayout.readArray(bytes).map { $0.isNil ? .null : try value($0.bytes, type: element) })
        case .dictionary(let element):
            var fields: [String: StoredValue] = [:]
            for entry in try CollectionLayout.readDictionary(bytes) {
                fields[entry.key] = entry.isNil ? .null : try value(entry.bytes, type: element)
            }
            return .object(fields)
        }
    }

    /// A primary key's encoding as text, decoded when it is one of the common key types.
    static func describeKey(_ bytes: UnsafeRawBufferPointer) -> String {
        var body = bytes
        if bytes.count == 9, bytes[0] == 1 { body = UnsafeRawBufferPointer(rebasing: bytes[1...]) }
        if body.count == 8, let i = KeyEncoding.decode(Int64.self, from: body) { return String(i) }
        if let s = KeyEncoding.decode(String.self, from: bytes) { return s }
        if bytes.count == 16, let u = KeyEncoding.decode(UUID.self, from: bytes) { return u.uuidString }
        return "0x" + bytes.map { String(format: "%02x", $0) }.joined()
    }
}
