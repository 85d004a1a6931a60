import Foundation

/// A query over one model: conditions, order and a window. Values; built up by `Results`.
struct Query<M: Model>: Sendable {
    var predicates: [Predicate<M>] = []
    var sort: [SortDescriptor<M>] = []
    var offset = 0
    var limit: Int?
    var distinct: [PartialKeyPath<M> & Sendable] = []

    var isPlainScan: Bool { predicates.isEmpty && sort.isEmpty && distinct.isEmpty }
}

/// One evaluated row.
struct Row<M: Model>: Sendable {
    let key: [UInt8]
    let object: M
}

/// Runs queries: candidates from the plan (a key or index range, or a full scan), decoded and
/// filtered with the whole predicate, then sorted, de-duplicated and windowed.
enum QueryEngine {
    static func evaluate<M: Model, S: TreeSource>(_ query: Query<M>, info: ModelInfo<M>, source: S) throws -> [Row<M>] {
        guard let records = try source.tree(named: info.recordTree) else { return [] }
        let plan = try Planner.plan(query, info: info, source: source)
        var rows: [Row<M>] = []
        // Without in-memory sorting or de-duplication, the window can stop the scan early.
        let window: Int? = query.limit.map { query.offset + $0 }
        let canStopEarly = (query.sort.isEmpty || plan.orderedIndex != nil) && query.distinct.isEmpty && plan.accesses.isEmpty

        func consider(key: [UInt8], record: UnsafeRawBufferPointer) throws -> Bool {
            let object = try info.decode(record)
            if try query.predicates.allSatisfy({ try $0.evaluate(object) }) {
                rows.append(Row(key: key, object: object))
            }
            if canStopEarly, let window, rows.count >= window { return false }
            return true
        }

        if let (i, reverse) = plan.orderedIndex {
            let unique = info.indexes[i].schema.unique
            if let index = try source.tree(named: info.indexes[i].schema.treeName(model: info.name)) {
                try Planner.scan(index, KeyRange(lower: nil, upper: nil), reverse: reverse) { key, value in
                    let primaryKey = try IndexEntry.primaryKey(key: key, value: value, unique: unique)
                    guard let record = try records.view(primaryKey) else {
                        throw StrataError.corruptRecord("index \(info.indexes[i].schema.path) of \(info.name) names a missing object")
                    }
                    return try consider(key: primaryKey, record: record)
                }
            }
        } else if plan.accesses.isEmpty {
            try Planner.scan(records, KeyRange(lower: nil, upper: nil)) { key, value in try consider(key: Array(key), record: value) }
        } else {
            var keys: [[UInt8]] = []
            for access in plan.accesses {
                switch access.source {
                case .primary:
                    for range in access.ranges { try Planner.scan(records, range) { key, _ in keys.append(Array(key)); return true } }
                case .index(let i):
                    let unique = info.indexes[i].schema.unique
                    guard let index = try source.tree(named: info.indexes[i].schema.treeName(model: info.name)) else { continue }
                    for range in access.ranges {
                        try Planner.scan(index, range) { key, value in
                            keys.append(try IndexEntry.primaryKey(key: key, value: value, unique: unique))
                            return true
                        }
                    }
                }
            }
            // Candidates in primary-key order, each once (a union or a multi-valued index repeats them).
            keys.sort { $0.lexicographicallyPrecedes($1) }
            var previous: [UInt8]?
            for key in keys where key != previous {
                previous = key
                guard let record = try records.view(key) else {
                    throw StrataError.corruptRecord("an index of \(info.name) names a missing object")
                }
                _ = try consider(key: key, record: record)
            }
        }

        if !query.sort.isEmpty && plan.orderedIndex == nil {
            let descriptors = query.sort
            rows.sort { a, b in
                for descriptor in descriptors {
                    switch descriptor.compare(a.object, b.object) {
                    case .orderedAscending: return true
                    case .orderedDescending: return false
                    case .orderedSame: continue
                    }
                }
                return a.key.lexicographicallyPrecedes(b.key)
            }
        }
        if !query.distinct.isEmpty {
            var seen = Set<[UInt8]>()
            rows = rows.filter { row in
                var signature: [UInt8] = []
                for keyPath in query.distinct {
                    if !KeyEncoding.append(row.object[keyPath: keyPath], to: &signature) {
                        signature.append(contentsOf: Array(String(describing: row.object[keyPath: keyPath]).utf8))
                    }
                    signature.append(0xFF)
                }
                return seen.insert(signature).inserted
            }
        }
        let start = min(query.offset, rows.count)
        let end = query.limit.map { min(rows.count, start + $0) } ?? rows.count
        if start == 0 && end == rows.count { return rows }
        return Array(rows[start..<end])
    }

    static func explain<M: Model, S: TreeSource>(_ query: Query<M>, info: ModelInfo<M>, source: S) throws -> String {
        Planner.explain(try Planner.plan(query, info: info, source: source), query: query, info: info)
    }

    /// The number of matching objects; without conditions, the tree's own count (no decoding).
    static func count<M: Model, S: TreeSource>(_ query: Query<M>, info: ModelInfo<M>, source: S) throws -> Int {
        if query.predicates.isEmpty && query.distinct.isEmpty {
            let total = try source.tree(named: info.recordTree)?.count ?? 0
            let afterOffset = max(0, total - query.offset)
            return query.limit.map { min($0, afterOffset) } ?? afterOffset
        }
        return try evaluate(query, info: info, source: source).count
    }
}
