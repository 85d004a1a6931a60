import Testing
import Foundation
import Dispatch
import Synchronization
@testable import Strata

// The live differential test's model (LDThing) and its fields, and the observer shapes it runs.
// The test and its overview are in LiveDifferentialTests.swift.

// MARK: The model

enum LDKind: String, Codable, Sendable, CaseIterable { case red, green, blue }

struct LDInner: Codable, Sendable {
    var x: Int
    var label: String
}

struct LDThing: Model {
    static let indexes: [PartialKeyPath<LDThing> & Sendable] = [\.rank, \.weight, \.name, \.when]
    static let indexDescriptors: [IndexDescriptor<LDThing>] = [.fullText(\.note), .on(\.name, collation: .caseInsensitive), .on(\.rank, \.when)]
    var id: Int
    var rank: Int  // indexed; 0..<4, so sorts by it have many ties
    var count: Int  // not indexed; 0..<10
    var weight: Double  // indexed; NaN, ±inf, -0.0 among the values
    var ratio: Double  // not indexed; the same values
    var name: String  // indexed; "", combining characters, emoji
    var note: String  // not indexed; the same values
    var when: Date  // indexed
    var level: Int?
    var kind: LDKind
    var tags: [String]
    var inner: LDInner

    /// Whether two objects have the same stored value: doubles by bit pattern (-0.0 is not 0.0,
    /// NaN is NaN), strings by their UTF-8 bytes ("e\u{301}" is not "é", though Swift's == says so).
    func same(_ o: LDThing) -> Bool {
        id == o.id && rank == o.rank && count == o.count && weight.bitPattern == o.weight.bitPattern && ratio.bitPattern == o.ratio.bitPattern
            && name.utf8.elementsEqual(o.name.utf8) && note.utf8.elementsEqual(o.note.utf8)
            && when.timeIntervalSinceReferenceDate.bitPattern == o.when.timeIntervalSinceReferenceDate.bitPattern
            && level == o.level && kind == o.kind && tags.count == o.tags.count && zip(tags, o.tags).allSatisfy { $0.utf8.elementsEqual($1.utf8) }
            && inner.x == o.inner.x && inner.label.utf8.elementsEqual(o.inner.label.utf8)
    }

    static func same(_ a: [LDThing], _ b: [LDThing]) -> Bool { a.count == b.count && zip(a, b).allSatisfy { $0.same($1) } }

    /// The stored fields whose value differs (top-level names, as `ObjectChange.changed` gives them).
    func changedFields(to o: LDThing) -> Set<String> {
        var fields = Set<String>()
        if rank != o.rank { fields.insert("rank") }
        if count != o.count { fields.insert("count") }
        if weight.bitPattern != o.weight.bitPattern { fields.insert("weight") }
        if ratio.bitPattern != o.ratio.bitPattern { fields.insert("ratio") }
        if !name.utf8.elementsEqual(o.name.utf8) { fields.insert("name") }
        if !note.utf8.elementsEqual(o.note.utf8) { fields.insert("note") }
        if when.timeIntervalSinceReferenceDate.bitPattern != o.when.timeIntervalSinceReferenceDate.bitPattern { fields.insert("when") }
        if level != o.level { fields.insert("level") }
        if kind != o.kind { fields.insert("kind") }
        if tags.count != o.tags.count || !zip(tags, o.tags).allSatisfy({ $0.utf8.elementsEqual($1.utf8) }) { fields.insert("tags") }
        if inner.x != o.inner.x || !inner.label.utf8.elementsEqual(o.inner.label.utf8) { fields.insert("inner") }
        return fields
    }

    /// Readable, for failure messages (non-ASCII scalars escaped, so "é" and "e\u{301}" differ).
    var short: String {
        "#\(id){rank \(rank) count \(count) weight \(weight) ratio \(ratio) name \(LDThing.show(name)) note \(LDThing.show(note)) "
            + "when \(when.timeIntervalSinceReferenceDate) level \(level.map { String($0) } ?? "nil") \(kind) tags \(tags) inner (\(inner.x), \(LDThing.show(inner.label)))}"
    }

    static func bits(_ d: Double) -> String { String(d.bitPattern, radix: 16) }
    static func bytes(_ s: String) -> String { s.utf8.map { String($0, radix: 16) }.joined(separator: ".") }
    static func show(_ s: String) -> String {
        "\"" + s.unicodeScalars.map { $0.isASCII ? String($0) : "\\u{\(String($0.value, radix: 16))}" }.joined() + "\""
    }

    // Value pools: small, so that sorts tie and updates often write what is already there.
    static let doubles: [Double] = [.nan, .infinity, -.infinity, -0.0, 0.0, 0.5, 1.5, -2.25, 3.0, 1e300]
    static let strings: [String] = ["", "e\u{301}", "\u{E9}", "😀", "👩‍👩‍👧", "a", "ab", "B", "zeta", "\u{C9}mile", "e", "ß"]
    /// The words a full-text index reads in each of `strings` (folded for case and diacritics),
    /// written out for the plain oracle.
    /// ("e\u{301}" is the same key as "\u{E9}": Swift's `==` on strings is canonical equivalence.)
    static let words: [String: [String]] = [
        "": [], "\u{E9}": ["e"], "😀": [], "👩‍👩‍👧": [], "a": ["a"], "ab": ["ab"],
        "B": ["b"], "zeta": ["zeta"], "\u{C9}mile": ["emile"], "e": ["e"], "ß": ["ss"],
    ]
    static let dates: [Date] = [-1e9, -1, 0, 1, 86_400, 7e8, 7e8 + 0.5].map { Date(timeIntervalSinceReferenceDate: $0) }
    static let tagPool = ["x", "y", "z"]

    static func random(id: Int, _ rng: inout SeededRandom) -> LDThing {
        var thing = LDThing(
            id: id, rank: 0, count: 0, weight: 0, ratio: 0, name: "", note: "", when: dates[0], level: nil, kind: .red,
            tags: [], inner: LDInner(x: 0, label: ""))
        for field in LDField.allCases { field.randomize(&thing, &rng) }
        return thing
    }
}

/// One field a write can change.
enum LDField: CaseIterable {
    case rank, count, weight, ratio, name, note, when, level, kind, tags, inner, innerX, innerLabel

    func randomize(_ t: inout LDThing, _ rng: inout SeededRandom) {
        switch self {
        case .rank: t.rank = rng.below(4)
        case .count: t.count = rng.below(10)
        case .weight: t.weight = LDThing.doubles[rng.below(LDThing.doubles.count)]
        case .ratio: t.ratio = LDThing.doubles[rng.below(LDThing.doubles.count)]
        case .name: t.name = LDThing.strings[rng.below(LDThing.strings.count)]
        case .note: t.note = LDThing.strings[rng.below(LDThing.strings.count)]
        case .when: t.when = LDThing.dates[rng.below(LDThing.dates.count)]
        case .level: t.level = rng.below(3) == 0 ? nil : rng.below(5)
        case .kind: t.kind = LDKind.allCases[rng.below(LDKind.allCases.count)]
        case .tags: t.tags = (0..<rng.below(4)).map { _ in LDThing.tagPool[rng.below(LDThing.tagPool.count)] }
        case .inner: t.inner = LDInner(x: rng.below(6), label: LDThing.strings[rng.below(LDThing.strings.count)])
        case .innerX: t.inner.x = rng.below(6)
        case .innerLabel: t.inner.label = LDThing.strings[rng.below(LDThing.strings.count)]
        }
    }

    func copy(from source: LDThing, to target: inout LDThing) {
        switch self {
        case .rank: target.rank = source.rank
        case .count: target.count = source.count
        case .weight: target.weight = source.weight
        case .ratio: target.ratio = source.ratio
        case .name: target.name = source.name
        case .note: target.note = source.note
        case .when: target.when = source.when
        case .level: target.level = source.level
        case .kind: target.kind = source.kind
        case .tags: target.tags = source.tags
        case .inner: target.inner = source.inner
        case .innerX: target.inner.x = source.inner.x
        case .innerLabel: target.inner.label = source.inner.label
        }
    }

    /// Adds this field of `source` to a partial update's fields (`Transaction.update(_:key:fields:)`).
    func patch(from source: LDThing, into fields: inout [String: Any]) {
        switch self {
        case .rank: fields["rank"] = source.rank
        case .count: fields["count"] = source.count
        case .weight: fields["weight"] = source.weight
        case .ratio: fields["ratio"] = source.ratio
        case .name: fields["name"] = source.name
        case .note: fields["note"] = source.note
        case .when: fields["when"] = source.when
        case .level: fields["level"] = source.level.map { $0 as Any } ?? NSNull()
        case .kind: fields["kind"] = source.kind
        case .tags: fields["tags"] = source.tags
        case .inner: fields["inner"] = ["x": source.inner.x, "label": source.inner.label] as [String: Any]
        case .innerX, .innerLabel:
            var inner = fields["inner"] as? [String: Any] ?? [:]  // nested structs merge field by field
            if self == .innerX { inner["x"] = source.inner.x } else { inner["label"] = source.inner.label }
            fields["inner"] = inner
        }
    }

    /// Fields the key-path observers of `count` and `ratio` do not watch (`innerLabel` is also
    /// outside what the observer of `inner.x` watches).
    static let unobserved: [LDField] = [.note, .tags, .inner, .innerX, .innerLabel, .level]
}

// MARK: Observer shapes

/// One sort key, with what the plain oracle needs: Foundation's `SortDescriptor.compare`, except
/// for doubles, where Strata puts NaN above every number (Foundation has no order for it).
struct LDSort: Sendable {
    var descriptor: SortDescriptor<LDThing>
    var double: (@Sendable (LDThing) -> Double)?
    var reverse: Bool
    var label: String

    static func int(_ keyPath: KeyPath<LDThing, Int> & Sendable, _ label: String, reverse: Bool = false) -> LDSort {
        LDSort(descriptor: SortDescriptor(keyPath, order: reverse ? .reverse : .forward), double: nil, reverse: reverse, label: label + (reverse ? "↓" : "↑"))
    }

    static func double(_ keyPath: KeyPath<LDThing, Double> & Sendable, _ label: String, reverse: Bool = false) -> LDSort {
        LDSort(
            descriptor: SortDescriptor(keyPath, order: reverse ? .reverse : .forward), double: { $0[keyPath: keyPath] }, reverse: reverse,
            label: label + (reverse ? "↓" : "↑"))
    }

    static func string(_ keyPath: KeyPath<LDThing, String> & Sendable, _ label: String, reverse: Bool = false) -> LDSort {
        LDSort(descriptor: SortDescriptor(keyPath, order: reverse ? .reverse : .forward), double: nil, reverse: reverse, label: label + (reverse ? "↓" : "↑"))
    }

    static func optionalInt(_ keyPath: KeyPath<LDThing, Int?> & Sendable, _ label: String, reverse: Bool = false) -> LDSort {
        LDSort(descriptor: SortDescriptor(keyPath, order: reverse ? .reverse : .forward), double: nil, reverse: reverse, label: label + (reverse ? "↓" : "↑"))
    }

    static func date(_ keyPath: KeyPath<LDThing, Date> & Sendable, _ label: String, reverse: Bool = false) -> LDSort {
        LDSort(descriptor: SortDescriptor(keyPath, order: reverse ? .reverse : .forward), double: nil, reverse: reverse, label: label + (reverse ? "↓" : "↑"))
    }

    /// A string in a collation (the shape sorts with `sorted(by:collation:)`); the oracle compares
    /// with the independent comparator of CollationTests.
    static func collated(_ keyPath: KeyPath<LDThing, String> & Sendable, _ label: String, _ collation: StringCollation, reverse: Bool = false) -> LDSort {
        var sort = LDSort(
            descriptor: SortDescriptor(keyPath, order: reverse ? .reverse : .forward), double: nil, reverse: reverse,
            label: label + " (\(collation))" + (reverse ? "↓" : "↑"))
        sort.collated = { a, b in
            let order = oracleCollate(a[keyPath: keyPath], b[keyPath: keyPath], collation.options)
            if !reverse || order == .orderedSame { return order }
            return order == .orderedAscending ? .orderedDescending : .orderedAscending
        }
        return sort
    }

    var collated: (@Sendable (LDThing, LDThing) -> ComparisonResult)?

    func compare(_ a: LDThing, _ b: LDThing) -> ComparisonResult {
        if let collated { return collated(a, b) }
        if let double {
            let x = double(a), y = double(b)
            if x.isNaN || y.isNaN {
                let ascending: ComparisonResult = x.isNaN && y.isNaN ? .orderedSame : (x.isNaN ? .orderedDescending : .orderedAscending)
                switch (ascending, reverse) {
                case (.orderedAscending, true): return .orderedDescending
                case (.orderedDescending, true): return .orderedAscending
                default: return ascending
                }
            }
        }
        return descriptor.compare(a, b)
    }
}

/// An observed query, described twice: as Strata builds it, and as a plain-array oracle computes it.
struct LDShape: Sendable {
    var name: String
    var predicate: Predicate<LDThing>?
    /// A full-text search of `note`, its terms as the oracle reads them (folded word, prefix),
    /// and whether it ranks the results.
    var search: (text: TextSearch, terms: [LDTerm], ranked: Bool)?
    /// The collation of the shape's String sorts (`sorted(by:collation:)`).
    var collation: StringCollation?
    var sort: [LDSort] = []
    var distinctByRank = false
    var offset = 0
    var limit: Int?
    var keyPaths: [PartialKeyPath<LDThing> & Sendable]?
    /// With `keyPaths`: whether the observed fields of two objects are the same (what modifications are about).
    var observedSame: (@Sendable (LDThing, LDThing) -> Bool)?

    var label: String {
        var parts = [name]
        if !sort.isEmpty { parts.append("sort " + sort.map(\.label).joined(separator: ",")) }
        if let collation { parts.append("collation \(collation)") }
        if distinctByRank { parts.append("distinct(rank)") }
        if offset > 0 { parts.append("offset \(offset)") }
        if let limit { parts.append("prefix \(limit)") }
        if let keyPaths { parts.append("keyPaths [" + keyPaths.map { fieldPath(of: $0) ?? "?" }.joined(separator: ", ") + "]") }
        return parts.joined(separator: " | ")
    }

    func build(_ base: Results<LDThing>) -> Results<LDThing> {
        var results = base
        if let predicate { results = results.filter(predicate) }
        if let search { results = results.search(\.note, search.text, ranked: search.ranked) }
        if let collation, !sort.isEmpty {
            results = results.sorted(by: sort.map(\.descriptor), collation: collation)
        } else if !sort.isEmpty {
            results = results.sorted(by: sort.map(\.descriptor))
        }
        if distinctByRank { results = results.distinct(by: \.rank) }
        if offset > 0 { results = results.offset(offset) }
        if let limit { results = results.prefix(limit) }
        return results
    }

    /// The plain-array oracle over `all` (any order).
    func plain(_ all: [LDThing]) throws -> [LDThing] {
        var matching = try all.filter { try predicate?.evaluate($0) ?? true }
        var scores: [Int: Double] = [:]
        if let search {
            let words = { (thing: LDThing) in LDThing.words[thing.note] ?? ["?"] }
            matching = matching.filter { LDTerm.matches(search.text.mode, search.terms, words($0)) }
            if search.ranked {
                let ranked = LDTerm.scores(search.terms, all.map(words), matching.map(words))
                for (thing, score) in zip(matching, ranked) { scores[thing.id] = score }
            }
        }
        let sort = self.sort
        matching.sort { a, b in
            if let x = scores[a.id], let y = scores[b.id], x != y { return x > y }
            for key in sort {
                switch key.compare(a, b) {
                case .orderedAscending: return true
                case .orderedDescending: return false
                case .orderedSame: continue
                }
            }
            return a.id < b.id
        }
        if distinctByRank {
            var seen = Set<Int>()
            matching = matching.filter { seen.insert($0.rank).inserted }
        }
        let start = min(offset, matching.count)
        let end = limit.map { min(matching.count, start + $0) } ?? matching.count
        return Array(matching[start..<end])
    }

    /// Whether two objects are the same object with the same value, as far as this observer is
    /// concerned: the whole stored value, or the observed fields.
    func same(_ a: LDThing, _ b: LDThing) -> Bool { a.id == b.id && (observedSame?(a, b) ?? a.same(b)) }

    func same(_ a: [LDThing], _ b: [LDThing]) -> Bool { a.count == b.count && zip(a, b).allSatisfy { same($0, $1) } }

    /// Observers started while two threads write.
    static func late() -> [LDShape] {
        [
            LDShape(name: "no filter (started during writes)", sort: [.int(\.rank, "rank")]),
            LDShape(name: "weight < 1 (started during writes)", predicate: #Predicate<LDThing> { $0.weight < 1 }, sort: [.double(\.weight, "weight")]),
            LDShape(
                name: "rank == 1 || count == 5 (started during writes)", predicate: #Predicate<LDThing> { $0.rank == 1 || $0.count == 5 },
                sort: [.string(\.note, "note")], limit: 40),
        ]
    }

    /// Observers of searches, collated sorts and compound-index walks.
    static func indexed() -> [LDShape] {
        let one = 1
        return [
            LDShape(name: "search \"e\"", search: (TextSearch("e"), [LDTerm("e")], false), sort: [.date(\.when, "when")]),
            LDShape(name: "search any \"a* SS\"", search: (TextSearch.anyWord("a* SS"), [LDTerm("a", prefix: true), LDTerm("ss")], false)),
            LDShape(name: "search any \"e zeta ab\" ranked", search: (TextSearch.anyWord("e zeta ab"), [LDTerm("e"), LDTerm("zeta"), LDTerm("ab")], true)),
            LDShape(
                name: "rank <= 2 && search \"\u{C9}MILE\"", predicate: #Predicate<LDThing> { $0.rank <= 2 },
                search: (TextSearch("\u{C9}MILE"), [LDTerm("emile")], false), sort: [.int(\.count, "count", reverse: true)], limit: 10),
            LDShape(name: "no filter", collation: .caseInsensitive, sort: [.collated(\.name, "name", .caseInsensitive)]),
            LDShape(name: "no filter", collation: .natural, sort: [.collated(\.name, "name", .natural, reverse: true)], limit: 20),
            LDShape(name: "rank == 1", predicate: #Predicate<LDThing> { $0.rank == one }, sort: [.date(\.when, "when", reverse: true)], limit: 10),
        ]
    }

    static func all() -> [LDShape] {
        let red = LDKind.red
        let e = "e"
        let x = "x"
        let cutoff = Date(timeIntervalSinceReferenceDate: 0)
        let precomposed = "\u{E9}", decomposed = "e\u{301}"
        let counts = [1, 8]
        return [
            LDShape(name: "all"),
            LDShape(name: "rank == 2", predicate: #Predicate<LDThing> { $0.rank == 2 }),
            LDShape(name: "3 <= count < 7", predicate: #Predicate<LDThing> { $0.count >= 3 && $0.count < 7 }),
            LDShape(name: "rank == 1 || count == 5", predicate: #Predicate<LDThing> { $0.rank == 1 || $0.count == 5 }),
            LDShape(name: "kind == red && weight > 0", predicate: #Predicate<LDThing> { $0.kind == red && $0.weight > 0 }),
            LDShape(name: "note.contains(\"e\") || tags.contains(\"x\")", predicate: #Predicate<LDThing> { $0.note.contains(e) || $0.tags.contains(x) }),
            LDShape(name: "level == nil || inner.x >= 3", predicate: #Predicate<LDThing> { $0.level == nil || $0.inner.x >= 3 }),
            LDShape(
                name: "name == \"\\u{E9}\" || note == \"e\\u{301}\" || [1, 8].contains(count)",
                predicate: #Predicate<LDThing> { $0.name == precomposed || $0.note == decomposed || counts.contains($0.count) }),
            LDShape(name: "name >= \"e\" && level != nil && level! > 1", predicate: #Predicate<LDThing> { $0.name >= e && $0.level != nil && $0.level! > 1 }),
            LDShape(name: "weight < 1", predicate: #Predicate<LDThing> { $0.weight < 1 }, sort: [.double(\.weight, "weight")]),
            LDShape(name: "no filter", sort: [.optionalInt(\.level, "level", reverse: true), .int(\.count, "count")]),
            LDShape(name: "no filter", sort: [.int(\.rank, "rank")]),
            LDShape(name: "no filter", sort: [.int(\.rank, "rank", reverse: true)]),
            LDShape(name: "rank <= 2", predicate: #Predicate<LDThing> { $0.rank <= 2 }, sort: [.int(\.rank, "rank", reverse: true)]),
            LDShape(name: "no filter", sort: [.int(\.count, "count", reverse: true)]),
            LDShape(name: "no filter", sort: [.double(\.ratio, "ratio")]),
            LDShape(name: "no filter", sort: [.double(\.weight, "weight", reverse: true)]),
            LDShape(name: "no filter", sort: [.int(\.rank, "rank", reverse: true), .string(\.name, "name")]),
            LDShape(name: "no filter", sort: [.double(\.ratio, "ratio"), .int(\.count, "count", reverse: true)]),
            LDShape(name: "no filter", sort: [.string(\.name, "name")]),
            LDShape(name: "no filter", sort: [.string(\.note, "note", reverse: true)]),
            LDShape(name: "no filter", sort: [.date(\.when, "when")]),
            LDShape(name: "count < 8", predicate: #Predicate<LDThing> { $0.count < 8 }, sort: [.date(\.when, "when", reverse: true)]),
            LDShape(name: "when >= 0", predicate: #Predicate<LDThing> { $0.when >= cutoff }, sort: [.double(\.weight, "weight")], limit: 15),
            LDShape(name: "no filter", sort: [.double(\.weight, "weight")], limit: 15),
            LDShape(name: "rank != 0", predicate: #Predicate<LDThing> { $0.rank != 0 }, sort: [.int(\.count, "count")], offset: 40, limit: 30),
            LDShape(name: "kind != red", predicate: #Predicate<LDThing> { $0.kind != red }, sort: [.string(\.name, "name")], offset: 60, limit: 50),
            LDShape(name: "no filter", sort: [.int(\.count, "count")], distinctByRank: true),
            LDShape(name: "no filter", keyPaths: [\.count], observedSame: { $0.count == $1.count }),
            LDShape(
                name: "rank <= 1", predicate: #Predicate<LDThing> { $0.rank <= 1 }, sort: [.date(\.when, "when")],
                keyPaths: [\.ratio], observedSame: { $0.ratio.bitPattern == $1.ratio.bitPattern }),
            LDShape(name: "no filter", keyPaths: [\.inner.x], observedSame: { $0.inner.x == $1.inner.x }),
        ] + indexed()
    }
}

/// A search term as the oracle reads it.
struct LDTerm: Sendable {
    var word: String
    var prefix = false

    init(_ word: String, prefix: Bool = false) {
        self.word = word
        self.prefix = prefix
    }

    func matches(_ word: String) -> Bool { prefix ? word.utf8.starts(with: self.word.utf8) : word.utf8.elementsEqual(self.word.utf8) }

    /// The documented meaning of a search on a text's words (terms given distinct).
    static func matches(_ mode: TextSearch.Mode, _ terms: [LDTerm], _ words: [String]) -> Bool {
        switch mode {
        case .allWords: return terms.allSatisfy { term in words.contains(where: term.matches) }
        case .anyWord: return terms.contains { term in words.contains(where: term.matches) }
        case .phrase:
            guard words.count >= terms.count else { return false }
            return (0...(words.count - terms.count)).contains { start in terms.indices.allSatisfy { terms[$0].matches(words[start + $0]) } }
        }
    }

    /// BM25 as TextRanking documents it (the same formula as FullTextTests' oracle).
    static func scores(_ terms: [LDTerm], _ all: [[String]], _ candidates: [[String]]) -> [Double] {
        let texts = all.filter { !$0.isEmpty }
        let n = Double(texts.count)
        let average = texts.isEmpty ? 0 : Double(texts.reduce(0) { $0 + $1.count }) / n
        let frequencies = terms.map { term in texts.filter { $0.contains(where: term.matches) }.count }
        let k1 = 1.2, b = 0.75
        return candidates.map { words in
            let norm = average > 0 ? 1 - b + b * Double(words.count) / average : 1
            var score = 0.0
            for (t, term) in terms.enumerated() {
                let count = words.filter(term.matches).count
                if count == 0 { continue }
                let tf = Double(count), df = Double(frequencies[t])
                score += log(1 + (n - df + 0.5) / (df + 0.5)) * tf * (k1 + 1) / (tf + k1 * norm)
            }
            return score
        }
    }
}
