import Foundation

/// A Strata database: your `Model` structs, stored in one file, read through snapshots from any
/// thread, written one transaction at a time.
///
/// ```swift
/// let db = try Database(path: "app.strata", models: [Person.self])
/// try db.write { tx in try tx.insert(Person(id: "u1", name: "Ana")) }
/// let ana = try db.object(Person.self, key: "u1")
/// ```
public final class Database: Sendable {
    /// The storage engine underneath (raw trees; the object layer's trees are named `m:…`, `i:…`, `strata:…`).
    public let store: Store
    let models: [ObjectIdentifier: any AnyModelInfo]
    let modelsByName: [String: any AnyModelInfo]

    /// Opens (or creates) the database at `path` for `models`. The schema of each model is derived
    /// from its type and reconciled with the stored one: additive changes (a new model, a new
    /// optional field, a removed field, an added or dropped index) apply by themselves; anything else
    /// throws `StrataError.migrationRequired` listing every difference.
    public convenience init(path: String, models: [any Model.Type], options: StoreOptions = StoreOptions()) throws {
        try self.init(store: try Store(path: path, options: options), models: models)
    }

    /// An in-memory database with the same engine, gone when released.
    public static func inMemory(models: [any Model.Type]) throws -> Database {
        try Database(store: try Store.inMemory(), models: models)
    }

    /// Opens a database on an existing store.
    public init(store: Store, models: [any Model.Type], schemaVersion: Int = 0) throws {
        self.store = store
        var infos: [ObjectIdentifier: any AnyModelInfo] = [:]
        var byName: [String: any AnyModelInfo] = [:]
        try store.write { txn in
            let catalog = try Catalog.load(txn)
            var differences: [String] = []
            var pending: [(any AnyModelInfo, SchemaChange)] = []
            for type in models {
                let (info, change) = try type.reconcileErased(stored: catalog[type.modelName], schemaVersion: schemaVersion)
                if byName[info.name] != nil {
                    throw StrataError.unsupportedType(model: info.name, field: "(model)", reason: "two models share the name \(info.name); set modelName")
                }
                differences += change.differences
                infos[ObjectIdentifier(type)] = info
                byName[info.name] = info
                pending.append((info, change))
            }
            if !differences.isEmpty { throw StrataError.migrationRequired(differences) }
            let schemaTree = try txn.createTree(Catalog.schemaTree)
            for (info, change) in pending where change.changed {
                try schemaTree.put(Array(info.name.utf8), try Catalog.encode(info.stored))
                _ = try txn.createTree(info.stored.recordTree)
                for dropped in change.droppedIndexes { try txn.dropTree(dropped.treeName(model: info.name)) }
                try info.buildIndexes(change.addedIndexes, in: txn)
            }
        }
        self.models = infos
        self.modelsByName = byName
    }

    func info<M: Model>(_ type: M.Type) throws -> ModelInfo<M> {
        guard let info = models[ObjectIdentifier(type)] as? ModelInfo<M> else {
            throw StrataError.unsupportedType(model: M.modelName, field: "(model)", reason: "\(M.self) was not passed to Database(models:)")
        }
        return info
    }

    // MARK: Transactions

    /// Runs `body` in one write transaction and commits it. Throwing rolls everything back.
    ///
    /// ```swift
    /// let stored = try db.write { tx in try tx.insert(Message(id: nil, text: "hi")) }   // id assigned
    /// ```
    public func write<R>(durability: Durability? = nil, _ body: (Transaction) throws -> R) throws -> R {
        do {
            return try store.write(durability: durability) { txn in try body(Transaction(db: self, txn: txn)) }
        } catch let error as StorageError {
            throw error == .closed ? StrataError.databaseClosed : StrataError.storage(error)
        }
    }

    /// Runs `body` on a snapshot of the newest commit.
    public func read<R>(_ body: (Snapshot) throws -> R) throws -> R {
        try body(try snapshot())
    }

    /// A snapshot of the newest commit, kept until released.
    public func snapshot() throws -> Snapshot {
        do {
            return Snapshot(db: self, txn: try store.beginRead())
        } catch let error as StorageError {
            throw error == .closed ? StrataError.databaseClosed : StrataError.storage(error)
        }
    }

    /// The object with primary key `key`, from the newest commit.
    public func object<M: Model>(_ type: M.Type, key: M.ID) throws -> M? {
        try snapshot().object(type, key: key)
    }

    /// Every object of a model at the newest commit, to filter, sort and count.
    /// On a closed database the results are empty and carry the error.
    public func objects<M: Model>(_ type: M.Type) -> Results<M> {
        do {
            return try snapshot().objects(type)
        } catch {
            return Results(failed: error as? StrataError ?? .storage(.closed))
        }
    }

    /// Closes this handle; later calls throw `StrataError.databaseClosed`.
    public func close() { store.close() }
}

extension Model {
    static func reconcileErased(stored: StoredModelSchema?, schemaVersion: Int) throws -> (any AnyModelInfo, SchemaChange) {
        let (info, change) = try reconcile(stored: stored, schemaVersion: schemaVersion)
        return (info, change)
    }
}

extension Catalog {
    static func load(_ txn: StrataStorage.WriteTransaction) throws -> [String: StoredModelSchema] {
        var result: [String: StoredModelSchema] = [:]
        guard let tree = try txn.tree(schemaTree) else { return result }
        try tree.forEach { key, value in
            result[String(decoding: key, as: UTF8.self)] = try decode(value)
            return true
        }
        return result
    }
}
