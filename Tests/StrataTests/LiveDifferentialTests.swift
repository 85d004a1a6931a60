import Testing
import Foundation
import Dispatch
import Synchronization
@testable import Strata

// A differential test of live results: an observed query must behave exactly as the query re-run
// after each commit. For every observer shape (filters, sorts, windows, distinct, key paths), every
// delivered change set is checked against the previously delivered array and against the query
// re-run on the very snapshot the delivery came from; at quiescence the observer's latest results
// must equal a fresh `db.objects(...)` query, and that query must equal a plain-array oracle
// (`Predicate.evaluate` + `SortDescriptor.compare`, ties by id, NaN above every number) over a
// dictionary model maintained alongside the writes. Three more observers start while two
// threads write, and a dozen objects are watched one by one (`db.observe(_:key:)`: the changed
// fields named exactly, deletion delivered, the latest value equal to the stored one).
//
// Writes: random transactions (inserts, updates of one or several fields, partial updates from
// dictionaries, updates of fields some observers ignore, identical writes, moves across sort
// positions and filters, deletes, upserts, delete(where:), refused duplicate inserts, rolled-back
// transactions), 40 % in bursts from one
// thread, 5 % one single-write transaction at a time with a checkpoint after each, 25 % from two
// threads at once (through two handles of the file), 30 % as async writes from many tasks at once
// (group commit merges them; some throw and are rolled back alone). Checkpoints follow every burst.
// The writes are seeded; with several writers, their interleaving is not.
//
// Knobs (environment):
//   STRATA_LIVE_DIFF_SEED          the seed (default 20260501); printed in every failure
//   STRATA_LIVE_DIFF_TXNS          write transactions in all (default 450)
//   STRATA_LIVE_DIFF_OBJECTS       objects written first (default 200)
//   STRATA_LIVE_DIFF_TIMEOUT       seconds a checkpoint waits at most (default 10)
//   STRATA_LIVE_DIFF_CAP           failures reported per observer (default 6; every kind is counted)
//   STRATA_LIVE_DIFF_ORACLE_EVERY  compare every n-th delivery with the query re-run on its own
//                                  snapshot (default 1: every delivery)
//   STRATA_LIVE_DIFF_SHAPES        only these observers, e.g. "12,25" (indices in LDShape.all())

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
    var rank: Int          // indexed; 0..<4, so sorts by it have many ties
    var count: Int         // not indexed; 0..<10
    var weight: Double     // indexed; NaN, ±inf, -0.0 among the values
    var ratio: Double      // not indexed; the same values
    var name: String       // indexed; "", combining characters, emoji
    var note: String       // not indexed; the same values
    var when: Date         // indexed
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
    static let words: [String: [String]] = ["": [], "\u{E9}": ["e"], "😀": [], "👩‍👩‍👧": [], "a": ["a"], "ab": ["ab"],
                                            "B": ["b"], "zeta": ["zeta"], "\u{C9}mile": ["emile"], "e": ["e"], "ß": ["ss"]]
    static let dates: [Date] = [-1e9, -1, 0, 1, 86_400, 7e8, 7e8 + 0.5].map { Date(timeIntervalSinceReferenceDate: $0) }
    static let tagPool = ["x", "y", "z"]

    static func random(id: Int, _ rng: inout SeededRandom) -> LDThing {
        var thing = LDThing(id: id, rank: 0, count: 0, weight: 0, ratio: 0, name: "", note: "", when: dates[0], level: nil, kind: .red,
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
            var inner = fields["inner"] as? [String: Any] ?? [:]   // nested structs merge field by field
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
        LDSort(descriptor: SortDescriptor(keyPath, order: reverse ? .reverse : .forward), double: { $0[keyPath: keyPath] }, reverse: reverse,
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
        var sort = LDSort(descriptor: SortDescriptor(keyPath, order: reverse ? .reverse : .forward), double: nil, reverse: reverse,
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
            LDShape(name: "rank == 1 || count == 5 (started during writes)", predicate: #Predicate<LDThing> { $0.rank == 1 || $0.count == 5 },
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
            LDShape(name: "rank <= 2 && search \"\u{C9}MILE\"", predicate: #Predicate<LDThing> { $0.rank <= 2 },
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
            LDShape(name: "name == \"\\u{E9}\" || note == \"e\\u{301}\" || [1, 8].contains(count)",
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
            LDShape(name: "rank <= 1", predicate: #Predicate<LDThing> { $0.rank <= 1 }, sort: [.date(\.when, "when")],
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

// MARK: Checking deliveries

struct LDConfig: Sendable {
    var seed: UInt64 = 20260501
    var transactions = 450
    var objects = 200
    var timeout = 10.0
    var cap = 6
    var oracleEvery = 1
    /// Only these shapes (by index in `LDShape.all()`), to chase one failure.
    var shapes: Set<Int>?

    static func fromEnvironment() -> LDConfig {
        let env = ProcessInfo.processInfo.environment
        var config = LDConfig()
        if let v = env["STRATA_LIVE_DIFF_SEED"].flatMap({ UInt64($0) }) { config.seed = v }
        if let v = env["STRATA_LIVE_DIFF_TXNS"].flatMap({ Int($0) }), v >= 10 { config.transactions = v }
        if let v = env["STRATA_LIVE_DIFF_OBJECTS"].flatMap({ Int($0) }), v >= 1 { config.objects = v }
        if let v = env["STRATA_LIVE_DIFF_TIMEOUT"].flatMap({ Double($0) }), v > 0 { config.timeout = v }
        if let v = env["STRATA_LIVE_DIFF_CAP"].flatMap({ Int($0) }), v >= 1 { config.cap = v }
        if let v = env["STRATA_LIVE_DIFF_ORACLE_EVERY"].flatMap({ Int($0) }), v >= 1 { config.oracleEvery = v }
        if let v = env["STRATA_LIVE_DIFF_SHAPES"] { config.shapes = Set(v.split(separator: ",").compactMap { Int($0) }) }
        return config
    }
}

/// Every object of a snapshot, read once per version for all observers (the plain oracle's input).
final class LDSnapshotObjects: Sendable {
    private let cache = Mutex<[UInt64: [LDThing]]>([:])

    func objects(_ snapshot: Snapshot) -> [LDThing] {
        if let done = cache.withLock({ $0[snapshot.version] }) { return done }
        let all = Array(snapshot.objects(LDThing.self))
        cache.withLock { cache in
            cache[snapshot.version] = all
            if cache.count > 48, let oldest = cache.keys.min() { cache[oldest] = nil }
        }
        return all
    }
}

/// Receives one observer's deliveries (on its private serial queue), checks each one, and keeps
/// only the latest array and the failures. `Sendable`: all mutable state is in a Mutex.
final class LDChecker: Sendable {
    struct State {
        var deliveries = 0
        var previous: [LDThing]?
        var version: UInt64 = 0
        var lastDelivery = ContinuousClock.now
        var failures: [(kind: String, message: String)] = []
        var counts: [String: Int] = [:]
    }

    let index: Int
    let shape: LDShape
    let seed: UInt64
    private let cap: Int
    private let oracleEvery: Int
    private let snapshots: LDSnapshotObjects
    private let state = Mutex(State())

    init(index: Int, shape: LDShape, seed: UInt64, cap: Int, oracleEvery: Int, snapshots: LDSnapshotObjects) {
        self.index = index
        self.oracleEvery = oracleEvery
        self.shape = shape
        self.seed = seed
        self.cap = cap
        self.snapshots = snapshots
    }

    var deliveries: Int { state.withLock { $0.deliveries } }
    var lastDelivery: ContinuousClock.Instant { state.withLock { $0.lastDelivery } }
    /// The latest delivered objects (empty before the first delivery).
    var latest: [LDThing] { state.withLock { $0.previous ?? [] } }
    var failures: [(kind: String, message: String)] { state.withLock { $0.failures } }
    var counts: [String: Int] { state.withLock { $0.counts } }

    private var prefix: String { "seed \(seed), observer \(index) [\(shape.label)]" }

    /// Records a failure: every kind is counted; the first of each kind and then others are kept,
    /// `cap` in all.
    func record(_ kind: String, _ message: String, delivery: Int?) {
        let text = "\(prefix)\(delivery.map { ", delivery #\($0)" } ?? ""): \(kind): \(message)"
        state.withLock { s in
            s.counts[kind, default: 0] += 1
            if s.failures.count < cap || s.counts[kind] == 1 {
                s.failures.append((kind, text))
            }
        }
    }

    func receive(_ change: ResultsChange<LDThing>) {
        switch change {
        case .initial(let results):
            check(results, update: nil)
        case .update(let results, let deletions, let insertions, let modifications):
            check(results, update: (deletions, insertions, modifications))
        case .error(let error):
            let n = state.withLock { s in s.deliveries += 1; return s.deliveries }
            record("error delivered", "\(error)", delivery: n)
        }
    }

    private func check(_ results: Results<LDThing>, update: (deletions: [Int], insertions: [Int], modifications: [Int])?) {
        let new = Array(results)
        let version = results.version ?? 0
        let (n, previous, previousVersion) = state.withLock { s -> (Int, [LDThing]?, UInt64) in
            s.deliveries += 1
            return (s.deliveries, s.previous, s.version)
        }
        if results.snapshot == nil { record("delivery without snapshot", "results carry no snapshot: \(results.error.map { "\($0)" } ?? "-")", delivery: n) }

        let ids = new.map(\.id)
        if Set(ids).count != ids.count {
            let dups = Dictionary(grouping: ids, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
            record("duplicate objects in delivered results", "ids \(dups) appear more than once (version \(version)): \(LDDiff.ids(ids))", delivery: n)
        }
        // The query re-run on the delivery's own snapshot: by the plain oracle, and when that
        // differs, by Strata too, to tell an observer's fault from the query's.
        if let snapshot = results.snapshot, n == 1 || (n - 1) % oracleEvery == 0 {
            do {
                let plain = try shape.plain(snapshots.objects(snapshot))
                if !LDThing.same(plain, new) {
                    let engine = Array(shape.build(snapshot.objects(LDThing.self)))
                    if !LDThing.same(engine, new) {
                        record("delivered results differ from the query re-run on the same snapshot",
                               "version \(version): " + LDDiff.describe(expected: engine, delivered: new, expectedName: "db.objects"), delivery: n)
                    }
                    if !LDThing.same(engine, plain) {
                        record("db.objects query differs from the plain-array oracle",
                               "version \(version): " + LDDiff.describe(expected: plain, delivered: engine, expectedName: "plain oracle", deliveredName: "db.objects"),
                               delivery: n)
                    }
                }
            } catch {
                record("oracle error", "\(error)", delivery: n)
            }
        }

        if let update {
            if previous == nil { record("update before .initial", "first delivery is an update", delivery: n) }
            if version <= previousVersion {
                record("version did not advance", "version \(version) after \(previousVersion)", delivery: n)
            }
            checkChange(previous ?? [], new, update, n: n, version: version)
        } else if previous != nil {
            record(".initial delivered twice", "second .initial at delivery #\(n)", delivery: n)
        }

        state.withLock { s in
            s.previous = new
            s.version = version
            s.lastDelivery = .now
        }
    }

    private func checkChange(_ old: [LDThing], _ new: [LDThing], _ change: (deletions: [Int], insertions: [Int], modifications: [Int]),
                             n: Int, version: UInt64) {
        let (deletions, insertions, modifications) = change
        let context = "version \(version), deletions \(LDDiff.ids(deletions)) insertions \(LDDiff.ids(insertions)) modifications \(LDDiff.ids(modifications)); "
            + "previous \(LDDiff.ids(old.map(\.id))) new \(LDDiff.ids(new.map(\.id)))"
        if deletions.isEmpty && insertions.isEmpty && modifications.isEmpty {
            record("empty change set delivered", context, delivery: n)
        }
        var valid = true
        for (name, list, bound) in [("deletions", deletions, old.count), ("insertions", insertions, new.count), ("modifications", modifications, new.count)] {
            if zip(list, list.dropFirst()).contains(where: { $0 >= $1 }) {
                record("change set indices not strictly ascending or repeated", "\(name) \(LDDiff.ids(list)); " + context, delivery: n)
            }
            if list.contains(where: { $0 < 0 || $0 >= bound }) {
                record("change set index out of range", "\(name) \(LDDiff.ids(list)) with \(bound) objects; " + context, delivery: n)
                valid = false
            }
        }
        if Set(deletions).count != deletions.count || Set(insertions).count != insertions.count { valid = false }
        if !Set(modifications).isDisjoint(with: insertions) {
            record("an index is both inserted and modified", context, delivery: n)
        }
        guard valid else { return }
        // Apply: deletions from the highest, then insertions from the lowest.
        var applied = old
        for i in deletions.sorted(by: >) { applied.remove(at: i) }
        let kept = applied
        for j in insertions.sorted() {
            guard j <= applied.count else {
                record("change set does not rebuild the new results", "insertion \(j) beyond \(applied.count) objects; " + context, delivery: n)
                return
            }
            applied.insert(new[j], at: j)
        }
        if applied.map(\.id) != new.map(\.id) {
            record("change set does not rebuild the new results",
                   "applying gives \(LDDiff.ids(applied.map(\.id))); " + context, delivery: n)
            return
        }
        // Kept objects, old → new in order: modified exactly when their (observed) value changed.
        let insertionSet = Set(insertions)
        let keptNew = new.indices.filter { !insertionSet.contains($0) }
        var expected: [Int] = []
        var before: [Int: LDThing] = [:]
        for (old, j) in zip(kept, keptNew) {
            before[j] = old
            if !shape.same(old, new[j]) { expected.append(j) }
        }
        if expected != modifications {
            let show = { (indices: [Int]) -> String in
                let shown = indices.prefix(3).map { j in "\(j): \(before[j]?.short ?? "?") → \(new[j].short)" }
                return "\(indices) " + shown.joined(separator: "; ") + (indices.count > 3 ? "; …" : "")
            }
            record("modifications are not exactly the kept objects that changed",
                   "not reported: \(show(Set(expected).subtracting(modifications).sorted())); "
                   + "reported but unchanged\(shape.keyPaths == nil ? "" : " in the observed fields"): \(show(Set(modifications).subtracting(expected).sorted())); "
                   + context,
                   delivery: n)
        }
    }
}

enum LDDiff {
    static func ids(_ ids: [Int], limit: Int = 30) -> String {
        ids.count <= limit ? "\(ids)" : "\(Array(ids.prefix(limit))) … (\(ids.count) in all)"
    }

    /// The first difference of two result arrays, with the ids around it.
    static func describe(expected: [LDThing], delivered: [LDThing], expectedName: String = "expected", deliveredName: String = "delivered",
                         same: (LDThing, LDThing) -> Bool = { $0.same($1) }) -> String {
        let first = (0..<min(expected.count, delivered.count)).first { !same(expected[$0], delivered[$0]) } ?? min(expected.count, delivered.count)
        let from = max(0, first - 3)
        let window = { (things: [LDThing]) -> String in
            let ids = things.map(\.id)
            guard from < ids.count else { return "[] (\(ids.count) in all)" }
            return "…\(Array(ids[from..<min(ids.count, from + 12)]))… (\(ids.count) in all)"
        }
        var text = "first difference at index \(first): \(expectedName) \(window(expected)) vs \(deliveredName) \(window(delivered))"
        if first < expected.count && first < delivered.count && expected[first].id == delivered[first].id {
            text += "; same object, different value: \(expectedName) \(expected[first].short) vs \(deliveredName) \(delivered[first].short)"
        } else {
            if first < expected.count { text += "; \(expectedName)[\(first)] = \(expected[first].short)" }
            if first < delivered.count { text += "; \(deliveredName)[\(first)] = \(delivered[first].short)" }
        }
        return text
    }
}

// MARK: Writes

/// The dictionary model, updated by each write closure as it ends (write closures never overlap:
/// the writer lock, or the writer thread of grouped async writes, runs them one at a time).
final class LDModel: Sendable {
    let objects = Mutex<[Int: LDThing]>([:])
    /// Problems of the write harness itself (unexpected errors, a model out of step).
    let problems = Mutex<[String]>([])

    func problem(_ text: String) { problems.withLock { $0.append(text) } }
}

struct LDRollback: Error {}

enum LDWrites {
    /// Makes the writes of one random transaction in `tx`, mirroring them on a copy of `model`.
    /// Returns the new model and whether the transaction should be thrown away (then the caller
    /// throws `LDRollback`).
    static func run(_ tx: Transaction, model: [Int: LDThing], seed: UInt64, objects target: Int, maxOps: Int = 4, rollbackPercent: Int,
                    note: (String) -> Void) throws -> (model: [Int: LDThing], rollback: Bool) {
        var rng = SeededRandom(seed: seed)
        var m = model
        let idSpace = target * 2
        func freshID() -> Int {
            for _ in 0..<20 {
                let id = rng.below(idSpace)
                if m[id] == nil { return id }
            }
            return (m.keys.max() ?? 0) + 1
        }
        func update(_ id: Int, _ fields: [LDField], to new: LDThing) throws {
            let stored = try tx.update(LDThing.self, key: id) { object in
                for field in fields { field.copy(from: new, to: &object) }
            }
            if !stored.same(new) { note("update of #\(id) stored \(stored.short), the model expected \(new.short)") }
            m[id] = new
        }
        for _ in 0..<(1 + rng.below(maxOps)) {
            let keys = m.keys.sorted()   // dictionary order varies between runs
            let roll = rng.below(100)
            let someKey = keys.isEmpty ? nil : keys[rng.below(keys.count)]
            guard let id = someKey, !(m.count < target * 9 / 10 && roll < 40), roll >= 14 else {
                let thing = LDThing.random(id: freshID(), &rng)
                try tx.insert(thing)
                m[thing.id] = thing
                continue
            }
            let old = m[id]!
            switch roll {
            case 14..<28:   // one field
                let field = LDField.allCases[rng.below(LDField.allCases.count)]
                var new = old
                field.randomize(&new, &rng)
                try update(id, [field], to: new)
            case 28..<34:   // a partial update of one or two fields, from a dictionary
                let fields = (0..<(1 + rng.below(2))).map { _ in LDField.allCases[rng.below(LDField.allCases.count)] }
                var new = old
                for field in fields { field.randomize(&new, &rng) }
                var patch: [String: Any] = [:]
                for field in fields { field.patch(from: new, into: &patch) }
                let result = try tx.update(LDThing.self, key: id, fields: patch)
                if !result.object.same(new) { note("partial update \(fields) of #\(id) stored \(result.object.short), the model expected \(new.short)") }
                if result.changed == old.same(new) { note("partial update \(fields) of #\(id) says changed: \(result.changed), from \(old.short) to \(new.short)") }
                m[id] = new
            case 34..<44:   // several fields
                let fields = (0..<(2 + rng.below(3))).map { _ in LDField.allCases[rng.below(LDField.allCases.count)] }
                var new = old
                for field in fields { field.randomize(&new, &rng) }
                try update(id, fields, to: new)
            case 44..<52:   // only fields the key-path observers do not watch
                let field = LDField.unobserved[rng.below(LDField.unobserved.count)]
                var new = old
                field.randomize(&new, &rng)
                try update(id, [field], to: new)
            case 52..<58:   // identical values
                if rng.below(2) == 0 {
                    try update(id, [LDField.allCases[rng.below(LDField.allCases.count)]], to: old)
                } else {
                    try tx.upsert(old)
                }
            case 58..<64:   // a sort tie or a move: take another object's rank, weight or date
                let other = m[keys[rng.below(keys.count)]]!
                let field = [LDField.rank, .weight, .when, .count][rng.below(4)]
                var new = old
                field.copy(from: other, to: &new)
                try update(id, [field], to: new)
            case 64..<76:   // delete (sometimes a key that is not there)
                if rng.below(8) == 0 {
                    let absent = idSpace + 1 + rng.below(100)
                    if try tx.delete(LDThing.self, key: absent) { note("deleted absent key \(absent)") }
                } else {
                    if try !tx.delete(LDThing.self, key: id) { note("delete of #\(id) found nothing") }
                    m[id] = nil
                }
            case 76..<88:   // upsert: a changed object, or a new one
                let thing = LDThing.random(id: rng.below(3) == 0 ? freshID() : id, &rng)
                try tx.upsert(thing)
                m[thing.id] = thing
            case 88..<92:   // delete(where:)
                let r = rng.below(4), c = rng.below(10)
                let deleted = try tx.delete(LDThing.self, where: #Predicate<LDThing> { $0.rank == r && $0.count == c })
                let gone = m.values.filter { $0.rank == r && $0.count == c }.map(\.id)
                if deleted != gone.count { note("delete(where: rank == \(r) && count == \(c)) deleted \(deleted), the model has \(gone.count)") }
                for key in gone { m[key] = nil }
            case 92..<96:   // a duplicate insert, refused, the transaction goes on
                do {
                    try tx.insert(LDThing.random(id: id, &rng))
                    note("inserting the existing key \(id) did not throw")
                } catch StrataError.duplicateKey {
                }
            default:        // an update whose body changes nothing
                _ = try tx.update(LDThing.self, key: id) { _ in }
            }
        }
        return (m, rng.below(100) < rollbackPercent)
    }

    /// One synchronous transaction (from whatever thread calls it).
    static func syncTransaction(_ db: Database, model: LDModel, seed: UInt64, config: LDConfig, maxOps: Int = 4) {
        do {
            try db.write { tx in
                let start = model.objects.withLock { $0 }
                let (end, rollback) = try run(tx, model: start, seed: seed, objects: config.objects, maxOps: maxOps, rollbackPercent: 5, note: model.problem)
                if rollback { throw LDRollback() }
                model.objects.withLock { $0 = end }
            }
        } catch is LDRollback {
        } catch {
            model.problem("seed \(config.seed): synchronous transaction \(seed) failed: \(error)")
        }
    }
}

final class LDTokens: Sendable {
    let all = Mutex<[NotificationToken]>([])
}

/// Runs `body(i)` on `count` new threads and returns when all have finished.
func ldOnThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) async {
    final class Left: Sendable {
        let value: Atomic<Int>
        init(_ n: Int) { value = Atomic(n) }
    }
    let left = Left(count)
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
        for i in 0..<count {
            let thread = Thread {
                body(i)
                if left.value.subtract(1, ordering: .sequentiallyConsistent).newValue == 0 { done.resume() }
            }
            thread.name = "live-diff-writer-\(i)"
            thread.start()
        }
    }
}

// MARK: The test

/// Checks one `db.observe(LDThing.self, key:)`: every `.changed` names exactly the fields whose
/// stored value differs from the previous delivery (or from the object when observation began),
/// nothing follows `.deleted`, and at checkpoints the latest value is the stored one (or
/// `.deleted` was delivered if the object is gone). `Sendable`: all mutable state is in a Mutex.
final class LDObjectChecker: Sendable {
    struct State {
        var latest: LDThing
        var deleted = false
        var deliveries = 0
        var failures: [String] = []
        var counts: [String: Int] = [:]
    }

    let key: Int
    let seed: UInt64
    private let cap: Int
    private let state: Mutex<State>

    init(key: Int, baseline: LDThing, seed: UInt64, cap: Int) {
        self.key = key
        self.seed = seed
        self.cap = cap
        state = Mutex(State(latest: baseline))
    }

    var deliveries: Int { state.withLock { $0.deliveries } }
    var failures: [String] { state.withLock { $0.failures } }
    var counts: [String: Int] { state.withLock { $0.counts } }
    var label: String { "object observer of #\(key)" }
    var deleted: Bool { state.withLock { $0.deleted } }

    func record(_ kind: String, _ message: String, delivery: Int?) {
        let text = "seed \(seed), \(label)\(delivery.map { ", delivery #\($0)" } ?? ""): \(kind): \(message)"
        state.withLock { s in
            s.counts[kind, default: 0] += 1
            if s.failures.count < cap || s.counts[kind] == 1 { s.failures.append(text) }
        }
    }

    func receive(_ change: ObjectChange<LDThing>) {
        let (n, previous, deleted) = state.withLock { s -> (Int, LDThing, Bool) in
            s.deliveries += 1
            return (s.deliveries, s.latest, s.deleted)
        }
        if deleted { record("delivery after .deleted", "\(change)", delivery: n) }
        switch change {
        case .changed(let object, let fields):
            let expected = previous.changedFields(to: object)
            if object.id != key { record("wrong object", object.short, delivery: n) }
            if fields.isEmpty || Set(fields) != expected || Set(fields).count != fields.count {
                record(".changed does not name exactly the changed fields",
                       "fields \(fields), expected \(expected.sorted()): \(previous.short) → \(object.short)", delivery: n)
            }
            state.withLock { $0.latest = object }
        case .deleted:
            state.withLock { $0.deleted = true }
        case .error(let error):
            record("error delivered", "\(error)", delivery: n)
        }
    }

    /// At a checkpoint: the stored object (nil if there is none).
    func check(stored: LDThing?, label: String) {
        let (latest, deleted) = state.withLock { ($0.latest, $0.deleted) }
        if deleted { return }   // observation ended; the key may have been used again since
        guard let stored else {
            record("deletion not delivered", "\(label): #\(key) is gone, last delivered \(latest.short)", delivery: nil)
            return
        }
        if !latest.same(stored) {
            record("object observer does not converge to the stored object", "\(label): delivered \(latest.short), stored \(stored.short)", delivery: nil)
        }
    }
}

/// The database, its observers and the checkpoints where they must agree with fresh queries.
/// Used only by the test's task.
final class LDRun {
    let db: Database
    let model: LDModel
    private(set) var checkers: [LDChecker]
    private(set) var queues: [DispatchQueue]
    let config: LDConfig
    let snapshots = LDSnapshotObjects()
    var tokens: [NotificationToken] = []
    /// Tokens of observers started on a writer's thread.
    let lateTokens = LDTokens()
    private(set) var objectCheckers: [LDObjectChecker] = []
    /// How many objects are watched one by one at any time.
    let objectsObserved = 12
    private let objectQueue = DispatchQueue(label: "live-diff-object-observers")
    /// Observers that did not converge at some checkpoint: not waited for again (a broken one
    /// would cost a timeout at every checkpoint), only checked once the others have converged.
    var diverged = Set<Int>()
    var checkpoints = 0
    var checkpointTime: Duration = .zero

    init(db: Database, model: LDModel, shapes: [(index: Int, shape: LDShape)], config: LDConfig) {
        self.db = db
        self.model = model
        self.config = config
        let snapshots = self.snapshots
        checkers = shapes.map {
            LDChecker(index: $0.index, shape: $0.shape, seed: config.seed, cap: config.cap, oracleEvery: config.oracleEvery, snapshots: snapshots)
        }
        queues = checkers.map { DispatchQueue(label: "live-diff-observer-\($0.index)") }
    }

    func observe() {
        for (checker, queue) in zip(checkers, queues) { tokens.append(LDRun.start(checker, on: queue, db: db)) }
    }

    /// Observes objects one by one (`db.observe(_:key:)`) from their current value.
    func observeObjects(_ keys: [Int]) throws {
        for key in keys {
            guard let baseline = try db.object(LDThing.self, key: key), !objectCheckers.contains(where: { $0.key == key && !$0.deleted }) else { continue }
            let checker = LDObjectChecker(key: key, baseline: baseline, seed: config.seed, cap: config.cap)
            objectCheckers.append(checker)
            tokens.append(db.observe(LDThing.self, key: key, on: objectQueue) { checker.receive($0) })
        }
        db.observerQueue.sync {}   // each observer has read its object: writes from now on are changes
    }

    static func start(_ checker: LDChecker, on queue: DispatchQueue, db: Database) -> NotificationToken {
        checker.shape.build(db.objects(LDThing.self)).observe(on: queue, keyPaths: checker.shape.keyPaths) { change in checker.receive(change) }
    }

    /// Checkers (and their queues) for observers the caller starts later, with `start`; they are
    /// part of every checkpoint from now on.
    func addLate(_ shapes: [(index: Int, shape: LDShape)]) -> [(LDChecker, DispatchQueue)] {
        let late = shapes.map { (LDChecker(index: $0.index, shape: $0.shape, seed: config.seed, cap: config.cap, oracleEvery: config.oracleEvery,
                                           snapshots: snapshots), DispatchQueue(label: "live-diff-observer-\($0.index)")) }
        checkers += late.map(\.0)
        queues += late.map(\.1)
        return late
    }

    var deliveries: Int { checkers.map(\.deliveries).reduce(0, +) + objectCheckers.map(\.deliveries).reduce(0, +) }

    /// Lets the observer machinery go idle: the hub's pass (after its gather delay), then every
    /// observer's queue, again until a round delivers nothing. A gather thread descheduled longer
    /// than the sleep can make this return early; `checkpoint` then polls.
    func drain() async throws {
        var rounds = 0
        while true {
            let before = deliveries
            try await Task.sleep(for: .milliseconds(3))
            db.observerQueue.sync {}
            for queue in queues { queue.sync {} }
            objectQueue.sync {}
            rounds += 1
            if deliveries == before || rounds >= 100 { return }
        }
    }

    /// Waits until every observer's latest delivery equals a fresh query of its shape.
    ///
    /// With `oracle`, the fresh queries (`db.objects` with the observer's shape) are also checked
    /// against the plain oracle over the dictionary model, and the model against the database.
    /// Without it (after single transactions, where checkpoints are many), an observer that
    /// equals the plain oracle over the model is taken as converged, and `db.objects` only runs
    /// for the others (decoding is what a checkpoint costs in a debug build).
    func checkpoint(_ label: String, oracle: Bool) async throws {
        let began = ContinuousClock.now
        defer {
            checkpoints += 1
            checkpointTime += ContinuousClock.now - began
        }
        try await drain()
        let snapshot = try db.snapshot()
        let models = model.objects.withLock { $0 }.values.sorted { $0.id < $1.id }
        var plain: [[LDThing]?] = []
        for checker in checkers {
            do {
                plain.append(try checker.shape.plain(models))
            } catch {
                checker.record("oracle error", "\(error)", delivery: nil)
                plain.append(nil)
            }
        }
        var freshQueries: [Int: [LDThing]] = [:]
        func fresh(_ i: Int) -> [LDThing] {
            if let done = freshQueries[i] { return done }
            let results = Array(checkers[i].shape.build(snapshot.objects(LDThing.self)))
            freshQueries[i] = results
            return results
        }
        if oracle {
            let stored = Array(snapshot.objects(LDThing.self))
            if !LDThing.same(stored, models) {
                model.problem("seed \(config.seed), \(label): the dictionary model is out of step with the database: "
                              + LDDiff.describe(expected: models, delivered: stored, expectedName: "model", deliveredName: "database"))
            }
            for (i, checker) in checkers.enumerated() {
                if let expected = plain[i], !LDThing.same(expected, fresh(i)) {
                    checker.record("db.objects query differs from the plain-array oracle over the dictionary model",
                                   "\(label), version \(snapshot.version): "
                                   + LDDiff.describe(expected: expected, delivered: fresh(i), expectedName: "plain oracle", deliveredName: "db.objects"),
                                   delivery: nil)
                }
            }
        }
        func converged(_ i: Int) -> Bool {
            let latest = checkers[i].latest
            if !oracle, let expected = plain[i], checkers[i].shape.same(latest, expected) { return true }
            return checkers[i].shape.same(latest, fresh(i))
        }
        var pending = Set(checkers.indices).filter { !converged($0) }
        let start = ContinuousClock.now
        let deadline = start + .seconds(config.timeout)
        while !pending.subtracting(diverged).isEmpty && ContinuousClock.now < deadline {
            // Deliveries stopped a while ago and some observers still differ: they will not
            // converge (nothing is being written).
            let waitingFor = pending.subtracting(diverged)
            if ContinuousClock.now - start > .seconds(2)
                && waitingFor.allSatisfy({ ContinuousClock.now - checkers[$0].lastDelivery > .seconds(2) }) { break }
            try await Task.sleep(for: .milliseconds(10))
            try await drain()
            pending = pending.filter { !converged($0) }
        }
        for i in pending {
            let checker = checkers[i]
            checker.record("observer does not converge to a fresh query at quiescence",
                           "\(label), version \(snapshot.version), latest delivery #\(checker.deliveries): "
                           + LDDiff.describe(expected: fresh(i), delivered: checker.latest, expectedName: "fresh db.objects", deliveredName: "observer",
                                             same: checker.shape.same),
                           delivery: nil)
        }
        diverged.formUnion(pending)
        for checker in objectCheckers { checker.check(stored: try snapshot.object(LDThing.self, key: checker.key), label: label) }
        // Deleted objects end their observers: observe others, so that `objectsObserved` stay watched.
        let watched = objectCheckers.filter { !$0.deleted }.count
        if watched < objectsObserved {
            let free = models.map(\.id).filter { id in !objectCheckers.contains { $0.key == id && !$0.deleted } }
            try observeObjects(Array(free.prefix(objectsObserved - watched)))
        }
    }
}

@Suite struct LiveDifferentialTests {
    @Test func liveResultsAreTheQueryRerunAfterEachCommit() async throws {
        let config = LDConfig.fromEnvironment()
        let seed = config.seed
        let started = ContinuousClock.now
        let path = databasePath()
        let db = try Database(path: path, models: [LDThing.self], options: StoreOptions(durability: .noSync))
        let model = LDModel()
        var rng = SeededRandom(seed: seed)
        let initial = (0..<config.objects).map { LDThing.random(id: $0, &rng) }
        try await db.write { tx in try tx.insert(contentsOf: initial) }
        model.objects.withLock { m in for thing in initial { m[thing.id] = thing } }

        let shapes = LDShape.all().enumerated().map { (index: $0.offset, shape: $0.element) }.filter { config.shapes?.contains($0.index) ?? true }
        let run = LDRun(db: db, model: model, shapes: shapes, config: config)
        run.observe()
        try run.observeObjects(Array(stride(from: 0, to: config.objects, by: max(1, config.objects / run.objectsObserved))))
        final class Counter: Sendable { let commits = Atomic<Int>(0) }
        let counter = Counter()
        let commitToken = db.observeCommits(on: DispatchQueue(label: "live-diff-commits")) { _ in counter.commits.add(1, ordering: .relaxed) }
        let deadline = ContinuousClock.now + .seconds(config.timeout)
        while run.checkers.contains(where: { $0.deliveries == 0 }) && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        for checker in run.checkers where checker.deliveries == 0 {
            checker.record("no .initial", "nothing delivered within \(config.timeout) s", delivery: nil)
        }

        var txn: UInt64 = 0
        func nextSeeds(_ n: Int) -> [UInt64] {
            defer { txn += UInt64(n) }
            return (0..<UInt64(n)).map { seed &* 1_000_003 &+ txn &+ $0 &+ 1 }
        }
        func split(_ total: Int, _ parts: Int) -> [Int] { (0..<parts).map { total / parts + ($0 < total % parts ? 1 : 0) } }
        var phases: [String] = []
        var phaseStart = ContinuousClock.now
        func phaseDone(_ name: String) {
            phases.append("\(name) \((ContinuousClock.now - phaseStart).formatted(.units(allowed: [.seconds], fractionalPart: .show(length: 1))))")
            phaseStart = ContinuousClock.now
        }

        // 1. One thread, synchronous transactions, in bursts the observers merge.
        let burstSizes = split(config.transactions * 40 / 100, 3)
        for (burst, size) in burstSizes.enumerated() {
            let seeds = nextSeeds(size)
            await ldOnThreads(1) { _ in
                for s in seeds { LDWrites.syncTransaction(db, model: model, seed: s, config: config) }
            }
            try await run.checkpoint("after synchronous burst \(burst + 1)", oracle: true)
        }
        phaseDone("bursts")

        // 1b. One single-write transaction at a time, each followed by a checkpoint: change sets
        // of one commit, and commits an observer may judge irrelevant.
        for s in nextSeeds(config.transactions * 5 / 100) {
            LDWrites.syncTransaction(db, model: model, seed: s, config: config, maxOps: 1)
            try await run.checkpoint("after single transaction \(s)", oracle: false)
        }
        try await run.checkpoint("after single transactions", oracle: true)
        phaseDone("single")

        // 2. Two threads at once, the second through another handle of the same file (whose
        // commits the observers of the first must see too).
        let other = try Database(path: path, models: [LDThing.self], options: StoreOptions(durability: .noSync))
        let handles = [db, other]
        // Three observers also start while the first burst runs, from a third thread.
        let late = run.addLate(LDShape.late().enumerated().map { (index: 100 + $0.offset, shape: $0.element) })
        for (burst, size) in split(config.transactions * 25 / 100, 2).enumerated() {
            let seeds = nextSeeds(size)
            let halves = [seeds.enumerated().filter { $0.offset % 2 == 0 }.map(\.element), seeds.enumerated().filter { $0.offset % 2 == 1 }.map(\.element)]
            let starting = burst == 0 ? late : []
            let lateTokens = run.lateTokens
            await ldOnThreads(3) { t in
                if t == 2 {
                    for (i, (checker, queue)) in starting.enumerated() {
                        usleep(UInt32(2_000 + 3_000 * i))
                        let token = LDRun.start(checker, on: queue, db: db)
                        lateTokens.all.withLock { $0.append(token) }
                    }
                    return
                }
                for s in halves[t] { LDWrites.syncTransaction(handles[t], model: model, seed: s, config: config) }
            }
            try await run.checkpoint("after two-thread burst \(burst + 1)", oracle: true)
        }
        phaseDone("two threads")

        // 3. Grouped async writes: many tasks at once, committed together, some thrown away alone.
        let grouped = config.transactions - Int(txn)
        var groupedWrites = 0
        let commitsBefore = counter.commits.load(ordering: .relaxed)
        for (wave, size) in split(grouped, 3).enumerated() {
            let seeds = nextSeeds(size)
            let outcomes = await withTaskGroup(of: (Bool, String?).self) { group -> [(Bool, String?)] in
                for s in seeds {
                    let objects = config.objects
                    group.addTask {
                        do {
                            try await db.write { tx in
                                let start = model.objects.withLock { $0 }
                                let (end, rollback) = try LDWrites.run(tx, model: start, seed: s, objects: objects, rollbackPercent: 15, note: model.problem)
                                if rollback { throw LDRollback() }
                                model.objects.withLock { $0 = end }
                            }
                            return (true, nil)
                        } catch is LDRollback {
                            return (false, nil)
                        } catch {
                            return (false, "grouped write \(s) failed: \(error)")
                        }
                    }
                }
                var all: [(Bool, String?)] = []
                for await outcome in group { all.append(outcome) }
                return all
            }
            groupedWrites += outcomes.filter(\.0).count
            for case (_, let problem?) in outcomes { model.problem("seed \(seed): \(problem)") }
            try await run.checkpoint("after grouped async wave \(wave + 1)", oracle: true)
        }
        let groupedCommits = counter.commits.load(ordering: .relaxed) - commitsBefore
        phaseDone("grouped")

        // Report.
        for problem in model.problems.withLock({ $0 }) { Issue.record("write harness: \(problem)") }
        var summary: [String] = []
        for checker in run.checkers {
            let counts = checker.counts
            if !counts.isEmpty {
                summary.append("  observer \(checker.index) [\(checker.shape.label)]: "
                               + counts.sorted { $0.key < $1.key }.map { "\($0.value)× \($0.key)" }.joined(separator: "; "))
            }
            for failure in checker.failures { Issue.record(Comment(rawValue: failure.message)) }
            let more = counts.values.reduce(0, +) - checker.failures.count
            if more > 0 { Issue.record("seed \(seed), observer \(checker.index) [\(checker.shape.label)]: \(more) more failure(s) not shown") }
        }
        for checker in run.objectCheckers {
            let counts = checker.counts
            if !counts.isEmpty {
                summary.append("  \(checker.label): " + counts.sorted { $0.key < $1.key }.map { "\($0.value)× \($0.key)" }.joined(separator: "; "))
            }
            for failure in checker.failures { Issue.record(Comment(rawValue: failure)) }
        }
        let seconds = { (d: Duration) in d.formatted(.units(allowed: [.seconds], fractionalPart: .show(length: 1))) }
        print("LiveDifferential: seed \(seed), \(txn) transactions, \(config.objects) objects, \(run.checkers.count) observers, "
              + "\(run.objectCheckers.count) object observers (\(run.objectCheckers.map(\.deliveries).reduce(0, +)) deliveries, "
              + "\(run.objectCheckers.filter(\.deleted).count) deleted), \(run.deliveries) deliveries in all, \(groupedWrites) kept grouped writes in \(groupedCommits) commits, "
              + "\(run.checkpoints) checkpoints (\(seconds(run.checkpointTime))); \(phases.joined(separator: ", ")); \(seconds(ContinuousClock.now - started))")
        if !summary.isEmpty { print("LiveDifferential failures by observer (seed \(seed)):\n" + summary.joined(separator: "\n")) }
        run.tokens.forEach { $0.invalidate() }
        run.lateTokens.all.withLock { $0.forEach { $0.invalidate() } }
        commitToken.invalidate()
    }
}

// MARK: Minimal reproductions of what the differential test finds

/// Each mismatch class the differential test found, reduced to a few objects and writes. They
/// state the contract (README "Live results", `Results.sorted`: ties keep primary-key order), so
/// they fail until the bug is fixed.
@Suite struct LiveDifferentialReproductions {
    static func thing(_ id: Int, rank: Int = 0, count: Int = 0) -> LDThing {
        LDThing(id: id, rank: rank, count: count, weight: 0, ratio: 0, name: "", note: "", when: Date(timeIntervalSinceReferenceDate: 0),
                level: nil, kind: .red, tags: [], inner: LDInner(x: 0, label: ""))
    }

    /// What one observer delivered: ids, and the change set of updates.
    struct Seen: Sendable, Equatable {
        var ids: [Int]
        var deletions: [Int] = []
        var insertions: [Int] = []
        var modifications: [Int] = []
    }

    final class Watch: Sendable {
        let inbox = Inbox<Seen>()
        let queue = DispatchQueue(label: "live-diff-repro")
        let token: NotificationToken
        let db: Database

        init(_ results: Results<LDThing>, db: Database, keyPaths: [PartialKeyPath<LDThing> & Sendable]? = nil) {
            self.db = db
            let inbox = self.inbox
            token = results.observe(on: queue, keyPaths: keyPaths) { change in
                switch change {
                case .initial(let r): inbox.append(Seen(ids: r.map(\.id)))
                case .update(let r, let d, let i, let m): inbox.append(Seen(ids: r.map(\.id), deletions: d, insertions: i, modifications: m))
                case .error(let error): Issue.record("\(error)")
                }
            }
        }

        /// Waits until the observers are idle: the hub's gather delay and pass, then this queue.
        func settle() {
            for _ in 0..<3 {
                usleep(20_000)
                db.observerQueue.sync {}
                queue.sync {}
            }
        }

        var all: [Seen] { inbox.all }
    }

    /// Reverse sort by an indexed field with equal values. The query walks the index backwards,
    /// so ties come out in descending key order ([3, 2, 1]) — unlike the same sort with a filter
    /// on an indexed field, sorted in memory ([1, 2, 3]); the observer maintains the results
    /// incrementally assuming ascending ties, misplaces the updated object and keeps its old row:
    /// [3, 2, 1] → [2, 3, 2, 1] → [1, 2, 3, 2, 1].
    @Test func reverseSortOnAnIndexedFieldWithTies() throws {
        let db = try Database.inMemory(models: [LDThing.self])
        try db.write { tx in for id in 1...3 { try tx.insert(Self.thing(id)) } }
        let byRankReverse = db.objects(LDThing.self).sorted(by: SortDescriptor(\.rank, order: .reverse))
        #expect(byRankReverse.map(\.id) == [1, 2, 3], "ties keep primary-key order")
        #expect(byRankReverse.map(\.id) == db.objects(LDThing.self).filter(#Predicate { $0.rank <= 2 })
            .sorted(by: SortDescriptor(\.rank, order: .reverse)).map(\.id), "an indexed filter does not change the order of ties")

        let watch = Watch(byRankReverse, db: db)
        watch.settle()
        try db.write { tx in try tx.update(LDThing.self, key: 2) { $0.count = 1 } }
        watch.settle()
        try db.write { tx in try tx.update(LDThing.self, key: 1) { $0.count = 1 } }
        watch.settle()
        let fresh = db.objects(LDThing.self).sorted(by: SortDescriptor(\.rank, order: .reverse)).map(\.id)
        let seen = watch.all
        #expect(seen.count == 3)
        for delivery in seen { #expect(Set(delivery.ids).count == delivery.ids.count, "no object twice: \(delivery.ids)") }
        #expect(seen.last?.ids == fresh, "the observer ends on the query's results: \(seen.map(\.ids))")
        #expect(seen.dropFirst().allSatisfy { $0.deletions.isEmpty && $0.insertions.isEmpty && $0.modifications.count == 1 },
                "updates that move nothing are one modification each: \(seen)")
        watch.token.invalidate()
    }

    /// A filtered window with an offset. Deleting an object before the window, or updating it out
    /// of the filter, shifts the window, but the observer judges the commit irrelevant (the object
    /// was not in the window and does not match now) and delivers nothing.
    @Test func filteredWindowWithAnOffset() throws {
        let db = try Database.inMemory(models: [LDThing.self])
        try db.write { tx in for id in 0..<10 { try tx.insert(Self.thing(id, rank: 1, count: id)) } }
        let window = db.objects(LDThing.self).filter(#Predicate { $0.rank != 0 }).sorted(by: SortDescriptor(\.count)).offset(2).prefix(3)
        let watch = Watch(window, db: db)
        watch.settle()
        try db.write { tx in try tx.delete(LDThing.self, key: 0) }
        watch.settle()
        #expect(watch.all.last?.ids == [3, 4, 5], "after deleting #0: \(watch.all)")
        try db.write { tx in try tx.update(LDThing.self, key: 1) { $0.rank = 0 } }
        watch.settle()
        #expect(watch.all.last?.ids == [4, 5, 6], "after filtering out #1: \(watch.all)")
        watch.token.invalidate()
    }

    /// `observe(keyPaths: [\.inner.x])`: a commit that changes only `inner.label` is delivered as
    /// a modification (the observer watches the whole top-level field `inner`, by design of
    /// ResultsObserver, but the README promises that changes to other fields deliver nothing).
    @Test func keyPathIntoANestedStruct() throws {
        let db = try Database.inMemory(models: [LDThing.self])
        try db.write { tx in for id in 0..<3 { try tx.insert(Self.thing(id)) } }
        let watch = Watch(db.objects(LDThing.self), db: db, keyPaths: [\.inner.x])
        watch.settle()
        try db.write { tx in try tx.update(LDThing.self, key: 1) { $0.inner.label = "only the label" } }
        watch.settle()
        #expect(watch.all.count == 1, "a change outside inner.x delivers nothing: \(watch.all)")
        try db.write { tx in try tx.update(LDThing.self, key: 1) { $0.inner.x = 5 } }
        watch.settle()
        #expect(watch.all.last == Seen(ids: [0, 1, 2], modifications: [1]))
        watch.token.invalidate()
    }
}
