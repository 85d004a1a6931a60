#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Idle-time compaction: the file shrinks once the writing stops.
//
// A commit compacts only a little (Compaction.swift: at most 16 × `pagesPerCommit` pages moved),
// so that its own cost stays predictable. After a bulk delete that is not enough: every delete
// commit copies most leaves, the old copies are freed, and when the deleting stops the live pages
// are spread over a file twice their size, with nothing left to write that would move them. So a
// commit that leaves the file with holes (`WriteTransaction.leavesHoles`) starts a timer; once no
// commit has been made through this process for `Compaction.idleDelay`, a background thread makes
// compaction commits until the file is compact. They are ordinary commits (crash-safe, invisible
// to readers' snapshots) made under the same writer locks; the thread gives way as soon as a
// thread of this process waits to write, or another process holds the file's writer lock, and
// tries again once the writes stop again (a cut-short episode leaves its holes armed). One thread
// per file, shared by its handles in this process: it works through the handle whose commit armed
// it last, and holds that handle only while it looks or commits.

/// Idle-time compaction's state, one per open file (in `Environment`).
struct IdleCompactionState {
    /// A timer thread exists (at most one per file). It clears this, under the lock, only as it
    /// decides to exit, so that a commit either sees it set (and leaves the work to that thread
    /// through `armed`) or starts a new one.
    var pending = false
    /// Some commit left holes that no idle episode has dealt with yet: the thread compacts once
    /// the writes stop. Set again when an episode is cut short (a writer came, another process
    /// held the writer lock): its holes are still there.
    var armed = false
    /// The handle whose commit armed the timer last: the thread compacts through it (with its
    /// options), so that closing another handle of the file does not end the work.
    weak var owner: Store?
    /// When the last commit made through this process ended.
    var lastCommit = ContinuousClock.now
    /// The page count at which the last idle episode could neither move nor trim anything (a
    /// snapshot held the pages, or what is left cannot move), and the snapshots that held free
    /// pages then: commits that leave the file at that size while those snapshots all live (or,
    /// when none held any, at all) do not arm the timer again, so that an idle file is not
    /// rewritten for nothing — unless the commit itself freed much (a bulk delete leaves the page
    /// count as it was). Once one of those snapshots ends, the pages it held may move (they
    /// stayed held for good before: a quiet file kept its holes).
    var stuckAt: (pageCount: UInt64, readers: [UInt64])?
    /// The timer thread's id while it runs (`currentThreadID`), for tests that measure its CPU time.
    var threadID: Int?
    /// Looks at the reader table while waiting for snapshots to end, for tests of the backoff.
    var snapshotLooks = 0
}

extension Store {
    /// The idle compaction thread's id while one runs for this file (for tests of its CPU time).
    package var idleCompactionThreadID: Int? { env.idleCompaction.withLock { $0.threadID } }

    /// How many times the idle thread has looked for a held snapshot's end (for tests).
    package var idleSnapshotLooks: Int { env.idleCompaction.withLock { $0.snapshotLooks } }

    /// Called after every commit made through `write`: notes the time, and arms the timer when
    /// the commit left holes (starting the timer thread when none runs).
    func noteCommitForIdleCompaction(leavesHoles: Bool, freedMuch: Bool, pageCount: UInt64, readers: () -> [UInt64]) {
        let start = env.idleCompaction.withLock { state -> Bool in
            state.lastCommit = .now
            guard leavesHoles, compaction.isEnabled, compaction.idleDelay != nil else { return false }
            if !freedMuch, let stuck = state.stuckAt, stuck.pageCount == pageCount, Set(stuck.readers).isSubset(of: readers()) {
                return false
            }
            state.armed = true
            state.owner = self
            if state.pending { return false }
            state.pending = true
            return true
        }
        if start, !startIdleTimer() {
            env.idleCompaction.withLock { $0.pending = false }  // no thread: the next commit tries again
        }
    }

    /// What the timer thread does next.
    private enum IdleStep {
        case sleep(Duration)
        /// Compact: no commit has ended since `since`.
        case compact(since: ContinuousClock.Instant)
        case stop
    }

    /// What one idle compaction commit found.
    enum IdleCommit {
        case moved
        /// Nothing to move or trim; the snapshots that held free pages then (empty when none did).
        case nothing(held: [UInt64])
        /// A thread of this process is writing or waiting to, a commit was made since the episode
        /// began, or another process holds the writer lock: the holes are still there.
        case cutShort
        /// The store was closed, or the commit failed: the episode ends.
        case failed
    }

    /// Starts the timer thread. It holds the store (the state's `owner`) and its file only while
    /// it looks or makes one commit, never while it sleeps or between commits, so that releasing
    /// the last handle closes the file soon.
    private func startIdleTimer() -> Bool {
        final class Handles: Sendable {
            weak let env: Environment?
            init(_ env: Environment) { self.env = env }
            /// The handle the work is done through, now.
            var store: Store? { env?.idleCompaction.withLock { $0.owner } }
        }
        let handles = Handles(env)
        return startThread(name: "strata.compact") {
            let id = currentThreadID()
            handles.env?.idleCompaction.withLock { $0.threadID = id }
            while true {
                switch Store.idleStep(handles.env) {
                case .stop:
                    return
                case .sleep(let wait):
                    sleep(for: wait)
                case .compact(let since):
                    if !Store.compactWhileIdle(since: since, handles.store) {
                        // Cut short: the holes wait for the next quiet time, looked for no sooner
                        // than a delay from now (another process may hold the lock for long).
                        guard let delay = Store.rearm(handles.env) else { continue }
                        sleep(for: delay)
                    }
                }
            }
        }
    }

    /// Arms the timer again after an episode cut short; returns the delay to wait, nil when the
    /// store has gone. A function of its own so that no reference to the environment or the store
    /// outlives it: one held across the sleep kept the file open after its last handle was
    /// released (debug builds keep locals to the end of their scope).
    private static func rearm(_ env: Environment?) -> Duration? {
        guard let env else { return nil }
        let owner = env.idleCompaction.withLock { $0.owner }
        guard let delay = owner?.compaction.idleDelay else { return nil }
        env.idleCompaction.withLock { $0.armed = true }
        return delay
    }

    /// One look of the timer thread. It exits (clearing `pending` under the lock, so that the
    /// next commit that leaves holes starts another) once no commit has armed it since its last
    /// episode began.
    private static func idleStep(_ env: Environment?) -> IdleStep {
        guard let env else { return .stop }
        // (Taken out first: were the lock's the last reference, the store would go inside it.)
        let owner = env.idleCompaction.withLock { $0.owner }
        return env.idleCompaction.withLock { state -> IdleStep in
            // Another handle armed it between the two looks: look again.
            if state.owner !== owner { return .sleep(.zero) }
            // The handle that armed it last is gone or closed: so is the work (another handle's
            // next commit that leaves holes starts a thread again).
            guard state.armed, let store = owner, !store.closedFlag, let delay = store.compaction.idleDelay else {
                state.pending = false
                state.threadID = nil
                return .stop
            }
            let quiet = ContinuousClock.now - state.lastCommit
            if quiet < delay { return .sleep(delay - quiet) }
            // A writer is at work (its commit notes itself, and it may yet abort): look again.
            if env.activeWriters.load(ordering: .relaxed) > 0 { return .sleep(delay) }
            state.armed = false
            return .compact(since: state.lastCommit)
        }
    }

    /// One idle episode: compaction commits until nothing more moves or trims. Returns false when
    /// it was cut short (its holes are still there), true when it is over: the file is compact,
    /// what is left cannot move (for now), the store went away, or a commit failed. Holds the store
    /// only while it looks or commits.
    private static func compactWhileIdle(since: ContinuousClock.Instant, _ weakStore: @autoclosure () -> Store?) -> Bool {
        var progressed = false
        // The snapshots waited for since the last commit that moved or trimmed anything. A commit
        // that gains nothing after one of them ended waits only for the others, not for the
        // snapshots begun since: those read the episode's own commits (a listener's read after
        // each commit) and hold only what the fruitless commits freed. Waiting for them made the
        // thread commit again and again, at full speed, for as long as an older snapshot lived.
        var waited: Set<UInt64>?
        for _ in 0..<10_000 {
            // (The store is held for this statement only, not through the waits below.)
            let outcome = weakStore()?.idleCompactionCommit(since: since, first: !progressed) ?? .failed
            switch outcome {
            case .moved:
                progressed = true
                waited = nil
            case .cutShort:
                return false
            case .failed:
                return true
            case .nothing(let live):
                // If snapshots held free pages, look again once one of them has ended, as long as
                // no commit comes: the writes have stopped, so no commit would arm the timer. Also
                // after commits that moved pages: the holes a snapshot held stayed for good when
                // the episode ended there.
                let held = waited.map { Set(live).intersection($0) } ?? Set(live)
                waited = held
                if held.isEmpty { return true }
                switch waitForAnyToEnd(held.sorted(), weakStore(), since: since) {
                case .ended: continue
                case .cutShort: return false
                case .over: return true
                }
            }
        }
        return true
    }

    /// How a wait for snapshots to end ended.
    private enum SnapshotWait {
        case ended
        /// A commit was made through this process since the episode began.
        case cutShort
        /// The store went away or was closed.
        case over
    }

    /// Waits until one of the snapshots `held` has ended, looking every `idleDelay` (at most a
    /// second) at first and less often the longer the wait lasts, down to once a second. Holds the
    /// store only while it looks. No time limit: a wait that gave up after ten minutes left the
    /// file holed for good once a snapshot held longer ended (nothing else arms the thread while
    /// the writes have stopped; CI met it when a test's snapshot outlived the limit on a loaded
    /// machine).
    private static func waitForAnyToEnd(_ held: [UInt64], _ weakStore: @autoclosure () -> Store?, since: ContinuousClock.Instant) -> SnapshotWait {
        enum Look { case done(SnapshotWait), wait(Duration) }
        // One look, in a function of its own so that the store is released before the sleep.
        func look() -> Look {
            guard let store = weakStore(), !store.closedFlag, let delay = store.compaction.idleDelay else { return .done(.over) }
            let lastCommit = store.env.idleCompaction.withLock { state in
                state.snapshotLooks += 1
                return state.lastCommit
            }
            if lastCommit != since { return .done(.cutShort) }
            let live = Set(store.env.readers.liveReaders().map(\.txnid))
            return Set(held).isSubset(of: live) ? .wait(delay) : .done(.ended)
        }
        var looks = 0
        while true {
            switch look() {
            case .done(let outcome): return outcome
            case .wait(let delay):
                looks += 1
                sleep(for: Self.backedOff(delay, looks: looks))
            }
        }
    }

    /// The wait before look `looks` + 1 for a snapshot to end: `delay`, doubled every ten looks,
    /// up to a second.
    static func backedOff(_ delay: Duration, looks: Int) -> Duration {
        min(.seconds(1), delay * (1 << min(20, looks / 10)))
    }

    /// One compaction commit, if one would move or trim pages and the writes are still stopped
    /// (no commit has ended since `since`, no thread of this process is writing or waiting to).
    /// When it finds nothing to do on the `first` commit of an episode, it notes the page count and
    /// the snapshots that held free pages (`IdleCompactionState.stuckAt`) under the writer lock, so
    /// that no commit comes between.
    func idleCompactionCommit(since: ContinuousClock.Instant, first: Bool) -> IdleCommit {
        if closedFlag { return .failed }
        let quiet = { [env] in
            env.activeWriters.load(ordering: .relaxed) == 0 && env.idleCompaction.withLock { $0.lastCommit } == since
        }
        guard quiet() else { return .cutShort }
        do {
            let outcome = try withWriterLocks(waitForOtherProcesses: false) { () throws -> IdleCommit in
                // Looked at again under the lock: a writer may have come while this thread waited.
                guard quiet() else { return .cutShort }
                let txn = try WriteTransaction(env: env, durability: durability, memory: transactionMemory, compaction: compaction)
                // Every chunk: those a commit's hint would skip are held, by snapshots this
                // episode must then wait for (`stuckAt`), which it learns from the chunks loaded.
                txn.allocator.scanWithoutHint()
                do {
                    // The snapshots that may hold pages: not the commit log's pin (of a `.noSync`
                    // run, RunPin.swift), which no snapshot's end releases.
                    let live = Set(env.readers.liveReaders().map(\.txnid))
                    let readers = txn.allocator.sortedReaders.filter { live.contains($0) }
                    let noted: [UInt64]
                    if try txn.idleCompactionIsDue() {
                        txn.compactNow = true
                        txn.cutsToFit = true
                        try txn.commit()
                        if txn.movedPages > 0 || txn.trimmedPages > 0 { return .moved }
                        noted = readers
                    } else {
                        // (`idleCompactionIsDue` loaded the whole free list.)
                        noted = txn.allocator.chunks.contains { !$0.held.isEmpty } ? readers : []
                        txn.abort()
                    }
                    if first { env.idleCompaction.withLock { $0.stuckAt = (txn.pageCount, noted) } }
                    return .nothing(held: noted)
                } catch {
                    txn.abort()
                    throw error
                }
            }
            // nil: another process holds the writer lock (its commits compact too).
            return outcome ?? .cutShort
        } catch {
            return .failed
        }
    }
}

private func sleep(for duration: Duration) {
    let (seconds, attoseconds) = duration.components
    // At most a second at a time: the caller looks again.
    let micros = seconds >= 1 ? 1_000_000 : max(0, attoseconds) / 1_000_000_000_000
    usleep(UInt32(micros))
}
