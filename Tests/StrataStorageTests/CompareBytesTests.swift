import Testing

@testable import StrataStorage

/// `compareBytes` (the order of every key in every tree) against Swift's own lexicographic order
/// of byte arrays, shorter first on a common prefix. The arrays share prefixes of every length
/// around the eight bytes its fast path loads at once, and hold the byte values where a signed
/// or little-endian comparison would go wrong (0x00, 0x7f, 0x80, 0xff).
struct CompareBytesTests {
    @Test(arguments: [UInt64(7), 0x5eed_c0de, 1 << 40])
    func matchesLexicographicOrder(seed: UInt64) {
        var rng = SplitMix(seed: seed)
        let special: [UInt8] = [0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff]
        func byte() -> UInt8 {
            rng.next() % 3 == 0 ? special[Int(rng.next() % UInt64(special.count))] : UInt8(truncatingIfNeeded: rng.next())
        }
        var mismatches = 0
        for _ in 0..<20_000 {
            let shared = Int(rng.next() % 20)
            let prefix = (0..<shared).map { _ in byte() }
            let a = prefix + (0..<Int(rng.next() % 6)).map { _ in byte() }
            var b = prefix + (0..<Int(rng.next() % 6)).map { _ in byte() }
            if rng.next() % 8 == 0 { b = a }  // equal keys too
            let expected = a.lexicographicallyPrecedes(b) ? -1 : (b.lexicographicallyPrecedes(a) ? 1 : 0)
            let got = a.withUnsafeBytes { x in b.withUnsafeBytes { y in compareBytes(x, y) } }
            if got.signum() != expected {
                mismatches += 1
                if mismatches <= 5 { Issue.record("seed \(seed): compareBytes(\(a), \(b)) = \(got), expected sign \(expected)") }
            }
        }
        #expect(mismatches == 0, "seed \(seed)")
    }
}
