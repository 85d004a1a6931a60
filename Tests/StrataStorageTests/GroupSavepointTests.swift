import Testing
@testable import StrataStorage
import Foundation

private struct Refused: Error {}

/// The shape of a group commit at the engine level, against a model: one transaction of many
/// top-level savepoints in a row (each a writer's unit, a third thrown away), over trees that
/// grow and shrink so that commits move pages and trim the file, while snapshots of several
/// versions are held and `compact()` runs between groups. After every commit the file must check
/// clean and read as the model. (It found the stale free-list chunk that
/// `CompactionTests.freeListWrittenAgainWithFewerOwnFreesLeavesNoStaleChunk` pins down, about once
/// in 2,000 rounds: page numbers and so the failure depend on Dictionary order, which differs
/// from run to run.)
///
/// Size: `STRATA_GROUP_SAVEPOINT_ROUNDS` commits (default 150); `STRATA_GROUP_SAVEPOINT_SEED`.
@Suite struct GroupSavepointTests {
    typealias Contents = [String: [[UInt8]: [UInt8]]]

    @Test func groupsOfSavepointsWithCompactionMatchTheModel() throws {
        let seed = UInt64(TestEnv.int("STRATA_GROUP_SAVEPOINT_SEED", default: 0x6_5A7E_2026))
        let rounds = TestEnv.int("STRATA_GROUP_SAVEPOINT_ROUNDS", default: 150)
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: seed)
        var model: Contents = [:]
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = nil  // compaction commits are made below, at chosen times
        let store = try Store(path: path, options: options)
        var held: [ReadTransaction] = []
        let names = ["records", "index", "text"]
        var shrunk = 0

        func operate(_ txn: WriteTransaction, _ state: inout Contents, growing: Bool) throws {
            let name = names[rng.below(names.count)]
            let key = bigEndianKey(UInt64(rng.below(600)))
            if rng.percent(growing ? 70 : 25) {
                let value = rng.byteArray(rng.percent(3) ? rng.within(3_000...9_000) : rng.within(1...300))
                try txn.createTree(name).put(key, value)
                state[name, default: [:]][key] = value
            } else if let tree = try txn.tree(name) {
                // Delete a present key most of the time, so that shrinking phases really shrink.
                var victim = key
                for _ in 0..<4 where state[name]?[victim] == nil { victim = bigEndianKey(UInt64(rng.below(600))) }
                let deleted = try tree.delete(victim)
                #expect(deleted == (state[name]?[victim] != nil), "seed \(seed): delete in \(name)")
                state[name]?[victim] = nil
            }
        }

        for round in 0..<rounds {
            // Phases of growth and of shrinking, so that the file gets holes and a free tail.
            let growing = (round / 25) % 2 == 0
            if rng.percent(30) {
                if !held.isEmpty && rng.percent(50) { held.remove(at: rng.below(held.count)) }
                if held.count < 4 { held.append(try store.beginRead()) }
            }
            var next = model
            try store.write { txn in
                for _ in 0..<rng.within(1...80) {
                    var inner = next
                    let fails = rng.percent(33)
                    do {
                        try txn.savepoint {
                            for _ in 0..<rng.within(1...8) { try operate(txn, &inner, growing: growing) }
                            if rng.percent(10) {
                                // A nested write that fails alone.
                                var nested = inner
                                _ = try? txn.savepoint {
                                    try operate(txn, &nested, growing: growing)
                                    throw Refused()
                                }
                            }
                            if fails { throw Refused() }
                        }
                        next = inner
                    } catch is Refused {
                    }
                }
            }
            model = next
            if rng.percent(20) {
                // What idle-time compaction does once the writes stop.
                let report = try store.compact()
                if report.bytesAfter < report.bytesBefore { shrunk += 1 }
            }
            let report = try store.check()
            if !report.isOK {
                Issue.record("seed \(seed): round \(round): \(report.problems.prefix(5))")
                return
            }
            let seen = try store.read { try snapshotContents($0) }
            if seen != model {
                let tree = Set(seen.keys).union(model.keys).sorted().first { seen[$0] != model[$0] } ?? "?"
                Issue.record(
                    "seed \(seed): round \(round): tree \(tree) differs from the model (\(seen[tree]?.count ?? -1) entries, model \(model[tree]?.count ?? -1))")
                return
            }
        }
        held.removeAll()
        #expect(shrunk > 0, "seed \(seed): compaction never shrank the file: the test did not exercise it")
    }
}
