/// What a `DBIO` may do to the database: `Read` or `Write`. The mode is a phantom type: it is
/// never instantiated, it only lets the compiler tell a composition that writes from one that
/// does not.
///
/// ```swift
/// func load<Mode: AccessMode>(_ io: DBIO<Mode, Person?>) -> DBIO<Mode, String> { io.map { $0?.name ?? "-" } }
/// ```
public protocol AccessMode: Sendable {}

/// The mode of work that only reads: it runs on one snapshot and never takes the writer lock.
///
/// ```swift
/// let io: DBIO<Read, Int> = DBRead.count(Person.self)
/// ```
public enum Read: AccessMode {}

/// The mode of work that writes (and may read): it runs in one write transaction.
///
/// ```swift
/// let io: DBIO<Write, Person> = DBWrite.insert(Person(id: "u1", name: "Ana", age: 30))
/// ```
public enum Write: AccessMode {}

/// Database work that only reads. `db.run` runs it on one snapshot.
///
/// ```swift
/// let ana: DBRead<Person?> = .object(Person.self, key: "u1")
/// let name = try db.run(ana.map { $0?.name })
/// ```
public typealias DBRead<T> = DBIO<Read, T>

/// Database work that writes. `db.run` runs it in one write transaction; a throw anywhere in it
/// rolls all of it back.
///
/// ```swift
/// let both: DBWrite<Person> = DBWrite.insert(ana).then(DBWrite.insert(ben))
/// try db.run(both)
/// ```
public typealias DBWrite<T> = DBIO<Write, T>

/// Where a `DBIO` runs: a snapshot for a read on its own, the write transaction otherwise (a read
/// joined to a write sees that transaction's own writes).
enum DBContext {
    case snapshot(Snapshot)
    case transaction(Transaction)

    var reader: any ObjectReader {
        switch self {
        case .snapshot(let snapshot): return snapshot
        case .transaction(let tx): return tx
        }
    }

    /// The transaction of a write. Mode typing means a `DBWrite` only ever runs in one; the throw is
    /// for the impossible case rather than a trap.
    func transaction() throws -> Transaction {
        guard case .transaction(let tx) = self else { throw StrataError.writeInReadTransaction }
        return tx
    }
}

/// A description of database work that yields a `T`, not yet run: build it from ready-made
/// operations (`DBRead.object`, `DBWrite.insert`, …) or a closure, compose it with `map`,
/// `flatMap`, `zip`, `then` and `sequence`, and run it with `db.run(_:)`. It is a value: build it
/// once, run it as often as you like, on any thread.
///
/// `Mode` says whether it writes. Composing two reads gives a read; composing anything with a write
/// gives a write, and the compiler knows which:
///
/// ```swift
/// let ana: DBRead<Person?> = .object(Person.self, key: "u1")
/// let adults: DBRead<Int> = .count(Person.self, where: #Predicate { $0.age >= 18 })
/// let both: DBRead<(Person?, Int)> = ana.zip(adults)                      // still a read
/// let birthday: DBWrite<Person> = ana.flatMap { person in                 // now a write
///     DBWrite.update(Person.self, key: person?.id ?? "u1") { $0.age += 1 }
/// }
/// let (who, count) = try db.run(both)
/// try db.run(birthday)                                                   // one transaction
/// ```
///
/// Errors: the ready-made operations throw `StrataError` (the engine's failures arrive as
/// `StrataError.storage`); a closure you write may throw anything, and it reaches `run` unchanged.
public struct DBIO<Mode: AccessMode, T>: Sendable {
    let body: @Sendable (DBContext) throws -> T

    /// Not an initializer: `DBRead { … }` and `DBWrite { … }` with a trailing closure are the public
    /// initializers, and an internal one taking a closure would make them ambiguous in this module.
    static func primitive(_ body: @escaping @Sendable (DBContext) throws -> T) -> DBIO {
        DBIO(body: body)
    }

    private init(body: @escaping @Sendable (DBContext) throws -> T) {
        self.body = body
    }

    /// Runs the work in `context`; composition calls this, `db.run` and `tx.run` choose the context.
    func run(in context: DBContext) throws -> T {
        try body(context)
    }
}

// MARK: - Same mode

extension DBIO {
    /// Work that reads or writes nothing and yields `value`: the starting point of a composition,
    /// or a branch of a `flatMap` that has nothing to do.
    ///
    /// ```swift
    /// let io: DBWrite<Person?> = DBRead.object(Person.self, key: "u1").flatMap { found in
    ///     found == nil ? DBWrite.insert(ana).map { Optional($0) } : DBWrite.just(found)
    /// }
    /// ```
    public static func just(_ value: T) -> DBIO where T: Sendable {
        primitive { _ in value }
    }

    /// Transforms the result. The mode stays the same.
    ///
    /// ```swift
    /// let name: DBRead<String> = DBRead.object(Person.self, key: "u1").map { $0?.name ?? "-" }
    /// ```
    public func map<U>(_ transform: @escaping @Sendable (T) throws -> U) -> DBIO<Mode, U> {
        DBIO<Mode, U>.primitive { context in try transform(body(context)) }
    }

    /// Chains work that depends on this one's result; both run in the same transaction. A read
    /// followed by a read is a read; see the overloads for reads and writes mixed.
    ///
    /// ```swift
    /// let friendName: DBRead<String?> = DBRead.object(Person.self, key: "u1").flatMap { person in
    ///     DBRead.object(Person.self, key: person?.bestFriend?.id ?? "").map { $0?.name }
    /// }
    /// ```
    public func flatMap<U>(_ next: @escaping @Sendable (T) throws -> DBIO<Mode, U>) -> DBIO<Mode, U> {
        DBIO<Mode, U>.primitive { context in try next(body(context)).body(context) }
    }

    /// Runs this, then `other`, and yields both results.
    ///
    /// ```swift
    /// let both: DBRead<(Person?, Int)> = DBRead.object(Person.self, key: "u1").zip(DBRead.count(Person.self))
    /// ```
    public func zip<U>(_ other: DBIO<Mode, U>) -> DBIO<Mode, (T, U)> {
        DBIO<Mode, (T, U)>.primitive { context in (try body(context), try other.body(context)) }
    }

    /// Runs this, then `next`, and yields `next`'s result (this one's is dropped). Each `then` or
    /// `flatMap` nests one call when the operation runs: for many operations built in a loop use
    /// `sequence`, which runs them one after another (a chain of tens of thousands of `then`s
    /// nests deeper than a thread's stack).
    ///
    /// ```swift
    /// let io: DBWrite<Person> = DBWrite.insert(ana).then(DBWrite.insert(ben))
    /// ```
    public func then<U>(_ next: DBIO<Mode, U>) -> DBIO<Mode, U> {
        DBIO<Mode, U>.primitive { context in
            _ = try body(context)
            return try next.body(context)
        }
    }

    /// Runs this and drops the result: for compositions whose effects are the point.
    ///
    /// ```swift
    /// let io: DBWrite<Void> = DBWrite.upsert(ana).discardingResult()
    /// ```
    public func discardingResult() -> DBIO<Mode, Void> {
        DBIO<Mode, Void>.primitive { context in _ = try body(context) }
    }

    /// Runs `a`, then `b`, and yields both results.
    ///
    /// ```swift
    /// let io: DBRead<(Int, Int)> = DBRead.zip(DBRead.count(Person.self), DBRead.count(Pet.self))
    /// ```
    public static func zip<A, B>(_ a: DBIO<Mode, A>, _ b: DBIO<Mode, B>) -> DBIO where T == (A, B) {
        primitive { context in (try a.body(context), try b.body(context)) }
    }

    /// Runs `a`, `b`, then `c`, and yields the three results.
    ///
    /// ```swift
    /// let io: DBRead<(Int, Int, Person?)> = DBRead.zip(.count(Person.self), .count(Pet.self), .object(Person.self, key: "u1"))
    /// ```
    public static func zip<A, B, C>(_ a: DBIO<Mode, A>, _ b: DBIO<Mode, B>, _ c: DBIO<Mode, C>) -> DBIO where T == (A, B, C) {
        primitive { context in (try a.body(context), try b.body(context), try c.body(context)) }
    }

    /// Runs each in order and yields their results in that order. An empty list yields `[]`.
    ///
    /// ```swift
    /// let io: DBWrite<[Person]> = DBWrite.sequence(people.map { DBWrite.upsert($0) })
    /// ```
    public static func sequence<Element>(_ operations: [DBIO<Mode, Element>]) -> DBIO where T == [Element] {
        primitive { context in
            var results: [Element] = []
            results.reserveCapacity(operations.count)
            for operation in operations { results.append(try operation.body(context)) }
            return results
        }
    }
}

// MARK: - Mixed modes
//
// The overloads below exist only for a read composed with a write. Each is `@_disfavoredOverload`:
// when an argument fits both it and the same-mode overload above (an implicit member such as
// `.just(1)`, which exists in both modes), the compiler would otherwise report an ambiguity; this
// way it picks the same-mode one, whose result is the narrower mode (a read stays a read).

// MARK: - A read, then a write

extension DBIO where Mode == Read {
    /// The same reads, typed as a write: to put reads and writes in one `sequence`, or to pass a
    /// read where a `DBWrite` is expected. When run, it still reads inside the write transaction.
    ///
    /// ```swift
    /// let io: DBWrite<[Int]> = DBWrite.sequence([DBRead.count(Person.self).asWrite, DBWrite.delete(Person.self, where: #Predicate { $0.age < 0 })])
    /// ```
    public var asWrite: DBWrite<T> {
        DBWrite<T>.primitive(body)
    }

    /// Chains a write that depends on this read's result: the whole is a write, and the read runs
    /// in the same transaction, so what it saw cannot change before the write.
    ///
    /// ```swift
    /// let io: DBWrite<Bool> = DBRead.count(Person.self).flatMap { n in DBWrite.delete(Person.self, key: "u\(n)") }
    /// ```
    @_disfavoredOverload
    public func flatMap<U>(_ next: @escaping @Sendable (T) throws -> DBWrite<U>) -> DBWrite<U> {
        DBWrite<U>.primitive { context in try next(body(context)).body(context) }
    }

    /// Runs this read, then the write `other`; yields both results. The whole is a write.
    ///
    /// ```swift
    /// let io: DBWrite<(Int, Person)> = DBRead.count(Person.self).zip(DBWrite.insert(ana))
    /// ```
    @_disfavoredOverload
    public func zip<U>(_ other: DBWrite<U>) -> DBWrite<(T, U)> {
        DBWrite<(T, U)>.primitive { context in (try body(context), try other.body(context)) }
    }

    /// Runs this read, then the write `next`; yields the write's result. The whole is a write.
    ///
    /// ```swift
    /// let io: DBWrite<Person> = DBRead.count(Person.self).then(DBWrite.insert(ana))
    /// ```
    @_disfavoredOverload
    public func then<U>(_ next: DBWrite<U>) -> DBWrite<U> {
        DBWrite<U>.primitive { context in
            _ = try body(context)
            return try next.body(context)
        }
    }
}

// MARK: - A write, then a read

extension DBIO where Mode == Write {
    /// Chains a read that depends on this write's result. The whole is a write; the read sees
    /// this transaction's own writes.
    ///
    /// ```swift
    /// let io: DBWrite<Int> = DBWrite.insert(ana).flatMap { _ in DBRead.count(Person.self) }
    /// ```
    @_disfavoredOverload
    public func flatMap<U>(_ next: @escaping @Sendable (T) throws -> DBRead<U>) -> DBWrite<U> {
        DBWrite<U>.primitive { context in try next(body(context)).body(context) }
    }

    /// Runs this write, then the read `other` (which sees the write); yields both results.
    ///
    /// ```swift
    /// let io: DBWrite<(Person, Int)> = DBWrite.insert(ana).zip(DBRead.count(Person.self))
    /// ```
    @_disfavoredOverload
    public func zip<U>(_ other: DBRead<U>) -> DBWrite<(T, U)> {
        DBWrite<(T, U)>.primitive { context in (try body(context), try other.body(context)) }
    }

    /// Runs this write, then the read `next` (which sees the write); yields the read's result.
    ///
    /// ```swift
    /// let io: DBWrite<Int> = DBWrite.insert(ana).then(DBRead.count(Person.self))
    /// ```
    @_disfavoredOverload
    public func then<U>(_ next: DBRead<U>) -> DBWrite<U> {
        DBWrite<U>.primitive { context in
            _ = try body(context)
            return try next.body(context)
        }
    }
}
