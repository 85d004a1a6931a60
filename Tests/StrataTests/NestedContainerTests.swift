import Foundation
import Testing

@testable import Strata

// Hand-written Codable that groups flat properties under nested keys with
// `nestedContainer(keyedBy:forKey:)`, as server payloads often do: `{"geo": {"lat", "lon"}}`.
// The record stores such a container as a nested struct would be stored, so queries, indexes,
// sorts and partial JSON updates reach its fields. References: Foundation's `Predicate.evaluate`,
// `SortDescriptor.compare`, `JSONEncoder`/`JSONDecoder`.

struct NCPlace: Model, Equatable {
    static let indexes: [PartialKeyPath<NCPlace> & Sendable] = [\.width, \.kind]
    var id: Int
    var title: String
    /// Under "geo" (absent when either is nil).
    var lat: Double?
    var lon: Double?
    /// Under "meta" → "size".
    var width: Int
    var height: Int
    /// Under "meta".
    var kind: String

    enum CodingKeys: String, CodingKey { case id, title, geo, meta }
    enum GeoKeys: String, CodingKey { case lat, lon }
    enum MetaKeys: String, CodingKey { case size, kind = "k" }
    enum SizeKeys: String, CodingKey { case w, h }

    init(id: Int, title: String, lat: Double?, lon: Double?, width: Int, height: Int, kind: String) {
        self.id = id
        self.title = title
        self.lat = lat
        self.lon = lon
        self.width = width
        self.height = height
        self.kind = kind
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(Int.self, forKey: .id)
        title = try container.decode(String.self, forKey: .title)
        if container.contains(.geo) {
            let geo = try container.nestedContainer(keyedBy: GeoKeys.self, forKey: .geo)
            lat = try geo.decode(Double.self, forKey: .lat)
            lon = try geo.decode(Double.self, forKey: .lon)
        } else {
            lat = nil
            lon = nil
        }
        let meta = try container.nestedContainer(keyedBy: MetaKeys.self, forKey: .meta)
        kind = try meta.decode(String.self, forKey: .kind)
        let size = try meta.nestedContainer(keyedBy: SizeKeys.self, forKey: .size)
        width = try size.decode(Int.self, forKey: .w)
        height = try size.decode(Int.self, forKey: .h)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(title, forKey: .title)
        if let lat, let lon {
            var geo = container.nestedContainer(keyedBy: GeoKeys.self, forKey: .geo)
            try geo.encode(lat, forKey: .lat)
            try geo.encode(lon, forKey: .lon)
        }
        var meta = container.nestedContainer(keyedBy: MetaKeys.self, forKey: .meta)
        // The nested-nested container first, then its parent's own field: any order works.
        var size = meta.nestedContainer(keyedBy: SizeKeys.self, forKey: .size)
        try size.encode(width, forKey: .w)
        try size.encode(height, forKey: .h)
        try meta.encode(kind, forKey: .kind)
    }
}

/// Reads one key as a value and as a nested container: no schema fits both.
struct NCConflicting: Model {
    var id: Int
    var value: Int
    enum CodingKeys: String, CodingKey { case id, box }
    enum BoxKeys: String, CodingKey { case v }
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(Int.self, forKey: .id)
        _ = try container.decode(Int.self, forKey: .box)
        value = try container.nestedContainer(keyedBy: BoxKeys.self, forKey: .box).decode(Int.self, forKey: .v)
    }
    func encode(to encoder: any Encoder) throws {}
}

@Suite struct NestedContainerTests {
    static let seed: UInt64 = 20_261_203

    static func place(_ id: Int, _ rng: inout SeededRandom) -> NCPlace {
        let located = rng.below(3) != 0
        let values: [Double] = [-1.5, 0, 2, 3.25, .greatestFiniteMagnitude, -.infinity]
        return NCPlace(
            id: id, title: ["", "a", "Ä", "e\u{301}", "zebra"][rng.below(5)],
            lat: located ? values[rng.below(values.count)] : nil, lon: located ? Double(rng.below(5)) : nil,
            width: [Int.min, -1, 0, 7, 42, Int.max][rng.below(6)], height: rng.below(4), kind: ["x", "y", "Y", ""][rng.below(4)])
    }

    static let predicates: [(String, Predicate<NCPlace>)] = [
        ("width > 0", #Predicate { $0.width > 0 }),
        ("width < -1", #Predicate { $0.width < -1 }),
        ("kind == y", #Predicate { $0.kind == "y" }),
        ("kind == y && width >= 7", #Predicate { $0.kind == "y" && $0.width >= 7 }),
        ("lat == nil", #Predicate { $0.lat == nil }),
        ("lat != nil && lat! > 0", #Predicate { $0.lat != nil && $0.lat! > 0 }),
        ("(lat ?? 9) < 1", #Predicate { ($0.lat ?? 9) < 1 }),
        ("height == 2 || kind == empty", #Predicate { $0.height == 2 || $0.kind == "" }),
    ]

    static let sorts: [(String, [SortDescriptor<NCPlace>])] = [
        ("width", [SortDescriptor(\.width)]),
        ("width reverse, id", [SortDescriptor(\.width, order: .reverse), SortDescriptor(\.id)]),
        ("kind, height reverse", [SortDescriptor(\.kind), SortDescriptor(\.height, order: .reverse)]),
        ("lat", [SortDescriptor(\.lat)]),
    ]

    /// Every query form against Foundation's evaluation of the same objects, then again after
    /// updates, deletes and a reopen.
    @Test func queriesIndexesAndSortsMatchFoundation() throws {
        let path = databasePath("NestedContainerTests-queries")
        defer { try? FileManager.default.removeItem(atPath: path) }
        var rng = SeededRandom(seed: Self.seed)
        var model: [Int: NCPlace] = [:]
        var db = try Database(path: path, models: [NCPlace.self])
        try db.write { tx in
            for id in 0..<150 {
                let place = Self.place(id, &rng)
                model[id] = place
                try tx.insert(place)
            }
        }
        func check(_ stage: String) throws {
            let all = model.values.sorted { $0.id < $1.id }
            #expect(try db.objects(NCPlace.self).fetch() == all, "seed \(Self.seed) \(stage): objects")
            for (name, predicate) in Self.predicates {
                let expected = try all.filter { try predicate.evaluate($0) }
                let got = try db.objects(NCPlace.self).filter(predicate).fetch()
                #expect(got == expected, "seed \(Self.seed) \(stage): \(name)")
                #expect(db.objects(NCPlace.self).filter(predicate).count == expected.count, "seed \(Self.seed) \(stage): count \(name)")
                for (sortName, descriptors) in Self.sorts {
                    let sorted = expected.sorted { a, b in
                        for d in descriptors {
                            let order = d.compare(a, b)
                            if order != .orderedSame { return order == .orderedAscending }
                        }
                        return false
                    }
                    let gotSorted = try db.objects(NCPlace.self).filter(predicate).sorted(by: descriptors).fetch()
                    #expect(gotSorted.map(\.id) == sorted.map(\.id), "seed \(Self.seed) \(stage): \(name) sorted by \(sortName)")
                }
            }
        }
        try check("after insert")
        // The indexes serve the nested fields.
        #expect(db.objects(NCPlace.self).filter(#Predicate { $0.width == 42 }).explain().contains("index"))
        try db.write { tx in
            for id in stride(from: 0, to: 150, by: 4) {
                try tx.update(NCPlace.self, key: id) { place in
                    place.width = 7
                    place.lat = place.lat == nil ? 1.5 : nil
                    place.lon = place.lat == nil ? nil : 2
                }
                if var place = model[id] {
                    place.width = 7
                    place.lat = place.lat == nil ? 1.5 : nil
                    place.lon = place.lat == nil ? nil : 2
                    model[id] = place
                }
            }
            for id in stride(from: 1, to: 150, by: 5) {
                #expect(try tx.delete(NCPlace.self, key: id))
                model[id] = nil
            }
        }
        try check("after updates and deletes")
        db.close()
        db = try Database(path: path, models: [NCPlace.self])
        defer { db.close() }
        try check("after reopen")
    }

    /// Partial JSON updates see the nested keys JSONEncoder writes: a patch of one nested field
    /// gives what JSONDecoder decodes from the merged document.
    @Test func partialJSONUpdatesReachNestedFields() throws {
        let db = try Database.inMemory(models: [NCPlace.self])
        let start = NCPlace(id: 1, title: "t", lat: 1, lon: 2, width: 3, height: 4, kind: "x")
        try db.write { tx in
            let created = try tx.upsert(NCPlace.self, key: 1, json: try JSONEncoder().encode(start))
            #expect(created.created && created.object == start)
        }
        let patch = #"{"meta": {"size": {"w": 70}}, "geo": {"lat": -8.5}}"#
        var document = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(start)) as? [String: Any])
        func merge(_ base: [String: Any], _ patch: [String: Any]) -> [String: Any] {
            var out = base
            for (key, value) in patch {
                if let inner = value as? [String: Any], let existing = out[key] as? [String: Any] {
                    out[key] = merge(existing, inner)
                } else {
                    out[key] = value
                }
            }
            return out
        }
        document = merge(document, try #require(try JSONSerialization.jsonObject(with: Data(patch.utf8)) as? [String: Any]))
        let expected = try JSONDecoder().decode(NCPlace.self, from: JSONSerialization.data(withJSONObject: document))
        let result = try db.write { tx in try tx.update(NCPlace.self, key: 1, json: Data(patch.utf8)) }
        #expect(result.object == expected)
        #expect(try db.object(NCPlace.self, key: 1) == expected)
    }

    /// A container the type reads only when `contains` says it is there is optional: an object
    /// without it takes updates of its other fields (a required field would be reported missing).
    @Test func aContainerReadWhenPresentIsOptional() throws {
        let db = try Database.inMemory(models: [NCPlace.self])
        try db.write { tx in try tx.insert(NCPlace(id: 1, title: "t", lat: nil, lon: nil, width: 1, height: 2, kind: "k")) }
        let updated = try db.write { tx in try tx.update(NCPlace.self, key: 1, json: Data(#"{"title": "u"}"#.utf8)) }
        #expect(updated.object == NCPlace(id: 1, title: "u", lat: nil, lon: nil, width: 1, height: 2, kind: "k"))
        let schema = try #require(try StoredObjects.schemas(in: db.store).first { $0.name == "NCPlace" })
        #expect(schema.object.field(named: "geo")?.type.isOptional == true)
    }

    @Test func aKeyReadAsValueAndContainerIsRefused() {
        do {
            _ = try Database.inMemory(models: [NCConflicting.self])
            Issue.record("accepted")
        } catch StrataError.unsupportedType(let model, let field, let reason) {
            #expect(model == "NCConflicting" && field == "box")
            #expect(reason.contains("read both as a value and as a nested container"), "\(reason)")
        } catch {
            Issue.record("\(error)")
        }
    }
}
