// A store whose every commit rewrites every object (`StrataTestHelper objects-churn`): pages freed by
// one commit are reused by the next but one, so a snapshot that no writer knows about (a read-only
// `Database` in another process) is overtaken within milliseconds. Every object says which round
// wrote it, and all its fields follow from its id and that round, so a reader can tell an exact
// object of one commit from anything else.

import Strata

/// The model both processes open.
public struct ChurnItem: Model, Equatable {
    public static let indexes: [PartialKeyPath<ChurnItem> & Sendable] = [\.group]
    public var id: Int
    public var round: Int
    /// `(id + round) % ChurnWorkload.groups`: an index whose entries all move every round.
    public var group: Int
    public var payload: String

    public init(id: Int, round: Int, group: Int, payload: String) {
        self.id = id
        self.round = round
        self.group = group
        self.payload = payload
    }

    /// Object `id` as round `round` writes it.
    public static func at(id: Int, round: Int) -> ChurnItem {
        ChurnItem(
            id: id, round: round, group: (id + round) % ChurnWorkload.groups,
            payload: String(repeating: "\(id)/\(round);", count: 1 + (id * 7 + round) % 24))
    }

    /// Whether every field is what round `round` writes for `id`.
    public var isExact: Bool { self == .at(id: id, round: round) }
}

public enum ChurnWorkload {
    /// Objects in the store (ids 0..<count), all rewritten by each commit.
    public static let count = 300
    public static let groups = 7

    /// How many objects of round `round` are in `group`.
    public static func groupCount(_ group: Int, round: Int) -> Int {
        (0..<count).count { ($0 + round) % groups == group }
    }

    /// Writes round `round`: every object rewritten.
    public static func write(round: Int, in tx: Transaction) throws {
        for id in 0..<count { try tx.upsert(ChurnItem.at(id: id, round: round)) }
    }
}
