import Foundation

/// What the catalog stores for one model: its fields with their ids, its key and its indexes.
/// Kept as JSON in the `strata:schema` tree, so tools read it without the Swift types.
public struct StoredModelSchema: Codable, Equatable, Sendable {
    public var name: String
    /// The Swift type of the primary key, e.g. "String", "Optional<Int>".
    public var keyType: String
    public var object: ObjectSchema
    public var indexes: [IndexSchema]
    /// Version of the whole schema, as given to `Database(…, schemaVersion:)`.
    public var schemaVersion: Int

    /// The tree holding the model's records.
    var recordTree: String { "m:" + name }
}

/// One secondary index.
public struct IndexSchema: Codable, Equatable, Sendable {
    /// Dotted field path, e.g. "name" or "address.city".
    public var path: String
    public var unique: Bool

    func treeName(model: String) -> String { "i:\(model):\(path)" }
}

enum Catalog {
    static let schemaTree = "strata:schema"

    /// Every stored model schema, from the catalog tree of a snapshot or of the write transaction.
    static func load<T: KeyValueTree>(_ tree: T?) throws -> [String: StoredModelSchema] {
        var result: [String: StoredModelSchema] = [:]
        guard let tree else { return result }
        try tree.makeCursor().forEach { key, value in
            let schema = try decode(value)
            result[String(decoding: key, as: UTF8.self)] = schema
            return true
        }
        return result
    }

    static func decode(_ bytes: UnsafeRawBufferPointer) throws -> StoredModelSchema {
        do {
            return try JSONDecoder().decode(StoredModelSchema.self, from: Data(bytes))
        } catch {
            throw StrataError.corruptRecord("schema catalog entry does not decode: \(error)")
        }
    }

    static func encode(_ schema: StoredModelSchema) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return Array(try encoder.encode(schema))
    }
}

/// Dotted field path of a key path: `\Person.address.city` → "address.city".
func fieldPath<Root>(of keyPath: PartialKeyPath<Root>) -> String? {
    let description = String(describing: keyPath)   // "\Person.address?.city"
    guard description.hasPrefix("\\"), let dot = description.firstIndex(of: ".") else { return nil }
    let path = description[description.index(after: dot)...].replacingOccurrences(of: "?", with: "").replacingOccurrences(of: "!", with: "")
    if path.isEmpty || path.contains("(") || path.contains("[") { return nil }
    return path
}

extension ObjectSchema {
    /// The type of the field at a dotted path, looking through optional nested structs.
    func type(atPath path: String) -> FieldType? {
        var schema = self
        var type: FieldType?
        let parts = path.split(separator: ".")
        for (i, part) in parts.enumerated() {
            guard let field = schema.field(named: String(part)) else { return nil }
            type = field.type
            if i < parts.count - 1 {
                guard case .object(let nested) = field.type.unwrapped else { return nil }
                schema = nested
            }
        }
        return type
    }
}
