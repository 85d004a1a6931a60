import Testing
@testable import StrataStorage
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Creating a database file is atomic (Creation.swift, FORMAT.md §4.1): a crash or an I/O error at
// any point leaves no file (or the empty file that was there) or a complete one, and every file a
// crash can leave opens. What an older build's in-place creation could leave (a file cut anywhere
// inside its two meta pages) is never overwritten, except the empty file, which holds nothing.

struct CreationTests {
    /// A fresh store's file is exactly the two initial meta pages, under its own name only.
    @Test(arguments: [4096, 16384])
    func newFileIsCompleteAndAlone(pageSize: Int) throws {
        let dir = try temporaryDirectory()
        defer { removeDirectory(dir) }
        let path = dir + "/db"
        let store = try Store(path: path, options: StoreOptions(pageSize: pageSize))
        #expect(try readFileBytes(path) == FileCreation.initialPages(pageSize: pageSize))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).sorted() == ["db", "db-lock"])
        try store.write { _ = try $0.createTree("t").put([1], [2]) }
        #expect(try Store(path: path).read { try $0.tree("t")?.get([1]) } == [2])
    }

    /// Cut points of the initial pages: every 512-byte sector boundary and a few bytes either side
    /// of the header and the page boundaries.
    static func cutPoints(pageSize: Int) -> [Int] {
        let edges = [1, 100, 127, 128, 129, pageSize - 1, pageSize + 1, 2 * pageSize - 1]
        return Array(Set(Array(stride(from: 0, through: 2 * pageSize, by: 512)) + edges)).sorted()
    }

    /// A file cut anywhere inside its two meta pages, as an in-place creation interrupted by a crash
    /// leaves it. Empty: a read-write open initialises it. Complete: it opens. Anything between is
    /// refused with a clear error and left as it is, by read-write and read-only opens alike.
    @Test(arguments: [4096, 16384])
    func everyCutPointOfAnInPlaceCreation(pageSize: Int) throws {
        let image = FileCreation.initialPages(pageSize: pageSize)
        for cut in Self.cutPoints(pageSize: pageSize) {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            let bytes = Array(image[0..<cut])
            try writeFileBytes(path, bytes)
            for options in [StoreOptions(readOnly: true), StoreOptions()] {
                let mode = options.readOnly ? "read-only" : "read-write"
                do {
                    let store = try Store(path: path, options: options)
                    #expect(cut == image.count || (cut == 0 && !options.readOnly), "\(mode) opened a file cut at \(cut)")
                    #expect(try store.read { try $0.treeNames() } == [])
                    if !options.readOnly {
                        try store.write { _ = try $0.createTree("t").put([1], [1]) }
                        #expect(try Store(path: path).read { try $0.tree("t")?.get([1]) } == [1])
                    }
                    break
                } catch let error as StorageError {
                    switch error {
                    case .notAStrataFile:
                        #expect(cut < MetaLayout.inlineRecord, "\(mode), cut at \(cut): \(error)")
                    case .truncated:
                        #expect(cut >= MetaLayout.inlineRecord && cut < image.count, "\(mode), cut at \(cut): \(error)")
                    default:
                        Issue.record("\(mode), cut at \(cut): \(error)")
                    }
                    #expect(try readFileBytes(path) == bytes, "\(mode), cut at \(cut): the refused file was changed")
                }
            }
        }
    }

    /// A creation interrupted before its rename leaves only its temporary file, cut anywhere (the
    /// name is missing, or still the empty file being initialised): the next open creates the file
    /// afresh and removes the leftover.
    @Test func interruptedCreationLeavesNothingToRepair() throws {
        let pageSize = 4096
        let image = FileCreation.initialPages(pageSize: pageSize)
        for cut in Self.cutPoints(pageSize: pageSize) {
            for emptyFileThere in [false, true] {
                let dir = try temporaryDirectory()
                defer { removeDirectory(dir) }
                let path = dir + "/db"
                try writeFileBytes(FileCreation.temporaryPath(for: path), Array(image[0..<cut]))
                if emptyFileThere { try writeFileBytes(path, []) }
                let store = try Store(path: path)
                #expect(try readFileBytes(path) == image, "cut at \(cut), empty file \(emptyFileThere)")
                #expect(try FileManager.default.contentsOfDirectory(atPath: dir).sorted() == ["db", "db-lock"])
                try store.write { _ = try $0.createTree("t").put([1], [1]) }
            }
        }
    }

    enum Fault: CaseIterable, CustomTestStringConvertible {
        case firstWrite, secondWrite, secondWriteHalfDone, sync, diskFullAfterOnePage, powerCutAtSecondWrite
        var testDescription: String { "\(self)" }

        func apply(_ file: FaultyFile) {
            switch self {
            case .firstWrite: file.failWrite(in: 1)
            case .secondWrite: file.failWrite(in: 2)
            case .secondWriteHalfDone: file.failWrite(in: 2, partial: true)
            case .sync: file.failSync(in: 1)
            case .diskFullAfterOnePage: file.setDiskLimit(4096)
            case .powerCutAtSecondWrite: file.cutPower(atWrite: 2, partial: true)
            }
        }
    }

    /// Each write and the sync of a creation fail in turn (through the fault-injection seam, which
    /// sees the temporary file): the open throws the I/O error and leaves the name as it was
    /// (missing, or the empty file, untouched); the next open creates a working store.
    @Test(arguments: Fault.allCases)
    func failedCreationLeavesTheNameAsItWas(fault: Fault) throws {
        for emptyFileThere in [false, true] {
            let dir = try temporaryDirectory()
            defer { removeDirectory(dir) }
            let path = dir + "/db"
            if emptyFileThere { try writeFileBytes(path, []) }
            let emptyIdentity = FileIdentity(path: path)
            let faults = Locked(0)
            do {
                _ = try Store(path: path, options: StoreOptions()) { inner in
                    let file = FaultyFile(inner)
                    if inner.path == FileCreation.temporaryPath(for: path) {
                        fault.apply(file)
                        faults.withLock { $0 += 1 }
                    }
                    return file
                }
                Issue.record("\(fault), empty file \(emptyFileThere): the creation did not fail")
            } catch let error as StorageError {
                guard case .io(_, _, let errno) = error, errno == 5 || errno == 28 else {
                    Issue.record("\(fault): \(error)")
                    continue
                }
            }
            #expect(faults.current == 1, "the seam did not see the temporary file")
            if emptyFileThere {
                #expect(FileIdentity(path: path) == emptyIdentity && fileSizeOf(path) == 0, "\(fault): the empty file was changed")
            } else {
                #expect(!PosixFile.exists(path), "\(fault): a failed creation left a file")
            }
            #expect(!PosixFile.exists(FileCreation.temporaryPath(for: path)), "\(fault): the temporary file was left")
            let store = try Store(path: path)
            try store.write { _ = try $0.createTree("t").put([1], [1]) }
            #expect(try Store(path: path).read { try $0.tree("t")?.get([1]) } == [1])
        }
    }

    /// An empty file is initialised by replacing it: the database keeps its permission bits.
    @Test func emptyFileKeepsItsPermissions() throws {
        let dir = try temporaryDirectory()
        defer { removeDirectory(dir) }
        let path = dir + "/db"
        try writeFileBytes(path, [])
        chmod(path, 0o600)
        _ = try Store(path: path)
        var st = stat()
        #expect(stat(path, &st) == 0)
        #expect(st.st_mode & 0o7777 == 0o600)
        #expect(try readFileBytes(path) == FileCreation.initialPages(pageSize: 4096))
    }

    /// A name that is a symbolic link: an empty file it leads to is initialised where it is (the
    /// link stays a link); a link to a missing file creates that file, as `open(2)` with `O_CREAT`
    /// does (it was refused, so that of openers racing to create a database by several names the
    /// one through the link failed); a loop of links is refused, creating nothing.
    @Test func symbolicLinks() throws {
        let dir = try temporaryDirectory()
        defer { removeDirectory(dir) }
        try writeFileBytes(dir + "/real", [])
        #expect(symlink("real", dir + "/db") == 0)
        let store = try Store(path: dir + "/db")
        try store.write { _ = try $0.createTree("t").put([1], [1]) }
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: dir + "/db") == "real")
        #expect(fileSizeOf(dir + "/real") >= 8192)
        #expect(try Store(path: dir + "/real").read { try $0.tree("t")?.get([1]) } == [1])

        #expect(symlink("nowhere", dir + "/dangling") == 0)
        let created = try Store(path: dir + "/dangling")
        try created.write { _ = try $0.createTree("t").put([2], [2]) }
        created.close()
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: dir + "/dangling") == "nowhere")
        #expect(try Store(path: dir + "/nowhere").read { try $0.tree("t")?.get([2]) } == [2])
        #expect(!PosixFile.exists(dir + "/dangling-creating") && !PosixFile.exists(dir + "/nowhere-creating"))

        #expect(symlink("loop-b", dir + "/loop-a") == 0 && symlink("loop-a", dir + "/loop-b") == 0)
        #expect(throws: StorageError.self) { _ = try Store(path: dir + "/loop-a") }
        let left = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasPrefix("loop") && !$0.hasSuffix("-lock") }
        #expect(left.sorted() == ["loop-a", "loop-b"])
    }

    /// `createIfMissing: false` opens only databases: an empty file is refused, not initialised.
    @Test func emptyFileWithoutCreateIfMissingIsRefused() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        try writeFileBytes(path, [])
        #expect(throws: StorageError.notAStrataFile(path: path, reason: "empty file, 0 bytes")) {
            _ = try Store(path: path, options: StoreOptions(createIfMissing: false))
        }
        #expect(fileSizeOf(path) == 0)
    }

    /// An empty file while another process has a database of that name open (someone emptied it
    /// under that process): not initialised, since that process's lock file speaks for other data.
    @Test func emptyFileOpenInAnotherProcessIsNotInitialised() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        _ = try ReadOnlyTests.makeStore(path)
        let holder = try HelperProcess(path: helper, arguments: ["hold-reader", path])
        let line = try await holder.readLine()
        #expect(line?.hasPrefix("snapshot ") == true, "\(line ?? "no output"): \(holder.errorOutput())")
        #expect(truncate(path, 0) == 0)
        #expect(throws: StorageError.notAStrataFile(path: path, reason: "the file is empty, and another process has a database of this name open")) {
            _ = try Store(path: path)
        }
        #expect(fileSizeOf(path) == 0)
        try await holder.kill()
        // Alone now: the empty file is an interrupted creation like any other.
        let store = try Store(path: path)
        #expect(try store.read { try $0.treeNames() } == [])
    }

    /// A creation that stopped between linking the database's name and removing the temporary one
    /// leaves a second name of the database: the first read-write opener removes it (a read-only
    /// one changes nothing).
    @Test func staleTemporaryNameIsRemovedByTheFirstOpener() throws {
        let dir = try temporaryDirectory()
        defer { removeDirectory(dir) }
        let path = dir + "/db"
        let model = try ReadOnlyTests.makeStore(path)
        let temporary = FileCreation.temporaryPath(for: path)
        #expect(link(path, temporary) == 0)
        do {
            let reader = try Store(path: path, options: StoreOptions(readOnly: true))
            #expect(try contents(of: reader) == model)
        }
        #expect(PosixFile.exists(temporary))
        let store = try Store(path: path)
        #expect(!PosixFile.exists(temporary))
        #expect(try contents(of: store) == model)
    }
}
