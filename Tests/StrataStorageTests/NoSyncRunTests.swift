import Foundation
import Testing

@testable import StrataStorage

/// A power loss during a run of `.noSync` commits may lose commits of the run, or all of them, but
/// never the durable commit before the run: the file opens at it or at a whole commit of the run.
/// Found by the review of 2026-12-05: each commit of a run writes one of the two meta slots, so from
/// the run's second commit on the slot that held the durable commit may hold one whose pages did
/// not all reach the disk (40 trials with `.double`: 37 opens refused with `noValidMeta`, 3 at a
/// commit holding a page a later commit had reused). The run's first commit now makes the durable
/// commit the commit log's frame (`CommitLog.pin`), which a replay brings back, and the log's pin
/// keeps the run off its pages. Damage that got past that would still never pass unseen: reading
/// throws `corrupt` naming the newer transaction, or `check()` reports it.
@Suite struct NoSyncRunTests {
    /// With `.single` a small durable commit before the run goes through the commit log and a
    /// large one (a value of 5 MiB, more than a frame holds) syncs the page file; with `.double`
    /// every durable commit syncs the page file.
    @Test(arguments: [SyncMode.single, SyncMode.double])
    func powerLossInARunOfNoSyncCommitsNeverLosesTheDurableCommitBeforeIt(sync: SyncMode) throws {
        let seed = UInt64(TestEnv.int("STRATA_NOSYNC_RUN_SEED", default: 0x0005_7A7A))
        let trials = TestEnv.int("STRATA_NOSYNC_RUN_TRIALS", default: 40)
        var rng = SplitMix(seed: seed)
        var outcomes: [String: Int] = [:]
        for trial in 0..<trials {
            let path = temporaryPath("nosync-run-\(sync)-\(trial)")
            defer { removeStoreFiles(path) }
            var (store, faulty) = try openFaulty(path, StoreOptions(durability: .full, syncMode: sync))
            var model: Contents = [:]
            // A third of the trials on a larger file, whose run frees enough pages the pin holds
            // for its second commit to renew the pin (RunPin.swift).
            let keySpace = rng.percent(33) ? 20_000 : 3000
            try store.write { txn in try mutate(txn, &model, &rng, operations: keySpace / 2, keySpace: keySpace) }
            // The commit before the durable one stays on the disk in the other meta slot until the
            // run's first meta page overwrites it: opening there would lose the durable commit.
            let beforeDurable = model
            // The durable commit before the run: one put (whose few pages are all its record
            // verifies: the run's overwrites of older pages are then seen by nothing), a larger
            // one, or one too large for a frame of the log. (The put makes it a commit even when
            // `mutate` changes nothing.)
            let kind = rng.below(3)
            try store.write { txn in
                try mutate(txn, &model, &rng, operations: kind == 0 ? 1 : 200, keySpace: keySpace)
                let value = kind == 2 ? [UInt8](repeating: UInt8(truncatingIfNeeded: trial), count: 5 << 20) : [1]
                try txn.createTree("a").put(bigEndianKey(UInt64(20_000 + trial)), value)
                model["a", default: [:]][bigEndianKey(UInt64(20_000 + trial))] = value
            }
            var states = [model]  // the durable commit, then each commit of the run
            // A commit of the run that renews the pin (RunPin.swift) syncs: the commit it began
            // from is durable from then on.
            var durable = 0
            for _ in 0..<(2 + rng.below(4)) {
                let syncs = faulty.syncs
                try store.write(durability: .noSync) { txn in try mutate(txn, &model, &rng, operations: 100 + rng.below(300), keySpace: keySpace) }
                if faulty.syncs > syncs { durable = states.count - 1 }
                states.append(model)
            }
            store = try Store.inMemory()
            // Any subset of the run's writes may have reached the disk, page by page: here the
            // oldest ones up to a point (pieces are numbered newest first), and some after it.
            // A fifth of the trials tear pages: 512-byte sectors.
            let chunk = rng.percent(20) ? 512 : 4096
            let pieces = faulty.state.withLock { s in s.journal.reduce(0) { $0 + ($1.old.count + chunk - 1) / chunk } }
            let newest = rng.below(pieces + 1)
            let keepPercent = rng.below(90)
            var keep = rng
            try faulty.losePower(chunk: chunk) { piece in piece >= newest || keep.percent(keepPercent) }
            rng = keep
            let reopened: Store
            do {
                reopened = try Store(path: path)
            } catch StorageError.noValidMeta(_, _) {
                outcomes["noValidMeta", default: 0] += 1
                continue
            }
            let found: Contents
            do {
                found = try contents(of: reopened)
            } catch StorageError.corrupt(_, let reason) {
                #expect(reason.contains("newer than the snapshot's"), "seed \(seed), trial \(trial): reading threw \(reason)")
                #expect(!(try reopened.check().isOK), "seed \(seed), trial \(trial): check() passed a damaged commit")
                outcomes["damaged, refused by reads", default: 0] += 1
                continue
            }
            if let index = states.lastIndex(of: found) {
                #expect(
                    index >= durable, "seed \(seed), trial \(trial): opened at run commit \(index), before \(durable), which a renewed pin had made durable")
                if durable > 0 { outcomes["renewed", default: 0] += 1 }
                outcomes[index == 0 ? "the durable commit" : "run commit \(index)", default: 0] += 1
            } else if found == beforeDurable {
                outcomes["the commit before it", default: 0] += 1
            } else {
                #expect(!(try reopened.check().isOK), "seed \(seed), trial \(trial): read a state no commit made, and check() passed it")
                outcomes["damaged, found by check()", default: 0] += 1
                continue
            }
            #expect(try reopened.check().isOK, "seed \(seed), trial \(trial)")
        }
        print("NoSyncRunTests outcomes (\(sync), seed \(seed)): \(outcomes.sorted { $0.key < $1.key })")
        // The durable commit or a later one is always there, whole.
        let lost = outcomes.filter { !($0.key == "the durable commit" || $0.key.hasPrefix("run commit") || $0.key == "renewed") }
        #expect(lost.isEmpty, "seed \(seed): \(lost)")
    }

    /// The pin of a run holds the pages it frees that the commit before the run sees, like a
    /// snapshot kept open; the run renews it once they are many (RunPin.swift), so that a long run
    /// of `.noSync` commits after a large durable one reuses them: the file stays near its size.
    @Test func aLongRunOfNoSyncCommitsReusesThePagesItsPinHeld() throws {
        let path = temporaryPath("nosync-long-run")
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = nil
        let store = try Store(path: path, options: options)
        var rng = SplitMix(seed: 0x10_4A)
        var model: [[UInt8]: [UInt8]] = [:]
        func put(_ txn: WriteTransaction, _ key: Int) throws {
            let value = [UInt8](repeating: UInt8(truncatingIfNeeded: rng.below(256)), count: 200)
            try txn.createTree("t").put(bigEndianKey(UInt64(key)), value)
            model[bigEndianKey(UInt64(key))] = value
        }
        try store.write(durability: .full) { txn in for key in 0..<4000 { try put(txn, key) } }
        let loaded = try store.stats()
        // The same keys rewritten: the live pages stay as many.
        for _ in 0..<(TestEnv.int("STRATA_NOSYNC_LONG_RUN", default: 1500)) {
            try store.write { txn in for _ in 0..<10 { try put(txn, rng.below(4000)) } }
        }
        let stats = try store.stats()
        print("NoSyncRunTests long run: \(loaded.pageCount) pages (\(loaded.usedPages) used) loaded, \(stats.pageCount) (\(stats.usedPages) used) after")
        #expect(stats.pageCount <= loaded.pageCount + 96, "the file grew from \(loaded.pageCount) to \(stats.pageCount) pages (\(stats.usedPages) used)")
        #expect(
            try store.read { txn in
                try (try txn.tree("t")).map { tree in try tree.count == UInt64(model.count) && model.allSatisfy { try tree.get($0.key) == $0.value } }
            } == true)
        #expect(try store.check().isOK)
    }

    /// A commit of a run uses pages an earlier commit of the run wrote: a power loss that keeps the
    /// later commit's meta page and pages but loses the earlier one's must not open the later one
    /// (its record lists the run's pages it uses, with their checksums). Before, it opened with the
    /// earlier commit's new leaves missing: a state no commit made.
    @Test(arguments: [SyncMode.single, SyncMode.double])
    func aRunCommitWhoseEarlierPagesWereLostIsNotOpened(sync: SyncMode) throws {
        let path = temporaryPath("nosync-lost-earlier-\(sync)")
        defer { removeStoreFiles(path) }
        var (store, faulty) = try openFaulty(path, StoreOptions(durability: .full, syncMode: sync))
        var model: Contents = [:]
        func put(_ txn: WriteTransaction, _ key: Int, _ byte: UInt8) throws {
            let value = [UInt8](repeating: byte, count: 100)
            try txn.createTree("t").put(bigEndianKey(UInt64(key)), value)
            model["t", default: [:]][bigEndianKey(UInt64(key))] = value
        }
        // A durable commit too large for a frame of the log (it syncs the page file).
        try store.write { txn in for key in 0..<2000 { try put(txn, key, 1) } }
        _ = try store.write { txn in try txn.createTree("big").put([1], [UInt8](repeating: 7, count: 5 << 20)) }
        model["big"] = [[1]: [UInt8](repeating: 7, count: 5 << 20)]
        let durable = model
        // The run: new leaves, then a commit that changes older keys only and keeps using them.
        try store.write(durability: .noSync) { txn in for key in 10_000..<10_400 { try put(txn, key, 2) } }
        let pieces = { faulty.state.withLock { s in s.journal.reduce(0) { $0 + ($1.old.count + 4095) / 4096 } } }
        let afterFirst = pieces()
        _ = try store.write(durability: .noSync) { txn in for key in stride(from: 0, to: 2000, by: 400) { try put(txn, key, 3) } }
        let second = pieces() - afterFirst
        store = try Store.inMemory()
        // Pieces are numbered newest first: keep the second commit's writes, lose the first's.
        try faulty.losePower { piece in piece < second }
        let reopened = try Store(path: path)
        #expect(try contents(of: reopened) == durable, "\(sync): opened at transaction \(reopened.latestVersion)")
        #expect(try reopened.check().isOK)
    }
}
