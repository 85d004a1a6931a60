// `--syscalls`: sync syscalls per workload, for every engine, the peers included.
//
// The peers are loaded with dlopen and their code cannot be instrumented, and nothing in /proc counts
// a process's syncs (/proc/self/io counts reads and writes only). So after the timed rounds the
// parent runs every engine once more, as the same child process, under
//
//   strace -f -qq --seccomp-bpf -e trace=<the syscalls below> -e signal=none -s 0 -o LOG
//
// (no root needed; --seccomp-bpf stops the child only at the traced syscalls). The child, told by
// `--syscall-markers`, calls `access("/strata-bench-marker/begin/WORKLOAD")` right before each
// workload's clock starts and `.../end/WORKLOAD` right after it stops; strace logs those calls with
// their paths, so every traced syscall between the two is the workload's, whichever thread made it.
// The traced pass's timings, memory and sizes are not used: only its syscall counts (and any problem
// it reports: it runs every check again).
//
// A sync is a call of fsync, fdatasync, msync with MS_SYNC, syncfs or sync, or a write to a
// descriptor opened with O_DSYNC or O_SYNC (LMDB writes its meta page through such a descriptor:
// the write returns when the page is on disk, a sync without a sync call). Descriptors are
// followed through open/openat/creat and close only (a dup of an O_DSYNC descriptor would be
// missed; none of the three engines makes one).

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

enum SyscallTrace {
    /// The syscalls strace stops at ("?": no error on an architecture that lacks it).
    static let traced = [
        "fsync", "fdatasync", "msync", "?sync_file_range", "?sync_file_range2", "syncfs", "sync",
        "?open", "openat", "?openat2", "?creat", "close",
        "write", "pwrite64", "writev", "pwritev", "?pwritev2",
        "?access", "faccessat", "?faccessat2",
    ]

    /// Keys of the counts, in report order; `syncs` is their total (see above).
    static let keys = [
        "syncs", "sys_fsync", "sys_fdatasync", "sys_msync_sync", "sys_msync_async", "sys_syncfs", "sys_sync",
        "sys_dsync_writes", "sys_sync_file_range", "sys_writes",
    ]

    /// The strace executable on PATH, or nil.
    static func findStrace() -> String? {
        let path = getenv("PATH").map { String(cString: $0) } ?? "/usr/bin:/bin"
        for dir in path.split(separator: ":") {
            let candidate = "\(dir)/strace"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }

    /// strace's arguments before `--` and the traced command.
    static func arguments(log: String) -> [String] {
        [
            "-f", "-qq", "--seccomp-bpf", "-e", "trace=" + traced.joined(separator: ","), "-e", "signal=none",
            "-s", "0", "-o", log,
        ]
    }

    /// Counts per workload from a log written with `arguments`.
    static func parse(_ log: String) -> [String: [String: UInt64]] {
        var counts: [String: [String: UInt64]] = [:]
        var current: String?
        /// Descriptors opened with O_DSYNC or O_SYNC, and opens waiting for their result, per thread.
        var syncDescriptors = Set<Int>()
        var pendingOpen: [Substring: Bool] = [:]

        func add(_ key: String) {
            guard let current else { return }
            counts[current, default: [:]][key, default: 0] += 1
        }
        func opened(_ line: Substring, synchronous: Bool) {
            guard let fd = returnValue(line), fd >= 0 else { return }
            if synchronous { syncDescriptors.insert(fd) } else { syncDescriptors.remove(fd) }
        }

        for line in log.split(separator: "\n", omittingEmptySubsequences: true) {
            let pid = line.prefix(while: { $0.isNumber })
            let rest = line.dropFirst(pid.count).drop(while: { $0 == " " })
            if rest.hasPrefix("<... ") {
                // "<... openat resumed>) = 5": the end of a call another thread's line interrupted.
                let name = rest.dropFirst(5).prefix(while: { $0 != " " })
                if name == "open" || name == "openat" || name == "openat2" || name == "creat",
                    let synchronous = pendingOpen.removeValue(forKey: pid)
                {
                    opened(rest, synchronous: synchronous)
                }
                continue
            }
            guard let paren = rest.firstIndex(of: "(") else { continue }
            let name = rest[..<paren]
            let args = rest[rest.index(after: paren)...]
            let unfinished = args.hasSuffix("<unfinished ...>")
            switch name {
            case "access", "faccessat", "faccessat2":
                guard let marker = markerPath(args) else { continue }
                if marker.edge == "begin" {
                    current = marker.workload
                    if counts[marker.workload] == nil { counts[marker.workload] = [:] }
                } else if current == marker.workload {
                    current = nil
                }
            case "open", "openat", "openat2", "creat":
                let synchronous = name != "creat" && (contains(args, "O_DSYNC") || contains(args, "O_SYNC"))
                if unfinished { pendingOpen[pid] = synchronous } else { opened(args, synchronous: synchronous) }
            case "close":
                if let fd = firstNumber(args) { syncDescriptors.remove(fd) }
            case "write", "pwrite64", "writev", "pwritev", "pwritev2":
                add("sys_writes")
                if let fd = firstNumber(args), syncDescriptors.contains(fd) {
                    add("sys_dsync_writes")
                    add("syncs")
                }
            case "fsync", "fdatasync", "syncfs", "sync":
                add("sys_" + name)
                add("syncs")
            case "msync":
                if contains(args, "MS_SYNC") {
                    add("sys_msync_sync")
                    add("syncs")
                } else {
                    add("sys_msync_async")
                }
            case "sync_file_range", "sync_file_range2":
                add("sys_sync_file_range")
            default:
                break
            }
        }
        // Every workload between markers has every key, zeros included.
        for (workload, c) in counts {
            var all = c
            for key in keys where all[key] == nil { all[key] = 0 }
            counts[workload] = all
        }
        return counts
    }

    /// The marker in `access("/strata-bench-marker/begin/individual_writes", F_OK) = -1 ENOENT`.
    private static func markerPath(_ args: Substring) -> (edge: String, workload: String)? {
        guard let start = find(args, "\"" + syscallMarkerPrefix) else { return nil }
        let path = args[start...].dropFirst(1 + syscallMarkerPrefix.count).prefix(while: { $0 != "\"" })
        let parts = path.split(separator: "/", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        return (String(parts[0]), String(parts[1]))
    }

    /// The leading decimal number of the arguments (a descriptor).
    private static func firstNumber(_ args: Substring) -> Int? {
        Int(args.prefix(while: { $0.isNumber }))
    }

    /// The result after the last " = ", when it is a number.
    private static func returnValue(_ line: Substring) -> Int? {
        var i = line.endIndex
        while i > line.startIndex {
            i = line.index(before: i)
            if line[i...].hasPrefix(" = ") {
                let value = line[line.index(i, offsetBy: 3)...].prefix(while: { $0 == "-" || $0.isNumber })
                return Int(value)
            }
        }
        return nil
    }

    private static func contains(_ s: Substring, _ needle: String) -> Bool { find(s, needle) != nil }

    private static func find(_ s: Substring, _ needle: String) -> Substring.Index? {
        guard let first = needle.first else { return s.startIndex }
        var i = s.startIndex
        while let hit = s[i...].firstIndex(of: first) {
            if s[hit...].hasPrefix(needle) { return hit }
            i = s.index(after: hit)
        }
        return nil
    }
}
