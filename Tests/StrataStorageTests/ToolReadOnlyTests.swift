import Testing
@testable import StrataStorage
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The `strata` tool only reads: every inspection command, on a missing file, an empty file, a
// short file of garbage and a healthy database (with and without its lock file), exits with the
// documented code and leaves the directory exactly as it was: same names, sizes, bytes,
// modification times (no lock file created, nothing grown). It works in a read-only directory. A
// newest commit that a crash left incomplete is a note (exit 0); damage to the commit readers see
// is a problem (exit 5).

/// Whether the tool can be run as a user who cannot write the test's directory: as root, through
/// setpriv as `nobody` (root writes anywhere, so chmod alone proves nothing); otherwise directly.
private let unprivilegedLauncher: [String]? = {
    if getuid() != 0 { return [] }
    let setpriv = "/usr/bin/setpriv"
    return FileManager.default.isExecutableFile(atPath: setpriv) ? [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"] : nil
}()

@Suite(.enabled(if: strataToolPath() != nil, "the strata executable is not built next to the tests; run `swift build` first"))
struct ToolReadOnlyTests {
    enum Case: String, CaseIterable {
        case missing, empty, garbage, healthy, healthyWithoutLockFile

        /// The exit code every inspection command must end with.
        var exitCode: Int32 {
            switch self {
            case .missing: return 2
            case .empty, .garbage: return 3
            case .healthy, .healthyWithoutLockFile: return 0
            }
        }

        /// Puts this case's file at `path`.
        func make(_ path: String) throws {
            switch self {
            case .missing: break
            case .empty: try writeFileBytes(path, [])
            case .garbage:
                var rng = SplitMix(seed: 100)
                try writeFileBytes(path, rng.byteArray(100))
            case .healthy, .healthyWithoutLockFile:
                _ = try ReadOnlyTests.makeStore(path)
                if self == .healthyWithoutLockFile { unlink(path + "-lock") }
            }
        }
    }

    static let commands: [[String]] = [["info"], ["trees"], ["check"], ["page", "0"], ["page", "3"], ["readers"], ["schema"], ["dump"], ["compact"]]

    /// The arguments of `command` on `path`; `compact` writes into `outputDirectory`.
    static func arguments(_ command: [String], _ path: String, outputDirectory: String) -> [String] {
        if command == ["compact"] { return ["compact", path, outputDirectory + "/out"] }
        return [command[0], path] + command.dropFirst()
    }

    @Test(arguments: Case.allCases)
    func inspectionChangesNothing(_ kind: Case) throws {
        let tool = try #require(strataToolPath())
        let dir = try temporaryDirectory()
        let outputDirectory = try temporaryDirectory()
        defer { removeDirectory(dir); removeDirectory(outputDirectory) }
        let path = dir + "/db"
        try kind.make(path)
        for command in Self.commands {
            let before = try directoryState(dir)
            let result = try runTool(tool, Self.arguments(command, path, outputDirectory: outputDirectory))
            let context = "\(kind.rawValue): strata \(command.joined(separator: " "))"
            #expect(result.status == kind.exitCode, "\(context): \(result)")
            #expect(try directoryState(dir) == before, "\(context) changed the directory")
            let outputs = try FileManager.default.contentsOfDirectory(atPath: outputDirectory)
            if command == ["compact"] && kind.exitCode == 0 {
                // The copy is a database of its own, with the same content.
                #expect(outputs.contains("out"), "\(context): \(outputs)")
                #expect(
                    try contents(of: try Store(path: outputDirectory + "/out")) == contents(of: try Store(path: path, options: StoreOptions(readOnly: true))))
            } else {
                #expect(outputs.isEmpty, "\(context) wrote \(outputs)")
            }
            for name in outputs { try FileManager.default.removeItem(atPath: outputDirectory + "/" + name) }
            if kind == .empty || kind == .garbage {
                #expect(result.stderr.contains("not a Strata database"), "\(context): \(result)")
            }
        }
    }

    /// A directory nobody running the tool may write to: every command still works. As root the
    /// tool runs as `nobody` through setpriv, since root writes through any permission bits.
    @Test(
        .enabled(if: unprivilegedLauncher != nil, "running as root without /usr/bin/setpriv: cannot make a directory read-only to the tool"),
        arguments: [true, false])
    func inspectsInAReadOnlyDirectory(withLockFile: Bool) throws {
        let tool = try #require(strataToolPath())
        let launcher = try #require(unprivilegedLauncher)
        let dir = try temporaryDirectory()
        defer { removeDirectory(dir) }
        let path = dir + "/db"
        try (withLockFile ? Case.healthy : Case.healthyWithoutLockFile).make(path)
        #expect(chmod(dir, 0o555) == 0)
        func run(_ executable: String, _ arguments: [String]) throws -> ToolResult {
            guard let first = launcher.first else { return try runTool(executable, arguments) }
            return try runTool(first, Array(launcher.dropFirst()) + [executable] + arguments)
        }
        // The directory really is read-only to that user.
        let touch = try run("/usr/bin/touch", [dir + "/probe"])
        #expect(touch.status != 0, "the directory is writable to the tool's user: \(touch)")
        let before = try directoryState(dir)
        for command in Self.commands where command != ["compact"] {
            let result = try run(tool, Self.arguments(command, path, outputDirectory: dir))
            #expect(result.status == 0, "strata \(command.joined(separator: " ")): \(result)")
        }
        #expect(try directoryState(dir) == before)
    }

    /// The newest commit's meta page torn (as a power loss during its write leaves it), or its
    /// pages not all written (its meta page intact): the file opens at the commit before, which is
    /// healthy, so `check` exits 0 with a note and `info` shows the same note. Damage to a page the
    /// commit readers see stays a problem: exit 5.
    @Test func tornNewestCommitIsANoteAndRealDamageAProblem() throws {
        let tool = try #require(strataToolPath())
        for tear in ["meta page", "commit record"] {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            _ = try ReadOnlyTests.makeStore(path)
            let (newest, victim) = try {
                var options = StoreOptions(durability: .noSync)
                options.compaction = .off  // compaction could move tree "a"'s pages in any commit
                let store = try Store(path: path, options: options)
                // The commit the file falls back to touches neither tree "a" nor tree "late", so
                // that what is damaged below is not in its commit record (which open verifies).
                try store.write { txn in _ = try txn.createTree("other").put([1], [1]) }
                try store.write { txn in _ = try txn.createTree("late").put([1], [UInt8](repeating: 7, count: 100)) }
                return (store.latestVersion, try store.read { txn in try #require(try txn.tree("late")).info.root })
            }()
            let pageSize = 4096
            if tear == "meta page" {
                let offset = Int(newest % 2) * pageSize + 3000
                try patchFile(path, at: offset, [0xFF ^ (try readFileRange(path, at: offset, count: 1)[0])])
            } else {
                // A page of the newest commit that never reached the disk: still zeros.
                try patchFile(path, at: Int(victim) * pageSize, [UInt8](repeating: 0, count: pageSize))
            }
            let bytes = try readFileBytes(path)
            let note = "newest commit \(newest) was not completed"
            var result = try runTool(tool, ["check", path])
            #expect(result.status == 0, "\(tear): \(result)")
            #expect(
                result.stdout.contains("note: page \(newest % 2): \(note)") && result.stdout.contains("the file opens at commit \(newest - 1)"),
                "\(tear): \(result)")
            #expect(result.stdout.contains("checked transaction \(newest - 1)") && result.stdout.contains("\nok"), "\(tear): \(result)")
            result = try runTool(tool, ["info", path])
            #expect(result.status == 0, "\(tear): \(result)")
            #expect(result.stdout.contains(note), "\(tear): \(result)")
            #expect(result.stdout.split(separator: "\n").contains { $0.hasPrefix("transaction ") && $0.hasSuffix(" \(newest - 1)") }, "\(tear): \(result)")
            #expect(try readFileBytes(path) == bytes, "\(tear): inspection changed the file")

            // Now damage a page of the commit readers see (the root of tree "a", which the last
            // commit did not touch): a problem, whatever the note says.
            let root = try Store(path: path, options: StoreOptions(readOnly: true)).read { txn in try #require(try txn.tree("a")).info.root }
            let offset = Int(root) * pageSize + pageSize - 1
            try patchFile(path, at: offset, [0x40 ^ (try readFileRange(path, at: offset, count: 1)[0])])
            result = try runTool(tool, ["check", path])
            #expect(result.status == 5, "\(tear): \(result)")
            #expect(result.stdout.contains("problem: page \(root): checksum mismatch"), "\(tear): \(result)")
        }
    }

    /// Beside a live writer, a page of the commit it published (which its readers see) damaged:
    /// the tool's read-only snapshot falls back to the commit before, and `check` said "ok" with a
    /// note that the newest commit "was not completed". It is a problem (exit 5).
    @Test func damageToThePublishedNewestCommitBesideALiveWriterIsAProblem() throws {
        let tool = try #require(strataToolPath())
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        _ = try ReadOnlyTests.makeStore(path)
        var options = StoreOptions(durability: .noSync)
        options.compaction = .off
        let store = try Store(path: path, options: options)  // alive: the tool reads what it published
        defer { store.close() }
        try store.write { txn in _ = try txn.createTree("other").put([1], [1]) }
        try store.write { txn in _ = try txn.createTree("late").put([1], [UInt8](repeating: 7, count: 100)) }
        let newest = store.latestVersion
        let victim = try store.read { txn in try #require(try txn.tree("late")).info.root }
        var result = try runTool(tool, ["check", path])
        #expect(result.status == 0, "\(result)")
        let offset = Int(victim) * 4096 + 4095
        try patchFile(path, at: offset, [0x40 ^ (try readFileRange(path, at: offset, count: 1)[0])])
        result = try runTool(tool, ["check", path])
        #expect(result.status == 5, "\(result)")
        #expect(result.stdout.contains("the newest commit (transaction \(newest)), which the writer published and readers see, does not verify"), "\(result)")
        #expect(!result.stdout.contains("was not completed"), "\(result)")
    }
}
