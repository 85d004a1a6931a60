import Synchronization

/// What a commit changed, as listeners see it.
public struct CommitEvent: Sendable, Equatable {
    /// The commit's transaction id (the version new snapshots see).
    public let txnid: UInt64
    /// Names of the trees the commit wrote, created or dropped.
    public let changedTrees: Set<String>
    /// For each changed tree whose changes were few enough to list (up to 10,000 keys, and not
    /// dropped), the keys written or deleted. A changed tree missing here may have changed anywhere.
    public let changedKeys: [String: Set<[UInt8]>]
}

/// Listeners of the commits made through any handle of one file in this process. Commits made by
/// other processes are not reported (they would need a wake-up channel across processes).
final class CommitListeners: Sendable {
    private let listeners = Mutex<(next: UInt64, all: [UInt64: @Sendable (CommitEvent) -> Void])>((1, [:]))

    func add(_ listener: @escaping @Sendable (CommitEvent) -> Void) -> UInt64 {
        listeners.withLock { state in
            let id = state.next
            state.next += 1
            state.all[id] = listener
            return id
        }
    }

    var count: Int { listeners.withLock { $0.all.count } }

    func remove(_ id: UInt64) {
        _ = listeners.withLock { $0.all.removeValue(forKey: id) }
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
    /// Calls `listener` after every commit made through any handle of this file in this process,
    /// on the committing thread while the writer lock is still held: it must only hand the event
    /// off (to a queue), never wait. Commits by other processes are not reported.
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
