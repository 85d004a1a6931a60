#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Sleeping until a 32-bit word of shared memory changes, and waking the sleepers: the kernel's
// own wait-on-address, which works across processes on a MAP_SHARED mapping of one file (the
// lock file's commit signal, FORMAT.md §6). A sleeper costs nothing until a commit wakes it.
//
// - Linux: futex(2), FUTEX_WAIT / FUTEX_WAKE without FUTEX_PRIVATE_FLAG (the futex is keyed by
//   the file's page, so processes that map the lock file share it). glibc has no futex wrapper
//   and Swift does not import the variadic syscall(2), so its entry point is called through a
//   non-variadic C function type (see `LinuxFutex`).
// - Apple platforms: os_sync_wait_on_address_with_timeout / os_sync_wake_by_address_all with the
//   SHARED flags (<os/os_sync_wait_on_address.h>, public since macOS 14.4 and iOS 17.4; this
//   package requires macOS 15 and iOS 18). Looked up with dlsym rather than imported, because the
//   header belongs to no module the Darwin overlay is guaranteed to export on every SDK; the
//   calling convention is the plain C one either way.
// - Anything else, or a lookup that fails: the wait sleeps 2 ms and the caller looks again
//   (correct, a little slower, and a small cost while waiting).

enum AddressWait {
    /// Sleeps while the u32 at `address` equals `expected`, at most `milliseconds`. May return
    /// early (a wake-up, a signal, a change): callers re-read the word and decide.
    static func wait(_ address: UnsafeMutableRawPointer, expected: UInt32, milliseconds: Int) {
        #if os(Linux)
        if let futex = LinuxFutex.shared {
            var timeout = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
            _ = withUnsafePointer(to: &timeout) { futex.call(address, LinuxFutex.wait, expected, UnsafeRawPointer($0)) }
            return
        }
        #elseif canImport(Darwin)
        if let darwin = DarwinWaitOnAddress.shared {
            _ = darwin.wait(
                address, UInt64(expected), 4, DarwinWaitOnAddress.shared_, DarwinWaitOnAddress.machAbsoluteClock,
                UInt64(milliseconds) * 1_000_000)
            return
        }
        #endif
        fallbackWait(address, expected: expected, milliseconds: milliseconds)
    }

    /// Wakes every thread of every process sleeping in `wait` on `address`.
    static func wakeAll(_ address: UnsafeMutableRawPointer) {
        #if os(Linux)
        if let futex = LinuxFutex.shared {
            _ = futex.call(address, LinuxFutex.wake, UInt32(Int32.max), nil)
        }
        #elseif canImport(Darwin)
        if let darwin = DarwinWaitOnAddress.shared {
            _ = darwin.wakeAll(address, 4, DarwinWaitOnAddress.shared_)
        }
        #endif
    }

    /// Whether waiting sleeps in the kernel (false: the 2 ms fallback).
    static var isNative: Bool {
        #if os(Linux)
        return LinuxFutex.shared != nil
        #elseif canImport(Darwin)
        return DarwinWaitOnAddress.shared != nil
        #else
        return false
        #endif
    }

    /// Sleeps one 2 ms step: the caller looks again. (It does not read the word: a caller may
    /// sleep on an address that is unmapped meanwhile, which the kernel calls answer safely.)
    private static func fallbackWait(_ address: UnsafeMutableRawPointer, expected: UInt32, milliseconds: Int) {
        usleep(UInt32(min(milliseconds, 2) * 1_000))
    }
}

#if os(Linux)
/// futex(2) through glibc's (or musl's) syscall(2).
///
/// Calling the variadic `syscall` through a non-variadic function pointer is sound here: both libc
/// implementations only move their integer arguments into the system call's registers, and on
/// the Linux ABIs Swift supports (x86_64 System V, AArch64 AAPCS64) integer arguments to a
/// variadic function travel in the same registers and stack slots as to a non-variadic one (the
/// x86_64 `%al` count of vector registers is read only by callees that use `va_start` with
/// floating-point arguments, which `syscall` never has).
struct LinuxFutex: Sendable {
    typealias Syscall = @convention(c) (Int, UnsafeMutableRawPointer?, Int32, UInt32, UnsafeRawPointer?, UnsafeMutableRawPointer?, UInt32) -> Int

    static let wait: Int32 = 0  // FUTEX_WAIT (shared: no FUTEX_PRIVATE_FLAG)
    static let wake: Int32 = 1  // FUTEX_WAKE

    #if arch(x86_64)
    static let number: Int? = 202
    #elseif arch(arm64)
    static let number: Int? = 98
    #else
    static let number: Int? = nil
    #endif

    let entry: Syscall
    let futex: Int

    static let shared: LinuxFutex? = {
        guard let futex = number, let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "syscall") else { return nil }
        return LinuxFutex(entry: unsafeBitCast(symbol, to: Syscall.self), futex: futex)
    }()

    func call(_ address: UnsafeMutableRawPointer, _ op: Int32, _ value: UInt32, _ timeout: UnsafeRawPointer?) -> Int {
        entry(futex, address, op, value, timeout, nil, 0)
    }
}
#endif

#if canImport(Darwin)
/// os_sync_wait_on_address_with_timeout and os_sync_wake_by_address_all (macOS 14.4, iOS 17.4,
/// tvOS 17.4, watchOS 10.4, visionOS 1.1 and later).
struct DarwinWaitOnAddress: Sendable {
    /// int os_sync_wait_on_address_with_timeout(void *addr, uint64_t value, size_t size,
    ///     os_sync_wait_on_address_flags_t flags, os_clockid_t clockid, uint64_t timeout_ns)
    typealias Wait = @convention(c) (UnsafeMutableRawPointer?, UInt64, Int, UInt32, UInt32, UInt64) -> Int32
    /// int os_sync_wake_by_address_all(void *addr, size_t size, os_sync_wake_by_address_flags_t flags)
    typealias Wake = @convention(c) (UnsafeMutableRawPointer?, Int, UInt32) -> Int32

    /// OS_SYNC_WAIT_ON_ADDRESS_SHARED and OS_SYNC_WAKE_BY_ADDRESS_SHARED (both 1): the address is
    /// in memory shared between processes.
    static let shared_: UInt32 = 1
    /// OS_CLOCK_MACH_ABSOLUTE_TIME; the timeout is in nanoseconds.
    static let machAbsoluteClock: UInt32 = 32

    let wait: Wait
    let wakeAll: Wake

    static let shared: DarwinWaitOnAddress? = {
        guard let handle = dlopen(nil, RTLD_NOW),
            let wait = dlsym(handle, "os_sync_wait_on_address_with_timeout"),
            let wake = dlsym(handle, "os_sync_wake_by_address_all")
        else { return nil }
        return DarwinWaitOnAddress(wait: unsafeBitCast(wait, to: Wait.self), wakeAll: unsafeBitCast(wake, to: Wake.self))
    }()
}
#endif
