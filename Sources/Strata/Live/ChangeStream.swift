import Synchronization

/// The hand-over between an observer and the consumer of its `changes` stream, pulled one change
/// at a time: the observer parks a change here, and it counts as taken in (its `done` runs) only
/// when the consumer's `next()` takes it. So commits that land while the consumer is busy merge
/// into one change, as they do for a slow `observe` block; pushing each change into an
/// `AsyncStream`'s buffer instead kept one per commit, and with it one snapshot (a reader slot)
/// per commit, until every read of the file failed.
final class ChangeMailbox<Element: Sendable>: Sendable {
    private struct Parked {
        var element: Element
        var isLast: Bool
        var done: @Sendable () -> Void
    }

    private struct State {
        /// Changes not yet taken: one at most from the observer, which waits for `done`, plus the
        /// final error that a close hands over whatever is in flight.
        var parked: [Parked] = []
        /// The consumers waiting in `next()`, first come first served: the stream is `Sendable`,
        /// and two loops over it each wait here (one slot let the second loop's wait replace the
        /// first's, which then never ended, not even when the database closed).
        var waiters: [CheckedContinuation<Element?, Never>] = []
        /// The last change was taken, or the consumer went away: `next()` returns nil.
        var finished = false
    }

    /// What to do, decided under the lock and done outside it.
    private enum Action {
        /// Hand the change to the first waiting consumer; the others (after the last change) end.
        case resume(CheckedContinuation<Element?, Never>, ending: [CheckedContinuation<Element?, Never>])
        /// Give the consumer this parked change.
        case take(Parked)
        /// Kept for the consumer's next `next()`.
        case parked
        /// Nobody will take it.
        case drop
        /// No more changes.
        case end
        /// The consumer waits for the next change.
        case wait
    }

    private let state = Mutex(State())
    /// Keeps the observation alive as long as the stream (set once, just after `init`).
    private let token = Mutex<NotificationToken?>(nil)

    func keep(_ observation: NotificationToken) {
        let finished = state.withLock { $0.finished }
        if finished { observation.invalidate() } else { token.withLock { $0 = observation } }
    }

    /// From the observer: hands over a change; `done` runs once the consumer took it (at once,
    /// if the consumer is gone).
    func put(_ element: Element, isLast: Bool, done: @escaping @Sendable () -> Void) {
        let action = state.withLock { state -> Action in
            if state.finished { return .drop }
            if !state.waiters.isEmpty, state.parked.isEmpty {
                let waiter = state.waiters.removeFirst()
                var ending: [CheckedContinuation<Element?, Never>] = []
                if isLast {
                    state.finished = true
                    swap(&ending, &state.waiters)
                }
                return .resume(waiter, ending: ending)
            }
            state.parked.append(Parked(element: element, isLast: isLast, done: done))
            return .parked
        }
        switch action {
        case .resume(let waiter, let ending):
            done()
            waiter.resume(returning: element)
            for other in ending { other.resume(returning: nil) }
            if isLast { end() }
        case .drop:
            done()
        case .parked, .take, .end, .wait:
            break
        }
    }

    /// From a consumer: the next change, waiting for one; nil after the last.
    func next() async -> Element? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Element?, Never>) in
            let action = state.withLock { state -> Action in
                if !state.parked.isEmpty {
                    let first = state.parked.removeFirst()
                    if first.isLast { state.finished = true }
                    return .take(first)
                }
                if state.finished { return .end }
                state.waiters.append(continuation)
                return .wait
            }
            switch action {
            case .take(let parked):
                parked.done()
                continuation.resume(returning: parked.element)
                if parked.isLast { end() }
            case .end:
                continuation.resume(returning: nil)
            case .wait, .resume, .parked, .drop:
                break
            }
        }
    }

    /// A consumer went away (its task was cancelled): ends the observation, as a cancelled
    /// `AsyncStream` loop ends its stream, and every waiting `next()` returns nil.
    func cancel() {
        let (waiters, parked) = state.withLock { state -> ([CheckedContinuation<Element?, Never>], [Parked]) in
            state.finished = true
            defer {
                state.waiters = []
                state.parked = []
            }
            return (state.waiters, state.parked)
        }
        for change in parked { change.done() }
        for waiter in waiters { waiter.resume(returning: nil) }
        end()
    }

    /// Stops the observation (nothing more will be taken).
    private func end() {
        token.withLock { $0 }?.invalidate()
    }

    deinit {
        // The stream was dropped without being cancelled: the observation ends with it.
        token.withLock { $0 }?.invalidate()
    }
}
