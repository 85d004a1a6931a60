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
    public func object<M: Model>(_ type: M.Type, key: M.ID) throws -> M? {
        try db.info(M.self).object(key: key, in: SnapshotTrees(txn: txn))
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
