import Testing
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// What "changed nothing on disk" means in the read-only tests: the same names in the directory,
// and for each the same size, mode, owner, modification and status-change times and bytes, and
// the directory's own modification time (which any create, remove or rename moves). Access times
// are left out: reading is allowed to move them.

struct DirectoryState: Equatable, CustomStringConvertible {
    struct Entry: Equatable {
        var size: Int64
        var mode: UInt32
        var owner: UInt32
        var modified: [Int]
        var changed: [Int]
        var contents: [UInt8]
    }

    var directoryModified: [Int]
    var entries: [String: Entry]

    var description: String {
        entries.keys.sorted().map { name in
            let e = entries[name]!
            return "\(name): \(e.size) bytes, mode \(String(e.mode, radix: 8)), mtime \(e.modified), ctime \(e.changed)"
        }.joined(separator: "; ") + " (directory mtime \(directoryModified))"
    }
}

/// The state of `directory` and of every file in it (not recursive).
func directoryState(_ directory: String) throws -> DirectoryState {
    func status(_ path: String) throws -> stat {
        var st = stat()
        if lstat(path, &st) != 0 { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        return st
    }
    let dir = try status(directory)
    var entries: [String: DirectoryState.Entry] = [:]
    for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
        let path = directory + "/" + name
        let st = try status(path)
        let isFile = st.st_mode & 0o170000 == 0o100000
        entries[name] = DirectoryState.Entry(
            size: Int64(st.st_size), mode: UInt32(st.st_mode), owner: UInt32(st.st_uid),
            modified: [Int(st.st_mtim.tv_sec), Int(st.st_mtim.tv_nsec)], changed: [Int(st.st_ctim.tv_sec), Int(st.st_ctim.tv_nsec)],
            contents: isFile ? try readFileBytes(path) : [])
    }
    return DirectoryState(directoryModified: [Int(dir.st_mtim.tv_sec), Int(dir.st_mtim.tv_nsec)], entries: entries)
}

/// A new empty directory of its own for one test.
func temporaryDirectory(_ name: String = #function) throws -> String {
    let path = temporaryPath(name) + ".d"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Removes a directory made by `temporaryDirectory`, making it writable first.
func removeDirectory(_ path: String) {
    chmod(path, 0o755)
    try? FileManager.default.removeItem(atPath: path)
}
