/// Range scans shared by read and write trees.
extension Cursor {
    /// Visits entries with `lower <= key < upper` in order (or in reverse), while `body` returns true.
    /// A nil bound is open.
    ///
    /// ```swift
    /// try tree.cursor().forEach(from: Array("a".utf8), to: Array("b".utf8)) { key, value in
    ///     print(String(decoding: key, as: UTF8.self)); return true
    /// }
    /// ```
    public func forEach(
        from lower: [UInt8]? = nil, to upper: [UInt8]? = nil, reverse: Bool = false,
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        if !reverse {
            var more = try lower.map { try seek($0) } ?? first()
            while more {
                if let upper, upper.withUnsafeBytes({ compareBytes(key, $0) }) >= 0 { return }
                if try !body(key, value) { return }
                more = try next()
            }
        } else {
            var more: Bool
            if let upper {
                // Last key < upper: seek to the first key ≥ upper and step back.
                more = try seek(upper) ? try prev() : try last()
            } else {
                more = try last()
            }
            while more {
                if let lower, lower.withUnsafeBytes({ compareBytes(key, $0) }) < 0 { return }
                if try !body(key, value) { return }
                more = try prev()
            }
        }
    }
}

extension Cursor {
    /// How many keys are smaller than `key`: the position `key` has, or would have, in the tree.
    ///
    /// ```swift
    /// let below = try tree.cursor().rank(of: Array("m".utf8))
    /// ```
    public func rank(of key: [UInt8]) throws -> Int {
        if try seek(key) { return try position() ?? 0 }
        return try last() ? (try position() ?? -1) + 1 : 0
    }

    /// How many entries have `lower <= key < upper` (a nil bound is open), found from the counts
    /// the branches keep: two descents, however many entries lie between.
    ///
    /// ```swift
    /// let teens = try tree.cursor().count(from: [13], to: [20])
    /// ```
    public func count(from lower: [UInt8]? = nil, to upper: [UInt8]? = nil) throws -> Int {
        let start = try lower.map { try rank(of: $0) } ?? 0
        let end = try upper.map { try rank(of: $0) } ?? (try last() ? (try position() ?? -1) + 1 : 0)
        return max(0, end - start)
    }
}

extension ReadTree {
    /// Entries with `lower <= key < upper`; a nil bound is open. Two descents, not a scan.
    ///
    /// ```swift
    /// let inRange = try items.count(from: [10], to: [20])
    /// ```
    public func count(from lower: [UInt8]?, to upper: [UInt8]?) throws -> Int {
        try cursor().count(from: lower, to: upper)
    }

    /// Visits entries with `lower <= key < upper`, ascending or descending, while `body` returns true.
    public func forEach(
        from lower: [UInt8]? = nil, to upper: [UInt8]? = nil, reverse: Bool = false,
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        try cursor().forEach(from: lower, to: upper, reverse: reverse, body)
    }
}

extension WriteTree {
    /// Entries with `lower <= key < upper`; a nil bound is open. Two descents, not a scan.
    public func count(from lower: [UInt8]?, to upper: [UInt8]?) throws -> Int {
        try cursor().count(from: lower, to: upper)
    }

    /// Visits entries with `lower <= key < upper`, ascending or descending, while `body` returns true.
    /// `body` must not write to the transaction.
    public func forEach(
        from lower: [UInt8]? = nil, to upper: [UInt8]? = nil, reverse: Bool = false,
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        try cursor().forEach(from: lower, to: upper, reverse: reverse, body)
    }
}
