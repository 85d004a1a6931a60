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

    /// Converts a value from a `[String: Any]`. `path` names it in errors.
    ///
    /// Primitive types are matched by exact type first: `as?` casts bridge through `NSNumber`,
    /// where `1 as? Bool` and `true as? Int` both succeed.
    init(any value: Any, path: FieldPath) throws {
        // A model nests far less deeply; hostile input must not overflow the stack. (A Foundation
        // array that contains itself cannot be handled: on Linux, Foundation's own bridging of
        // its elements recurses without end before a value reaches this code.)
        guard path.depth < JSONParser.maxDepth else {
            throw path.mismatch("nesting deeper than \(JSONParser.maxDepth) levels")
        }
        let type = Swift.type(of: value)
        if let optional = value as? any OptionalValue {
            guard let wrapped = optional.wrappedAny else { self = .null; return }
            self = try StoredValue(any: wrapped, path: path)
            return
        }
        if type == Bool.self, let v = value as? Bool { self = .bool(v); return }
        if let v = Self.nativeInteger(value, type: type) { self = v; return }
        if type == Double.self, let v = value as? Double { self = Self.swiftDouble(v); return }
        if type == Float.self, let v = value as? Float { self = Self.swiftDouble(Double(v)); return }
        if type == String.self, let v = value as? String { self = .string(v); return }
        if type == Substring.self, let v = value as? Substring { self = .string(String(v)); return }
        if type == Date.self, let v = value as? Date { self = .date(v); return }
        if type == Data.self, let v = value as? Data { self = .data(v); return }
        if type == UUID.self, let v = value as? UUID { self = .uuid(v); return }
        if type == URL.self, let v = value as? URL { self = .url(v.absoluteString); return }
        if type == Decimal.self, let v = value as? Decimal { self = .decimal(v); return }
        if let v = value as? JSONValue { self = StoredValue(v); return }
        if value is NSNull { self = .null; return }
        if let number = value as? NSNumber { self = Self.number(number); return }
        if let v = value as? String { self = .string(v); return }  // NSString
        if let v = value as? [String: Any] {
            var fields: [String: StoredValue] = [:]
            for (key, element) in v { fields[key] = try StoredValue(any: element, path: path.appending(key)) }
            self = .object(fields)
            return
        }
        // Arrays, and sets and other collections given for array or set fields.
        if let v = (value as? [Any]) ?? (value as? any Collection).map({ Self.elements($0) }) {
            self = .array(try v.enumerated().map { try StoredValue(any: $1, path: path.appending(index: $0)) })
            return
        }
        // Enum cases and references given as themselves stand for their raw value and key.
        if let v = value as? any RawRepresentable { self = try StoredValue(any: v.rawValue, path: path); return }
        if let v = value as? any ReferenceValue { self = try StoredValue(any: v.keyAny, path: path); return }
        throw path.mismatch("a value of type \(type) cannot be given for a field")
    }

    private static func elements<C: Collection>(_ collection: C) -> [Any] { collection.map { $0 } }

    private static func nativeInteger(_ value: Any, type: Any.Type) -> StoredValue? {
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
    private static func number(_ n: NSNumber) -> StoredValue {
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
    private static func swiftDouble(_ d: Double) -> StoredValue {
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

    init(model: String, text: String = "", depth: Int = 0) {
        self.model = model
        self.text = text
        self.depth = depth
    }

    func appending(_ field: String) -> FieldPath {
        FieldPath(model: model, text: text.isEmpty ? field : text + "." + field, depth: depth + 1)
    }

    func appending(index: Int) -> FieldPath {
        FieldPath(model: model, text: text + "[\(index)]", depth: depth + 1)
    }

    func mismatch(_ reason: String) -> StrataError {
        .typeMismatch(model: model, field: text.isEmpty ? "(model)" : text, reason: reason)
    }
}
