import Testing
import Foundation
import Dispatch
@testable import Strata

// Support for RankHuntTests / RankHuntFailingTests: models with Int64, String and UUID keys, and
// an oracle written from the documentation alone (Queries.md "Full-text search", FORMAT.md §8.5,
// the BM25 definition in TextRanking's header): texts are built from plain ASCII words and
// separators, so the documented word rules reduce to "lowercase, split on anything that is not a
// letter, digit or `_`"; a ranked search orders by score (descending), then by the sort
// descriptors (Foundation's `SortDescriptor.compare`), then by primary key (key-encoding order).

struct RKValues: Sendable, Equatable {
    var group: Int
    var weight: Double
    var flag: Bool
    var level: Int?
    var label: String
    var text: String?
}

protocol RKDoc: Model where ID: Hashable {
    init(id: ID, _ v: RKValues)
    var values: RKValues { get }
    static var textPath: KeyPath<Self, String?> & Sendable { get }
    static var groupPath: KeyPath<Self, Int> & Sendable { get }
    static var weightPath: KeyPath<Self, Double> & Sendable { get }
    static var flagPath: KeyPath<Self, Bool> & Sendable { get }
    static var levelPath: KeyPath<Self, Int?> & Sendable { get }
    static var labelPath: KeyPath<Self, String> & Sendable { get }
    /// Primary-key order as FORMAT.md §8.1 defines it.
    static func keyPrecedes(_ a: ID, _ b: ID) -> Bool
}

struct RKNote: RKDoc {
    static let indexes: [PartialKeyPath<RKNote> & Sendable] = [\.group]
    static let indexDescriptors: [IndexDescriptor<RKNote>] = [.fullText(\.text)]
    var id: Int64
    var group: Int
    var weight: Double
    var flag: Bool
    var level: Int?
    var label: String
    var text: String?
    init(id: Int64, _ v: RKValues) {
        self.id = id
        group = v.group; weight = v.weight; flag = v.flag; level = v.level; label = v.label; text = v.text
    }
    var values: RKValues { RKValues(group: group, weight: weight, flag: flag, level: level, label: label, text: text) }
    static var textPath: KeyPath<RKNote, String?> & Sendable { \RKNote.text }
    static var groupPath: KeyPath<RKNote, Int> & Sendable { \RKNote.group }
    static var weightPath: KeyPath<RKNote, Double> & Sendable { \RKNote.weight }
    static var flagPath: KeyPath<RKNote, Bool> & Sendable { \RKNote.flag }
    static var levelPath: KeyPath<RKNote, Int?> & Sendable { \RKNote.level }
    static var labelPath: KeyPath<RKNote, String> & Sendable { \RKNote.label }
    static func keyPrecedes(_ a: Int64, _ b: Int64) -> Bool { a < b }
}

/// The same without a full-text index: ranking reads every text.
struct RKPlainNote: RKDoc {
    static let indexes: [PartialKeyPath<RKPlainNote> & Sendable] = [\.group]
    var id: Int64
    var group: Int
    var weight: Double
    var flag: Bool
    var level: Int?
    var label: String
    var text: String?
    init(id: Int64, _ v: RKValues) {
        self.id = id
        group = v.group; weight = v.weight; flag = v.flag; level = v.level; label = v.label; text = v.text
    }
    var values: RKValues { RKValues(group: group, weight: weight, flag: flag, level: level, label: label, text: text) }
    static var textPath: KeyPath<RKPlainNote, String?> & Sendable { \RKPlainNote.text }
    static var groupPath: KeyPath<RKPlainNote, Int> & Sendable { \RKPlainNote.group }
    static var weightPath: KeyPath<RKPlainNote, Double> & Sendable { \RKPlainNote.weight }
    static var flagPath: KeyPath<RKPlainNote, Bool> & Sendable { \RKPlainNote.flag }
    static var levelPath: KeyPath<RKPlainNote, Int?> & Sendable { \RKPlainNote.level }
    static var labelPath: KeyPath<RKPlainNote, String> & Sendable { \RKPlainNote.label }
    static func keyPrecedes(_ a: Int64, _ b: Int64) -> Bool { a < b }
}

struct RKSNote: RKDoc {
    static let indexes: [PartialKeyPath<RKSNote> & Sendable] = [\.group]
    static let indexDescriptors: [IndexDescriptor<RKSNote>] = [.fullText(\.text)]
    var id: String
    var group: Int
    var weight: Double
    var flag: Bool
    var level: Int?
    var label: String
    var text: String?
    init(id: String, _ v: RKValues) {
        self.id = id
        group = v.group; weight = v.weight; flag = v.flag; level = v.level; label = v.label; text = v.text
    }
    var values: RKValues { RKValues(group: group, weight: weight, flag: flag, level: level, label: label, text: text) }
    static var textPath: KeyPath<RKSNote, String?> & Sendable { \RKSNote.text }
    static var groupPath: KeyPath<RKSNote, Int> & Sendable { \RKSNote.group }
    static var weightPath: KeyPath<RKSNote, Double> & Sendable { \RKSNote.weight }
    static var flagPath: KeyPath<RKSNote, Bool> & Sendable { \RKSNote.flag }
    static var levelPath: KeyPath<RKSNote, Int?> & Sendable { \RKSNote.level }
    static var labelPath: KeyPath<RKSNote, String> & Sendable { \RKSNote.label }
    /// ASCII ids without NUL: UTF-8 bytes then the 0x00 0x00 terminator, i.e. byte order.
    static func keyPrecedes(_ a: String, _ b: String) -> Bool { Array(a.utf8).lexicographicallyPrecedes(Array(b.utf8)) }
}

struct RKUNote: RKDoc {
    static let indexes: [PartialKeyPath<RKUNote> & Sendable] = [\.group]
    static let indexDescriptors: [IndexDescriptor<RKUNote>] = [.fullText(\.text)]
    var id: UUID
    var group: Int
    var weight: Double
    var flag: Bool
    var level: Int?
    var label: String
    var text: String?
    init(id: UUID, _ v: RKValues) {
        self.id = id
        group = v.group; weight = v.weight; flag = v.flag; level = v.level; label = v.label; text = v.text
    }
    var values: RKValues { RKValues(group: group, weight: weight, flag: flag, level: level, label: label, text: text) }
    static var textPath: KeyPath<RKUNote, String?> & Sendable { \RKUNote.text }
    static var groupPath: KeyPath<RKUNote, Int> & Sendable { \RKUNote.group }
    static var weightPath: KeyPath<RKUNote, Double> & Sendable { \RKUNote.weight }
    static var flagPath: KeyPath<RKUNote, Bool> & Sendable { \RKUNote.flag }
    static var levelPath: KeyPath<RKUNote, Int?> & Sendable { \RKUNote.level }
    static var labelPath: KeyPath<RKUNote, String> & Sendable { \RKUNote.label }
    static func keyPrecedes(_ a: UUID, _ b: UUID) -> Bool {
        withUnsafeBytes(of: a.uuid) { x in withUnsafeBytes(of: b.uuid) { y in x.lexicographicallyPrecedes(y) } }
    }
}

struct RKTerm: Hashable, Sendable {
    var word: String
    var prefix: Bool
}

/// A search as the oracle reads it.
struct RKSpec: CustomStringConvertible, Sendable {
    var mode: TextSearch.Mode
    var terms: [RKTerm]

    init(_ mode: TextSearch.Mode, _ text: String) {
        self.mode = mode
        terms = text.split(separator: " ").map { part in
            part.hasSuffix("*") ? RKTerm(word: String(part.dropLast()), prefix: true) : RKTerm(word: String(part), prefix: false)
        }
    }

    var search: TextSearch { TextSearch(terms.map { $0.word + ($0.prefix ? "*" : "") }.joined(separator: " "), mode: mode) }
    var description: String { "\(mode)(\"\(search.text)\")" }

    var distinctTerms: [RKTerm] {
        var seen = Set<RKTerm>()
        return terms.filter { seen.insert($0).inserted }
    }

    static func hits(_ term: RKTerm, _ word: String) -> Bool {
        term.prefix ? Array(word.utf8).starts(with: Array(term.word.utf8)) : word == term.word
    }

    func matches(_ words: [String]) -> Bool {
        if terms.isEmpty { return false }
        switch mode {
        case .allWords: return distinctTerms.allSatisfy { t in words.contains { Self.hits(t, $0) } }
        case .anyWord: return terms.contains { t in words.contains { Self.hits(t, $0) } }
        case .phrase:
            guard words.count >= terms.count else { return false }
            return (0...(words.count - terms.count)).contains { s in terms.indices.allSatisfy { Self.hits(terms[$0], words[s + $0]) } }
        }
    }

    /// BM25 (k1 1.2, b 0.75) over every text of the field, as documented.
    func scores(all texts: [[String]]) -> (([String]) -> Double) {
        let nonEmpty = texts.filter { !$0.isEmpty }
        let documents = nonEmpty.count
        let total = nonEmpty.reduce(0) { $0 + $1.count }
        let terms = distinctTerms
        let df = terms.map { t in nonEmpty.filter { $0.contains { Self.hits(t, $0) } }.count }
        let k1 = 1.2, b = 0.75
        let n = Double(documents)
        let average = documents > 0 ? Double(total) / n : 0
        return { words in
            let norm = average > 0 ? 1 - b + b * Double(words.count) / average : 1
            var score = 0.0
            for (i, t) in terms.enumerated() {
                let count = words.filter { Self.hits(t, $0) }.count
                if count == 0 { continue }
                let tf = Double(count)
                let d = Double(df[i])
                let idf = log(1 + (n - d + 0.5) / (d + 0.5))
                score += idf * tf * (k1 + 1) / (tf + k1 * norm)
            }
            return score
        }
    }
}

enum RK {
    static let vocabulary = ["the", "room", "rooms", "roomy", "ro", "lunch", "a", "zz", "call", "x1", "abc", "abd", "ab", "b_c", "ro9"]
    static let separators = [" ", ", ", "! ", "\n", " - ", " (", ") ", "; "]

    /// The documented words of a text built from `vocabulary` and `separators` (ASCII: folding is
    /// lowercasing; letters, digits and `_` make words, everything else separates).
    static func words(_ text: String?) -> [String] {
        guard let text else { return [] }
        var out: [String] = []
        var current = ""
        for c in text.lowercased().unicodeScalars {
            if (c >= "a" && c <= "z") || (c >= "0" && c <= "9") || c == "_" {
                current.unicodeScalars.append(c)
            } else if !current.isEmpty {
                out.append(current)
                current = ""
            }
        }
        if !current.isEmpty { out.append(current) }
        return out
    }

    static func word(_ rng: inout SeededRandom) -> String {
        let w = vocabulary[min(rng.below(vocabulary.count), rng.below(vocabulary.count))]
        switch rng.below(8) {
        case 0: return w.uppercased()
        case 1: return w.prefix(1).uppercased() + w.dropFirst()
        default: return w
        }
    }

    static func text(_ rng: inout SeededRandom) -> String? {
        switch rng.below(16) {
        case 0: return nil
        case 1: return ""
        case 2: return "!! - ;"
        case 3, 4:
            // A word many times (a long posting), among a few others.
            let w = word(&rng)
            var parts = Array(repeating: w, count: 20 + rng.below(260))
            for _ in 0..<rng.below(4) { parts.insert(word(&rng), at: rng.below(parts.count + 1)) }
            return parts.joined(separator: " ")
        default:
            var s = ""
            for i in 0..<(1 + rng.below(9)) {
                if i > 0 { s += separators[rng.below(separators.count)] }
                s += word(&rng)
            }
            return s
        }
    }

    static func values(_ rng: inout SeededRandom) -> RKValues {
        RKValues(
            group: rng.below(4), weight: Double(rng.below(5)) / 2, flag: rng.below(2) == 0, level: rng.below(4) == 0 ? nil : rng.below(3),
            label: ["b", "a", "B", "ab", "", "a b"][rng.below(6)], text: text(&rng))
    }

    static let fixedSpecs: [RKSpec] = [
        RKSpec(.allWords, "the"), RKSpec(.allWords, "room"), RKSpec(.allWords, "ro*"), RKSpec(.allWords, "ab*"),
        RKSpec(.allWords, "a*"), RKSpec(.allWords, "the room"), RKSpec(.allWords, "room the lunch"),
        RKSpec(.anyWord, "zz call"), RKSpec(.anyWord, "room rooms roomy"), RKSpec(.phrase, "the room"),
        RKSpec(.phrase, "room room"), RKSpec(.allWords, "room room"), RKSpec(.allWords, "the absent"),
        RKSpec(.anyWord, "absent zz"), RKSpec(.allWords, "absent*"), RKSpec(.allWords, "ro* room"),
        RKSpec(.anyWord, "ab* ro*"), RKSpec(.phrase, "ro* the"), RKSpec(.allWords, "x1"), RKSpec(.anyWord, "the a the"),
        RKSpec(.anyWord, "ab ab* abc"), RKSpec(.allWords, "b_c"), RKSpec(.allWords, ""),
    ]

    static func randomSpec(_ rng: inout SeededRandom) -> RKSpec {
        let n = 1 + rng.below(3)
        let text = (0..<n).map { _ in vocabulary[rng.below(vocabulary.count)] + (rng.below(4) == 0 ? "*" : "") }.joined(separator: " ")
        return RKSpec([.phrase, .allWords, .anyWord, .anyWord][rng.below(4)], text)
    }

    static func withFile<R>(_ body: (String) throws -> R) rethrows -> R {
        let path = NSTemporaryDirectory() + "strata-rankhunt-\(UUID().uuidString).strata"
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        return try body(path)
    }

    /// Checks that `got` lists exactly the texts of `model` that `spec` (and `filter`) match, in
    /// the documented ranked order. Returns the problems found (empty: none).
    static func rankProblems<M: RKDoc>(
        _ got: [M.ID], model: [M.ID: RKValues], spec: RKSpec, filter: (RKValues) -> Bool = { _ in true },
        sort: [SortDescriptor<M>] = []
    ) -> [String] {
        var problems: [String] = []
        let tokenized = model.mapValues { words($0.text) }
        let score = spec.scores(all: Array(tokenized.values))
        let expected = Set(model.keys.filter { spec.matches(tokenized[$0]!) && filter(model[$0]!) })
        if Set(got) != expected {
            problems.append(
                "found \(got.count), expected \(expected.count); missing \(expected.subtracting(got).prefix(3)), extra \(Set(got).subtracting(expected).prefix(3))"
            )
            return problems
        }
        if got.count != expected.count { problems.append("duplicates: \(got.count) for \(expected.count)") }
        let scores = got.map { score(tokenized[$0]!) }
        let objects = got.map { M(id: $0, model[$0]!) }
        func descriptorOrder(_ a: Int, _ b: Int) -> ComparisonResult {
            for d in sort {
                let c = d.compare(objects[a], objects[b])
                if c != .orderedSame { return c }
            }
            return .orderedSame
        }
        outer: for i in got.indices {
            for j in (i + 1)..<got.count {
                let a = scores[i], b = scores[j]
                let tolerance = 1e-9 * max(abs(a), abs(b))
                if b > a + tolerance {
                    problems.append("#\(i) \(got[i]) (score \(a)) before #\(j) \(got[j]) (score \(b))")
                } else if a == b {
                    switch descriptorOrder(i, j) {
                    case .orderedDescending: problems.append("#\(i) \(got[i]) before #\(j) \(got[j]): equal scores \(a), sort descriptors say otherwise")
                    case .orderedSame:
                        if M.keyPrecedes(got[j], got[i]) {
                            problems.append("#\(i) \(got[i]) before #\(j) \(got[j]): equal scores \(a) and sort values, keys out of order")
                        }
                    case .orderedAscending: break
                    }
                }
                if problems.count > 4 { break outer }
            }
        }
        return problems
    }
}

extension RK {
    /// Every way of reading `make()`'s results gives the same keys; returns them.
    static func consistentKeys<M: RKDoc>(_ make: () -> Results<M>, _ context: String) throws -> [M.ID] {
        let r = make()
        let keys = r.keys
        #expect(r.error == nil, "\(context): \(String(describing: r.error))")
        let fetched = try make().fetch().map(\.id)
        let iterated = make().map(\.id)
        let counted = make()
        let count = counted.count  // before evaluation: from the trees when it can be
        let subscripted = (0..<counted.count).map { counted[$0].id }
        #expect(fetched == keys, "\(context): fetch() differs from keys")
        #expect(iterated == keys, "\(context): iteration differs from keys")
        #expect(subscripted == keys, "\(context): results[i] differs from keys")
        let paged = make().objects(in: 2..<9).map(\.id)
        #expect(paged == Array(keys.dropFirst(2).prefix(7)), "\(context): objects(in: 2..<9) differs from keys")
        #expect(count == keys.count, "\(context): count \(count), \(keys.count) keys")
        #expect(try make().fetchCount() == keys.count, "\(context): fetchCount")
        return keys
    }

    /// Windows of `make()` against the unwindowed keys.
    static func checkWindows<M: RKDoc>(_ make: () -> Results<M>, keys: [M.ID], _ context: String) {
        let n = keys.count
        for (o, p) in [(0, 1), (0, 5), (3, 4), (7, 11), (max(0, n - 1), 5), (n + 2, 3), (1, n)] {
            let w = make().offset(o).prefix(p)
            let got = w.keys
            #expect(
                got == Array(keys.dropFirst(o).prefix(p)),
                "\(context): offset(\(o)).prefix(\(p)) gave \(got.prefix(6)), expected \(Array(keys.dropFirst(o).prefix(p)).prefix(6))")
            #expect(make().offset(o).prefix(p).count == min(p, max(0, n - o)), "\(context): count of offset(\(o)).prefix(\(p))")
            let first = make().offset(o).prefix(p).first?.id
            #expect(first == keys.dropFirst(o).first, "\(context): first of offset(\(o)).prefix(\(p))")
        }
    }

    static func sorts<M: RKDoc>(_ type: M.Type) -> [(String, [SortDescriptor<M>])] {
        [
            ("unsorted", []),
            ("group", [SortDescriptor(M.groupPath)]),
            ("weight desc, group", [SortDescriptor(M.weightPath, order: .reverse), SortDescriptor(M.groupPath)]),
            ("level", [SortDescriptor(M.levelPath)]),
            ("level desc, weight", [SortDescriptor(M.levelPath, order: .reverse), SortDescriptor(M.weightPath)]),
            ("label", [SortDescriptor(M.labelPath)]),
            ("group desc, label desc", [SortDescriptor(M.groupPath, order: .reverse), SortDescriptor(M.labelPath, order: .reverse)]),
        ]
    }

    /// Every spec ranked, with each sort and each predicate (before and after the search), windows.
    static func verify<M: RKDoc>(
        _ db: Database, _ type: M.Type, model: [M.ID: RKValues], specs: [RKSpec],
        predicates: [(String, Predicate<M>, @Sendable (RKValues) -> Bool)], _ context: String, windows: Bool = true
    ) throws {
        let allSorts = sorts(M.self)
        for (s, spec) in specs.enumerated() {
            // (A rotating share of the sorts and filters per search, to stay within the time budget.)
            let chosen = [0, 1 + s % (allSorts.count - 1), 1 + (s + 3) % (allSorts.count - 1)]
            for (name, sort) in chosen.map({ allSorts[$0] }) {
                let ctx = "\(context): \(spec) ranked, \(name)"
                let make = { () -> Results<M> in
                    let r = db.objects(M.self).search(M.textPath, spec.search, ranked: true)
                    return sort.isEmpty ? r : r.sorted(by: sort)
                }
                let keys = try consistentKeys(make, ctx)
                let problems = rankProblems(keys, model: model, spec: spec, filter: { _ in true }, sort: sort)
                #expect(problems.isEmpty, "\(ctx): \(problems)")
                if windows && (name == "unsorted" || s % 3 == 0) { checkWindows(make, keys: keys, ctx) }
            }
            for (name, predicate, filter) in predicates.isEmpty ? [] : [predicates[s % predicates.count]] {
                for first in [false, true] {
                    let ctx = "\(context): \(spec) ranked, filter \(name)\(first ? " (before the search)" : "")"
                    let make = { () -> Results<M> in
                        first
                            ? db.objects(M.self).filter(predicate).search(M.textPath, spec.search, ranked: true)
                            : db.objects(M.self).search(M.textPath, spec.search, ranked: true).filter(predicate)
                    }
                    let keys = try consistentKeys(make, ctx)
                    let problems = rankProblems(keys, model: model, spec: spec, filter: filter, sort: [SortDescriptor<M>]())
                    #expect(problems.isEmpty, "\(ctx): \(problems)")
                    if windows && !first && s % 2 == 0 { checkWindows(make, keys: keys, ctx) }
                }
            }
        }
    }
}

struct RankHuntTests {
    static let notePredicates: [(String, Predicate<RKNote>, @Sendable (RKValues) -> Bool)] = [
        ("group == 2", #Predicate<RKNote> { $0.group == 2 }, { $0.group == 2 }),
        ("weight > 0.5", #Predicate<RKNote> { $0.weight > 0.5 }, { $0.weight > 0.5 }),
        ("label contains a", #Predicate<RKNote> { $0.label.contains("a") }, { $0.label.contains("a") }),
        ("level guarded (decoded)", #Predicate<RKNote> { $0.level != nil && $0.level! > 0 }, { ($0.level ?? 0) > 0 }),
        ("group in [1, 3]", #Predicate<RKNote> { [1, 3].contains($0.group) }, { [1, 3].contains($0.group) }),
    ]
    static let stringPredicates: [(String, Predicate<RKSNote>, @Sendable (RKValues) -> Bool)] = [
        ("group == 1", #Predicate<RKSNote> { $0.group == 1 }, { $0.group == 1 }),
        ("level guarded (decoded)", #Predicate<RKSNote> { $0.level != nil && $0.level! > 0 }, { ($0.level ?? 0) > 0 }),
        ("weight <= 1", #Predicate<RKSNote> { $0.weight <= 1 }, { $0.weight <= 1 }),
    ]
    static let uuidPredicates: [(String, Predicate<RKUNote>, @Sendable (RKValues) -> Bool)] = [
        ("group == 0", #Predicate<RKUNote> { $0.group == 0 }, { $0.group == 0 }),
        ("level guarded (decoded)", #Predicate<RKUNote> { $0.level != nil && $0.level! > 0 }, { ($0.level ?? 0) > 0 }),
    ]

    static func specs(_ rng: inout SeededRandom, random: Int = 3) -> [RKSpec] {
        var specs = RK.fixedSpecs
        for _ in 0..<random { specs.append(RK.randomSpec(&rng)) }
        return specs
    }

    /// Int64 keys: a load, rounds of upserts, text-only updates and deletes, a reopen.
    @Test func int64KeysAcrossWritesAndReopen() throws {
        let seed: UInt64 = 0x4A4E_0001
        var rng = SeededRandom(seed: seed)
        try RK.withFile { path in
            var db: Database? = try Database(path: path, models: [RKNote.self], options: StoreOptions(durability: .noSync))
            var model: [Int64: RKValues] = [:]
            try db!.write { tx in
                for _ in 0..<120 {
                    let id = Int64(rng.below(4000)) - 2000
                    let v = RK.values(&rng)
                    try tx.upsert(RKNote(id: id, v))
                    model[id] = v
                }
                // Extreme keys.
                for id in [Int64.min, Int64.max, 0, -1] {
                    let v = RK.values(&rng)
                    try tx.upsert(RKNote(id: id, v))
                    model[id] = v
                }
            }
            let loadSpecs = Array(Self.specs(&rng).shuffled(using: &rng.generator).prefix(14))
            try RK.verify(db!, RKNote.self, model: model, specs: loadSpecs, predicates: Self.notePredicates, "seed \(seed) load")
            for round in 0..<2 {
                try db!.write { tx in
                    for _ in 0..<40 {
                        let keys = model.keys.sorted()
                        switch rng.below(4) {
                        case 0:
                            let id = keys[rng.below(keys.count)]
                            _ = try tx.delete(RKNote.self, key: id)
                            model[id] = nil
                        case 1:
                            let id = keys[rng.below(keys.count)]
                            let text = RK.text(&rng)
                            try tx.update(RKNote.self, key: id) { $0.text = text }
                            model[id]?.text = text
                        default:
                            let id = Int64(rng.below(4000)) - 2000
                            let v = RK.values(&rng)
                            try tx.upsert(RKNote(id: id, v))
                            model[id] = v
                        }
                    }
                }
                if round == 1 {
                    db = nil
                    db = try Database(path: path, models: [RKNote.self], options: StoreOptions(durability: .noSync))
                }
                var few = SeededRandom(seed: seed &+ UInt64(round))
                let specs = Array(Self.specs(&few).shuffled(using: &few.generator).prefix(7))
                try RK.verify(db!, RKNote.self, model: model, specs: specs, predicates: Self.notePredicates, "seed \(seed) round \(round)")
            }
        }
    }

    /// String keys of varied lengths, sharing prefixes, some of ~800 bytes.
    @Test func stringKeysOfVariedLengths() throws {
        let seed: UInt64 = 0x5354_0002
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [RKSNote.self])
        var model: [String: RKValues] = [:]
        func id() -> String {
            switch rng.below(6) {
            case 0: return String(repeating: "k", count: 780 + rng.below(30)) + "\(rng.below(50))"
            case 1: return "a" + String(repeating: "b", count: rng.below(40))
            case 2: return "\(rng.below(1000))"
            case 3: return "n" + String(repeating: "\u{0}", count: rng.below(3)) + String(rng.below(40))  // NULs inside
            default: return "m" + String(rng.below(1 << 20), radix: 36) + String(repeating: "z", count: rng.below(3))
            }
        }
        try db.write { tx in
            for _ in 0..<110 {
                let key = id(), v = RK.values(&rng)
                try tx.upsert(RKSNote(id: key, v))
                model[key] = v
            }
        }
        let loadSpecs = Array(Self.specs(&rng).shuffled(using: &rng.generator).prefix(12))
        try RK.verify(db, RKSNote.self, model: model, specs: loadSpecs, predicates: Self.stringPredicates, "seed \(seed) string keys")
        try db.write { tx in
            for key in model.keys.sorted() where rng.below(4) == 0 {
                _ = try tx.delete(RKSNote.self, key: key)
                model[key] = nil
            }
            for _ in 0..<30 {
                let key = id(), v = RK.values(&rng)
                try tx.upsert(RKSNote(id: key, v))
                model[key] = v
            }
        }
        let specs = Array(Self.specs(&rng).shuffled(using: &rng.generator).prefix(6))
        try RK.verify(db, RKSNote.self, model: model, specs: specs, predicates: Self.stringPredicates, "seed \(seed) string keys after writes")
    }

    /// UUID keys.
    @Test func uuidKeys() throws {
        let seed: UInt64 = 0x5555_0003
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [RKUNote.self])
        var model: [UUID: RKValues] = [:]
        try db.write { tx in
            for _ in 0..<110 {
                var bytes = [UInt8](repeating: 0, count: 16)
                for i in 0..<16 { bytes[i] = UInt8(rng.below(i < 14 ? 2 : 256)) }  // long shared prefixes
                let key = UUID(
                    uuid: (
                        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10], bytes[11], bytes[12],
                        bytes[13], bytes[14], bytes[15]
                    ))
                let v = RK.values(&rng)
                try tx.upsert(RKUNote(id: key, v))
                model[key] = v
            }
        }
        let specs = Array(Self.specs(&rng).shuffled(using: &rng.generator).prefix(14))
        try RK.verify(db, RKUNote.self, model: model, specs: specs, predicates: Self.uuidPredicates, "seed \(seed) uuid keys")
    }

    /// Without a full-text index: scores from every record's text.
    @Test func withoutAnIndex() throws {
        let seed: UInt64 = 0x504C_0004
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [RKPlainNote.self])
        var model: [Int64: RKValues] = [:]
        try db.write { tx in
            for _ in 0..<90 {
                let id = Int64(rng.below(1000))
                let v = RK.values(&rng)
                try tx.upsert(RKPlainNote(id: id, v))
                model[id] = v
            }
        }
        let specs = Array(Self.specs(&rng).shuffled(using: &rng.generator).prefix(8))
        try RK.verify(db, RKPlainNote.self, model: model, specs: specs, predicates: [], "seed \(seed) no index")
    }

    // MARK: Observers

    /// One delivery, as plain values.
    struct Seen<ID: Sendable>: Sendable {
        var initial: Bool
        var ids: [ID]
        var version: UInt64
        var deletions: [Int]
        var insertions: [Int]
    }

    static func watch<M: RKDoc>(_ query: Results<M>, into inbox: Inbox<Seen<M.ID>>, _ context: String) -> NotificationToken {
        query.observe(on: DispatchQueue(label: "rankhunt")) { change in
            switch change {
            case .initial(let r): inbox.append(Seen(initial: true, ids: r.keys, version: r.version ?? 0, deletions: [], insertions: []))
            case .update(let r, let d, let i, _): inbox.append(Seen(initial: false, ids: r.keys, version: r.version ?? 0, deletions: d, insertions: i))
            case .error(let error): Issue.record("\(context): \(error)")
            }
        }
    }

    /// Waits until every observer has delivered the current results. The tests settle after some
    /// commits and not after others: the commits between settles may be coalesced into one change
    /// set, while the number of deliveries no longer depends on how late a loaded machine runs the
    /// observers' queues (CI saw all of a test's commits arrive as one).
    static func settle<M: RKDoc>(_ queries: [Results<M>], _ inboxes: [Inbox<Seen<M.ID>>], _ db: Database, _ context: String) throws {
        for (n, (q, inbox)) in zip(queries, inboxes).enumerated() {
            let now = Self.rebuild(q, db).keys
            try #require(inbox.wait(seconds: 60) { $0.last?.ids == now }, "\(context): observer \(n) did not deliver the current results")
        }
    }

    /// The oracle's order of the matches (score descending, descriptors, key); `nearTie` when two
    /// scores differ by less than 1e-9 relative without being equal (either order is accepted).
    static func oracleOrder<M: RKDoc>(
        model: [M.ID: RKValues], spec: RKSpec, filter: (RKValues) -> Bool, sort: [SortDescriptor<M>]
    ) -> (ids: [M.ID], nearTie: Bool) {
        let tokenized = model.mapValues { RK.words($0.text) }
        let score = spec.scores(all: Array(tokenized.values))
        let matched = model.keys.filter { spec.matches(tokenized[$0]!) && filter(model[$0]!) }
        let scores = Dictionary(uniqueKeysWithValues: matched.map { ($0, score(tokenized[$0]!)) })
        let sorted = matched.sorted { a, b in
            if scores[a]! != scores[b]! { return scores[a]! > scores[b]! }
            let x = M(id: a, model[a]!), y = M(id: b, model[b]!)
            for d in sort {
                let c = d.compare(x, y)
                if c != .orderedSame { return c == .orderedAscending }
            }
            return M.keyPrecedes(a, b)
        }
        let values = sorted.map { scores[$0]! }
        let nearTie = zip(values, values.dropFirst()).contains { $0 != $1 && abs($0 - $1) <= 1e-9 * max(abs($0), abs($1)) }
        return (sorted, nearTie)
    }

    /// Observers of ranked searches (windows, a sort, a filter): each change set applied to the
    /// previous list gives the new one, and each list is the oracle's at its version.
    @Test func observersOfRankedSearches() throws {
        let seed: UInt64 = 0x0B5E_0005
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [RKNote.self])
        var model: [Int64: RKValues] = [:]
        try db.write { tx in
            for _ in 0..<120 {
                let id = Int64(rng.below(600))
                let v = RK.values(&rng)
                try tx.upsert(RKNote(id: id, v))
                model[id] = v
            }
        }
        struct Watched {
            var spec: RKSpec
            var sort: [SortDescriptor<RKNote>]
            var filter: @Sendable (RKValues) -> Bool
            var offset: Int
            var limit: Int?
            var results: Results<RKNote>
        }
        func watched(
            _ spec: RKSpec, sort: [SortDescriptor<RKNote>] = [], filter: Predicate<RKNote>? = nil,
            oracle: @escaping @Sendable (RKValues) -> Bool = { _ in true }, offset: Int = 0, limit: Int? = nil
        ) -> Watched {
            var r = db.objects(RKNote.self).search(\.text, spec.search, ranked: true)
            if let filter { r = r.filter(filter) }
            if !sort.isEmpty { r = r.sorted(by: sort) }
            if offset > 0 { r = r.offset(offset) }
            if let limit { r = r.prefix(limit) }
            return Watched(spec: spec, sort: sort, filter: oracle, offset: offset, limit: limit, results: r)
        }
        let queries = [
            watched(RKSpec(.allWords, "the"), limit: 12),
            watched(RKSpec(.anyWord, "zz call ro*"), sort: [SortDescriptor(\.weight, order: .reverse)]),
            watched(RKSpec(.allWords, "room"), offset: 2, limit: 8),
            watched(RKSpec(.allWords, "the"), filter: #Predicate { $0.group == 2 }, oracle: { $0.group == 2 }),
            watched(RKSpec(.allWords, "ab*"), sort: [SortDescriptor(\.label)], limit: 20),
        ]
        var states: [UInt64: [Int64: RKValues]] = [:]
        states[db.objects(RKNote.self).version ?? 0] = model
        let inboxes = queries.map { _ in Inbox<Seen<Int64>>() }
        var tokens: [NotificationToken] = []
        for (q, inbox) in zip(queries, inboxes) { tokens.append(Self.watch(q.results, into: inbox, "seed \(seed)")) }
        for _ in 0..<25 {
            try db.write { tx in
                for _ in 0..<(1 + rng.below(4)) {
                    let keys = model.keys.sorted()
                    switch rng.below(4) {
                    case 0:
                        let id = keys[rng.below(keys.count)]
                        _ = try tx.delete(RKNote.self, key: id)
                        model[id] = nil
                    case 1:
                        let id = keys[rng.below(keys.count)]
                        let text = RK.text(&rng)
                        try tx.update(RKNote.self, key: id) { $0.text = text }
                        model[id]?.text = text
                    default:
                        let id = Int64(rng.below(600))
                        let v = RK.values(&rng)
                        try tx.upsert(RKNote(id: id, v))
                        model[id] = v
                    }
                }
            }
            states[db.objects(RKNote.self).version ?? 0] = model
            if rng.below(2) == 0 {
                try Self.settle(queries.map(\.results), inboxes, db, "seed \(seed)")
            } else {
                usleep(3000)
            }
        }
        for (n, (q, inbox)) in zip(queries, inboxes).enumerated() {
            let context = "seed \(seed) observer \(n) \(q.spec)"
            let now = Self.rebuild(q.results, db).keys
            let arrived = inbox.wait(seconds: 20) { $0.last?.ids == now }
            #expect(arrived, "\(context): the last delivery is not the current results")
            let seen = inbox.all
            #expect(seen.count > 2, "\(context): \(seen.count) deliveries")
            #expect(seen.first?.initial == true, "\(context): no initial delivery first")
            for (a, b) in zip(seen, seen.dropFirst()) {
                #expect(
                    apply(a.ids, deletions: b.deletions, insertions: b.insertions, new: b.ids) == b.ids,
                    "\(context): the change to version \(b.version) does not rebuild it")
            }
            for delivery in seen {
                guard let state = states[delivery.version] else { continue }
                let (order, nearTie) = Self.oracleOrder(model: state, spec: q.spec, filter: q.filter, sort: q.sort)
                if nearTie { continue }
                let expected = Array(order.dropFirst(q.offset).prefix(q.limit ?? .max))
                #expect(delivery.ids == expected, "\(context): version \(delivery.version): \(delivery.ids.prefix(8)), expected \(expected.prefix(8))")
            }
        }
        tokens.removeAll()
    }

    /// The same query on the newest snapshot.
    static func rebuild<M: Model>(_ r: Results<M>, _ db: Database) -> Results<M> {
        var fresh = db.objects(M.self)
        fresh = fresh.rebuilt(r.query)
        return fresh
    }

    /// Live results (not ranked, and ranked) over String keys of varied lengths: every change set
    /// applied to the old keys gives the new keys.
    @Test func changeSetsOverStringKeysOfVariedLengths() throws {
        let seed: UInt64 = 0xC5E7_0006
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [RKSNote.self])
        var model: [String: RKValues] = [:]
        func id() -> String {
            switch rng.below(5) {
            case 0: return String(repeating: "q", count: 700 + rng.below(120)) + String(rng.below(30))
            case 1: return String(repeating: "q", count: rng.below(12))
            case 2: return "q" + String(repeating: "q", count: rng.below(5)) + "\u{0}" + String(rng.below(9))  // a NUL inside
            default: return String(rng.below(200))
            }
        }
        try db.write { tx in
            for _ in 0..<80 {
                let key = id(), v = RK.values(&rng)
                try tx.upsert(RKSNote(id: key, v))
                model[key] = v
            }
        }
        let queries: [Results<RKSNote>] = [
            db.objects(RKSNote.self),
            db.objects(RKSNote.self).filter(#Predicate { $0.group == 1 }),
            db.objects(RKSNote.self).sorted(by: SortDescriptor(\.weight), SortDescriptor(\.group, order: .reverse)),
            db.objects(RKSNote.self).search(\.text, "the"),
            db.objects(RKSNote.self).search(\.text, .anyWord("ro* zz"), ranked: true).prefix(15),
            db.objects(RKSNote.self).filter(#Predicate { $0.weight > 0.5 }).prefix(25),
        ]
        let inboxes = queries.map { _ in Inbox<Seen<String>>() }
        var tokens: [NotificationToken] = []
        for (q, inbox) in zip(queries, inboxes) { tokens.append(Self.watch(q, into: inbox, "seed \(seed)")) }
        for _ in 0..<30 {
            try db.write { tx in
                for _ in 0..<(1 + rng.below(5)) {
                    let keys = model.keys.sorted()
                    switch rng.below(4) {
                    case 0:
                        let key = keys[rng.below(keys.count)]
                        _ = try tx.delete(RKSNote.self, key: key)
                        model[key] = nil
                    case 1:
                        let key = keys[rng.below(keys.count)]
                        let w = Double(rng.below(5)) / 2, g = rng.below(4)
                        try tx.update(RKSNote.self, key: key) {
                            $0.weight = w; $0.group = g
                        }
                    default:
                        let key = id(), v = RK.values(&rng)
                        try tx.upsert(RKSNote(id: key, v))
                        model[key] = v
                    }
                }
            }
            if rng.below(2) == 0 {
                try Self.settle(queries, inboxes, db, "seed \(seed)")
            } else {
                usleep(2000)
            }
        }
        for (n, (q, inbox)) in zip(queries, inboxes).enumerated() {
            let context = "seed \(seed) observer \(n)"
            let now = Self.rebuild(q, db).keys
            let arrived = inbox.wait(seconds: 20) { $0.last?.ids == now }
            #expect(arrived, "\(context): the last delivery is not the current results")
            let seen = inbox.all
            #expect(seen.count > 2, "\(context): \(seen.count) deliveries")
            for (a, b) in zip(seen, seen.dropFirst()) {
                let rebuilt = apply(a.ids, deletions: b.deletions, insertions: b.insertions, new: b.ids)
                #expect(rebuilt == b.ids, "\(context): the change to version \(b.version) does not rebuild it")
            }
        }
        tokens.removeAll()
    }
}
