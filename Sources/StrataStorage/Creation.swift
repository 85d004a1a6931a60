#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Creating a page file atomically (FORMAT.md §4.1, "Creating a file").
//
// Writing the two meta pages straight into the database's own name is not crash-safe: a crash
// between the two writes, or before their sync, leaves a file that no later open can use (one meta
// page, or none, and nothing to tell an interrupted creation from a damaged database). So the meta
// pages of the empty store are written to a temporary file beside the database, synced, and only
// then given the database's name, and the directory is synced. A crash at any point leaves the name
// as it was (missing, or the empty file being initialised) or naming a complete file.

enum FileCreation {
    /// The temporary file a creation of `path` writes. Only ever touched under the writer lock of
    /// `path`'s lock file, so one name per database is enough.
    static func temporaryPath(for path: String) -> String { path + "-creating" }

    /// Pages 0 and 1 of every new file: the meta pages of an empty store, transactions 0 and 1.
    static func initialPages(pageSize: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 2 * pageSize)
        bytes.withUnsafeMutableBytes { b in
            for txnid: UInt64 in [0, 1] {
                let meta = Meta(txnid: txnid, pageSize: pageSize, pageCount: 2, catalog: .empty, free: .empty, recordRun: 0, recordCount: 0)
                meta.encode(into: b.baseAddress! + Int(txnid) * pageSize, inlineRecord: [])
            }
        }
        return bytes
    }

    /// Writes the initial pages into `file` in place, one page per write, and syncs.
    static func writeInitialPages(_ file: FileIO, pageSize: Int) throws {
        let pages = initialPages(pageSize: pageSize)
        try pages.withUnsafeBytes { (p) throws in
            for slot in 0..<2 {
                try file.write(UnsafeRawBufferPointer(rebasing: p[(slot * pageSize)..<((slot + 1) * pageSize)]), at: UInt64(slot * pageSize))
            }
        }
        try file.sync()
    }

    enum Outcome {
        /// This call created the file.
        case created
        /// Something else created a file of that name meanwhile; it was left alone.
        case appeared
    }

    /// Creates the page file `path` atomically: a missing one, or (`replacing`, its fstat record)
    /// the empty file there, which is replaced by rename and whose permission bits (and, where
    /// allowed, owner) the new file keeps. `wrap` sees the temporary file, as the fault-injection
    /// tests' seam. Call with the lock file's writer lock held, so no other Strata process creates
    /// or initialises the file meanwhile.
    static func create(path name: String, pageSize: Int, replacing existing: stat?, wrap: ((FileIO) -> FileIO)?) throws -> Outcome {
        // Created or replaced where the name leads, as open(2) with O_CREAT does: an empty file
        // reached through a symbolic link is replaced where it is, and a symbolic link to a file
        // not created yet creates that file (the link stays a link). It is also the name the lock
        // file is named after, so openers racing to create one file by several names agree.
        let path = LockFileName.canonical(name)
        let temporary = temporaryPath(for: path)
        // A leftover of an interrupted creation. It may even be a second name of a database whose
        // creation stopped just after the link below: removing a name never touches a file's data.
        if unlink(temporary) != 0 && errno != ENOENT {
            throw StorageError.io(operation: "unlink", path: temporary, errno: errno)
        }
        let permissions = existing.map { UInt32($0.st_mode) & 0o7777 } ?? 0o644
        let posix = try PosixFile(path: temporary, mode: .createNew(permissions: permissions))
        do {
            if let existing {
                // open() applied the umask; the file being replaced had exactly these bits.
                _ = fchmod(posix.fd, mode_t(permissions))
                _ = fchown(posix.fd, existing.st_uid, existing.st_gid)
            }
            try writeInitialPages(wrap?(posix) ?? posix, pageSize: pageSize)
            if existing != nil {
                if rename(temporary, path) != 0 { throw StorageError.io(operation: "rename", path: path, errno: errno) }
            } else if try !giveName(temporary, as: path, given: name) {
                unlink(temporary)
                return .appeared
            }
            unlink(temporary)
            try syncDirectory(containing: path)
            return .created
        } catch {
            unlink(temporary)
            throw error
        }
    }

    /// Gives the complete file `temporary` the name `path` (canonical, beside it) without ever
    /// replacing a file that appeared there meanwhile: `link`, which fails if the name exists, or,
    /// on a filesystem without hard links, `rename` after looking once more. Returns false when a
    /// file appeared (`temporary` keeps its name); the caller removes `temporary` either way.
    /// `given` is the name the caller was given, for errors.
    static func giveName(_ temporary: String, as path: String, given: String) throws -> Bool {
        if link(temporary, path) == 0 { return true }
        let err = errno
        if err == EEXIST {
            if access(path, F_OK) != 0 {
                // The name exists but leads nowhere: a loop of symbolic links.
                throw StorageError.io(operation: "create (the name is a loop of symbolic links)", path: given, errno: ELOOP)
            }
            return false
        }
        if access(path, F_OK) == 0 { return false }
        if rename(temporary, path) != 0 { throw StorageError.io(operation: "rename", path: path, errno: errno) }
        return true
    }

    /// Removes a temporary name left beside `path` by a creation that stopped between its link and
    /// its unlink (it then names the database itself). Called by the first process to open a file.
    static func removeStaleTemporary(of path: String, identity: FileIdentity) {
        let temporary = temporaryPath(for: LockFileName.canonical(path))
        if FileIdentity(path: temporary) == identity { unlink(temporary) }
    }
}
