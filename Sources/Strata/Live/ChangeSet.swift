/// The difference between two evaluations of a query, as a list view applies it (each array
/// ascending): remove the `deletions` (indices in the old results) from the highest down, then
/// insert the `insertions` (indices in the new results) from the lowest up; `modifications` are
/// indices in the new results of objects that stayed in place and whose stored value changed. An
/// object that moves in a sorted result is a deletion plus an insertion.
struct ChangeSet: Equatable, Sendable {
    var deletions: [Int] = []
    var insertions: [Int] = []
    var modifications: [Int] = []

    var isEmpty: Bool { deletions.isEmpty && insertions.isEmpty && modifications.isEmpty }

    /// One row of an evaluation: its primary key and a fingerprint of the stored value (or of the
    /// observed fields).
    struct Row: Equatable, Sendable {
        var key: [UInt8]
        var fingerprint: Int
    }

    /// The change from `old` to `new`. The objects kept in place are a longest run of common keys
    /// whose old order is preserved, so the change set is as small as a list of moves allows.
    static func between(_ old: [Row], _ new: [Row]) -> ChangeSet {
        var oldIndex: [ByteKey: Int] = [:]
        oldIndex.reserveCapacity(old.count)
        for (i, row) in old.enumerated() { oldIndex[ByteKey(row.key)] = i }
        // Common keys in new order, with their old positions.
        var common: [(new: Int, old: Int)] = []
        for (j, row) in new.enumerated() {
            if let i = oldIndex[ByteKey(row.key)] { common.append((j, i)) }
        }
        let kept = longestIncreasingRun(common.map(\.old))
        var keptOld = Set<Int>()
        var keptNew = Set<Int>()
        var change = ChangeSet()
        for k in kept {
            let pair = common[k]
            keptOld.insert(pair.old)
            keptNew.insert(pair.new)
            if old[pair.old].fingerprint != new[pair.new].fingerprint { change.modifications.append(pair.new) }
        }
        change.deletions = old.indices.filter { !keptOld.contains($0) }
        change.insertions = new.indices.filter { !keptNew.contains($0) }
        change.modifications.sort()
        return change
    }

    /// Positions (into `values`) of a longest strictly increasing subsequence.
    static func longestIncreasingRun(_ values: [Int]) -> [Int] {
        var tails: [Int] = []  // index into values of the smallest tail of each length
        var previous = [Int](repeating: -1, count: values.count)
        for (i, v) in values.enumerated() {
            var low = 0
            var high = tails.count
            while low < high {
                let mid = (low + high) / 2
                if values[tails[mid]] < v { low = mid + 1 } else { high = mid }
            }
            if low > 0 { previous[i] = tails[low - 1] }
            if low == tails.count { tails.append(i) } else { tails[low] = i }
        }
        var run: [Int] = []
        var k = tails.last ?? -1
        while k >= 0 {
            run.append(k)
            k = previous[k]
        }
        return run.reversed()
    }
}
