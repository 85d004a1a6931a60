import Dispatch
import Foundation
import StrataStorage
import Synchronization
import Testing

@testable import Strata

/// Concurrency and lifecycle checks an app developer would rely on, from the documentation.
@Suite(.serialized) struct ConcurrencyLifecycleHuntTests {
    static let ids = 40

    /// Many writers (sync `write`, `write` async from tasks, `writeAsync`) while observers of five
    /// query shapes (callbacks on their own queues and `changes` streams) follow them, and other
    /// observers are registered and invalidated meanwhile: every delivered change set must turn
    /// the previous delivery into the new one, and the last delivery equals a fresh query.
    @Test func concurrentWritersAndChurningObserversGetExactChanges() async throws {
        let seed: UInt64 = 0xD0_0001
        let db = try Database(path: hdPath("mirror"), models: [HDItem.self], options: StoreOptions(durability: .noSync))
        try await db.write { tx in
            var rng = HDRng(seed)
            for id in 0..<Self.ids where rng.below(2) == 0 { try tx.insert(rng.item(id: id)) }
        }
        // Steady observers: one callback and one stream per shape.
        var mirrors: [(HDQuery, HDMirror)] = []
        var tokens: [NotificationToken] = []
        var streamTasks: [Task<Void, Never>] = []
        for query in HDQuery.allCases {
            let callback = HDMirror("callback \(query)")
            let queue = DispatchQueue(label: "hd.observer.\(query)")
            tokens.append(query.results(db).observe(on: queue) { callback.take($0) })
            mirrors.append((query, callback))
            let streamed = HDMirror("stream \(query)")
            let stream = query.results(db).changes
            streamTasks.append(
                Task.detached {
                    var n = 0
                    for await change in stream {
                        streamed.take(change)
                        n += 1
                        if n % 7 == 0 { try? await Task.sleep(for: .milliseconds(3)) }  // a slow loop
                    }
                })
            mirrors.append((query, streamed))
        }
        // Churning observers: registered and invalidated while the writers run.
        let churnFailures = Mutex<[String]>([])
        let churnDone = Atomic<Bool>(false)
        let churn = Thread {
            var rng = HDRng(seed ^ 0xC0FFEE)
            var round = 0
            while !churnDone.load(ordering: .relaxed) {
                let query = HDQuery.allCases[rng.below(HDQuery.allCases.count)]
                let mirror = HDMirror("churn \(round) \(query)")
                let queue = DispatchQueue(label: "hd.churn")
                let token = query.results(db).observe(on: queue) { mirror.take($0) }
                usleep(UInt32(500 + rng.below(8000)))
                // Invalidate on the observer's own queue: no block may run after that.
                let gone = Atomic<Bool>(false)
                queue.sync {
                    token.invalidate()
                    gone.store(true, ordering: .sequentiallyConsistent)
                }
                let after = mirror.deliveries
                queue.sync {}
                usleep(3000)
                queue.sync {}
                if mirror.deliveries != after { churnFailures.withLock { $0.append("churn \(round): delivery after invalidate") } }
                churnFailures.withLock { $0.append(contentsOf: mirror.failures) }
                round += 1
            }
        }
        churn.start()

        // Writers.
        let syncWriters = 2
        let perWriter = 60
        let group = DispatchGroup()
        for w in 0..<syncWriters {
            group.enter()
            Thread {
                var rng = HDRng(seed &+ UInt64(w) &* 7919)
                for _ in 0..<perWriter {
                    try? db.write { tx in
                        for _ in 0..<(1 + rng.below(3)) { try rng.operate(tx, ids: Self.ids) }
                    }
                }
                group.leave()
            }.start()
        }
        let callbackWrites = Atomic<Int>(0)
        let callbackQueue = DispatchQueue(label: "hd.completions")
        var cbRng = HDRng(seed &+ 99)
        for _ in 0..<perWriter {
            let s = cbRng.next()
            db.writeAsync(completionQueue: callbackQueue) { tx in
                var r = HDRng(s)
                try r.operate(tx, ids: Self.ids)
                try r.operate(tx, ids: Self.ids)
            } completion: { _ in
                callbackWrites.add(1, ordering: .relaxed)
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for t in 0..<4 {
                tasks.addTask {
                    var rng = HDRng(seed &+ 1000 &+ UInt64(t))
                    for _ in 0..<(perWriter / 2) {
                        let s = rng.next()
                        try await db.write { tx in
                            var r = HDRng(s)
                            try r.operate(tx, ids: Self.ids)
                        }
                        // Reads alongside: an async read must see one commit.
                        let (count, listed) = try await db.read { snapshot in
                            (snapshot.objects(HDItem.self).count, Array(snapshot.objects(HDItem.self)).count)
                        }
                        #expect(count == listed, "seed \(seed)")
                    }
                }
            }
            try await tasks.waitForAll()
        }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                group.wait()
                c.resume()
            }
        }
        #expect(await hdEventually { callbackWrites.load(ordering: .relaxed) == perWriter }, "seed \(seed)")
        churnDone.store(true, ordering: .relaxed)
        while !churn.isFinished { try await Task.sleep(for: .milliseconds(5)) }

        // Every steady observer ends on the fresh query.
        for (query, mirror) in mirrors {
            let fresh = Array(query.results(db))
            let reached = await hdPatiently(seconds: 30) { mirror.mirror == fresh }
            #expect(reached, "seed \(seed): \(mirror.label) ended on \(mirror.mirror?.map(\.id) ?? []) not \(fresh.map(\.id))")
            #expect(mirror.failures.isEmpty, "seed \(seed): \(mirror.failures.prefix(3))")
        }
        #expect(churnFailures.withLock { $0 }.isEmpty, "seed \(seed): \(churnFailures.withLock { $0.prefix(3) })")
        tokens.removeAll()
        for task in streamTasks { task.cancel() }
        for task in streamTasks { await task.value }
    }

    /// `close()` while sync writers, `writeAsync`, async writes, async reads and observers (both
    /// forms) are in flight: nothing hangs or crashes; every write is reported once, a success is
    /// in the file and a failure is not; every observer's last delivery is `.error(.databaseClosed)`,
    /// once, and every stream finishes.
    @Test(arguments: [0xD0_0101, 0xD0_0102, 0xD0_0103] as [UInt64])
    func closeWhileEverythingIsInFlight(seed: UInt64) async throws {
        let path = hdPath("close")
        let db = try Database(path: path, models: [HDItem.self], options: StoreOptions(durability: .noSync))
        try await db.write { tx in
            var rng = HDRng(seed)
            for id in 0..<Self.ids { try tx.insert(rng.item(id: id)) }
        }
        var mirrors: [HDMirror] = []
        var tokens: [NotificationToken] = []
        var streamTasks: [Task<Void, Never>] = []
        let streamsFinished = HDBox()
        for query in HDQuery.allCases {
            let callback = HDMirror("callback \(query)")
            tokens.append(query.results(db).observe(on: DispatchQueue(label: "hd.close.\(query)")) { callback.take($0) })
            mirrors.append(callback)
            let streamed = HDMirror("stream \(query)")
            let stream = query.results(db).changes
            streamTasks.append(
                Task.detached {
                    for await change in stream { streamed.take(change) }
                    streamsFinished.add()
                })
            mirrors.append(streamed)
        }
        // Outcomes of unique inserts, by id: true committed, false failed.
        let book = HDOutcomes()
        let stop = Atomic<Bool>(false)
        let threadsDone = DispatchGroup()
        for w in 0..<2 {
            threadsDone.enter()
            Thread {
                var i = 0
                while !stop.load(ordering: .relaxed) && i < 400 {
                    let id = 1000 + w * 1000 + i
                    book.record(id, Result { try db.write { tx in _ = try tx.insert(HDItem(id: id, name: "w", group: 1, score: i % 100, note: "t")) } })
                    i += 1
                }
                threadsDone.leave()
            }.start()
        }
        let callbacks = Atomic<Int>(0)
        for i in 0..<200 {
            let id = 5000 + i
            db.writeAsync(completionQueue: DispatchQueue.global()) { tx in
                _ = try tx.insert(HDItem(id: id, name: "a", group: 1, score: i % 100, note: "c"))
            } completion: { result in
                book.record(id, result.map { _ in () })
                callbacks.add(1, ordering: .relaxed)
            }
        }
        let readFailures = HDBox()
        let closer = Task.detached {
            try? await Task.sleep(for: .milliseconds(20 + Int(seed % 20)))
            db.close()
        }
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for t in 0..<3 {
                tasks.addTask {
                    for i in 0..<100 {
                        let id = 7000 + t * 1000 + i
                        do {
                            try await db.write { tx in _ = try tx.insert(HDItem(id: id, name: "s", group: 2, score: i, note: "x")) }
                            book.record(id, .success(()))
                        } catch { book.record(id, .failure(error)) }
                        do {
                            let (count, listed) = try await db.read { snapshot in
                                (snapshot.objects(HDItem.self).count, snapshot.objects(HDItem.self).filter(#Predicate { $0.group == 2 }).count)
                            }
                            if listed > count { readFailures.note("read saw \(listed) of \(count)") }
                        } catch let error as StrataError where error == .databaseClosed {
                        } catch { readFailures.note("read threw \(error)") }
                    }
                }
            }
            try await tasks.waitForAll()
        }
        await closer.value
        stop.store(true, ordering: .relaxed)
        let threadsEnded = await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            DispatchQueue.global().async { c.resume(returning: threadsDone.wait(timeout: .now() + 15) == .success) }
        }
        #expect(threadsEnded, "seed \(seed): sync writers hung after close")
        #expect(
            await hdEventually { callbacks.load(ordering: .relaxed) == 200 }, "seed \(seed): writeAsync completions \(callbacks.load(ordering: .relaxed))/200")
        #expect(book.wrongErrors.withLock { $0 }.isEmpty, "seed \(seed): \(book.wrongErrors.withLock { $0.prefix(3) })")
        #expect(readFailures.all.isEmpty, "seed \(seed): \(readFailures.all.prefix(3))")
        #expect(await hdEventually { streamsFinished.value == HDQuery.allCases.count }, "seed \(seed): streams still running after close")
        for mirror in mirrors {
            #expect(await hdEventually { mirror.closedCount == 1 }, "seed \(seed): \(mirror.label) got \(mirror.closedCount) databaseClosed")
            #expect(mirror.failures.isEmpty, "seed \(seed): \(mirror.failures.prefix(3))")
        }
        try? await Task.sleep(for: .milliseconds(50))
        for mirror in mirrors { #expect(mirror.closedCount == 1, "seed \(seed): \(mirror.label)") }
        #expect(throws: StrataError.databaseClosed) { try db.snapshot() }
        // What was reported is what the file holds.
        let reopened = try Database(path: path, models: [HDItem.self])
        let stored = Set(reopened.objects(HDItem.self).map(\.id))
        let reported = book.outcomes.withLock { $0 }
        let lost = reported.filter { $0.value && !stored.contains($0.key) }.map(\.key).sorted()
        let ghosts = reported.filter { !$0.value && stored.contains($0.key) }.map(\.key).sorted()
        let unreported = stored.filter { $0 >= 1000 && reported[$0] == nil }.sorted()
        #expect(lost.isEmpty, "seed \(seed): reported committed, not stored: \(lost.prefix(5))")
        #expect(ghosts.isEmpty, "seed \(seed): reported failed, stored: \(ghosts.prefix(5))")
        #expect(book.doubles.withLock { $0 }.isEmpty, "seed \(seed): reported twice")
        #expect(unreported.isEmpty, "seed \(seed): stored, never reported: \(unreported.prefix(5))")
        tokens.removeAll()
        for task in streamTasks { task.cancel() }
        reopened.close()
    }

    /// Two handles of one file in one process: observers of each hear the other's commits; closing
    /// one ends its own observers and calls only; the other goes on, its observers exact, and
    /// results and snapshots of the closed handle stay readable through writes and `compact()` of
    /// the other, from several threads.
    @Test func twoHandlesOneClosedTheOtherGoesOn() async throws {
        let seed: UInt64 = 0xD0_0201
        let path = hdPath("two")
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = nil
        let first = try Database(path: path, models: [HDItem.self], options: options)
        let second = try Database(path: path, models: [HDItem.self], options: options)
        try await first.write { tx in
            var rng = HDRng(seed)
            for id in 0..<200 { try tx.insert(rng.item(id: id)) }
        }
        let keptResults = first.objects(HDItem.self).sorted(by: SortDescriptor(\.name), SortDescriptor(\.id))
        let keptSnapshot = try first.snapshot()
        let expected = Array(keptResults)
        let expectedGroup = Array(keptSnapshot.objects(HDItem.self).filter(#Predicate { $0.group == 1 }))
        let onFirst = HDMirror("first")
        let onSecond = HDMirror("second")
        let secondStream = HDMirror("second stream")
        let t1 = HDQuery.groupByScore.results(first).observe(on: DispatchQueue(label: "hd.two.1")) { onFirst.take($0) }
        let t2 = HDQuery.byName.results(second).observe(on: DispatchQueue(label: "hd.two.2")) { onSecond.take($0) }
        let stream = HDQuery.groupByScore.results(second).changes
        let streamTask = Task.detached { for await change in stream { secondStream.take(change) } }
        // Writes through both handles, sync and async.
        let writers = DispatchGroup()
        for (w, db) in [first, second].enumerated() {
            writers.enter()
            Thread {
                var rng = HDRng(seed &+ UInt64(w) &+ 5)
                for _ in 0..<80 { try? db.write { tx in try rng.operate(tx, ids: 200) } }
                writers.leave()
            }.start()
        }
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for (w, db) in [first, second].enumerated() {
                tasks.addTask {
                    var rng = HDRng(seed &+ 77 &+ UInt64(w))
                    for _ in 0..<40 {
                        let s = rng.next()
                        _ = try? await db.write { tx in
                            var r = HDRng(s)
                            try r.operate(tx, ids: 200)
                        }
                    }
                }
            }
            try await tasks.waitForAll()
        }
        first.close()
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                writers.wait()
                c.resume()
            }
        }
        #expect(throws: StrataError.databaseClosed) { try first.write { tx in try tx.upsert(HDItem(id: 1, name: "x", group: 0, score: 0, note: "")) } }
        // The second handle goes on.
        try await second.write { tx in
            for id in 0..<100 { _ = try tx.delete(HDItem.self, key: id) }
            for id in 300..<340 { try tx.insert(HDItem(id: id, name: "late", group: 1, score: id % 100, note: "z")) }
        }
        _ = try second.store.compact()
        try await second.write { tx in
            for id in 300..<320 { try tx.update(HDItem.self, key: id) { $0.note = String(repeating: "q", count: 300) } }
        }
        _ = try second.store.compact()
        // The closed handle's results and snapshot, read on several threads at once.
        let readMismatches = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            for _ in 0..<5 {
                if i % 2 == 0 {
                    if Array(keptResults) != expected { readMismatches.add(1, ordering: .relaxed) }
                } else {
                    if Array(keptSnapshot.objects(HDItem.self).filter(#Predicate { $0.group == 1 })) != expectedGroup {
                        readMismatches.add(1, ordering: .relaxed)
                    }
                }
            }
        }
        #expect(readMismatches.load(ordering: .relaxed) == 0, "seed \(seed)")
        #expect(keptResults.error == nil)
        // Observers: the first handle's end with databaseClosed; the second's end on the fresh query.
        #expect(await hdEventually { onFirst.closedCount == 1 }, "seed \(seed)")
        let freshName = Array(HDQuery.byName.results(second))
        let freshGroup = Array(HDQuery.groupByScore.results(second))
        #expect(await hdEventually { onSecond.mirror == freshName }, "seed \(seed)")
        #expect(await hdEventually { secondStream.mirror == freshGroup }, "seed \(seed)")
        for mirror in [onFirst, onSecond, secondStream] { #expect(mirror.failures.isEmpty, "seed \(seed): \(mirror.failures.prefix(3))") }
        #expect(onSecond.closedCount == 0 && secondStream.closedCount == 0)
        _ = (t1, t2)
        streamTask.cancel()
        await streamTask.value
        second.close()
    }

    struct HDBoom: Error {}

    /// Many concurrent async writes sharing group commits, some throwing after writing, some
    /// catching a write that failed halfway: each is atomic on its own (a failure leaves nothing,
    /// a success everything), reported once, and an observer sees exactly the committed ones.
    @Test func groupCommitKeepsEachWriteAtomic() async throws {
        let seed: UInt64 = 0xD0_0301
        let db = try Database(path: hdPath("group"), models: [HDItem.self])  // durable: groups form
        try await db.write { tx in try tx.insert(HDItem(id: -1, name: "dup", group: 0, score: 0, note: "")) }
        let mirror = HDMirror("group observer")
        let token = db.objects(HDItem.self).observe(on: DispatchQueue(label: "hd.group")) { mirror.take($0) }
        let outcome = HDOutcomes()
        let errors = HDBox()
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for k in 0..<150 {
                tasks.addTask {
                    let ids = [3 * k, 3 * k + 1, 3 * k + 2]
                    let kind = k % 5
                    do {
                        try await db.write(durability: k % 2 == 0 ? .full : .noSync) { tx in
                            switch kind {
                            case 1:
                                for id in ids { try tx.insert(HDItem(id: id, name: "t", group: 1, score: k % 100, note: "")) }
                                throw HDBoom()
                            case 2:
                                // Fails halfway (the third is a duplicate); caught, so the write must be undone.
                                _ = try? tx.insert(contentsOf: [
                                    HDItem(id: ids[0], name: "h", group: 1, score: 1, note: ""),
                                    HDItem(id: ids[1], name: "h", group: 1, score: 1, note: ""),
                                    HDItem(id: -1, name: "dup", group: 0, score: 0, note: ""),
                                ])
                            default:
                                for id in ids { try tx.insert(HDItem(id: id, name: "ok", group: 2, score: k % 100, note: "")) }
                            }
                        }
                        for id in ids { outcome.record(id, .success(())) }
                    } catch {
                        if kind == 0 || kind >= 3 { errors.note("write \(k) failed: \(error)") }
                        if kind == 1 && !(error is HDBoom) { errors.note("write \(k) threw \(error)") }
                        for id in ids { outcome.outcomes.withLock { $0[id] = false } }
                    }
                }
            }
            try await tasks.waitForAll()
        }
        #expect(errors.all.isEmpty, "seed \(seed): \(errors.all.prefix(3))")
        let stored = Set(db.objects(HDItem.self).map(\.id))
        let reported = outcome.outcomes.withLock { $0 }
        let lost = reported.filter { $0.value && !stored.contains($0.key) }.map(\.key).sorted()
        let ghosts = reported.filter { !$0.value && stored.contains($0.key) }.map(\.key).sorted()
        #expect(lost.isEmpty && ghosts.isEmpty, "seed \(seed): lost \(lost.prefix(5)) ghosts \(ghosts.prefix(5))")
        for k in 0..<150 where k % 5 == 1 || k % 5 == 2 {
            #expect(reported[3 * k] != true, "write \(k) of a failing kind succeeded")
        }
        let fresh = Array(db.objects(HDItem.self))
        #expect(await hdEventually { mirror.mirror == fresh }, "seed \(seed)")
        #expect(mirror.failures.isEmpty, "seed \(seed): \(mirror.failures.prefix(3))")
        withExtendedLifetime(token) {}
    }

    /// Cancelling async reads mid-scan: each throws `CancellationError` soon (not after the whole
    /// scan), releases its snapshot (no reader slot stays taken), and reads after it answer.
    @Test func cancelledAsyncReadsStopAndReleaseTheirSnapshots() async throws {
        let db = try Database(path: hdPath("cancel"), models: [HDItem.self], options: StoreOptions(durability: .noSync))
        try await db.write { tx in
            for id in 0..<20_000 { try tx.insert(HDItem(id: id, name: "n\(id % 97)", group: id % 3, score: id % 100, note: "x\(id % 13)")) }
        }
        let baseline = db.store.readers().count
        let started = HDBox()
        // When the last read body returned, taken on Strata's read thread: the time the test's
        // own task takes to resume after the cancel says nothing about the reads (a loaded run's
        // shared pool has resumed tests minutes late).
        let lastEnd = HDLatestInstant()
        var tasks: [Task<Int, any Error>] = []
        for _ in 0..<6 {
            tasks.append(
                Task.detached {
                    try await db.read { snapshot in
                        started.add()
                        defer {
                            let now = ContinuousClock.now
                            lastEnd.note(now)
                        }
                        var total = 0
                        // (Minutes of work if not cancelled: the bound below is far from both.)
                        for _ in 0..<20_000 {
                            total += snapshot.objects(HDItem.self).filter(#Predicate { $0.note.contains("7") && $0.name != "zz" }).count
                        }
                        return total
                    }
                })
        }
        #expect(await hdEventually { started.value >= 1 })
        // A write meanwhile: the cancelled reads' snapshots must not be held after they end.
        try await db.write { tx in try tx.upsert(HDItem(id: 0, name: "new", group: 0, score: 0, note: "")) }
        let cancelledAt = ContinuousClock.now
        for task in tasks { task.cancel() }
        var cancelled = 0
        for task in tasks {
            do { _ = try await task.value } catch is CancellationError { cancelled += 1 }
        }
        #expect(cancelled == tasks.count, "only \(cancelled) of \(tasks.count) reads were cancelled")
        let took = try #require(lastEnd.value) - cancelledAt
        #expect(took < .seconds(30), "cancelled reads took \(took) to stop")
        #expect(await hdEventually { db.store.readers().count <= baseline }, "reader slots still held: \(db.store.readers())")
        let after = try await db.read { $0.objects(HDItem.self).count }
        #expect(after == 20_000)
        // A write whose task is cancelled once it is queued is still committed and reported.
        let late = Task.detached { try await db.write { tx in try tx.insert(HDItem(id: 99_999, name: "late", group: 0, score: 0, note: "")) } }
        late.cancel()
        let result = await late.result
        let stored = try db.object(HDItem.self, key: 99_999)
        switch result {
        case .success: #expect(stored != nil, "reported committed, not stored")
        case .failure(let error):
            #expect(error is CancellationError)
            #expect(stored == nil, "reported cancelled, stored")
        }
    }

    /// Bursts of writes and large deletes with idle-time compaction between them (a short idle
    /// delay), observers of every shape, and snapshots kept from each burst read on other threads:
    /// compaction commits deliver nothing, changes stay exact, kept snapshots keep their version.
    @Test func idleCompactionBetweenBurstsKeepsObserversAndSnapshotsExact() async throws {
        let seed: UInt64 = 0xD0_0401
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = .milliseconds(15)
        let db = try Database(path: hdPath("idle"), models: [HDItem.self], options: options)
        var mirrors: [(HDQuery, HDMirror)] = []
        var tokens: [NotificationToken] = []
        for query in HDQuery.allCases {
            let mirror = HDMirror("idle \(query)")
            tokens.append(query.results(db).observe(on: DispatchQueue(label: "hd.idle.\(query)")) { mirror.take($0) })
            mirrors.append((query, mirror))
        }
        var kept: [(Snapshot, [HDItem])] = []
        var rng = HDRng(seed)
        for burst in 0..<6 {
            let base = burst * 400
            let s = rng.next()
            try await db.write { tx in
                var r = HDRng(s)
                for id in base..<(base + 400) { try tx.upsert(r.item(id: id)) }
                for _ in 0..<30 { try r.operate(tx, ids: base + 400) }
            }
            let removeFrom = max(0, base - 400)
            try await db.write { tx in
                for id in removeFrom..<(removeFrom + 350) { _ = try tx.delete(HDItem.self, key: id) }
            }
            let snapshot = try db.snapshot()
            kept.append((snapshot, Array(snapshot.objects(HDItem.self).sorted(by: SortDescriptor(\.score), SortDescriptor(\.id)))))
            try await Task.sleep(for: .milliseconds(60))  // idle: compaction commits run
            let failures = HDBox()
            let pairs = kept
            DispatchQueue.concurrentPerform(iterations: 4) { i in
                for (snap, expected) in pairs where Array(snap.objects(HDItem.self).sorted(by: SortDescriptor(\.score), SortDescriptor(\.id))) != expected {
                    failures.note("thread \(i): a kept snapshot of v\(snap.version) changed")
                }
            }
            #expect(failures.all.isEmpty, "seed \(seed) burst \(burst): \(failures.all.prefix(2))")
            if kept.count > 2 { kept.removeFirst() }
        }
        _ = try db.store.compact()
        for (query, mirror) in mirrors {
            let fresh = Array(query.results(db))
            #expect(await hdEventually { mirror.mirror == fresh }, "seed \(seed): \(mirror.label)")
            #expect(mirror.failures.isEmpty, "seed \(seed): \(mirror.failures.prefix(3))")
        }
        tokens.removeAll()
    }

    /// Observers of every kind started and ended every way (invalidate, release, a `for await`
    /// loop that breaks, a cancelled task, an object stream that sees `.deleted`) while writes go
    /// on: afterwards no observer, commit listener or gather thread is left.
    @Test func observersEndedEveryWayLeaveNothingBehind() async throws {
        let seed: UInt64 = 0xD0_0501
        let db = try Database(path: hdPath("leak"), models: [HDItem.self], options: StoreOptions(durability: .noSync))
        try await db.write { tx in
            var r = HDRng(seed)
            for id in 0..<Self.ids { try tx.insert(r.item(id: id)) }
        }
        let writing = Task.detached {
            var rng = HDRng(seed &+ 1)
            for _ in 0..<300 {
                let s = rng.next()
                _ = try? await db.write { tx in
                    var r = HDRng(s)
                    try r.operate(tx, ids: Self.ids)
                }
            }
        }
        var rng = HDRng(seed &+ 2)
        for round in 0..<40 {
            let query = HDQuery.allCases[rng.below(HDQuery.allCases.count)]
            switch round % 5 {
            case 0:
                let token = query.results(db).observe(on: DispatchQueue(label: "hd.leak")) { _ in }
                try await Task.sleep(for: .milliseconds(rng.below(4)))
                token.invalidate()
            case 1:
                var token: NotificationToken? = db.observe(HDItem.self, key: rng.below(Self.ids), on: DispatchQueue(label: "hd.leak")) { _ in }
                try await Task.sleep(for: .milliseconds(rng.below(4)))
                token = nil
                _ = token
            case 2:
                let stream = query.results(db).changes
                let ended = HDBox()
                try await db.write { tx in try tx.upsert(HDItem(id: 0, name: "poke\(round)", group: 1, score: round, note: "")) }
                let task = Task.detached {
                    var n = 0
                    for await _ in stream {
                        n += 1
                        if n == 2 { break }
                    }
                    ended.add()
                }
                try await Task.sleep(for: .milliseconds(3))
                try await db.write { tx in try tx.upsert(HDItem(id: 0, name: "poke\(round)b", group: 1, score: round + 1, note: "")) }
                let broke = await hdEventually(seconds: 5) { ended.value == 1 }
                _ = broke  // a loop that saw no second change is ended by cancelling
                task.cancel()
                await task.value
            case 3:
                let stream = query.results(db).changes
                let task = Task.detached { for await _ in stream {} }
                try await Task.sleep(for: .milliseconds(rng.below(4)))
                task.cancel()
                await task.value
            default:
                let key = 10_000 + round
                try await db.write { tx in try tx.insert(HDItem(id: key, name: "gone", group: 0, score: 0, note: "")) }
                let stream = db.changes(HDItem.self, key: key)
                let ended = HDBox()
                let task = Task.detached {
                    var last = ""
                    for await change in stream { if case .deleted = change { last = "deleted" } }
                    ended.add()
                    return last
                }
                // The observer's first read has run: a deletion before it is never reported and
                // the loop would wait for ever (ObserverHuntFindingsTests.anObjectDeletedJustAfterObserveIsReportedDeleted).
                db.observerQueue.sync {}
                try await db.write { tx in _ = try tx.delete(HDItem.self, key: key) }
                let finished = await hdPatiently(seconds: 30) { ended.value == 1 }
                task.cancel()
                let seen = await task.value
                #expect(finished && seen == "deleted", "seed \(seed) round \(round): the stream did not end with .deleted")
            }
        }
        await writing.value
        let clean = await hdPatiently(seconds: 30) {
            db.observers.count == 0 && db.store.commitListenerCount == 0 && !db.observers.gatherThreadRunning
        }
        #expect(
            clean, "seed \(seed): observers \(db.observers.count), listeners \(db.store.commitListenerCount), gather thread \(db.observers.gatherThreadRunning)"
        )
    }

    /// Object observers and commit observers under writers on two handles of one file: every
    /// `.changed(object, fields:)` names exactly the fields that differ from the previous delivery
    /// and the last equals the stored object; `observeCommits` reports each commit once, in order.
    @Test func objectAndCommitObserversAreExactUnderConcurrentWriters() async throws {
        let seed: UInt64 = 0xD0_0601
        let path = hdPath("objects")
        let first = try Database(path: path, models: [HDItem.self], options: StoreOptions(durability: .noSync))
        let second = try Database(path: path, models: [HDItem.self], options: StoreOptions(durability: .noSync))
        try await first.write { tx in for id in 0..<8 { try tx.insert(HDItem(id: id, name: "a", group: 0, score: 0, note: "")) } }
        final class ObjectMirror: Sendable {
            let state = Mutex<(last: HDItem?, failures: [String], count: Int)>((nil, [], 0))
        }
        var mirrors: [(Int, ObjectMirror)] = []
        var tokens: [NotificationToken] = []
        for (i, db) in [first, second, first, second].enumerated() {
            let key = i % 2 == 0 ? 3 : 5
            let mirror = ObjectMirror()
            let initial = try db.object(HDItem.self, key: key)
            mirror.state.withLock { $0.last = initial }
            tokens.append(
                db.observe(HDItem.self, key: key, on: DispatchQueue(label: "hd.obj.\(i)")) { change in
                    mirror.state.withLock { s in
                        s.count += 1
                        guard case .changed(let object, let fields) = change else {
                            s.failures.append("unexpected \(change)")
                            return
                        }
                        if let last = s.last {
                            var differ: [String] = []
                            if last.name != object.name { differ.append("name") }
                            if last.group != object.group { differ.append("group") }
                            if last.score != object.score { differ.append("score") }
                            if last.note != object.note { differ.append("note") }
                            if Set(differ) != Set(fields) { s.failures.append("fields \(fields), differ \(differ): \(last) → \(object)") }
                        }
                        s.last = object
                    }
                })
            mirrors.append((key, mirror))
        }
        let versions = Mutex<[UInt64]>([])
        let commitToken = second.observeCommits(on: DispatchQueue(label: "hd.commits")) { change in
            versions.withLock { $0.append(change.version) }
            if change.models != ["HDItem"] || change.isFromOtherProcess { versions.withLock { $0.append(0) } }
        }
        // Each observer's first read has run (not waiting for it loses changes: see
        // ObserverHuntFindingsTests.anObjectChangeCommittedJustAfterObserveIsDelivered).
        first.observerQueue.sync {}
        second.observerQueue.sync {}
        let committed = HDBox()
        let startVersion = first.store.latestVersion
        let group = DispatchGroup()
        for w in 0..<4 {
            let db = w % 2 == 0 ? first : second
            group.enter()
            Thread {
                var rng = HDRng(seed &+ UInt64(w))
                for i in 0..<80 {
                    let key = [3, 5, 1][rng.below(3)]
                    let field = rng.below(4)
                    let value = w * 1000 + i  // a new value: every write is a commit
                    do {
                        try db.write { tx in
                            try tx.update(HDItem.self, key: key) { item in
                                switch field {
                                case 0: item.name = "n\(value)"
                                case 1: item.group = value
                                case 2: item.score = value
                                default: item.note = "t\(value)"
                                }
                            }
                        }
                        committed.add()
                    } catch { committed.note("\(error)") }
                }
                group.leave()
            }.start()
        }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                group.wait()
                c.resume()
            }
        }
        #expect(committed.all.isEmpty)
        let advanced = Int(first.store.latestVersion - startVersion)  // compaction commits included
        #expect(advanced >= committed.value)
        for (key, mirror) in mirrors {
            let stored = try second.object(HDItem.self, key: key)
            #expect(await hdEventually { mirror.state.withLock { $0.last } == stored }, "seed \(seed): key \(key)")
            #expect(mirror.state.withLock { $0.failures }.isEmpty, "seed \(seed): \(mirror.state.withLock { $0.failures.prefix(3) })")
        }
        #expect(await hdEventually { versions.withLock { $0.count } >= committed.value })
        let seen = versions.withLock { $0 }
        #expect(!seen.contains(0), "seed \(seed): a commit reported with other models or as another process's")
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0 < $1 }, "seed \(seed): commit versions out of order or repeated")
        #expect(seen.count == committed.value, "seed \(seed): \(seen.count) commits reported for \(committed.value)")
        withExtendedLifetime((tokens, commitToken)) {}
    }

    /// `close()` called from inside an async write (on the writer's thread) while other async
    /// writes are queued behind it, and a write through a second handle of the same file nested in
    /// a write of the first on one thread: nothing hangs, the write begun commits, every queued
    /// write is reported once, and the nested one throws instead of deadlocking.
    @Test func closeInsideAnAsyncWriteAndNestedWritesThroughAnotherHandle() async throws {
        let path = hdPath("inside")
        let db = try Database(path: path, models: [HDItem.self], options: StoreOptions(durability: .noSync))
        let other = try Database(path: path, models: [HDItem.self], options: StoreOptions(durability: .noSync))
        let book = HDOutcomes()
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for k in 0..<40 {
                tasks.addTask {
                    do {
                        try await db.write { tx in
                            try tx.insert(HDItem(id: k, name: "q", group: 0, score: k, note: ""))
                            if k == 10 { db.close() }
                        }
                        book.record(k, .success(()))
                    } catch { book.record(k, .failure(error)) }
                }
            }
            try await tasks.waitForAll()
        }
        #expect(book.wrongErrors.withLock { $0 }.isEmpty, "\(book.wrongErrors.withLock { $0.prefix(3) })")
        let reported = book.outcomes.withLock { $0 }
        #expect(reported.count == 40)
        let stored = Set(other.objects(HDItem.self).map(\.id))
        #expect(reported[10] == true && stored.contains(10), "the write that closed the database must commit")
        for (id, ok) in reported { #expect(ok == stored.contains(id), "write \(id) reported \(ok)") }
        // A write of the other handle nested in one of the reopened first handle, on one thread.
        let again = try Database(path: path, models: [HDItem.self], options: StoreOptions(durability: .noSync))
        let outcome = HDBox()
        let done = DispatchSemaphore(value: 0)
        Thread {
            do {
                try Self.nestedWrite(outer: again, inner: other)
                outcome.note("no error")
            } catch { outcome.note("\(error)") }
            done.signal()
        }.start()
        let finished = await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            DispatchQueue.global().async { c.resume(returning: done.wait(timeout: .now() + 10) == .success) }
        }
        #expect(finished, "a write of another handle nested in a write hung")
        let outer = try other.object(HDItem.self, key: 500)
        let inner = try other.object(HDItem.self, key: 501)
        // Either the nested write joined (both stored) or it threw and rolled the outer back.
        let said = outcome.all.first ?? "-"
        #expect(
            (said == "no error" && outer != nil && inner != nil) || (said != "no error" && outer == nil && inner == nil),
            "nested write: \(said), outer \(outer != nil), inner \(inner != nil)")
        again.close()
        other.close()
    }

    static func nestedWrite(outer: Database, inner: Database) throws {
        try outer.write { tx in
            try tx.insert(HDItem(id: 500, name: "outer", group: 0, score: 0, note: ""))
            try inner.write { tx2 in try tx2.insert(HDItem(id: 501, name: "inner", group: 0, score: 0, note: "")) }
        }
    }

    /// Observers narrowed with `keyPaths` under concurrent writers: a commit that changes only
    /// other fields delivers nothing, every modification is a change of an observed field, and the
    /// change sets keep a mirror of (id, score) exact.
    @Test func keyPathObserversUnderConcurrentWritersAreExact() async throws {
        let seed: UInt64 = 0xD0_0701
        let db = try Database(path: hdPath("keypaths"), models: [HDItem.self], options: StoreOptions(durability: .noSync))
        try await db.write { tx in
            var r = HDRng(seed)
            for id in 0..<Self.ids { try tx.insert(r.item(id: id)) }
        }
        // Only the observed field (score) is promised: a change of another field (group included,
        // for the queries that do not filter on it) is not a modification.
        let project: @Sendable (HDItem) -> HDItem = { HDItem(id: $0.id, name: "", group: 0, score: $0.score, note: "") }
        var mirrors: [(HDQuery, HDMirror)] = []
        var tokens: [NotificationToken] = []
        for query in [HDQuery.byKey, .groupByScore, .byName] {
            let mirror = HDMirror("keyPaths \(query)", project: project)
            tokens.append(query.results(db).observe(on: DispatchQueue(label: "hd.kp.\(query)"), keyPaths: [\.score]) { mirror.take($0) })
            mirrors.append((query, mirror))
        }
        let group = DispatchGroup()
        for w in 0..<3 {
            group.enter()
            Thread {
                var rng = HDRng(seed &+ UInt64(w))
                for _ in 0..<120 {
                    try? db.write { tx in
                        for _ in 0..<(1 + rng.below(2)) { try rng.operate(tx, ids: Self.ids) }
                    }
                }
                group.leave()
            }.start()
        }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                group.wait()
                c.resume()
            }
        }
        // A commit that changes only unobserved fields delivers nothing.
        for (query, mirror) in mirrors {
            let fresh = Array(query.results(db)).map(project)
            #expect(await hdEventually { mirror.mirror == fresh }, "seed \(seed): \(mirror.label)")
        }
        let before = mirrors.map { $0.1.deliveries }
        try await db.write { tx in
            for id in 0..<Self.ids { _ = try? tx.update(HDItem.self, key: id) { $0.note = "only-note" } }
        }
        try await Task.sleep(for: .milliseconds(100))
        for ((_, mirror), count) in zip(mirrors, before) where mirror.label != "keyPaths byName" {
            #expect(mirror.deliveries == count, "seed \(seed): \(mirror.label) delivered for a note-only commit")
        }
        for (_, mirror) in mirrors { #expect(mirror.failures.isEmpty, "seed \(seed): \(mirror.failures.prefix(3))") }
        tokens.removeAll()
    }
}

/// The latest instant noted, from any thread.
private final class HDLatestInstant: Sendable {
    private let latest = Mutex<ContinuousClock.Instant?>(nil)
    func note(_ instant: ContinuousClock.Instant) { latest.withLock { $0 = max($0 ?? instant, instant) } }
    var value: ContinuousClock.Instant? { latest.withLock { $0 } }
}
