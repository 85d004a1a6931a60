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

/// Runs queries. The plan: candidate keys from the record tree in key order, objects decoded and
/// filtered with the predicates, sorted, de-duplicated, windowed.
enum QueryEngine {
    static func evaluate<M: Model, S: TreeSource>(_ query: Query<M>, info: ModelInfo<M>, source: S) throws -> [Row<M>] {
        guard let records = try source.tree(named: info.recordTree) else { return [] }
        var rows: [Row<M>] = []
        let cursor = try records.makeCursor()
        var more = try cursor.first()
        // Without filters or sorting, the window can stop the scan early.
        let stopAfter: Int? = query.isPlainScan ? query.limit.map { query.offset + $0 } : nil
        while more {
            if let stopAfter, rows.count >= stopAfter { break }
            let object = try info.decode(cursor.value)
            if try query.predicates.allSatisfy({ try $0.evaluate(object) }) {
                rows.append(Row(key: Array(cursor.key), object: object))
            }
            more = try cursor.next()
        }
        if !query.sort.isEmpty {
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
