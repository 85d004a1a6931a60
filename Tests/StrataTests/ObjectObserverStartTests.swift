import Foundation
import Synchronization
import Testing

@testable import Strata

/// An object observer's first read and the commits around it (review of 2026-12-06): a commit made
/// between the observer's listener starting and its baseline (here from a hook in `start`) asked
/// for a refresh that ran before the first read, against nothing read, and reported as a change
/// what the starting point already held.
@Suite(.serialized) struct ObjectObserverStartTests {
    struct Counter: Model {
        var id: Int
        var value: Int
    }

    @Test func aCommitBeforeTheBaselineIsNotReportedAsAChange() throws {
        let db = try Database.inMemory(models: [Counter.self])
        try db.write { tx in try tx.insert(Counter(id: 1, value: 0)) }
        let commit: @Sendable (Store) -> Void = { store in
            guard store === db.store else { return }  // another suite's observer
            do { try db.write { tx in try tx.update(Counter.self, key: 1) { $0.value = 1 } } } catch { Issue.record(error) }
        }
        objectObserverStartHook.withLock { $0 = commit }
        let seen = Mutex<[String]>([])
        let queue = DispatchQueue(label: "observer-start-test")
        let token = db.observe(Counter.self, key: 1, on: queue) { change in
            seen.withLock { s in
                switch change {
                case .changed(let counter, let fields): s.append("changed \(counter.value) \(fields)")
                case .deleted: s.append("deleted")
                case .error(let error): s.append("error \(error)")
                }
            }
        }
        objectObserverStartHook.withLock { $0 = nil }
        defer { token.invalidate() }
        try db.write { tx in try tx.update(Counter.self, key: 1) { $0.value = 2 } }
        let deadline = Date().addingTimeInterval(30)
        while seen.withLock({ $0.isEmpty }) && Date() < deadline { usleep(5000) }
        // Settle: whatever else was queued arrives.
        usleep(200_000)
        db.observerQueue.sync {}
        queue.sync {}
        #expect(seen.withLock { $0 } == ["changed 2 [\"value\"]"])
    }
}
