import Foundation

// Chooses how a query reaches its candidates: the primary-key tree or a secondary index, over
// key ranges derived from the predicate's conditions, or a full scan. Several conditions joined by
// && use the most selective access (estimated by counting entries, capped); || unions accesses
// when every branch has one. A single sort on an indexed number, date or bool walks that index in
// order and stops as soon as the window is full.

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

/// Where candidates come from.
enum AccessSource {
    case primary
    case index(Int)
}

struct Access {
    var source: AccessSource
    var ranges: [KeyRange]
    var conditions: [String]
}

struct Plan {
    /// Empty: full scan of the primary tree.
    var accesses: [Access] = []
    /// Walk this index in order for the sort (ascending unless `reverse`).
    var orderedIndex: (index: Int, reverse: Bool)?
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
        var condition: Condition?
        for c in conditions {
            condition = condition.map { .and($0, c) } ?? c
        }
        if let condition, let best = try choose(condition, info: info, source: source) {
            plan.accesses = best.accesses
            plan.estimate = best.estimate
            plan.exact = conditions.count == 1 && best.accesses.count == 1 && isExact(condition, info: info)
        }
        if query.sort.count == 1, query.distinct.isEmpty, let keyPath = query.sort[0].keyPath, let path = fieldPath(of: keyPath),
           let i = info.indexes.firstIndex(where: { $0.schema.path == path }),
           let type = info.stored.object.type(atPath: path), ResultOrder<M>.isKeyOrdered(type),
           plan.accesses.isEmpty || (plan.estimate ?? Int.max) > 1000 {
            plan.accesses = []
            plan.orderedIndex = (i, query.sort[0].order == .reverse)
        }
        return plan
    }

    /// Whether the key ranges of this single condition select exactly the objects Swift's
    /// evaluation would: integers, bools, strings and UUIDs compare the same as their key encodings
    /// (strings after NFC); floating point is excluded (NaN), and so are arrays and prefixes.
    static func isExact<M: Model>(_ condition: Condition, info: ModelInfo<M>) -> Bool {
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
        guard let type = info.stored.object.type(atPath: path) else { return false }
        if path.contains(".") { return false }
        switch type.unwrapped {
        case .int, .bool, .string, .uuid: return true
        case .enumeration(let raw):
            if case .compare(_, let op, _) = condition, op != .eq { return false }
            return raw != .double && raw != .float
        default: return false
        }
    }

    private struct Choice {
        var accesses: [Access]
        var estimate: Int
    }

    private static func choose<M: Model, S: TreeSource>(_ condition: Condition, info: ModelInfo<M>, source: S) throws -> Choice? {
        switch condition {
        case let .and(a, b):
            let left = try choose(a, info: info, source: source)
            let right = try choose(b, info: info, source: source)
            switch (left, right) {
            case let (l?, r?): return l.estimate <= r.estimate ? l : r
            case let (l?, nil): return l
            case let (nil, r?): return r
            default: return nil
            }
        case let .or(a, b):
            guard let left = try choose(a, info: info, source: source), let right = try choose(b, info: info, source: source) else { return nil }
            return Choice(accesses: left.accesses + right.accesses, estimate: left.estimate + right.estimate)
        case .not, .unknown, .contains:
            return nil
        default:
            guard let access = access(for: condition, info: info) else { return nil }
            return Choice(accesses: [access], estimate: try estimate(access, info: info, source: source))
        }
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
            fieldType = info.stored.object.type(atPath: path) ?? ((M.ID.self is any OptionalValue.Type) ? .optional(.string) : .string)
        } else if let i = info.indexes.firstIndex(where: { $0.schema.path == path }), let type = info.stored.object.type(atPath: path) {
            source = .index(i)
            fieldType = type
        } else {
            return nil
        }
        let isArray: Bool
        if case .array = fieldType.unwrapped { isArray = true } else { isArray = false }
        var ranges: [KeyRange] = []
        switch condition {
        case let .compare(_, op, value):
            if isArray { return nil }
            guard let encoded = encode(value, for: fieldType) else { return nil }
            let notNil: [UInt8]? = fieldType.isOptional ? [1] : nil
            switch op {
            case .eq: ranges = [.prefix(encoded)]
            case .ne: return nil
            default:
                if case .enumeration = fieldType.unwrapped { return nil }
                // Swift's String `<` is not a total order on this toolchain ("éb" and
                // "e\u{301}" are neither <, == nor >), so no range of the index's (total) NFC
                // order is sure to hold every string the predicate accepts: the predicate decides.
                if fieldType.unwrapped == .string || fieldType.unwrapped == .url { return nil }
                switch op {
                case .lt: ranges = [KeyRange(lower: notNil, upper: encoded)]
                case .le: ranges = [KeyRange(lower: notNil, upper: successor(of: encoded))]
                case .gt:
                    // Nothing sorts above a value whose encoding has no successor (the type's maximum).
                    guard let above = successor(of: encoded) else { ranges = []; break }
                    ranges = [KeyRange(lower: above, upper: fieldType.isOptional ? [2] : nil)]
                default: ranges = [KeyRange(lower: encoded, upper: fieldType.isOptional ? [2] : nil)]
                }
            }
        case let .isNil(_, isNil):
            guard fieldType.isOptional, !isArray else { return nil }
            ranges = isNil ? [KeyRange(lower: [0], upper: [1])] : [KeyRange(lower: [1], upper: nil)]
        case let .inList(_, values):
            if isArray { return nil }
            for value in values {
                guard let encoded = encode(value, for: fieldType) else { return nil }
                ranges.append(.prefix(encoded))
            }
        case let .startsWith(_, prefix):
            guard case .string = fieldType.unwrapped, !isArray else { return nil }
            var encoded: [UInt8] = fieldType.isOptional ? [1] : []
            KeyEncoding.appendBytes(KeyEncoding.normalized(prefix).utf8, to: &encoded)
            encoded.removeLast(2)   // the terminator: a prefix, not a whole value
            ranges = [.prefix(encoded)]
        case let .arrayContains(_, value):
            guard case .array(let element) = fieldType.unwrapped, case .index = source else { return nil }
            guard let encoded = encode(value, for: element) else { return nil }
            ranges = [.prefix(encoded)]
        default:
            return nil
        }
        return Access(source: source, ranges: ranges, conditions: [condition.description])
    }

    /// The key encoding of a predicate constant as the field stores it.
    static func encode(_ value: Any, for fieldType: FieldType) -> [UInt8]? {
        let valueIsOptional = value is any OptionalValue
        if fieldType.isOptional && !valueIsOptional {
            guard let inner = KeyEncoding.encode(value) else { return nil }
            return [1] + inner
        }
        if !fieldType.isOptional, let optional = value as? any OptionalValue {
            guard let wrapped = optional.wrappedAny else { return nil }
            return KeyEncoding.encode(wrapped)
        }
        return KeyEncoding.encode(value)
    }

    private static func estimate<M: Model, S: TreeSource>(_ access: Access, info: ModelInfo<M>, source: S) throws -> Int {
        let treeName: String
        switch access.source {
        case .primary: treeName = info.recordTree
        case .index(let i): treeName = info.indexes[i].schema.treeName(model: info.name)
        }
        guard let tree = try source.tree(named: treeName) else { return 0 }
        var total = 0
        for range in access.ranges {
            try scan(tree, range) { _, _ in
                total += 1
                return total < estimateCap
            }
            if total >= estimateCap { break }
        }
        return total
    }

    /// Visits the entries of `tree` inside `range`, ascending or descending, while `body` returns true.
    /// Under `withProgress` or an async read, each entry is a unit of progress and a chance to
    /// stop (`OperationControl`); otherwise the scan is the cursor's own loop.
    static func scan<T: KeyValueTree>(_ tree: T, _ range: KeyRange, reverse: Bool = false,
                                      _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool) throws {
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
        if let (i, reverse) = plan.orderedIndex {
            lines.append("scan index \(info.indexes[i].schema.treeName(model: info.name)) in \(reverse ? "descending" : "ascending") order (sort by \(info.indexes[i].schema.path)), stopping when the window is full")
        } else if plan.accesses.isEmpty {
            lines.append("full scan of \(info.recordTree)")
        } else {
            for access in plan.accesses {
                switch access.source {
                case .primary:
                    lines.append("primary key \(access.conditions.joined(separator: ", ")): \(access.ranges.count) range(s) of \(info.recordTree)")
                case .index(let i):
                    let name = info.indexes[i].schema.treeName(model: info.name)
                    lines.append("index \(name) \(info.indexes[i].schema.unique ? "(unique) " : "")for \(access.conditions.joined(separator: ", ")): \(access.ranges.count) range(s)")
                }
            }
            if plan.accesses.count > 1 { lines.append("union of the accesses above, duplicates removed") }
            if let estimate = plan.estimate { lines.append("estimated candidates: \(estimate >= estimateCap ? "≥ \(estimateCap)" : "\(estimate)")") }
        }
        if !query.hasConditions {
            lines.append("no filter")
        } else if plan.exact {
            lines.append("no residual filter: the index answers \(query.conditions[0]) exactly")
        } else {
            let conditions = query.conditions.map(\.description).joined(separator: " && ")
            if RecordFilter.compile(query.conditions, schema: info.stored.object) != nil {
                lines.append("residual filter: \(conditions), evaluated on encoded records (only matches are decoded)")
            } else {
                lines.append("residual filter: \(conditions), evaluated on decoded objects")
            }
        }
        if query.sort.isEmpty {
            lines.append("order: primary key")
        } else if plan.orderedIndex == nil {
            lines.append("sort: in memory by \(query.sort.count) descriptor(s)")
        }
        if query.offset > 0 || query.limit != nil { lines.append("window: offset \(query.offset), limit \(query.limit.map(String.init) ?? "none")") }
        return lines.joined(separator: "\n")
    }
}
