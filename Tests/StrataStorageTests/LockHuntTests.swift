import Testing
@testable import StrataStorage
import StrataTestWorkloads
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// Hunt: creation through symbolic links (FORMAT.md §4.1), reader slots and pid bytes, and lock
// file versions (§6). Its findings live in LockHuntFindingsTests.swift.

/// Whether something (a file, a directory or a link, dangling or not) has the name `path`.
func lockHuntNameExists(_ path: String) -> Bool {
    var st = stat()
    return lstat(path, &st) == 0
}

/// Whether `path` is a symbolic link.
func lockHuntIsLink(_ path: String) -> Bool {
    var st = stat()
    return lstat(path, &st) == 0 && (st.st_mode & 0o170000) == 0o120000
}

/// The lock file of `path`, mapped shared and writable, for writing slots or the header by hand.
final class LockHuntLockMap {
    let fd: Int32
    let length: Int
    let base: UnsafeMutableRawPointer

    init(path: String) throws {
        fd = open(LockFileName.path(for: path), O_RDWR)
        guard fd >= 0 else { throw StorageError.io(operation: "open", path: path, errno: errno) }
        length = LockLayout.size(slots: LockLayout.defaultSlots)
        guard let map = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), map != MAP_FAILED else {
            close(fd)
            throw StorageError.io(operation: "mmap", path: path, errno: errno)
        }
        base = map
    }

    deinit {
        munmap(base, length)
        close(fd)
    }

    var version: UInt32 {
        get { base.load(fromByteOffset: LockLayout.versionOffset, as: UInt32.self) }
        set { base.storeBytes(of: newValue, toByteOffset: LockLayout.versionOffset, as: UInt32.self) }
    }

    func owner(_ slot: Int) -> UInt64 {
        base.load(fromByteOffset: LockLayout.slotsOffset + slot * LockLayout.slotStride + LockLayout.slotOwner, as: UInt64.self)
    }

    /// Writes a slot above the high-water mark, as a reader that died without ending its snapshot
    /// leaves it; returns its index.
    func plantSlot(pid: UInt64, txnid: UInt64) -> Int {
        let highWater = Int(base.load(fromByteOffset: LockLayout.highWaterOffset, as: UInt64.self))
        let slot = base + LockLayout.slotsOffset + highWater * LockLayout.slotStride
        slot.storeBytes(of: pid, toByteOffset: LockLayout.slotOwner, as: UInt64.self)
        slot.storeBytes(of: txnid, toByteOffset: LockLayout.slotTxnid, as: UInt64.self)
        base.storeBytes(of: UInt64(highWater + 1), toByteOffset: LockLayout.highWaterOffset, as: UInt64.self)
        return highWater
    }
}

/// A `sleep 60` that never opens any database: a process bearing a pid a dead reader had.
func lockHuntStranger() throws -> Process {
    let sleeper = Process()
    sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
    sleeper.arguments = ["60"]
    try sleeper.run()
    return sleeper
}

/// Parses hold-reader's "snapshot TXNID CHECKSUM PID" line.
func lockHuntSnapshotLine(_ reader: HelperProcess) async throws -> (txnid: UInt64, checksum: UInt64) {
    let line = try #require(try await reader.readLine(), "hold-reader printed nothing: \(reader.errorOutput())")
    let words = line.split(separator: " ")
    try #require(words.count == 4 && words[0] == "snapshot", "unexpected line '\(line)'")
    return (try #require(UInt64(words[1])), try #require(UInt64(words[2])))
}

/// Rewrites keys of tree "r" with random sizes (some overflow), freeing and reusing pages.
func lockHuntChurn(_ store: Store, rounds: Int, rng: inout SplitMix) throws {
    for _ in 0..<rounds {
        let seed = rng.next()
        try store.write { txn in
            var local = SplitMix(seed: seed)
            let r = try txn.createTree("r")
            for _ in 0..<30 {
                let k = Array("key-\(local.next() % 300)".utf8)
                let size = local.next() % 10 == 0 ? 3_000 + Int(local.next() % 9_000) : Int(local.next() % 300)
                if local.next() % 8 == 0 {
                    try r.delete(k)
                } else {
                    try r.put(k, (0..<size).map { _ in UInt8(truncatingIfNeeded: local.next()) })
                }
            }
        }
    }
}

@Suite struct LockHuntTests {
    // MARK: Creation through symbolic links

    /// Relative, absolute and chained links to files not created yet: each creation makes the
    /// file the link names, keeps the link a link, puts the lock file beside the target (none
    /// beside the link) and leaves no `-creating`. Reopening through every name sees one store.
    @Test func creatingThroughLinksMakesTheTargetAndKeepsTheLinks() throws {
        let base = temporaryPath()
        let directory = (base as NSString).deletingLastPathComponent
        let name = (base as NSString).lastPathComponent
        let sub = directory + "/sub-" + name
        try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
        let target = sub + "/db"
        let relative = directory + "/rel-" + name  // -> sub-NAME/db
        let chain = directory + "/chain-" + name  // -> rel-NAME
        let absolute = sub + "/abs"  // -> TARGET, absolute
        let up = sub + "/up"  // -> ../rel-NAME
        defer {
            for link in [relative, chain, absolute, up] { try? FileManager.default.removeItem(atPath: link) }
            try? FileManager.default.removeItem(atPath: sub)
        }
        try FileManager.default.createSymbolicLink(atPath: relative, withDestinationPath: "sub-" + name + "/db")
        try FileManager.default.createSymbolicLink(atPath: chain, withDestinationPath: "rel-" + name)
        try FileManager.default.createSymbolicLink(atPath: absolute, withDestinationPath: target)
        try FileManager.default.createSymbolicLink(atPath: up, withDestinationPath: "../rel-" + name)
        for (i, link) in [up, chain, relative, absolute].enumerated() {
            #expect(LockFileName.path(for: link) == LockFileName.canonical(sub) + "/db-lock", "\(link)")
            let store = try Store(path: link)
            try store.write { _ = try $0.createTree("t").put(Array("k\(i)".utf8), [UInt8(i)]) }
            store.close()
            #expect(lockHuntIsLink(link), "\(link) is no longer a link")
            #expect(!lockHuntNameExists(link + "-lock"), "a lock file beside the link \(link)")
            #expect(!lockHuntNameExists(link + "-creating"))
            #expect(!lockHuntNameExists(target + "-creating"))
            #expect(FileManager.default.fileExists(atPath: target + "-lock"))
            // Next round: a fresh target again.
            if i < 3 {
                let readBack = try Store(path: target, options: StoreOptions(readOnly: true))
                #expect(try readBack.read { try $0.tree("t")?.get(Array("k\(i)".utf8)) } == [UInt8(i)])
                readBack.close()
                removeStoreFiles(target)
            }
        }
        let entries = try FileManager.default.contentsOfDirectory(atPath: sub).sorted()
        #expect(entries == ["abs", "db", "db-lock", "up"], "\(entries)")
    }

    /// Through a dangling link: `createIfMissing: false` and a read-only open are refused with
    /// ENOENT and make nothing (no page file, no lock file beside either name).
    @Test func aDanglingLinkIsNotCreatedByReadOnlyOrNoCreateOpeners() throws {
        let target = temporaryPath()
        let link = target + "-link"
        defer {
            try? FileManager.default.removeItem(atPath: link)
            removeStoreFiles(target)
        }
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: (target as NSString).lastPathComponent)
        for options in [StoreOptions(createIfMissing: false), StoreOptions(readOnly: true)] {
            do {
                _ = try Store(path: link, options: options)
                Issue.record("opened a dangling link with \(options)")
            } catch let StorageError.io(_, _, code) {
                #expect(code == ENOENT)
            }
            #expect(!lockHuntNameExists(target))
            #expect(!lockHuntNameExists(target + "-lock"))
            #expect(!lockHuntNameExists(link + "-lock"))
            #expect(lockHuntIsLink(link))
        }
    }

    /// A link into a directory that does not exist is refused (as open(2) with O_CREAT is), and
    /// leaves no file anywhere; a link to a directory is refused too; a loop is ELOOP.
    @Test func linksThatCannotBeCreatedThroughAreRefused() throws {
        let base = temporaryPath()
        let directory = (base as NSString).deletingLastPathComponent
        let name = (base as NSString).lastPathComponent
        let missing = directory + "/missing-" + name
        let intoMissing = directory + "/into-" + name
        let toDirectory = directory + "/todir-" + name
        let realDirectory = directory + "/dir-" + name
        let loopA = directory + "/loopa-" + name, loopB = directory + "/loopb-" + name
        defer {
            for p in [intoMissing, toDirectory, loopA, loopB] { try? FileManager.default.removeItem(atPath: p) }
            try? FileManager.default.removeItem(atPath: realDirectory)
        }
        try FileManager.default.createSymbolicLink(atPath: intoMissing, withDestinationPath: "missing-" + name + "/db")
        try FileManager.default.createDirectory(atPath: realDirectory, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: toDirectory, withDestinationPath: "dir-" + name)
        try FileManager.default.createSymbolicLink(atPath: loopA, withDestinationPath: "loopb-" + name)
        try FileManager.default.createSymbolicLink(atPath: loopB, withDestinationPath: "loopa-" + name)
        #expect(throws: (any Error).self) { _ = try Store(path: intoMissing) }
        #expect(!lockHuntNameExists(missing))
        #expect(!lockHuntNameExists(intoMissing + "-lock"))
        #expect(throws: (any Error).self) { _ = try Store(path: toDirectory) }
        #expect(throws: (any Error).self) { _ = try Store(path: toDirectory, options: StoreOptions(readOnly: true)) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: realDirectory).isEmpty)
        do {
            _ = try Store(path: loopA)
            Issue.record("opened a loop of links")
        } catch let StorageError.io(_, _, code) {
            #expect(code == ELOOP)
        }
        #expect(!lockHuntNameExists(loopA + "-lock") && !lockHuntNameExists(loopB + "-lock"))
        #expect(!lockHuntNameExists(loopA + "-creating") && !lockHuntNameExists(loopB + "-creating"))
    }

    /// A link to an empty file: the file is initialised where it is (the link stays a link, the
    /// target keeps its permission bits), and a second opener through the real name sees it.
    @Test func aLinkToAnEmptyFileInitialisesTheTarget() throws {
        let target = temporaryPath()
        let link = target + "-link"
        defer {
            try? FileManager.default.removeItem(atPath: link)
            removeStoreFiles(target)
        }
        #expect(FileManager.default.createFile(atPath: target, contents: nil))
        chmod(target, 0o600)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
        let store = try Store(path: link)
        try store.write { _ = try $0.createTree("t").put([1], [2]) }
        #expect(lockHuntIsLink(link))
        var st = stat()
        #expect(stat(target, &st) == 0 && st.st_mode & 0o7777 == 0o600)
        #expect(st.st_size > 0)
        let other = try Store(path: target)
        #expect(try other.read { try $0.tree("t")?.get([1]) } == [2])
        #expect(!lockHuntNameExists(link + "-lock"))
        #expect(!lockHuntNameExists(target + "-creating"))
    }

    /// Processes racing to create one database, some through a relative dangling link created
    /// just before, some by the real name, this one through the link: nobody is refused, nothing
    /// is lost, one lock file. Repeated with fresh files.
    @Test func racingCreatorsThroughALinkAndTheRealNameAgree() async throws {
        let helper = try strataTestHelperPath()
        for round in 0..<3 {
            let target = temporaryPath("race\(round)")
            let link = target + "-link"
            defer {
                try? FileManager.default.removeItem(atPath: link)
                removeStoreFiles(target)
            }
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: (target as NSString).lastPathComponent)
            let perWriter = 40
            let names = [("A", link), ("B", target), ("C", link)]
            let writers = try names.map { id, path in try HelperProcess(path: helper, arguments: ["writer", path, id, "\(perWriter)"]) }
            let store = try Store(path: round % 2 == 0 ? link : target, options: .countingEveryCommit(durability: .noSync))
            for i in 0..<perWriter {
                try store.write { txn in try CounterWorkload.commit(txn, key: Array("T/\(i)".utf8), index: i) }
            }
            for (writer, (id, _)) in zip(writers, names) {
                try await writer.waitForExit(timeout: 120)
                #expect(writer.succeeded, "round \(round) writer \(id): \(writer.status) \(writer.errorOutput())")
            }
            #expect(try store.read { try CounterWorkload.check($0) } == UInt64(4 * perWriter))
            #expect(lockHuntIsLink(link))
            #expect(!lockHuntNameExists(link + "-lock"))
            #expect(!lockHuntNameExists(target + "-creating"))
            let problems = storeCheckProblems(store)
            #expect(problems.isEmpty, "check: \(problems)")
        }
    }

    // MARK: Reader slots and pid bytes

    /// A reader in another process is never reclaimed while this process churns through several
    /// handles of the file, closing every handle and reopening between batches: its snapshot
    /// reads the same bytes after 120 commits, it stays listed throughout, and once it exits its
    /// pages are free. A read-only handle (after the read-write ones are closed) lists it too.
    @Test func aLiveReaderInAnotherProcessSurvivesReopensAndChurn() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 11)
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            try lockHuntChurn(store, rounds: 10, rng: &rng)
        }
        let reader = try HelperProcess(path: helper, arguments: ["hold-reader", path])
        let (txnid, checksum) = try await lockHuntSnapshotLine(reader)
        let pid = UInt64(reader.pid)
        for batch in 0..<4 {
            let a = try Store(path: path, options: StoreOptions(durability: .noSync))
            let b = try Store(path: path)
            try lockHuntChurn(batch % 2 == 0 ? a : b, rounds: 30, rng: &rng)
            #expect(a.readers().contains { $0.pid == pid && $0.txnid == txnid }, "batch \(batch): \(a.readers())")
            let holders = try b.stats().pendingHolders
            #expect(holders.contains { $0.reader.pid == pid }, "batch \(batch): \(holders)")
            a.close()
            b.close()
        }
        do {
            let viewer = try Store(path: path, options: StoreOptions(readOnly: true))
            #expect(viewer.readers().contains { $0.pid == pid && $0.txnid == txnid }, "read-only: \(viewer.readers())")
            viewer.close()
        }
        reader.send("reread")
        let recheck = try await reader.readLine()
        try await reader.waitForExit()
        #expect(recheck == "recheck \(checksum)", "the other process's snapshot changed")
        #expect(reader.succeeded, "hold-reader: \(reader.status) \(reader.errorOutput())")
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try lockHuntChurn(store, rounds: 1, rng: &rng)
        #expect(!store.readers().contains { $0.pid == pid })
        #expect(try store.stats().pendingPages == 0)
        let problems = storeCheckProblems(store)
        #expect(problems.isEmpty, "check: \(problems)")
    }

    /// A killed reader's slot is dropped when a new reader process joins, and only its: the new
    /// reader's snapshot is kept and reads the same bytes after many commits.
    @Test func aKilledReaderIsDroppedAndTheNextReaderProcessIsKept() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 12)
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try lockHuntChurn(store, rounds: 5, rng: &rng)
        let first = try HelperProcess(path: helper, arguments: ["hold-reader", path])
        _ = try await lockHuntSnapshotLine(first)
        let firstPid = UInt64(first.pid)
        try lockHuntChurn(store, rounds: 5, rng: &rng)
        try await first.kill()
        let second = try HelperProcess(path: helper, arguments: ["hold-reader", path])
        let (txnid, checksum) = try await lockHuntSnapshotLine(second)
        let secondPid = UInt64(second.pid)
        try lockHuntChurn(store, rounds: 60, rng: &rng)
        let readers = store.readers()
        #expect(!readers.contains { $0.pid == firstPid }, "\(readers)")
        #expect(readers.contains { $0.pid == secondPid && $0.txnid == txnid }, "\(readers)")
        #expect(try store.stats().pendingHolders.allSatisfy { $0.reader.pid == secondPid })
        second.send("reread")
        #expect(try await second.readLine() == "recheck \(checksum)")
        try await second.waitForExit()
        #expect(second.succeeded, "\(second.errorOutput())")
    }

    /// A slot whose pid is a live process that holds the pid byte of ANOTHER database's lock file
    /// (not this one's) is reclaimed: the pid byte is per lock file.
    @Test func aPidThatHoldsAnotherDatabaseIsNotAReaderOfThisOne() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath(), other = temporaryPath("other")
        defer {
            removeStoreFiles(path)
            removeStoreFiles(other)
        }
        var rng = SplitMix(seed: 13)
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try lockHuntChurn(store, rounds: 5, rng: &rng)
        try Store(path: other).write { _ = try $0.createTree("x").put([1], [1]) }
        let elsewhere = try HelperProcess(path: helper, arguments: ["hold-reader", other])
        _ = try await lockHuntSnapshotLine(elsewhere)
        let old = try store.read { $0.txnid }
        let map = try LockHuntLockMap(path: path)
        let slot = map.plantSlot(pid: UInt64(elsewhere.pid), txnid: old)
        try lockHuntChurn(store, rounds: 5, rng: &rng)
        #expect(!store.readers().contains { $0.pid == UInt64(elsewhere.pid) }, "\(store.readers())")
        #expect(map.owner(slot) == 0)
        #expect(try store.stats().pendingPages == 0)
        elsewhere.send("reread")
        _ = try await elsewhere.readLine()
        try await elsewhere.waitForExit()
    }

    // MARK: Lock file versions

    /// A lock file in use whose header says version 2 (an older build's process holds it): a new
    /// opener is refused with `notAStrataFile` naming both versions, the lock file is not
    /// reformatted (the live process's slot stays), and the live process's snapshot is intact.
    /// Once it is gone the lock file is rewritten as version 3.
    @Test func aLockFileOfAnotherVersionInUseIsRefusedAndLeftAlone() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 14)
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            try lockHuntChurn(store, rounds: 5, rng: &rng)
        }
        let reader = try HelperProcess(path: helper, arguments: ["hold-reader", path])
        let (_, checksum) = try await lockHuntSnapshotLine(reader)
        let map = try LockHuntLockMap(path: path)
        let readerSlots = (0..<4).filter { map.owner($0) == UInt64(reader.pid) }
        #expect(readerSlots.count == 1)
        map.version = 2
        for options in [StoreOptions(), StoreOptions(createIfMissing: false)] {
            do {
                _ = try Store(path: path, options: options)
                Issue.record("opened a lock file of version 2 in use")
            } catch let StorageError.notAStrataFile(_, reason) {
                #expect(reason.contains("version 2") && reason.contains("3"), "\(reason)")
            }
        }
        #expect(map.version == 2, "the lock file was rewritten under a live process")
        #expect(readerSlots.allSatisfy { map.owner($0) == UInt64(reader.pid) }, "the live process's slot was cleared")
        // A read-only opener still reads (the lock file then counts as missing).
        let viewer = try Store(path: path, options: StoreOptions(readOnly: true))
        #expect(try viewer.read { try $0.tree("r")?.count ?? 0 } > 0)
        viewer.close()
        reader.send("reread")
        #expect(try await reader.readLine() == "recheck \(checksum)")
        try await reader.waitForExit()
        let store = try Store(path: path)
        #expect(map.version == LockLayout.version)
        try lockHuntChurn(store, rounds: 1, rng: &rng)
    }
}

extension LockHuntTests {
    /// Once the last handle of a file is gone, this process holds none of the lock file's locks:
    /// not the "alive" byte (another opener is alone and recovers), not its pid byte. With a
    /// commit listener left registered too (its token outliving the store).
    @Test func releasingTheLastHandleDropsTheAliveAndPidLocks() async throws {
        for withListener in [false, true] {
            let path = temporaryPath("release\(withListener)")
            defer { removeStoreFiles(path) }
            var token: CommitListenerToken?
            do {
                let store = try Store(path: path)
                if withListener { token = store.addCommitListener { _ in } }
                try store.write { _ = try $0.createTree("t").put([1], [1]) }
                _ = try store.read { $0.txnid }
                store.close()
            }
            let probe = try PosixFile(path: LockFileName.path(for: path), create: false)
            let pidByte = LockLayout.pidLockBase + Int64(getpid())
            var held = true
            for _ in 0..<300 {
                held = probe.isLockedByOthers(offset: LockLayout.aliveLockByte) != false || probe.isLockedByOthers(offset: pidByte) != false
                if !held { break }
                usleep(10_000)
            }
            #expect(!held, "listener \(withListener): the lock file is still held after the last handle went")
            token?.invalidate()
        }
    }

    /// A file's last handle released on another thread while this thread opens the file again:
    /// the new opening waits for the old environment's deinit and then opens alone, through
    /// recovery. It met the old environment's locks still held (the lock file's descriptor closed
    /// only as its properties went, after its deinit), took this process for another one, and
    /// trusted the lock file's published `latest`: a commit whose writer died before publishing it,
    /// or (under a dead file) one that never reached the disk. Seen as flaky CrashTests under load.
    @Test func reopeningWaitsForTheEnvironmentStillEnding() throws {
        let path = temporaryPath("ending")
        defer { removeStoreFiles(path) }
        let control = EndingControl()
        var options = StoreOptions()
        options.compaction.idleDelay = nil
        let holder = Mutex<Store?>(nil)
        // (In a closure of its own: no local of this function keeps the first handle.)
        let newest = try { () throws -> UInt64 in
            let first = try Store(path: path, options: options) { file in
                file.path.hasSuffix("-log") ? file : EndingFile(file, control)
            }
            try first.write { _ = try $0.createTree("t").put([1], [1]) }
            try first.write { _ = try $0.createTree("t").put([2], [2]) }
            let newest = first.env.readers.latest
            // As a writer of another process leaves it when killed before publishing its commit.
            first.env.readers.publish(latest: newest - 1)
            holder.withLock { $0 = first }
            return newest
        }()
        control.armed.store(true, ordering: .sequentiallyConsistent)
        let releaser = Thread { holder.withLock { $0 = nil } }
        releaser.start()
        // The deinit ends the commit log's generation (a page-file sync), then its properties go,
        // the page file's slowly.
        for _ in 0..<5000 where !control.syncing.load(ordering: .sequentiallyConsistent) { usleep(1000) }
        let syncing = control.syncing.load(ordering: .sequentiallyConsistent)
        try #require(syncing, "the released environment's deinit did not sync")
        control.armed.store(false, ordering: .sequentiallyConsistent)
        let second = try Store(path: path, options: options)
        #expect(try second.read { $0.txnid } == newest, "opened beside the ending environment, not alone")
        #expect(try second.read { try $0.tree("t")?.count } == 2)
    }

    /// A slot planted with the pid of a live process that has the file open read-write (no
    /// snapshot: a writer waiting at its gate) cannot be told from that process's own and is
    /// kept; once that process exits, the slot is dropped.
    @Test func aSlotOfALiveOpenerIsKeptUntilItExits() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 15)
        let store = try Store(path: path, options: .countingEveryCommit(durability: .noSync))
        try lockHuntChurn(store, rounds: 3, rng: &rng)
        let writer = try HelperProcess(path: helper, arguments: ["writer", path, "W", "5", "--gate"])
        #expect(try await writer.readLine() == "ready W")
        let old = try store.read { $0.txnid }
        let map = try LockHuntLockMap(path: path)
        let slot = map.plantSlot(pid: UInt64(writer.pid), txnid: old)
        try lockHuntChurn(store, rounds: 5, rng: &rng)
        #expect(store.readers().contains { $0.pid == UInt64(writer.pid) && $0.txnid == old })
        #expect(map.owner(slot) == UInt64(writer.pid))
        writer.send("go")
        try await writer.waitForExit()
        #expect(writer.succeeded, "\(writer.errorOutput())")
        try lockHuntChurn(store, rounds: 1, rng: &rng)
        #expect(!store.readers().contains { $0.pid == UInt64(writer.pid) })
        #expect(map.owner(slot) == 0)
        #expect(try store.stats().pendingPages == 0)
    }

    /// A slot left by a dead process whose pid this process now bears, found when this process
    /// opens the file while another has it open (so the table is not formatted): it is cleared
    /// at the opening. Every process took it for this one's (it holds the pid's byte), and this
    /// one's scans skip its own pid's slots, so the old snapshot's pages were never reused.
    @Test func aSlotOfADeadProcessWithThisPidIsClearedWhenThisProcessOpens() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var rng = SplitMix(seed: 16)
        let old: UInt64
        do {
            let store = try Store(path: path, options: .countingEveryCommit(durability: .noSync))
            try lockHuntChurn(store, rounds: 3, rng: &rng)
            old = try store.read { $0.txnid }
        }
        let writer = try HelperProcess(path: helper, arguments: ["writer", path, "W", "5", "--gate"])
        #expect(try await writer.readLine() == "ready W")
        let map = try LockHuntLockMap(path: path)
        let slot = map.plantSlot(pid: UInt64(getpid()), txnid: old)
        let store = try Store(path: path, options: .countingEveryCommit(durability: .noSync))
        try lockHuntChurn(store, rounds: 5, rng: &rng)
        #expect(map.owner(slot) == 0)
        #expect(!store.readers().contains { $0.txnid == old }, "\(store.readers())")
        #expect(try store.stats().pendingPages == 0)
        writer.send("go")
        try await writer.waitForExit()
        #expect(writer.succeeded, "\(writer.errorOutput())")
    }

    /// A read-only handle reached through a symbolic link finds the lock file of the file the
    /// link names and lists a reader that opened the file by its real name; a read-write handle
    /// through the link in this process shares one opening with one by the real name.
    @Test func handlesThroughALinkFindTheSameReadersAndOpening() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        let link = path + "-link"
        defer {
            try? FileManager.default.removeItem(atPath: link)
            removeStoreFiles(path)
        }
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: (path as NSString).lastPathComponent)
        do {
            let store = try Store(path: link)
            try store.write { _ = try $0.createTree("t").put([1], [1]) }
        }
        let reader = try HelperProcess(path: helper, arguments: ["hold-reader", path])
        let (txnid, checksum) = try await lockHuntSnapshotLine(reader)
        do {
            let viewer = try Store(path: link, options: StoreOptions(readOnly: true))
            #expect(viewer.readers().contains { $0.pid == UInt64(reader.pid) && $0.txnid == txnid }, "\(viewer.readers())")
        }
        do {
            let a = try Store(path: link), b = try Store(path: path)
            #expect(a.env === b.env)
            var rng = SplitMix(seed: 16)
            try lockHuntChurn(a, rounds: 20, rng: &rng)
            #expect(b.readers().contains { $0.pid == UInt64(reader.pid) })
        }
        reader.send("reread")
        #expect(try await reader.readLine() == "recheck \(checksum)")
        try await reader.waitForExit()
    }
}

extension LockHuntTests {
    /// A creation through a link that stopped between its link and its unlink leaves
    /// `TARGET-creating` as a second name of the database (beside the target, not the link): the
    /// first opener, through the link, removes it; a `-creating` that is another file is kept.
    @Test func aStaleCreatingNameBesideTheTargetIsRemovedByAnOpenerThroughTheLink() throws {
        let path = temporaryPath()
        let link = path + "-link"
        defer {
            try? FileManager.default.removeItem(atPath: link)
            try? FileManager.default.removeItem(atPath: path + "-creating")
            removeStoreFiles(path)
        }
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
        try Store(path: link).write { _ = try $0.createTree("t").put([1], [1]) }
        #expect(Glibc.link(path, path + "-creating") == 0)
        do {
            let store = try Store(path: link)
            #expect(try store.read { try $0.tree("t")?.get([1]) } == [1])
        }
        #expect(!lockHuntNameExists(path + "-creating"), "the stale second name was kept")
        #expect(FileManager.default.createFile(atPath: path + "-creating", contents: Data([1, 2, 3])))
        _ = try Store(path: link)
        #expect(lockHuntNameExists(path + "-creating"), "another file named -creating was removed")
    }

    /// Lock files in use whose header is not this build's: version 4 (a newer build) is refused
    /// naming both versions; a wrong magic is refused as invalid. Neither is rewritten.
    @Test func lockFilesInUseWithAnotherVersionOrMagicAreRefused() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        try Store(path: path).write { _ = try $0.createTree("t").put([1], [1]) }
        let reader = try HelperProcess(path: helper, arguments: ["hold-reader", path])
        let (_, checksum) = try await lockHuntSnapshotLine(reader)
        let map = try LockHuntLockMap(path: path)
        map.version = 4
        do {
            _ = try Store(path: path)
            Issue.record("opened a lock file of version 4 in use")
        } catch let StorageError.notAStrataFile(_, reason) {
            #expect(reason.contains("version 4") && reason.contains("\(LockLayout.version)"), "\(reason)")
        }
        #expect(map.version == 4)
        map.version = LockLayout.version
        let magic = map.base.load(fromByteOffset: LockLayout.magicOffset, as: UInt64.self)
        map.base.storeBytes(of: magic ^ 1, toByteOffset: LockLayout.magicOffset, as: UInt64.self)
        do {
            _ = try Store(path: path)
            Issue.record("opened a lock file with a wrong magic in use")
        } catch let StorageError.notAStrataFile(_, reason) {
            #expect(reason.contains("invalid"), "\(reason)")
        }
        #expect(map.base.load(fromByteOffset: LockLayout.magicOffset, as: UInt64.self) == magic ^ 1)
        map.base.storeBytes(of: magic, toByteOffset: LockLayout.magicOffset, as: UInt64.self)
        let store = try Store(path: path)
        try store.write { _ = try $0.createTree("t").put([2], [2]) }
        reader.send("reread")
        #expect(try await reader.readLine() == "recheck \(checksum)")
        try await reader.waitForExit()
    }
}

extension LockHuntTests {
    /// A slot whose owner no process can have (a damaged lock file: pid 2^63, UInt64.max - 2,
    /// above Int32.max) is a dead reader's: reading the reader table (`readers()`, `stats()`, a
    /// writer's scan) trapped on the lock byte's offset for it.
    @Test func aSlotOwnedByAnImpossiblePidIsDead() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        try Store(path: path).write { _ = try $0.createTree("t").put([1], [1]) }
        do {
            let map = try LockHuntLockMap(path: path)
            for pid: UInt64 in [1 << 63, UInt64.max - 2, UInt64(Int32.max) + 1] { _ = map.plantSlot(pid: pid, txnid: 1) }
        }
        let readOnly = try Store(path: path, options: StoreOptions(readOnly: true))
        #expect(readOnly.readers().filter { $0.pid > UInt64(Int32.max) }.isEmpty)
        _ = try readOnly.stats()
        readOnly.close()
        let store = try Store(path: path)
        for i in 0..<3 { try store.write { _ = try $0.createTree("t").put([UInt8(2 + i)], [1]) } }
        #expect(store.readers().filter { $0.pid > UInt64(Int32.max) }.isEmpty)
        store.close()
    }

    /// This process reads while another process writes: a snapshot held through one handle stays
    /// exactly its commit while other handles of the file in this process come and go, and the
    /// other process commits 300 times (freeing and reusing pages).
    @Test func aSnapshotHereSurvivesHandlesComingAndGoingWhileAnotherProcessWrites() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: .countingEveryCommit(durability: .noSync))
        for i in 0..<50 {
            try store.write { txn in try CounterWorkload.commit(txn, key: Array("T/\(i)".utf8), index: i) }
        }
        let snapshot = try store.beginRead()
        let before = try helperChecksum(snapshot)
        let writer = try HelperProcess(path: helper, arguments: ["writer", path, "W", "300"])
        var opened = 0
        while true {
            let other = try Store(path: path)
            _ = try other.read { try CounterWorkload.check($0) }
            other.close()
            opened += 1
            if !writer.process.isRunning { break }
            usleep(2_000)
        }
        try await writer.waitForExit(timeout: 120)
        #expect(writer.succeeded, "\(writer.errorOutput())")
        #expect(try helperChecksum(snapshot) == before, "the snapshot changed after \(opened) handles came and went")
        #expect(try CounterWorkload.check(snapshot) == 50)
        snapshot.end()
        #expect(try store.read { try CounterWorkload.check($0) } == 350)
        let problems = storeCheckProblems(store)
        #expect(problems.isEmpty, "check: \(problems)")
    }
}

/// What `EndingFile` does, set from a test that holds no reference to the file.
final class EndingControl: Sendable {
    /// While set, a sync waits; a file released while it was set dies slowly.
    let armed = Atomic<Bool>(false)
    let syncing = Atomic<Bool>(false)
}

/// A page file whose environment ends slowly: its sync waits while `armed`, and once a sync
/// waited, its deinit takes 300 ms (properties of the environment going after its deinit).
final class EndingFile: ForwardingFile {
    let inner: any FileIO
    let control: EndingControl
    private let waited = Atomic<Bool>(false)
    init(_ inner: any FileIO, _ control: EndingControl) {
        self.inner = inner
        self.control = control
    }
    func sync() throws {
        if control.armed.load(ordering: .sequentiallyConsistent) {
            waited.store(true, ordering: .sequentiallyConsistent)
            control.syncing.store(true, ordering: .sequentiallyConsistent)
            while control.armed.load(ordering: .sequentiallyConsistent) { usleep(1000) }
        }
        try inner.sync()
    }
    deinit {
        if waited.load(ordering: .sequentiallyConsistent) { usleep(300_000) }
    }
}
