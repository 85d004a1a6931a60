import Foundation
import Synchronization

/// The objects of one model that match a query, bound to one snapshot: every access sees the same
/// commit, from any thread. Lazy: the query runs on first access. `Sendable`, so results and the
/// structs in them cross threads and actors freely.
///
/// ```swift
/// let adults = db.objects(Person.self)
///     .filter(#Predicate { $0.age >= 18 })
///     .sorted(by: SortDescriptor(\.name))
/// print(adults.count, adults.first?.name ?? "-")
/// ```
///
/// The collection API cannot throw: if the query fails (a corrupt record, a closed database) the
/// results are empty (or, when `count` was read before, that many placeholders, every field a zero
/// or empty value) and `error` says why. `fetch()` and `fetchCount()` throw instead.
public struct Results<M: Model>: RandomAccessCollection, Sendable {
    let snapshot: Snapshot?
    let query: Query<M>
    let state: ResultsState
    /// For results that failed before binding to a snapshot for a reason that passes (every reader
    /// slot in use, a read-only store overtaken too often): the database they are of, so that
    /// building on them keeps the query and observing them still starts an observation, which
    /// evaluates again at the next commit as the documentation promises. Nil otherwise (results
    /// bound to a snapshot, or failed for good: a closed database, an invalid query).
    let database: Database?

    init(snapshot: Snapshot, query: Query<M>) {
        self.snapshot = snapshot
        self.query = query
        self.state = ResultsState()
        self.database = nil
    }

    /// The commit these results see (nil when they failed before binding to a snapshot).
    ///
    /// ```swift
    /// let people = db.objects(Person.self)
    /// print(people.version == db.store.latestVersion)   // true until the next commit
    /// ```
    public var version: UInt64? { snapshot?.version }

    /// Results whose objects are already evaluated (by an observer).
    init(snapshot: Snapshot, query: Query<M>, objects: [M]) {
        self.snapshot = snapshot
        self.query = query
        self.state = ResultsState(objects: objects, info: try? snapshot.db.info(M.self))
        self.database = nil
    }

    /// Results that failed before binding to a snapshot; `database` when the failure may pass
    /// (see `database`).
    init(failed error: StrataError, database: Database? = nil, query: Query<M> = Query()) {
        self.snapshot = nil
        self.query = query
        self.state = ResultsState(failure: error, as: M.self)
        self.database = database
    }

    /// The database these results are of, bound or not: what an observation of them watches.
    var observedDatabase: Database? { snapshot?.db ?? database }

    /// These results with the query `query`: on the same snapshot, or failed as these are (keeping
    /// the query only for results that can still be observed).
    func rebuilt(_ query: Query<M>) -> Results<M> {
        if let snapshot { return Results(snapshot: snapshot, query: query) }
        guard let database, let failure = state.failure(M.self) else { return self }
        return Results(failed: failure, database: database, query: query)
    }

    private func with(_ change: (inout Query<M>) -> Void) -> Results<M> {
        var q = query
        change(&q)
        return rebuilt(q)
    }

    // MARK: Building

    /// Objects that also match `predicate`.
    ///
    /// ```swift
    /// let minAge = 18                                      // #Predicate captures values
    /// let adults = db.objects(Person.self).filter(#Predicate { $0.age >= minAge })
    /// let anas = adults.filter(#Predicate { $0.name == "Ana" })   // both must hold
    /// ```
    public func filter(_ predicate: Predicate<M>) -> Results<M> { with { $0.filters.append(.predicate(PredicateFilter(predicate))) } }

    /// Sorted by `descriptors`, the first deciding first; ties keep primary-key order. Replaces
    /// any earlier sort, and orders the results before any `offset` or `prefix`, whichever was
    /// called first.
    ///
    /// ```swift
    /// let byAge = db.objects(Person.self).sorted(by: [SortDescriptor(\.age, order: .reverse), SortDescriptor(\.name)])
    /// ```
    public func sorted(by descriptors: [SortDescriptor<M>]) -> Results<M> {
        with {
            $0.sort = descriptors
            $0.collation = nil  // sorted(by:collation:) sets it for its own descriptors only
        }
    }

    /// Sorted by one or more descriptors.
    ///
    /// ```swift
    /// let byName = db.objects(Person.self).sorted(by: SortDescriptor(\.name), SortDescriptor(\.age))
    /// ```
    public func sorted(by descriptor: SortDescriptor<M>, _ more: SortDescriptor<M>...) -> Results<M> {
        // (One descriptor, the common case, without `+`: generic over the model, it runs
        // unspecialized, at ~2,400 instructions.)
        sorted(by: more.count == 0 ? [descriptor] : [descriptor] + more)
    }

    /// At most the first `count` objects (none for a negative `count`; `Int.max` for no limit).
    /// The window applies after every filter, search, `distinct` and sort, whatever order they
    /// were called in: `prefix(10).filter(p)` is the first ten matches of `p`.
    ///
    /// ```swift
    /// let youngest = db.objects(Person.self).sorted(by: SortDescriptor(\.age)).prefix(10)
    /// ```
    public func prefix(_ count: Int) -> Results<M> {
        with { q in
            let n = Self.clamped(count)
            q.limit = q.limit.map { Swift.min($0, n) } ?? n
        }
    }

    /// Skips the first `count` objects (none for a negative `count`; any count, `Int.max`
    /// included, and any number of offsets). Like `prefix(_:)`, it applies after every filter,
    /// search, `distinct` and sort, whatever order they were called in.
    ///
    /// ```swift
    /// let secondPage = db.objects(Person.self).sorted(by: SortDescriptor(\.name)).offset(20).prefix(20)
    /// ```
    public func offset(_ count: Int) -> Results<M> {
        with { q in
            let n = Self.clamped(count)
            q.offset = Self.clamped(q.offset + n)
            q.limit = q.limit.map { Swift.max(0, $0 - n) }
        }
    }

    /// A count for a window, between 0 and a bound no file can reach (2^60 objects), so that an
    /// offset plus a limit never overflows however large the counts a caller gives.
    private static func clamped(_ count: Int) -> Int { Swift.min(Swift.max(0, count), 1 << 60) }

    /// Keeps the first object of each distinct combination of values at `keyPaths`, values being
    /// equal by `==`, except that a NaN `Double`, `Float` or `Date` field (or optional one) is
    /// one group with every NaN; an array or struct holding a NaN equals nothing, as its `==` says.
    /// A later call replaces an earlier one, as a later `sorted(by:)` does: give every key path to
    /// one call.
    ///
    /// ```swift
    /// let onePerAge = db.objects(Person.self).sorted(by: SortDescriptor(\.name)).distinct(by: \.age)
    /// ```
    public func distinct(by keyPaths: PartialKeyPath<M> & Sendable...) -> Results<M> { with { $0.distinct = keyPaths } }

    // MARK: Evaluating

    /// The evaluated results (computed once, on first use; see `ResultsOutcome`).
    var outcome: ResultsOutcome<M> {
        state.resolve(info: { try? snapshot?.db.info(M.self) }) {
            try trustedRead(snapshot?.txn) { try ResultsOutcome.evaluate(query, snapshot: snapshot) }
        }
    }

    /// Every object, decoded now, throwing what the query or a record hit.
    ///
    /// ```swift
    /// let people: [Person] = try db.objects(Person.self).filter(#Predicate { $0.age >= 18 }).fetch()
    /// ```
    public func fetch() throws -> [M] {
        let outcome = self.outcome
        if let error = outcome.error { throw error }
        return try trustedRead(snapshot?.txn) { try outcome.allObjects() }
    }

    /// The error that emptied these results, or that a lazily read element hit (that element then
    /// reads as a placeholder: every field a zero or empty value). Evaluates the query if it has
    /// not run yet.
    ///
    /// ```swift
    /// let people = db.objects(Person.self)
    /// if people.isEmpty, let error = people.error { print("query failed:", error) }
    /// ```
    public var error: StrataError? { outcome.error ?? state.lateError }

    /// The number of matching objects, throwing what the query hit. Decodes nothing unless the
    /// query can only be answered on decoded objects (a predicate that does not compile to record
    /// tests, a sort by strings, `distinct`).
    ///
    /// ```swift
    /// let adults = try db.objects(Person.self).filter(#Predicate { $0.age >= 18 }).fetchCount()
    /// ```
    public func fetchCount() throws -> Int {
        if let counted = countWithoutEvaluating() { return counted }
        let outcome = self.outcome
        if let error = outcome.error { throw error }
        return outcome.count
    }

    /// The number of matching objects (0 if the query failed; see `error`). Before the results
    /// are evaluated, a query an index or the primary key answers exactly is counted from the
    /// trees' subtree counts: a few page reads, however many objects match.
    ///
    /// ```swift
    /// let total = db.objects(Person.self).count   // read from the tree, no object decoded
    /// ```
    public var count: Int {
        // A stopped operation (a cancelled read, withProgress) sees no more elements: `map`,
        // `reduce` and index loops end instead of reading placeholders.
        if OperationControl.shouldStop { return 0 }
        return countWithoutEvaluating() ?? outcome.count
    }

    /// The count from the trees alone, when the results are not evaluated yet and the query needs
    /// no evaluation to be counted; nil otherwise (evaluation then counts, and reports errors).
    private func countWithoutEvaluating() -> Int? {
        guard !state.isEvaluated, !state.isEvaluatingOnThisThread, let snapshot, let info = try? snapshot.db.info(M.self) else { return nil }
        let counted = try? snapshot.checked { try wrapStorage { try QueryEngine.countFromTrees(query, info: info, source: SnapshotTrees(txn: snapshot.txn)) } }
        // Evaluated meanwhile: not counted here (its outcome says, and `fetchCount` throws its error).
        if let counted, !state.noteCount(counted) { return nil }
        return counted
    }

    /// The primary keys of the matching objects, in order; decodes no object where the results
    /// are held as keys.
    ///
    /// ```swift
    /// let ids: [String] = db.objects(Person.self).sorted(by: SortDescriptor(\.name)).keys
    /// ```
    public var keys: [M.ID] { outcome.ids(state) }

    /// Always 0: positions are offsets into the results.
    ///
    /// ```swift
    /// let people = db.objects(Person.self)
    /// if !people.isEmpty { print(people[people.startIndex].name) }
    /// ```
    public var startIndex: Int { 0 }
    /// The position after the last object. Unlike `count`, it does not drop to 0 when the
    /// operation is stopped: an index loop the standard library runs (`firstIndex(where:)`,
    /// `last`, `map` started before the stop) steps to it over placeholders instead of stepping
    /// past it and trapping ("Index out of bounds").
    ///
    /// ```swift
    /// let people = db.objects(Person.self)
    /// for i in people.startIndex..<people.endIndex { print(people[i].name) }
    /// ```
    public var endIndex: Int { countWithoutEvaluating() ?? outcome.count }

    /// The next position (not range-checked against `endIndex`, which a stop may move).
    ///
    /// ```swift
    /// let second = people.index(after: people.startIndex)
    /// ```
    public func index(after i: Int) -> Int { i + 1 }

    /// The previous position (not range-checked, as `index(after:)`).
    ///
    /// ```swift
    /// let lastPosition = people.index(before: people.endIndex)
    /// ```
    public func index(before i: Int) -> Int { i - 1 }

    /// Object `position`, decoded when read (unless the query decoded it already). As for any
    /// collection, a position outside `0..<count` is a programming error and traps; `objects(in:)`
    /// clamps its range instead, and `first` is nil when there is none.
    ///
    /// ```swift
    /// let people = db.objects(Person.self).sorted(by: SortDescriptor(\.name))
    /// let row = people[41]   // decodes only this object
    /// ```
    public subscript(position: Int) -> M { outcome.object(at: position, state) }

    /// Objects `range` at once: for a list that shows a page of rows.
    ///
    /// ```swift
    /// let page = results.objects(in: 500..<550)
    /// ```
    public func objects(in range: Range<Int>) -> [M] {
        let outcome = self.outcome
        let clamped = range.clamped(to: 0..<outcome.count)
        guard let walk = outcome.walk() else { return clamped.map { outcome.object(at: $0, state) } }
        return clamped.map { walk.element($0, state) }
    }

    /// Streams the objects: each is decoded when reached, so iterating a million objects holds one
    /// at a time (unless the query decoded them to evaluate).
    ///
    /// ```swift
    /// for person in db.objects(Person.self) { print(person.name) }
    /// ```
    public func makeIterator() -> Iterator { Iterator(outcome: outcome, state: state) }

    // Under `withProgress` (an async read included) the iterator ends early once the operation is
    // stopped, so it may yield fewer than `count` elements; `withProgress` then throws away what
    // the body made. The standard library's default copies trust a collection's count and trap
    // when the iterator falls short (`Array(results)`: "invalid Collection: less than 'count'
    // elements"; `append(contentsOf:)`: "underestimatedCount was an overestimate"). These two
    // let such a copy end short instead.

    /// `count`, except 0 while an operation that can stop iterating early is running on this
    /// thread (then the elements iterated may be fewer).
    ///
    /// ```swift
    /// var all: [Person] = []
    /// all.reserveCapacity(db.objects(Person.self).underestimatedCount)
    /// ```
    public var underestimatedCount: Int { OperationControl.current == nil ? count : 0 }

    /// The elements in order, as iterating gives them (fewer than `count` when stopped midway):
    /// what `Array(results)` calls.
    ///
    /// ```swift
    /// let people = Array(db.objects(Person.self))   // ends short, not a trap, if stopped midway
    /// ```
    public func _copyToContiguousArray() -> ContiguousArray<M> {
        var out = ContiguousArray<M>()
        // A count read from the trees is bounded by the file's size, not by what its records hold
        // (see `fetch`): reserve a slice of it and let the array grow past that.
        out.reserveCapacity(Swift.min(count, 1 << 16))
        var iterator = makeIterator()
        while let object = iterator.next() { out.append(object) }
        return out
    }

    /// Iterates `Results`, decoding each object when it is reached.
    ///
    /// ```swift
    /// var iterator = db.objects(Person.self).makeIterator()
    /// while let person = iterator.next() { print(person.name) }
    /// ```
    public struct Iterator: IteratorProtocol {
        let outcome: ResultsOutcome<M>
        let state: ResultsState
        var position = 0
        /// Made at the first element (`ResultsOutcome.walk`); nil while none was read, or when
        /// the objects are held.
        var walk: ResultsWalk<M>?

        /// The next object, decoded now; nil after the last one, or once the operation is stopped
        /// (a cancelled read, `withProgress`).
        ///
        /// ```swift
        /// var iterator = db.objects(Person.self).makeIterator()
        /// let first = iterator.next()   // nil when there is none
        /// ```
        public mutating func next() -> M? {
            // A cancelled read (or a stopped withProgress) ends the iteration (Progress.swift).
            guard position < outcome.count, !OperationControl.shouldStop else { return nil }
            defer { position += 1 }
            if position == 0 { walk = outcome.walk() }
            let object: M
            if let walk { object = walk.element(position, state) } else { object = outcome.object(at: position, state) }
            // Stopped while reading this one: it is the placeholder, not an element to hand out.
            return OperationControl.shouldStop ? nil : object
        }
    }

    /// How the query runs: the index or key ranges used, the residual filter, the sort method.
    ///
    /// ```swift
    /// print(db.objects(User.self).filter(#Predicate { $0.age == 30 }).explain())
    /// // index i:User:age for age == 30: 1 range(s) ...
    /// ```
    public func explain() -> String {
        guard let snapshot else { return "failed: \(state.failure(M.self).map { "\($0)" } ?? "unknown")" }
        do {
            return try snapshot.checked { try QueryEngine.explain(query, info: try snapshot.db.info(M.self), source: SnapshotTrees(txn: snapshot.txn)) }
        } catch {
            return "failed: \(error)"
        }
    }

    /// The first matching object; decodes only that one where the results are held as keys.
    ///
    /// ```swift
    /// let oldest = db.objects(Person.self).sorted(by: SortDescriptor(\.age, order: .reverse)).first
    /// ```
    public var first: M? { isEmpty ? nil : self[0] }
}

/// Elements taken in order (an iteration, a range) from an outcome's keys or scan: the keys, the
/// record tree, the model's info and one cursor, unwrapped once when the walk begins. A `scan`
/// steps its cursor instead of descending per element, and a key list finds each record with the
/// same cursor, which looks in the leaf of the record before first (`Cursor.find`: an index walk's
/// or a search's keys are mostly near each other). (Unwrapped from the outcome per element, in
/// code generic over the model and run unspecialized, each of them was retained and released for
/// every element.)
final class ResultsWalk<M: Model> {
    private let info: ModelInfo<M>
    private let keys: KeyList
    private let isScan: Bool
    private let offset: Int
    private let cursor: Cursor
    private let validating: ReadTransaction?
    /// A scan's cursor stands on the previous element.
    private var stepping = false

    init(info: ModelInfo<M>, records: ReadTree, keys: KeyList?, offset: Int, validating: ReadTransaction?) {
        self.info = info
        self.keys = keys ?? KeyList()
        self.isScan = keys == nil
        self.offset = offset
        self.cursor = records.cursor()
        self.validating = validating
    }

    /// Element `i` (inside the outcome's count); a record that cannot be read gives the
    /// placeholder and notes the error.
    func element(_ i: Int, _ state: ResultsState) -> M {
        do {
            return try trustedRead(validating) {
                if !isScan {
                    guard try keys.withKey(i, { try cursor.find($0) }) else {
                        throw StrataError.corruptRecord("a result of \(info.name) vanished from its own snapshot")
                    }
                } else if stepping {
                    guard try cursor.next() else { throw StrataError.corruptRecord("\(info.name) has fewer records than its count") }
                } else {
                    guard try cursor.seek(toPosition: offset + i) else { throw StrataError.corruptRecord("\(info.name) has fewer records than its count") }
                    stepping = true
                }
                return try info.decode(cursor.value)
            }
        } catch {
            state.note(error)
            return info.placeholder
        }
    }
}

/// A query's evaluated results, held as lightly as the query allows:
/// - `scan`: no filter, sort or distinct: the rows are the record tree's own entries from `offset`
///   (nothing is read until an element is; element `i` is one descent of the counted record tree,
///   iteration streams a cursor);
/// - `keys`: conditions that compile to record tests and sorts that compare encodings: the primary
///   keys in order, found without decoding (KeyList);
/// - `objects`: anything that needs decoded objects to evaluate (a predicate on decoded objects,
///   a sort by strings, distinct), and results an observer evaluated: the objects themselves.
final class ResultsOutcome<M: Model>: Sendable {
    enum Rows: Sendable {
        case scan(offset: Int, count: Int)
        case keys(KeyList)
        case objects([M])
    }

    let rows: Rows
    let error: StrataError?
    let info: ModelInfo<M>?
    let records: ReadTree?
    /// The snapshot read, when a writer in another process may overtake it (a read-only store):
    /// each lazily read element is then checked before it is handed out (`trustedRead`).
    let validating: ReadTransaction?
    /// The keys of a `scan`, walked once when all of them are needed (`ids`).
    private let scanKeys = AtomicLazyReference<KeyListBox>()

    init(rows: Rows, info: ModelInfo<M>?, records: ReadTree?, snapshot: Snapshot? = nil) {
        self.rows = rows
        self.error = nil
        self.info = info
        self.records = records
        self.validating = snapshot.flatMap { $0.txn.needsValidation ? $0.txn : nil }
    }

    /// A failed evaluation. Results that already reported `count` objects (counted from the
    /// trees before evaluating) keep that count, each element a placeholder: a loop over
    /// `0..<count` begun before the failure must not index past the end.
    init(error: StrataError, info: ModelInfo<M>? = nil, count: Int = 0) {
        self.rows = info != nil && count > 0 ? .scan(offset: 0, count: count) : .objects([])
        self.error = error
        self.info = info
        self.records = nil
        self.validating = nil
    }

    var count: Int {
        switch rows {
        case let .scan(_, count): return count
        case let .keys(list): return list.count
        case let .objects(objects): return objects.count
        }
    }

    static func evaluate(_ query: Query<M>, snapshot: Snapshot?) throws -> ResultsOutcome<M> {
        guard let snapshot else { return ResultsOutcome(rows: .objects([]), info: nil, records: nil) }
        let info = try snapshot.db.info(M.self)
        let source = SnapshotTrees(txn: snapshot.txn)
        let records = try wrapStorage { try source.tree(named: info.recordTree) }
        guard let records else { return ResultsOutcome(rows: .objects([]), info: info, records: nil) }
        if query.isPlainScan {
            let available = Swift.max(0, records.count - query.offset)
            return ResultsOutcome(
                rows: .scan(offset: query.offset, count: query.limit.map { Swift.min($0, available) } ?? available),
                info: info, records: records, snapshot: snapshot)
        }
        if let keys = try wrapStorage({ try QueryEngine.keys(query, info: info, source: source) }) {
            return ResultsOutcome(rows: .keys(keys), info: info, records: records, snapshot: snapshot)
        }
        let objects = try wrapStorage { try QueryEngine.matches(query, info: info, source: source, needKeys: false).objects }
        return ResultsOutcome(rows: .objects(objects), info: info, records: records)
    }

    /// The object under a stored key, or the placeholder (noting why) when it cannot be read.
    /// Returns `M`, never `M?`: this runs once per element, compiled unspecialized (the model is
    /// the caller's type), and every use of `M?` there asks the runtime for Optional<M>'s metadata.
    private func decode(keyAt i: Int, of list: KeyList, _ info: ModelInfo<M>, _ state: ResultsState) -> M {
        do {
            return try trustedRead(validating) {
                // The record is looked up inside `withKey` and decoded after it: the record is a
                // view of the map, valid for the snapshot's life, and a closure returning `M`
                // through the generic `withKey` ran unspecialized.
                guard let record = try list.withKey(i, { try records?.get($0) }) else {
                    throw StrataError.corruptRecord("a result of \(info.name) vanished from its own snapshot")
                }
                return try info.decode(record)
            }
        } catch {
            state.note(error)
            return info.placeholder
        }
    }

    private func keyList(_ state: ResultsState) -> KeyList {
        switch rows {
        case .keys(let list): return list
        case let .scan(offset, count):
            if let box = scanKeys.load() { return box.list }
            var list = KeyList()
            do {
                try trustedRead(validating) {
                    let cursor = records.map { $0.cursor() }
                    var more = try cursor?.seek(toPosition: offset) ?? false
                    while more && list.count < count, let cursor {
                        list.append(cursor.key)
                        more = try cursor.next()
                    }
                }
            } catch {
                list = KeyList()  // keys read from pages a writer reused are not this snapshot's
                state.note(error)
            }
            return scanKeys.storeIfNil(KeyListBox(list)).list
        case .objects: return KeyList()
        }
    }

    /// Element `i`. An index outside `0..<count` is a programming error, as for any collection;
    /// inside it, a record that cannot be read gives the placeholder and notes the error.
    func object(at i: Int, _ state: ResultsState) -> M {
        // Held keys, the common case, in one switch: every match on the rows (and `count`,
        // `keyList`) is code generic over the model, run unspecialized for each element.
        switch rows {
        case .objects(let objects): return objects[i]
        case .keys(let list):
            precondition(i >= 0 && i < list.count, "Results index \(i) out of range 0..<\(list.count)")
            guard let info else { preconditionFailure("Results index \(i) out of range") }  // count is 0 without info
            return decode(keyAt: i, of: list, info, state)
        case .scan: break
        }
        precondition(i >= 0 && i < count, "Results index \(i) out of range 0..<\(count)")
        guard let info else { preconditionFailure("Results index \(i) out of range") }  // count is 0 without info
        if case let .scan(offset, _) = rows, let records {
            // The record tree's branches count their entries: one descent to the element.
            do {
                return try trustedRead(validating) {
                    let cursor = records.cursor()
                    guard try cursor.seek(toPosition: offset + i) else {
                        throw StrataError.corruptRecord("\(info.name) has fewer records than its count")
                    }
                    return try info.decode(cursor.value)
                }
            } catch {
                state.note(error)
                return info.placeholder
            }
        }
        let list = keyList(state)
        if i < list.count { return decode(keyAt: i, of: list, info, state) }
        state.note(StrataError.corruptRecord("result \(i) of \(count) of \(info.name) could not be read"))
        return info.placeholder
    }

    /// A reader for elements taken in order (an iteration, a range); nil when the objects are held.
    func walk() -> ResultsWalk<M>? {
        guard let info, let records else { return nil }
        switch rows {
        case .keys(let list): return ResultsWalk(info: info, records: records, keys: list, offset: 0, validating: validating)
        case .scan(let offset, _): return ResultsWalk(info: info, records: records, keys: nil, offset: offset, validating: validating)
        case .objects: return nil
        }
    }

    func allObjects() throws -> [M] {
        switch rows {
        case .objects(let objects): return objects
        case .scan, .keys:
            guard let info, let records else { return [] }
            var out: [M] = []
            // A scan's count is the tree's, read from the file (bounded by its size, not by what
            // its records hold): reserve a slice of it and let the array grow past that.
            if case .keys = rows { out.reserveCapacity(count) } else { out.reserveCapacity(Swift.min(count, 1 << 16)) }
            if case let .scan(offset, count) = rows {
                let cursor = records.cursor()
                var more = try wrapStorage { try cursor.seek(toPosition: offset) }
                while more && out.count < count {
                    out.append(try info.decode(cursor.value))
                    more = try wrapStorage { try cursor.next() }
                }
                return out
            }
            let list = keyList(ResultsState())
            let finder = records.cursor()  // (`next`: keys near each other cost a leaf search)
            for i in 0..<list.count {
                guard try wrapStorage({ try list.withKey(i, { try finder.find($0) }) }) else {
                    throw StrataError.corruptRecord("a result of \(info.name) vanished from its own snapshot")
                }
                out.append(try info.decode(finder.value))
            }
            return out
        }
    }

    func ids(_ state: ResultsState) -> [M.ID] {
        if case .objects(let objects) = rows { return objects.map(\.id) }
        let list = keyList(state)
        var ids: [M.ID] = []
        ids.reserveCapacity(list.count)
        for i in 0..<list.count {
            if let id = list.withKey(i, { KeyEncoding.decode(M.ID.self, from: $0) }) {
                ids.append(id)
            } else {
                ids.append(object(at: i, state).id)  // a key type the key decoder does not read
            }
        }
        return ids
    }
}

/// A key list behind a reference, for the lazily built keys of a scan.
final class KeyListBox: Sendable {
    let list: KeyList
    init(_ list: KeyList) { self.list = list }
}

/// Holds a `Results`' outcome. The first access computes it under a lock; later ones only load an
/// atomic word, so iterating and indexing cost no lock per element.
///
/// Not generic over the model: every builder step (`filter`, `sorted`, `prefix`…) makes a state,
/// and a generic class's fields are created and destroyed by unspecialized code that looks up
/// their generic metadata each time (an `AtomicLazyReference<ResultsOutcome<M>>` cost ~2,700
/// instructions to destroy, four times per small query). The outcome is kept as a retained
/// object pointer in an `Atomic<Int>` instead; only `resolve` names its type.
final class ResultsState: Sendable {
    /// The outcome's object pointer, retained by this state (0 until computed); set once.
    private let outcome = Atomic<Int>(0)
    private let computing = Mutex<Void>(())
    /// The thread evaluating the query (`currentThreadHash`), 0 when none: a progress handler
    /// called from inside the evaluation runs on that thread, and reading these results there
    /// must not lock `computing` again (which stops the process).
    private let evaluator = Atomic<UInt>(0)
    /// The first error an element read lazily hit (the element read as a placeholder).
    private let late = Mutex<StrataError?>(nil)
    /// The count reported before evaluation (from the trees), or -1.
    private let counted = Atomic<Int>(-1)

    /// Serializes `noteCount` with storing a failed evaluation's outcome.
    private let countGate = Mutex<Void>(())

    /// Notes a count about to be handed out before evaluation (from the trees); false when an
    /// outcome was stored meanwhile, whose count is the one to hand out: a failed evaluation that
    /// missed this count keeps no element, and positions below it would trap.
    func noteCount(_ count: Int) -> Bool {
        countGate.withLock { _ in
            if isEvaluated { return false }
            counted.store(count, ordering: .relaxed)
            return true
        }
    }

    init() {}

    init<M: Model>(failure: StrataError, as model: M.Type) {
        store(ResultsOutcome<M>(error: failure))
    }

    init<M: Model>(objects: [M], info: ModelInfo<M>?) {
        store(ResultsOutcome(rows: .objects(objects), info: info, records: nil))
    }

    deinit {
        let bits = outcome.load(ordering: .acquiring)
        if bits != 0, let pointer = UnsafeRawPointer(bitPattern: bits) { Unmanaged<AnyObject>.fromOpaque(pointer).release() }
    }

    /// Publishes `computed` unless an outcome is there already; returns the one that stays.
    @discardableResult
    private func store<M: Model>(_ computed: ResultsOutcome<M>) -> ResultsOutcome<M> {
        let bits = Int(bitPattern: Unmanaged.passRetained(computed as AnyObject).toOpaque())
        let (exchanged, original) = outcome.compareExchange(expected: 0, desired: bits, ordering: .acquiringAndReleasing)
        if exchanged { return computed }
        Unmanaged<AnyObject>.fromOpaque(UnsafeRawPointer(bitPattern: bits)!).release()
        return object(original)
    }

    /// The outcome at `bits` (never 0). Only `store` puts one there, of the model its `Results` has.
    private func object<M: Model>(_ bits: Int) -> ResultsOutcome<M> {
        unsafeDowncast(Unmanaged<AnyObject>.fromOpaque(UnsafeRawPointer(bitPattern: bits)!).takeUnretainedValue(), to: ResultsOutcome<M>.self)
    }

    /// Whether the calling thread is evaluating these results (a progress handler called from
    /// inside the evaluation reads them): then they are not counted from the trees either, which
    /// would hand out positions that the evaluation under way cannot read yet.
    var isEvaluatingOnThisThread: Bool { evaluator.load(ordering: .acquiring) == currentThreadHash() }

    /// The outcome, if computed.
    func cached<M: Model>(_ model: M.Type = M.self) -> ResultsOutcome<M>? {
        let bits = outcome.load(ordering: .acquiring)
        return bits == 0 ? nil : object(bits)
    }

    /// Whether the outcome was computed.
    var isEvaluated: Bool { outcome.load(ordering: .acquiring) != 0 }

    /// The evaluation's error, if it failed before anything else.
    func failure<M: Model>(_ model: M.Type) -> StrataError? { cached(M.self)?.error }
    var lateError: StrataError? { late.withLock { $0 } }

    func note(_ error: any Error) {
        // An element read as the operation was stopped is not damaged: that stop is the
        // operation's (withProgress throws it), not these results' error for every later reader.
        if ResultsState.stopped(by: error) { return }
        let converted = (error as? StrataError) ?? (error as? StorageError).map(StrataError.init) ?? .invalidQuery("\(error)")
        late.withLock { if $0 == nil { $0 = converted } }
    }

    /// The outcome an evaluation stopped by its operation reads as: the count noted before (so a
    /// position below a count already handed out reads a placeholder, never traps), no elements
    /// decoded.
    private func stoppedOutcome<M: Model>(_ error: StrataError, info: () -> ModelInfo<M>?) -> ResultsOutcome<M> {
        let reported = counted.load(ordering: .relaxed)
        return ResultsOutcome(error: error, info: reported > 0 ? info() : nil, count: max(0, reported))
    }

    /// Whether `error` comes from stopping the operation running on this thread rather than from
    /// the query or the file.
    static func stopped(by error: any Error) -> Bool { error is CancellationError || OperationControl.shouldStop }

    func resolve<M: Model>(info: () -> ModelInfo<M>?, _ compute: () throws -> ResultsOutcome<M>) -> ResultsOutcome<M> {
        if let done = cached(M.self) { return done }
        // Stopped already: every element read from now on is a placeholder, without evaluating
        // the query again for each one (`map` and index loops read them by position).
        if OperationControl.shouldStop { return stoppedOutcome(.invalidQuery("the operation was stopped"), info: info) }
        if isEvaluatingOnThisThread {
            // Read from inside its own evaluation (a progress handler reading the results it
            // reports on): no answer yet, said as such and not kept (read after, they evaluate).
            // As a stop: a position below a count handed out before reads a placeholder.
            return stoppedOutcome(
                .invalidQuery("these results were read while they were being evaluated (from a progress handler); read them after"), info: info)
        }
        return computing.withLock { _ in
            if let done = cached(M.self) { return done }
            evaluator.store(currentThreadHash(), ordering: .releasing)
            defer { evaluator.store(0, ordering: .releasing) }
            let result: ResultsOutcome<M>
            do {
                result = try compute()
            } catch {
                let converted = (error as? StrataError) ?? (error as? StorageError).map(StrataError.init) ?? .invalidQuery("\(error)")
                // An evaluation stopped midway (withProgress, a cancelled read) is not the query's
                // answer: the operation that stopped gets the failure, and these results, which
                // may be shared, evaluate again when read next.
                if ResultsState.stopped(by: error) { return stoppedOutcome(converted, info: info) }
                // Read and stored under the gate `noteCount` takes: a count another thread handed
                // out from the trees is either seen here (kept, as placeholders) or not handed out.
                return countGate.withLock { _ in
                    let reported = counted.load(ordering: .relaxed)
                    return store(ResultsOutcome(error: converted, info: reported > 0 ? info() : nil, count: max(0, reported)))
                }
            }
            return store(result)
        }
    }
}
