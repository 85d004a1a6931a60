import Dispatch
import Foundation
import Testing
import Synchronization

@testable import Strata

// Live observation found wrong by a review of the layer (2026-12-07).

/// An account whose `init(from:)` refuses a negative balance.
struct LRAccount: Model, Equatable {
    var id: Int
    var name: String
    var balance: Int

    enum CodingKeys: String, CodingKey { case id, name, balance }

    init(id: Int, name: String, balance: Int) {
        self.id = id
        self.name = name
        self.balance = balance
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        name = try c.decode(String.self, forKey: .name)
        balance = try c.decode(Int.self, forKey: .balance)
        guard balance >= 0 else { throw DecodingError.dataCorruptedError(forKey: .balance, in: c, debugDescription: "negative balance") }
    }
}

struct LiveReviewTests {
    /// After a value that does not decode (an `.error`), the next change names every field that
    /// differs from the object last delivered: it named only those differing from the value that
    /// failed.
    @Test func aChangeAfterAnErrorListsFieldsSinceTheLastDelivery() throws {
        let db = try Database.inMemory(models: [LRAccount.self])
        try db.write { tx in try tx.insert(LRAccount(id: 1, name: "a", balance: 1)) }
        let inbox = Inbox<ObjectChange<LRAccount>>()
        let token = db.observe(LRAccount.self, key: 1, on: DispatchQueue(label: "observer")) { inbox.append($0) }
        try db.write { tx in try tx.update(LRAccount.self, key: 1) { $0.name = "b" } }
        #expect(inbox.wait { $0.count == 1 })
        try db.write { tx in _ = try tx.upsert(LRAccount(id: 1, name: "c", balance: -1)) }
        #expect(inbox.wait { $0.count == 2 })
        try db.write { tx in _ = try tx.upsert(LRAccount(id: 1, name: "c", balance: 5)) }
        #expect(inbox.wait { $0.count == 3 })
        let all = inbox.all
        guard all.count == 3, case .changed(_, let first) = all[0], case .error = all[1], case .changed(let object, let fields) = all[2] else {
            Issue.record("unexpected deliveries: \(all)")
            return
        }
        #expect(first == ["name"])
        #expect(object == LRAccount(id: 1, name: "c", balance: 5))
        #expect(fields.sorted() == ["balance", "name"])
        token.invalidate()
    }
}

/// An actor that owns the live values it updates on (the pattern the initializers' documentation
/// shows).
actor LROwner {
    var results: LiveResults<LRAccount>?
    var object: LiveObject<LRAccount>?
    func start(_ db: Database) {
        results = LiveResults(db.objects(LRAccount.self), updatingOn: self)
        object = LiveObject(LRAccount.self, key: 1, in: db, updatingOn: self)
    }
    func updates() -> (Int, Int) { (results?.updateCount ?? 0, object?.updateCount ?? 0) }
}

struct LiveLifecycleReviewTests {
    /// Whether `live` has applied `count` events within 20 s.
    static func waitFor(_ live: LiveObject<LRAccount>, _ count: Int) async throws -> Bool {
        for _ in 0..<4_000 {
            if live.updateCount >= count { return true }
            try await Task.sleep(nanoseconds: 5_000_000)
        }
        return false
    }

    /// An actor owning its `LiveResults` and `LiveObject` is freed when released, and with it the
    /// observations end: the database kept it alive through the observers (which held the actor
    /// they deliver to), with a snapshot and a reader slot each, until it closed.
    @Test func anActorOwningItsLiveValuesIsFreedAndTheirObservationsEnd() async throws {
        let db = try Database.inMemory(models: [LRAccount.self])
        try await db.write { tx in try tx.insert(LRAccount(id: 1, name: "a", balance: 1)) }
        weak var released: LROwner?
        do {
            let owner = LROwner()
            await owner.start(db)
            // Delivered once, so that the consumer and the observer have run.
            try await db.write { tx in try tx.update(LRAccount.self, key: 1) { $0.balance = 2 } }
            var delivered = false
            for _ in 0..<2_000 {
                let (r, o) = await owner.updates()
                if r >= 1 && o >= 2 { delivered = true; break }
                try await Task.sleep(nanoseconds: 5_000_000)
            }
            #expect(delivered)
            released = owner
        }
        var gone = false
        for _ in 0..<2_000 {
            // (Commits wake the consumers, which then find their actor gone.)
            try await db.write { tx in try tx.update(LRAccount.self, key: 1) { $0.balance += 1 } }
            if released == nil && db.observers.count == 0 && db.store.commitListenerCount == 0 { gone = true; break }
            try await Task.sleep(nanoseconds: 5_000_000)
        }
        #expect(gone, "owner alive: \(released != nil), observers \(db.observers.count), listeners \(db.store.commitListenerCount)")
    }

    /// A live object that appears with a value that does not decode shows the error; when it is
    /// fixed, the change names every field (nothing was delivered before), not the fields that
    /// differ from the value that failed.
    @Test func anObjectThatAppearedUndecodableNamesEveryFieldWhenFixed() async throws {
        let db = try Database.inMemory(models: [LRAccount.self])
        let actor = LROwner()
        let live = LiveObject(LRAccount.self, key: 1, in: db, updatingOn: actor)
        #expect(try await Self.waitFor(live, 1))
        try await db.write { tx in _ = try tx.upsert(LRAccount(id: 1, name: "c", balance: -1)) }
        #expect(try await Self.waitFor(live, 2))
        #expect(live.error != nil)
        try await db.write { tx in _ = try tx.upsert(LRAccount(id: 1, name: "c", balance: 5)) }
        #expect(try await Self.waitFor(live, 3))
        #expect(live.object == LRAccount(id: 1, name: "c", balance: 5))
        #expect(Set(live.changedFields) == ["id", "name", "balance"])
        live.stop()
    }

    /// Live values updating on an actor that nothing else holds (gone once they are made) keep
    /// updating: holding the actor weakly had stopped them.
    @Test func liveValuesOnAnActorNothingElseHoldsKeepUpdating() async throws {
        let db = try Database.inMemory(models: [LRAccount.self])
        let results = LiveResults(db.objects(LRAccount.self), updatingOn: LROwner())
        let object = LiveObject(LRAccount.self, key: 1, in: db, updatingOn: LROwner())
        try await db.write { tx in try tx.insert(LRAccount(id: 1, name: "a", balance: 1)) }
        var updated = false
        for _ in 0..<4_000 {
            if results.results.count == 1 && object.object?.name == "a" { updated = true; break }
            try await Task.sleep(nanoseconds: 5_000_000)
        }
        #expect(updated, "results \(results.results.count), object \(String(describing: object.object))")
        results.stop()
        object.stop()
    }

    /// A live object that appeared with a value that does not decode, then was deleted: the
    /// deletion arrives and clears the error (it was not news, since no value was ever read).
    @Test func anObjectDeletedAfterAnUndecodableValueClearsTheError() async throws {
        let db = try Database.inMemory(models: [LRAccount.self])
        let actor = LROwner()
        let live = LiveObject(LRAccount.self, key: 1, in: db, updatingOn: actor)
        #expect(try await Self.waitFor(live, 1))
        try await db.write { tx in _ = try tx.upsert(LRAccount(id: 1, name: "c", balance: -1)) }
        #expect(try await Self.waitFor(live, 2))
        #expect(live.error != nil)
        try await db.write { tx in _ = try tx.delete(LRAccount.self, key: 1) }
        #expect(try await Self.waitFor(live, 3))
        #expect(live.error == nil && live.object == nil)
        live.stop()
    }

    /// `observeCommits` on a concurrent queue runs its blocks one at a time and in commit order.
    @Test func commitObserversOnAConcurrentQueueRunInOrderOneAtATime() throws {
        let db = try Database.inMemory(models: [LRAccount.self])
        let running = Atomic<Int>(0)
        let inbox = Inbox<(UInt64, Bool)>()
        let token = db.observeCommits(on: .global()) { change in
            let overlapping = running.add(1, ordering: .sequentiallyConsistent).newValue > 1
            usleep(20_000)
            running.subtract(1, ordering: .sequentiallyConsistent)
            inbox.append((change.version, overlapping))
        }
        let commits = 60
        for i in 0..<commits { try db.write { tx in _ = try tx.upsert(LRAccount(id: 1, name: "n\(i)", balance: i)) } }
        #expect(inbox.wait { $0.count == commits })
        let all = inbox.all
        #expect(!all.contains { $0.1 }, "blocks ran at once")
        #expect(zip(all, all.dropFirst()).allSatisfy { $0.0 < $1.0 }, "versions out of order: \(all.map(\.0))")
        token.invalidate()
    }
}
