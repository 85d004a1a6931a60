import Foundation
import StrataStorage
import Testing

@testable import Strata

/// Hunts in `PostingBlockReader.next(atLeast:)` (the one-pass scan of a block), `PostingCursor`'s
/// `seek(atLeast:)` / `meet` (with the cached first key of the next block) and the intersection of
/// whole words (`TextIndexReader.allWholeWords`), against references written here: a decoder of
/// FORMAT.md §8.5's blocks, a list of each word's keys, and a plain dictionary of texts.
@Suite struct ScanHuntTests {
    typealias Posting = (key: [UInt8], rest: [UInt8])

    // MARK: - A reference for blocks (FORMAT.md §8.5)

    /// STRATA_SCANHUNT_SEED replaces every test's fixed seed (to run other seeds by hand).
    static func seed(_ fixed: UInt64) -> UInt64 {
        ProcessInfo.processInfo.environment["STRATA_SCANHUNT_SEED"].flatMap { UInt64($0) } ?? fixed
    }

    static let word: [UInt8] = {
        var w: [UInt8] = []
        KeyEncoding.appendBytes(Array("w".utf8), to: &w)
        return w
    }()

    /// A varint as ByteReader reads it (LEB128, at most 10 bytes, no overflow).
    static func readVarint(_ bytes: [UInt8], _ p: inout Int) -> UInt64? {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard p < bytes.count else { return nil }
            let byte = bytes[p]
            p += 1
            if shift == 63 && byte > 1 { return nil }
            result |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return result }
            shift += 7
            if shift > 63 { return nil }
        }
    }

    /// A varint passed over by its last byte (high bit clear), as the reader passes over word
    /// counts and positions.
    static func skipVarint(_ bytes: [UInt8], _ p: inout Int) -> Bool {
        while p < bytes.count {
            let b = bytes[p]
            p += 1
            if b < 0x80 { return true }
        }
        return false
    }

    /// The postings of a block as §8.5 lays them out, checked as the reader documents it checks
    /// them (`next`): the good postings before the first damaged one, and where the damage is
    /// (-1: the head or the key; nil: none).
    static func decode(key: [UInt8], wordEnd: Int, value: [UInt8], keyLength: Int?) -> (good: [Posting], damage: Int?) {
        guard wordEnd < key.count else { return ([], -1) }
        var p = 0
        guard let n = readVarint(value, &p), n >= 1, n <= UInt64(value.count) else { return ([], -1) }
        var good: [Posting] = []
        var previous: [UInt8] = []
        for i in 0..<Int(n) {
            guard let shared64 = readVarint(value, &p), shared64 <= UInt64(Int32.max),
                let suffix64 = readVarint(value, &p), suffix64 <= UInt64(Int32.max)
            else { return (good, i) }
            let shared = Int(shared64), suffix = Int(suffix64)
            var current: [UInt8]
            if i == 0 {
                guard shared == key.count - wordEnd, suffix == 0 else { return (good, i) }
                current = Array(key[wordEnd...])
            } else {
                guard suffix <= value.count - p, shared <= previous.count, suffix > 0 else { return (good, i) }
                guard shared == previous.count || value[p] > previous[shared] else { return (good, i) }
                current = Array(previous[0..<shared]) + value[p..<(p + suffix)]
                p += suffix
            }
            if let keyLength, current.count != keyLength { return (good, i) }
            let restStart = p
            guard skipVarint(value, &p), let positions64 = readVarint(value, &p), positions64 <= UInt64(Int32.max),
                positions64 <= UInt64(value.count - p)
            else { return (good, i) }
            for _ in 0..<Int(positions64) { guard skipVarint(value, &p) else { return (good, i) } }
            if i == Int(n) - 1 && p != value.count { return (good, i) }
            good.append((current, Array(value[restStart..<p])))
            previous = current
        }
        return (good, nil)
    }

    /// A block's value as §8.5 writes it (any number of postings: writers cut at a budget, readers
    /// must not care).
    static func encode(_ postings: [Posting]) -> [UInt8] {
        var value: [UInt8] = []
        appendVarint(UInt64(postings.count), to: &value)
        var previous: [UInt8] = []
        for (i, posting) in postings.enumerated() {
            var shared = 0
            if i == 0 {
                shared = posting.key.count
            } else {
                while shared < min(previous.count, posting.key.count) && previous[shared] == posting.key[shared] { shared += 1 }
            }
            appendVarint(UInt64(shared), to: &value)
            appendVarint(UInt64(posting.key.count - shared), to: &value)
            value += posting.key[shared...]
            value += posting.rest
            previous = posting.key
        }
        return value
    }

    static func less(_ a: [UInt8], _ b: [UInt8]) -> Bool { a.lexicographicallyPrecedes(b) }

    // MARK: - Random postings

    enum KeyKind: CaseIterable { case int64, string, raw }

    static func rest(_ rng: inout SeededRandom) -> [UInt8] {
        let words = [1, 3, 127, 128, 129, 300, 16_383, 16_384, 2_000_000, Int(Int32.max)][rng.below(10)]
        let n = rng.below(12) == 0 ? 0 : 1 + rng.below(rng.below(4) == 0 ? 40 : 4)
        let positions = (0..<n).map { _ in rng.below(words + 1) }.sorted()
        var out: [UInt8] = []
        appendVarint(UInt64(words), to: &out)
        appendVarint(UInt64(n), to: &out)
        var last = 0
        for position in positions {
            appendVarint(UInt64(position - last), to: &out)
            last = position
        }
        return out
    }

    static func string(_ rng: inout SeededRandom) -> [UInt8] {
        let stems = ["", "a", "message/2026-12-05/", String(repeating: "z", count: 70), String(repeating: "ab", count: 12), "a\u{0}"]
        var s = Array(stems[rng.below(stems.count)].utf8)
        let alphabet: [UInt8] = [0x00, 0x01, 0x30, 0x61, 0x62, 0x7F, 0xC3, 0xFF]
        let tail = [0, 1, 2, 5, 17, 65, 130][rng.below(7)]
        for _ in 0..<rng.below(tail + 1) { s.append(alphabet[rng.below(alphabet.count)]) }
        var key: [UInt8] = []
        KeyEncoding.appendBytes(s, to: &key)
        return key
    }

    static func raw(_ rng: inout SeededRandom) -> [UInt8] {
        let alphabet: [UInt8] = [0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]
        let length = 1 + rng.below([3, 9, 20, 70, 140][rng.below(5)])
        return (0..<length).map { _ in alphabet[rng.below(alphabet.count)] }
    }

    static func int64(_ rng: inout SeededRandom, base: Int64) -> [UInt8] {
        let value: Int64
        switch rng.below(4) {
        case 0: value = Int64(bitPattern: rng.next())
        case 1: value = [Int64.min, Int64.max, 0, -1, 1][rng.below(5)]
        default: value = base &+ Int64(rng.below(600)) - 300
        }
        var key: [UInt8] = []
        KeyEncoding.appendInt(value, to: &key)
        return key
    }

    /// Sorted distinct keys of one kind.
    static func keys(_ kind: KeyKind, _ count: Int, _ rng: inout SeededRandom) -> [[UInt8]] {
        let base = Int64(bitPattern: rng.next()) >> 8
        var set = Set<[UInt8]>()
        for _ in 0..<count {
            switch kind {
            case .int64: set.insert(int64(&rng, base: base))
            case .string: set.insert(string(&rng))
            case .raw: set.insert(raw(&rng))
            }
        }
        return set.sorted(by: less)
    }

    /// Targets around the keys: below the first, equal, between, above the last, prefixes and
    /// extensions of keys, keys with one byte moved.
    static func target(_ keys: [[UInt8]], _ rng: inout SeededRandom) -> [UInt8] {
        let key = keys[rng.below(keys.count)]
        switch rng.below(10) {
        case 0: return []
        case 1: return [0x00]
        case 2: return Array(repeating: 0xFF, count: 1 + rng.below(200))
        case 3, 4: return key
        case 5: return Array(key[0..<rng.below(key.count + 1)])
        case 6: return key + (0..<(1 + rng.below(3))).map { _ in [0x00, 0x01, 0xFF][rng.below(3)] }
        case 7:
            var t = key
            let i = rng.below(t.count)
            t[i] = rng.below(2) == 0 ? t[i] &+ 1 : t[i] &- 1
            return rng.below(2) == 0 ? Array(t[0...i]) : t
        case 8:
            let other = keys[rng.below(keys.count)]
            let n = min(key.count, other.count)
            var shared = 0
            while shared < n && key[shared] == other[shared] { shared += 1 }
            return Array(key[0..<shared]) + [0x80]
        default: return (0..<rng.below(12)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        }
    }

    // MARK: - Differential driving of a reader

    /// Runs random `next`, `next(atLeast:)` and `rewind` calls on `reader` (loaded with the block)
    /// against the reference. Returns false when the block is damaged and the reader threw where
    /// the reference says it must (the reader is then not used again).
    static func drive(
        _ reader: inout PostingBlockReader, key: [UInt8], value: [UInt8], keyLength: Int?, ops: Int, _ rng: inout SeededRandom, _ context: String
    ) {
        let (good, damage) = decode(key: key, wordEnd: word.count, value: value, keyLength: keyLength)
        reader.keyLength = keyLength
        do {
            try key.withUnsafeBytes { k in try value.withUnsafeBytes { try reader.load(key: k, wordEnd: word.count, value: $0) } }
        } catch StrataError.corruptRecord {
            #expect(damage == -1, "\(context): load threw, the reference reads the head (damage \(String(describing: damage)))")
            return
        } catch {
            Issue.record("\(context): load threw \(error)")
            return
        }
        if damage == -1 {
            Issue.record("\(context): load took a block whose head or key is damaged")
            return
        }
        let count = damage == nil ? good.count : Int(readHeadCount(value))
        #expect(reader.count == count, "\(context): count")
        var consumed = 0  // postings read so far (the current one is consumed - 1)
        var log: [String] = []
        let keyList = good.map(\.key)
        for _ in 0..<ops {
            let op = rng.below(20)
            if op == 0 {
                reader.rewind()
                consumed = 0
                log.append("rewind")
                #expect(!reader.isAtEnd, "\(context): isAtEnd after rewind")
                continue
            }
            let target: [UInt8]? = op < 9 || keyList.isEmpty ? nil : Self.target(keyList, &rng)
            // The model: the posting reached, or nil at the end; a throw when the damage comes first.
            var expected: Int? = nil
            var throwsAt: Int? = nil
            var j = consumed
            while j < count {
                if let damage, j == damage {
                    throwsAt = j
                    break
                }
                if target.map({ !less(good[j].key, $0) }) ?? true {
                    expected = j
                    break
                }
                j += 1
            }
            log.append(target.map { "next(atLeast: \($0))" } ?? "next()")
            do {
                let found = try target.map { try reader.next(atLeast: $0) } ?? reader.next()
                if let throwsAt {
                    Issue.record("\(context): \(log.suffix(6)) read past the damaged posting \(throwsAt) (found: \(found), key \(reader.primaryKey))")
                    return
                }
                if let expected {
                    #expect(found, "\(context): \(log.suffix(6)) ended, expected posting \(expected) \(good[expected].key)")
                    guard found else { return }
                    #expect(
                        reader.primaryKey == good[expected].key,
                        "\(context): \(log.suffix(6)) key \(reader.primaryKey), expected \(good[expected].key) (posting \(expected))")
                    #expect(reader.keyCount == good[expected].key.count, "\(context): keyCount")
                    #expect(reader.withRest { Array($0) } == good[expected].rest, "\(context): \(log.suffix(6)) rest of posting \(expected)")
                    #expect(reader.isAtEnd == (expected == count - 1), "\(context): \(log.suffix(6)) isAtEnd at posting \(expected) of \(count)")
                    if let t = target { #expect(reader.compareKey(t) >= 0, "\(context): compareKey") }
                    // posting() reads what `rest` holds, and checks it as TextPostingValue.read does.
                    let theirs = try? reader.posting()
                    let reference = try? good[expected].rest.withUnsafeBytes { try TextPostingValue.read($0) }
                    #expect(theirs?.words == reference?.words && theirs?.positions == reference?.positions, "\(context): posting()")
                    consumed = expected + 1
                } else {
                    #expect(!found, "\(context): \(log.suffix(6)) found \(reader.primaryKey) past the last posting")
                    #expect(reader.isAtEnd, "\(context): \(log.suffix(6)) not at end after running out")
                    consumed = count
                }
            } catch StrataError.corruptRecord(let message) {
                #expect(
                    throwsAt != nil,
                    "\(context): \(log.suffix(6)) threw \"\(message)\" on a good posting (expected \(String(describing: expected)), good \(good.count) of \(count)); key \(key) value \(value)"
                )
                return
            } catch {
                Issue.record("\(context): \(error)")
                return
            }
        }
    }

    static func readHeadCount(_ value: [UInt8]) -> UInt64 {
        var p = 0
        return readVarint(value, &p) ?? 0
    }

    static func postings(_ kind: KeyKind, _ rng: inout SeededRandom, max: Int) -> [Posting] {
        keys(kind, 1 + rng.below(max), &rng).map { ($0, rest(&rng)) }
    }

    /// Blocks of random postings, hand-encoded (any size) and as `PostingBlockWriter` cuts them.
    static func blocks(_ kind: KeyKind, _ rng: inout SeededRandom) -> [(key: [UInt8], value: [UInt8])] {
        let postings = postings(kind, &rng, max: rng.below(3) == 0 ? 300 : 40)
        if rng.below(2) == 0 {
            return [(word + postings[0].key, encode(postings))]
        }
        var writer = PostingBlockWriter(word: word)
        for posting in postings {
            posting.key.withUnsafeBytes { k in posting.rest.withUnsafeBytes { writer.add(primaryKey: k, rest: $0) } }
        }
        writer.close()
        return writer.blocks
    }

    // MARK: - 1. next(atLeast:) against the reference

    @Test func scanMatchesTheReferenceOnValidBlocks() throws {
        let seed = ScanHuntTests.seed(0x5CA9_0001)
        var rng = SeededRandom(seed: seed)
        // One reader for everything: its buffers are reused across blocks of every key length.
        var reader = PostingBlockReader()
        var blocksRead = 0
        let start = Date()
        while blocksRead < 1_500 && Date().timeIntervalSince(start) < 2 {
            let kind = KeyKind.allCases[rng.below(3)]
            for block in Self.blocks(kind, &rng) {
                // The writer's blocks and ours are what §8.5 says.
                let (good, damage) = Self.decode(key: block.key, wordEnd: Self.word.count, value: block.value, keyLength: nil)
                #expect(damage == nil && !good.isEmpty, "seed \(seed): a valid block the reference refuses")
                let keyLength = kind == .int64 && rng.below(2) == 0 ? 8 : nil
                Self.drive(
                    &reader, key: block.key, value: block.value, keyLength: keyLength, ops: 3 * good.count + 4, &rng, "seed \(seed) block \(blocksRead) \(kind)"
                )
                blocksRead += 1
            }
        }
        #expect(blocksRead > 100)
    }

    /// Every key of a block as a target, in order and from a fresh start, and every prefix and
    /// one-byte extension of it: the answer is the first posting at or above it.
    @Test func everyTargetFromEveryPosition() throws {
        let seed = ScanHuntTests.seed(0x5CA9_0002)
        var rng = SeededRandom(seed: seed)
        var reader = PostingBlockReader()
        for round in 0..<12 {
            let kind = KeyKind.allCases[round % 3]
            let postings = Self.postings(kind, &rng, max: 45)
            let key = Self.word + postings[0].key
            let value = Self.encode(postings)
            let keys = postings.map(\.key)
            var targets: [[UInt8]] = [[], [0]]
            for k in keys {
                targets.append(k)
                targets.append(k + [0])
                targets.append(k + [0xFF])
                if k.count > 1 { targets.append(Array(k.dropLast())) }
                var moved = k
                moved[moved.count - 1] &+= 1
                targets.append(moved)
            }
            for from in 0..<keys.count {
                for target in targets {
                    try key.withUnsafeBytes { k in try value.withUnsafeBytes { try reader.load(key: k, wordEnd: Self.word.count, value: $0) } }
                    for _ in 0...from { _ = try reader.next() }
                    let found = try reader.next(atLeast: target)
                    let expected = keys.indices.first { $0 > from && !Self.less(keys[$0], target) }
                    let context = "seed \(seed) round \(round) \(kind): from posting \(from) \(keys[from]) to \(target)"
                    #expect(found == (expected != nil), "\(context)")
                    if let expected, found {
                        #expect(reader.primaryKey == keys[expected], "\(context): got \(reader.primaryKey), expected \(keys[expected])")
                        #expect(reader.withRest { Array($0) } == postings[expected].rest, "\(context): rest")
                    }
                    if expected == nil { #expect(reader.isAtEnd, "\(context): isAtEnd") }
                }
            }
        }
    }

    /// A block whose keys grow past the reused key buffer mid-scan (the `.needs` retry): a short
    /// first key, then keys of 20, 100, 1,000 bytes, the target past all of them or among them.
    @Test func keysOutgrowingTheBufferMidScan() throws {
        var reader = PostingBlockReader()
        let stem = [UInt8](repeating: 0x61, count: 10)
        let keys: [[UInt8]] = [
            [0x61], stem, stem + [UInt8](repeating: 0x62, count: 10), stem + [UInt8](repeating: 0x62, count: 90), stem + [UInt8](repeating: 0x62, count: 990),
            stem + [0x63],
        ]
        let postings = keys.map { ($0, [UInt8]([5, 1, 2])) }
        let value = Self.encode(postings)
        let key = Self.word + keys[0]
        for (t, target) in (keys + [[0x61, 0x61], stem + [0x62, 0x62, 0x63], [0x62], keys[4] + [0]]).enumerated() {
            for from in 0..<keys.count {
                // A fresh reader (a buffer of 16 bytes) and one that read long keys before.
                for fresh in [true, false] {
                    if fresh { reader = PostingBlockReader() }
                    try key.withUnsafeBytes { k in try value.withUnsafeBytes { try reader.load(key: k, wordEnd: Self.word.count, value: $0) } }
                    for _ in 0...from { _ = try reader.next() }
                    let found = try reader.next(atLeast: target)
                    let expected = keys.indices.first { $0 > from && !Self.less(keys[$0], target) }
                    #expect(found == (expected != nil), "target \(t) from \(from) fresh \(fresh)")
                    if let expected, found { #expect(reader.primaryKey == keys[expected], "target \(t) from \(from) fresh \(fresh)") }
                }
            }
        }
    }

    // MARK: - 2. Damaged blocks

    static func damage(_ block: (key: [UInt8], value: [UInt8]), _ rng: inout SeededRandom) -> (key: [UInt8], value: [UInt8], what: String) {
        var key = block.key
        var value = block.value
        var what: [String] = []
        for _ in 0..<(1 + rng.below(3)) {
            switch rng.below(9) {
            case 0, 1:
                let i = rng.below(value.count)
                value[i] ^= UInt8(1 << rng.below(8))
                what.append("flip value[\(i)]")
            case 2:
                let i = rng.below(value.count)
                value[i] = [0x00, 0x01, 0x7F, 0x80, 0xFF][rng.below(5)]
                what.append("set value[\(i)]")
            case 3:
                let n = rng.below(value.count)
                value = Array(value[0..<n])
                what.append("truncate value to \(n)")
            case 4:
                let n = 1 + rng.below(6)
                value += (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                what.append("extend value by \(n)")
            case 5:
                guard value.count > 2 else { continue }
                let a = rng.below(value.count), b = rng.below(value.count)
                let range = min(a, b)..<max(a, b)
                value.insert(contentsOf: value[range], at: range.upperBound)
                what.append("repeat value[\(range)]")
            case 6:
                guard key.count > Self.word.count else { continue }
                let i = Self.word.count + rng.below(key.count - Self.word.count)
                key[i] ^= UInt8(1 << rng.below(8))
                what.append("flip key[\(i)]")
            case 7:
                let n = rng.below(key.count + 1)
                key = Array(key[0..<n])
                what.append("truncate key to \(n)")
            default:
                key += (0..<(1 + rng.below(3))).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                what.append("extend key")
            }
            if value.isEmpty { value = [0x01] }
        }
        return (key, value, what.joined(separator: ", "))
    }

    @Test func damagedBlocksThrowOrReadAsTheReference() throws {
        let seed = ScanHuntTests.seed(0x5CA9_0003)
        var rng = SeededRandom(seed: seed)
        var reader = PostingBlockReader()
        let start = Date()
        var cases = 0
        while cases < 6_000 && Date().timeIntervalSince(start) < 2 {
            let kind = KeyKind.allCases[rng.below(3)]
            let blocks = Self.blocks(kind, &rng)
            let block = blocks[rng.below(blocks.count)]
            let (key, value, what) = Self.damage(block, &rng)
            let keyLength = kind == .int64 && rng.below(2) == 0 ? 8 : nil
            Self.drive(&reader, key: key, value: value, keyLength: keyLength, ops: 40, &rng, "seed \(seed) case \(cases) \(kind) (\(what))")
            cases += 1
        }
        #expect(cases > 500)
    }
}

/// `PostingCursor` (seek, meet, next over many blocks, the cached first key of the next block)
/// and whole-word intersections against each word's list of keys, on indexes written by the
/// database: thousands of texts, a few words common to most of them, rare ones, and one repeated
/// so often that its postings are blocks of their own.
@Suite struct ScanHuntIndexTests {
    struct Note: Model {
        static let indexDescriptors: [IndexDescriptor<Note>] = [.fullText(\.text)]
        var id: Int64
        var text: String
    }

    struct Tagged: Model {
        static let indexDescriptors: [IndexDescriptor<Tagged>] = [.fullText(\.text)]
        var id: String
        var text: String
    }

    static let vocabulary = ["every", "common", "half", "third", "rare", "solo", "long", "tiny", "zeta"]

    /// A text's words: `every` always, `common` in 80%, `half`, `third`, `rare` (1%), `long` 300
    /// times in a few.
    static func text(_ rng: inout SeededRandom) -> String {
        var words = ["every"]
        if rng.below(5) != 0 { words.append("common") }
        if rng.below(2) == 0 { words.append("half") }
        if rng.below(3) == 0 { words.append("third") }
        if rng.below(100) == 0 { words.append("rare") }
        if rng.below(40) == 0 { words.append(contentsOf: repeatElement("long", count: 300)) }
        if rng.below(7) == 0 { words.append("tiny") }
        if rng.below(9) == 0 { words.append("zeta") }
        if rng.below(4) == 0 { words.append("common") }
        // Shuffled, so that positions vary.
        for i in words.indices.reversed() where i > 0 { words.swapAt(i, rng.below(i + 1)) }
        return words.joined(separator: " ")
    }

    static func words(_ text: String) -> Set<String> {
        Set(WordTokenizer.words(text).map { String(decoding: $0, as: UTF8.self) })
    }

    static func stringID(_ rng: inout SeededRandom) -> String {
        let stems = ["", "m/", "room/2026-12-05/", String(repeating: "s", count: 40), String(repeating: "q", count: 90) + "/"]
        return stems[rng.below(stems.count)] + String(rng.below(rng.below(3) == 0 ? 50 : 5_000))
    }

    static func encode(_ id: Int64) -> [UInt8] {
        var key: [UInt8] = []
        KeyEncoding.appendInt(id, to: &key)
        return key
    }

    static func encode(_ id: String) -> [UInt8] {
        var key: [UInt8] = []
        KeyEncoding.appendBytes(Array(id.precomposedStringWithCanonicalMapping.utf8), to: &key)
        return key
    }

    static func less(_ a: [UInt8], _ b: [UInt8]) -> Bool { a.lexicographicallyPrecedes(b) }

    /// Random seeks, meets and nexts of one word's cursor against its sorted keys.
    static func driveCursor(_ tree: some KeyValueTree, word: String, keys: [[UInt8]], keyLength: Int?, _ rng: inout SeededRandom, _ context: String) throws {
        var cursor = try PostingCursor(SearchTerm(word: Array(word.utf8), isPrefix: false), in: tree, keyLength: keyLength)
        var at: Int? = nil  // the posting the cursor is on; nil before it starts
        var log: [String] = []
        func target() -> [UInt8] {
            guard !keys.isEmpty else { return [UInt8](repeating: 0x80, count: 8) }
            // Mostly ahead of the cursor, near it or far.
            let base = at ?? 0
            let k = keys[min(keys.count - 1, base + [0, 1, 2, 3, 10, 40, 200, 5_000][rng.below(8)])]
            switch rng.below(6) {
            case 0: return k + [0]
            case 1: return Array(k.dropLast())
            case 2:
                var t = k
                t[t.count - 1] &-= 1
                return t
            case 3: return keys[rng.below(keys.count)]
            default: return k
            }
        }
        if rng.below(2) == 0 {
            log.append("first")
            let found = try cursor.first()
            #expect(found == !keys.isEmpty, "\(context): first")
            guard found else { return }
            at = 0
            #expect(cursor.primaryKey == keys[0], "\(context): first")
        }
        for _ in 0..<400 {
            let op = rng.below(10)
            var expected: Int?
            let found: Bool
            if op < 3, let current = at {
                log.append("next")
                expected = current + 1 < keys.count ? current + 1 : nil
                found = try cursor.next()
            } else {
                var t = target()
                let from = at ?? -1
                if let current = at, !less(keys[current], t) {
                    expected = current
                } else {
                    expected = keys.indices.first { $0 > from && !less(keys[$0], t) }
                }
                if op < 6 {
                    log.append("seek \(t)")
                    found = try cursor.seek(atLeast: t)
                } else {
                    log.append("meet \(t)")
                    let before = t
                    let met = try cursor.meet(&t)
                    found = met != nil
                    if let met, let expected {
                        #expect(met == (keys[expected] == before), "\(context): \(log.suffix(5)) meet says \(met)")
                        #expect(t == keys[expected], "\(context): \(log.suffix(5)) meet left the target \(t)")
                    }
                }
            }
            #expect(found == (expected != nil), "\(context): \(log.suffix(5)) found \(found), expected \(String(describing: expected))")
            guard found, let expected else { return }
            #expect(
                cursor.primaryKey == keys[expected],
                "\(context): \(log.suffix(5)) on \(cursor.primaryKey), expected \(keys[expected]) (posting \(expected) of \(keys.count))")
            guard cursor.primaryKey == keys[expected] else { return }
            at = expected
        }
    }

    /// Whole-word searches of 2-4 words against the texts, with and without limits, through the
    /// query API and through `TextIndexReader.keys`.
    static func searches(_ rng: inout SeededRandom) -> [[String]] {
        var out: [[String]] = [
            ["every", "common"], ["common", "every"], ["rare", "every"], ["every", "rare"], ["half", "third"], ["long", "common"], ["common", "long", "half"],
            ["half", "half", "third"], ["rare", "solo"], ["every", "common", "half", "third"], ["tiny", "zeta"], ["third", "zeta", "every"],
        ]
        for _ in 0..<6 {
            out.append((0..<(2 + rng.below(3))).map { _ in vocabulary[rng.below(vocabulary.count)] })
        }
        return out
    }

    func checkInt(_ db: Database, _ texts: [Int64: String], _ rng: inout SeededRandom, _ context: String) throws {
        let words = texts.mapValues(Self.words)
        let sortedIDs = texts.keys.sorted()
        var lists: [String: [[UInt8]]] = [:]
        for word in Self.vocabulary { lists[word] = sortedIDs.filter { words[$0]!.contains(word) }.map(Self.encode) }
        for search in Self.searches(&rng) {
            let expected = sortedIDs.filter { id in search.allSatisfy { words[id]!.contains($0) } }
            let results = db.objects(Note.self).search(\.text, TextSearch(search.joined(separator: " ")))
            #expect(results.keys == expected, "\(context): \(search): \(results.keys.count) ids, expected \(expected.count)")
            for n in [1, 2, 7, 50, 333] {
                #expect(try results.prefix(n).fetch().map(\.id) == Array(expected.prefix(n)), "\(context): \(search) prefix(\(n))")
            }
            #expect(try results.fetchCount() == expected.count, "\(context): count of \(search)")
        }
        try db.store.read { txn in
            let tree = try #require(try txn.tree("i:Note:text(fullText)"))
            for word in Self.vocabulary {
                try Self.driveCursor(tree, word: word, keys: lists[word]!, keyLength: 8, &rng, "\(context) cursor of \(word)")
            }
            let reader = TextIndexReader(tree: tree, keyLength: 8)
            for search in Self.searches(&rng) {
                let expected = sortedIDs.filter { id in search.allSatisfy { words[id]!.contains($0) } }.map(Self.encode)
                let parsed = ParsedSearch(TextSearch(search.joined(separator: " ")))
                for limit in [nil, 1, 3, 100] as [Int?] {
                    let keys = try reader.keys(parsed, limit: limit)
                    #expect(keys == Array(expected.prefix(limit ?? Int.max)), "\(context): keys of \(search) limit \(String(describing: limit))")
                }
            }
        }
    }

    @Test func int64KeysAgainstTheModel() throws {
        let seed = ScanHuntTests.seed(0x5CA9_1001)
        var rng = SeededRandom(seed: seed)
        let path = NSTemporaryDirectory() + "strata-scanhunt-\(UUID().uuidString).strata"
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        var db: Database? = try Database(path: path, models: [Note.self])
        var texts: [Int64: String] = [:]
        // A load in one transaction, in random order, then updates and deletes in several.
        try db!.write { tx in
            for _ in 0..<4_000 {
                let id = Int64(rng.below(6_000)) - 1_000
                let text = Self.text(&rng)
                try tx.upsert(Note(id: id, text: text))
                texts[id] = text
            }
        }
        try checkInt(db!, texts, &rng, "seed \(seed) load")
        for round in 0..<2 {
            try db!.write { tx in
                for _ in 0..<600 {
                    let id = Int64(rng.below(6_000)) - 1_000
                    if rng.below(3) == 0 {
                        if try tx.delete(Note.self, key: id) { texts[id] = nil }
                    } else {
                        let text = Self.text(&rng)
                        try tx.upsert(Note(id: id, text: text))
                        texts[id] = text
                    }
                }
            }
            db = nil
            db = try Database(path: path, models: [Note.self])
            try checkInt(db!, texts, &rng, "seed \(seed) round \(round) after reopen")
        }
    }

    /// Primary keys of 600-950 bytes (block keys near the largest key of a 4 KiB page, blocks of
    /// 64 bytes' budget: a posting or two each), sharing most of their bytes.
    @Test func longStringKeysAgainstTheModel() throws {
        let seed = ScanHuntTests.seed(0x5CA9_1003)
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [Tagged.self])
        var texts: [String: String] = [:]
        let stems = [String(repeating: "p", count: 600), String(repeating: "p", count: 700) + "/", String(repeating: "pq", count: 470)]
        try db.write { tx in
            for _ in 0..<350 {
                let id = stems[rng.below(stems.count)] + String(repeating: "0", count: rng.below(3)) + String(rng.below(400))
                let text = Self.text(&rng)
                try tx.upsert(Tagged(id: id, text: text))
                texts[id] = text
            }
        }
        let words = texts.mapValues(Self.words)
        let sortedIDs = texts.keys.sorted { Self.less(Self.encode($0), Self.encode($1)) }
        for search in Self.searches(&rng) {
            let expected = sortedIDs.filter { id in search.allSatisfy { words[id]!.contains($0) } }
            let results = db.objects(Tagged.self).search(\.text, TextSearch(search.joined(separator: " ")))
            #expect(results.keys == expected, "seed \(seed): \(search): \(results.keys.count) ids, expected \(expected.count)")
            #expect(try results.offset(3).prefix(7).fetch().map(\.id) == Array(expected.dropFirst(3).prefix(7)), "seed \(seed): \(search) page")
        }
        try db.store.read { txn in
            let tree = try #require(try txn.tree("i:Tagged:text(fullText)"))
            for word in Self.vocabulary {
                let keys = sortedIDs.filter { words[$0]!.contains(word) }.map(Self.encode)
                try Self.driveCursor(tree, word: word, keys: keys, keyLength: nil, &rng, "seed \(seed) cursor of \(word)")
            }
        }
    }

    struct ByUUID: Model {
        static let indexDescriptors: [IndexDescriptor<ByUUID>] = [.fullText(\.text)]
        var id: UUID
        var text: String
    }

    struct ByInt8: Model {
        static let indexDescriptors: [IndexDescriptor<ByInt8>] = [.fullText(\.text)]
        var id: Int8
        var text: String
    }

    /// Keys of other fixed lengths (UUID: 16 bytes; Int8: 8), which the reader checks postings
    /// against (`keyLength`).
    @Test func fixedLengthKeysOfOtherTypes() throws {
        let seed = ScanHuntTests.seed(0x5CA9_1004)
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [ByUUID.self, ByInt8.self])
        var uuids: [UUID: String] = [:]
        var small: [Int8: String] = [:]
        try db.write { tx in
            for _ in 0..<600 {
                var bytes = [UInt8](repeating: 0, count: 16)
                for i in 0..<16 { bytes[i] = i < 13 ? 0x42 : UInt8(truncatingIfNeeded: rng.next()) }
                let id = UUID(
                    uuid: (
                        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10], bytes[11], bytes[12],
                        bytes[13], bytes[14], bytes[15]
                    ))
                let text = Self.text(&rng)
                try tx.upsert(ByUUID(id: id, text: text))
                uuids[id] = text
            }
            for id in Int8.min...Int8.max {
                let text = Self.text(&rng)
                try tx.upsert(ByInt8(id: id, text: text))
                small[id] = text
            }
        }
        func uuidKey(_ u: UUID) -> [UInt8] { withUnsafeBytes(of: u.uuid) { Array($0) } }
        let uuidWords = uuids.mapValues(Self.words)
        let uuidOrder = uuids.keys.sorted { Self.less(uuidKey($0), uuidKey($1)) }
        let smallWords = small.mapValues(Self.words)
        var largest = 0
        for search in Self.searches(&rng) {
            let text = TextSearch(search.joined(separator: " "))
            let expectedU = uuidOrder.filter { id in search.allSatisfy { uuidWords[id]!.contains($0) } }
            #expect(db.objects(ByUUID.self).search(\.text, text).keys == expectedU, "seed \(seed): UUID \(search)")
            #expect(
                try db.objects(ByUUID.self).search(\.text, text).prefix(5).fetch().map(\.id) == Array(expectedU.prefix(5)),
                "seed \(seed): UUID \(search) prefix")
            let expectedS = small.keys.sorted().filter { id in search.allSatisfy { smallWords[id]!.contains($0) } }
            #expect(db.objects(ByInt8.self).search(\.text, text).keys == expectedS, "seed \(seed): Int8 \(search)")
            largest = max(largest, expectedU.count)
        }
        #expect(largest > 300)
    }

    @Test func stringKeysAgainstTheModel() throws {
        let seed = ScanHuntTests.seed(0x5CA9_1002)
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [Tagged.self])
        var texts: [String: String] = [:]
        for round in 0..<3 {
            try db.write { tx in
                for _ in 0..<(round == 0 ? 2_500 : 500) {
                    let id = Self.stringID(&rng)
                    if round > 0 && rng.below(4) == 0 {
                        if try tx.delete(Tagged.self, key: id) { texts[id] = nil }
                    } else {
                        let text = Self.text(&rng)
                        try tx.upsert(Tagged(id: id, text: text))
                        texts[id] = text
                    }
                }
            }
            let context = "seed \(seed) round \(round)"
            let words = texts.mapValues(Self.words)
            // Ids in key order (the key encoding's, UTF-8 bytes).
            let sortedIDs = texts.keys.sorted { Self.less(Self.encode($0), Self.encode($1)) }
            for search in Self.searches(&rng) {
                let expected = sortedIDs.filter { id in search.allSatisfy { words[id]!.contains($0) } }
                let results = db.objects(Tagged.self).search(\.text, TextSearch(search.joined(separator: " ")))
                #expect(results.keys == expected, "\(context): \(search): \(results.keys.count) ids, expected \(expected.count)")
                for n in [1, 4, 60] {
                    #expect(try results.prefix(n).fetch().map(\.id) == Array(expected.prefix(n)), "\(context): \(search) prefix(\(n))")
                }
            }
            try db.store.read { txn in
                let tree = try #require(try txn.tree("i:Tagged:text(fullText)"))
                for word in Self.vocabulary {
                    let keys = sortedIDs.filter { words[$0]!.contains(word) }.map(Self.encode)
                    try Self.driveCursor(tree, word: word, keys: keys, keyLength: nil, &rng, "\(context) cursor of \(word)")
                }
            }
        }
    }
}

/// Intersections over index trees written by hand: blocks of two words cut at random places
/// (one posting, dozens), then damaged (bytes, truncations, blocks that overlap the next one).
/// A search must throw `corruptRecord` or give keys in strictly ascending order that both words'
/// blocks hold; never trap or loop.
@Suite struct ScanHuntTreeTests {
    typealias Posting = ScanHuntTests.Posting

    static func wordKey(_ word: String) -> [UInt8] {
        var w: [UInt8] = []
        KeyEncoding.appendBytes(Array(word.utf8), to: &w)
        return w
    }

    /// Blocks of `postings` cut at random, `overlap` of them reaching past the next block's start.
    static func blocks(_ word: [UInt8], _ postings: [Posting], overlap: Bool, _ rng: inout SeededRandom) -> [(key: [UInt8], value: [UInt8])] {
        var cuts: [Range<Int>] = []
        var i = 0
        while i < postings.count {
            let n = 1 + rng.below(rng.below(3) == 0 ? 40 : 4)
            cuts.append(i..<min(postings.count, i + n))
            i += n
        }
        if overlap, cuts.count > 1 {
            let c = rng.below(cuts.count - 1)
            let extra = 1 + rng.below(cuts[c + 1].count)
            cuts[c] = cuts[c].lowerBound..<(cuts[c].upperBound + extra)
        }
        return cuts.map { range in (word + postings[range.lowerBound].key, ScanHuntTests.encode(Array(postings[range]))) }
    }

    @Test func damagedTreesThrowOrStayInOrder() throws {
        let seed = ScanHuntTests.seed(0x5CA9_2001)
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [ScanHuntIndexTests.Note.self])
        let start = Date()
        var cases = 0
        var threw = 0
        while cases < 400 && Date().timeIntervalSince(start) < 2 {
            let context = "seed \(seed) case \(cases)"
            cases += 1
            let kind = ScanHuntTests.KeyKind.allCases[rng.below(3)]
            let all = ScanHuntTests.keys(kind, 20 + rng.below(150), &rng)
            let a: [Posting] = all.filter { _ in rng.below(3) != 0 }.map { ($0, ScanHuntTests.rest(&rng)) }
            let b: [Posting] = all.filter { _ in rng.below(2) == 0 }.map { ($0, ScanHuntTests.rest(&rng)) }
            guard !a.isEmpty, !b.isEmpty else { continue }
            let wa = Self.wordKey("alpha"), wb = Self.wordKey("beta")
            var entries = Self.blocks(wa, a, overlap: rng.below(3) == 0, &rng) + Self.blocks(wb, b, overlap: rng.below(3) == 0, &rng)
            var what = "overlap only"
            if rng.below(2) == 0 {
                let e = rng.below(entries.count)
                let wordCount = e < entries.count ? (entries[e].key.starts(with: wa) ? wa.count : wb.count) : 0
                // Damage the value, or the key's primary key (never its word).
                var damaged = ScanHuntTests.damage(entries[e], &rng)
                if damaged.key.count <= wordCount || !damaged.key.starts(with: Array(entries[e].key[0..<wordCount])) { damaged.key = entries[e].key }
                entries[e] = (damaged.key, damaged.value)
                what = damaged.what
            }
            let name = "scan\(cases)"
            try db.store.write { txn in
                let tree = try txn.createTree(name)
                for entry in entries { _ = try tree.put(entry.key, entry.value) }
            }
            let keyLength = kind == .int64 ? 8 : nil
            let inBoth = Set(a.map(\.key)).intersection(b.map(\.key))
            try db.store.read { txn in
                let tree = try #require(try txn.tree(name))
                let reader = TextIndexReader(tree: tree, keyLength: keyLength)
                for text in ["alpha beta", "beta alpha", "alpha beta alpha"] {
                    for limit in [nil, 1, 5] as [Int?] {
                        do {
                            let keys = try reader.keys(ParsedSearch(TextSearch(text)), limit: limit)
                            #expect(zip(keys, keys.dropFirst()).allSatisfy { ScanHuntTests.less($0, $1) }, "\(context) (\(what)): \(text) out of order")
                            #expect(keys.allSatisfy { inBoth.contains($0) }, "\(context) (\(what)): \(text) found a key not in both words")
                            if limit != nil { #expect(keys.count <= limit!, "\(context)") }
                        } catch StrataError.corruptRecord {
                            threw += 1
                        } catch {
                            Issue.record("\(context) (\(what)): \(text): \(error)")
                        }
                    }
                }
            }
        }
        #expect(cases > 50 && threw > 0)
    }
}
