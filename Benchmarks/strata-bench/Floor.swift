// The disk's floor: what one small durable commit costs on this disk with no engine at all,
// measured by the parent at the start of a run in the bench's directory (skip with --no-floor).
//
// One iteration is "pwrite 1 to 4 pages (4 KiB each; 1, 2, 3, 4, 1, ...) + fdatasync", timed
// together, in four kinds of place, each a scratch file of its own:
//   written    random offsets inside a 4 MiB file written fully once and synced (the blocks exist:
//              the sync only flushes data)
//   append     at the end of a file that grows with every write (the sync also commits the new
//              size and the blocks' allocation)
//   hole       fresh 16 KiB slots of an 8 MiB file made by ftruncate (unallocated: the sync also
//              commits the allocation)
//   fallocate  fresh 16 KiB slots of an 8 MiB file reserved by posix_fallocate (allocated but
//              unwritten: the sync also commits the extents' conversion to written)
// Rounds run the four one after another, starting with a different one each round, so that the
// disk's mood (neighbours on a shared machine) falls on all four alike. At most 300 rounds, at
// least 20, and no new round after 1.5 s (0.4 s and at most 100 rounds when N < 100,000, to keep
// smoke runs quick). The files are removed at the end.
//
// It also checks whether /proc/self/io's write_bytes counts on this filesystem: the 4 MiB written
// in the setup must show up in it.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

struct DiskFloor: Sendable {
    struct Mode: Sendable {
        let id: String
        let title: String
        /// Microseconds of each pwrite + fdatasync, in the order measured.
        var micros: [Double] = []
        /// Bytes the pwrites passed, and what /proc/self/io's write_bytes counted for them (read
        /// around each iteration, outside its timing; nil without /proc/self/io).
        var bytesWritten: UInt64 = 0
        var bytesCounted: UInt64? = 0

        var median: Double { percentile(0.5) }
        var p90: Double { percentile(0.9) }
        var minimum: Double { micros.min() ?? 0 }
        /// write_bytes over bytes written: above 1 when a small write dirties a large page-cache folio.
        var dirtiedRatio: Double? {
            guard let bytesCounted, bytesWritten > 0 else { return nil }
            return Double(bytesCounted) / Double(bytesWritten)
        }

        /// Nearest-rank percentile.
        func percentile(_ p: Double) -> Double {
            guard !micros.isEmpty else { return 0 }
            let sorted = micros.sorted()
            let rank = Int((p * Double(sorted.count)).rounded(.up))
            return sorted[min(sorted.count - 1, max(0, rank - 1))]
        }
    }

    /// "at the start", "at the end".
    var when = ""
    var modes: [Mode]
    var rounds: Int
    var seconds: Double
    let pageSize: Int
    /// Bytes written in the setup, and what /proc/self/io's write_bytes counted meanwhile (nil
    /// without /proc/self/io).
    var setupBytes: UInt64 = 0
    var setupCounted: UInt64?

    /// Whether write_bytes counts writes to this filesystem (nil: unknown).
    var writeBytesCounts: Bool? { setupCounted.map { $0 >= setupBytes / 2 } }

    static let pageSize = 4096

    /// Runs the probe in `directory` for at most about `budget` seconds of rounds.
    static func measure(when: String, directory: String, budget: Double, maxRounds: Int, minRounds: Int = 20) throws -> DiskFloor {
        let page = pageSize
        let written = 4 << 20
        let slotted = 8 << 20
        let slot = 4 * page
        var floor = DiskFloor(
            modes: [
                Mode(id: "written", title: "into written blocks"),
                Mode(id: "append", title: "appending (file grows)"),
                Mode(id: "hole", title: "into an ftruncate hole"),
                Mode(id: "fallocate", title: "into fallocate'd blocks"),
            ], rounds: 0, seconds: 0, pageSize: page)
        floor.when = when

        let paths = floor.modes.map { "\(directory)/floor-\($0.id).tmp" }
        var fds: [Int32] = []
        defer {
            for fd in fds { close(fd) }
            for path in paths { removeFile(path) }
        }
        for path in paths {
            let fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o644)
            if fd < 0 { throw BenchError("disk floor: cannot create \(path): \(errnoText())") }
            fds.append(fd)
        }

        // Data to write: 4 pages of bytes that change every write.
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(64 << 10, slot), alignment: page)
        defer { buffer.deallocate() }
        var rng = SplitMix64(seed: 0xF100_0D15_C0DE)
        for i in stride(from: 0, to: max(64 << 10, slot), by: 8) { buffer.storeBytes(of: rng.next(), toByteOffset: i, as: UInt64.self) }

        func writeAll(_ fd: Int32, _ count: Int, at offset: Int) throws {
            var done = 0
            while done < count {
                let n = pwrite(fd, buffer + done % (64 << 10), min(count - done, (64 << 10) - done % (64 << 10)), off_t(offset + done))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { throw BenchError("disk floor: pwrite failed: \(errnoText())") }
                done += n
            }
        }
        func sync(_ fd: Int32) throws {
            if dataSync(fd) != 0 { throw BenchError("disk floor: fdatasync failed: \(errnoText())") }
        }

        // Setup: the written file, fully written and synced (and write_bytes checked); the hole;
        // the fallocate'd file; an empty file to append to.
        let ioBefore = ProcIO.current()
        try writeAll(fds[0], written, at: 0)
        try sync(fds[0])
        if let before = ioBefore, let after = ProcIO.current() {
            floor.setupCounted = before.delta(to: after)["write_bytes"]
        }
        floor.setupBytes = UInt64(written)
        if ftruncate(fds[2], off_t(slotted)) != 0 { throw BenchError("disk floor: ftruncate failed: \(errnoText())") }
        try sync(fds[2])
        #if os(Linux)
        var fallocated = posix_fallocate(fds[3], 0, off_t(slotted)) == 0
        #else
        var fallocated = false
        #endif
        if fallocated { try sync(fds[3]) }
        try sync(fds[1])

        var appendEnd = 0
        let slots = slotted / slot
        let start = monotonicSeconds()
        var round = 0
        while round < maxRounds && round < slots {
            if round >= minRounds && monotonicSeconds() - start > budget { break }
            let pages = 1 + round % 4
            let bytes = pages * page
            buffer.storeBytes(of: UInt64(truncatingIfNeeded: round), toByteOffset: 0, as: UInt64.self)
            for k in 0..<4 {
                let m = (round + k) % 4
                if m == 3 && !fallocated { continue }
                let offset: Int
                switch m {
                case 0: offset = rng.next(below: written / page - 4) * page
                case 1: offset = appendEnd
                default: offset = round * slot
                }
                let io0 = ProcIO.current()
                let t0 = monotonicSeconds()
                try writeAll(fds[m], bytes, at: offset)
                if dataSync(fds[m]) != 0 {
                    if m == 3 { fallocated = false; floor.modes[3].micros = []; continue }
                    throw BenchError("disk floor: fdatasync failed: \(errnoText())")
                }
                floor.modes[m].micros.append((monotonicSeconds() - t0) * 1e6)
                floor.modes[m].bytesWritten += UInt64(bytes)
                if let io0, let io1 = ProcIO.current(), let counted = floor.modes[m].bytesCounted {
                    floor.modes[m].bytesCounted = counted + io0.delta(to: io1)["write_bytes"]
                } else {
                    floor.modes[m].bytesCounted = nil
                }
                if m == 1 { appendEnd += bytes }
            }
            round += 1
        }
        floor.rounds = round
        floor.seconds = monotonicSeconds() - start
        if !fallocated { floor.modes.remove(at: 3) }
        return floor
    }

    /// fdatasync on Linux (what Strata's `.full` durability calls there), fsync elsewhere.
    private static func dataSync(_ fd: Int32) -> Int32 {
        #if os(Linux)
        return fdatasync(fd)
        #else
        return fsync(fd)
        #endif
    }

    /// Lines for the report's header.
    func lines() -> [String] {
        var lines = [
            "disk floor \(when) (this directory's disk, no engine): pwrite of 1-4 pages + fdatasync, \(rounds) rounds of each kind, interleaved, in \(formatFixed(seconds, 2)) s"
        ]
        for m in modes where !m.micros.isEmpty {
            lines.append(
                "  " + pad(m.title, 26) + "median " + padLeft(formatInt(Int(m.median.rounded())), 6) + " µs   p90 "
                    + padLeft(formatInt(Int(m.p90.rounded())), 6) + " µs   min " + padLeft(formatInt(Int(m.minimum.rounded())), 6) + " µs"
                    + (m.dirtiedRatio.map { "   write_bytes " + formatFixed($0, 1) + "x the bytes written" } ?? ""))
        }
        return lines
    }

    func json() -> JSON {
        var fields: [(String, JSON)] = [
            ("when", .string(when)),
            ("probe", .string("pwrite of 1-4 pages of \(pageSize) bytes + fdatasync, kinds interleaved")),
            ("rounds", .int(rounds)),
            ("seconds", .double(seconds)),
        ]
        for m in modes where !m.micros.isEmpty {
            fields.append(
                (
                    m.id,
                    .object([
                        ("title", .string(m.title)),
                        ("n", .int(m.micros.count)),
                        ("median_us", .double(m.median)),
                        ("p90_us", .double(m.p90)),
                        ("min_us", .double(m.minimum)),
                        ("max_us", .double(m.micros.max() ?? 0)),
                        ("bytes_written", .int(Int(m.bytesWritten))),
                        ("write_bytes_counted", m.bytesCounted.map { .int(Int($0)) } ?? .null),
                    ])
                ))
        }
        fields.append(("setup_bytes_written", .int(Int(setupBytes))))
        if let setupCounted { fields.append(("setup_write_bytes_counted", .int(Int(setupCounted)))) }
        if let counts = writeBytesCounts { fields.append(("write_bytes_counts", .bool(counts))) }
        return .object(fields)
    }
}
