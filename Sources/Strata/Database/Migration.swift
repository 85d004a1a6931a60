/// What a migration closure works with: the old records, read untyped through the schema they were
/// written with, and a transaction that writes objects of the new types.
///
/// ```swift
/// let db = try Database(path: path, models: [Person.self], schemaVersion: 2) { migration in
///     for old in try migration.objects("Person") {
///         guard let id = old.fields["id"]?.stringValue else { continue }
///         let age = Int(old.fields["age"]?.stringValue ?? "") ?? 0
///         try migration.transaction.upsert(Person(id: id, name: old.fields["name"]?.stringValue ?? "", age: age))
///     }
/// }
/// ```
public final class Migration {
    /// The schema version stored before this migration.
    public let oldVersion: Int
    /// The version being migrated to.
    public let newVersion: Int
    /// Writes in the new schema; the same transaction as the schema change.
    public let transaction: Transaction
    let oldSchemas: [String: StoredModelSchema]

    init(oldVersion: Int, newVersion: Int, oldSchemas: [String: StoredModelSchema], transaction: Transaction) {
        self.oldVersion = oldVersion
        self.newVersion = newVersion
        self.oldSchemas = oldSchemas
        self.transaction = transaction
    }

    /// An old record: its primary key and its fields by name, removed fields included. The key is
    /// read as the key type the old schema records (`.string` for a `String` id, `.int` for an
    /// `Int`…): `old.key.stringValue`, `old.key.intValue`.
    ///
    /// ```swift
    /// for old in try migration.objects("Person") {
    ///     print(old.key.stringValue ?? "-", old["name"]?.stringValue ?? "")
    /// }
    /// ```
    public struct OldObject: Sendable {
        /// The old primary key, read as the key type the old schema records.
        public let key: StoredValue
        /// The old fields by stored name, removed fields included; a field never stored is
        /// absent, and so is a nil optional the synthesized `encode(to:)` left out, while a nil an
        /// `encode(to:)` wrote (`encodeNil`, `encode(nil as T?)`) is `.null`: test with
        /// `old["x"]?.isNull ?? true` for "nil or absent". Where a field's type changed in an earlier migration, its name gives
        /// the value of its latest type (the value of its first type is no longer readable by name).
        public let fields: [String: StoredValue]

        /// The old value of a field (removed fields included), or nil when it was not stored.
        ///
        /// ```swift
        /// let age = Int(old["age"]?.stringValue ?? "") ?? 0   // old.fields["age"], shorter
        /// ```
        public subscript(field: String) -> StoredValue? { fields[field] }
    }

    /// The object `enumerateObjects` stores in place of an old one: its fields by stored name.
    public struct MigrationObject: Sendable {
        /// The new object's fields: the old ones whose type did not change, and what the
        /// migration sets.
        public var fields: [String: StoredValue]
        /// Set by `delete()`: the object is not kept.
        public private(set) var isDeleted = false
        /// The fields assigned through the subscript, nil included: an optional field whose type
        /// changed is cleared only when the migration says so.
        private(set) var assigned: Set<String> = []

        init(fields: [String: StoredValue]) { self.fields = fields }

        /// A field's value; assigning nil clears an optional field.
        ///
        /// ```swift
        /// new["age"] = .int(Int64(old["age"]?.stringValue ?? "") ?? 0)
        /// new["nickname"] = nil   // an optional whose type changed: cleared, not converted
        /// ```
        public subscript(field: String) -> StoredValue? {
            get { fields[field] }
            set {
                fields[field] = newValue
                assigned.insert(field)
            }
        }

        /// Drops the object from the migrated database.
        ///
        /// ```swift
        /// try migration.enumerateObjects("Person") { old, new in
        ///     if old["name"]?.stringValue?.isEmpty ?? true { new.delete() }
        /// }
        /// ```
        public mutating func delete() { isDeleted = true }
    }

    /// Every stored object of `model` as it was before the migration (a copy: writing during the
    /// loop is safe).
    ///
    /// ```swift
    /// for old in try migration.objects("Person") {
    ///     guard let id = old.key.stringValue else { continue }
    ///     try migration.transaction.upsert(Person(id: id, name: old["name"]?.stringValue ?? "", age: 0))
    /// }
    /// ```
    public func objects(_ model: String) throws -> [OldObject] {
        guard let schema = oldSchemas[model], let tree = try wrapStorage({ try transaction.txn.tree(schema.recordTree) }) else { return [] }
        var result: [OldObject] = []
        let decoding = UntypedDecoding(schemas: oldSchemas.values)
        try wrapStorage {
            try tree.forEach { key, value in
                result.append(
                    OldObject(
                        key: try decoding.key(key, of: schema),
                        fields: try decoding.decode(value, schema: schema.object, includeRemoved: true)))
                return true
            }
        }
        return result
    }

    /// Visits every object of `model` as it was before the migration, and stores what `body` makes
    /// of it: Realm's `enumerateObjects`. `new` starts with every old field whose type did not
    /// change; set the fields that are new or changed type (`new["age"] = .int(…)`), change any
    /// other, or `new.delete()` the object. Whatever the closure leaves untouched keeps its stored
    /// bytes. A field still missing (a new non-optional one, or one whose type changed) throws
    /// `typeMismatch` naming the object and the field. `progress` is called with the number of
    /// objects done and the total, every 1,000 objects and at the end. Run under `withProgress`
    /// (around opening the database), the migration reports there too and can be stopped: it
    /// throws `CancellationError` and nothing changes.
    ///
    /// ```swift
    /// let db = try Database(path: path, models: [Person.self], schemaVersion: 2) { migration in
    ///     try migration.enumerateObjects("Person") { old, new in
    ///         new["age"] = .int(Int64(old["age"]?.stringValue ?? "") ?? 0)   // was a String
    ///     }
    /// }
    /// ```
    public func enumerateObjects(
        _ model: String, progress: ((_ done: Int, _ total: Int) -> Void)? = nil,
        _ body: (_ old: OldObject, _ new: inout MigrationObject) throws -> Void
    ) throws {
        // One write: an error after it changed anything (a key collision, a throw from `body` once
        // earlier objects are converted) leaves the migration unable to commit, even when the
        // migration's closure catches it, as any half-done write in a transaction does.
        try transaction.writing { try convert(model, progress: progress, body) }
    }

    private func convert(
        _ model: String, progress: ((_ done: Int, _ total: Int) -> Void)?,
        _ body: (_ old: OldObject, _ new: inout MigrationObject) throws -> Void
    ) throws {
        guard let oldSchema = oldSchemas[model] else { return }
        guard let newSchema = transaction.db.byName[model]?.stored else {
            throw StrataError.unsupportedType(model: model, field: "(model)", reason: "the migration enumerates \(model), which is not among the models opened")
        }
        guard let tree = try wrapStorage({ try transaction.txn.tree(oldSchema.recordTree) }) else {
            progress?(0, 0)
            return
        }
        // A copy of the old records: the writes below change the tree.
        var records: [(key: [UInt8], record: [UInt8])] = []
        try wrapStorage {
            try tree.forEach { key, value in
                records.append((Array(key), Array(value))); return true
            }
        }
        let decoding = UntypedDecoding(schemas: oldSchemas.values)
        // Old fields that keep their id in the new schema kept their type.
        let kept = Set(
            newSchema.object.fields.filter { !$0.removed }.compactMap { field in
                oldSchema.object.fields.first { $0.id == field.id && !$0.removed }?.name
            })
        let keyName = newSchema.keyFieldSchema?.name
        // References to a model whose key type changed hold its old key's encoding: given anew
        // (even as the value read, `new["author"] = old["author"]`), they are written as the new
        // key type encodes the key.
        // (Anywhere in a field: an element of an array or dictionary, a nested struct's field.)
        let rekeyedModels = Set(
            oldSchemas.values.filter { before in
                // (Type names aside: a renamed key type keys as before.)
                transaction.db.byName[before.name].map { $0.stored.keyFieldType?.withoutTypeNames != before.keyFieldType?.withoutTypeNames } ?? false
            }.map(\.name))
        let rekeyed = Set(newSchema.object.fields.filter { !$0.removed && Self.holdsReference($0.type, to: rekeyedModels) }.map(\.name))
        // Fields a migration must give a value to, at the top or inside a struct carried over
        // whole (its bytes carried untouched: re-encoding an untyped value can lose what only the
        // bytes say, a double optional's inner nil): named (typeMismatch), not found only by the
        // check after, or dropped.
        let info = transaction.db.byName[model]
        let unset = Self.unsetFields(old: oldSchema.object, new: newSchema.object) { info?.decodesWithout($0) == true }
        transaction.forgetTrees()
        let target = try wrapStorage { try transaction.txn.createTree(newSchema.recordTree) }
        let control = OperationControl.current
        control?.begin("migrate \(model)", total: records.count)
        // Objects whose key changes are inserted after every object was visited: a new key may be
        // the old key of an object not visited yet, which may move away too (renumbering 1, 2, 3
        // to 2, 3, 4). What collides then collides for good.
        var moved: [(key: [UInt8], record: [UInt8])] = []
        for (done, entry) in records.enumerated() {
            try control?.step()
            let (oldKey, oldRecord) = entry
            let old = try oldKey.withUnsafeBytes { key in
                try oldRecord.withUnsafeBytes { record in
                    OldObject(
                        key: try decoding.key(key, of: oldSchema),
                        fields: try decoding.decode(record, schema: oldSchema.object, includeRemoved: true))
                }
            }
            let carried = old.fields.filter { kept.contains($0.key) }
            var new = MigrationObject(fields: carried)
            try body(old, &new)
            let objectName = "\(model) \(UntypedDecoding.text(old.key))"
            if !new.isDeleted {
                for field in unset {
                    let outer = field.parts[0]
                    // Set by the migration (a nested struct given anew is written by the new type,
                    // which refuses a value of the old one, and names what it lacks), or still what
                    // was carried. (Given back unchanged, `new["inner"] = old["inner"]`, it is
                    // carried as it was.)
                    if new.fields[outer] != carried[outer] { continue }
                    var value = old.fields[outer]
                    if field.retypedOptional {
                        if field.parts.count == 1 && new.assigned.contains(outer) { continue }  // cleared
                        // Lost only where there was a value.
                        for part in field.parts.dropFirst() { value = value?[part] }
                        guard let value, value != .null else { continue }
                    } else {
                        // Missing only where every struct on the way is there (a nil optional holds none).
                        for part in field.parts.dropFirst().dropLast() { value = value?[part] }
                        guard case .object? = value else { continue }
                    }
                    let path = field.parts.joined(separator: ".")
                    let before = oldSchema.object.type(atPath: path).map { " (stored as \($0) before this migration)" } ?? ""
                    throw StrataError.typeMismatch(
                        model: objectName, field: path,
                        reason:
                            "no value for \(newSchema.object.type(atPath: path)?.description ?? "the field")\(before): set new[\"\(outer)\"] in the migration"
                            + (field.retypedOptional ? " (nil clears an optional)" : "")
                    )
                }
            }
            if new.isDeleted {
                _ = try wrapStorage { try target.delete(oldKey) }
            } else {
                var patch: [String: StoredValue] = [:]
                for (name, value) in new.fields where carried[name] != value || rekeyed.contains(name) { patch[name] = value }
                for name in carried.keys where new.fields[name] == nil { patch[name] = .null }
                var encoder = PatchEncoder(model: model, options: PartialUpdateOptions(), registry: transaction.db)
                encoder.skipsRemovedNestedFields = true
                encoder.readsWireForms = false
                let record = try oldRecord.withUnsafeBytes {
                    try encoder.merge(patch, into: $0, schema: newSchema.object, path: FieldPath(model: objectName))
                }
                if !encoder.unknown.isEmpty {
                    throw StrataError.unknownFields(model: objectName, fields: encoder.unknown.sorted())
                }
                if let missing = encoder.missing.sorted().first {
                    let before = oldSchema.object.field(named: missing).map { " (stored as \($0.type) before this migration)" } ?? ""
                    throw StrataError.typeMismatch(
                        model: objectName, field: missing,
                        reason:
                            "no value for \(newSchema.object.field(named: missing)?.type.description ?? "the field")\(before): set new[\"\(missing)\"] in the migration"
                    )
                }
                var key = oldKey
                if let keyName, let keyType = newSchema.keyFieldType, let newKey = new.fields[keyName],
                    newKey != carried[keyName] || oldSchema.keyFieldType?.withoutTypeNames != keyType.withoutTypeNames
                {
                    key = try encoder.keyBytes(newKey, type: keyType, path: FieldPath(model: objectName, text: keyName))
                }
                try wrapStorage {
                    if key != oldKey {
                        _ = try target.delete(oldKey)
                        moved.append((key, record))
                    } else {
                        try target.put(key, record)
                    }
                }
            }
            if let progress, (done + 1) % 1000 == 0 || done + 1 == records.count { progress(done + 1, records.count) }
        }
        if records.isEmpty { progress?(0, 0) }
        for (key, record) in moved {
            guard try wrapStorage({ try target.insert(key, record) }) else {
                throw StrataError.duplicateKey(model: model, key: newKey(key, newSchema, decoding))
            }
        }
    }

    /// A field of the new schema that an object carried over may hold no value for.
    private struct UnsetField {
        /// Its path: the top-level field, then the fields of the structs inside it.
        let parts: [String]
        /// An optional whose type changed (a value of the old type would be dropped); otherwise a
        /// required field a struct kept under one id gained (new, or of a changed type).
        let retypedOptional: Bool
    }

    /// The fields of `new` a migration must give a value to: optionals whose type changed, at the
    /// top and inside structs kept under one id, and required fields those structs gained that the
    /// type cannot do without (`decodesWithout`, given a dotted path). Required fields at the top
    /// are the encoder's to name.
    private static func unsetFields(
        old: ObjectSchema, new: ObjectSchema, prefix: [String] = [], decodesWithout: (String) -> Bool
    ) -> [UnsetField] {
        var found: [UnsetField] = []
        for field in new.fields where !field.removed {
            let parts = prefix + [field.name]
            if let before = old.fields.first(where: { $0.id == field.id && !$0.removed }) {
                if case .object(let inner) = field.type.unwrapped, case .object(let innerBefore) = before.type.unwrapped {
                    found += unsetFields(old: innerBefore, new: inner, prefix: parts, decodesWithout: decodesWithout)
                }
            } else if field.type.isOptional {
                if old.fields.contains(where: { !$0.removed && $0.name == field.name }) { found.append(UnsetField(parts: parts, retypedOptional: true)) }
            } else if !prefix.isEmpty && !decodesWithout(parts.joined(separator: ".")) {
                found.append(UnsetField(parts: parts, retypedOptional: false))
            }
        }
        return found
    }

    private func newKey(_ key: [UInt8], _ schema: StoredModelSchema, _ decoding: UntypedDecoding) -> String {
        // (`schema` is the new one, which `decoding`, made with the old ones, does not know.)
        (try? key.withUnsafeBytes { try decoding.key($0, type: schema.keyFieldType, appTyped: UntypedDecoding.appTypedKey(schema)) })
            .map(UntypedDecoding.text) ?? "?"
    }

    /// Whether values of `type` hold a reference to one of `models`, at any depth.
    private static func holdsReference(_ type: FieldType, to models: Set<String>) -> Bool {
        if models.isEmpty { return false }
        switch type {
        case .reference(let target): return models.contains(target)
        case .optional(let inner), .array(let inner), .dictionary(let inner): return holdsReference(inner, to: models)
        case .object(let schema): return schema.fields.contains { !$0.removed && holdsReference($0.type, to: models) }
        default: return false
        }
    }

    /// Deletes every stored object of `model` (old or new), e.g. before reinserting converted ones.
    /// Its indexes are emptied with it: those of a model this opening does not list are not
    /// rebuilt after the migration.
    ///
    /// ```swift
    /// let people = try migration.objects("Person")   // a copy: still there after deleteAll
    /// try migration.deleteAll("Person")              // the keys change: upserts would keep the old objects
    /// for old in people {
    ///     let id = (old.key.stringValue ?? "").lowercased()
    ///     try migration.transaction.insert(Person(id: id, name: old["name"]?.stringValue ?? "", age: 0))
    /// }
    /// ```
    public func deleteAll(_ model: String) throws {
        guard let schema = oldSchemas[model] else { return }
        transaction.forgetTrees()
        try transaction.writing {
            try wrapStorage {
                for name in [schema.recordTree] + schema.indexes.map({ $0.treeName(model: model) }) {
                    try transaction.txn.dropTree(name)
                    _ = try transaction.txn.createTree(name)
                }
            }
        }
    }
}
