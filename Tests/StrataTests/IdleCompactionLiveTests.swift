import Dispatch
import Foundation
import StrataStorage
import Testing

@testable import Strata

/// Idle-time compaction's commits (StrataStorage's IdleCompaction.swift) move pages, not objects:
/// an observer hears nothing from them, and what it holds stays exact.
struct IdleCompactionLiveTests {
    @Test func idleCompactionDeliversNothingToObservers() throws {
        let path = NSTemporaryDirectory() + "strata-idle-live-\(UUID().uuidString).strata"
        defer { for suffix in ["", "-lock"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = .milliseconds(50)
        let db = try Database(path: path, models: [Item.self], options: options)
        let items = QueryTests.makeItems(6_000, seed: 5)
        try db.write { tx in try tx.insert(contentsOf: items) }

        let inbox = Inbox<Delivery>()
        // (Not kept in a variable: a `Results` holds the snapshot it was made on, and the pages
        // the deletes below free could not be reused while it lived: compaction would have
        // nothing to move once the index entries, written in key order, leave no holes of their own.)
        let token = inbox.observe(
            db.objects(Item.self).filter(#Predicate { $0.category < 3 }).sorted(by: SortDescriptor(\.id)), context: "idle compaction")
        defer { token.invalidate() }
        #expect(inbox.wait { $0.count == 1 })

        // Nine objects in ten go: the file is left with holes, and the writes stop.
        try db.write { tx in
            for item in items where item.id % 10 != 0 { try tx.delete(Item.self, key: item.id) }
        }
        let afterDeletes = db.store.latestVersion
        #expect(inbox.wait { $0.count == 2 })
        // Commits now come from the background thread alone.
        let deadline = Date().addingTimeInterval(20)
        while db.store.latestVersion == afterDeletes && Date() < deadline { usleep(10_000) }
        #expect(db.store.latestVersion > afterDeletes, "no idle-time compaction commit in 20 s")
        usleep(300_000)  // time for a delivery, were there one
        let deliveries = inbox.all
        #expect(deliveries.count == 2, "idle compaction delivered \(deliveries.count - 2) more change sets")
        let expected = items.filter { $0.id % 10 == 0 && $0.category < 3 }.sorted { $0.id < $1.id }
        #expect(deliveries.last?.objects == expected)
        // A query made now reads the same.
        let now = try db.objects(Item.self).filter(#Predicate { $0.category < 3 }).sorted(by: SortDescriptor(\.id)).fetch()
        #expect(now.map(\.id) == expected.map(\.id))
        #expect(now == expected)
    }
}
