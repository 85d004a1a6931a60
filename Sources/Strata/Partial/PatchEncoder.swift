import Foundation

/// Turns given field values into record bytes by the stored schema, merging them into a stored
/// record: fields not given keep their stored bytes untouched (they are copied, never decoded and
/// re-encoded), nested structs merge field by field (RFC 7396), everything else is replaced whole.
///
/// It collects unknown and missing fields as it goes, so that one error can list them all; a value
/// of the wrong type throws at once, naming its dotted path.
struct PatchEncoder {
    let model: String
    let options: PartialUpdateOptions
    let registry: ModelRegistry
    /// Dotted paths of fields the schema does not have.
    var unknown: [String] = []
    /// Dotted paths of required fields that neither the stored record nor the patch gives.
    var missing: [String] = []
    /// Whether a struct below the top level may name fields its schema has removed, which are then
    /// left out: a migration storing back a nested struct it read from the old record (whose
    /// fields the new type dropped are in it). At the top level such a name stays unknown.
    var skipsRemovedNestedFields = false
    /// Whether an enum with its own Codable is given in its JSON form (a partial update, a change
    /// message), not as its stored raw value (a migration, which carries values read from records).
    var readsWireForms = true

    init(model: String, options: PartialUpdateOptions, registry: ModelRegistry) {
        self.model = model
        self.options = options
        self.registry = registry
    }

    typealias Entry = (isNil: Bool, bytes: [UInt8])

    /// Applies `patch` to the record `stored` (nil: there is none, build one from scratch) of
    /// `schema`; `seed` gives fields that a new record starts with (the primary key).
    mutating func merge(
        _ patch: [String: StoredValue], into stored: UnsafeRawBufferPointer?, schema: ObjectSchema,
        path: FieldPath, seed: [Int: Entry] = [:]
    ) throws -> [UInt8] {
        var entries = seed
        if let stored {
            let table = try FieldTable(stored)
            // Every stored entry is kept, even one of a removed field, so that nothing is lost here.
            for entry in table.entries {
                entries[entry.id] = (entry.isNil, Array(stored[entry.start..<entry.end]))
            }
        }
        for name in patch.keys.sorted() {
            guard let value = patch[name] else { continue }
            let fieldPath = path.appending(name)
            guard let field = schema.field(named: name) else {
                if skipsRemovedNestedFields, path.depth > 0, schema.fields.contains(where: { $0.removed && $0.name == name }) { continue }
                unknown.append(fieldPath.text)
                continue
            }
            if case .null = value, !isNilKeyReference(field.type) {
                // A field `init(from:)` does without (`(try? c.decode(…)) ?? 0`) takes null as
                // JSONDecoder does, and as a merge patch removes a member: absent, read as its default.
                guard field.type.isOptional || registry.byName[model]?.decodesWithout(fieldPath.shape) == true else {
                    throw fieldPath.mismatch("null given for a non-optional \(field.type)")
                }
                // Absent, as the synthesized encode(to:) leaves a nil optional: a nil entry reads
                // back as the inner nil of a double optional (`.some(nil)`), where JSONDecoder
                // gives `nil` for a null.
                entries[field.id] = nil
                continue
            }
            if case .object(let nestedSchema) = field.type.unwrapped, case .object(let nestedPatch) = value {
                var current: [UInt8]?
                // A payload enum's object names its case by the one key it holds: a patch gives
                // the whole value (merged into another case, it would hold two).
                let replaces = registry.byName[model]?.caseKeyedPaths.contains(fieldPath.text) == true
                if replaces, let name = nestedPatch.keys.sorted().first(where: { if case .null = nestedPatch[$0] { true } else { false } }) {
                    // JSONDecoder refuses it too; said here, the reason is not a stored value gone missing.
                    throw fieldPath.appending(name).mismatch(
                        "null given for a case of \(nestedSchema.typeName): a case is an object of its associated values, "
                            + "{} when it has none (as JSONEncoder writes it)")
                }
                if !replaces, let existing = entries[field.id], !existing.isNil { current = existing.bytes }
                let merged = try current.withUnsafeBytesIfPresent { bytes in
                    try merge(nestedPatch, into: bytes, schema: nestedSchema, path: fieldPath)
                }
                entries[field.id] = (false, merged)
                continue
            }
            entries[field.id] = (false, try encode(value, as: field.type, path: fieldPath))
        }
        for field in schema.liveFields where !field.type.isOptional {
            guard entries[field.id] == nil || entries[field.id]?.isNil == true else { continue }
            let fieldPath = path.appending(field.name)
            // A field `init(from:)` does without (`(try? c.decode(…)) ?? 0`) may be absent, as an
            // `encode(to:)` that skips its default value leaves it: the object reads the default,
            // as JSONDecoder reads it.
            if registry.byName[model]?.decodesWithout(fieldPath.shape) == true { continue }
            missing.append(fieldPath.text)
        }
        var fields = RecordFields()
        for id in entries.keys.sorted() {
            if let entry = entries[id] { fields.append(id: id, isNil: entry.isNil, bytes: entry.bytes) }
        }
        var out: [UInt8] = []
        fields.serialize(into: &out)
        return out
    }

    /// The stored bytes of a present `value` of type `type`. Null is only valid where the type is
    /// optional and the caller records it as a nil entry; here it is an error.
    mutating func encode(_ value: StoredValue, as type: FieldType, path: FieldPath) throws -> [UInt8] {
        var out: [UInt8] = []
        switch type {
        case .optional(let inner):
            return try encode(value, as: inner, path: path)
        case .bool:
            guard case .bool(let b) = value else { throw expected("true or false", value, path) }
            PrimitiveLayout.append(bool: b, to: &out)
        case .int(let bits, let signed):
            if signed {
                PrimitiveLayout.append(signed: try signedInteger(value, bits: bits, path: path), to: &out)
            } else {
                PrimitiveLayout.append(unsigned: try unsignedInteger(value, bits: bits, path: path), to: &out)
            }
        case .double:
            PrimitiveLayout.append(double: try double(value, type: type, path: path), to: &out)
        case .float:
            let d = try double(value, type: type, path: path)
            let f: Float
            switch value {
            // An integer goes to Float directly, rounded once, as JSONDecoder rounds it: through a
            // Double it was rounded twice, and one above 2^53 could land a step off
            // (9007199791611905 became 9007199254740992 instead of 9007200328482816).
            case .int(let i): f = Float(i)
            case .uint(let u): f = Float(u)
            // A fraction the same way, from its text: the shortest text of the Double is the JSON
            // number's own digits when it had at most 15 (any such decimal survives a Double), and
            // `Float(_: String)` rounds that once. `Float(d)` rounded a second time:
            // 9.31323185238142e-10 came out a step above what JSONDecoder gives.
            default: f = Float("\(d)") ?? Float(d)
            }
            // Too large, or too small to be anything but zero: out of range, as JSONDecoder has it.
            if (f.isInfinite && d.isFinite) || (f == 0 && d != 0) { throw path.mismatch("\(value.summary) is out of range for Float") }
            PrimitiveLayout.append(float: f, to: &out)
        case .string:
            PrimitiveLayout.append(string: try string(value, path: path), to: &out)
        case .data:
            PrimitiveLayout.append(data: try data(value, path: path), to: &out)
        case .date:
            PrimitiveLayout.append(date: try date(value, path: path), to: &out)
        case .uuid:
            PrimitiveLayout.append(uuid: try uuid(value, path: path), to: &out)
        case .decimal:
            PrimitiveLayout.append(decimal: try decimal(value, path: path), to: &out)
        case .url:
            PrimitiveLayout.append(url: try url(value, path: path), to: &out)
        case .enumeration(let raw):
            // An enum with its own Codable is given as JSONEncoder writes it: its raw value is
            // that of the case its init(from:) reads. Any other raw value is checked against the
            // enum's cases when the object is decoded.
            if readsWireForms, let wire = registry.byName[model]?.wireEnums[path.shape] {
                return try encode(try Self.rawValue(of: value, wire, path: path), as: raw, path: path)
            }
            return try encode(value, as: raw, path: path)
        case .reference(let target):
            // Given as JSONEncoder writes a `Ref`: the id's own JSON form, which its type reads
            // (an enum's or a raw-value struct's own Codable: `rawValue + 1`, "u:" + raw), while
            // the key is made of the id as `insert` makes it. A key read untyped (`.reference`, a
            // migration's values) is the stored key already.
            if readsWireForms, Self.isWireCandidate(value), let info = registry.byName[target] {
                if let key = try info.referenceKey(givenAs: value, path: path, registry: registry, options: options) { return key }
                // A computed id (no field to read it as): an enum key with its own Codable is
                // converted by what the probe found at this path (`Ref.init(from:)` decodes it).
                if let wire = registry.byName[model]?.wireEnums[path.shape] {
                    return try referenceKey(try Self.rawValue(of: value, wire, path: path), target: target, path: path)
                }
            }
            return try referenceKey(value, target: target, path: path)
        case .object(let schema):
            guard case .object(let fields) = value else { throw expected("an object", value, path) }
            return try merge(fields, into: nil, schema: schema, path: path)
        case .array(let element):
            guard case .array(let values) = value else { throw expected("an array", value, path) }
            let entries = try values.enumerated().map { i, item in try collectionEntry(item, element: element, path: path.appending(index: i)) }
            CollectionLayout.appendArray(entries, to: &out)
        case .dictionary(let element):
            guard case .object(let fields) = value else { throw expected("an object", value, path) }
            let entries = try fields.map { key, item in
                let entry = try collectionEntry(item, element: element, path: path.appending(entry: key))
                return (key: key, isNil: entry.isNil, bytes: entry.bytes)
            }
            CollectionLayout.appendDictionary(entries, to: &out)
        }
        return out
    }

    private mutating func collectionEntry(_ item: StoredValue, element: FieldType, path: FieldPath) throws -> Entry {
        if case .null = item, !isNilKeyReference(element) {
            guard element.isOptional else { throw path.mismatch("null given for a non-optional \(element)") }
            return (true, [])
        }
        return (false, try encode(item, as: element, path: path))
    }

    // MARK: Scalars

    private func expected(_ what: String, _ value: StoredValue, _ path: FieldPath) -> StrataError {
        path.mismatch("expected \(what), found \(value.summary)")
    }

    private func signedInteger(_ value: StoredValue, bits: Int, path: FieldPath) throws -> Int64 {
        let lower: Int64 = bits >= 64 ? .min : -(1 << (bits - 1))
        let upper: Int64 = bits >= 64 ? .max : (1 << (bits - 1)) - 1
        let range = "Int\(bits) (a whole number from \(lower) to \(upper))"
        let result: Int64?
        switch value {
        case .int(let i): result = i
        case .uint(let u): result = Int64(exactly: u)
        // Parsed JSON gives 2.0 and 2e3 as `.int` (JSONParser.wholeNumber), and a whole Double
        // given in Swift is one too (StoredValue.swiftDouble); what is left is taken when whole
        // below 2^53, where no rounding can have made it whole (-9223372036854775809 rounds to
        // Int64.min).
        case .double(let d): result = abs(d) < 0x1p53 ? Int64(exactly: d) : nil
        default: throw expected(range, value, path)
        }
        guard let result, result >= lower, result <= upper else { throw expected(range, value, path) }
        return result
    }

    private func unsignedInteger(_ value: StoredValue, bits: Int, path: FieldPath) throws -> UInt64 {
        let upper: UInt64 = bits >= 64 ? .max : (1 << UInt64(bits)) - 1
        let range = "UInt\(bits) (a whole number from 0 to \(upper))"
        let result: UInt64?
        switch value {
        case .int(let i): result = UInt64(exactly: i)
        case .uint(let u): result = u
        case .double(let d): result = d < 0x1p53 ? UInt64(exactly: d) : nil
        default: throw expected(range, value, path)
        }
        guard let result, result <= upper else { throw expected(range, value, path) }
        return result
    }

    private func double(_ value: StoredValue, type: FieldType, path: FieldPath) throws -> Double {
        switch value {
        case .int(let i): return Double(i)
        case .uint(let u): return Double(u)
        case .double(let d): return d
        default: throw expected("a number for \(type)", value, path)
        }
    }

    private func string(_ value: StoredValue, path: FieldPath) throws -> String {
        guard case .string(let s) = value else { throw expected("a string", value, path) }
        return s
    }

    private func data(_ value: StoredValue, path: FieldPath) throws -> Data {
        switch value {
        case .data(let d): return d
        case .string(let s):
            guard let d = Data(base64Encoded: s) else { throw expected("base64 text for Data", value, path) }
            return d
        default: throw expected("base64 text for Data", value, path)
        }
    }

    private func uuid(_ value: StoredValue, path: FieldPath) throws -> UUID {
        switch value {
        case .uuid(let u): return u
        case .string(let s):
            guard let u = UUID(uuidString: s) else { throw expected("a UUID string", value, path) }
            return u
        default: throw expected("a UUID string", value, path)
        }
    }

    private func url(_ value: StoredValue, path: FieldPath) throws -> URL {
        switch value {
        case .url(let s), .string(let s):
            guard let u = URL(string: s) else { throw expected("a URL string", value, path) }
            return u
        default: throw expected("a URL string", value, path)
        }
    }

    private func decimal(_ value: StoredValue, path: FieldPath) throws -> Decimal {
        let result: Decimal?
        switch value {
        case .decimal(let d): result = d
        case .int(let i): result = Decimal(i)
        case .uint(let u): result = Decimal(u)
        // The shortest text that reads back as the same Double: 0.1 stays 0.1, not 0.1000000000000000055.
        case .double(let d): result = Decimal(string: "\(d)", locale: Self.posix)
        // `Decimal(string:)` accepts a valid prefix ("12abc" is 12), so the whole text is checked first.
        case .string(let s):
            guard PrimitiveLayout.isDecimalText(s) else { throw expected("a number or a decimal string", value, path) }
            // Decimal keeps 38 significant digits and would round more without a word. (Zeros
            // after the last other digit are not significant: "1.000…0" with 18 decimals, as
            // token amounts come, or 1 followed by 39 zeros, are held exactly.)
            let digits = s.split(whereSeparator: { $0 == "e" || $0 == "E" })[0].filter(\.isNumber)
            let significant = digits.drop { $0 == "0" }.reversed().drop { $0 == "0" }.count
            guard significant <= 38 else { throw path.mismatch("\(value.summary) has more than the 38 significant digits a Decimal holds") }
            result = Decimal(string: s, locale: Self.posix)
        default: throw expected("a number or a decimal string", value, path)
        }
        guard let result, !result.isNaN else { throw path.mismatch("\(value.summary) is outside the range of Decimal") }
        return result
    }

    private static let posix = Locale(identifier: "en_US_POSIX")

    private func date(_ value: StoredValue, path: FieldPath) throws -> Date {
        if case .date(let d) = value { return d }
        // Extended JSON, as DDP (Meteor) and MongoDB send dates: {"$date": milliseconds since
        // 1970}, or {"$date": {"$numberLong": "…"}}, or {"$date": "ISO 8601"}; in every format.
        if case .object(let fields) = value, fields.count == 1, let inner = fields["$date"] {
            switch inner {
            case .int(let ms): return Date(timeIntervalSince1970: Double(ms) / 1000)
            case .uint(let ms): return Date(timeIntervalSince1970: Double(ms) / 1000)
            case .double(let ms) where ms.isFinite: return Date(timeIntervalSince1970: ms / 1000)
            case .string(let s):
                if let d = Self.parseISO8601(s) { return d }
            case .object(let long):
                if long.count == 1, case .string(let digits)? = long["$numberLong"], let ms = Int64(digits) {
                    return Date(timeIntervalSince1970: Double(ms) / 1000)
                }
            default: break
            }
            throw expected("{\"$date\": milliseconds since 1970, {\"$numberLong\": \"…\"} or an ISO 8601 string}", value, path)
        }
        let format = options.dateFormat
        if format == .iso8601 {
            guard case .string(let s) = value, let d = Self.parseISO8601(s) else {
                throw expected(
                    "an ISO 8601 date-time string such as 2024-05-01T12:30:00Z or 2024-05-01T12:30:00.125+02:00, or {\"$date\": milliseconds}", value, path)
            }
            return d
        }
        let number: Double
        switch value {
        case .int(let i): number = Double(i)
        case .uint(let u): number = Double(u)
        case .double(let d): number = d
        default: throw expected("a number of \(format.unitDescription)", value, path)
        }
        switch format {
        case .secondsSince1970: return Date(timeIntervalSince1970: number)
        case .millisecondsSince1970: return Date(timeIntervalSince1970: number / 1000)
        case .secondsSinceReferenceDate, .iso8601: return Date(timeIntervalSinceReferenceDate: number)
        }
    }

    private static let iso8601 = Date.ISO8601FormatStyle()
    private static let iso8601Fractional = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    /// Exact for Strata's own output (any number of fraction digits, expanded years); Foundation's
    /// parser for anything else it accepts.
    static func parseISO8601(_ s: String) -> Date? {
        if let d = ISO8601.parse(s) { return d }
        if let d = try? iso8601.parse(s) { return d }
        return try? iso8601Fractional.parse(s)
    }

    // MARK: References

    /// The raw value of the case `value`, an enum's wire form, decodes to; an error naming `path`
    /// when the enum's own `init(from:)` refuses it.
    private static func rawValue(of value: StoredValue, _ wire: WireEnum, path: FieldPath) throws -> StoredValue {
        switch wire.rawValue(value) {
        case .success(let converted): return converted
        case .failure(let error): throw path.mismatch(error.reason)
        }
    }

    /// Whether a `Ref`'s given value may be its id's wire form: not null (`Ref(nil)`), and not a
    /// reference read untyped, which carries the stored key.
    private static func isWireCandidate(_ value: StoredValue) -> Bool {
        switch value {
        case .null, .reference: return false
        default: return true
        }
    }

    /// Whether `type` is a non-optional `Ref` to a model whose id is optional: null is then a
    /// value (`Ref(nil)`), stored as its key, not an absent field.
    private func isNilKeyReference(_ type: FieldType) -> Bool {
        guard case .reference(let target) = type, case .optional? = registry.byName[target]?.stored.keyFieldType else { return false }
        return true
    }

    /// A `Ref` is stored as the target's key encoding, so the key's type comes from the target's
    /// schema: the same JSON `5` is a different key for an `Int` id and an `Int?` id.
    private func referenceKey(_ value: StoredValue, target: String, path: FieldPath) throws -> [UInt8] {
        guard let keyType = registry.byName[target]?.stored.keyFieldType else {
            throw path.mismatch("references \(target), which this database was not opened with, so its key type is unknown")
        }
        // `Ref(nil)` to a model with an optional (auto-increment) id: JSONEncoder writes null,
        // and the typed path stores the key encoding of a nil optional.
        if case .null = value, case .optional = keyType { return [0] }
        var out: [UInt8] = []
        try appendKey(value, type: keyType, to: &out, path: path)
        return out
    }

    /// The key encoding of `value` as a key of `type` (a primary key given untyped).
    func keyBytes(_ value: StoredValue, type: FieldType, path: FieldPath) throws -> [UInt8] {
        var out: [UInt8] = []
        try appendKey(value, type: type, to: &out, path: path)
        return out
    }

    private func appendKey(_ value: StoredValue, type: FieldType, to out: inout [UInt8], path: FieldPath) throws {
        // A reference read untyped (a dump, a migration) carries its key: write that key.
        if case let .reference(_, key) = value { return try appendKey(key, type: type, to: &out, path: path) }
        switch type {
        case .optional(let inner):
            // (A nil key: `Ref(nil)` to a model with an automatic key, also read untyped and
            // written back by a migration.)
            if case .null = value {
                out.append(0)
                return
            }
            out.append(1)
            try appendKey(value, type: inner, to: &out, path: path)
        case .enumeration(let raw):
            try appendKey(value, type: raw, to: &out, path: path)
        case .int(let bits, true): KeyEncoding.appendInt(try signedInteger(value, bits: bits, path: path), to: &out)
        case .int(let bits, false): KeyEncoding.appendUInt(try unsignedInteger(value, bits: bits, path: path), to: &out)
        case .string: KeyEncoding.appendBytes(KeyEncoding.normalized(try string(value, path: path)).utf8, to: &out)
        case .uuid: withUnsafeBytes(of: try uuid(value, path: path).uuid) { out.append(contentsOf: $0) }
        case .data: KeyEncoding.appendBytes(try data(value, path: path), to: &out)
        case .date: KeyEncoding.appendDouble(try date(value, path: path).timeIntervalSinceReferenceDate, to: &out)
        case .double, .float: KeyEncoding.appendDouble(try double(value, type: type, path: path), to: &out)
        case .bool:
            guard case .bool(let b) = value else { throw expected("true or false", value, path) }
            out.append(b ? 1 : 0)
        default:
            throw path.mismatch("the referenced model's key type \(type) cannot be given as a value")
        }
    }
}

extension PartialUpdateOptions.DateFormat {
    var unitDescription: String {
        switch self {
        case .iso8601: return "ISO 8601 text"
        case .secondsSince1970: return "seconds since 1970"
        case .millisecondsSince1970: return "milliseconds since 1970"
        case .secondsSinceReferenceDate: return "seconds since 2001-01-01"
        }
    }
}

extension Optional where Wrapped == [UInt8] {
    /// Runs `body` on the bytes, or on nil when there are none.
    func withUnsafeBytesIfPresent<R>(_ body: (UnsafeRawBufferPointer?) throws -> R) rethrows -> R {
        guard let self else { return try body(nil) }
        return try self.withUnsafeBytes { try body($0) }
    }
}
