#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Every error the storage engine throws. Each case says what was wrong and where.
///
/// ```swift
/// do { _ = try Store(path: "app.strata") }
/// catch let error as StorageError { print(error) }   // e.g. "not a Strata file: /tmp/x (bad magic)"
/// ```
public enum StorageError: Error, Equatable, Sendable, CustomStringConvertible {
    /// A system call failed: `operation` names it, `errno` is the C error number.
    case io(operation: String, path: String, errno: Int32)
    /// The file is not a Strata database (wrong magic or too short to hold the meta pages).
    case notAStrataFile(path: String, reason: String)
    /// The file was written by a newer format version than this build reads.
    case unsupportedFormatVersion(path: String, found: UInt32, supported: UInt32)
    /// The page size stored in the file is not one this build accepts, or differs from the one requested.
    case pageSizeMismatch(path: String, found: Int, expected: Int)
    /// The file is shorter than its meta page says.
    case truncated(path: String, expectedBytes: UInt64, actualBytes: UInt64)
    /// A page failed a structural or checksum check.
    case corrupt(page: UInt64, reason: String)
    /// Neither meta page is valid, or the commit each one names is damaged.
    case noValidMeta(path: String, reason: String)
    /// A key longer than `Store.maxKeySize`, or empty.
    case invalidKey(length: Int, maximum: Int)
    /// A value larger than the engine stores.
    case valueTooLarge(length: Int, maximum: Int)
    /// A tree name that is empty or too long.
    case invalidTreeName(String)
    /// The tree does not exist.
    case treeNotFound(String)
    /// A tree of that name already exists.
    case treeExists(String)
    /// The store was closed.
    case closed
    /// A write was attempted while the transaction was already finished (committed, aborted, or failed).
    case transactionFinished
    /// A cursor was used after the transaction wrote to its tree; reposition it with a seek.
    case cursorInvalidated
    /// `write` was called inside a write transaction on the same thread (which would deadlock).
    case nestedWrite
    /// `commit()` was called while a savepoint of the transaction was still open.
    case savepointOpen
    /// Every reader slot is taken (too many concurrent read transactions).
    case readersFull(slots: Int)
    /// A write to a store opened with `StoreOptions.readOnly`, which never writes its file or
    /// lock file.
    case readOnly(path: String)
    /// A snapshot of a read-only store changed under it: a writer in another process committed
    /// twice while it was read, so the pages it read may have been reused (a read-only store
    /// cannot register its snapshots in the lock file). Nothing is wrong with the file: read again.
    case fileChangedDuringRead(path: String)
    /// Another process has this file open read-write through another lock file: it opened the
    /// database by a hard link or on another mount. The two lock files would not exclude each
    /// other's writes, so this open is refused; open the database by one name in every process.
    case openUnderAnotherName(path: String)
    /// A setting of ``StoreOptions`` is outside what the engine accepts: which one (`pageSize`,
    /// `readerSlots`, `compaction.freeFraction`, …) and the values it takes.
    case invalidOption(name: String, reason: String)
    /// The invariant the engine checks failed; should never happen.
    case internalError(String)

    public var description: String {
        switch self {
        case let .io(op, path, err):
            return "I/O error: \(op) on \(path) failed with errno \(err) (\(errnoName(err)))"
        case let .notAStrataFile(path, reason):
            return "not a Strata file: \(path) (\(reason))"
        case let .unsupportedFormatVersion(path, found, supported):
            return "unsupported format version \(found) in \(path); this build reads up to \(supported)"
        case let .pageSizeMismatch(path, found, expected):
            return "page size \(found) in \(path) does not match \(expected)"
        case let .truncated(path, expected, actual):
            return "truncated file: \(path) holds \(actual) bytes but its meta page needs \(expected)"
        case let .corrupt(page, reason):
            return "corrupt page \(page): \(reason)"
        case let .noValidMeta(path, reason):
            return "no valid commit in \(path): \(reason)"
        case let .invalidKey(length, maximum):
            return "invalid key of \(length) bytes: keys must be 1 to \(maximum) bytes"
        case let .valueTooLarge(length, maximum):
            return "value of \(length) bytes exceeds the maximum of \(maximum)"
        case let .invalidTreeName(name):
            return "invalid tree name '\(name)': names are 1 to 255 UTF-8 bytes"
        case let .treeNotFound(name):
            return "no tree named '\(name)'"
        case let .treeExists(name):
            return "a tree named '\(name)' already exists"
        case .closed:
            return "the store is closed"
        case .transactionFinished:
            return "the transaction has already finished"
        case .cursorInvalidated:
            return "the cursor's tree was modified; seek again before reading"
        case .nestedWrite:
            return "write called inside a write transaction on the same thread; use the transaction you have"
        case .savepointOpen:
            return "commit called inside a savepoint; the savepoint's closure must return first"
        case let .readersFull(slots):
            return
                "all \(slots) reader slots are in use: every live read transaction, snapshot or set of results of a different commit holds one until released (end old ones; StoreOptions.readerSlots sizes a new lock file)"
        case let .readOnly(path):
            return "\(path) is open read-only; it cannot be written"
        case let .fileChangedDuringRead(path):
            return "\(path) changed while it was read (a writer committed twice during a read-only snapshot); read again"
        case let .openUnderAnotherName(path):
            return
                "\(path) is open in another process under another name (a hard link or another mount), whose lock file is not \(LockFileName.path(for: path)): writers through two lock files would not exclude each other; open the database by one name in every process"
        case let .invalidOption(name, reason):
            return "invalid StoreOptions.\(name): \(reason)"
        case let .internalError(message):
            return "internal error: \(message)"
        }
    }
}

/// The symbolic name of an errno value, by the platform's own constants (their numbers differ
/// between Linux and Darwin).
func errnoName(_ err: Int32) -> String {
    switch err {
    case EPERM: return "EPERM"
    case ENOENT: return "ENOENT"
    case EINTR: return "EINTR"
    case EIO: return "EIO"
    case EBADF: return "EBADF"
    case EAGAIN: return "EAGAIN"
    case ENOMEM: return "ENOMEM"
    case EACCES: return "EACCES"
    case EBUSY: return "EBUSY"
    case EEXIST: return "EEXIST"
    case ENOTDIR: return "ENOTDIR"
    case EISDIR: return "EISDIR"
    case EINVAL: return "EINVAL"
    case ENFILE: return "ENFILE"
    case EMFILE: return "EMFILE"
    case EFBIG: return "EFBIG"
    case ENOSPC: return "ENOSPC"
    case EROFS: return "EROFS"
    case ENAMETOOLONG: return "ENAMETOOLONG"
    case ELOOP: return "ELOOP"
    case EDQUOT: return "EDQUOT"
    default: return "errno \(err)"
    }
}
