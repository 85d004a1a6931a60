import Foundation
import StrataStorage
import Testing

@testable import Strata

// Migrations against their documented promises (a review of docs against code, 2026-12-07): a
// field still without a value after the closure throws `typeMismatch` naming the object and the
// field also inside a struct carried over whole, as it does at the top
// level; `progress:` reports the end of a model with no objects.

enum MRV1 {
    struct Home: Codable, Sendable, Equatable { var city: String }
    struct Stop: Codable, Sendable, Equatable { var place: String }
    struct Person: Model, Equatable {
        static let modelName = "MRPerson"
        var id: Int
        var home: Home
        var stops: [Stop]
    }
}

/// Home and Stop each gain a non-optional field.
enum MRV2 {
    struct Home: Codable, Sendable, Equatable {
        var city: String
        var zip: String
    }
    struct Stop: Codable, Sendable, Equatable {
        var place: String
        var minutes: Int
    }
    struct Person: Model, Equatable {
        static let modelName = "MRPerson"
        var id: Int
        var home: Home
        var stops: [Stop]
    }
}

/// Home's city changes type.
enum MRV3 {
    struct Home: Codable, Sendable, Equatable { var city: Int }
    struct Person: Model, Equatable {
        static let modelName = "MRPerson"
        var id: Int
        var home: Home
        var stops: [MRV1.Stop]
    }
}

struct MREmpty: Model {
    var id: Int
    var name: String
}

struct MREmptyV2: Model {
    static let modelName = "MREmpty"
    var id: Int
    var name: String
    var extra: Int?
}

struct MigrationPromiseTests {
    static func fill(_ path: String) throws {
        let db = try Database(path: path, models: [MRV1.Person.self], options: StoreOptions(durability: .noSync))
        try db.write { tx in
            try tx.insert(contentsOf: [
                MRV1.Person(id: 1, home: .init(city: "Oslo"), stops: [.init(place: "a")]), MRV1.Person(id: 2, home: .init(city: "Rome"), stops: []),
            ])
        }
        db.close()
    }

    static func mismatchedField(_ open: () throws -> Void) -> String {
        do {
            try open()
            return "opened"
        } catch StrataError.typeMismatch(let model, let field, _) {
            return "\(model): \(field)"
        } catch {
            return "\(error)"
        }
    }

    @Test func aNestedFieldLeftWithoutAValueIsNamed() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Self.fill(path)
        let options = StoreOptions(durability: .noSync)
        // Nothing set: the first object's nested struct has no zip.
        #expect(
            Self.mismatchedField {
                _ = try Database(path: path, models: [MRV2.Person.self], schemaVersion: 1, options: options) { m in
                    try m.enumerateObjects("MRPerson") { _, _ in }
                }
            } == "MRPerson 1: home.zip")
        // The home given: the stops' elements still lack minutes (an array whose elements changed
        // is a field of a new type, named as a whole).
        let stops = Self.mismatchedField {
            _ = try Database(path: path, models: [MRV2.Person.self], schemaVersion: 1, options: options) { m in
                try m.enumerateObjects("MRPerson") { old, new in
                    var home = old["home"]?.objectValue ?? [:]
                    home["zip"] = .string("z")
                    new["home"] = .object(home)
                }
            }
        }
        #expect(stops == "MRPerson 1: stops")
        // A nested field whose type changed, left as it was.
        #expect(
            Self.mismatchedField {
                _ = try Database(path: path, models: [MRV3.Person.self], schemaVersion: 1, options: options) { m in
                    try m.enumerateObjects("MRPerson") { _, _ in }
                }
            } == "MRPerson 1: home.city")
        // Both given: the migration goes through, and nothing was written by the failed ones.
        let db = try Database(path: path, models: [MRV2.Person.self], schemaVersion: 1, options: options) { m in
            try m.enumerateObjects("MRPerson") { old, new in
                var home = old["home"]?.objectValue ?? [:]
                home["zip"] = .string("z\(old.key.intValue ?? 0)")
                new["home"] = .object(home)
                new["stops"] = .array((old["stops"]?.arrayValue ?? []).map { stop in .object((stop.objectValue ?? [:]).merging(["minutes": .int(5)]) { $1 }) })
            }
        }
        #expect(
            db.objects(MRV2.Person.self).map { $0 } == [
                MRV2.Person(id: 1, home: .init(city: "Oslo", zip: "z1"), stops: [.init(place: "a", minutes: 5)]),
                MRV2.Person(id: 2, home: .init(city: "Rome", zip: "z2"), stops: []),
            ])
    }

    /// "every 1,000 objects and at the end": a model without objects ends at once, (0, 0), which a
    /// progress bar waiting for done == total needs.
    @Test func progressReportsTheEndOfAnEmptyModel() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [MREmpty.self], options: StoreOptions(durability: .noSync))
            db.close()
        }
        var calls: [[Int]] = []
        _ = try Database(path: path, models: [MREmptyV2.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { m in
            try m.enumerateObjects("MREmpty", progress: { calls.append([$0, $1]) }) { _, _ in }
        }
        #expect(calls == [[0, 0]])
    }
}
