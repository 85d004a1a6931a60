// The results of one run: cross-engine checks, the table on stdout, and JSON for machines.

/// One finished run of a suite.
struct SuiteReport {
    let suite: String
    let description: String
    let options: BenchOptions
    let date: String
    let machine: String
    /// Engines that were asked for, in column order, with what each reported.
    let runs: [EngineRun]
    let workloads: [WorkloadInfo]
    let sizes: [SizeInfo]
    /// Engines skipped because they are not installed, with the notice.
    let skipped: [(EngineInfo, String)]
    /// The disk's floor measured at the start and at the end of the timed rounds (none with --no-floor).
    var floors: [DiskFloor] = []
    /// The first floor measured (its setup checked write_bytes).
    var floor: DiskFloor? { floors.first }
    /// How syncs were counted, or why not (nil without --syscalls).
    var syscallNote: String? = nil

    /// Disagreements between engines and problems the engines' processes reported.
    var problems: [String] {
        var found: [String] = []
        for run in runs {
            if let failure = run.failure { found.append(failure) }
            for p in run.problems { found.append("\(run.engine.id): \(p)") }
        }
        for w in workloads {
            let measured = runs.compactMap { run in run.results[w.id].map { (run.engine.id, $0) } }
            let counts = measured.compactMap { id, m in m.count.map { (id, $0) } }
            if Set(counts.map(\.1)).count > 1 {
                found.append("\(w.id): engines disagree on the count: " + counts.map { "\($0.0) \($0.1)" }.joined(separator: ", "))
            }
            let sums = measured.compactMap { id, m in m.checksum.map { (id, $0) } }
            if Set(sums.map(\.1)).count > 1 {
                found.append("\(w.id): engines read different data (checksums " + sums.map { "\($0.0) \($0.1)" }.joined(separator: ", ") + ")")
            }
        }
        return found
    }

    // MARK: Table

    func table() -> String {
        var lines: [String] = []
        lines.append("strata-bench \(suite): \(description)")
        var when = "\(date) · \(machine)"
        if options.repeats > 1 { when += " · best of \(options.repeats) rounds per workload" }
        lines.append(when)
        for run in runs where !run.info.isEmpty {
            lines.append("\(run.engine.title): " + run.info.map { "\($0.0) \($0.1)" }.joined(separator: "; "))
        }
        for (engine, notice) in skipped { lines.append("\(engine.title): \(notice)") }
        for floor in floors { lines += floor.lines() }
        lines.append("")

        let subject = runs.first
        let peers = runs.dropFirst()
        var header = [pad("workload", 24), padLeft("ops", 11)]
        for run in runs { header.append(padLeft("\(run.engine.title) ops/s", 14)) }
        // Each peer's wall-time ratio, then the same ratio in CPU time.
        if let subject { for peer in peers { header.append(padLeft("\(subject.engine.title)/\(peer.engine.title)", 13)); header.append(padLeft("(cpu)", 7)) } }
        for run in runs { header.append(padLeft("\(run.engine.title) time", 13)) }
        lines.append(header.joined(separator: " "))

        for w in workloads {
            let measured = runs.map { $0.results[w.id] }
            guard let ops = measured.compactMap({ $0 }).first?.ops else { continue }
            var row = [pad(w.id, 24), padLeft(formatInt(ops), 11)]
            for m in measured { row.append(padLeft(m.map { formatInt(Int($0.opsPerSecond.rounded())) } ?? "-", 14)) }
            // Each peer's ratio of ops/s, then the same ratio in CPU seconds (the least of any round):
            // less CPU for Strata → above 1.
            if let subject = runs.first, let first = measured.first {
                for (peer, m) in zip(runs.dropFirst(), measured.dropFirst()) {
                    row.append(padLeft(ratio(first?.opsPerSecond, m?.opsPerSecond), 13))
                    row.append(padLeft(ratio(peer.leastCPU[w.id], subject.leastCPU[w.id]), 7))
                }
            }
            for m in measured { row.append(padLeft(m.map { formatSeconds($0.seconds) } ?? "-", 13)) }
            lines.append(row.joined(separator: " "))
        }

        lines.append("")
        var sizeHeader = [pad("", 36)]
        for run in runs { sizeHeader.append(padLeft(run.engine.title, 14)) }
        if let subject { for peer in peers { sizeHeader.append(padLeft("\(subject.engine.title)/\(peer.engine.title)", 13)) } }
        lines.append(sizeHeader.joined(separator: " "))
        func sizeRow(_ title: String, _ values: [UInt64?]) {
            var row = [pad(title, 36)]
            for v in values { row.append(padLeft(v.map(formatBytes) ?? "-", 14)) }
            if let first = values.first {
                for v in values.dropFirst() { row.append(padLeft(ratio(first.map(Double.init), v.map(Double.init)), 13)) }
            }
            lines.append(row.joined(separator: " "))
        }
        for s in sizes { sizeRow(s.title, runs.map { $0.sizes[s.id] }) }
        sizeRow("peak RSS (engine's whole process)", runs.map(\.peakRSS))
        sizeRow("RSS before the engine opened", runs.map(\.baselineRSS))
        lines.append("")
        lines.append("ops/s: higher is better, and a ratio above 1 means Strata is faster. (cpu): the same ratio in CPU time used, steadier")
        lines.append("on a busy machine but blind to waiting on the disk. Sizes and RSS: a ratio below 1 means Strata is smaller.")
        lines += latencyLines()
        lines += perOpLines()
        lines.append("")
        lines += resourcesTable()
        return lines.joined(separator: "\n")
    }

    /// Nanoseconds per operation, for workloads that ask for it (the codec alone).
    func perOpLines() -> [String] {
        var lines: [String] = []
        for w in workloads where w.perOp {
            let cells = runs.compactMap { run in
                run.results[w.id].map { "\(run.engine.title) \(formatFixed($0.seconds * 1e9 / Double(max(1, $0.ops)), 1))" }
            }
            if cells.isEmpty { continue }
            if lines.isEmpty { lines.append(""); lines.append("time per operation (ns, best round)") }
            lines.append("  \(pad(w.id, 24)) " + cells.joined(separator: ", ") + " ns per \(w.unit)")
        }
        return lines
    }

    /// Delivery latency percentiles, for workloads that measured them (the live suite).
    func latencyLines() -> [String] {
        var lines: [String] = []
        for run in runs {
            for w in workloads {
                guard let m = run.results[w.id], let p50 = m.stats["latency_p50_ns"], let p99 = m.stats["latency_p99_ns"] else { continue }
                if lines.isEmpty { lines.append(""); lines.append("latency (commit start to delivery)") }
                let maximum = m.stats["latency_max_ns"].map { ", max \(formatFixed(Double($0) / 1e6, 2)) ms" } ?? ""
                let count = m.stats["latency_samples"].map { " over \(formatInt(Int($0))) deliveries" } ?? ""
                lines.append(
                    "  \(run.engine.title) \(pad(w.id, 24)) p50 \(formatFixed(Double(p50) / 1e6, 2)) ms, p99 \(formatFixed(Double(p99) / 1e6, 2)) ms\(maximum)\(count)"
                )
            }
        }
        return lines
    }

    // MARK: Per-workload resources

    /// Whether /proc/self/io's write_bytes counts on the bench's filesystem: the floor's check, else
    /// inferred (some workload dirtied pages: yes; only write() bytes and never a dirtied page: no).
    var writeBytesCounts: Bool? {
        if let known = floor?.writeBytesCounts { return known }
        let all = runs.flatMap { $0.results.values }
        if all.contains(where: { ($0.stats["io_write_bytes"] ?? 0) > 0 }) { return true }
        if all.contains(where: { ($0.stats["io_wchar"] ?? 0) > 0 }) { return false }
        return nil
    }

    /// The second table: per workload and engine, what each commit wrote and synced, peak memory
    /// during the workload and the files' size after it (Resources.swift, Syscalls.swift).
    func resourcesTable() -> [String] {
        let measured = runs.contains { run in run.results.values.contains { !$0.stats.isEmpty } }
        guard measured else { return [] }
        let countsWriteBytes = writeBytesCounts
        var lines: [String] = []
        lines.append("per-workload resources (each workload's own: per commit = the workload's total / its commits)")
        let header = [
            pad("workload", 24), pad("engine", 7), padLeft("commits", 8), padLeft("ms/commit", 10),
            padLeft("written/commit", 15), padLeft("writes/commit", 14), padLeft("syncs/commit", 13),
            padLeft("dirtied/commit", 15), padLeft("peak RSS", 11), padLeft("peak anon", 11), "  file size",
        ]
        lines.append(header.joined(separator: " "))
        for w in workloads {
            var first = true
            for run in runs {
                guard let m = run.results[w.id] else { continue }
                let s = m.stats
                var row = [pad(first ? w.id : "", 24), pad(run.engine.title, 7)]
                first = false
                if let commits = s["commits"], commits > 0 {
                    let c = Double(commits)
                    row.append(padLeft(formatInt(Int(commits)), 8))
                    let ms = m.seconds * 1000 / c
                    row.append(padLeft(formatFixed(ms, ms < 0.1 ? 3 : 2), 10))
                    let dirtied = countsWriteBytes == false ? nil : s["io_write_bytes"]
                    row.append(padLeft(s["io_wchar"].map { formatBytes(UInt64((Double($0) / c).rounded())) } ?? "-", 15))
                    row.append(padLeft(s["io_syscw"].map { perCommit(Double($0) / c) } ?? "-", 14))
                    row.append(padLeft(syncsPerCommit(run.syscalls[w.id]).map(perCommit) ?? "-", 13))
                    row.append(padLeft(dirtied.map { formatBytes(UInt64((Double($0) / c).rounded())) } ?? "-", 15))
                } else {
                    row += [padLeft("", 8), padLeft("", 10), padLeft("", 15), padLeft("", 14), padLeft("", 13), padLeft("", 15)]
                }
                row.append(padLeft((s["peak_rss"] ?? s["peak_rss_sampled"]).map(formatBytes) ?? "-", 11))
                row.append(padLeft(s["peak_anon"].map(formatBytes) ?? "-", 11))
                row.append("  " + fileSizeText(s))
                lines.append(row.joined(separator: " "))
            }
        }
        lines.append("")
        lines += resourceNotes(countsWriteBytes: countsWriteBytes)
        return lines
    }

    /// Syncs of a traced workload over the commits the traced pass made.
    private func syncsPerCommit(_ counts: [String: UInt64]?) -> Double? {
        guard let syncs = counts?["syncs"], let commits = counts?["commits"], commits > 0 else { return nil }
        return Double(syncs) / Double(commits)
    }

    /// "12.00", "3.50", "250.0": per-commit counts with two decimals below 10.
    private func perCommit(_ value: Double) -> String {
        value < 10 ? formatFixed(value, 2) : formatFixed(value, 1)
    }

    /// The data files' size after the workload; several files as their sum and parts, the main
    /// file (the shortest name) as "db" and the others by their suffix ("objects.sqlite-wal": "wal").
    private func fileSizeText(_ s: [String: UInt64]) -> String {
        guard let total = s["file_bytes"] else { return "-" }
        let parts = s.filter { $0.key.hasPrefix("file:") }.map { (String($0.key.dropFirst(5)), $0.value) }.sorted { $0.0 < $1.0 }
        guard parts.count > 1, let main = parts.min(by: { $0.0.count < $1.0.count })?.0 else { return formatBytes(total) }
        let labelled = parts.map { name, bytes in
            let label = name == main ? "db" : (name.hasPrefix(main) ? String(name.dropFirst(main.count).drop(while: { $0 == "-" || $0 == "." })) : name)
            return "\(label) \(formatBytes(bytes))"
        }
        return formatBytes(total) + " (" + labelled.joined(separator: " + ") + ")"
    }

    /// What each column of the resources table counts, with what this run could measure.
    private func resourceNotes(countsWriteBytes: Bool?) -> [String] {
        var notes: [String] = []
        let meters = runs.map(\.meters)
        let ioAvailable = meters.contains { $0["proc_io"] == "yes" }
        if !ioAvailable {
            notes.append("disk/commit, write()/commit, writes/commit: no /proc/self/io on this system (no task I/O accounting).")
        } else {
            notes.append(
                "written/commit: /proc/self/io wchar, bytes the process passed to write syscalls; writes/commit: syscw, its write syscalls (pwrite, writev, ...)."
            )
            var dirtied = "dirtied/commit: /proc/self/io write_bytes, the size of the page-cache folios the process made dirty, NOT bytes sent to the disk"
            switch countsWriteBytes {
            case true?: dirtied += " (counts on this filesystem"
            case false?: dirtied += " (does NOT count on this filesystem, hence `-`"
            case nil: dirtied += " (not known whether it counts on this filesystem"
            }
            if let floor, let counted = floor.setupCounted {
                dirtied += ": the floor's setup wrote \(formatBytes(floor.setupBytes)), write_bytes counted \(formatBytes(counted))"
            }
            notes.append(dirtied + "):")
            var folios =
                "  a small write into a clean large folio counts the whole folio (up to 2 MiB), so it is high wherever a file's cache holds large folios"
            if let written = floor?.modes.first(where: { $0.id == "written" }), let ratio = written.dirtiedRatio {
                folios += " (in the floor's written file, \(formatFixed(ratio, 1))x the bytes written)"
            }
            notes.append(folios + ".")
        }
        if let syscallNote {
            notes.append("syncs/commit: fsync, fdatasync, msync(MS_SYNC) calls and writes to O_DSYNC/O_SYNC descriptors; \(syscallNote).")
        } else {
            notes.append("syncs/commit: not counted in this run (`--syscalls` counts them under strace).")
        }
        let resets = Set(meters.compactMap { $0["peak_rss_reset"] })
        let sampleMs = Set(meters.compactMap { $0["sample_ms"] }).sorted().joined(separator: "/")
        var memory = "peak RSS: VmHWM during the workload, reset before it through /proc/self/clear_refs"
        if resets == ["yes"] { memory += " (works here)" } else if resets.contains("no") { memory += " (REFUSED here: the largest sampled RSS instead)" }
        memory += "; peak anon: the largest RssAnon (heap, stacks; not mapped file pages) "
        memory +=
            sampleMs == "0" || sampleMs.isEmpty ? "at the workload's start and end (sampler off)." : "sampled every \(sampleMs) ms and at the start and end"
        let costs = runs.compactMap { run -> String? in
            guard let cpu = run.meters["sampler_cpu_seconds"].flatMap(Double.init),
                let seconds = run.meters["sampler_seconds"].flatMap(Double.init), seconds > 0
            else { return nil }
            return
                "\(run.engine.title) \(formatFixed(cpu * 1000, 0)) ms CPU in \(formatFixed(seconds, 1)) s (\(formatFixed(100 * cpu / seconds, 2)) % of a core)"
        }
        if !costs.isEmpty { memory += "; the sampler thread used " + costs.joined(separator: ", ") }
        notes.append(memory + ".")
        notes.append(
            "file size: st_size of the engine's data files after the workload "
                + "(Strata: page file + commit log; SQLite: database + WAL; lock files and -shm excluded).")
        return notes
    }

    private func ratio(_ a: Double?, _ b: Double?) -> String {
        guard let a, let b, b > 0 else { return "-" }
        return formatFixed(a / b, 2) + "x"
    }

    // MARK: JSON

    /// A workload's resources (the round the table shows): per-commit figures, the raw /proc/self/io
    /// deltas, memory peaks, file sizes and, from a traced pass, syscall counts.
    private func resourcesJSON(_ m: Measurement, syscalls: [String: UInt64]?) -> JSON? {
        let s = m.stats
        if s.isEmpty && syscalls == nil { return nil }
        var fields: [(String, JSON)] = []
        let commits = s["commits"]
        if let commits { fields.append(("commits", .int(Int(commits)))) }
        if let commits, commits > 0 {
            let c = Double(commits)
            var per: [(String, JSON)] = [("seconds", .double(m.seconds / c))]
            for (key, name) in [("io_write_bytes", "write_bytes"), ("io_wchar", "wchar"), ("io_syscw", "syscw")] {
                if let v = s[key] { per.append((name, .double(Double(v) / c))) }
            }
            if let syncs = syncsPerCommit(syscalls) { per.append(("syncs", .double(syncs))) }
            fields.append(("per_commit", .object(per)))
        }
        let io = ProcIO.fields.compactMap { name in s["io_" + name].map { (name, JSON.int(Int($0))) } }
        if !io.isEmpty { fields.append(("proc_self_io", .object(io))) }
        for (key, name) in [
            ("peak_rss", "peak_rss_bytes"), ("peak_rss_sampled", "peak_rss_sampled_bytes"),
            ("peak_anon", "peak_anon_bytes"), ("rss_start", "rss_start_bytes"), ("anon_start", "anon_start_bytes"),
            ("rss_end", "rss_end_bytes"), ("anon_end", "anon_end_bytes"), ("samples", "memory_samples"), ("sampler_cpu_ns", "sampler_cpu_ns"),
            ("file_bytes", "file_bytes"), ("file_allocated_bytes", "file_allocated_bytes"),
        ] {
            if let v = s[key] { fields.append((name, .int(Int(v)))) }
        }
        let parts = s.filter { $0.key.hasPrefix("file:") }.sorted { $0.key < $1.key }
        if !parts.isEmpty { fields.append(("files", .object(parts.map { (String($0.key.dropFirst(5)), .int(Int($0.value))) }))) }
        if let syscalls {
            fields.append(("syscalls", .object((["commits"] + SyscallTrace.keys).compactMap { key in syscalls[key].map { (key, .int(Int($0))) } })))
        }
        return .object(fields)
    }

    func json() -> String {
        var engines: [JSON] = []
        for run in runs {
            var results: [(String, JSON)] = []
            for w in workloads {
                guard let m = run.results[w.id] else { continue }
                var fields: [(String, JSON)] = [
                    ("ops", .int(m.ops)), ("seconds", .double(m.seconds)),
                    ("ops_per_second", .double(m.opsPerSecond)),
                ]
                if let cpu = m.cpuSeconds { fields.append(("cpu_seconds", .double(cpu))) }
                if w.perOp { fields.append(("ns_per_op", .double(m.seconds * 1e9 / Double(max(1, m.ops))))) }
                if let all = run.rounds[w.id], all.count > 1 {
                    fields.append(("rounds_ops_per_second", .array(all.map { .double($0.opsPerSecond) })))
                }
                if let c = m.count { fields.append(("count", .int(c))) }
                if let s = m.checksum { fields.append(("checksum", .string("\(s)"))) }
                if let resources = resourcesJSON(m, syscalls: run.syscalls[w.id]) { fields.append(("resources", resources)) }
                results.append((w.id, .object(fields)))
            }
            var fields: [(String, JSON)] = [
                ("id", .string(run.engine.id)),
                ("title", .string(run.engine.title)),
                ("info", .object(run.info.map { ($0.0, .string($0.1)) })),
                ("workloads", .object(results)),
                ("sizes", .object(sizes.compactMap { s in run.sizes[s.id].map { (s.id, .int(Int($0))) } })),
            ]
            if let rss = run.peakRSS { fields.append(("peak_rss_bytes", .int(Int(rss)))) }
            if let base = run.baselineRSS { fields.append(("baseline_rss_bytes", .int(Int(base)))) }
            if !run.meters.isEmpty {
                fields.append(("meters", .object(run.meters.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) })))
            }
            if let failure = run.failure { fields.append(("failure", .string(failure))) }
            engines.append(.object(fields))
        }
        var ratios: [(String, JSON)] = []
        if let subject = runs.first {
            for peer in runs.dropFirst() {
                var perWorkload: [(String, JSON)] = []
                for w in workloads {
                    if let a = subject.results[w.id]?.opsPerSecond, let b = peer.results[w.id]?.opsPerSecond, b > 0 {
                        perWorkload.append((w.id, .double(a / b)))
                    }
                    if let a = subject.leastCPU[w.id], let b = peer.leastCPU[w.id], a > 0 {
                        perWorkload.append((w.id + "_cpu", .double(b / a)))
                    }
                }
                for s in sizes {
                    if let a = subject.sizes[s.id], let b = peer.sizes[s.id], b > 0 {
                        perWorkload.append(("size_" + s.id, .double(Double(a) / Double(b))))
                    }
                }
                ratios.append(("\(subject.engine.id)/\(peer.engine.id)", .object(perWorkload)))
            }
        }
        let problems = self.problems
        let root: JSON = .object([
            ("suite", .string(suite)),
            ("description", .string(description)),
            ("date", .string(date)),
            ("machine", .string(machine)),
            ("n", .int(options.n)),
            ("seed", .string("\(options.seed)")),
            ("rounds", .int(options.repeats)),
            ("disk_floor", floors.isEmpty ? .null : .array(floors.map { $0.json() })),
            ("write_bytes_counts", writeBytesCounts.map { .bool($0) } ?? .null),
            ("syscalls", syscallNote.map { .string($0) } ?? .null),
            ("engines", .array(engines)),
            ("skipped", .object(skipped.map { ($0.0.id, .string($0.1)) })),
            ("ratios", .object(ratios)),
            ("ok", .bool(problems.isEmpty)),
            ("problems", .array(problems.map { .string($0) })),
        ])
        return root.rendered(indent: 0) + "\n"
    }
}

/// A small JSON value, rendered with sorted-as-given keys.
indirect enum JSON {
    case string(String)
    case int(Int)
    case double(Double)
    case bool(Bool)
    case null
    case array([JSON])
    case object([(String, JSON)])

    func rendered(indent: Int) -> String {
        let inner = String(repeating: "  ", count: indent + 1)
        let outer = String(repeating: "  ", count: indent)
        switch self {
        case .string(let s): return JSON.quote(s)
        case .int(let i): return "\(i)"
        case .double(let d): return d.isFinite ? "\(d)" : "null"
        case .bool(let b): return b ? "true" : "false"
        case .null: return "null"
        case .array(let items):
            if items.isEmpty { return "[]" }
            return "[\n" + items.map { inner + $0.rendered(indent: indent + 1) }.joined(separator: ",\n") + "\n\(outer)]"
        case .object(let fields):
            if fields.isEmpty { return "{}" }
            return "{\n" + fields.map { inner + JSON.quote($0.0) + ": " + $0.1.rendered(indent: indent + 1) }.joined(separator: ",\n") + "\n\(outer)}"
        }
    }

    static func quote(_ s: String) -> String {
        var result = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\t": result += "\\t"
            case "\r": result += "\\r"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    result += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result + "\""
    }
}

// MARK: Formatting

/// 1234567 → "1,234,567".
func formatInt(_ value: Int) -> String {
    let digits = String(value.magnitude)
    var out = ""
    for (i, c) in digits.enumerated() {
        if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
        out.append(c)
    }
    return value < 0 ? "-" + out : out
}

/// `value` with exactly `places` decimals.
func formatFixed(_ value: Double, _ places: Int) -> String {
    guard value.isFinite else { return "\(value)" }
    var scale = 1.0
    for _ in 0..<places { scale *= 10 }
    let scaled = (abs(value) * scale).rounded()
    let whole = Int(scaled / scale)
    let fraction = Int(scaled - Double(whole) * scale)
    let sign = value < 0 && scaled != 0 ? "-" : ""
    if places == 0 { return sign + "\(whole)" }
    let f = String(fraction)
    return sign + "\(whole)." + String(repeating: "0", count: places - f.count) + f
}

/// Seconds as "12.3 ms" or "1.234 s".
func formatSeconds(_ seconds: Double) -> String {
    if seconds < 1 { return formatFixed(seconds * 1000, 1) + " ms" }
    return formatFixed(seconds, 3) + " s"
}

/// Bytes as "123.4 MiB".
func formatBytes(_ bytes: UInt64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var value = Double(bytes)
    var unit = 0
    while value >= 1024 && unit < units.count - 1 {
        value /= 1024
        unit += 1
    }
    return unit == 0 ? "\(bytes) B" : formatFixed(value, 1) + " " + units[unit]
}

func pad(_ s: String, _ width: Int) -> String {
    s.count >= width ? s : s + String(repeating: " ", count: width - s.count)
}

func padLeft(_ s: String, _ width: Int) -> String {
    s.count >= width ? s : String(repeating: " ", count: width - s.count) + s
}
