// What a workload cost besides time, measured in the engine's child process around each timed
// section (never inside it): bytes and write syscalls from /proc/self/io, peak resident and peak
// anonymous memory of the workload, and the size of the engine's files after it.
//
// - /proc/self/io is read just before the clock starts and just after it stops; the deltas are the
//   whole process's (every thread, live or exited). `wchar` counts bytes passed to write-family
//   syscalls (any fd; nothing else in the child writes during a workload), `syscw` those syscalls,
//   `write_bytes` bytes of page-cache pages this process dirtied (charged when a clean page becomes
//   dirty, so a page rewritten before it is written back counts once; the filesystem's own journal
//   writes are not included).
// - Peak RSS per workload: VmHWM (the kernel's high-water mark) after writing "5" to
//   /proc/self/clear_refs, which resets it to the current RSS (Linux ≥ 4.0), right before the
//   workload. The process's lifetime peak is the maximum over the workloads and what came before.
// - Peak anonymous memory: there is no kernel high-water mark for it, so a background thread reads
//   /proc/self/statm every few milliseconds (one pread of 7 numbers) and keeps the maximum of
//   resident minus shared (= RssAnon: heap, stacks, private anonymous maps; not file pages of a
//   memory map, not shared memory), also sampled once at the start and end of each workload.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// The counters of /proc/self/io, in its field order.
struct ProcIO: Sendable {
    static let fields = ["rchar", "wchar", "syscr", "syscw", "read_bytes", "write_bytes", "cancelled_write_bytes"]
    var values: [UInt64]

    /// Reads /proc/self/io; nil where there is none (no /proc, or no task I/O accounting).
    static func current() -> ProcIO? {
        guard let text = readSmallFile("/proc/self/io") else { return nil }
        var values = [UInt64](repeating: 0, count: fields.count)
        var found = 0
        for line in text.split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":"), let i = fields.firstIndex(of: String(line[..<colon])) else { continue }
            let digits = line[line.index(after: colon)...].drop(while: { $0 == " " })
            guard let v = UInt64(digits) else { continue }
            values[i] = v
            found += 1
        }
        return found == fields.count ? ProcIO(values: values) : nil
    }

    /// Counter by name ("wchar").
    subscript(_ name: String) -> UInt64 { ProcIO.fields.firstIndex(of: name).map { values[$0] } ?? 0 }

    /// What `later` counted since `self` (counters never go down; clamp just in case).
    func delta(to later: ProcIO) -> ProcIO {
        ProcIO(values: zip(values, later.values).map { $1 >= $0 ? $1 - $0 : 0 })
    }
}

/// Resident and anonymous resident bytes from /proc/self/statm, through one open descriptor and
/// one preallocated buffer: a sample is a single pread (the kernel regenerates the text at offset 0).
final class StatmReader: @unchecked Sendable {
    // @unchecked: each reader is used by one thread only (the sampler's, or the main thread's).
    private let fd: Int32
    private let buffer: UnsafeMutableRawPointer
    private static let capacity = 256
    private let pageSize = UInt64(max(1, sysconf(Int32(_SC_PAGESIZE))))

    init?() {
        fd = open("/proc/self/statm", O_RDONLY)
        if fd < 0 { return nil }
        buffer = UnsafeMutableRawPointer.allocate(byteCount: StatmReader.capacity, alignment: 8)
    }

    deinit {
        close(fd)
        buffer.deallocate()
    }

    /// (resident, anonymous) bytes now, or nil.
    @inline(__always)
    func sample() -> (resident: UInt64, anon: UInt64)? {
        let n = pread(fd, buffer, StatmReader.capacity, 0)
        if n <= 0 { return nil }
        // "size resident shared text lib data dt", in pages; shared = file-backed + shmem pages.
        var numbers: (UInt64, UInt64, UInt64) = (0, 0, 0)
        var index = 0
        var value: UInt64 = 0
        var inNumber = false
        let bytes = buffer.assumingMemoryBound(to: UInt8.self)
        for i in 0..<n {
            let c = bytes[i]
            if c >= 48 && c <= 57 {
                value = value &* 10 &+ UInt64(c - 48)
                inNumber = true
            } else if inNumber {
                switch index {
                case 0: numbers.0 = value
                case 1: numbers.1 = value
                default: numbers.2 = value
                }
                index += 1
                value = 0
                inNumber = false
                if index == 3 { break }
            }
        }
        if index < 3 { return nil }
        let resident = numbers.1
        let anon = resident >= numbers.2 ? resident - numbers.2 : 0
        return (resident * pageSize, anon * pageSize)
    }
}

/// A background thread that samples resident and anonymous memory every `interval` and keeps the
/// largest values since the last `restart`.
final class MemorySampler: Sendable {
    let intervalMilliseconds: Int
    private let peakResident = Atomic<UInt64>(0)
    private let peakAnon = Atomic<UInt64>(0)
    private let samples = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    /// The sampler thread's own CPU time and samples over its life, set when it stops.
    private let cpuNanoseconds = Atomic<UInt64>(0)
    private let totalSamples = Atomic<Int>(0)
    private let reader: StatmReader

    private init(intervalMilliseconds: Int, reader: StatmReader) {
        self.intervalMilliseconds = intervalMilliseconds
        self.reader = reader
    }

    /// Starts a sampler thread; nil when there is no /proc/self/statm or the thread cannot start.
    static func start(intervalMilliseconds: Int) -> (MemorySampler, pthread_t)? {
        guard intervalMilliseconds > 0, let reader = StatmReader() else { return nil }
        let sampler = MemorySampler(intervalMilliseconds: intervalMilliseconds, reader: reader)
        let context = Unmanaged.passRetained(sampler).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(
            &thread, nil,
            { raw in
                if let raw { Unmanaged<MemorySampler>.fromOpaque(raw).takeRetainedValue().loop() }
                return nil
            }, context)
        if rc != 0 {
            Unmanaged<MemorySampler>.fromOpaque(context).release()
            return nil
        }
        return (sampler, thread)
    }

    private func loop() {
        var pause = timespec(tv_sec: intervalMilliseconds / 1000, tv_nsec: (intervalMilliseconds % 1000) * 1_000_000)
        var taken = 0
        defer {
            var cpu = timespec()
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu)
            cpuNanoseconds.store(UInt64(cpu.tv_sec) * 1_000_000_000 + UInt64(cpu.tv_nsec), ordering: .relaxed)
            totalSamples.store(taken, ordering: .relaxed)
        }
        while !stopping.load(ordering: .relaxed) {
            if let (resident, anon) = reader.sample() {
                raise(resident: resident, anon: anon)
                samples.add(1, ordering: .relaxed)
                taken += 1
            }
            var rest = timespec()
            while nanosleep(&pause, &rest) != 0 && errno == EINTR { pause = rest }
            pause = timespec(tv_sec: intervalMilliseconds / 1000, tv_nsec: (intervalMilliseconds % 1000) * 1_000_000)
        }
    }

    /// Folds one sample into the peaks (from any thread).
    func raise(resident: UInt64, anon: UInt64) {
        var current = peakResident.load(ordering: .relaxed)
        while resident > current {
            let (exchanged, original) = peakResident.compareExchange(expected: current, desired: resident, ordering: .relaxed)
            if exchanged { break }
            current = original
        }
        current = peakAnon.load(ordering: .relaxed)
        while anon > current {
            let (exchanged, original) = peakAnon.compareExchange(expected: current, desired: anon, ordering: .relaxed)
            if exchanged { break }
            current = original
        }
    }

    /// Starts a new window whose peaks begin at the given sample.
    func restart(resident: UInt64, anon: UInt64) {
        peakResident.store(resident, ordering: .relaxed)
        peakAnon.store(anon, ordering: .relaxed)
        samples.store(0, ordering: .relaxed)
    }

    /// Peaks and background sample count of the current window.
    func peaks() -> (resident: UInt64, anon: UInt64, samples: Int) {
        (peakResident.load(ordering: .relaxed), peakAnon.load(ordering: .relaxed), samples.load(ordering: .relaxed))
    }

    func stop() { stopping.store(true, ordering: .relaxed) }

    /// The thread's CPU time (all of it: samples, sleeps' wakeups) and its samples, after it stopped.
    var cost: (cpuSeconds: Double, samples: Int) {
        (Double(cpuNanoseconds.load(ordering: .relaxed)) / 1e9, totalSamples.load(ordering: .relaxed))
    }
}

/// Resets VmHWM to the current RSS by writing "5" to /proc/self/clear_refs (Linux ≥ 4.0; only the
/// peak is reset: "5" touches no page flags). False when the kernel refused.
func resetPeakRSS() -> Bool {
    let fd = open("/proc/self/clear_refs", O_WRONLY)
    if fd < 0 { return false }
    defer { close(fd) }
    return write(fd, "5", 1) == 1
}

/// Size (st_size) and allocated bytes (st_blocks × 512) of a file, or nil when it does not exist.
func fileUsage(_ path: String) -> (size: UInt64, allocated: UInt64)? {
    var st = stat()
    if stat(path, &st) != 0 { return nil }
    return (UInt64(st.st_size), UInt64(st.st_blocks) * 512)
}

/// Where a traced child (`--syscalls`, under strace) marks the start and end of each workload: an
/// `access` of a path that does not exist, which strace logs with the path (Syscalls.swift).
let syscallMarkerPrefix = "/strata-bench-marker/"

/// Brackets each timed workload of a child process with the measurements above.
final class WorkloadMeter {
    let markers: Bool
    private let sampler: MemorySampler?
    private let samplerThread: pthread_t?
    private let reader = StatmReader()
    /// The sampler thread's CPU-time clock, to take its time out of the workload's CPU time.
    private let samplerClock: clockid_t?
    /// The process's lifetime VmHWM, folded in before every reset.
    private(set) var processPeakRSS: UInt64 = 0
    /// Whether the last reset of VmHWM was accepted (nil before the first).
    private(set) var peakResetWorks: Bool?
    let ioAvailable: Bool

    init(sampleMilliseconds: Int, markers: Bool) {
        self.markers = markers
        if let (sampler, thread) = MemorySampler.start(intervalMilliseconds: sampleMilliseconds) {
            self.sampler = sampler
            samplerThread = thread
            #if os(Linux)
            var clock = clockid_t()
            samplerClock = pthread_getcpuclockid(thread, &clock) == 0 ? clock : nil
            #else
            samplerClock = nil
            #endif
        } else {
            sampler = nil
            samplerThread = nil
            samplerClock = nil
        }
        ioAvailable = ProcIO.current() != nil
    }

    /// CPU seconds the sampler thread has used so far (0 without a sampler). The workload's CPU
    /// time (all threads of the process) has the sampler's share taken out.
    func samplerCPUSeconds() -> Double {
        guard let samplerClock else { return 0 }
        var ts = timespec()
        if clock_gettime(samplerClock, &ts) != 0 { return 0 }
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// The sampler's interval, 0 when no sampler runs.
    var sampleMilliseconds: Int { sampler?.intervalMilliseconds ?? 0 }

    private let started = monotonicSeconds()

    /// Stops the sampler; its CPU seconds, samples and the seconds it ran, when there was one.
    func stop() -> (cpuSeconds: Double, samples: Int, seconds: Double)? {
        guard let sampler, let samplerThread else { return nil }
        sampler.stop()
        pthread_join(samplerThread, nil)
        let cost = sampler.cost
        return (cost.cpuSeconds, cost.samples, monotonicSeconds() - started)
    }

    /// What `begin` saw.
    struct Window {
        let id: String
        let io: ProcIO?
        let start: (resident: UInt64, anon: UInt64)?
        let reset: Bool
    }

    /// Right before a workload's clock starts.
    func begin(_ id: String) -> Window {
        if let hwm = MemoryUsage.current()?.peakRSS { processPeakRSS = max(processPeakRSS, hwm) }
        let reset = resetPeakRSS()
        peakResetWorks = reset
        let start = reader?.sample()
        if let start { sampler?.restart(resident: start.resident, anon: start.anon) }
        let io = ProcIO.current()
        if markers { mark("begin", id) }
        return Window(id: id, io: io, start: start, reset: reset)
    }

    /// Right after the clock stopped: the workload's figures as (key, value) pairs.
    func end(_ window: Window, files: [String]) -> [(String, UInt64)] {
        if markers { mark("end", window.id) }
        let io = ProcIO.current()
        let endSample = reader?.sample()
        var stats: [(String, UInt64)] = []
        if let before = window.io, let io {
            let d = before.delta(to: io)
            for (name, value) in zip(ProcIO.fields, d.values) { stats.append(("io_" + name, value)) }
        }
        var peakResident: UInt64 = max(window.start?.resident ?? 0, endSample?.resident ?? 0)
        var peakAnon: UInt64 = max(window.start?.anon ?? 0, endSample?.anon ?? 0)
        if let sampler {
            let p = sampler.peaks()
            peakResident = max(peakResident, p.resident)
            peakAnon = max(peakAnon, p.anon)
            stats.append(("samples", UInt64(p.samples)))
        }
        // A sample is an RSS the process had: the lifetime peak is at least that.
        processPeakRSS = max(processPeakRSS, peakResident)
        if let usage = MemoryUsage.current() {
            processPeakRSS = max(processPeakRSS, usage.peakRSS)
            if window.reset { stats.append(("peak_rss", max(usage.peakRSS, peakResident))) }
        }
        if window.start != nil || endSample != nil {
            stats.append(("peak_rss_sampled", peakResident))
            stats.append(("peak_anon", peakAnon))
        }
        if let s = window.start { stats += [("rss_start", s.resident), ("anon_start", s.anon)] }
        if let s = endSample { stats += [("rss_end", s.resident), ("anon_end", s.anon)] }
        if !files.isEmpty {
            var size: UInt64 = 0
            var allocated: UInt64 = 0
            for file in files {
                let usage = fileUsage(file) ?? (0, 0)
                size += usage.size
                allocated += usage.allocated
                if files.count > 1 { stats.append(("file:" + baseName(file), usage.size)) }
            }
            stats += [("file_bytes", size), ("file_allocated_bytes", allocated)]
        }
        return stats
    }

    private func mark(_ edge: String, _ id: String) {
        _ = access(syscallMarkerPrefix + edge + "/" + id, F_OK)
    }
}

/// The last path component.
func baseName(_ path: String) -> String {
    path.split(separator: "/").last.map(String.init) ?? path
}
