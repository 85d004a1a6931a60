import Synchronization
import StrataStorage

/// What every observer shares: its commit listener, and the flags that stop it. Stopping is
/// idempotent and safe from any thread.
final class ObservationState: Sendable {
    private let listener = Mutex<(@Sendable () -> Void)?>(nil)
    /// Set by the token: nothing more is delivered.
    private let invalidated = Atomic<Bool>(false)
    /// Set after a final delivery (an error, a deletion): nothing more is computed.
    private let finished = Atomic<Bool>(false)

    func listen(with token: CommitListenerToken) { listen { token.invalidate() } }

    /// Keeps `stop`, which ends the observer's subscription to commits.
    func listen(stop: @escaping @Sendable () -> Void) { listener.withLock { $0 = stop } }

    /// The token's `invalidate()`.
    func invalidate() {
        invalidated.store(true, ordering: .sequentiallyConsistent)
        stopListening()
    }

    /// Ends computing after a final change; that change is still delivered.
    func finish() {
        finished.store(true, ordering: .sequentiallyConsistent)
        stopListening()
    }

    func stopListening() {
        let stop = listener.withLock { stop -> (@Sendable () -> Void)? in
            defer { stop = nil }
            return stop
        }
        stop?()
    }

    /// Whether deliveries may still run (not invalidated, database open).
    func isLive(_ store: Store) -> Bool { !invalidated.load(ordering: .sequentiallyConsistent) && !store.isClosed }

    /// Whether more work should be computed.
    func shouldCompute(_ store: Store) -> Bool { isLive(store) && !finished.load(ordering: .sequentiallyConsistent) }
}
