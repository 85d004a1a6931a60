#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Thin wrappers so files that only need one libc call keep their imports small.

@inline(__always) func memcmpRaw(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, _ n: Int) -> Int32 {
    memcmp(a, b, n)
}

@inline(__always) func currentPID() -> UInt64 { UInt64(getpid()) }

/// Whether a process with this pid exists (kill with signal 0; EPERM means it exists).
func processIsAlive(_ pid: UInt64) -> Bool {
    if pid == 0 || pid > UInt64(Int32.max) { return false }
    if kill(pid_t(pid), 0) == 0 { return true }
    return errno == EPERM
}

/// The calling thread's identity (its pthread_t as a number; never 0 for a running thread).
@inline(__always) package func currentThreadHash() -> UInt {
    UInt(bitPattern: Int(bitPattern: UInt(pthread_self())))
}

/// Syncs the directory holding `path`, so that a name just linked or renamed there survives a
/// power loss. Filesystems that cannot sync a directory (EINVAL) are taken at their word.
func syncDirectory(containing path: String) throws {
    var directory = String(path.reversed().drop { $0 != "/" }.reversed())
    if directory.isEmpty { directory = "." }
    let fd = open(directory, O_RDONLY | O_CLOEXEC)
    if fd < 0 { throw StorageError.io(operation: "open directory", path: directory, errno: errno) }
    defer { close(fd) }
    if fsync(fd) != 0 && errno != EINVAL {
        throw StorageError.io(operation: "fsync directory", path: directory, errno: errno)
    }
}

/// Unmaps memory mapped from a file whose descriptor is already closed.
func unmapMemory(_ address: UInt, length: Int) {
    if let pointer = UnsafeMutableRawPointer(bitPattern: address) { munmap(pointer, length) }
}

/// Removes the name `path`, if there is one.
func unlinkFile(_ path: String) {
    _ = unlink(path)
}

/// The calling thread's id as the system lists it (Linux: its task id in /proc/self/task), nil
/// when it cannot be read.
func currentThreadID() -> Int? {
    #if canImport(Darwin)
    var id: UInt64 = 0
    return pthread_threadid_np(nil, &id) == 0 ? Int(truncatingIfNeeded: id) : nil
    #else
    // "/proc/thread-self" links to "PID/task/TID".
    var buffer = [CChar](repeating: 0, count: 64)
    let length = readlink("/proc/thread-self", &buffer, buffer.count - 1)
    guard length > 0 else { return nil }
    let target = String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return target.split(separator: "/").last.flatMap { Int($0) }
    #endif
}

/// Runs `body` on a new detached thread named `name`; false when no thread could be made.
func startThread(name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
    final class Start: Sendable {
        let name: String
        let body: @Sendable () -> Void
        init(_ name: String, _ body: @escaping @Sendable () -> Void) { self.name = name; self.body = body }
        func run() {
            #if canImport(Darwin)
            _ = pthread_setname_np(name)
            #else
            // Glibc's module exports neither pthread_setname_np nor (variadic) prctl; a thread may
            // write its own name, at most 15 bytes, where `top` and `perf` show it.
            let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
            if fd >= 0 {
                _ = Array(name.utf8.prefix(15)).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                close(fd)
            }
            #endif
            body()
        }
    }
    let argument = Unmanaged.passRetained(Start(name, body)).toOpaque()
    #if canImport(Darwin)
    var thread: pthread_t?
    let result = pthread_create(
        &thread, nil,
        { argument in
            Unmanaged<Start>.fromOpaque(argument).takeRetainedValue().run()
            return nil
        }, argument)
    if result == 0, let thread { pthread_detach(thread) }
    #else
    var thread = pthread_t()
    let result = pthread_create(
        &thread, nil,
        { argument in
            if let argument { Unmanaged<Start>.fromOpaque(argument).takeRetainedValue().run() }
            return nil
        }, argument)
    if result == 0 { pthread_detach(thread) }
    #endif
    if result != 0 {
        Unmanaged<Start>.fromOpaque(argument).release()
        return false
    }
    return true
}
