import Foundation
import StrataStorage
import Testing

@testable import Strata

// Models keyed by a raw-value struct read without their Swift types (`strata dump` and `check`,
// migrations' old objects): the key holds the raw value, which the struct's Codable form need not
// show (a synthesized keyed `{"rawValue": …}` for a UUID raw value, or "u:" + raw from a custom
// coder).

/// Synthesized Codable: keyed, `{"rawValue": "…"}` (no standard-library default for a UUID raw value).
struct SKUUIDKey: RawRepresentable, Codable, Hashable, Sendable {
    let rawValue: UUID
}

/// Coded as "u:" + raw.
struct SKTextKey: RawRepresentable, Codable, Hashable, Sendable {
    let rawValue: String
    init(rawValue: String) { self.rawValue = rawValue }
    init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        rawValue = text.hasPrefix("u:") ? String(text.dropFirst(2)) : text
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode("u:" + rawValue)
    }
}

/// A UUID raw value coded as its text: the catalog records a String key, the key holds 16 bytes.
struct SKUUIDTextKey: RawRepresentable, Codable, Hashable, Sendable {
    let rawValue: UUID
    init(rawValue: UUID) { self.rawValue = rawValue }
    init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        rawValue = UUID(uuidString: text) ?? UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue.uuidString)
    }
}

struct SKTag: Model, Equatable {
    var id: SKUUIDTextKey
    var label: String
}

struct SKDevice: Model, Equatable {
    var id: SKUUIDKey
    var name: String
}

struct SKUser: Model, Equatable {
    var id: SKTextKey
    var name: String
}

struct SKDeviceV2: Model, Equatable {
    static let modelName = "SKDevice"
    var id: SKUUIDKey
    var name: String
    var seen: Int?
}

struct StructKeyToolTests {
    static let uuids = (0..<3).map { UUID(uuidString: "00000000-0000-0000-0000-00000000000\($0)")! }

    /// A key whose raw value's type differs from the type its Codable form records reads as its
    /// bytes, and the model is dumped, checked and migrated (a 16-byte UUID read as a String key
    /// failed them all).
    @Test func aKeyOfAnotherRawTypeReadsAsItsBytes() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let tags = Self.uuids.enumerated().map { SKTag(id: SKUUIDTextKey(rawValue: $0.element), label: "t\($0.offset)") }
        let db = try Database(path: path, models: [SKTag.self], options: StoreOptions(durability: .noSync))
        try db.write { tx in try tx.insert(contentsOf: tags) }
        var keys: [StoredValue] = []
        var labels: [String] = []
        try StoredObjects.forEach(in: db.store, model: "SKTag") { key, fields in
            keys.append(key)
            labels.append(fields["label"]?.stringValue ?? "?")
            return true
        }
        #expect(labels == ["t0", "t1", "t2"])
        #expect(keys == Self.uuids.map { uuid in .data(withUnsafeBytes(of: uuid.uuid) { Data($0) }) })
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
    }

    /// A struct key `{rawValue: UUID}` is read exactly as its recorded type says: one that does
    /// not read so is damage, which check reports (not read as bytes, as a scalar-coded one is).
    @Test func aDamagedStructKeyIsAProblem() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let device = SKDevice(id: SKUUIDKey(rawValue: Self.uuids[1]), name: "d")
        do {
            let db = try Database(path: path, models: [SKDevice.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in try tx.insert(device) }
            db.close()
        }
        let store = try Store(path: path)
        try store.write { txn in
            let t = try #require(try txn.tree("m:SKDevice"))
            let key = withUnsafeBytes(of: device.id.rawValue.uuid) { Array($0) }
            try t.put(Array(key.prefix(3)), try #require(try t.get(key)))
        }
        let problems = try StoredObjects.check(in: store).problems
        #expect(problems.contains { $0.contains("does not read as") }, "\(problems)")
    }

    @Test func untypedReadsAndChecksAcceptStructKeys() throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let devices = Self.uuids.enumerated().map { SKDevice(id: SKUUIDKey(rawValue: $0.element), name: "d\($0.offset)") }
        let users = ["ana", "bo"].map { SKUser(id: SKTextKey(rawValue: $0), name: $0.uppercased()) }
        do {
            let db = try Database(path: path, models: [SKDevice.self, SKUser.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in
                try tx.insert(contentsOf: devices)
                try tx.insert(contentsOf: users)
            }
            #expect(try db.object(SKUser.self, key: SKTextKey(rawValue: "bo"))?.name == "BO")
            // Untyped: every object, its key read back as the id.
            var keys: [SKUUIDKey] = []
            try StoredObjects.forEach(in: db.store, model: "SKDevice") { key, fields in
                keys.append(try key.decode(SKUUIDKey.self))
                #expect(try StoredValue.object(fields).decode(SKDevice.self).id == keys.last)
                return true
            }
            #expect(keys == devices.map(\.id))
            var names: [String] = []
            try StoredObjects.forEach(in: db.store, model: "SKUser") { key, fields in
                names.append(fields["name"]?.stringValue ?? "?")
                return true
            }
            #expect(names == ["ANA", "BO"])
            let report = try StoredObjects.check(in: db.store)
            #expect(report.problems.isEmpty, "\(report.problems)")
            db.close()
        }
        // A migration reads the old objects of both models.
        var seen = 0
        let db = try Database(path: path, models: [SKDeviceV2.self, SKUser.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { m in
            seen = try m.objects("SKDevice").count
            try m.enumerateObjects("SKDevice") { old, new in new["seen"] = .int(1) }
        }
        #expect(seen == 3)
        #expect(db.objects(SKDeviceV2.self).map(\.seen) == [1, 1, 1])
        #expect(db.objects(SKDeviceV2.self).map(\.id) == devices.map(\.id))
    }
}
