import Testing
import Foundation
import Dispatch
import Synchronization
@testable import Strata

// Exploratory tests of the app-facing layer: composed operations, background writes, partial
// JSON updates and change messages, live observation. Randomised parts are model-based (a plain
// Swift dictionary is the reference), seeded, and sized by STRATA_APPHUNT_N.

struct AHPerson: Model, Equatable {
    static let indexes: [PartialKeyPath<AHPerson> & Sendable] = [\.name, \.age]
    static let uniqueIndexes: [PartialKeyPath<AHPerson> & Sendable] = [\.email]
    var id: String
    var name: String
    var email: String
    var age: Int
    var nick: String?
}

private func person(_ id: String, _ name: String, age: Int = 30, nick: String? = nil) -> AHPerson {
    AHPerson(id: id, name: name, email: "\(id)@x", age: age, nick: nick)
}

private func appHuntSize(_ fallback: Int) -> Int {
    ProcessInfo.processInfo.environment["STRATA_APPHUNT_N"].flatMap(Int.init) ?? fallback
}

@Suite struct AppHuntChangeMessages {
    func seeded() throws -> Database {
        let db = try Database.inMemory(models: [AHPerson.self])
        try db.write { tx in try tx.insert(contentsOf: [person("a", "Ana"), person("b", "Ben")]) }
        return db
    }

    /// The guide promises `tx.apply` is all-or-nothing like `db.apply` ("all of it, or, if one
    /// message throws, none of it. `tx.apply` does the same inside a transaction of yours"): a
    /// caller that catches its error and goes on must not commit the messages before the bad one.
    @Test func aCaughtBatchErrorLeavesNothingOfTheBatch() throws {
        let db = try seeded()
        let batch = [
            ChangeMessage(.changed, model: "AHPerson", key: .string("a"), fields: ["name": .string("Anabel")]),
            ChangeMessage(.added, model: "AHPerson", key: .string("c"), fields: ["name": .string("Cy"), "email": .string("c@x"), "age": .int(4)]),
            ChangeMessage(.removed, model: "AHPerson", key: .string("b")),
            ChangeMessage(.changed, model: "AHPerson", key: .string("zz"), fields: ["name": .string("nobody")]),  // notFound
        ]
        var caught: (any Error)?
        try db.write { tx in
            do { try tx.apply(batch) } catch { caught = error }
            try tx.insert(person("d", "Dee"))
        }
        #expect(caught != nil)
        #expect(try db.object(AHPerson.self, key: "a")?.name == "Ana")
        #expect(try db.object(AHPerson.self, key: "b") != nil)
        #expect(try db.object(AHPerson.self, key: "c") == nil)
        #expect(try db.object(AHPerson.self, key: "d") != nil)
    }
}
