import Testing
import Foundation
import StrataStorage
import StrataTestWorkloads
@testable import Strata

private struct ROPlain: Model, Equatable {
    var id: Int
    var name: String
}

private struct ROIndexed: Model, Equatable {
    static let modelName = "ROPlain"
    static let indexes: [PartialKeyPath<ROIndexed> & Sendable] = [\.name]
    var id: Int
    var name: String
}

private struct ROOther: Model {
    var id: Int
}

/// A database opened on a read-only store reads what the file holds and writes nothing; a model
/// whose stored schema would need a change is refused with the reason, not written.
struct ReadOnlyDatabaseTests {
    @Test func readsWithoutWritingAndRefusesSchemaChanges() throws {
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [ROPlain.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in for i in 0..<10 { try tx.insert(ROPlain(id: i, name: "n\(i)")) } }
        }
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        do {
            let db = try Database(path: path, models: [ROPlain.self], options: StoreOptions(readOnly: true))
            #expect(db.objects(ROPlain.self).count == 10)
            #expect(try db.object(ROPlain.self, key: 3) == ROPlain(id: 3, name: "n3"))
            #expect(throws: (any Error).self) { try db.write { tx in try tx.insert(ROPlain(id: 99, name: "x")) } }
        }
        for models: [any Model.Type] in [[ROPlain.self, ROOther.self], [ROIndexed.self]] {
            #expect {
                _ = try Database(path: path, models: models, options: StoreOptions(readOnly: true))
            } throws: { error in
                guard case StrataError.migrationRequired(let reasons) = error else { return false }
                return reasons.contains { $0.contains("read-only") }
            }
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before, "a read-only open changed the file")
    }

    /// A read-only database cannot register its snapshots with a writer in another process, which
    /// reuses their pages two commits later. Beside a process that rewrites every object in every
    /// commit: one-shot reads (`read`, `object`, `run`, `read` async) are exact (they run again on
    /// a newer snapshot), and results kept across commits either read exactly their own commit or
    /// report `fileChangedDuringRead` (placeholders and `error` for the collection API, a throw
    /// for `fetch`), never objects of another commit or a corruption error. (Synchronous, as is
    /// the next test: a test that suspends while the writer runs may resume minutes later in a
    /// busy parallel run, with the writer taking a core all along. `read`'s async form makes
    /// its runs as `read` does, `onNewestSnapshot`.)
    @Test func readsBesideAWriterInAnotherProcessAreExactOrSayTheFileChanged() throws {
        let reads = Int(ProcessInfo.processInfo.environment["STRATA_READONLY_READS"] ?? "") ?? 60
        let (path, writer) = try Self.churningStore()
        defer { writer.stop() }
        let db = try Database(path: path, models: [ChurnItem.self], options: StoreOptions(readOnly: true))

        /// Every object of one round, exactly.
        func checkRound(_ objects: [ChurnItem], _ what: String) {
            let rounds = Set(objects.map(\.round))
            #expect(objects.count == ChurnWorkload.count, "\(what): \(objects.count) objects")
            #expect(rounds.count == 1, "\(what): objects of rounds \(rounds.sorted().prefix(5))")
            #expect(objects.allSatisfy { $0.isExact }, "\(what): an object with fields of no round")
            #expect(objects.map(\.id) == Array(0..<ChurnWorkload.count), "\(what): ids out of order")
        }
        func isFileChanged(_ error: StrataError?) -> Bool { error?.isFileChangedDuringRead ?? false }
        /// Waits until the writer has committed twice after `version`: a snapshot of it is overtaken.
        func waitPast(_ version: UInt64?) throws { try Self.waitUntil(db, reaches: (version ?? 0) + 2) }

        var reported = 0
        for i in 0..<reads {
            // One-shot reads: exact, whatever the writer does meanwhile.
            func oneShot() throws -> ([ChurnItem], [ChurnItem], Int) {
                try db.read { snapshot in
                    let all = try snapshot.objects(ChurnItem.self).fetch()
                    let grouped = snapshot.objects(ChurnItem.self).filter(#Predicate { $0.group == 3 })
                    return (all, try grouped.fetch(), all.first?.round ?? -1)
                }
            }
            let (all, grouped, round) = try oneShot()
            checkRound(all, "read \(i)")
            #expect(grouped.count == ChurnWorkload.groupCount(3, round: round) && grouped.allSatisfy { $0.group == 3 && $0.round == round && $0.isExact })
            let one = try #require(try db.object(ChurnItem.self, key: i % ChurnWorkload.count))
            #expect(one.isExact, "object(key:) read \(one)")
            let sum = try db.read { snapshot in
                let results = snapshot.objects(ChurnItem.self)
                return (results.sum(of: \.round), results.max(of: \.round).map { $0 * ChurnWorkload.count }, results.error)
            }
            #expect(sum.2 == nil && sum.0 == sum.1, "aggregates of one snapshot: sum \(sum.0), max × count \(sum.1 ?? -1)")

            // Results kept across two commits: their own commit exactly, or the file changed.
            let unevaluated = db.objects(ChurnItem.self).filter(#Predicate { $0.group == 3 }).sorted(by: SortDescriptor(\.id))
            let scanned = db.objects(ChurnItem.self)
            let started = db.objects(ChurnItem.self).filter(#Predicate { $0.id >= 0 })
            _ = started.first  // evaluated now; its objects are decoded later, one by one
            try waitPast([unevaluated, scanned, started].compactMap(\.version).max())
            for results in [unevaluated, scanned, started] {
                let objects = Array(results)
                if isFileChanged(results.error) {
                    reported += 1
                    #expect(throws: StrataError.self) { try results.fetch() }
                } else {
                    #expect(results.error == nil, "kept results failed with \(String(describing: results.error))")
                    if results.version == scanned.version && results.count == ChurnWorkload.count { checkRound(objects, "kept results \(i)") }
                }
            }
            // Counted from the index before evaluating, then overtaken: indexing up to that count
            // and copying read placeholders and report the change, never trap.
            let counted = db.objects(ChurnItem.self).filter(#Predicate { $0.group == 3 })
            let n = counted.count
            // (0 when the writer overtook the snapshot before it was counted: `error` then says so.)
            #expect(
                n == ChurnWorkload.count / ChurnWorkload.groups || n == ChurnWorkload.count / ChurnWorkload.groups + 1
                    || (n == 0 && isFileChanged(counted.error)), "counted \(n), error \(String(describing: counted.error))")
            try waitPast(counted.version)
            let indexed = (0..<n).map { counted[$0] }
            #expect(indexed.count == n && Array(counted).count == n)
            #expect(isFileChanged(counted.error), "counted then overtaken: \(String(describing: counted.error))")
            #expect(indexed.allSatisfy { $0.isExact || $0.payload.isEmpty }, "an object of another commit")

            // A kept snapshot's own reads throw rather than return another commit's object.
            let snapshot = try db.snapshot()
            try waitPast(snapshot.version)
            do {
                let object = try snapshot.object(ChurnItem.self, key: 7)
                #expect(object?.isExact == true, "a kept snapshot read \(String(describing: object))")
            } catch let error as StrataError {
                #expect(isFileChanged(error), "snapshot.object threw \(error)")
            }
        }
        // An observer's first results are one commit's, exactly (a read-only database hears no
        // other process's commits: the initial delivery is all it gets).
        for _ in 0..<5 {
            let delivered = XProcLocked<[ChurnItem]?>(nil)
            let token = db.objects(ChurnItem.self).observe(on: DispatchQueue(label: "ro")) { change in
                if case .initial(let results) = change { delivered.withLock { $0 = Array(results) } }
            }
            let deadline = Date().addingTimeInterval(60)
            while delivered.withLock({ $0 }) == nil && Date() < deadline { usleep(2000) }
            checkRound(delivered.withLock { $0 } ?? [], "observer's initial results")
            token.invalidate()
        }
        // Both meta pages were rewritten after each kept snapshot: every kept read noticed.
        #expect(reported == 3 * reads, "\(reported) of \(3 * reads) overtaken results reported it")
    }

    /// Waits (blocking, not suspending) until the writer's newest commit is `version` or later.
    private static func waitUntil(_ db: Database, reaches version: UInt64) throws {
        let deadline = Date().addingTimeInterval(60)
        while db.store.latestVersion < version {
            if Date() > deadline { throw StrataError.invalidQuery("the writer stopped committing") }
            usleep(1000)
        }
    }

    /// A store of `ChurnWorkload`'s first round, and a helper process rewriting it in every commit
    /// (stop it with `stop()`; SIGKILL, as the helper inherits the test process's blocked signals).
    private static func churningStore() throws -> (String, XProcChild) {
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [ChurnItem.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try ChurnWorkload.write(round: 0, in: tx) }
        }
        let writer = try XProcChild(["objects-churn", path])
        guard try writer.readLineWithoutSuspending() == "ready" else {
            writer.stop()
            throw StrataError.invalidQuery("the helper did not start: \(writer.errorText)")
        }
        return (path, writer)
    }

    /// Read-only openings beside a writer that never pauses: the opening's read of the catalog,
    /// overtaken by a commit, is read again (it threw `fileChangedDuringRead` now and then).
    @Test func readOnlyOpeningsBesideABusyWriterSucceed() throws {
        let (path, writer) = try Self.churningStore()
        defer { writer.stop() }
        var failures: [String] = []
        for _ in 0..<150 {
            do {
                let db = try Database(path: path, models: [ChurnItem.self], options: StoreOptions(readOnly: true))
                db.close()
            } catch {
                failures.append("\(error)")
            }
        }
        #expect(failures.isEmpty, "\(failures.count) of 150 openings failed: \(failures.prefix(3))")
    }

    /// A one-shot read slower than two of the writer's commits is overtaken every time it runs;
    /// after a few such runs it runs with the writer held off, and ends with one commit's objects
    /// exactly, rather than failing (or running for ever) beside a writer that never pauses.
    @Test func aReadEveryCommitOvertakesHoldsTheWriterOffAndEnds() throws {
        let (path, writer) = try Self.churningStore()
        defer { writer.stop() }
        let db = try Database(path: path, models: [ChurnItem.self], options: StoreOptions(readOnly: true))
        func waitForCommits(_ count: UInt64) throws { try Self.waitUntil(db, reaches: db.store.latestVersion + count) }
        try waitForCommits(2)

        // While writers are held off, the newest commit stays put; afterwards the writer goes on.
        let (before, after) = try db.store.holdingWritersOff { () -> (UInt64, UInt64) in
            let before = db.store.latestVersion
            Thread.sleep(forTimeInterval: 0.1)
            return (before, db.store.latestVersion)
        }
        #expect(before == after, "commits \(before) → \(after) while writers were held off")
        try waitForCommits(2)

        /// The objects a slow read found, and how many times it ran.
        func readSlowly() throws -> ([ChurnItem], Int) {
            var runs = 0
            let objects = try db.read { snapshot in
                runs += 1
                let objects = try snapshot.objects(ChurnItem.self).fetch()
                // Longer than two of the writer's commits (each a few milliseconds).
                Thread.sleep(forTimeInterval: 0.1)
                return objects
            }
            return (objects, runs)
        }
        for round in 0..<3 {
            let (objects, runs) = try readSlowly()
            #expect(runs <= Database.overtakesBeforeHoldingWritersOff + 1, "round \(round): the read ran \(runs) times")
            #expect(objects.count == ChurnWorkload.count && Set(objects.map(\.round)).count == 1 && objects.allSatisfy(\.isExact))
            try waitForCommits(2)
        }
    }
}
