import Testing
import Foundation
import Synchronization
@testable import Strata
import StrataStorage

/// Group commit under pressure: waves of hundreds of async writes at once, each a random
/// transaction of the live differential's model (unique, compound, collated and full-text
/// indexes), a third of them thrown away by rollback inside the group. After every wave the
/// file must check clean (pages, tree counts, index entries against records) and hold exactly
/// the dictionary model. A second handle on the same file reads throughout, as in an app.
///
/// Size: `STRATA_GROUP_STRESS_WAVES` waves of `STRATA_GROUP_STRESS_WRITES` writes (defaults 4
/// and 150); `STRATA_GROUP_STRESS_SEED` picks another seed.
@Suite struct GroupedWriteStressTests {
    @Test func bigGroupsWithRollbacksKeepTheFileExact() async throws {
        let env = ProcessInfo.processInfo.environment
        let seed = env["STRATA_GROUP_STRESS_SEED"].flatMap { UInt64($0) } ?? 20261201
        let waves = env["STRATA_GROUP_STRESS_WAVES"].flatMap { Int($0) } ?? 4
        let writes = env["STRATA_GROUP_STRESS_WRITES"].flatMap { Int($0) } ?? 150
        let objects = 400
        let path = databasePath()
        defer { for suffix in ["", "-lock"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        // A small transaction budget, so big groups spill pages that later savepoints change again.
        var options = StoreOptions(durability: .noSync)
        options.transactionMemory = 256 * 1024
        let db = try Database(path: path, models: [LDThing.self], options: options)
        let reader = try Database(path: path, models: [LDThing.self], options: StoreOptions(durability: .noSync))
        final class Counter: Sendable { let commits = Atomic<Int>(0) }
        let counter = Counter()
        let commitToken = db.observeCommits(on: DispatchQueue(label: "group-stress-commits")) { _ in counter.commits.add(1, ordering: .relaxed) }
        defer { commitToken.invalidate() }
        // A live query, re-run after each commit on its own queue, as an app's list would be.
        let deliveries = Atomic<Int>(0)
        let liveToken = db.objects(LDThing.self).filter(#Predicate { $0.rank == 2 }).sorted(by: [SortDescriptor(\LDThing.when)]).observe(
            on: DispatchQueue(label: "group-stress-live")
        ) { _ in
            deliveries.add(1, ordering: .relaxed)
        }
        defer { liveToken.invalidate() }
        let model = LDModel()
        var rng = SeededRandom(seed: seed)
        let stopReading = Atomic<Bool>(false)
        let readProblems = Mutex<[String]>([])
        let readerThread = Thread {
            // Snapshots taken while groups commit: each must be whole (its counts match its entries).
            // One per new commit: while none comes (the test awaits its writes, which in a busy
            // parallel run can be minutes) the thread sleeps rather than spin on a core.
            var seen: UInt64 = 0
            while !stopReading.load(ordering: .relaxed) {
                let latest = reader.store.latestVersion
                if latest == seen {
                    usleep(100)
                    continue
                }
                seen = latest
                do {
                    let results = reader.objects(LDThing.self).filter(#Predicate { $0.rank >= 1 })
                    let count = results.count
                    let all = try results.fetch()
                    if all.count != count { readProblems.withLock { $0.append("a snapshot counted \(count) objects and fetched \(all.count)") } }
                } catch {
                    readProblems.withLock { $0.append("a read failed: \(error)") }
                }
            }
        }
        readerThread.start()
        defer { stopReading.store(true, ordering: .relaxed) }

        for wave in 0..<waves {
            let seeds = (0..<writes).map { _ in rng.next() }
            let failures = await withTaskGroup(of: String?.self) { group -> [String] in
                for s in seeds {
                    group.addTask {
                        do {
                            try await db.write { tx in
                                let start = model.objects.withLock { $0 }
                                let (end, rollback) = try LDWrites.run(
                                    tx, model: start, seed: s, objects: objects, maxOps: 8, rollbackPercent: 35, note: model.problem)
                                if rollback { throw LDRollback() }
                                model.objects.withLock { $0 = end }
                            }
                            return nil
                        } catch is LDRollback {
                            return nil
                        } catch {
                            return "write \(s) failed: \(error)"
                        }
                    }
                }
                var all: [String] = []
                for await case let failure? in group { all.append(failure) }
                return all
            }
            let context = "seed \(seed), wave \(wave + 1) of \(waves) (\(counter.commits.load(ordering: .relaxed)) commits so far)"
            #expect(failures.isEmpty, "\(context): \(failures.count) writes failed, e.g. \(failures.prefix(3))")
            let problems = model.problems.withLock { p in
                defer { p = [] }; return p
            }
            #expect(problems.isEmpty, "\(context): \(problems.prefix(5))")

            let pages = try db.store.check()
            #expect(pages.isOK, "\(context): \(pages.problems.prefix(5))")
            let objectsReport = try StoredObjects.check(in: db.store)
            #expect(objectsReport.problems.isEmpty, "\(context): \(objectsReport.problems.prefix(5))")
            let expected = model.objects.withLock { $0 }.values.sorted { $0.id < $1.id }
            let stored = try db.objects(LDThing.self).fetch().sorted { $0.id < $1.id }
            #expect(LDThing.same(expected, stored), "\(context): \(LDDiff.describe(expected: expected, delivered: stored))")
            #expect(db.objects(LDThing.self).count == expected.count, "\(context): count")
            if !failures.isEmpty || !problems.isEmpty || !pages.isOK || !objectsReport.problems.isEmpty { break }
        }
        stopReading.store(true, ordering: .relaxed)
        print(
            "grouped write stress, seed \(seed): \(waves) waves of \(writes) writes in \(counter.commits.load(ordering: .relaxed)) commits, \(deliveries.load(ordering: .relaxed)) live deliveries"
        )
        let read = readProblems.withLock { $0 }
        #expect(read.isEmpty, "seed \(seed): \(read.count) reader problems, e.g. \(read.prefix(3))")
    }
}
