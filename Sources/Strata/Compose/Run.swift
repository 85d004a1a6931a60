extension Database {
    /// Runs a read-only composition on one snapshot of the newest commit, so every part of it sees
    /// the same commit. It never takes the writer lock: it runs beside an open write and sees the
    /// last commit, not that write's changes. Called inside this handle's `write` on the same
    /// thread, it joins that transaction instead and sees its writes.
    ///
    /// Throws what the composition throws: `StrataError` from the ready-made operations (engine
    /// failures as `StrataError.storage`, `databaseClosed` after `close()`), and your closures'
    /// errors unchanged.
    ///
    /// ```swift
    /// let (ana, adults) = try db.run(DBRead.object(Person.self, key: "u1").zip(DBRead.count(Person.self)))
    /// ```
    public func run<T>(_ io: DBRead<T>) throws -> T {
        if let tx = joinableTransaction() {
            return try withOpenTransaction(tx) { try io.run(in: .transaction(tx)) }
        }
        // The ready-made reads wrap engine errors already; this catches those of a custom read
        // that reached the engine some other way, so that every engine failure arrives typed.
        return try onNewestSnapshot { snapshot in try wrapStorage { try io.run(in: .snapshot(snapshot)) } }
    }

    /// Runs a composition that writes in exactly one write transaction, committed when all of it
    /// succeeded: a throw anywhere rolls all of it back and reaches the caller. Called inside this
    /// handle's `write` (or another `run`) on the same thread, it joins that transaction instead, as
    /// a savepoint: a throw still undoes all of the composition (and only it), nothing commits until
    /// the outer write does, and `durability` is the outer write's.
    ///
    /// Throws what the composition throws: `StrataError` from the ready-made operations
    /// (`duplicateKey`, `uniqueViolation`, `notFound`, …; engine failures as `StrataError.storage`,
    /// `databaseClosed` after `close()`), and your closures' errors unchanged.
    ///
    /// ```swift
    /// try db.run(DBWrite.insert(ana).then(DBWrite.insert(ben)))             // both or neither
    /// ```
    @discardableResult
    public func run<T>(_ io: DBWrite<T>, durability: Durability? = nil) throws -> T {
        if let tx = joinableTransaction() {
            return try withOpenTransaction(tx) { try tx.run(io) }
        }
        // `write` makes the transaction this handle's open one while `io` runs, so nested runs join.
        return try write(durability: durability) { tx in try io.run(in: .transaction(tx)) }
    }
}

extension Transaction {
    /// Runs a composition, read or write, in this transaction: its reads see this transaction's
    /// writes, and its writes commit (or roll back) with it. A composition that writes runs as a
    /// savepoint: if it throws, all of its writes are undone before the error reaches you.
    ///
    /// ```swift
    /// try db.write { tx in
    ///     let stored = try tx.run(DBWrite.insert(ana).zip(DBRead.count(Person.self)))
    ///     try tx.delete(Person.self, key: "u9")
    /// }
    /// ```
    @discardableResult
    public func run<Mode, T>(_ io: DBIO<Mode, T>) throws -> T {
        if Mode.self == Read.self { return try io.run(in: .transaction(self)) }
        return try savepoint { try io.run(in: .transaction(self)) }
    }
}

extension Database {
    /// Runs a read-only composition on one snapshot, from Swift concurrency: like `read`, on
    /// Strata's read threads, and stopped with `CancellationError` when the task is cancelled.
    ///
    /// ```swift
    /// let adults = try await db.run(DBRead.count(Person.self, where: #Predicate { $0.age >= 18 }))
    /// ```
    public func run<T: Sendable>(_ io: DBRead<T>) async throws -> T {
        try await read { snapshot in try wrapStorage { try io.run(in: .snapshot(snapshot)) } }
    }

    /// Runs a composition that writes in one transaction on the writer's thread, grouped with
    /// other queued writes into a shared commit (see `write(durability:_:) async`); it stays atomic
    /// on its own.
    ///
    /// ```swift
    /// try await db.run(DBWrite.insert(ana).then(DBWrite.insert(ben)))
    /// ```
    @discardableResult
    public func run<T: Sendable>(_ io: DBWrite<T>, durability: Durability? = nil) async throws -> T {
        try await write(durability: durability) { tx in try tx.run(io) }
    }
}
