import Foundation
import Testing

@testable import Strata

// `superEncoder` (found by a review of Codable shapes, 2026-12-07): the probe refused a super
// *decoder*, but a type that encodes through `superEncoder(forKey:)` and decodes with a plain
// `decode(_:forKey:)` — which JSON round-trips, nesting the value under its key — was opened,
// and its super encoder wrote into the object's own fields.

struct SEStamp: Codable, Equatable, Sendable {
    var at: Date
}

/// An edit stamp written through a super encoder: its `at` landed on the note's own `at`, and
/// `edited` was never written (fetched: the stamp's date as `at`, `edited` nil).
struct SENote: Model, Equatable {
    var id: Int
    var at: Date
    var edited: SEStamp?
    enum CodingKeys: String, CodingKey { case id, at, edited }
    init(id: Int, at: Date, edited: SEStamp?) {
        self.id = id
        self.at = at
        self.edited = edited
    }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        at = try c.decode(Date.self, forKey: .at)
        edited = try c.decodeIfPresent(SEStamp.self, forKey: .edited)
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(at, forKey: .at)
        if let edited { try edited.encode(to: c.superEncoder(forKey: .edited)) }
    }
}

/// Tags written through a super encoder: an empty list wrote nothing and threw nothing, and the
/// object could then not be read back.
struct SETagged: Model, Equatable {
    var id: Int
    var tags: [String]
    enum CodingKeys: String, CodingKey { case id, tags }
    init(id: Int, tags: [String]) {
        self.id = id
        self.tags = tags
    }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        tags = try c.decode([String].self, forKey: .tags)
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try tags.encode(to: c.superEncoder(forKey: .tags))
    }
}

/// Rows written each through the array's super encoder: JSON adds one element per call, Strata
/// wrote each row's elements into the outer array (empty rows vanished).
struct SERows: Codable, Equatable, Sendable {
    var rows: [[Int]]
    init(rows: [[Int]]) { self.rows = rows }
    init(from decoder: any Decoder) throws {
        var c = try decoder.unkeyedContainer()
        rows = []
        while !c.isAtEnd { rows.append(try c.decode([Int].self)) }
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.unkeyedContainer()
        for row in rows { try row.encode(to: c.superEncoder()) }
    }
}

struct SEGrid: Model, Equatable {
    var id: Int
    var grid: SERows
}

@Suite struct SuperEncoderTests {
    /// JSON round-trips both; Strata must store them exactly or refuse them with a typed error
    /// (at open, or at the insert that writes through the super encoder), never store something
    /// else.
    @Test func aTypeWrittenThroughASuperEncoderIsRefusedNotStoredWrong() throws {
        func attempt<M: Model & Equatable>(_ value: M) throws {
            #expect(try JSONDecoder().decode(M.self, from: JSONEncoder().encode(value)) == value)
            do {
                let db = try Database.inMemory(models: [M.self])
                try db.write { try $0.insert(value) }
                Issue.record("\(M.self) was stored; read back: \(String(describing: try? db.object(M.self, key: value.id)))")
            } catch StrataError.unsupportedType(_, _, let reason), StrataError.typeMismatch(_, _, let reason) {
                #expect(reason.contains("super encoder"), "\(M.self): \(reason)")
            }
        }
        try attempt(SENote(id: 1, at: Date(timeIntervalSinceReferenceDate: 1), edited: SEStamp(at: Date(timeIntervalSinceReferenceDate: 2))))
        try attempt(SETagged(id: 1, tags: []))
        try attempt(SETagged(id: 2, tags: ["a"]))
        try attempt(SEGrid(id: 1, grid: SERows(rows: [[], []])))
        try attempt(SEGrid(id: 2, grid: SERows(rows: [[1], [2, 3]])))
    }
}
