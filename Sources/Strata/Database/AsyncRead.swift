import Foundation
import Dispatch
import Synchronization

// Async reads off the caller's executor. A read is synchronous work (a query, a scan) that may be
// long: run inline, it would hold one of Swift concurrency's few cooperative threads (on Linux they
// are Dispatch's global threads too, so a long read also stalls every queue there). So an async
// read runs on a thread of Strata's own small pool, and the task awaits it. Cancelling the task
// stops the read at its next step (a scan's entry, an object decoded: Progress.swift), throws
// `CancellationError`, and drops the snapshot.

/// Threads for async reads: started on demand, up to twice the cores (at least 4) so that a long
/// read does not hold up short ones; each ends after a second without work.
final class ReadPool: Sendable {
    static let shared = ReadPool()
    static let maxThreads = max(4, 2 * ProcessInfo.processInfo.activeProcessorCount)

    private struct State {
        var jobs: [@Sendable () -> Void] = []
        var threads = 0
        /// Threads waiting for work, and signals sent to them not yet taken.
        var sleeping = 0
        var wakes = 0
    }

    private let state = Mutex(State())
    private let available = DispatchSemaphore(value: 0)

    /// Threads running (for tests).
    var threadCount: Int { state.withLock { $0.threads } }

    func run(_ job: @escaping @Sendable () -> Void) {
        let (start, wake) = state.withLock { s -> (Bool, Bool) in
            s.jobs.append(job)
            if s.sleeping > s.wakes {
                s.wakes += 1
                return (false, true)
            }
            if s.threads < ReadPool.maxThreads {
                s.threads += 1
                return (true, false)
            }
            return (false, false)  // a busy thread takes it when it is done
        }
        if wake { available.signal() }
        if start {
            let thread = Thread { [self] in work() }
            thread.name = "strata.read"
            thread.start()
        }
    }

    /// Whether the calling thread is one of the pool's (for tests).
    static var isPoolThread: Bool { Thread.current.threadDictionary[ReadPool.marker] != nil }
    private static let marker = "strata.read-pool"

    private func work() {
        Thread.current.threadDictionary[ReadPool.marker] = true
        while true {
            // Finding no job and counting itself as sleeping in one step: a job queued between the
            // two (with every thread started) would find no sleeper to wake and wait for the timeout.
            let job = state.withLock { s -> (@Sendable () -> Void)? in
                if s.jobs.isEmpty {
                    s.sleeping += 1
                    return nil
                }
                return s.jobs.removeFirst()
            }
            if let job {
                job()
                continue
            }
            let timedOut = available.wait(timeout: .now() + .seconds(1)) == .timedOut
            let done = state.withLock { s -> Bool in
                s.sleeping -= 1
                if !timedOut { s.wakes -= 1 }
                guard timedOut, s.jobs.isEmpty else { return false }
                s.threads -= 1
                return true
            }
            if done { return }
        }
    }
}

extension Database {
    /// Runs `body` on a snapshot of the newest commit, from Swift concurrency, on a thread of
    /// Strata's own (never on the caller's executor: a long query holds no cooperative thread).
    /// Reads never wait for the writer. If the task is cancelled, the read stops at its next
    /// step (every thousand entries scanned or objects decoded) and throws `CancellationError`,
    /// and its snapshot is released.
    ///
    /// ```swift
    /// let count = try await db.read { snapshot in snapshot.objects(Person.self).count }
    /// ```
    public func read<R: Sendable>(_ body: @escaping @Sendable (Snapshot) throws -> R) async throws -> R {
        try Task.checkCancellation()
        let control = OperationControl(handler: nil, watchesTask: false)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<R, any Error>) in
                ReadPool.shared.run {
                    let result = Result { try control.install { try self.onNewestSnapshot(body) } }
                    if control.isCancelled {
                        continuation.resume(throwing: CancellationError())
                    } else {
                        continuation.resume(with: result)
                    }
                }
            }
        } onCancel: {
            control.cancel()
        }
    }
}
