import Dispatch
import Foundation
import StrataStorage
import Synchronization
import Testing

@testable import Strata

struct CLNote: Model, Equatable {
    var id: Int
    var text: String
}

struct CLUnregistered: Model, Equatable {
    var id: Int
}

/// What a stream delivered, read while a task consumes it.
private final class Collected<Element: Sendable>: Sendable {
    let items = Mutex<[Element]>([])
    let finished = Atomic<Bool>(false)
    var count: Int { items.withLock { $0.count } }
    var all: [Element] { items.withLock { $0 } }
    var isDone: Bool { finished.load(ordering: .sequentiallyConsistent) }
}

/// Consumes `stream` in a task until it finishes.
private func consume<Element: Sendable>(_ stream: AsyncStream<Element>) -> (Collected<Element>, Task<Void, Never>) {
    let collected = Collected<Element>()
    let task = Task {
        for await item in stream { collected.items.withLock { $0.append(item) } }
        collected.finished.store(true, ordering: .sequentiallyConsistent)
    }
    return (collected, task)
}

/// Polls `condition` for up to `seconds`.
private func eventually(seconds: Double = 120, _ condition: () -> Bool) async throws -> Bool {
    try await poolEventually(seconds: seconds, condition)
}

private actor Updater {}

/// Closing a database ends what follows it: every observer hears `databaseClosed` once, as its
/// last delivery, and every change stream finishes, instead of waiting for commits that cannot
/// come. (An independent newcomer's test found `for await` loops hanging after `close()`.)
struct CloseTests {
    func openWithNotes(_ path: String) throws -> Database {
        let db = try Database(path: path, models: [CLNote.self])
        try db.write { tx in
            for i in 1...3 { try tx.insert(CLNote(id: i, text: "n\(i)")) }
        }
        return db
    }

    @Test func resultStreamsEndWithDatabaseClosed() async throws {
        let db = try openWithNotes(databasePath())
        let (all, allTask) = consume(db.objects(CLNote.self).changes)
        let (some, someTask) = consume(db.objects(CLNote.self).filter(#Predicate { $0.id > 1 }).changes(keyPaths: [\.text]))
        defer {
            allTask.cancel()
            someTask.cancel()
        }
        let ok1 = try await eventually { all.count == 1 && some.count == 1 }
        #expect(ok1)
        try await db.write { tx in try tx.insert(CLNote(id: 4, text: "n4")) }
        let ok2 = try await eventually { all.count == 2 && some.count == 2 }
        #expect(ok2)
        db.close()
        let ok3 = try await eventually { all.isDone && some.isDone }
        #expect(ok3)
        for stream in [all.all, some.all] {
            guard stream.count == 3 else {
                Issue.record("expected initial, update, databaseClosed; got \(stream)")
                continue
            }
            guard case .initial = stream[0], case .update(let results, _, let insertions, _) = stream[1], case .error(.databaseClosed) = stream[2] else {
                Issue.record("expected initial, update, databaseClosed; got \(stream)")
                continue
            }
            #expect(insertions == [results.count - 1])
        }
    }

    @Test func objectAndCommitStreamsEndWithTheDatabase() async throws {
        let db = try openWithNotes(databasePath())
        let (object, objectTask) = consume(db.changes(CLNote.self, key: 1))
        let (commits, commitsTask) = consume(db.commits)
        defer {
            objectTask.cancel()
            commitsTask.cancel()
        }
        // The observers listen once their first read ran: write until a change reaches both (on a
        // loaded machine that can take a while; nothing here blocks the task's thread).
        var heard = false
        for text in 0..<600 where !heard {
            try await db.write { tx in _ = try tx.update(CLNote.self, key: 1) { $0.text = "t\(text)" } }
            heard = try await eventually(seconds: 0.1) { object.count > 0 && commits.count > 0 }
        }
        #expect(heard)
        db.close()
        let ok4 = try await eventually { object.isDone && commits.isDone }
        #expect(ok4)
        guard case .error(.databaseClosed) = object.all.last else {
            Issue.record("the object stream's last change is \(String(describing: object.all.last))")
            return
        }
        #expect(object.all.dropLast().allSatisfy { if case .changed = $0 { true } else { false } })
    }

    @Test func streamsBegunAfterCloseFinishAtOnce() async throws {
        let db = try openWithNotes(databasePath())
        db.close()
        let (results, resultsTask) = consume(db.objects(CLNote.self).changes)
        let (object, objectTask) = consume(db.changes(CLNote.self, key: 1))
        let (commits, commitsTask) = consume(db.commits)
        defer {
            resultsTask.cancel()
            objectTask.cancel()
            commitsTask.cancel()
        }
        let ok5 = try await eventually { results.isDone && object.isDone && commits.isDone }
        #expect(ok5)
        guard case .error(.databaseClosed) = results.all.first, results.count == 1 else {
            Issue.record("\(results.all)")
            return
        }
        guard case .error(.databaseClosed) = object.all.first, object.count == 1 else {
            Issue.record("\(object.all)")
            return
        }
        #expect(commits.count == 0)
    }

    @Test func streamsOfAModelNeverPassedToTheDatabaseFinish() async throws {
        let db = try openWithNotes(databasePath())
        defer { db.close() }
        let (results, resultsTask) = consume(db.objects(CLUnregistered.self).changes)
        let (object, objectTask) = consume(db.changes(CLUnregistered.self, key: 1))
        defer {
            resultsTask.cancel()
            objectTask.cancel()
        }
        let ok6 = try await eventually { results.isDone && object.isDone }
        #expect(ok6)
        let resultErrors = results.all.map { change -> StrataError? in if case .error(let e) = change { e } else { nil } }
        let objectErrors = object.all.map { change -> StrataError? in if case .error(let e) = change { e } else { nil } }
        for errors in [resultErrors, objectErrors] {
            guard errors.count == 1, case .unsupportedType(model: "CLUnregistered", _, _) = errors[0] else {
                Issue.record("\(errors)")
                continue
            }
        }
    }

    @Test func callbackObserversHearDatabaseClosedOnceAndNothingAfter() async throws {
        let path = databasePath()
        let db = try openWithNotes(path)
        let resultsChanges = Collected<ResultsChange<CLNote>>()
        let objectChanges = Collected<ObjectChange<CLNote>>()
        let queue = DispatchQueue(label: "close-tests")
        let resultsToken = db.objects(CLNote.self).observe(on: queue) { change in resultsChanges.items.withLock { $0.append(change) } }
        let objectToken = db.observe(CLNote.self, key: 2, on: queue) { change in objectChanges.items.withLock { $0.append(change) } }
        // An invalidated observer hears nothing, the close included.
        let silent = Collected<ResultsChange<CLNote>>()
        let silentToken = db.objects(CLNote.self).observe(on: queue) { change in silent.items.withLock { $0.append(change) } }
        let ok7 = try await eventually { resultsChanges.count == 1 && silent.count == 1 }
        #expect(ok7)
        silentToken.invalidate()
        try await db.write { tx in try tx.update(CLNote.self, key: 2) { $0.text = "changed" } }
        let ok8 = try await eventually { resultsChanges.count == 2 && objectChanges.count == 1 }
        #expect(ok8)
        db.close()
        let ok9 = try await eventually { resultsChanges.count == 3 && objectChanges.count == 2 }
        #expect(ok9)
        // Another handle's commits are not heard by the closed one's observers.
        let other = try Database(path: path, models: [CLNote.self])
        try await other.write { tx in
            try tx.update(CLNote.self, key: 2) { $0.text = "again" }
            try tx.insert(CLNote(id: 9, text: "n9"))
        }
        other.close()
        try await Task.sleep(for: .milliseconds(200))
        queue.sync {}
        guard case .error(.databaseClosed) = resultsChanges.all.last, resultsChanges.count == 3 else {
            Issue.record("\(resultsChanges.all)")
            return
        }
        guard case .error(.databaseClosed) = objectChanges.all.last, objectChanges.count == 2 else {
            Issue.record("\(objectChanges.all)")
            return
        }
        #expect(silent.count == 1)
        withExtendedLifetime((resultsToken, objectToken)) {}
    }

    @Test func liveResultsAndLiveObjectsShowDatabaseClosed() async throws {
        let db = try openWithNotes(databasePath())
        let updater = Updater()
        let people = LiveResults(db.objects(CLNote.self), updatingOn: updater)
        let note = LiveObject(CLNote.self, key: 1, in: db, updatingOn: updater)
        let ok10 = try await eventually { people.updateCount >= 1 && note.updateCount >= 1 }
        #expect(ok10)
        #expect(people.error == nil && note.error == nil)
        db.close()
        let ok11 = try await eventually { people.error == .databaseClosed && note.error == .databaseClosed }
        #expect(ok11)
        // What was shown stays.
        #expect(people.results.count == 3)
        #expect(note.object?.text == "n1")
    }

    /// A deletion read just before the close still ends the object's observation: `.deleted` is
    /// delivered (the close handler was already gone, so no closing error would follow), and the
    /// stream finishes. (An independent test found neither arriving when the app's queue was busy.)
    @Test func aDeletionJustBeforeTheCloseStillEndsTheObservation() async throws {
        let db = try openWithNotes(databasePath())
        let queue = DispatchQueue(label: "close-tests.busy")
        let heard = Collected<ObjectChange<CLNote>>()
        let token = db.observe(CLNote.self, key: 3, on: queue) { change in heard.items.withLock { $0.append(change) } }
        db.observerQueue.sync {}  // the first read ran
        let gate = DispatchSemaphore(value: 0)
        queue.async { gate.wait() }  // the app's queue is busy for a moment
        try await db.write { tx in _ = try tx.delete(CLNote.self, key: 3) }
        db.observerQueue.sync {}  // the observer has read the deletion (queued by the commit)
        db.close()
        gate.signal()
        let ok = try await eventually { heard.count == 1 }
        #expect(ok)
        guard case .deleted = heard.all.first else {
            Issue.record("\(heard.all)")
            return
        }
        withExtendedLifetime(token) {}
    }

    @Test func aTransactionBegunBeforeCloseFinishes() throws {
        let path = databasePath()
        let db = try openWithNotes(path)
        try db.write { tx in
            db.close()
            try tx.insert(CLNote(id: 5, text: "n5"))
        }
        #expect(throws: StrataError.databaseClosed) { try db.write { tx in try tx.insert(CLNote(id: 6, text: "n6")) } }
        let reopened = try Database(path: path, models: [CLNote.self])
        defer { reopened.close() }
        #expect(try reopened.objects(CLNote.self).fetch().map(\.id) == [1, 2, 3, 5])
    }

    /// Results kept from before the close hold the newest commit's shared snapshot; reads begun
    /// after the close must not be handed that snapshot (they answered as if still open).
    @Test func readsAfterCloseThrowWhileEarlierResultsAreKept() async throws {
        let path = databasePath()
        let db = try openWithNotes(path)
        let kept = db.objects(CLNote.self)
        db.close()
        #expect(kept.map(\.id) == [1, 2, 3])  // taken before the close: still readable
        #expect(throws: StrataError.databaseClosed) { try db.object(CLNote.self, key: 1) }
        #expect(throws: StrataError.databaseClosed) { try db.snapshot() }
        #expect(throws: StrataError.databaseClosed) { try db.read { $0.objects(CLNote.self).count } }
        #expect(throws: StrataError.databaseClosed) { try db.run(DBRead.count(CLNote.self)) }
        await #expect(throws: StrataError.databaseClosed) { try await db.read { $0.objects(CLNote.self).count } }
        let after = db.objects(CLNote.self)
        #expect(after.isEmpty)
        #expect(after.error == .databaseClosed)
        withExtendedLifetime(kept) {}
    }
}
