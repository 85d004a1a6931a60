import Testing
import Foundation
import Dispatch
@testable import Strata

private struct GroupMemo: Model, Equatable {
    static let indexes: [PartialKeyPath<GroupMemo> & Sendable] = [\.text]
    var id: Int
    var text: String
}
private struct Refusal: Error {}

/// A group whose failing writers drop whole models and whose nested writes fail: each failure is
/// undone alone, and the file checks clean.
@Suite struct GroupCommitSavepointTests {
    @Test func groupWithDeleteAllInAFailingEntryAndNestedWrites() async throws {
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path); try? FileManager.default.removeItem(atPath: path + "-lock") }
        let db = try Database(path: path, models: [GroupMemo.self], options: StoreOptions(durability: .noSync))
        try await db.write { tx in for i in 0..<300 { try tx.insert(GroupMemo(id: 1000 + i, text: String(repeating: "x", count: 200) + "\(i)")) } }
        let results = await withTaskGroup(of: (Int, Bool).self) { group in
            for i in 0..<30 {
                group.addTask {
                    do {
                        try await db.write { tx in
                            try tx.insert(GroupMemo(id: i, text: "t\(i)"))
                            if i % 3 == 1 { _ = try tx.deleteAll(GroupMemo.self); try tx.insert(GroupMemo(id: 500 + i, text: "z")); throw Refusal() }
                            if i % 3 == 2 {
                                // nested sync write joins; its failure is undone alone
                                _ = try? db.write { inner in try inner.insert(GroupMemo(id: 700 + i, text: "n")); _ = try inner.deleteAll(GroupMemo.self); throw Refusal() }
                                try db.run(DBWrite.insert(GroupMemo(id: 800 + i, text: "r")))
                            }
                        }
                        return (i, true)
                    } catch { return (i, false) }
                }
            }
            var out: [Int: Bool] = [:]
            for await (i, ok) in group { out[i] = ok }
            return out
        }
        for i in 0..<30 { #expect(results[i] == (i % 3 != 1), "writer \(i)") }
        let ids = Set(try db.objects(GroupMemo.self).fetch().map(\.id))
        var expected = Set(1000..<1300)
        for i in 0..<30 where i % 3 != 1 { expected.insert(i) }
        for i in 0..<30 where i % 3 == 2 { expected.insert(800 + i) }
        #expect(ids == expected)
        #expect(db.objects(GroupMemo.self).filter(#Predicate { $0.text == "z" }).count == 0)
        let report = try db.store.check()
        #expect(report.isOK, "\(report.problems.prefix(3))")
    }
}
