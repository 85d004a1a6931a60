import Testing
import Foundation
@testable import Strata

// Differential test of partial JSON updates: `update(_:key:json:)` and `upsert(_:key:json:)` must
// store exactly what `JSONDecoder` decodes from the stored object's JSON with the patch applied as
// an RFC 7396 merge patch (nested structs merge, `null` removes; arrays and dictionaries are
// replaced whole, as documented), and must throw exactly when `JSONDecoder` does (a missing
// required field, a value of the wrong type or out of range, an invalid enum case).
//
// The JSON documents are built here as trees and printed with `JSONEncoder` for every scalar, so
// the oracle is Foundation's decoding; the merge is the RFC's few lines.
//
//   STRATA_PATCH_CASES  number of random patches (default 1500)
//   STRATA_PATCH_SEED   seed (default below); every failure message names it

enum PDLevel: String, Codable, Sendable, CaseIterable { case low, mid, high }

struct PDGeo: Codable, Sendable, Equatable {
    var lat: Double
    var lon: Double
    var label: String?
}

struct PDAddress: Codable, Sendable, Equatable {
    var street: String
    var zip: Int?
    var geo: PDGeo?
}

struct PDThing: Model, Equatable {
    var id: String
    var count: Int
    var small: Int8
    var big: UInt64?
    var ratio: Double
    var weight: Float?
    var flag: Bool
    var name: String
    var note: String?
    var level: PDLevel
    var seen: Date
    var tags: [String]
    var scores: [String: Int]?
    var home: PDAddress
    var work: PDAddress?
    var roomId: String
    /// Double optionals: JSON has no `.some(nil)`, so `null` (and a missing key) is `.none`.
    var rank: Int??
    var alias: String??

    enum CodingKeys: String, CodingKey {
        case id, count, small, big, ratio, weight, flag, name, note, level, seen, tags, scores, home, work, rank, alias
        case roomId = "rid"
    }
}

/// A JSON document as a tree: what the patch and the oracle's input are built from.
indirect enum PDJSON: Equatable {
    case null
    case scalar(String)  // the JSON text of a number, string or boolean
    case array([PDJSON])
    case object([(String, PDJSON)])

    static func == (a: PDJSON, b: PDJSON) -> Bool { a.text == b.text }

    var text: String {
        switch self {
        case .null: return "null"
        case .scalar(let s): return s
        case .array(let items): return "[" + items.map(\.text).joined(separator: ",") + "]"
        case .object(let members):
            return "{" + members.map { PDJSON.quote($0.0) + ":" + $0.1.text }.joined(separator: ",") + "}"
        }
    }

    static func quote(_ s: String) -> String { encoded(s).text }

    /// A scalar's JSON text, as JSONEncoder writes it.
    static func encoded<T: Encodable>(_ value: T) -> PDJSON {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        guard let data = try? encoder.encode(value) else { return .null }
        return .scalar(String(decoding: data, as: UTF8.self))
    }

    subscript(member: String) -> PDJSON? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.0 == member }?.1
    }

    /// RFC 7396: an object patch merges into an object (or into {} when the target is not one),
    /// `null` removes the member, anything else replaces it. `whole` names members replaced
    /// whole even when the patch is an object (dictionary-valued fields).
    func merged(with patch: PDJSON, whole: Set<String> = [], path: String = "") -> PDJSON {
        guard case .object(let patchMembers) = patch else { return patch }
        var members: [(String, PDJSON)]
        if case .object(let existing) = self { members = existing } else { members = [] }
        for (name, value) in patchMembers {
            let dotted = path.isEmpty ? name : path + "." + name
            let index = members.firstIndex { $0.0 == name }
            if value == .null {
                if let index { members.remove(at: index) }
                continue
            }
            let current = index.map { members[$0].1 } ?? .null
            let next = whole.contains(dotted) ? value : current.merged(with: value, whole: whole, path: dotted)
            if let index { members[index].1 = next } else { members.append((name, next)) }
        }
        return .object(members)
    }
}

struct PDWorld {
    var rng: SeededRandom
    init(seed: UInt64) { rng = SeededRandom(seed: seed) }

    mutating func chance(_ percent: Int) -> Bool { rng.below(100) < percent }
    mutating func pick<T>(_ values: [T]) -> T { values[rng.below(values.count)] }

    static let strings = ["", "a", "Ana", "é", "e\u{301}", "😀", "line\nbreak", "quote\"and\\slash", "/path", "\u{0}nul"]
    static let ints: [Int] = [0, 1, -1, 42, Int.max, Int.min, 1 << 53, -(1 << 53) - 1]
    static let doubles: [Double] = [0, -0.0, 0.1, 1.5, -2.25, 1e-300, 1.7976931348623157e308, .leastNonzeroMagnitude, 123456789.125]
    static let floats: [Float] = [0, 0.5, -1.25, 3.0e38, 1024]
    static let dates: [Double] = [0, 1_714_566_600, 1_714_566_600.25, -86_400.5, 978_307_200]

    mutating func geo() -> PDGeo { PDGeo(lat: pick(Self.doubles), lon: pick(Self.doubles), label: chance(50) ? pick(Self.strings) : nil) }
    mutating func address() -> PDAddress { PDAddress(street: pick(Self.strings), zip: chance(60) ? pick(Self.ints) : nil, geo: chance(60) ? geo() : nil) }

    mutating func thing(id: String) -> PDThing {
        PDThing(
            id: id, count: pick(Self.ints), small: Int8(truncatingIfNeeded: rng.next()), big: chance(50) ? rng.next() : nil,
            ratio: pick(Self.doubles), weight: chance(50) ? pick(Self.floats) : nil, flag: chance(50), name: pick(Self.strings),
            note: chance(50) ? pick(Self.strings) : nil, level: pick(PDLevel.allCases),
            seen: Date(timeIntervalSince1970: pick(Self.dates)), tags: (0..<rng.below(3)).map { _ in pick(Self.strings) },
            scores: chance(50) ? Dictionary(uniqueKeysWithValues: (0..<rng.below(3)).map { ("k\($0)", pick(Self.ints)) }) : nil,
            home: address(), work: chance(50) ? address() : nil, roomId: pick(Self.strings),
            // (Spelled out: `c ? x : nil` is an `Int?`, and its nil would become `.some(nil)`.)
            rank: chance(50) ? .some(.some(pick(Self.ints))) : .none, alias: chance(50) ? .some(.some(pick(Self.strings))) : .none)
    }

    // MARK: JSON of values, as the model's Codable conformance writes them (dates in seconds since 1970)

    static func json(_ geo: PDGeo) -> PDJSON {
        var members: [(String, PDJSON)] = [("lat", .encoded(geo.lat)), ("lon", .encoded(geo.lon))]
        if let label = geo.label { members.append(("label", .encoded(label))) }
        return .object(members)
    }

    static func json(_ address: PDAddress) -> PDJSON {
        var members: [(String, PDJSON)] = [("street", .encoded(address.street))]
        if let zip = address.zip { members.append(("zip", .encoded(zip))) }
        if let geo = address.geo { members.append(("geo", json(geo))) }
        return .object(members)
    }

    static func json(_ t: PDThing) -> PDJSON {
        var members: [(String, PDJSON)] = [
            ("id", .encoded(t.id)), ("count", .encoded(t.count)), ("small", .encoded(t.small)), ("ratio", .encoded(t.ratio)),
            ("flag", .encoded(t.flag)), ("name", .encoded(t.name)), ("level", .encoded(t.level.rawValue)),
            ("seen", .encoded(t.seen.timeIntervalSince1970)), ("tags", .array(t.tags.map { .encoded($0) })),
            ("home", json(t.home)), ("rid", .encoded(t.roomId)),
        ]
        if let big = t.big { members.append(("big", .encoded(big))) }
        if let weight = t.weight { members.append(("weight", .encoded(weight))) }
        if let note = t.note { members.append(("note", .encoded(note))) }
        if let scores = t.scores { members.append(("scores", .object(scores.sorted { $0.key < $1.key }.map { ($0.key, .encoded($0.value)) }))) }
        if let work = t.work { members.append(("work", json(work))) }
        if case .some(.some(let rank)) = t.rank { members.append(("rank", .encoded(rank))) }
        if case .some(.some(let alias)) = t.alias { members.append(("alias", .encoded(alias))) }
        return .object(members)
    }

    // MARK: Patches

    /// A value for a field: usually of its type, sometimes null, sometimes of a wrong type or out of range.
    mutating func value(for field: String) -> PDJSON {
        if chance(8) { return .null }
        if chance(5) {
            return pick([.scalar("\"text\""), .scalar("true"), .scalar("1.5"), .array([]), .object([]), .scalar("-129"), .scalar("18446744073709551616")])
        }
        // Number spellings with rules of their own: integral fractions and exponents are integers
        // (exactly, above 2^53 too), integers beyond 64 bits fit no integer field (below Int64.min
        // a Double would round to it), 1e400 is out of range, 1e-50 is too small for a Float.
        // Left out, where Strata and JSONDecoder differ: "9223372036854775807.0" (2^63 - 1 as a
        // fraction), which JSONDecoder rejects for an Int yet reads exactly for a UInt64, where
        // Strata reads it exactly for both; "-0.0e3", which JSONDecoder rejects for a Double
        // though it reads "-0.0"; and a number that underflows a Double (1e-400), which
        // JSONDecoder reads as 0 for an integer field but rejects for a Double field, where Strata
        // reads 0 too.
        if chance(5) {
            return pick(
                [
                    "1e2", "100.0", "-0.0", "-0", "1E+2", "2.0", "1e400", "0.5e1", "1e-50", "0e-400", "9007199254740993.0",
                    "-9223372036854775809", "18446744073709551616", "125e-1", "0.05e2", "12.50e1", "-128.0", "255e0",
                ].map(PDJSON.scalar))
        }
        switch field {
        case "count": return .encoded(pick(Self.ints))
        case "small": return chance(85) ? .encoded(Int8(truncatingIfNeeded: rng.next())) : .encoded(pick([128, -129, 1000]))
        case "big": return chance(85) ? .encoded(rng.next()) : .encoded(-1)
        case "ratio": return .encoded(pick(Self.doubles))
        case "weight":
            // Decimal spellings a Float rounds: near its limits, between two Floats, past 2^24.
            if chance(30) { return .scalar(pick(["0.1", "16777217", "3.4028235e38", "3.4028236e38", "1.4e-45", "7e-46", "0.3333333333333333", "1e-45"])) }
            return .encoded(pick(Self.floats))
        case "flag": return .encoded(chance(50))
        case "name", "note", "rid", "alias": return .encoded(pick(Self.strings))
        case "rank": return .encoded(pick(Self.ints))
        case "level": return chance(85) ? .encoded(pick(PDLevel.allCases).rawValue) : .encoded("LOW")
        case "seen": return .encoded(pick(Self.dates))
        case "tags": return .array((0..<rng.below(3)).map { _ in chance(95) ? .encoded(pick(Self.strings)) : .null })
        case "scores": return .object((0..<rng.below(3)).map { n in ("k\(n)", chance(95) ? .encoded(pick(Self.ints)) : .null) })
        case "home", "work": return addressPatch()
        default: return .null
        }
    }

    mutating func addressPatch() -> PDJSON {
        var members: [(String, PDJSON)] = []
        if chance(50) { members.append(("street", chance(90) ? .encoded(pick(Self.strings)) : .null)) }
        if chance(40) { members.append(("zip", chance(80) ? .encoded(pick(Self.ints)) : .null)) }
        if chance(40) {
            var geo: [(String, PDJSON)] = []
            if chance(60) { geo.append(("lat", .encoded(pick(Self.doubles)))) }
            if chance(60) { geo.append(("lon", .encoded(pick(Self.doubles)))) }
            if chance(40) { geo.append(("label", chance(70) ? .encoded(pick(Self.strings)) : .null)) }
            members.append(("geo", chance(85) ? .object(geo) : .null))
        }
        return .object(members)
    }

    static let fields = [
        "count", "small", "big", "ratio", "weight", "flag", "name", "note", "level", "seen", "tags", "scores", "home", "work", "rid", "rank", "alias",
    ]

    mutating func patch(id: String) -> PDJSON {
        var members: [(String, PDJSON)] = []
        var used: Set<String> = []
        for _ in 0..<(1 + rng.below(4)) {
            let field = pick(Self.fields)
            guard used.insert(field).inserted else { continue }
            members.append((field, value(for: field)))
        }
        if chance(10) { members.append(("id", .encoded(id))) }
        if chance(10) { members.append(("unknownField", .encoded(1))) }
        return .object(members)
    }
}

struct PartialUpdateDifferentialTests {
    static var seed: UInt64 { ProcessInfo.processInfo.environment["STRATA_PATCH_SEED"].flatMap { UInt64($0) } ?? 20_261_201 }
    static var cases: Int { ProcessInfo.processInfo.environment["STRATA_PATCH_CASES"].flatMap { Int($0) } ?? 1500 }

    /// What JSONDecoder makes of a document, or nil when it throws.
    static func decode(_ document: PDJSON) -> PDThing? {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return try? decoder.decode(PDThing.self, from: Data(document.text.utf8))
    }

    @Test func partialUpdatesAreMergePatchesDecodedByJSONDecoder() throws {
        let seed = Self.seed
        var world = PDWorld(seed: seed)
        let db = try Database.inMemory(models: [PDThing.self])
        var model: [String: PDThing] = [:]
        for n in 0..<20 {
            let thing = world.thing(id: "t\(n)")
            model[thing.id] = thing
        }
        try db.write { tx in try tx.insert(contentsOf: Array(model.values)) }
        let options = PartialUpdateOptions(unknownFields: .ignore, dateFormat: .secondsSince1970)
        var failures = 0
        var outcomes: [String: Int] = [:]
        for number in 0..<Self.cases {
            let id = "t\(world.rng.below(24))"  // t20...t23 are missing: update throws notFound, upsert may create
            let upsert = world.chance(30)
            let before = model[id]
            var patch = world.patch(id: id)
            if upsert && before == nil && world.chance(60) {
                // A whole object, as a server sends a new one, with the random patch on top.
                patch = PDWorld.json(world.thing(id: id)).merged(with: patch, whole: ["scores"])
            }
            let base: PDJSON = before.map(PDWorld.json) ?? .object([("id", .encoded(id))])
            let expected = before == nil && !upsert ? nil : Self.decode(base.merged(with: patch, whole: ["scores"]))
            let context = "seed \(seed) case \(number): \(upsert ? "upsert" : "update") \(id) \(patch.text)"
            do {
                let result = try db.write { tx in
                    upsert
                        ? try tx.upsert(PDThing.self, key: id, json: Data(patch.text.utf8), options: options)
                        : try tx.update(PDThing.self, key: id, json: Data(patch.text.utf8), options: options)
                }
                outcomes[result.created ? "created" : result.changed ? "changed" : "unchanged", default: 0] += 1
                guard let expected else {
                    failures += 1
                    Issue.record("\(context): Strata stored \(result.object) where JSONDecoder throws")
                    continue
                }
                let stored = try db.object(PDThing.self, key: id)
                // `==` cannot see every change a write makes (-0.0 == 0.0, and String's == is canonical
                // equivalence: "é" == "e\u{301}"): the JSON texts' bytes, which keep both, decide whether
                // anything changed, and must agree too.
                func bytes(_ thing: PDThing?) -> [UInt8]? { thing.map { Array(PDWorld.json($0).text.utf8) } }
                let sameText = before != nil && bytes(before) == bytes(expected)
                if result.object != expected || stored != expected || bytes(stored) != bytes(expected)
                    || result.created != (before == nil) || result.changed != !sameText
                {
                    failures += 1
                    Issue.record(
                        "\(context):\n  expected \(expected)\n  result   \(result.object) created \(result.created) changed \(result.changed)\n  stored   \(String(describing: stored))\n  before   \(before.map { PDWorld.json($0).text } ?? "none")"
                    )
                }
                model[id] = expected
            } catch {
                outcomes["threw", default: 0] += 1
                if let expected {
                    failures += 1
                    Issue.record("\(context): Strata threw \(error) where JSONDecoder gives \(expected)")
                }
                #expect(try db.object(PDThing.self, key: id) == before, "\(context): a failed update changed the object")
            }
            if failures >= 20 { break }
        }
        print("PartialUpdateDifferential seed \(seed): \(Self.cases) patches, \(failures) failing; \(outcomes.sorted { $0.key < $1.key })")
        #expect(try db.objects(PDThing.self).fetch().sorted { $0.id < $1.id } == model.values.sorted { $0.id < $1.id }, "seed \(seed): the stored objects")
        // The generator reaches every outcome.
        for outcome in ["created", "changed", "unchanged", "threw"] { #expect(outcomes[outcome, default: 0] > 0, "seed \(seed): no \(outcome) case") }
    }
}

extension PartialUpdateDifferentialTests {
    /// JSON's "-0" is negative zero to a Double field, as JSONDecoder reads it (found by the test
    /// above: it was read as the integer 0), and 0 to an integer field.
    @Test func minusZeroKeepsItsSign() throws {
        let db = try Database.inMemory(models: [PDThing.self])
        var world = PDWorld(seed: 9)
        try db.write { tx in try tx.insert(world.thing(id: "z")) }
        let result = try db.write { tx in try tx.update(PDThing.self, key: "z", json: Data(#"{"ratio": -0, "count": -0}"#.utf8)) }
        #expect(result.object.ratio.sign == .minus && result.object.ratio == 0)
        #expect(result.object.count == 0)
        let decoded = try JSONDecoder().decode([String: Double].self, from: Data(#"{"ratio": -0}"#.utf8))
        #expect(decoded["ratio"]?.sign == .minus)
    }
}

extension PDWorld {
    static let clearable = ["note", "big", "weight", "scores", "work", "home.zip", "home.geo", "home.geo.label", "work.zip", "work.geo", "work.geo.label"]

    /// A change message as a server sends it (JSON text), and the merge patch it stands for
    /// (nil for `removed`): `fields`, with each `cleared` path as a nested null.
    mutating func changeMessage(id: String, exists: Bool) -> (text: String, kind: String, patch: PDJSON?) {
        let roll = rng.below(100)
        let kind = roll < 15 ? "removed" : roll < 35 ? "added" : "changed"
        if kind == "removed" {
            return (#"{"msg":"removed","collection":"PDThing","id":\#(PDJSON.quote(id))}"#, kind, nil)
        }
        var fields = patch(id: id)
        if kind == "added" && (!exists || chance(50)) {
            fields = PDWorld.json(thing(id: id)).merged(with: fields, whole: ["scores"])
        }
        // Cleared paths outside the fields given (a path inside a field set to a non-object is an error of its own).
        let given = Set(Self.members(fields).map(\.0))
        // A path inside another cleared one (`work` and `work.zip`, in either order), or named
        // twice, is part of it: the merge patch has the outer null alone.
        let cleared = (0..<rng.below(4)).map({ _ in pick(Self.clearable) }).filter { !given.contains(String($0.split(separator: ".")[0])) }
        var patch = fields
        for path in Set(cleared) where !cleared.contains(where: { path.hasPrefix($0 + ".") }) {
            patch = Self.settingNull(in: patch, at: path.split(separator: ".").map(String.init)[...])
        }
        let clearedText = "[" + cleared.map { PDJSON.quote($0) }.joined(separator: ",") + "]"
        let text = #"{"msg":"\#(kind)","collection":"PDThing","id":\#(PDJSON.quote(id)),"fields":\#(fields.text),"cleared":\#(clearedText)}"#
        return (text, kind, patch)
    }

    static func members(_ json: PDJSON) -> [(String, PDJSON)] {
        if case .object(let members) = json { return members }
        return []
    }

    /// `json` (an object) with a null at the dotted path, through nested objects made as needed.
    static func settingNull(in json: PDJSON, at parts: ArraySlice<String>) -> PDJSON {
        guard let first = parts.first else { return json }
        var members = members(json)
        let index = members.firstIndex { $0.0 == first }
        let value = parts.count == 1 ? PDJSON.null : settingNull(in: index.map { members[$0].1 } ?? .object([]), at: parts.dropFirst())
        if let index { members[index].1 = value } else { members.append((first, value)) }
        return .object(members)
    }
}

extension PartialUpdateDifferentialTests {
    /// Batches of change messages (`added`, `changed` with `cleared` paths, `removed`) through
    /// `ChangeMessage.decode` and `db.apply`: each message is its merge patch decoded by
    /// JSONDecoder, and a batch with one failing message changes nothing.
    @Test func changeMessageBatchesAreMergePatchesToo() throws {
        let seed = Self.seed
        var world = PDWorld(seed: seed &+ 1)
        let db = try Database.inMemory(models: [PDThing.self])
        var model: [String: PDThing] = [:]
        for n in 0..<12 { model["t\(n)"] = world.thing(id: "t\(n)") }
        try db.write { tx in try tx.insert(contentsOf: Array(model.values)) }
        let options = PartialUpdateOptions(unknownFields: .ignore, dateFormat: .secondsSince1970)
        var failures = 0
        var outcomes: [String: Int] = [:]
        for number in 0..<(Self.cases / 2) {
            var next = model
            var texts: [String] = []
            var ok = true
            for _ in 0..<(1 + world.rng.below(3)) {
                let id = "t\(world.rng.below(15))"
                let message = world.changeMessage(id: id, exists: next[id] != nil)
                texts.append(message.text)
                guard let patch = message.patch else {
                    next[id] = nil
                    continue
                }
                if message.kind == "changed" && next[id] == nil { ok = false; continue }
                let base = next[id].map(PDWorld.json) ?? .object([("id", .encoded(id))])
                guard let decoded = Self.decode(base.merged(with: patch, whole: ["scores"])) else { ok = false; continue }
                next[id] = decoded
            }
            let batch = "[" + texts.joined(separator: ",") + "]"
            let context = "seed \(seed) batch \(number): \(batch)"
            do {
                let summary = try db.apply(try ChangeMessage.decode(json: Data(batch.utf8)), options: options)
                outcomes["applied", default: 0] += 1
                outcomes["added", default: 0] += summary.added
                outcomes["removed", default: 0] += summary.removed
                if !ok {
                    failures += 1
                    Issue.record("\(context): applied (\(summary)) where JSONDecoder fails on a message")
                }
            } catch {
                outcomes["threw", default: 0] += 1
                if ok {
                    failures += 1
                    Issue.record("\(context): threw \(error) where every message decodes")
                }
            }
            if ok { model = next }
            let stored = try db.objects(PDThing.self).fetch()
            let expected = model.values.sorted { $0.id < $1.id }
            if stored.map({ Array(PDWorld.json($0).text.utf8) }) != expected.map({ Array(PDWorld.json($0).text.utf8) }) {
                failures += 1
                Issue.record("\(context):\n  expected \(expected.map { PDWorld.json($0).text })\n  stored   \(stored.map { PDWorld.json($0).text })")
                model = Dictionary(uniqueKeysWithValues: stored.map { ($0.id, $0) })
            }
            if failures >= 20 { break }
        }
        print("ChangeMessageDifferential seed \(seed): \(Self.cases / 2) batches, \(failures) failing; \(outcomes.sorted { $0.key < $1.key })")
        for outcome in ["applied", "added", "removed", "threw"] { #expect(outcomes[outcome, default: 0] > 0, "seed \(seed): no \(outcome) case") }
    }
}

extension PartialUpdateDifferentialTests {
    /// `update(_:key:fields:)` with what JSONSerialization makes of a patch stores what the JSON
    /// path stores (which the test above holds to JSONDecoder), and throws when it throws.
    /// Patches with a `-0` are left out: JSONSerialization itself reads it as the integer 0; and
    /// those with `9007199254740993.0` or `-9223372036854775809`, which it rounds to a `Double`
    /// (…992, and `Int64.min`), where JSON text is read exactly, as JSONDecoder reads it.
    @Test func dictionaryUpdatesMatchJSONUpdates() throws {
        let seed = Self.seed
        var world = PDWorld(seed: seed &+ 2)
        let viaJSON = try Database.inMemory(models: [PDThing.self])
        let viaDictionary = try Database.inMemory(models: [PDThing.self])
        let initial = (0..<16).map { world.thing(id: "t\($0)") }
        for db in [viaJSON, viaDictionary] { try db.write { tx in try tx.insert(contentsOf: initial) } }
        let options = PartialUpdateOptions(unknownFields: .ignore, dateFormat: .secondsSince1970)
        var failures = 0
        var compared = 0
        for number in 0..<Self.cases {
            let id = "t\(world.rng.below(18))"
            let upsert = world.chance(30)
            let text = world.patch(id: id).text
            guard text.range(of: #"[:\[,]-0(?![0-9.eE])"#, options: .regularExpression) == nil,
                !["9007199254740993.0", "-9223372036854775809"].contains(where: text.contains),
                let fields = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
            else { continue }
            compared += 1
            let byJSON = Result {
                try viaJSON.write { tx in
                    upsert
                        ? try tx.upsert(PDThing.self, key: id, json: Data(text.utf8), options: options).object
                        : try tx.update(PDThing.self, key: id, json: Data(text.utf8), options: options).object
                }
            }
            let byDictionary = Result {
                try viaDictionary.write { tx in
                    upsert
                        ? try tx.upsert(PDThing.self, key: id, fields: fields, options: options).object
                        : try tx.update(PDThing.self, key: id, fields: fields, options: options).object
                }
            }
            let a = try viaJSON.object(PDThing.self, key: id).map { Array(PDWorld.json($0).text.utf8) }
            let b = try viaDictionary.object(PDThing.self, key: id).map { Array(PDWorld.json($0).text.utf8) }
            let jsonThrew = (try? byJSON.get()) == nil
            let dictionaryThrew = (try? byDictionary.get()) == nil
            if a != b || jsonThrew != dictionaryThrew {
                failures += 1
                Issue.record("seed \(seed) case \(number): \(upsert ? "upsert" : "update") \(id) \(text)\n  JSON       \(byJSON)\n  dictionary \(byDictionary)")
                if failures >= 20 { break }
            }
        }
        print("DictionaryUpdateDifferential seed \(seed): \(compared) patches compared, \(failures) failing")
        #expect(compared > Self.cases / 2, "seed \(seed): only \(compared) patches compared")
    }
}
