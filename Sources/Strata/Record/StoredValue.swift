import Foundation

/// A stored value read without its Swift type, from the schema in the file alone: what migrations
/// see of old records, and what `strata dump` prints.
///
/// ```swift
/// try StoredObjects.forEach(in: db.store, model: "Person") { key, fields in
///     print(key, fields["name"]?.stringValue ?? "-")
///     return true
/// }
/// ```
public indirect enum StoredValue: Equatable, Sendable, CustomStringConvertible {
    /// A nil optional, or a JSON `null`.
    case null
    /// A `Bool`.
    case bool(Bool)
    /// A signed integer, of any width.
    case int(Int64)
    /// An unsigned integer, of any width.
    case uint(UInt64)
    /// A `Double` or a `Float`.
    case double(Double)
    /// A `String`, or the raw value of a string enum.
    case string(String)
    /// A `Data`.
    case data(Data)
    /// A `Date`.
    case date(Date)
    /// A `UUID`.
    case uuid(UUID)
    /// A `Decimal`.
    case decimal(Decimal)
    /// A `URL`, as its absolute string.
    case url(String)
    /// A reference: the target model and its primary key, read as the target's stored key type.
    case reference(model: String, key: StoredValue)
    /// An array or a set, elements in stored order.
    case array([StoredValue])
    /// A nested struct or a `[String: T]`, fields by name.
    case object([String: StoredValue])

    public var description: String { json }

    /// The value as JSON text: dates as exact ISO 8601 (every fraction digit), data as base64,
    /// non-finite numbers as quoted text ("nan", "inf", "-inf"), object keys sorted.
    ///
    /// ```swift
    /// print(StoredValue.object(["name": .string("Ana"), "age": .int(31)]).json)   // {"age":31,"name":"Ana"}
    /// ```
    public var json: String {
        switch self {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .int(let i): return String(i)
        case .uint(let u): return String(u)
        // Every NaN as "nan" (Swift prints a negative or signalling one "-nan", "snan", which
        // `decode` would not read back).
        case .double(let d): return d.isFinite ? "\(d)" : d.isNaN ? "\"nan\"" : "\"\(d)\""
        case .string(let s): return jsonString(s)
        case .data(let d): return jsonString(d.base64EncodedString())
        case .date(let d):
            // Exact ISO 8601 (all the fraction digits a Date has); a date that is not a finite
            // number of seconds has no such text, and is written as its number, quoted like a
            // non-finite Double.
            let seconds = d.timeIntervalSinceReferenceDate
            return jsonString(ISO8601.format(d) ?? (seconds.isNaN ? "nan" : "\(seconds)"))
        case .uuid(let u): return jsonString(u.uuidString)
        case .decimal(let d): return d.description
        case .url(let u): return jsonString(u)
        case let .reference(_, key): return key.json
        case .array(let values): return "[" + values.map(\.json).joined(separator: ",") + "]"
        case .object(let fields):
            return "{" + fields.sorted { $0.key < $1.key }.map { jsonString($0.key) + ":" + $0.value.json }.joined(separator: ",") + "}"
        }
    }

    /// The text of a string value; nil for any other kind. Like the other accessors, it spares a
    /// migration a `switch`:
    ///
    /// ```swift
    /// let name = old["name"]?.stringValue ?? ""
    /// let age = old["age"]?.intValue ?? 0
    /// ```
    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    /// The value of an integer that fits in `Int64`; nil for any other kind.
    ///
    /// ```swift
    /// let age = old["age"]?.intValue ?? 0   // an Int64, whatever width the field had
    /// ```
    public var intValue: Int64? {
        switch self {
        case .int(let i): return i
        case .uint(let u): return Int64(exactly: u)
        default: return nil
        }
    }
    /// The value of a floating-point number, or of an integer as the nearest `Double`.
    ///
    /// ```swift
    /// let score = old["score"]?.doubleValue ?? 0
    /// ```
    public var doubleValue: Double? {
        switch self {
        case .double(let d): return d
        case .int(let i): return Double(i)
        case .uint(let u): return Double(u)
        default: return nil
        }
    }
    /// The value of a `Bool`.
    ///
    /// ```swift
    /// let done = old["done"]?.boolValue ?? false
    /// ```
    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }
    /// The value of a `Date`.
    ///
    /// ```swift
    /// let joined = old["joined"]?.dateValue ?? .distantPast
    /// ```
    public var dateValue: Date? { if case .date(let d) = self { return d } else { return nil } }
    /// The bytes of a `Data`.
    ///
    /// ```swift
    /// let avatar = old["avatar"]?.dataValue
    /// ```
    public var dataValue: Data? { if case .data(let d) = self { return d } else { return nil } }
    /// The value of a `UUID`.
    ///
    /// ```swift
    /// let device = old["device"]?.uuidValue
    /// ```
    public var uuidValue: UUID? { if case .uuid(let u) = self { return u } else { return nil } }
    /// The value of a `Decimal`, or of an integer as a `Decimal`.
    ///
    /// ```swift
    /// let price = old["price"]?.decimalValue ?? 0
    /// ```
    public var decimalValue: Decimal? {
        switch self {
        case .decimal(let d): return d
        case .int(let i): return Decimal(i)
        case .uint(let u): return Decimal(u)
        default: return nil
        }
    }
    /// The value of a `URL` (nil also when its stored text is not a URL).
    ///
    /// ```swift
    /// let site = old["site"]?.urlValue
    /// ```
    public var urlValue: URL? { if case .url(let u) = self { return URL(string: u) } else { return nil } }
    /// The elements of an array (or set).
    ///
    /// ```swift
    /// let tags = old["tags"]?.arrayValue?.compactMap(\.stringValue) ?? []
    /// ```
    public var arrayValue: [StoredValue]? { if case .array(let a) = self { return a } else { return nil } }
    /// The fields of a nested struct, or the entries of a `[String: T]`.
    ///
    /// ```swift
    /// let address = old["address"]?.objectValue ?? [:]   // [String: StoredValue]
    /// ```
    public var objectValue: [String: StoredValue]? { if case .object(let o) = self { return o } else { return nil } }
    /// The key a reference points at (typed as the target's key).
    ///
    /// ```swift
    /// let authorID = old["author"]?.referenceKey?.stringValue
    /// ```
    public var referenceKey: StoredValue? { if case .reference(_, let key) = self { return key } else { return nil } }
    /// Whether this is `null`: a nil optional.
    ///
    /// ```swift
    /// let gaps = old["scores"]?.arrayValue?.filter(\.isNull).count ?? 0   // nil elements of an [Int?]
    /// ```
    public var isNull: Bool { self == .null }
    /// A field of a nested struct (or an entry of a `[String: T]`); nil for other kinds.
    ///
    /// ```swift
    /// let city = old["address"]?["city"]?.stringValue
    /// ```
    public subscript(field: String) -> StoredValue? { if case .object(let f) = self { return f[field] } else { return nil } }

    /// The value as a Swift type, read as the record it came from reads: for migrations that read
    /// an old nested struct, array or reference whole. A raw-value enum is the case of its stored
    /// raw value (whatever its own `Codable` writes); a number or a string read as another kind
    /// converts as `JSONDecoder` converts its JSON form.
    ///
    /// ```swift
    /// let address = try old["address"]?.decode(Address.self)
    /// let tags = try old["tags"]?.decode([String].self) ?? []
    /// ```
    public func decode<T: Decodable>(_ type: T.Type) throws -> T {
        do {
            return try StoredValueDecoder.decode(T.self, from: self, codingPath: [])
        } catch {
            throw StrataError.invalidInput("cannot read \(json.count > 80 ? String(json.prefix(80)) + "…" : json) as \(T.self): \(error)")
        }
    }

    /// Reads the JSON form of a scalar, for `StoredValueDecoder`'s conversions between kinds: dates
    /// as `json` writes them (exact ISO 8601, or a quoted number of seconds), non-finite numbers as
    /// quoted text.
    static let jsonDecoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            if let date = ISO8601.parse(text) { return date }
            if let seconds = Double(text) { return Date(timeIntervalSinceReferenceDate: seconds) }
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "\(text) is not an ISO 8601 date")
        }
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
        return decoder
    }()
}

/// `s` quoted for an error message: as `jsonString`, cut to its first 200 characters when longer,
/// with its full size after it. A message must not grow with what it quotes (a damaged 4 MiB value
/// made `strata dump` print a 25 MB error).
func quotedForError(_ s: String) -> String {
    let limit = 200
    guard s.utf8.count > limit else { return jsonString(s) }
    return jsonString(String(s.prefix(limit))) + "… (\(s.utf8.count) bytes)"
}

/// A control character or a line or paragraph separator: escaped in JSON strings, so that the
/// text stays on one line wherever it is shown (a report, a terminal) and is the same JSON string.
func breaksLines(_ scalar: Unicode.Scalar) -> Bool {
    scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x2028 || scalar.value == 0x2029
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
            if breaksLines(scalar) {
                out += String(format: "\\u%04x", scalar.value)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out + "\""
}

/// Reads records and keys without the Swift types, from stored schemas alone.
struct UntypedDecoding {
    /// Every model's primary-key type by model name: what references and keys decode as.
    let keyTypes: [String: FieldType]
    /// The models keyed by a type of the app's own (`appTypedKey`).
    let appTypedKeys: Set<String>

    init(schemas: some Sequence<StoredModelSchema>) {
        var keyTypes: [String: FieldType] = [:]
        var appTyped: Set<String> = []
        for schema in schemas {
            keyTypes[schema.name] = schema.keyFieldType
            if Self.appTypedKey(schema) { appTyped.insert(schema.name) }
        }
        self.keyTypes = keyTypes
        self.appTypedKeys = appTyped
    }

    /// Whether the model's key is of a type of the app's own, neither a standard type nor an enum
    /// stored by its raw value: a raw-value struct, keyed by its raw value, whose type the catalog
    /// does not record (it records the struct's Codable form: a UUID raw value coded as a String
    /// is a `.string` there and 16 bytes in the key).
    static func appTypedKey(_ schema: StoredModelSchema) -> Bool {
        var type = schema.keyFieldType
        while case .optional(let inner)? = type { type = inner }
        if case .enumeration? = type { return false }
        return FieldType(primitiveTypeName: schema.keyType) == nil
    }

    /// `schema`'s key read from its bytes (`key(_:type:appTyped:)`); `schema` one of those this
    /// decoding was made with (its kind of key told once, not per key read).
    func key(_ bytes: UnsafeRawBufferPointer, of schema: StoredModelSchema) throws -> StoredValue {
        try key(bytes, type: schema.keyFieldType, appTyped: appTypedKeys.contains(schema.name))
    }

    /// Decodes a record into field values by name, following the stored schema. Removed fields are
    /// included (under their old names) when `includeRemoved`, unless a live field now has the name.
    func decode(_ bytes: UnsafeRawBufferPointer, schema: ObjectSchema, includeRemoved: Bool = false) throws -> [String: StoredValue] {
        let table = try FieldTable(bytes)
        var result: [String: StoredValue] = [:]
        // A removed field whose name a live field took (its type changed) is shadowed by the live one.
        // Checked per removed field, which are few: nothing is built per record.
        func shadowed(_ field: FieldSchema) -> Bool { schema.fields.contains { !$0.removed && $0.name == field.name } }
        for field in schema.fields where !field.removed || (includeRemoved && !shadowed(field)) {
            guard let entry = table.entries.first(where: { $0.id == field.id }) else { continue }
            if entry.isNil {
                result[field.name] = .null
                continue
            }
            result[field.name] = try value(UnsafeRawBufferPointer(rebasing: bytes[entry.start..<entry.end]), type: field.type)
        }
        return result
    }

    func value(_ bytes: UnsafeRawBufferPointer, type: FieldType) throws -> StoredValue {
        func fixed(_ count: Int) throws -> UInt64 { try fixedWidthValue(bytes, count: count, place: "\(type) value") }
        switch type {
        case .optional(let inner): return try value(bytes, type: inner)
        case .bool: return .bool(try fixed(1) != 0)
        case .int(let bits, let signed):
            let raw = try storedInteger(bytes, bits: bits, signed: signed)
            return signed ? .int(Int64(bitPattern: raw)) : .uint(raw)
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
        case .decimal:
            let text = String(decoding: bytes, as: UTF8.self)
            guard let decimal = PrimitiveLayout.decimal(text: text) else {
                throw StrataError.corruptRecord("Decimal \(quotedForError(text)) does not parse")
            }
            return .decimal(decimal)
        case .url: return .url(String(decoding: bytes, as: UTF8.self))
        case .enumeration(let raw): return try value(bytes, type: raw)
        case .reference(let model): return .reference(model: model, key: try key(bytes, type: keyTypes[model], appTyped: appTypedKeys.contains(model)))
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

    /// A primary key (or a reference's target key), read by the key type the schema records:
    /// never guessed from the bytes (a 6-byte string key is not an integer). A key whose type is
    /// unknown (a catalog too old to record a computed key's type) comes back as its raw bytes.
    /// An app-typed key (`appTypedKey`) recorded as a scalar that does not read as that scalar
    /// comes back as its bytes too: its raw value's type is not known. (One recorded as a struct
    /// `{rawValue}` is known exactly, and a key that does not read so is damage.)
    func key(_ bytes: UnsafeRawBufferPointer, type: FieldType?, appTyped: Bool = false) throws -> StoredValue {
        guard let type else { return .data(Data(bytes)) }
        var reader = KeyReader(bytes: bytes)
        do {
            let value = try Self.keyValue(&reader, type: type)
            guard reader.offset == bytes.count else {
                throw StrataError.corruptRecord("a \(type) key of \(bytes.count) bytes has \(bytes.count - reader.offset) bytes left over")
            }
            return value
        } catch  where appTyped && !type.unwrapped.isObject {
            return .data(Data(bytes))
        }
    }

    private static func keyValue(_ reader: inout KeyReader, type: FieldType) throws -> StoredValue {
        func corrupt() -> StrataError { .corruptRecord("a key is too short for its type \(type)") }
        switch type {
        case .optional(let inner):
            guard let tag = reader.byte() else { throw corrupt() }
            if tag == 0 { return .null }
            guard tag == 1 else { throw StrataError.corruptRecord("an optional key has tag \(tag)") }
            return try keyValue(&reader, type: inner)
        case .bool:
            guard let b = reader.byte() else { throw corrupt() }
            return .bool(b != 0)
        case .int(let bits, let signed):
            if signed {
                guard let i = reader.int() else { throw corrupt() }
                try checkWidth(i, bits: bits, place: "stored key")
                return .int(i)
            }
            guard let u = reader.uint() else { throw corrupt() }
            try checkWidth(u, bits: bits, place: "stored key")
            return .uint(u)
        case .double, .float:
            guard let d = reader.double() else { throw corrupt() }
            return .double(d)
        case .decimal:
            // A Decimal key is kept as the nearest Double (KeyEncoding): that is what it holds.
            guard let d = reader.double() else { throw corrupt() }
            return .double(d)
        case .date:
            guard let d = reader.double() else { throw corrupt() }
            return .date(Date(timeIntervalSinceReferenceDate: d))
        case .string, .url:
            guard let bytes = reader.escaped() else { throw corrupt() }
            let text = String(decoding: bytes, as: UTF8.self)
            return type == .url ? .url(text) : .string(text)
        case .data:
            guard let bytes = reader.escaped() else { throw corrupt() }
            return .data(Data(bytes))
        case .uuid:
            guard let uuid = reader.read(UUID.self) else { throw corrupt() }
            return .uuid(uuid)
        case .enumeration(let raw):
            return try keyValue(&reader, type: raw)
        case .object(let schema):
            // A raw-value struct whose Codable is keyed (no scalar the probe could store it as):
            // the key holds its raw value (KeyEncoding). The synthesized Codable names it
            // `rawValue`, which gives the raw value's type and the struct's JSON form; any other
            // layout records no raw type, and the key comes back as its bytes, as an unknown key
            // type's does (read, never guessed).
            let live = schema.liveFields
            if live.count == 1, live[0].name == "rawValue", live[0].type.isKeyable {
                return .object(["rawValue": try keyValue(&reader, type: live[0].type)])
            }
            let rest = Data(UnsafeRawBufferPointer(rebasing: reader.bytes[reader.offset...]))
            reader.offset = reader.bytes.count
            return .data(rest)
        default:
            throw StrataError.corruptRecord("\(type) cannot be a key")
        }
    }

    /// A key as text for messages: strings as they are, other values as JSON. A string holding a
    /// control character or a line separator is shown quoted and escaped, as JSON: a report line
    /// must stay one line (a key with a newline split `strata check`'s notes).
    static func text(_ key: StoredValue) -> String {
        switch key {
        case .string(let s), .url(let s):
            return s.unicodeScalars.contains(where: breaksLines) ? jsonString(s) : s
        case .reference(_, let inner): return text(inner)
        default: return key.json
        }
    }
}
