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
    public struct OldObject: Sendable {
        public let key: StoredValue
        public let fields: [String: StoredValue]
    }

    /// Every stored object of `model` as it was before the migration (a copy: writing during the
    /// loop is safe).
    public func objects(_ model: String) throws -> [OldObject] {
        guard let schema = oldSchemas[model], let tree = try wrapStorage({ try transaction.txn.tree(schema.recordTree) }) else { return [] }
        var result: [OldObject] = []
        let decoding = UntypedDecoding(schemas: oldSchemas.values)
        try wrapStorage {
            try tree.forEach { key, value in
                result.append(OldObject(key: try decoding.key(key, type: schema.keyFieldType),
                                        fields: try decoding.decode(value, schema: schema.object, includeRemoved: true)))
                return true
            }
        }
        return result
    }

    /// Deletes every stored object of `model` (old or new), e.g. before reinserting converted ones.
    public func deleteAll(_ model: String) throws {
        guard let schema = oldSchemas[model] else { return }
        transaction.openTrees.removeAll()
        try wrapStorage {
            try transaction.txn.dropTree(schema.recordTree)
            _ = try transaction.txn.createTree(schema.recordTree)
        }
    }
}
