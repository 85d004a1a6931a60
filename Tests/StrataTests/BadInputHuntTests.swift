import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Strata

// Bad and extreme input from files, JSON and callers: each must give a typed error saying what
// was wrong and where, or the value `JSONDecoder` gives for the same document; never a crash.
// Risky inputs that once crashed the process are kept at the size that crashed it.

// MARK: Models

struct BIAddress: Codable, Sendable, Equatable {
    var city: String
    var zip: String?
}

enum BIStatus: String, Codable, Sendable { case on, off }

struct BIThing: Model, Equatable {
    var id: String
    var name: String
    var n: Int
    var price: Decimal?
    var when: Date?
    var link: URL?
    var blob: Data?
    var address: BIAddress?
    var status: BIStatus?
    var ratio: Float?
}

/// Runs `body` on a thread with a 512 KiB stack (Darwin's default for secondary threads and
/// Dispatch workers), where a recursion per level of hostile input overflows soonest.
func biOnSmallStack(_ body: @escaping @Sendable () -> Void) {
    let done = DispatchSemaphore(value: 0)
    let thread = Thread {
        body()
        done.signal()
    }
    thread.stackSize = 512 * 1024
    thread.start()
    done.wait()
}

/// What a call gave: its value, or its error's description.
func biOutcome<T>(_ body: () throws -> T) -> String {
    do { return "ok \(try body())" } catch { return "error \(error)" }
}

// MARK: Change messages

@Suite struct BadInputHuntChangeMessages {
    static func database() throws -> Database {
        let db = try Database.inMemory(models: [BIThing.self])
        try db.write { tx in try tx.insert(BIThing(id: "a", name: "A", n: 1, address: BIAddress(city: "Porto", zip: "4000"))) }
        return db
    }

    /// A `cleared` path is one JSON string, so the parser's depth bound does not see how many
    /// levels it names; `patch()` built one level of patch per part, recursively, and 100,000
    /// parts overflowed the stack (SIGSEGV), from JSON and from a message built in code alike.
    @Test func aClearedPathDeeperThanAnyModelIsAnError() throws {
        let db = try Self.database()
        for depth in [JSONParser.maxDepth + 1, 100_000] {
            let path = Array(repeating: "address", count: depth).joined(separator: ".")
            let built = ChangeMessage(.changed, model: "BIThing", key: .string("a"), cleared: [path])
            let parsed = try ChangeMessage.decode(
                json: Data(#"[{"msg": "changed", "collection": "BIThing", "id": "a", "cleared": ["\#(path)"]}]"#.utf8))
            for messages in [[built], parsed] {
                let outcome = biOutcome { try db.apply(messages) }
                #expect(outcome.hasPrefix("error invalid input: BIThing the string \"a\": cleared field \"address.address."), "\(outcome.prefix(300))")
                #expect(outcome.contains("is nested \(depth) levels deep, deeper than the \(JSONParser.maxDepth) allowed"), "\(outcome.prefix(300))")
            }
        }
        // Nothing changed; a path as deep as allowed is an ordinary unknown field.
        #expect(try db.object(BIThing.self, key: "a")?.address?.zip == "4000")
        let allowed = Array(repeating: "address", count: JSONParser.maxDepth).joined(separator: ".")
        let outcome = biOutcome { try db.apply([ChangeMessage(.changed, model: "BIThing", key: .string("a"), cleared: [allowed])]) }
        #expect(outcome == "error unknown fields for BIThing: address.address", "\(outcome.prefix(300))")
    }
}

extension BadInputHuntChangeMessages {
    /// A `JSONValue` built in code is not bounded by the parser. Its conversion for a patch
    /// recursed once per level without a bound, and at 1,000 levels overflowed a 512 KiB stack
    /// (SIGSEGV) in a change message's fields, in its key, and as a value of `fields: [String: Any]`,
    /// where the value itself was made and freed on that stack without trouble.
    @Test func deepJSONValuesBuiltInCodeAreAnError() throws {
        let db = try Self.database()
        let outcomes = Mutex<[String]>([])
        biOnSmallStack {
            var deep = JSONValue.int(1)
            for _ in 0..<1000 { deep = .array([deep]) }
            let inFields = biOutcome { try db.apply([ChangeMessage(.changed, model: "BIThing", key: .string("a"), fields: ["name": deep])]) }
            let asKey = biOutcome { try db.apply([ChangeMessage(.changed, model: "BIThing", key: deep)]) }
            let inDictionary = biOutcome { try db.write { tx in try tx.update(BIThing.self, key: "a", fields: ["name": deep]).object } }
            outcomes.withLock { $0 = [inFields, asKey, inDictionary] }
        }
        let seen = outcomes.withLock { $0 }
        let prefixes = ["error type mismatch in BIThing.name[0][0]", "error type mismatch in BIThing.id[0][0]", "error type mismatch in BIThing.name[0][0]"]
        #expect(seen.count == 3)
        for (outcome, prefix) in zip(seen, prefixes) {
            #expect(outcome.hasPrefix(prefix) && outcome.hasSuffix(": nesting deeper than \(JSONParser.maxDepth) levels"), "\(outcome.prefix(200))")
        }
        #expect(try db.object(BIThing.self, key: "a")?.name == "A")
    }
}
