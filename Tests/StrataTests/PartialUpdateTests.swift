import Testing
import Synchronization
import Foundation
import Dispatch
@testable import Strata

// Partial updates (from JSON, from dictionaries of native values) and the change messages built on
// them. About 650 lines for one idea: every case uses the fixture models and helpers below.

enum PUStatus: String, Codable, Sendable { case online, away }
enum PULevel: Int, Codable, Sendable { case low = 1, high = 2 }

struct PUGeo: Codable, Sendable, Equatable {
    var lat: Double
    var lon: Double
}

struct PUAddress: Codable, Sendable, Equatable {
    var street: String
    var city: String
    var zip: String?
    var geo: PUGeo?
}

struct PUPerson: Model, Equatable {
    static let indexes: [PartialKeyPath<PUPerson> & Sendable] = [\.name, \.status]
    static let uniqueIndexes: [PartialKeyPath<PUPerson> & Sendable] = [\.email]
    var id: String
    var name: String
    var email: String
    var status: PUStatus
    var tags: [String]
    var address: PUAddress?
    var bestFriend: Ref<PUPerson>?
    var nickname: String?
}

/// Every field type partial updates convert.
struct PUAll: Model, Equatable {
    var id: Int
    var flag: Bool
    var i: Int
    var i8: Int8
    var i16: Int16
    var i32: Int32
    var i64: Int64
    var u: UInt
    var u8: UInt8
    var u16: UInt16
    var u32: UInt32
    var u64: UInt64
    var d: Double
    var f: Float
    var s: String
    var data: Data
    var date: Date
    var uuid: UUID
    var url: URL
    var dec: Decimal
    var level: PULevel
    var status: PUStatus
    var owner: Ref<PUPerson>
    var list: [Int]
    var set: Set<String>
    var map: [String: Double]
    var optInt: Int?
    var optDate: Date?
    var nested: PUGeo
    var people: [Ref<PUPerson>]
    var geos: [PUGeo]
    var optList: [String?]
}

/// A model keyed by an auto-increment integer, for change messages with numeric keys.
struct PUCounter: Model, Equatable {
    var id: Int?
    var count: Int
}

private let uuidA = UUID(uuidString: "8F3C2A55-0D7E-4B1E-9C77-6A0E5E3B1F10")!
private let uuidB = UUID(uuidString: "00000000-0000-0000-0000-0000000000AB")!

private func baseAll() -> PUAll {
    PUAll(
        id: 1, flag: false, i: 1, i8: 1, i16: 1, i32: 1, i64: 1, u: 1, u8: 1, u16: 1, u32: 1, u64: 1,
        d: 0.1, f: 0.5, s: "s", data: Data([1, 2, 3]), date: Date(timeIntervalSinceReferenceDate: 123_456.123_456_789),
        uuid: uuidA, url: URL(string: "https://a.example/x")!, dec: Decimal(string: "1.5")!, level: .low, status: .online,
        owner: Ref("u1"), list: [1, 2], set: ["a"], map: ["k": 1], optInt: 7, optDate: nil, nested: PUGeo(lat: 1, lon: 2),
        people: [], geos: [PUGeo(lat: 0, lon: 0)], optList: ["x", nil])
}

private func ana() -> PUPerson {
    PUPerson(
        id: "u1", name: "Ana", email: "ana@x", status: .online, tags: ["a"],
        address: PUAddress(street: "Main 1", city: "Lisboa", zip: "1000", geo: PUGeo(lat: 38.7, lon: -9.1)),
        bestFriend: nil, nickname: "annie")
}

private func json(_ text: String) -> Data { Data(text.utf8) }

/// Runs `body` and returns the `StrataError` it throws (nil when it does not throw).
private func strataError<T>(_ body: () throws -> T) -> StrataError? {
    do {
        _ = try body()
        return nil
    } catch let error as StrataError {
        return error
    } catch {
        Issue.record("not a StrataError: \(error)")
        return nil
    }
}

/// The field a `typeMismatch` names, or nil for any other error.
private func mismatchField(_ error: StrataError?) -> String? {
    if case .typeMismatch(_, let field, _)? = error { return field }
    return nil
}

/// The raw stored record of an object.
private func storedRecord<M: Model>(_ db: Database, _ type: M.Type, key: M.ID) throws -> [UInt8]? {
    let info = try db.info(M.self)
    let keyBytes = try info.keyBytes(key)
    return try db.store.read { txn in
        guard let tree = try txn.tree(info.recordTree) else { return nil }
        return try keyBytes.withUnsafeBytes { try tree.get($0) }.map { Array($0) }
    }
}

private func version(_ db: Database) throws -> UInt64 { try db.snapshot().version }

private func openDB() throws -> Database { try Database.inMemory(models: [PUPerson.self, PUAll.self, PUCounter.self]) }

struct PartialUpdateTests {
    // MARK: Field types

    @Test func everyFieldTypeFromJSON() throws {
        let db = try openDB()
        try db.write { tx in
            try tx.insert(ana())
            try tx.insert(PUPerson(id: "u2", name: "Ben", email: "ben@x", status: .away, tags: [], address: nil, bestFriend: nil, nickname: nil))
            try tx.insert(baseAll())
        }
        let body = json(
            """
            {"flag": true, "i": -9223372036854775808, "i8": -128, "i16": 32767, "i32": -2147483648, "i64": 9223372036854775807,
             "u": 18446744073709551615, "u8": 255, "u16": 65535, "u32": 4294967295, "u64": 18446744073709551615,
             "d": -1.5e300, "f": 3.25, "s": "日本語 \\"q\\" \\ud83d\\ude00", "data": "AAEC/w==", "date": "2024-05-01T12:30:00.25Z",
             "uuid": "00000000-0000-0000-0000-0000000000ab", "url": "https://b.example/y?q=1", "dec": "-123456789.000000001",
             "level": 2, "status": "away", "owner": "u2", "list": [3, 2, 1], "set": ["b", "a", "b"], "map": {"x": 1, "y": 2.5},
             "optInt": null, "optDate": "2024-05-01T14:30:00+02:00", "nested": {"lat": 5, "lon": 6}, "people": ["u1", "u2"],
             "geos": [], "optList": [null, "z"]}
            """)
        let result = try db.write { tx in try tx.update(PUAll.self, key: 1, json: body) }
        let iso = Date(timeIntervalSince1970: 1_714_566_600)
        let expected = PUAll(
            id: 1, flag: true, i: .min, i8: .min, i16: .max, i32: .min, i64: .max, u: .max, u8: .max, u16: .max,
            u32: .max, u64: .max, d: -1.5e300, f: 3.25, s: "日本語 \"q\" 😀", data: Data([0, 1, 2, 255]),
            date: iso.addingTimeInterval(0.25), uuid: uuidB, url: URL(string: "https://b.example/y?q=1")!,
            dec: Decimal(string: "-123456789.000000001")!, level: .high, status: .away, owner: Ref("u2"),
            list: [3, 2, 1], set: ["a", "b"], map: ["x": 1, "y": 2.5], optInt: nil, optDate: iso,
            nested: PUGeo(lat: 5, lon: 6), people: [Ref("u1"), Ref("u2")], geos: [], optList: [nil, "z"])
        #expect(result.object == expected)
        #expect(result.changed && !result.created && result.ignoredFields.isEmpty)
        #expect(try db.object(PUAll.self, key: 1) == expected)
    }

    @Test func everyFieldTypeFromADictionaryOfNativeValues() throws {
        let db = try openDB()
        try db.write { tx in try tx.insert(baseAll()) }
        let date = Date(timeIntervalSinceReferenceDate: 765_432.987_654_321)  // sub-microsecond: must not pass through text
        let fields: [String: Any] = [
            "flag": true, "i": -5, "i8": Int8(-3), "i16": Int16(300), "i32": Int32(-70_000), "i64": Int64.min,
            "u": UInt(9), "u8": UInt8(200), "u16": 60_000, "u32": UInt32.max, "u64": UInt64.max,
            "d": Double.leastNonzeroMagnitude, "f": Float(1.25), "s": "text", "data": Data([9, 8]), "date": date,
            "uuid": uuidB, "url": URL(string: "file:///tmp/a%20b")!, "dec": Decimal(string: "0.000000000000000000001")!,
            "level": PULevel.high, "status": PUStatus.away, "owner": Ref<PUPerson>("u9"), "list": [Int](), "set": Set(["q"]),
            "map": ["m": 0.5], "optInt": Optional<Int>.none as Any, "optDate": date, "nested": ["lat": 1.5, "lon": -1],
            "people": [Ref<PUPerson>("a"), "b"], "geos": [["lat": 1, "lon": 2]], "optList": [NSNull(), "n"],
        ]
        let result = try db.write { tx in try tx.update(PUAll.self, key: 1, fields: fields) }
        let expected = PUAll(
            id: 1, flag: true, i: -5, i8: -3, i16: 300, i32: -70_000, i64: .min, u: 9, u8: 200, u16: 60_000,
            u32: .max, u64: .max, d: .leastNonzeroMagnitude, f: 1.25, s: "text", data: Data([9, 8]), date: date,
            uuid: uuidB, url: URL(string: "file:///tmp/a%20b")!, dec: Decimal(string: "0.000000000000000000001")!,
            level: .high, status: .away, owner: Ref("u9"), list: [], set: ["q"], map: ["m": 0.5], optInt: nil,
            optDate: date, nested: PUGeo(lat: 1.5, lon: -1), people: [Ref("a"), Ref("b")],
            geos: [PUGeo(lat: 1, lon: 2)], optList: [nil, "n"])
        #expect(result.object == expected)
        #expect(result.object.date.timeIntervalSinceReferenceDate.bitPattern == date.timeIntervalSinceReferenceDate.bitPattern)
    }

    /// What `JSONSerialization` produces on this platform: `NSNumber`s for numbers and booleans alike.
    @Test func dictionaryFromJSONSerializationTellsBooleansFromNumbers() throws {
        let db = try openDB()
        try db.write { tx in try tx.insert(baseAll()) }
        let object = try JSONSerialization.jsonObject(
            with: json(#"{"flag": true, "i": 1, "u64": 18446744073709551615, "d": 2, "f": 0.5, "optInt": null, "nested": {"lat": 0}}"#))
        let fields = try #require(object as? [String: Any])
        let result = try db.write { tx in try tx.update(PUAll.self, key: 1, fields: fields) }
        #expect(result.object.flag == true && result.object.i == 1 && result.object.u64 == .max && result.object.d == 2)
        #expect(result.object.optInt == nil && result.object.nested == PUGeo(lat: 0, lon: 2))

        let numbersForBool = try #require(try JSONSerialization.jsonObject(with: json(#"{"flag": 1}"#)) as? [String: Any])
        #expect(mismatchField(strataError { try db.write { tx in try tx.update(PUAll.self, key: 1, fields: numbersForBool) } }) == "flag")
        let boolForInt = try #require(try JSONSerialization.jsonObject(with: json(#"{"i": true}"#)) as? [String: Any])
        #expect(mismatchField(strataError { try db.write { tx in try tx.update(PUAll.self, key: 1, fields: boolForInt) } }) == "i")
        #expect(mismatchField(strataError { try db.write { tx in try tx.update(PUAll.self, key: 1, fields: ["flag": 0]) } }) == "flag")
        #expect(mismatchField(strataError { try db.write { tx in try tx.update(PUAll.self, key: 1, fields: ["i": false]) } }) == "i")
    }

    /// A number is read from its digits, as JSONDecoder reads it: a whole number written with a
    /// fraction or an exponent is exact above 2^53, and one beyond 64 bits fits no integer field,
    /// nor names a key (a `Double` would round -9223372036854775809 to `Int64.min`, and a change
    /// message would then delete that object). Found by an independent test.
    @Test func numbersAreReadFromTheirDigits() throws {
        #expect(try JSONValue(parsing: Data("2.0".utf8)) == .int(2))
        #expect(try JSONValue(parsing: Data("125e-1".utf8)) == .double(12.5))
        #expect(try JSONValue(parsing: Data("12.50e1".utf8)) == .int(125))
        #expect(try JSONValue(parsing: Data("0.05e2".utf8)) == .int(5))
        #expect(try JSONValue(parsing: Data("1e19".utf8)) == .uint(10_000_000_000_000_000_000))
        #expect(try JSONValue(parsing: Data("18446744073709551615.0".utf8)) == .uint(.max))
        #expect(try JSONValue(parsing: Data("9007199254740993.0".utf8)) == .int(9_007_199_254_740_993))
        #expect(try JSONValue(parsing: Data("-9223372036854775808.0".utf8)) == .int(.min))
        #expect(try JSONValue(parsing: Data("1e20".utf8)) == .double(1e20))
        #expect(try JSONValue(parsing: Data("0e99999999".utf8)) == .int(0))
        let negativeZero = try JSONValue(parsing: Data("-0.0e3".utf8))
        guard case .double(let z) = negativeZero, z == 0, z.sign == .minus else {
            Issue.record("-0.0e3 is \(negativeZero)")
            return
        }

        let db = try Database.inMemory(models: [PUCounter.self])
        try db.write { tx in
            try tx.insert(PUCounter(id: 1, count: 0))
            try tx.insert(PUCounter(id: Int.min, count: 5))
        }
        for text in ["-9223372036854775809", "-9223372036854776832", "9223372036854775808", "18446744073709551616", "-9.223372036854775809e18"] {
            #expect(throws: StrataError.self, "\(text)") {
                try db.write { tx in try tx.update(PUCounter.self, key: 1, json: Data(#"{"count": \#(text)}"#.utf8)) }
            }
            #expect(throws: StrataError.self, "\(text) as a key") {
                try db.apply(try ChangeMessage.decode(json: Data(#"[{"msg":"removed","collection":"PUCounter","id":\#(text)}]"#.utf8)))
            }
        }
        #expect(try db.object(PUCounter.self, key: 1)?.count == 0)
        #expect(try db.object(PUCounter.self, key: Int.min)?.count == 5)
        try db.write { tx in try tx.update(PUCounter.self, key: 1, json: Data(#"{"count": 9007199254740993.0}"#.utf8)) }
        #expect(try db.object(PUCounter.self, key: 1)?.count == 9_007_199_254_740_993)
        // A Swift Double (or JSONSerialization's) that is a whole number fits, Int64.min included.
        try db.write { tx in try tx.update(PUCounter.self, key: 1, fields: ["count": -0x1p63]) }
        #expect(try db.object(PUCounter.self, key: 1)?.count == .min)
    }

    /// A write that changes nothing (partial or typed) writes nothing, on an object stored with a
    /// field its type no longer has too: the field keeps its bytes for a migration to read (a comparison
    /// with the stored bytes counted the missing field as a change, and the write dropped it).
    /// A real change rewrites the object as its type stores it. Found by an independent test.
    @Test func partialUpdatesKeepARemovedFieldsBytes() throws {
        struct CounterV1: Model { static let modelName = "PUKept"; var id: Int; var n: Int; var dropped: Int? }
        struct CounterV2: Model { static let modelName = "PUKept"; var id: Int; var n: Int }
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [CounterV1.self])
            try db.write { tx in try tx.insert(CounterV1(id: 1, n: 1, dropped: 42)) }
            db.close()
        }
        do {
            let db = try Database(path: path, models: [CounterV2.self])
            let before = db.store.latestVersion
            let same = try db.write { tx in try tx.update(CounterV2.self, key: 1, json: Data(#"{"n": 1}"#.utf8)) }
            #expect(!same.changed)
            #expect(db.store.latestVersion == before, "a patch that changes nothing committed")
            let unchanged = try db.write { tx in try tx.update(CounterV2.self, key: 1, fields: ["n": 1]) }
            #expect(!unchanged.changed)
            // Typed writes of the same object skip the write too (the comparison is theirs).
            try db.write { tx in
                try tx.upsert(CounterV2(id: 1, n: 1))
                try tx.update(CounterV2.self, key: 1) { $0.n = 1 }
            }
            #expect(db.store.latestVersion == before, "a typed write of the same object committed")
            #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
            db.close()
        }
        var dropped: StoredValue?
        try Database(path: path, models: [CounterV2.self], schemaVersion: 1) { migration in
            dropped = try migration.objects("PUKept").first?["dropped"]
        }.close()
        #expect(dropped == .int(42))
        let db = try Database(path: path, models: [CounterV2.self])  // at version 0: the stored 1 stays
        let changed = try db.write { tx in try tx.update(CounterV2.self, key: 1, json: Data(#"{"n": 2}"#.utf8)) }
        #expect(changed.changed && changed.object.n == 2)
        #expect(try db.object(CounterV2.self, key: 1)?.n == 2)
    }

    @Test func dateFormats() throws {
        let db = try openDB()
        try db.write { tx in try tx.insert(baseAll()) }
        func date(_ value: String, _ format: PartialUpdateOptions.DateFormat) throws -> Date {
            try db.write { tx in
                try tx.update(PUAll.self, key: 1, json: json(#"{"date": \#(value)}"#), options: PartialUpdateOptions(dateFormat: format)).object.date
            }
        }
        let t = Date(timeIntervalSince1970: 1_700_000_000)
        #expect(try date(#""2023-11-14T22:13:20Z""#, .iso8601) == t)
        #expect(try date(#""2023-11-14T23:13:20.5+01:00""#, .iso8601) == t.addingTimeInterval(0.5))
        #expect(abs(try date(#""2023-11-14T22:13:20.123456Z""#, .iso8601).timeIntervalSince(t) - 0.123456) < 1e-6)
        #expect(try date("1700000000", .secondsSince1970) == t)
        #expect(try date("1700000000500", .millisecondsSince1970) == t.addingTimeInterval(0.5))
        #expect(try date("12.5", .secondsSinceReferenceDate) == Date(timeIntervalSinceReferenceDate: 12.5))
        #expect(mismatchField(strataError { _ = try date("1700000000", .iso8601) }) == "date")
        #expect(mismatchField(strataError { _ = try date(#""2023-11-14""#, .iso8601) }) == "date")
        #expect(mismatchField(strataError { _ = try date(#""2023-11-14T22:13:20Z""#, .secondsSince1970) }) == "date")
    }

    // MARK: Absent fields

    /// An update of one field leaves every other field's stored bytes exactly as they were: a Date
    /// with sub-microsecond digits, -0.0, NaN, the smallest subnormal, a Decimal with many digits.
    @Test func absentFieldsKeepTheirBytes() throws {
        let db = try openDB()
        var all = baseAll()
        all.date = Date(timeIntervalSinceReferenceDate: 987_654_321.123_456_789)
        all.d = -0.0
        all.map = ["nan": .nan, "tiny": .leastNonzeroMagnitude, "max": .greatestFiniteMagnitude, "neg": -.infinity]
        all.dec = Decimal(string: "-98765432109876543210.0123456789")!
        all.optDate = Date(timeIntervalSince1970: -0.000_001)
        try db.write { tx in try tx.insert(all) }
        let before = try #require(try storedRecord(db, PUAll.self, key: 1))

        let result = try db.write { tx in try tx.update(PUAll.self, key: 1, json: json(#"{"s": "changed"}"#)) }
        #expect(result.changed)
        let after = try #require(try storedRecord(db, PUAll.self, key: 1))
        var expected = all
        expected.s = "changed"
        #expect(after == (try db.info(PUAll.self).encode(expected)))
        // Field by field: only `s` differs.
        let schema = try db.info(PUAll.self).stored.object
        let sID = try #require(schema.field(named: "s")?.id)
        try before.withUnsafeBytes { old in
            try after.withUnsafeBytes { new in
                let (a, b) = (try FieldTable(old), try FieldTable(new))
                #expect(a.ids == b.ids)
                for (x, y) in zip(a.entries, b.entries) where x.id != sID {
                    #expect(old[x.start..<x.end].elementsEqual(new[y.start..<y.end]), "field \(x.id)")
                }
            }
        }
        let stored = try #require(try db.object(PUAll.self, key: 1))
        #expect(stored.d.sign == .minus && stored.d == 0)
        #expect(stored.map["nan"]?.isNaN == true)
        #expect(stored.date.timeIntervalSinceReferenceDate.bitPattern == all.date.timeIntervalSinceReferenceDate.bitPattern)
    }

    @Test func nestedStructsMergeRecursively() throws {
        let db = try openDB()
        try db.write { tx in try tx.insert(ana()) }
        let result = try db.write { tx in
            try tx.update(PUPerson.self, key: "u1", json: json(#"{"address": {"city": "Porto", "geo": {"lat": 41.1}}}"#))
        }
        #expect(result.object.address == PUAddress(street: "Main 1", city: "Porto", zip: "1000", geo: PUGeo(lat: 41.1, lon: -9.1)))
        #expect(result.object.name == "Ana" && result.object.nickname == "annie")

        // Arrays are replaced whole, not merged.
        let tags = try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"tags": ["z"]}"#)) }
        #expect(tags.object.tags == ["z"])

        // Merging into a nil nested struct builds it from scratch: it must be complete.
        try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"address": null}"#)) }
        let error = strataError {
            try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"address": {"city": "Faro", "geo": {"lat": 1}}}"#)) }
        }
        #expect(error == .incompleteUpdate(model: "PUPerson", key: "u1", missing: ["address.geo.lon", "address.street"]))
        #expect("\(error.map { "\($0)" } ?? "")".hasPrefix("cannot update PUPerson u1"))
        let filled = try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"address": {"city": "Faro", "street": "S"}}"#)) }
        #expect(filled.object.address == PUAddress(street: "S", city: "Faro", zip: nil, geo: nil))
    }

    @Test func nullClearsOptionalsAndIsAnErrorOtherwise() throws {
        let db = try openDB()
        try db.write { tx in try tx.insert(ana()) }
        let result = try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"nickname": null, "address": {"zip": null, "geo": null}}"#)) }
        #expect(result.object.nickname == nil)
        #expect(result.object.address == PUAddress(street: "Main 1", city: "Lisboa", zip: nil, geo: nil))
        #expect(mismatchField(strataError { try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"name": null}"#)) } }) == "name")
        #expect(
            mismatchField(strataError { try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"address": {"city": null}}"#)) } })
                == "address.city")
        #expect(
            mismatchField(strataError { try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"tags": ["a", null]}"#)) } }) == "tags[1]")
        let cleared = try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"address": null}"#)) }
        #expect(cleared.object.address == nil)
    }

    // MARK: Errors

    @Test func wrongTypesAreRejectedNamingTheField() throws {
        let db = try openDB()
        try db.write { tx in
            try tx.insert(ana())
            try tx.insert(baseAll())
        }
        let before = try version(db)
        let cases: [(String, String)] = [
            (#"{"i": "12"}"#, "i"),
            (#"{"i8": 300}"#, "i8"),
            (#"{"i8": -129}"#, "i8"),
            (#"{"u8": -1}"#, "u8"),
            (#"{"u": 18446744073709551616}"#, "u"),
            (#"{"i": 1.5}"#, "i"),
            (#"{"i64": 9223372036854775808}"#, "i64"),
            (#"{"flag": 1}"#, "flag"),
            (#"{"flag": "true"}"#, "flag"),
            (#"{"d": "1.0"}"#, "d"),
            (#"{"f": 1e300}"#, "f"),
            (#"{"s": 5}"#, "s"),
            (#"{"data": "not base64!"}"#, "data"),
            (#"{"uuid": "8F3C2A55-0D7E"}"#, "uuid"),
            (#"{"date": "yesterday"}"#, "date"),
            (#"{"url": ""}"#, "url"),
            (#"{"dec": "12abc"}"#, "dec"),
            (#"{"dec": true}"#, "dec"),
            (#"{"status": "gone"}"#, "status"),
            (#"{"level": 3}"#, "level"),
            (#"{"level": "high"}"#, "level"),
            (#"{"owner": 5}"#, "owner"),
            (#"{"list": [1, "a"]}"#, "list[1]"),
            (#"{"list": {"a": 1}}"#, "list"),
            (#"{"set": "a"}"#, "set"),
            (#"{"map": {"k": "v"}}"#, "map.k"),
            (#"{"map": [1]}"#, "map"),
            (#"{"nested": {"lat": "x"}}"#, "nested.lat"),
            (#"{"nested": 5}"#, "nested"),
            (#"{"geos": [{"lat": 1, "lon": []}]}"#, "geos[0].lon"),
            (#"{"optList": [1]}"#, "optList[0]"),
        ]
        for (body, field) in cases {
            let error = strataError { try db.write { tx in try tx.update(PUAll.self, key: 1, json: json(body)) } }
            #expect(mismatchField(error) == field, "\(body) gave \(String(describing: error))")
            if case .typeMismatch(let model, _, _)? = error { #expect(model == "PUAll") }
        }
        let fromDictionary: [([String: Any], String)] = [
            (["i": "1"], "i"), (["i8": 300], "i8"), (["flag": 1], "flag"), (["i": true], "i"), (["date": "2024-01-01T00:00:00Z" as NSString], "date"),
            (["nested": ["lat": Date()]], "nested.lat"), (["s": NSObject()], "s"), (["uuid": "x"], "uuid"),
        ]
        for (fields, field) in fromDictionary {
            let error = strataError { try db.write { tx in try tx.update(PUAll.self, key: 1, fields: fields) } }
            if field == "date" {
                #expect(error == nil, "ISO text in an NSString is a date: \(String(describing: error))")
            } else {
                #expect(mismatchField(error) == field, "\(fields) gave \(String(describing: error))")
            }
        }
        #expect(try db.object(PUAll.self, key: 1)?.s == "s")
        #expect(try version(db) == before + 1, "only the one valid dictionary update committed")
    }

    @Test func unknownFieldsAreRejectedOrIgnored() throws {
        let db = try openDB()
        try db.write { tx in try tx.insert(ana()) }
        let body = json(#"{"name": "Ana B", "shoeSize": 38, "address": {"city": "Braga", "floor": 2}}"#)
        let error = strataError { try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: body) } }
        #expect(error == .unknownFields(model: "PUPerson", fields: ["address.floor", "shoeSize"]))
        #expect(try db.object(PUPerson.self, key: "u1")?.name == "Ana")

        let result = try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: body, options: PartialUpdateOptions(unknownFields: .ignore)) }
        #expect(result.ignoredFields == ["address.floor", "shoeSize"])
        #expect(result.object.name == "Ana B" && result.object.address?.city == "Braga")

        // Inside arrays of structs too.
        let geo = strataError {
            try db.write { tx in
                try tx.insert(baseAll()); try tx.update(PUAll.self, key: 1, json: json(#"{"geos": [{"lat": 1, "lon": 2, "alt": 3}]}"#))
            }
        }
        #expect(geo == .unknownFields(model: "PUAll", fields: ["geos[0].alt"]))
    }

    @Test func upsertCreatesCompleteObjectsOnly() throws {
        let db = try openDB()
        let created = try db.write { tx in
            try tx.upsert(PUPerson.self, key: "u7", json: json(#"{"name": "Gil", "email": "gil@x", "status": "away", "tags": []}"#))
        }
        #expect(created.created && created.changed)
        #expect(created.object == PUPerson(id: "u7", name: "Gil", email: "gil@x", status: .away, tags: [], address: nil, bestFriend: nil, nickname: nil))
        #expect(try db.object(PUPerson.self, key: "u7") == created.object)

        let error = strataError { try db.write { tx in try tx.upsert(PUPerson.self, key: "u8", json: json(#"{"name": "Hugo", "address": {"city": "X"}}"#)) } }
        #expect(error == .incompleteObject(model: "PUPerson", key: "u8", missing: ["email", "status", "tags", "address.street"].sorted()))
        #expect(try db.object(PUPerson.self, key: "u8") == nil)

        // Upsert of an existing object is a partial update.
        let updated = try db.write { tx in try tx.upsert(PUPerson.self, key: "u7", fields: ["nickname": "g"]) }
        #expect(!updated.created && updated.changed && updated.object.name == "Gil" && updated.object.nickname == "g")

        // An auto-increment model given a nil key gets the next one.
        let counter = try db.write { tx in try tx.upsert(PUCounter.self, key: nil, json: json(#"{"count": 3}"#)) }
        #expect(counter.created && counter.object.id == 1 && counter.object.count == 3)
    }

    @Test func updateOfAMissingKeyIsNotFound() throws {
        let db = try openDB()
        let error = strataError { try db.write { tx in try tx.update(PUPerson.self, key: "nobody", json: json(#"{"name": "X"}"#)) } }
        #expect(error == .notFound(model: "PUPerson", key: "nobody"))
        let fromFields = strataError { try db.write { tx in try tx.update(PUPerson.self, key: "nobody", fields: [:]) } }
        #expect(fromFields == .notFound(model: "PUPerson", key: "nobody"))
    }

    @Test func aKeyInTheFieldsMustAgreeWithTheKeyGiven() throws {
        let db = try openDB()
        try db.write { tx in try tx.insert(ana()) }
        #expect(mismatchField(strataError { try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"id": "u2"}"#)) } }) == "id")
        #expect(
            mismatchField(
                strataError {
                    try db.write { tx in
                        try tx.upsert(PUPerson.self, key: "u5", json: json(#"{"id": "u6", "name": "N", "email": "n@x", "status": "away", "tags": []}"#))
                    }
                }) == "id")
        let same = try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"id": "u1", "name": "Ana"}"#)) }
        #expect(!same.changed)
        #expect(try db.object(PUPerson.self, key: "u2") == nil)
    }

    @Test func identicalUpdatesWriteNothing() throws {
        let db = try openDB()
        try db.write { tx in try tx.insert(ana()) }
        let before = try version(db)
        let result = try db.write { tx in
            try tx.update(PUPerson.self, key: "u1", json: json(#"{"name": "Ana", "tags": ["a"], "address": {"geo": {"lat": 38.7}}, "nickname": "annie"}"#))
        }
        #expect(!result.changed && !result.created)
        #expect(try version(db) == before)
        let changed = try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"nickname": "A"}"#)) }
        #expect(changed.changed)
        #expect(try version(db) == before + 1)
    }

    @Test func indexesFollowPartialUpdates() throws {
        let db = try openDB()
        try db.write { tx in
            try tx.insert(ana())
            try tx.insert(PUPerson(id: "u2", name: "Ben", email: "ben@x", status: .away, tags: [], address: nil, bestFriend: nil, nickname: nil))
        }
        try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"name": "Carla", "status": "away"}"#)) }
        let carla = db.objects(PUPerson.self).filter(#Predicate { $0.name == "Carla" })
        #expect(carla.map(\.id) == ["u1"])
        #expect(carla.explain().contains("name"))
        #expect(db.objects(PUPerson.self).filter(#Predicate { $0.name == "Ana" }).isEmpty)
        let away = PUStatus.away
        #expect(Set(db.objects(PUPerson.self).filter(#Predicate { $0.status == away }).map(\.id)) == ["u1", "u2"])

        // The unique index on email holds for partial updates, and the failed one leaves nothing behind.
        let error = strataError { try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: json(#"{"email": "ben@x"}"#)) } }
        #expect(error == .uniqueViolation(model: "PUPerson", field: "email", value: "ben@x"))
        #expect(try db.object(PUPerson.self, key: "u1")?.email == "ana@x")
    }

    @Test func malformedJSONIsInvalidInput() throws {
        let db = try openDB()
        try db.write { tx in try tx.insert(ana()) }
        let bad =
            [
                "", " ", "{", "}", "{\"name\": }", "{\"name\" \"x\"}", "{\"name\": \"x\",}", "{\"name\": \"x\"} extra", "[1, 2]", "\"text\"", "42",
                "null", "{'name': 'x'}", "{\"name\": \"unterminated}", "{\"name\": \"\\q\"}", "{\"name\": \"\\ud800\"}", "{\"n\": 01}",
                "{\"n\": 1.}", "{\"n\": -}", "{\"n\": 1e400}", "{\"n\": tru}", "{\"a\": 1, \"a\": 2}", "{\"s\": \"tab\there\"}",
                String(repeating: "[", count: 100_000), String(repeating: "{\"a\":", count: 100_000),
            ].map { Data($0.utf8) } + [Data([0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x3A, 0x31, 0x7D])]  // invalid UTF-8 in a name
        for body in bad {
            let error = strataError { try db.write { tx in try tx.update(PUPerson.self, key: "u1", json: body) } }
            guard case .invalidInput(let reason)? = error else {
                Issue.record("\(String(decoding: body.prefix(40), as: UTF8.self)) gave \(String(describing: error))")
                continue
            }
            #expect(reason.contains("line") || reason.contains("top level"), "\(reason)")
        }
        if case .invalidInput(let reason)? = strataError({ _ = try JSONValue(parsing: json("{\n  \"a\": 1,\n  \"b\": ]\n}")) }) {
            #expect(reason.contains("line 3, column 8"), "\(reason)")
        }
        #expect(
            try JSONValue(parsing: json(#" {"a": [1, -2, 3.5, 18446744073709551615, true, null, "\u00e9\ud83d\ude00"]} "#))
                == .object(["a": .array([.int(1), .int(-2), .double(3.5), .uint(.max), .bool(true), .null, .string("é😀")])]))
    }

    /// A JSON object naming one field twice, at any depth (a nested struct, a dictionary field's
    /// keys, a change message), is `invalidInput` naming the field and where it is, and nothing is
    /// written: `JSONDecoder` would keep one of the values silently (which one, parsers differ).
    /// Documented in SyncingFromAServer.md.
    @Test func aFieldNamedTwiceIsInvalidInput() throws {
        let db = try openDB()
        try db.write { tx in
            try tx.insert(ana())
            try tx.insert(baseAll())
        }
        let cases: [(field: String, line: String, body: (Transaction) throws -> Void)] = [
            ("name", "line 1, column 15", { _ = try $0.update(PUPerson.self, key: "u1", json: json(#"{"name": "A", "name": "B"}"#)) }),
            ("name", "line 1, column 15", { _ = try $0.upsert(PUPerson.self, key: "u9", json: json(#"{"name": "A", "name": "B"}"#)) }),
            (
                "city", "line 2, column 27",
                { _ = try $0.update(PUPerson.self, key: "u1", json: json("{\"tags\": [],\n \"address\": {\"city\": \"P\", \"city\": \"Q\"}}")) }
            ),
            ("k", "line 1, column 18", { _ = try $0.update(PUAll.self, key: 1, json: json(#"{"map": {"k": 1, "k": 2}}"#)) }),
            // Equal field names, even when one is written with an escape.
            ("name", "line 1, column 15", { _ = try $0.update(PUPerson.self, key: "u1", json: json(#"{"name": "A", "n\u0061me": "B"}"#)) }),
        ]
        for (field, place, body) in cases {
            let error = strataError { try db.write { try body($0) } }
            guard case .invalidInput(let reason)? = error else {
                Issue.record("\(field): \(String(describing: error))")
                continue
            }
            #expect(reason.contains("duplicate field \"\(field)\"") && reason.contains(place), "\(reason)")
        }
        #expect(try db.object(PUPerson.self, key: "u1") == ana())
        #expect(try db.object(PUPerson.self, key: "u9") == nil)
        #expect(try db.object(PUAll.self, key: 1) == baseAll())
        let message = strataError {
            try ChangeMessage.decode(json: json(#"[{"msg": "changed", "collection": "PUPerson", "id": "u1", "fields": {"name": "A", "name": "B"}}]"#))
        }
        guard case .invalidInput(let reason)? = message else {
            Issue.record("change message: \(String(describing: message))")
            return
        }
        #expect(reason.contains("duplicate field \"name\""), "\(reason)")
    }

    // MARK: Change messages

    @Test func changeMessagesDecodeAndReportMalformedOnes() throws {
        let messages = try ChangeMessage.decode(
            json: json(
                """
                [{"msg": "added", "collection": "PUPerson", "id": "u1", "fields": {"name": "Ana"}},
                 {"msg": "changed", "collection": "PUPerson", "id": "u1", "fields": {"name": "B"}, "cleared": ["nickname", "address.zip"]},
                 {"msg": "removed", "collection": "PUCounter", "id": 4}]
                """))
        #expect(
            messages == [
                ChangeMessage(.added, model: "PUPerson", key: .string("u1"), fields: ["name": .string("Ana")]),
                ChangeMessage(.changed, model: "PUPerson", key: .string("u1"), fields: ["name": .string("B")], cleared: ["nickname", "address.zip"]),
                ChangeMessage(.removed, model: "PUCounter", key: .int(4)),
            ])
        let bad = [
            #"{"msg": "added"}"#, #"[{"msg": "moved", "collection": "A", "id": 1}]"#, #"[{"collection": "A", "id": 1}]"#,
            #"[{"msg": "added", "collection": "A"}]"#, #"[{"msg": "added", "collection": 5, "id": 1}]"#,
            #"[{"msg": "added", "collection": "A", "id": 1, "fields": []}]"#, #"[{"msg": "changed", "collection": "A", "id": 1, "cleared": [1]}]"#,
            #"[{"msg": "added", "collection": "A", "id": 1, "extra": true}]"#, #"[1]"#, "5", "[",
        ]
        for text in bad {
            let error = strataError { _ = try ChangeMessage.decode(json: json(text)) }
            guard case .invalidInput? = error else {
                Issue.record("\(text) gave \(String(describing: error))")
                continue
            }
        }
        let db = try openDB()
        let unknownModel = strataError { try db.apply([ChangeMessage(.removed, model: "Nope", key: .int(1))]) }
        guard case .invalidInput(let reason)? = unknownModel else { Issue.record("\(String(describing: unknownModel))"); return }
        #expect(reason.contains("Nope"))
    }

    /// `cleared` gives one outcome whatever its order: a path inside another cleared path (or
    /// inside a field `fields` sets to null) is part of it, and a path that `fields` also sets to a
    /// value is refused, naming it, instead of one of the two silently winning. `["address",
    /// "address.zip"]` threw, blaming `fields`, while `["address.zip", "address"]` cleared
    /// `address`; `fields: {"nickname": "N"}, cleared: ["nickname"]` stored nil.
    @Test func clearedPathsGiveOneOutcomeWhateverTheirOrder() throws {
        func permutations(_ items: [String]) -> [[String]] {
            guard items.count > 1 else { return [items] }
            return items.indices.flatMap { i in
                var rest = items
                let first = rest.remove(at: i)
                return permutations(rest).map { [first] + $0 }
            }
        }
        var noAddress = ana()
        noAddress.address = nil
        var noGeoNoZip = ana()
        noGeoNoZip.address?.geo = nil
        noGeoNoZip.address?.zip = nil
        var noNickname = ana()
        noNickname.nickname = nil
        var movedNoZip = ana()
        movedNoZip.address?.city = "Porto"
        movedNoZip.address?.zip = nil
        let accepted: [(fields: [String: JSONValue], cleared: [String], expected: PUPerson)] = [
            ([:], ["address", "address.zip"], noAddress),
            ([:], ["address.geo.lat", "address", "address.geo"], noAddress),
            ([:], ["address.geo", "address.geo.lat", "address.zip"], noGeoNoZip),
            ([:], ["nickname", "nickname"], noNickname),
            (["nickname": .null], ["nickname"], noNickname),
            (["address": .null], ["address.zip", "address.geo.lon"], noAddress),
            (["address": .object(["city": .string("Porto")])], ["address.zip"], movedNoZip),
        ]
        for (fields, cleared, expected) in accepted {
            for order in permutations(cleared) {
                let db = try openDB()
                try db.write { tx in try tx.insert(ana()) }
                let summary = try db.apply([ChangeMessage(.changed, model: "PUPerson", key: .string("u1"), fields: fields, cleared: order)])
                #expect(summary.changed == 1, "\(fields) \(order)")
                #expect(try db.object(PUPerson.self, key: "u1") == expected, "\(fields) \(order)")
            }
        }
        // The same through the JSON a server sends.
        let db = try openDB()
        try db.write { tx in try tx.insert(ana()) }
        let wire = #"[{"msg": "changed", "collection": "PUPerson", "id": "u1", "cleared": ["address", "address.zip"]}]"#
        #expect(try db.apply(ChangeMessage.decode(json: json(wire))).changed == 1)
        #expect(try db.object(PUPerson.self, key: "u1") == noAddress)

        let refused: [(fields: [String: JSONValue], cleared: [String], names: String)] = [
            (["nickname": .string("N")], ["nickname"], "nickname"),
            (["address": .object(["zip": .string("9")])], ["address.zip"], "address.zip"),
            (["address": .object(["city": .string("Porto")])], ["address", "address.zip"], "address"),
            (["address": .object(["geo": .object(["lat": .double(1)])])], ["address.city", "address.geo.lat"], "address.geo.lat"),
            (["tags": .array([])], ["tags"], "tags"),
        ]
        for (fields, cleared, names) in refused {
            for order in permutations(cleared) {
                let db = try openDB()
                try db.write { tx in try tx.insert(ana()) }
                let before = try version(db)
                let error = strataError { try db.apply([ChangeMessage(.changed, model: "PUPerson", key: .string("u1"), fields: fields, cleared: order)]) }
                guard case .invalidInput(let reason)? = error else {
                    Issue.record("\(fields) \(order): \(String(describing: error))")
                    continue
                }
                #expect(reason.contains("\"\(names)\"") && reason.contains("fields"), "\(fields) \(order): \(reason)")
                #expect(try db.object(PUPerson.self, key: "u1") == ana() && version(db) == before, "\(fields) \(order)")
            }
        }
    }

    /// In a batch of many messages, an error of a wrong value or of malformed input says which
    /// message it came from (its index and key); errors that name the key already keep their form.
    @Test func aBatchErrorSaysWhichMessage() throws {
        let db = try openDB()
        try db.write { tx in
            try tx.insert(ana())
            var ben = ana()
            ben.id = "u2"
            ben.email = "ben@x"
            try tx.insert(ben)
        }
        let fine = ChangeMessage(.changed, model: "PUPerson", key: .string("u1"), fields: ["name": .string("Zed")])
        let wrongType = ChangeMessage(.changed, model: "PUPerson", key: .string("u2"), fields: ["name": .int(5)])
        let mismatch = strataError { try db.apply([fine, fine, wrongType, fine]) }
        guard case .typeMismatch(let model, let field, let reason)? = mismatch else {
            Issue.record("\(String(describing: mismatch))")
            return
        }
        #expect(model == "PUPerson" && field == "name" && reason.hasPrefix("change message 2 (the string \"u2\"): "), "\(reason)")
        let conflicting = ChangeMessage(.changed, model: "PUPerson", key: .string("u2"), fields: ["nickname": .string("N")], cleared: ["nickname"])
        let invalid = strataError { try db.apply([fine, conflicting]) }
        guard case .invalidInput(let text)? = invalid else {
            Issue.record("\(String(describing: invalid))")
            return
        }
        #expect(text.hasPrefix("change message 1: PUPerson the string \"u2\": cleared field \"nickname\""), "\(text)")
        let missing = strataError { try db.apply([fine, ChangeMessage(.changed, model: "PUPerson", key: .string("u9"), fields: [:])]) }
        #expect(missing == .notFound(model: "PUPerson", key: "u9"))
        let unknownModel = strataError { try db.apply([fine, fine, fine, ChangeMessage(.removed, model: "Nope", key: .int(1))]) }
        guard case .invalidInput(let about)? = unknownModel else {
            Issue.record("\(String(describing: unknownModel))")
            return
        }
        #expect(about.hasPrefix("change message 3 for \"Nope\""), "\(about)")
        #expect(try db.object(PUPerson.self, key: "u1")?.name == "Ana")
        // A transaction an earlier write left half done: the error is that write's, no message's.
        var cara = ana()
        cara.id = "u3"
        cara.email = "cara@x"
        var dup = ana()
        dup.email = "dup@x"
        _ = try? db.write { tx in
            #expect(throws: StrataError.self) { _ = try tx.insert(contentsOf: [cara, dup]) }
            let poisoned = strataError { try tx.apply([fine]) }
            guard case .invalidInput(let why)? = poisoned else {
                Issue.record("\(String(describing: poisoned))")
                return
            }
            #expect(why.hasPrefix("an earlier write in this transaction failed"), "\(why)")
        }
        #expect(try db.object(PUPerson.self, key: "u3") == nil)
    }

    /// One batch of added / changed / removed messages is one commit, and a live observer hears of
    /// exactly the objects whose stored value changed.
    @Test func aBatchIsOneCommitAndObserversSeeOnlyRealChanges() throws {
        let db = try openDB()
        try db.write { tx in
            try tx.insert(ana())
            try tx.insert(PUPerson(id: "u2", name: "Ben", email: "ben@x", status: .away, tags: [], address: nil, bestFriend: nil, nickname: nil))
            try tx.insert(PUPerson(id: "u3", name: "Cid", email: "cid@x", status: .online, tags: ["t"], address: nil, bestFriend: nil, nickname: nil))
            try tx.insert(PUPerson(id: "u4", name: "Dora", email: "dora@x", status: .online, tags: [], address: nil, bestFriend: nil, nickname: nil))
        }
        let deliveries = DeliveryQueue()
        let token = db.objects(PUPerson.self).sorted(by: SortDescriptor(\.name)).observe(on: DispatchQueue(label: "pu.observer")) { change in
            switch change {
            case .initial(let results): deliveries.push(.init(names: results.map(\.name), deletions: [], insertions: [], modifications: [], initial: true))
            case .update(let results, let d, let i, let m):
                deliveries.push(.init(names: results.map(\.name), deletions: d, insertions: i, modifications: m, initial: false))
            case .error(let error): Issue.record("observer: \(error)")
            }
        }
        defer { token.invalidate() }
        let initial = try #require(deliveries.next(timeout: 120))
        #expect(initial.initial && initial.names == ["Ana", "Ben", "Cid", "Dora"])

        let before = try version(db)
        let messages = try ChangeMessage.decode(
            json: json(
                """
                [{"msg": "changed", "collection": "PUPerson", "id": "u1", "fields": {"name": "Ana"}, "cleared": []},
                 {"msg": "changed", "collection": "PUPerson", "id": "u2", "fields": {"tags": ["new"]}, "cleared": ["nickname"]},
                 {"msg": "added", "collection": "PUPerson", "id": "u5", "fields": {"name": "Eva", "email": "eva@x", "status": "away", "tags": []}},
                 {"msg": "added", "collection": "PUPerson", "id": "u3", "fields": {"name": "Cid", "tags": ["t"]}},
                 {"msg": "removed", "collection": "PUPerson", "id": "u4"},
                 {"msg": "removed", "collection": "PUPerson", "id": "u404"},
                 {"msg": "added", "collection": "PUCounter", "id": 10, "fields": {"count": 1}}]
                """))
        let summary = try db.apply(messages)
        var expected = ChangeSummary()
        expected.added = 2
        expected.changed = 1
        expected.removed = 1
        expected.unchanged = 3
        #expect(summary == expected)
        #expect(try version(db) == before + 1, "one commit for the batch")
        #expect(try db.object(PUCounter.self, key: 10)?.count == 1)

        let update = try #require(deliveries.next(timeout: 120))
        #expect(!update.initial)
        #expect(update.names == ["Ana", "Ben", "Cid", "Eva"])
        #expect(update.deletions == [3])  // Dora, in the old results
        #expect(update.insertions == [3])  // Eva, in the new results
        #expect(update.modifications == [1])  // only Ben: Ana's and Cid's messages changed nothing

        // A batch that changes nothing commits nothing and delivers nothing.
        let idle = try db.apply([ChangeMessage(.changed, model: "PUPerson", key: .string("u1"), fields: ["name": .string("Ana")])])
        #expect(idle.unchanged == 1)
        #expect(try version(db) == before + 1)
        try db.write { tx in try tx.update(PUPerson.self, key: "u3", json: json(#"{"nickname": "c"}"#)) }
        let next = try #require(deliveries.next(timeout: 120))
        #expect(next.modifications == [2], "the next delivery is the later commit, not the idle batch")
    }

    @Test func aFailingMessageRollsBackTheWholeBatch() throws {
        let db = try openDB()
        try db.write { tx in try tx.insert(ana()) }
        let before = try version(db)
        let error = strataError {
            try db.apply([
                ChangeMessage(.changed, model: "PUPerson", key: .string("u1"), fields: ["name": .string("Zed")]),
                ChangeMessage(.changed, model: "PUPerson", key: .string("missing"), fields: ["name": .string("Q")]),
            ])
        }
        #expect(error == .notFound(model: "PUPerson", key: "missing"))
        #expect(try db.object(PUPerson.self, key: "u1")?.name == "Ana")
        #expect(try version(db) == before)

        let wrongKey = strataError { try db.apply([ChangeMessage(.removed, model: "PUCounter", key: .string("x"))]) }
        #expect(mismatchField(wrongKey) == "id")

        // Ignored fields are reported per message.
        let summary = try db.apply(
            [ChangeMessage(.changed, model: "PUPerson", key: .string("u1"), fields: ["name": .string("Zed"), "age": .int(3)])],
            options: PartialUpdateOptions(unknownFields: .ignore))
        #expect(summary.changed == 1 && summary.ignoredFields == ["PUPerson u1: age"])
    }
}

/// Deliveries of an observer, handed to the test through a semaphore (no polling).
/// `@unchecked Sendable`: every access takes `lock`.
private final class DeliveryQueue: @unchecked Sendable {
    struct Item {
        var names: [String]
        var deletions: [Int]
        var insertions: [Int]
        var modifications: [Int]
        var initial: Bool
    }

    private let lock = NSLock()
    private let available = DispatchSemaphore(value: 0)
    private var items: [Item] = []

    func push(_ item: Item) {
        lock.lock()
        items.append(item)
        lock.unlock()
        available.signal()
    }

    /// The next delivery, or nil after `timeout` seconds.
    func next(timeout: Double) -> Item? {
        guard available.wait(timeout: .now() + timeout) == .success else { return nil }
        lock.lock()
        defer { lock.unlock() }
        return items.isEmpty ? nil : items.removeFirst()
    }
}
