import Synchronization

// Commits made by other processes, reported to this process's commit listeners.
//
// While this process has commit listeners on a file, one thread per file (the watcher) sleeps on
// the lock file's commit signal (FORMAT.md §6; AddressWait.swift): every process bumps it after
// publishing a commit, and wakes the sleepers when another process watches. Woken, the watcher
// compares a snapshot of the newest commit with the snapshot it kept of the last commit it
// accounted for, and reports the trees and keys that differ (TreeDiff.swift), exactly, without any
// help from the process that wrote them. A process that dies mid-transaction never publishes, so
// nothing is reported for it.
//
// Telling this process's commits from the others': this process's commits are reported by the
// committing thread with their exact keys (CommitListeners), so the watcher must not report them
// again. Transaction ids are consecutive across processes (one writer at a time, under the lock
// file's writer lock), so each id belongs to exactly one process. `publish` calls `ownCommit`
// with each of this process's commits before it is published, and the watcher's view of the
// history is a queue of segments, each ending at a pinned version: a run of this process's
// commits (nothing to report, the base just moves on) or a run of other processes' commits
// (reported as one event, the changes between the two pinned versions). The usual case, a process
// that writes and observes while nobody else writes, costs each commit one uncontended lock and
// one atomic store (the base's reader slot moves to the new commit), and no thread wake-up: the
// signal wakes a process only for other processes' commits.
//
// Pins are reader slots of the lock file's table holding a version's snapshot (its pages cannot be
// reused meanwhile) plus a copy of its meta fields (its meta page is overwritten two commits later).
// The kept base pins the newest accounted commit, whose pages are live anyway: watching costs no
// file growth.

/// A version held by the watcher: a reader slot pinning it, and its meta fields.
private struct Pin: Sendable {
    let slot: Int
    var meta: Meta
    var txnid: UInt64 { meta.txnid }
}

/// One file's commit watcher (one per environment with a lock file).
final class CommitWatch: Sendable {
    private enum Kind { case own, other }
    private struct Segment {
        var kind: Kind
        var end: Pin
    }

    private struct State {
        /// A watcher thread runs (and the process is counted among the lock file's watchers).
        var running = false
        /// The environment went away: nothing may touch the lock file any more.
        var closed = false
        /// Everything up to `base` has been reported (or was this process's own).
        var base: Pin?
        /// Set while the watcher runs without a base because every reader slot was in use when it
        /// started: the newest commit then, after which nothing is accounted for. The watcher pins
        /// a base at a later look and reports everything since as changed anywhere.
        var unpinnedSince: UInt64?
        var queue: [Segment] = []
        /// The watcher is reporting `queue[0]`: it must not be changed meanwhile.
        var busy = false
    }

    /// At most this many segments wait: past it, a run of this process's commits is merged into
    /// the runs of other processes around it (reported once more, harmlessly, as changes seen from
    /// outside), so that a watcher that lags cannot hold an unbounded number of reader slots.
    private static let maxQueue = 8
    /// Keys listed per changed tree, as for this process's commits; past it, "changed anywhere".
    static let maxKeys = 10_000
    /// The longest a watcher sleeps without looking (it also re-checks its listeners then).
    static let sleepMilliseconds = 1_000

    private let state = Mutex(State())
    private let readers: ReaderTable
    private let pageSize: Int
    /// Events reported, and pages read to find them (for tests and `strata-bench`).
    private let counters = Mutex<(events: Int, pagesRead: Int)>((0, 0))

    init(readers: ReaderTable, pageSize: Int) {
        self.readers = readers
        self.pageSize = pageSize
    }

    var reportedEvents: Int { counters.withLock { $0.events } }
    /// While set, the watcher does not look (tests use it to make several commits of other
    /// processes arrive as one event); `nudge()` after clearing it.
    let paused = Atomic<Bool>(false)
    var isRunning: Bool { state.withLock { $0.running } }

    // MARK: Starting and stopping

    /// Starts the watcher (a listener arrived) unless it runs.
    func start(_ env: Environment) {
        let started = state.withLock { s -> Bool in
            if s.running || s.closed { return false }
            s.queue = []
            if let base = try? pin(latestIn: env) {
                s.base = base
                s.unpinnedSince = nil
            } else {
                // Every reader slot is in use. Not watching at all would lose other processes'
                // commits for as long as this listener lives (a listener's arrival is the only
                // thing that starts the watcher): watch without a base and pin one at a later
                // look, once a slot is free (`adoptBase`).
                s.base = nil
                s.unpinnedSince = readers.latest
            }
            s.running = true
            readers.addWatcher()
            readers.setPublishHook { [weak env] txnid in
                if let env { env.commitWatch?.ownCommit(txnid, env) }
            }
            return true
        }
        guard started else { return }
        let weakEnv = WeakEnvironment(environment: env)
        if !startThread(name: "strata.watch", { CommitWatch.watch(weakEnv) }) {
            stopIfIdle(force: true)
        }
    }

    /// Wakes the watcher (the last listener left): it sees no listener and ends.
    func nudge() {
        if state.withLock({ $0.running && !$0.closed }) { AddressWait.wakeAll(readers.commitSignalAddress) }
    }

    /// Ends watching when no listener is left (or always, with `force`); false if it goes on.
    @discardableResult
    private func stopIfIdle(force: Bool = false, listeners: CommitListeners? = nil) -> Bool {
        state.withLock { s in
            if !force, let listeners, listeners.count > 0, !s.closed { return false }
            if !s.running { return true }
            s.running = false
            releaseAll(&s)
            if !s.closed {
                readers.setPublishHook(nil)
                readers.removeWatcher()
            }
            return true
        }
    }

    /// The environment is closing: release every pin while the lock file is still mapped.
    func shutdown() {
        state.withLock { s in
            if s.running && !s.closed {
                readers.setPublishHook(nil)
                readers.removeWatcher()
            }
            if !s.closed { releaseAll(&s) }
            s.closed = true
            s.running = false
        }
    }

    private func releaseAll(_ s: inout State) {
        if s.closed { return }
        if let base = s.base { readers.release(base.slot) }
        for segment in s.queue { readers.release(segment.end.slot) }
        s.base = nil
        s.unpinnedSince = nil
        s.queue = []
        s.busy = false
    }

    // MARK: This process's commits

    /// Called by `publish` with commit `txnid` of this process, before it is published, on the
    /// committing thread (which holds the writer lock, so nobody else commits meanwhile).
    func ownCommit(_ txnid: UInt64, _ env: Environment) {
        state.withLock { s in
            guard s.running, !s.closed, let base = s.base, txnid > 0 else { return }
            let last = s.queue.last?.end.txnid ?? base.txnid
            if last >= txnid { return }
            if last < txnid - 1 {
                // Commits last+1 ... txnid-1 are other processes' and the watcher has not looked yet:
                // end their run here. Version txnid-1 is intact: its meta page is the one this
                // commit did not overwrite, and this commit reused none of its pages.
                if let end = try? pin(txnid - 1, env) {
                    append(.other, end, &s)
                } else {
                    return  // the watcher will report them together with this commit
                }
            }
            if s.queue.isEmpty, base.txnid == txnid - 1 {
                // The usual case: nothing pending, so the base itself moves on.
                if let meta = meta(txnid, env) {
                    readers.set(base.slot, txnid: txnid)
                    s.base?.meta = meta
                }
                return
            }
            if let lastSegment = s.queue.last, lastSegment.kind == .own, !(s.busy && s.queue.count == 1) {
                if let meta = meta(txnid, env) {
                    readers.set(lastSegment.end.slot, txnid: txnid)
                    s.queue[s.queue.count - 1].end.meta = meta
                }
                return
            }
            if let end = try? pin(txnid, env) { append(.own, end, &s) }
        }
    }

    /// Queues a segment, merging it into the last one when they are of a kind (the run grows) and
    /// when the queue is full (then the merged run counts as other processes').
    private func append(_ kind: Kind, _ end: Pin, _ s: inout State) {
        let lastIsFree = !(s.busy && s.queue.count == 1)
        if let last = s.queue.last, lastIsFree, last.kind == kind || s.queue.count >= CommitWatch.maxQueue {
            readers.release(last.end.slot)
            s.queue[s.queue.count - 1] = Segment(kind: last.kind == kind ? kind : .other, end: end)
        } else {
            s.queue.append(Segment(kind: kind, end: end))
        }
    }

    // MARK: Pins

    /// A pin of version `txnid` (not yet published, or just published), or nil when its meta page
    /// does not hold it.
    private func pin(_ txnid: UInt64, _ env: Environment) throws -> Pin {
        let slot = try readers.acquire()
        readers.set(slot, txnid: txnid)
        guard let meta = meta(txnid, env) else {
            readers.release(slot)
            throw StorageError.internalError("meta page of transaction \(txnid) was overwritten")
        }
        return Pin(slot: slot, meta: meta)
    }

    /// Pins the newest published commit, as a snapshot does (ReadTransaction.init).
    private func pin(latestIn env: Environment) throws -> Pin {
        let slot = try readers.acquire()
        for _ in 0..<1_000_000 {
            let latest = readers.latest
            readers.set(slot, txnid: latest)
            if let meta = meta(latest, env), readers.latest == latest { return Pin(slot: slot, meta: meta) }
        }
        readers.release(slot)
        throw StorageError.internalError("could not pin a snapshot")
    }

    /// The fields of `txnid`'s meta page, when it holds that commit and they are sane.
    private func meta(_ txnid: UInt64, _ env: Environment) -> Meta? {
        let meta = Meta.fields(env.maps.current.base + Int(txnid % 2) * pageSize)
        guard meta.txnid == txnid, meta.pageSize == pageSize, meta.pageCount >= 2, meta.pageCount <= Meta.maxPageCount,
            meta.catalog.root < meta.pageCount
        else { return nil }
        return meta
    }

    // MARK: The watcher thread

    /// The watcher's loop: look, report, sleep until the signal moves (or a second passes). It
    /// holds the environment only while it looks, never while it sleeps, so that closing a store
    /// is not held up by it; the address it sleeps on may then be unmapped, which the kernel
    /// answers with an early return, never a fault.
    private static func watch(_ weakEnv: WeakEnvironment) {
        while true {
            guard let (address, signal) = lookOnce(weakEnv) else { return }
            AddressWait.wait(address, expected: signal, milliseconds: sleepMilliseconds)
        }
    }

    /// One look; nil when the watcher must end.
    private static func lookOnce(_ weakEnv: WeakEnvironment) -> (UnsafeMutableRawPointer, UInt32)? {
        guard let env = weakEnv.environment, let watch = env.commitWatch else { return nil }
        // The signal first, then `latest`: a commit published after this read changes the signal
        // and the sleep below returns at once.
        let signal = env.readers.commitSignal
        if watch.stopIfIdle(listeners: env.commitListeners) { return nil }
        if !watch.paused.load(ordering: .sequentiallyConsistent) {
            if let catchUp = watch.noteOtherCommits(env) {
                env.commitListeners.notify { catchUp }
                watch.counters.withLock { $0.events += 1 }
            }
            watch.report(env)
        }
        return (env.readers.commitSignalAddress, signal)
    }

    /// Queues the commits published since the last segment: none of them is this process's (its
    /// commits are queued before they are published, under the same lock). For a watcher that
    /// started without a base, pins one instead and returns the event to report for the commits
    /// it could not account for.
    private func noteOtherCommits(_ env: Environment) -> CommitEvent? {
        state.withLock { s in
            guard s.running, !s.closed else { return nil }
            guard let base = s.base else { return adoptBase(env, &s) }
            let last = s.queue.last?.end.txnid ?? base.txnid
            if readers.latest <= last { return nil }
            guard let end = try? pin(latestIn: env) else { return nil }  // every slot in use: next time
            if end.txnid > last {
                append(.other, end, &s)
            } else {
                readers.release(end.slot)
            }
            return nil
        }
    }

    /// Pins the base of a watcher that started while every reader slot was in use (nil while they
    /// still are). The commits since `unpinnedSince` cannot be compared (that version's pages may
    /// have been reused): they are reported as one event that changed every tree of the new base
    /// anywhere, so listeners look again. A tree dropped meanwhile is not named (its name is gone
    /// with the old version); this process's own commits in the span are reported once more,
    /// harmlessly, as seen from outside.
    private func adoptBase(_ env: Environment, _ s: inout State) -> CommitEvent? {
        guard let since = s.unpinnedSince, let base = try? pin(latestIn: env) else { return nil }
        s.base = base
        s.unpinnedSince = nil
        if base.txnid <= since { return nil }
        var names: [String] = []
        if let map = try? env.maps.ensure(bytes: Int(base.meta.pageCount) * pageSize) {
            let pages = PageMap(base: map.base, pageSize: pageSize, limit: base.meta.pageCount, isWrite: false)
            names = (try? listTrees(pages: pages, catalogRoot: base.meta.catalog.root)) ?? []
        }
        return CommitEvent(
            txnid: base.txnid, changedTrees: Set(names), changedKeys: [:], previousVersion: since, isFromOtherProcess: true)
    }

    /// Reports the queued segments in order.
    private func report(_ env: Environment) {
        while true {
            let taken = state.withLock { s -> (Pin, Segment)? in
                guard s.running, !s.closed, let base = s.base, let first = s.queue.first else { return nil }
                s.busy = true
                return (base, first)
            }
            guard let (base, segment) = taken else { return }
            if segment.kind == .other {
                let event = changes(from: base.meta, to: segment.end.meta, env)
                env.commitListeners.notify { event }
                counters.withLock { $0.events += 1 }
            }
            state.withLock { s in
                s.busy = false
                guard s.running, !s.closed, s.base?.slot == base.slot, !s.queue.isEmpty else { return }
                readers.release(base.slot)
                s.base = s.queue.removeFirst().end
            }
        }
    }

    /// What changed between two pinned versions: the trees whose catalog entries differ, and for
    /// each the keys whose values differ (up to `maxKeys`); none when nothing did (commits that
    /// changed only the free list, as a compaction's that only cuts the file's end). Reported all
    /// the same, as local commits are: a listener that counts the versions it has heard of would
    /// otherwise wait for these forever (found by the review of 2026-12-06: the observer hub kept
    /// every later commit pending, and each observer's pass waited and ran its query whole). If
    /// the pages cannot be read (a damaged file), every tree of both versions is reported as
    /// changed anywhere, so listeners look again.
    private func changes(from old: Meta, to new: Meta, _ env: Environment) -> CommitEvent {
        let pageSize = self.pageSize
        do {
            let map = try env.maps.ensure(bytes: Int(max(old.pageCount, new.pageCount)) * pageSize)
            let oldPages = PageMap(base: map.base, pageSize: pageSize, limit: old.pageCount, isWrite: false)
            let newPages = PageMap(base: map.base, pageSize: pageSize, limit: new.pageCount, isWrite: false)
            var diff = TreeDiff()
            var trees: [(name: String, old: PageNo, new: PageNo)] = []
            _ = try diff.run(old: oldPages, root: old.catalog.root, new: newPages, root: new.catalog.root) { _, key, before, after in
                let name = String(decoding: key, as: UTF8.self)
                let oldRoot = try before.map { try TreeInfo.decode($0, name: name).root } ?? 0
                let newRoot = try after.map { try TreeInfo.decode($0, name: name).root } ?? 0
                trees.append((name, oldRoot, newRoot))
                return true
            }
            var keys: [String: Set<[UInt8]>] = [:]
            for tree in trees {
                var found = Set<[UInt8]>()
                let complete = try diff.run(old: oldPages, root: tree.old, new: newPages, root: tree.new) { _, key, _, _ in
                    if found.count >= CommitWatch.maxKeys { return false }
                    found.insert(Array(key))
                    return true
                }
                if complete { keys[tree.name] = found }
            }
            counters.withLock { $0.pagesRead += diff.pagesRead }
            return CommitEvent(
                txnid: new.txnid, changedTrees: Set(trees.map(\.name)), changedKeys: keys,
                previousVersion: old.txnid, isFromOtherProcess: true)
        } catch {
            var names = Set<String>()
            for meta in [old, new] {
                if let map = try? env.maps.ensure(bytes: Int(meta.pageCount) * pageSize),
                    let listed = try? listTrees(
                        pages: PageMap(base: map.base, pageSize: pageSize, limit: meta.pageCount, isWrite: false),
                        catalogRoot: meta.catalog.root)
                {
                    names.formUnion(listed)
                }
            }
            return CommitEvent(txnid: new.txnid, changedTrees: names, changedKeys: [:], previousVersion: old.txnid, isFromOtherProcess: true)
        }
    }
}
