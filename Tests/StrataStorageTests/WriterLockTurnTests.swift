import Foundation
import Testing

@testable import StrataStorage
import StrataTestWorkloads

/// The writer lock across processes is taken in turn (WriterLock.swift): beside another process
/// that commits in a loop, a write waits for the transaction in progress and at most the one that
/// began before it queued, never for a run of the other's. (An fcntl lock alone let the loop
/// take it back again and again: a write here once waited through hundreds of the loop's commits.)
@Suite struct WriterLockTurnTests {
    @Test func aWriteBesideAWriterInALoopWaitsItsTurnOnly() async throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let writer = try await HelperProcess.commitLoop(on: path)
        defer { writer.process.send(SIGKILL) }
        let store = try Store(path: path)
        func loopCommits(_ txn: ReadTransaction) throws -> UInt64 { CrashWorkload.u64(try txn.tree("meta")?.get(Array("last".utf8))) ?? 0 }
        var mostPassed: UInt64 = 0
        var passedInAll: UInt64 = 0
        var longWaits = 0
        for i in 0..<300 {
            let before = try store.read { try loopCommits($0) }
            let at = try store.write(durability: .noSync) { txn -> UInt64 in
                try txn.createTree("mine").put(Array("k\(i)".utf8), [1])
                return CrashWorkload.u64(try txn.tree("meta")?.get(Array("last".utf8))) ?? 0
            }
            mostPassed = max(mostPassed, at - before)
            passedInAll += at - before
            if at - before > 3 { longWaits += 1 }
        }
        print(
            "WriterLockTurnTests: the loop committed \(passedInAll) times while 300 writes waited, at most \(mostPassed) during one, more than 3 during \(longWaits)"
        )
        #expect(passedInAll > 0, "the other process made no commit: nothing was contended")
        // In turn, a write waits for one or two of the loop's commits. A busy machine may still
        // deschedule this process between its read and its lock requests (then the loop goes on
        // for that long, every few tens of microseconds where syncs cost nothing), so longer waits
        // are allowed now and then; without turns, the longest was 288-1844 commits here.
        #expect(longWaits <= 30, "\(longWaits) of 300 writes waited through more than 3 of the other process's commits")
        #expect(mostPassed < 150, "a write waited while the other process committed \(mostPassed) times")
    }
}
