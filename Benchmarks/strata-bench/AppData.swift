import Foundation

// The app suite's data (issue 16): a chat store and a contacts list, the same for every engine
// from one seed. Messages are N (default 1,000,000) in N/1,000 rooms (at least 10) of skewed
// sizes: message i goes to room ⌊R · u^2.5⌋ for a uniform u, so room 0 holds about 6 % of them
// and the smallest rooms about 0.04 % each. Their texts are 4-15 words drawn from a
// 20,000-word vocabulary with Zipf's law (a word of rank r with weight 1/(r+1)), so "the" is in
// most messages and a word of rank 100-1,000 in one or two percent of them. Times increase with
// ids, one every 0.25 s (no two equal). Contacts are min(100,000, N/10) (at least 1,000) ASCII
// names in mixed case ("anna Berg", "ANNA berg", "Anna Holm"), for case-insensitive order.

/// One chat message as every engine stores and returns it.
struct AppMessageValue: Sendable {
    var id: Int64
    var room: Int64
    var author: Int64
    /// Seconds since 2001-01-01 (Strata's Date, SQLite's REAL).
    var created: Double
    var text: String
}

/// One contact.
struct AppContactValue: Sendable {
    var id: Int64
    var name: String
    var phone: String
}

struct AppData: Sendable {
    let seed: UInt64
    let messages: Int
    let rooms: Int
    let contacts: Int
    let vocabulary: [String]
    /// Cumulative Zipf weights of `vocabulary`, the last 1.
    let cumulative: [Double]

    static let vocabularySize = 20_000
    static let common = [
        "the", "to", "and", "a", "of", "you", "in", "is", "it", "that", "for", "on", "we", "be", "this", "with", "at", "are",
        "have", "not", "can", "will", "just", "so", "but", "meeting", "today", "tomorrow", "lunch", "call", "ok", "thanks",
    ]
    static let syllables = [
        "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qui", "dor", "fen", "gal", "hus", "jin", "mar", "nol",
        "por", "ril", "sen", "tor", "ul", "ven", "wix", "yar", "zub", "bre", "cla", "dro",
    ]
    static let firstNames = [
        "anna", "ben", "carla", "david", "eva", "felix", "greta", "hugo", "ines", "jonas", "karin", "leo", "mia", "noah",
        "olga", "paul", "quinn", "rosa", "sven", "tina", "ulla", "viktor", "wanda", "xaver", "yara", "zoe", "mcdonald", "o'neil",
    ]
    static let lastNames = ["berg", "holm", "lund", "strand", "dahl", "nyberg", "ek", "lind", "sund", "wall", "falk", "sjoberg", "blom", "hall"]

    init(seed: UInt64, n: Int) {
        self.seed = seed
        messages = n
        rooms = max(10, n / 1_000)
        contacts = max(1_000, min(100_000, n / 10))
        var words = AppData.common
        var seen = Set(words)
        var rng = SplitMix64(seed: seed ^ 0xA11CE)
        while words.count < AppData.vocabularySize {
            let count = 2 + rng.next(below: 3)
            let word = (0..<count).map { _ in AppData.syllables[rng.next(below: AppData.syllables.count)] }.joined()
            if seen.insert(word).inserted { words.append(word) }
        }
        vocabulary = words
        var total = 0.0
        var sums: [Double] = []
        sums.reserveCapacity(words.count)
        for rank in words.indices {
            total += 1 / Double(rank + 1)
            sums.append(total)
        }
        cumulative = sums.map { $0 / total }
    }

    /// A word by Zipf's law.
    func word(_ rng: inout SplitMix64) -> String {
        let u = Double(rng.next() >> 11) / Double(1 << 53)
        var low = 0, high = cumulative.count - 1
        while low < high {
            let mid = (low + high) / 2
            if cumulative[mid] < u { low = mid + 1 } else { high = mid }
        }
        return vocabulary[low]
    }

    func message(_ i: Int) -> AppMessageValue {
        var rng = SplitMix64(seed: seed ^ (UInt64(truncatingIfNeeded: i) &* 0x9E37_79B9_7F4A_7C15))
        let u = Double(rng.next() >> 11) / Double(1 << 53)
        let room = min(rooms - 1, Int(Double(rooms) * pow(u, 2.5)))
        var text = ""
        for w in 0..<(4 + rng.next(below: 12)) {
            var word = self.word(&rng)
            if w == 0 { word = word.prefix(1).uppercased() + word.dropFirst() } else { text += rng.next(below: 12) == 0 ? ", " : " " }
            text += word
        }
        text += [".", "!", "?", ""][rng.next(below: 4)]
        return AppMessageValue(
            id: Int64(i + 1), room: Int64(room), author: Int64(rng.next(below: 10_000)),
            created: 700_000_000 + Double(i) * 0.25, text: text)
    }

    func contact(_ i: Int) -> AppContactValue {
        var rng = SplitMix64(seed: ~seed ^ (UInt64(truncatingIfNeeded: i) &* 0xD1B5_4A32_D192_ED03))
        func cased(_ s: String) -> String {
            switch rng.next(below: 4) {
            case 0: return s.uppercased()
            case 1: return s
            default: return s.prefix(1).uppercased() + s.dropFirst()
            }
        }
        let name =
            cased(AppData.firstNames[rng.next(below: AppData.firstNames.count)]) + " "
            + cased(AppData.lastNames[rng.next(below: AppData.lastNames.count)])
            + (rng.next(below: 3) == 0 ? " \(rng.next(below: 100))" : "")
        return AppContactValue(id: Int64(i + 1), name: name, phone: "+46 70 \(1_000_000 + rng.next(below: 9_000_000))")
    }

    /// The random-choice stream of one workload.
    func choices(_ stream: UInt64) -> SplitMix64 { SplitMix64(seed: seed &+ 0x5851_F42D_4C95_7F2D &* (stream &+ 101)) }

    /// A word of rank 100-1,000: in one or two percent of the messages.
    func middleWord(_ rng: inout SplitMix64) -> String { vocabulary[100 + rng.next(below: 900)] }

    /// A word of rank 10-100: in a few percent to a fifth of the messages.
    func commonWord(_ rng: inout SplitMix64) -> String { vocabulary[10 + rng.next(below: 90)] }

    /// The most common word.
    var mostCommonWord: String { vocabulary[0] }
}

/// A checksum of a message's fields, equal across engines that returned the same message.
func checksum(_ m: AppMessageValue) -> UInt64 {
    var sum = UInt64(bitPattern: m.id) &* 31 &+ UInt64(bitPattern: m.room) &* 17 &+ UInt64(bitPattern: m.author) &+ m.created.bitPattern
    var text = m.text
    text.withUTF8 { sum = sum &* 0x100_0000_01B3 ^ checksum(UnsafeRawBufferPointer($0)) }
    return sum
}

func checksum(_ c: AppContactValue) -> UInt64 {
    var sum = UInt64(bitPattern: c.id)
    var name = c.name, phone = c.phone
    name.withUTF8 { sum = sum &* 0x100_0000_01B3 ^ checksum(UnsafeRawBufferPointer($0)) }
    phone.withUTF8 { sum = sum &* 0x100_0000_01B3 ^ checksum(UnsafeRawBufferPointer($0)) }
    return sum
}
