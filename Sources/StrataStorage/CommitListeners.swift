import Synchronization

/// What a commit changed, as listeners see it: one commit of this process, or the commits of
/// other processes since this process last looked (CommitWatch.swift).
///
/// ```swift
/// let token = store.addCommitListener { event in
///     if event.changedTrees.contains("users") { queue.async { reloadUsers() } }
/// }
/// ```
public struct CommitEvent: Sendable, Equatable {
    /// The commit's transaction id (the version new snapshots see); for commits of other
    /// processes, the newest of them.
    public let txnid: UInt64
    /// Names of the trees the commit wrote, created or dropped.
    public let changedTrees: Set<String>
    /// For each changed tree whose changes were few enough to list (up to 10,000 keys, and, for a
    /// commit of this process, not dropped), the keys written or deleted. A changed tree missing
    /// here may have changed anywhere.
    public let changedKeys: [String: Set<[UInt8]>]
    /// The version the changes are relative to: `txnid - 1` for a commit of this process; for
    /// commits of other processes, the newest version this process had accounted for before them.
    /// Every commit in `previousVersion + 1 ... txnid` is covered by this event.
    public let previousVersion: UInt64
    /// True when the commits were made by other processes. Their changes were found by comparing
    /// the two snapshots (`ReadTransaction.forEachChange`): the keys listed are exactly those whose
    /// value differs between `previousVersion` and `txnid`, and commits that landed close together
    /// arrive as one event. So a key changed and changed back within the span is not listed: a
    /// listener that read a version strictly inside the span (after `previousVersion`, before
    /// `txnid`) must look again rather than trust the keys.
    public let isFromOtherProcess: Bool

    /// A commit of this process.
    init(txnid: UInt64, changedTrees: Set<String>, changedKeys: [String: Set<[UInt8]>]) {
        self.init(txnid: txnid, changedTrees: changedTrees, changedKeys: changedKeys, previousVersion: txnid > 0 ? txnid - 1 : 0, isFromOtherProcess: false)
    }

    init(txnid: UInt64, changedTrees: Set<String>, changedKeys: [String: Set<[UInt8]>], previousVersion: UInt64, isFromOtherProcess: Bool) {
        self.txnid = txnid
        self.changedTrees = changedTrees
        self.changedKeys = changedKeys
        self.previousVersion = previousVersion
        self.isFromOtherProcess = isFromOtherProcess
    }
}

/// Listeners of the commits made to one file: through any handle of it in this process (called by
/// the committing thread, which for idle-time compaction is a background thread) and by other
/// processes (called by the commit watcher's thread).
final class CommitListeners: Sendable {
    private let listeners = Mutex<(next: UInt64, all: [UInt64: @Sendable (CommitEvent) -> Void])>((1, [:]))
    /// Told when the first listener arrives and when the last one leaves (the commit watcher).
    private let onChange = Mutex<ChangeHook?>(nil)

    func add(_ listener: @escaping @Sendable (CommitEvent) -> Void) -> UInt64 {
        let (id, count) = listeners.withLock { state in
            let id = state.next
            state.next += 1
            state.all[id] = listener
            return (id, state.all.count)
        }
        if count == 1 { onChange.withLock { $0 }?.call(count) }
        return id
    }

    var count: Int { listeners.withLock { $0.all.count } }

    func remove(_ id: UInt64) {
        // The listener is handed out of the lock and released after it: its closure may hold the
        // last reference to another listener's token, whose deinit removes that one (locking this
        // Mutex again on the same thread stops the process).
        let (removed, count) = listeners.withLock { state in (state.all.removeValue(forKey: id), state.all.count) }
        if removed != nil && count == 0 { onChange.withLock { $0 }?.call(count) }
    }

    /// Sets what is told of the first listener arriving and the last leaving.
    func setOnChange(_ body: @escaping @Sendable (_ count: Int) -> Void) {
        let hook = ChangeHook(body)
        onChange.withLock { $0 = hook }
    }

    /// Boxed for the reason `PublishHook` is.
    private final class ChangeHook: Sendable {
        let call: @Sendable (Int) -> Void
        init(_ call: @escaping @Sendable (Int) -> Void) { self.call = call }
    }

    /// Calls every listener on the committing thread, outside the lock, with the event `make`
    /// builds (only when there is a listener to hear it).
    func notify(_ make: () -> CommitEvent) {
        let current = listeners.withLock { Array($0.all.values) }
        if current.isEmpty { return }
        let event = make()
        for listener in current { listener(event) }
    }
}

/// Stops a commit listener when invalidated or released.
///
/// ```swift
/// var token: CommitListenerToken? = store.addCommitListener { print($0.txnid) }
/// token = nil   // the listener is gone, like token?.invalidate()
/// ```
public final class CommitListenerToken: Sendable {
    private let listeners: CommitListeners
    private let id: UInt64
    private let active = Atomic<Bool>(true)

    init(listeners: CommitListeners, id: UInt64) {
        self.listeners = listeners
        self.id = id
    }

    /// Stops the listener. Safe to call more than once.
    public func invalidate() {
        if active.exchange(false, ordering: .sequentiallyConsistent) { listeners.remove(id) }
    }

    deinit { invalidate() }
}

extension Store {
    /// Calls `listener` after every commit to this file. Commits made through any handle of it in
    /// this process are reported on the committing thread while the writer lock is still held: the
    /// listener must only hand the event off (to a queue), never wait. Commits made by other
    /// processes are reported on the commit watcher's thread soon after (a futex on the lock file
    /// wakes it; no polling), with `isFromOtherProcess` set and their changed keys found by
    /// comparing snapshots; a process that dies mid-transaction commits nothing and reports
    /// nothing. (A read-only or in-memory store hears only its own process's commits.)
    ///
    /// ```swift
    /// let token = store.addCommitListener { event in
    ///     queue.async { print("committed", event.txnid, event.changedTrees) }
    /// }
    /// ```
    public func addCommitListener(_ listener: @escaping @Sendable (CommitEvent) -> Void) -> CommitListenerToken {
        CommitListenerToken(listeners: env.commitListeners, id: env.commitListeners.add(listener))
    }

    /// Commit listeners registered on this file in this process (observers included); for
    /// diagnostics and leak checks.
    public var commitListenerCount: Int { env.commitListeners.count }

    /// Whether `close()` was called on this handle.
    public var isClosed: Bool { closedFlag }
}
