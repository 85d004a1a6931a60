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
    public func fetch() throws -> [M] { try rows().map(\.object) }

    func rows() throws -> [Row<M>] {
        if let error = state.error { throw error }
        return try state.rows {
            guard let snapshot else { return [] }
            return try QueryEngine.evaluate(query, info: try snapshot.db.info(M.self), source: SnapshotTrees(txn: snapshot.txn))
        }
    }

    private var evaluated: [Row<M>] { (try? rows()) ?? [] }

    /// The error that emptied these results, if any.
    public var error: StrataError? {
        _ = try? rows()
        return state.error
    }

    /// The number of matching objects; without conditions it is read from the tree, decoding nothing.
    public func fetchCount() throws -> Int {
        if let error = state.error { throw error }
        if let rows = state.cachedRows { return rows.count }
        guard let snapshot else { return 0 }
        return try QueryEngine.count(query, info: try snapshot.db.info(M.self), source: SnapshotTrees(txn: snapshot.txn))
    }

    /// The number of matching objects (0 if the query failed; see `error`).
    public var count: Int { (try? fetchCount()) ?? 0 }

    /// The primary keys of the matching objects, in order.
    public var keys: [M.ID] { evaluated.map(\.object.id) }

    public var startIndex: Int { 0 }
    public var endIndex: Int { evaluated.count }
    public subscript(position: Int) -> M { evaluated[position].object }

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
        if query.isPlainScan { return (try? prefix(1).rows())?.first?.object }
        return evaluated.first?.object
    }
}

/// The evaluated rows of a `Results`, computed once. `Sendable` through its Mutex.
final class ResultsState<M: Model>: Sendable {
    private let storage: Mutex<(rows: [Row<M>]?, error: StrataError?)>

    init(error: StrataError? = nil) { storage = Mutex((nil, error)) }

    var error: StrataError? { storage.withLock { $0.error } }
    var cachedRows: [Row<M>]? { storage.withLock { $0.rows } }

    func rows(_ compute: () throws -> [Row<M>]) throws -> [Row<M>] {
        try storage.withLock { state in
            if let rows = state.rows { return rows }
            if let error = state.error { throw error }
            do {
                let rows = try compute()
                state.rows = rows
                return rows
            } catch let error as StrataError {
                state.error = error
                throw error
            } catch let error as StorageError {
                state.error = .storage(error)
                throw StrataError.storage(error)
            } catch {
                let wrapped = StrataError.invalidQuery("\(error)")
                state.error = wrapped
                throw wrapped
            }
        }
    }
}
