/// A read-only view of one commit. Everything read through it, on any thread, sees that commit.
/// Keep it only as long as needed: pages it can see are not reused while it lives.
///
/// ```swift
/// try db.read { snapshot in
///     let people = snapshot.objects(Person.self)
///     let ana = try snapshot.object(Person.self, key: "u1")
/// }
/// ```
public final class Snapshot: Sendable {
    let db: Database
    let txn: ReadTransaction

    init(db: Database, txn: ReadTransaction) {
        self.db = db
        self.txn = txn
    }

    /// The commit this snapshot sees.
    ///
    /// ```swift
    /// let snapshot = try db.snapshot()
    /// print(snapshot.version == snapshot.objects(Person.self).version)   // true
    /// ```
    public var version: UInt64 { txn.txnid }

    /// The object with primary key `key`, or nil.
    ///
    /// ```swift
    /// let ana = try db.snapshot().object(Person.self, key: "u1")
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
        try checked { try db.info(M.self).readObject(key: key, in: SnapshotTrees(txn: txn), found) }
    }

    /// `body`'s result, once this snapshot is known to have read the commit it began on. Only a
    /// snapshot of a read-only store can fail that (a writer in another process reused its pages,
    /// ReadOnly.swift): then whatever `body` returned or threw is replaced by
    /// `StrataError.storage(.fileChangedDuringRead)`. Every read of the object layer that hands
    /// out data goes through here (lazily read elements check `ResultsOutcome.validating`).
    func checked<R>(_ body: () throws -> R) throws -> R {
        try trustedRead(txn, body)
    }

    /// Throws `StrataError.storage(.fileChangedDuringRead)` when this snapshot's reads can no
    /// longer be trusted (see `checked`).
    func validate() throws {
        try wrapStorage { try txn.validate() }
    }

    /// Every object of the model in this snapshot, to filter, sort and count.
    ///
    /// ```swift
    /// let snapshot = try db.snapshot()
    /// let total = snapshot.objects(Person.self).count
    /// let adults = snapshot.objects(Person.self).filter(#Predicate { $0.age >= 18 }).count   // same commit
    /// ```
    public func objects<M: Model>(_ type: M.Type) -> Results<M> {
        Results(snapshot: self, query: Query())
    }
}

/// `body`'s result once `txn` is known to have read the commit it began on; otherwise
/// `StrataError.storage(.fileChangedDuringRead)`, whatever `body` returned or threw (see
/// `Snapshot.checked`). Free for a registered snapshot: one flag test.
@inline(__always) func trustedRead<R>(_ txn: ReadTransaction?, _ body: () throws -> R) throws -> R {
    guard let txn, txn.needsValidation else { return try body() }
    let result: R
    do {
        result = try body()
    } catch {
        // An error found in pages a writer was reusing says nothing about the file.
        try wrapStorage { try txn.validate() }
        throw error
    }
    try wrapStorage { try txn.validate() }
    return result
}

extension ReadTransaction {
    /// Whether what this snapshot read so far can be trusted (`validate()` passes).
    var isValid: Bool { (try? validate()) != nil }
}

extension Error {
    /// Whether this is `fileChangedDuringRead`, from the engine or wrapped by the object layer.
    var isFileChangedDuringRead: Bool {
        if case .fileChangedDuringRead? = self as? StorageError { return true }
        if case .storage(.fileChangedDuringRead)? = self as? StrataError { return true }
        return false
    }
}

/// Runs engine calls, turning their errors into `StrataError`.
func wrapStorage<R>(_ body: () throws -> R) throws -> R {
    do {
        return try body()
    } catch let error as StorageError {
        throw StrataError(error)
    }
}

extension StrataError {
    /// An engine error as the object layer reports it: a closed store is a closed database.
    init(_ error: StorageError) {
        self = error == .closed ? .databaseClosed : .storage(error)
    }
}
