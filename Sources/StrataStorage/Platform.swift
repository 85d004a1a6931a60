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

@inline(__always) func currentThreadHash() -> UInt {
    UInt(bitPattern: Int(bitPattern: UInt(pthread_self())))
}

func syncDirectoryEntry(_ directory: String) {
    let fd = open(directory, O_RDONLY | O_CLOEXEC)
    if fd >= 0 {
        _ = fsync(fd)
        close(fd)
    }
}
