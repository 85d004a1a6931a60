import Testing
@testable import StrataStorage
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// `StoreOptions.readOnly` (ReadOnly.swift): a read-only store reads any healthy file without
// changing anything on disk (not the file, not the lock file, not the directory), refuses what is
// not a database the same way, refuses writes, and notices a writer in another environment reusing
// the pages of a snapshot it could not register.

struct ReadOnlyTests {
    static let readOnly = StoreOptions(readOnly: true)

    /// A store at `path` with three commits of a few hundred entries, closed; its content.
    static func makeStore(_ path: String) throws -> Contents {
        var model: Contents = [:]
        // No compaction: the tool tests damage pages of trees that the later commits do not write.
        var options = StoreOptions(durability: .noSync)
        options.compaction = .off
        let store = try Store(path: path, options: options)
        var rng = SplitMix(seed: 42)
        for _ in 0..<3 { try store.write { txn in try mutate(txn, &model, &rng, operations: 400) } }
        return model
    }

    @Test func missingFileIsNotCreated() throws {
        let dir = try temporaryDirectory()
        defer { removeDirectory(dir) }
        let path = dir + "/db"
        let before = try directoryState(dir)
        #expect(throws: StorageError.io(operation: "open", path: path, errno: ENOENT)) { _ = try Store(path: path, options: Self.readOnly) }
        #expect(try directoryState(dir) == before)
    }

    @Test func emptyShortAndForeignFilesAreRefusedUntouched() throws {
        var rng = SplitMix(seed: 3)
        let image = FileCreation.initialPages(pageSize: 4096)
        let cases: [(String, [UInt8])] = [
            ("empty", []),
            ("100 bytes of garbage", rng.byteArray(100)),
            ("10,000 bytes of garbage", rng.byteArray(10_000)),
            ("zeros", [UInt8](repeating: 0, count: 3 * 4096)),
            ("the first meta page only", Array(image[0..<4096])),
        ]
        for (name, bytes) in cases {
            let dir = try temporaryDirectory()
            defer { removeDirectory(dir) }
            let path = dir + "/db"
            try writeFileBytes(path, bytes)
            let before = try directoryState(dir)
            do {
                _ = try Store(path: path, options: Self.readOnly)
                Issue.record("\(name): opened")
            } catch let error as StorageError {
                switch (name, error) {
                case ("the first meta page only", .truncated): break
                case (_, .notAStrataFile) where name != "the first meta page only": break
                default: Issue.record("\(name): \(error)")
                }
            }
            #expect(try directoryState(dir) == before, "\(name)")
        }
    }

    /// Everything a read-only store can do on a closed file, with and without its lock file.
    @Test(arguments: [true, false])
    func readsWithoutChangingAnything(keepLockFile: Bool) throws {
        let dir = try temporaryDirectory()
        let copyDir = try temporaryDirectory()
        defer { removeDirectory(dir); removeDirectory(copyDir) }
        let path = dir + "/db"
        let model = try Self.makeStore(path)
        if !keepLockFile { unlink(path + "-lock") }
        let before = try directoryState(dir)
        do {
            let store = try Store(path: path, options: Self.readOnly)
            #expect(store.isReadOnly)
            #expect(try contents(of: store) == model)
            let txnid = try store.read { $0.txnid }
            #expect(store.latestVersion == txnid)
            #expect(throws: StorageError.readOnly(path: path)) { try store.write { _ = try $0.createTree("x") } }
            let report = try store.check()
            #expect(report.isOK && report.warnings.isEmpty, "\(report.problems) \(report.warnings)")
            #expect(try store.stats().txnid == txnid)
            #expect(try store.treeStats().contains { $0.name == "a" })
            #expect(try store.metaPages().filter(\.isCurrent).count == 1)
            #expect(try store.metaNotes().isEmpty)
            #expect(try store.describePage(2).contains("page 2"))
            #expect(store.readers().isEmpty)
            // Its snapshots pass validation while nothing writes.
            let snapshot = try store.beginRead()
            #expect(try snapshotContents(snapshot) == model)
            try snapshot.validate()
            snapshot.end()
            // A copy is written elsewhere; the source is untouched.
            try store.copy(to: copyDir + "/copy")
            #expect(try contents(of: try Store(path: copyDir + "/copy")) == model)
        }
        #expect(try directoryState(dir) == before)
    }

    /// In a process that has the file open read-write, a read-only handle shares that opening: its
    /// snapshots are registered, so a writer never reuses their pages and they never need retrying.
    @Test func sharesTheProcessReadWriteOpening() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var model = try Self.makeStore(path)
        let writer = try Store(path: path, options: StoreOptions(durability: .noSync))
        let reader = try Store(path: path, options: Self.readOnly)
        #expect(reader.env === writer.env)
        #expect(reader.isReadOnly && !writer.isReadOnly)
        #expect(throws: StorageError.readOnly(path: path)) { try reader.write { _ in } }
        let snapshot = try reader.beginRead()
        defer { snapshot.end() }
        #expect(writer.readers().contains { $0.txnid == snapshot.txnid && $0.pid == UInt64(getpid()) })
        var rng = SplitMix(seed: 5)
        var newer = model
        for _ in 0..<3 { try writer.write { txn in try mutate(txn, &newer, &rng, operations: 400) } }
        try snapshot.validate()
        #expect(try snapshotContents(snapshot) == model)
        model = newer
        #expect(try contents(of: reader) == model)
    }

    /// A read-only environment of its own, and a read-write one opened after it in this process (as
    /// a writer in another process would be): the read-only snapshot is not registered, the writer
    /// reuses its pages after two commits, and the snapshot says so instead of returning what it
    /// read. New snapshots see the newest commit.
    @Test func noticesAWriterReusingItsPages() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var model = try Self.makeStore(path)
        let reader = try Store(path: path, options: Self.readOnly)
        let writer = try Store(path: path, options: StoreOptions(durability: .noSync))
        #expect(reader.env !== writer.env)
        #expect(try Store(path: path, options: Self.readOnly).env === writer.env, "later read-only handles share the writer's opening")

        let snapshot = try reader.beginRead()
        defer { snapshot.end() }
        try snapshot.validate()
        #expect(try snapshotContents(snapshot) == model)
        #expect(!writer.readers().contains { $0.txnid == snapshot.txnid }, "the read-only snapshot is not registered")
        var rng = SplitMix(seed: 6)
        for _ in 0..<2 { try writer.write { txn in try mutate(txn, &model, &rng, operations: 600) } }
        #expect(throws: StorageError.fileChangedDuringRead(path: path)) { try snapshot.validate() }

        // `read` turns a result (or an error) from such a snapshot into the same error.
        #expect(throws: StorageError.fileChangedDuringRead(path: path)) {
            try reader.read { txn -> Int in
                for _ in 0..<2 { try writer.write { txn in try mutate(txn, &model, &rng, operations: 600) } }
                return try txn.treeNames().count
            }
        }
        #expect(try reader.read { $0.txnid } == writer.latestVersion)
        #expect(reader.latestVersion == writer.latestVersion)
        #expect(try contents(of: reader) == model)

        // The read-only environment lists the writer's readers from the lock file, read-only.
        let held = try writer.beginRead()
        defer { held.end() }
        #expect(reader.readers().contains { $0.txnid == held.txnid && $0.pid == UInt64(getpid()) }, "\(reader.readers())")
    }

    /// A torn newest meta page: a read-only store opens at the commit before, as recovery does.
    @Test func fallsBackPastATornNewestCommit() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let model = try Self.makeStore(path)
        var newest: UInt64 = 0
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            try store.write { _ = try $0.createTree("late").put([1], [1]) }
            newest = store.latestVersion
        }
        let offset = Int(newest % 2) * 4096 + 4000
        try patchFile(path, at: offset, [0xFF ^ (try readFileRange(path, at: offset, count: 1)[0])])
        let before = try readFileBytes(path)
        let store = try Store(path: path, options: Self.readOnly)
        #expect(try store.read { $0.txnid } == newest - 1)
        #expect(try contents(of: store) == model)
        #expect(try store.check().isOK)
        #expect(
            try store.metaNotes().map(\.message) == [
                "newest commit \(newest) was not completed (meta page checksum mismatch); the file opens at commit \(newest - 1)"
            ])
        #expect(try readFileBytes(path) == before)
    }
}

extension ReadOnlyTests {
    /// A meta page newer than the commit the lock file publishes, while a process has the file open
    /// read-write, is a commit nobody was told of (its writer died during its sync): a read-only
    /// snapshot passes over it, as read-write ones do, and sees the commit that replaces it.
    /// (It once chose it, then saw history go back and fork when the next writer spoiled it.)
    @Test func passesOverACommitNobodyWasToldOf() throws {
        #if os(Linux)
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let model = try Self.makeStore(path)
        let reader = try Store(path: path, options: Self.readOnly)  // its own environment (opened first)
        var rng = SplitMix(seed: 8)
        var next = model
        var last = model
        let published: UInt64
        do {
            let writer = try Store(path: path, options: StoreOptions(durability: .noSync))
            #expect(reader.env !== writer.env)
            published = writer.latestVersion
            var unacknowledged = model
            try writer.write { txn in try mutate(txn, &unacknowledged, &rng, operations: 300) }
            writer.env.readers.publish(latest: published)  // as if its writer had died before publishing
            #expect(try reader.read { $0.txnid } == published)
            #expect(try contents(of: reader) == model)

            // The next commit spoils the unpublished meta page and takes its transaction id.
            try writer.write { txn in try mutate(txn, &next, &rng, operations: 300) }
            #expect(try reader.read { $0.txnid } == published + 1)
            #expect(try contents(of: reader) == next)

            last = next
            try writer.write { txn in try mutate(txn, &last, &rng, operations: 300) }
            writer.env.readers.publish(latest: published + 1)
            #expect(try reader.read { $0.txnid } == published + 1)
            #expect(try contents(of: reader) == next)
        }
        // Once no process holds the file open, the newest meta page that verifies is the commit:
        // the next opener's recovery chooses it too.
        #expect(try reader.read { $0.txnid } == published + 2)
        #expect(try contents(of: reader) == last)
        #endif
    }

    /// A dead process's reader slot is cleared by one scanner: marked, its snapshot id zeroed, then
    /// freed. A slot so marked is neither listed nor claimed. (Two scanners clearing by the id they
    /// read could wipe the id of a new reader of the same commit that took the slot meanwhile.)
    @Test func deadReadersSlotsAreClearedOnce() throws {
        let slots = 4
        let memory = UnsafeMutableRawPointer.allocate(byteCount: LockLayout.size(slots: slots), alignment: 64)
        defer { memory.deallocate() }
        ReaderTable.format(memory, slots: slots)
        let table = ReaderTable(memory: memory, slotCount: slots, ownsMemory: false)
        func slot(_ i: Int) -> (owner: UInt64, txnid: UInt64) {
            let base = memory + LockLayout.slotsOffset + i * LockLayout.slotStride
            return (base.load(fromByteOffset: LockLayout.slotOwner, as: UInt64.self), base.load(fromByteOffset: LockLayout.slotTxnid, as: UInt64.self))
        }
        func setSlot(_ i: Int, owner: UInt64, txnid: UInt64) {
            let base = memory + LockLayout.slotsOffset + i * LockLayout.slotStride
            base.storeBytes(of: owner, toByteOffset: LockLayout.slotOwner, as: UInt64.self)
            base.storeBytes(of: txnid, toByteOffset: LockLayout.slotTxnid, as: UInt64.self)
        }
        let live = try table.acquire()
        table.set(live, txnid: 5)
        let dead = try table.acquire()
        setSlot(dead, owner: UInt64(Int32.max) + 1, txnid: 5)  // no process has that pid
        let marked = try table.acquire()
        setSlot(marked, owner: ReaderTable.reclaiming, txnid: 4)

        #expect(table.liveReaders().map(\.slot) == [live])
        #expect(slot(dead) == (0, 0), "the dead owner's slot is freed")
        #expect(slot(marked) == (ReaderTable.reclaiming, 4), "a slot another scanner is clearing is left to it")
        #expect(try table.acquire() == dead)
        #expect(try table.acquire() == 3, "a marked slot is not claimed")
    }
}

extension ReadOnlyTests {
    /// A table full of dead processes' slots gives a new snapshot a slot: they are cleared before
    /// `readersFull` is thrown. Only the writer's scans cleared them, so a file only read (or one
    /// whose writer does not need a page back) refused every read until a write came.
    @Test func aTableFullOfDeadReadersGivesASlot() throws {
        let slots = 4
        let memory = UnsafeMutableRawPointer.allocate(byteCount: LockLayout.size(slots: slots), alignment: 64)
        defer { memory.deallocate() }
        ReaderTable.format(memory, slots: slots)
        let table = ReaderTable(memory: memory, slotCount: slots, ownsMemory: false)
        for _ in 0..<slots {
            let slot = try table.acquire()
            let base = memory + LockLayout.slotsOffset + slot * LockLayout.slotStride
            base.storeBytes(of: UInt64(Int32.max) + 1, toByteOffset: LockLayout.slotOwner, as: UInt64.self)  // no process has it
            base.storeBytes(of: UInt64(7), toByteOffset: LockLayout.slotTxnid, as: UInt64.self)
        }
        let live = try table.acquire()
        table.set(live, txnid: 9)
        #expect(table.liveReaders().map(\.slot) == [live])
        // Full of live ones, it still refuses.
        var held = [live]
        for _ in 1..<slots { held.append(try table.acquire()) }
        #expect(throws: StorageError.readersFull(slots: slots)) { _ = try table.acquire() }
        for slot in held { table.release(slot) }
    }

    /// A read-only snapshot begun while a writer's commit S+1 was written but not yet published
    /// chooses S. Once S+1 is published, S+2 may reuse pages S reads (here by spilling) without
    /// changing either meta page: `validate` must fail then, not pass on reused pages. Found by an
    /// independent review (2026-12-04): before the fix it passed and the read returned a `corrupt`
    /// error for a sound file.
    @Test func aSnapshotThatPassedOverAnUnpublishedCommitStopsValidatingOnceItIsPublished() throws {
        #if os(Linux)
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var model = try ReadOnlyTests.makeStore(path)
        let reader = try Store(path: path, options: StoreOptions(readOnly: true))
        var options = StoreOptions(durability: .noSync)
        options.compaction = .off
        let writer = try Store(path: path, options: options)
        #expect(reader.env !== writer.env)
        let s = writer.latestVersion
        var rng = SplitMix(seed: 99)
        try writer.write { txn in try mutate(txn, &model, &rng, operations: 600) }
        writer.env.readers.publish(latest: s)  // S+1 is on the file, not yet published (its sync)
        let snapshot = try reader.beginRead()
        defer { snapshot.end() }
        #expect(snapshot.txnid == s)
        #expect(snapshot.isUnchanged, "nothing has been reused yet")
        writer.env.readers.publish(latest: s + 1)  // the sync returned
        struct Abort: Error {}
        var validated = true
        do {
            try writer.write { txn in
                try mutate(txn, &model, &rng, operations: 3000)
                try txn.spill()  // S+2's pages reach the file before its meta page
                #expect(txn.spills == 1)
                _ = try? snapshotContents(snapshot)
                validated = snapshot.isUnchanged
                throw Abort()
            }
        } catch is Abort {}
        #expect(!validated, "the snapshot of S validated after S+2 overwrote pages it reads")
        #endif
    }
}
