import Foundation

/// A JSON value, as parsed from text. A number whose value is a whole number within 64 bits keeps
/// its exact value, however it is written (`2`, `2.0`, `2e3`): `int`, or `uint` above
/// `Int64.max`. Any other number is a `double` (a fraction, or a whole number beyond 64 bits).
///
/// ```swift
/// let value = try JSONValue(parsing: Data(#"{"name": "Ana", "age": 31}"#.utf8))
/// if case .object(let fields) = value, case .int(let age)? = fields["age"] { print(age) }   // 31
/// ```
public indirect enum JSONValue: Sendable, Equatable {
    /// JSON `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// An integer that fits in `Int64`, exactly as written.
    case int(Int64)
    /// An integer above `Int64.max` (up to `UInt64.max`).
    case uint(UInt64)
    /// Any other number: one with a fraction, or a whole number beyond 64 bits.
    case double(Double)
    /// A string, escapes decoded.
    case string(String)
    /// An array, in order.
    case array([JSONValue])
    /// An object, members by name (parsing rejects a repeated name).
    case object([String: JSONValue])

    /// Parses JSON text (RFC 8259, UTF-8). Malformed input throws `StrataError.invalidInput` saying
    /// what was wrong and where (line, column and byte offset); it never traps.
    ///
    /// ```swift
    /// do { _ = try JSONValue(parsing: Data("{\"a\": }".utf8)) }
    /// catch StrataError.invalidInput(let why) { print(why) }   // "expected a value, found '}' at line 1, column 7 (byte 6)"
    /// ```
    public init(parsing data: Data) throws {
        var parser = JSONParser(bytes: [UInt8](data))
        self = try parser.parseDocument()
    }

    /// A short description of the value's kind and, for scalars, the value: for error messages.
    var summary: String {
        switch self {
        // Said without converting the elements: a key built in code may nest deeper than a
        // conversion can recurse (`StoredValue.init(json:path:)`).
        case .array: return "an array"
        case .object: return "an object"
        default: return StoredValue(self).summary
        }
    }
}
