import Foundation

// Chooses how a query reaches its candidates: the primary-key tree or a secondary index, over
// key ranges derived from the predicate's conditions, or a full scan. Several conditions joined by
// && use the most selective access (estimated by the entries in its ranges, from the branches'
// counts, capped), or one range where two bounds fall on one field; || unions accesses when
// every branch has one. A compound index serves equality on a leading run of its fields plus
// a range on the next (IndexMatch.swift); a full-text index serves a search. A sort on the
// trailing fields of an index (after fields fixed by equality) whose order is the key order (a
// number, date or bool, or a string in the index's collation) walks that index in order and stops
// as soon as the window is full.

/// A half-open byte range of keys: lower inclusive, upper exclusive; nil is unbounded.
struct KeyRange {
    var lower: [UInt8]?
    var upper: [UInt8]?

    /// Keys starting with `prefix`.
    static func prefix(_ prefix: [UInt8]) -> KeyRange { KeyRange(lower: prefix, upper: successor(of: prefix)) }
}

/// The smallest byte string greater than every string starting with `prefix` (nil: none).
func successor(of prefix: [UInt8]) -> [UInt8]? {
    var bytes = prefix
    while let last = bytes.last {
        if last < 0xFF {
            bytes[bytes.count - 1] = last + 1
            return bytes
        }
        bytes.removeLast()
    }
    return nil
}

/// What the planner reads of one declared index on every query, worked out once per model when
/// the database opens (`ModelInfo.plannerIndexes`): reading `ModelInfo.indexes`, an array of
/// tuples holding a key path generic over the model, looks the tuple's metadata up at run time on
/// every access, and each field's type is a dictionary lookup by its path.
struct PlannerIndex {
    let schema: IndexSchema
    /// The indexed fields' paths, in order (`schema.paths`, which builds an array on each call).
    let paths: [String]
    /// The stored type of each of `paths` (nil: no stored field has the path).
    let types: [FieldType?]
    /// How each of `paths` orders as a trailing field of an index walked for a sort.
    let walkOrders: [WalkOrder]
    let isSingleValue: Bool
    let isFullText: Bool

    /// Whether an index's key order is a sort's order on one field (see `Planner.orderedWalk`).
    enum WalkOrder {
        /// Never: no stored field, a field reached through an optional struct, an array, or a
        /// type whose key encoding does not order as its `<`.
        case no
        /// Always (a number, date or bool).
        case keyOrdered
        /// A string: when the index has a collation and the sort is in the same one.
        case string
    }

    init(_ schema: IndexSchema, fieldTypes: [String: FieldType]) {
        self.schema = schema
        paths = schema.paths
        types = paths.map { path in
            guard let type = fieldTypes[path] else { return nil }
            // A `taggedValues` index holds a value reached through an optional struct as the
            // optional the key path reads (FORMAT.md §8.3): constants are encoded as for an optional field.
            if case .array = type.unwrapped { return type }
            if schema.isTagged, reachesThroughOptional(path, typeAt: { fieldTypes[$0] }) { return .optional(type) }
            return type
        }
        walkOrders = paths.map { path in
            guard let type = fieldTypes[path], !reachesThroughOptional(path, typeAt: { fieldTypes[$0] }) else { return .no }
            if case .array = type.unwrapped { return .no }
            if type.unwrapped == .string { return .string }
            return type.isKeyOrdered ? .keyOrdered : .no
        }
        isSingleValue = schema.isSingleValue
        isFullText = schema.isFullText
    }
}

/// Where candidates come from.
enum AccessSource {
    case primary
    case index(Int)
    /// A full-text index, for a search (its ranges are unused: TextIndexReader finds the keys).
    case text(Int, ParsedSearch)
}

struct Access {
    var source: AccessSource
    var ranges: [KeyRange]
    /// The conditions the ranges stand for, described only by `explain()` (describing a
    /// condition formats its constants: thousands of instructions on every planned query).
    var conditions: [Condition]
}

/// An index walked in order for the sort: the entries of `range`, ascending unless `reverse`.
struct OrderedWalk {
    var index: Int
    var reverse: Bool
    var range: KeyRange
    /// The conditions the range stands for, for `explain()`.
    var conditions: [Condition]
    /// The range holds exactly the matches (every condition consumed exactly): no record needs
    /// reading to filter.
    var exact: Bool
}

struct Plan {
    /// Empty: full scan of the primary tree.
    var accesses: [Access] = []
    /// Walk this index in order for the sort.
    var walk: OrderedWalk?
    var estimate: Int?
    /// The accesses return exactly the matches: no residual filter needed.
    var exact = false
}

enum Planner {
    static let estimateCap = 10_000

    static func plan<M: Model, S: TreeSource>(_ query: Query<M>, info: ModelInfo<M>, source: S) throws -> Plan {
        try plan(query, conditions: query.conditions, info: info, source: source)
    }

    /// The plan for `query` whose `conditions` the caller translated already (translating walks
    /// every predicate's expression tree, so an evaluation does it once).
    static func plan<M: Model, S: TreeSource>(_ query: Query<M>, conditions: [Condition], info: ModelInfo<M>, source: S) throws -> Plan {
        var plan = Plan()
        // Each condition's conjuncts, split once for the three uses below.
        let conjuncts = conditions.map(\.conjuncts)
        if let best = try choose(all: conditions, info: info, source: source) {
            plan.accesses = best.accesses
            plan.estimate = best.estimate
            plan.exact = answersExactly(best.accesses, conjuncts.flatMap { $0 }, info: info)
        }
        // A compound or collated index that consumes more of the conditions may do better.
        // (Estimates are the entries in the ranges, up to 10,000, from the branches' counts.)
        // Only the conjuncts before any that may throw can narrow the candidates (see `mayThrow`).
        // A match is exact only when its leaves are every conjunct.
        var leaves: [Condition] = []
        let conjunctCount = conjuncts.reduce(0) { $0 + $1.count }
        leaves: for split in conjuncts {
            for leaf in split {
                if leaf.mayThrow { break leaves }
                leaves.append(leaf)
            }
        }
        let allLeaves = leaves.count == conjunctCount
        let found = IndexMatch.all(leaves: leaves, info: info)
        let matches = found.filter { !$0.ranges.isEmpty }
        for match in matches {
            let access = Access(source: .index(match.index), ranges: match.ranges, conditions: match.conditions)
            if plan.accesses.isEmpty && matches.count == 1 {
                plan.accesses = [access]
                plan.exact = match.exact && allLeaves
                break
            }
            let current = try plan.estimate ?? estimate(plan.accesses, info: info, source: source)
            let estimate = try estimate(access, info: info, source: source)
            if plan.accesses.isEmpty || estimate < current || (estimate == current && match.exact && !plan.exact) {
                plan.accesses = [access]
                plan.estimate = estimate
                plan.exact = match.exact && allLeaves
            } else {
                plan.estimate = current
            }
        }
        if !query.isDistinct, query.ranking == nil,
            var walk = try orderedWalk(query, leaves: leaves, matches: found, info: info, source: source, plan: &plan)
        {
            plan.accesses = []
            plan.exact = false  // the walk says itself whether it is exact
            walk.exact = walk.exact && allLeaves
            plan.walk = walk
        }
        // Every declared index has its tree; one that is missing (a damaged file) answers nothing,
        // so the query scans and filters every condition instead of finding no match.
        var used = plan.walk.map { [$0.index] } ?? []
        for access in plan.accesses { if case .index(let i) = access.source { used.append(i) } }
        for i in used where try source.tree(named: info.indexTreeNames[i]) == nil { return Plan() }
        return plan
    }

    /// The best index walked in the sort's order, when one serves it and is no worse than the
    /// access chosen: the sort names an index's trailing fields, each with the same direction and
    /// key-ordered (a string in the index's collation, when the query sorts in that collation),
    /// and the fields before them are fixed by equality.
    private static func orderedWalk<M: Model, S: TreeSource>(
        _ query: Query<M>, leaves: [Condition], matches: [IndexMatch], info: ModelInfo<M>,
        source: S, plan: inout Plan
    ) throws -> OrderedWalk? {
        // (Positions, not iteration: the descriptors' type depends on the model, and a generic
        // iterator compiled unspecialized costs more than the loop's body.)
        if !query.isSorted { return nil }
        let sort = query.sort
        let order = sort[0].order
        var sortPaths: [String] = []
        sortPaths.reserveCapacity(sort.count)
        for s in 0..<sort.count {
            let descriptor = sort[s]
            guard descriptor.order == order, let keyPath = descriptor.keyPath, ResultOrder<M>.readsKeyOrderedType(keyPath),
                let path = fieldPath(of: keyPath)
            else { return nil }
            sortPaths.append(path)
        }
        let reverse = order == .reverse
        var candidates: [OrderedWalk] = []
        let indexes = info.plannerIndexes
        for i in 0..<indexes.count where !indexes[i].isFullText {
            let index = indexes[i]
            // The sort names the index's trailing fields.
            let fixed = index.paths.count - sortPaths.count
            guard fixed >= 0, index.paths[fixed...].elementsEqual(sortPaths) else { continue }
            // The sort's collation must be the index's for strings; other fields must be key-ordered.
            let walkable = index.walkOrders[fixed...].allSatisfy { order in
                switch order {
                case .no: return false
                case .keyOrdered: return true
                case .string: return index.schema.collation != nil && index.schema.collation == query.collation
                }
            }
            guard walkable else { continue }
            // The match found above serves when it fixed exactly the leading fields.
            let known = matches.first { $0.index == i && $0.fixed == fixed && $0.ranges.count == 1 }
            guard let match = known ?? IndexMatch.walkRange(index: i, of: index, fixed: fixed, leaves: leaves) else { continue }
            candidates.append(OrderedWalk(index: i, reverse: reverse, range: match.ranges[0], conditions: match.conditions, exact: match.exact))
        }
        if candidates.isEmpty { return nil }
        // Nothing to compare with, or the access chosen is this walk's own index over the same
        // conditions: walk without estimating.
        if plan.accesses.isEmpty && candidates.count == 1 { return candidates[0] }
        if plan.accesses.count == 1, case .index(let i) = plan.accesses[0].source,
            let same = candidates.first(where: { walk in
                walk.index == i && plan.accesses[0].conditions.allSatisfy { c in walk.conditions.contains { $0.isSame(as: c) } }
            })
        {
            return same
        }
        var best: (walk: OrderedWalk, estimate: Int)?
        for walk in candidates {
            let estimate = try estimate(Access(source: .index(walk.index), ranges: [walk.range], conditions: []), info: info, source: source)
            if best == nil || estimate < best!.estimate { best = (walk, estimate) }
        }
        guard let best else { return nil }
        if plan.accesses.isEmpty { return best.walk }
        let current = try plan.estimate ?? estimate(plan.accesses, info: info, source: source)
        plan.estimate = current
        // Walking is the better plan unless another access is clearly more selective.
        if best.estimate <= current || current > 1000 { return best.walk }
        return nil
    }

    /// Whether the key ranges of this single condition select exactly the objects Swift's
    /// evaluation would: integers, bools, strings and UUIDs compare the same as their key encodings
    /// (strings after NFC), and so do floating point and dates, whose ranges leave NaN out (and
    /// -0.0 is stored as 0.0, which it equals); arrays and prefixes are excluded.
    static func isExact<M: Model>(_ condition: Condition, info: ModelInfo<M>) -> Bool {
        if case let .textSearch(p, _) = condition { return info.plannerIndexes.contains { $0.isFullText && $0.schema.path == p } }
        guard let path = condition.path else { return false }
        return isExact(condition, fieldType: info.type(atPath: path))
    }

    /// `isExact` for a leaf condition other than a search, on a field stored as `type` (nil: no
    /// stored field): for callers that know the field's type already.
    static func isExact(_ condition: Condition, fieldType type: FieldType?) -> Bool {
        let path: String
        switch condition {
        case let .compare(p, op, _):
            if op == .ne { return false }
            path = p
        case let .inList(p, _):
            path = p
        case let .isNil(p, _):
            path = p
        default:
            return false
        }
        guard let type else { return false }
        if path.isNestedPath { return false }
        switch type.unwrapped {
        case .int, .bool, .string, .uuid, .double, .float, .date: return true
        case .enumeration(let raw):
            if case .compare(_, let op, _) = condition, op != .eq { return false }
            return raw != .double && raw != .float
        default: return false
        }
    }

    /// Whether `accesses` read exactly the objects matching every one of `conjuncts`: one access
    /// whose conditions are all of them (its ranges the intersection of theirs, on the key or on
    /// one index whose entries name each object once: `intersection`), each exact on its own.
    /// Each conjunct then is a leaf, so the access's conditions, drawn from distinct leaves, are
    /// all of them when they are as many.
    private static func answersExactly<M: Model>(_ accesses: [Access], _ conjuncts: [Condition], info: ModelInfo<M>) -> Bool {
        guard accesses.count == 1, accesses[0].conditions.count == conjuncts.count else { return false }
        return conjuncts.allSatisfy { isExact($0, info: info) }
    }

    private struct Choice {
        var accesses: [Access]
        /// Nil until two choices are compared.
        var estimate: Int?
    }

    /// `choose` of the `&&` of `conditions`, left to right as `choose` takes an `&&` (whose left
    /// side is the conditions before), without building it: a query's filters chained one by one
    /// in a loop made a chain as deep as their number, and each step of it a frame of recursion.
    private static func choose<M: Model, S: TreeSource>(all conditions: [Condition], info: ModelInfo<M>, source: S) throws -> Choice? {
        guard let first = conditions.first else { return nil }
        var choice = try choose(first, info: info, source: source)
        var leftMayThrow = first.mayThrow
        for condition in conditions.dropFirst() {
            let right = leftMayThrow ? nil : try choose(condition, info: info, source: source)
            choice = try better(choice, right, info: info, source: source)
            leftMayThrow = leftMayThrow || condition.mayThrow
        }
        return choice
    }

    /// The access for both sides of an `&&`: their ranges' overlap, or the one reading fewer.
    private static func better<M: Model, S: TreeSource>(_ left: Choice?, _ right: Choice?, info: ModelInfo<M>, source: S) throws -> Choice? {
        switch (left, right) {
        case var (l?, r?):
            if let both = intersection(l, r, info: info) { return both }
            l.estimate = try l.estimate ?? estimate(l.accesses, info: info, source: source)
            r.estimate = try r.estimate ?? estimate(r.accesses, info: info, source: source)
            return l.estimate! <= r.estimate! ? l : r
        case let (l?, nil): return l
        case let (nil, r?): return r
        default: return nil
        }
    }

    private static func choose<M: Model, S: TreeSource>(_ condition: Condition, info: ModelInfo<M>, source: S) throws -> Choice? {
        switch condition {
        case let .and(a, b):
            let left = try choose(a, info: info, source: source)
            // Objects the right side's access skips still evaluate the left side, which may throw.
            let right = a.mayThrow ? nil : try choose(b, info: info, source: source)
            return try better(left, right, info: info, source: source)
        case let .or(a, b):
            guard let left = try choose(a, info: info, source: source), let right = try choose(b, info: info, source: source) else { return nil }
            return Choice(accesses: left.accesses + right.accesses, estimate: nil)
        case .not, .unknown, .opaque, .contains:
            return nil
        case let .textSearch(path, search):
            guard let i = info.plannerIndexes.firstIndex(where: { $0.isFullText && $0.schema.path == path }),
                try source.tree(named: info.indexTreeNames[i]) != nil
            else { return nil }
            return Choice(accesses: [Access(source: .text(i, search), ranges: [], conditions: [condition])], estimate: nil)
        default:
            guard let access = access(for: condition, info: info) else { return nil }
            return Choice(accesses: [access], estimate: nil)
        }
    }

    /// Two bounds on one field (`n >= a && n <= b`) as one range: both sides read one range of
    /// the primary key or of one index whose entries name each object once (not an array's), so
    /// a match's one key lies in both, and in their overlap (exact when each side is:
    /// `answersExactly`). Nil when the sides read anything else.
    private static func intersection<M: Model>(_ l: Choice, _ r: Choice, info: ModelInfo<M>) -> Choice? {
        guard l.accesses.count == 1, r.accesses.count == 1 else { return nil }
        let a = l.accesses[0], b = r.accesses[0]
        guard a.ranges.count == 1, b.ranges.count == 1 else { return nil }
        switch (a.source, b.source) {
        case (.primary, .primary): break
        case let (.index(i), .index(j)) where i == j && !info.indexIsArray[i]: break
        default: return nil
        }
        let x = a.ranges[0], y = b.ranges[0]
        // An open bound is nil: the higher lower bound and the lower upper bound.
        var lower = x.lower
        if let other = y.lower, lower.map({ $0.lexicographicallyPrecedes(other) }) ?? true { lower = other }
        var upper = x.upper
        if let other = y.upper, upper.map({ other.lexicographicallyPrecedes($0) }) ?? true { upper = other }
        // Bounds that cross leave no key: an empty range at the lower bound.
        if let l = lower, let u = upper, !l.lexicographicallyPrecedes(u) { upper = l }
        return Choice(
            accesses: [Access(source: a.source, ranges: [KeyRange(lower: lower, upper: upper)], conditions: a.conditions + b.conditions)], estimate: nil)
    }

    /// The candidates of a union of accesses, estimated (each counted up to the cap).
    /// Whether `value` (or the value it wraps) is a raw-value type that a field of `fieldType`
    /// holds in another form than its raw value's: a field not stored as an enum, and a type whose
    /// own `encode(to:)` writes something else than its raw value.
    private static func isStoredOtherThanItsRawValue(_ value: Any, in fieldType: FieldType) -> Bool {
        if case .enumeration = fieldType.unwrapped { return false }
        guard !KeyEncoding.isCommonPlainType(type(of: value)) else { return false }
        if let optional = value as? any OptionalValue {
            return optional.wrappedAny.map { isStoredOtherThanItsRawValue($0, in: fieldType) } ?? false
        }
        guard let raw = value as? any RawRepresentable else { return false }
        // What its `encode(to:)` hands a single-value container (no JSON made: this runs for every
        // typed-id constant a query plans), against its raw value.
        let capture = SingleValueCapture(context: EncodingContext(model: "", path: []))
        guard let encodable = value as? any Encodable, (try? encodable.encode(to: capture)) != nil,
            let written = capture.value as? AnyHashable, let rawValue = raw.rawValue as? AnyHashable
        else { return true }
        return written != rawValue
    }

    private static func estimate<M: Model, S: TreeSource>(_ accesses: [Access], info: ModelInfo<M>, source: S) throws -> Int {
        try accesses.reduce(0) { $0 + (try estimate($1, info: info, source: source)) }
    }

    /// An access for one leaf condition, if its field is the key or indexed.
    private static func access<M: Model>(for condition: Condition, info: ModelInfo<M>) -> Access? {
        let path: String
        switch condition {
        case let .compare(p, _, _), let .isNil(p, _), let .inList(p, _), let .startsWith(p, _), let .arrayContains(p, _): path = p
        default: return nil
        }
        let source: AccessSource
        let fieldType: FieldType
        if path == info.keyPath {
            source = .primary
            // A computed id has no stored field; only its optional-ness matters for encoding constants.
            fieldType = info.type(atPath: path) ?? ((M.ID.self is any OptionalValue.Type) ? .optional(.string) : .string)
        } else if let i = info.plannerIndexes.firstIndex(where: { $0.isSingleValue && $0.schema.path == path }), let type = info.plannerIndexes[i].types[0] {
            source = .index(i)
            fieldType = type
        } else {
            return nil
        }
        guard let ranges = ranges(for: condition, fieldType: fieldType, isIndex: { if case .index = source { return true } else { return false } }()) else {
            return nil
        }
        return Access(source: source, ranges: ranges, conditions: [condition])
    }

    /// The key ranges of one leaf condition on a field stored as `fieldType` (in the field's own
    /// key encoding, as a single-field index or the primary key holds it), or nil when no range
    /// holds every value the condition accepts.
    static func ranges(for condition: Condition, fieldType: FieldType, isIndex: Bool) -> [KeyRange]? {
        let isArray: Bool
        if case .array = fieldType.unwrapped { isArray = true } else { isArray = false }
        var ranges: [KeyRange] = []
        // Floating point and dates: NaN equals nothing and compares false with everything, while
        // its one encoding sorts above every number. So a NaN constant selects nothing, and a
        // range open above stops before NaN: then the ranges hold exactly the matches. Except
        // that `Date` defines only `<`, so its `<=` and `>=` are `!(b < a)` and `!(a < b)`: a
        // date of NaN is `<=` and `>=` every date, and every date is `<=` and `>=` it.
        let floating: Bool
        switch fieldType.unwrapped {
        case .double, .float, .date: floating = true
        default: floating = false
        }
        switch condition {
        case let .compare(_, op, value):
            if isArray { return nil }
            let isDate = fieldType.unwrapped == .date
            let inclusive = op == .le || op == .ge
            if floating && isNaN(value) { return op == .ne || (isDate && inclusive) ? nil : [] }
            guard let encoded = encode(value, for: fieldType, inIndex: isIndex) else { return nil }
            let notNil: [UInt8]? = fieldType.isOptional ? [1] : nil
            let end: [UInt8]? = fieldType.isOptional ? [2] : nil
            let top: [UInt8]? = floating && !(isDate && inclusive) ? (notNil ?? []) + nanKey : end
            switch op {
            case .eq: ranges = [.prefix(encoded)]
            case .ne: return nil
            default:
                if case .enumeration = fieldType.unwrapped { return nil }
                // Swift's String `<` is not a total order on this toolchain ("éb" and
                // "e\u{301}" are neither <, == nor >), so no range of the index's (total) NFC
                // order is sure to hold every string the predicate accepts: the predicate decides.
                if fieldType.unwrapped == .string || fieldType.unwrapped == .url { return nil }
                // A Decimal's key is the nearest Double as `NSDecimalNumber.doubleValue` computes
                // it, which is neither exact (0.1 and 0.10000000000000000001 share a key) nor
                // monotonic (0.21000000000000000000001 gets a smaller key than 0.21): no range of
                // keys is sure to hold every decimal the predicate accepts. Equality keeps its
                // prefix (equal decimals have one representation, so one key) and the residual
                // filter decides.
                if fieldType.unwrapped == .decimal { return nil }
                switch op {
                case .lt: ranges = [KeyRange(lower: notNil, upper: encoded)]
                case .le:
                    ranges = [KeyRange(lower: notNil, upper: successor(of: encoded))]
                    // The dates of NaN, above every other.
                    if isDate { ranges.append(KeyRange(lower: (notNil ?? []) + nanKey, upper: end)) }
                case .gt:
                    // Nothing sorts above a value whose encoding has no successor (the type's maximum).
                    guard let above = successor(of: encoded) else { ranges = []; break }
                    ranges = [KeyRange(lower: above, upper: top)]
                default: ranges = [KeyRange(lower: encoded, upper: top)]
                }
            }
        case let .isNil(_, isNil):
            guard fieldType.isOptional, !isArray else { return nil }
            ranges = isNil ? [KeyRange(lower: [0], upper: [1])] : [KeyRange(lower: [1], upper: nil)]
        case let .inList(_, values):
            if isArray { return nil }
            for value in values where !(floating && isNaN(value)) {
                guard let encoded = encode(value, for: fieldType, inIndex: isIndex) else { return nil }
                ranges.append(.prefix(encoded))
            }
        case let .startsWith(_, prefix):
            guard case .string = fieldType.unwrapped, !isArray else { return nil }
            var encoded: [UInt8] = fieldType.isOptional ? [1] : []
            KeyEncoding.appendBytes(KeyEncoding.normalized(prefix).utf8, to: &encoded)
            encoded.removeLast(2)  // the terminator: a prefix, not a whole value
            ranges = [.prefix(encoded)]
        case let .arrayContains(_, value):
            guard case .array(let element) = fieldType.unwrapped, isIndex else { return nil }
            guard let encoded = encode(value, for: element) else { return nil }
            ranges = [.prefix(encoded)]
        default:
            return nil
        }
        return ranges
    }

    /// The key encoding of NaN (every NaN is stored as this one).
    static let nanKey: [UInt8] = KeyEncoding.encode(Double.nan) ?? []

    /// Whether a predicate constant is a floating-point or date NaN.
    static func isNaN(_ value: Any) -> Bool {
        // The common constants told apart by their dynamic type first: the protocol cast below
        // looks a conformance up, and the three casts after it cost as much again.
        let dynamicType = type(of: value)
        if dynamicType == Double.self, let v = value as? Double { return v.isNaN }
        if KeyEncoding.isCommonPlainType(dynamicType) { return false }
        var value = value
        if let optional = value as? any OptionalValue {
            guard let wrapped = optional.wrappedAny else { return false }
            value = wrapped
        }
        switch value {
        case let v as Double: return v.isNaN
        case let v as Float: return v.isNaN
        case let v as Date: return v.timeIntervalSinceReferenceDate.isNaN
        default: return false
        }
    }

    /// The key encoding of a predicate constant as the field stores it.
    static func encode(_ value: Any, for fieldType: FieldType, inIndex: Bool = true) -> [UInt8]? {
        // (The common constant types are told apart from optionals by their dynamic type: the
        // protocol cast looks a conformance up.)
        let valueIsOptional = !KeyEncoding.isCommonPlainType(type(of: value)) && value is any OptionalValue
        // A raw-value type the schema stores as the value its own Codable writes (a struct, not
        // an enum) has index entries of that form, which its raw value need not be ("u:" + raw):
        // such a constant is not looked up, and the predicate decides on every object. Keys are
        // its raw value's encoding, as `insert` writes them.
        if inIndex, Self.isStoredOtherThanItsRawValue(value, in: fieldType) { return nil }
        if fieldType.isOptional && !valueIsOptional {
            guard let inner = KeyEncoding.encode(value) else { return nil }
            return [1] + inner
        }
        if !fieldType.isOptional, valueIsOptional, let optional = value as? any OptionalValue {
            guard let wrapped = optional.wrappedAny else { return nil }
            return KeyEncoding.encode(wrapped)
        }
        return KeyEncoding.encode(value)
    }

    private static func estimate<M: Model, S: TreeSource>(_ access: Access, info: ModelInfo<M>, source: S) throws -> Int {
        let treeName: String
        switch access.source {
        case .primary: treeName = info.recordTree
        case .index(let i): treeName = info.indexTreeNames[i]
        case let .text(i, search):
            guard let tree = try source.tree(named: info.indexTreeNames[i]) else { return 0 }
            return try TextIndexReader(tree: tree, keyLength: info.postingKeyLength).estimate(search, cap: estimateCap)
        }
        guard let tree = try source.tree(named: treeName) else { return 0 }
        return try countEntries(tree, access.ranges, cap: estimateCap)
    }

    /// The entries of `tree` in `ranges`, counting at most `cap`: from the counts the branches
    /// keep, two descents per range. (Walking them cost up to `cap` entries per index the planner
    /// weighed, on every query: a quarter of a millisecond before a `prefix(10)` read anything.)
    static func countEntries<T: KeyValueTree>(_ tree: T, _ ranges: [KeyRange], cap: Int) throws -> Int {
        let cursor = try tree.makeCursor()
        var total = 0
        for range in ranges {
            let (sum, overflow) = total.addingReportingOverflow(try cursor.count(from: range.lower, to: range.upper))
            // (Only damaged branch counts could add up past Int.max.)
            if overflow || sum >= cap { return cap }
            total = sum
        }
        return total
    }

    /// Visits the entries of `tree` inside `range`, ascending or descending, while `body` returns true.
    /// Under `withProgress` or an async read, each entry is a unit of progress and a chance to
    /// stop (`OperationControl`); otherwise the scan is the cursor's own loop.
    static func scan<T: KeyValueTree>(
        _ tree: T, _ range: KeyRange, reverse: Bool = false,
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        guard let control = OperationControl.current else {
            return try tree.makeCursor().forEach(from: range.lower, to: range.upper, reverse: reverse, body)
        }
        control.begin("scan", total: range.lower == nil && range.upper == nil ? tree.count : nil, scan: true)
        defer { control.endScan() }
        try tree.makeCursor().forEach(from: range.lower, to: range.upper, reverse: reverse) { key, value in
            try control.step()
            return try body(key, value)
        }
    }

    static func explain<M: Model>(_ plan: Plan, query: Query<M>, info: ModelInfo<M>) -> String {
        var lines: [String] = []
        if let walk = plan.walk {
            let schema = info.indexes[walk.index].schema
            let sorted = query.sort.compactMap { $0.keyPath.flatMap(fieldPath(of:)) }.joined(separator: ", ")
            var line = "scan index \(schema.treeName(model: info.name)) in \(walk.reverse ? "descending" : "ascending") order (sort by \(sorted))"
            if !walk.conditions.isEmpty { line += " within \(walk.conditions.map(\.description).joined(separator: ", "))" }
            // As `QueryEngine` runs it: a predicate that may throw is evaluated on every object,
            // and duplicates are dropped after the walk, so the walk goes to its end.
            let stops = !query.isDistinct && query.ranking == nil && !query.conditions.contains { $0.mayThrow }
            lines.append(line + (stops ? ", stopping when the window is full" : ", to its end"))
            if walk.exact { lines.append("no residual filter: the walked range holds exactly the matches") }
        } else if plan.accesses.isEmpty {
            lines.append("full scan of \(info.recordTree)")
        } else {
            for access in plan.accesses {
                switch access.source {
                case .primary:
                    lines.append(
                        "primary key \(access.conditions.map(\.description).joined(separator: ", ")): \(access.ranges.count) range(s) of \(info.recordTree)")
                case .index(let i):
                    let name = info.indexes[i].schema.treeName(model: info.name)
                    let kind = info.indexes[i].schema.fields != nil ? "compound " : ""
                    lines.append(
                        "index \(name) \(kind)\(info.indexes[i].schema.unique ? "(unique) " : "")for \(access.conditions.map(\.description).joined(separator: ", ")): \(access.ranges.count) range(s)"
                    )
                case .text(let i, _):
                    let name = info.indexes[i].schema.treeName(model: info.name)
                    lines.append(
                        "index \(name) (full text) for \(access.conditions.map(\.description).joined(separator: ", ")): the words' postings, intersected in primary-key order"
                    )
                }
            }
            if plan.accesses.count > 1 { lines.append("union of the accesses above, duplicates removed") }
            if let estimate = plan.estimate { lines.append("estimated candidates: \(estimate >= estimateCap ? "≥ \(estimateCap)" : "\(estimate)")") }
        }
        if !query.hasConditions {
            lines.append("no filter")
        } else if plan.walk?.exact == true {
            // Said above.
        } else if plan.exact {
            lines.append("no residual filter: the index answers \(query.conditions.map(\.description).joined(separator: " && ")) exactly")
        } else {
            let conditions = query.conditions.map(\.description).joined(separator: " && ")
            if RecordFilter.compile(query.conditions, schema: info.stored.object) != nil {
                lines.append("residual filter: \(conditions), evaluated on encoded records (only matches are decoded)")
            } else {
                lines.append("residual filter: \(conditions), evaluated on decoded objects")
            }
        }
        if let ranking = query.ranking {
            lines.append(
                "order: relevance of \(ranking.search) in \(ranking.path) (BM25), then \(query.sort.isEmpty ? "" : "\(query.sort.count) descriptor(s), then ")primary key; sorted in memory"
            )
        } else if query.sort.isEmpty {
            lines.append("order: primary key")
        } else if plan.walk == nil {
            lines.append("sort: in memory by \(query.sort.count) descriptor(s)\(query.collation.map { ", strings in collation \($0)" } ?? "")")
        }
        if query.isDistinct {
            let paths = query.distinct.compactMap { fieldPath(of: $0) }.joined(separator: ", ")
            lines.append("distinct by \(paths): the first object of each value, in the order above")
        }
        if query.offset > 0 || query.limit != nil { lines.append("window: offset \(query.offset), limit \(query.limit.map(String.init) ?? "none")") }
        return lines.joined(separator: "\n")
    }
}
