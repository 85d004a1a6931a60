import Foundation
import Dispatch
import Synchronization

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
    ///
    /// ```swift
    /// let trees = try db.store.read { try $0.treeNames() }   // ["m:Person", "strata:schema", …]
    /// ```
    public let store: Store
    let registry: ModelRegistry
    /// The one serial queue every observer of this handle computes on: a commit wakes one thread
    /// for all of them instead of one per observer (on a small machine the wake-ups, not the work,
    /// were what observers cost the writer).
    let observerQueue = DispatchQueue(label: "strata.observers")
    /// Routes commits to this handle's results observers.
    let observers: ObserverHub
    /// The newest snapshot handed out, shared by the reads of the same commit (see `snapshot()`).
    let newestSnapshot = Mutex<WeakSnapshot?>(nil)
    /// Writes from `write(…) async` and `writeAsync`, grouped into shared commits.
    let writes = WriteQueue()

    /// The transaction of this handle's `write` running now, so that work started inside it (a
    /// `DBWrite` run, a nested `write`) joins it. `nonisolated(unsafe)`: it is set and cleared only
    /// by the thread holding the writer lock, inside that write, and read only through
    /// `joinableTransaction()`, which first checks that the calling thread is that writer; the
    /// lock orders every set and clear before the next writer's reads.
    nonisolated(unsafe) private var openTransaction: Transaction?

    /// The write transaction the calling thread has open on this handle, if any.
    func joinableTransaction() -> Transaction? {
        store.isWritingOnCurrentThread ? openTransaction : nil
    }

    /// Runs `body` with `tx` as this handle's open transaction. Call only while holding the writer.
    func withOpenTransaction<R>(_ tx: Transaction, _ body: () throws -> R) rethrows -> R {
        let outer = openTransaction
        openTransaction = tx
        defer { openTransaction = outer }
        return try body()
    }

    /// Opens (or creates) the database at `path` for `models`. The schema of each model is derived
    /// from its type and reconciled with the stored one: additive changes (a new model, a new
    /// optional field, a removed field, an added or dropped index) apply by themselves; anything else
    /// throws `StrataError.migrationRequired` listing every difference. A type listed more than
    /// once counts once; two types with one `modelName` are refused.
    ///
    /// ```swift
    /// let db = try Database(path: "app.strata", models: [Person.self, Message.self])
    /// ```
    public convenience init(path: String, models: [any Model.Type], options: StoreOptions = StoreOptions()) throws {
        try self.init(store: try wrapStorage { try Store(path: path, options: options) }, models: models)
    }

    /// An in-memory database with the same engine, gone when released.
    ///
    /// ```swift
    /// let db = try Database.inMemory(models: [Person.self])   // for tests and previews
    /// ```
    public static func inMemory(models: [any Model.Type]) throws -> Database {
        try Database(store: try wrapStorage { try Store.inMemory() }, models: models)
    }

    /// What an automatic schema change would do, for errors.
    private static func describe(_ change: SchemaChange) -> String {
        var parts: [String] = []
        if !change.addedIndexes.isEmpty { parts.append("indexes it would add: \(change.addedIndexes.map(\.path).joined(separator: ", "))") }
        if !change.droppedIndexes.isEmpty { parts.append("indexes it would drop: \(change.droppedIndexes.map(\.path).joined(separator: ", "))") }
        return parts.isEmpty ? "fields added, removed or declared in another order" : parts.joined(separator: "; ") + ", or fields"
    }

    /// Opens a database on an existing store. See `init(path:models:schemaVersion:options:migration:)`
    /// for migrations.
    ///
    /// ```swift
    /// let store = try Store(path: "app.strata", options: StoreOptions(durability: .noSync))
    /// let db = try Database(store: store, models: [Person.self])
    /// ```
    public init(store: Store, models: [any Model.Type], schemaVersion: Int = 0, migration: ((Migration) throws -> Void)? = nil) throws {
        // A type listed twice is one model (a list gathered from several modules may repeat one);
        // two different types under one name are still refused below.
        var seen = Set<ObjectIdentifier>()
        let models = models.filter { seen.insert(ObjectIdentifier($0)).inserted }
        self.store = store
        self.observers = ObserverHub(worker: observerQueue)
        var infos: [ObjectIdentifier: any AnyModelInfo] = [:]
        var byName: [String: any AnyModelInfo] = [:]
        var stored: [String: [UInt8]] = [:]
        if store.isReadOnly {
            // Nothing may be written: the stored schemas must already be what these types need.
            // A writer in another process may overtake the snapshot meanwhile: read again, as
            // every one-shot read of a read-only database does.
            try Self.againWhileOvertaken(on: store) {
                try wrapStorage {
                    try store.read { txn in
                        infos = [:]
                        byName = [:]
                        let catalog = try Catalog.load(try txn.tree(Catalog.schemaTree))
                        var reasons: [String] = []
                        for type in models {
                            let (info, change) = try type.reconcileErased(stored: catalog[type.modelName], schemaVersion: schemaVersion, migrating: false)
                            if byName[info.name] != nil {
                                throw StrataError.unsupportedType(
                                    model: info.name, field: "(model)", reason: "two models share the name \(info.name); set modelName")
                            }
                            infos[ObjectIdentifier(type)] = info
                            byName[info.name] = info
                            if catalog[info.name] == nil {
                                reasons.append("\(info.name) is not stored in this file, and a read-only open cannot add it")
                            } else if let (stored, given) = change.raisedVersion, change.differences.isEmpty {
                                reasons.append(
                                    "\(info.name) is stored at schema version \(stored), below the \(given) given: a read-only open cannot migrate it (open it read-write first)"
                                )
                            } else if let old = catalog[info.name]?.indexes.first(where: { $0.kind?.outdatedBy != nil }),
                                let by = old.kind?.outdatedBy
                            {
                                reasons.append(
                                    "\(info.name): the full-text index on \(old.path) was written by \(by) (FORMAT.md §8.5), which "
                                        + "this build does not read; a read-write open rebuilds it, and a read-only one cannot")
                            } else if let old = catalog[info.name]?.indexes.first(where: { old in
                                old.kind == nil
                                    && info.stored.indexes.contains { $0.isTagged && $0.treeName(model: info.name) == old.treeName(model: info.name) }
                            }) {
                                reasons.append(
                                    "\(info.name): the index on \(old.path) reaches a field through an optional struct (or holds an optional array), and was "
                                        + "written by a build whose entries could not tell a nil on the way from a value (FORMAT.md §8.3); a read-write open "
                                        + "rebuilds it, and a read-only one cannot")
                            } else if change.changed {
                                reasons.append(
                                    contentsOf: change.differences.isEmpty
                                        ? ["\(info.name)'s stored schema lacks fields or indexes of the type, and a read-only open cannot add them"]
                                        : change.differences)
                            }
                        }
                        try Self.refuseSharedTrees(byName, stored: catalog)
                        if !reasons.isEmpty { throw StrataError.migrationRequired(reasons) }
                        stored = try ModelRegistry.storedSchemas(of: Array(byName.keys), in: try txn.tree(Catalog.schemaTree))
                    }
                }
            }
            self.registry = ModelRegistry(byType: infos, byName: byName, storedSchemas: stored)
            return
        }
        try wrapStorage {
            try store.write { txn in
                let catalog = try Catalog.load(try txn.tree(Catalog.schemaTree))
                let storedVersion = catalog.values.map(\.schemaVersion).max() ?? schemaVersion
                var differences: [String] = []
                var reconciled: [(any AnyModelInfo, SchemaChange)] = []
                for type in models {
                    let result = try type.reconcileErased(stored: catalog[type.modelName], schemaVersion: schemaVersion, migrating: false)
                    differences += result.1.differences
                    reconciled.append(result)
                }
                // A migration runs for schema differences, and whenever the version grows (a
                // data-only migration, as in Realm), but never on a new file.
                let migrating = !differences.isEmpty || (migration != nil && !catalog.isEmpty && schemaVersion > storedVersion)
                if migrating && (migration == nil || schemaVersion <= storedVersion) {
                    var reasons = differences
                    if migration != nil { reasons.append("schema version \(schemaVersion) must be above the stored version \(storedVersion) to migrate") }
                    throw StrataError.migrationRequired(reasons)
                }
                if schemaVersion < storedVersion {
                    // An older app, a widget or a tool (version 0) opens the file as it is or not
                    // at all: the changes that apply by themselves (a field dropped, an index
                    // added or dropped, a new optional field) would rewrite the newer app's schema
                    // under it, whose open handles then stop, and whose dropped fields read nil.
                    // Rebuilding an index in this build's layout changes no declaration: it applies.
                    var reasons: [String] = []
                    for (type, (info, change)) in zip(models, reconciled) where change.changed && !change.layoutOnly && catalog[type.modelName] != nil {
                        reasons.append(
                            "\(info.name) is stored at schema version \(storedVersion), above the \(schemaVersion) given, and its type differs from the stored schema "
                                + "(\(Self.describe(change))); an open at a lower version only opens a file whose schema the types match: open it with the newer types"
                        )
                    }
                    if !reasons.isEmpty { throw StrataError.migrationRequired(reasons) }
                }
                var pending: [(any AnyModelInfo, SchemaChange)] = []
                for (type, first) in zip(models, reconciled) {
                    // Without a migration the first reconciliation is the one that applies.
                    let (info, change) =
                        migrating
                        ? try type.reconcileErased(stored: catalog[type.modelName], schemaVersion: schemaVersion, migrating: true)
                        : first
                    if byName[info.name] != nil {
                        throw StrataError.unsupportedType(model: info.name, field: "(model)", reason: "two models share the name \(info.name); set modelName")
                    }
                    infos[ObjectIdentifier(type)] = info
                    byName[info.name] = info
                    pending.append((info, change))
                }
                try Self.refuseSharedTrees(byName, stored: catalog)
                let registry = ModelRegistry(byType: infos, byName: byName, storedSchemas: [:])
                let schemaTree = try txn.createTree(Catalog.schemaTree)
                for (info, change) in pending where change.changed {
                    try schemaTree.put(Array(info.name.utf8), try Catalog.encode(info.stored))
                    _ = try txn.createTree(info.stored.recordTree)
                    for dropped in change.droppedIndexes { try txn.dropTree(dropped.treeName(model: info.name)) }
                    if !migrating { try info.buildIndexes(change.addedIndexes, in: txn) }
                }
                if migrating, let migration {
                    let tx = Transaction(registry: registry, txn: txn, maintainsIndexes: false)
                    let context = Migration(oldVersion: storedVersion, newVersion: schemaVersion, oldSchemas: catalog, transaction: tx)
                    try migration(context)
                    // The closure caught the error of a write that failed halfway (as `write`
                    // refuses to commit one): the open fails and nothing changes.
                    if let failure = tx.failedMidway { throw Transaction.halfDone(failure) }
                    // Every record of every model must now read as its new type, and indexes follow.
                    for (info, _) in pending {
                        try info.validateRecords(in: txn)
                        for index in info.stored.indexes { try txn.dropTree(index.treeName(model: info.name)) }
                        try info.buildIndexes(info.stored.indexes, in: txn)
                    }
                }
                stored = try ModelRegistry.storedSchemas(of: Array(byName.keys), in: schemaTree)
            }
        }
        self.registry = ModelRegistry(byType: infos, byName: byName, storedSchemas: stored)
    }

    /// Two models whose trees would share a name are refused: an index tree is named
    /// `i:<model>:<path>`, and a model name or a coding key may hold a colon, so the model "chat"
    /// indexing a key "Message:text" and the model "chat:Message" indexing "text" wrote into one
    /// tree (found by a review of 2026-12-07): each model's entries were the other's damage. The
    /// models stored in the file that this open does not name count too (another handle's).
    static func refuseSharedTrees(_ byName: [String: any AnyModelInfo], stored catalog: [String: StoredModelSchema]) throws {
        var schemas = catalog
        for (name, info) in byName { schemas[name] = info.stored }
        var owner: [String: String] = [:]
        for name in schemas.keys.sorted() {
            for tree in schemas[name]?.trees ?? [] {
                // (Only two models meeting in one tree is the damage refused here, as before the mend
                // that named a model's trees once.)
                if let other = owner[tree], other != name {
                    throw StrataError.unsupportedType(
                        model: name, field: "(model)",
                        reason: "its tree \(tree) has the name of one of \(other)'s (a colon in a model name or a coding key); set modelName")
                }
                owner[tree] = name
            }
        }
    }

    /// Opens (or creates) the database at `path`, migrating it with `migration` when the stored
    /// schema differs in ways that need one, or when `schemaVersion` is above the stored one (a
    /// migration of the data alone). The closure runs inside the same write transaction as the
    /// schema change: it reads old records untyped and writes new ones; if it throws, nothing
    /// changes. `schemaVersion` must grow with each migration. On a new file it does not run.
    ///
    /// ```swift
    /// let db = try Database(path: path, models: [Person.self], schemaVersion: 2) { migration in
    ///     try migration.enumerateObjects("Person") { old, new in
    ///         new["age"] = .int(Int64(old["age"]?.stringValue ?? "") ?? 0)    // age was a String
    ///     }
    /// }
    /// ```
    public convenience init(
        path: String, models: [any Model.Type], schemaVersion: Int, options: StoreOptions = StoreOptions(),
        migration: @escaping (Migration) throws -> Void
    ) throws {
        try self.init(
            store: try wrapStorage { try Store(path: path, options: options) }, models: models, schemaVersion: schemaVersion,
            migration: migration)
    }

    func info<M: Model>(_ type: M.Type) throws -> ModelInfo<M> { try registry.info(type) }

    // MARK: Transactions

    /// Runs `body` in one write transaction and commits it. Throwing rolls everything back.
    /// Called inside another `write` on this handle and thread, it joins that transaction as a
    /// savepoint: if `body` throws, only its own changes are undone, and the outer transaction
    /// (whose durability applies) commits or not as a whole.
    ///
    /// ```swift
    /// let stored = try db.write { tx in try tx.insert(Message(id: nil, text: "hi")) }   // id assigned
    /// ```
    @discardableResult
    public func write<R>(durability: Durability? = nil, _ body: (Transaction) throws -> R) throws -> R {
        if let open = joinableTransaction() {
            return try open.savepoint { try body(open) }
        }
        return try wrapStorage {
            try store.write(durability: durability) { txn in
                try registry.checkStoredSchemas(in: txn.tree(Catalog.schemaTree))
                let tx = Transaction(registry: registry, txn: txn)
                return try withOpenTransaction(tx) {
                    let result = try body(tx)
                    // `body` caught the error of a write that failed halfway: do not commit.
                    if let failure = tx.failedMidway { throw Transaction.halfDone(failure) }
                    // Stopped (withProgress, a cancelled task): a loop over results in `body` ended
                    // early without throwing, so what it wrote is partial; `withProgress` reports
                    // CancellationError, and nothing of it may commit.
                    if OperationControl.shouldStop { throw CancellationError() }
                    return result
                }
            }
        }
    }

    /// Runs `body` on a snapshot of the newest commit. On a read-only database (see the Durability
    /// article), `body` runs again on a newer snapshot when a writer in another process overtook
    /// the one it read: keep it free of side effects.
    ///
    /// ```swift
    /// let (people, messages) = try db.read { snapshot in            // one commit for both
    ///     (snapshot.objects(Person.self).count, snapshot.objects(Message.self).count)
    /// }
    /// ```
    public func read<R>(_ body: (Snapshot) throws -> R) throws -> R {
        try onNewestSnapshot(body)
    }

    /// How many times a read of a read-only database runs again after a writer in another process
    /// overtook its snapshot (`onNewestSnapshot`, `snapshot()`).
    static let changedReadRetries = 100

    /// Overtaken attempts in a row after which a read of a read-only database runs again with
    /// other processes' writers held off (`Store.holdingWritersOff`), so that it ends: a writer
    /// that commits twice during every attempt would otherwise starve the reader. They wait one
    /// read's length, once in a while, rather than the reader for ever.
    static let overtakesBeforeHoldingWritersOff = 3

    /// `body`, run after `overtakes` overtaken attempts in a row: from the
    /// `overtakesBeforeHoldingWritersOff`-th on, while writers in other processes wait.
    func attempt<R>(after overtakes: Int, _ body: () throws -> R) throws -> R {
        try Self.attempt(on: store, after: overtakes, body)
    }

    /// `attempt(after:_:)` on `store`, before a database of it exists (its opening).
    static func attempt<R>(on store: Store, after overtakes: Int, _ body: () throws -> R) throws -> R {
        guard overtakes >= overtakesBeforeHoldingWritersOff else { return try body() }
        return try wrapStorage { try store.holdingWritersOff(body) }
    }

    /// `attempt(after:_:)` for a read that reports its own errors (an observer's): on a closed
    /// store, which `attempt` refuses before running anything, `body` runs as is and finds it closed.
    func attemptReporting(after overtakes: Int, _ body: () -> Void) {
        do { try attempt(after: overtakes, body) } catch { body() }
    }

    /// `body`, run again (up to `changedReadRetries` times) while it throws `fileChangedDuringRead`.
    func againWhileOvertaken<R>(_ body: () throws -> R) throws -> R {
        try Self.againWhileOvertaken(on: store, body)
    }

    /// `againWhileOvertaken(_:)` on `store`, before a database of it exists (its opening).
    static func againWhileOvertaken<R>(on store: Store, _ body: () throws -> R) throws -> R {
        var retries = 0
        while true {
            do {
                return try attempt(on: store, after: retries, body)
            } catch StrataError.storage(.fileChangedDuringRead) where retries < changedReadRetries {
                retries += 1
            }
        }
    }

    /// Runs `body` on a snapshot of the newest commit. On a read-only store, whose snapshots a
    /// writer in another process can overtake (their pages reused once it has committed twice
    /// more), a run whose reads did not stay on one commit is thrown away and `body` runs again
    /// on a newer snapshot (after a few, with writers held off: `attempt(after:_:)`); after
    /// `changedReadRetries` such runs the error reaches the caller.
    func onNewestSnapshot<R>(_ body: (Snapshot) throws -> R) throws -> R {
        try againWhileOvertaken {
            let snapshot = try self.snapshot()
            return try snapshot.checked { try body(snapshot) }
        }
    }

    /// A snapshot of the newest commit, kept until released. Snapshots of the same commit are one
    /// object: however many `Results` of it are kept, they hold one reader slot between them (a
    /// slot per distinct commit kept alive, 1,024 per file by default).
    ///
    /// ```swift
    /// let snapshot = try db.snapshot()
    /// let before = snapshot.objects(Person.self).count
    /// try db.write { tx in try tx.deleteAll(Person.self) }
    /// assert(snapshot.objects(Person.self).count == before)   // the snapshot still sees its commit
    /// ```
    public func snapshot() throws -> Snapshot {
        // A closed handle begins no read, even while results taken before the close keep the newest
        // commit's shared snapshot alive: handing that out again would answer reads after close().
        if store.isClosed { throw StrataError.databaseClosed }
        let latest = store.latestVersion
        // (Never an overtaken one: a read-only store's newest commit can be unreadable for a moment
        // while another process writes its meta page, and `latest` then falls back to the last seen.)
        if let shared = newestSnapshot.withLock({ $0?.snapshot }), shared.version == latest, shared.txn.isValid { return shared }
        // On a read-only store a writer in another process can overtake a snapshot while it begins
        // (choosing and verifying the commit, reading the stored schemas): nothing was handed out
        // yet, so begin again on a newer commit rather than fail the caller.
        let fresh = try againWhileOvertaken { try beginSnapshot() }
        newestSnapshot.withLock { $0 = WeakSnapshot(fresh) }
        return fresh
    }

    /// A new snapshot of the newest commit, after checking that the stored schemas are still the
    /// ones this handle opened with.
    private func beginSnapshot() throws -> Snapshot {
        let txn = try wrapStorage { try store.beginRead() }
        do {
            try registry.checkStoredSchemas(in: wrapStorage { try txn.tree(Catalog.schemaTree) })
            try wrapStorage { try txn.validate() }
        } catch {
            // Schemas read from pages a writer was reusing say nothing about the file.
            let overtaken = (try? txn.validate()) == nil
            txn.end()
            if overtaken { throw StrataError.storage(.fileChangedDuringRead(path: store.path)) }
            throw error
        }
        return Snapshot(db: self, txn: txn)
    }

    /// The object with primary key `key`, from the newest commit.
    ///
    /// ```swift
    /// if let ana = try db.object(Person.self, key: "u1") { print(ana.name) }
    /// ```
    @inlinable
    public func object<M: Model>(_ type: M.Type, key: M.ID) throws -> M? {
        var object: M?
        try readObject(key: key) { object = $0 }
        return object
    }

    /// `object(_:key:)` without an `M?` in unspecialized code (ModelInfo.readObject).
    @usableFromInline
    func readObject<M: Model>(key: M.ID, _ found: (M) -> Void) throws {
        try onNewestSnapshot { try $0.readObject(key: key, found) }
    }

    /// Every object of a model at the newest commit, to filter, sort and count.
    /// On a closed database the results are empty and carry the error.
    ///
    /// ```swift
    /// let adults = db.objects(Person.self).filter(#Predicate { $0.age >= 18 })
    /// print(adults.count)
    /// ```
    public func objects<M: Model>(_ type: M.Type) -> Results<M> {
        do {
            return try snapshot().objects(type)
        } catch {
            // Unless the database is closed, the failure may pass (every reader slot in use): the
            // results keep the database, so that an observation of them still starts.
            let failure = error as? StrataError ?? .storage(.closed)
            return Results(failed: failure, database: failure == .databaseClosed ? nil : self)
        }
    }

    /// Closes this handle; later calls throw `StrataError.databaseClosed`. Every observer of this
    /// handle gets `.error(.databaseClosed)` as its last change (a `LiveResults` or `LiveObject`
    /// shows it in `error`), and change streams (`results.changes`, `changes(_:key:)`, `commits`)
    /// finish. A write transaction already begun finishes and commits as it would have; snapshots
    /// already taken stay readable until released.
    ///
    /// ```swift
    /// db.close()
    /// _ = try? db.object(Person.self, key: "u1")   // throws StrataError.databaseClosed
    /// ```
    public func close() { store.close() }
}

extension Model {
    static func reconcileErased(stored: StoredModelSchema?, schemaVersion: Int, migrating: Bool) throws -> (any AnyModelInfo, SchemaChange) {
        let (info, change) = try reconcile(stored: stored, schemaVersion: schemaVersion, migrating: migrating)
        return (info, change)
    }
}

/// The models a database was opened with.
final class ModelRegistry: Sendable {
    let byType: [ObjectIdentifier: any AnyModelInfo]
    let byName: [String: any AnyModelInfo]
    /// Each model's stored schema as this handle opened the file, byte for byte. The models'
    /// infos (fields, indexes, the plans they make) were derived from it and stay true only while
    /// the file keeps it; another handle can change it (opened with another shape of a model).
    let storedSchemas: [String: [UInt8]]

    init(byType: [ObjectIdentifier: any AnyModelInfo], byName: [String: any AnyModelInfo], storedSchemas: [String: [UInt8]]) {
        self.byType = byType
        self.byName = byName
        self.storedSchemas = storedSchemas
    }

    static func storedSchemas(of names: [String], in tree: (some KeyValueTree)?) throws -> [String: [UInt8]] {
        var schemas: [String: [UInt8]] = [:]
        for name in names { schemas[name] = try withStoredSchema(name, in: tree) { $0.map { Array($0) } } }
        return schemas
    }

    /// `body` on the stored schema of model `name` as the tree holds it (nil when it has none).
    private static func withStoredSchema<R>(_ name: String, in tree: (some KeyValueTree)?, _ body: (UnsafeRawBufferPointer?) throws -> R) throws -> R {
        var key = name
        return try key.withUTF8 { key in try body(tree?.get(UnsafeRawBufferPointer(key))) }
    }

    /// Throws `migrationRequired` when a commit's stored schema of one of this handle's models is
    /// no longer the one it opened with: its infos could then read fields or indexes that are
    /// gone (an index dropped by another handle would answer its queries with nothing) and write
    /// what the stored schema no longer describes. A comparison of bytes, one lookup per model,
    /// for each new snapshot and write transaction.
    func checkStoredSchemas(in tree: (some KeyValueTree)?) throws {
        var changed: [String] = []
        for (name, bytes) in storedSchemas {
            if try Self.withStoredSchema(name, in: tree, { $0.map { Self.sameBytes($0, bytes) } ?? false }) { continue }
            changed.append(
                "\(name): its stored schema was changed by another Database handle (another process, or another open of the file with a different shape of the model) after this handle opened the file; open the file again with the model as it is now"
            )
        }
        if !changed.isEmpty { throw StrataError.migrationRequired(changed.sorted()) }
    }

    /// `memcmp`: `elementsEqual` went through the bytes one by one with iterators, 20,000
    /// instructions per snapshot for two models' schemas (5 % of a 50-row query's read).
    static func sameBytes(_ a: UnsafeRawBufferPointer, _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        return b.withUnsafeBytes { b in
            guard let x = a.baseAddress, let y = b.baseAddress else { return true }
            return memcmp(x, y, a.count) == 0
        }
    }

    func info<M: Model>(_ type: M.Type) throws -> ModelInfo<M> {
        guard let info = byType[ObjectIdentifier(type)] else {
            throw StrataError.unsupportedType(model: M.modelName, field: "(model)", reason: "\(M.self) was not passed to Database(models:)")
        }
        // What Database's init stores under M's identifier is M's `reconcile`, a ModelInfo<M>
        // (checked in debug builds): a checked cast cost a quarter of a microsecond per write.
        return unsafeDowncast(info, to: ModelInfo<M>.self)
    }
}

/// The newest snapshot handed out, without keeping it alive.
final class WeakSnapshot: Sendable {
    weak let snapshot: Snapshot?
    init(_ snapshot: Snapshot) { self.snapshot = snapshot }
}
