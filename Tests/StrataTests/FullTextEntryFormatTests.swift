import Testing
import Foundation
import StrataStorage
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

    // MARK: Blocks

    /// A word's blocks as §8.5 describes them, built the slow and obvious way from its postings
    /// (primary key, then the word count and positions as bytes), in key order.
    static func expectedBlocks(word: [UInt8], _ postings: [(key: [UInt8], rest: [UInt8])]) -> [(key: [UInt8], value: [UInt8])] {
        var blocks: [(key: [UInt8], value: [UInt8])] = []
        var open: [(key: [UInt8], rest: [UInt8])] = []
        func encode(_ list: [(key: [UInt8], rest: [UInt8])]) -> [UInt8] {
            var value: [UInt8] = []
            varint(list.count, to: &value)
            for (i, posting) in list.enumerated() {
                let previous = i == 0 ? posting.key : list[i - 1].key
                var shared = 0
                while shared < min(previous.count, posting.key.count) && previous[shared] == posting.key[shared] { shared += 1 }
                varint(shared, to: &value)
                varint(posting.key.count - shared, to: &value)
                value += posting.key[shared...]
                value += posting.rest
            }
            return value
        }
        for posting in postings {
            if let first = open.first {
                let budget = min(256, Limits.maxKeySize(pageSize: 4096) + 8 - (word.count + first.key.count))
                if encode(open + [posting]).count > max(64, budget) {
                    blocks.append((word + first.key, encode(open)))
                    open = []
                }
            }
            open.append(posting)
        }
        if let first = open.first { blocks.append((word + first.key, encode(open))) }
        return blocks
    }

    static func checkBlocks(word: [UInt8], _ postings: [(key: [UInt8], rest: [UInt8])], _ context: String) throws {
        var writer = PostingBlockWriter(word: word)
        for posting in postings {
            posting.key.withUnsafeBytes { key in posting.rest.withUnsafeBytes { writer.add(primaryKey: key, rest: $0) } }
        }
        writer.close()
        let wanted = expectedBlocks(word: word, postings)
        #expect(writer.blocks.map(\.key) == wanted.map(\.key), "\(context): keys")
        #expect(writer.blocks.map(\.value) == wanted.map(\.value), "\(context): values")
        // Read back: every posting, in order.
        var read: [(key: [UInt8], rest: [UInt8])] = []
        var reader = PostingBlockReader()
        for block in writer.blocks {
            try block.key.withUnsafeBytes { key in try block.value.withUnsafeBytes { try reader.load(key: key, wordEnd: word.count, value: $0) } }
            while try reader.next() { read.append((reader.primaryKey, Array(reader.bytes[reader.rest]))) }
        }
        #expect(read.map(\.key) == postings.map(\.key), "\(context): keys read back")
        #expect(read.map(\.rest) == postings.map(\.rest), "\(context): postings read back")
    }

    /// A posting's word count and positions, as `pairs` writes them after the primary key's length.
    static func rest(words: Int, positions: [Int]) -> [UInt8] {
        var out: [UInt8] = []
        varint(words, to: &out)
        varint(positions.count, to: &out)
        var last = 0
        for p in positions {
            varint(p - last, to: &out)
            last = p
        }
        return out
    }

    @Test func blocksAsDocumented() throws {
        var word: [UInt8] = []
        KeyEncoding.appendBytes(Array("room".utf8), to: &word)
        let ints = (0..<500).map { i -> [UInt8] in
            var key: [UInt8] = [1]
            KeyEncoding.appendInt(Int64(i * 37 - 3_000), to: &key)
            return key
        }
        try Self.checkBlocks(word: word, ints.map { ($0, Self.rest(words: 9, positions: [3])) }, "Int64 keys")
        try Self.checkBlocks(word: word, [(ints[0], Self.rest(words: 5_000, positions: Array(0..<2_000)))], "one posting over the budget")
        try Self.checkBlocks(
            word: word, ints.prefix(40).enumerated().map { i, key in (key, Self.rest(words: 300, positions: Array(0..<(i * 7 % 150)))) },
            "long postings: a few a block, some alone")
        // String keys: one a prefix of the next, long shared stems, 0x00 escapes.
        let strings = ["", "a", "a\u{0}", "ab", "abc", "abd", "b", String(repeating: "z", count: 300), String(repeating: "z", count: 301)].map { s -> [UInt8] in
            var key: [UInt8] = []
            KeyEncoding.appendBytes(Array(s.utf8), to: &key)
            return key
        }.sorted { $0.lexicographicallyPrecedes($1) }
        try Self.checkBlocks(word: word, strings.map { ($0, Self.rest(words: 1, positions: [0])) }, "string keys")
    }

    /// Damaged blocks are errors, never a crash or a wrong read: keys out of order or repeated, a
    /// first posting that is not the key's, counts and lengths that do not match the bytes, and
    /// random bytes.
    @Test func damagedBlocksThrow() throws {
        let word: [UInt8] = [0x61, 0, 0]
        func reads(_ pk: [UInt8], _ value: [UInt8]) -> Bool {
            var reader = PostingBlockReader()
            do {
                try (word + pk).withUnsafeBytes { key in try value.withUnsafeBytes { try reader.load(key: key, wordEnd: word.count, value: $0) } }
                while try reader.next() {}
                return true
            } catch StrataError.corruptRecord {
                return false
            } catch {
                Issue.record("\(error)")
                return false
            }
        }
        let posting: [UInt8] = [1, 1, 0]  // 1 word, 1 position, at 0
        #expect(reads([5], [1, 1, 0] + posting))
        #expect(!reads([5], [0]), "no postings")
        #expect(!reads([5], [1, 1, 1, 6] + posting), "a first posting that is not the key's")
        #expect(!reads([5], [2, 1, 0] + posting + [0, 1, 4] + posting), "a smaller key")
        #expect(!reads([5], [2, 1, 0] + posting + [1, 0] + posting), "the same key again")
        #expect(!reads([5], [2, 1, 0] + posting + [0, 1, 5] + posting), "a shared prefix not the longest")
        #expect(!reads([5], [1, 1, 0] + posting + [7]), "bytes after the last posting")
        #expect(!reads([5], [2, 1, 0] + posting), "fewer postings than counted")
        #expect(!reads([5], [1, 1, 0, 1, 200, 1] + [0]), "positions past the end")
        var rng = SeededRandom(seed: 0xB10C)
        for _ in 0..<2_000 {
            let value = (0..<rng.below(24)).map { _ in UInt8(truncatingIfNeeded: rng.below(256)) }
            _ = reads([UInt8(truncatingIfNeeded: rng.below(256))], value)
        }
    }
}
