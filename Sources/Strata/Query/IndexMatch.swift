import Foundation

/// How far a query's conditions reach into a value index of one or more fields: equality (or an
/// IN list, or `== nil`) on a leading run of its fields, then a range on the next field, give key
/// ranges of the index (FORMAT.md §8.3: an entry's key is its fields' encodings one after another,
/// then the primary key, so every object with those leading values lies in one range).
///
/// `(roomId == 7 && createdAt > t)` on an index (roomId, createdAt): one range, from
/// `enc(7) + successor(enc(t))` up to the successor of `enc(7)`.
///
/// Ranges always hold every object the consumed conditions accept (a superset where an encoding
/// is coarser than the predicate, as for a string in a collation); `exact` says when they hold
/// nothing else and no condition is left over, so that no record needs reading to filter.
struct IndexMatch {
    let index: Int
    let ranges: [KeyRange]
    /// The consumed conditions, for `explain()`.
    let conditions: [Condition]
    let exact: Bool
    /// How many leading fields equalities fixed.
    let fixed: Int

    /// The most combinations of equality values a match spells out as separate ranges.
    static let maxRanges = 64

    /// The matches of every compound or collated value index (single-field indexes are the
    /// planner's own), where at least the first field is constrained.
    static func all<M: Model>(leaves: [Condition], info: ModelInfo<M>) -> [IndexMatch] {
        var found: [IndexMatch] = []
        let indexes = info.plannerIndexes
        for i in 0..<indexes.count where !indexes[i].isSingleValue && !indexes[i].isFullText {
            if let match = match(index: i, of: indexes[i], fixed: nil, leaves: leaves) { found.append(match) }
        }
        return found
    }

    /// The one range of index `index` whose first `fixed` fields are each fixed by an equality
    /// to one value, narrowed by a range on the next field if there is one: what an ordered walk
    /// of the remaining fields reads. Nil when the leading fields are not all fixed.
    static func walkRange(index i: Int, of index: PlannerIndex, fixed: Int, leaves: [Condition]) -> IndexMatch? {
        guard let match = match(index: i, of: index, fixed: fixed, leaves: leaves), match.ranges.count == 1 else { return nil }
        return match
    }

    /// The match of `index`, the model's `i`th. (Not generic over the model: it reads only what
    /// `PlannerIndex` worked out at open.)
    private static func match(index i: Int, of index: PlannerIndex, fixed: Int?, leaves: [Condition]) -> IndexMatch? {
        let schema = index.schema
        let paths = index.paths
        var prefixes: [[UInt8]] = [[]]
        var consumed: [Int] = []
        var exact = true
        var k = 0
        // Equality on the leading fields.
        while k < paths.count && k < (fixed ?? paths.count) {
            guard let type = index.types[k] else { return nil }
            let collation = type.unwrapped == .string ? schema.collation : nil
            var chosen: (leaf: Int, values: [[UInt8]])?
            for (j, leaf) in leaves.enumerated() where !consumed.contains(j) && leaf.path == paths[k] {
                guard let values = equalityValues(leaf, type: type, collation: collation) else { continue }
                if chosen == nil || values.count < chosen!.values.count { chosen = (j, values) }
            }
            guard let chosen, prefixes.count * max(1, chosen.values.count) <= maxRanges else { break }
            prefixes = prefixes.flatMap { prefix in chosen.values.map { prefix + $0 } }
            consumed.append(chosen.leaf)
            exact = exact && collation == nil && Planner.isExact(leaves[chosen.leaf], fieldType: type)
            k += 1
        }
        if let fixed, k < fixed || prefixes.count != 1 { return nil }
        // A range on the next field: every range condition on it, intersected.
        var lower: [UInt8]?
        var upper: [UInt8]?
        if k < paths.count, let type = index.types[k], !(type.unwrapped == .string && schema.collation != nil) {
            for (j, leaf) in leaves.enumerated() where !consumed.contains(j) && leaf.path == paths[k] && leaf.isRange {
                guard let ranges = Planner.ranges(for: leaf, fieldType: type, isIndex: true), ranges.count == 1 else { continue }
                if let l = ranges[0].lower, lower.map({ $0.lexicographicallyPrecedes(l) }) ?? true { lower = l }
                if let u = ranges[0].upper, upper.map({ u.lexicographicallyPrecedes($0) }) ?? true { upper = u }
                consumed.append(j)
                exact = exact && Planner.isExact(leaf, fieldType: type)
            }
        }
        if consumed.isEmpty && fixed == nil { return nil }
        let ranges = prefixes.map { prefix in
            KeyRange(
                lower: prefix.isEmpty && lower == nil ? nil : prefix + (lower ?? []),
                upper: upper.map { prefix + $0 } ?? successor(of: prefix))
        }
        return IndexMatch(
            index: i, ranges: ranges, conditions: consumed.sorted().map { leaves[$0] },
            exact: exact && consumed.count == leaves.count, fixed: k)
    }

    /// The encodings a field equals under `leaf` (`==`, an IN list, `== nil`), as the index holds
    /// the field: its key encoding, or under a collation its collation key's.
    private static func equalityValues(_ leaf: Condition, type: FieldType, collation: StringCollation?) -> [[UInt8]]? {
        func encode(_ value: Any) -> [UInt8]? {
            guard let collation else { return Planner.encode(value, for: type) }
            var constant: Any = value
            if let optional = value as? any OptionalValue {
                guard let wrapped = optional.wrappedAny else { return type.isOptional ? [0] : nil }
                constant = wrapped
            }
            // A string whose equal spellings may have other keys cannot be looked up by its
            // own: the index is not used for it (the predicate still decides, on every object).
            guard let string = constant as? String, collation.keyIsCanonical(string) else { return nil }
            var out: [UInt8] = type.isOptional ? [1] : []
            collation.appendEncodedKey(string, to: &out)
            return out
        }
        // NaN equals nothing, not even the stored NaNs the index holds under NaN's one encoding
        // (as in `Planner.ranges`): a NaN constant contributes no key.
        switch leaf {
        case let .compare(_, .eq, value):
            if Planner.isNaN(value) { return [] }
            return encode(value).map { [$0] }
        case let .inList(_, values):
            var out: [[UInt8]] = []
            for value in values where !Planner.isNaN(value) {
                guard let encoded = encode(value) else { return nil }
                out.append(encoded)
            }
            return out
        case .isNil(_, true):
            return type.isOptional ? [[0]] : nil
        default:
            return nil
        }
    }
}

extension Condition {
    /// The field a leaf condition tests (nil for `&&`, `||`, `!` and unknown expressions).
    var path: String? {
        switch self {
        case let .compare(p, _, _), let .isNil(p, _), let .inList(p, _), let .startsWith(p, _), let .contains(p, _),
            let .arrayContains(p, _), let .textSearch(p, _):
            return p
        default:
            return nil
        }
    }

    /// Whether this leaf bounds its field to a range: `<`, `<=`, `>`, `>=`, `!= nil`, a prefix.
    var isRange: Bool {
        switch self {
        case let .compare(_, op, _): return op != .eq && op != .ne
        case .isNil(_, false), .startsWith: return true
        default: return false
        }
    }
}
