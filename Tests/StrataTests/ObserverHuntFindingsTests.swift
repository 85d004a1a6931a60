import Dispatch
import Foundation
import StrataStorage
import Synchronization
import Testing

@testable import Strata

/// Tests that expose bugs in concurrency and lifecycles (each comment says what is wrong).
@Suite(.serialized) struct ObserverHuntFindingsTests {
    /// A synchronous write from async code.
    static func syncWrite(_ db: Database, _ body: (Transaction) throws -> Void) throws { try db.write(body) }

    /// What one object observer delivered.
    final class Heard: Sendable {
        let items = Mutex<[String]>([])
        func add(_ change: ObjectChange<HDItem>, _ isLast: Bool) {
            let text: String
            switch change {
            case .changed(let item, let fields): text = "changed(\(item.id), \(fields))"
            case .deleted: text = "deleted"
            case .error(let error): text = "error(\(error))"
            }
            items.withLock { $0.append(text + (isLast ? "!" : "")) }
        }
        var all: [String] { items.withLock { $0 } }
    }

    /// Found by a hunt, fixed: an object observer whose refresh reads the object's deletion while `close()` runs gets
    /// BOTH `.deleted` and then `.error(.databaseClosed)`: two final deliveries, and a delivery
    /// after the one that ended the observation.
    ///
    /// Documented (ObservingChanges.md, "Closing the database ends every observation ... an
    /// object's `.deleted`, which ends its observation, is delivered even then, in place of the
    /// closing error"): exactly one final delivery, either `.deleted` or `.error(.databaseClosed)`.
    /// Before the fix: some observers get `["deleted", "error(databaseClosed)"]`.
    ///
    /// The cause: ObjectObserver.refresh passes `lifecycle.shouldCompute` before the close,
    /// then `end(.deleted)` queues the deletion (checked only against `isWanted`, not the close).
    /// The close handler registered by `ObservationState.endWhenClosed` has already been called
    /// by then (its `worker.async` block is queued behind the refresh); that block runs `finish()`
    /// and `tell()` guarded only by `isWanted`, so it queues `.error(.databaseClosed)` after the
    /// `.deleted`. `finish()` in `end` removes the close handler only if it has not run yet.
    @Test func aDeletionReadDuringCloseIsNotFollowedByTheClosingError() async throws {
        let seed: UInt64 = 0xD0_F001
        var rng = HDRng(seed)
        var doubles: [String] = []
        for round in 0..<30 {
            let db = try Database.inMemory(models: [HDItem.self])
            try Self.syncWrite(db) { tx in try tx.insert(HDItem(id: 1, name: "a", group: 0, score: 0, note: "")) }
            let queue = DispatchQueue(label: "hd.object.\(round)")
            var heard: [Heard] = []
            var tokens: [NotificationToken] = []
            for _ in 0..<150 {
                let h = Heard()
                heard.append(h)
                tokens.append(db.observe(HDItem.self, key: 1, on: queue) { change, isLast in h.add(change, isLast) })
            }
            db.observerQueue.sync {}  // every first read ran
            let spin = rng.below(400)
            try Self.syncWrite(db) { tx in _ = try tx.delete(HDItem.self, key: 1) }
            usleep(UInt32(spin))
            db.close()
            let all = await hdPatiently(seconds: 30) { heard.allSatisfy { !$0.all.isEmpty } }
            #expect(all, "seed \(seed) round \(round): some observer heard nothing")
            db.observerQueue.sync {}
            queue.sync {}
            try await Task.sleep(for: .milliseconds(5))
            queue.sync {}
            for (i, h) in heard.enumerated() where h.all.count != 1 {
                doubles.append("round \(round) spin \(spin)µs observer \(i): \(h.all)")
            }
            tokens.removeAll()
        }
        #expect(doubles.isEmpty, "seed \(seed): \(doubles.count) observers got more than one final delivery, e.g. \(doubles.prefix(3))")
    }

    /// Found by a hunt, fixed: `db.observe(_:key:on:_:)` loses a change committed after `observe` returned when the
    /// commit lands before the observer's first read of the object. Nothing is ever delivered for
    /// it: an app that read the object, then started observing it (there is no `.initial` to learn
    /// the observer's starting point), keeps the stale value for good.
    ///
    /// Documented (ObservingChanges.md, "One object, or every commit"): the observer "reports
    /// `.changed(object, fields:)` ... when a commit changes the object's stored value"; a token
    /// keeps delivering changes for as long as it lives. Expected: `.changed(score 1, ["score"])`.
    /// Before the fix: no delivery at all (the first read already saw score 1 and took it as the start).
    /// Here the observer queue is busy with another observer's first evaluation (public API
    /// only: a string-sorted query over 20,000 objects), as in any app with a big list on screen;
    /// without that, the same happens whenever the write wins the race with the first read.
    ///
    /// The cause: ObjectObserver.start registers the commit listener, then queues
    /// `refresh(initial: true)` on the observer queue; the first read records the object as the
    /// baseline (`last`) without delivering (no `initial` closure for plain observers), so a
    /// commit between `observe` returning and that read is folded into the baseline; the
    /// refresh its listener queues then finds nothing new. (`LiveObject` is not affected: it gets
    /// the first read through `initial`.) Reading the baseline in `observe` itself, before it
    /// returns, would keep the promise.
    @Test func anObjectChangeCommittedJustAfterObserveIsDelivered() async throws {
        let db = try Database.inMemory(models: [HDItem.self])
        try Self.syncWrite(db) { tx in
            for id in 0..<20_000 { try tx.insert(HDItem(id: id, name: "n\(id % 997)", group: id % 3, score: 0, note: "")) }
        }
        var missed: [Int] = []
        for round in 0..<3 {
            // Another observer's first evaluation keeps the observer queue busy for a moment.
            let big = db.objects(HDItem.self).sorted(by: SortDescriptor(\.name), SortDescriptor(\.note)).observe(on: DispatchQueue(label: "hd.big")) { _ in }
            let heard = Heard()
            let token = db.observe(HDItem.self, key: 7, on: DispatchQueue(label: "hd.key7")) { change, isLast in heard.add(change, isLast) }
            // Committed after `observe` returned.
            try Self.syncWrite(db) { tx in try tx.update(HDItem.self, key: 7) { $0.score = round + 1 } }
            let delivered = await hdEventually(seconds: 30) { !heard.all.isEmpty }
            if !delivered {
                missed.append(round)
            } else {
                #expect(heard.all == ["changed(7, [\"score\"])"], "round \(round): \(heard.all)")
            }
            // Control: the observer is alive; a later change is delivered.
            try Self.syncWrite(db) { tx in try tx.update(HDItem.self, key: 7) { $0.note = "later\(round)" } }
            #expect(await hdPatiently(seconds: 30) { heard.all.last == "changed(7, [\"note\"])" }, "round \(round): \(heard.all)")
            token.invalidate()
            big.invalidate()
        }
        #expect(missed.isEmpty, "a change committed after observe() returned was never delivered in rounds \(missed) of 3")
    }

    /// Found by a hunt, fixed (same cause as `anObjectChangeCommittedJustAfterObserveIsDelivered`): an object deleted
    /// by a commit made after `observe` / `changes(_:key:)` returned, but before the observer's
    /// first read, is never reported `.deleted`: the observation never ends, and a `for await`
    /// loop over `db.changes(_:key:)` waits for ever (until the database closes).
    ///
    /// Documented: "`.deleted` once" when the object is deleted, and `db.changes(_:key:)` is "the
    /// same as an `AsyncSequence`, finishing after `.deleted`". Expected: `.deleted`, then the
    /// stream finishes. Before the fix: nothing within 2 s (the first read found no object and took "no
    /// object" as the start: ObjectObserver.refresh with `initial: true` sets `known` without
    /// delivering, so the later refresh sees `last == nil` and stays silent).
    @Test func anObjectDeletedJustAfterObserveIsReportedDeleted() async throws {
        let db = try Database.inMemory(models: [HDItem.self])
        try Self.syncWrite(db) { tx in
            for id in 0..<20_000 { try tx.insert(HDItem(id: id, name: "n\(id % 997)", group: id % 3, score: 0, note: "")) }
        }
        var missed: [Int] = []
        for round in 0..<3 {
            let big = db.objects(HDItem.self).sorted(by: SortDescriptor(\.name), SortDescriptor(\.note)).observe(on: DispatchQueue(label: "hd.big")) { _ in }
            let key = 100 + round
            let stream = db.changes(HDItem.self, key: key)
            let ended = HDBox()
            let task = Task.detached {
                for await change in stream { ended.note("\(change)") }
                ended.add()
            }
            try Self.syncWrite(db) { tx in _ = try tx.delete(HDItem.self, key: key) }
            if !(await hdEventually(seconds: 30) { ended.value == 1 }) {
                missed.append(round)
            } else {
                #expect(ended.all == ["deleted"], "round \(round): \(ended.all)")
            }
            task.cancel()
            await task.value
            big.invalidate()
        }
        #expect(missed.isEmpty, "a deletion committed after changes(_:key:) returned never ended the stream in rounds \(missed) of 3")
    }

    /// Found by a hunt, fixed (undocumented before): on a concurrent queue (the API takes any `DispatchQueue`; the
    /// documentation asks for no serial one), `db.observe(_:key:on:_:)` runs deliveries of
    /// successive commits at the same time, so they finish out of order and the observer's last
    /// `.changed` can carry an older object than the one stored. Results observers on the same
    /// queue are not affected: they hand over the next change only after the block returned
    /// (ResultsObserver.deliver / `inFlight`); the object observer's `deliver` is a bare
    /// `queue.async` per refresh (ObjectObserver.deliver).
    ///
    /// Expected: deliveries in commit order (scores never go back) and the last one equal to the
    /// stored object, as for results observers on the same queue. Before the fix: scores go back, and
    /// the last delivered object can be stale.
    @Test func objectObserverOnAConcurrentQueueDeliversInOrder() async throws {
        let seed: UInt64 = 0xD0_F004
        let db = try Database.inMemory(models: [HDItem.self])
        try Self.syncWrite(db) { tx in try tx.insert(HDItem(id: 1, name: "a", group: 0, score: 0, note: "")) }
        let queue = DispatchQueue(label: "hd.concurrent", attributes: .concurrent)
        let objectScores = Mutex<[Int]>([])
        let resultScores = Mutex<[Int]>([])
        let token = db.observe(HDItem.self, key: 1, on: queue) { change in
            guard case .changed(let item, _) = change else { return }
            usleep(item.score % 50 == 49 ? 30_000 : UInt32(item.score % 7) * 300)  // the app's work for a change
            objectScores.withLock { $0.append(item.score) }
        }
        let resultsToken = db.objects(HDItem.self).observe(on: DispatchQueue(label: "hd.concurrent.results", attributes: .concurrent)) { change in
            guard case .update(let results, _, _, _) = change, let item = results.first else { return }
            usleep(item.score % 50 == 49 ? 30_000 : UInt32(item.score % 7) * 300)
            resultScores.withLock { $0.append(item.score) }
        }
        db.observerQueue.sync {}
        var rng = HDRng(seed)
        for score in 1...150 {
            try Self.syncWrite(db) { tx in try tx.update(HDItem.self, key: 1) { $0.score = score } }
            usleep(score % 50 == 49 ? 5_000 : UInt32(200 + rng.below(1500)))  // 49's delivery is running when 50 commits
        }
        #expect(await hdPatiently(seconds: 30) { resultScores.withLock { $0.last } == 150 }, "results observer: \(resultScores.withLock { $0.suffix(5) })")
        _ = await hdEventually(seconds: 30) { objectScores.withLock { $0.contains(150) } }
        try await Task.sleep(for: .milliseconds(50))
        let objects = objectScores.withLock { $0 }
        let results = resultScores.withLock { $0 }
        let objectInversions = zip(objects, objects.dropFirst()).filter { $0 > $1 }.count
        let resultInversions = zip(results, results.dropFirst()).filter { $0 > $1 }.count
        #expect(resultInversions == 0, "seed \(seed): results observer went back \(resultInversions) times")
        #expect(
            objectInversions == 0 && objects.last == 150,
            "seed \(seed): object observer went back \(objectInversions) times in \(objects.count) deliveries; last \(objects.last ?? -1), stored 150")
        withExtendedLifetime((token, resultsToken)) {}
    }

    /// Found by a hunt, fixed (same family as `objectObserverOnAConcurrentQueueDeliversInOrder`):
    /// a results observer on a concurrent queue whose update block is still running when the
    /// database closes gets `.error(.databaseClosed)` at the same time, so the closing error
    /// finishes before the update: the update is the observer's last delivery, not the close.
    ///
    /// Documented (ObservingChanges.md): "each observer gets `.error(.databaseClosed)` as its last
    /// delivery". Expected: the closing error after every other block. Before the fix: the update
    /// finishes after it. The cause: the close's delivery (ResultsObserver.start,
    /// `endWhenClosed` → `queue.async`) is not held back by the delivery in flight (`inFlight`),
    /// which only gates the next change.
    @Test func theClosingErrorComesAfterAnUpdateRunningOnAConcurrentQueue() async throws {
        var late = 0
        for round in 0..<3 {
            let db = try Database.inMemory(models: [HDItem.self])
            try Self.syncWrite(db) { tx in try tx.insert(HDItem(id: 1, name: "a", group: 0, score: 0, note: "")) }
            let order = Mutex<[String]>([])
            let queue = DispatchQueue(label: "hd.concurrent.close", attributes: .concurrent)
            let token = db.objects(HDItem.self).observe(on: queue) { change in
                switch change {
                case .initial: order.withLock { $0.append("initial") }
                case .update:
                    usleep(30_000)  // the app's work for the change
                    order.withLock { $0.append("update") }
                case .error(let error): order.withLock { $0.append("error(\(error))") }
                }
            }
            #expect(await hdEventually { order.withLock { $0 } == ["initial"] })
            try Self.syncWrite(db) { tx in try tx.update(HDItem.self, key: 1) { $0.score = round + 1 } }
            try await Task.sleep(for: .milliseconds(10))  // the update's block is running
            db.close()
            // The update is delivered if its block started before the close (else it is dropped);
            // the closing error comes once, last, either way.
            #expect(await hdEventually { order.withLock { $0.contains("error(the database is closed)") } }, "round \(round): \(order.withLock { $0 })")
            try await Task.sleep(for: .milliseconds(100))
            #expect(order.withLock { $0.filter { $0.hasPrefix("error") }.count } == 1, "round \(round): \(order.withLock { $0 })")
            if order.withLock({ $0.last }) != "error(the database is closed)" { late += 1 }
            token.invalidate()
        }
        #expect(late == 0, "in \(late) of 3 rounds an update finished after .error(.databaseClosed)")
    }
}
