import Foundation
import Testing

@testable import Strata

/// `ByteKey` stands in for `[UInt8]` in sets and dictionaries: it must mean what the array means
/// (equal bytes, equal keys; a set of them holds what a set of the arrays holds), for keys that
/// differ only in length, in their last byte, or are prefixes of one another.
@Suite struct ByteKeyTests {
    @Test func setsAndDictionariesHoldWhatArraysDo() {
        let seed: UInt64 = 4242
        var rng = SeededRandom(seed: seed)
        var arrays = Set<[UInt8]>()
        var keys = Set<ByteKey>()
        var counts: [ByteKey: Int] = [:]
        var reference: [[UInt8]: Int] = [:]
        let shared = [UInt8](repeating: 0x6D, count: 700)
        for _ in 0..<5_000 {
            var bytes: [UInt8]
            switch rng.below(4) {
            case 0: bytes = []
            case 1: bytes = (0..<rng.below(12)).map { _ in UInt8(rng.below(3)) }
            case 2: bytes = shared + (0..<rng.below(3)).map { _ in UInt8(rng.below(2)) }
            default: bytes = (0..<(8 + rng.below(40))).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            }
            #expect(arrays.insert(bytes).inserted == keys.insert(ByteKey(bytes)).inserted, "seed \(seed): \(bytes.count) bytes")
            counts[ByteKey(bytes), default: 0] += 1
            reference[bytes, default: 0] += 1
        }
        #expect(Set(keys.map(\.bytes)) == arrays, "seed \(seed)")
        #expect(counts.count == reference.count, "seed \(seed)")
        for (bytes, n) in reference { #expect(counts[ByteKey(bytes)] == n, "seed \(seed)") }
        let raw: [UInt8] = [1, 2, 3]
        #expect(raw.withUnsafeBytes { ByteKey($0) } == ByteKey(raw))
        #expect(ByteKey([1, 2]) != ByteKey([1, 2, 0]))
        #expect(ByteKey([]) == ByteKey([]))
    }

    /// `KeyEncoding.compare` orders keys as the standard library's lexicographic comparison of
    /// their bytes does (shorter first on a common prefix), whatever their lengths around its
    /// eight-byte fast path and wherever they first differ: before, at and after the eighth byte,
    /// in the high bit of a byte, or not at all.
    @Test func keyComparisonIsLexicographicOrder() {
        let seed: UInt64 = 20_261_206
        var rng = SeededRandom(seed: seed)
        func key(_ length: Int) -> [UInt8] { (0..<length).map { _ in rng.below(3) == 0 ? 0xFF : UInt8(truncatingIfNeeded: rng.next()) } }
        for round in 0..<20_000 {
            let a = key(rng.below(20))
            var b = a
            switch rng.below(4) {
            case 0: b = key(rng.below(20))
            case 1:
                // The same bytes to a point, then one byte changed (its high bit, or anything).
                if !b.isEmpty {
                    let at = rng.below(b.count)
                    b[at] = rng.below(2) == 0 ? b[at] ^ 0x80 : UInt8(truncatingIfNeeded: rng.next())
                }
            case 2: b = Array(a.prefix(rng.below(a.count + 1)))
            default: b = a + key(rng.below(4))
            }
            let expected = a == b ? 0 : (a.lexicographicallyPrecedes(b) ? -1 : 1)
            let order = a.withUnsafeBytes { x in b.withUnsafeBytes { y in KeyEncoding.compare(x, y) } }
            #expect(order.signum() == expected, "seed \(seed), round \(round): \(a) against \(b)")
        }
    }
}
