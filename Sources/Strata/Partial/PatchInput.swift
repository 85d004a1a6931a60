import Foundation

/// Values given for fields, from JSON or from a `[String: Any]`, are `StoredValue`s: besides
/// JSON's kinds they hold the native Foundation values a dictionary may carry, so that a `Date` or
/// `Data` goes into the record as itself, never through a text form that could lose precision.
extension StoredValue {
    init(_ json: JSONValue) {
        switch json {
        case .null: self = .null
        case .bool(let b): self = .bool(b)
        case .int(let i): self = .int(i)
        case .uint(let u): self = .uint(u)
        case .double(let d): self = .double(d)
        case .string(let s): self = .string(s)
        case .array(let values): self = .array(values.map(StoredValue.init))
        case .object(let fields): self = .object(fields.mapValues(StoredValue.init))
        }
    }

    /// Converts a `JSONValue` a caller built (a change message's fields or key, a value in a
    /// `[String: Any]`). Parsed JSON is bounded by the parser, but one built in code may nest as
    /// deeply as its builder likes, and the plain conversion recurses once per level: at 1,000
    /// levels it overflowed a 512 KiB stack in a debug build, where the value itself was still
    /// made and freed without trouble. `path` names it in errors.
    init(json: JSONValue, path: FieldPath) throws {
        guard path.depth < JSONParser.maxDepth else {
            throw path.mismatch("nesting deeper than \(JSONParser.maxDepth) levels")
        }
        switch json {
        case .array(let values):
            self = .array(try values.enumerated().map { try StoredValue(json: $1, path: path.appending(index: $0)) })
        case .object(let members):
            var fields: [String: StoredValue] = [:]
            for (key, member) in members { fields[key] = try StoredValue(json: member, path: path.appending(key)) }
            self = .object(fields)
        default:
            self = StoredValue(json)
        }
    }

    /// Converts a value from a `[String: Any]`. `path` names it in errors.
    ///
    /// Primitive types are matched by exact type first: `as?` casts bridge through `NSNumber`,
    /// where `1 as? Bool` and `true as? Int` both succeed.
    init(any value: Any, path: FieldPath) throws {
        // A model nests far less deeply; hostile input must not overflow the stack, a 512 KiB one
        // (Darwin's secondary threads) in a debug build included: the recursion goes through this
        // small frame only, the many casts of `Input.init` take theirs one level at a time. (A
        // Foundation array that contains itself cannot be handled: on Linux, Foundation's own
        // bridging of its elements recurses without end before a value reaches this code.)
        guard path.depth < JSONParser.maxDepth else {
            throw path.mismatch("nesting deeper than \(JSONParser.maxDepth) levels")
        }
        switch Input(value) {
        case .value(let stored):
            self = stored
        case .json(let json):
            self = try StoredValue(json: json, path: path)
        case .wrapped(let inner):
            self = try StoredValue(any: inner, path: path)
        case .object(let dictionary):
            var fields: [String: StoredValue] = [:]
            for (key, element) in dictionary { fields[key] = try StoredValue(any: element, path: path.appending(key)) }
            self = .object(fields)
        case .array(let elements):
            self = .array(try elements.enumerated().map { try StoredValue(any: $1, path: path.appending(index: $0)) })
        case .unsupported(let type):
            throw path.mismatch("a value of type \(type) cannot be given for a field")
        }
    }

    /// What a value from a `[String: Any]` is, found without recursing.
    private enum Input {
        /// A scalar, converted.
        case value(StoredValue)
        /// A `JSONValue`, converted with its depth bounded.
        case json(JSONValue)
        /// A value standing for another: an optional's wrapped value, an enum case's raw value,
        /// a reference's key.
        case wrapped(Any)
        case object([String: Any])
        /// Arrays, and sets and other collections given for array or set fields.
        case array([Any])
        case unsupported(Any.Type)

        @inline(never)
        init(_ value: Any) {
            let type = Swift.type(of: value)
            if let optional = value as? any OptionalValue {
                guard let wrapped = optional.wrappedAny else { self = .value(.null); return }
                self = .wrapped(wrapped)
                return
            }
            if type == Bool.self, let v = value as? Bool { self = .value(.bool(v)); return }
            if let v = StoredValue.nativeInteger(value, type: type) { self = .value(v); return }
            if type == Double.self, let v = value as? Double { self = .value(StoredValue.swiftDouble(v)); return }
            if type == Float.self, let v = value as? Float { self = .value(StoredValue.swiftDouble(Double(v))); return }
            if type == String.self, let v = value as? String { self = .value(.string(v)); return }
            if type == Substring.self, let v = value as? Substring { self = .value(.string(String(v))); return }
            if type == Date.self, let v = value as? Date { self = .value(.date(v)); return }
            if type == Data.self, let v = value as? Data { self = .value(.data(v)); return }
            if type == UUID.self, let v = value as? UUID { self = .value(.uuid(v)); return }
            if type == URL.self, let v = value as? URL { self = .value(.url(v.absoluteString)); return }
            if type == Decimal.self, let v = value as? Decimal { self = .value(.decimal(v)); return }
            if let v = value as? JSONValue { self = .json(v); return }
            // An NSString before the collections: it must not be taken for a collection of
            // characters wherever the runtime would bridge it to one.
            if let v = value as? String { self = .value(.string(v)); return }
            // Dictionaries and arrays before the casts to Foundation classes below: casting a
            // Swift dictionary or array to `NSNull` or `NSNumber` bridges it to Foundation, every
            // level at once and recursively, which overflows the stack on deep input before the
            // depth check sees a level.
            if let v = value as? [String: Any] { self = .object(v); return }
            if let v = (value as? [Any]) ?? (value as? any Collection).map({ StoredValue.elements($0) }) {
                self = .array(v)
                return
            }
            if value is NSNull { self = .value(.null); return }
            if let number = value as? NSNumber { self = .value(StoredValue.number(number)); return }
            // Enum cases and references given as themselves stand for their raw value and key;
            // an enum with its own Codable for what JSONEncoder writes of it, as a patch holds
            // such an enum (WireEnum).
            if let wire = WireEnum.wireValue(of: value) { self = .json(wire); return }
            if let v = value as? any RawRepresentable { self = .wrapped(v.rawValue); return }
            if let v = value as? any ReferenceValue { self = .wrapped(v.keyAny); return }
            self = .unsupported(type)
        }
    }

    fileprivate static func elements<C: Collection>(_ collection: C) -> [Any] { collection.map { $0 } }

    fileprivate static func nativeInteger(_ value: Any, type: Any.Type) -> StoredValue? {
        switch value {
        case let v as Int where type == Int.self: return .int(Int64(v))
        case let v as Int8 where type == Int8.self: return .int(Int64(v))
        case let v as Int16 where type == Int16.self: return .int(Int64(v))
        case let v as Int32 where type == Int32.self: return .int(Int64(v))
        case let v as Int64 where type == Int64.self: return .int(v)
        case let v as UInt where type == UInt.self: return .uint(UInt64(v))
        case let v as UInt8 where type == UInt8.self: return .uint(UInt64(v))
        case let v as UInt16 where type == UInt16.self: return .uint(UInt64(v))
        case let v as UInt32 where type == UInt32.self: return .uint(UInt64(v))
        case let v as UInt64 where type == UInt64.self: return .uint(v)
        default: return nil
        }
    }

    /// `JSONSerialization` gives `NSNumber`s for numbers and for `true`/`false`; the booleans are
    /// instances of a class of their own (`__NSCFBoolean`, on Linux too), which is how they are told
    /// apart from 0 and 1.
    fileprivate static func number(_ n: NSNumber) -> StoredValue {
        if Swift.type(of: n) == booleanClass { return .bool(n.boolValue) }
        switch String(cString: n.objCType) {
        case "f", "d": return swiftDouble(n.doubleValue)
        case "C", "S", "I", "L", "Q": return .uint(n.uint64Value)
        default: return .int(n.int64Value)
        }
    }

    /// A `Double` given in Swift (or by `JSONSerialization`, which reads -9223372036854775808 as
    /// one): a whole number within `Int64` is that integer, so that an integer field takes it
    /// whatever its size. (A `.double` from JSON text is only ever a fraction or beyond 64 bits:
    /// `JSONParser.wholeNumber`; above 2^53 an integer field refuses it.) Negative zero stays a
    /// `Double`, for a floating-point field.
    fileprivate static func swiftDouble(_ d: Double) -> StoredValue {
        if d.isFinite, !(d == 0 && d.sign == .minus), let i = Int64(exactly: d) { return .int(i) }
        return .double(d)
    }

    private static let booleanClass: AnyClass = Swift.type(of: NSNumber(value: true))

    /// A short description of the value's kind and, for scalars, the value: for error messages.
    var summary: String {
        switch self {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .int(let i): return "the number \(i)"
        case .uint(let u): return "the number \(u)"
        case .double(let d): return "the number \(d)"
        case .string(let s): return "the string \(jsonString(s.count > 40 ? String(s.prefix(40)) + "…" : s))"
        case .array: return "an array"
        case .object: return "an object"
        case .date(let d): return "the Date \(d)"
        case .data(let d): return "Data of \(d.count) bytes"
        case .uuid(let u): return "the UUID \(u.uuidString)"
        case .url(let u): return "the URL \(u)"
        case .decimal(let d): return "the Decimal \(d)"
        case let .reference(model, key): return "a reference to \(model) \(key)"
        }
    }
}

/// A dotted field path for error messages and reports: `address.city`, `tags[2]`, `labels.home`.
struct FieldPath {
    let model: String
    let text: String
    /// How many levels below the object this is (bounds recursion on nested input).
    let depth: Int
    /// The path as the schema probe names it: an element is `[]`, a dictionary's value `[key]`
    /// (whatever its index or key), so that facts found per field apply to every element.
    let shape: String

    init(model: String, text: String = "", depth: Int = 0, shape: String = "") {
        self.model = model
        self.text = text
        self.depth = depth
        self.shape = shape
    }

    func appending(_ field: String) -> FieldPath {
        FieldPath(
            model: model, text: text.isEmpty ? field : text + "." + field, depth: depth + 1, shape: shape.isEmpty ? field : shape + "." + field)
    }

    func appending(index: Int) -> FieldPath {
        FieldPath(model: model, text: text + "[\(index)]", depth: depth + 1, shape: shape + "[]")
    }

    /// A dictionary's value at `key`.
    func appending(entry key: String) -> FieldPath {
        FieldPath(model: model, text: text.isEmpty ? key : text + "." + key, depth: depth + 1, shape: shape + "[key]")
    }

    func mismatch(_ reason: String) -> StrataError {
        .typeMismatch(model: model, field: text.isEmpty ? "(model)" : text, reason: reason)
    }
}
