import Foundation

/// Reading objects, the same way through a `Snapshot` and through a `Transaction` (which sees its
/// own writes). A custom `DBRead { reader in … }` gets one, so the same read composes into a
/// read-only run and into a write.
///
/// The requirements take every argument, so that they cannot be confused with
/// `Snapshot.objects(_:) -> Results<M>`; the shorter forms below fill in the rest.
///
/// ```swift
/// let names: DBRead<[String]> = DBRead { reader in
///     let adults = try reader.objects(Person.self, where: #Predicate { $0.age >= 18 }, sortedBy: [SortDescriptor(\.name)])
///     return adults.map(\.name)
/// }
/// ```
public protocol ObjectReader {
    /// The object with primary key `key`, or nil.
    func object<M: Model>(_ type: M.Type, key: M.ID) throws -> M?
    /// The objects matching `predicate` (all when nil), sorted by `sort` (by key when empty).
    func objects<M: Model>(_ type: M.Type, where predicate: Predicate<M>?, sortedBy sort: [SortDescriptor<M>]) throws -> [M]
    /// The number of objects matching `predicate` (all when nil).
    func count<M: Model>(_ type: M.Type, where predicate: Predicate<M>?) throws -> Int
}

extension ObjectReader {
    /// The objects matching `predicate` (all when nil), in key order.
    ///
    /// ```swift
    /// let all = try reader.objects(Person.self, where: nil)
    /// ```
    public func objects<M: Model>(_ type: M.Type, where predicate: Predicate<M>?) throws -> [M] {
        try objects(type, where: predicate, sortedBy: [])
    }

    /// Every object of the model, sorted by `sort`.
    ///
    /// ```swift
    /// let byName = try reader.objects(Person.self, sortedBy: [SortDescriptor(\.name)])
    /// ```
    public func objects<M: Model>(_ type: M.Type, sortedBy sort: [SortDescriptor<M>]) throws -> [M] {
        try objects(type, where: nil, sortedBy: sort)
    }

    /// The number of objects of the model.
    ///
    /// ```swift
    /// let n = try reader.count(Person.self)
    /// ```
    public func count<M: Model>(_ type: M.Type) throws -> Int {
        try count(type, where: nil)
    }
}

/// A transaction reads its own writes, so reads composed into a write see what came before them.
extension Transaction: ObjectReader {}

/// A write transaction as a `DBRead` sees it: its reads alone. (Handed the transaction itself, a
/// read-typed operation could cast it back and write, outside any savepoint.)
struct TransactionReader: ObjectReader {
    let tx: Transaction

    func object<M: Model>(_ type: M.Type, key: M.ID) throws -> M? { try tx.object(type, key: key) }

    func objects<M: Model>(_ type: M.Type, where predicate: Predicate<M>?, sortedBy sort: [SortDescriptor<M>]) throws -> [M] {
        try tx.objects(type, where: predicate, sortedBy: sort)
    }

    func count<M: Model>(_ type: M.Type, where predicate: Predicate<M>?) throws -> Int { try tx.count(type, where: predicate) }
}

/// Reflection shows no transaction either (`Mirror(reflecting: reader).descendant("tx")`).
extension TransactionReader: CustomReflectable {
    var customMirror: Mirror { Mirror(self, children: []) }
}

extension Snapshot: ObjectReader {
    /// The objects matching `predicate` (all when nil), sorted, as an array (the `ObjectReader`
    /// form; `objects(_:)` gives lazy `Results` instead).
    ///
    /// ```swift
    /// let adults = try snapshot.objects(Person.self, where: #Predicate { $0.age >= 18 }, sortedBy: [SortDescriptor(\.name)])
    /// ```
    public func objects<M: Model>(_ type: M.Type, where predicate: Predicate<M>?, sortedBy sort: [SortDescriptor<M>]) throws -> [M] {
        var results = objects(type)
        if let predicate { results = results.filter(predicate) }
        if !sort.isEmpty { results = results.sorted(by: sort) }
        return try results.fetch()
    }

    /// The number of objects matching `predicate` (all when nil); like `Results.fetchCount()`.
    ///
    /// ```swift
    /// let adults = try snapshot.count(Person.self, where: #Predicate { $0.age >= 18 })
    /// ```
    public func count<M: Model>(_ type: M.Type, where predicate: Predicate<M>?) throws -> Int {
        var results = objects(type)
        if let predicate { results = results.filter(predicate) }
        return try results.fetchCount()
    }
}

// MARK: - Reads

extension DBIO where Mode == Read {
    /// A custom read. `reader` is the snapshot of a read-only run, or the reads of the transaction
    /// when the read is part of a write (then it sees that transaction's writes; it cannot write).
    ///
    /// ```swift
    /// let oldest: DBRead<Person?> = DBRead { reader in
    ///     try reader.objects(Person.self, sortedBy: [SortDescriptor(\.age, order: .reverse)]).first
    /// }
    /// ```
    public init(_ body: @escaping @Sendable (any ObjectReader) throws -> T) {
        self = .primitive { context in try body(context.reader) }
    }

    /// The object with primary key `key`, or nil.
    ///
    /// ```swift
    /// let ana: DBRead<Person?> = DBRead.object(Person.self, key: "u1")
    /// ```
    public static func object<M: Model>(_ type: M.Type, key: M.ID) -> DBIO where T == M? {
        primitive { try $0.reader.object(type, key: key) }
    }

    /// The objects matching `predicate` (all when nil), sorted (in key order when `sortedBy` is
    /// empty), as an array.
    ///
    /// ```swift
    /// let adults: DBRead<[Person]> = DBRead.objects(Person.self, where: #Predicate { $0.age >= 18 }, sortedBy: [SortDescriptor(\.name)])
    /// ```
    public static func objects<M: Model>(
        _ type: M.Type, where predicate: Predicate<M>? = nil,
        sortedBy sort: [SortDescriptor<M>] = []
    ) -> DBIO where T == [M] {
        primitive { try $0.reader.objects(type, where: predicate, sortedBy: sort) }
    }

    /// The number of objects matching `predicate` (all when nil). Counts that an index or the
    /// tree answers decode nothing.
    ///
    /// ```swift
    /// let adults: DBRead<Int> = DBRead.count(Person.self, where: #Predicate { $0.age >= 18 })
    /// ```
    public static func count<M: Model>(_ type: M.Type, where predicate: Predicate<M>? = nil) -> DBIO where T == Int {
        primitive { try $0.reader.count(type, where: predicate) }
    }
}

// MARK: - Writes

extension DBIO where Mode == Write {
    /// A custom write, given the transaction: everything `Transaction` does, in the one
    /// transaction of the whole composition.
    ///
    /// ```swift
    /// let rename: DBWrite<Int> = DBWrite { tx in
    ///     var changed = 0
    ///     for person in try tx.objects(Person.self, where: #Predicate { $0.name == "" }) {
    ///         try tx.update(Person.self, key: person.id) { $0.name = "?" }
    ///         changed += 1
    ///     }
    ///     return changed
    /// }
    /// ```
    public init(_ body: @escaping @Sendable (Transaction) throws -> T) {
        self = .primitive { context in try body(context.transaction()) }
    }

    /// Inserts `object` and yields it as stored (with its key, for an auto-increment id). Fails with
    /// `StrataError.duplicateKey` when the key exists, `uniqueViolation` for a unique index.
    ///
    /// ```swift
    /// let io: DBWrite<Person> = DBWrite.insert(Person(id: "u1", name: "Ana", age: 30))
    /// ```
    public static func insert(_ object: T) -> DBIO where T: Model {
        primitive { try $0.transaction().insert(object) }
    }

    /// Inserts every object, in order, and yields them as stored.
    ///
    /// ```swift
    /// let io: DBWrite<[Person]> = DBWrite.insert(contentsOf: [ana, ben])
    /// ```
    public static func insert<M: Model, S: Sequence & Sendable>(contentsOf objects: S) -> DBIO where T == [M], S.Element == M {
        primitive { try $0.transaction().insert(contentsOf: objects) }
    }

    /// Inserts `object`, or replaces the stored object with the same key; yields it.
    ///
    /// ```swift
    /// let io: DBWrite<Person> = DBWrite.upsert(Person(id: "u1", name: "Ana", age: 31))
    /// ```
    public static func upsert(_ object: T) -> DBIO where T: Model {
        primitive { try $0.transaction().upsert(object) }
    }

    /// Changes the stored object with primary key `key` through `body`, and yields the result.
    /// Fails with `StrataError.notFound` when there is none.
    ///
    /// ```swift
    /// let io: DBWrite<Person> = DBWrite.update(Person.self, key: "u1") { $0.age += 1 }
    /// ```
    public static func update(
        _ type: T.Type, key: T.ID,
        _ body: @escaping @Sendable (inout T) throws -> Void
    ) -> DBIO where T: Model {
        primitive { try $0.transaction().update(type, key: key, body) }
    }

    /// Deletes the object with primary key `key`; yields false when there was none.
    ///
    /// ```swift
    /// let io: DBWrite<Bool> = DBWrite.delete(Person.self, key: "u2")
    /// ```
    public static func delete<M: Model>(_ type: M.Type, key: M.ID) -> DBIO where T == Bool {
        primitive { try $0.transaction().delete(type, key: key) }
    }

    /// Deletes every object matching `predicate`; yields how many.
    ///
    /// ```swift
    /// let io: DBWrite<Int> = DBWrite.delete(Person.self, where: #Predicate { $0.age < 0 })
    /// ```
    public static func delete<M: Model>(_ type: M.Type, where predicate: Predicate<M>) -> DBIO where T == Int {
        primitive { try $0.transaction().delete(type, where: predicate) }
    }

    /// Deletes every object of the model; yields how many there were.
    ///
    /// ```swift
    /// let io: DBWrite<Int> = DBWrite.deleteAll(Person.self)
    /// ```
    public static func deleteAll<M: Model>(_ type: M.Type) -> DBIO where T == Int {
        primitive { try $0.transaction().deleteAll(type) }
    }
}
