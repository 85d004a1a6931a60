import Foundation
import Dispatch
import Synchronization
import StrataStorage

/// The gather thread's reference to its hub: it must not keep the database alive.
private final class WeakHub: Sendable {
    weak let hub: ObserverHub?
    init(_ hub: ObserverHub) { self.hub = hub }
}

/// A results observer as the hub drives it. Every method runs on the database's observer queue.
protocol HubClient: AnyObject, Sendable {
    /// The record tree of the observed model.
    var tree: String { get }
    /// Takes in what commits changed in `tree` (nil: nothing) and the newest commit seen.
    func absorb(_ changes: TreeChanges?, version: UInt64)
    /// Refreshes if what was absorbed can change the results.
    func refreshIfStale()
}

/// What the commits gathered since the last look changed in one tree.
struct TreeChanges {
    var keys: Set<[UInt8]> = []
    /// Some commit changed keys that were not listed (too many, or the tree was dropped).
    var unknown = false
    /// The spans of the events that covered several commits at once (other processes' commits,
    /// `previous ... version`). Their keys are those whose value differs between the two ends: a
    /// key changed and changed back inside the span is not listed, so an observer whose results
    /// rest on a version strictly inside a span cannot trust the keys (ResultsObserver.absorb).
    var spans: [(previous: UInt64, version: UInt64)] = []
}

/// Routes commits to the results observers of one `Database`: one commit listener, one inbox and
/// one pass of the observer queue per gathered batch, whatever the number of observers. A commit
/// costs the writer one lock and a set union per observed tree it changed (and, for the first
/// commit after a quiet spell, one semaphore signal); ten observers of one model cost what one
/// does. A pass shares one snapshot among the observers that need it. Measured with
/// `strata-bench live`: one-object commits with 10 observers run at about 92 % of the rate with
/// none (about 70 % with a listener and a Dispatch timer per observer).
///
/// `@unchecked Sendable`: `clients`' registry and the inbox are Mutexes; `collectedVersion` and
/// `passSnapshot` are read and written only on the observer queue (`worker`).
final class ObserverHub: @unchecked Sendable {
    private struct Inbox {
        var trees: [String: TreeChanges] = [:]
        /// Every commit up to this version has been taken in (see `cover`).
        var version: UInt64 = 0
        /// Commits taken in beyond a gap: a commit of this process can be heard before the commits
        /// of other processes just before it, which the commit watcher reports a moment later.
        var ahead: [(previous: UInt64, version: UInt64)] = []
        /// The newest commit heard, gap or not.
        var newest: UInt64 = 0
        var scheduled = false
        /// Observers per tree: only their trees' keys are kept.
        var observed: [String: Int] = [:]
        var listener: CommitListenerToken?
        var threadRunning = false
    }

    private let inbox = Mutex(Inbox())
    private let clients = Mutex<(next: UInt64, all: [UInt64: any HubClient])>((1, [:]))
    private let worker: DispatchQueue
    /// The newest commit whose changes were handed to the observers, heard ahead of a gap or not
    /// (worker only).
    private var collectedVersion: UInt64 = 0
    /// The newest version up to which every commit was handed to the observers (worker only).
    private var handedVersion: UInt64 = 0
    /// `collectedVersion`, for observers on `worker`: their snapshots must include it.
    var heardVersion: UInt64 { collectedVersion }
    /// The snapshot observers of this pass share (worker only); released when the pass ends.
    private var passSnapshot: Snapshot?
    private var inPass = false

    /// How long the first commit after a quiet spell waits for others before the observers look
    /// (microseconds): a busy writer's commits then cost it a lock each, not a thread wake-up.
    /// Measured: 0.5 ms gave a 1.5 ms delivery and 10 observers costing the writer 7–12 %; 1 ms
    /// gives 2 ms and 7–8 %, steadier.
    static let gatherMicroseconds = 1_000
    /// Signalled by a commit that finds no pass pending.
    private let wake = DispatchSemaphore(value: 0)

    /// Called by the gather thread after a quiet second: true (and the thread must end) when no
    /// observer is left. Decided under the inbox lock, as `register` starts a thread.
    private func stopThreadIfIdle() -> Bool {
        inbox.withLock { state in
            guard state.observed.isEmpty else { return false }
            state.threadRunning = false
            return true
        }
    }

    private func startThread() {
        let weakHub = WeakHub(self)
        let wake = self.wake
        let thread = Thread { ObserverHub.gatherLoop(weakHub, wake: wake) }
        thread.name = "strata.observers.gather"
        thread.start()
    }

    init(worker: DispatchQueue) { self.worker = worker }

    /// Whether the gather thread runs (for leak checks: it ends within a second or two of the last
    /// observer leaving).
    var gatherThreadRunning: Bool { inbox.withLock { $0.threadRunning } }

    /// Observers registered (for leak checks).
    var count: Int { clients.withLock { $0.all.count } }

    /// Starts routing commits to `client`; returns what stops it.
    func register(_ client: any HubClient, db: Database) -> @Sendable () -> Void {
        let id = clients.withLock { state -> UInt64 in
            let id = state.next
            state.next += 1
            state.all[id] = client
            return id
        }
        let tree = client.tree
        let (needsListener, needsThread) = inbox.withLock { state -> (Bool, Bool) in
            state.observed[tree, default: 0] += 1
            defer { state.threadRunning = true }
            return (state.listener == nil, !state.threadRunning)
        }
        if needsThread { startThread() }
        if needsListener {
            let token = db.store.addCommitListener { [weak self] event in self?.committed(event) }
            // Commits up to now are in what new observers evaluate; what commits the listener
            // hears from here on are covered from this version.
            let now = db.store.latestVersion
            let extra = inbox.withLock { state -> CommitListenerToken? in
                if state.listener != nil || state.observed.isEmpty { return token }
                state.listener = token
                ObserverHub.cover(previous: 0, version: now, &state)
                return nil
            }
            extra?.invalidate()
        }
        return { [weak self] in self?.unregister(id, tree: tree) }
    }

    private func unregister(_ id: UInt64, tree: String) {
        guard clients.withLock({ $0.all.removeValue(forKey: id) }) != nil else { return }
        let idle = inbox.withLock { state -> CommitListenerToken? in
            state.observed[tree, default: 1] -= 1
            if state.observed[tree] == 0 {
                state.observed[tree] = nil
                state.trees[tree] = nil
            }
            guard state.observed.isEmpty else { return nil }
            defer { state.listener = nil }
            return state.listener
        }
        idle?.invalidate()  // no observer left: commits no longer call in
    }

    /// Takes in that every commit in `previous + 1 ... version` was heard: `version` then counts
    /// every commit up to the newest one reached without a gap.
    private static func cover(previous: UInt64, version: UInt64, _ state: inout Inbox) {
        state.newest = max(state.newest, version)
        if previous > state.version {
            state.ahead.append((previous, version))
            return
        }
        state.version = max(state.version, version)
        var joined = true
        while joined {
            joined = false
            state.ahead.removeAll { range in
                guard range.previous <= state.version else { return false }
                state.version = max(state.version, range.version)
                joined = true
                return true
            }
        }
    }

    /// On the committing thread, after the commit is published; or on the commit watcher's
    /// thread, for commits of other processes.
    private func committed(_ event: CommitEvent) {
        let schedule = inbox.withLock { state -> Bool in
            ObserverHub.cover(previous: event.previousVersion, version: event.txnid, &state)
            var relevant = false
            for tree in event.changedTrees where state.observed[tree] != nil {
                relevant = true
                if event.txnid > event.previousVersion + 1 {
                    state.trees[tree, default: TreeChanges()].spans.append((event.previousVersion, event.txnid))
                }
                if let keys = event.changedKeys[tree] {
                    state.trees[tree, default: TreeChanges()].keys.formUnion(keys)
                } else {
                    state.trees[tree, default: TreeChanges()].unknown = true
                }
            }
            if !relevant || state.scheduled { return false }
            state.scheduled = true
            return true
        }
        guard schedule else { return }
        wake.signal()
    }

    /// The hub's own thread: woken by the first commit after a quiet spell, it waits the gather
    /// delay and runs a pass on the observer queue (`sync` from a plain thread runs the pass right
    /// here when the queue is idle). One wake-up per pass; a Dispatch timer cost three thread hops
    /// (the timer manager, then a worker), which on a small machine took CPU from the writer.
    private static func gatherLoop(_ weakHub: WeakHub, wake: DispatchSemaphore) {
        while true {
            if wake.wait(timeout: .now() + .seconds(1)) == .timedOut {
                if weakHub.hub?.stopThreadIfIdle() ?? true { return }  // released, or nobody observes
                continue
            }
            usleep(UInt32(ObserverHub.gatherMicroseconds))
            guard let hub = weakHub.hub else { return }
            hub.worker.sync { hub.pass() }
        }
    }

    /// On `worker`: hands every observer what commits changed, then lets each refresh.
    private func pass() {
        inPass = true
        defer {
            inPass = false
            passSnapshot = nil  // shared for one pass only: a kept snapshot would pin pages
        }
        collect()
        let all = clients.withLock { Array($0.all.values) }
        for client in all { client.refreshIfStale() }
    }

    /// On `worker`: moves the inbox into the observers. An observer that must know every commit
    /// up to a snapshot calls this while it waits for the listener of a just-published commit.
    func collect() {
        let taken = inbox.withLock { state -> (trees: [String: TreeChanges], version: UInt64, newest: UInt64) in
            defer {
                state.trees.removeAll(keepingCapacity: true)
                state.scheduled = false
            }
            return (state.trees, state.version, state.newest)
        }
        // Called by every observer while it refreshes: with nothing new, there is nothing to hand out.
        if taken.trees.isEmpty && taken.newest <= collectedVersion && taken.version <= handedVersion { return }
        handedVersion = max(handedVersion, taken.version)
        // Snapshots must include every commit whose keys were handed out, even those heard ahead
        // of a gap: an observer that evaluated an older snapshot would drop their keys.
        collectedVersion = max(collectedVersion, taken.newest)
        let all = clients.withLock { Array($0.all.values) }
        for client in all { client.absorb(taken.trees[client.tree], version: taken.version) }
    }

    /// On `worker`: a snapshot that includes every commit whose changes were collected so far,
    /// shared by the observers of one pass.
    func snapshot(_ db: Database) throws -> Snapshot {
        // (Unless overtaken: a read-only store's snapshot, by a writer in another process.)
        if let passSnapshot, passSnapshot.version >= collectedVersion, passSnapshot.txn.isValid { return passSnapshot }
        let fresh = try db.snapshot()
        if inPass { passSnapshot = fresh }
        return fresh
    }
}
