import Foundation
import Testing

@testable import Strata

struct AIInt: Model { var id: Int?; var text: String }
struct AIInt64: Model { var id: Int64?; var text: String }
struct AIInt32: Model { var id: Int32?; var text: String }
struct AIUInt: Model { var id: UInt?; var text: String }
struct AIUInt64: Model { var id: UInt64?; var text: String }
struct AIUInt32: Model { var id: UInt32?; var text: String }

/// Auto-increment keys at the bounds of every id type (ModelsAndSchema.md): the next key is one
/// more than the largest stored, up to the largest the type holds, and then the insert throws.
/// Unsigned ids go on past Int64.max (a server's ids may start there).
@Suite struct AutoIncrementTests {
    /// Stores `largest`, then inserts with a nil id: the key it gets, or nil when it threw
    /// `invalidQuery` (the keys ran out).
    static func next<M: Model, I: FixedWidthInteger>(_ make: (I?) -> M, after largest: I, in db: Database) throws -> I? {
        try db.write { tx in
            _ = try tx.deleteAll(M.self)
            try tx.insert(make(largest))
        }
        do {
            let stored = try db.write { tx in try tx.insert(make(nil)) }
            let key = stored.id as? I
            // The stored object reads back under that key.
            if let key { #expect(try db.object(M.self, key: stored.id) != nil, "\(M.self) key \(key)") }
            return key
        } catch let error as StrataError {
            guard case .invalidQuery(let message) = error, message.contains("exhausted") else {
                Issue.record("\(M.self) after \(largest): \(error)")
                return nil
            }
            return nil
        }
    }

    @Test func keysRunToTheLargestTheTypeHolds() throws {
        let db = try Database.inMemory(models: [AIInt.self, AIInt64.self, AIInt32.self, AIUInt.self, AIUInt64.self, AIUInt32.self])
        func check<M: Model, I: FixedWidthInteger>(_ make: (I?) -> M) throws {
            #expect(try Self.next(make, after: I.max - 1, in: db) == I.max, "\(M.self)")
            #expect(try Self.next(make, after: I.max, in: db) == nil, "\(M.self): a key past \(I.max)")
            #expect(try Self.next(make, after: I(1), in: db) == 2, "\(M.self)")
        }
        try check { AIInt(id: $0, text: "t") }
        try check { AIInt64(id: $0, text: "t") }
        try check { AIInt32(id: $0, text: "t") }
        try check { AIUInt(id: $0, text: "t") }
        try check { AIUInt64(id: $0, text: "t") }
        try check { AIUInt32(id: $0, text: "t") }
    }

    /// A largest unsigned key above Int64.max (found by a hunt: every such insert threw "key space
    /// exhausted", the keys being counted as Int64).
    @Test func unsignedKeysGoOnPastInt64Max() throws {
        let db = try Database.inMemory(models: [AIUInt.self, AIUInt64.self])
        let big = UInt64(Int64.max)
        for largest in [big, big + 1, big + 2, UInt64.max - 2] {
            #expect(try Self.next({ AIUInt64(id: $0, text: "t") }, after: largest, in: db) == largest + 1)
            #expect(try Self.next({ AIUInt(id: $0, text: "t") }, after: UInt(largest), in: db) == UInt(largest) + 1)
        }
        // Negative signed keys: the next is 1.
        let signed = try Database.inMemory(models: [AIInt64.self])
        #expect(try Self.next({ AIInt64(id: $0, text: "t") }, after: Int64.min, in: signed) == 1)
    }
}
