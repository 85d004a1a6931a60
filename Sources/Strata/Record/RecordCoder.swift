/// A model's record codec: the bytes Strata stores for an object (FORMAT.md §8.2), under the
/// schema this database keeps for the model. For tools that move records without a database
/// in between, and for measuring the codec alone (`strata-bench`).
///
/// ```swift
/// let coder = try db.recordCoder(for: Person.self)
/// let bytes = try coder.encode(ana)
/// let back = try coder.decode(bytes)        // == ana
/// ```
public struct RecordCoder<M: Model>: Sendable {
    let info: ModelInfo<M>

    /// The record of `object`.
    ///
    /// ```swift
    /// let bytes = try coder.encode(ana)   // the bytes a write stores for ana
    /// ```
    public func encode(_ object: M) throws -> [UInt8] { try info.encode(object) }

    /// The object a record holds; a record that does not decode throws `corruptRecord` or
    /// `typeMismatch`, naming the field.
    ///
    /// ```swift
    /// let person = try bytes.withUnsafeBytes { try coder.decode($0) }   // reads in place, no copy
    /// ```
    public func decode(_ record: UnsafeRawBufferPointer) throws -> M { try info.decode(record) }

    /// The object a record holds.
    ///
    /// ```swift
    /// let back = try coder.decode(try coder.encode(ana))   // == ana
    /// ```
    public func decode(_ record: [UInt8]) throws -> M { try record.withUnsafeBytes { try info.decode($0) } }
}

extension Database {
    /// The record codec of `type`, which must be one of this database's models.
    ///
    /// ```swift
    /// let coder = try db.recordCoder(for: Person.self)   // throws for a model not opened
    /// ```
    public func recordCoder<M: Model>(for type: M.Type) throws -> RecordCoder<M> {
        RecordCoder(info: try info(M.self))
    }
}
