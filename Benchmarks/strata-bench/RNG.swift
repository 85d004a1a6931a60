// Deterministic data: every engine sees the same keys, values and random choices for one seed.

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough to spread keys uniformly.
struct SplitMix64 {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    @inline(__always)
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform integer in `0..<bound` (Lemire's multiply-shift; the bias is below 2^-40 here).
    @inline(__always)
    mutating func next(below bound: Int) -> Int {
        Int(truncatingIfNeeded: next().multipliedFullWidth(by: UInt64(bound)).high)
    }
}

/// The key-value data set: entry `i` has a 24-byte random key and a 150-byte random value, both
/// functions of (seed, i). Nothing is kept in memory, so each engine's peak RSS is its own; making
/// a key costs a few nanoseconds, the same for every engine.
struct KVData: Sendable {
    static let keySize = 24
    static let valueSize = 150

    let seed: UInt64

    /// Writes key `i` (24 bytes) at `p`.
    @inline(__always)
    func key(_ i: Int, into p: UnsafeMutableRawPointer) {
        var rng = SplitMix64(seed: seed ^ (UInt64(truncatingIfNeeded: i) &* 0xD1B5_4A32_D192_ED03))
        p.storeBytes(of: rng.next(), toByteOffset: 0, as: UInt64.self)
        p.storeBytes(of: rng.next(), toByteOffset: 8, as: UInt64.self)
        p.storeBytes(of: rng.next(), toByteOffset: 16, as: UInt64.self)
    }

    /// Writes value `i` (150 bytes) at `p`.
    @inline(__always)
    func value(_ i: Int, into p: UnsafeMutableRawPointer) {
        var rng = SplitMix64(seed: ~seed ^ (UInt64(truncatingIfNeeded: i) &* 0x8CB9_2BA7_2F3D_8DD7))
        var offset = 0
        while offset + 8 <= KVData.valueSize {
            p.storeBytes(of: rng.next(), toByteOffset: offset, as: UInt64.self)
            offset += 8
        }
        var tail = rng.next()
        while offset < KVData.valueSize {
            p.storeBytes(of: UInt8(truncatingIfNeeded: tail), toByteOffset: offset, as: UInt8.self)
            tail >>= 8
            offset += 1
        }
    }

    /// The random-choice stream of one workload (or one thread of it).
    func choices(_ stream: UInt64) -> SplitMix64 {
        SplitMix64(seed: seed &+ 0x5851_F42D_4C95_7F2D &* (stream &+ 1))
    }
}

/// A checksum over every byte of `bytes`, so that reads cannot be optimised away and engines can
/// be compared: equal data read in any order gives equal sums (they are added with wrapping).
@inline(__always)
func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
    guard let base = bytes.baseAddress else { return 0 }
    var sum: UInt64 = UInt64(bytes.count)
    var offset = 0
    while offset + 8 <= bytes.count {
        sum = (sum ^ base.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) &* 0x100_0000_01B3
        offset += 8
    }
    while offset < bytes.count {
        sum = (sum ^ UInt64(base.load(fromByteOffset: offset, as: UInt8.self))) &* 0x100_0000_01B3
        offset += 1
    }
    return sum
}
