import Testing
import Foundation
@testable import Strata

// String collations (issue 16): sort keys against an independent comparator that implements the
// documented order character by character, and collated sorts (in memory and by walking a
// collated index) against a plain-array oracle through random writes.
//
//   STRATA_COLLATION_SEED    seed (default below); every failure names it
//   STRATA_COLLATION_ROUNDS  rounds of writes then queries (default 4)

struct Contact: Model {
    static let indexDescriptors: [IndexDescriptor<Contact>] = [
        .on(\.name, collation: .caseInsensitive),
        .on(\.group, \.name, collation: .natural),
        .on(\.nick, collation: .caseInsensitive),
        .unique(\.email, collation: .caseInsensitive),
    ]
    var id: Int
    var name: String
    var nick: String?
    var group: Int
    var email: String
}

/// The documented order, written independently of the sort keys: fold, NFC, then compare
/// Unicode scalars one by one, a run of ASCII digits (with `.numeric`) as one number by value,
/// sorting where a digit would.
func oracleCollate(_ a: String, _ b: String, _ options: StringCollation.Options) -> ComparisonResult {
    enum Chunk { case scalar(UInt32), number(String) }
    func chunks(_ s: String) -> [Chunk] {
        var flags: String.CompareOptions = []
        if options.contains(.caseInsensitive) { flags.insert(.caseInsensitive) }
        if options.contains(.diacriticInsensitive) { flags.insert(.diacriticInsensitive) }
        let folded = (flags.isEmpty ? s : s.folding(options: flags, locale: nil)).precomposedStringWithCanonicalMapping
        var out: [Chunk] = []
        var digits = ""
        func flush() {
            if digits.isEmpty { return }
            let significant = String(digits.drop { $0 == "0" })
            out.append(.number(significant.isEmpty ? "0" : significant))
            digits = ""
        }
        for scalar in folded.unicodeScalars {
            if options.contains(.numeric) && scalar.value >= 0x30 && scalar.value <= 0x39 {
                digits.unicodeScalars.append(scalar)
            } else {
                flush()
                out.append(.scalar(scalar.value))
            }
        }
        flush()
        return out
    }
    let x = chunks(a), y = chunks(b)
    for (p, q) in zip(x, y) {
        switch (p, q) {
        case let (.scalar(u), .scalar(v)):
            if u != v { return u < v ? .orderedAscending : .orderedDescending }
        case let (.number(m), .number(n)):
            if m.count != n.count { return m.count < n.count ? .orderedAscending : .orderedDescending }
            if m != n { return m < n ? .orderedAscending : .orderedDescending }
        case let (.number, .scalar(v)):
            return v < 0x30 ? .orderedDescending : .orderedAscending
        case let (.scalar(u), .number):
            return u < 0x30 ? .orderedAscending : .orderedDescending
        }
    }
    if x.count == y.count { return .orderedSame }
    return x.count < y.count ? .orderedAscending : .orderedDescending
}

enum CollationData {
    static let pieces = [
        "a", "A", "b", "B", "\u{E9}", "E\u{301}", "e", "\u{DF}", "ss", "SS", "room", "Room", "9", "10", "09", "007", "0",
        "1.5", "1.10", " ", "-", "\u{1F600}", "\u{FB01}", "fi", "\u{0}", "x", "\u{C4}", "\u{E4}", "Z", "\u{131}", "I", "\u{130}",
    ]
    static let collations: [StringCollation] = [
        .caseInsensitive, .natural, StringCollation([.numeric]), StringCollation([]),
        StringCollation([.diacriticInsensitive]), StringCollation([.caseInsensitive, .numeric]),
    ]

    static func string(_ rng: inout SeededRandom) -> String {
        (0..<rng.below(5)).map { _ in pieces[rng.below(pieces.count)] }.joined()
    }
}

struct CollationTests {
    static var seed: UInt64 { ProcessInfo.processInfo.environment["STRATA_COLLATION_SEED"].flatMap { UInt64($0) } ?? 20_261_201 }
    static var rounds: Int { ProcessInfo.processInfo.environment["STRATA_COLLATION_ROUNDS"].flatMap { Int($0) } ?? 4 }

    @Test func examplesReadAsPeopleExpect() {
        let names = ["room10", "Banana", "room9", "apple", "Room11", "\u{C4}rger", "cherry", "room09"]
        func sorted(_ collation: StringCollation) -> [String] {
            names.sorted { a, b in
                let order = collation.compare(a, b)
                return order == .orderedSame ? a < b : order == .orderedAscending
            }
        }
        #expect(sorted(.caseInsensitive) == ["apple", "Banana", "cherry", "room09", "room10", "Room11", "room9", "\u{C4}rger"])
        #expect(sorted(.natural) == ["apple", "\u{C4}rger", "Banana", "cherry", "room09", "room9", "room10", "Room11"])
        #expect(StringCollation.caseInsensitive.compare("Stra\u{DF}e", "STRASSE") == .orderedSame)
        #expect(StringCollation.natural.compare("x1.5", "x1.10") == .orderedAscending)
        #expect(StringCollation.natural.compare("Jos\u{E9}", "jose") == .orderedSame)
        for collation in CollationData.collations { #expect(StringCollation(name: collation.description) == collation) }
        #expect(StringCollation(name: "caseInsensitive+bogus") == nil)
    }

    /// Sort keys order exactly as the independent comparator, for every option set.
    @Test func sortKeysOrderAsTheDocumentedComparison() {
        var rng = SeededRandom(seed: Self.seed)
        var failures = 0
        for _ in 0..<4000 {
            let a = CollationData.string(&rng), b = CollationData.string(&rng)
            let options = StringCollation.Options(rawValue: rng.below(8))
            let expected = oracleCollate(a, b, options)
            let got = StringCollation(options).compare(a, b)
            if got != expected {
                failures += 1
                if failures < 10 {
                    Issue.record(
                        "seed \(Self.seed): \(genDescribe(a)) vs \(genDescribe(b)) options \(options.rawValue): \(got.rawValue), expected \(expected.rawValue)")
                }
            }
        }
        #expect(failures == 0)
    }

    /// The one-pass encoding of ASCII strings writes exactly the bytes of the general path (the
    /// sort key, escaped): index keys on disk must not depend on which path made them. Every
    /// option set, over ASCII strings heavy in what the pass treats specially (upper case, digit
    /// runs with leading zeros, runs of 255 digits and more, NUL and other control bytes), and
    /// over the collation strings (mostly not ASCII, which take the general path).
    @Test func asciiKeysEncodeAsTheGeneralPath() {
        var rng = SeededRandom(seed: Self.seed ^ 0xA5C11)
        let alphabet = Array("aZ09 \u{0}\u{1}\u{7F}~Az0000123456789".unicodeScalars)
        func asciiString() -> String {
            var text = String.UnicodeScalarView()
            for _ in 0..<rng.below(24) {
                if rng.below(40) == 0 {
                    // A long digit run: its length takes the 0xFF form (with NUL bytes to escape).
                    text.append(contentsOf: String(repeating: "7", count: 250 + rng.below(300)).unicodeScalars)
                } else {
                    text.append(alphabet[rng.below(alphabet.count)])
                }
            }
            return String(text)
        }
        var failures = 0
        for round in 0..<6000 {
            let s = round % 3 == 0 ? CollationData.string(&rng) : asciiString()
            let collation = StringCollation(StringCollation.Options(rawValue: rng.below(8)))
            var general: [UInt8] = [9]
            KeyEncoding.appendBytes(collation.key(s), to: &general)
            var fast: [UInt8] = [9]
            collation.appendEncodedKey(s, to: &fast)
            var fromBytes: [UInt8] = [9]
            Array(s.utf8).withUnsafeBytes { collation.appendEncodedKey(utf8: $0, to: &fromBytes) }
            if fast != general || fromBytes != general {
                failures += 1
                if failures < 10 { Issue.record("seed \(Self.seed): \(genDescribe(s)) in \(collation): \(fast) / \(fromBytes), expected \(general)") }
            }
        }
        #expect(failures == 0)
    }

    /// Collated sorts, with and without an index in the collation, forward and reverse, filtered
    /// and windowed, through random writes: the plain oracle's order, ties by id.
    @Test func collatedSortsMatchTheOracle() throws {
        let seed = Self.seed
        var rng = SeededRandom(seed: seed)
        let db = try Database.inMemory(models: [Contact.self])
        var model: [Int: Contact] = [:]
        var failures = 0
        var walks = 0
        func fail(_ message: String) {
            failures += 1
            if failures <= 20 { Issue.record(Comment(rawValue: "seed \(seed): \(message)")) }
        }
        var nextEmail = 0
        for round in 0..<Self.rounds {
            try db.write { tx in
                for _ in 0..<(round == 0 ? 200 : 60) {
                    let ids = model.keys.sorted()
                    if !ids.isEmpty && rng.below(4) == 0 {
                        let id = ids[rng.below(ids.count)]
                        #expect(try tx.delete(Contact.self, key: id))
                        model[id] = nil
                        continue
                    }
                    let id = !ids.isEmpty && rng.below(3) == 0 ? ids[rng.below(ids.count)] : rng.below(100_000)
                    nextEmail += 1
                    let contact = Contact(
                        id: id, name: CollationData.string(&rng), nick: rng.below(3) == 0 ? nil : CollationData.string(&rng),
                        group: rng.below(3), email: "u\(nextEmail)@x")
                    try tx.upsert(contact)
                    model[id] = contact
                }
            }
            let problems = try StoredObjects.check(in: db.store).problems
            if !problems.isEmpty { fail("round \(round): \(problems)") }
            let all = model.values.sorted { $0.id < $1.id }
            for _ in 0..<80 {
                let collation = CollationData.collations[rng.below(CollationData.collations.count)]
                let reverse = rng.below(2) == 0
                let byNick = rng.below(4) == 0
                let group: Int? = rng.below(3) == 0 ? rng.below(3) : nil
                let offset = rng.below(3) == 0 ? rng.below(40) : 0
                let limit: Int? = rng.below(2) == 0 ? rng.below(30) : nil
                func compare(_ a: Contact, _ b: Contact) -> ComparisonResult {
                    var order: ComparisonResult
                    if byNick {
                        switch (a.nick, b.nick) {
                        case (nil, nil): order = .orderedSame
                        case (nil, _): order = .orderedAscending
                        case (_, nil): order = .orderedDescending
                        case let (x?, y?): order = oracleCollate(x, y, collation.options)
                        }
                    } else {
                        order = oracleCollate(a.name, b.name, collation.options)
                    }
                    if reverse && order != .orderedSame { order = order == .orderedAscending ? .orderedDescending : .orderedAscending }
                    return order
                }
                let expected = Array(
                    all.filter { group == nil || $0.group == group }
                        .sorted { a, b in
                            let order = compare(a, b)
                            return order == .orderedSame ? a.id < b.id : order == .orderedAscending
                        }
                        .map(\.id).dropFirst(offset).prefix(limit ?? Int.max))
                var results = db.objects(Contact.self)
                if let group { results = results.filter(#Predicate { $0.group == group }) }
                results =
                    byNick
                    ? results.sorted(by: SortDescriptor(\.nick, order: reverse ? .reverse : .forward), collation: collation)
                    : results.sorted(by: SortDescriptor(\.name, order: reverse ? .reverse : .forward), collation: collation)
                if offset > 0 { results = results.offset(offset) }
                if let limit { results = results.prefix(limit) }
                let text =
                    "\(byNick ? "nick" : "name") \(collation)\(reverse ? " reverse" : "")\(group.map { " group \($0)" } ?? "") offset \(offset) limit \(limit.map(String.init) ?? "-")"
                let plan = results.explain()
                if plan.hasPrefix("scan index") { walks += 1 }
                // An index in the same collation is walked (with a group filter and a nick sort,
                // the group's index may be the better plan).
                if !(byNick && group != nil) {
                    let indexed = group == nil ? collation == .caseInsensitive : collation == .natural
                    if indexed != plan.hasPrefix("scan index") { fail("\(text): plan \(plan)") }
                }
                if results.keys != expected { fail("\(text): \(results.keys) expected \(expected)\n  plan: \(plan)") }
                if results.map(\.id) != expected { fail("\(text): objects differ from keys") }
                if try results.fetchCount() != expected.count { fail("\(text): count differs") }
                // A plain sort (no collation) is Swift's String order, as before.
                let plain = db.objects(Contact.self).sorted(by: SortDescriptor(\.name, order: reverse ? .reverse : .forward), collation: collation)
                    .sorted(by: SortDescriptor(\.name, order: reverse ? .reverse : .forward))
                if plain.explain().hasPrefix("scan index") { fail("\(text): sorted(by:) after sorted(by:collation:) still walks the collated index") }
            }
        }
        #expect(walks > 0)
        #expect(failures == 0, "seed \(seed): \(failures) failures")
    }

    /// A descriptor that reads a `String` no stored field holds under that path (a reference's
    /// key, `\.owner.id`) was compared by `SortDescriptor` itself, in code-point order, whatever
    /// the collation; it now sorts in the collation, and beside other descriptors.
    @Test func aReferenceKeySortsInTheCollation() throws {
        let db = try Database.inMemory(models: [CollationOwner.self, CollationPet.self])
        let owners = ["b", "B", "a", "\u{C4}rger", "room10", "room9", "Zed", ""]
        try db.write { tx in
            for (i, owner) in owners.enumerated() {
                try tx.insert(CollationPet(id: i, owner: Ref(owner), maybe: i % 3 == 0 ? nil : Ref(owner), rank: i % 2))
            }
        }
        var rng = SeededRandom(seed: Self.seed)
        for collation in CollationData.collations {
            for reverse in [false, true] {
                let order: SortOrder = reverse ? .reverse : .forward
                func expected(_ byRankFirst: Bool, optional: Bool) -> [Int] {
                    let all = try! db.objects(CollationPet.self).fetch()
                    return all.sorted { a, b in
                        if byRankFirst && a.rank != b.rank { return a.rank < b.rank }
                        var o: ComparisonResult
                        if optional {
                            switch (a.maybe?.id, b.maybe?.id) {
                            case (nil, nil): o = .orderedSame
                            case (nil, _): o = .orderedAscending
                            case (_, nil): o = .orderedDescending
                            case let (x?, y?): o = oracleCollate(x, y, collation.options)
                            }
                        } else {
                            o = oracleCollate(a.owner.id, b.owner.id, collation.options)
                        }
                        if o == .orderedSame { return a.id < b.id }
                        return (o == .orderedAscending) != reverse
                    }.map(\.id)
                }
                let text = "seed \(Self.seed) \(collation)\(reverse ? " reverse" : "")"
                let byOwner = db.objects(CollationPet.self).sorted(by: SortDescriptor(\.owner.id, order: order), collation: collation)
                #expect(byOwner.map(\.id) == expected(false, optional: false), "\(text)")
                let byMaybe = db.objects(CollationPet.self).sorted(by: SortDescriptor(\.maybe?.id, order: order), collation: collation)
                #expect(byMaybe.map(\.id) == expected(false, optional: true), "\(text), optional")
                let skip = rng.below(3)
                let mixed = db.objects(CollationPet.self)
                    .sorted(by: [SortDescriptor(\.rank), SortDescriptor(\.owner.id, order: order)], collation: collation)
                    .offset(skip).prefix(5)
                #expect(mixed.map(\.id) == Array(expected(true, optional: false).dropFirst(skip).prefix(5)), "\(text), mixed, offset \(skip)")
            }
        }
    }

    @Test func equalityOnACollatedIndexAndUniquenessInTheCollation() throws {
        let db = try Database.inMemory(models: [Contact.self])
        try db.write { tx in
            try tx.insert(Contact(id: 1, name: "Ana", nick: nil, group: 0, email: "Ana@X"))
            try tx.insert(Contact(id: 2, name: "ANA", nick: nil, group: 1, email: "b@x"))
            try tx.insert(Contact(id: 3, name: "An\u{E1}", nick: nil, group: 0, email: "c@x"))
            #expect(
                throws: StrataError.uniqueViolation(model: "Contact", field: "email", value: "Ana@X (equal under collation caseInsensitive to ana@x)")
            ) {
                try tx.insert(Contact(id: 4, name: "x", nick: nil, group: 0, email: "ana@x"))
            }
            #expect(throws: StrataError.uniqueViolation(model: "Contact", field: "email", value: "Ana@X")) {
                try tx.insert(Contact(id: 4, name: "x", nick: nil, group: 0, email: "Ana@X"))
            }
        }
        // `==` is Swift's: the collated index finds the candidates, the predicate decides.
        let name = "ANA"
        let found = db.objects(Contact.self).filter(#Predicate { $0.name == name })
        #expect(found.keys == [2])
        #expect(found.explain().contains("index i:Contact:name(caseInsensitive)"), "\(found.explain())")
        let inGroup = db.objects(Contact.self).filter(#Predicate { $0.group == 0 && $0.name == "Ana" })
        #expect(inGroup.keys == [1])
    }
}

struct XUniq: Model {
    static let indexDescriptors: [IndexDescriptor<XUniq>] = [.unique(\.b, collation: .natural), .unique(\.nick)]
    var id: Int
    var b: String
    var nick: String? = nil
}

struct CollatedUniqueMessageTests {
    /// The stored value is only equal in the collation: the message names it, not the new one twice.
    @Test func aViolationNamesTheStoredValue() throws {
        let db = try Database.inMemory(models: [XUniq.self])
        try db.write { tx in try tx.insert(XUniq(id: 1, b: "room7")) }
        do {
            try db.write { tx in try tx.insert(XUniq(id: 2, b: "Room007")) }
            Issue.record("the insert succeeded")
        } catch let StrataError.uniqueViolation(model, field, value) {
            #expect(model == "XUniq" && field == "b")
            #expect(value == "room7 (equal under collation natural to Room007)")
            #expect(
                StrataError.uniqueViolation(model: model, field: field, value: value).description
                    == "unique index violation: another XUniq has b = room7 (equal under collation natural to Room007)")
        }
        #expect(try db.objects(XUniq.self).fetch().map(\.b) == ["room7"])
    }

    /// As documented: nil is a value of a unique index, so only one object may have it.
    @Test func aUniqueIndexHoldsOneNil() throws {
        let db = try Database.inMemory(models: [XUniq.self])
        try db.write { tx in try tx.insert(XUniq(id: 1, b: "a")) }
        #expect(throws: StrataError.uniqueViolation(model: "XUniq", field: "nick", value: "nil")) {
            try db.write { tx in try tx.insert(XUniq(id: 2, b: "b")) }
        }
    }
}

struct CollationOwner: Model {
    var id: String
}

struct CollationPet: Model {
    var id: Int
    var owner: Ref<CollationOwner>
    var maybe: Ref<CollationOwner>?
    var rank: Int
}
