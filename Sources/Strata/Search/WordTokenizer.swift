import Foundation

// The words of a text, as a full-text index holds them and a search looks for them. This is part
// of the file format (FORMAT.md §8.5): the index stores these words, so the rules must not drift.
// They follow Unicode's default word boundaries (UAX #29) in a simplified, fixed form, written
// here rather than taken from a library: swift-corelibs-foundation has no
// `enumerateSubstrings(.byWords)`, and ICU's rules change between versions.
//
//   1. Fold: Foundation's `folding(options: [.caseInsensitive, .diacriticInsensitive,
//      .widthInsensitive], locale: nil)` (full case folding, "Straße" → "strasse"; marks removed,
//      "Café" → "cafe"; fullwidth forms to ASCII), then NFC.
//   2. Split the folded scalars. Word scalars are letters (general categories L*), marks (M*),
//      numbers (N*) and connector punctuation (Pc, "_"); a word is a run of them, but a mark
//      (the combining voicing marks U+3099 and U+309A among them) only continues a word: where
//      none is open (after an emoji, "❤️" being U+2764 U+FE0F, an ideograph or a separator) it
//      is dropped. Ideographs and Hiragana are each a word of their own. An apostrophe (U+0027,
//      U+2019) or a full stop between two word scalars joins them ("can't", "e.g", "3.14"), and
//      so does a comma between two decimal digits ("1,000", marks after the first skipped as
//      UAX #29's WB4 skips them); an ideograph or Hiragana on either
//      side is not one, so there it separates. Everything else separates words, and is no word.
//   3. A word longer than 120 UTF-8 bytes is cut to its first 120 bytes' whole scalars.
//
// Positions count words from 0. ASCII text takes a byte-wise path that gives the same words.

enum WordTokenizer {
    static let maxWordBytes = 120
    /// The longest word's key encoding: its bytes and the string terminator (a word holds no
    /// U+0000, which alone would be escaped). An index entry's key is this, then the primary key.
    static let maxWordKeyBytes = maxWordBytes + 2

    /// The folded words of `text`, in order, each as NFC UTF-8.
    static func words(_ text: String) -> [[UInt8]] {
        var isASCII = true
        for byte in text.utf8 where byte >= 0x80 { isASCII = false; break }
        if isASCII {
            var text = text
            return text.withUTF8 { asciiWords(UnsafeRawBufferPointer($0)) }.arrays
        }
        return generalWords(text)
    }

    /// The words of UTF-8 text (a record's string bytes).
    static func words(utf8: UnsafeRawBufferPointer) -> [[UInt8]] { wordList(utf8: utf8).arrays }

    /// The words of UTF-8 text in one buffer: what indexing a text reads, without an array per word.
    static func wordList(utf8: UnsafeRawBufferPointer) -> WordList {
        var isASCII = true
        for byte in utf8 where byte >= 0x80 { isASCII = false; break }
        if isASCII { return asciiWords(utf8) }
        var list = WordList()
        for word in generalWords(String(decoding: utf8, as: UTF8.self)) { list.append(word) }
        return list
    }

    // MARK: ASCII

    /// What an ASCII byte is: 0 separator, 1 letter or underscore, 2 digit, 3 joiner (' .),
    /// 4 comma (a joiner between digits).
    private static let asciiClass: [UInt8] = {
        var table = [UInt8](repeating: 0, count: 128)
        for b in UInt8(ascii: "a")...UInt8(ascii: "z") { table[Int(b)] = 1 }
        for b in UInt8(ascii: "A")...UInt8(ascii: "Z") { table[Int(b)] = 1 }
        table[Int(UInt8(ascii: "_"))] = 1
        for b in UInt8(ascii: "0")...UInt8(ascii: "9") { table[Int(b)] = 2 }
        table[Int(UInt8(ascii: "'"))] = 3
        table[Int(UInt8(ascii: "."))] = 3
        table[Int(UInt8(ascii: ","))] = 4
        return table
    }()

    private static func asciiWords(_ bytes: UnsafeRawBufferPointer) -> WordList {
        // A word is a run of the text's bytes (letters, digits and the joiners between them), so
        // it is found first and copied once, lowercased, to the end of the list's buffer. The
        // words are never longer than the text together, so the buffer is sized once and filled
        // through a pointer (an append per byte cost more than finding the words).
        let n = bytes.count
        var ends: [Int] = []
        let letters = [UInt8](unsafeUninitializedCapacity: n) { out, initialized in
            var writer = AsciiWordWriter(text: bytes, out: out)
            asciiClass.withUnsafeBufferPointer { classes in
                var start = -1  // where the word being read began; -1: none
                var lastIsDigit = false
                var i = 0
                while i < n {
                    // (Every byte is below 0x80 here; the mask keeps a read inside the table regardless.)
                    let kind = classes[Int(bytes[i] & 0x7F)]
                    switch kind {
                    case 1, 2:
                        if start < 0 { start = i }
                        lastIsDigit = kind == 2
                    case 3, 4:
                        // Joins only between two word characters (a comma: two digits).
                        let next = i + 1 < n ? classes[Int(bytes[i + 1] & 0x7F)] : 0
                        if !(start >= 0 && (kind == 3 ? (next == 1 || next == 2) : (lastIsDigit && next == 2))) {
                            writer.word(start, i)
                            start = -1
                        }
                    default:
                        writer.word(start, i)
                        start = -1
                    }
                    i += 1
                }
                writer.word(start, n)
            }
            initialized = writer.written
            ends = writer.ends
        }
        return WordList(bytes: letters, ends: ends)
    }

    /// Where `asciiWords` copies the words it finds. A struct with a method, not a nested
    /// function capturing the loop's state: captured locals that change are checked for
    /// exclusive access at run time (a third of the tokenizer's time).
    private struct AsciiWordWriter {
        let text: UnsafeRawBufferPointer
        let out: UnsafeMutableBufferPointer<UInt8>
        var written = 0
        var ends: [Int] = []

        init(text: UnsafeRawBufferPointer, out: UnsafeMutableBufferPointer<UInt8>) {
            self.text = text
            self.out = out
            ends.reserveCapacity(16)
        }

        /// Copies the word at `start..<end` of the text (none when `start` is -1), lowercased
        /// and cut to `maxWordBytes`.
        mutating func word(_ start: Int, _ end: Int) {
            guard start >= 0, end > start else { return }
            for k in start..<(start + min(end - start, maxWordBytes)) {
                let byte = text[k]
                out[written] = byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte
                written += 1
            }
            ends.append(written)
        }
    }

    // MARK: Any text

    private enum ScalarClass {
        case separator, word, digit, standalone, joiner, comma
        /// A combining mark (a variation selector among them): part of the word it follows, and
        /// nothing where no word is open (after an emoji, an ideograph or a separator).
        case mark
    }

    private static func classify(_ scalar: Unicode.Scalar) -> ScalarClass {
        switch scalar.value {
        case 0x27, 0x2E, 0x2019: return .joiner
        case 0x2C: return .comma
        case 0x3099, 0x309A: return .mark  // the combining (semi-)voiced sound marks, in the Hiragana block
        case 0x3040...0x309F: return .standalone  // Hiragana
        default: break
        }
        if scalar.value < 0x80 {
            switch asciiClass[Int(scalar.value)] {
            case 1: return .word
            case 2: return .digit
            default: return .separator
            }
        }
        let properties = scalar.properties
        if properties.isIdeographic { return .standalone }
        switch properties.generalCategory {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
            .letterNumber, .otherNumber, .connectorPunctuation:
            return .word
        case .nonspacingMark, .spacingMark, .enclosingMark:
            return .mark
        case .decimalNumber:
            return .digit
        default:
            return .separator
        }
    }

    /// Whether a scalar (of text before folding) is part of a word: a letter, mark, number,
    /// connector, ideograph or Hiragana, as step 2 reads them.
    static func isWordScalar(_ scalar: Unicode.Scalar) -> Bool {
        switch classify(scalar) {
        case .word, .digit, .standalone, .mark: return true
        default: return false
        }
    }

    /// Whether `text` (before folding) ends in a word: its last scalar that is not a combining
    /// mark is part of one. (A mark ends a word only where one is open: "hi ❤️" ends in the
    /// emoji's variation selector, after no word.)
    static func endsInWord(_ text: Substring) -> Bool {
        for scalar in text.unicodeScalars.reversed() {
            switch classify(scalar) {
            case .mark: continue
            case .word, .digit, .standalone: return true
            default: return false
            }
        }
        return false
    }

    /// Any text, by scalars (internal so that tests can compare it with the ASCII path).
    static func generalWords(_ text: String) -> [[UInt8]] {
        let folded = KeyEncoding.normalized(text.folding(options: [.caseInsensitive, .diacriticInsensitive, .widthInsensitive], locale: nil))
        let scalars = Array(folded.unicodeScalars)
        let classes = scalars.map(classify)
        var words: [[UInt8]] = []
        var current: [UInt8] = []
        var lastIsDigit = false
        func flush() {
            if !current.isEmpty {
                words.append(cut(current))
                current = []
            }
        }
        func append(_ scalar: Unicode.Scalar) {
            if let utf8 = UTF8.encode(scalar) { current.append(contentsOf: utf8) }
        }
        for (i, scalar) in scalars.enumerated() {
            switch classes[i] {
            case .word, .digit:
                append(scalar)
                lastIsDigit = classes[i] == .digit
            case .mark:
                // (After a standalone scalar the word is already flushed: its marks are dropped.)
                if !current.isEmpty { append(scalar) }
            case .standalone:
                flush()
                append(scalar)
                flush()
            case .joiner, .comma:
                let next = i + 1 < scalars.count ? classes[i + 1] : .separator
                let joins = classes[i] == .joiner ? (next == .word || next == .digit || next == .mark) : (lastIsDigit && next == .digit)
                if !current.isEmpty && joins { append(scalar) } else { flush() }
            case .separator:
                flush()
            }
        }
        flush()
        return words
    }

    /// `word` cut to at most `maxWordBytes` bytes, at a scalar boundary.
    private static func cut(_ word: [UInt8]) -> [UInt8] {
        guard word.count > maxWordBytes else { return word }
        var end = maxWordBytes
        // Back up over continuation bytes (10xxxxxx) to the start of the scalar that does not fit.
        while end > 0 && word[end] & 0xC0 == 0x80 { end -= 1 }
        return Array(word[..<end])
    }
}

/// The words of one text, back to back in one buffer: word `i` is `bytes[range(i)]`.
struct WordList {
    var bytes: [UInt8] = []
    /// Where each word ends in `bytes`.
    var ends: [Int] = []

    var count: Int { ends.count }

    func range(_ i: Int) -> Range<Int> { (i == 0 ? 0 : ends[i - 1])..<ends[i] }

    mutating func append(_ word: [UInt8]) {
        bytes.append(contentsOf: word)
        ends.append(bytes.count)
    }

    /// One array per word.
    var arrays: [[UInt8]] { (0..<count).map { Array(bytes[range($0)]) } }
}
