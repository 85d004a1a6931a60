import Foundation
import Synchronization
import StrataTestWorkloads
import Testing

@testable import StrataStorage

// Hunt C: durability of compaction (`compact()`, a commit's own compaction, idle-time compaction)
// under power loss (FaultyFile: writes after the last completed sync are lost, or kept in part,
// page by page or sector by sector), failed writes and failed syncs. Compaction never changes what
// the trees hold, so whatever instant the power goes, the reopened file must hold exactly the model
// of the last acknowledged commit (or, for a `.noSync` run not yet synced, the durable commit before
// it), and `check()` must be clean.
//
// Environment: HUNTC_ITERATIONS (rounds per test, default small), HUNTC_SEED (base seed; every
// failure message prints the seed it used).

enum HuntC {
    static func iterations(_ fallback: Int) -> Int { TestEnv.int("STRATA_POWER_LOSS_HUNT_ROUNDS", default: fallback) }
    static var baseSeed: UInt64 { UInt64(TestEnv.int("STRATA_POWER_LOSS_HUNT_SEED", default: 0xC0FFEE)) }

    /// Opens `path` through a FaultyFile, with idle-time compaction after `idle` (nil: none).
    static func open(_ path: String, idle: Duration? = nil, sync: SyncMode = .single, noSync: Bool = false, tight: Bool = false, spilling: Bool = false) throws
        -> (Store, FaultyFile)
    {
        var created: FaultyFile?
        var options = StoreOptions(durability: noSync ? .noSync : .full, syncMode: sync)
        options.compaction.idleDelay = idle
        if tight { options.compaction.freeFraction = 0.01; options.compaction.pagesPerCommit = 8 }
        if spilling { options.transactionMemory = 0 }
        let store = try Store(path: path, options: options) { inner in
            let faulty = FaultyFile(inner, sharing: created)
            created = faulty
            return faulty
        }
        return (store, try #require(created))
    }

    /// Random puts (many of them overflow values) and deletes of a large share of what is there.
    static func churn(_ txn: WriteTransaction, _ model: inout Contents, _ rng: inout SplitMix, puts: Int, deleteShare: Int) throws {
        for name in ["a", "b", "c"] {
            let tree = try txn.createTree(name)
            if model[name] == nil { model[name] = [:] }
            for key in (model[name] ?? [:]).keys.sorted(by: keyLess) where rng.percent(deleteShare) {
                try tree.delete(key)
                model[name]?[key] = nil
            }
        }
        for _ in 0..<puts {
            let name = ["a", "b", "c"][rng.below(3)]
            let tree = try txn.createTree(name)
            let key = bigEndianKey(UInt64(rng.below(6000)))
            let value = rng.byteArray(rng.percent(12) ? rng.within(1500...40_000) : rng.within(0...200))
            try tree.put(key, value)
            model[name]?[key] = value
        }
    }

    /// Releases the store (every handle), loses power (keeping a random share of the unsynced
    /// writes), reopens without faults and returns the store, the index of `expected` it matches
    /// (nil: none) and the check's problems.
    static func crashAndReopen(
        _ store: inout Store, _ faulty: FaultyFile, _ path: String, keepRng: inout SplitMix, expected: [Contents], context: String,
        history: [(UInt64, Contents)] = []
    ) throws -> (Store, Int?) {
        let environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()
        // An idle thread may hold the environment for a moment.
        for _ in 0..<500 where environment.environment != nil { usleep(2_000) }
        #expect(environment.environment == nil, "\(context): the environment outlived its handles")
        let chunk = keepRng.percent(30) ? 512 : 4096
        let share = keepRng.within(0...100)
        var pieceRng = SplitMix(seed: keepRng.next())
        try faulty.losePower(chunk: chunk) { _ in pieceRng.percent(share) }
        let reopened: Store
        do {
            reopened = try Store(path: path)
        } catch {
            Issue.record("\(context) (chunk \(chunk), keep \(share)%): reopening threw \(error)")
            throw error
        }
        let problems = storeCheckProblems(reopened)
        #expect(problems.isEmpty, "\(context) (chunk \(chunk), keep \(share)%): check: \(problems)")
        let found = try contents(of: reopened)
        let index = expected.firstIndex(of: found)
        if index == nil {
            var diff: [String] = []
            if let want = expected.last {
                for name in Set(want.keys).union(found.keys).sorted() {
                    let w = want[name] ?? [:], f = found[name] ?? [:]
                    let missing = w.keys.filter { f[$0] == nil }.count
                    let extra = f.keys.filter { w[$0] == nil }.count
                    let changed = w.keys.filter { f[$0] != nil && f[$0] != w[$0] }.count
                    if missing + extra + changed > 0 { diff.append("\(name): \(missing) missing, \(extra) extra, \(changed) changed") }
                }
            }
            let older = history.filter { $0.1 == found }.map(\.0)
            Issue.record(
                "\(context) (chunk \(chunk), keep \(share)%): matches the content after transactions \(older) of the history \(history.map(\.0)); reopened at transaction \(reopened.latestVersion), content matches none of the \(expected.count) acceptable states; against the last: \(diff)"
            )
        }
        return (reopened, index)
    }
}

@Suite struct PowerLossHuntTests {
    /// `compact()` is cut by a power loss at a random write or sync of one of its commits (after
    /// mass deletes that leave overflow runs and leaves high in the file), sometimes right after a
    /// `.noSync` commit. The file must reopen clean, at the last durable content (compaction itself
    /// changes no content; the `.noSync` commit may or may not survive).
    @Test(arguments: [SyncMode.single, SyncMode.double])
    func powerLossDuringCompactKeepsTheContent(sync: SyncMode) throws {
        try Self.compactHunt(sync: sync, baseSeed: HuntC.baseSeed)
    }

    /// The seed that found a durable transaction after a `.noSync` run releasing the run's pin
    /// while the commit log's generation still ended with the run's start: a cut inside
    /// `compact()` then replayed that frame over pages the compaction had reused.
    @Test func powerLossDuringCompactAfterANoSyncRun() throws {
        try Self.compactHunt(sync: .single, baseSeed: 99991)
    }

    static func compactHunt(sync: SyncMode, baseSeed: UInt64) throws {
        let seed = baseSeed ^ (sync == .single ? 0x11 : 0x12)
        let path = temporaryPath("huntc-compact-\(sync)")
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: seed)
        var keepRng = SplitMix(seed: seed ^ 0xFF)
        var (store, faulty) = try HuntC.open(path, sync: sync)
        var model: Contents = [:]
        try store.write { try HuntC.churn($0, &model, &rng, puts: 3000, deleteShare: 0) }
        var cuts = 0, reachedEnd = 0
        for iteration in 0..<HuntC.iterations(12) {
            let context = "seed \(seed) (HUNTC_SEED=\(baseSeed)) iteration \(iteration) \(sync)"
            // Mass delete and a few big values: holes everywhere, overflow runs at the end.
            try store.write { try HuntC.churn($0, &model, &rng, puts: 400, deleteShare: 60) }
            try store.write { try HuntC.churn($0, &model, &rng, puts: 1500, deleteShare: 0) }
            try store.write { try HuntC.churn($0, &model, &rng, puts: 50, deleteShare: 55) }
            let durable = model
            var acceptable = [durable]
            let noSync = rng.percent(40)
            if noSync {
                try store.write(durability: .noSync) { try HuntC.churn($0, &model, &rng, puts: 100, deleteShare: 20) }
                acceptable = [model]
            }
            if rng.percent(50) {
                faulty.cutPower(atWrite: rng.within(1...80), partial: rng.percent(50))
            } else {
                let n = rng.within(1...8)
                faulty.cutPower(atSync: n)
                // compact()'s first commit is durable: it syncs the .noSync commit first; a cut
                // at that sync may lose it (documented), a later one must not.
                if noSync && n == 1 { acceptable.append(durable) }
            }
            do {
                try store.compact()
                reachedEnd += 1
                faulty.clearFaults()
                // Compaction done: only the newest content is acceptable from here; still lose
                // power (nothing unsynced should be left).
                acceptable = [model]
            } catch let error as StorageError {
                guard case .io = error else { Issue.record("\(context): compact threw \(error)"); return }
                cuts += 1
            }
            let (_, index) = try HuntC.crashAndReopen(&store, faulty, path, keepRng: &keepRng, expected: acceptable, context: context)
            guard let index else { return }
            model = acceptable[index]
            (store, faulty) = try HuntC.open(path, sync: sync)
        }
        print("HuntC compact \(sync): \(cuts) power cuts inside compact(), \(reachedEnd) compactions completed")
        #expect(cuts > 0)
    }

    /// A write or sync of `compact()` fails (EIO) and the process goes on: the failed commit must
    /// leave the store as it was (in this process and on reopening), later commits and a second
    /// `compact()` must work, and the file must stay clean.
    @Test func failedWriteOrSyncDuringCompactThenGoOn() throws {
        let seed = HuntC.baseSeed ^ 0x21
        let path = temporaryPath("huntc-compact-fail")
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: seed)
        var (store, faulty) = try HuntC.open(path)
        var model: Contents = [:]
        try store.write { try HuntC.churn($0, &model, &rng, puts: 3000, deleteShare: 0) }
        var failures = 0
        for iteration in 0..<HuntC.iterations(16) {
            let context = "seed \(seed) iteration \(iteration)"
            try store.write { try HuntC.churn($0, &model, &rng, puts: 600, deleteShare: 55) }
            try store.write { try HuntC.churn($0, &model, &rng, puts: 800, deleteShare: 0) }
            try store.write { try HuntC.churn($0, &model, &rng, puts: 20, deleteShare: 50) }
            let partial = rng.percent(50)
            if rng.percent(60) {
                faulty.failWrite(in: rng.within(1...60), errno: rng.percent(30) ? 28 : 5, partial: partial)
            } else {
                faulty.failSync(in: rng.within(1...6))
            }
            do {
                try store.compact()
            } catch let error as StorageError {
                guard case .io = error else { Issue.record("\(context): compact threw \(error)"); return }
                failures += 1
            }
            faulty.clearFaults()
            #expect(try contents(of: store) == model, "\(context): content changed after a failed compaction")
            let problems = storeCheckProblems(store)
            #expect(problems.isEmpty, "\(context): check after a failed compaction: \(problems)")
            if !problems.isEmpty { return }
            try store.write { try HuntC.churn($0, &model, &rng, puts: 100, deleteShare: 5) }
            if iteration % 3 == 0 {
                try store.compact()
                #expect(try contents(of: store) == model, "\(context): content after a second compaction")
            }
        }
        #expect(failures > 0)
        let environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()
        _ = faulty
        _ = try FaultInjectionTests.reopenAndCheck(path, environment, expected: [model], context: "seed \(seed) after failed compactions")
        #expect(storeCheckProblems(try Store(path: path)).isEmpty)
    }

    /// Ordinary commits compact too (tight settings: they move pages at every commit); the power
    /// goes at a random write or sync of one of them.
    @Test func powerLossDuringCommitsThatCompactThemselves() throws {
        try Self.selfCompactHunt(baseSeed: HuntC.baseSeed)
    }

    /// The seed that found a `.noSync` commit lost after the durable commit's first sync had made
    /// it durable: the power went at that commit's second sync, before it ended the log's
    /// generation, and the replay wrote the generation's older images over pages the `.noSync`
    /// commit had reused (LogReplay.pagesWrittenAfter).
    @Test func powerLossAfterTheSyncThatSecuredANoSyncCommit() throws {
        try Self.selfCompactHunt(baseSeed: 1_234_567)
    }

    static func selfCompactHunt(baseSeed: UInt64) throws {
        let seed = baseSeed ^ 0x31
        let path = temporaryPath("huntc-selfcompact")
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: seed)
        var keepRng = SplitMix(seed: seed ^ 0xFF)
        var (store, faulty) = try HuntC.open(path, tight: true)
        var model: Contents = [:]
        try store.write { try HuntC.churn($0, &model, &rng, puts: 3000, deleteShare: 0) }
        var cuts = 0
        var history: [(UInt64, Contents)] = [(store.latestVersion, model)]
        func note() { history.append((store.latestVersion, model)); if history.count > 12 { history.removeFirst() } }
        for iteration in 0..<HuntC.iterations(14) {
            let context = "seed \(seed) (HUNTC_SEED=\(baseSeed)) iteration \(iteration)"
            try store.write { try HuntC.churn($0, &model, &rng, puts: 300, deleteShare: 50) }
            note()
            for _ in 0..<rng.within(0...3) { try store.write { try HuntC.churn($0, &model, &rng, puts: 30, deleteShare: 3) }; note() }
            var noSyncNote = ""
            let durableBefore = model
            if rng.percent(30) {
                try store.write(durability: .noSync) { try HuntC.churn($0, &model, &rng, puts: 30, deleteShare: 5) }; note();
                noSyncNote = " after a noSync commit"
            }
            let before = model
            let cutNote: String
            var cutAtFirstSync = false
            if rng.percent(50) {
                let n = rng.within(1...40), partial = rng.percent(50)
                faulty.cutPower(atWrite: n, partial: partial)
                cutNote = " cut at write \(n)\(partial ? " (half done)" : "")"
            } else {
                let n = rng.within(1...2)
                faulty.cutPower(atSync: n)
                cutAtFirstSync = n == 1
                cutNote = " cut at sync \(n)"
            }
            let (w0, s0) = (faulty.writes, faulty.syncs)
            var attempted = model
            var acceptable = [before]
            do {
                try store.write { try HuntC.churn($0, &attempted, &rng, puts: 40, deleteShare: 10) }
                faulty.clearFaults()
                acceptable = [attempted]
                history.append((store.latestVersion, attempted))
            } catch let error as StorageError {
                guard case .io = error else { Issue.record("\(context): \(error)"); return }
                acceptable.append(attempted)
                // A .noSync commit before: the durable commit syncs it first (secureBase); a cut
                // at that very sync may lose it (documented, Durability.md), at no later point.
                if !noSyncNote.isEmpty && cutAtFirstSync { acceptable.append(durableBefore) }
                cuts += 1
            }
            let (_, index) = try HuntC.crashAndReopen(
                &store, faulty, path, keepRng: &keepRng, expected: acceptable,
                context: context + noSyncNote + cutNote + " (the commit made \(faulty.writes - w0) writes, \(faulty.syncs - s0) syncs)"
                    + " (before: transaction \(history.last!.0))", history: history)
            guard let index else { return }
            model = acceptable[index]
            (store, faulty) = try HuntC.open(path, tight: true)
        }
        #expect(cuts > 0)
    }

    /// Idle-time compaction runs in the background after a mass delete; the power goes at one of
    /// its writes or syncs. The content is the last acknowledged commit's, whatever the instant.
    @Test func powerLossDuringIdleCompaction() throws {
        let seed = HuntC.baseSeed ^ 0x41
        let path = temporaryPath("huntc-idle")
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: seed)
        var keepRng = SplitMix(seed: seed ^ 0xFF)
        var (store, faulty) = try HuntC.open(path, idle: .milliseconds(20))
        var model: Contents = [:]
        try store.write { try HuntC.churn($0, &model, &rng, puts: 3000, deleteShare: 0) }
        var hits = 0
        for iteration in 0..<HuntC.iterations(10) {
            let context = "seed \(seed) (HUNTC_SEED=\(HuntC.baseSeed)) iteration \(iteration)"
            let noSync = rng.percent(30)
            let writesBefore = faulty.writes
            let syncsBefore = faulty.syncs
            // Arm the cut before the commit that leaves holes: its own writes come first (and
            // count), then the idle commits'. The commit's writes are measured below.
            try store.write { try HuntC.churn($0, &model, &rng, puts: 1200, deleteShare: 0) }
            let last = model
            var ownWrites = 0, ownSyncs = 0
            try store.write(durability: noSync ? .noSync : .full) { txn in
                try HuntC.churn(txn, &model, &rng, puts: 60, deleteShare: 70)
            }
            ownWrites = faulty.writes
            ownSyncs = faulty.syncs
            _ = (writesBefore, syncsBefore)
            if rng.percent(60) {
                faulty.cutPower(atWrite: rng.within(1...30), partial: rng.percent(50))
            } else {
                faulty.cutPower(atSync: rng.within(1...4))
            }
            // Wait for the idle thread to get there (or to be done).
            var quiet = 0
            var lastWrites = faulty.writes
            for _ in 0..<400 {
                usleep(5_000)
                if faulty.state.withLock({ $0.powerOff }) { break }
                let w = faulty.writes
                if w == lastWrites { quiet += 1 } else { quiet = 0 }
                lastWrites = w
                if quiet > 40 { break }
            }
            let hit = faulty.state.withLock { $0.powerOff }
            if hit { hits += 1 }
            // The mass delete was acknowledged: durable unless noSync (then the previous one is
            // acceptable too, since idle commits use the store's durability, .full here, and sync
            // the noSync base first; a cut at that sync loses the noSync commit).
            var acceptable = [model]
            if noSync { acceptable.append(last) }
            _ = (ownWrites, ownSyncs)
            let (_, index) = try HuntC.crashAndReopen(&store, faulty, path, keepRng: &keepRng, expected: acceptable, context: context + " idle cut hit \(hit)")
            guard let index else { return }
            model = acceptable[index]
            (store, faulty) = try HuntC.open(path, idle: .milliseconds(20))
        }
        print("HuntC idle: the cut struck idle compaction \(hits) times")
        #expect(hits > 0)
    }
}

@Suite struct PowerLossMultiProcessTests {
    /// Two helper processes commit durably, interleaved through the writer lock, while a third
    /// checks snapshot after snapshot (`check-loop`, which exits 1 at the first inconsistent one).
    /// Writer A is killed with SIGKILL at a random moment (often inside a commit); B must carry on
    /// and finish, the reader must never see an inconsistent snapshot, and the file must hold all
    /// of B's commits, a prefix of A's (its commits are in order), a counter that agrees, and
    /// check clean.
    @Test func twoWritersOneKilledMidCommitWhileAThirdReads() async throws {
        let helper = try strataTestHelperPath()
        let seed = HuntC.baseSeed ^ 0x51
        var rng = SplitMix(seed: seed)
        let cycles = HuntC.iterations(4)
        let perWriter = TestEnv.int("STRATA_POWER_LOSS_HUNT_COMMITS", default: 200)
        for cycle in 0..<cycles {
            let path = temporaryPath("huntc-mp")
            defer { removeStoreFiles(path) }
            let delayMs = 5 + Int(rng.below(120))
            let context = "seed \(seed) cycle \(cycle), kill A after \(delayMs) ms, file \(path)"
            // Create the file first, so that both writers open an existing one.
            do { _ = try Store(path: path, options: .countingEveryCommit(durability: .full)) }
            let a = try HelperProcess(path: helper, arguments: ["writer", path, "A", "\(perWriter)", "--durable", "--gate"])
            let b = try HelperProcess(path: helper, arguments: ["writer", path, "B", "\(perWriter)", "--durable", "--gate"])
            let checker = try HelperProcess(path: helper, arguments: ["check-loop", path, "\(10 * perWriter)"])
            #expect(try await checker.readLine() == "ready", "\(context)")
            #expect(try await a.readLine() == "ready A", "\(context)")
            #expect(try await b.readLine() == "ready B", "\(context)")
            a.send("go")
            b.send("go")
            try await a.kill(afterMilliseconds: delayMs)
            let aLines = try a.remainingLines()
            let aFinished = aLines.contains("done A")
            try await b.waitForExit(timeout: 120)
            #expect(b.succeeded, "writer B ended with \(b.status): \(b.errorOutput()) — \(context)")
            #expect(try b.remainingLines() == ["done B"], "\(context)")
            // The checker looks at a few more snapshots of the final state, then is stopped.
            try await Task.sleep(for: .milliseconds(100))
            let checkerRan = checker.process.isRunning
            if checkerRan {
                try await checker.kill()
            } else {
                Issue.record("check-loop ended by itself (\(checker.status)): \(checker.errorOutput()) — \(context)")
            }
            let store = try Store(path: path)
            let problems = storeCheckProblems(store)
            #expect(problems.isEmpty, "check: \(problems) — \(context)")
            try store.read { txn in
                let total: UInt64
                do { total = try CounterWorkload.check(txn) } catch {
                    Issue.record("\(error) — \(context)")
                    return
                }
                let w = try #require(try txn.tree("w"))
                var aCount = 0
                while try w.get(Array("A/\(aCount)".utf8)) != nil { aCount += 1 }
                var bCount = 0
                while try w.get(Array("B/\(bCount)".utf8)) != nil { bCount += 1 }
                #expect(bCount == perWriter, "B's commits: \(bCount) of \(perWriter) — \(context)")
                #expect(UInt64(aCount + bCount) == total, "A's commits are not a prefix: A \(aCount), B \(bCount), count \(total) — \(context)")
                if aFinished { #expect(aCount == perWriter, "\(context)") }
            }
            print("HuntC multi-process cycle \(cycle): \(context)")
        }
    }
}

/// Controls for `SyncLossTests` (its `SyncLossFile` model of Linux's behaviour after a failed
/// fdatasync): without a failed sync the same sequence survives the power loss, and a failed sync
/// whose base commit was durable loses nothing acknowledged either. So the failing test's damage
/// comes from the failed sync of a `.noSync` base, not from the simulation.
@Suite struct SyncLossControlTests {
    @Test(arguments: [(false, true), (true, false), (false, false)])
    func syncLossControl(failSync: Bool, noSyncBase: Bool) throws {
        let path = temporaryPath("huntc-syncloss-control")
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 0xC0DE)
        var (store, file) = try SyncLossTests.open(path, StoreOptions(durability: .full))
        var model: Contents = [:]
        try store.write { txn in try mutate(txn, &model, &rng, operations: 3000) }
        try store.write(durability: noSyncBase ? .noSync : .full) { txn in try mutate(txn, &model, &rng, operations: 1500) }
        if failSync {
            file.state.withLock { $0.failNextSync = true }
            var attempted = model
            #expect(throws: StorageError.self) { try store.write { txn in try mutate(txn, &attempted, &rng, operations: 300) } }
        }
        try store.write { txn in try mutate(txn, &model, &rng, operations: 300) }
        let environment = WeakEnvironmentRef(store.env)
        store = try Store.inMemory()
        #expect(environment.environment == nil)
        try file.losePower()
        let reopened = try Store(path: path)
        #expect(storeCheckProblems(reopened).isEmpty)
        #expect(try contents(of: reopened) == model)
    }
}

/// Power loss (the file goes back to what the last successful sync made durable, length
/// included: a cut by `ftruncate` that no sync followed is lost too) after random mixes of durable
/// and `.noSync` commits, mass deletes, `compact()` and tightly compacting commits. The file must
/// open clean at the last durable commit or one of the `.noSync` commits after it.
@Suite struct TruncationPowerLossTests {
    @Test func powerLossAfterCompactionCutsAndRegrowth() throws {
        let seed = HuntC.baseSeed ^ 0x61
        var rng = SplitMix(seed: seed)
        var cuts = 0
        defer { #expect(cuts > 0, "no compaction cut the file: the test proves nothing about cuts") }
        for round in 0..<HuntC.iterations(12) {
            let path = temporaryPath("huntc-trunc")
            defer { removeStoreFiles(path) }
            var options = StoreOptions(durability: .full)
            if rng.percent(50) { options.compaction.freeFraction = 0.02; options.compaction.pagesPerCommit = 8 }
            var (store, file) = try SyncLossTests.open(path, options)
            var model: Contents = [:]
            try store.write { try HuntC.churn($0, &model, &rng, puts: 2500, deleteShare: 0) }
            var acceptable = [model]
            var log: [String] = []
            for _ in 0..<rng.within(3...12) {
                switch rng.below(6) {
                case 0:
                    try store.compact()
                    acceptable = [model]
                    log.append("compact")
                case 1, 2:
                    let noSync = rng.percent(50)
                    try store.write(durability: noSync ? .noSync : .full) {
                        try HuntC.churn($0, &model, &rng, puts: rng.within(0...300), deleteShare: rng.within(0...70))
                    }
                    if noSync { acceptable.append(model) } else { acceptable = [model] }
                    log.append(noSync ? "noSync" : "full")
                default:
                    let noSync = rng.percent(30)
                    try store.write(durability: noSync ? .noSync : .full) {
                        try HuntC.churn($0, &model, &rng, puts: rng.within(0...40), deleteShare: rng.within(0...5))
                    }
                    if noSync { acceptable.append(model) } else { acceptable = [model] }
                    log.append(noSync ? "small noSync" : "small full")
                }
            }
            let context = "seed \(seed) round \(round): \(log)"
            cuts += file.truncations.load(ordering: .relaxed)
            let environment = WeakEnvironmentRef(store.env)
            store = try Store.inMemory()
            #expect(environment.environment == nil)
            try file.losePower()
            let reopened = try Store(path: path)
            let problems = storeCheckProblems(reopened)
            #expect(problems.isEmpty, "\(context): \(problems)")
            let found = try contents(of: reopened)
            #expect(acceptable.contains(found), "\(context): reopened at transaction \(reopened.latestVersion), not an acceptable state")
        }
    }
}

/// Durable commits only (commits that compact themselves, `compact()`), with syncs that fail now
/// and then under Linux's semantics (`SyncLossFile`: the writes a failed sync could not flush are
/// lost for good), then a power loss: the file reopens clean at the last acknowledged commit.
/// (With a `.noSync` commit as the base of the failed sync this breaks: SyncLossTests.)
@Suite struct DurableSyncLossTests {
    @Test func failedSyncsInDurableCommitsAndCompactionsThenPowerLoss() throws {
        let seed = HuntC.baseSeed ^ 0x71
        var rng = SplitMix(seed: seed)
        var failures = 0
        for round in 0..<HuntC.iterations(6) {
            let path = temporaryPath("huntc-durable-syncloss")
            defer { removeStoreFiles(path) }
            var options = StoreOptions(durability: .full, syncMode: rng.percent(50) ? .single : .double)
            if rng.percent(50) { options.compaction.freeFraction = 0.02; options.compaction.pagesPerCommit = 8 }
            var (store, file) = try SyncLossTests.open(path, options)
            var model: Contents = [:]
            try store.write { try HuntC.churn($0, &model, &rng, puts: 2500, deleteShare: 0) }
            var log: [String] = []
            for _ in 0..<rng.within(4...14) {
                let fail = rng.percent(35)
                if fail { file.state.withLock { $0.failNextSync = true } }
                var attempted = model
                do {
                    if rng.percent(20) {
                        try store.compact()
                        log.append(fail ? "compact(fail)" : "compact")
                    } else {
                        try store.write { try HuntC.churn($0, &attempted, &rng, puts: rng.within(0...300), deleteShare: rng.within(0...60)) }
                        model = attempted
                        log.append(fail ? "write(fail?)" : "write")
                    }
                } catch let error as StorageError {
                    guard case .io = error else { throw error }
                    failures += 1
                    log.append("threw")
                }
                file.state.withLock { $0.failNextSync = false }
                #expect(try contents(of: store) == model, "seed \(seed) round \(round): \(log)")
            }
            let context = "seed \(seed) round \(round): \(log)"
            let environment = WeakEnvironmentRef(store.env)
            store = try Store.inMemory()
            #expect(environment.environment == nil)
            try file.losePower()
            let reopened = try Store(path: path)
            let problems = storeCheckProblems(reopened)
            #expect(problems.isEmpty, "\(context): \(problems)")
            #expect(try contents(of: reopened) == model, "\(context): reopened at transaction \(reopened.latestVersion), not the last acknowledged commit")
        }
        #expect(failures > 0)
    }
}

/// The format 2 → 3 upgrade (one durable commit at the first read-write open) is cut by a power
/// loss at each of its writes (half done or not) or at its sync, keeping a random part of what
/// was written since the last sync: the file must reopen read-only as format 2 or 3 with every
/// entry, then upgrade on a read-write open and check clean.
@Suite struct UpgradePowerLossTests {
    @Test func powerLossDuringTheUpgradeCommit() throws {
        let seed = HuntC.baseSeed ^ 0x81
        var rng = SplitMix(seed: seed)
        var cuts = 0
        var n = 1
        while n <= 400 {
            let (dir, path) = try UpgradeTests.copy("v2-trees.strata")
            defer { removeDirectory(dir) }
            let atSync = n % 7 == 0
            let partial = rng.percent(50)
            let made = Mutex<FaultyFile?>(nil)
            let opened = Result {
                try Store(path: path, options: StoreOptions()) { io in
                    // The commit log beside the page file shares the page file's fault plan.
                    if io.path.hasSuffix("-log"), let pageFile = made.withLock({ $0 }) { return FaultyFile(io, sharing: pageFile) }
                    let file = FaultyFile(io)
                    if atSync { file.cutPower(atSync: 1) } else { file.cutPower(atWrite: n, partial: partial) }
                    made.withLock { $0 = file }
                    return file
                }
            }
            let file = try #require(made.withLock { $0 })
            if case .success(let store) = opened {
                if !atSync { break }  // the upgrade made fewer than n writes: every write was cut once
                _ = store
                n += 1
                continue
            }
            cuts += 1
            let chunk = rng.percent(30) ? 512 : 4096
            let share = rng.within(0...100)
            var keepRng = SplitMix(seed: rng.next())
            try file.losePower(chunk: chunk) { _ in keepRng.percent(share) }
            let context = "seed \(seed) cut at \(atSync ? "the sync" : "write \(n)\(partial ? " (half)" : "")"), chunk \(chunk), keep \(share)%"
            do {
                try UpgradeTests.expectContents(try Store(path: path, options: StoreOptions(readOnly: true)), formatVersion: [2, strataFormatVersion])
                let store = try Store(path: path, options: StoreOptions(durability: .noSync))
                try UpgradeTests.expectContents(store, formatVersion: [strataFormatVersion])
                let problems = storeCheckProblems(store)
                #expect(problems.isEmpty, "\(context): \(problems)")
            } catch {
                Issue.record("\(context): \(error)")
            }
            n += atSync ? 1 : (n < 40 ? 1 : 7)
        }
        #expect(cuts > 3)
    }
}

/// Large transactions that spill (transaction memory at its minimum, so most of their pages are
/// written before the commit) in a file whose commits compact tightly (moving pages, trimming,
/// cutting), cut by a power loss at a random write or sync, part of the unsynced writes kept.
@Suite struct SpillCompactionPowerLossTests {
    @Test func powerLossInSpillingTransactionsWhileCommitsCompact() throws {
        let seed = HuntC.baseSeed ^ 0x91
        let path = temporaryPath("huntc-spill")
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: seed)
        var keepRng = SplitMix(seed: seed ^ 0xFF)
        var (store, faulty) = try HuntC.open(path, tight: true, spilling: true)
        var model: Contents = [:]
        try store.write { try HuntC.churn($0, &model, &rng, puts: 3000, deleteShare: 0) }
        var cuts = 0
        for iteration in 0..<HuntC.iterations(10) {
            let context = "seed \(seed) (HUNTC_SEED=\(HuntC.baseSeed)) iteration \(iteration)"
            try store.write { try HuntC.churn($0, &model, &rng, puts: 1500, deleteShare: 40) }
            let before = model
            let writes0 = faulty.writes
            let cutNote: String
            if rng.percent(70) {
                let n = rng.within(1...120), partial = rng.percent(50)
                faulty.cutPower(atWrite: n, partial: partial)
                cutNote = "cut at write \(n)"
            } else {
                faulty.cutPower(atSync: 1)
                cutNote = "cut at sync 1"
            }
            var attempted = model
            var acceptable = [before]
            do {
                try store.write { try HuntC.churn($0, &attempted, &rng, puts: 2000, deleteShare: 30) }
                faulty.clearFaults()
                acceptable = [attempted]
            } catch let error as StorageError {
                guard case .io = error else { Issue.record("\(context): \(error)"); return }
                acceptable.append(attempted)
                cuts += 1
            }
            let made = faulty.writes - writes0
            let (_, index) = try HuntC.crashAndReopen(
                &store, faulty, path, keepRng: &keepRng, expected: acceptable, context: context + " \(cutNote) (\(made) writes)")
            guard let index else { return }
            model = acceptable[index]
            (store, faulty) = try HuntC.open(path, tight: true, spilling: true)
        }
        #expect(cuts > 0)
    }
}
