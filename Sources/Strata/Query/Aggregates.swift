import Foundation

/// Aggregates over the matching objects. Each runs the query once; with no filter, or a filter an
/// index answers exactly, and no sort, window, `distinct` or ranking, they read one field of each
/// record and decode nothing else (otherwise they decode the matching objects).
///
/// ```swift
/// let items = db.objects(Item.self).filter(#Predicate { $0.category == 7 })
/// let total = items.sum(of: \.score)          // reads only `score` from each record
/// let newest = items.max(of: \.created)
/// ```
extension Results {
    /// The values of `keyPath` over the matching objects, in result order.
    func values<V>(_ keyPath: KeyPath<M, V>) throws -> [V] {
        if let error = state.cached(M.self)?.error { throw error }
        // Objects already decoded are read as they are; otherwise one field of each record.
        let decoded: Bool
        if case .objects? = state.cached(M.self)?.rows { decoded = true } else { decoded = false }
        if !decoded, let snapshot,
            let fast = try snapshot.checked({
                try QueryEngine.fieldValues(keyPath, query: query, info: try snapshot.db.info(M.self), source: SnapshotTrees(txn: snapshot.txn))
            })
        {
            return fast
        }
        return try fetch().map { $0[keyPath: keyPath] }
    }

    /// The smallest value of `keyPath`, or nil when there are no objects. Values are ordered as
    /// a sort orders them: NaN is above every number, so it is the minimum only when every value
    /// is NaN.
    ///
    /// ```swift
    /// let youngest = db.objects(Person.self).min(of: \.age)
    /// ```
    public func min<V: Comparable>(of keyPath: KeyPath<M, V>) -> V? {
        guard let values = try? values(keyPath) else { return nil }
        return Self.least(values)
    }

    /// The largest value of `keyPath`, or nil when there are no objects. Values are ordered as a
    /// sort orders them: NaN is above every number, so it is the maximum when any value is NaN.
    ///
    /// ```swift
    /// let oldest = db.objects(Person.self).max(of: \.age)
    /// ```
    public func max<V: Comparable>(of keyPath: KeyPath<M, V>) -> V? {
        guard let values = try? values(keyPath) else { return nil }
        return Self.greatest(values)
    }

    /// The smallest non-nil value of an optional field (NaN only when every value is NaN).
    ///
    /// ```swift
    /// let earliest = db.objects(Task.self).min(of: \.dueDate)   // dueDate: Date?
    /// ```
    public func min<V: Comparable>(of keyPath: KeyPath<M, V?>) -> V? {
        guard let values = try? values(keyPath) else { return nil }
        return Self.least(values.compactMap { $0 })
    }

    /// The largest non-nil value of an optional field (NaN when any value is NaN).
    ///
    /// ```swift
    /// let latest = db.objects(Task.self).max(of: \.dueDate)   // dueDate: Date?
    /// ```
    public func max<V: Comparable>(of keyPath: KeyPath<M, V?>) -> V? {
        guard let values = try? values(keyPath) else { return nil }
        return Self.greatest(values.compactMap { $0 })
    }

    // `Array.min()` and `max()` compare with `<`, which is false both ways between NaN and a
    // number, so their answer would depend on where the NaN is in the results. These follow the
    // documented sort order instead (a value unequal to itself, NaN or a date of NaN, above every
    // other, and equal to its kind), the first of equal values winning as in `min()`.

    /// The first smallest of `values` in the sort order.
    static func least<V: Comparable>(_ values: [V]) -> V? {
        guard var best = values.first else { return nil }
        for value in values.dropFirst() where value == value && (best != best || value < best) { best = value }
        return best
    }

    /// The first largest of `values` in the sort order.
    static func greatest<V: Comparable>(_ values: [V]) -> V? {
        guard var best = values.first else { return nil }
        for value in values.dropFirst() where best == best && (value != value || best < value) { best = value }
        return best
    }

    /// The sum of `keyPath` (0 when there are no objects, or when the query fails; `fetchSum`
    /// throws instead).
    ///
    /// ```swift
    /// let total = db.objects(Order.self).sum(of: \.amount)   // amount: Double
    /// ```
    public func sum<V: AdditiveArithmetic>(of keyPath: KeyPath<M, V>) -> V { (try? fetchSum(of: keyPath)) ?? .zero }

    /// The sum of an integer field; 0 when there are no objects, when the query fails or when the
    /// sum does not fit in `V` (`fetchSum` throws instead of trapping or wrapping).
    ///
    /// ```swift
    /// let years = db.objects(Person.self).sum(of: \.age)
    /// ```
    public func sum<V: FixedWidthInteger>(of keyPath: KeyPath<M, V>) -> V { (try? fetchSum(of: keyPath)) ?? .zero }

    /// The sum of `keyPath`, throwing what the query hit.
    ///
    /// ```swift
    /// let total = try db.objects(Item.self).fetchSum(of: \.score)
    /// ```
    public func fetchSum<V: AdditiveArithmetic>(of keyPath: KeyPath<M, V>) throws -> V {
        let values = try values(keyPath)
        // Generic code that knows only `AdditiveArithmetic` calls this overload for an integer
        // field too, where `+` traps when values read from the file overflow: sum those as the
        // integer overload does.
        if let integer = V.self as? any FixedWidthInteger.Type {
            func checked<I: FixedWidthInteger>(_: I.Type) throws -> V? {
                guard let integers = values as? [I] else { return nil }
                return try Self.checkedSum(integers, of: keyPath) as? V
            }
            if let sum = try checked(integer) { return sum }
        }
        return values.reduce(.zero, +)
    }

    /// The sum of an integer field, throwing `invalidQuery` when it does not fit in `V`.
    ///
    /// ```swift
    /// let years = try db.objects(Person.self).fetchSum(of: \.age)
    /// ```
    public func fetchSum<V: FixedWidthInteger>(of keyPath: KeyPath<M, V>) throws -> V {
        try Self.checkedSum(try values(keyPath), of: keyPath)
    }

    /// The sum of integers, throwing `invalidQuery` when it does not fit in `V`.
    static func checkedSum<V: FixedWidthInteger>(_ values: [V], of keyPath: AnyKeyPath) throws -> V {
        // The values come in key order or in result order, and a partial sum may pass V's bounds
        // when the whole sum does not (Int.max, 1, -1): an overflow on the way is no error. The
        // wrapping sum is exact modulo 2^bitWidth, so counting the wraps up and down tells whether
        // the true sum fits (no net wrap) and, when it does, the wrapping sum is it.
        var total = V.zero
        var wraps = 0
        for value in values {
            let (sum, overflow) = total.addingReportingOverflow(value)
            // Adding a negative value can only wrap downwards, a positive one upwards.
            if overflow { wraps += value < .zero ? -1 : 1 }
            total = sum
        }
        if wraps != 0 { throw StrataError.invalidQuery("the sum of \(keyPath) does not fit in \(V.self)") }
        return total
    }

    /// The mean of a floating-point field, or nil when there are no objects.
    ///
    /// ```swift
    /// let mean = db.objects(Order.self).average(of: \.amount)   // amount: Double
    /// ```
    public func average<V: BinaryFloatingPoint>(of keyPath: KeyPath<M, V>) -> V? {
        guard let values = try? values(keyPath), !values.isEmpty else { return nil }
        return values.reduce(.zero, +) / V(values.count)
    }

    /// The mean of an integer field, as a Double, or nil when there are no objects.
    ///
    /// ```swift
    /// let meanAge = db.objects(Person.self).average(of: \.age)
    /// ```
    public func average<V: BinaryInteger>(of keyPath: KeyPath<M, V>) -> Double? {
        guard let values = try? values(keyPath), !values.isEmpty else { return nil }
        return values.reduce(0.0) { $0 + Double($1) } / Double(values.count)
    }

    /// The mean of a date field, or nil when there are no objects.
    ///
    /// ```swift
    /// let typical = db.objects(Message.self).average(of: \.sentAt)
    /// ```
    public func average(of keyPath: KeyPath<M, Date>) -> Date? {
        guard let values = try? values(keyPath), !values.isEmpty else { return nil }
        let seconds = values.reduce(0.0) { $0 + $1.timeIntervalSinceReferenceDate } / Double(values.count)
        return Date(timeIntervalSinceReferenceDate: seconds)
    }
}
