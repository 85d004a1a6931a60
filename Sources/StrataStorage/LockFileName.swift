#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Which lock file guards a page file, for every name the page file has.
//
// Processes exclude each other's writes through the lock file beside the page file (FORMAT.md §6),
// found by name. Two names of one file gave two lock files that excluded nothing: two processes,
// one through a symbolic link, committed at once and lost each other's commits. So the lock file
// is named after the page file's canonical path (symbolic links and `.`/`..` resolved), which
// every symbolic link to it shares. A hard link (or a second mount) has no canonical name to
// share; for those each read-write process also claims the page file itself for its lock file: it
// holds a shared lock on one byte of the page file chosen by its lock file's identity, far past
// any data. A process that finds a lock there on another byte opens the file through another lock
// file than a live process does, and is refused (`StorageError.openUnderAnotherName`). The claim
// comes before the check, so of two processes opening at once at least the later one sees the other.

enum LockFileName {
    /// The lock file of the page file at `path`: `NAME-lock` beside the canonical path of the
    /// file or, while the file does not exist yet, of its directory.
    static func path(for path: String) -> String {
        canonical(path) + "-lock"
    }

    static func canonical(_ path: String, links: Int = 0) -> String {
        if let resolved = realPath(path) { return resolved }
        let slash = path.utf8.lastIndex(of: UInt8(ascii: "/"))
        let directory = slash.map { $0 == path.utf8.startIndex ? "/" : String(path[..<$0]) } ?? "."
        // A symbolic link to a file not created yet: the file it names, as creating through it
        // will make that file (resolved as the link's own name, two openers racing to create
        // the file through a link and directly got two lock files). At most 40 links, as the
        // system follows.
        if links < 40, let target = linkTarget(path) {
            return canonical(target.hasPrefix("/") ? target : directory + "/" + target, links: links + 1)
        }
        // Not created yet: resolve the directory it will be created in.
        let name = slash.map { String(path[path.utf8.index(after: $0)...]) } ?? path
        guard !name.isEmpty, name != ".", name != "..", let resolved = realPath(directory) else { return path }
        return resolved == "/" ? "/" + name : resolved + "/" + name
    }

    /// Where the symbolic link at `path` points, as written in it; nil when `path` is no link.
    private static func linkTarget(_ path: String) -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBufferPointer { b in
            b.baseAddress.map { base in base.withMemoryRebound(to: CChar.self, capacity: b.count) { readlink(path, $0, b.count) } } ?? -1
        }
        guard count > 0, count < buffer.count else { return nil }
        return String(decoding: buffer[..<count], as: UTF8.self)
    }

    private static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The first byte of the range of the page file whose bytes name lock files; like the shrink
    /// lock's byte (§3.1) it lies far past the end of any file and is never written.
    static let claimBase: Int64 = 1 << 61
    static let claimSpan: Int64 = 1 << 32

    /// The byte of the claim range that stands for the lock file `identity`.
    static func claimByte(_ identity: FileIdentity) -> Int64 {
        // A fixed mix (not Hasher, which is seeded per process): every process must pick the same byte.
        var x = identity.inode &+ identity.device &* 0x9E37_79B9_7F4A_7C15
        x = (x ^ (x >> 31)) &* 0xBF58_476D_1CE4_E5B9
        x ^= x >> 29
        return claimBase + Int64(x & UInt64(claimSpan - 1))
    }

    /// Claims `pageFile` for the lock file `lockFile` for as long as the descriptor stays open,
    /// and throws `openUnderAnotherName` when a live process has it open through another lock file.
    static func claim(pageFile: PosixFile, lockFile: FileIdentity, path: String) throws {
        let byte = claimByte(lockFile)
        _ = try pageFile.lock(offset: byte, length: 1, exclusive: false, wait: true)
        let others = [(claimBase, byte - claimBase), (byte + 1, claimBase + claimSpan - byte - 1)]
        for (start, length) in others where length > 0 {
            if pageFile.isLockedByOthers(offset: start, length: length) == true {
                pageFile.unlock(offset: byte, length: 1)
                throw StorageError.openUnderAnotherName(path: path)
            }
        }
    }
}
