import Foundation

/// One change to one object, named by model name and key, as a sync protocol sends it (the shape of
/// Meteor DDP's `added` / `changed` / `removed`):
///
/// ```json
/// {"msg": "added",   "collection": "Person", "id": "u1", "fields": {"name": "Ana", "status": "online", "tags": []}}
/// {"msg": "changed", "collection": "Person", "id": "u1", "fields": {"status": "away"}, "cleared": ["nickname"]}
/// {"msg": "removed", "collection": "Person", "id": "u2"}
/// ```
///
/// ```swift
/// let messages = try ChangeMessage.decode(json: body)          // a JSON array of messages
/// let summary = try db.apply(messages)                         // one write transaction
/// print(summary.added, summary.changed, summary.removed, summary.unchanged)
/// ```
public struct ChangeMessage: Sendable, Equatable {
    /// What a message does; the JSON `"msg"` member.
    ///
    /// ```swift
    /// let kind = ChangeMessage.Kind(rawValue: "changed")   // .changed
    /// ```
    public enum Kind: String, Sendable, Equatable {
        /// Create the object, or update it when it exists (an upsert from `fields`).
        case added
        /// Update the fields given (and set the `cleared` ones to nil); the object must exist.
        case changed
        /// Delete the object; one already missing is fine.
        case removed
    }

    /// What the message does.
    public var kind: Kind
    /// The model's name (`Model.modelName`).
    public var model: String
    /// The primary key, as JSON: a string, a number, or what the key type's field takes.
    public var key: JSONValue
    /// The fields to set, as in a partial update.
    public var fields: [String: JSONValue]
    /// Fields to set to nil (dotted paths reach into nested structs: `address.zip`), in any order;
    /// one that `fields` also sets to a value is refused.
    public var cleared: [String]

    /// ```swift
    /// let message = ChangeMessage(.changed, model: "Person", key: .string("u1"), fields: ["status": .string("away")])
    /// ```
    public init(_ kind: Kind, model: String, key: JSONValue, fields: [String: JSONValue] = [:], cleared: [String] = []) {
        self.kind = kind
        self.model = model
        self.key = key
        self.fields = fields
        self.cleared = cleared
    }

    /// Decodes a JSON array of messages (a single message object is taken as an array of one).
    /// Throws `invalidInput` naming the message and what is wrong with it.
    ///
    /// ```swift
    /// let messages = try ChangeMessage.decode(json: Data(#"[{"msg":"removed","collection":"Person","id":"u2"}]"#.utf8))
    /// ```
    public static func decode(json: Data) throws -> [ChangeMessage] {
        let value = try JSONValue(parsing: json)
        switch value {
        case .array(let items): return try items.enumerated().map { try ChangeMessage(json: $1, index: $0) }
        case .object: return [try ChangeMessage(json: value, index: 0)]
        default: throw StrataError.invalidInput("expected a JSON array of change messages, found \(value.summary)")
        }
    }

    /// Decodes one message object; `index` names it in errors.
    init(json: JSONValue, index: Int) throws {
        func invalid(_ what: String) -> StrataError { .invalidInput("change message \(index): \(what)") }
        guard case .object(let object) = json else { throw invalid("expected an object, found \(json.summary)") }
        guard case .string(let msg)? = object["msg"] else { throw invalid("\"msg\" must be a string: added, changed or removed") }
        guard let kind = Kind(rawValue: msg) else { throw invalid("\"msg\" must be added, changed or removed, found \(quotedForError(msg))") }
        guard case .string(let model)? = object["collection"] else { throw invalid("\"collection\" must be a string naming the model") }
        guard let key = object["id"], key != .null else { throw invalid("\"id\" (the primary key) is missing") }
        var fields: [String: JSONValue] = [:]
        switch object["fields"] {
        case nil, .null?: break
        case .object(let f)?: fields = f
        case let other?: throw invalid("\"fields\" must be an object, found \(other.summary)")
        }
        var cleared: [String] = []
        switch object["cleared"] {
        case nil, .null?: break
        case .array(let items)?:
            for item in items {
                guard case .string(let name) = item else { throw invalid("\"cleared\" must list field names as strings, found \(item.summary)") }
                cleared.append(name)
            }
        case let other?: throw invalid("\"cleared\" must be an array of field names, found \(other.summary)")
        }
        let known: Set<String> = ["msg", "collection", "id", "fields", "cleared"]
        if let extra = object.keys.sorted().first(where: { !known.contains($0) }) {
            throw invalid("unexpected member \(quotedForError(extra))")
        }
        self.init(kind, model: model, key: key, fields: fields, cleared: cleared)
    }

    /// `fields` with every `cleared` path set to null, nested paths as nested objects. `schema`,
    /// the model's, is what a dotted path must reach through (`checkReachesStructs`).
    ///
    /// The outcome does not depend on the order of `cleared`: a path inside another cleared path
    /// is that path's part already (`["address", "address.zip"]` clears `address`, in either
    /// order), and a path that `fields` also sets to a value is refused rather than one of the two
    /// silently winning.
    func patch(schema: ObjectSchema? = nil) throws -> [String: StoredValue] {
        var patch: [String: StoredValue] = [:]
        let root = FieldPath(model: model)
        // (In name order: of several bad values, the one an error names is the same in every run.)
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) { patch[name] = try StoredValue(json: value, path: root.appending(name)) }
        // Shorter paths first: a cleared parent is in the patch before its children come, so that
        // they find it null and are part of it. Then by text, so that which of several bad paths
        // an error names does not depend on their order either.
        func depth(_ path: String) -> Int { path.utf8.count(where: { $0 == UInt8(ascii: ".") }) }
        for path in cleared.sorted(by: { (depth($0), $0) < (depth($1), $1) }) {
            let parts = path.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard !parts.contains(where: \.isEmpty) else {
                throw StrataError.invalidInput("\(model) \(key.summary): cleared field \(quotedForError(path)) is not a field path")
            }
            // Each part is a level of the patch built below, and `setNull` recurses once per part:
            // a path of 100,000 parts (one short JSON string, which the parser's depth bound does
            // not see) overflowed the stack. No model nests as deeply as the parser allows.
            guard parts.count <= JSONParser.maxDepth else {
                let shown = path.count > 60 ? "\(path.prefix(60))…" : path
                throw StrataError.invalidInput(
                    "\(model) \(key.summary): cleared field \(jsonString(shown)) is nested \(parts.count) levels deep, deeper than the \(JSONParser.maxDepth) allowed"
                )
            }
            try Self.checkReachesStructs(parts, of: path, schema: schema, message: self)
            try Self.setNull(at: parts[...], of: parts, in: &patch, message: self)
        }
        return patch
    }

    /// A dotted path may only go through nested structs, which merge field by field. Through a
    /// dictionary (or an array, or a scalar) the nested null replaced the whole value:
    /// `labels.home` on a `[String: String?]` left `["home": nil]` and silently lost every other
    /// entry. A part the schema does not have is left to the update, which reports it as an
    /// unknown field.
    private static func checkReachesStructs(_ parts: [String], of path: String, schema: ObjectSchema?, message: ChangeMessage) throws {
        var schema = schema
        for part in parts.dropLast() {
            guard let field = schema?.field(named: part) else { return }
            guard case .object(let nested) = field.type.unwrapped else {
                throw StrataError.invalidInput(
                    "\(message.model) \(message.key.summary): cleared field \(quotedForError(path)) reaches into \(part), which is \(field.type), "
                        + "not a nested struct; a dotted path reaches only into nested structs (give \(part) whole in the fields instead)")
            }
            schema = nested
        }
    }

    /// Sets `path` (of which `parts` is what is left below `patch`) to null in `patch`.
    private static func setNull(at parts: ArraySlice<String>, of path: [String], in patch: inout [String: StoredValue], message: ChangeMessage) throws {
        guard let first = parts.first else { return }
        func refused(_ why: String) -> StrataError {
            .invalidInput("\(message.model) \(message.key.summary): cleared field \(quotedForError(path.joined(separator: "."))) \(why)")
        }
        if parts.count == 1 {
            switch patch[first] {
            case nil, .null?: patch[first] = .null
            case .some: throw refused("is also set to a value in \"fields\"; give it one way or the other")
            }
            return
        }
        var nested: [String: StoredValue] = [:]
        switch patch[first] {
        case nil: break
        case .null?: return  // inside a field already null: cleared with it
        case .object(let fields)?: nested = fields
        case .some:
            let outer = path[...parts.startIndex].joined(separator: ".")
            throw refused("is inside \(quotedForError(outer)), which \"fields\" sets to a value that is not an object")
        }
        try setNull(at: parts.dropFirst(), of: path, in: &nested, message: message)
        patch[first] = .object(nested)
    }
}

/// How many objects a batch of change messages added, changed and removed.
///
/// ```swift
/// let summary = try db.apply(messages)
/// print("\(summary.added) added, \(summary.changed) changed, \(summary.removed) removed, \(summary.unchanged) unchanged")
/// ```
public struct ChangeSummary: Sendable, Equatable {
    /// Objects created (by `added` messages for keys that did not exist).
    public var added = 0
    /// Objects whose stored value changed (`changed` messages, and `added` for existing keys).
    public var changed = 0
    /// Objects deleted.
    public var removed = 0
    /// Messages that changed nothing: identical values, or `removed` for a missing key.
    public var unchanged = 0
    /// Fields skipped because the options say `.ignore`, as `Model key: path`.
    public var ignoredFields: [String] = []

    /// An empty summary (all counts zero), to fill in and compare with what `apply` returns.
    ///
    /// ```swift
    /// var expected = ChangeSummary()
    /// expected.added = 2
    /// #expect(try db.apply(messages) == expected)
    /// ```
    public init() {}
}

extension Transaction {
    /// Applies change messages in order, in this transaction, dispatching each to its model by
    /// name. `added` upserts from the fields (creating needs a complete object), `changed` updates
    /// (throws `notFound` for a missing key), `removed` deletes. Objects whose stored value ends up
    /// as it was are not written, so observers hear only of real changes. Throws `invalidInput` for
    /// a model name the database was not opened with, and what partial updates throw (an
    /// `invalidInput` or `typeMismatch` says the index of the message in `messages`); then none of
    /// the batch is written (it runs as a savepoint), and the rest of the transaction goes on if the
    /// caller catches the error.
    ///
    /// ```swift
    /// try db.write { tx in
    ///     let summary = try tx.apply(try ChangeMessage.decode(json: body))
    ///     print(summary.changed)
    /// }
    /// ```
    @discardableResult
    public func apply(_ messages: [ChangeMessage], options: PartialUpdateOptions = PartialUpdateOptions()) throws -> ChangeSummary {
        // (Checked before the messages: that error is no message's, and would be blamed on message 0.)
        if let failedMidway { throw Self.halfDone(failedMidway) }
        // A savepoint: a batch is all or nothing here too. Each message is a complete write of its
        // own, so without it a caller that catches the error of message k and goes on would commit
        // messages 0..<k.
        return try savepoint {
            var summary = ChangeSummary()
            for (index, message) in messages.enumerated() {
                guard let info = db.byName[message.model] as? any ChangeApplying else {
                    throw StrataError.invalidInput(
                        "change message \(index) for \(jsonString(message.model)): no model of that name (known: \(db.byName.keys.sorted().joined(separator: ", ")))"
                    )
                }
                do {
                    try info.apply(message, in: self, options: options, summary: &summary)
                } catch let error as StrataError {
                    throw error.inChangeMessage(index, message)
                }
            }
            return summary
        }
    }
}

extension Database {
    /// Applies change messages in one write transaction (one commit): all of them, or, if one
    /// throws, none. See `Transaction.apply(_:options:)`.
    ///
    /// ```swift
    /// let summary = try db.apply(try ChangeMessage.decode(json: body), options: PartialUpdateOptions(unknownFields: .ignore))
    /// ```
    @discardableResult
    public func apply(_ messages: [ChangeMessage], options: PartialUpdateOptions = PartialUpdateOptions()) throws -> ChangeSummary {
        try write { tx in try tx.apply(messages, options: options) }
    }
}

extension StrataError {
    /// This error, saying which message of a batch it came from where its payload has room for
    /// it: in a batch of thousands, "name: expected a string" alone does not say which object.
    /// Errors that name the key already (`notFound`, `incompleteObject`…) stay as they are.
    func inChangeMessage(_ index: Int, _ message: ChangeMessage) -> StrataError {
        switch self {
        case .typeMismatch(let model, let field, let reason):
            return .typeMismatch(model: model, field: field, reason: "change message \(index) (\(message.key.summary)): \(reason)")
        case .invalidInput(let reason):
            return .invalidInput("change message \(index): \(reason)")
        default:
            return self
        }
    }
}

/// Applies a message to the model a registry entry describes: the step from a model *name* to
/// its Swift type, so that the generic partial update can run.
protocol ChangeApplying {
    func apply(_ message: ChangeMessage, in tx: Transaction, options: PartialUpdateOptions, summary: inout ChangeSummary) throws
}

extension ModelInfo: ChangeApplying {
    func apply(_ message: ChangeMessage, in tx: Transaction, options: PartialUpdateOptions, summary: inout ChangeSummary) throws {
        let key = try modelKey(message.key, registry: tx.db, options: options)
        switch message.kind {
        case .removed:
            if try tx.delete(M.self, key: key) { summary.removed += 1 } else { summary.unchanged += 1 }
        case .added, .changed:
            let result = try tx.applyPatch(
                M.self, key: key, patch: try message.patch(schema: stored.object), options: options, mayCreate: message.kind == .added)
            if result.created { summary.added += 1 } else if result.changed { summary.changed += 1 } else { summary.unchanged += 1 }
            summary.ignoredFields += result.ignoredFields.map { "\(name) \(describeValue(key)): \($0)" }
        }
    }

    /// The message's JSON key as `M.ID`: converted to the key's stored bytes by the schema (the
    /// key's field, whatever its stored name: `id`, `_id`…), then decoded as the Swift type, which
    /// is what checks an enum key's raw value.
    func modelKey(_ json: JSONValue, registry: ModelRegistry, options: PartialUpdateOptions) throws -> M.ID {
        guard let keyType = stored.keyFieldType else {
            throw StrataError.unsupportedType(model: name, field: "id", reason: "the stored schema does not record the primary key's type")
        }
        let keyName = stored.keyFieldSchema?.name ?? "id"
        var encoder = PatchEncoder(model: name, options: options, registry: registry)
        // (Its shape names the field, so that an enum key is read in its JSON form as the field's values are.)
        let path = FieldPath(model: name, text: keyName, shape: keyName)
        let bytes = try encoder.encode(try StoredValue(json: json, path: path), as: keyType, path: path)
        return try bytes.withUnsafeBytes {
            try RecordDecoding.decodeValue(M.ID.self, as: keyType, bytes: $0, context: EncodingContext(model: name, path: [keyName]))
        }
    }
}
