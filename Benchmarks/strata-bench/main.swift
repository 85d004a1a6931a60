// strata-bench: Strata beside SQLite and LMDB in one run, on the same data.
//
//   strata-bench [objects] [options]        the object suite (the default)
//   strata-bench kv [options]               the raw key-value suite
//   strata-bench live [options]             live results: delivery latency, observers' cost to the writer
//   strata-bench group [options]            group commit: 100 concurrent durable writers
//   strata-bench app [options]              app queries: room pages, searches, sorted contacts, beside SQLite
//   strata-bench engine SUITE ENGINE ...    internal: one engine's phase, in a child process
//   strata-bench live-writer FILE           internal: the writing process of cross_process_latency
//
// See Benchmarks/README.md for the workloads, the peers' settings and how to read the ratios.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Suite names, for messages; the first is the default.
let suiteNames = [ObjectsSuite.name, KVSuite.name, LiveSuite.name, GroupSuite.name, AppSuite.name]

func suite(named name: String) -> (any BenchSuite.Type)? {
    switch name {
    case ObjectsSuite.name: return ObjectsSuite.self
    case KVSuite.name: return KVSuite.self
    case LiveSuite.name: return LiveSuite.self
    case GroupSuite.name: return GroupSuite.self
    case AppSuite.name: return AppSuite.self
    default: return nil
    }
}

/// The parent: runs each engine of `suite` in a child process, prints the table, checks counts.
func runSuite(_ suite: any BenchSuite.Type, options initial: BenchOptions) throws -> Int32 {
    var options = initial
    var skipped: [(EngineInfo, String)] = []
    var engines: [EngineInfo] = []
    for engine in suite.engines where options.engines?.contains(engine.id) ?? true {
        if let notice = suite.unavailable(engine.id) {
            note(notice)
            skipped.append((engine, notice))
        } else {
            engines.append(engine)
        }
    }

    if options.directoryGiven {
        try makeDirectories(options.directory)
    } else {
        options.directory = try makeTemporaryDirectory(prefix: "strata-bench-")
    }
    defer {
        if options.keep {
            note("database files kept in \(options.directory)")
        } else if options.directoryGiven {
            for engine in engines { for file in suite.files(of: engine.id, in: options.directory) { removeFile(file) } }
        } else {
            removeTree(options.directory)
        }
    }

    let description = suite.describe(options)
    note("strata-bench \(suite.name): \(description)")
    note("engines: \(engines.map(\.id).joined(separator: ", ")); files in \(options.directory)")
    if isMemoryFilesystem(options.directory) {
        note("WARNING: \(options.directory) is in memory (tmpfs): syncs do nothing, so no commit here is durable; use --dir on a disk")
    }

    // The disk's floor, before any engine runs and again after the timed rounds, since a shared
    // disk's mood drifts (Floor.swift).
    func measureFloor(_ when: String) -> DiskFloor? {
        if options.noFloor { return nil }
        let small = options.n < 100_000
        do {
            let measured = try DiskFloor.measure(
                when: when, directory: options.directory,
                budget: small ? 0.4 : 1.5, maxRounds: small ? 100 : 300)
            for line in measured.lines() { note(line) }
            return measured
        } catch {
            note("disk floor (\(when)) not measured: \(error)")
            return nil
        }
    }
    let floorAtStart = measureFloor("at the start")

    // Rounds alternate the engines' order, so that neither always runs first on a cold machine.
    var runs = engines.map { EngineRun(engine: $0) }
    for round in 0..<options.repeats {
        if options.repeats > 1 { note("round \(round + 1) of \(options.repeats)") }
        let order = round % 2 == 0 ? Array(engines.indices) : Array(engines.indices.reversed())
        for i in order {
            let run = try runEngineProcess(suite: suite.name, engine: engines[i], options: options)
            if let failure = run.failure { note("\(engines[i].id): \(failure)") }
            runs[i].absorb(run)
        }
    }

    let floorAtEnd = measureFloor("at the end")

    // Syncs per workload: every engine once more under strace (Syscalls.swift); only the counts
    // (and any problem the pass reports) are kept.
    var syscallNote: String?
    if options.syscalls {
        if let strace = SyscallTrace.findStrace() {
            for i in engines.indices {
                note("\(engines[i].id): counting syscalls under strace (a separate pass; its timings are not used)")
                let traced = try runEngineProcess(suite: suite.name, engine: engines[i], options: options, strace: strace)
                if let failure = traced.failure { runs[i].problems.append("traced pass: \(failure)") }
                runs[i].problems += traced.problems.map { "traced pass: \($0)" }
                // The traced pass's own commit counts divide its syncs (group commit makes a
                // different number of commits in each run).
                var counts = traced.syscalls
                for (id, m) in traced.results { if let commits = m.stats["commits"] { counts[id]?["commits"] = commits } }
                runs[i].syscalls = counts
                if traced.syscalls.isEmpty && traced.failure == nil {
                    runs[i].problems.append("traced pass: strace logged no workload markers")
                }
            }
            syscallNote = "syncs counted under strace (\(strace)) in a separate pass per engine"
        } else {
            syscallNote = "--syscalls: strace not found on PATH (apt-get install strace); syncs not counted"
            note(syscallNote!)
        }
    }

    var machine = "\(systemDescription()), \(cpuCount()) cores"
    if let cpu = cpuModel() { machine += ", \(cpu)" }
    let report = SuiteReport(
        suite: suite.name, description: description, options: options, date: utcTimestamp(),
        machine: machine, runs: runs, workloads: suite.workloads, sizes: suite.sizes,
        skipped: skipped, floors: [floorAtStart, floorAtEnd].compactMap { $0 },
        syscallNote: syscallNote)
    out(report.table())
    if let path = options.jsonPath {
        try writeFile(path, report.json())
        note("results written to \(path)")
    }
    let problems = report.problems
    if problems.isEmpty { return 0 }
    note("")
    note("FAILED: the run is not valid:")
    for p in problems { note("  - \(p)") }
    return 1
}

/// A child: one engine's phase, results on stdout (see Child.swift).
func runEngine(_ suite: any BenchSuite.Type, engine: String, options: BenchOptions) -> Int32 {
    // The sink starts the memory sampler thread before the baseline is read, so the baseline
    // includes it.
    let sink = ResultSink(engine: engine, options: options)
    let baseline = MemoryUsage.current()
    do {
        try suite.run(engine: engine, options: options, sink: sink)
    } catch {
        note("[\(engine)] error: \(error)")
        return 1
    }
    sink.finish(baseline: baseline)
    return 0
}

func main() -> Int32 {
    var args = CommandLine.arguments.dropFirst()
    do {
        switch args.first {
        case "help", "--help", "-h":
            out(usage)
            for name in suiteNames {
                guard let chosen = suite(named: name) else { continue }
                out("\n\(name) workloads:")
                for w in chosen.workloads { out("  \(pad(w.id, 24)) \(w.summary)") }
            }
            return 0
        case "live-writer":
            return runLiveWriter(Array(args.dropFirst()))
        case "engine":
            args.removeFirst()
            guard let suiteName = args.popFirst(), let chosen = suite(named: suiteName), let engine = args.popFirst() else {
                throw UsageError("engine: expected SUITE ENGINE")
            }
            var options = try parseOptions(args, suite: chosen)
            options.directoryGiven = true
            return runEngine(chosen, engine: engine, options: options)
        default:
            var chosen: any BenchSuite.Type = ObjectsSuite.self
            if let first = args.first, !first.hasPrefix("-") {
                guard let named = suite(named: first) else {
                    throw UsageError("unknown suite \(first) (choose from \(suiteNames.joined(separator: ", ")))")
                }
                chosen = named
                args.removeFirst()
            }
            let options = try parseOptions(args, suite: chosen)
            return try runSuite(chosen, options: options)
        }
    } catch let error as UsageError {
        note("strata-bench: \(error.description)")
        note("run `strata-bench help` for the options")
        return 2
    } catch {
        note("strata-bench: \(error)")
        return 1
    }
}

exit(main())
