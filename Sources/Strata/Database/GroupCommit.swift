import Foundation
import Dispatch
import Synchronization

// Group commit: writes that arrive while the writer is busy (usually waiting for the disk) are
// committed together, in one transaction with one sync, when it is free again. Each write runs in
// its own savepoint, so it stays atomic on its own: one that throws is rolled back alone and gets
// its error, the others commit. Nobody waits on purpose; the group is whatever queued up during the
// previous commit, so a lone writer commits at once and a crowd shares the sync.

/// The writer's own thread and the writes waiting for it.
///
/// A thread of its own rather than a Dispatch queue: Dispatch runs a queue on its shared pool, and
/// on a small machine where other work blocks pool threads (semaphores, synchronous I/O), a queued
/// write waited up to a second for a thread. The thread starts with the first queued write and
/// ends after a second with none.
final class WriteQueue: Sendable {
    struct Entry: Sendable {
        let durability: Durability?
        /// Runs the caller's closure in the transaction; on success returns how to report the
        /// commit's outcome (nil: committed) to the caller.
        let perform: @Sendable (Transaction) throws -> @Sendable ((any Error)?) -> Void
        /// Reports a failure of the caller's own closure, or a commit that never happened.
        let fail: @Sendable (any Error) -> Void
    }

    private struct Pending {
        var entries: [Entry] = []
        /// The database the entries write to, held only while some are waiting: an idle queue
        /// must not keep its database alive.
        var db: Database?
        var threadRunning = false
        /// The thread was signalled and has not yet found the queue empty.
        var signalled = false
        /// Entries queued or in the group being committed.
        var unfinished = 0
    }

    private let pending = Mutex(Pending())
    private let wake = DispatchSemaphore(value: 0)
    /// Most writes in one commit: bounds the first writer's wait. (The commit's memory is bounded
    /// by `transactionMemory`, savepoints or not: Spill.swift.)
    static let maxGroup = 1_000

    /// Writes queued or being committed (for tests).
    var unfinished: Int { pending.withLock { $0.unfinished } }
    /// Whether the writer thread runs (for tests: it ends a second or two after the last write).
    var threadRunning: Bool { pending.withLock { $0.threadRunning } }

    func enqueue(_ entry: Entry, for db: Database) {
        let (start, signal) = pending.withLock { state -> (Bool, Bool) in
            state.entries.append(entry)
            state.unfinished += 1
            state.db = db
            if !state.threadRunning {
                state.threadRunning = true
                state.signalled = true
                return (true, false)
            }
            if state.signalled { return (false, false) }
            state.signalled = true
            return (false, true)
        }
        if start {
            let thread = Thread { [self] in run() }
            thread.name = "strata.writer"
            thread.qualityOfService = .userInitiated
            thread.start()
        } else if signal {
            wake.signal()
        }
    }

    /// The writer thread: commits what is queued, group after group, and sleeps when there is
    /// nothing; ends after a second with nothing.
    private func run() {
        while true {
            let (group, db) = pending.withLock { state -> ([Entry], Database?) in
                if state.entries.isEmpty {
                    state.signalled = false
                    state.db = nil
                    return ([], nil)
                }
                let count = min(state.entries.count, WriteQueue.maxGroup)
                let group = Array(state.entries.prefix(count))
                state.entries.removeFirst(count)
                return (group, state.db)
            }
            if let db, !group.isEmpty {
                commit(group, db)
                pending.withLock { $0.unfinished -= group.count }
                continue
            }
            if wake.wait(timeout: .now() + .seconds(1)) == .timedOut {
                let idle = pending.withLock { state -> Bool in
                    guard state.entries.isEmpty else { return false }
                    state.threadRunning = false
                    return true
                }
                if idle { return }
            }
        }
    }

    private func commit(_ group: [Entry], _ db: Database) {
        let storeDefault = db.store.durability
        let durability: Durability = group.contains { ($0.durability ?? storeDefault) == .full } ? .full : .noSync
        var reports: [@Sendable ((any Error)?) -> Void] = []
        var resolved = 0  // entries before this index have a report or were failed
        do {
            try db.store.write(durability: durability) { txn in
                try db.registry.checkStoredSchemas(in: txn.tree(Catalog.schemaTree))
                for entry in group {
                    let tx = Transaction(registry: db.registry, txn: txn)
                    do {
                        let report = try tx.savepoint { try db.withOpenTransaction(tx) { try entry.perform(tx) } }
                        reports.append(report)
                    } catch {
                        entry.fail(error)
                    }
                    resolved += 1
                }
            }
        } catch {
            let failure = strataError(error)
            for report in reports { report(failure) }
            for entry in group[resolved...] { entry.fail(failure) }
            return
        }
        for report in reports { report(nil) }
    }
}

/// An engine error as the object layer reports it.
func strataError(_ error: any Error) -> any Error {
    guard let storage = error as? StorageError else { return error }
    return StrataError(storage)
}

extension Database {
    /// Runs `body` in a write transaction on the writer's thread and returns its result once it is
    /// committed. Writes that wait for the writer together are committed together, with one sync
    /// (group commit); each is still atomic on its own: if `body` throws, only its own changes are
    /// rolled back and the error is rethrown here. A write already queued is not cancelled with its
    /// task. `durability` is this write's minimum: a group syncs if any of its writes asks for it.
    ///
    /// ```swift
    /// let saved = try await db.write { tx in try tx.insert(Message(id: nil, text: "hi")) }
    /// ```
    @discardableResult
    public func write<R: Sendable>(
        durability: Durability? = nil,
        _ body: @escaping @Sendable (Transaction) throws -> R
    ) async throws -> R {
        try Task.checkCancellation()
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<R, any Error>) in
            enqueueWrite(durability: durability, body) { continuation.resume(with: $0) }
        }
    }

    /// Runs `body` in a write transaction on the writer's thread (grouped with other queued writes
    /// as `write(durability:_:) async` is) and calls `completion` on `completionQueue` with its
    /// result once committed, or with the error. For code that does not use async/await.
    ///
    /// ```swift
    /// db.writeAsync(completionQueue: .main) { tx in
    ///     try tx.upsert(Person(id: "u1", name: "Ana", age: 31))
    /// } completion: { result in
    ///     if case .failure(let error) = result { print("not saved:", error) }
    /// }
    /// ```
    public func writeAsync<R: Sendable>(
        durability: Durability? = nil, completionQueue: DispatchQueue,
        _ body: @escaping @Sendable (Transaction) throws -> R,
        completion: @escaping @Sendable (Result<R, any Error>) -> Void
    ) {
        enqueueWrite(durability: durability, body) { result in completionQueue.async { completion(result) } }
    }

    /// Queues `body` for the writer's thread; `deliver` gets its result once the commit is done,
    /// or the error (its own, or the commit's), exactly once.
    private func enqueueWrite<R: Sendable>(
        durability: Durability?, _ body: @escaping @Sendable (Transaction) throws -> R,
        deliver: @escaping @Sendable (Result<R, any Error>) -> Void
    ) {
        writes.enqueue(
            WriteQueue.Entry(
                durability: durability,
                perform: { tx in
                    let value = try body(tx)
                    return { error in deliver(error.map { .failure($0) } ?? .success(value)) }
                }, fail: { deliver(.failure($0)) }), for: self)
    }
}
