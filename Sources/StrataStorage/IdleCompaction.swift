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
}

extension Store {
    /// Called after every commit made through `write`: notes the time, and arms the timer when
    /// the commit left holes and none is armed.
    func noteCommitForIdleCompaction(leavesHoles: Bool) {
        let arm = env.idleCompaction.withLock { state -> Bool in
            state.lastCommit = .now
            guard leavesHoles, !state.pending, compaction.isEnabled, compaction.idleDelay != nil else { return false }
            state.pending = true
            return true
        }
        if arm, !startIdleTimer() {
            env.idleCompaction.withLock { $0.pending = false }  // no thread: the next commit tries again
        }
    }

    /// Starts the timer thread. It holds the store and its file only while it looks, never while
    /// it sleeps, so that releasing the last handle closes the file at once.
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
                guard let wait = Store.idleWait(handles.store, handles.env) else { return }
                if wait > .zero { sleep(for: wait) }
            }
        }
    }

    /// One look of the timer thread: how long to sleep before looking again, or nil when it is
    /// done (it compacted, or the store is gone).
    private static func idleWait(_ store: Store?, _ env: Environment?) -> Duration? {
        guard let store, !store.closedFlag, let delay = store.compaction.idleDelay else {
            env?.idleCompaction.withLock { $0.pending = false }
            return nil
        }
        let wait = store.env.idleCompaction.withLock { state -> Duration? in
            let quiet = ContinuousClock.now - state.lastCommit
            if quiet < delay { return delay - quiet }
            state.pending = false
            return nil
        }
        if let wait { return wait }
        store.compactWhileIdle()
        return nil
    }

    /// Compaction commits until the file is compact, or until someone else wants to write.
    func compactWhileIdle() {
        let started = env.idleCompaction.withLock { $0.lastCommit }
        for _ in 0..<10_000 {
            if closedFlag || env.writersWaiting.load(ordering: .relaxed) > 0 { return }
            // A commit since: it armed the timer again if it left holes.
            if env.idleCompaction.withLock({ $0.lastCommit }) != started { return }
            guard (try? idleCompactionCommit()) == true else { return }
        }
    }

    /// One compaction commit, if one would move or trim pages. Returns whether it did.
    func idleCompactionCommit() throws -> Bool {
        let done = try withWriterLocks(waitForOtherProcesses: false) { () throws -> Bool in
            let txn = try WriteTransaction(env: env, durability: durability, memory: transactionMemory, compaction: compaction)
            do {
                guard try txn.idleCompactionIsDue() else {
                    txn.abort()
                    return false
                }
                txn.compactNow = true
                try txn.commit()
                return txn.movedPages > 0 || txn.trimmedPages > 0
            } catch {
                txn.abort()
                throw error
            }
        }
        return done ?? false  // nil: another process is writing; its commits compact too
    }
}

private func sleep(for duration: Duration) {
    let (seconds, attoseconds) = duration.components
    let micros = max(0, seconds) * 1_000_000 + max(0, attoseconds) / 1_000_000_000_000
    usleep(UInt32(min(micros, 1_000_000)))  // at most a second at a time: the caller looks again
}
