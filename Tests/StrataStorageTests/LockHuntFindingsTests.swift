import Testing
@testable import StrataStorage
import StrataTestWorkloads
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// Findings of the lock hunt (LockHuntTests.swift), minimal and deterministic; each failed before
// its fix (copies through links and beside other openers, Copy.swift; the read-only reader list).

@Suite struct LockHuntFindingsTests {
    /// A compacting `copy(to:)` through a dangling symbolic link creates the file the link names
    /// (FORMAT.md §4.1); stopped (withProgress returning false), it must remove what it wrote —
    /// the created file and its lock file — and leave the link alone. It unlinks the link instead
    /// and leaves the new file behind.
    @Test func aStoppedCopyThroughADanglingLinkRemovesTheFileNotTheLink() throws {
        let path = temporaryPath()
        let target = temporaryPath("copytarget")
        let link = target + "-link"
        defer {
            removeStoreFiles(path)
            removeStoreFiles(target)
            try? FileManager.default.removeItem(atPath: link)
        }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let t = try txn.createTree("t")
            for k in 0..<50 { try t.put(Array("k\(k)".utf8), [UInt8(k)]) }
        }
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: (target as NSString).lastPathComponent)
        #expect(throws: CancellationError.self) {
            try withProgress(every: 10, { $0.completed < 20 }) { try store.copy(to: link) }
        }
        #expect(lockHuntIsLink(link), "the stopped copy removed the link it was given")
        #expect(!lockHuntNameExists(target), "the stopped copy left the file it created behind the link")
        #expect(!lockHuntNameExists(target + "-lock"))
    }

    /// A read-only handle lists the readers of a file (§4.2: "a dead process's slot is skipped").
    /// A slot whose pid a process now bears that never opened the file (the pid was reused after
    /// the reader died, §6) belongs to a dead process, and a read-write handle drops it; the
    /// read-only handle lists it as a live reader (its table asks only `kill(pid, 0)`).
    @Test func aReadOnlyHandleSkipsASlotWhosePidWasReused() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            try store.write { _ = try $0.createTree("t").put([1], [1]) }
        }
        // A live reader keeps the lock file in use, as in real life.
        let reader = try HelperProcess(path: helper, arguments: ["hold-reader", path])
        let (txnid, _) = try await lockHuntSnapshotLine(reader)
        let stranger = try lockHuntStranger()
        defer { stranger.terminate() }
        let map = try LockHuntLockMap(path: path)
        _ = map.plantSlot(pid: UInt64(stranger.processIdentifier), txnid: txnid)

        let viewer = try Store(path: path, options: StoreOptions(readOnly: true))
        let listed = viewer.readers()
        viewer.close()
        #expect(listed.contains { $0.pid == UInt64(reader.pid) }, "the live reader is not listed: \(listed)")
        #expect(
            !listed.contains { $0.pid == UInt64(stranger.processIdentifier) },
            "pid \(stranger.processIdentifier) (a sleep that never opened the file) is listed as a reader: \(listed)")
        reader.send("reread")
        _ = try await reader.readLine()
        try await reader.waitForExit()
    }
}

extension LockHuntFindingsTests {
    /// `copy(to:)` through a dangling link: a compacting copy creates the file the link names
    /// (as every read-write open does, FORMAT.md §4.1), but a page copy (`compacting: false`)
    /// opens the link with O_CREAT|O_EXCL, which fails with EEXIST on any link: the same call
    /// succeeds or fails by the copy's kind.
    @Test func aPageCopyThroughADanglingLinkCreatesTheTargetAsACompactingCopyDoes() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { _ = try $0.createTree("t").put([1], [2]) }
        for compacting in [true, false] {
            let target = temporaryPath("pagecopytarget")
            let link = target + "-link"
            defer {
                removeStoreFiles(target)
                try? FileManager.default.removeItem(atPath: link)
            }
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: (target as NSString).lastPathComponent)
            do {
                try store.copy(to: link, compacting: compacting)
            } catch {
                Issue.record("copy(to: a dangling link, compacting: \(compacting)) failed: \(error)")
                continue
            }
            #expect(lockHuntIsLink(link))
            let copy = try Store(path: target, options: StoreOptions(readOnly: true))
            #expect(try copy.read { try $0.tree("t")?.get([1]) } == [2])
        }
    }

    /// A database that appears at a copy's destination while the copy is made (another process
    /// created it) is never written into or replaced: the copy fails and leaves it as it was. A
    /// compacting copy checked that the destination did not exist, then opened it with
    /// `Store(path:)`, which opened whatever database had appeared and added the copy's trees to
    /// it, reporting success; a failed one then removed that database. Copies are now made under a
    /// name of their own and linked into place once complete (link never replaces a file).
    @Test(arguments: [true, false])
    func aCopyNeverWritesIntoADatabaseThatAppearedMeanwhile(compacting: Bool) throws {
        let path = temporaryPath(), destination = temporaryPath("appeared"), prepared = temporaryPath("prepared")
        defer {
            for p in [path, destination, prepared] { removeStoreFiles(p) }
        }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { _ = try $0.createTree("copied").put([1], [1]) }
        do {
            let other = try Store(path: prepared)
            try other.write { _ = try $0.createTree("theirs").put([9], [9]) }
        }
        // Another process's database appears at the destination while the copy is being made
        // (renamed into place from the copy's first progress report).
        var appeared = false
        var failure: String?
        do {
            try withProgress(
                every: 1,
                { _ in
                    if !appeared { appeared = rename(prepared, destination) == 0 }
                    return true
                }
            ) { try store.copy(to: destination, compacting: compacting) }
        } catch {
            failure = "\(error)"
        }
        #expect(appeared, "no progress was reported before the copy ended")
        #expect(failure != nil, "the copy wrote into (or replaced) a database that appeared at its destination")
        let result = try Store(path: destination, options: StoreOptions(readOnly: true))
        #expect(try result.read { try $0.treeNames() } == ["theirs"], "the database that appeared was changed")
    }
}

extension LockHuntFindingsTests {
    /// A page copy (`compacting: false`) writes its destination in place, starting from an empty
    /// file: to any opener meanwhile that is "an empty file made for Strata to fill" (FORMAT.md
    /// §4.1), which it replaces with a new, empty database. The copy then goes on writing into
    /// the replaced (unlinked) file and reports success, leaving an empty database at the
    /// destination. It should create its file atomically, as a compacting copy does (through
    /// `-creating`), or fail. The opener runs in the copy's own progress report, before the
    /// first page is written.
    @Test func aPageCopyIsNotReplacedByAnOpenerWhileItWrites() throws {
        let path = temporaryPath(), destination = temporaryPath("pagecopydest")
        defer {
            removeStoreFiles(path)
            removeStoreFiles(destination)
        }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let t = try txn.createTree("t")
            for k in 0..<20 { try t.put(Array("k\(k)".utf8), [UInt8(k)]) }
        }
        var opened = false
        let outcome: String
        do {
            try withProgress(
                every: 1,
                { _ in
                    if !opened {
                        opened = true
                        do { _ = try Store(path: destination) } catch {}
                    }
                    return true
                }
            ) { try store.copy(to: destination, compacting: false) }
            outcome = "succeeded"
        } catch {
            outcome = "failed: \(error)"
        }
        #expect(opened, "no progress was reported before the copy ended")
        guard outcome == "succeeded" else { return }  // failing is fine
        let copy = try Store(path: destination, options: StoreOptions(readOnly: true))
        let names = try copy.read { try $0.treeNames() }
        #expect(try copy.read { try $0.tree("t")?.count } == 20, "the page copy reported success, but its destination holds trees \(names)")
    }
}
