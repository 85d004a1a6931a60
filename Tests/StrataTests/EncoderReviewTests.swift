import Foundation
import Testing

@testable import Strata

// The write side of the codec found wrong by a review (2026-12-07), checked against JSONEncoder
// and JSONDecoder.

/// Reads `[[Int]]`, writes each row through a nested unkeyed container: the same JSON.
struct ERMatrix: Codable, Sendable, Equatable {
    var rows: [[Int]]
    init(rows: [[Int]]) { self.rows = rows }
    init(from decoder: any Decoder) throws { rows = try [[Int]](from: decoder) }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.unkeyedContainer()
        for row in rows {
            var r = c.nestedUnkeyedContainer()
            for x in row { try r.encode(x) }
        }
    }
}

struct ERGrid: Model, Equatable {
    var id: Int
    var grid: ERMatrix
}

/// Reads `[String: [Int]]`, writes each value through a nested unkeyed container.
struct ERBuckets: Codable, Sendable, Equatable {
    var map: [String: [Int]]
    init(map: [String: [Int]]) { self.map = map }
    init(from decoder: any Decoder) throws { map = try [String: [Int]](from: decoder) }
    struct Key: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        for (key, values) in map {
            var r = c.nestedUnkeyedContainer(forKey: Key(stringValue: key))
            for x in values { try r.encode(x) }
        }
    }
}

struct ERBucketHolder: Model, Equatable {
    var id: Int
    var buckets: ERBuckets
}

/// A double optional written for every key by a hand-written `encode(to:)`.
struct ERExplicitNull: Model, Equatable {
    var id: Int
    var nickname: String??
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(nickname, forKey: .nickname)
    }
}

struct EncoderReviewTests {
    /// Elements (or dictionary values) written through nested containers are refused when the
    /// database opens, as a struct's fields written so are: an empty nested container added no
    /// element (`[[], []]` read back as `[]`), and a non-empty one failed every write.
    @Test func collectionsWrittenThroughNestedContainersAreRefusedAtOpen() throws {
        let rows = ERGrid(id: 1, grid: ERMatrix(rows: [[], []]))
        #expect(try JSONDecoder().decode(ERGrid.self, from: JSONEncoder().encode(rows)) == rows)
        #expect {
            _ = try Database.inMemory(models: [ERGrid.self])
        } throws: { error in
            guard case StrataError.unsupportedType(_, _, let reason) = error else { return false }
            return reason.contains("nested unkeyed container")
        }
        #expect {
            _ = try Database.inMemory(models: [ERBucketHolder.self])
        } throws: { error in
            guard case StrataError.unsupportedType(_, _, let reason) = error else { return false }
            return reason.contains("nested unkeyed container")
        }
    }

    /// A double optional's own nil handed to `encode(_:forKey:)` reads back nil, as the JSON round
    /// trip gives (it read back as `.some(nil)`); the inner nil and a value read back as written.
    @Test(arguments: [String??.none, .some(nil), .some("x")])
    func aDoubleOptionalWrittenExplicitlyReadsBackAsWritten(_ nickname: String??) throws {
        let value = ERExplicitNull(id: 1, nickname: nickname)
        let viaJSON = try JSONDecoder().decode(ERExplicitNull.self, from: JSONEncoder().encode(value))
        let db = try Database.inMemory(models: [ERExplicitNull.self])
        try db.write { tx in try tx.insert(value) }
        let read = try #require(try db.object(ERExplicitNull.self, key: 1))
        // JSON has no `.some(nil)`: where it reads nil, Strata keeps what was written.
        #expect(read == value || read == viaJSON, "\(String(describing: read.nickname))")
        if nickname == nil { #expect(read.nickname == nil, "\(String(describing: read.nickname))") }
        #expect(read == value)
    }
}
