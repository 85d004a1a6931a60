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
        return lines.joined(separator: "\n")
    }

    private func ratio(_ a: Double?, _ b: Double?) -> String {
        guard let a, let b, b > 0 else { return "-" }
        return formatFixed(a / b, 2) + "x"
    }

    // MARK: JSON

    func json() -> String {
        var engines: [JSON] = []
        for run in runs {
            var results: [(String, JSON)] = []
            for w in workloads {
                guard let m = run.results[w.id] else { continue }
                var fields: [(String, JSON)] = [("ops", .int(m.ops)), ("seconds", .double(m.seconds)),
                                                ("ops_per_second", .double(m.opsPerSecond))]
                if let cpu = m.cpuSeconds { fields.append(("cpu_seconds", .double(cpu))) }
                if let all = run.rounds[w.id], all.count > 1 {
                    fields.append(("rounds_ops_per_second", .array(all.map { .double($0.opsPerSecond) })))
                }
                if let c = m.count { fields.append(("count", .int(c))) }
                if let s = m.checksum { fields.append(("checksum", .string("\(s)"))) }
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
