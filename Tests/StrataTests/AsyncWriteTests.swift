import Testing
import Foundation
import Dispatch
@testable import Strata

private struct Memo: Model, Equatable {
    var id: Int
    var text: String
}

private struct Refused: Error {}

/// Holds the writer on a thread of its own until released, so that writes queue up behind it.
/// Blocking waits happen on dedicated threads: not on the cooperative pool the test tasks need,
/// nor on Dispatch's pool (on 2 cores two blocked workers stall the writer's queue for a second).
private final class HeldWriter: Sendable {
    private let release = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)

    static func hold(_ db: Database) async -> HeldWriter {
        let held = HeldWriter()
        await withCheckedContinuation { (entered: CheckedContinuation<Void, Never>) in
            Thread {
                _ = try? db.write { _ in
                    entered.resume()
                    held.release.wait()
                }
                held.done.signal()
            }.start()
        }
        return held
    }

    func letGo() async {
        release.signal()
        await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
            Thread {
                self.done.wait()
                finished.resume()
            }.start()
        }
    }
}

/// Waits (polling, without blocking the cooperative pool) until `n` writes are queued.
private func waitUntilQueued(_ db: Database, _ n: Int) async throws {
    for _ in 0..<5_000 where db.writes.unfinished < n { try await Task.sleep(nanoseconds: 1_000_000) }
    #expect(db.writes.unfinished >= n, "only \(db.writes.unfinished) of \(n) writes queued")
}

@Suite struct AsyncWriteTests {
    @Test func concurrentWritersShareCommits() async throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path); try? FileManager.default.removeItem(atPath: path + "-lock") }
        let db = try Database(path: path, models: [Memo.self])  // durable (.full) by default
        let before = db.store.latestVersion
        let held = await HeldWriter.hold(db)
        let writers = Task {
            try await withThrowingTaskGroup(of: Memo.self) { group in
                for i in 0..<100 {
                    group.addTask { try await db.write { tx in try tx.insert(Memo(id: i, text: "n\(i)")) } }
                }
                var stored: [Memo] = []
                for try await note in group { stored.append(note) }
                return stored
            }
        }
        // The drain may take a first group before it blocks on the held writer: two commits at most.
        try await waitUntilQueued(db, 100)
        await held.letGo()
        let stored = try await writers.value
        #expect(stored.count == 100)
        let notes = try await db.read { try $0.objects(Memo.self).fetch() }
        #expect(notes.map(\.id).sorted() == Array(0..<100))
        let commits = db.store.latestVersion - before
        #expect(commits <= 2, "100 queued writes took \(commits) commits")
    }

    @Test func aFailingWriterRollsBackOnlyItself() async throws {
        let db = try Database.inMemory(models: [Memo.self])
        try await db.write { tx in try tx.insert(Memo(id: 1_000, text: "existing")) }
        let before = db.store.latestVersion
        let held = await HeldWriter.hold(db)
        let writers = Task {
            await withTaskGroup(of: (Int, Result<Int, any Error>).self) { group in
                for i in 0..<10 {
                    group.addTask {
                        do {
                            return (
                                i,
                                .success(
                                    try await db.write { tx -> Int in
                                        try tx.insert(Memo(id: i, text: "w\(i)"))
                                        if i == 3 { throw Refused() }  // its own error
                                        if i == 6 { try tx.insert(Memo(id: 1_000, text: "dup")) }  // a duplicate key
                                        return i
                                    })
                            )
                        } catch {
                            return (i, .failure(error))
                        }
                    }
                }
                var outcomes: [Int: Result<Int, any Error>] = [:]
                for await (i, outcome) in group { outcomes[i] = outcome }
                return outcomes
            }
        }
        try await waitUntilQueued(db, 10)
        await held.letGo()
        let outcomes = await writers.value
        for i in 0..<10 {
            switch (i, outcomes[i]) {
            case (3, .failure(let error)?): #expect(error is Refused)
            case (6, .failure(let error)?): #expect(error as? StrataError == .duplicateKey(model: "Memo", key: "1000"))
            case (_, .success(let value)?): #expect(value == i && i != 3 && i != 6)
            default: Issue.record("writer \(i): unexpected outcome \(String(describing: outcomes[i]))")
            }
        }
        let ids = try await db.read { try $0.objects(Memo.self).fetch().map(\.id) }.sorted()
        #expect(ids == [0, 1, 2, 4, 5, 7, 8, 9, 1_000])
        #expect(try db.object(Memo.self, key: 1_000)?.text == "existing")
        #expect(db.store.latestVersion - before <= 2)
    }

    @Test func writeAsyncCompletesOnTheNamedQueue() async throws {
        let db = try Database.inMemory(models: [Memo.self])
        let key = DispatchSpecificKey<String>()
        let queue = DispatchQueue(label: "caller")
        queue.setSpecific(key: key, value: "caller")
        let success: (String?, Result<Memo, any Error>) = await withCheckedContinuation { continuation in
            db.writeAsync(completionQueue: queue) { tx in
                try tx.insert(Memo(id: 1, text: "one"))
            } completion: { result in
                continuation.resume(returning: (DispatchQueue.getSpecific(key: key), result))
            }
        }
        #expect(success.0 == "caller")
        #expect((try? success.1.get()) == Memo(id: 1, text: "one"))
        let failure: (String?, Result<Memo, any Error>) = await withCheckedContinuation { continuation in
            db.writeAsync(completionQueue: queue) { tx in
                try tx.insert(Memo(id: 1, text: "again"))
            } completion: { result in
                continuation.resume(returning: (DispatchQueue.getSpecific(key: key), result))
            }
        }
        #expect(failure.0 == "caller")
        guard case .failure(let error) = failure.1 else { Issue.record("a duplicate insert succeeded"); return }
        #expect(error as? StrataError == .duplicateKey(model: "Memo", key: "1"))
        #expect(try db.object(Memo.self, key: 1)?.text == "one")
    }

    @Test func nestedWriteJoinsAsASavepoint() throws {
        let db = try Database.inMemory(models: [Memo.self])
        let before = db.store.latestVersion
        try db.write { tx in
            try tx.insert(Memo(id: 1, text: "outer"))
            #expect(throws: Refused.self) {
                try db.write { inner in
                    #expect(try inner.object(Memo.self, key: 1) != nil, "the nested write sees the outer's writes")
                    try inner.insert(Memo(id: 2, text: "rolled back"))
                    throw Refused()
                }
            }
            try db.write { inner in try inner.insert(Memo(id: 3, text: "kept")) }
            #expect(try tx.object(Memo.self, key: 2) == nil)
        }
        #expect(db.store.latestVersion == before + 1, "one commit for the whole")
        #expect(try db.read { try $0.objects(Memo.self).fetch().map(\.id) } == [1, 3])
    }

    @Test func asyncReadAndWritesAfterClose() async throws {
        let db = try Database.inMemory(models: [Memo.self])
        try await db.write { tx in try tx.insert(Memo(id: 7, text: "seven")) }
        let text = try await db.read { snapshot in try snapshot.object(Memo.self, key: 7)?.text }
        #expect(text == "seven")
        db.close()
        await #expect(throws: StrataError.databaseClosed) {
            try await db.write { tx in try tx.insert(Memo(id: 8, text: "late")) }
        }
        // The writer thread ends once nothing is queued (it looks every second).
        for _ in 0..<300 where db.writes.threadRunning { try await Task.sleep(nanoseconds: 10_000_000) }
        #expect(!db.writes.threadRunning)
    }
}
