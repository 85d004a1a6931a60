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
}
