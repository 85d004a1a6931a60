#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// The one seam through which the engine touches files: read, write, sync, grow, lock and map.
/// `PosixFile` is the real thing; tests wrap it to inject failed writes, failed syncs, a full
/// disk, or writes lost after the last sync.
protocol FileIO: AnyObject, Sendable {
    var path: String { get }
    func size() throws -> UInt64
    /// Reads exactly `buffer.count` bytes at `offset`; a short read is an error.
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws
    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws
    /// Writes `buffers` back to back starting at `offset` (one vectored write where possible).
    func write(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws
    /// Makes every completed write durable (fdatasync, or F_FULLFSYNC on Apple platforms).
    func sync() throws
    /// Writes `buffers` back to back at `offset` and returns once they are durable, as `write`
    /// and then `sync` would (the default); it may make other writes durable too, but need not.
    /// `PosixFile` on Linux writes page-aligned buffers with one `O_DIRECT | O_DSYNC` write.
    func writeDurably(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws
    func truncate(to length: UInt64) throws
    /// Maps `length` bytes from offset 0. Read-only maps are for page files; shared writable ones
    /// for the lock file's reader table.
    func map(length: Int, writable: Bool) throws -> UnsafeMutableRawPointer
    func unmap(_ address: UnsafeMutableRawPointer, length: Int)
    /// An advisory record lock on `length` bytes at `offset` (fcntl; on Linux an open file
    /// description lock, see `PosixFile.lockCommands`). Returns false when `wait` is false and
    /// another process holds a conflicting lock.
    func lock(offset: Int64, length: Int64, exclusive: Bool, wait: Bool) throws -> Bool
    func unlock(offset: Int64, length: Int64)
    /// Whether another open file description holds a lock on `length` bytes at `offset`; nil where
    /// that cannot be asked.
    func isLockedByOthers(offset: Int64, length: Int64) -> Bool?
}

extension FileIO {
    func isLockedByOthers(offset: Int64, length: Int64) -> Bool? { nil }

    func writeDurably(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        try write(buffers, at: offset)
        try sync()
    }

    /// Writes zeros over `start..<end`, a megabyte at a time from one shared block of zeros.
    func writeZeros(from start: UInt64, to end: UInt64) throws {
        let zeros = ZeroBlock.shared.bytes
        var offset = start
        while offset < end {
            let count = Int(min(UInt64(zeros.count), end - offset))
            try write(UnsafeRawBufferPointer(rebasing: zeros[0..<count]), at: offset)
            offset += UInt64(count)
        }
    }
}

/// How `PosixFile` opens a file.
enum OpenMode {
    /// O_RDONLY: every write, sync, truncation and writable map throws `StorageError.readOnly`.
    case readOnly
    /// O_RDWR; the file must exist.
    case readWrite
    /// O_RDWR | O_CREAT.
    case readWriteCreate
    /// O_RDWR | O_CREAT | O_EXCL with these permission bits: a new file or an error.
    case createNew(permissions: UInt32)
}

/// A file opened with POSIX calls.
final class PosixFile: FileIO {
    let path: String
    let fd: Int32
    /// Opened O_RDONLY: nothing may be written through it.
    let isReadOnly: Bool

    /// Opens (creating when `create`) the file at `path` for reading and writing.
    convenience init(path: String, create: Bool) throws {
        try self.init(path: path, mode: create ? .readWriteCreate : .readWrite)
    }

    /// Opens the file at `path` as `mode` says.
    init(path: String, mode: OpenMode) throws {
        // open(2) would see the path cut short at a NUL byte, and open (or create) another file.
        if path.utf8.contains(0) { throw StorageError.io(operation: "open (the path contains a NUL byte)", path: path, errno: EINVAL) }
        self.path = path
        var flags = O_CLOEXEC
        var permissions: UInt32 = 0o644
        switch mode {
        case .readOnly: flags |= O_RDONLY
        case .readWrite: flags |= O_RDWR
        case .readWriteCreate: flags |= O_RDWR | O_CREAT
        case .createNew(let bits):
            flags |= O_RDWR | O_CREAT | O_EXCL
            permissions = bits
        }
        // Non-blocking for the open only: opening a FIFO to read waits for a writer, so a FIFO
        // given as a database (read-only, or to `strata info`) hung the caller before anything
        // could see it is not a regular file. Regular files are read and written blocking.
        let fd = open(path, flags | O_NONBLOCK, mode_t(permissions))
        if fd < 0 { throw StorageError.io(operation: "open", path: path, errno: errno) }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        self.fd = fd
        self.isReadOnly = { if case .readOnly = mode { return true } else { return false } }()
    }

    /// Opens the existing file at `path` as `mode` says, or returns nil when there is none (ENOENT).
    static func openExisting(_ path: String, mode: OpenMode) throws -> PosixFile? {
        do {
            return try PosixFile(path: path, mode: mode)
        } catch StorageError.io(_, _, let err) where err == ENOENT {
            return nil
        }
    }

    /// An anonymous file: created in a memory-backed directory and unlinked at once, so the
    /// engine runs unchanged and nothing is left behind.
    static func anonymous() throws -> PosixFile {
        let dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"
        var template = Array("\(dir)/strata-memory-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        let name = String(cString: template.map { UInt8(bitPattern: $0) })
        if fd < 0 { throw StorageError.io(operation: "mkstemp", path: name, errno: errno) }
        unlink(name)
        return PosixFile(fd: fd, path: ":memory:")
    }

    private init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
        self.isReadOnly = false
    }

    deinit {
        close(fd)
        if case .open(let direct) = directWrites.withLock({ $0.descriptor }) { close(direct) }
    }

    /// The file's length, from `lseek(SEEK_END)` rather than `fstat`. On Linux 6.13 and later
    /// (multigrain timestamps) reading a file's times makes its next write stamp a fine-grained
    /// mtime, which dirties the inode, and then `fdatasync` writes the inode table block as a second
    /// synchronous I/O after the data: a writer asks for the size at every transaction, so each
    /// durable commit paid that second write. Measured on the project's machine (kernel 6.18,
    /// ext4): 6 pages and a meta page written and synced took 225-306 µs, and 288-390 µs with an
    /// fstat before each commit. `lseek` reads the size without the times.
    func size() throws -> UInt64 {
        let end = lseek(fd, 0, SEEK_END)
        if end < 0 { throw StorageError.io(operation: "lseek", path: path, errno: errno) }
        return UInt64(end)
    }

    /// Identifies the file across handles of one process, whatever path opened it.
    func identity() throws -> FileIdentity {
        FileIdentity(try status())
    }

    /// The file's fstat record.
    func status() throws -> stat {
        var st = stat()
        if fstat(fd, &st) != 0 { throw StorageError.io(operation: "fstat", path: path, errno: errno) }
        return st
    }

    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws {
        var done = 0
        while done < buffer.count {
            let n = pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw StorageError.io(operation: "pread", path: path, errno: errno)
            }
            if n == 0 {
                throw StorageError.truncated(path: path, expectedBytes: offset + UInt64(buffer.count), actualBytes: offset + UInt64(done))
            }
            done += n
        }
    }

    /// The most bytes one write system call passes. Linux's ext4 (6.16 and later) caches a file in
    /// folios as large as the write that filled them, up to 2 MiB; a later one-page write into such
    /// a folio dirties all of it, and the sync that flushes it costs more the larger the folio
    /// (measured here, nine scattered one-page writes and fdatasync: 700-1,180 µs into a file
    /// written in 2 MiB pieces, 430-520 µs into one written in 4-64 KiB pieces, same bytes reaching
    /// the disk). Pieces of at most 64 KiB keep every later small commit cheap, for ~16 system
    /// calls per MiB written.
    static let maxWriteBytes = 64 * 1024

    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        if isReadOnly { throw StorageError.readOnly(path: path) }
        var done = 0
        while done < bytes.count {
            let piece = min(bytes.count - done, PosixFile.maxWriteBytes)
            let n = pwrite(fd, bytes.baseAddress! + done, piece, off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw StorageError.io(operation: "pwrite", path: path, errno: errno)
            }
            done += n
        }
    }

    func write(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        if isReadOnly { throw StorageError.readOnly(path: path) }
        // Neighbours go out together in vectored writes of at most `maxWriteBytes`.
        var position = offset
        var start = 0
        while start < buffers.count {
            var end = start
            var total = 0
            while end < buffers.count && total + buffers[end].count <= PosixFile.maxWriteBytes {
                total += buffers[end].count
                end += 1
            }
            if end - start <= 1 {
                // One buffer (or one larger than a piece, which `write` cuts up).
                try write(buffers[start], at: position)
                position += UInt64(buffers[start].count)
                start += 1
                continue
            }
            try writeVector(buffers[start..<end], total: total, at: position)
            position += UInt64(total)
            start = end
        }
    }

    private func writeVector(_ buffers: ArraySlice<UnsafeRawBufferPointer>, total: Int, at offset: UInt64) throws {
        var iov = buffers.map { iovec(iov_base: UnsafeMutableRawPointer(mutating: $0.baseAddress), iov_len: $0.count) }
        let n = iov.withUnsafeMutableBufferPointer { pwritev(fd, $0.baseAddress, Int32($0.count), off_t(offset)) }
        if n == total { return }
        if n < 0 && errno != EINTR { throw StorageError.io(operation: "pwritev", path: path, errno: errno) }
        // Short or interrupted: finish buffer by buffer from where it stopped.
        var position = offset
        var skip = max(n, 0)
        for buffer in buffers {
            if skip >= buffer.count { skip -= buffer.count; position += UInt64(buffer.count); continue }
            try write(UnsafeRawBufferPointer(rebasing: buffer[skip...]), at: position + UInt64(skip))
            position += UInt64(buffer.count)
            skip = 0
        }
    }

    func sync() throws {
        if isReadOnly { throw StorageError.readOnly(path: path) }
        #if canImport(Darwin)
        if fcntl(fd, F_FULLFSYNC) == 0 { return }
        if fsync(fd) != 0 { throw StorageError.io(operation: "fsync", path: path, errno: errno) }
        #else
        if fdatasync(fd) != 0 { throw StorageError.io(operation: "fdatasync", path: path, errno: errno) }
        #endif
    }

    /// A second descriptor of this file, opened `O_DIRECT | O_DSYNC` at the first durable write:
    /// not tried yet, open, or not to be had (no such flag here, the filesystem refuses it, or a
    /// write through it was refused). The lock is held across each write through it, so that no
    /// write can use the descriptor after a failure elsewhere closed it.
    private struct DirectWrites {
        enum Descriptor {
            case untried
            case open(Int32)
            case unavailable
        }
        var descriptor = Descriptor.untried
        /// Writes that went out through it whole (for tests).
        var completed = 0
        /// Asked before each write through it (tests only): what the write does instead.
        var fault: (@Sendable () -> DirectWriteFault?)?
    }
    private let directWrites = Mutex(DirectWrites())

    /// How many durable writes went out through the `O_DIRECT | O_DSYNC` descriptor (for tests).
    var directWriteCount: Int { directWrites.withLock { $0.completed } }

    /// What a write through the `O_DIRECT | O_DSYNC` descriptor does instead, for tests of the
    /// paths the disk and the kernel rarely take: write only the first `bytes` (a multiple of
    /// 4 KiB; 0 for none; never the last 4 KiB of the write) and then fail with `errno`, or
    /// return that count (a short write).
    enum DirectWriteFault: Sendable {
        case error(Int32, afterBytes: Int = 0)
        case short(bytes: Int)
    }

    /// Sets what each later direct write asks for its fault (nil: none); tests only.
    func injectDirectWriteFaults(_ fault: (@Sendable () -> DirectWriteFault?)?) {
        directWrites.withLock { $0.fault = fault }
    }

    /// `O_DIRECT`, which Glibc's Swift module does not export (its value depends on the architecture).
    static var directFlag: Int32? {
        #if os(Linux) && (arch(x86_64) || arch(i386))
        return 0o40000
        #elseif os(Linux) && (arch(arm64) || arch(arm))
        return 0o200000
        #else
        return nil
        #endif
    }

    /// Writes `buffers` at `offset` and returns once they are durable. On Linux, when every buffer
    /// is page-aligned, this is one `pwritev` through a descriptor opened `O_DIRECT | O_DSYNC`:
    /// the block layer sends the bytes and flushes the disk's cache in one request, with no page
    /// cache in between, which took 6-8 % off a one-object durable commit here (a frame of the
    /// commit log, CommitLog.swift; FORMAT.md §3.2 has the figures). Anywhere that cannot be done
    /// (another platform or architecture, a filesystem without O_DIRECT, a buffer not aligned, a
    /// write the filesystem refuses) it is `write` and then `sync`, as before.
    func writeDurably(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        if isReadOnly { throw StorageError.readOnly(path: path) }
        let total = buffers.reduce(0) { $0 + $1.count }
        if total > 0, offset % 4096 == 0, buffers.count <= 1024,
            buffers.allSatisfy({ Int(bitPattern: $0.baseAddress) % 4096 == 0 && $0.count % 4096 == 0 }),
            try writeDirectly(buffers, total: total, at: offset)
        {
            return
        }
        try write(buffers, at: offset)
        try sync()
    }

    /// The direct write of `writeDurably`: true when the bytes are on the disk, false when they
    /// must go through the page cache (nothing written, or a part: the caller writes them all).
    private func writeDirectly(_ buffers: [UnsafeRawBufferPointer], total: Int, at offset: UInt64) throws -> Bool {
        try directWrites.withLock { state throws -> Bool in
            guard let direct = openDirect(&state.descriptor) else { return false }
            var iov = buffers.map { iovec(iov_base: UnsafeMutableRawPointer(mutating: $0.baseAddress), iov_len: $0.count) }
            while true {
                let n: Int
                switch state.fault?() {
                case nil: n = iov.withUnsafeMutableBufferPointer { pwritev(direct, $0.baseAddress, Int32($0.count), off_t(offset)) }
                case .error(let err, let bytes)?:
                    if bytes > 0 { _ = Self.writeShort(direct, buffers, bytes: min(bytes, total - 4096), at: offset) }
                    errno = err
                    n = -1
                case .short(let bytes)?: n = Self.writeShort(direct, buffers, bytes: min(bytes, total - 4096), at: offset)
                }
                if n == total {
                    state.completed += 1
                    return true
                }
                if n < 0 && errno == EINTR { continue }
                if n < 0 && errno == EINVAL {
                    // The filesystem takes no direct writes of this shape (nothing was written):
                    // from now on this file writes through the page cache.
                    close(direct)
                    state.descriptor = .unavailable
                    return false
                }
                // A kernel that will not pin a buffer for the device (the shared zero page of
                // untouched zeros, on some) refuses it and writes nothing: this once, through the
                // page cache, which copies from any readable page.
                if n < 0 && errno == EFAULT { return false }
                if n < 0 { throw StorageError.io(operation: "pwritev (O_DIRECT | O_DSYNC)", path: path, errno: errno) }
                // Short (a full disk, or a signal mid-way): all of it again, through the page cache.
                return false
            }
        }
    }

    /// The first `bytes` of `buffers` written at `offset` through `fd` (an injected short write).
    private static func writeShort(_ fd: Int32, _ buffers: [UnsafeRawBufferPointer], bytes: Int, at offset: UInt64) -> Int {
        var done = 0
        for buffer in buffers where done < bytes {
            let count = min(buffer.count, bytes - done)
            let n = pwrite(fd, buffer.baseAddress, count, off_t(offset) + off_t(done))
            if n < 0 { return done > 0 ? done : -1 }
            done += n
            if n < count { break }
        }
        return done
    }

    /// The `O_DIRECT | O_DSYNC` descriptor, opened at first use by the file's path and kept only if
    /// it is this file (device and inode: the name may have been given to another file since), or
    /// nil where there is none.
    private func openDirect(_ descriptor: inout DirectWrites.Descriptor) -> Int32? {
        switch descriptor {
        case .open(let fd): return fd
        case .unavailable: return nil
        case .untried:
            descriptor = .unavailable
            guard let flag = Self.directFlag else { return nil }
            let direct = open(path, O_RDWR | O_CLOEXEC | O_DSYNC | flag)
            if direct < 0 { return nil }
            var mine = stat(), theirs = stat()
            guard fstat(fd, &mine) == 0, fstat(direct, &theirs) == 0, mine.st_dev == theirs.st_dev, mine.st_ino == theirs.st_ino else {
                close(direct)
                return nil
            }
            descriptor = .open(direct)
            return direct
        }
    }

    func truncate(to length: UInt64) throws {
        if isReadOnly { throw StorageError.readOnly(path: path) }
        if ftruncate(fd, off_t(length)) != 0 { throw StorageError.io(operation: "ftruncate", path: path, errno: errno) }
    }

    func map(length: Int, writable: Bool) throws -> UnsafeMutableRawPointer {
        if writable && isReadOnly { throw StorageError.readOnly(path: path) }
        let prot = writable ? (PROT_READ | PROT_WRITE) : PROT_READ
        guard let address = mmap(nil, length, prot, MAP_SHARED, fd, 0), address != MAP_FAILED else {
            throw StorageError.io(operation: "mmap", path: path, errno: errno)
        }
        return address
    }

    func unmap(_ address: UnsafeMutableRawPointer, length: Int) {
        munmap(address, length)
    }

    /// The fcntl commands of record locks: (get, set, set and wait).
    ///
    /// Classic fcntl locks belong to the process, and closing *any* descriptor of the file drops
    /// all of them: one handle opening and closing the page file would silently end another
    /// handle's shrink lock (then a writer may cut the file under a live snapshot: SIGBUS), or its
    /// "alive" lock. Linux's open file description locks (since 3.15) belong to the descriptor's
    /// open file instead, and close only with it; across processes they conflict with each other
    /// and with classic locks alike, so processes of older builds still see them. (They also
    /// conflict between two descriptors of one process: the behaviour of two processes, which is
    /// what two environments of one file are.) Elsewhere, classic locks, and the environment
    /// registry avoids opening a second descriptor of a file it has open (Environment.open).
    #if os(Linux)
    static let lockCommands: (get: Int32, set: Int32, setWait: Int32) = (36, 37, 38)  // F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW
    #else
    static let lockCommands: (get: Int32, set: Int32, setWait: Int32) = (F_GETLK, F_SETLK, F_SETLKW)
    #endif

    private func lockRequest(_ type: Int32, offset: Int64, length: Int64) -> flock {
        var fl = flock()  // l_pid 0, as open file description locks require
        fl.l_type = Int16(type)
        fl.l_whence = Int16(SEEK_SET)
        fl.l_start = off_t(offset)
        fl.l_len = off_t(length)
        return fl
    }

    func lock(offset: Int64, length: Int64, exclusive: Bool, wait: Bool) throws -> Bool {
        var fl = lockRequest(exclusive ? F_WRLCK : F_RDLCK, offset: offset, length: length)
        while true {
            if fcntl(fd, wait ? Self.lockCommands.setWait : Self.lockCommands.set, &fl) == 0 { return true }
            let err = errno
            if err == EINTR { continue }
            if !wait && (err == EAGAIN || err == EACCES) { return false }
            throw StorageError.io(operation: "fcntl lock", path: path, errno: err)
        }
    }

    func unlock(offset: Int64, length: Int64) {
        var fl = lockRequest(F_UNLCK, offset: offset, length: length)
        _ = fcntl(fd, Self.lockCommands.set, &fl)
    }

    /// Whether someone else holds a lock on the bytes at `offset` that an exclusive lock would
    /// conflict with (F_GETLK: takes no lock); nil when the file system cannot say.
    func isLockedByOthers(offset: Int64, length: Int64 = 1) -> Bool? {
        var fl = lockRequest(F_WRLCK, offset: offset, length: length)
        guard fcntl(fd, Self.lockCommands.get, &fl) == 0 else { return nil }
        return fl.l_type != Int16(F_UNLCK)
    }

    /// How others hold the range, in one query (two would race with a holder changing between
    /// them): `.exclusive` when some holder has it exclusively, `.shared` when some hold it
    /// shared only, `.free`; nil when the system cannot tell.
    func othersHold(offset: Int64, length: Int64 = 1) -> LockHolding? {
        var fl = lockRequest(F_WRLCK, offset: offset, length: length)
        guard fcntl(fd, Self.lockCommands.get, &fl) == 0 else { return nil }
        switch Int32(fl.l_type) {
        case F_UNLCK: return .free
        case F_WRLCK: return .exclusive
        default: return .shared
        }
    }
}

/// How other holders hold a lock range (`PosixFile.othersHold`).
enum LockHolding { case free, shared, exclusive }

struct FileIdentity: Hashable, Sendable {
    var device: UInt64
    var inode: UInt64

    init(_ st: stat) {
        device = UInt64(st.st_dev)
        inode = UInt64(st.st_ino)
    }

    /// The identity of the file `path` names now (symbolic links followed), nil when it names none.
    init?(path: String) {
        var st = stat()
        if stat(path, &st) != 0 { return nil }
        self.init(st)
    }
}

extension PosixFile {
    static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }
}
