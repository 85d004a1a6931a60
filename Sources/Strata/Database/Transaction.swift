import Foundation

/// The write transaction of a `Database.write` closure. It reads its own writes; every write keeps
/// every index up to date; a throw rolls back the whole transaction.
///
/// ```swift
/// try db.write { tx in
///     try tx.insert(Person(id: "u1", name: "Ana", age: 30))
///     try tx.update(Person.self, key: "u1") { $0.age += 1 }
///     try tx.delete(Person.self, key: "u2")
/// }
/// ```
public final class Transaction {
    let db: ModelRegistry
    let txn: StrataStorage.WriteTransaction

    /// False inside a migration: old records may not decode as the new types, so writes replace
    /// records blindly and the indexes are rebuilt once the migration is done.
    let maintainsIndexes: Bool

    init(registry: ModelRegistry, txn: StrataStorage.WriteTransaction, maintainsIndexes: Bool = true) {
        self.db = registry
        self.txn = txn
        self.maintainsIndexes = maintainsIndexes
    }

    // Trees already opened in this transaction, so that a bulk insert does not look each up
    // again; and those of the model written last (its records, then its indexes in order), found
    // without hashing their names. `@exclusivity(unchecked)`: a Transaction is not Sendable and is
    // used only on the thread running its `write`, never through overlapping accesses.
    @exclusivity(unchecked) private var openTrees: [String: WriteTree] = [:]
    @exclusivity(unchecked) private var recentModel: ObjectIdentifier?
    @exclusivity(unchecked) private var recentTrees: [WriteTree?] = []

    /// The error of a write that failed after it had begun changing the transaction (a record
    /// stored without its index entries, part of a `delete(where:)`): the transaction then refuses
    /// further writes and its commit, so that a caught error can never commit a half-done write.
    /// A savepoint that rolls the failure back clears it. Writes that fail before changing
    /// anything (a duplicate key, a unique violation, a value too long for its index) leave the
    /// transaction usable.
    @exclusivity(unchecked) private(set) var failedMidway: (any Error)?

    /// Runs one write operation (see `failedMidway`); also a migration's conversion of a model.
    func writing<R>(_ body: () throws -> R) throws -> R {
        if let failedMidway { throw Self.halfDone(failedMidway) }
        // (Not `changeCount`: a query inside the write applies the transaction's deferred index
        // writes, earlier writes' bookkeeping, and that is no change of this one's.)
        let stamp = txn.writeCount
        do {
            return try body()
        } catch {
            if failedMidway == nil && txn.writeCount != stamp { failedMidway = error }
            throw error
        }
    }

    /// What a write, a savepoint's end or the commit throws after a write failed halfway.
    static func halfDone(_ error: any Error) -> StrataError {
        .invalidInput(
            "an earlier write in this transaction failed after it had begun changing the database (\(error)); "
                + "the transaction cannot go on or commit, and nothing of it is committed")
    }

    /// Forgets every opened tree: after a savepoint rolled back (a tree opened inside may be gone),
    /// or when trees are dropped and made again.
    func forgetTrees() {
        openTrees.removeAll()
        recentModel = nil
        recentTrees.removeAll()
    }

    private func tree(named name: String) throws -> WriteTree {
        if let tree = openTrees[name] { return tree }
        let tree = try wrapStorage { try txn.createTree(name) }
        openTrees[name] = tree
        return tree
    }

    /// Tree `slot` of a model: 0 its records, 1 + i its index i.
    private func modelTree<M: Model>(_ info: ModelInfo<M>, _ slot: Int) throws -> WriteTree {
        let id = ObjectIdentifier(info)
        if recentModel != id {
            recentModel = id
            recentTrees = Array(repeating: nil, count: 1 + info.indexCount)
        }
        if let tree = recentTrees[slot] { return tree }
        let name = slot == 0 ? info.recordTree : info.indexTreeNames[slot - 1]
        if slot > 0, openTrees[name] == nil { try requireIndexTree(info, name) }
        let tree = try tree(named: name)
        recentTrees[slot] = tree
        return tree
    }

    /// Every declared index has its tree from the open that declared it. One missing while the
    /// model has objects is damage: made anew it would lack their entries (and a unique index
    /// would let duplicates in).
    private func requireIndexTree<M: Model>(_ info: ModelInfo<M>, _ name: String) throws {
        if try wrapStorage({ try txn.tree(name) }) != nil { return }
        if try wrapStorage({ try txn.tree(info.recordTree)?.count ?? 0 }) > 0 {
            throw StrataError.corruptRecord(
                "\(info.name): the tree of index \(name) is missing while the model has objects (`strata check` lists such damage)")
        }
    }

    private func records<M: Model>(_ info: ModelInfo<M>) throws -> WriteTree {
        try modelTree(info, 0)
    }

    private func indexTree<M: Model>(_ info: ModelInfo<M>, _ i: Int) throws -> WriteTree {
        try modelTree(info, 1 + i)
    }

    /// Runs `body` as a unit inside this transaction: if it throws, everything it wrote is undone
    /// and the error rethrown, while the transaction goes on. Savepoints nest.
    ///
    /// ```swift
    /// try db.write { tx in
    ///     for message in batch {
    ///         do { try tx.savepoint { try tx.insert(message) } }
    ///         catch { skipped.append(message) }      // the others are still written
    ///     }
    /// }
    /// ```
    @discardableResult
    public func savepoint<R>(_ body: () throws -> R) throws -> R {
        let before = failedMidway
        do {
            return try txn.savepoint {
                let result = try body()
                // A write inside failed halfway and `body` caught it: undo the savepoint instead.
                if before == nil, let failedMidway { throw Self.halfDone(failedMidway) }
                // Stopped meanwhile: what `body` wrote may be partial (see `Database.write`).
                if OperationControl.shouldStop { throw CancellationError() }
                return result
            }
        } catch {
            forgetTrees()
            failedMidway = before  // the rollback undid the half-done write
            throw strataError(error)
        }
    }

    // MARK: Reading

    /// The object with primary key `key`, including this transaction's own writes.
    ///
    /// ```swift
    /// try db.write { tx in
    ///     try tx.insert(Person(id: "u1", name: "Ana", age: 30))
    ///     let ana = try tx.object(Person.self, key: "u1")   // sees the insert above
    /// }
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
        try db.info(M.self).readObject(key: key, in: try wrapStorage { try WriteTrees(txn: txn) }, found)
    }

    /// The objects matching `predicate` (all when nil), sorted, as this transaction sees them.
    ///
    /// ```swift
    /// try db.write { tx in
    ///     for person in try tx.objects(Person.self, where: #Predicate { $0.age < 0 }) {
    ///         try tx.update(Person.self, key: person.id) { $0.age = 0 }
    ///     }
    /// }
    /// ```
    public func objects<M: Model>(_ type: M.Type, where predicate: Predicate<M>? = nil, sortedBy sort: [SortDescriptor<M>] = []) throws -> [M] {
        var query = Query<M>()
        if let predicate { query.filters.append(.predicate(PredicateFilter(predicate))) }
        query.sort = sort
        return try wrapStorage {
            try QueryEngine.matches(query, info: try queryInfo(db.info(M.self)), source: try WriteTrees(txn: txn), needKeys: false).objects
        }
    }

    /// The number of objects matching `predicate` (all when nil), as this transaction sees them.
    ///
    /// ```swift
    /// let adults = try db.write { tx in try tx.count(Person.self, where: #Predicate { $0.age >= 18 }) }
    /// ```
    public func count<M: Model>(_ type: M.Type, where predicate: Predicate<M>? = nil) throws -> Int {
        var query = Query<M>()
        if let predicate { query.filters.append(.predicate(PredicateFilter(predicate))) }
        return try wrapStorage { try QueryEngine.count(query, info: try queryInfo(db.info(M.self)), source: try WriteTrees(txn: txn)) }
    }

    /// The model's info for planning a query: without its indexes where this transaction does
    /// not keep them (a migration's), so that a query reads the records it rewrote, not stale
    /// index entries.
    private func queryInfo<M: Model>(_ info: ModelInfo<M>) -> ModelInfo<M> {
        maintainsIndexes ? info : info.withoutIndexes()
    }

    // MARK: Writing

    /// Inserts `object`. Throws `duplicateKey` if its key exists, `uniqueViolation` if a unique index
    /// already has its value. A model whose `id` is an optional integer and nil gets the next key.
    /// Returns the stored object (with its assigned key).
    ///
    /// ```swift
    /// let stored = try db.write { tx in try tx.insert(Message(id: nil, text: "hi")) }
    /// print(stored.id!)   // the assigned key
    /// ```
    @discardableResult
    public func insert<M: Model>(_ object: M) throws -> M {
        try writing { try insertObject(object) }
    }

    private func insertObject<M: Model>(_ object: M) throws -> M {
        let info = try db.info(M.self)
        let records = try records(info)
        var object = object
        var record = try info.encode(object)
        if info.autoIncrement, let optional = object.id as? any OptionalValue, optional.wrappedAny == nil {
            let next = try nextAutoIncrement(info, records: records)
            guard let field = info.stored.object.field(named: info.keyPath) else {
                throw StrataError.unsupportedType(model: info.name, field: "id", reason: "auto-increment needs the id stored as a field")
            }
            // An unsigned id (UInt?, UInt64?, UInt32?) takes the key as an unsigned value: the
            // record encoder stores an Int64 only in a signed field ("1 does not fit UInt64").
            let value: Any
            switch (next, field.type.unwrapped) {
            case (.signed(let i), .int(bits: _, signed: false)): value = i >= 0 ? UInt64(i) : i
            case (.signed(let i), _): value = i
            case (.unsigned(let u), .int(bits: _, signed: true)): value = Int64(exactly: u) ?? u
            case (.unsigned(let u), _): value = u
            }
            record = try RecordPatch.setting(field, to: value, in: record, model: info.name)
            object = try record.withUnsafeBytes { try info.decode($0) }
        }
        let key = try info.keyBytes(object.id)
        try checkKeySize(info, key)
        // Without unique indexes, the record tree's own insert finds a duplicate key, in the same
        // descent that stores the record (before any index entry is written); with them, the key
        // is checked first, so that a duplicate key is reported before a unique violation.
        let checkedFirst = maintainsIndexes && info.hasUniqueIndexes
        if checkedFirst, try wrapStorage({ try records.view(key) }) != nil {
            throw StrataError.duplicateKey(model: info.name, key: describeValue(object.id))
        }
        if !maintainsIndexes {
            if try !wrapStorage({ try records.insert(key, record) }) {
                throw StrataError.duplicateKey(model: info.name, key: describeValue(object.id))
            }
            return object
        }
        let newEntries = try record.withUnsafeBytes { try indexEntries(info, $0, key: key) }
        try checkKeySizes(info, newEntries, key: key)
        try checkUnique(info, newEntries, key: key, object: object)
        if checkedFirst {
            try wrapStorage { _ = try records.put(key, record) }
        } else if try !wrapStorage({ try records.insert(key, record) }) {
            throw StrataError.duplicateKey(model: info.name, key: describeValue(object.id))
        }
        try wrapStorage { try applyIndexChanges(info, old: [], new: newEntries) }
        return object
    }

    /// Inserts every object, in order; returns them as stored. One write: if an object fails after
    /// others were inserted, the transaction cannot commit (see `savepoint(_:)` to undo just this).
    ///
    /// ```swift
    /// try db.write { tx in try tx.insert(contentsOf: people) }
    /// ```
    @discardableResult
    public func insert<M: Model, S: Sequence>(contentsOf objects: S) throws -> [M] where S.Element == M {
        try writing { try objects.map { try insertObject($0) } }
    }

    /// Inserts `object`, or replaces the stored object with the same key.
    ///
    /// ```swift
    /// try db.write { tx in try tx.upsert(Person(id: "u1", name: "Ana", age: 31)) }   // inserted or replaced
    /// ```
    @discardableResult
    public func upsert<M: Model>(_ object: M) throws -> M {
        try store(object).object
    }

    /// `upsert`, also saying whether anything was written (not when the stored bytes are identical).
    func store<M: Model>(_ object: M) throws -> (object: M, wrote: Bool) {
        try writing { try storeObject(object) }
    }

    private func storeObject<M: Model>(_ object: M) throws -> (object: M, wrote: Bool) {
        let info = try db.info(M.self)
        if info.autoIncrement, let optional = object.id as? any OptionalValue, optional.wrappedAny == nil {
            return (try insertObject(object), true)
        }
        let key = try info.keyBytes(object.id)
        try checkKeySize(info, key)
        let records = try records(info)
        if !maintainsIndexes {
            let record = try info.encode(object)
            _ = try wrapStorage { try records.put(key, record) }
            return (object, true)
        }
        guard let oldRecord = try wrapStorage({ try records.view(key) }) else { return (try insertObject(object), true) }
        let record = try info.encode(object)
        // Writing the same object would change nothing but still reach observers as a commit.
        if storesSame(info, record, oldRecord) { return (object, false) }
        try replace(info, records: records, key: key, oldRecord: oldRecord, new: object, record: record)
        return (object, true)
    }

    /// Changes the stored object with primary key `key` through `body`. Throws `notFound` when there
    /// is none. Returns the updated object.
    ///
    /// ```swift
    /// let updated = try db.write { tx in try tx.update(Person.self, key: "u1") { $0.age += 1 } }
    /// ```
    @discardableResult
    public func update<M: Model>(_ type: M.Type, key: M.ID, _ body: (inout M) throws -> Void) throws -> M {
        // The closure runs before the write begins: writes it makes are whole writes of their
        // own (each judged by itself, `writing`), and a failure after it — the closure's own
        // error, a changed id, a unique violation — changed nothing of this update, so the
        // transaction stays usable, as for any write that fails before it changes anything.
        if let failedMidway { throw Self.halfDone(failedMidway) }
        let info = try db.info(M.self)
        let keyBytes = try info.keyBytes(key)
        let records = try records(info)
        guard let oldRecord = try wrapStorage({ try records.view(keyBytes) }) else {
            throw StrataError.notFound(model: info.name, key: describeValue(key))
        }
        let old = try info.decode(oldRecord, storedUnder: key)
        let stamp = txn.changeCount
        var new = old
        try body(&new)
        return try writing {
            if try info.keyBytes(new.id) != keyBytes {
                throw StrataError.typeMismatch(model: info.name, field: "id", reason: "update must not change the primary key; delete and insert instead")
            }
            let record = try info.encode(new)
            // If `body` wrote in this transaction, the old record's view may be stale: read it
            // again (it may even be gone: the closure deleted the object).
            let current: UnsafeRawBufferPointer? = txn.changeCount == stamp ? oldRecord : try wrapStorage { try records.view(keyBytes) }
            if let current, storesSame(info, record, current) { return new }
            try replace(info, records: records, key: keyBytes, oldRecord: current, new: new, record: record)
            return new
        }
    }

    /// Whether `record` (the type's encoding of an object) stores what `stored` does: the same
    /// bytes, or, where stored records may hold a removed field's bytes that an encoding leaves
    /// out, or lack a field the type reads a default for, the same object as the type encodes it.
    /// Such a write is skipped, and the old bytes stay for a migration to read. (In a migration an
    /// old record may not read as the new type yet: then it differs.)
    private func storesSame<M: Model>(_ info: ModelInfo<M>, _ record: [UInt8], _ stored: UnsafeRawBufferPointer) -> Bool {
        if record.elementsEqual(stored) { return true }
        // (A record lacking a defaulted field holds fewer fields than the object's encoding; with
        // as many, different bytes are a different object, and nothing needs decoding.)
        guard info.hasRemovedFields || (info.hasDefaultedFields && Self.fieldCount(stored) < record.withUnsafeBytes(Self.fieldCount)),
            let canonical = try? info.encode(try info.decode(stored))
        else { return false }
        return canonical == record
    }

    /// The number of fields a record's table states (its first varint); 0 when unreadable.
    private static func fieldCount(_ record: UnsafeRawBufferPointer) -> UInt64 {
        var reader = ByteReader(record)
        return (try? reader.varint()) ?? 0
    }

    /// Stores `record` over the old one and moves the index entries. `oldRecord` (the stored
    /// bytes, read before anything is written; nil when there are none) gives the old entries:
    /// nothing is decoded.
    private func replace<M: Model>(
        _ info: ModelInfo<M>, records: WriteTree, key: [UInt8], oldRecord: UnsafeRawBufferPointer?, new: M, record: [UInt8]
    ) throws {
        let oldEntries = try oldRecord.map { try indexEntries(info, $0, key: key) } ?? []
        let newEntries = try record.withUnsafeBytes { try indexEntries(info, $0, key: key) }
        try checkKeySizes(info, newEntries, key: key)
        try checkUnique(info, newEntries, key: key, object: new)
        try wrapStorage {
            try records.put(key, record)
            try applyIndexChanges(info, old: oldEntries, new: newEntries)
        }
    }

    /// Deletes the object with primary key `key`. Returns false when there was none.
    ///
    /// ```swift
    /// let existed = try db.write { tx in try tx.delete(Person.self, key: "u2") }
    /// ```
    @discardableResult
    public func delete<M: Model>(_ type: M.Type, key: M.ID) throws -> Bool {
        try writing {
            let info = try db.info(M.self)
            return try delete(info, keyBytes: try info.keyBytes(key))
        }
    }

    /// Deletes the object stored under `keyBytes` and its index entries (read from the stored
    /// record: nothing is decoded).
    private func delete<M: Model>(_ info: ModelInfo<M>, keyBytes: [UInt8]) throws -> Bool {
        guard let records = try wrapStorage({ try txn.tree(info.recordTree) }) else { return false }
        if !maintainsIndexes || info.indexes.isEmpty { return try wrapStorage { try records.delete(keyBytes) } }
        // The entries come from the record in the descent that removes it (nothing is written if
        // they do not read), then go from the indexes.
        var oldEntries: [(pairs: [IndexPair], words: Int)] = []
        let deleted = try wrapStorage {
            try keyBytes.withUnsafeBytes { key in
                try records.delete(key) { record in oldEntries = try indexEntries(info, record, key: keyBytes) }
            }
        }
        if !deleted { return false }
        try wrapStorage { try applyIndexChanges(info, old: oldEntries, new: []) }
        return true
    }

    /// Deletes every object matching `predicate`. Returns how many.
    ///
    /// ```swift
    /// let removed = try db.write { tx in try tx.delete(Person.self, where: #Predicate { $0.age < 0 }) }
    /// ```
    @discardableResult
    public func delete<M: Model>(_ type: M.Type, where predicate: Predicate<M>) throws -> Int {
        try writing { try deleteMatches(type, where: predicate) }
    }

    private func deleteMatches<M: Model>(_ type: M.Type, where predicate: Predicate<M>) throws -> Int {
        let info = try db.info(M.self)
        var query = Query<M>()
        query.filters = [.predicate(PredicateFilter(predicate))]
        let found = try wrapStorage { try QueryEngine.matches(query, info: queryInfo(info), source: try WriteTrees(txn: txn), needKeys: true) }
        for key in found.keys { _ = try delete(info, keyBytes: key) }
        return found.objects.count
    }

    /// Deletes every object of the model, freeing its pages. Returns how many there were.
    ///
    /// ```swift
    /// let removed = try db.write { tx in try tx.deleteAll(Person.self) }
    /// ```
    @discardableResult
    public func deleteAll<M: Model>(_ type: M.Type) throws -> Int {
        let info = try db.info(M.self)
        forgetTrees()  // the trees are replaced below
        return try writing {
            try wrapStorage {
                let count = try txn.tree(info.recordTree)?.count ?? 0
                try txn.dropTree(info.recordTree)
                _ = try txn.createTree(info.recordTree)
                for index in info.indexes {
                    let name = index.schema.treeName(model: info.name)
                    try txn.dropTree(name)
                    _ = try txn.createTree(name)
                }
                return count
            }
        }
    }

    // MARK: Indexes

    /// The entries of every index for a record (in `info.indexes` order), from its bytes alone:
    /// exactly what `strata check` expects of them.
    private func indexEntries<M: Model>(_ info: ModelInfo<M>, _ record: UnsafeRawBufferPointer, key: [UInt8]) throws -> [(pairs: [IndexPair], words: Int)] {
        var entries: [(pairs: [IndexPair], words: Int)] = []
        entries.reserveCapacity(info.indexCount)
        for plan in info.indexPlans {
            entries.append(try IndexEntries.entries(record, schema: info.stored.object, plan: plan, primaryKey: key))
        }
        return entries
    }

    /// Throws before anything is written when the primary key's encoding is longer than a key
    /// of this file can be, naming the model.
    private func checkKeySize<M: Model>(_ info: ModelInfo<M>, _ key: [UInt8]) throws {
        let limit = txn.maxKeySize
        guard key.count > limit else { return }
        throw StrataError.invalidInput(
            "\(info.name): the primary key encodes to \(key.count) bytes, and a key of this file holds at most \(limit) "
                + "(FORMAT.md §7); use a shorter key")
    }

    /// Throws before anything is written when an index entry's key would be longer than a key of
    /// this file can be (a long string or data value in an indexed field, or a long primary key
    /// after it; full-text words are cut short instead), naming the index and the part that is
    /// too long: the write then changes nothing.
    private func checkKeySizes<M: Model>(_ info: ModelInfo<M>, _ entries: [(pairs: [IndexPair], words: Int)], key: [UInt8]) throws {
        let limit = txn.maxKeySize
        for i in entries.indices {
            for pair in entries[i].pairs where pair.key.count > limit {
                let index = info.indexSchemas[i]
                let name = "\(info.name).\(index.paths.joined(separator: ", "))"
                if index.isFullText {
                    // A word is cut to fit, so the primary key after it is what is too long.
                    let word = pair.key.count - key.count
                    throw StrataError.invalidInput(
                        "\(name): the primary key (\(key.count) bytes encoded) makes an entry of the full-text index "
                            + "\(index.treeName(model: info.name)) \(pair.key.count) bytes long after a word encoded in \(word) bytes, and an index key "
                            + "holds at most \(limit) bytes (FORMAT.md §7, §8.5); with a full-text index a primary key encodes to at most "
                            + "\(limit - WordTokenizer.maxWordKeyBytes) bytes: use a shorter key")
                }
                // A unique index's key is the value alone; another's is the value, then the primary key.
                let keyPart = index.unique ? 0 : key.count
                throw StrataError.invalidInput(
                    "\(name): the value makes an entry of the index \(index.treeName(model: info.name)) "
                        + "\(pair.key.count) bytes long, and an index key holds at most \(limit) bytes (the value's key encoding, "
                        + "\(pair.key.count - keyPart) bytes, then the primary key, \(keyPart) bytes; FORMAT.md §7); store a shorter value, "
                        + "or leave the field out of the index")
            }
        }
    }

    /// Throws before anything is written, so a violation leaves the transaction usable.
    private func checkUnique<M: Model>(_ info: ModelInfo<M>, _ entries: [(pairs: [IndexPair], words: Int)], key: [UInt8], object: M) throws {
        for i in info.uniqueIndexPositions {
            let tree = try indexTree(info, i)
            for pair in entries[i].pairs {
                if let owner = try wrapStorage({ try pair.withKey { try tree.get($0) } }), !owner.elementsEqual(key) {
                    let paths = info.indexKeyPaths[i]
                    var value = paths.map { describeValue(object[keyPath: $0]) }.joined(separator: ", ")
                    if let collation = info.indexSchemas[i].collation {
                        // The other object's value may be spelled differently ("room7" for
                        // "Room007"): name it, or at least say the two are only equal in the collation.
                        let ownerKey = Array(owner)
                        let stored = try? wrapStorage { try records(info).view(ownerKey) }.map { record in
                            let other = try info.decode(record)
                            return paths.map { describeValue(other[keyPath: $0]) }.joined(separator: ", ")
                        }
                        if stored != value { value = "\(stored ?? "a value") (equal under collation \(collation) to \(value))" }
                    }
                    throw StrataError.uniqueViolation(model: info.name, field: info.indexSchemas[i].paths.joined(separator: ", "), value: value)
                }
            }
        }
    }

    /// Moves every index's entries from `old` to `new` (each as `indexEntries` gives them; empty
    /// for none), and a full-text index's statistics.
    private func applyIndexChanges<M: Model>(_ info: ModelInfo<M>, old: [(pairs: [IndexPair], words: Int)], new: [(pairs: [IndexPair], words: Int)]) throws {
        for i in 0..<info.indexCount {
            let before: (pairs: [IndexPair], words: Int) = i < old.count ? old[i] : ([], 0)
            let after: (pairs: [IndexPair], words: Int) = i < new.count ? new[i] : ([], 0)
            if before.pairs == after.pairs { continue }
            let tree = try indexTree(info, i)
            // A plain index's entries go in later, in key order (StrataStorage's deferred writes:
            // one descent per leaf rather than per entry); a unique index's now, since the next
            // write's check reads them.
            let later = !info.indexSchemas[i].unique
            // A full-text index's postings go into its blocks as they are applied (PostingMerge).
            let merge = info.indexSchemas[i].isFullText ? PostingMerge.shared : nil
            func remove(_ pair: IndexPair) throws {
                if let merge { return try pair.withKey { try tree.deleteLater($0, mergedBy: merge) } }
                if later { return try pair.withKey { try tree.deleteLater($0) } }
                // A unique entry names one object: it goes only if it names this one. Otherwise
                // the stored record disagrees with the index (a damaged file), and deleting the
                // entry would take another object's with it and let a duplicate in.
                try pair.withKeyAndValue { key, value in
                    guard let stored = try tree.get(key) else { return }
                    if !stored.elementsEqual(value) {
                        throw StrataError.corruptRecord(
                            "\(info.name): the unique index on \(info.indexSchemas[i].paths.joined(separator: ", ")) gives this object's stored value to another object; the record does not match the index (`strata check` lists such damage)"
                        )
                    }
                    _ = try tree.delete(key)
                }
            }
            func add(_ pair: IndexPair) throws {
                try pair.withKeyAndValue { key, value in
                    if let merge {
                        try tree.putLater(key, value, mergedBy: merge)
                    } else if later {
                        try tree.putLater(key, value)
                    } else {
                        _ = try tree.put(key, value)
                    }
                }
            }
            if before.pairs.isEmpty || after.pairs.isEmpty {
                // An insert or a delete: nothing to keep (and no sets to build, on every write).
                for pair in before.pairs { try remove(pair) }
                for pair in after.pairs { try add(pair) }
            } else {
                let freshKeys = Set(after.pairs.map(\.key))
                let kept = Set(before.pairs)
                for pair in before.pairs where !freshKeys.contains(pair.key) { try remove(pair) }
                for pair in after.pairs where !kept.contains(pair) { try add(pair) }
            }
            if info.indexSchemas[i].isFullText && before.words != after.words {
                // The statistics key is never deferred (no posting has its key), so it is read and
                // written beside the deferred postings without applying them (and kept back with
                // them: one write per transaction, not per text).
                let stats = try TextPostingValue.statsKey.withUnsafeBytes { try tree.getBesideDeferred($0) }
                let (documents, words) = try stats.map { try $0.withUnsafeBytes { try TextPostingValue.readStats($0) } } ?? (0, 0)
                let documentDelta = (after.words > 0 ? 1 : 0) - (before.words > 0 ? 1 : 0)
                let value = TextPostingValue.stats(documents: documents + documentDelta, words: words + after.words - before.words)
                try TextPostingValue.statsKey.withUnsafeBytes { k in try value.withUnsafeBytes { v in try tree.putBesideDeferred(k, v) } }
            }
        }
    }

    /// The key an auto-increment insert gets, in the id type's kind of integer: an unsigned id's
    /// keys go on past Int64.max.
    private enum AutoKey {
        case signed(Int64)
        case unsigned(UInt64)
    }

    /// One more than the largest key stored (at least 1); throws once that key is the largest the
    /// id type holds.
    private func nextAutoIncrement<M: Model>(_ info: ModelInfo<M>, records: WriteTree) throws -> AutoKey {
        let cursor = try wrapStorage { try records.cursor() }
        let unsigned = M.ID.self == Optional<UInt64>.self || M.ID.self == Optional<UInt>.self || M.ID.self == Optional<UInt32>.self
        guard try wrapStorage({ try cursor.last() }) else { return unsigned ? .unsigned(1) : .signed(1) }
        // Keys of an optional integer id: 0x01, then 8 bytes (KeyEncoding). Any other largest key
        // is damage, and 1 would only collide with a stored object (`duplicateKey`).
        func damaged() -> StrataError {
            .corruptRecord("\(info.name): the largest key (\(cursor.key.count) bytes) does not read as a \(M.ID.self) key, so no next key can follow it")
        }
        guard cursor.key.count == 9, cursor.key[0] == 1 else { throw damaged() }
        var reader = KeyReader(bytes: UnsafeRawBufferPointer(rebasing: cursor.key[1...]))
        // Past the largest key the id type holds the next key would not fit the field, and the
        // insert must say the keys ran out, not that a stored value does not fit (Int32?).
        func exhausted(_ last: String) -> StrataError {
            .invalidQuery("auto-increment key space exhausted: the largest \(info.name) key is \(last), the largest \(M.ID.self) holds")
        }
        if unsigned {
            let largest = M.ID.self == Optional<UInt32>.self ? UInt64(UInt32.max) : UInt64.max
            guard let last = reader.uint() else { throw damaged() }
            guard last < largest else { throw exhausted("\(last)") }
            return .unsigned(last + 1)
        }
        let largest = M.ID.self == Optional<Int32>.self ? Int64(Int32.max) : Int64.max
        guard let last = reader.int() else { throw damaged() }
        guard last < largest else { throw exhausted("\(last)") }
        return .signed(Swift.max(last + 1, 1))
    }
}
