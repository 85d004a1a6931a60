import Foundation

/// A raw-value enum as JSON holds it. A record holds its raw value (FORMAT.md §8.2); JSON given to
/// a partial update holds what `JSONEncoder` writes, as a server sends it, which an enum with its
/// own `Codable` makes another value (a wire format's numbers or names: `encode(to:)` writing
/// `rawValue + 1`, or "open" for the case whose raw value is "O"). This turns the one into the
/// other through the type's own `init(from:)`, so that a patch stores the case `JSONDecoder` would
/// read, not the case whose raw value the wire number happens to be. Every raw-value enum field
/// reads so (whether its `Codable` is its own cannot be told from one case: one may write its
/// first case as its raw value and no other); for a synthesized `Codable` the two agree.
struct WireEnum: Sendable {
    private let converter: any WireConverting

    struct WireEnumError: Error {
        let reason: String
    }

    /// The raw value of the case a wire value decodes to (by `JSONDecoder`), or why none.
    func rawValue(_ given: StoredValue) -> Result<StoredValue, WireEnumError> { converter.rawValue(given) }

    /// The converter of `value`'s type (a raw-value enum's, or an option set's); nil for a value
    /// that is not `RawRepresentable` and `Codable`, or whose raw value is no JSON scalar (a
    /// tagged `Date`: its JSON form is the date's, which the field reads as it reads any date).
    static func of(_ value: Any) -> WireEnum? {
        guard let value = value as? any RawRepresentable & Codable, storedValue(value.rawValue) != nil else { return nil }
        return WireEnum(converter: converter(value))
    }

    private static func converter<E: RawRepresentable & Codable>(_ value: E) -> any WireConverting { WireConverter<E>() }

    /// The JSON form of `value` (an enum given as itself to a partial update) when it differs
    /// from its raw value's; nil when they agree or it cannot be written.
    static func wireValue(of value: Any) -> JSONValue? {
        guard let value = value as? any RawRepresentable & Encodable, let raw = fragment(value.rawValue),
            let wire = try? JSONEncoder().encode(value), wire != raw
        else { return nil }
        var parser = JSONParser(bytes: Array(wire))
        return try? parser.parseDocument()
    }

    /// Decodes wire values as `E`. (A type, not a closure: a closure capturing `E` would hold
    /// its metatype, which need not be Sendable.)
    private struct WireConverter<E: RawRepresentable & Codable>: WireConverting {
        func rawValue(_ given: StoredValue) -> Result<StoredValue, WireEnumError> {
            // (Any JSON value: a type may read an object or an array, as JSONDecoder lets it.)
            let json = Data(given.json.utf8)
            let decoded: E
            do {
                decoded = try JSONDecoder().decode(E.self, from: json)
            } catch {
                return .failure(WireEnumError(reason: "\(E.self).init(from:) does not read \(given.summary): \(error)"))
            }
            guard let raw = WireEnum.storedValue(decoded.rawValue) else {
                return .failure(WireEnumError(reason: "\(E.self)'s raw value \(decoded.rawValue) is not a stored primitive"))
            }
            return .success(raw)
        }
    }

    /// A scalar as a JSON document of one value (what JSONDecoder reads it from).
    fileprivate static func fragment(_ value: StoredValue) -> Data? {
        switch value {
        case .string(let s): return try? JSONEncoder().encode(s)
        case .int(let v): return Data("\(v)".utf8)
        case .uint(let v): return Data("\(v)".utf8)
        case .double(let v): return v.isFinite ? try? JSONEncoder().encode(v) : nil
        case .bool(let v): return Data((v ? "true" : "false").utf8)
        default: return nil
        }
    }

    /// A raw value (an integer, a floating-point number, a string or a Bool) as JSON.
    private static func fragment(_ raw: Any) -> Data? { storedValue(raw).flatMap { fragment($0) } }

    fileprivate static func storedValue(_ raw: Any) -> StoredValue? {
        switch raw {
        case let v as String: return .string(v)
        case let v as Bool: return .bool(v)
        case let v as Double: return .double(v)
        case let v as Float: return .double(Double(v))
        case let v as any BinaryInteger:
            if let signed = Int64(exactly: v) { return .int(signed) }
            return UInt64(exactly: v).map { .uint($0) }
        default: return nil
        }
    }
}

private protocol WireConverting: Sendable {
    func rawValue(_ given: StoredValue) -> Result<StoredValue, WireEnum.WireEnumError>
}
