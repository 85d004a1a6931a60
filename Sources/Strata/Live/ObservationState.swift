import Dispatch
import Synchronization
import StrataStorage

/// What every observer shares: what ends its subscriptions (to commits, to the database's close),
/// and the flags that stop it. Stopping is idempotent and safe from any thread.
final class ObservationState: Sendable {
    /// What ends the subscriptions; nil once they were ended (a later one is ended at once).
    private let stops = Mutex<[@Sendable () -> Void]?>([])
    /// Set by the token: nothing more is delivered.
    private let invalidated = Atomic<Bool>(false)
    /// Set after a final delivery (an error, a deletion): nothing more is computed.
    private let finished = Atomic<Bool>(false)

    func listen(with token: CommitListenerToken) { listen { token.invalidate() } }

    /// Keeps `stop`, which ends one of the observer's subscriptions.
    func listen(stop: @escaping @Sendable () -> Void) {
        let ended = stops.withLock { stops -> Bool in
            guard stops != nil else { return true }
            stops?.append(stop)
            return false
        }
        if ended { stop() }
    }

    /// Ends the observation when `store` closes (or at once, if it is closed): nothing more is
    /// computed, and `tell` runs once on `worker`, after whatever was computing there, unless the
    /// token was invalidated first. No commit can come after a close, so without this a stream of
    /// changes would wait for ever.
    func endWhenClosed(_ store: Store, on worker: DispatchQueue, tell: @escaping @Sendable () -> Void) {
        let token = store.onClose { [self] in
            worker.async { [self] in
                // Not after a final change the worker found first (a deletion read as the store
                // closed): exactly one final delivery.
                if finish(), isWanted { tell() }
            }
        }
        listen { token.invalidate() }
    }

    /// The token's `invalidate()`.
    func invalidate() {
        invalidated.store(true, ordering: .sequentiallyConsistent)
        stopListening()
    }

    /// Ends computing after a final change; that change is still delivered. False when the
    /// observation had ended already.
    @discardableResult
    func finish() -> Bool {
        let already = finished.exchange(true, ordering: .sequentiallyConsistent)
        stopListening()
        return !already
    }

    func stopListening() {
        let ending = stops.withLock { stops -> [@Sendable () -> Void] in
            defer { stops = nil }
            return stops ?? []
        }
        for stop in ending { stop() }
    }

    /// Whether the observer still wants deliveries (its token was not invalidated).
    var isWanted: Bool { !invalidated.load(ordering: .sequentiallyConsistent) }

    /// Whether deliveries may still run (not invalidated, database open).
    func isLive(_ store: Store) -> Bool { isWanted && !store.isClosed }

    /// Whether more work should be computed.
    func shouldCompute(_ store: Store) -> Bool { isLive(store) && !finished.load(ordering: .sequentiallyConsistent) }
}
