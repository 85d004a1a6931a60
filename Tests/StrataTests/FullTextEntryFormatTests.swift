import Testing
import Foundation
@testable import Strata

// The bytes of a text's full-text entries, against FORMAT.md §8.5 spelled out here on its own:
// one entry per distinct word, in word order; key = the word's key encoding (§8.1: bytes, a 0x00
// written 0x00 0xFF, then 0x00 0x00) then the primary key; value = varints of the primary key's
// length, the text's word count, the word's number of positions, then each position's gap from
// the one before (the first from 0). `TextPostingValue.pairs` writes them through raw pointers
// into one buffer sized in advance, so a miscounted bound or varint shows up here as wrong bytes.
//
//   STRATA_FTS_FORMAT_CASES  random texts (default 400); every failure names the seed and case

@Suite struct FullTextEntryFormatTests {
    static func varint(_ value: Int, to out: inout [UInt8]) {
        var v = UInt64(value)
        while v >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }

    /// The entries as §8.5 describes them, built the slow and obvious way.
    static func expected(_ words: [[UInt8]], primaryKey: [UInt8]) -> [(key: [UInt8], value: [UInt8])] {
        var positions: [[UInt8]: [Int]] = [:]
        for (i, word) in words.enumerated() { positions[word, default: []].append(i) }
        return positions.keys.sorted { $0.lexicographicallyPrecedes($1) }.map { word in
            var key: [UInt8] = []
            KeyEncoding.appendBytes(word, to: &key)
            key += primaryKey
            var value: [UInt8] = []
            varint(primaryKey.count, to: &value)
            varint(words.count, to: &value)
            let list = positions[word] ?? []
            varint(list.count, to: &value)
            var last = 0
            for p in list {
                varint(p - last, to: &value)
                last = p
            }
            return (key, value)
        }
    }

    static func check(_ words: [[UInt8]], primaryKey: [UInt8], _ context: String) {
        var list = WordList()
        for word in words { list.append(word) }
        let made = TextPostingValue.pairs(words: list, primaryKey: primaryKey).map { (key: Array($0.key), value: Array($0.value)) }
        let wanted = expected(words, primaryKey: primaryKey)
        #expect(made.map(\.key) == wanted.map(\.key), "\(context): keys")
        #expect(made.map(\.value) == wanted.map(\.value), "\(context): values")
    }

    @Test func edgeTexts() {
        let long = [UInt8](repeating: 0x61, count: 120)
        Self.check([], primaryKey: [1, 2], "no words")
        Self.check([[0x61]], primaryKey: [], "an empty primary key")
        Self.check([long, long + [0x62], long, [0x61]], primaryKey: [1, 0, 0, 0, 0, 0, 0, 0, 7], "words sharing 120 bytes")
        Self.check(Array(repeating: Array("the".utf8), count: 300), primaryKey: [9], "one word 300 times: two-byte varints")
        // The tokenizer makes no word with a 0x00 byte, but the key encoding has a rule for one.
        Self.check([[0x61, 0], [0x61], [0, 0x62], [0x61, 0], [0x61, 0, 0]], primaryKey: [5, 0], "0x00 bytes escaped")
        Self.check((0..<200).map { Array("w\($0 % 150)".utf8) }, primaryKey: Array(repeating: 0xFF, count: 40), "positions past 127")
        Self.check(
            [Array("über".utf8), Array("uber".utf8), Array("日本".utf8), Array("abcdefgh".utf8), Array("abcdefghi".utf8), Array("abcdefg".utf8)], primaryKey: [3],
            "non-ASCII, eight-byte prefixes")
    }

    @Test func randomTexts() {
        let seed: UInt64 = 20_261_205
        let cases = Int(ProcessInfo.processInfo.environment["STRATA_FTS_FORMAT_CASES"] ?? "") ?? 400
        var rng = SeededGenerator(base: SeededRandom(seed: seed))
        let vocabulary: [[UInt8]] = (0..<60).map { i in
            // Short and long words, some sharing their first eight bytes, some multi-byte.
            let stem = i % 3 == 0 ? "prefixed" : (i % 3 == 1 ? "ä" : "")
            return Array("\(stem)\(String(repeating: "x", count: i % 11))\(i)".utf8)
        }
        for c in 0..<cases {
            let count = Int.random(in: 0...(c % 10 == 0 ? 400 : 20), using: &rng)
            let words = (0..<count).map { _ in vocabulary[Int.random(in: 0..<(1 + c % vocabulary.count), using: &rng)] }
            let primaryKey = (0..<Int.random(in: 0...12, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            Self.check(words, primaryKey: primaryKey, "seed \(seed) case \(c)")
        }
    }
}
