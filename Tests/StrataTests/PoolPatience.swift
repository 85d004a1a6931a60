import Foundation

// Waiting for work that runs on Swift's shared pool, in a full `swift test` run on two cores.
//
// Swift Testing enqueues every test at the start, and the suite's long synchronous tests keep
// both threads of the pool busy for minutes on a loaded machine; every task enqueued later (a
// LiveResults delivery, an actor hop, an async write) waits behind all of them. A wall-clock
// deadline alone then fails tests whose work has simply not had its turn yet (three did so in
// one 12-minute run). The pool's queue is first in, first out: a task enqueued after the awaited
// work runs only after that work has been dequeued. So these helpers count how often their own
// queued work ran after the deadline, and only then call the wait a failure.

/// Polls `condition` every 2 ms until it holds. Gives up when `seconds` have passed and the poll
/// has then run `polls` more times on the pool (each time queued behind whatever it waits for).
func poolEventually(seconds: Double = 120, polls: Int = 500, _ condition: () throws -> Bool) async throws -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    var pollsPastDeadline = 0
    while try !condition() {
        if Date() > deadline {
            pollsPastDeadline += 1
            if pollsPastDeadline > polls { return false }
        }
        try await Task.sleep(for: .milliseconds(2))
    }
    return true
}

/// From a thread outside the pool: waits (up to `seconds`) until a task enqueued now has run on
/// the pool, that is until everything enqueued before it has been dequeued.
func waitForPoolToCatchUp(seconds: Double = 1_800) -> Bool {
    let ran = DispatchSemaphore(value: 0)
    Task { ran.signal() }
    return ran.wait(timeout: .now() + seconds) == .success
}

/// From a thread outside the pool: waits for `group`, which waits for tasks on the pool. After
/// `seconds`, each further wait is granted only while the pool shows it has caught up with
/// what was enqueued before (up to `rounds` times).
func waitForPoolWork(_ group: DispatchGroup, seconds: Double, rounds: Int = 20) -> Bool {
    if group.wait(timeout: .now() + seconds) == .success { return true }
    for _ in 0..<rounds {
        guard waitForPoolToCatchUp() else { return false }
        if group.wait(timeout: .now() + 5) == .success { return true }
    }
    return false
}
