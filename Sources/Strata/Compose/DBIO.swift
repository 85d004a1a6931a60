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
        case .transaction(let tx): return TransactionReader(tx: tx)
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
    /// The work as a tree of steps, run by a loop (`DBStep.run`) rather than by closures calling
    /// closures: a composition folded from many parts (`io = io.then(next)` once per imported row)
    /// nests as deep as it has parts, and a closure per level overflowed the stack at about 30,000.
    let step: DBStep

    /// Not an initializer: `DBRead { … }` and `DBWrite { … }` with a trailing closure are the public
    /// initializers, and an internal one taking a closure would make them ambiguous in this module.
    static func primitive(_ body: @escaping @Sendable (DBContext) throws -> T) -> DBIO {
        DBIO(step: .primitive { context in Erased(try body(context)) })
    }

    fileprivate init(step: DBStep) {
        self.step = step
    }

    /// Runs the work in `context`; composition calls this, `db.run` and `tx.run` choose the context.
    func run(in context: DBContext) throws -> T {
        try Erased.open(step.run(in: context))
    }
}

/// One step of a composition, with the type of its result erased (each result is an `Erased` of
/// the step's `T`), so that steps of any types nest in one tree.
///
/// A class, for its `deinit`: releasing a tree one level per call overflows the stack on a deep
/// one just as running it did, so the last reference to a node takes its subtree apart in a loop.
/// `@unchecked Sendable`: `kind` is only changed by `deinit` and `dismantle`, on nodes nothing else
/// references any more; every other access reads it.
final class DBStep: @unchecked Sendable {
    enum Kind {
        /// Work on the database (or none: `just`).
        case primitive(@Sendable (DBContext) throws -> Any)
        /// The result of a step, transformed.
        case map(DBStep, @Sendable (Any) throws -> Any)
        /// The result of a step chooses the step that runs next.
        case flatMap(DBStep, @Sendable (Any) throws -> DBStep)
        /// Steps run in order, their results combined (`zip`, `then`, `sequence`).
        case all([DBStep], @Sendable ([Any]) throws -> Any)
        /// Taken apart (see `deinit`).
        case dismantled
    }

    private var kind: Kind

    private init(_ kind: Kind) { self.kind = kind }

    static func primitive(_ body: @escaping @Sendable (DBContext) throws -> Any) -> DBStep { DBStep(.primitive(body)) }
    static func map(_ inner: DBStep, _ transform: @escaping @Sendable (Any) throws -> Any) -> DBStep { DBStep(.map(inner, transform)) }
    static func flatMap(_ inner: DBStep, _ choose: @escaping @Sendable (Any) throws -> DBStep) -> DBStep { DBStep(.flatMap(inner, choose)) }
    static func all(_ steps: [DBStep], _ combine: @escaping @Sendable ([Any]) throws -> Any) -> DBStep { DBStep(.all(steps, combine)) }

    deinit {
        var children = dismantle()
        while var node = children.popLast() {
            // The last reference: take its children before it goes, so that its release recurses
            // no further. (A node still referenced elsewhere keeps its subtree.)
            if isKnownUniquelyReferenced(&node) { children.append(contentsOf: node.dismantle()) }
        }
    }

    /// Empties this node, handing over its children.
    private func dismantle() -> [DBStep] {
        let children: [DBStep]
        switch kind {
        case .primitive, .dismantled: children = []
        case .map(let inner, _), .flatMap(let inner, _): children = [inner]
        case .all(let steps, _): children = steps
        }
        kind = .dismantled
        return children
    }

    /// What is left to do with the result of the step being run: the levels above it.
    private enum Pending {
        case map(@Sendable (Any) throws -> Any)
        case flatMap(@Sendable (Any) throws -> DBStep)
        /// The steps of an `.all` still to run; the results of those run are the top of
        /// `results` (kept apart, so that appending to them never copies them).
        case all(rest: ArraySlice<DBStep>, combine: @Sendable ([Any]) throws -> Any)
    }

    /// Runs the tree with an explicit stack of pending levels, so that its depth costs heap, not
    /// call stack.
    func run(in context: DBContext) throws -> Any {
        var pending: [Pending] = []
        var results: [[Any]] = []
        var next: DBStep? = self
        var value: Any = Erased(())
        while true {
            // Descend to the first step that does work, noting the levels passed on the way.
            while let step = next {
                next = nil
                switch step.kind {
                case .primitive(let body):
                    value = try body(context)
                case .map(let inner, let transform):
                    pending.append(.map(transform))
                    next = inner
                case .flatMap(let inner, let choose):
                    pending.append(.flatMap(choose))
                    next = inner
                case .all(let steps, let combine):
                    if let first = steps.first {
                        pending.append(.all(rest: steps.dropFirst(), combine: combine))
                        results.append([])
                        results[results.count - 1].reserveCapacity(steps.count)
                        next = first
                    } else {
                        value = try combine([])
                    }
                case .dismantled:
                    throw StrataError.invalidQuery("a composed operation's step was released while it ran")
                }
            }
            // Hand the result up until a level has another step to run.
            while next == nil {
                guard let level = pending.popLast() else { return value }
                switch level {
                case .map(let transform):
                    value = try transform(value)
                case .flatMap(let choose):
                    next = try choose(value)
                case .all(let rest, let combine):
                    results[results.count - 1].append(value)
                    if let first = rest.first {
                        pending.append(.all(rest: rest.dropFirst(), combine: combine))
                        next = first
                    } else {
                        value = try combine(results.removeLast())
                    }
                }
            }
        }
    }
}

/// A step's result, typed. A wrapper rather than the value itself in an `Any`: casting an `Any`
/// back to an optional type can unwrap or rewrap optionals, an exact generic struct cannot.
struct Erased<T> {
    let value: T

    init(_ value: T) { self.value = value }

    /// The value of a step's result. The tree is built only by the typed combinators, so the
    /// cast cannot fail; it throws rather than traps if it ever did.
    static func open(_ any: Any) throws -> T {
        guard let erased = any as? Erased<T> else {
            throw StrataError.invalidQuery("a composed operation's step gave \(type(of: any)), not \(T.self)")
        }
        return erased.value
    }

    /// The value at `index` of a combined step's results.
    static func open(_ results: [Any], _ index: Int) throws -> T {
        guard results.indices.contains(index) else {
            throw StrataError.invalidQuery("a composed operation's step gave \(results.count) results, not \(index + 1) or more")
        }
        return try open(results[index])
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
        DBIO<Mode, U>(step: .map(step) { value in Erased(try transform(Erased.open(value))) })
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
        DBIO<Mode, U>(step: .flatMap(step) { value in try next(Erased.open(value)).step })
    }

    /// Runs this, then `other`, and yields both results.
    ///
    /// ```swift
    /// let both: DBRead<(Person?, Int)> = DBRead.object(Person.self, key: "u1").zip(DBRead.count(Person.self))
    /// ```
    public func zip<U>(_ other: DBIO<Mode, U>) -> DBIO<Mode, (T, U)> {
        DBIO<Mode, (T, U)>(step: .pair(step, other.step, T.self, U.self))
    }

    /// Runs this, then `next`, and yields `next`'s result (this one's is dropped). A chain of any
    /// length runs and is released without nesting calls (`io = io.then(…)` in a loop of 50,000
    /// is fine). What does nest is a chain built inside your own closures
    /// (`io = DBWrite.insert(x).flatMap { _ in previous }`), released one closure inside another:
    /// for many operations built in a loop, prefer `then` or `sequence`.
    ///
    /// ```swift
    /// let io: DBWrite<Person> = DBWrite.insert(ana).then(DBWrite.insert(ben))
    /// ```
    public func then<U>(_ next: DBIO<Mode, U>) -> DBIO<Mode, U> {
        DBIO<Mode, U>(step: .then(step, next.step))
    }

    /// Runs this and drops the result: for compositions whose effects are the point.
    ///
    /// ```swift
    /// let io: DBWrite<Void> = DBWrite.upsert(ana).discardingResult()
    /// ```
    public func discardingResult() -> DBIO<Mode, Void> {
        DBIO<Mode, Void>(step: .map(step) { _ in Erased(()) })
    }

    /// Runs `a`, then `b`, and yields both results.
    ///
    /// ```swift
    /// let io: DBRead<(Int, Int)> = DBRead.zip(DBRead.count(Person.self), DBRead.count(Pet.self))
    /// ```
    public static func zip<A, B>(_ a: DBIO<Mode, A>, _ b: DBIO<Mode, B>) -> DBIO where T == (A, B) {
        DBIO(step: .pair(a.step, b.step, A.self, B.self))
    }

    /// Runs `a`, `b`, then `c`, and yields the three results.
    ///
    /// ```swift
    /// let io: DBRead<(Int, Int, Person?)> = DBRead.zip(.count(Person.self), .count(Pet.self), .object(Person.self, key: "u1"))
    /// ```
    public static func zip<A, B, C>(_ a: DBIO<Mode, A>, _ b: DBIO<Mode, B>, _ c: DBIO<Mode, C>) -> DBIO where T == (A, B, C) {
        DBIO(
            step: .all([a.step, b.step, c.step]) { results in
                Erased((try Erased<A>.open(results, 0), try Erased<B>.open(results, 1), try Erased<C>.open(results, 2)))
            })
    }

    /// Runs each in order and yields their results in that order. An empty list yields `[]`.
    ///
    /// ```swift
    /// let io: DBWrite<[Person]> = DBWrite.sequence(people.map { DBWrite.upsert($0) })
    /// ```
    public static func sequence<Element>(_ operations: [DBIO<Mode, Element>]) -> DBIO where T == [Element] {
        DBIO(step: .all(operations.map(\.step)) { results in Erased(try results.map { try Erased<Element>.open($0) }) })
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
        DBWrite<T>(step: step)
    }

    /// Chains a write that depends on this read's result: the whole is a write, and the read runs
    /// in the same transaction, so what it saw cannot change before the write.
    ///
    /// ```swift
    /// let io: DBWrite<Bool> = DBRead.count(Person.self).flatMap { n in DBWrite.delete(Person.self, key: "u\(n)") }
    /// ```
    @_disfavoredOverload
    public func flatMap<U>(_ next: @escaping @Sendable (T) throws -> DBWrite<U>) -> DBWrite<U> {
        DBWrite<U>(step: .flatMap(step) { value in try next(Erased.open(value)).step })
    }

    /// Runs this read, then the write `other`; yields both results. The whole is a write.
    ///
    /// ```swift
    /// let io: DBWrite<(Int, Person)> = DBRead.count(Person.self).zip(DBWrite.insert(ana))
    /// ```
    @_disfavoredOverload
    public func zip<U>(_ other: DBWrite<U>) -> DBWrite<(T, U)> {
        DBWrite<(T, U)>(step: .pair(step, other.step, T.self, U.self))
    }

    /// Runs this read, then the write `next`; yields the write's result. The whole is a write.
    ///
    /// ```swift
    /// let io: DBWrite<Person> = DBRead.count(Person.self).then(DBWrite.insert(ana))
    /// ```
    @_disfavoredOverload
    public func then<U>(_ next: DBWrite<U>) -> DBWrite<U> {
        DBWrite<U>(step: .then(step, next.step))
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
        DBWrite<U>(step: .flatMap(step) { value in try next(Erased.open(value)).step })
    }

    /// Runs this write, then the read `other` (which sees the write); yields both results.
    ///
    /// ```swift
    /// let io: DBWrite<(Person, Int)> = DBWrite.insert(ana).zip(DBRead.count(Person.self))
    /// ```
    @_disfavoredOverload
    public func zip<U>(_ other: DBRead<U>) -> DBWrite<(T, U)> {
        DBWrite<(T, U)>(step: .pair(step, other.step, T.self, U.self))
    }

    /// Runs this write, then the read `next` (which sees the write); yields the read's result.
    ///
    /// ```swift
    /// let io: DBWrite<Int> = DBWrite.insert(ana).then(DBRead.count(Person.self))
    /// ```
    @_disfavoredOverload
    public func then<U>(_ next: DBRead<U>) -> DBWrite<U> {
        DBWrite<U>(step: .then(step, next.step))
    }
}

extension DBStep {
    /// `first` then `second`, giving `second`'s result.
    static func then(_ first: DBStep, _ second: DBStep) -> DBStep {
        .all([first, second]) { results in
            guard let last = results.last, results.count == 2 else {
                throw StrataError.invalidQuery("a composed operation's step gave \(results.count) results, not 2")
            }
            return last
        }
    }

    /// Both steps in order, their results as a pair.
    static func pair<A, B>(_ a: DBStep, _ b: DBStep, _: A.Type, _: B.Type) -> DBStep {
        .all([a, b]) { results in Erased((try Erased<A>.open(results, 0), try Erased<B>.open(results, 1))) }
    }
}
