// Model exactness. Each test compares Strata with Foundation's own meaning:
// the value written (and JSONEncoder→JSONDecoder), `Predicate.evaluate` + `SortDescriptor.compare`,
// and JSONDecoder on the merged document for partial updates.
//
// Found by an independent hunt (2026-12-04), failing before their fixes:
//   aDoubleOptionalInAGenericFieldIsStored, aDoubleOptionalEncodedWithEncodeForKeyIsStored,
//   aFifteenDigitNumberForAFloatFieldIsRoundedOnce, justBelowFloatMaxsBoundaryIsFloatMax,
//   anIndexOnAFloat16FieldOpens, anIndexOnACGFloatFieldOpens, isoTextAtTheEdgesReadsAsJSONDecoderReadsIt
// New ground that was right already: foundationAndStandardTypesRoundTripOrAreRefusedAtOpen,
//   equalityOnAWrapperIsTheWrappersOwnEquality,
//   rangesOnAWrapperFollowTheWrappersOwnOrder, distinctGroupsByTheWrappersOwnEquality,
//   keyPathsIntoFoundationValueTypesAnswerAsEvaluate, keysThatDependOnTheCaseReadBackOrAreRefused,
//   subclassesCodedThroughTheirSuperclassRoundTrip, float16CGFloatAndOrderedEnumsAnswerAsEvaluate,
//   aFloat16OutOfRangeFromJSONIsRefused, float16FieldsWithoutAnIndexQueryAndObserve, aKeyGivenTwiceIsRefusedClearly

import Foundation
import Testing

@testable import Strata

struct MXGen<T: Codable & Sendable & Equatable>: Model, Equatable {
    var id: Int
    var value: T
}

func mxRoundTrip<T: Codable & Sendable & Equatable>(_ values: [T], _ label: String) -> String? {
    do {
        let db = try Database.inMemory(models: [MXGen<T>.self])
        try db.write { tx in
            for (i, v) in values.enumerated() { try tx.insert(MXGen(id: i, value: v)) }
        }
        var problems: [String] = []
        for (i, v) in values.enumerated() {
            let read = try db.object(MXGen<T>.self, key: i)
            if read?.value != v { problems.append("\(label)[\(i)]: wrote \(v) read \(String(describing: read?.value))") }
        }
        let all = try db.objects(MXGen<T>.self).fetch().map(\.value)
        if all != values { problems.append("\(label) fetch: \(all)") }
        return problems.isEmpty ? nil : problems.joined(separator: "\n")
    } catch {
        return "\(label): threw \(error)"
    }
}

@Suite struct ModelExactnessHuntTests {
    /// Foundation and standard library types as a generic model's field: each reads back `==`, or
    /// the type is refused when the model is opened (with `unsupportedType`), never stored wrong.
    @Test func foundationAndStandardTypesRoundTripOrAreRefusedAtOpen() throws {
        var problems: [String] = []
        func ok<T: Codable & Sendable & Equatable>(_ v: [T], _ l: String) { if let p = mxRoundTrip(v, l) { problems.append(p) } }
        func refused<T: Codable & Sendable & Equatable>(_ v: [T], _ l: String) {
            let p = mxRoundTrip(v, l)
            if !(p?.contains("threw unsupported type") ?? false) { problems.append("\(l): not refused at open: \(p ?? "read back")") }
        }
        refused([IndexSet(), IndexSet(integersIn: 3..<9), IndexSet([1, 5, 7, 100])], "IndexSet")
        refused([TimeZone(identifier: "Europe/Lisbon")!, TimeZone(secondsFromGMT: 3600)!], "TimeZone")
        refused([Locale(identifier: "pt_PT"), Locale(identifier: "en_US_POSIX")], "Locale")
        refused([DateComponents(year: 2024, month: 2), DateComponents()], "DateComponents")
        refused([[1: "a", 2: "b"]], "[Int:String]")
        ok([DateInterval(start: Date(timeIntervalSince1970: 5), duration: 7)], "DateInterval")
        ok([1...3, -5...(-5)], "ClosedRange")
        ok([0.5..<1.5], "Range<Double>")
        ok([CGFloat(1.5), CGFloat(-0.0)], "CGFloat")
        ok([CGPoint(x: 1, y: 2)], "CGPoint")
        ok([CGRect(x: 1, y: 2, width: 3, height: 4)], "CGRect")
        ok([Measurement(value: 3, unit: UnitLength.meters)], "Measurement")
        // Float16 does not exist on Intel Macs (macOS and Mac Catalyst on x86_64): the condition FieldNames.token uses.
        #if !((os(macOS) || targetEnvironment(macCatalyst)) && arch(x86_64))
        ok([Float16(1.5), 0, Float16.greatestFiniteMagnitude, Float16(-0.0)], "Float16")
        ok([Optional<Float16>.none, 2.5], "Float16?")
        #endif
        ok([[Int8.min], [Int8.max]], "[Int8]")
        ok([[String: [Int?]](), ["a": [nil, 1], "": []]], "[String:[Int?]]")
        ok([Set([1, 2, 3]), Set<Int>()], "Set<Int>")
        ok([Set([Set([1]), Set([2, 3])])], "Set<Set<Int>>")
        ok([["1": 1]] as [[String: Int]], "[[String:Int]]")
        ok([URL(fileURLWithPath: "/tmp/x/")], "file URL dir")
        ok([Data(), Data(count: 1 << 20)], "Data")
        ok(["a\u{0}b", "\u{301}", "\r\n", "e\u{301}", "\u{0}"], "strings")
        ok([Date.distantPast, Date.distantFuture, Date(timeIntervalSinceReferenceDate: -0.0)], "dates")
        ok([Double.leastNonzeroMagnitude, -0.0, 1], "doubles")
        ok([Decimal(string: "-0")!, Decimal.greatestFiniteMagnitude, Decimal.leastNonzeroMagnitude], "Decimal")
        ok([UUID()], "UUID")
        ok([PersonNameComponents(givenName: "A", familyName: "B")], "PNC")
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
    }
}

// MARK: Single-value wrappers whose == / < are not the stored value's

/// Equal ignoring case (a case-insensitive tag/handle type). Stored as its String.
struct MXLoose: Codable, Sendable, Hashable, Comparable, CustomStringConvertible {
    var raw: String
    init(_ raw: String) { self.raw = raw }
    init(from decoder: any Decoder) throws { raw = try decoder.singleValueContainer().decode(String.self) }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(raw)
    }
    static func == (a: Self, b: Self) -> Bool { a.raw.lowercased() == b.raw.lowercased() }
    func hash(into hasher: inout Hasher) { hasher.combine(raw.lowercased()) }
    static func < (a: Self, b: Self) -> Bool { a.raw.lowercased() < b.raw.lowercased() }
    var description: String { raw }
}

/// An Int wrapper ordered from high to low (a priority: 1 outranks 5). Stored as its Int.
struct MXRank: Codable, Sendable, Hashable, Comparable, CustomStringConvertible {
    var level: Int
    init(_ level: Int) { self.level = level }
    init(from decoder: any Decoder) throws { level = try decoder.singleValueContainer().decode(Int.self) }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(level)
    }
    static func < (a: Self, b: Self) -> Bool { a.level > b.level }
    var description: String { "r\(level)" }
}

struct MXWrapped: Model, Equatable {
    static let indexes: [PartialKeyPath<MXWrapped> & Sendable] = [\.indexedName, \.indexedRank]
    var id: Int
    var name: MXLoose
    var indexedName: MXLoose
    var maybeName: MXLoose?
    var names: [MXLoose]
    var rank: MXRank
    var indexedRank: MXRank
    var maybeRank: MXRank?
}

/// The ids Strata returns for `predicate` (sorted by `sort`, ties by key) vs the ids
/// `predicate.evaluate` and `SortDescriptor.compare` give over `objects`; nil when equal.
func mxQueryMismatch<M: Model>(
    _ db: Database, _ objects: [M], _ predicate: Predicate<M>, sort: [SortDescriptor<M>] = [], _ label: String
) -> String? where M.ID: Comparable {
    do {
        var expected = try objects.filter { try predicate.evaluate($0) }.sorted { $0.id < $1.id }
        if !sort.isEmpty {
            // A stable sort over key order: ties stay in key order.
            expected = expected.enumerated().sorted { a, b in
                for d in sort {
                    let r = d.compare(a.element, b.element)
                    if r != .orderedSame { return r == .orderedAscending }
                }
                return a.offset < b.offset
            }.map(\.element)
        }
        var results = db.objects(M.self).filter(predicate)
        if !sort.isEmpty { results = results.sorted(by: sort) }
        let got = try results.fetch().map(\.id)
        let want = expected.map(\.id)
        if got == want { return nil }
        return "\(label): got \(got) expected \(want)\n  plan: \(results.explain().replacingOccurrences(of: "\n", with: " | "))"
    } catch {
        return "\(label): threw \(error)"
    }
}

extension ModelExactnessHuntTests {
    static func wrappedObjects() -> [MXWrapped] {
        let names = ["ana", "ANA", "Ana", "bob", "BOB", "cy", "Émile", "émile"]
        var rng = SeededRandom(seed: 0xC0FFEE)
        return (0..<40).map { i in
            func n() -> MXLoose { MXLoose(names[rng.below(names.count)]) }
            return MXWrapped(
                id: i, name: n(), indexedName: n(), maybeName: rng.below(3) == 0 ? nil : n(), names: [n(), n()],
                rank: MXRank(rng.below(6)), indexedRank: MXRank(rng.below(6)), maybeRank: rng.below(3) == 0 ? nil : MXRank(rng.below(6)))
        }
    }

    /// `==` on a single-value wrapper means the wrapper's own `==` (here: ignoring case), as
    /// `Predicate.evaluate` says; the stored String's bytes are not the wrapper's equality.
    @Test func equalityOnAWrapperIsTheWrappersOwnEquality() throws {
        let objects = Self.wrappedObjects()
        let db = try Database.inMemory(models: [MXWrapped.self])
        try db.write { tx in try tx.insert(contentsOf: objects) }
        let wanted = MXLoose("ANA")
        let list = [MXLoose("BOB"), MXLoose("Cy")]
        var problems: [String] = []
        func check(_ p: Predicate<MXWrapped>, _ label: String) { if let m = mxQueryMismatch(db, objects, p, label) { problems.append(m) } }
        check(#Predicate { $0.name == wanted }, "name == ANA")
        check(#Predicate { $0.indexedName == wanted }, "indexedName == ANA")
        check(#Predicate { $0.maybeName == wanted }, "maybeName == ANA")
        check(#Predicate { $0.name != wanted }, "name != ANA")
        check(#Predicate { $0.indexedName != wanted }, "indexedName != ANA")
        check(#Predicate { list.contains($0.name) }, "name in [BOB, Cy]")
        check(#Predicate { list.contains($0.indexedName) }, "indexedName in [BOB, Cy]")
        check(#Predicate { $0.names.contains(wanted) }, "names contains ANA")
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
    }

    /// `<` on a wrapper with its own order (higher levels first) means that order in a filter,
    /// as it does in a sort (which CodableHuntTests checks).
    @Test func rangesOnAWrapperFollowTheWrappersOwnOrder() throws {
        let objects = Self.wrappedObjects()
        let db = try Database.inMemory(models: [MXWrapped.self])
        try db.write { tx in try tx.insert(contentsOf: objects) }
        let two = MXRank(2)
        let name = MXLoose("B")
        var problems: [String] = []
        func check(_ p: Predicate<MXWrapped>, _ label: String) { if let m = mxQueryMismatch(db, objects, p, label) { problems.append(m) } }
        check(#Predicate { $0.rank < two }, "rank < r2")
        check(#Predicate { $0.indexedRank < two }, "indexedRank < r2")
        check(#Predicate { $0.indexedRank >= two }, "indexedRank >= r2")
        check(#Predicate { $0.maybeRank != nil && $0.maybeRank! > two }, "maybeRank! > r2")
        check(#Predicate { $0.name < name }, "name < B")
        check(#Predicate { $0.indexedName < name }, "indexedName < B")
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
        // Aggregates order as a sort does: the wrapper's own `<`.
        #expect(db.objects(MXWrapped.self).min(of: \.indexedRank) == objects.map(\.indexedRank).min())
        #expect(db.objects(MXWrapped.self).max(of: \.rank) == objects.map(\.rank).max())
        #expect(db.objects(MXWrapped.self).min(of: \.name) == objects.map(\.name).min())
    }

    /// `distinct(by:)` keeps the first of each group equal by the value's own `==`.
    @Test func distinctGroupsByTheWrappersOwnEquality() throws {
        let objects = Self.wrappedObjects()
        let db = try Database.inMemory(models: [MXWrapped.self])
        try db.write { tx in try tx.insert(contentsOf: objects) }
        let got = try db.objects(MXWrapped.self).distinct(by: \.indexedName).fetch().map(\.id)
        var seen: [MXLoose] = []
        var want: [Int] = []
        for o in objects where !seen.contains(o.indexedName) {
            seen.append(o.indexedName)
            want.append(o.id)
        }
        #expect(got == want)
    }
}

// MARK: Partial updates of Float fields

struct MXFloaty: Model, Equatable {
    var id: Int
    var f: Float
    var fs: [Float]
}

extension ModelExactnessHuntTests {
    /// A JSON number for a `Float` field must read as `JSONDecoder` reads it: rounded once, from
    /// the text. The docs allow rounding through a Double first only for numbers with more than
    /// 15 significant digits; `9.31323185238142e-10` has 15, lies just beside the midpoint of two
    /// Floats, and rounded twice (text → Double → Float) lands on the other Float.
    @Test func aFifteenDigitNumberForAFloatFieldIsRoundedOnce() throws {
        let db = try Database.inMemory(models: [MXFloaty.self])
        try db.write { tx in try tx.insert(MXFloaty(id: 1, f: 0, fs: [])) }
        for text in ["9.31323185238142e-10", "9.31324850572679e-10"] {
            let expected = try JSONDecoder().decode(MXFloaty.self, from: Data(#"{"id": 1, "f": \#(text), "fs": [\#(text)]}"#.utf8))
            let got = try db.write { tx in try tx.update(MXFloaty.self, key: 1, json: Data(#"{"f": \#(text), "fs": [\#(text)]}"#.utf8)).object }
            #expect(got.f.bitPattern == expected.f.bitPattern, "\(text): f \(got.f) expected \(expected.f)")
            #expect(got.fs.map(\.bitPattern) == expected.fs.map(\.bitPattern), "\(text): fs \(got.fs) expected \(expected.fs)")
        }
    }

    /// Float.max's rounding boundary: JSONDecoder reads `3.4028235677973366e38` (17 digits, just
    /// below the boundary) as Float.max; through a Double it becomes the boundary itself, which
    /// rounds to infinity. (More than 15 digits: the docs' "rounded to a Double first" covers
    /// the value, but an out-of-range error where JSONDecoder gives a value is worth noting.)
    @Test func justBelowFloatMaxsBoundaryIsFloatMax() throws {
        let db = try Database.inMemory(models: [MXFloaty.self])
        try db.write { tx in try tx.insert(MXFloaty(id: 1, f: 0, fs: [])) }
        let text = "3.4028235677973366e38"
        let expected = try JSONDecoder().decode(MXFloaty.self, from: Data(#"{"id": 1, "f": \#(text), "fs": []}"#.utf8))
        #expect(expected.f == .greatestFiniteMagnitude)
        let got = Result { try db.write { tx in try tx.update(MXFloaty.self, key: 1, json: Data(#"{"f": \#(text)}"#.utf8)).object.f } }
        #expect((try? got.get()) == expected.f, "\(got)")
    }
}

extension ModelExactnessHuntTests {
    /// ISO 8601 text without a fraction reads as JSONDecoder's `.iso8601` reads it (documented),
    /// at the edges DateTextTests does not generate: days past a month's end, hour 24, leap
    /// seconds, lower-case separators, odd offsets, missing seconds, basic format.
    @Test func isoTextAtTheEdgesReadsAsJSONDecoderReadsIt() throws {
        struct Stamp: Codable { var d: Date }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let texts = [
            "2024-04-31T00:00:00Z", "2024-06-31T12:00:00Z", "2023-02-29T00:00:00Z", "2024-02-30T00:00:00Z", "2024-01-32T00:00:00Z",
            "2024-05-01T24:00:00Z", "2024-05-01T23:60:00Z", "2024-05-01T23:59:60Z", "2016-12-31T23:59:60Z",
            "2024-05-01t12:30:00z", "2024-05-01T12:30:00z", "2024-05-01 12:30:00Z", "2024-05-01T12:30:00+24:00", "2024-05-01T12:30:00+23:59",
            "2024-05-01T12:30:00+99:00", "2024-05-01T12:30:00+01", "2024-05-01T12:30:00+1:00", "2024-05-01T12:30:00-00:00",
            "2024-05-01T12:30Z", "20240501T123000Z", "2024-05-01T12:30:00+01:00:00", "+2024-05-01T12:30:00Z", "-0001-05-01T12:30:00Z",
            "12024-05-01T12:30:00Z", "0000-00-00T00:00:00Z", "2024-00-10T00:00:00Z", "2024-5-1T1:2:3Z", "2024-05-01T12:30:00 Z",
            " 2024-05-01T12:30:00Z", "2024-05-01T12:30:00Z ", "2024-05-01T12:30:00GMT", "2024-05-01T12:30:00UTC", "2024-05-01T12:30:00+0100",
            "2024-05-01T12:30:00.Z", "2024-05-01T12:30:00,5Z", "9999-12-31T23:59:59Z", "2024-W18-3T12:30:00Z", "2024-122T12:30:00Z",
            "２０２４-05-01T12:30:00Z", "2024-05-01T12:30:00+01:30", "2024-05-01T12:30:00−01:00",
        ]
        var problems: [String] = []
        for text in texts {
            let reference = try? decoder.decode(Stamp.self, from: Data("{\"d\":\"\(text)\"}".utf8)).d
            let read = PatchEncoder.parseISO8601(text)
            if read != reference {
                problems.append(
                    "\(text): Strata \(read.map { "\($0.timeIntervalSince1970)" } ?? "nil") JSONDecoder \(reference.map { "\($0.timeIntervalSince1970)" } ?? "nil")"
                )
            }
        }
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
    }
}

// MARK: Key paths into Foundation value types with their own coding

struct MXGeometry: Model, Equatable {
    var id: Int
    var range: ClosedRange<Int>
    var span: Range<Double>
    var point: CGPoint
    var rect: CGRect
    var interval: DateInterval
    var length: Measurement<UnitLength>
    var maybePoint: CGPoint?
}

extension ModelExactnessHuntTests {
    static func geometries() -> [MXGeometry] {
        var rng = SeededRandom(seed: 0x6E0)
        return (0..<30).map { i in
            let lo = rng.below(10) - 5
            let x = Double(rng.below(7)) - 3
            return MXGeometry(
                id: i, range: lo...(lo + rng.below(4)), span: x..<(x + Double(rng.below(3))), point: CGPoint(x: x, y: Double(rng.below(5))),
                rect: CGRect(x: Double(rng.below(4)), y: x, width: Double(rng.below(6)), height: Double(rng.below(3))),
                interval: DateInterval(start: Date(timeIntervalSinceReferenceDate: Double(rng.below(5))), duration: Double(rng.below(5))),
                length: Measurement(value: Double(rng.below(9)), unit: [UnitLength.meters, .feet][rng.below(2)]),
                maybePoint: rng.below(3) == 0 ? nil : CGPoint(x: Double(rng.below(3)), y: 0))
        }
    }

    /// Key paths into ClosedRange, Range, CGPoint, CGRect (coded as unkeyed containers),
    /// DateInterval (with a computed `end`) and Measurement, in filters and sorts, answer as
    /// `Predicate.evaluate` and `SortDescriptor.compare` do.
    @Test func keyPathsIntoFoundationValueTypesAnswerAsEvaluate() throws {
        let objects = Self.geometries()
        let db = try Database.inMemory(models: [MXGeometry.self])
        try db.write { tx in try tx.insert(contentsOf: objects) }
        #expect(try db.objects(MXGeometry.self).fetch() == objects)
        let one = 1
        let oneD = 1.0
        let oneC = CGFloat(1)
        let two = Date(timeIntervalSinceReferenceDate: 2)
        var problems: [String] = []
        func check(_ p: Predicate<MXGeometry>, sort: [SortDescriptor<MXGeometry>] = [], _ label: String) {
            if let m = mxQueryMismatch(db, objects, p, sort: sort, label) { problems.append(m) }
        }
        check(#Predicate { $0.range.lowerBound > one }, "range.lowerBound > 1")
        check(#Predicate { $0.range.upperBound == one }, "range.upperBound == 1")
        check(#Predicate { $0.span.upperBound <= oneD }, "span.upperBound <= 1")
        check(#Predicate { $0.point.x >= oneC }, "point.x >= 1")
        check(#Predicate { $0.point.y == oneC }, "point.y == 1")
        check(#Predicate { $0.rect.origin.x == oneC }, "rect.origin.x == 1")
        check(#Predicate { $0.rect.size.width < oneC }, "rect.size.width < 1")
        check(#Predicate { $0.interval.start < two }, "interval.start < 2")
        check(#Predicate { $0.interval.duration > oneD }, "interval.duration > 1")
        check(#Predicate { $0.interval.end > two }, "interval.end > 2")
        check(#Predicate { $0.length.value > oneD }, "length.value > 1")
        check(#Predicate { $0.maybePoint?.x == oneC }, "maybePoint?.x == 1")
        let all = #Predicate<MXGeometry> { _ in true }
        check(all, sort: [SortDescriptor(\.range.lowerBound)], "sort range.lowerBound")
        check(all, sort: [SortDescriptor(\.range.upperBound, order: .reverse)], "sort range.upperBound desc")
        check(all, sort: [SortDescriptor(\.point.y)], "sort point.y")
        check(all, sort: [SortDescriptor(\.rect.size.height)], "sort rect.size.height")
        check(all, sort: [SortDescriptor(\.interval.end)], "sort interval.end")
        check(all, sort: [SortDescriptor(\.interval.duration)], "sort interval.duration")
        check(all, sort: [SortDescriptor(\.length.value)], "sort length.value")
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
        #expect(db.objects(MXGeometry.self).max(of: \.point.x) == objects.map(\.point.x).max())
        #expect(db.objects(MXGeometry.self).min(of: \.range.upperBound) == objects.map(\.range.upperBound).min())
        #expect(db.objects(MXGeometry.self).sum(of: \.rect.size.width) == objects.map(\.rect.size.width).reduce(0, +))
    }
}

// MARK: Double optionals through a generic field

struct MXPlainDouble: Model, Equatable {
    var id: Int
    var plain: Int??
    enum CodingKeys: String, CodingKey { case id, plain }
    init(id: Int, plain: Int??) {
        self.id = id
        self.plain = plain
    }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        plain = try c.decode(Int??.self, forKey: .plain)
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(plain, forKey: .plain)
    }
}

extension ModelExactnessHuntTests {
    /// `MXGen<Int??>` is a field of type `Int??` coded by the synthesized conformance with
    /// `encode`/`decode` (not `...IfPresent`: the field's type is a generic parameter). The docs:
    /// "a field keeps a nested optional's inner nil". JSON writes `.some(nil)` as null and reads nil.
    @Test func aDoubleOptionalInAGenericFieldIsStored() throws {
        let db = try Database.inMemory(models: [MXGen<Int??>.self])
        try db.write { tx in
            try tx.insert(MXGen<Int??>(id: 1, value: nil))
            try tx.insert(MXGen<Int??>(id: 2, value: .some(3)))
        }
        #expect(try db.object(MXGen<Int??>.self, key: 1)?.value == .none)
        #expect(try db.object(MXGen<Int??>.self, key: 2)?.value == .some(.some(3)))
        let inner = MXGen<Int??>(id: 3, value: .some(nil))
        let json = try JSONDecoder().decode(MXGen<Int??>.self, from: JSONEncoder().encode(inner))
        let outcome = Result { try db.write { tx in try tx.insert(inner) } }
        if case .failure(let error) = outcome { Issue.record("inserting .some(nil) in a field threw: \(error)") }
        let read = try db.object(MXGen<Int??>.self, key: 3)
        #expect(read == inner || read == json, "\(String(describing: read))")
    }

    /// The same through a hand-written coder that uses `encode(_:forKey:)` and
    /// `decode(_:forKey:)` on an `Int??` property (CHDoubleNil's shape, tested there only with nil).
    @Test func aDoubleOptionalEncodedWithEncodeForKeyIsStored() throws {
        let db = try Database.inMemory(models: [MXPlainDouble.self])
        let inner = MXPlainDouble(id: 1, plain: .some(nil))
        let json = try JSONDecoder().decode(MXPlainDouble.self, from: JSONEncoder().encode(inner))
        #expect(json.plain == nil)
        let outcome = Result { try db.write { tx in try tx.insert(inner) } }
        if case .failure(let error) = outcome { Issue.record("inserting .some(nil) in a field threw: \(error)") }
        let read = try db.object(MXPlainDouble.self, key: 1)
        #expect(read == inner || read == json, "\(String(describing: read))")
    }
}

// MARK: Partial updates with a key given twice

struct MXInner: Codable, Sendable, Equatable {
    var a: Int
    var b: Int?
}

struct MXDup: Model, Equatable {
    var id: Int
    var name: String
    var d: [String: Int]
    var inner: MXInner
}

extension ModelExactnessHuntTests {
    /// A JSON object naming a key twice: `JSONDecoder` reads the first value (checked here);
    /// Strata refuses the document with `invalidInput` naming the field and position, a clear
    /// error rather than a silent choice (NOT A BUG; kept as coverage). Documented since in
    /// SyncingFromAServer.md, and checked in PartialUpdateTests.aFieldNamedTwiceIsInvalidInput.
    @Test func aKeyGivenTwiceIsRefusedClearly() throws {
        let doc = #"{"name": "first", "name": "second", "d": {"k": 1, "k": 2}, "inner": {"a": 1}, "inner": {"a": 2, "b": 3}}"#
        let withID = #"{"id": 1, "name": "first", "name": "second", "d": {"k": 1, "k": 2}, "inner": {"a": 1}, "inner": {"a": 2, "b": 3}}"#
        let expected = try JSONDecoder().decode(MXDup.self, from: Data(withID.utf8))
        #expect(expected == MXDup(id: 1, name: "first", d: ["k": 1], inner: MXInner(a: 1, b: nil)))
        let db = try Database.inMemory(models: [MXDup.self])
        #expect(throws: StrataError.self) { try db.write { tx in try tx.upsert(MXDup.self, key: 1, json: Data(doc.utf8)) } }
        try db.write { tx in try tx.upsert(MXDup(id: 2, name: "old", d: [:], inner: MXInner(a: 0, b: 9))) }
        #expect(throws: StrataError.self) { try db.write { tx in try tx.update(MXDup.self, key: 2, json: Data(doc.utf8)) } }
        #expect(try db.object(MXDup.self, key: 2) == MXDup(id: 2, name: "old", d: [:], inner: MXInner(a: 0, b: 9)))
    }
}

// MARK: Hand-written coders: a different set of keys per case, subclasses, Float16

/// A shape coded as `{"kind": "circle", "radius": r}` or `{"kind": "rect", "w": w, "h": h}`.
enum MXShape: Codable, Sendable, Equatable {
    case circle(radius: Double)
    case rect(w: Double, h: Double)
    enum K: String, CodingKey { case kind, radius, w, h }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: K.self)
        switch try c.decode(String.self, forKey: .kind) {
        case "circle": self = .circle(radius: try c.decode(Double.self, forKey: .radius))
        case "rect": self = .rect(w: try c.decode(Double.self, forKey: .w), h: try c.decode(Double.self, forKey: .h))
        case let other: throw DecodingError.dataCorruptedError(forKey: .kind, in: c, debugDescription: "unknown kind \(other)")
        }
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: K.self)
        switch self {
        case .circle(let r):
            try c.encode("circle", forKey: .kind)
            try c.encode(r, forKey: .radius)
        case .rect(let w, let h):
            try c.encode("rect", forKey: .kind)
            try c.encode(w, forKey: .w)
            try c.encode(h, forKey: .h)
        }
    }
}

/// The same, chosen by which key is present.
enum MXShapeByKey: Codable, Sendable, Equatable {
    case circle(radius: Double)
    case rect(w: Double, h: Double)
    enum K: String, CodingKey { case radius, w, h }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: K.self)
        if let r = try c.decodeIfPresent(Double.self, forKey: .radius) {
            self = .circle(radius: r)
        } else {
            self = .rect(w: try c.decode(Double.self, forKey: .w), h: try c.decode(Double.self, forKey: .h))
        }
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: K.self)
        switch self {
        case .circle(let r): try c.encode(r, forKey: .radius)
        case .rect(let w, let h):
            try c.encode(w, forKey: .w)
            try c.encode(h, forKey: .h)
        }
    }
}

struct MXShapes: Model, Equatable {
    var id: Int
    var shape: MXShape
}

struct MXShapesByKey: Model, Equatable {
    var id: Int
    var shape: MXShapeByKey
}

class MXAnimal: Codable, @unchecked Sendable {
    var name: String
    init(name: String) { self.name = name }
}

final class MXDog: MXAnimal, Equatable, @unchecked Sendable {
    var good: Bool
    init(name: String, good: Bool) {
        self.good = good
        super.init(name: name)
    }
    enum K: String, CodingKey { case good }
    required init(from decoder: any Decoder) throws {
        good = try decoder.container(keyedBy: K.self).decode(Bool.self, forKey: .good)
        try super.init(from: decoder)
    }
    override func encode(to encoder: any Encoder) throws {
        try super.encode(to: encoder)
        var c = encoder.container(keyedBy: K.self)
        try c.encode(good, forKey: .good)
    }
    static func == (a: MXDog, b: MXDog) -> Bool { a.name == b.name && a.good == b.good }
}

struct MXKennel: Model, Equatable {
    var id: Int
    var dog: MXDog
    var dogs: [MXDog]
}

enum MXPriority: String, Codable, Sendable, CaseIterable, Comparable {
    case low = "zlow", medium = "amedium", high = "mhigh"
    static func < (a: Self, b: Self) -> Bool { allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)! }
}

// Float16 does not exist on Intel Macs (macOS and Mac Catalyst on x86_64): the condition FieldNames.token uses.
#if !((os(macOS) || targetEnvironment(macCatalyst)) && arch(x86_64))
struct MXHalf: Model, Equatable {
    static let indexes: [PartialKeyPath<MXHalf> & Sendable] = [\.priority]
    var id: Int
    var h: Float16
    var maybe: Float16?
    var cg: CGFloat
    var priority: MXPriority
}
#endif

extension ModelExactnessHuntTests {
    /// A value whose keys depend on its case: either it reads back exactly, or the insert is
    /// refused with `typeMismatch` (documented: "a key written only for some values"). Never a
    /// silent other value.
    @Test func keysThatDependOnTheCaseReadBackOrAreRefused() throws {
        do {
            let db = try Database.inMemory(models: [MXShapes.self])
            for (i, shape) in [MXShape.circle(radius: 2), .rect(w: 3, h: 4)].enumerated() {
                do {
                    try db.write { tx in try tx.insert(MXShapes(id: i, shape: shape)) }
                    let read = try db.object(MXShapes.self, key: i)
                    #expect(read?.shape == shape, "\(shape) read \(String(describing: read))")
                } catch StrataError.typeMismatch {
                    // refused, as documented for a key written only for some values
                }
            }
        } catch StrataError.unsupportedType {
            // refused when the model is opened
        }
        do {
            let db = try Database.inMemory(models: [MXShapesByKey.self])
            for (i, shape) in [MXShapeByKey.circle(radius: 2), .rect(w: 3, h: 4)].enumerated() {
                do {
                    try db.write { tx in try tx.insert(MXShapesByKey(id: i, shape: shape)) }
                    let read = try db.object(MXShapesByKey.self, key: i)
                    #expect(read?.shape == shape, "\(shape) read \(String(describing: read))")
                } catch StrataError.typeMismatch {
                    // refused, as documented for a key written only for some values
                }
            }
        } catch StrataError.unsupportedType {
            // refused when the model is opened
        }
    }

    /// A subclass whose coder calls its superclass's on the same encoder/decoder, as a field and
    /// in an array; filtered through key paths into it. (An index on `\.dog.name` is refused at
    /// open: Swift describes a non-final class's property key path as computed; a clear error.)
    @Test func subclassesCodedThroughTheirSuperclassRoundTrip() throws {
        let db = try Database.inMemory(models: [MXKennel.self])
        let objects = (0..<6).map { i in MXKennel(id: i, dog: MXDog(name: "d\(i % 3)", good: i % 2 == 0), dogs: [MXDog(name: "x", good: false)]) }
        try db.write { tx in try tx.insert(contentsOf: objects) }
        #expect(try db.objects(MXKennel.self).fetch() == objects)
        let name = "d1"
        #expect(mxQueryMismatch(db, objects, #Predicate { $0.dog.name == name }, "dog.name == d1") == nil)
        #expect(mxQueryMismatch(db, objects, #Predicate { $0.dog.good }, "dog.good") == nil)
    }

    // Float16 does not exist on Intel Macs (macOS and Mac Catalyst on x86_64): the condition FieldNames.token uses.
    #if !((os(macOS) || targetEnvironment(macCatalyst)) && arch(x86_64))
    /// Float16 (coded as a Float), CGFloat (as a Double) and a Comparable raw-value enum whose
    /// order is not its raw values' order: indexed, filtered and sorted as Swift does.
    @Test func float16CGFloatAndOrderedEnumsAnswerAsEvaluate() throws {
        var rng = SeededRandom(seed: 0xF16)
        let halves: [Float16] = [0, -0.0, 1.5, -2, .nan, .infinity, -.infinity, .leastNonzeroMagnitude, .greatestFiniteMagnitude, 1.0009765625, 1.001953125]
        let objects = (0..<40).map { i in
            MXHalf(
                id: i, h: halves[rng.below(halves.count)], maybe: rng.below(3) == 0 ? nil : halves[rng.below(halves.count)],
                cg: CGFloat(rng.below(5)) / 4, priority: MXPriority.allCases[rng.below(3)])
        }
        let db = try Database.inMemory(models: [MXHalf.self])
        try db.write { tx in try tx.insert(contentsOf: objects) }
        for (read, object) in zip(try db.objects(MXHalf.self).fetch(), objects) {
            #expect(read.h.bitPattern == object.h.bitPattern || (read.h.isNaN && object.h.isNaN), "\(read.h) vs \(object.h)")
        }
        let one: Float16 = 1.0009765625
        let c = CGFloat(0.5)
        let medium = MXPriority.medium
        var problems: [String] = []
        func check(_ p: Predicate<MXHalf>, sort: [SortDescriptor<MXHalf>] = [], _ label: String) {
            if let m = mxQueryMismatch(db, objects, p, sort: sort, label) { problems.append(m) }
        }
        check(#Predicate { $0.h > one }, "h > 1.00098")
        check(#Predicate { $0.h == one }, "h == 1.00098")
        check(#Predicate { $0.h <= one }, "h <= 1.00098")
        check(#Predicate { $0.maybe == one }, "maybe == 1.00098")
        check(#Predicate { $0.cg >= c }, "cg >= 0.5")
        check(#Predicate { $0.priority < medium }, "priority < medium")
        check(#Predicate { $0.priority >= medium }, "priority >= medium")
        let all = #Predicate<MXHalf> { _ in true }
        check(all, sort: [SortDescriptor(\.h)], "sort h")
        check(all, sort: [SortDescriptor(\.h, order: .reverse)], "sort h desc")
        check(all, sort: [SortDescriptor(\.maybe)], "sort maybe")
        check(all, sort: [SortDescriptor(\.priority)], "sort priority")
        check(all, sort: [SortDescriptor(\.priority, order: .reverse), SortDescriptor(\.cg)], "sort priority desc, cg")
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
        #expect(db.objects(MXHalf.self).min(of: \.priority) == objects.map(\.priority).min())
        #expect(db.objects(MXHalf.self).max(of: \.priority) == objects.map(\.priority).max())
    }

    /// A partial update of a Float16 field (stored as a Float) with a number Float16 cannot hold:
    /// JSONDecoder throws ("does not fit in Float16"); so must the update, leaving the object.
    @Test func aFloat16OutOfRangeFromJSONIsRefused() throws {
        let db = try Database.inMemory(models: [MXHalf.self])
        let object = MXHalf(id: 1, h: 1, maybe: nil, cg: 0, priority: .low)
        try db.write { tx in try tx.insert(object) }
        for text in ["65520", "1e10", "-70000"] {
            let json = #"{"id": 1, "h": \#(text), "cg": 0, "priority": "zlow"}"#
            #expect(throws: (any Error).self, "\(text)") { try JSONDecoder().decode(MXHalf.self, from: Data(json.utf8)) }
            let outcome = Result { try db.write { tx in try tx.update(MXHalf.self, key: 1, json: Data(#"{"h": \#(text)}"#.utf8)).object } }
            if case .success(let stored) = outcome { Issue.record("\(text): stored \(stored.h)") }
            #expect(try db.object(MXHalf.self, key: 1) == object)
        }
        // Within range it rounds as JSONDecoder does.
        for text in ["65519", "1e-8", "3e-8", "0.1"] {
            let json = #"{"id": 1, "h": \#(text), "cg": 0, "priority": "zlow"}"#
            let expected = try JSONDecoder().decode(MXHalf.self, from: Data(json.utf8))
            let got = try db.write { tx in try tx.update(MXHalf.self, key: 1, json: Data(#"{"h": \#(text)}"#.utf8)).object }
            #expect(got.h.bitPattern == expected.h.bitPattern, "\(text): \(got.h) expected \(expected.h)")
        }
    }
    #endif
}

// MARK: Indexes on single-value types the key-path probe cannot mark

// Float16 does not exist on Intel Macs (macOS and Mac Catalyst on x86_64): the condition FieldNames.token uses.
#if !((os(macOS) || targetEnvironment(macCatalyst)) && arch(x86_64))
struct MXHalfIndexed: Model, Equatable {
    static let indexes: [PartialKeyPath<MXHalfIndexed> & Sendable] = [\.h]
    var id: Int
    var h: Float16
}

struct MXHalfPlain: Model, Equatable {
    var id: Int
    var h: Float16
    var other: Int
}

extension ModelExactnessHuntTests {
    /// Float16 codes itself as a single Float, which the docs say is stored as that value and,
    /// like any stored field, may be indexed by key path. Opening refuses the index with a reason
    /// about renamed enum fields, which this model does not have.
    @Test func anIndexOnAFloat16FieldOpens() throws {
        let outcome = Result { try Database.inMemory(models: [MXHalfIndexed.self]) }
        if case .failure(let error) = outcome { Issue.record("\(error)") }
        guard case .success(let db) = outcome else { return }
        let objects = (0..<10).map { MXHalfIndexed(id: $0, h: Float16($0 % 4) / 2) }
        try db.write { tx in try tx.insert(contentsOf: objects) }
        let half: Float16 = 0.5
        #expect(mxQueryMismatch(db, objects, #Predicate { $0.h > half }, sort: [SortDescriptor(\.h)], "h > 0.5") == nil)
    }

    /// Without an index, key paths to a Float16 field still answer (evaluated on objects), and
    /// an observer of the field hears its changes.
    @Test func float16FieldsWithoutAnIndexQueryAndObserve() throws {
        let db = try Database.inMemory(models: [MXHalfPlain.self])
        let objects = (0..<10).map { MXHalfPlain(id: $0, h: Float16($0 % 4) / 2, other: $0) }
        try db.write { tx in try tx.insert(contentsOf: objects) }
        let half: Float16 = 0.5
        #expect(mxQueryMismatch(db, objects, #Predicate { $0.h >= half }, sort: [SortDescriptor(\.h, order: .reverse)], "h >= 0.5") == nil)
        #expect(db.objects(MXHalfPlain.self).max(of: \.h) == objects.map(\.h).max())
    }
}
#endif

struct MXCGIndexed: Model, Equatable {
    static let indexes: [PartialKeyPath<MXCGIndexed> & Sendable] = [\.width]
    var id: Int
    var width: CGFloat
}

extension ModelExactnessHuntTests {
    /// BUG. CGFloat codes itself as a single Double (it round-trips, see `explore`), yet an index
    /// on a CGFloat field is refused at open, with a reason about renamed enum fields.
    @Test func anIndexOnACGFloatFieldOpens() throws {
        let outcome = Result { try Database.inMemory(models: [MXCGIndexed.self]) }
        if case .failure(let error) = outcome { Issue.record("\(error)") }
        guard case .success(let db) = outcome else { return }
        let objects = (0..<10).map { MXCGIndexed(id: $0, width: CGFloat($0 % 4) / 2) }
        try db.write { tx in try tx.insert(contentsOf: objects) }
        let half = CGFloat(0.5)
        #expect(mxQueryMismatch(db, objects, #Predicate { $0.width > half }, sort: [SortDescriptor(\.width)], "width > 0.5") == nil)
    }
}
