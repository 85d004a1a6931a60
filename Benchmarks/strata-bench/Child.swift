// Each engine's phase runs in a child process: the bench re-executes itself as
// `strata-bench engine SUITE ENGINE [options]`, so that peak RSS is per engine and one engine's
// heap, map and page-cache warmth do not carry over into the next one's numbers.
//
// The child prints tab-separated lines on stdout, which the parent parses:
//   info     KEY VALUE
//   result   WORKLOAD OPS SECONDS COUNT|- CHECKSUM|- CPU_SECONDS
//   size     ID BYTES
//   stat     WORKLOAD KEY VALUE       (after the workload's result line; Resources.swift)
//   rss      PEAK_BYTES BASELINE_BYTES
//   meter    KEY VALUE                how the child measured (peak RSS reset, /proc/self/io, sampler)
//   problem  TEXT
// and its progress lines on stderr, which pass straight through to the terminal.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Everything one engine's child process reported.
struct EngineRun: Sendable {
    let engine: EngineInfo
    var info: [(String, String)] = []
    /// The best round of each workload (highest ops/s).
    var results: [String: Measurement] = [:]
    /// Every round of each workload, in the order run.
    var rounds: [String: [Measurement]] = [:]
    /// The least CPU time any round of each workload took.
    var leastCPU: [String: Double] = [:]
    var sizes: [String: UInt64] = [:]
    /// Peak RSS of the child process (VmHWM), and its peak before the engine opened.
    var peakRSS: UInt64?
    var baselineRSS: UInt64?
    var problems: [String] = []
    /// How the child measured: "peak_rss_reset" → "yes", "proc_io" → "yes", "sample_ms" → "5".
    var meters: [String: String] = [:]
    /// Sync and write syscalls per workload, counted under strace in a separate pass (`--syscalls`).
    var syscalls: [String: [String: UInt64]] = [:]
    /// Set when the child failed; the other fields hold what it reported before.
    var failure: String?

    init(engine: EngineInfo) { self.engine = engine }

    /// Folds in another round of the same engine: best ops/s per workload, largest peak RSS, every
    /// problem, and a problem when a round's counts or checksums differ from an earlier round's.
    mutating func absorb(_ round: EngineRun) {
        if !round.info.isEmpty { info = round.info }
        for (id, m) in round.results {
            if let previous = rounds[id]?.last, previous.count != m.count || previous.checksum != m.checksum {
                problems.append("\(id): rounds disagree (count \(previous.count.map(String.init) ?? "-") vs \(m.count.map(String.init) ?? "-"))")
            }
            rounds[id, default: []].append(m)
            if let cpu = m.cpuSeconds { leastCPU[id] = min(leastCPU[id] ?? cpu, cpu) }
            if let best = results[id], best.opsPerSecond >= m.opsPerSecond { continue }
            results[id] = m
        }
        for (id, bytes) in round.sizes { sizes[id] = bytes }
        for (key, value) in round.meters { meters[key] = value }
        if let peak = round.peakRSS { peakRSS = max(peakRSS ?? 0, peak) }
        if let base = round.baselineRSS { baselineRSS = max(baselineRSS ?? 0, base) }
        problems += round.problems
        if failure == nil { failure = round.failure }
    }

    mutating func parse(_ output: String) {
        for line in output.split(separator: "\n", omittingEmptySubsequences: true) {
            let f = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            switch f.first {
            case "info" where f.count >= 3:
                info.append((f[1], f[2]))
            case "result" where f.count >= 6:
                guard let ops = Int(f[2]), let seconds = Double(f[3]) else {
                    problems.append("unreadable result line from the \(engine.id) process: \(line)")
                    continue
                }
                results[f[1]] = Measurement(
                    ops: ops, seconds: seconds, count: Int(f[4]), checksum: UInt64(f[5]),
                    cpuSeconds: f.count > 6 ? Double(f[6]) : nil)
            case "stat" where f.count >= 4:
                guard results[f[1]] != nil, let value = UInt64(f[3]) else {
                    problems.append("unreadable stat line from the \(engine.id) process: \(line)")
                    continue
                }
                results[f[1]]?.stats[f[2]] = value
            case "meter" where f.count >= 3:
                meters[f[1]] = f[2]
            case "size" where f.count >= 3:
                sizes[f[1]] = UInt64(f[2])
            case "rss" where f.count >= 3:
                peakRSS = UInt64(f[1])
                baselineRSS = UInt64(f[2]).flatMap { $0 == 0 ? nil : $0 }
            case "problem" where f.count >= 2:
                problems.append(f[1])
            default:
                problems.append("unexpected line from the \(engine.id) process: \(line)")
            }
        }
    }
}

/// Runs `strata-bench engine SUITE ENGINE ...` and collects what it reports. With `strace` (the
/// path of strace), the child runs under it with workload markers and the run's `syscalls` hold
/// what it counted (Syscalls.swift).
func runEngineProcess(suite: String, engine: EngineInfo, options: BenchOptions, strace: String? = nil) throws -> EngineRun {
    guard let exe = executablePath() else { throw BenchError("cannot find this executable (/proc/self/exe)") }
    var args = [
        "engine", suite, engine.id, "--n", "\(options.n)", "--dir", options.directory, "--seed", "\(options.seed)",
        "--sample-ms", "\(options.sampleMilliseconds)",
    ]
    if let pageSize = options.pageSize { args += ["--page-size", "\(pageSize)"] }
    if options.noCompaction { args.append("--no-compaction") }
    if let workloads = options.workloads { args += ["--workloads", workloads.joined(separator: ",")] }
    if options.showTimes { args.append("--times") }
    var program = exe
    var log: String?
    if let strace {
        let path = options.directory + "/strace-\(suite)-\(engine.id).log"
        args = SyscallTrace.arguments(log: path) + ["--", exe] + args + ["--syscall-markers"]
        program = strace
        log = path
    }
    let (status, output) = try spawnCapturingStdout(program, args)
    var run = EngineRun(engine: engine)
    run.parse(output)
    if status != 0 {
        run.failure =
            status > 0
            ? "the \(engine.id) process exited with status \(status)"
            : "the \(engine.id) process was killed by signal \(-status)"
    }
    if let log {
        if let text = readSmallFile(log) { run.syscalls = SyscallTrace.parse(text) }
        removeFile(log)
    }
    return run
}

/// Spawns `path` with `args`, stdout to a pipe (returned whole), stderr inherited. The status is
/// the exit code, or minus the signal number that killed it.
func spawnCapturingStdout(_ path: String, _ args: [String]) throws -> (status: Int32, output: String) {
    var fds: [Int32] = [-1, -1]
    if pipe(&fds) != 0 { throw BenchError("pipe failed: \(errnoText())") }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
    posix_spawn_file_actions_addclose(&actions, fds[0])
    posix_spawn_file_actions_addclose(&actions, fds[1])

    let argv: [UnsafeMutablePointer<CChar>?] = ([path] + args).map { strdup($0) } + [nil]
    defer { for p in argv { free(p) } }
    var pid = pid_t()
    let rc = posix_spawn(&pid, path, &actions, nil, argv, environ)
    close(fds[1])
    if rc != 0 {
        close(fds[0])
        throw BenchError("cannot start \(path): \(errnoText(rc))")
    }

    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fds[0], $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { break }
        bytes.append(contentsOf: chunk[0..<n])
    }
    close(fds[0])

    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 {
        if errno != EINTR { throw BenchError("waitpid failed: \(errnoText())") }
    }
    let signal = status & 0x7f
    let code: Int32 = signal == 0 ? (status >> 8) & 0xff : -signal
    return (code, String(decoding: bytes, as: UTF8.self))
}
