// Peak resident memory of this process.
//
// Peak RSS belongs to a process, so each engine's phase runs in a child process of its own (the
// bench re-executes itself, see Child.swift) and the child reports its high-water mark at the end.
// Pages of a memory-mapped file that the process touched count as resident, for every engine.

/// Kernel-reported memory of this process, in bytes.
struct MemoryUsage: Sendable {
    /// High-water mark of the resident set (VmHWM).
    var peakRSS: UInt64
    /// Resident set now (VmRSS).
    var currentRSS: UInt64

    /// Reads /proc/self/status; nil where there is no /proc.
    static func current() -> MemoryUsage? {
        guard let status = readSmallFile("/proc/self/status") else { return nil }
        var peak: UInt64?
        var now: UInt64?
        for line in status.split(separator: "\n") {
            if line.hasPrefix("VmHWM:") { peak = kilobytes(line) }
            if line.hasPrefix("VmRSS:") { now = kilobytes(line) }
        }
        guard let peak, let now else { return nil }
        return MemoryUsage(peakRSS: peak, currentRSS: now)
    }

    /// "VmHWM:     12345 kB" → 12345 × 1024.
    private static func kilobytes(_ line: Substring) -> UInt64? {
        let digits = line.drop(while: { !$0.isNumber }).prefix(while: { $0.isNumber })
        return UInt64(digits).map { $0 * 1024 }
    }
}
