import StrataStorage
// Command-line options.

/// A mistake on the command line: reported with a pointer to `help`, exit status 2.
struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

struct BenchOptions: Sendable {
    var n = 1_000_000
    /// Where the database files go; set by `--dir` or to a fresh temporary directory.
    var directory = ""
    var directoryGiven = false
    /// Keep the database files (and a temporary directory) after the run.
    var keep = false
    var engines: [String]?
    var workloads: [String]?
    var jsonPath: String?
    var seed: UInt64 = 1
    /// Print monotonic start and end times in progress lines (for `perf report --time`).
    var showTimes = false
    /// Rounds per engine; each workload reports its best round.
    var repeats = 1
    /// Page size of Strata's new files (nil: the library's default), to choose that default by measurement.
    var pageSize: Int?
    /// Skip the disk-floor probe at the start (Floor.swift).
    var noFloor = false
    /// Open Strata's files with `Compaction.off`, to measure what automatic compaction costs.
    var noCompaction = false

    /// The store options of Strata's files in this run.
    var strataStoreOptions: StoreOptions {
        var store = StoreOptions(pageSize: pageSize)
        if noCompaction { store.compaction = .off }
        return store
    }
    /// Also run every engine once more under strace, to count its sync syscalls per workload
    /// (Syscalls.swift); that pass's timings are not used.
    var syscalls = false
    /// Interval of the child's memory sampler in milliseconds (0: no sampler thread; the peaks of
    /// anonymous memory are then only the workload's start and end).
    var sampleMilliseconds = 5
    /// Internal (set by the parent for the traced pass): mark workload edges for strace.
    var syscallMarkers = false
}

let usage = """
    strata-bench: Strata beside its peers, in one run, on the same data.

    usage:
      strata-bench [objects] [options] object workloads: Strata's object API beside SQLite and LMDB (the default)
      strata-bench kv [options]        raw key-value workloads: StrataStorage beside LMDB
      strata-bench live [options]      live results: commit-to-delivery latency, observers' cost to the writer
      strata-bench group [options]     group commit: 100 concurrent durable writers
      strata-bench app [options]       app queries: a room's newest page, searches, contacts sorted
                                       case-insensitively (Strata's compound, full-text and collated
                                       indexes beside SQLite's composite index, FTS5 and NOCASE)
      strata-bench help

    options:
      --n N                 objects (entries) in the bulk load and random reads (default 1,000,000;
                            1_000_000, 100k, 1m work)
      --dir DIR             put the database files in DIR (default: a fresh temporary directory)
      --keep                keep the database files after the run (default: removed at the end)
      --engines A,B         engines to run (objects: strata,sqlite,lmdb; kv: strata,lmdb; app: strata,sqlite)
      --workloads A,B       workloads to run (the bulk load always runs); see below
      --page-size P         page size of Strata's new files, every suite (4096, 8192, 16384, 32768)
      --repeat R            run every engine R times, alternating their order, and report each
                            workload's best round (default 1; use 3 or more on a noisy machine)
      --json FILE           also write the results as JSON to FILE
      --seed S              seed of the data and the random choices (default 1)
      --times               show monotonic start/end times in progress lines (to cut a perf profile)
      --no-floor            skip the disk-floor probe (fdatasync latency of the bench's directory,
                            measured before the first engine and after the timed rounds, ~2 s each
                            at most; 0.4 s when N < 100,000)
      --no-compaction       open Strata's files with Compaction.off (the file then only grows), to
                            compare rates and sizes with the default automatic compaction
      --syscalls            also run every engine once more under strace (apt-get install strace) to
                            count its syncs per workload; that pass's timings are not used
      --sample-ms MS        interval of the per-workload memory sampler (default 5; 0 turns it off)

    Each engine runs in a child process of its own (so peak RSS is per engine). SQLite and LMDB are
    loaded at run time from libsqlite3.so.0 and liblmdb.so.0 when present (apt-get install
    libsqlite3-0 liblmdb0); they are never linked, and a missing one is skipped with a notice.
    The exit status is 1 when engines disagree on a count or a checksum, 2 on a usage error.
    """

/// Parses a count: digits with optional `_` or `,` separators and an optional k/m suffix.
func parseCount(_ text: String) -> Int? {
    var digits = text.lowercased().filter { $0 != "_" && $0 != "," }
    var scale = 1
    if digits.hasSuffix("k") { scale = 1_000; digits.removeLast() } else if digits.hasSuffix("m") { scale = 1_000_000; digits.removeLast() }
    guard let value = Int(digits), value >= 0 else { return nil }
    let (product, overflow) = value.multipliedReportingOverflow(by: scale)
    return overflow ? nil : product
}

/// Parses options after the subcommand. Throws a BenchError with a one-line message on misuse.
func parseOptions(_ args: ArraySlice<String>, suite: any BenchSuite.Type) throws -> BenchOptions {
    var options = BenchOptions()
    var rest = args
    func value(_ flag: String) throws -> String {
        guard let v = rest.popFirst() else { throw UsageError("\(flag) needs a value") }
        return v
    }
    func list(_ flag: String, allowed: [String]) throws -> [String] {
        let items = try value(flag).split(separator: ",").map { String($0).trimmingSpaces() }.filter { !$0.isEmpty }
        for item in items where !allowed.contains(item) {
            throw UsageError("\(flag): unknown \(item) (choose from \(allowed.joined(separator: ", ")))")
        }
        if items.isEmpty { throw UsageError("\(flag) needs at least one name") }
        return items
    }
    while let arg = rest.popFirst() {
        switch arg {
        case "--n", "-n":
            let text = try value(arg)
            guard let n = parseCount(text), n >= 10 else { throw UsageError("--n: expected a count of at least 10, got \(text)") }
            options.n = n
        case "--dir":
            options.directory = try value(arg)
            options.directoryGiven = true
        case "--keep":
            options.keep = true
        case "--engines":
            options.engines = try list(arg, allowed: suite.engines.map(\.id))
        case "--workloads":
            options.workloads = try list(arg, allowed: suite.workloads.map(\.id))
        case "--json":
            options.jsonPath = try value(arg)
        case "--seed":
            let text = try value(arg)
            guard let seed = UInt64(text) else { throw UsageError("--seed: expected an unsigned integer, got \(text)") }
            options.seed = seed
        case "--page-size":
            let text = try value(arg)
            guard let size = Int(text), Limits.pageSizes.contains(size) else {
                throw UsageError("--page-size: expected one of \(Limits.pageSizes.map(String.init).joined(separator: ", ")), got \(text)")
            }
            options.pageSize = size
        case "--repeat":
            let text = try value(arg)
            guard let r = Int(text), r >= 1, r <= 100 else { throw UsageError("--repeat: expected 1 to 100, got \(text)") }
            options.repeats = r
        case "--times":
            options.showTimes = true
        case "--no-floor":
            options.noFloor = true
        case "--no-compaction":
            options.noCompaction = true
        case "--syscalls":
            options.syscalls = true
        case "--syscall-markers":
            options.syscallMarkers = true
        case "--sample-ms":
            let text = try value(arg)
            guard let ms = Int(text), ms >= 0, ms <= 10_000 else { throw UsageError("--sample-ms: expected 0 to 10000, got \(text)") }
            options.sampleMilliseconds = ms
        default:
            throw UsageError("unknown option \(arg)")
        }
    }
    return options
}

extension String {
    func trimmingSpaces() -> String { self[...].trimmingCharacters(in: " \t") }
}
