import Testing
@testable import StrataStorage
import StrataTestWorkloads
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// Processes that reach one database through two names: writers must still exclude each other
// (LockFileName.swift). A symbolic link finds the same lock file; a hard link cannot, and is
// refused while another process has the file open under another name.

@Suite struct LockFileNameTests {
    /// A symbolic link, a relative path with `..` and the plain path all name one lock file; a
    /// file not created yet resolves through its directory.
    @Test func everyPathToAFileNamesOneLockFile() throws {
        let path = temporaryPath()
        let directory = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        let link = directory + "/link-" + name
        defer {
            removeStoreFiles(path)
            try? FileManager.default.removeItem(atPath: link)
        }
        let expected = LockFileName.path(for: path)
        #expect(expected == LockFileName.canonical(directory) + "/" + name + "-lock")
        #expect(LockFileName.path(for: directory + "/../" + (directory as NSString).lastPathComponent + "/" + name) == expected)
        try Store(path: path).close()
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: name)
        #expect(LockFileName.path(for: link) == expected)
        #expect(LockFileName.path(for: path) == expected)
        #expect(FileManager.default.fileExists(atPath: expected))
        #expect(!FileManager.default.fileExists(atPath: link + "-lock"))
    }

    /// A symbolic link to a file not created yet (relative, absolute, a chain of two) names the
    /// lock file of the file it points to, as creating through it makes that file: it named its
    /// own ("LINK-lock"), so that two openers racing to create the database, one through the
    /// link, used two lock files and one was refused (`openersByOneFileAreNeverRefused` failed so
    /// in one CI run of three). A link that leads nowhere in a loop falls back to its own name.
    @Test func aLinkToAFileNotCreatedYetNamesItsTargetsLockFile() throws {
        let path = temporaryPath()
        let directory = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        let relative = directory + "/rel-" + name, absolute = directory + "/abs-" + name, chain = directory + "/chain-" + name
        let loop = directory + "/loop-" + name
        defer {
            for link in [relative, absolute, chain, loop] { try? FileManager.default.removeItem(atPath: link) }
            removeStoreFiles(path)
        }
        try FileManager.default.createSymbolicLink(atPath: relative, withDestinationPath: name)
        try FileManager.default.createSymbolicLink(atPath: absolute, withDestinationPath: path)
        try FileManager.default.createSymbolicLink(atPath: chain, withDestinationPath: "rel-" + name)
        try FileManager.default.createSymbolicLink(atPath: loop, withDestinationPath: "loop-" + name)
        #expect(!FileManager.default.fileExists(atPath: path))
        let expected = LockFileName.path(for: path)
        for link in [relative, absolute, chain] { #expect(LockFileName.path(for: link) == expected, "\(link)") }
        #expect(LockFileName.path(for: loop) == LockFileName.canonical(directory) + "/loop-" + name + "-lock")
        // Created through the chain: the file the links lead to, with the lock file they named.
        try Store(path: chain).close()
        #expect(FileManager.default.fileExists(atPath: path) && FileManager.default.fileExists(atPath: expected))
        for link in [relative, absolute, chain, path] { #expect(LockFileName.path(for: link) == expected, "\(link)") }
    }

    /// Two processes writing at once, one through a symbolic link: every increment of the shared
    /// counter arrives exactly once (two lock files would let both commit from one snapshot).
    @Test func writersThroughASymbolicLinkExcludeEachOther() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        let link = path + "-symlink"
        defer {
            removeStoreFiles(path)
            try? FileManager.default.removeItem(atPath: link)
            try? FileManager.default.removeItem(atPath: link + "-lock")
        }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
        let perWriter = 150
        let writer = try HelperProcess(path: helper, arguments: ["writer", link, "L", "\(perWriter)", "--gate"])
        #expect(try await writer.readLine() == "ready L")
        writer.send("go")
        for i in 0..<perWriter {
            try store.write { txn in try CounterWorkload.commit(txn, key: Array("P/\(i)".utf8), index: i) }
        }
        try await writer.waitForExit(timeout: 120)
        #expect(writer.succeeded, "writer ended with \(writer.status): \(writer.errorOutput())")
        try store.read { (txn) throws in
            #expect(try CounterWorkload.check(txn) == UInt64(2 * perWriter))
            #expect(try txn.tree("w")?.count == 2 * perWriter)
        }
        #expect(storeCheckProblems(store).isEmpty)
    }

    /// A hard link has its own lock file: while one process has the file open, another opening it
    /// through the other name is refused with `openUnderAnotherName`, in either order; once the
    /// first has closed it, the other name opens.
    @Test func aHardLinkIsRefusedWhileAnotherProcessHasTheFileOpen() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        let hard = path + "-hardlink"
        defer {
            removeStoreFiles(path)
            removeStoreFiles(hard)
        }
        var store: Store? = try Store(path: path)
        try FileManager.default.linkItem(atPath: path, toPath: hard)

        // This process first: the helper through the hard link is refused and writes nothing.
        let refused = try HelperProcess(path: helper, arguments: ["writer", hard, "H", "5"])
        try await refused.waitForExit(timeout: 60)
        #expect(!refused.succeeded)
        #expect(refused.errorOutput().contains("under another name"), "\(refused.errorOutput())")
        #expect(try store?.read { try $0.tree("w")?.count } == nil)
        store?.close()
        store = nil

        // The helper first, holding the file open under the hard link: this process is refused.
        let holder = try HelperProcess(path: helper, arguments: ["writer", hard, "H", "5", "--gate"])
        #expect(try await holder.readLine() == "ready H")
        #expect(throws: StorageError.openUnderAnotherName(path: path)) { try Store(path: path) }
        holder.send("go")
        try await holder.waitForExit(timeout: 60)
        #expect(holder.succeeded, "holder ended with \(holder.status): \(holder.errorOutput())")

        // Nobody holds it now: the plain name opens and sees the helper's commits.
        let reopened = try Store(path: path)
        try reopened.read { (txn) throws in #expect(try CounterWorkload.check(txn) == 5) }
    }

    /// The lock file removed while a process has the database open: a second process opening the
    /// same name makes a new lock file, which must not let it write beside the first.
    @Test func aLockFileRemovedWhileOpenDoesNotGiveASecondWriter() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in try CounterWorkload.commit(txn, key: Array("P/0".utf8), index: 0) }
        unlink(LockFileName.path(for: path))
        let second = try HelperProcess(path: helper, arguments: ["writer", path, "X", "20"])
        _ = try await second.waitForExit(timeout: 60)
        #expect(!second.succeeded && second.errorOutput().contains("under another name"), "\(second.status): \(second.errorOutput())")
        for i in 1..<20 { try store.write { txn in try CounterWorkload.commit(txn, key: Array("P/\(i)".utf8), index: i) } }
        try store.read { (txn) throws in #expect(try CounterWorkload.check(txn) == 20) }
        #expect(storeCheckProblems(store).isEmpty)
    }

    /// The database renamed while a process has it open: a process opening the new name gets
    /// another lock file and must be refused.
    @Test func aDatabaseRenamedWhileOpenRefusesAWriterUnderItsNewName() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        let renamed = path + "-renamed"
        defer {
            removeStoreFiles(path)
            removeStoreFiles(renamed)
        }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in try CounterWorkload.commit(txn, key: Array("P/0".utf8), index: 0) }
        #expect(rename(path, renamed) == 0)
        let second = try HelperProcess(path: helper, arguments: ["writer", renamed, "X", "20"])
        _ = try await second.waitForExit(timeout: 60)
        #expect(!second.succeeded && second.errorOutput().contains("under another name"), "\(second.status): \(second.errorOutput())")
        store.close()
        // Closed: the new name opens.
        let again = try Store(path: renamed)
        try again.read { (txn) throws in #expect(try CounterWorkload.check(txn) == 1) }
    }

    /// Many processes opening one database at once by one file through several spellings (plain,
    /// symbolic link, a path through `..`, a symlinked directory) while this process opens and
    /// closes handles (read-write and read-only): nobody is refused and no increment is lost.
    @Test func openersByOneFileAreNeverRefused() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        let directory = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        let link = path + "-sym"
        let dirLink = directory + "-dirlink"
        defer {
            removeStoreFiles(path)
            unlink(link)
            unlink(dirLink)
        }
        try FileManager.default.createSymbolicLink(atPath: dirLink, withDestinationPath: directory)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: name)
        // Not created yet: the helpers race to create it, each by its own spelling.
        let names = [path, link, directory + "/../" + (directory as NSString).lastPathComponent + "/" + name, dirLink + "/" + name]
        let per = 40
        var helpers: [HelperProcess] = []
        for (i, n) in names.enumerated() {
            helpers.append(try HelperProcess(path: helper, arguments: ["writer", n, "H\(i)", "\(per)"]))
        }
        var opens = 0
        let deadline = Date().addingTimeInterval(2)
        while Date() < deadline {
            do {
                let s = try Store(path: names[opens % names.count], options: StoreOptions(durability: .noSync, createIfMissing: true))
                _ = try s.read { $0.txnid }
                s.close()
                let r = try Store(path: names[(opens + 1) % names.count], options: StoreOptions(readOnly: true))
                _ = try? r.read { $0.txnid }
                r.close()
            } catch let error as StorageError {
                if case .openUnderAnotherName = error { Issue.record("this process was refused: \(error)") }
            }
            opens += 1
        }
        for h in helpers {
            _ = try await h.waitForExit(timeout: 120)
            #expect(h.succeeded, "\(h.arguments): \(h.status) \(h.errorOutput())")
        }
        let store = try Store(path: path)
        try store.read { (txn) throws in #expect(try CounterWorkload.check(txn) == UInt64(per * names.count)) }
        #expect(storeCheckProblems(store).isEmpty)
    }

    /// A process holding the file under a hard link that is killed leaves no claim behind.
    @Test func aKilledHolderUnderAHardLinkLeavesNoClaim() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        let hard = path + "-hard"
        defer {
            removeStoreFiles(path)
            removeStoreFiles(hard)
        }
        try Store(path: path).close()
        #expect(link(path, hard) == 0)
        let holder = try HelperProcess(path: helper, arguments: ["writer", hard, "H", "5", "--gate"])
        #expect(try await holder.readLine() == "ready H")
        #expect(throws: StorageError.openUnderAnotherName(path: path)) { try Store(path: path) }
        try await holder.kill()
        let store = try Store(path: path)
        _ = try store.read { $0.txnid }
    }
}
