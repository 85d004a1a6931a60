import Foundation
import Dispatch
import Synchronization

/// A change to one observed object.
///
/// ```swift
/// for await change in db.changes(Person.self, key: "u1") {
///     if case .changed(let person, let fields) = change { print(person.name, fields) }
/// }
/// ```
public enum ObjectChange<M: Model>: Sendable {
    /// The object changed; `fields` names the stored fields whose value differs.
    case changed(M, fields: [String])
    /// The object was deleted; observation ends.
    case deleted
    /// The object could not be read. Observation goes on: the next commit that changes it reads it
    /// again. Two errors end it instead, as the last delivery (and a `changes` stream finishes
    /// after them): `databaseClosed`, once `close()` is called on the database, and a model not
    /// passed to `Database(models:)`.
    case error(StrataError)
}

/// What one commit changed, for database observers: a commit of this process, or the commits
/// other processes made since this process last looked.
///
/// ```swift
/// for await change in db.commits where change.models.contains("Person") {
///     reloadPeople()
/// }
/// ```
public struct DatabaseChange: Sendable, Equatable {
    /// The commit's version (transaction id); for commits of other processes, the newest of them.
    public let version: UInt64
    /// Names of the models whose objects (or indexes) the commit wrote.
    public let models: Set<String>
    /// True for commits made by other processes. Commits of other processes that land close
    /// together arrive as one change, and one can arrive just after a later commit of this
    /// process (it is found by comparing snapshots, a moment after the commit).
    public let isFromOtherProcess: Bool

    init(version: UInt64, models: Set<String>, isFromOtherProcess: Bool = false) {
        self.version = version
        self.models = models
        self.isFromOtherProcess = isFromOtherProcess
    }
}

extension Database {
    /// Calls `block` on `queue` whenever a commit changes the stored value of the object with
    /// primary key `key`, with the names of the changed fields, and once with `.deleted` when it is
    /// deleted. Nothing is delivered for commits that leave it as it was. Commits of every process
    /// that has the file open are observed. An object that does not exist yet is watched for its
    /// changes once it does: its insertion itself is not reported (a `LiveObject` reports it).
    ///
    /// ```swift
    /// let token = db.observe(Person.self, key: "u17") { change in
    ///     if case .changed(let person, let fields) = change, fields.contains("status") { show(person.status) }
    /// }
    /// ```
    public func observe<M: Model>(
        _ type: M.Type, key: M.ID, on queue: DispatchQueue = .main,
        _ block: @escaping @Sendable (ObjectChange<M>) -> Void
    ) -> NotificationToken {
        observe(type, key: key, on: queue) { change, _ in block(change) }
    }

    /// `observe(_:key:)`, telling `block` which change is the last (after it the observation ended).
    func observe<M: Model>(
        _ type: M.Type, key: M.ID, on queue: DispatchQueue,
        _ block: @escaping @Sendable (ObjectChange<M>, _ isLast: Bool) -> Void
    ) -> NotificationToken {
        let observer = ObjectObserver<M>(db: self, key: key, queue: queue, block: block)
        observer.start()
        return NotificationToken { observer.invalidate() }
    }

    /// `observe(_:key:)` as an `AsyncSequence`; cancelling the consuming task ends the observation.
    /// The stream finishes after `.deleted` and after an error that ends the observation
    /// (`databaseClosed` once the database is closed).
    ///
    /// ```swift
    /// for await change in db.changes(Person.self, key: "u1") {
    ///     if case .changed(let person, _) = change { show(person) }
    /// }   // ends after .deleted
    /// ```
    public func changes<M: Model>(_ type: M.Type, key: M.ID) -> AsyncStream<ObjectChange<M>> {
        AsyncStream { continuation in
            let token = observe(type, key: key, on: DispatchQueue(label: "strata.object-changes")) { change, isLast in
                continuation.yield(change)
                if isLast { continuation.finish() }
            }
            continuation.onTermination = { _ in token.invalidate() }
        }
    }

    /// Calls `block` on `queue` after every commit to this file that changed a model's trees, with
    /// its version and the models it changed: the commits made through any handle of it in this
    /// process, one by one, and those of other processes (`isFromOtherProcess`), found within
    /// milliseconds of their commit. (Idle-time compaction's commits that only trim the file are
    /// not reported; versions may therefore skip.)
    ///
    /// Nothing is delivered after `close()`, which ends the observation (the token then has
    /// nothing left to end). Blocks run one at a time, in commit order, also on a concurrent queue.
    ///
    /// ```swift
    /// let token = db.observeCommits { change in print(change.version, change.models) }
    /// ```
    public func observeCommits(on queue: DispatchQueue = .main, _ block: @escaping @Sendable (DatabaseChange) -> Void) -> NotificationToken {
        let active = Atomic<Bool>(true)
        let store = self.store
        // A serial queue in front of the caller's, as for results and object observers: on a
        // concurrent queue two commits' blocks would otherwise run at once, or out of order.
        let queue = DispatchQueue(label: "strata.commit-observer", target: queue)
        // The trees of this handle's models, by name: an index tree's name `i:<model>:<path>` does
        // not say where the model's name ends when it holds a colon (a model "chat:Message" would
        // have read as "chat"), and a renamed coding key may put one in the path.
        var modelOfTree: [String: String] = [:]
        for info in registry.byName.values {
            for tree in info.stored.trees { modelOfTree[tree] = info.name }
        }
        let listener = store.addCommitListener { [modelOfTree] event in
            var models = Set<String>()
            var unknownIndexes: [String] = []
            for tree in event.changedTrees {
                if let model = modelOfTree[tree] {
                    models.insert(model)
                } else if tree.hasPrefix("m:") {
                    models.insert(String(tree.dropFirst(2)))
                } else if tree.hasPrefix("i:") {
                    unknownIndexes.append(String(tree.dropFirst(2)))
                }
            }
            // An index of a model this handle does not know (another handle's or process's): the
            // longest model name known here or written by the commit that heads it, else the
            // name up to the first colon.
            for tree in unknownIndexes {
                let named = models.union(modelOfTree.values).filter { tree.hasPrefix($0 + ":") }.max { $0.count < $1.count }
                if let name = named ?? tree.split(separator: ":").first.map(String.init) { models.insert(name) }
            }
            // A commit that changed no model's trees (idle-time compaction trimming the file, or
            // moving only the engine's own pages) has nothing to say here.
            if models.isEmpty { return }
            let change = DatabaseChange(version: event.txnid, models: models, isFromOtherProcess: event.isFromOtherProcess)
            queue.async {
                guard active.load(ordering: .sequentiallyConsistent), !store.isClosed else { return }
                block(change)
            }
        }
        // Closing the database ends the observation, as it ends results and object observers:
        // the listener (and the commit watcher it keeps running for other processes' commits)
        // goes then, not when the token is dropped.
        let closing = store.onClose {
            active.store(false, ordering: .sequentiallyConsistent)
            listener.invalidate()
        }
        return NotificationToken {
            active.store(false, ordering: .sequentiallyConsistent)
            listener.invalidate()
            closing.invalidate()
        }
    }

    /// `observeCommits` as an `AsyncSequence`; it finishes when the database is closed.
    ///
    /// ```swift
    /// for await change in db.commits { print(change.version, change.models) }
    /// ```
    public var commits: AsyncStream<DatabaseChange> {
        AsyncStream { continuation in
            let queue = DispatchQueue(label: "strata.commits")
            let token = observeCommits(on: queue) { continuation.yield($0) }
            // Behind the changes already queued (which a closed store no longer delivers).
            let closing = store.onClose { queue.async { continuation.finish() } }
            continuation.onTermination = { _ in
                token.invalidate()
                closing.invalidate()
            }
        }
    }
}

/// Watches one object's record. `@unchecked Sendable`: `last` is touched only on `worker`, a serial
/// queue; the rest is immutable or atomic.
final class ObjectObserver<M: Model>: @unchecked Sendable {
    private let db: Database
    private let key: M.ID
    private let queue: DispatchQueue
    private let block: @Sendable (ObjectChange<M>, _ isLast: Bool) -> Void
    private var worker: DispatchQueue { db.observerQueue }
    private let pending = Atomic<Bool>(false)
    private let lifecycle = ObservationState()
    /// The version `last` was read at, and whether a read is under way (see `mayHide`).
    private let readVersion = Atomic<UInt64>(0)
    private let reading = Atomic<Bool>(false)
    /// Field id → hash of its stored bytes (nil when the object does not exist).
    private var last: [Int: Int]?
    /// A read has succeeded, so `last` is what the object was (worker only). Until then (the first
    /// read failed: every reader slot in use, say) `last` says nothing, and the next read reports
    /// what it finds as the change the failed read left unseen.
    private var known = false
    /// The last delivery was the `.error` of a value that did not decode (worker only): the
    /// object's deletion is then news even though `last` says it was not there, so that the
    /// error clears. (Not after other errors: a read that failed says nothing of the object, and
    /// one that never existed is not deleted.)
    private var undecodableShown = false
    /// A commit listed this object's key since the last read began: set by the listener, taken
    /// by `refresh`. An object found missing after a failed first read was deleted only then.
    private let keyListed = Atomic<Bool>(false)
    /// Reads in a row thrown away because a writer in another process overtook a read-only
    /// store's snapshot (worker only).
    private var changedReads = 0
    /// The first read has run (worker only); a refresh a commit asked for before it waits for it.
    private var firstReadDone = false
    private var refreshAfterFirstRead = false
    /// For `LiveObject`: told the object as first read (nil if absent), before any change; and
    /// then an object that appears is reported (`.changed` with every field) and a deletion
    /// does not end the observation. Nil for `observe(_:key:)`.
    private let initial: (@Sendable (M?) -> Void)?

    init(
        db: Database, key: M.ID, queue: DispatchQueue, initial: (@Sendable (M?) -> Void)? = nil,
        block: @escaping @Sendable (ObjectChange<M>, _ isLast: Bool) -> Void
    ) {
        self.db = db
        self.key = key
        // A serial queue in front of the caller's: on a concurrent queue, deliveries would run at
        // once and finish out of order (a stale object last).
        self.queue = DispatchQueue(label: "strata.object-observer", target: queue)
        self.initial = initial
        self.block = block
    }

    func start() {
        guard let info = try? db.info(M.self) else {
            let error = StrataError.unsupportedType(model: M.modelName, field: "(model)", reason: "\(M.self) was not passed to Database(models:)")
            queue.async { [self] in if lifecycle.isWanted { block(.error(error), true) } }
            return
        }
        let tree = info.recordTree
        // A commit that lists its changed keys and not this one cannot have changed the object.
        let keyBytes = try? info.keyBytes(key)
        // Until the first read has run, an event spanning several commits may hide a change after
        // the baseline taken below (`mayHide`): as if a read were under way.
        reading.store(true, ordering: .sequentiallyConsistent)
        let token = db.store.addCommitListener { [weak self] event in
            guard let self, event.changedTrees.contains(tree) else { return }
            if let keyBytes, let changed = event.changedKeys[tree], !changed.contains(keyBytes), !self.mayHide(event) { return }
            if let keyBytes, event.changedKeys[tree]?.contains(keyBytes) == true { self.keyListed.store(true, ordering: .sequentiallyConsistent) }
            if self.pending.exchange(true, ordering: .sequentiallyConsistent) { return }
            self.worker.async {
                self.pending.store(false, ordering: .sequentiallyConsistent)
                self.refresh(initial: false)
            }
        }
        lifecycle.listen(with: token)
        lifecycle.endWhenClosed(db.store, on: worker) { [self] in
            queue.async { [self] in if lifecycle.isWanted { block(.error(.databaseClosed), true) } }
        }
        // The first read is of the commit that was newest as `observe` was called, taken now: read
        // later on the worker (behind other observers' first evaluations), it would take in a
        // commit made meanwhile as the starting point and never report it (a deletion included).
        objectObserverStartHook.withLock { $0 }?(db.store)
        let baseline = try? db.snapshot()
        worker.async { self.refresh(initial: true, at: baseline) }
    }

    func invalidate() { lifecycle.invalidate() }

    private var isLive: Bool { lifecycle.isLive(db.store) }

    /// Whether an event that does not list the key may still hide a change to it: one spanning
    /// several commits (another process's) lists the keys whose value differs between its ends,
    /// so a change undone inside it is not listed, and the last read may have been inside it. (A
    /// read that begins after this check reads at least the event's version.)
    private func mayHide(_ event: CommitEvent) -> Bool {
        if event.txnid <= event.previousVersion + 1 { return false }
        if reading.load(ordering: .sequentiallyConsistent) { return true }
        let read = readVersion.load(ordering: .sequentiallyConsistent)
        return event.previousVersion < read && read < event.txnid
    }

    /// Reads the object (at `baseline`, else at the newest commit) and delivers what changed.
    private func refresh(initial: Bool, at baseline: Snapshot? = nil) {
        guard lifecycle.shouldCompute(db.store) else { return lifecycle.stopListening() }
        // A commit between the listener's start and the baseline asked for a refresh before the
        // first read was queued: it runs after it, at a newer commit (found by the review of
        // 2026-12-06: it ran first, against no read, and reported a change the starting point held).
        if !initial && !firstReadDone {
            refreshAfterFirstRead = true
            return
        }
        reading.store(true, ordering: .sequentiallyConsistent)
        var retrying = false
        defer {
            reading.store(false, ordering: .sequentiallyConsistent)
            if initial && !retrying {
                firstReadDone = true
                if refreshAfterFirstRead {
                    refreshAfterFirstRead = false
                    worker.async { self.refresh(initial: false) }
                }
            }
        }
        let listed = keyListed.exchange(false, ordering: .sequentiallyConsistent)
        var read: Snapshot?
        /// The record's value is being decoded, or failed to (`decoded()` below).
        var failedToDecode = false
        do {
            let info = try db.info(M.self)
            let snapshot = try baseline ?? db.snapshot()
            read = snapshot
            readVersion.store(snapshot.version, ordering: .sequentiallyConsistent)
            let keyBytes = try info.keyBytes(key)
            let record = try wrapStorage { try snapshot.txn.tree(info.recordTree)?.view(keyBytes) }
            guard let record else {
                try snapshot.validate()  // a read-only store's snapshot may have been overtaken
                // Deleted: it was there at the last read, or, when no read succeeded yet, a
                // commit listed its key since (it was there before that commit).
                if !initial && (last != nil || (!known && listed) || undecodableShown) {
                    if self.initial == nil { end(.deleted) } else { deliver(.deleted) }
                }
                if initial { deliverInitial(nil) }
                last = nil
                known = true
                return
            }
            var fields: [Int: Int] = [:]
            for entry in try FieldTable(record).entries {
                var hasher = Hasher()
                hasher.combine(entry.isNil)
                hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: record[entry.start..<entry.end]))
                fields[entry.id] = hasher.finalize()
            }
            try snapshot.validate()
            changedReads = 0
            let wasKnown = known
            known = true
            // A value that does not decode is an `.error`, and `last` stays what it was (the
            // fields of the object last delivered, or nil when none was): the next change lists
            // the fields changed since then, not since the value that failed; on every path.
            defer { if !failedToDecode { last = fields } }
            func decoded() throws -> M {
                failedToDecode = true
                let object = try snapshot.checked { try info.decode(record) }
                failedToDecode = false
                return object
            }
            if initial {
                if self.initial != nil { deliverInitial(try decoded()) }
                return
            }
            guard let previous = last else {
                // It appeared: only a live object reports that (with every field). Or no read
                // succeeded before, so what changed is unknown: every field, as the change the
                // `.error` of the failed read promised.
                if self.initial != nil || !wasKnown {
                    deliver(.changed(try decoded(), fields: info.stored.object.fields.filter { !$0.removed }.map(\.name)))
                }
                return
            }
            let changedIDs = Set(fields.keys).union(previous.keys).filter { fields[$0] != previous[$0] }
            if changedIDs.isEmpty { return }
            let names = info.stored.object.fields.filter { changedIDs.contains($0.id) && !$0.removed }.map(\.name)
            deliver(.changed(try decoded(), fields: names))
        } catch {
            // A writer in another process overtook a read-only store's snapshot (whatever the
            // error its reused pages caused): read a newer one. (`last` may hold what the
            // overtaken read found; only a first read, which sets it again, can meet this: a
            // read-only database hears no later commits.)
            let overtaken = error.isFileChangedDuringRead || read.map { !$0.txn.isValid } ?? false
            if overtaken && changedReads < Database.changedReadRetries {
                changedReads += 1
                retrying = true
                return db.attemptReporting(after: changedReads) { refresh(initial: initial) }
            }
            changedReads = 0
            // The listing is still news for the next read, while no read has succeeded.
            if listed && !known { keyListed.store(true, ordering: .sequentiallyConsistent) }
            deliver(.error(error as? StrataError ?? .invalidQuery("\(error)")))
            if failedToDecode { undecodableShown = true }
        }
    }

    /// Delivers the final change. `finish()` drops the close handler, so a close that comes now
    /// sends nothing: this change must be delivered even then (only an invalidated token stops
    /// it), or a stream of changes would never finish.
    private func end(_ change: ObjectChange<M>) {
        lifecycle.finish()
        queue.async { [self] in
            guard lifecycle.isWanted else { return }
            block(change, true)
        }
    }

    private func deliver(_ change: ObjectChange<M>) {
        if case .error = change {} else { undecodableShown = false }
        queue.async { [self] in
            guard isLive else { return }
            block(change, false)
        }
    }

    private func deliverInitial(_ object: M?) {
        undecodableShown = false
        guard let initial else { return }
        queue.async { [self] in
            guard isLive else { return }
            initial(object)
        }
    }
}

/// Called by `ObjectObserver.start` between adding its commit listener and taking its baseline,
/// with the observed database's store: tests make a commit there (on their own store only: tests
/// of other suites start observers meanwhile). Nil in production.
let objectObserverStartHook = Mutex<(@Sendable (Store) -> Void)?>(nil)
