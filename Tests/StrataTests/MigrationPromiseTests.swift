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

/// A struct holding a double optional, which gains a field.
enum MRDO1 {
    struct Home: Codable, Sendable, Equatable {
        var zip: Int
        var note: String??
    }
    struct Person: Model, Equatable {
        static let modelName = "MRDOPerson"
        var id: Int
        var home: Home
    }
}

enum MRDO2 {
    struct Home: Codable, Sendable, Equatable {
        var zip: Int
        var note: String??
        var city: String?
    }
    struct Person: Model, Equatable {
        static let modelName = "MRDOPerson"
        var id: Int
        var home: Home
    }
}

struct MROwner: Model {
    static let modelName = "MROwner"
    var id: Int
    var device: Ref<SKDevice>
}

struct MROwnerV2: Model {
    static let modelName = "MROwner"
    var id: Int
    var device: Ref<SKDevice>?
    var note: String?
}

/// SKUUIDKey renamed: the same stored shape.
struct MRDeviceKey: RawRepresentable, Codable, Hashable, Sendable {
    let rawValue: UUID
}

struct MRDevice: Model, Equatable {
    static let modelName = "SKDevice"
    var id: MRDeviceKey
    var name: String
    var seen: Int?
}

struct MROwnerV3: Model {
    static let modelName = "MROwner"
    var id: Int
    var device: Ref<MRDevice>
    var note: String?
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

    /// A struct whose schema changed, or a field made optional, left alone by the migration keeps
    /// its stored bytes: a double optional's inner nil, a reference to a model keyed by a struct.
    @Test func fieldsLeftAloneKeepTheirBytes() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let options = StoreOptions(durability: .noSync)
        let device = SKDevice(id: SKUUIDKey(rawValue: StructKeyToolTests.uuids[1]), name: "d")
        do {
            let db = try Database(path: path, models: [MRDO1.Person.self, SKDevice.self, MROwner.self], options: options)
            try db.write { tx in
                try tx.insert(contentsOf: [
                    MRDO1.Person(id: 1, home: .init(zip: 1, note: .some(nil))), MRDO1.Person(id: 2, home: .init(zip: 2, note: "n")),
                    MRDO1.Person(id: 3, home: .init(zip: 3, note: nil)),
                ])
                try tx.insert(device)
                try tx.insert(MROwner(id: 1, device: Ref(device.id)))
            }
            db.close()
        }
        let db = try Database(path: path, models: [MRDO2.Person.self, SKDevice.self, MROwnerV2.self], schemaVersion: 1, options: options) { m in
            try m.enumerateObjects("MRDOPerson") { _, _ in }
            try m.enumerateObjects("MROwner") { _, _ in }
        }
        let notes = db.objects(MRDO2.Person.self).map(\.home.note)
        #expect(notes.count == 3)
        if case .some(.none) = notes[0] {} else { Issue.record("the inner nil became \(String(describing: notes[0]))") }
        #expect(notes[1] == .some("n"))
        #expect(notes[2] == .none)
        #expect(try db.object(MROwnerV2.self, key: 1)?.device?.id == device.id)
    }

    /// A key type renamed (no change to how keys are stored) does not make a migration rewrite
    /// the model's keys and the references to it as if their type had changed (it threw: a
    /// struct key cannot be given as a value).
    @Test func aRenamedKeyTypeKeepsItsKeys() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let options = StoreOptions(durability: .noSync)
        let device = SKDevice(id: SKUUIDKey(rawValue: StructKeyToolTests.uuids[2]), name: "d")
        do {
            let db = try Database(path: path, models: [SKDevice.self, MROwner.self], options: options)
            try db.write { tx in
                try tx.insert(device)
                try tx.insert(MROwner(id: 1, device: Ref(device.id)))
            }
            db.close()
        }
        let db = try Database(path: path, models: [MRDevice.self, MROwnerV3.self], schemaVersion: 1, options: options) { m in
            try m.enumerateObjects("SKDevice") { _, new in new["seen"] = .int(1) }
            try m.enumerateObjects("MROwner") { _, new in new["note"] = .string("n") }
        }
        let key = MRDeviceKey(rawValue: device.id.rawValue)
        #expect(try db.object(MRDevice.self, key: key) == MRDevice(id: key, name: "d", seen: 1))
        #expect(try db.object(MROwnerV3.self, key: 1)?.device.id == key)
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
