import Foundation
import Synchronization
import Testing

@testable import StrataStorage

/// The commit log (CommitLog.swift, FORMAT.md §3.2): small durable commits sync the log, not the
/// page file; after a power loss the first read-write opener replays the log; a log that does
/// not belong to the file, or a damaged frame, is never replayed over it.
@Suite struct CommitLogTests {
    /// Opens `path` with the page file and the log each seen through a `FaultyFile` of its own
    /// (separate counts), or through one shared plan when `shared`.
    static func open(_ path: String, shared: Bool = true, options: StoreOptions = StoreOptions(durability: .full)) throws -> (
        Store, FaultyFile, () -> FaultyFile?
    ) {
        var options = options
        options.compaction.idleDelay = nil
        let files = Mutex<(page: FaultyFile?, log: FaultyFile?)>((nil, nil))
        let store = try Store(path: path, options: options) { inner in
            if inner.path.hasSuffix("-log") {
                let log = FaultyFile(inner, sharing: shared ? files.withLock { $0.page } : nil)
                files.withLock { $0.log = log }
                return log
            }
            let page = FaultyFile(inner)
            files.withLock { $0.page = page }
            return page
        }
        return (store, try #require(files.withLock { $0.page }), { files.withLock { $0.log } })
    }

    static func put(_ store: Store, _ model: inout [UInt64: [UInt8]], _ rng: inout SplitMix, count: Int, durability: Durability = .full) throws {
        try store.write(durability: durability) { txn in
            let tree = try txn.createTree("t")
            // One put of a value never written before: the commit always changes something (a
            // commit that changes nothing writes nothing and syncs nothing).
            let fresh = UInt64(rng.below(3000))
            let value = withUnsafeBytes(of: rng.next()) { Array($0) }
            try tree.put(bigEndianKey(fresh), value)
            model[fresh] = value
            for _ in 0..<count {
                let key = UInt64(rng.below(3000))
                if rng.percent(20) {
                    try tree.delete(bigEndianKey(key))
                    model[key] = nil
                } else {
                    let value = rng.byteArray(rng.percent(3) ? rng.within(1500...9000) : rng.within(0...200))
                    try tree.put(bigEndianKey(key), value)
                    model[key] = value
                }
            }
        }
    }

    /// Two commits too large for a frame (6 MB each): synced in the page file, no generation.
    static func twoCommitsTooLargeForAFrame(_ store: Store, _ model: inout [UInt64: [UInt8]]) throws {
        for round in 0..<2 {
            try store.write { txn in
                let tree = try txn.createTree("t")
                for key in UInt64(0)..<2000 {
                    let value = [UInt8](repeating: UInt8(truncatingIfNeeded: key &+ UInt64(round)), count: 3000)
                    try tree.put(bigEndianKey(key), value)
                    model[key] = value
                }
            }
        }
    }

    /// Opens `path`, runs `body`, and cuts the power at the next sync, which is the close's: the
    /// store is closed on return, and the file's `losePower` then drops every unsynced write.
    static func runThenCutPower(
        _ path: String, options: StoreOptions = StoreOptions(durability: .full), _ body: (Store, FaultyFile) throws -> Void
    ) throws -> FaultyFile {
        try runThenCutPower(path, options: options) { store, page, _ in try body(store, page) }
    }

    /// `runThenCutPower`, with the log's faulty file (its faults shared with the page file's
    /// unless `shared` is false).
    static func runThenCutPower(
        _ path: String, shared: Bool = true, options: StoreOptions = StoreOptions(durability: .full),
        _ body: (Store, FaultyFile, () -> FaultyFile?) throws -> Void
    ) throws -> FaultyFile {
        let (store, page, log) = try open(path, shared: shared, options: options)
        try body(store, page, log)
        page.cutPower(atSync: 1)
        return page
    }

    /// Loses power on `page` (every unsynced write of both files), reopens `path` and expects
    /// exactly `model`, checking clean.
    static func expectAfterPowerLoss(_ path: String, _ page: FaultyFile, _ model: [UInt64: [UInt8]]) throws {
        try page.losePower()
        let reopened = try Store(path: path)
        #expect(try contents(reopened) == model)
        #expect(storeCheckProblems(reopened).isEmpty)
    }

    static func contents(_ store: Store) throws -> [UInt64: [UInt8]] {
        try store.read { txn in
            var found: [UInt64: [UInt8]] = [:]
            try txn.tree("t")?.forEach { key, value in
                found[readBigEndianU64(key.baseAddress!)] = Array(value)
                return true
            }
            return found
        }
    }

    /// Small durable commits sync the log once each and never the page file; the log is removed
    /// when the last handle closes, and the file reopens with every commit.
    @Test func smallDurableCommitsSyncOnlyTheLog() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 0x106)
        var model: [UInt64: [UInt8]] = [:]
        do {
            let (store, page, log) = try Self.open(path, shared: false)
            try Self.put(store, &model, &rng, count: 500)
            let pageSyncs = page.syncs
            let logSyncs = try #require(log()).syncs
            for _ in 0..<30 { try Self.put(store, &model, &rng, count: 3) }
            #expect(page.syncs == pageSyncs, "small durable commits synced the page file")
            #expect(try #require(log()).syncs == logSyncs + 30)
            #expect(FileManager.default.fileExists(atPath: path + "-log"))
        }
        #expect(!FileManager.default.fileExists(atPath: path + "-log"), "the last close leaves the log behind")
        let reopened = try Store(path: path)
        #expect(try Self.contents(reopened) == model)
        #expect(storeCheckProblems(reopened).isEmpty)
    }

    /// Power loss after logged commits (and `.noSync` ones after them), keeping a random subset of
    /// the unsynced writes of both files, sector by sector: the file reopens at the last
    /// acknowledged durable commit, at one of the `.noSync` commits after it, or at the commit in
    /// flight when the power went, whole.
    @Test func powerLossKeepsEveryLoggedCommit() throws {
        let seed = UInt64(TestEnv.int("STRATA_COMMIT_LOG_SEED", default: 0x10C))
        let rounds = TestEnv.int("STRATA_COMMIT_LOG_ROUNDS", default: 24)
        var rng = SplitMix(seed: seed)
        for round in 0..<rounds {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            var model: [UInt64: [UInt8]] = [:]
            var acceptable: [[UInt64: [UInt8]]] = []
            let (page, environment) = try { () throws -> (FaultyFile, WeakEnvironmentRef) in
                let (store, page, _) = try Self.open(path)
                try Self.put(store, &model, &rng, count: 800)
                for _ in 0..<rng.within(1...12) { try Self.put(store, &model, &rng, count: rng.within(1...40)) }
                acceptable.append(model)
                for _ in 0..<rng.within(0...3) {
                    try Self.put(store, &model, &rng, count: rng.within(1...40), durability: .noSync)
                    acceptable.append(model)
                }
                // The power goes during one more commit, before the handle closes: nothing is
                // synced from here on. That commit is in flight: whole or not at all (its frame,
                // often one page, may reach the disk whole although its sync failed).
                page.cutPower(atSync: 1)
                var attempted = model
                attempted[999_999] = [1]
                acceptable.append(attempted)
                _ = try? store.write { try $0.createTree("t").put(bigEndianKey(999_999), [1]) }
                return (page, WeakEnvironmentRef(store.env))
            }()
            #expect(environment.environment == nil)
            let keep = rng.next()
            try page.losePower(chunk: 512) { piece in (keep >> UInt64(piece % 64)) & 1 == 1 }
            let reopened = try Store(path: path)
            let found = try Self.contents(reopened)
            #expect(acceptable.contains(found), "seed \(seed) round \(round): reopened to a state no commit made (\(found.count) keys)")
            #expect(storeCheckProblems(reopened).isEmpty, "seed \(seed) round \(round)")
        }
    }

    /// Random mixes of logged, classic (large), spilling, `.noSync` and failed commits (a write or a
    /// sync of either file fails), then a power loss keeping a random subset of both files'
    /// unsynced writes: the file opens at the last acknowledged durable commit, at a later
    /// `.noSync` or failed one, never at anything else, and checks clean. After a run of two or
    /// more `.noSync` commits the durable commit before them may go too, as Durability.md says:
    /// opening then finds an earlier whole commit, or throws `noValidMeta`, never damaged data.
    @Test func powerLossAfterMixedAndFailedCommits() throws {
        let seed = UInt64(TestEnv.int("STRATA_COMMIT_LOG_SEED", default: 0x10C)) &+ 1
        let rounds = TestEnv.int("STRATA_COMMIT_LOG_ROUNDS", default: 24)
        var rng = SplitMix(seed: seed)
        for round in 0..<rounds {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            var model: [UInt64: [UInt8]] = [:]
            var acceptable: [[UInt64: [UInt8]]] = []
            var options = StoreOptions(durability: .full)
            if rng.percent(30) { options.transactionMemory = 0 }
            var history: [String] = []
            var everything: [[UInt64: [UInt8]]] = [[:]]
            var noSyncRun = 0
            let page = try Self.runThenCutPower(path, options: options) { store, page in
                for step in 0..<rng.within(4...14) {
                    let durable = !rng.percent(30)
                    let count = rng.percent(15) ? rng.within(300...900) : rng.within(1...30)
                    let fails = step > 0 && rng.percent(25)
                    if fails {
                        if rng.percent(50) { page.failSync(in: rng.within(1...2)) } else { page.failWrite(in: rng.within(1...6), partial: rng.percent(50)) }
                    }
                    var attempted = model
                    do {
                        try Self.put(store, &attempted, &rng, count: count, durability: durable ? .full : .noSync)
                        model = attempted
                        if durable { acceptable.removeAll() }
                        acceptable.append(model)
                        noSyncRun = durable ? 0 : noSyncRun + 1
                        history.append("\(durable ? "full" : "noSync") \(count)")
                    } catch {
                        acceptable.append(attempted)  // in flight: whole or not at all
                        everything.append(attempted)
                        if !durable { noSyncRun += 1 }  // it wrote pages as a `.noSync` commit does
                        history.append("failed \(durable ? "full" : "noSync") \(count)")
                    }
                    page.clearFaults()
                    everything.append(model)
                }
                acceptable.append(model)
            }
            let keep = rng.next()
            try page.losePower(chunk: 512) { piece in (keep >> UInt64(piece % 64)) & 1 == 1 }
            let reopened: Store
            do { reopened = try Store(path: path) } catch {
                if noSyncRun >= 2, case StorageError.noValidMeta = error { continue }
                Issue.record("seed \(seed) round \(round): reopening after \(history) failed: \(error)")
                continue
            }
            let found = try Self.contents(reopened)
            #expect(
                (noSyncRun >= 2 ? everything : acceptable).contains(found),
                "seed \(seed) round \(round): reopened to a state no acknowledged commit made (\(found.count) keys, state \(everything.firstIndex(of: found).map(String.init) ?? "none") of \(everything.count)) after \(history)"
            )
            // Not checked after such a run: Durability.md's "noValidMeta rather than damaged data"
            // does not hold there, log or not (the closing note of 2026-12-05 says how).
            if noSyncRun < 2 { #expect(storeCheckProblems(reopened).isEmpty, "seed \(seed) round \(round) after \(history)") }
        }
    }

    /// A commit whose first frame fails after its meta page was written, then its retry, which is
    /// acknowledged, then a power loss: the retry is there (the retry's generation must begin by
    /// syncing the page file, whose cache held the failed commit's writes, not the disk's).
    @Test(arguments: [false, true])
    func aRetryAfterAFailedFirstFrameSurvivesPowerLoss(failWrite: Bool) throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 6)
        var model: [UInt64: [UInt8]] = [:]
        let page = try Self.runThenCutPower(path) { store, page in
            try Self.twoCommitsTooLargeForAFrame(store, &model)
            #expect(!FileManager.default.fileExists(atPath: path + "-log"))
            if failWrite { page.failWrite(in: 3) } else { page.failSync(in: 1) }
            var attempted = model
            #expect(throws: StorageError.self) { try Self.put(store, &attempted, &rng, count: 5) }
            page.clearFaults()
            try Self.put(store, &model, &rng, count: 5)
        }
        try Self.expectAfterPowerLoss(path, page, model)
    }

    /// Frames written through the direct path (`PosixFile.writeDurably`: one `O_DIRECT | O_DSYNC`
    /// write), with its rare outcomes injected between good writes: interrupted, a disk error
    /// after part of the frame landed (the commit fails and must not come back; the next starts a
    /// new generation, syncing the page file), EFAULT, short, and EINVAL (the rest through the
    /// page cache and a sync). The last short write comes after the last new generation, so only
    /// the log holds its commit when the power goes. Then the power goes: the page file
    /// loses every write since its last sync, the log keeps what it wrote (its writes were durable
    /// when they returned), and the reopened file holds every acknowledged commit, none other.
    @Test(.enabled(if: directWritesWorkInTemporaryDirectory(), "the temporary directory's filesystem takes no O_DIRECT writes"))
    func framesWrittenDirectlyThroughTheirFailuresSurvivePowerLoss() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 0xd1_2ec7)
        var model: [UInt64: [UInt8]] = [:]
        let faults = DirectFaultQueue()
        let files = Mutex<(page: FaultyFile?, log: PosixFile?)>((nil, nil))
        var options = StoreOptions(durability: .full)
        options.compaction.idleDelay = nil
        do {
            let store = try Store(path: path, options: options) { inner in
                if inner.path.hasSuffix("-log"), let log = inner as? PosixFile {
                    log.injectDirectWriteFaults { faults.next() }
                    files.withLock { $0.log = log }
                    return log
                }
                let page = FaultyFile(inner)
                files.withLock { $0.page = page }
                return page
            }
            try Self.put(store, &model, &rng, count: 300)
            var directBeforeEINVAL = 0
            for round in 0..<60 {
                if round == 50 { directBeforeEINVAL = try #require(files.withLock { $0.log }).directWriteCount }
                let frameBytes = 4096 * (1 + rng.below(3))
                // From round 50 on the log writes through the page cache: nothing more to inject.
                let queued: [PosixFile.DirectWriteFault] =
                    switch round < 50 ? round % 10 : 0 {
                    case 2: [.error(EINTR)]
                    case 4: [.error(EIO, afterBytes: frameBytes)]
                    case 6: [.error(EFAULT)]
                    case 8: [.short(bytes: frameBytes)]
                    default: []
                    }
                faults.queue(round == 50 ? [.error(EINVAL)] : queued)
                let directBefore = try #require(files.withLock { $0.log }).directWriteCount
                if case .error(EIO, _)? = queued.first {
                    var attempted = model
                    #expect(throws: StorageError.self, "round \(round)") { try Self.put(store, &attempted, &rng, count: 4) }
                } else {
                    try Self.put(store, &model, &rng, count: 4)
                }
                #expect(faults.pending == 0, "round \(round): the commit made no direct write")
                // A fault that fails or shortens the write leaves the commit's frame to the page
                // cache (or fails it): it counts no direct write; an interrupted one is made again.
                let direct = try #require(files.withLock { $0.log }).directWriteCount - directBefore
                let expected = round >= 50 || [4, 6, 8].contains(round % 10) ? 0 : 1
                #expect(direct == expected, "round \(round): \(direct) direct writes")
                #expect(try Self.contents(store) == model, "round \(round)")
            }
            let log = try #require(files.withLock { $0.log })
            try #require(log.directWriteCount > 0, "the filesystem under \(path) takes no O_DIRECT writes: nothing was injected")
            #expect(log.directWriteCount == directBeforeEINVAL, "EINVAL did not end the direct writes")
            try #require(files.withLock { $0.page }).cutPower(atSync: 1)
        }
        try Self.expectAfterPowerLoss(path, try #require(files.withLock { $0.page }), model)
    }

    /// Another process ends this process's generation (a transaction of its own, not pinned, that
    /// then commits nothing); this process's next logged commit must start a generation of its own,
    /// not append to the ended one, which recovery would never read.
    @Test func aGenerationEndedByAnotherProcessIsNotExtended() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 8)
        var model: [UInt64: [UInt8]] = [:]
        let page = try Self.runThenCutPower(path) { store, page in
            for _ in 0..<3 { try Self.put(store, &model, &rng, count: 5) }
            // What another process's `secureLog` does, through a log object of its own.
            let other = CommitLog(pagePath: path, pageSize: store.env.pageSize, wrap: nil)
            try other.end(pageFile: store.env.file)
            for _ in 0..<2 { try Self.put(store, &model, &rng, count: 5) }
        }
        try Self.expectAfterPowerLoss(path, page, model)
    }

    /// Another process's failed commit leaves a spoiled meta page in the page cache, not on the
    /// disk; this process's next logged commit, the first of a generation, must sync the page file
    /// before it records the meta pages' checksums, or recovery would not know the disk's.
    @Test func aMetaPageWrittenByAnotherProcessIsSyncedBeforeAGenerationBegins() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var model: [UInt64: [UInt8]] = [:]
        var rng = SplitMix(seed: 11)
        let page = try Self.runThenCutPower(path) { store, page in
            try Self.twoCommitsTooLargeForAFrame(store, &model)
            // The spoil, written below this process's page file object (as through another
            // descriptor), and not synced: the harness puts it back at the power loss.
            let next = (try store.read { $0.txnid } + 1) % 2
            try page.write(UnsafeRawBufferPointer(rebasing: ZeroBlock.shared.bytes[0..<4096]), at: next * 4096)
            try Self.put(store, &model, &rng, count: 5)
        }
        try Self.expectAfterPowerLoss(path, page, model)
    }

    /// A database deleted after a crash, its log left behind, and a new database made under the
    /// same name: the old log is never replayed into the new file (whose first meta pages are the
    /// same as every new file's), since creating the file removes it.
    @Test func aLogLeftByADeletedDatabaseIsNotReplayedIntoANewOne() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        _ = try Self.crashAfterLoggedCommits(path, seed: 9)
        #expect(FileManager.default.fileExists(atPath: path + "-log"))
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.removeItem(atPath: path + "-lock")
        var rng = SplitMix(seed: 10)
        var model: [UInt64: [UInt8]] = [:]
        let page = try Self.runThenCutPower(path) { store, page in
            try Self.put(store, &model, &rng, count: 5)
        }
        try Self.expectAfterPowerLoss(path, page, model)
    }

    /// A durable transaction that changes nothing still makes the `.noSync` commits before it
    /// durable (Durability.md: a durable commit makes the commits before it durable too).
    @Test func aDurableTransactionThatChangesNothingMakesTheNoSyncOnesBeforeItDurable() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 12)
        var model: [UInt64: [UInt8]] = [:]
        let page = try Self.runThenCutPower(path) { store, page in
            try Self.put(store, &model, &rng, count: 20)
            for _ in 0..<3 { try Self.put(store, &model, &rng, count: 20, durability: .noSync) }
            let txnid = try store.read { $0.txnid }
            try store.write { txn in _ = try txn.tree("t")?.get(bigEndianKey(0)) }
            #expect(try store.read { $0.txnid } == txnid, "a transaction that changed nothing made a commit")
        }
        try Self.expectAfterPowerLoss(path, page, model)
    }

    /// A crash (the power lost before the close) leaves the log; returns the acknowledged content.
    static func crashAfterLoggedCommits(_ path: String, seed: UInt64) throws -> (before: [UInt64: [UInt8]], after: [UInt64: [UInt8]]) {
        var rng = SplitMix(seed: seed)
        var model: [UInt64: [UInt8]] = [:]
        var before: [UInt64: [UInt8]] = [:]
        let page = try Self.runThenCutPower(path) { store, page in
            try Self.put(store, &model, &rng, count: 600)
            before = model
            for _ in 0..<5 { try Self.put(store, &model, &rng, count: 10) }
        }
        try page.losePower()
        return (before, model)
    }

    /// The log beside a file it does not belong to (a file made anew under the same name) is never
    /// replayed over it, and is ended.
    @Test func aLogBesideAnotherFileIsIgnored() throws {
        let path = temporaryPath()
        let other = temporaryPath("other")
        defer {
            removeStoreFiles(path)
            removeStoreFiles(other)
        }
        _ = try Self.crashAfterLoggedCommits(path, seed: 1)
        var rng = SplitMix(seed: 2)
        var model: [UInt64: [UInt8]] = [:]
        do {
            let store = try Store(path: other)
            try Self.put(store, &model, &rng, count: 300)
        }
        try FileManager.default.copyItem(atPath: path + "-log", toPath: other + "-log")
        let copied = try readFileRange(other + "-log", at: 0, count: 4096)
        let reopened = try Store(path: other)
        #expect(try Self.contents(reopened) == model)
        #expect(storeCheckProblems(reopened).isEmpty)
        // Left as it was (the next commit through the log ends it).
        #expect(try readFileRange(other + "-log", at: 0, count: 4096) == copied)
        try Self.put(reopened, &model, &rng, count: 5)
        #expect(try Self.contents(reopened) == model)
    }

    /// A read-only opening refuses a file whose log holds commits it lacks; a read-write opening
    /// replays them, and read-only openings see them from then on.
    @Test func readOnlyOpeningsWaitForTheReplay() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let (_, after) = try Self.crashAfterLoggedCommits(path, seed: 3)
        #expect(throws: StorageError.self) { _ = try Store(path: path, options: StoreOptions(readOnly: true)) }
        do {
            let store = try Store(path: path)
            #expect(try Self.contents(store) == after)
        }
        let readOnly = try Store(path: path, options: StoreOptions(readOnly: true))
        #expect(try Self.contents(readOnly) == after)
    }

    /// A damaged image in a frame ends the replay before that frame: the file opens at the commit
    /// before it, whole (not at the last frame's, whose own pages verify but which would see the
    /// damaged page).
    @Test func aDamagedFrameEndsTheReplay() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 4)
        var states: [[UInt64: [UInt8]]] = []
        var model: [UInt64: [UInt8]] = [:]
        let page = try Self.runThenCutPower(path) { store, page in
            try Self.put(store, &model, &rng, count: 600)
            states.append(model)
            for _ in 0..<4 {
                try Self.put(store, &model, &rng, count: 5)
                states.append(model)
            }
        }
        try page.losePower()
        // Find the frames and flip a byte of the one before the last, just after its first page:
        // in its patches, or in its first image when they fit in that page.
        let log = try #require(FileHandle(forUpdatingAtPath: path + "-log"))
        let bytes = [UInt8](log.readDataToEndOfFile())
        let frames = Self.frames(of: bytes).map(\.offset)
        try #require(frames.count >= 3, "\(frames.count) frames")
        let damaged = frames[frames.count - 2]
        try log.seek(toOffset: UInt64(damaged + 4096 + 100))
        try log.write(contentsOf: Data([bytes[damaged + 4096 + 100] ^ 0xFF]))
        try log.close()
        let reopened = try Store(path: path)
        #expect(try Self.contents(reopened) == states[states.count - 3])
        #expect(storeCheckProblems(reopened).isEmpty)
    }

    /// The frames of a log's generation as its bytes lay them out: where each starts, its pages,
    /// and each entry's page and whether it is a patch.
    static func frames(of bytes: [UInt8]) -> [(offset: Int, pages: Int, entries: [(page: UInt64, patch: Bool)])] {
        func u32(_ at: Int) -> Int { (0..<4).reduce(0) { $0 | Int(bytes[at + $1]) << (8 * $1) } }
        var frames: [(offset: Int, pages: Int, entries: [(page: UInt64, patch: Bool)])] = []
        var offset = 0
        while offset + 4096 <= bytes.count,
            bytes[(offset + 8)..<(offset + 16)].elementsEqual(withUnsafeBytes(of: LogLayout.magicValue.littleEndian) { Array($0) })
        {
            // The header's pages (with the patches), then each image stored whole (a patched one
            // is rebuilt).
            var pages = max(1, u32(offset + LogLayout.headerPages))
            var entries: [(page: UInt64, patch: Bool)] = []
            for i in 0..<u32(offset + LogLayout.count) {
                let at = offset + LogLayout.entries + LogLayout.entrySize * i
                let patch = u32(at + 12) == 1
                if !patch { pages += u32(at + 8) }
                entries.append((UInt64(u32(at)) | UInt64(u32(at + 4)) << 32, patch))
            }
            frames.append((offset, pages, entries))
            offset += pages * 4096
        }
        return frames
    }

    /// The log grows in steps of `CommitLog.growthStep` written with the frame that first passes
    /// the written end (one durable write, direct where the filesystem allows): through the real
    /// files, the log ends on a step, the frames chain from offset 0, every byte after the last is
    /// zero, and a copy of both files taken while the store is open (as a kill leaves them) opens at
    /// the last commit with every value.
    @Test func theLogGrowsInWrittenStepsWithItsFrames() throws {
        let path = temporaryPath()
        let copy = temporaryPath() + "-copy"
        defer {
            removeStoreFiles(path)
            removeStoreFiles(copy)
        }
        var rng = SplitMix(seed: 0x6_7041)
        var model: [UInt64: [UInt8]] = [:]
        var options = StoreOptions(durability: .full)
        options.compaction.idleDelay = nil
        let store = try Store(path: path, options: options)
        // Values that make most frames several pages, so that the log passes a step many times.
        for _ in 0..<240 {
            try store.write { txn in
                let tree = try txn.createTree("t")
                for _ in 0..<3 {
                    let key = UInt64(rng.below(1_000_000))
                    let value = rng.byteArray(rng.within(600...1500))
                    try tree.put(bigEndianKey(key), value)
                    model[key] = value
                }
            }
        }
        let log = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path + "-log")))
        #expect(log.count % Int(CommitLog.growthStep) == 0 && log.count >= 2 * Int(CommitLog.growthStep), "log of \(log.count) bytes")
        let frames = Self.frames(of: log)
        let end = frames.last.map { $0.offset + $0.pages * 4096 } ?? 0
        #expect(frames.count > 100, "\(frames.count) frames")
        #expect(end <= log.count && log[end...].allSatisfy { $0 == 0 }, "bytes after the last frame (at \(end)) are not all zeros")

        for suffix in ["", "-log"] { try FileManager.default.copyItem(atPath: path + suffix, toPath: copy + suffix) }
        let reopened = try Store(path: copy)
        #expect(try Self.contents(reopened) == model)
        #expect(storeCheckProblems(reopened).isEmpty)
    }

    /// Small commits on the same pages are logged as patches against the previous frames' pages
    /// (their meta pages too), in frames of about a page; a power loss that keeps none of the page
    /// file's unsynced writes leaves their replay to rebuild every page from the patches, exactly.
    @Test func smallCommitsAreLoggedAsPatchesAndReplayedExactly() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 0x9A7C)
        var model: [UInt64: [UInt8]] = [:]
        let page = try Self.runThenCutPower(path) { store, _ in
            try Self.put(store, &model, &rng, count: 600)
            for _ in 0..<40 {
                // Keys near each other: the same leaves, again and again.
                try store.write { txn in
                    let key = 1_000 + UInt64(rng.below(40))
                    let value = rng.byteArray(rng.within(0...60))
                    try txn.createTree("t").put(bigEndianKey(key), value)
                    model[key] = value
                }
            }
        }
        try page.losePower()
        let frames = Self.frames(of: [UInt8](try #require(FileManager.default.contents(atPath: path + "-log"))))
        #expect(frames.count == 41, "\(frames.count) frames")
        // From the third frame on every page the commit copied was written by the frames before.
        let later = frames.dropFirst(2)
        #expect(later.allSatisfy { $0.entries.last!.patch }, "a meta page logged whole")
        #expect(later.allSatisfy { $0.entries.dropLast().contains(where: \.patch) }, "a frame without patches")
        let pages = later.reduce(0) { $0 + $1.pages }
        #expect(pages <= later.count * 2, "\(pages) pages in \(later.count) frames")
        let reopened = try Store(path: path)
        #expect(try Self.contents(reopened) == model)
        #expect(storeCheckProblems(reopened).isEmpty)
    }

    /// A log written by a format-4 build (no patches: header bytes 56 ..< 64 zero, every entry of
    /// kind 0) is replayed after a power loss as before: its header counts as one page.
    @Test func aFormat4LogIsReplayed() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 0x4F4)
        var model: [UInt64: [UInt8]] = [:]
        // One logged commit after opening: the generation's first frame, whose pages are all whole.
        let page = try Self.runThenCutPower(path) { store, _ in try Self.put(store, &model, &rng, count: 30) }
        try page.losePower()
        var bytes = [UInt8](try #require(FileManager.default.contents(atPath: path + "-log")))
        let frames = Self.frames(of: bytes)
        try #require(frames.count == 1, "\(frames.count) frames")
        #expect(frames[0].entries.allSatisfy { !$0.patch })
        #expect(bytes[LogLayout.headerPages] == 1)
        for i in LogLayout.headerPages..<LogLayout.entries { bytes[i] = 0 }
        let checksum = bytes.withUnsafeBytes { pageChecksum($0.baseAddress!, byteCount: 4096) }
        withUnsafeBytes(of: checksum.littleEndian) { bytes.replaceSubrange(0..<8, with: $0) }
        try writeFileBytes(path + "-log", bytes)
        let reopened = try Store(path: path)
        #expect(try Self.contents(reopened) == model)
        #expect(storeCheckProblems(reopened).isEmpty)
    }

    /// A file that holds something else under the log's name is never written: commits sync the
    /// page file instead, and stay durable.
    @Test func aForeignFileUnderTheLogsNameIsLeftAlone() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let foreign = [UInt8]("not a log, someone's notes\n".utf8) + [UInt8](repeating: 7, count: 5000)
        try writeFileBytes(path + "-log", foreign)
        var rng = SplitMix(seed: 5)
        var model: [UInt64: [UInt8]] = [:]
        let page = try Self.runThenCutPower(path) { store, page in
            for _ in 0..<5 { try Self.put(store, &model, &rng, count: 20) }
        }
        try page.losePower()
        #expect(try readFileRange(path + "-log", at: 0, count: foreign.count) == foreign)
        #expect(try Self.contents(try Store(path: path)) == model)
    }

    /// A first frame header whose counts claim more than a frame can hold, in a sparse log a
    /// terabyte long, is a damaged frame (nothing to replay): its claimed sizes were allocated
    /// before anything in it was checked, and every opening died asking for a terabyte.
    @Test(arguments: [false, true])
    func aLogHeaderClaimingHugeSizesIsNotAllocated(readOnly: Bool) throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        do {
            let store = try Store(path: path)
            try store.write { txn in _ = try txn.createTree("t").put([1], [1]) }
            store.close()
        }
        try #require(FileManager.default.createFile(atPath: path + "-log", contents: nil))
        let log = try #require(FileHandle(forUpdatingAtPath: path + "-log"))
        defer { try? log.close() }
        try log.truncate(atOffset: 1 << 40)  // a sparse terabyte
        var header = [UInt8](repeating: 0, count: 64)
        header.withUnsafeMutableBytes { h in
            h.storeBytes(of: LogLayout.magicValue.littleEndian, toByteOffset: LogLayout.magic, as: UInt64.self)
            h.storeBytes(of: UInt64(1).littleEndian, toByteOffset: LogLayout.salt, as: UInt64.self)
            h.storeBytes(of: UInt32(4096).littleEndian, toByteOffset: LogLayout.pageSize, as: UInt32.self)
            h.storeBytes(of: UInt32.max.littleEndian, toByteOffset: LogLayout.count, as: UInt32.self)
            h.storeBytes(of: UInt32(1 << 28).littleEndian, toByteOffset: LogLayout.headerPages, as: UInt32.self)
        }
        try log.seek(toOffset: 0)
        try log.write(contentsOf: header)
        try log.synchronize()
        let store = try Store(path: path, options: StoreOptions(readOnly: readOnly))
        #expect(try store.read { try $0.tree("t")?.get([1]) } == [1])
    }

    /// An image that a later frame cut off the file does not count (`LogReplay.counting`): frame 5
    /// wrote page 10 of a 20-page file, frame 6's commit cut the file to 8 pages, frame 7's grew it
    /// to 20 again without page 10, which now holds zeros. That is what a kill leaves, not a lost
    /// write: found by ObjectKillTests under load, where `strata check` and read-only openings
    /// refused such a file ("its commit log holds commits the file lacks") and a read-write
    /// opening replayed the whole generation over it.
    @Test func anImageALaterFrameCutOffTheFileDoesNotCount() throws {
        let pageSize = 4096
        func page(_ number: UInt64, txnid: UInt64, fill: UInt8) -> [UInt8] {
            var bytes = [UInt8](repeating: fill, count: pageSize)
            bytes.withUnsafeMutableBytes { raw in
                raw.storeBytes(of: number.littleEndian, toByteOffset: PageHeader.pageNumber, as: UInt64.self)
                raw.storeBytes(of: txnid.littleEndian, toByteOffset: PageHeader.txnid, as: UInt64.self)
            }
            return bytes
        }
        func frame(_ txnid: UInt64, pageCount: UInt64, writing pages: [UInt64]) -> LogReplay.Frame {
            var entries: [LogEntry] = []
            var images: [UInt8] = []
            for number in pages + [txnid % 2] {
                entries.append(LogEntry(page: number, pages: 1, checksum: 0))
                images += page(number, txnid: txnid, fill: number < 2 ? 0xEE : UInt8(txnid))
            }
            return LogReplay.Frame(txnid: txnid, entries: entries, images: images, pageCount: pageCount)
        }
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let file = try PosixFile(path: path, create: true)
        // The file as the kill left it: the last two frames' meta pages, page 10 zeroed by the regrowth.
        for number in UInt64(0)..<20 {
            let bytes = number < 2 ? page(number, txnid: 6 + number, fill: 0xEE) : [UInt8](repeating: 0, count: pageSize)
            try bytes.withUnsafeBytes { try file.write($0, at: number * UInt64(pageSize)) }
        }
        let cut = [frame(5, pageCount: 20, writing: [10]), frame(6, pageCount: 8, writing: [3]), frame(7, pageCount: 20, writing: [4])]
        #expect(LogReplay.counting(cut) == [8, 8, 20])
        // Pages 3 and 4 as their frames wrote them.
        for (number, txnid) in [(UInt64(3), UInt64(6)), (4, 7)] {
            try page(number, txnid: txnid, fill: UInt8(txnid)).withUnsafeBytes { try file.write($0, at: number * UInt64(pageSize)) }
        }
        #expect(try LogReplay.applied(frames: cut, pageFile: file, pageSize: pageSize))
        // Without the cut, page 10's zeros are a write the disk lost.
        let uncut = [frame(5, pageCount: 20, writing: [10]), frame(6, pageCount: 20, writing: [3]), frame(7, pageCount: 20, writing: [4])]
        #expect(try !LogReplay.applied(frames: uncut, pageFile: file, pageSize: pageSize))
    }
}

extension CommitLogTests {
    /// A later frame that wrote one page of an earlier frame's overflow run alone: frame 6 wrote a
    /// two-page run at 10, frame 7 (the run freed, its second page taken first) a leaf at 11. The
    /// file holds exactly both frames' last images, yet `applied` compared the whole run with the
    /// file and refused it: a read-only opening after a writer's kill said the log held commits
    /// the file lacked (found by the review of 2026-12-07).
    @Test func aPageOfAnEarlierRunWrittenAloneByALaterFrameCounts() throws {
        let pageSize = 4096
        func page(_ number: UInt64, txnid: UInt64, fill: UInt8, runPages: Int = 1) -> [UInt8] {
            var bytes = [UInt8](repeating: fill, count: pageSize * runPages)
            bytes.withUnsafeMutableBytes { raw in
                raw.storeBytes(of: number.littleEndian, toByteOffset: PageHeader.pageNumber, as: UInt64.self)
                raw.storeBytes(of: txnid.littleEndian, toByteOffset: PageHeader.txnid, as: UInt64.self)
                if runPages > 1 {
                    raw.storeBytes(of: PageType.overflow.rawValue, toByteOffset: PageHeader.type, as: UInt8.self)
                    raw.storeBytes(of: UInt32(runPages).littleEndian, toByteOffset: PageHeader.runPages, as: UInt32.self)
                }
            }
            return bytes
        }
        let run = page(10, txnid: 6, fill: 6, runPages: 2)
        let leaf = page(11, txnid: 7, fill: 7)
        let metas = [page(0, txnid: 6, fill: 0xEE), page(1, txnid: 7, fill: 0xEE)]
        let frames = [
            LogReplay.Frame(
                txnid: 6, entries: [LogEntry(page: 10, pages: 2, checksum: 0), LogEntry(page: 0, pages: 1, checksum: 0)], images: run + metas[0],
                pageCount: 20),
            LogReplay.Frame(
                txnid: 7, entries: [LogEntry(page: 11, pages: 1, checksum: 0), LogEntry(page: 1, pages: 1, checksum: 0)], images: leaf + metas[1],
                pageCount: 20),
        ]
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let file = try PosixFile(path: path, create: true)
        func write(_ bytes: [UInt8], at number: UInt64) throws { try bytes.withUnsafeBytes { try file.write($0, at: number * UInt64(pageSize)) } }
        for number in UInt64(0)..<20 { try write([UInt8](repeating: 0, count: pageSize), at: number) }
        try write(metas[0], at: 0)
        try write(metas[1], at: 1)
        try write(Array(run[..<pageSize]), at: 10)
        try write(leaf, at: 11)
        #expect(try LogReplay.applied(frames: frames, pageFile: file, pageSize: pageSize))
        // Controls: the leaf lost (the run's old second page there), or the run's first page lost.
        try write(Array(run[pageSize...]), at: 11)
        #expect(try !LogReplay.applied(frames: frames, pageFile: file, pageSize: pageSize))
        try write(leaf, at: 11)
        try write([UInt8](repeating: 0, count: pageSize), at: 10)
        #expect(try !LogReplay.applied(frames: frames, pageFile: file, pageSize: pageSize))
    }

    /// A commit record's run written by a commit after the last frame over pages a frame wrote
    /// (a large `.noSync` commit reusing them, as `pagesWrittenAfter` allows): those pages were
    /// written later, as an overflow run's would be. `writtenLater` took every run but a value's
    /// for one page, and a record run's checksum (over all its pages) never matched one page: a
    /// read-only opening refused the file (found by the review of 2026-12-07).
    @Test(arguments: [PageType.commitRecord, .overflow])
    func aRunOfACommitAfterTheLastFrameCountsAsWrittenLater(type: PageType) throws {
        let pageSize = 4096
        func page(_ number: UInt64, txnid: UInt64, fill: UInt8) -> [UInt8] {
            var bytes = [UInt8](repeating: fill, count: pageSize)
            bytes.withUnsafeMutableBytes { raw in
                raw.storeBytes(of: number.littleEndian, toByteOffset: PageHeader.pageNumber, as: UInt64.self)
                raw.storeBytes(of: txnid.littleEndian, toByteOffset: PageHeader.txnid, as: UInt64.self)
            }
            return bytes
        }
        let meta = page(1, txnid: 5, fill: 0xEE)
        let frames = [
            LogReplay.Frame(
                txnid: 5,
                entries: [LogEntry(page: 10, pages: 1, checksum: 0), LogEntry(page: 11, pages: 1, checksum: 0), LogEntry(page: 1, pages: 1, checksum: 0)],
                images: page(10, txnid: 5, fill: 5) + page(11, txnid: 5, fill: 5) + meta, pageCount: 20)
        ]
        // Pages 10 and 11 now hold a two-page run of commit 7, sealed over both pages.
        var run = [UInt8](repeating: 7, count: 2 * pageSize)
        run.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: UInt64(10).littleEndian, toByteOffset: PageHeader.pageNumber, as: UInt64.self)
            raw.storeBytes(of: UInt64(7).littleEndian, toByteOffset: PageHeader.txnid, as: UInt64.self)
            raw.storeBytes(of: type.rawValue, toByteOffset: PageHeader.type, as: UInt8.self)
            raw.storeBytes(of: UInt32(2).littleEndian, toByteOffset: PageHeader.runPages, as: UInt32.self)
            raw.storeBytes(of: pageChecksum(raw.baseAddress!, byteCount: raw.count).littleEndian, toByteOffset: PageHeader.checksum, as: UInt64.self)
        }
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let file = try PosixFile(path: path, create: true)
        func write(_ bytes: [UInt8], at number: UInt64) throws { try bytes.withUnsafeBytes { try file.write($0, at: number * UInt64(pageSize)) } }
        for number in UInt64(0)..<20 { try write([UInt8](repeating: 0, count: pageSize), at: number) }
        try write(meta, at: 1)
        try write(run, at: 10)
        #expect(try LogReplay.applied(frames: frames, pageFile: file, pageSize: pageSize))
        // Control: the run's checksum wrong (a torn write of it): the frame's pages are lost.
        try write([0xFF], at: 10)
        var torn = run
        torn[pageSize + 100] ^= 1
        try write(torn, at: 10)
        #expect(try !LogReplay.applied(frames: frames, pageFile: file, pageSize: pageSize))
    }
}

extension CommitLogTests {
    /// A commit whose frame write fails (its pages stay in the page file, sealed with the
    /// transaction id the next attempt takes again), then transactions whose entries each run in a
    /// savepoint (some rolled back, as a group commit's), which copy pages they took from the free
    /// list, a failed attempt's among them; then a power loss: the file opens with exactly the
    /// acknowledged commits. (It did not catch patches made against such a page in 60 trials,
    /// which the review of 2026-12-06 found: `aPatchBaseIsAPageTheGenerationLogged` pins that.)
    @Test func aFailedFrameAmongSavepointTransactionsThenPowerLoss() throws {
        let seed = UInt64(TestEnv.int("STRATA_PATCH_BASE_SEED", default: 0x0BA5E))
        let trials = TestEnv.int("STRATA_PATCH_BASE_TRIALS", default: 12)
        var rng = SplitMix(seed: seed)
        var failed = 0
        for trial in 0..<trials {
            let path = temporaryPath("patch-base-\(trial)")
            defer { removeStoreFiles(path) }
            var model: [UInt64: [UInt8]] = [:]
            // (The log's faults its own: the failing write is the frame's.)
            let page = try Self.runThenCutPower(path, shared: false) { store, page, log in
                try store.write { txn in
                    let tree = try txn.createTree("t")
                    for key in 0..<UInt64(1500) {
                        let value = rng.byteArray(rng.within(20...120))
                        try tree.put(bigEndianKey(key * 2), value)
                        model[key * 2] = value
                    }
                }
                var afterFailure = false
                // One failure: the generations it ends sync the page file, and only the frames of
                // the last one are replayed.
                let failingRound = rng.below(20)
                for round in 0..<30 {
                    let failing = round == failingRound
                    if failing { try #require(log()).failWrite(in: 1) }
                    var changed = model
                    var draw = rng
                    // After a failure, one small entry: the attempt takes fewer pages than the
                    // failed one did, and leaves some of its pages for the next transactions.
                    let entries = afterFailure ? 1 : 2 + draw.below(3)
                    afterFailure = false
                    do {
                        try store.write { txn in
                            let tree = try txn.createTree("t")
                            // Each entry in a savepoint of its own, some rolled back (as a group commit does).
                            for _ in 0..<entries {
                                var entry = changed
                                _ = try? txn.savepoint {
                                    for _ in 0..<(1 + draw.below(6)) {
                                        let key = UInt64(draw.below(3000))
                                        let value = draw.byteArray(draw.within(20...120))
                                        try tree.put(bigEndianKey(key), value)
                                        entry[key] = value
                                    }
                                    if draw.percent(15) { throw CancellationError() }
                                    changed = entry
                                }
                            }
                        }
                        // (A failing round whose entries were all rolled back commits nothing.)
                        model = changed
                    } catch {
                        #expect(failing, "seed \(seed), trial \(trial): \(error)")
                        failed += 1
                        afterFailure = true
                    }
                    rng = draw
                    try #require(log()).clearFaults()
                }
            }
            try Self.expectAfterPowerLoss(path, page, model)
        }
        #expect(failed > 0)
    }
}

extension CommitLogTests {
    /// A patch is made only against a page whose bytes are the last image of it the generation
    /// logged: a page sealed with a transaction id of the generation is not always one (a failed
    /// or killed attempt leaves pages sealed with the id the next attempt takes again). Here the
    /// root the last frame logged, sealed anew with other bytes under the same id, stands for one.
    @Test func aPatchBaseIsAPageTheGenerationLogged() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .full)
        options.compaction.idleDelay = nil
        let store = try Store(path: path, options: options)
        for round in 0..<3 { _ = try store.write { txn in try txn.createTree("t").put(bigEndianKey(UInt64(round)), [UInt8](repeating: 1, count: 50)) } }
        let root = try store.read { txn in try #require(try txn.tree("t")).info.root }
        let log = try #require(store.env.commitLog)
        let pageSize = store.pageSize
        struct Abort: Error {}
        #expect(throws: Abort.self) {
            try store.write { txn in
                let copy = UnsafeMutableRawPointer.allocate(byteCount: pageSize, alignment: 4096)
                defer { copy.deallocate() }
                let stand = PageNo(1_000_000)  // a page of this transaction, copied from the root
                txn.origins[stand] = root
                let writes = [(stand, UnsafeRawBufferPointer(start: copy, count: pageSize))]
                #expect(txn.patchBases(for: writes, in: log)[stand]?.page == root, "the logged root is no base")
                // The root, sealed anew: same page number and transaction id, other bytes.
                let original = UnsafeRawBufferPointer(start: txn.pages.base + Int(root) * pageSize, count: pageSize)
                copy.copyMemory(from: original.baseAddress!, byteCount: pageSize)
                let saved = Array(original)
                copy.storeBytes(of: copy.load(fromByteOffset: pageSize - 1, as: UInt8.self) ^ 0xFF, toByteOffset: pageSize - 1, as: UInt8.self)
                copy.setU64(PageHeader.checksum, pageChecksum(UnsafeRawPointer(copy), byteCount: pageSize))
                try store.env.file.write(UnsafeRawBufferPointer(start: copy, count: pageSize), at: root * UInt64(pageSize))
                defer { _ = try? saved.withUnsafeBytes { try store.env.file.write($0, at: root * UInt64(pageSize)) } }
                #expect(txn.patchBases(for: writes, in: log)[stand] == nil, "a page the generation never logged is a base")
                throw Abort()
            }
        }
        #expect(try store.check().isOK)
    }
}
