import Testing
import Foundation
import Synchronization
import Dispatch
@testable import Strata

private struct DeepPrice: Model, Equatable {
    var id: String
    var amount: Decimal
    var list: [[Int]]
}

/// Hostile nesting and decimals beyond what a Decimal holds (found in review).
@Suite struct PartialUpdateLimitTests {
    static func nested(_ depth: Int) -> Data {
        Data(("{\"list\": " + String(repeating: "[", count: depth) + String(repeating: "]", count: depth) + "}").utf8)
    }

    /// Parsing stops at `JSONParser.maxDepth` on a 512 KiB stack (Darwin's default for secondary
    /// threads and Dispatch workers), in debug builds too.
    @Test func deepNestingOnASmallStack() throws {
        let depths = [JSONParser.maxDepth - 2, JSONParser.maxDepth + 1, 100_000]
        let done = DispatchSemaphore(value: 0)
        let outcomes = Mutex<[String]>([])
        let thread = Thread {
            for depth in depths {
                do { _ = try JSONValue(parsing: Self.nested(depth)); outcomes.withLock { $0.append("parsed") } } catch {
                    outcomes.withLock { $0.append("\(error)") }
                }
            }
            done.signal()
        }
        thread.stackSize = 512 * 1024
        thread.start()
        done.wait()
        let seen = outcomes.withLock { $0 }
        #expect(seen.first == "parsed")
        #expect(seen.dropFirst().allSatisfy { $0.contains("nesting deeper than \(JSONParser.maxDepth)") }, "\(seen)")
    }

    @Test func deeplyNestedDictionariesAreAnError() throws {
        let db = try Database.inMemory(models: [DeepPrice.self])
        try db.write { tx in try tx.insert(DeepPrice(id: "p", amount: 1, list: [])) }
        var nested: Any = [Int]()
        for _ in 0..<(JSONParser.maxDepth + 10) { nested = [nested] }
        #expect(throws: StrataError.self) {
            try db.write { tx in try tx.update(DeepPrice.self, key: "p", fields: ["list": nested]) }
        }
    }

    /// A deeply nested `[String: Any]` or `[Any]` given as fields is refused at
    /// `JSONParser.maxDepth`, on a 512 KiB stack too: the depth check used to come after casts to
    /// `NSNull` and `NSNumber`, which bridge the whole nested value to Foundation first, recursively
    /// (a stack overflow at a few hundred levels on such a stack, found by the documentation hunt).
    @Test func deeplyNestedFieldsOnASmallStack() throws {
        let db = try Database.inMemory(models: [DeepPrice.self])
        try db.write { tx in try tx.insert(DeepPrice(id: "p", amount: 1, list: [])) }
        let done = DispatchSemaphore(value: 0)
        let outcomes = Mutex<[String]>([])
        let thread = Thread {
            for depth in [300, 1_000] {
                var dictionary: Any = 1
                var array: Any = [Int]()
                for _ in 0..<depth {
                    dictionary = ["a": dictionary]
                    array = [array]
                }
                for (field, value) in [("amount", dictionary), ("list", array)] {
                    do {
                        try db.write { tx in _ = try tx.update(DeepPrice.self, key: "p", fields: [field: value]) }
                        outcomes.withLock { $0.append("updated") }
                    } catch {
                        outcomes.withLock { $0.append("\(error)") }
                    }
                }
            }
            done.signal()
        }
        thread.stackSize = 512 * 1024
        thread.start()
        done.wait()
        let seen = outcomes.withLock { $0 }
        #expect(seen.count == 4 && seen.allSatisfy { $0.contains("nesting deeper than \(JSONParser.maxDepth)") }, "\(seen)")
    }

    @Test func decimalsBeyondTheirRangeAreRejected() throws {
        let db = try Database.inMemory(models: [DeepPrice.self])
        try db.write { tx in try tx.insert(DeepPrice(id: "p", amount: 1, list: [])) }
        let tooPrecise = String(repeating: "9", count: 40)
        #expect(
            throws: StrataError.typeMismatch(
                model: "DeepPrice", field: "amount",
                reason: "the string \"\(tooPrecise)\" has more than the 38 significant digits a Decimal holds")
        ) {
            try db.write { tx in try tx.update(DeepPrice.self, key: "p", json: Data("{\"amount\": \"\(tooPrecise)\"}".utf8)) }
        }
        #expect(throws: StrataError.typeMismatch(model: "DeepPrice", field: "amount", reason: "the number 1e-300 is outside the range of Decimal")) {
            try db.write { tx in try tx.update(DeepPrice.self, key: "p", json: Data(#"{"amount": 1e-300}"#.utf8)) }
        }
        try db.write { tx in try tx.update(DeepPrice.self, key: "p", json: Data(#"{"amount": "0.000000000000000000000000000000000123"}"#.utf8)) }
        #expect(try db.object(DeepPrice.self, key: "p")?.amount == Decimal(string: "0.000000000000000000000000000000000123"))
    }

    /// Zeros after the last other digit are not significant (review of 2026-12-07): a token amount
    /// sent with 18 fixed decimals, 39 digits in all, was refused as "more than 38 significant
    /// digits" while a Decimal holds it exactly, as it holds 1 followed by 39 zeros.
    @Test(arguments: [
        ("123456789012345678901.000000000000000000", "123456789012345678901"),
        ("1.0000000000000000000000000000000000000000", "1"),
        ("1" + String(repeating: "0", count: 39), "1e39"),
        ("00012345678901234567890123456789012345678.000", "12345678901234567890123456789012345678"),
    ])
    func decimalTextWithZerosAfterItsDigitsFits(text: String, value: String) throws {
        let db = try Database.inMemory(models: [DeepPrice.self])
        try db.write { tx in try tx.insert(DeepPrice(id: "p", amount: 1, list: [])) }
        try db.write { tx in try tx.update(DeepPrice.self, key: "p", json: Data("{\"amount\": \"\(text)\"}".utf8)) }
        let expected = try #require(Decimal(string: value, locale: Locale(identifier: "en_US_POSIX")))
        #expect(try db.object(DeepPrice.self, key: "p")?.amount == expected)
    }
}
