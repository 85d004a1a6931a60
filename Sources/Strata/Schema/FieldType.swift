import Foundation

/// The stored type of a field, derived from the model's Swift type.
///
/// ```swift
/// for schema in try StoredObjects.schemas(in: db.store) {
///     for field in schema.object.liveFields { print(schema.name, field.name, field.type) }   // Person age Int64
/// }
/// ```
public indirect enum FieldType: Equatable, Sendable, Codable, CustomStringConvertible {
    /// `Bool`.
    case bool
    /// Any fixed-width integer; all widths share one encoding, so widening a field needs no
    /// migration (narrowing one does: a stored value may not fit).
    case int(bits: Int, signed: Bool)
    /// `Double`.
    case double
    /// `Float`.
    case float
    /// `String`, stored as UTF-8.
    case string
    /// `Data`.
    case data
    /// `Date`.
    case date
    /// `UUID`.
    case uuid
    /// `Decimal`.
    case decimal
    /// `URL`, stored as its absolute string.
    case url
    /// An enum with a raw value, stored as the raw value.
    case enumeration(FieldType)
    /// An optional of the wrapped type.
    case optional(FieldType)
    /// Arrays and sets.
    case array(FieldType)
    /// `[String: T]`.
    case dictionary(FieldType)
    /// A nested struct stored inline.
    case object(ObjectSchema)
    /// `Ref<M>`: the referenced model's name; stored as its primary key.
    case reference(String)

    public var description: String {
        switch self {
        case .bool: return "Bool"
        case let .int(bits, signed): return (signed ? "Int" : "UInt") + "\(bits)"
        case .double: return "Double"
        case .float: return "Float"
        case .string: return "String"
        case .data: return "Data"
        case .date: return "Date"
        case .uuid: return "UUID"
        case .decimal: return "Decimal"
        case .url: return "URL"
        case let .enumeration(raw): return "enum(\(raw))"
        case let .optional(inner): return "\(inner)?"
        case let .array(element): return "[\(element)]"
        case let .dictionary(value): return "[String: \(value)]"
        case let .object(schema): return schema.typeName
        case let .reference(model): return "Ref<\(model)>"
        }
    }

    /// The type without optionals (`String??` → `String`).
    ///
    /// ```swift
    /// if case .object(let inner) = field.type.unwrapped { print(inner.typeName) }   // a struct, optional or not
    /// ```
    public var unwrapped: FieldType {
        if case .optional(let inner) = self { return inner.unwrapped }
        return self
    }

    /// Whether values may be nil.
    ///
    /// ```swift
    /// let required = schema.object.liveFields.filter { !$0.type.isOptional }.map(\.name)
    /// ```
    public var isOptional: Bool {
        if case .optional = self { return true }
        return false
    }

    /// Whether every value stored as `self` reads as a value of `other`: the same storage, and for
    /// integers the same signedness and a width at least as large (widths share one encoding and
    /// differ only in range; a narrower one would not hold every stored value).
    func isStorageCompatible(with other: FieldType) -> Bool {
        switch (self, other) {
        case let (.int(stored, a), .int(current, b)): return a == b && current >= stored
        case let (.optional(a), .optional(b)), let (.array(a), .array(b)), let (.dictionary(a), .dictionary(b)),
            let (.enumeration(a), .enumeration(b)):
            return a.isStorageCompatible(with: b)
        case let (.object(a), .object(b)): return a.isStorageCompatible(with: b)
        default: return self == other
        }
    }
}

/// One stored field of a model or nested struct.
///
/// ```swift
/// let fields = try StoredObjects.schemas(in: db.store).first { $0.name == "Person" }?.object.liveFields ?? []
/// print(fields.map { "\($0.id) \($0.name): \($0.type)" })
/// ```
public struct FieldSchema: Equatable, Sendable, Codable {
    /// The coding key's name.
    public var name: String
    /// The id records store the field under; never reused within a model.
    public var id: Int
    /// The field's stored type.
    public var type: FieldType
    /// A field the model no longer has: kept so old records stay readable and its id is not reused.
    public var removed: Bool = false

    /// The ids a field may have: what a record's field table holds (FORMAT.md §8.2), with room to
    /// shift an id into a table header (`id << 1 | isNil`) and to number the next field.
    static let validIDs = 0...Int(Int32.max)
}

/// The fields of a model or a nested struct.
///
/// ```swift
/// let person = try StoredObjects.schemas(in: db.store).first { $0.name == "Person" }
/// print(person?.object.typeName ?? "-", person?.object.liveFields.count ?? 0)
/// ```
public struct ObjectSchema: Equatable, Sendable, Codable {
    /// The Swift type's name, as `String(describing:)` gives it.
    public var typeName: String
    /// Every field ever stored, removed ones included, each with its id.
    public var fields: [FieldSchema]

    /// Fields the current type has (not removed), in declaration order.
    public var liveFields: [FieldSchema] { fields.filter { !$0.removed } }

    /// Whether a record may hold bytes the type no longer reads: a removed field, here or nested.
    var hasRemovedFields: Bool { fields.contains { $0.removed || $0.type.hasRemovedFields } }

    func field(named name: String) -> FieldSchema? { fields.first { $0.name == name && !$0.removed } }

    /// This schema with every struct's Swift type name left out: what records are laid out by.
    /// A type renamed (its `Model.modelName` kept), or a nested struct renamed, stores and reads
    /// the same bytes, and is no schema change.
    var withoutTypeNames: ObjectSchema {
        ObjectSchema(typeName: "", fields: fields.map { FieldSchema(name: $0.name, id: $0.id, type: $0.type.withoutTypeNames, removed: $0.removed) })
    }

    func isStorageCompatible(with other: ObjectSchema) -> Bool {
        for field in liveFields {
            guard let match = other.field(named: field.name) else { continue }
            if !field.type.isStorageCompatible(with: match.type) { return false }
        }
        return true
    }
}

extension FieldType {
    /// Whether this is a struct's fields.
    var isObject: Bool { if case .object = self { true } else { false } }

    /// Whether a key of this type reads back from its bytes as a value (`UntypedDecoding.key`).
    var isKeyable: Bool {
        switch self {
        case .bool, .int, .double, .float, .date, .string, .url, .data, .uuid, .decimal: return true
        case .optional(let inner), .enumeration(let inner): return inner.isKeyable
        default: return false
        }
    }

    /// `ObjectSchema.withoutTypeNames` of every struct inside.
    var withoutTypeNames: FieldType {
        switch self {
        case .object(let schema): return .object(schema.withoutTypeNames)
        case .optional(let inner): return .optional(inner.withoutTypeNames)
        case .array(let inner): return .array(inner.withoutTypeNames)
        case .dictionary(let inner): return .dictionary(inner.withoutTypeNames)
        case .enumeration(let raw): return .enumeration(raw.withoutTypeNames)
        default: return self
        }
    }

    /// The stored type of a primitive Swift type named as `String(describing:)` names it
    /// ("Int", "Optional<String>", "UUID"); nil for anything else.
    init?(primitiveTypeName name: String) {
        // Peeled in a loop, a few layers at most: the name may come from a damaged catalog, where
        // a million "Optional<" would recurse (and copy the rest of the string) a million times.
        var rest = Substring(name)
        var optionals = 0
        while rest.hasPrefix("Optional<"), rest.hasSuffix(">") {
            optionals += 1
            if optionals > 8 { return nil }
            rest = rest.dropFirst("Optional<".count).dropLast()
        }
        guard var type = FieldType(primitiveTypeNameWithoutOptional: rest) else { return nil }
        for _ in 0..<optionals { type = .optional(type) }
        self = type
    }

    private init?(primitiveTypeNameWithoutOptional name: Substring) {
        switch name {
        case "Bool": self = .bool
        case "Int", "Int64": self = .int(bits: 64, signed: true)
        case "Int32": self = .int(bits: 32, signed: true)
        case "Int16": self = .int(bits: 16, signed: true)
        case "Int8": self = .int(bits: 8, signed: true)
        case "UInt", "UInt64": self = .int(bits: 64, signed: false)
        case "UInt32": self = .int(bits: 32, signed: false)
        case "UInt16": self = .int(bits: 16, signed: false)
        case "UInt8": self = .int(bits: 8, signed: false)
        case "Double": self = .double
        case "Float": self = .float
        case "String": self = .string
        case "Data": self = .data
        case "Date": self = .date
        case "UUID": self = .uuid
        default: return nil
        }
    }
}

extension FieldType {
    /// Whether a value of this type may hold a removed field's bytes (see `ObjectSchema`).
    fileprivate var hasRemovedFields: Bool {
        switch self {
        case .object(let schema): return schema.hasRemovedFields
        case .optional(let t), .array(let t), .dictionary(let t), .enumeration(let t): return t.hasRemovedFields
        default: return false
        }
    }
}

/// Checks of a stored schema read from a file (`Catalog.decode`): every number the schema and
/// record layers compute with must be one they can hold, so that a damaged or hostile catalog is
/// refused as corrupt when read rather than trapping, or misreading records, later.
extension ObjectSchema {
    /// Throws `corruptRecord` naming the first field (as a dotted path from `path`) whose id is out
    /// of range or taken by another field of the same struct, or whose type is not one Strata writes.
    func validate(path: String) throws {
        var seen = Set<Int>()
        for field in fields {
            let fieldPath = path + "." + field.name
            guard FieldSchema.validIDs.contains(field.id) else {
                throw StrataError.corruptRecord(
                    "stored schema: field \(fieldPath) has id \(field.id), outside \(FieldSchema.validIDs.lowerBound)...\(FieldSchema.validIDs.upperBound)")
            }
            guard seen.insert(field.id).inserted else {
                throw StrataError.corruptRecord("stored schema: field \(fieldPath) has id \(field.id), as another field of \(path) has")
            }
            try field.type.validate(path: fieldPath)
        }
    }
}

extension FieldType {
    /// The widths `SchemaProbe` gives integer types; arithmetic on a width (range checks of
    /// partial updates) assumes one of them.
    static let integerWidths: Set<Int> = [8, 16, 32, 64]

    /// Throws `corruptRecord` if this type, or one inside it, holds a number Strata never writes.
    func validate(path: String) throws {
        switch self {
        case let .int(bits, _):
            guard Self.integerWidths.contains(bits) else {
                throw StrataError.corruptRecord("stored schema: field \(path) is an integer of \(bits) bits (only 8, 16, 32 and 64 are stored)")
            }
        case .optional(let inner), .array(let inner), .dictionary(let inner), .enumeration(let inner): try inner.validate(path: path)
        case .object(let schema): try schema.validate(path: path)
        case .bool, .double, .float, .string, .data, .date, .uuid, .decimal, .url, .reference: break
        }
    }
}
