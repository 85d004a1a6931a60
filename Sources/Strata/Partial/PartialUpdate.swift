import Foundation

/// How partial updates read their input.
///
/// ```swift
/// var options = PartialUpdateOptions()
/// options.unknownFields = .ignore                 // report them in the result instead of throwing
/// options.dateFormat = .millisecondsSince1970
/// try tx.update(Person.self, key: "u1", json: body, options: options)
/// ```
public struct PartialUpdateOptions: Sendable, Equatable {
    /// What to do with fields the model does not have, at any nesting level.
    ///
    /// ```swift
    /// let lenient = PartialUpdateOptions(unknownFields: .ignore)
    /// ```
    public enum UnknownFields: Sendable, Equatable {
        /// Throw `StrataError.unknownFields` listing them (the default).
        case reject
        /// Skip them and list them in the result's `ignoredFields`.
        case ignore
    }

    /// How `Date` fields are written in the input. Dates given as `Date` values in a dictionary
    /// are taken as they are, whatever the format.
    ///
    /// ```swift
    /// let fromJavaScript = PartialUpdateOptions(dateFormat: .millisecondsSince1970)   // {"seen": 1714566600000}
    /// ```
    public enum DateFormat: Sendable, Equatable {
        /// ISO 8601 text with a time zone, with or without fractional seconds:
        /// `2024-05-01T12:30:00Z`, `2024-05-01T14:30:00.125+02:00` (the default).
        case iso8601
        /// A number of seconds since 1970-01-01 00:00 UTC.
        case secondsSince1970
        /// A number of milliseconds since 1970-01-01 00:00 UTC (JavaScript's `Date.now()`).
        case millisecondsSince1970
        /// A number of seconds since 2001-01-01 00:00 UTC (Foundation's reference date).
        case secondsSinceReferenceDate
    }

    /// Reject (the default) or ignore fields the model does not have.
    public var unknownFields: UnknownFields
    /// How `Date` fields are written; `.iso8601` by default.
    public var dateFormat: DateFormat

    /// Options; the defaults reject unknown fields and read dates as ISO 8601 text.
    ///
    /// ```swift
    /// let options = PartialUpdateOptions(unknownFields: .ignore, dateFormat: .secondsSince1970)
    /// ```
    public init(unknownFields: UnknownFields = .reject, dateFormat: DateFormat = .iso8601) {
        self.unknownFields = unknownFields
        self.dateFormat = dateFormat
    }
}

/// What a partial update did.
///
/// ```swift
/// let result = try tx.upsert(Person.self, key: "u1", json: body)
/// if result.created { print("new person", result.object.name) }
/// else if !result.changed { print("nothing to write") }
/// ```
public struct PartialUpdateResult<M: Model>: Sendable {
    /// The object as stored after the update.
    public var object: M
    /// True when no object had the key and this one was created.
    public var created: Bool
    /// True when the stored value changed (always true when `created`). False means nothing was
    /// written, and observers hear nothing.
    public var changed: Bool
    /// Dotted paths of input fields the model does not have, skipped because the options say
    /// `.ignore` (sorted; empty with `.reject`, which throws instead).
    public var ignoredFields: [String]
}

extension Transaction {
    /// Changes the fields given in a JSON object on the stored object with primary key `key`;
    /// fields not given keep their stored value exactly. Nested structs merge field by field
    /// (RFC 7396), arrays, sets and dictionaries are replaced whole, and `null` sets an optional to
    /// nil.
    ///
    /// Throws `notFound` when there is no such object, `invalidInput` for malformed JSON or a top
    /// level that is not an object, `typeMismatch` naming the field by its dotted path for a value
    /// of the wrong type (and for an `id` that disagrees with `key`), `unknownFields` for fields the
    /// model does not have (unless `options.unknownFields == .ignore`), `corruptRecord` when the
    /// stored record is damaged (does not decode, as a typed read finds it) and the fields given do
    /// not replace what is wrong, and what `upsert` throws (`uniqueViolation`). An update that
    /// leaves the object as it was writes nothing.
    ///
    /// ```swift
    /// try db.write { tx in
    ///     let result = try tx.update(Person.self, key: "u1", json: Data(#"{"status": "away", "address": {"city": "Porto"}}"#.utf8))
    ///     print(result.changed, result.object.address?.city ?? "-")
    /// }
    /// ```
    @discardableResult
    public func update<M: Model>(_ type: M.Type, key: M.ID, json: Data, options: PartialUpdateOptions = PartialUpdateOptions()) throws -> PartialUpdateResult<M>
    {
        try applyPatch(M.self, key: key, patch: try Self.topLevelObject(json), options: options, mayCreate: false)
    }

    /// Changes the fields given in a dictionary, as `update(_:key:json:options:)` does. Values may
    /// be what `JSONSerialization` produces (`NSNumber`, `NSNull`, nested dictionaries and arrays)
    /// or native Swift values: `Bool`, integers, `Double`, `String`, `Date`, `Data`, `UUID`, `URL`,
    /// `Decimal`, enum cases, `Ref`s, `JSONValue`s and optionals (nil is `null`).
    ///
    /// ```swift
    /// try db.write { tx in
    ///     try tx.update(Person.self, key: "u1", fields: ["lastSeen": Date(), "tags": ["a", "b"], "nickname": NSNull()])
    /// }
    /// ```
    @discardableResult
    public func update<M: Model>(_ type: M.Type, key: M.ID, fields: [String: Any], options: PartialUpdateOptions = PartialUpdateOptions()) throws
        -> PartialUpdateResult<M>
    {
        try applyPatch(M.self, key: key, patch: try Self.patch(fields, model: M.modelName), options: options, mayCreate: false)
    }

    /// Like `update(_:key:json:options:)`, but creates the object when there is none with `key`,
    /// provided the fields given make a complete object (the primary key is taken from `key`).
    /// Otherwise throws `incompleteObject` listing the missing required fields.
    ///
    /// ```swift
    /// try db.write { tx in
    ///     let result = try tx.upsert(Person.self, key: "u9", json: Data(#"{"name": "Ivo", "status": "online", "tags": []}"#.utf8))
    ///     print(result.created)   // true the first time
    /// }
    /// ```
    @discardableResult
    public func upsert<M: Model>(_ type: M.Type, key: M.ID, json: Data, options: PartialUpdateOptions = PartialUpdateOptions()) throws -> PartialUpdateResult<M>
    {
        try applyPatch(M.self, key: key, patch: try Self.topLevelObject(json), options: options, mayCreate: true)
    }

    /// Like `update(_:key:fields:options:)`, but creates the object when there is none with `key`,
    /// provided the fields given make a complete object; otherwise throws `incompleteObject`.
    ///
    /// ```swift
    /// try db.write { tx in
    ///     try tx.upsert(Person.self, key: "u9", fields: ["name": "Ivo", "status": "online", "tags": [String]()])
    /// }
    /// ```
    @discardableResult
    public func upsert<M: Model>(_ type: M.Type, key: M.ID, fields: [String: Any], options: PartialUpdateOptions = PartialUpdateOptions()) throws
        -> PartialUpdateResult<M>
    {
        try applyPatch(M.self, key: key, patch: try Self.patch(fields, model: M.modelName), options: options, mayCreate: true)
    }

    // MARK: Implementation

    static func topLevelObject(_ json: Data) throws -> [String: StoredValue] {
        let value = try JSONValue(parsing: json)
        guard case .object(let fields) = value else {
            throw StrataError.invalidInput("expected a JSON object at the top level, found \(value.summary)")
        }
        return fields.mapValues(StoredValue.init)
    }

    static func patch(_ fields: [String: Any], model: String) throws -> [String: StoredValue] {
        var result: [String: StoredValue] = [:]
        let root = FieldPath(model: model)
        for (name, value) in fields { result[name] = try StoredValue(any: value, path: root.appending(name)) }
        return result
    }

    /// Merges `patch` into the stored record at the byte level, decodes the result as `M` (which
    /// checks it is a valid object, enum raw values included) and stores it through `upsert`, so
    /// that indexes, unique checks and the skipping of identical records all apply as usual.
    func applyPatch<M: Model>(
        _ type: M.Type, key: M.ID, patch: [String: StoredValue], options: PartialUpdateOptions,
        mayCreate: Bool
    ) throws -> PartialUpdateResult<M> {
        let info = try db.info(M.self)
        let keyBytes = try info.keyBytes(key)
        // Copied: the view would not survive the writes below.
        let oldRecord: [UInt8]? = try wrapStorage {
            try txn.tree(info.recordTree).flatMap { try $0.view(keyBytes) }.map { Array($0) }
        }
        if oldRecord == nil && !mayCreate { throw StrataError.notFound(model: info.name, key: describeValue(key)) }

        var encoder = PatchEncoder(model: info.name, options: options, registry: db)
        var seed: [Int: PatchEncoder.Entry] = [:]
        // The key's field; for an `id` the schema cannot tell by its property (behind a property
        // wrapper), the field coded "id". (Should that field be something else, the object made
        // has another id than `key`, which `upsert` refuses: never stored under the wrong key.)
        let keyField =
            info.stored.object.field(named: info.keyPath)
            ?? (info.keyPath == FieldNames.primaryKeyPath ? info.stored.object.field(named: "id") : nil)
        if oldRecord == nil, let idField = keyField, patch[idField.name] == nil {
            seed[idField.id] = try idEntry(key, field: idField, model: info.name)
        }
        let record = try oldRecord.withUnsafeBytesIfPresent { stored in
            try encoder.merge(patch, into: stored, schema: info.stored.object, path: FieldPath(model: info.name), seed: seed)
        }
        if !encoder.unknown.isEmpty && options.unknownFields == .reject {
            throw StrataError.unknownFields(model: info.name, fields: encoder.unknown.sorted())
        }
        if !encoder.missing.isEmpty {
            if let oldRecord {
                // Missing from a stored record (a required field absent or nil in it) is damage,
                // not a nested struct the fields create without all its fields.
                try Self.checkStoredRecord(oldRecord, info: info, key: key)
                throw StrataError.incompleteUpdate(model: info.name, key: describeValue(key), missing: encoder.missing.sorted())
            }
            throw StrataError.incompleteObject(model: info.name, key: describeValue(key), missing: encoder.missing.sorted())
        }
        let object: M
        do {
            object = try record.withUnsafeBytes { try info.decode($0) }
        } catch {
            // The merged record holds the stored bytes of every field not given: when those do not
            // decode, the stored record is at fault, not the fields given.
            if let oldRecord { try Self.checkStoredRecord(oldRecord, info: info, key: key) }
            throw error
        }
        if try info.keyBytes(object.id) != keyBytes {
            // The id came from the stored record, not from the fields: the record is damaged. (A
            // computed id the fields changed, `var id: String { email }`, is the fields' doing:
            // the stored record's own id is the key.)
            if let oldRecord, patch[info.keyPath] == nil,
                try oldRecord.withUnsafeBytes({ try info.keyBytes(try info.decode($0).id) }) != keyBytes
            {
                throw info.recordUnderWrongKey(key, holding: object.id)
            }
            throw StrataError.typeMismatch(
                model: info.name, field: info.keyPath,
                reason: "the fields give the key \(describeValue(object.id)), but the update is for \(describeValue(key))")
        }
        let (stored, wrote) = try store(object)
        return PartialUpdateResult(
            object: stored, created: oldRecord == nil, changed: wrote,
            ignoredFields: encoder.unknown.sorted())
    }

    /// Throws `corruptRecord` naming the model and key when the record stored under `key` does not
    /// decode as `M`: what a typed read of it finds (a `typeMismatch` of a stored value, a field
    /// without a value, bytes that do not parse), said as damage, so that an update failing on it
    /// never reads as a fault of the fields given. Called only once an update has failed.
    static func checkStoredRecord<M: Model>(_ record: [UInt8], info: ModelInfo<M>, key: M.ID) throws {
        let why: String
        do {
            _ = try record.withUnsafeBytes { try info.decode($0) }
            return
        } catch StrataError.corruptRecord(let reason) {
            why = reason
        } catch let error as StrataError {
            guard case .typeMismatch = error else { throw error }
            why = "\(error)"
        }
        throw StrataError.corruptRecord("\(info.name): the record stored under key \(quotedForError(describeValue(key))) does not decode: \(why)")
    }

    /// The record entry of a new object's primary key, from the key given.
    private func idEntry<ID>(_ key: ID, field: FieldSchema, model: String) throws -> PatchEncoder.Entry {
        // An auto-increment id given as nil: the insert under `upsert` assigns the next one.
        if let optional = key as? any OptionalValue, optional.wrappedAny == nil { return (true, []) }
        var bytes: [UInt8] = []
        try RecordEncoding.encodeValue(key, as: field.type, into: &bytes, context: EncodingContext(model: model, path: [field.name]))
        return (false, bytes)
    }

}
