// The object-layer workload the helper process writes (`StrataTestHelper objects-writer`) and the
// live-results tests check across processes: seeded transactions of inserts, updates, moves
// across sort positions and filters, identical rewrites and deletes of `SharedNote`s, defined once so
// that the test's model replays exactly what the other process committed.

import Strata

/// The model both processes open.
public struct SharedNote: Model, Equatable {
    public static let indexes: [PartialKeyPath<SharedNote> & Sendable] = [\.category, \.score]
    public var id: Int
    public var title: String
    public var category: Int
    public var score: Double
    public var tags: [String]
    /// Usually short; now and then long enough for an overflow page.
    public var body: String

    public init(id: Int, title: String, category: Int, score: Double, tags: [String], body: String) {
        self.id = id
        self.title = title
        self.category = category
        self.score = score
        self.tags = tags
        self.body = body
    }
}

public enum ObjectWorkload {
    /// Objects the store starts with (ids 0..<initialCount), written by `setUp`.
    public static let initialCount = 60

    public enum Operation: Sendable, Equatable {
        case upsert(SharedNote)
        case delete(Int)
    }

    /// The operations of transaction `index` of a run seeded `seed`, given the objects before it
    /// (the ids present decide what an update or a delete touches).
    public static func operations(seed: UInt64, index: Int, present: [Int: SharedNote]) -> [Operation] {
        var rng = Random(seed: seed &+ UInt64(index) &* 0x9E37_79B9_7F4A_7C15)
        var present = present
        var ops: [Operation] = []
        for _ in 0..<(1 + rng.below(4)) {
            defer { if let op = ops.last { apply([op], to: &present) } }
            let ids = present.keys.sorted()
            let roll = rng.below(10)
            if roll < 3 || ids.isEmpty {
                let id = 1_000 + index * 10 + rng.below(10)
                ops.append(.upsert(note(id: id, &rng)))
            } else if roll < 5 {
                ops.append(.delete(ids[rng.below(ids.count)]))
            } else if roll < 6, let same = present[ids[rng.below(ids.count)]] {
                ops.append(.upsert(same))  // identical: no change
            } else if let old = present[ids[rng.below(ids.count)]] {
                var new = old
                switch rng.below(4) {
                case 0: new.score = Double(rng.below(100)) / 10  // moves in a sort by score
                case 1: new.category = rng.below(5)  // in or out of a filter
                case 2: new.title = "t\(rng.below(50))"; new.tags = rng.below(2) == 0 ? [] : ["x"]
                default: new.body = rng.below(6) == 0 ? String(repeating: "b", count: 5_000 + rng.below(3_000)) : "body \(rng.below(9))"
                }
                ops.append(.upsert(new))
            }
        }
        return ops
    }

    /// The starting objects.
    public static func initialNotes(seed: UInt64) -> [SharedNote] {
        var rng = Random(seed: seed)
        return (0..<initialCount).map { note(id: $0, &rng) }
    }

    static func note(id: Int, _ rng: inout Random) -> SharedNote {
        SharedNote(
            id: id, title: "t\(rng.below(50))", category: rng.below(5), score: Double(rng.below(100)) / 10,
            tags: rng.below(3) == 0 ? ["x", "y"] : [], body: rng.below(8) == 0 ? String(repeating: "a", count: 6_000) : "body")
    }

    /// Applies operations to a model of the objects.
    public static func apply(_ ops: [Operation], to model: inout [Int: SharedNote]) {
        for op in ops {
            switch op {
            case .upsert(let note): model[note.id] = note
            case .delete(let id): model[id] = nil
            }
        }
    }

    /// Applies operations in a write transaction.
    public static func apply(_ ops: [Operation], in tx: Transaction) throws {
        for op in ops {
            switch op {
            case .upsert(let note): try tx.upsert(note)
            case .delete(let id): _ = try tx.delete(SharedNote.self, key: id)
            }
        }
    }

    /// SplitMix64.
    struct Random {
        var state: UInt64
        init(seed: UInt64) { state = seed }
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    }
}
