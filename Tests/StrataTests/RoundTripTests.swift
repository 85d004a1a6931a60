import Testing
import Foundation
@testable import Strata

// Random objects of models with renamed keys, nested structs, optionals, collections and every
// kind of key, written and read back every way there is: typed, untyped (what dumps and
// migrations see), as dumped JSON decoded by Foundation's JSONDecoder, and across a migration that
// changes a field's type. Sizes: STRATA_ROUNDTRIP_OBJECTS (default 150 per key type), seed
// STRATA_ROUNDTRIP_SEED.

struct RTInner: Codable, Sendable, Equatable {
    var label: String
    var weight: Double?
    var when: Date
    enum CodingKeys: String, CodingKey { case label = "l", weight = "w", when }
}

struct RTModel<K: Codable & Sendable & Hashable>: Model, Equatable {
    static var indexes: [PartialKeyPath<RTModel<K>> & Sendable] { [\.count, \.inner.label, \.tags] }
    var id: K
    var title: String
    var count: Int
    var small: Int8
    var big: UInt64
    var ratio: Float
    var flag: Bool
    var note: String?
    var tags: [String]
    var numbers: Set<Int>
    var scores: [String: Double]
    var inner: RTInner
    var maybe: RTInner?
    var uuid: UUID
    var blob: Data
    var amount: Decimal
    var site: URL
    var colour: Colour
    var link: Ref<RTModel<K>>?
    var links: [Ref<RTModel<K>>]
    enum CodingKeys: String, CodingKey {
        case id = "_id", title = "t", count = "n", small, big = "B", ratio, flag = "f", note, tags = "tg", numbers, scores = "sc"
        case inner = "in", maybe, uuid, blob, amount, site, colour = "c", link = "ln", links
    }
}

/// The same model after a migration turned `count` into a String.
struct RTModelV2<K: Codable & Sendable & Hashable>: Model, Equatable {
    static var modelName: String { RTModel<K>.modelName }
    var id: K
    var title: String
    var count: String
    var inner: RTInner
    var links: [Ref<RTModelV2<K>>]
    enum CodingKeys: String, CodingKey { case id = "_id", title = "t", count = "n", inner = "in", links }
}

struct RoundTripTests {
    static let objects = ProcessInfo.processInfo.environment["STRATA_ROUNDTRIP_OBJECTS"].flatMap(Int.init) ?? 150
    static let seed = ProcessInfo.processInfo.environment["STRATA_ROUNDTRIP_SEED"].flatMap(UInt64.init) ?? 20261130

    /// Reads JSON as Strata writes it: exact ISO 8601 dates, non-finite numbers as text.
    static func jsonDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = ISO8601.parse(text) else { throw DecodingError.dataCorruptedError(in: container, debugDescription: text) }
            return date
        }
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
        return decoder
    }

    static func string(_ rng: inout SeededRandom) -> String {
        let pool = ["", "a", "Ana", "é", "e\u{301}", "日本", "👩‍👩‍👧", "a\"b\\c", "line\nbreak", "\u{0}", "tab\t", "\u{1F}"]
        return (0..<rng.below(3)).map { _ in pool[rng.below(pool.count)] }.joined()
    }

    static func date(_ rng: inout SeededRandom) -> Date {
        let t = (Double(rng.below(2_000_000)) - 1_000_000) * 997.13 + Double(rng.below(1_000_000)) / 999_983
        return Date(timeIntervalSinceReferenceDate: t)
    }

    static func inner(_ rng: inout SeededRandom) -> RTInner {
        RTInner(label: string(&rng), weight: rng.below(3) == 0 ? nil : Double(rng.below(1_000_000)) / 7 - 50_000, when: date(&rng))
    }

    static func make<K>(_ keys: [K], _ i: Int, _ rng: inout SeededRandom) -> RTModel<K> {
        RTModel(
            id: keys[i], title: string(&rng), count: [Int.min, -1, 0, 1, Int.max, rng.below(1000)][rng.below(6)],
            small: [Int8.min, 0, Int8.max][rng.below(3)], big: [0, UInt64.max, UInt64(rng.below(1 << 30))][rng.below(3)],
            ratio: Float(rng.below(10_000)) / 64 - 50, flag: rng.below(2) == 0, note: rng.below(2) == 0 ? nil : string(&rng),
            tags: (0..<rng.below(4)).map { _ in string(&rng) }, numbers: Set((0..<rng.below(4)).map { _ in rng.below(100) - 50 }),
            scores: Dictionary((0..<rng.below(3)).map { ("k\($0)" + string(&rng), Double(rng.below(100)) / 8) }, uniquingKeysWith: { a, _ in a }),
            inner: inner(&rng), maybe: rng.below(2) == 0 ? nil : inner(&rng),
            uuid: UUID(), blob: Data((0..<rng.below(6)).map { _ in UInt8(rng.below(256)) }),
            amount: Decimal(string: "\(rng.below(1_000_000) - 500_000).\(rng.below(1000))") ?? 0,
            site: URL(string: "https://example.com/\(rng.below(100))?q=\(rng.below(9))") ?? URL(fileURLWithPath: "/"),
            colour: [Colour.red, .green, .blue][rng.below(3)],
            link: rng.below(3) == 0 ? nil : Ref(keys[rng.below(keys.count)]),
            links: (0..<rng.below(3)).map { _ in Ref(keys[rng.below(keys.count)]) })
    }

    func run<K: Codable & Sendable & Hashable>(_ keys: [K]) throws {
        var rng = SeededRandom(seed: Self.seed &+ UInt64(keys.count))
        let name = RTModel<K>.modelName
        let path = databasePath("roundtrip")
        let objects = keys.indices.map { Self.make(keys, $0, &rng) }
        do {
            let db = try Database(path: path, models: [RTModel<K>.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try tx.insert(contentsOf: objects) }
            for object in objects {
                #expect(try db.object(RTModel<K>.self, key: object.id) == object, "seed \(Self.seed) \(K.self) \(object.id): typed")
            }
            let count = objects[0].count
            #expect(db.objects(RTModel<K>.self).filter(#Predicate { $0.count == count }).count == objects.filter { $0.count == count }.count)
        }
        // Untyped, as migrations and dumps read them, then through Foundation's JSONDecoder.
        var seen = 0
        let decoder = Self.jsonDecoder()
        try StoredObjects.forEach(in: try Store(path: path), model: name) { key, fields in
            seen += 1
            let json = StoredValue.object(fields).json
            let decoded = try decoder.decode(RTModel<K>.self, from: Data(json.utf8))
            let keyed = try decoder.decode(K.self, from: Data(key.json.utf8))
            let original = objects.first { $0.id == keyed }
            #expect(original == decoded, "seed \(Self.seed) \(K.self): untyped \(json)")
            #expect(decoded.id == keyed, "seed \(Self.seed) \(K.self): key \(key.json)")
            return true
        }
        #expect(seen == objects.count)
        // The dump tool prints the same JSON.
        if let tool = toolExecutable() {
            let (status, output) = try runTool(tool, ["dump", path, "--json", "--model", name])
            #expect(status == 0, "\(output)")
            var dumped = 0
            for line in output.split(separator: "\n") {
                guard let row = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                    let object = row["object"]
                else { continue }
                let data = try JSONSerialization.data(withJSONObject: object, options: [.fragmentsAllowed])
                let decoded = try decoder.decode(RTModel<K>.self, from: data)
                #expect(objects.contains(decoded), "seed \(Self.seed) \(K.self): dumped \(line)")
                dumped += 1
            }
            #expect(dumped == objects.count, "\(output.prefix(500))")
        } else {
            Issue.record("the strata executable was not found next to the test bundle")
        }
        // Across a migration that changes `count` from Int to String.
        let migrated = try Database(path: path, models: [RTModelV2<K>.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { migration in
            try migration.enumerateObjects(name) { old, new in
                guard let n = old["n"]?.intValue else { throw StrataError.invalidInput("no count") }
                new["n"] = .string("#\(n)")
            }
        }
        for object in objects {
            let v2 = try migrated.object(RTModelV2<K>.self, key: object.id)
            #expect(
                v2
                    == RTModelV2(
                        id: object.id, title: object.title, count: "#\(object.count)", inner: object.inner,
                        links: object.links.map { Ref($0.id) }), "seed \(Self.seed) \(K.self): migrated")
        }
    }

    @Test func randomObjectsRoundTripEveryWay() throws {
        let n = Self.objects
        try run((0..<n).map { $0 * 7919 - n * 4000 })
        try run((0..<n).map { "key-\($0)" + (["", "é", "/x", "👩‍👩‍👧"][$0 % 4]) })
        try run((0..<n).map { _ in UUID() })
        try run((0..<min(n, 250)).map { UInt8($0) })
        try run((0..<n).map { Date(timeIntervalSinceReferenceDate: Double($0) * 1234.5678 - 1e9) })
    }
}
