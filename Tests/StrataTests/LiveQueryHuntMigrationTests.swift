import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Strata

enum LQMigV1 {
    struct Task: Model, Equatable {
        static let modelName = "LQTask"
        static let indexes: [PartialKeyPath<Task> & Sendable] = [\.score]
        var id: Int
        var score: Int
        var junk: String
    }
}

enum LQMigV0 {
    /// V1 without `junk`: opened as V2, no field is removed, only `level` and `note` added.
    struct Task: Model, Equatable {
        static let modelName = "LQTask"
        static let indexes: [PartialKeyPath<Task> & Sendable] = [\.score]
        var id: Int
        var score: Int
    }
}

enum LQMigV1b {
    /// V1 plus a new optional field: additive, applies by itself.
    struct Task: Model, Equatable {
        static let modelName = "LQTask"
        static let indexes: [PartialKeyPath<Task> & Sendable] = [\.score]
        var id: Int
        var score: Int
        var junk: String
        var note: String?
    }
}

enum LQMigV2 {
    /// `level` is new: not optional in Swift, read with `decodeIfPresent ?? 3` (applies by itself,
    /// Migrations.md). `junk` is removed. `note` is a new optional.
    struct Task: Model, Equatable {
        static let modelName = "LQTask"
        static let indexes: [PartialKeyPath<Task> & Sendable] = [\.score]
        var id: Int
        var score: Int
        var level: Int
        var note: String?

        enum CodingKeys: String, CodingKey { case id, score, level, note }
        init(id: Int, score: Int, level: Int, note: String?) {
            self.id = id
            self.score = score
            self.level = level
            self.note = note
        }
        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            id = try c.decode(Int.self, forKey: .id)
            score = try c.decode(Int.self, forKey: .score)
            level = try c.decodeIfPresent(Int.self, forKey: .level) ?? 3
            note = try c.decodeIfPresent(String.self, forKey: .note)
        }
    }
}

final class LQBox<T: Sendable>: Sendable {
    let items = Mutex<[T]>([])
    func add(_ t: T) { items.withLock { $0.append(t) } }
    var all: [T] { items.withLock { $0 } }
}

/// Observers across schema changes (Migrations.md): after an additive migration, rewriting old
/// objects without changing their value (an upsert of the same object, a partial update or an
/// update to the default an old record reads) is no modification; a change to another handle's
/// stored schema fails the older handle's observers with `migrationRequired`.
@Suite struct LiveQueryHuntMigrationTests {
    /// With a removed field (`junk`) and without one: then the old records differ from the
    /// objects' encoding only by the defaulted `level` they lack, and every such rewrite was a
    /// modification (observers got `m[…]` and `.changed(…, ["level"])`).
    @Test(arguments: [true, false])
    func rewritingMigratedObjectsUnchangedReportsNoModification(removingAField: Bool) throws {
        let path = LQWait.tempPath("mig")
        defer { LQWait.remove(path) }
        do {
            if removingAField {
                let db = try Database(path: path, models: [LQMigV1.Task.self], options: StoreOptions(durability: .noSync))
                try db.write { tx in for i in 1...5 { try tx.insert(LQMigV1.Task(id: i, score: i % 3, junk: "j\(i)")) } }
                db.close()
            } else {
                let db = try Database(path: path, models: [LQMigV0.Task.self], options: StoreOptions(durability: .noSync))
                try db.write { tx in for i in 1...5 { try tx.insert(LQMigV0.Task(id: i, score: i % 3)) } }
                db.close()
            }
        }
        let db = try Database(path: path, models: [LQMigV2.Task.self], options: StoreOptions(durability: .noSync))
        defer { db.close() }
        let box = LQBox<String>()
        let q = DispatchQueue(label: "lq.mig")
        let t1 = db.objects(LQMigV2.Task.self).sorted(by: SortDescriptor(\.score)).observe(on: q) { change in
            switch change {
            case .initial(let r): box.add("initial \(r.map(\.id))")
            case .update(let r, let d, let i, let m): box.add("update \(r.map(\.id)) d\(d) i\(i) m\(m)")
            case .error(let e): box.add("error \(e)")
            }
        }
        let objBox = LQBox<String>()
        let t2 = db.observe(LQMigV2.Task.self, key: 2, on: q) { change in
            switch change {
            case .changed(let o, let f): objBox.add("changed \(o) \(f)")
            case .deleted: objBox.add("deleted")
            case .error(let e): objBox.add("error \(e)")
            }
        }
        defer { t1.invalidate(); t2.invalidate() }
        #expect(LQWait.until { box.all.count == 1 })
        let before = try db.objects(LQMigV2.Task.self).fetch()
        try db.write { tx in
            for o in before where o.id == 2 || o.id == 3 { try tx.upsert(o) }
        }
        try db.write { tx in _ = try tx.update(LQMigV2.Task.self, key: 4, json: Data(#"{"level": 3}"#.utf8)) }
        try db.write { tx in _ = try tx.update(LQMigV2.Task.self, key: 5) { $0.level = 3 } }
        try db.write { tx in _ = try tx.update(LQMigV2.Task.self, key: 1) { $0.score = 9 } }
        // Only the last write changed a value: object 1 moves to the end (score 1 → 9).
        #expect(LQWait.until { box.all.count >= 2 })
        #expect(box.all == ["initial [3, 1, 4, 2, 5]", "update [3, 4, 2, 5, 1] d[1] i[4] m[]"])
        #expect(objBox.all.isEmpty, "object 2 was rewritten with its own value: \(objBox.all)")
    }

    @Test func anotherHandleChangingTheSchemaFailsObservers() throws {
        let path = LQWait.tempPath("mig2")
        defer { LQWait.remove(path) }
        let a = try Database(path: path, models: [LQMigV1.Task.self], options: StoreOptions(durability: .noSync))
        defer { a.close() }
        try a.write { tx in for i in 1...5 { try tx.insert(LQMigV1.Task(id: i, score: i % 3, junk: "j\(i)")) } }
        let boxes = [LQBox<String>(), LQBox<String>()]
        let q = DispatchQueue(label: "lq.mig2")
        func log(_ box: LQBox<String>) -> @Sendable (ResultsChange<LQMigV1.Task>) -> Void {
            { change in
                switch change {
                case .initial(let r): box.add("initial \(r.map(\.id))")
                case .update(let r, let d, let i, let m): box.add("update \(r.map(\.id)) d\(d) i\(i) m\(m)")
                case .error(let e): box.add("error \(e)")
                }
            }
        }
        let t1 = a.objects(LQMigV1.Task.self).sorted(by: SortDescriptor(\.score)).observe(on: q, log(boxes[0]))
        let t2 = a.objects(LQMigV1.Task.self).sorted(by: SortDescriptor(\.junk)).observe(on: q, log(boxes[1]))
        defer { t1.invalidate(); t2.invalidate() }
        #expect(LQWait.until { boxes.allSatisfy { $0.all.count == 1 } })
        let b = try Database(path: path, models: [LQMigV1b.Task.self], options: StoreOptions(durability: .noSync))
        defer { b.close() }
        try b.write { tx in try tx.insert(LQMigV1b.Task(id: 9, score: 1, junk: "z", note: "hi")) }
        #expect(LQWait.until { boxes.allSatisfy { $0.all.count >= 2 } })
        for box in boxes {
            #expect(box.all.count == 2 && box.all[1].hasPrefix("error migration required"), "\(box.all)")
        }
        guard case .migrationRequired = a.objects(LQMigV1.Task.self).error else {
            Issue.record("queries of the older handle: \(String(describing: a.objects(LQMigV1.Task.self).error))")
            return
        }
    }
}
