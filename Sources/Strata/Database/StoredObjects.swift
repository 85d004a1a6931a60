/// Reads the object layer's trees without the Swift model types, from the schema stored in the
/// file: what `strata schema` and `strata dump` print.
///
/// ```swift
/// let store = try Store(path: "app.strata")
/// for schema in try StoredObjects.schemas(in: store) { print(schema.name, schema.object.liveFields.map(\.name)) }
/// try StoredObjects.forEach(in: store, model: "Person") { key, fields in print(key.json, fields); return true }
/// ```
public enum StoredObjects {
    /// Every model's stored schema, by name.
    ///
    /// ```swift
    /// for schema in try StoredObjects.schemas(in: db.store) {
    ///     print(schema.name, schema.indexes.map(\.summary))   // Person ["name"]
    /// }
    /// ```
    public static func schemas(in store: Store) throws -> [StoredModelSchema] {
        try store.read { txn in
            try Catalog.load(try txn.tree(Catalog.schemaTree)).values.sorted { $0.name < $1.name }
        }
    }

    /// The number of stored objects of `model`, without its Swift type (0 for a model the file
    /// does not have).
    ///
    /// ```swift
    /// let people = try StoredObjects.count(in: try Store(path: "app.strata"), model: "Person")
    /// ```
    public static func count(in store: Store, model: String) throws -> Int {
        try store.read { txn in try txn.tree("m:" + model)?.count ?? 0 }
    }

    /// Visits each stored object of `model` in key order, decoded untyped, while `body` returns
    /// true. Keys (and references) are read as the key type the schema records: a `String` key
    /// is `.string`, an `Int` key `.int`, whatever their bytes look like.
    ///
    /// ```swift
    /// try StoredObjects.forEach(in: db.store, model: "Person") { key, fields in
    ///     print(key.json, fields["name"]?.stringValue ?? "-")
    ///     return true   // false stops the walk
    /// }
    /// ```
    public static func forEach(in store: Store, model: String, _ body: (_ key: StoredValue, _ fields: [String: StoredValue]) throws -> Bool) throws {
        try store.read { txn in
            let schemas = try Catalog.load(try txn.tree(Catalog.schemaTree))
            guard let schema = schemas[model] else {
                throw StrataError.invalidQuery("no model named \(model) in the schema catalog")
            }
            let decoding = UntypedDecoding(schemas: schemas.values)
            guard let tree = try txn.tree(schema.recordTree) else { return }
            try tree.forEach { key, value in
                let (k, fields) = (try decoding.key(key, of: schema), try decoding.decode(value, schema: schema.object))
                // A read-only store's snapshot: check before an object reaches `body` (it may print it).
                try txn.validate()
                return try body(k, fields)
            }
        }
    }
}
