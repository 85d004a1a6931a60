import Foundation

/// Decodes a Swift value from a `StoredValue` (`StoredValue.decode(_:)`, what a migration reads an
/// old nested struct, array or reference with), as the record decoder would have read the record
/// the value came from.
///
/// Not through JSON: a record holds a raw-value enum (or a small raw-value struct, such as an
/// option set) as its raw value (FORMAT.md §8.2), whatever its own `Codable` writes. An enum whose
/// `encode(to:)` writes `rawValue + 1` has its raw value 2 read back by the record decoder as the
/// case whose raw value is 2; handed to its `init(from:)` as JSON, the same 2 was the case before.
/// So a type the schema stores by its raw value is made with `init(rawValue:)` first, as the
/// record decoder makes it; anything else goes through its own `init(from:)`. A scalar read as a
/// type other than its own (an integer as a `Double`, a string as a `Date`) is converted as
/// `JSONDecoder` converts the value's JSON form, which is what this decoder reads in its place.
struct StoredValueDecoder: Decoder {
    let value: StoredValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(_ value: StoredValue, codingPath: [any CodingKey] = []) {
        // A reference reads as its target's key (`Ref.init(from:)` decodes the id), as in JSON.
        if case .reference(_, let key) = value { self.value = key } else { self.value = value }
        self.codingPath = codingPath
    }

    /// `T` read from `value` at `codingPath`.
    static func decode<T: Decodable>(_ type: T.Type, from value: StoredValue, codingPath: [any CodingKey]) throws -> T {
        let value = StoredValueDecoder(value, codingPath: codingPath).value
        if let raw = rawCase(T.self, value) { return raw }
        if let scalar = try scalar(T.self, value, codingPath: codingPath) { return scalar }
        return try T(from: StoredValueDecoder(value, codingPath: codingPath))
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let fields) = value else { throw Self.mismatch([String: StoredValue].self, value, codingPath) }
        return KeyedDecodingContainer(Keyed<Key>(fields: fields, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else { throw Self.mismatch([StoredValue].self, value, codingPath) }
        return Unkeyed(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { Single(value: value, codingPath: codingPath) }

    // MARK: Values

    /// The case of a type stored by its raw value (as `SchemaProbe` decides) whose raw value
    /// `value` is; nil for other types, and for a raw value that names no case (which its
    /// `init(from:)` then reads, as the record decoder lets it).
    private static func rawCase<T>(_ type: T.Type, _ value: StoredValue) -> T? {
        guard ProbeState.storesRawValue(T.self), let representable = T.self as? any RawRepresentable.Type else { return nil }
        return rawCase(representable, value) as? T
    }

    private static func rawCase<R: RawRepresentable>(_ type: R.Type, _ value: StoredValue) -> R? {
        guard let raw = try? scalar(R.RawValue.self, value, codingPath: []) else { return nil }
        return R(rawValue: raw)
    }

    /// `value` as a Foundation scalar type `T` (a number, a string, a `Date`, `Data`, `UUID`,
    /// `URL` or `Decimal`); nil when `T` is none of them.
    private static func scalar<T>(_ type: T.Type, _ value: StoredValue, codingPath: [any CodingKey]) throws -> T? {
        guard RecordDecoding.isPrimitive(T.self) else { return nil }
        // The same value under its own kind, as the JSON form would read back.
        switch value {
        case .string(let s) where T.self == String.self: return s as? T
        case .bool(let b) where T.self == Bool.self: return b as? T
        case .double(let d) where T.self == Double.self: return d as? T
        case .int(let i) where T.self == Int64.self: return i as? T
        case .int(let i) where T.self == Int.self && Int.bitWidth == 64: return Int(truncatingIfNeeded: i) as? T
        case .date(let d) where T.self == Date.self: return d as? T
        case .uuid(let u) where T.self == UUID.self: return u as? T
        case .data(let d) where T.self == Data.self: return d as? T
        case .decimal(let d) where T.self == Decimal.self: return d as? T
        default: break
        }
        // Any other pair as JSONDecoder converts the value's JSON form: the same conversions and
        // the same refusals (a fraction as an integer, 300 as an Int8, a number as a String).
        guard let decodable = T.self as? any Decodable.Type else { return nil }
        return try fromJSON(decodable, value, codingPath: codingPath) as? T
    }

    fileprivate static func fromJSON<T: Decodable>(_ type: T.Type, _ value: StoredValue, codingPath: [any CodingKey]) throws -> T {
        do {
            return try StoredValue.jsonDecoder.decode(T.self, from: Data(value.json.utf8))
        } catch let error as DecodingError {
            // Said at the place in the value being read, not at the top of a one-value document.
            let context = DecodingError.Context(codingPath: codingPath, debugDescription: "\(value.json.prefix(80)) as \(T.self): \(error)")
            if case .valueNotFound = error { throw DecodingError.valueNotFound(T.self, context) }
            throw DecodingError.typeMismatch(T.self, context)
        }
    }

    fileprivate static func mismatch(_ type: Any.Type, _ value: StoredValue, _ codingPath: [any CodingKey]) -> DecodingError {
        let context = DecodingError.Context(codingPath: codingPath, debugDescription: "expected \(type), found \(value.summary)")
        return value == .null ? .valueNotFound(type, context) : .typeMismatch(type, context)
    }

    // MARK: Containers

    private struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let fields: [String: StoredValue]
        let codingPath: [any CodingKey]

        var allKeys: [Key] { fields.keys.compactMap { Key(stringValue: $0) } }
        func contains(_ key: Key) -> Bool { fields[key.stringValue] != nil }

        private func field(_ key: Key) throws -> StoredValue {
            guard let value = fields[key.stringValue] else {
                throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no value for \"\(key.stringValue)\""))
            }
            return value
        }

        func decodeNil(forKey key: Key) throws -> Bool { try field(key) == .null }

        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            try StoredValueDecoder.decode(T.self, from: try field(key), codingPath: codingPath + [key])
        }

        // 128-bit integers have requirements of their own, whose defaults throw "not supported":
        // read as JSONDecoder reads them.
        func decode(_ type: Int128.Type, forKey key: Key) throws -> Int128 { try fromJSON(Int128.self, try field(key), codingPath: codingPath + [key]) }
        func decode(_ type: UInt128.Type, forKey key: Key) throws -> UInt128 { try fromJSON(UInt128.self, try field(key), codingPath: codingPath + [key]) }
        func decodeIfPresent(_ type: Int128.Type, forKey key: Key) throws -> Int128? {
            guard let value = fields[key.stringValue], value != .null else { return nil }
            return try fromJSON(Int128.self, value, codingPath: codingPath + [key])
        }
        func decodeIfPresent(_ type: UInt128.Type, forKey key: Key) throws -> UInt128? {
            guard let value = fields[key.stringValue], value != .null else { return nil }
            return try fromJSON(UInt128.self, value, codingPath: codingPath + [key])
        }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
            try StoredValueDecoder(try field(key), codingPath: codingPath + [key]).container(keyedBy: type)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            try StoredValueDecoder(try field(key), codingPath: codingPath + [key]).unkeyedContainer()
        }

        // As JSONDecoder: a missing key is a null value, not an error, for a super decoder.
        func superDecoder() throws -> any Decoder { StoredValueDecoder(fields["super"] ?? .null, codingPath: codingPath + [SuperKey()]) }

        func superDecoder(forKey key: Key) throws -> any Decoder { StoredValueDecoder(fields[key.stringValue] ?? .null, codingPath: codingPath + [key]) }
    }

    private struct Unkeyed: UnkeyedDecodingContainer {
        let elements: [StoredValue]
        let codingPath: [any CodingKey]
        private(set) var currentIndex = 0

        init(elements: [StoredValue], codingPath: [any CodingKey]) {
            self.elements = elements
            self.codingPath = codingPath
        }

        var count: Int? { elements.count }
        var isAtEnd: Bool { currentIndex >= elements.count }

        private var place: [any CodingKey] { codingPath + [IndexKey(intValue: currentIndex)] }

        private func current(_ type: Any.Type) throws -> StoredValue {
            guard !isAtEnd else { throw DecodingError.valueNotFound(type, .init(codingPath: place, debugDescription: "unkeyed container is at end")) }
            return elements[currentIndex]
        }

        mutating func decodeNil() throws -> Bool {
            guard try current(Never?.self) == .null else { return false }
            currentIndex += 1
            return true
        }

        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
            let decoded = try StoredValueDecoder.decode(T.self, from: try current(T.self), codingPath: place)
            currentIndex += 1
            return decoded
        }

        mutating func decode(_ type: Int128.Type) throws -> Int128 { try wide(Int128.self) }
        mutating func decode(_ type: UInt128.Type) throws -> UInt128 { try wide(UInt128.self) }
        mutating func decodeIfPresent(_ type: Int128.Type) throws -> Int128? { try decodeNil() ? nil : try wide(Int128.self) }
        mutating func decodeIfPresent(_ type: UInt128.Type) throws -> UInt128? { try decodeNil() ? nil : try wide(UInt128.self) }

        private mutating func wide<T: Decodable>(_ type: T.Type) throws -> T {
            let decoded = try fromJSON(T.self, try current(T.self), codingPath: place)
            currentIndex += 1
            return decoded
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
            let container = try StoredValueDecoder(try current(KeyedDecodingContainer<NestedKey>.self), codingPath: place).container(keyedBy: type)
            currentIndex += 1
            return container
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            let container = try StoredValueDecoder(try current((any UnkeyedDecodingContainer).self), codingPath: place).unkeyedContainer()
            currentIndex += 1
            return container
        }

        mutating func superDecoder() throws -> any Decoder {
            let decoder = StoredValueDecoder(try current((any Decoder).self), codingPath: place)
            currentIndex += 1
            return decoder
        }
    }

    private struct Single: SingleValueDecodingContainer {
        let value: StoredValue
        let codingPath: [any CodingKey]

        func decodeNil() -> Bool { value == .null }
        func decode(_ type: Int128.Type) throws -> Int128 { try fromJSON(Int128.self, value, codingPath: codingPath) }
        func decode(_ type: UInt128.Type) throws -> UInt128 { try fromJSON(UInt128.self, value, codingPath: codingPath) }

        func decode<T: Decodable>(_ type: T.Type) throws -> T {
            try StoredValueDecoder.decode(T.self, from: value, codingPath: codingPath)
        }
    }

    private struct IndexKey: CodingKey {
        let intValue: Int?
        var stringValue: String { "Index \(intValue ?? 0)" }
        init(intValue: Int) { self.intValue = intValue }
        init?(stringValue: String) { nil }
    }

    private struct SuperKey: CodingKey {
        var stringValue: String { "super" }
        var intValue: Int? { nil }
        init() {}
        init?(stringValue: String) { nil }
        init?(intValue: Int) { nil }
    }
}
