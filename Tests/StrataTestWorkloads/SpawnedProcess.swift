// A child process for the kill and multi-process tests, started with posix_spawn and reaped here.
//
// Not Foundation's `Process`: on Linux it learns of a child's death when a socket the child holds
// closes, and that socket (like its pipes) is created without close-on-exec. A process another
// test spawns at the same moment can inherit it (Foundation closes only the descriptors open when
// it looked), and then `isRunning` stays true until that other process exits: a child killed at
// once looked alive for a minute in CI. Here the pipes are close-on-exec (only the child's
// standard streams are passed on), every other descriptor is closed in the child, and `waitpid`
// on this pid says when it has ended.

import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

public struct SpawnError: Error, CustomStringConvertible {
    public let description: String
}

/// A running child with pipes on its standard input, output and error.
///
/// `@unchecked Sendable`: the pid, descriptors and path never change after `init`; the wait
/// status, the only state that does, is read and written under `lock`, which also orders a signal
/// before the reaping that would free the pid for reuse.
public final class SpawnedProcess: @unchecked Sendable {
    public let pid: pid_t
    /// Read ends of its standard output and error, write end of its standard input.
    public let outputFD: Int32
    public let errorFD: Int32
    public let inputFD: Int32
    private let lock = NSLock()
    private var waitStatus: Int32?
    private var signalledAt: Date?

    /// A write to the stdin of a child that has exited fails with EPIPE instead of killing this
    /// process with SIGPIPE (set once, for the whole test process).
    private static let ignoreBrokenPipes: Void = { signal(SIGPIPE, SIG_IGN) }()

    public init(executable: String, arguments: [String]) throws {
        SpawnedProcess.ignoreBrokenPipes
        var output: [Int32] = [-1, -1]
        var errors: [Int32] = [-1, -1]
        var input: [Int32] = [-1, -1]
        guard SpawnedProcess.makePipe(&output), SpawnedProcess.makePipe(&errors), SpawnedProcess.makePipe(&input) else {
            let code = errno
            for fd in output + errors + input where fd >= 0 { close(fd) }
            throw SpawnError(description: "pipe2 failed: errno \(code)")
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // dup2 clears close-on-exec on the copies: the child keeps exactly these three.
        posix_spawn_file_actions_adddup2(&actions, input[0], 0)
        posix_spawn_file_actions_adddup2(&actions, output[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errors[1], 2)
        SpawnedProcess.closeEverythingElse(&actions)
        let argv = ([executable] + arguments).map { strdup($0) }
        defer { for arg in argv { free(arg) } }
        var pointers: [UnsafeMutablePointer<CChar>?] = argv + [nil]
        var child: pid_t = 0
        let result = pointers.withUnsafeMutableBufferPointer { args in
            posix_spawn(&child, executable, &actions, nil, args.baseAddress!, environ)
        }
        // The parent keeps only its ends.
        close(input[0])
        close(output[1])
        close(errors[1])
        guard result == 0 else {
            close(input[1])
            close(output[0])
            close(errors[0])
            throw SpawnError(description: "posix_spawn \(executable) failed: errno \(result)")
        }
        pid = child
        outputFD = output[0]
        errorFD = errors[0]
        inputFD = input[1]
    }

    deinit {
        lock.lock()
        if waitStatus == nil {
            Foundation.kill(pid, SIGKILL)
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            waitStatus = status
        }
        lock.unlock()
        close(outputFD)
        close(errorFD)
        close(inputFD)
    }

    /// A pipe whose ends are close-on-exec from the start (`pipe2`, looked up at run time: the
    /// Glibc module does not declare it), so that no process spawned meanwhile inherits them;
    /// elsewhere `pipe` then `fcntl`.
    private static func makePipe(_ fds: inout [Int32]) -> Bool {
        #if os(Linux)
        typealias Pipe2 = @convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32
        if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pipe2") {
            return fds.withUnsafeMutableBufferPointer { unsafeBitCast(symbol, to: Pipe2.self)($0.baseAddress!, O_CLOEXEC) } == 0
        }
        #endif
        guard pipe(&fds) == 0 else { return false }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return true
    }

    /// Closes every descriptor above the standard three in the child, where the C library can
    /// (`posix_spawn_file_actions_addclosefrom_np`, glibc 2.34, looked up at run time because the
    /// Glibc module does not declare it); elsewhere the child's copies of this process's other
    /// descriptors stay open, as with Foundation's `Process`.
    private static func closeEverythingElse(_ actions: inout posix_spawn_file_actions_t) {
        #if os(Linux)
        typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else { return }
        _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3)
        #endif
    }

    /// Reaps it if it has ended (no wait). Called with `lock` held.
    private func poll() {
        guard waitStatus == nil else { return }
        var status: Int32 = 0
        var result: pid_t
        repeat { result = waitpid(pid, &status, WNOHANG) } while result == -1 && errno == EINTR
        if result == pid { waitStatus = status }
    }

    public var isRunning: Bool {
        lock.lock()
        defer { lock.unlock() }
        poll()
        return waitStatus == nil
    }

    /// The signal that ended it, if one did (nil while it runs or after a normal exit).
    public var terminatingSignal: Int32? {
        lock.lock()
        defer { lock.unlock() }
        poll()
        guard let status = waitStatus, status & 0x7f != 0, status & 0x7f != 0x7f else { return nil }
        return status & 0x7f
    }

    /// Its exit code, if it exited by itself (nil while it runs or after a signal).
    public var exitCode: Int32? {
        lock.lock()
        defer { lock.unlock() }
        poll()
        guard let status = waitStatus, status & 0x7f == 0 else { return nil }
        return (status >> 8) & 0xff
    }

    /// "running", "exit N" or "signal N".
    public var statusDescription: String {
        if let code = exitCode { return "exit \(code)" }
        if let signal = terminatingSignal { return "signal \(signal)" }
        return "running"
    }

    /// Sends `signal` unless it has been reaped (its pid could belong to another process by then).
    public func send(_ signal: Int32) {
        lock.lock()
        defer { lock.unlock() }
        poll()
        if waitStatus == nil {
            Foundation.kill(pid, signal)
            if signalledAt == nil { signalledAt = Date() }
        }
    }

    /// When it was first sent a signal (nil: never).
    public var firstSignal: Date? {
        lock.lock()
        defer { lock.unlock() }
        return signalledAt
    }

    /// What the kernel says it is doing, for a message about a child that does not end: its
    /// state (R running, S sleeping, D in an uninterruptible wait, Z dead and not reaped) and the
    /// kernel function it waits in.
    public var kernelState: String {
        func read(_ path: String) -> String {
            (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
        }
        let stat = read("/proc/\(pid)/stat")
        // "pid (comm) S ...": the state follows the command's closing parenthesis.
        let state = stat.lastIndex(of: ")").map { String(stat[stat.index(after: $0)...].prefix(3)).trimmingCharacters(in: .whitespaces) } ?? stat
        return "state \(state), waiting in \(read("/proc/\(pid)/wchan"))"
    }

    /// SIGKILL after `microseconds`, timed on a thread of its own: a test's task and Dispatch's
    /// global queue share one pool on Linux, which long synchronous tests can keep busy.
    public func kill(afterMicroseconds microseconds: Int) {
        let timer = Thread { [self] in
            usleep(useconds_t(max(0, microseconds)))
            send(SIGKILL)
        }
        timer.start()
    }
}
