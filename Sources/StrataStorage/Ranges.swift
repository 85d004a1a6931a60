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
    public func forEach(from lower: [UInt8]? = nil, to upper: [UInt8]? = nil, reverse: Bool = false,
                        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool) throws {
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

extension ReadTree {
    /// Visits entries with `lower <= key < upper`, ascending or descending, while `body` returns true.
    public func forEach(from lower: [UInt8]? = nil, to upper: [UInt8]? = nil, reverse: Bool = false,
                        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool) throws {
        try cursor().forEach(from: lower, to: upper, reverse: reverse, body)
    }
}

extension WriteTree {
    /// Visits entries with `lower <= key < upper`, ascending or descending, while `body` returns true.
    /// `body` must not write to the transaction.
    public func forEach(from lower: [UInt8]? = nil, to upper: [UInt8]? = nil, reverse: Bool = false,
                        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool) throws {
        try cursor().forEach(from: lower, to: upper, reverse: reverse, body)
    }
}
