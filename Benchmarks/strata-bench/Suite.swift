// What every suite shares: its workload rows, its engines, and the measurements an engine's child
// process sends back. Two suites plug in here: `objects` (Strata's object layer beside SQLite and
// LMDB, ObjectWorkloads.swift) and `kv` (StrataStorage beside LMDB, KVWorkloads.swift).

/// One row of a suite's table.
struct WorkloadInfo: Sendable {
    /// Stable name, used by `--workloads`, in JSON and in progress lines.
    let id: String
    /// What one operation is ("insert", "commit", "read"): ops/s counts these.
    let unit: String
    /// The plural of `unit`.
    var units: String { unit.hasSuffix("y") ? unit.dropLast() + "ies" : unit + "s" }
    /// One line for the README and `--help`.
    let summary: String
    /// Whether the report also gives the time per operation (ns per object of the codec workloads).
    var perOp = false
}

/// A reported size (file size after the load, at the end).
struct SizeInfo: Sendable {
    let id: String
    let title: String
}

/// One engine a suite can measure.
struct EngineInfo: Sendable {
    /// Name used by `--engines` and in JSON ("strata", "sqlite", "lmdb").
    let id: String
    /// Column title ("Strata", "SQLite", "LMDB").
    let title: String
}

/// One timed workload on one engine.
struct Measurement: Sendable {
    var ops: Int
    var seconds: Double
    /// A count every engine must agree on (entries counted, keys found), when the workload has one.
    var count: Int?
    /// A checksum of the bytes read, equal across engines when they returned the same data.
    var checksum: UInt64?
    /// CPU time (user + system, all threads) the process spent during the workload: well below
    /// `seconds` for a single-threaded workload means waiting on I/O or being descheduled.
    var cpuSeconds: Double?
    /// What else the child measured around the workload (Resources.swift): "commits", "io_wchar",
    /// "peak_rss", "peak_anon", "file_bytes", ...; and, from a traced pass, "sys_fdatasync", ...
    var stats: [String: UInt64] = [:]

    var opsPerSecond: Double { seconds > 0 ? Double(ops) / seconds : 0 }
}

/// A suite of workloads run on several engines, each engine in a child process of its own.
protocol BenchSuite {
    /// Subcommand name ("objects", "kv").
    static var name: String { get }
    /// One line saying what the suite measures and with which data.
    static func describe(_ options: BenchOptions) -> String
    /// Engines in column order; the first is Strata, whose ratio to each other engine is shown.
    static var engines: [EngineInfo] { get }
    static var workloads: [WorkloadInfo] { get }
    static var sizes: [SizeInfo] { get }
    /// Nil when `engine` can run on this machine, else a one-line notice of why not and how to fix it.
    static func unavailable(_ engine: String) -> String?
    /// Files an engine leaves in the bench directory (removed at the end unless `--keep`).
    static func files(of engine: String, in directory: String) -> [String]
    /// Runs every selected workload on `engine` in this process, reporting through `sink`.
    static func run(engine: String, options: BenchOptions, sink: ResultSink) throws
}

/// Where a child process sends its results: tab-separated lines on stdout, read by the parent
/// (Child.swift). Progress goes to stderr as it happens.
final class ResultSink {
    let engine: String
    let showTimes: Bool
    let meter: WorkloadMeter
    /// The engine's data files, whose sizes are reported after every workload (set by the suite
    /// once the engine is open).
    var dataFiles: [String] = []

    init(engine: String, options: BenchOptions) {
        self.engine = engine
        self.showTimes = options.showTimes
        self.meter = WorkloadMeter(sampleMilliseconds: options.sampleMilliseconds, markers: options.syscallMarkers)
    }

    /// Times `body` (which performs `ops` operations in `commits` write transactions, when it
    /// writes) and reports it as workload `id`, with the count and checksum it returns; `countAfter`
    /// and `checksumAfter`, when given, supply them instead and run after the clock stops (what a
    /// write left, read back, so that an engine that drops writes does not pass). The meter's
    /// readings (Resources.swift) are taken before the clock starts and after it stops.
    func measure(
        _ workload: WorkloadInfo, ops: Int, commits: Int? = nil, countAfter: (() throws -> Int)? = nil,
        checksumAfter: (() throws -> UInt64)? = nil, _ body: () throws -> (count: Int?, checksum: UInt64?)
    ) throws {
        let window = meter.begin(workload.id)
        let samplerStart = meter.samplerCPUSeconds()
        let cpuStart = processCPUSeconds()
        let start = monotonicSeconds()
        var (count, sum) = try body()
        let end = monotonicSeconds()
        let cpuEnd = processCPUSeconds()
        let samplerCPU = meter.samplerCPUSeconds() - samplerStart
        var stats = meter.end(window, files: dataFiles)
        if samplerCPU > 0 { stats.append(("sampler_cpu_ns", UInt64((samplerCPU * 1e9).rounded()))) }
        // The engine's CPU time: the process's, less the memory sampler's (Resources.swift).
        let cpu = max(0, cpuEnd - cpuStart - samplerCPU)
        if let countAfter { count = try countAfter() }
        if let checksumAfter { sum = try checksumAfter() }
        let m = Measurement(ops: ops, seconds: end - start, count: count, checksum: sum, cpuSeconds: cpu)
        var line =
            "[\(engine)] \(pad(workload.id, 22)) \(padLeft(formatInt(ops), 11)) \(workload.units) in \(formatSeconds(m.seconds)): \(formatInt(Int(m.opsPerSecond.rounded())))/s"
        if showTimes { line += "  [monotonic \(formatFixed(start, 3))..\(formatFixed(end, 3))]" }
        note(line)
        out(["result", workload.id, "\(ops)", "\(m.seconds)", count.map { "\($0)" } ?? "-", sum.map { "\($0)" } ?? "-", "\(cpu)"].joined(separator: "\t"))
        if let commits { stat(workload.id, "commits", UInt64(commits)) }
        for (key, value) in stats { stat(workload.id, key, value) }
    }

    /// One more figure of a workload already reported by `measure`.
    func stat(_ workload: String, _ key: String, _ value: UInt64) {
        out("stat\t\(workload)\t\(key.replacingTabs())\t\(value)")
    }

    /// A fact about how this process measured ("peak_rss_reset" → "yes").
    func meterFact(_ key: String, _ value: String) {
        out("meter\t\(key)\t\(value.replacingTabs())")
    }

    func size(_ id: String, bytes: UInt64) {
        out("size\t\(id)\t\(bytes)")
    }

    func info(_ key: String, _ value: String) {
        out("info\t\(key)\t\(value.replacingTabs())")
    }

    /// Something that makes the run invalid (a wrong count); the parent exits non-zero.
    func problem(_ text: String) {
        note("[\(engine)] PROBLEM: \(text)")
        out("problem\t\(text.replacingTabs())")
    }

    /// The process's lifetime peak RSS (the largest VmHWM seen, before and between the per-workload
    /// resets and at the end) and its peak before the engine opened; then how the meter worked.
    func finish(baseline: MemoryUsage?) {
        if let cost = meter.stop() {
            meterFact("sampler_cpu_seconds", "\(cost.cpuSeconds)")
            meterFact("sampler_samples", "\(cost.samples)")
            meterFact("sampler_seconds", "\(cost.seconds)")
        }
        let peak = max(meter.processPeakRSS, MemoryUsage.current()?.peakRSS ?? 0)
        if peak > 0 { out("rss\t\(peak)\t\(baseline?.peakRSS ?? 0)") }
        if let works = meter.peakResetWorks { meterFact("peak_rss_reset", works ? "yes" : "no") }
        meterFact("proc_io", meter.ioAvailable ? "yes" : "no")
        meterFact("sample_ms", "\(meter.sampleMilliseconds)")
    }
}

extension String {
    func replacingTabs() -> String {
        String(map { $0 == "\t" || $0 == "\n" ? " " : $0 })
    }
}
