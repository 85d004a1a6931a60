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
/// results are empty and `error` says why. `fetch()` and `fetchCount()` throw instead.
public struct Results<M: Model>: RandomAccessCollection, Sendable {
    let snapshot: Snapshot?
    let query: Query<M>
    let state: ResultsState<M>

    init(snapshot: Snapshot, query: Query<M>) {
        self.snapshot = snapshot
        self.query = query
        self.state = ResultsState()
    }

    /// The commit these results see (nil when they failed before binding to a snapshot).
    public var version: UInt64? { snapshot?.version }

    /// Results whose objects are already evaluated (by an observer).
    init(snapshot: Snapshot, query: Query<M>, objects: [M]) {
        self.snapshot = snapshot
        self.query = query
        self.state = ResultsState(objects: objects)
    }

    init(failed error: StrataError) {
        self.snapshot = nil
        self.query = Query()
        self.state = ResultsState(error: error)
    }

    private func with(_ change: (inout Query<M>) -> Void) -> Results<M> {
        guard let snapshot else { return self }
        var q = query
        change(&q)
        return Results(snapshot: snapshot, query: q)
    }

    // MARK: Building

    /// Objects that also match `predicate`.
    public func filter(_ predicate: Predicate<M>) -> Results<M> { with { $0.predicates.append(predicate) } }

    /// Sorted by `descriptors`, the first deciding first; ties keep primary-key order.
    public func sorted(by descriptors: [SortDescriptor<M>]) -> Results<M> { with { $0.sort = descriptors } }

    /// Sorted by one or more descriptors.
    public func sorted(by descriptor: SortDescriptor<M>, _ more: SortDescriptor<M>...) -> Results<M> { sorted(by: [descriptor] + more) }

    /// At most the first `count` objects.
    public func prefix(_ count: Int) -> Results<M> {
        with { q in
            let n = Swift.max(0, count)
            q.limit = q.limit.map { Swift.min($0, n) } ?? n
        }
    }

    /// Skips the first `count` objects.
    public func offset(_ count: Int) -> Results<M> {
        with { q in
            let n = Swift.max(0, count)
            q.offset += n
            q.limit = q.limit.map { Swift.max(0, $0 - n) }
        }
    }

    /// Keeps the first object of each distinct combination of values at `keyPaths`.
    public func distinct(by keyPaths: PartialKeyPath<M> & Sendable...) -> Results<M> { with { $0.distinct = keyPaths } }

    // MARK: Evaluating

    /// Runs the query (once) and returns the objects, throwing what it hit.
    public func fetch() throws -> [M] { try state.objects(compute) }

    private func compute() throws -> [M] {
        guard let snapshot else { return [] }
        return try QueryEngine.matches(query, info: try snapshot.db.info(M.self), source: SnapshotTrees(txn: snapshot.txn), needKeys: false).objects
    }

    /// The matching objects, evaluated once (empty if the query failed).
    private var objects: [M] { state.resolve(compute).objects }

    /// The error that emptied these results, if any (runs the query if it has not run yet).
    public var error: StrataError? { state.resolve(compute).error }

    /// The number of matching objects; without conditions it is read from the tree, decoding nothing.
    public func fetchCount() throws -> Int {
        if let done = state.cached {
            if let error = done.error { throw error }
            return done.objects.count
        }
        guard let snapshot else { return 0 }
        return try QueryEngine.count(query, info: try snapshot.db.info(M.self), source: SnapshotTrees(txn: snapshot.txn))
    }

    /// The number of matching objects (0 if the query failed; see `error`).
    public var count: Int { (try? fetchCount()) ?? 0 }

    /// The primary keys of the matching objects, in order.
    public var keys: [M.ID] { objects.map(\.id) }

    public var startIndex: Int { 0 }
    public var endIndex: Int { objects.count }
    public subscript(position: Int) -> M { objects[position] }

    /// Iterates the evaluated objects directly: one evaluation, no per-element work.
    public func makeIterator() -> IndexingIterator<[M]> { objects.makeIterator() }

    /// How the query runs: the index or key ranges used, the residual filter, the sort method.
    ///
    /// ```swift
    /// print(db.objects(User.self).filter(#Predicate { $0.age == 30 }).explain())
    /// // index i:User:age for age == 30: 1 range(s) ...
    /// ```
    public func explain() -> String {
        guard let snapshot else { return "failed: \(state.error.map { "\($0)" } ?? "unknown")" }
        do {
            return try QueryEngine.explain(query, info: try snapshot.db.info(M.self), source: SnapshotTrees(txn: snapshot.txn))
        } catch {
            return "failed: \(error)"
        }
    }

    /// The first matching object; evaluates only one row when there is no filter or sort.
    public var first: M? {
        if state.cached == nil && query.isPlainScan { return (try? prefix(1).fetch())?.first }
        return objects.first
    }
}

/// The outcome of a `Results`' query: computed once, then read without locking.
final class ResultsOutcome<M: Model>: Sendable {
    let objects: [M]
    let error: StrataError?

    init(objects: [M], error: StrataError?) {
        self.objects = objects
        self.error = error
    }
}

/// Holds a `Results`' outcome. The first access computes it under a lock; later ones only load an
/// atomic reference, so iterating and indexing cost no lock per element.
final class ResultsState<M: Model>: Sendable {
    private let outcome = AtomicLazyReference<ResultsOutcome<M>>()
    private let computing = Mutex<Void>(())

    init(error: StrataError? = nil) {
        if let error { _ = outcome.storeIfNil(ResultsOutcome(objects: [], error: error)) }
    }

    init(objects: [M]) {
        _ = outcome.storeIfNil(ResultsOutcome(objects: objects, error: nil))
    }

    var error: StrataError? { outcome.load()?.error }
    var cachedObjects: [M]? {
        guard let done = outcome.load(), done.error == nil else { return nil }
        return done.objects
    }
    var cached: ResultsOutcome<M>? { outcome.load() }

    func resolve(_ compute: () throws -> [M]) -> ResultsOutcome<M> {
        if let done = outcome.load() { return done }
        return computing.withLock { _ in
            if let done = outcome.load() { return done }
            let result: ResultsOutcome<M>
            do {
                result = ResultsOutcome(objects: try compute(), error: nil)
            } catch let error as StrataError {
                result = ResultsOutcome(objects: [], error: error)
            } catch let error as StorageError {
                result = ResultsOutcome(objects: [], error: StrataError(error))
            } catch {
                result = ResultsOutcome(objects: [], error: .invalidQuery("\(error)"))
            }
            return outcome.storeIfNil(result)
        }
    }

    func objects(_ compute: () throws -> [M]) throws -> [M] {
        let done = resolve(compute)
        if let error = done.error { throw error }
        return done.objects
    }
}
