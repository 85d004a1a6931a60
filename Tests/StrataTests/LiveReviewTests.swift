import Dispatch
import Foundation
import Testing

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
