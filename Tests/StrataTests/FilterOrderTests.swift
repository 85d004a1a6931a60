import Testing
import Foundation
@testable import Strata

/// A model with an index for each kind of helper filter, and its copy without indexes.
struct FODoc: Model {
    static let indexDescriptors: [IndexDescriptor<FODoc>] = [.on(\.group), .fullText(\.body)]
    var id: Int
    var group: Int
    var nick: String?
    var body: String
}

struct FOPlainDoc: Model {
    var id: Int
    var group: Int
    var nick: String?
    var body: String
}

/// Several filters are their `&&` in the order written, as Foundation evaluates it: an earlier
/// predicate that throws on an object fails the query whatever a later filter says of that
/// object, and a later one never sees the objects an earlier one rejects. The helper filters
/// (`filter(_:equals:)`, `search`) take their place in that order like `#Predicate`s, and an
/// index answers the same as a scan.
struct FilterOrderTests {
    func database() throws -> Database {
        let db = try Database.inMemory(models: [FODoc.self, FOPlainDoc.self])
        try db.write { tx in
            try tx.insert(FODoc(id: 1, group: 0, nick: nil, body: "zebra"))
            try tx.insert(FODoc(id: 2, group: 1, nick: "x", body: "hello"))
            try tx.insert(FOPlainDoc(id: 1, group: 0, nick: nil, body: "zebra"))
            try tx.insert(FOPlainDoc(id: 2, group: 1, nick: "x", body: "hello"))
        }
        return db
    }

    /// Every way of reading `results` fails.
    func expectFails<M: Model>(_ results: Results<M>, _ what: String) {
        #expect(throws: StrataError.self, "\(what): fetch()") { try results.fetch() }
        #expect(throws: StrataError.self, "\(what): fetchCount()") { try results.fetchCount() }
        #expect(results.error != nil, "\(what): error")
        #expect(results.isEmpty, "\(what): a failed query is empty")
    }

    /// Every way of reading `results` gives `ids`.
    func expectIDs<M: Model>(_ results: Results<M>, _ ids: [Int], _ what: String) where M.ID == Int {
        #expect((try? results.fetch().map(\.id)) == ids, "\(what): fetch()")
        #expect((try? results.fetchCount()) == ids.count, "\(what): fetchCount()")
        #expect(results.keys == ids, "\(what): keys")
        #expect(results.error == nil, "\(what): error")
    }

    @Test func aThrowingPredicateFirstFailsWhateverFollows() throws {
        let db = try database()
        let g = 1
        let p = #Predicate<FODoc> { $0.nick! == "x" }
        let plain = #Predicate<FOPlainDoc> { $0.nick! == "x" }
        // Foundation's own answer: the && throws on object 1.
        let both = #Predicate<FODoc> { $0.nick! == "x" && $0.group == g }
        #expect(throws: (any Error).self) { try both.evaluate(FODoc(id: 1, group: 0, nick: nil, body: "zebra")) }

        expectFails(db.objects(FODoc.self).filter(p).filter(#Predicate { $0.group == g }), "predicate, predicate")
        expectFails(db.objects(FODoc.self).filter(p).filter(\.group, equals: 1), "predicate, equals (indexed)")
        expectFails(db.objects(FODoc.self).filter(p).search(\.body, "hello"), "predicate, search (indexed)")
        expectFails(db.objects(FOPlainDoc.self).filter(plain).filter(\.group, equals: 1), "predicate, equals")
        expectFails(db.objects(FOPlainDoc.self).filter(plain).search(\.body, "hello"), "predicate, search")
        expectFails(db.objects(FODoc.self).filter(p).filter(\.body, matching: .equals("hello")), "predicate, matching")
        #expect(throws: StrataError.self) {
            try db.write { tx in try tx.count(FODoc.self, where: #Predicate { $0.nick! == "x" && $0.group == g }) }
        }
    }

    @Test func aThrowingPredicateAfterAFilterSeesOnlyWhatItPasses() throws {
        let db = try database()
        let g = 1
        let p = #Predicate<FODoc> { $0.nick! == "x" }
        let plain = #Predicate<FOPlainDoc> { $0.nick! == "x" }
        expectIDs(db.objects(FODoc.self).filter(#Predicate { $0.group == g }).filter(p), [2], "predicate, predicate")
        expectIDs(db.objects(FODoc.self).filter(\.group, equals: 1).filter(p), [2], "equals (indexed), predicate")
        expectIDs(db.objects(FODoc.self).search(\.body, "hello").filter(p), [2], "search (indexed), predicate")
        expectIDs(db.objects(FOPlainDoc.self).filter(\.group, equals: 1).filter(plain), [2], "equals, predicate")
        expectIDs(db.objects(FOPlainDoc.self).search(\.body, "hello").filter(plain), [2], "search, predicate")
        expectIDs(db.objects(FODoc.self).filter(\.body, matching: .equals("hello")).filter(p), [2], "matching, predicate")
        // A helper filter that cannot throw, even one the planner cannot read, leaves a later
        // condition its index.
        expectIDs(db.objects(FODoc.self).filter(\.body, matching: .endsWith("llo")).filter(#Predicate { $0.group == g }), [2], "endsWith, group")
    }

    /// The conditions before a throwing predicate narrow the candidates by their index; the
    /// ones after it cannot (the objects they exclude must still be evaluated).
    @Test func onlyTheConditionsBeforeAThrowingPredicateUseAnIndex() throws {
        let db = try database()
        let p = #Predicate<FODoc> { $0.nick! == "x" }
        let searchFirst = db.objects(FODoc.self).search(\.body, "hello").filter(p).explain()
        #expect(searchFirst.contains("(full text)"), "\(searchFirst)")
        let equalsFirst = db.objects(FODoc.self).filter(\.group, equals: 1).filter(p).explain()
        #expect(equalsFirst.hasPrefix("index"), "\(equalsFirst)")
        let searchAfter = db.objects(FODoc.self).filter(p).search(\.body, "hello").explain()
        #expect(searchAfter.hasPrefix("full scan"), "\(searchAfter)")
        let readable = db.objects(FODoc.self).filter(\.body, matching: .endsWith("llo")).filter(\.group, equals: 1).explain()
        #expect(readable.hasPrefix("index"), "\(readable)")
    }
}
