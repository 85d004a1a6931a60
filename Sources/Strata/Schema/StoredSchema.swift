import Foundation

/// What the catalog stores for one model: its fields with their ids, its key and its indexes.
/// Kept as JSON in the `strata:schema` tree, so tools read it without the Swift types.
///
/// ```swift
/// for schema in try StoredObjects.schemas(in: db.store) {
///     print(schema.name, schema.keyType, schema.indexes.map(\.path))
/// }
/// ```
public struct StoredModelSchema: Codable, Equatable, Sendable {
    /// The model's name (`Model.modelName`): the name of its trees and of its change messages.
    public var name: String
    /// The Swift type of the primary key, e.g. "String", "Optional<Int>".
    public var keyType: String
    /// The stored field holding the primary key (`id`, or its coding key such as `_id`); nil when
    /// `id` is computed (or in catalogs written before this was recorded: then `id` if stored).
    public var keyField: String?
    /// How the primary key is stored (nil in catalogs written before this was recorded).
    public var key: FieldType?
    /// The model's fields, removed ones included.
    public var object: ObjectSchema
    /// The model's secondary indexes.
    public var indexes: [IndexSchema]
    /// Version of the whole schema, as given to `Database(…, schemaVersion:)`.
    public var schemaVersion: Int

    /// The tree holding the model's records.
    var recordTree: String { "m:" + name }

    /// Every tree of the model: its records', then its indexes'.
    var trees: [String] { [recordTree] + indexes.map { $0.treeName(model: name) } }

    /// The stored field holding the primary key, if it is stored. A catalog written before
    /// `keyField` and `key` lacks both: its key is the field named `id`. One that records `key`
    /// without `keyField` has a computed key, whatever field is coded `id` (a wrapped `@Box var
    /// id`, whose property Mirror names `_id`; `var postID` coded "id" beside a computed `id`).
    var keyFieldSchema: FieldSchema? {
        if let keyField { return object.field(named: keyField) }
        return key == nil ? object.field(named: "id") : nil
    }

    /// The primary key's type: recorded, else that of its field, else read from the Swift type
    /// name (older catalogs). Nil only for an old catalog of a computed key of an unknown type.
    var keyFieldType: FieldType? {
        if let key { return key }
        if let field = keyFieldSchema { return field.type }
        return FieldType(primitiveTypeName: keyType)
    }

    /// Throws `corruptRecord` saying what is wrong and where if a number in the schema is one
    /// Strata never writes: a field id outside `FieldSchema.validIDs` or shared within one struct,
    /// an integer width other than 8, 16, 32 or 64. (`schemaVersion` is any `Int` an open was given.)
    func validate() throws {
        try object.validate(path: name)
        try key?.validate(path: name + ".id (the primary key)")
        // What writers refuse when they declare an index, refused when read: a tree name the
        // engine cannot hold (it would fail every read of the model, not as damage), and a
        // compound or collated index over a field that holds several values (its entries would
        // be every combination of them; `ModelInfo.validated` allows one entry per object).
        for tree in [recordTree] + indexes.map({ $0.treeName(model: name) }) where tree.utf8.count > 255 {
            throw StrataError.corruptRecord("stored schema: \(name): tree name \(quotedForError(String(tree.prefix(80))))… is longer than 255 bytes")
        }
        for index in indexes where index.paths.count > 1 || index.collation != nil {
            for path in index.paths {
                switch object.type(atPath: path)?.unwrapped {
                case .array?, .dictionary?, .object?:
                    throw StrataError.corruptRecord(
                        "stored schema: \(name): index \(quotedForError(index.path)) combines field \(path), which holds several values or none")
                default: break
                }
            }
        }
    }

    init(name: String, keyType: String, keyField: String?, key: FieldType?, object: ObjectSchema, indexes: [IndexSchema], schemaVersion: Int) {
        self.name = name
        self.keyType = keyType
        self.keyField = keyField
        self.key = key
        self.object = object
        self.indexes = indexes
        self.schemaVersion = schemaVersion
    }
}

/// One secondary index. `fields`, `collation` and `kind` were added without a format change:
/// catalogs written before them lack them, and their indexes are the single-field ones they were.
///
/// ```swift
/// let unique = try StoredObjects.schemas(in: db.store).flatMap { $0.indexes.filter(\.unique) }
/// ```
public struct IndexSchema: Codable, Equatable, Sendable {
    /// Dotted field path, e.g. "name" or "address.city"; for a compound index, its fields' paths
    /// joined by commas ("roomId,createdAt").
    public var path: String
    /// Whether two objects may not share a value (a combination of values, for a compound
    /// index); inserting a duplicate throws `StrataError.uniqueViolation`.
    public var unique: Bool
    /// A compound index's fields, in order (nil: the one field `path`).
    public var fields: [String]?
    /// How `String` values are ordered (nil: NFC bytes, FORMAT.md §8.1).
    public var collation: StringCollation?
    /// What the index holds (nil: field values).
    public var kind: IndexKind?

    /// What an index holds.
    public enum IndexKind: String, Codable, Sendable {
        /// Field values, some reached through an optional struct or an optional array: such a
        /// value is held as the optional Swift reads (0x00 for a nil on the way, 0x01 then the
        /// value), and a nil array has no entry (FORMAT.md §8.3). Every other value index is
        /// `nil`, as is such an index written before the tags, whose 0x00 for a nil could equal a
        /// value's key (`false`): a read-write open rebuilds it. (A kind, not a flag beside it:
        /// builds before it refuse the catalog rather than read these entries as their own.)
        case taggedValues
        /// The words of a text field, each word's postings in blocks (FORMAT.md §8.5). Stored as
        /// `fullTextBlocks2`, which builds with other words (or before the blocks) refuse to read
        /// rather than misread.
        case fullText = "fullTextBlocks2"
        /// The words of a text field, one entry per word and text: the full-text index of files
        /// written before the blocks (stored as `fullText`). Not read: the first read-write open
        /// rebuilds it as `fullText`, and a read-only open refuses the model until then.
        case fullTextEntries = "fullText"
        /// Blocks of the words builds before 2026-12-06 made, which took a combining mark with no
        /// word open (the variation selector of "❤️") for a word (stored as `fullTextBlocks`).
        /// Not read: rebuilt as `fullTextEntries` is.
        case fullTextMarkWords = "fullTextBlocks"

        /// For a full-text index this build does not read (the first read-write open rebuilds it),
        /// who wrote it, for messages; nil for one it reads.
        var outdatedBy: String? {
            switch self {
            case .fullText, .taggedValues: return nil
            case .fullTextEntries: return "a build before full-text blocks (an entry per word and text)"
            case .fullTextMarkWords: return "older builds, with older word rules (a variation selector could be a word)"
            }
        }
    }

    /// A single-field index, as catalogs have always stored it.
    ///
    /// ```swift
    /// let index = IndexSchema(path: "email", unique: true)   // i:<Model>:email
    /// ```
    public init(path: String, unique: Bool) {
        self.path = path
        self.unique = unique
    }

    init(paths: [String], unique: Bool, collation: StringCollation?, kind: IndexKind?) {
        self.path = paths.joined(separator: ",")
        self.unique = unique
        self.fields = paths.count > 1 ? paths : nil
        self.collation = collation
        self.kind = kind
    }

    /// This value index as the fields' types in `object` call for: `taggedValues` when some
    /// field needs its nils told apart (`ObjectSchema.nilNeedsTag`).
    func tagging(in object: ObjectSchema) -> IndexSchema {
        guard kind == nil || kind == .taggedValues else { return self }
        var index = self
        index.kind = paths.contains { object.nilNeedsTag(atPath: $0) } ? .taggedValues : nil
        return index
    }

    var isTagged: Bool { kind == .taggedValues }

    /// The index as declared, whatever layout of its entries a build wrote: two indexes whose
    /// entries differ only in how a build lays them out are equal so.
    var withoutLayout: IndexSchema {
        var index = self
        switch kind {
        case .taggedValues?: index.kind = nil
        case .fullTextEntries?, .fullTextMarkWords?: index.kind = .fullText
        default: break
        }
        return index
    }

    /// The indexed fields' paths, in order.
    ///
    /// ```swift
    /// for index in schema.indexes { print(index.paths) }   // ["roomId", "createdAt"] for a compound index
    /// ```
    public var paths: [String] { fields ?? [path] }

    /// A plain index on one field, as every index was before compound, collated and full-text ones.
    var isSingleValue: Bool { fields == nil && collation == nil && (kind == nil || kind == .taggedValues) }

    var isFullText: Bool { kind == .fullText }

    /// `i:<model>:<path>`, with `(<collation>)` or `(fullText)` after the path for those indexes.
    func treeName(model: String) -> String {
        var name = "i:\(model):\(path)"
        if let collation { name += "(\(collation))" }
        // Every layout of a full-text index uses one name, as both of a value index do: a
        // rebuild drops the old tree first.
        if let kind, kind != .taggedValues { name += "(fullText)" }
        return name
    }

    /// How `strata schema` and `explain()` name the index: its fields and what is special about it.
    ///
    /// ```swift
    /// for index in schema.indexes { print(index.summary) }   // email (unique)
    /// ```
    public var summary: String {
        var text = paths.joined(separator: ", ")
        if let collation { text += " collation \(collation)" }
        if kind == .fullText { text += " (full text)" }
        if let by = kind?.outdatedBy { text += " (full text, written by \(by): rebuilt by a read-write open)" }
        if unique { text += " (unique)" }
        return text
    }
}

enum Catalog {
    static let schemaTree = "strata:schema"

    /// Every stored model schema, from the catalog tree of a snapshot or of the write transaction.
    static func load<T: KeyValueTree>(_ tree: T?) throws -> [String: StoredModelSchema] {
        var result: [String: StoredModelSchema] = [:]
        guard let tree else { return result }
        try tree.makeCursor().forEach { key, value in
            let schema = try decode(value)
            // Lookups by key (opening a model) and by name (dump, references) must find the same
            // schema, or a model reads as missing under one and present under the other.
            guard key.elementsEqual(schema.name.utf8) else {
                throw StrataError.corruptRecord(
                    "schema catalog entry \(jsonString(String(decoding: key, as: UTF8.self))) holds the schema of model \(jsonString(schema.name))")
            }
            result[schema.name] = schema
            return true
        }
        return result
    }

    /// One catalog entry, decoded and validated (`StoredModelSchema.validate`).
    static func decode(_ bytes: UnsafeRawBufferPointer) throws -> StoredModelSchema {
        let schema: StoredModelSchema
        do {
            schema = try JSONDecoder().decode(StoredModelSchema.self, from: Data(bytes))
        } catch {
            throw StrataError.corruptRecord("schema catalog entry does not decode: \(error)")
        }
        try schema.validate()
        return schema
    }

    static func encode(_ schema: StoredModelSchema) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return Array(try encoder.encode(schema))
    }
}

/// The stored field path a key path reads: coding keys, not property names (`\Message.roomId`
/// with `case roomId = "rid"` → "rid"; `\Person.address?.city` → "address.city"). See FieldNames.
func fieldPath<Root>(of keyPath: PartialKeyPath<Root>) -> String? {
    FieldNames.queryPath(of: keyPath)
}

extension ObjectSchema {
    /// The field ids down a dotted path (one per level), looking through optional nested structs;
    /// nil when the path names no stored field.
    func fieldIDs(atPath path: String) -> [Int]? {
        var schema = self
        var ids: [Int] = []
        let parts = path.split(separator: ".")
        for (i, part) in parts.enumerated() {
            guard let field = schema.field(named: String(part)) else { return nil }
            ids.append(field.id)
            if i < parts.count - 1 {
                guard case .object(let nested) = field.type.unwrapped else { return nil }
                schema = nested
            }
        }
        return ids
    }

    /// Whether an index holds the value at `path` tagged (`IndexKind.taggedValues`): a value reached
    /// through an optional struct that is not optional itself, or an array that can be nil.
    func nilNeedsTag(atPath path: String) -> Bool {
        var schema = self
        var throughOptional = false
        let parts = path.split(separator: ".")
        for (i, part) in parts.enumerated() {
            guard let field = schema.field(named: String(part)) else { return false }
            if i == parts.count - 1 {
                if case .array = field.type.unwrapped { return throughOptional || field.type.isOptional }
                return throughOptional && !field.type.isOptional
            }
            guard case .object(let nested) = field.type.unwrapped else { return false }
            throughOptional = throughOptional || field.type.isOptional
            schema = nested
        }
        return false
    }

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
