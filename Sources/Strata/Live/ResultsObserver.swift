import Foundation
import Dispatch
import Synchronization

/// A change to observed results.
///
/// ```swift
/// let token = db.objects(Person.self).observe { change in
///     switch change {
///     case .initial(let people): show(people)
///     case .update(let people, let deletions, let insertions, let modifications):
///         apply(people, deletions, insertions, modifications)
///     case .error(let error): print(error)
///     }
/// }
/// ```
public enum ResultsChange<M: Model>: Sendable {
    /// The results when observation began (always the first delivery, asynchronously).
    case initial(Results<M>)
    /// The results after one or more commits. Every array is in ascending order. `deletions` are
    /// indices in the previous results, `insertions` and `modifications` indices in these. To
    /// update a copy of the previous results, remove the deletions from the highest index down,
    /// then insert the insertions from the lowest up (UIKit's batch updates and Realm's change sets
    /// use the same indices). `modifications` are the objects that stayed in place and whose stored
    /// value (or, with `keyPaths`, an observed field) changed; an object that moves is a deletion
    /// and an insertion.
    ///
    /// ```swift
    /// for i in deletions.reversed() { mirror.remove(at: i) }
    /// for i in insertions { mirror.insert(results[i], at: i) }
    /// for i in modifications { mirror[i] = results[i] }
    /// ```
    case update(Results<M>, deletions: [Int], insertions: [Int], modifications: [Int])
    /// The query could not be evaluated (a corrupt record, every reader slot in use). Observation
    /// goes on: the next commit that changes the model evaluates the query again, and the change
    /// after it is relative to the last results delivered (or is the `.initial` one, if none was).
    /// Two errors end it instead, as the last delivery (and a `changes` stream finishes after
    /// them): `databaseClosed`, once `close()` is called on the database, and the error of
    /// results that could not be made at all (a model not passed to `Database(models:)`).
    case error(StrataError)
}

/// Keeps an observation alive. `invalidate()` stops delivery; so does releasing the token.
///
/// ```swift
/// var token: NotificationToken? = db.objects(Person.self).observe { change in print(change) }
/// token = nil   // stops delivery, like token?.invalidate()
/// ```
public final class NotificationToken: Sendable {
    private let stop: @Sendable () -> Void
    private let active = Atomic<Bool>(true)

    init(stop: @escaping @Sendable () -> Void) { self.stop = stop }

    /// Stops delivery. No block runs after this returns (blocks already running finish).
    ///
    /// ```swift
    /// token.invalidate()   // when the screen goes away, even if something still holds the token
    /// ```
    public func invalidate() {
        if active.exchange(false, ordering: .sequentiallyConsistent) { stop() }
    }

    deinit { invalidate() }
}

extension Results {
    /// Calls `block` on `queue` with the initial results, then with each change after commits that
    /// affect them. The writer never waits: results are recomputed on a background queue, and
    /// commits that land before a delivery merge into one change. With `keyPaths`, a commit that
    /// changes only other fields of the observed objects delivers nothing unless it moves objects
    /// into, out of or within the results (a nested key path such as `\.address.city` watches that
    /// nested field alone).
    ///
    /// ```swift
    /// let token = db.objects(Person.self).sorted(by: SortDescriptor(\.name)).observe(on: .main) { change in
    ///     switch change {
    ///     case .initial(let people): table.reload(people)
    ///     case .update(let people, let deletions, let insertions, let modifications):
    ///         table.apply(people, deletions, insertions, modifications)
    ///     case .error(let error): print(error)
    ///     }
    /// }
    /// ```
    ///
    /// Commits of every process that has the file open are observed: another process's commits
    /// are found by comparing snapshots (only the pages that differ are read) and delivered with
    /// the same exact change sets.
    public func observe(
        on queue: DispatchQueue = .main, keyPaths: [PartialKeyPath<M> & Sendable]? = nil,
        _ block: @escaping @Sendable (ResultsChange<M>) -> Void
    ) -> NotificationToken {
        observe(on: queue, keyPaths: keyPaths) { change, _ in block(change) }
    }

    /// `observe`, telling `block` which change is the last (after it the observation has ended).
    func observe(
        on queue: DispatchQueue, keyPaths: [PartialKeyPath<M> & Sendable]?,
        _ block: @escaping @Sendable (ResultsChange<M>, _ isLast: Bool) -> Void
    ) -> NotificationToken {
        guard let db = observedDatabase else {
            let error = state.failure(M.self) ?? .databaseClosed
            let lifecycle = ObservationState()  // so that the token stops even this one delivery
            queue.async { if lifecycle.isWanted { block(.error(error), true) } }
            return NotificationToken { lifecycle.invalidate() }
        }
        // A serial queue in front of the caller's: on a concurrent queue the closing error could
        // otherwise run beside, and finish before, an update still running.
        let serial = DispatchQueue(label: "strata.results-observer", target: queue)
        let observer = ResultsObserver(db: db, query: query, keyPaths: keyPaths, delivery: .queue(serial, block))
        observer.start()
        return NotificationToken { observer.invalidate() }
    }

    /// `observe`, delivering through `handoff`, which must call `done` once the change has been
    /// taken in (on whatever thread or actor it hands it to): until then, later commits merge
    /// into the next change, so a slow consumer holds one change and one snapshot at most. On a
    /// failed query `handoff` gets the error at once. `isLast` says the observation has ended.
    func observe(
        keyPaths: [PartialKeyPath<M> & Sendable]?,
        handoff: @escaping @Sendable (ResultsChange<M>, _ isLast: Bool, _ done: @escaping @Sendable () -> Void) -> Void
    ) -> NotificationToken {
        guard let db = observedDatabase else {
            handoff(.error(state.failure(M.self) ?? .databaseClosed), true) {}
            return NotificationToken {}
        }
        let observer = ResultsObserver(db: db, query: query, keyPaths: keyPaths, delivery: .handoff(handoff))
        observer.start()
        return NotificationToken { observer.invalidate() }
    }

    /// The same as `observe`, as an `AsyncSequence`; cancelling the consuming task ends the
    /// observation. The stream finishes after an error that ends the observation (`databaseClosed`
    /// once the database is closed). Commits that land while the loop is busy merge into its next
    /// change, so a slow loop holds one waiting change (and its snapshot) at most.
    ///
    /// ```swift
    /// for await change in db.objects(Person.self).changes { print(change) }
    /// ```
    public var changes: AsyncStream<ResultsChange<M>> { changes(keyPaths: nil) }

    /// `changes`, reporting only commits that change the given fields of the observed objects.
    ///
    /// ```swift
    /// for await change in db.objects(Person.self).changes(keyPaths: [\.name]) {
    ///     if case .update(let people, _, _, _) = change { show(people) }   // only name changes
    /// }
    /// ```
    public func changes(keyPaths: [PartialKeyPath<M> & Sendable]?) -> AsyncStream<ResultsChange<M>> {
        // Pulled through a one-change mailbox rather than pushed into the stream's buffer: a
        // change is taken in only when the loop asks for the next one (see `ChangeMailbox`).
        let mailbox = ChangeMailbox<ResultsChange<M>>()
        let token = observe(keyPaths: keyPaths) { [weak mailbox] change, isLast, done in
            guard let mailbox else { return done() }
            mailbox.put(change, isLast: isLast, done: done)
        }
        mailbox.keep(token)
        return AsyncStream(unfolding: { await mailbox.next() }, onCancel: { mailbox.cancel() })
    }
}

/// Recomputes one observed query after relevant commits and delivers the differences.
///
/// Merging: commits are gathered for a millisecond before the observer looks, and while a
/// delivery is in flight on the observer's queue, commits only mark the results stale; when the
/// block returns, one refresh covers every commit since. So a slow observer gets
/// fewer, larger change sets, and the writer never waits for it.
///
/// Commits reach it through the database's `ObserverHub`, which gathers them for all observers.
///
/// `@unchecked Sendable`: every `var` (`last`, `lastKeys`, `live`, `liveObjects`, `sortKeyOf`,
/// `pendingKeys`, `pendingUnknown`, `seenVersion`, the compiled filter) is read and
/// written only on `worker` (the database's serial observer queue); everything else is immutable
/// or atomic.
final class ResultsObserver<M: Model>: HubClient, @unchecked Sendable {
    /// Where changes go: a block on a queue (`observe`), or a handoff that says when it is done
    /// with each (`LiveResults`).
    enum Delivery {
        case queue(DispatchQueue, @Sendable (ResultsChange<M>, _ isLast: Bool) -> Void)
        case handoff(@Sendable (ResultsChange<M>, _ isLast: Bool, _ done: @escaping @Sendable () -> Void) -> Void)
    }

    private let db: Database
    private let query: Query<M>
    private let delivery: Delivery
    private var worker: DispatchQueue { db.observerQueue }
    /// With `keyPaths`, the stored fields they name, each as its path of field ids (a nested key
    /// path reaches into the nested record): only their bytes are fingerprinted.
    private let observedFields: [[Int]]?
    private let lifecycle = ObservationState()
    private var last: [ChangeSet.Row] = []
    private var lastKeys: Set<[UInt8]> = []
    /// A delivery is on the observer's queue (set on `worker`, cleared there by the block's end).
    private let inFlight = Atomic<Bool>(false)
    /// A refresh was put off because of a delivery in flight: the delivery's end must run it.
    private let putOff = Atomic<Bool>(false)
    /// Keys changed by commits not yet looked at, and whether some commit changed an unknown set.
    private var pendingKeys: Set<[UInt8]> = []
    private var pendingUnknown = false
    /// The newest commit whose changes this observer has taken in (worker only).
    private var seenVersion: UInt64 = 0
    /// The versions the current results (`last`, `live`) rest on (worker only): the snapshot they
    /// were computed from (`floor == ceiling`), or, once commits were found not to affect them,
    /// every version from that one to the snapshot the check read. Keys of an event spanning
    /// several commits can be trusted only if the span does not reach inside (see `absorb`).
    private var basis: (floor: UInt64, ceiling: UInt64) = (0, 0)
    /// The initial results were computed (worker only): until then a pass must not refresh.
    private var started = false
    /// `.initial` was delivered (worker only); until then a successful evaluation delivers it.
    private var deliveredInitial = false
    /// The last evaluation failed (worker only): the next commit evaluates the query in full.
    private var failed = false
    /// Evaluations in a row thrown away because a writer in another process overtook a read-only
    /// store's snapshot (worker only).
    private var changedReads = 0
    /// The observed model's record tree.
    let tree: String

    /// The query's conditions compiled for encoded records, when they compile (see RecordFilter).
    private var recordFilter: RecordFilter?
    private var filterCompiled = false
    /// For queries whose order is a key order (no window, no distinct, no sort or a sort by stored
    /// numbers/dates/bools): the results with their sort keys, kept up to date from the changed keys
    /// alone. Nil when the query needs full re-evaluation.
    private var live: [LiveRow]?
    /// The objects of `live`, position for position (a separate array, so that handing them to a
    /// `Results` copies one array of objects, not the rows).
    private var liveObjects: [M] = []
    private var sortKeyOf: [[UInt8]: [UInt8]] = [:]

    private struct LiveRow {
        var key: [UInt8]
        var sortKey: [UInt8]
        var fingerprint: Int

        /// Result order: sort key, then primary key (as the query engine orders ties).
        static func precedes(_ a: (sortKey: [UInt8], key: [UInt8]), _ b: (sortKey: [UInt8], key: [UInt8])) -> Bool {
            if a.sortKey != b.sortKey { return a.sortKey.lexicographicallyPrecedes(b.sortKey) }
            return a.key.lexicographicallyPrecedes(b.key)
        }
    }

    init(db: Database, query: Query<M>, keyPaths: [PartialKeyPath<M> & Sendable]?, delivery: Delivery) {
        self.db = db
        self.query = query
        self.delivery = delivery
        self.tree = (try? db.info(M.self))?.recordTree ?? ""
        if let keyPaths, let info = try? db.info(M.self) {
            let paths = keyPaths.compactMap { keyPath -> [Int]? in
                guard let path = fieldPath(of: keyPath) else { return nil }
                return info.stored.object.fieldIDs(atPath: path)
            }
            // A key path that names no stored field (a computed property) cannot be narrowed
            // down: every change is observed.
            observedFields = paths.count == keyPaths.count ? paths : nil
        } else {
            observedFields = nil
        }
    }

    func start() {
        guard (try? db.info(M.self)) != nil else {
            let error = StrataError.unsupportedType(model: M.modelName, field: "(model)", reason: "\(M.self) was not passed to Database(models:)")
            switch delivery {
            case .queue(let queue, let block): queue.async { [self] in if lifecycle.isWanted { block(.error(error), true) } }
            case .handoff(let handoff): handoff(.error(error), true) {}
            }
            return
        }
        // Listen first, then evaluate: a commit in between is in the initial results, and the
        // refresh it schedules finds nothing new.
        lifecycle.listen(stop: db.observers.register(self, db: db))
        lifecycle.endWhenClosed(db.store, on: worker) { [self] in
            switch delivery {
            case .queue(let queue, let block): queue.async { [self] in if lifecycle.isWanted { block(.error(.databaseClosed), true) } }
            case .handoff(let handoff): handoff(.error(.databaseClosed), true) {}
            }
        }
        worker.async { self.refresh(initial: true) }
    }

    /// On `worker` (from the hub): what gathered commits changed in the observed tree.
    func absorb(_ changes: TreeChanges?, version: UInt64) {
        if let changes {
            pendingKeys.formUnion(changes.keys)
            // Keys of a span that began before the results' version and ended after it may miss
            // a change since that version (one undone inside the span): evaluate in full.
            if changes.unknown || changes.spans.contains(where: reachesInside) { pendingUnknown = true }
        }
        seenVersion = max(seenVersion, version)
    }

    /// Whether an event spanning `previous + 1 ... version` may hide a change since the results'
    /// basis: a key changed and changed back inside the span is not listed, which is only safe
    /// if the results rest on no version strictly inside it.
    private func reachesInside(_ span: (previous: UInt64, version: UInt64)) -> Bool {
        if basis.floor == basis.ceiling { return span.previous < basis.floor && basis.floor < span.version }
        return span.previous < basis.ceiling && span.version > basis.floor
    }

    /// On `worker`: takes in every commit whose listener has run, this observer's and the others'.
    private func drainInbox() { db.observers.collect() }

    /// On `worker`: refresh unless a delivery is still running (it refreshes when it finishes), and
    /// only if a changed object was in the results or now matches the query.
    func refreshIfStale() {
        if !started { return }  // the initial refresh, queued behind this pass, covers it
        if pendingKeys.isEmpty && !pendingUnknown { return }
        if inFlight.load(ordering: .sequentiallyConsistent) {
            // Say so first, then look again: the delivery may have ended in between and missed it.
            putOff.store(true, ordering: .sequentiallyConsistent)
            if inFlight.load(ordering: .sequentiallyConsistent) { return }
            putOff.store(false, ordering: .sequentiallyConsistent)
        }
        if failed {
            pendingKeys.removeAll()
            pendingUnknown = false
            return refresh(initial: false)
        }
        if !pendingUnknown, live != nil {
            let keys = pendingKeys
            pendingKeys.removeAll()
            return refreshIncrementally(keys)
        }
        if !pendingUnknown, let (relevant, checkedAt) = try? affects(pendingKeys), !relevant {
            // The results stand, now resting on the versions up to the one the check read.
            basis.ceiling = max(basis.ceiling, checkedAt, seenVersion)
            pendingKeys.removeAll()
            return
        }
        pendingKeys.removeAll()
        pendingUnknown = false
        refresh(initial: false)
    }

    /// Whether `record` (an object's new version) belongs in the results.
    private func matches(_ record: UnsafeRawBufferPointer, info: ModelInfo<M>) throws -> Bool {
        if !query.hasConditions { return true }
        if !filterCompiled {
            recordFilter = RecordFilter.compile(query.conditions, schema: info.stored.object)
            filterCompiled = true
        }
        if let recordFilter { return try recordFilter.matches(record) }
        return try query.matches(try info.decode(record))
    }

    /// Applies the objects of `keys` to the kept results: remove their old rows, insert the new
    /// versions that match, and derive the change set from where they were and are.
    private func refreshIncrementally(_ changed: Set<[UInt8]>) {
        let keys = changed
        guard lifecycle.shouldCompute(db.store), var rows = live else { return lifecycle.stopListening() }
        var objects = liveObjects
        live = nil  // no second reference: the arrays below mutate in place
        liveObjects = []
        do {
            let info = try db.info(M.self)
            let order = ResultOrder(query, info: info)
            guard order.isEncoded else {
                live = rows
                liveObjects = objects
                return refresh(initial: false)
            }
            // The keys applied must be exactly those of the commits the snapshot includes: a
            // listener runs just after its commit is published, so wait for the ones of commits in
            // the snapshot, and take a newer snapshot when keys of later commits have arrived.
            var snapshot = try db.observers.snapshot(db)
            var keys = keys
            var waits = 0
            while true {
                drainInbox()
                keys.formUnion(pendingKeys)
                pendingKeys.removeAll()
                if pendingUnknown {
                    // The whole query is evaluated again: it covers the unknown changes too.
                    pendingUnknown = false
                    live = rows
                    liveObjects = objects
                    return refresh(initial: false)
                }
                // The snapshot must hold every commit whose keys were taken in (a commit heard
                // ahead of a gap included), and the keys every commit up to the snapshot.
                if seenVersion > snapshot.version || snapshot.version < db.observers.heardVersion {
                    snapshot = try db.observers.snapshot(db)
                    continue
                }
                if seenVersion == snapshot.version { break }
                if waits > 200 {
                    // A descheduled writer thread, or a commit watcher still comparing another
                    // process's large commit: evaluate the whole query rather than wait longer.
                    live = rows
                    liveObjects = objects
                    return refresh(initial: false)
                }
                waits += 1
                usleep(50)
            }
            let records = try wrapStorage { try snapshot.txn.tree(info.recordTree) }
            // Old rows of changed objects, by position.
            var oldIndices: [Int] = []
            for key in keys {
                guard let sortKey = sortKeyOf[key] else { continue }
                let i = position(of: (sortKey, key), in: rows)
                if i < rows.count && rows[i].key == key { oldIndices.append(i) }
            }
            oldIndices.sort()
            // New versions that belong in the results.
            var fresh: [(row: LiveRow, object: M)] = []
            for key in keys {
                guard let record = try wrapStorage({ try records?.view(key) }), try matches(record, info: info) else { continue }
                let object = try info.decode(record)
                fresh.append((LiveRow(key: key, sortKey: try order.sortKey(object), fingerprint: try fingerprint(record)), object))
            }
            basis = (snapshot.version, snapshot.version)
            if oldIndices.isEmpty && fresh.isEmpty {
                live = rows
                liveObjects = objects
                return
            }
            let oldFingerprints = Dictionary(uniqueKeysWithValues: oldIndices.map { (rows[$0].key, (rows[$0].fingerprint, $0)) })
            let oldRows = Dictionary(uniqueKeysWithValues: oldIndices.map { ($0, rows[$0].key) })
            for i in oldIndices.reversed() {
                sortKeyOf[rows[i].key] = nil
                rows.remove(at: i)
                objects.remove(at: i)
            }
            fresh.sort { LiveRow.precedes(($0.row.sortKey, $0.row.key), ($1.row.sortKey, $1.row.key)) }
            var newIndices: [[UInt8]: Int] = [:]
            for (row, object) in fresh {
                let j = position(of: (row.sortKey, row.key), in: rows)
                rows.insert(row, at: j)
                objects.insert(object, at: j)
                sortKeyOf[row.key] = row.sortKey
            }
            for (row, _) in fresh { newIndices[row.key] = position(of: (row.sortKey, row.key), in: rows) }

            // Changed objects stay in place when they keep their slot among the unchanged rows,
            // and among the changed objects of that slot before and after, a longest run that
            // keeps its order does (as ChangeSet.between keeps one); every other change is a
            // deletion and an insertion. (Slot = the number of unchanged rows before = index
            // minus rank among the changed rows.)
            let newSorted = newIndices.values.sorted()
            var oldGroups: [Int: [[UInt8]]] = [:]
            var newGroups: [Int: [[UInt8]]] = [:]
            var oldSlot: [Int: Int] = [:]
            for (rank, i) in oldIndices.enumerated() {
                oldSlot[i] = i - rank
                oldGroups[i - rank, default: []].append(oldRows[i] ?? [])
            }
            var newRowKeys: [Int: [UInt8]] = [:]
            for (key, j) in newIndices { newRowKeys[j] = key }
            var newSlot: [Int: Int] = [:]
            for (rank, j) in newSorted.enumerated() {
                newSlot[j] = j - rank
                newGroups[j - rank, default: []].append(newRowKeys[j] ?? [])
            }
            var stays = Set<[UInt8]>()
            for (slot, oldKeys) in oldGroups {
                guard let newKeys = newGroups[slot] else { continue }
                var oldRank: [[UInt8]: Int] = [:]
                for (rank, key) in oldKeys.enumerated() { oldRank[key] = rank }
                let common = newKeys.compactMap { key in oldRank[key].map { (key: key, rank: $0) } }
                for k in ChangeSet.longestIncreasingRun(common.map(\.rank)) { stays.insert(common[k].key) }
            }
            var change = ChangeSet()
            var inPlaceOld = Set<Int>()
            var inPlaceNew = Set<Int>()
            for (key, (fingerprint, i)) in oldFingerprints {
                guard let j = newIndices[key], let before = oldSlot[i], let after = newSlot[j],
                    before == after, stays.contains(key)
                else { continue }
                inPlaceOld.insert(i)
                inPlaceNew.insert(j)
                if rows[j].fingerprint != fingerprint { change.modifications.append(j) }
            }
            change.deletions = oldIndices.filter { !inPlaceOld.contains($0) }
            change.insertions = newIndices.values.filter { !inPlaceNew.contains($0) }.sorted()
            change.modifications.sort()
            live = rows
            liveObjects = objects
            lastKeys.subtract(keys)
            for (row, _) in fresh { lastKeys.insert(row.key) }
            if change.isEmpty { return }
            let results = Results(snapshot: snapshot, query: query, objects: objects)
            deliver(.update(results, deletions: change.deletions, insertions: change.insertions, modifications: change.modifications))
        } catch {
            // Nothing was applied to `rows` before the throw: they are what was delivered last.
            last = rows.map { ChangeSet.Row(key: $0.key, fingerprint: $0.fingerprint) }
            fail(error)
        }
    }

    /// The first position whose row does not precede `target`.
    private func position(of target: (sortKey: [UInt8], key: [UInt8]), in rows: [LiveRow]) -> Int {
        var low = 0
        var high = rows.count
        while low < high {
            let mid = (low + high) / 2
            if LiveRow.precedes((rows[mid].sortKey, rows[mid].key), target) { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// Whether changes to `keys` can change the results: one was in them, or one now matches. With
    /// an offset, an object before the window that leaves the query (or is deleted) shifts the
    /// window without ever having been in it or matching now: every change may matter; so may
    /// any change to results ranked by relevance. Also returns the version of the snapshot it read.
    private func affects(_ keys: Set<[UInt8]>) throws -> (Bool, UInt64) {
        if !keys.isDisjoint(with: lastKeys) { return (true, 0) }
        // Relevance depends on every text of the model (how many have each word, their lengths):
        // any change may reorder the results.
        if !query.hasConditions || query.offset > 0 || query.ranking != nil { return (true, 0) }
        let info = try db.info(M.self)
        let snapshot = try db.observers.snapshot(db)
        guard let records = try wrapStorage({ try snapshot.txn.tree(info.recordTree) }) else { return (false, snapshot.version) }
        for key in keys {
            if let record = try wrapStorage({ try records.view(key) }), try matches(record, info: info) { return (true, snapshot.version) }
        }
        return (false, snapshot.version)
    }

    func invalidate() { lifecycle.invalidate() }

    private var isLive: Bool { lifecycle.isLive(db.store) }

    private func refresh(initial: Bool) {
        if initial { started = true }
        guard lifecycle.shouldCompute(db.store) else { return lifecycle.stopListening() }
        if !initial, let live {
            // Incremental updates kept `live` current, not `last`.
            last = live.map { ChangeSet.Row(key: $0.key, fingerprint: $0.fingerprint) }
        }
        var read: Snapshot?
        do {
            let info = try db.info(M.self)
            let snapshot = try db.observers.snapshot(db)
            read = snapshot
            let source = SnapshotTrees(txn: snapshot.txn)
            let found = try wrapStorage { try QueryEngine.matches(query, info: info, source: source, needKeys: true) }
            let records = try wrapStorage { try source.tree(named: info.recordTree) }
            var current: [ChangeSet.Row] = []
            current.reserveCapacity(found.keys.count)
            for key in found.keys {
                guard let record = try wrapStorage({ try records?.view(key) }) else {
                    throw StrataError.corruptRecord("a result of \(info.name) vanished from its own snapshot")
                }
                current.append(ChangeSet.Row(key: key, fingerprint: try fingerprint(record)))
            }
            try snapshot.validate()  // a read-only store's snapshot may have been overtaken
            changedReads = 0
            let results = Results(snapshot: snapshot, query: query, objects: found.objects)
            lastKeys = Set(found.keys)
            seenVersion = max(seenVersion, snapshot.version)  // everything up to it is in these results
            basis = (snapshot.version, snapshot.version)
            // Keep the rows for incremental updates when the order is a key order.
            if query.offset == 0, query.limit == nil, query.distinct.isEmpty, query.ranking == nil,
                case let order = ResultOrder(query, info: info), order.isEncoded
            {
                var kept: [LiveRow] = []
                kept.reserveCapacity(current.count)
                sortKeyOf.removeAll(keepingCapacity: true)
                for (object, summary) in zip(found.objects, current) {
                    let sortKey = try order.sortKey(object)
                    kept.append(LiveRow(key: summary.key, sortKey: sortKey, fingerprint: summary.fingerprint))
                    sortKeyOf[summary.key] = sortKey
                }
                // Incremental updates insert by this order; rows out of it would be found in the
                // wrong place and kept twice. The query engine orders by the same definition, so
                // this holds; if it ever did not, full evaluation (whose change sets need no order)
                // stays correct.
                if zip(kept, kept.dropFirst()).allSatisfy({ LiveRow.precedes(($0.sortKey, $0.key), ($1.sortKey, $1.key)) }) {
                    live = kept
                    liveObjects = found.objects
                } else {
                    live = nil
                    sortKeyOf.removeAll()
                }
            } else {
                live = nil
            }
            failed = false
            if !deliveredInitial {
                deliveredInitial = true
                last = current
                deliver(.initial(results))
                return
            }
            let change = ChangeSet.between(last, current)
            last = current
            if !change.isEmpty {
                deliver(.update(results, deletions: change.deletions, insertions: change.insertions, modifications: change.modifications))
            }
        } catch {
            // A writer in another process overtook a read-only store's snapshot (whatever the
            // error its reused pages caused): read a newer one.
            let overtaken = error.isFileChangedDuringRead || read.map { !$0.txn.isValid } ?? false
            if overtaken && changedReads < Database.changedReadRetries {
                changedReads += 1
                return db.attemptReporting(after: changedReads) { refresh(initial: initial) }
            }
            changedReads = 0
            fail(error)
        }
    }

    /// On `worker`: reports a failed evaluation and makes the next commit evaluate in full.
    private func fail(_ error: any Error) {
        failed = true
        live = nil
        sortKeyOf.removeAll()
        deliver(.error(error as? StrataError ?? .invalidQuery("\(error)")))
    }

    /// A hash of the stored record, or of the observed fields only.
    private func fingerprint(_ record: UnsafeRawBufferPointer) throws -> Int {
        var hasher = Hasher()
        guard let observedFields else {
            hasher.combine(bytes: record)
            return hasher.finalize()
        }
        for ids in observedFields {
            // Down the path: a nil or missing struct on the way reads as that, below it nothing.
            var current = record
            var state = 0  // 0: value found; 1: nil; 2: missing
            for id in ids {
                guard let (bytes, isNil) = try RecordField.find(id, in: current) else { state = 2; break }
                if isNil { state = 1; break }
                current = bytes
            }
            hasher.combine(state)
            if state == 0 {
                hasher.combine(current.count)
                hasher.combine(bytes: current)
            }
        }
        return hasher.finalize()
    }

    /// On `worker`: hands `change` to the observer's queue; until the block has run, later commits
    /// accumulate into the next change. The block's end comes back to `worker` only when a refresh
    /// was put off meanwhile: most deliveries then cost one thread hop, not two.
    private func deliver(_ change: ResultsChange<M>) {
        inFlight.store(true, ordering: .sequentiallyConsistent)
        let done: @Sendable () -> Void = { [self] in
            inFlight.store(false, ordering: .sequentiallyConsistent)
            if putOff.exchange(false, ordering: .sequentiallyConsistent) {
                worker.async { self.refreshIfStale() }
            }
        }
        switch delivery {
        case .queue(let queue, let block):
            queue.async { [self] in
                if isLive { block(change, false) }
                done()
            }
        case .handoff(let handoff):
            if isLive { handoff(change, false, done) } else { done() }
        }
    }
}
