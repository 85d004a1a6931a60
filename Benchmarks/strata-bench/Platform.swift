// Small POSIX helpers: clocks, stderr, files and directories, threads and child processes.
// The harness, the kv suite and the LMDB and SQLite bindings import no Foundation; only the objects
// suite's model and adapters do (the `Item` struct has a `Data` field, as an app's model would).
// Every child process loads the same libraries (Strata links Foundation), and the report shows the
// RSS each had before its engine opened.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// An error the bench reports and exits on.
struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

// MARK: Time

/// Seconds on the monotonic clock (the clock `perf record -k CLOCK_MONOTONIC` stamps samples with).
@inline(__always)
func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// CPU time (user + system) of this process so far, all threads.
func processCPUSeconds() -> Double {
    var usage = rusage()
    #if canImport(Glibc)
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    #else
    getrusage(RUSAGE_SELF, &usage)
    #endif
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// The current UTC time as `2026-11-29T14:07:40Z`.
func utcTimestamp() -> String {
    var now = time(nil)
    var parts = tm()
    gmtime_r(&now, &parts)
    func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
    return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
}

// MARK: Output

/// Writes `text` to a file descriptor, unbuffered, retrying short writes.
func writeAll(fd: Int32, _ text: String) {
    var bytes = Array(text.utf8)
    bytes.withUnsafeMutableBytes { buffer in
        var offset = 0
        while offset < buffer.count {
            let n = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            offset += n
        }
    }
}

/// One line on stderr (progress, notices, errors).
func note(_ line: String) { writeAll(fd: 2, line + "\n") }

/// One line on stdout.
func out(_ line: String) { writeAll(fd: 1, line + "\n") }

func errnoText(_ code: Int32 = errno) -> String { String(cString: strerror(code)) }

// MARK: Files

/// Size in bytes of the file at `path`, or nil when it does not exist.
func fileSize(_ path: String) -> UInt64? {
    var st = stat()
    if stat(path, &st) != 0 { return nil }
    return UInt64(st.st_size)
}

func isDirectory(_ path: String) -> Bool {
    var st = stat()
    return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
}

/// Creates `path` (and missing parents) as a directory.
func makeDirectories(_ path: String) throws {
    if isDirectory(path) { return }
    if let slash = path.lastIndex(of: "/"), slash != path.startIndex {
        try makeDirectories(String(path[..<slash]))
    }
    if mkdir(path, 0o755) != 0 && errno != EEXIST {
        throw BenchError("cannot create directory \(path): \(errnoText())")
    }
}

/// A fresh directory under $TMPDIR (or /tmp).
func makeTemporaryDirectory(prefix: String) throws -> String {
    let base = getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
    var template = Array("\(base)/\(prefix)XXXXXX".utf8CString)
    let made = template.withUnsafeMutableBufferPointer { buffer -> Bool in
        guard let base = buffer.baseAddress else { return false }
        return mkdtemp(base) != nil
    }
    if !made { throw BenchError("cannot create a temporary directory under \(base): \(errnoText())") }
    return template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

/// A Strata database's files that hold its data: the page file and its commit log (which, once
/// a commit used it, stays as large as it grew, up to 16 MiB, until the last process closes the
/// file), as SQLite's are the database and its WAL. (The lock file holds no data.)
func strataDataFiles(_ path: String) -> [String] { [path, path + "-log"] }

/// Whether `directory` is on a filesystem held in memory (tmpfs, ramfs), where a sync does
/// nothing: durable-commit figures measured there say nothing about a disk. Read from the mount
/// table: the mount point that is the longest prefix of the directory's real path.
func isMemoryFilesystem(_ directory: String) -> Bool {
    guard let resolved = realpath(directory, nil) else { return false }
    let path = String(cString: resolved)
    free(resolved)
    guard let mounts = readSmallFile("/proc/self/mounts") else { return false }
    var best = (length: -1, type: "")
    for line in mounts.split(separator: "\n") {
        let fields = line.split(separator: " ")
        guard fields.count >= 3 else { continue }
        // (Spaces in a mount point are written \040; such a mount is simply not matched.)
        let point = String(fields[1])
        let inside = point == "/" || path == point || path.hasPrefix(point + "/")
        if inside && point.count > best.length { best = (point.count, String(fields[2])) }
    }
    return best.type == "tmpfs" || best.type == "ramfs"
}

/// Removes a file; a missing file is fine.
func removeFile(_ path: String) {
    _ = unlink(path)
}

/// Removes a directory and everything in it.
func removeTree(_ path: String) {
    if let dir = opendir(path) {
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name == "." || name == ".." { continue }
            let child = path + "/" + name
            if isDirectory(child) { removeTree(child) } else { _ = unlink(child) }
        }
        closedir(dir)
    }
    _ = rmdir(path)
}

/// Absolute path of the running executable.
func executablePath() -> String? {
    var buffer = [CChar](repeating: 0, count: 4096)
    let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    if n <= 0 { return nil }
    return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// The whole text of a small file (for /proc files), or nil.
func readSmallFile(_ path: String) -> String? {
    let fd = open(path, O_RDONLY)
    if fd < 0 { return nil }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { break }
        bytes.append(contentsOf: chunk[0..<n])
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// Writes `text` to `path`, replacing it.
func writeFile(_ path: String, _ text: String) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    if fd < 0 { throw BenchError("cannot write \(path): \(errnoText())") }
    writeAll(fd: fd, text)
    close(fd)
}

// MARK: Machine

func cpuCount() -> Int { max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN))) }

/// "Linux 6.1.0 x86_64", from uname.
func systemDescription() -> String {
    var u = utsname()
    uname(&u)
    func field<T>(_ value: T) -> String {
        withUnsafeBytes(of: value) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
    }
    return "\(field(u.sysname)) \(field(u.release)) \(field(u.machine))"
}

/// The CPU model from /proc/cpuinfo, when there is one.
func cpuModel() -> String? {
    guard let info = readSmallFile("/proc/cpuinfo") else { return nil }
    for line in info.split(separator: "\n") where line.hasPrefix("model name") {
        if let colon = line.firstIndex(of: ":") {
            return line[line.index(after: colon)...].trimmingCharacters(in: " \t")
        }
    }
    return nil
}

extension Substring {
    func trimmingCharacters(in set: String) -> String {
        let drop = Set(set)
        var s = self[...]
        while let c = s.first, drop.contains(c) { s = s.dropFirst() }
        while let c = s.last, drop.contains(c) { s = s.dropLast() }
        return String(s)
    }
}

// MARK: Threads

/// The first error thrown by any thread of `runOnThreads`.
private final class ThreadFailure: Sendable {
    let first = Mutex<(any Error)?>(nil)
}

/// What one thread of `runOnThreads` runs, passed through pthread_create's context pointer.
private final class ThreadJob: Sendable {
    let index: Int
    let body: @Sendable (Int) throws -> Void
    let failure: ThreadFailure

    init(index: Int, body: @escaping @Sendable (Int) throws -> Void, failure: ThreadFailure) {
        self.index = index
        self.body = body
        self.failure = failure
    }

    func run() {
        do {
            try body(index)
        } catch {
            failure.first.withLock { if $0 == nil { $0 = error } }
        }
    }
}

/// Runs `body(0) ... body(count - 1)` on `count` new threads at once and waits for all of them.
/// Rethrows the first error any of them threw.
func runOnThreads(_ count: Int, _ body: @escaping @Sendable (Int) throws -> Void) throws {
    let failure = ThreadFailure()
    var threads: [pthread_t] = []
    for i in 0..<count {
        let context = Unmanaged.passRetained(ThreadJob(index: i, body: body, failure: failure)).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(
            &thread, nil,
            { raw in
                if let raw { Unmanaged<ThreadJob>.fromOpaque(raw).takeRetainedValue().run() }
                return nil
            }, context)
        if rc != 0 {
            Unmanaged<ThreadJob>.fromOpaque(context).release()
            for t in threads { pthread_join(t, nil) }
            throw BenchError("pthread_create failed: \(errnoText(rc))")
        }
        threads.append(thread)
    }
    for t in threads { pthread_join(t, nil) }
    if let error = failure.first.withLock({ $0 }) { throw error }
}
