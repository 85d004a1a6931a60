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
// starts again after the next commit that leaves holes.

/// Idle-time compaction's state, one per open file (in `Environment`).
struct IdleCompactionState {
    /// A timer thread is waiting for the writes to stop (at most one per file).
    var pending = false
    /// When the last commit made through this process ended.
    var lastCommit = ContinuousClock.now
    /// The page count at which the last idle episode could neither move nor trim anything (a
    /// snapshot held the pages, or what is left cannot move), and the snapshots that held free
    /// pages then: commits that leave the file at that size while those snapshots all live (or,
    /// when none held any, at all) do not arm the
    /// timer again, so that an idle file is not rewritten for nothing. Once one of them ends, the
    /// pages it held may move (they stayed held for good before: a quiet file kept its holes).
    var stuckAt: (pageCount: UInt64, readers: [UInt64])?
}

extension Store {
    /// Called after every commit made through `write`: notes the time, and arms the timer when
    /// the commit left holes and none is armed.
    func noteCommitForIdleCompaction(leavesHoles: Bool, pageCount: UInt64, readers: () -> [UInt64]) {
        let arm = env.idleCompaction.withLock { state -> Bool in
            state.lastCommit = .now
            guard leavesHoles, !state.pending, compaction.isEnabled, compaction.idleDelay != nil else { return false }
            if let stuck = state.stuckAt, stuck.pageCount == pageCount, Set(stuck.readers).isSubset(of: readers()) { return false }
            state.pending = true
            return true
        }
        if arm, !startIdleTimer() {
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

    /// Starts the timer thread. It holds the store and its file only while it looks or makes one
    /// commit, never while it sleeps or between commits, so that releasing the last handle closes
    /// the file soon.
    private func startIdleTimer() -> Bool {
        final class Handles: Sendable {
            weak let store: Store?
            weak let env: Environment?
            init(_ store: Store) {
                self.store = store
                self.env = store.env
            }
        }
        let handles = Handles(self)
        return startThread(name: "strata.compact") {
            while true {
                switch Store.idleStep(handles.store, handles.env) {
                case .stop:
                    return
                case .sleep(let wait):
                    sleep(for: wait)
                case .compact(let since):
                    var progressed = false
                    var commits = 0
                    while commits < 10_000 {
                        // The store is held only inside `step` (its file closes once the last
                        // handle is released, which the wait below must not delay).
                        func step() -> (moved: Bool, held: [UInt64])? {
                            guard let store = handles.store, let (moved, readers) = store.idleCompactionCommit(since: since) else { return nil }
                            if moved { return (true, []) }
                            if !progressed { store.noteStuck(readers: readers) }
                            return (false, readers)
                        }
                        guard let (moved, held) = step() else { return }
                        commits += 1
                        if moved {
                            progressed = true
                            continue
                        }
                        // Nothing (more) moved or trimmed. If snapshots held free pages, look again
                        // once one of them has ended, as long as no commit comes (one that leaves
                        // holes arms the timer anew): the writes have stopped, so no commit would.
                        // Also after commits that moved pages: the holes a snapshot held stayed
                        // for good when the episode ended there.
                        if held.isEmpty || !Store.waitForAnyToEnd(held, handles.store, since: since) { return }
                    }
                    return
                }
            }
        }
    }

    /// One look of the timer thread.
    private static func idleStep(_ store: Store?, _ env: Environment?) -> IdleStep {
        guard let store, !store.closedFlag, let delay = store.compaction.idleDelay else {
            env?.idleCompaction.withLock { $0.pending = false }
            return .stop
        }
        return store.env.idleCompaction.withLock { state -> IdleStep in
            let quiet = ContinuousClock.now - state.lastCommit
            if quiet < delay { return .sleep(delay - quiet) }
            state.pending = false
            return .compact(since: state.lastCommit)
        }
    }

    /// The first idle commit of an episode moved and trimmed nothing: remember the page count and
    /// the snapshots that held free pages then (none when no free page was held: then nothing
    /// re-arms the timer at that page count).
    private func noteStuck(readers: [UInt64]) {
        let count = try? read { $0.meta.pageCount }
        env.idleCompaction.withLock { $0.stuckAt = count.map { ($0, readers) } }
    }

    /// Waits, looking every `idleDelay` (for at most ten minutes), until one of the snapshots
    /// `held` has ended: true then, false when the store went away or was closed, a commit was
    /// made through this process since `since`, or the time ran out. Holds the store only while
    /// it looks.
    private static func waitForAnyToEnd(_ held: [UInt64], _ weakStore: @autoclosure () -> Store?, since: ContinuousClock.Instant) -> Bool {
        let deadline = ContinuousClock.now + .seconds(600)
        enum Look { case ended, stop, wait(Duration) }
        // One look, in a function of its own so that the store is released before the sleep.
        func look() -> Look {
            guard let store = weakStore(), !store.closedFlag, let delay = store.compaction.idleDelay,
                store.env.idleCompaction.withLock({ $0.lastCommit }) == since
            else { return .stop }
            let live = Set(store.env.readers.liveReaders().map(\.txnid))
            return Set(held).isSubset(of: live) ? .wait(delay) : .ended
        }
        while ContinuousClock.now < deadline {
            switch look() {
            case .ended: return true
            case .stop: return false
            case .wait(let delay): sleep(for: delay)
            }
        }
        return false
    }

    /// One compaction commit, if one would move or trim pages and the writes are still stopped
    /// (no commit has ended since `since`, no thread of this process is writing or waiting to).
    /// Returns whether it moved or trimmed pages, with the snapshots live as it looked when it did
    /// not and snapshots held free pages (empty when none did), or nil when the episode should end.
    func idleCompactionCommit(since: ContinuousClock.Instant) -> (moved: Bool, readers: [UInt64])? {
        if closedFlag { return nil }
        let quiet = { [env] in
            env.activeWriters.load(ordering: .relaxed) == 0 && env.idleCompaction.withLock { $0.lastCommit } == since
        }
        guard quiet() else { return nil }  // a commit since: it armed the timer again if it left holes
        let done = try? withWriterLocks(waitForOtherProcesses: false) { () throws -> (moved: Bool, readers: [UInt64])? in
            // Looked at again under the lock: a writer may have come while this thread waited.
            guard quiet() else { return nil }
            let txn = try WriteTransaction(env: env, durability: durability, memory: transactionMemory, compaction: compaction)
            do {
                let readers = txn.allocator.sortedReaders
                guard try txn.idleCompactionIsDue() else {
                    // (`idleCompactionIsDue` loaded the whole free list.)
                    let held = txn.allocator.chunks.contains { !$0.held.isEmpty }
                    txn.abort()
                    return (false, held ? readers : [])
                }
                txn.compactNow = true
                txn.cutsToFit = true
                try txn.commit()
                return (txn.movedPages > 0 || txn.trimmedPages > 0, readers)
            } catch {
                txn.abort()
                throw error
            }
        }
        // nil: an error, or another process is writing (its commits compact too).
        return done ?? nil
    }
}

private func sleep(for duration: Duration) {
    let (seconds, attoseconds) = duration.components
    // At most a second at a time: the caller looks again.
    let micros = seconds >= 1 ? 1_000_000 : max(0, attoseconds) / 1_000_000_000_000
    usleep(UInt32(micros))
}
