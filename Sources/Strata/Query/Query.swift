import Foundation

/// A query over one model: conditions, order and a window. Values; built up by `Results`.
struct Query<M: Model>: Sendable {
    /// The conditions in the order `filter` and `search` added them: the query is their `&&`,
    /// evaluated left to right, so an object the first rejects never reaches a later one (which
    /// could throw on it). Evaluation and planning both read this one list.
    var filters: [QueryFilter<M>] = []
    var sort: [SortDescriptor<M>] = []
    var offset = 0
    var limit: Int?
    var distinct: [PartialKeyPath<M> & Sendable] = []
    /// How the String sort descriptors compare: in this collation (`sorted(by:collation:)`), or
    /// (nil) as the descriptors do. `sorted(by:)` resets it with the descriptors.
    var collation: StringCollation?
    /// The full-text search whose relevance orders the results first (`search(_:_:ranked:)`).
    var ranking: TextRanking?

    var isPlainScan: Bool { !hasConditions && !isSorted && !isDistinct }
    // (`count`, not `isEmpty`: the arrays' elements depend on the model, and Collection's
    // `isEmpty` runs unspecialized after a metadata lookup, where Array's `count` is inlined.)
    var hasConditions: Bool { filters.count != 0 }
    var isSorted: Bool { sort.count != 0 }
    var isDistinct: Bool { distinct.count != 0 }

    /// Every condition, in the order evaluated, for the planner: it may narrow the candidates
    /// only by the conditions before the first that may throw (`Condition.mayThrow`).
    var conditions: [Condition] {
        // Closures, not key paths: a key path literal in generic code is instantiated on every
        // call (10 µs here, more than planning the query).
        var all: [Condition] = []
        all.reserveCapacity(filters.count)
        for filter in filters {
            switch filter {
            case .predicate(let predicate): all.append(predicate.predicate.condition)
            case .test(let test): all.append(test.condition)
            }
        }
        return all
    }

    /// Whether `object` matches: each condition in order, stopping at the first that fails, as
    /// `&&` does. A predicate that throws (a force unwrap of nil) fails the query with
    /// `invalidQuery`, naming the object.
    func matches(_ object: M) throws -> Bool {
        for filter in filters {
            switch filter {
            case .test(let test):
                if !test.evaluate(object) { return false }
            case .predicate(let predicate):
                do {
                    if try !predicate.evaluate(object) { return false }
                } catch {
                    throw StrataError.invalidQuery("the predicate threw on \(M.modelName) \(object.id): \(error)")
                }
            }
        }
        return true
    }
}

/// The candidates of a query that match, in the order visited. A struct with a method, not a
/// nested function mutating captured locals: those are boxed and checked for exclusive access at
/// run time on every row.
private struct MatchCollector<M: Model> {
    let query: Query<M>
    let info: ModelInfo<M>
    let keepKeys: Bool
    /// Where the scan may stop (offset plus limit), when it may stop early.
    let window: Int?
    /// The conditions compiled to record tests (`passing` when they did not compile: see
    /// `testsRecords`). Not optional: unwrapping one per record copied it, its closure retained.
    let filter: RecordFilter
    let testsRecords: Bool
    /// (Checked once: even an empty test list costs a generic metadata lookup per object.)
    let testsObjects: Bool
    var keys: [[UInt8]] = []
    var objects: [M] = []

    init(query: Query<M>, info: ModelInfo<M>, keepKeys: Bool, window: Int?, filter: RecordFilter?) {
        self.query = query
        self.info = info
        self.keepKeys = keepKeys
        self.window = window
        self.filter = filter ?? .passing
        testsRecords = filter != nil
        testsObjects = query.hasConditions
    }

    /// The matches, leaving the collector empty (so that the caller's arrays are the only
    /// references, and sort in place).
    mutating func take() -> (keys: [[UInt8]], objects: [M]) {
        defer {
            keys = []
            objects = []
        }
        return (keys, objects)
    }

    /// Takes the candidate in if it matches; false when the window is full.
    mutating func consider(key: UnsafeRawBufferPointer, record: UnsafeRawBufferPointer) throws -> Bool {
        if testsRecords {
            guard try filter.matches(record) else { return true }
            objects.append(try info.decode(record))
        } else {
            let object = try info.decode(record)
            if testsObjects { guard try query.matches(object) else { return true } }
            objects.append(object)
        }
        if keepKeys { keys.append(Array(key)) }
        if let window, objects.count >= window { return false }
        return true
    }
}

/// One condition of a query: a `#Predicate`, or one of the library's helpers (key-path
/// equality, backlinks, string matching, a search).
enum QueryFilter<M: Model>: Sendable {
    case predicate(PredicateFilter<M>)
    case test(FieldTest<M>)
}

/// A condition from the library's helpers. Its evaluation cannot throw, so a condition the
/// planner cannot read is `.opaque`, not `.unknown`: it must not keep later conditions off an index.
struct FieldTest<M: Model>: Sendable {
    /// Built on demand: conditions hold untyped values, which are not Sendable.
    let makeCondition: @Sendable () -> Condition
    let evaluate: @Sendable (M) -> Bool

    var condition: Condition { makeCondition() }

    init(condition: @autoclosure @escaping @Sendable () -> Condition, evaluate: @escaping @Sendable (M) -> Bool) {
        self.makeCondition = condition
        self.evaluate = evaluate
    }
}

/// Runs queries: candidates from the plan (a key or index range, or a full scan), decoded and
/// filtered with the whole predicate, then sorted, de-duplicated and windowed.
enum QueryEngine {
    /// Evaluates the query into its objects and, when `needKeys` (or a sort or de-duplication
    /// needs them), their primary keys in the same order (otherwise `keys` is empty). Two arrays
    /// rather than rows: results take the objects as they are, without copying each one out of a
    /// row (a retain and a release per field of every object).
    static func matches<M: Model, S: TreeSource>(_ query: Query<M>, info: ModelInfo<M>, source: S, needKeys: Bool) throws -> (keys: [[UInt8]], objects: [M]) {
        guard let records = try source.tree(named: info.recordTree) else { return ([], []) }
        let conditions = query.conditions
        let plan = try Planner.plan(query, conditions: conditions, info: info, source: source)
        let keepKeys = needKeys || query.isSorted || query.isDistinct || query.ranking != nil
        // A predicate that may throw is evaluated on every candidate, as Foundation would, even
        // past the window; without in-memory sorting or de-duplication, the window can stop the
        // scan early.
        let canStopEarly =
            (!query.isSorted || plan.walk != nil) && !query.isDistinct && plan.accesses.isEmpty && query.ranking == nil
            && !conditions.contains { $0.mayThrow }
        var collector = MatchCollector(
            query: query, info: info, keepKeys: keepKeys, window: canStopEarly ? query.limit.map { query.offset + $0 } : nil,
            // A predicate that compiles to record tests needs no decoding to reject a row.
            filter: conditions.isEmpty ? nil : RecordFilter.compile(conditions, schema: info.stored.object))
        try forEachCandidate(plan, info: info, source: source, records: records) { key, record in
            try collector.consider(key: key, record: record)
        }
        var (keys, objects) = collector.take()

        if let ranking = query.ranking {
            let leading = try ranking.scores(for: keys, info: info, source: source).map(TextRanking.sortKey)
            try ResultOrder(query, info: info).sort(&objects, keys: &keys, leading: leading)
        } else if query.isSorted && plan.walk == nil {
            try ResultOrder(query, info: info).sort(&objects, keys: &keys)
        }
        if query.isDistinct {
            let kept = Distinct.firstOfEachGroup(objects, by: query.distinct)
            if kept.count != objects.count {
                objects = kept.map { objects[$0] }
                keys = kept.map { keys[$0] }
            }
        }
        let start = min(query.offset, objects.count)
        let end = query.limit.map { min(objects.count, start + $0) } ?? objects.count
        if start == 0 && end == objects.count { return (keys, objects) }
        return (keepKeys ? Array(keys[start..<end]) : [], Array(objects[start..<end]))
    }

    /// Visits the plan's candidates with their records, in the order the plan walks them (the
    /// sort's order for an ordered index walk, key order otherwise), while `visit` returns true.
    /// The key is valid only during the call.
    static func forEachCandidate<M: Model, S: TreeSource>(
        _ plan: Plan, info: ModelInfo<M>, source: S, records: S.Tree,
        _ visit: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        // Candidates come in index order, their records mostly near each other: one cursor finds
        // them, searching the leaf of the one before first (`Cursor.find`).
        if let walk = plan.walk {
            let finder = try records.makeCursor()
            try walkKeys(walk, info: info, source: source) { primaryKey in
                guard try finder.find(primaryKey) else {
                    throw StrataError.corruptRecord("index \(info.indexes[walk.index].schema.summary) of \(info.name) names a missing object")
                }
                return try visit(primaryKey, finder.value)
            }
        } else if plan.accesses.isEmpty {
            try Planner.scan(records, KeyRange(lower: nil, upper: nil), visit)
        } else {
            let finder = try records.makeCursor()
            for key in try candidateKeys(plan, info: info, source: source) {
                guard try key.withUnsafeBytes({ try finder.find($0) }) else {
                    throw StrataError.corruptRecord("an index of \(info.name) names a missing object")
                }
                if try !key.withUnsafeBytes({ try visit($0, finder.value) }) { return }
            }
        }
    }

    /// Visits the primary keys of an ordered walk's range in the sort's order, while `visit`
    /// returns true. A key is valid only during its call.
    static func walkKeys<M: Model, S: TreeSource>(
        _ walk: OrderedWalk, info: ModelInfo<M>, source: S,
        _ visit: (UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        let unique = info.plannerIndexes[walk.index].schema.unique
        let reverse = walk.reverse
        guard let index = try source.tree(named: info.indexTreeNames[walk.index]) else { return }
        // Equal values are ordered by primary key in both directions, as in every plan
        // (ResultOrder). A descending walk meets them in descending key order, so it holds
        // back each run of equal values and visits it reversed. (A unique index has no equal
        // values.)
        guard reverse && !unique else {
            try Planner.scan(index, walk.range, reverse: reverse) { key, value in
                try visit(try IndexEntry.primaryKeyBytes(key: key, value: value, unique: unique))
            }
            return
        }
        var run = EqualValueRun()
        defer { run.release() }
        try Planner.scan(index, walk.range, reverse: true) { key, value in
            // The entry's key is the value's bytes, then the primary key's.
            let primaryKeyCount = try IndexEntry.primaryKeyBytes(key: key, value: value, unique: false).count
            if !run.holds(UnsafeRawBufferPointer(rebasing: key[..<(key.count - primaryKeyCount)])), try !run.flushReversed(visit) { return false }
            run.add(entry: key, primaryKeyCount: primaryKeyCount)
            return true
        }
        _ = try run.flushReversed(visit)
    }

    /// The run of index entries with one value that a descending walk holds back to visit in
    /// ascending key order. The value and the keys live back to back in memory the run owns, grown
    /// by doubling and freed by `release`: adding an entry is a length check and a copy. (Arrays
    /// cost a uniqueness check, a generic append and a `removeAll` per entry, ten times the step
    /// of the cursor; most runs hold one entry.) A struct with methods, not a nested function
    /// capturing locals: captured locals are checked for exclusive access at run time.
    private struct EqualValueRun {
        /// The run's value, then each primary key.
        private var bytes: UnsafeMutableRawPointer
        private var byteCapacity = 256
        private var used = 0
        private var valueCount = 0
        /// Where each primary key ends in `bytes`.
        private var ends: UnsafeMutablePointer<Int>
        private var endCapacity = 16
        private var count = 0

        init() {
            bytes = .allocate(byteCount: byteCapacity, alignment: 8)
            ends = .allocate(capacity: endCapacity)
        }

        func release() {
            bytes.deallocate()
            ends.deallocate()
        }

        /// Whether `valueBytes` belongs to this run (an empty run holds any value). (These steps
        /// run once per entry walked: inlined into the walk's loop, not called.)
        @inline(__always)
        func holds(_ valueBytes: UnsafeRawBufferPointer) -> Bool {
            count == 0 || QueryEngine.sameBytes(UnsafeRawBufferPointer(start: bytes, count: valueCount), valueBytes)
        }

        /// Adds an index entry's primary key (the last `primaryKeyCount` bytes of its key), the
        /// entry's value too when it starts the run.
        @inline(__always)
        mutating func add(entry key: UnsafeRawBufferPointer, primaryKeyCount: Int) {
            if count == 0 {
                // The value and the first primary key are the whole entry key: one copy.
                used = 0
                append(key)
                valueCount = key.count - primaryKeyCount
            } else {
                append(UnsafeRawBufferPointer(rebasing: key[(key.count - primaryKeyCount)...]))
            }
            if count == endCapacity {
                let grown = UnsafeMutablePointer<Int>.allocate(capacity: endCapacity * 2)
                grown.moveInitialize(from: ends, count: count)
                ends.deallocate()
                ends = grown
                endCapacity *= 2
            }
            ends[count] = used
            count += 1
        }

        @inline(__always)
        private mutating func append(_ source: UnsafeRawBufferPointer) {
            if used + source.count > byteCapacity {
                var capacity = byteCapacity * 2
                while capacity < used + source.count { capacity *= 2 }
                let grown = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
                grown.copyMemory(from: bytes, byteCount: used)
                bytes.deallocate()
                bytes = grown
                byteCapacity = capacity
            }
            if let from = source.baseAddress, source.count > 0 { (bytes + used).copyMemory(from: from, byteCount: source.count) }
            used += source.count
        }

        /// Visits the run's keys in ascending order and empties it; false when `visit` stopped.
        mutating func flushReversed(_ visit: (UnsafeRawBufferPointer) throws -> Bool) throws -> Bool {
            let n = count
            count = 0
            var i = n - 1
            while i >= 0 {
                let start = i == 0 ? valueCount : ends[i - 1]
                if try !visit(UnsafeRawBufferPointer(start: bytes + start, count: ends[i] - start)) { return false }
                i -= 1
            }
            return true
        }
    }

    /// Whether two byte strings are equal (memcmp: the generic `elementsEqual` walks iterators).
    @inline(__always)
    static func sameBytes(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        guard a.count == b.count else { return false }
        guard a.count > 0, let x = a.baseAddress, let y = b.baseAddress else { return true }
        return memcmp(x, y, a.count) == 0
    }

    /// The primary keys of the results in order, found without decoding a single object, when the
    /// query allows it: no conditions or only ones that compile to record tests (RecordFilter), a
    /// sort (if any) that compares encodings only (its keys read from the records), no distinct.
    /// Nil when the query needs decoded objects.
    static func keys<M: Model, S: TreeSource>(_ query: Query<M>, info: ModelInfo<M>, source: S) throws -> KeyList? {
        guard !query.isDistinct else { return nil }
        let conditions = query.conditions
        let order = ResultOrder(query, info: info)
        guard order.isEncoded else { return nil }
        guard let records = try source.tree(named: info.recordTree) else { return KeyList() }
        let plan = try Planner.plan(query, conditions: conditions, info: info, source: source)
        // Ranked results are ordered by their scores first, in memory, whatever the plan walks.
        let ranking = query.ranking
        let sortInMemory = ranking != nil || (query.isSorted && plan.walk == nil)
        let window: Int? = query.limit.map { query.offset + $0 }
        if !query.isSorted,
            let exact = try exactKeyList(
                plan, info: info, source: source, offset: ranking == nil ? query.offset : 0, limit: ranking == nil ? query.limit : nil)
        {
            // The index answers the conditions exactly: no record is read (a ranking reads the
            // words' postings for the scores).
            guard let ranking else { return exact }
            var ranked = exact
            ranked.sort(by: try ranking.sortKeys(for: ranked, info: info, source: source))
            return ranked.window(offset: query.offset, limit: query.limit)
        }
        if ranking == nil, let walk = plan.walk, walk.exact {
            // The walked range holds exactly the matches, in order: no record is read, and the
            // offset is skipped on the index alone.
            var found = query.limit.map { KeyList(reservingKeys: $0) } ?? KeyList()
            var skipped = 0
            if query.limit == 0 { return found }
            // (The window read once: each read of the generic query's fields from the closure
            // asks for its metadata.)
            let offset = query.offset
            let limit = query.limit ?? .max
            try walkKeys(walk, info: info, source: source) { primaryKey in
                if skipped < offset {
                    skipped += 1
                    return true
                }
                found.append(primaryKey)
                return found.count < limit
            }
            return found
        }
        // Records are read and filtered: the conditions must compile to record tests (else the
        // query needs decoded objects; the planning above was cheap unless estimates compared).
        let compiled = conditions.isEmpty ? nil : RecordFilter.compile(conditions, schema: info.stored.object)
        if !conditions.isEmpty && compiled == nil { return nil }
        // (A let, unwrapped once: an optional var captured by the loop's closure was copied, its
        // closure retained and released, for every record.)
        let filter = compiled ?? RecordFilter.passing
        let canStopEarly = !sortInMemory && plan.accesses.isEmpty
        var found = canStopEarly ? window.map { KeyList(reservingKeys: $0) } ?? KeyList() : KeyList()
        var sortKeys: [[UInt8]] = []
        try forEachCandidate(plan, info: info, source: source, records: records) { key, record in
            if try !filter.matches(record) { return true }
            found.append(key)
            if sortInMemory { sortKeys.append(try order.sortKey(record: record, schema: info.stored.object)) }
            if canStopEarly, let window, found.count >= window { return false }
            return true
        }
        if let ranking {
            // The score leads, then the sort descriptors' values.
            let leading = try ranking.sortKeys(for: found, info: info, source: source)
            sortKeys = query.isSorted ? zip(leading, sortKeys).map { $0 + $1 } : leading
        }
        if sortInMemory { found.sort(by: sortKeys) }
        return found.window(offset: query.offset, limit: query.limit)
    }

    static func explain<M: Model, S: TreeSource>(_ query: Query<M>, info: ModelInfo<M>, source: S) throws -> String {
        Planner.explain(try Planner.plan(query, info: info, source: source), query: query, info: info)
    }

    /// The number of matches when the trees' counts give it without reading entries: no
    /// conditions (the record tree's count), or one access an index or the primary key answers
    /// exactly over ranges that cannot name an object twice (the sum of the ranges' counts, two
    /// descents each). Nil when the query must be evaluated to be counted.
    static func countFromTrees<M: Model, S: TreeSource>(_ query: Query<M>, info: ModelInfo<M>, source: S) throws -> Int? {
        guard !query.isDistinct else { return nil }
        let total: Int
        if !query.hasConditions {
            total = try source.tree(named: info.recordTree)?.count ?? 0
        } else {
            // The order does not matter to a count: plan as if unsorted (an index walk for a sort
            // would hide the access that counts).
            var unordered = query
            unordered.sort = []
            unordered.collation = nil
            unordered.ranking = nil
            guard let counted = try exactCount(try Planner.plan(unordered, info: info, source: source), info: info, source: source) else { return nil }
            total = counted
        }
        let afterOffset = max(0, total - query.offset)
        return query.limit.map { min($0, afterOffset) } ?? afterOffset
    }

    /// The number of matching objects. Without conditions it is the tree's own count; when an
    /// index answers the whole predicate exactly, the index's counts give it. Neither decodes anything.
    static func count<M: Model, S: TreeSource>(_ query: Query<M>, info: ModelInfo<M>, source: S) throws -> Int {
        if let counted = try countFromTrees(query, info: info, source: source) { return counted }
        if !query.isDistinct {
            var total: Int?
            if !query.hasConditions {
                total = try source.tree(named: info.recordTree)?.count ?? 0
            } else {
                // One plan serves both ways of counting without decoding.
                let conditions = query.conditions
                let plan = try Planner.plan(query, conditions: conditions, info: info, source: source)
                if let counted = try exactCount(plan, info: info, source: source) {
                    total = counted
                } else if let filter = RecordFilter.compile(conditions, schema: info.stored.object),
                    let records = try source.tree(named: info.recordTree)
                {
                    // Count on the records themselves: nothing is decoded.
                    var matched = 0
                    if plan.accesses.isEmpty {
                        try Planner.scan(records, KeyRange(lower: nil, upper: nil)) { _, record in
                            if try filter.matches(record) { matched += 1 }
                            return true
                        }
                    } else {
                        for key in try candidateKeys(plan, info: info, source: source) {
                            guard let record = try records.view(key) else { throw StrataError.corruptRecord("an index of \(info.name) names a missing object") }
                            if try filter.matches(record) { matched += 1 }
                        }
                    }
                    total = matched
                }
            }
            if let total {
                let afterOffset = max(0, total - query.offset)
                return query.limit.map { min($0, afterOffset) } ?? afterOffset
            }
        }
        return try matches(query, info: info, source: source, needKeys: false).objects.count
    }

    /// The primary keys of the matches, in key order, when the plan needs no residual filter: no
    /// predicate at all, or conditions one index or key range answers exactly. Nil otherwise.
    static func exactKeys<M: Model, S: TreeSource>(_ query: Query<M>, info: ModelInfo<M>, source: S) throws -> [[UInt8]]? {
        guard !query.isSorted, !query.isDistinct, query.ranking == nil else { return nil }
        return try exactKeys(try Planner.plan(query, info: info, source: source), info: info, source: source)
    }

    /// The keys of an exact single-access plan (see `Plan.exact`), or nil; the first `limit` of
    /// them when given.
    static func exactKeys<M: Model, S: TreeSource>(_ plan: Plan, info: ModelInfo<M>, source: S, limit: Int? = nil) throws -> [[UInt8]]? {
        guard plan.accesses.count == 1, plan.walk == nil, plan.exact else { return nil }
        if let limit, case let .text(i, search) = plan.accesses[0].source {
            // A search finds its texts in key order: it can stop at the limit.
            guard let tree = try source.tree(named: info.indexTreeNames[i]) else { return [] }
            return try TextIndexReader(tree: tree, keyLength: info.postingKeyLength).keys(search, limit: limit)
        }
        return try candidateKeys(plan, info: info, source: source)
    }

    /// The keys of an exact single-access plan (see `Plan.exact`) from `offset`, at most `limit`,
    /// in key order; nil when the plan is not exact. A search streams its keys from the index
    /// into the list (no copy per key) and stops at the limit.
    static func exactKeyList<M: Model, S: TreeSource>(_ plan: Plan, info: ModelInfo<M>, source: S, offset: Int, limit: Int?) throws -> KeyList? {
        guard plan.accesses.count == 1, plan.walk == nil, plan.exact else { return nil }
        var found = limit.map { KeyList(reservingKeys: $0) } ?? KeyList()
        if case let .text(i, search) = plan.accesses[0].source {
            guard let tree = try source.tree(named: info.indexTreeNames[i]), limit != 0 else { return found }
            var skipped = 0
            try TextIndexReader(tree: tree, keyLength: info.postingKeyLength).forEachKey(search) { key in
                if skipped < offset {
                    skipped += 1
                    return true
                }
                found.append(key)
                return limit.map { found.count < $0 } ?? true
            }
            return found
        }
        for key in try candidateKeys(plan, info: info, source: source) { found.append(key) }
        return found.window(offset: offset, limit: limit)
    }

    /// The number of matches of an exact single-access plan, without building the keys: a
    /// search adds up its word's block counts; a primary-key or scalar-index access whose ranges are
    /// disjoint (so no object is counted twice) sums the ranges' counts, which the trees' branches
    /// give in two descents per range. Otherwise the keys are listed and counted. Nil when the
    /// plan is not exact.
    static func exactCount<M: Model, S: TreeSource>(_ plan: Plan, info: ModelInfo<M>, source: S) throws -> Int? {
        guard plan.accesses.count == 1, plan.walk == nil, plan.exact else { return nil }
        let access = plan.accesses[0]
        let tree: S.Tree?
        switch access.source {
        case let .text(i, search):
            guard let tree = try source.tree(named: info.indexTreeNames[i]) else { return 0 }
            return try TextIndexReader(tree: tree, keyLength: info.postingKeyLength).count(search)
        case .primary:
            tree = try source.tree(named: info.recordTree)
        case .index(let i) where !info.indexIsArray[i]:
            tree = try source.tree(named: info.indexTreeNames[i])
        case .index:
            return try exactKeys(plan, info: info, source: source)?.count
        }
        guard let tree else { return 0 }
        // Ascending by lower bound (an open bound first); each must start at or after the end of
        // the one before (an `in` list naming a value twice, or two encodings that coincide, fail).
        let ranges = access.ranges.sorted { a, b in
            guard let bl = b.lower else { return false }
            guard let al = a.lower else { return true }
            return al.lexicographicallyPrecedes(bl)
        }
        for (a, b) in zip(ranges, ranges.dropFirst()) {
            guard let upper = a.upper, let lower = b.lower, !lower.lexicographicallyPrecedes(upper) else {
                return try exactKeys(plan, info: info, source: source)?.count
            }
        }
        return try Planner.countEntries(tree, ranges, cap: .max)
    }

    /// Values of one field for every match, read from the records without decoding the objects,
    /// when the query needs no decoding (no predicate, or an exact one) and the field is stored.
    static func fieldValues<M: Model, V, S: TreeSource>(_ keyPath: KeyPath<M, V>, query: Query<M>, info: ModelInfo<M>, source: S) throws -> [V]? {
        guard !query.isSorted, !query.isDistinct, query.offset == 0, query.limit == nil, query.ranking == nil,
            let path = fieldPath(of: keyPath as PartialKeyPath<M>), !path.isNestedPath,
            let field = info.stored.object.field(named: path),
            let records = try source.tree(named: info.recordTree)
        else { return nil }
        var reader = FieldValueReader<V>(field: field, context: EncodingContext(model: info.name, path: [path]))
        if !query.hasConditions {
            var ok = true
            try Planner.scan(records, KeyRange(lower: nil, upper: nil)) { _, record in
                ok = try reader.read(record)
                return ok
            }
            return ok ? reader.values : nil
        }
        guard let keys = try exactKeys(query, info: info, source: source) else { return nil }
        for key in keys {
            guard let record = try records.view(key) else { throw StrataError.corruptRecord("an index of \(info.name) names a missing object") }
            if try !reader.read(record) { return nil }
        }
        return reader.values
    }

    /// Reads one field's values out of records, for `fieldValues`. A struct with a method rather
    /// than a nested function capturing the array: captured locals are boxed and checked for
    /// exclusive access at run time, and the box looks up `[V]`'s metadata, on every record.
    private struct FieldValueReader<V> {
        let field: FieldSchema
        let context: EncodingContext
        var values: [V] = []
        /// `V`'s nil (none when `V` is not optional) and whether `V` is a double optional: decided
        /// once, not by casts on every record that holds a nil.
        let none: V? = nilValue(of: V.self)
        let isDoubleOptional = (V.self as? any OptionalValue.Type)?.wrapsOptional == true

        /// Appends the record's value; false when it cannot be read as `V` without decoding.
        mutating func read(_ record: UnsafeRawBufferPointer) throws -> Bool {
            let found = try RecordField.find(field.id, in: record)
            guard let (bytes, isNil) = found, !isNil else {
                // A missing field (added after this record was written) reads as nil, like a
                // stored nil; except that a stored nil in a double optional is its inner nil
                // (`.some(nil)`), which decoding makes.
                guard let none, found == nil || !isDoubleOptional else { return false }
                values.append(none)
                return true
            }
            guard RecordDecoding.isPrimitive(V.self) else { return false }
            values.append(try RecordDecoding.primitive(V.self, as: field.type, bytes: bytes, context: context))
            return true
        }
    }

    static func candidateKeys<M: Model, S: TreeSource>(_ plan: Plan, info: ModelInfo<M>, source: S) throws -> [[UInt8]] {
        var keys: [[UInt8]] = []
        for access in plan.accesses {
            switch access.source {
            case .primary:
                guard let records = try source.tree(named: info.recordTree) else { continue }
                for range in access.ranges {
                    try Planner.scan(records, range) { key, _ in
                        keys.append(Array(key)); return true
                    }
                }
            case .index(let i):
                let unique = info.plannerIndexes[i].schema.unique
                guard let index = try source.tree(named: info.indexTreeNames[i]) else { continue }
                for range in access.ranges {
                    try Planner.scan(index, range) { key, value in
                        keys.append(try IndexEntry.primaryKey(key: key, value: value, unique: unique))
                        return true
                    }
                }
            case let .text(i, search):
                guard let index = try source.tree(named: info.indexTreeNames[i]) else { continue }
                keys.append(contentsOf: try TextIndexReader(tree: index, keyLength: info.postingKeyLength).keys(search))
            }
        }
        // In primary-key order, each once (a union or a multi-valued index repeats them). One
        // search, or one range of the primary key, gives them so already.
        if plan.accesses.count == 1 {
            switch plan.accesses[0].source {
            case .text: return keys
            case .primary where plan.accesses[0].ranges.count == 1: return keys
            default: break
            }
        }
        keys.sort { $0.lexicographicallyPrecedes($1) }
        var unique: [[UInt8]] = []
        unique.reserveCapacity(keys.count)
        for key in keys where key != unique.last { unique.append(key) }
        return unique
    }
}
