import Foundation

/// The order of a query's results: its sort descriptors one after the other, ties in primary-key
/// order. Every plan (an index walked either way, an in-memory sort, live results kept up to date)
/// orders through this one definition, so none can disagree with another.
///
/// A descriptor on a stored number, date or bool compares the key encodings of the values, which
/// order exactly as `SortDescriptor.compare` does, and also where Foundation has no order: NaN
/// sorts above every number (and equals NaN), and -0.0 equals 0.0. So does a descriptor on a
/// stored `String` under a collation (`sorted(by:collation:)`), which is defined by its sort key.
/// Any other descriptor (strings without a collation, enums, nested values, and values of types
/// that wrap a stored number or date) is asked to compare.
struct ResultOrder<M: Model> {
    private enum Part {
        /// Key-encoded: compared as bytes, inverted for a reverse descriptor. `tagged`: the path
        /// reaches a non-optional value through an optional struct (`\.address?.zip`), so the
        /// descriptor reads an optional, encoded with its tag (nil 0x00, else 0x01 then the value)
        /// where an index holds the bare value (FORMAT.md §8.3).
        case encoded(keyPath: PartialKeyPath<M>, type: FieldType, reverse: Bool, collation: StringCollation?, tagged: Bool)
        case compared(SortDescriptor<M>)
        /// A `String` the key path reads but that no stored field holds (a reference's key,
        /// `\.author.id`), ordered by the query's collation: encoded from the object alone.
        case collated(keyPath: PartialKeyPath<M>, reverse: Bool, collation: StringCollation)
    }

    private let parts: [Part]

    init(_ query: Query<M>, info: ModelInfo<M>) {
        self.init(query.sort, collation: query.collation, info: info)
    }

    init(_ descriptors: [SortDescriptor<M>], collation: StringCollation?, info: ModelInfo<M>) {
        var allEncoded = true
        // (A loop by position, not `map`: the element types depend on the model, and the generic
        // `map` compiled unspecialized cost as much as the parts it built.)
        var parts: [Part] = []
        for d in 0..<descriptors.count {
            let descriptor = descriptors[d]
            if let keyPath = descriptor.keyPath, ResultOrder.readsKeyOrderedType(keyPath), let path = fieldPath(of: keyPath),
                let type = info.type(atPath: path), ResultOrder.isKeyOrdered(type, collation: collation)
            {
                parts.append(
                    .encoded(
                        keyPath: keyPath, type: type, reverse: descriptor.order == .reverse,
                        collation: type.unwrapped == .string ? collation : nil, tagged: ResultOrder.reachesThroughOptional(path, info: info)))
                continue
            }
            allEncoded = false
            if let collation, let keyPath = descriptor.keyPath, ResultOrder.readsString(keyPath) {
                parts.append(.collated(keyPath: keyPath, reverse: descriptor.order == .reverse, collation: collation))
            } else {
                parts.append(.compared(descriptor))
            }
        }
        self.parts = parts
        isEncoded = allEncoded
    }

    /// Whether the key encoding of a stored type orders as `Comparable` does (with NaN above every
    /// number): not strings (whose descriptors may compare localized), nor enums (which compare by
    /// declaration or by a custom `<`).
    static func isKeyOrdered(_ type: FieldType) -> Bool { type.isKeyOrdered }

    /// Whether a key path reads a value of a Swift type whose `<` is what `isKeyOrdered` vouches
    /// for (a number, a date, a bool, or a string under a collation), or an optional of one. The
    /// stored type alone does not say: a single-value wrapper (a tagged identifier, a property
    /// wrapper) is stored as the value it wraps, but sorts by its own `<`, which may be another
    /// order, and its values are not ones `KeyEncoding` encodes.
    static func readsKeyOrderedType(_ keyPath: AnyKeyPath) -> Bool {
        var valueType = type(of: keyPath).valueType
        // (The common case, a plain number, date or string, before the protocol cast: it looks a
        // conformance up, on every query with a sort.)
        if resultOrderKeyOrderedTypes.contains(ObjectIdentifier(valueType)) { return true }
        while let optional = valueType as? any OptionalValue.Type {
            valueType = optional.wrappedType
            if resultOrderKeyOrderedTypes.contains(ObjectIdentifier(valueType)) { return true }
        }
        return false
    }

    /// Whether a key path reads a `String` or an optional of one.
    static func readsString(_ keyPath: AnyKeyPath) -> Bool {
        var valueType = type(of: keyPath).valueType
        while let optional = valueType as? any OptionalValue.Type { valueType = optional.wrappedType }
        return valueType == String.self
    }

    /// `isKeyOrdered`, or a `String` ordered by a collation's sort keys.
    static func isKeyOrdered(_ type: FieldType, collation: StringCollation?) -> Bool {
        isKeyOrdered(type) || (collation != nil && type.unwrapped == .string)
    }

    /// Whether `path` reaches a value that is not optional through an optional struct
    /// (`inner.n` with `inner: Inner?`, `n: Int`). A key path to it reads an optional (nil where
    /// the struct is), so a sort on it orders nil first, as the tag of an optional's encoding
    /// does. An index on it is not walked for such a sort: one written before `taggedValues`
    /// held a value's bare encoding, which can begin with 0x00 as a nil struct's does (a tagged
    /// one orders as the sort, but is not walked yet: such sorts run in memory).
    static func reachesThroughOptional(_ path: String, info: ModelInfo<M>) -> Bool {
        Strata.reachesThroughOptional(path, typeAt: info.type(atPath:))
    }

    /// Whether every descriptor compares encodings: then `sortKey` alone decides the order (before
    /// the primary key), and an index on the field walks in this order. Decided once, in `init`:
    /// a walk over `parts` is generic code over the model, compiled unspecialized, and cost as much
    /// as building them.
    let isEncoded: Bool

    /// The concatenated encodings of the encoded descriptors' values (each prefix-free, so
    /// comparing the concatenations compares them one by one).
    func sortKey(_ object: M) throws -> [UInt8] {
        var key: [UInt8] = []
        for part in parts {
            guard case let .encoded(keyPath, type, reverse, collation, tagged) = part else { continue }
            try Self.append(object[keyPath: keyPath], type: type, reverse: reverse, collation: collation, tagged: tagged, keyPath: keyPath, to: &key)
        }
        return key
    }

    /// `sortKey` read from a record's bytes (each descriptor's field, as an index on it would hold
    /// it: RecordIndexKeys), so that results sorted by encodings need no decoded object.
    func sortKey(record: UnsafeRawBufferPointer, schema: ObjectSchema) throws -> [UInt8] {
        var key: [UInt8] = []
        for part in parts {
            guard case let .encoded(keyPath, _, reverse, collation, tagged) = part, let path = fieldPath(of: keyPath) else { continue }
            let start = key.count
            if tagged {
                // As `append` encodes the optional the key path reads.
                switch try IndexEntries.leaf(record, schema: schema, path: path) {
                case .absent: key.append(0)
                case let .present(bytes, type):
                    key.append(1)
                    if let collation {
                        collation.appendEncodedKey(utf8: bytes, to: &key)
                    } else {
                        try RecordIndexKeys.append(bytes, as: type, to: &key)
                    }
                }
            } else {
                guard let value = try IndexEntries.fieldValues(record, schema: schema, path: path, collation: collation, tagged: false).first else {
                    throw StrataError.invalidQuery("cannot read the sort value of \(keyPath)")
                }
                key.append(contentsOf: value)
            }
            if reverse { for i in start..<key.count { key[i] = ~key[i] } }
        }
        return key
    }

    private static func append(
        _ value: Any, type: FieldType, reverse: Bool, collation: StringCollation?, tagged: Bool, keyPath: PartialKeyPath<M>, to key: inout [UInt8]
    ) throws {
        let start = key.count
        if tagged && collation == nil {
            // The optional the key path reads, with its tag as `sortKey(record:)` writes it: the
            // stored type is not optional, and `KeyEncoding.append(_:as:)` would unwrap a value
            // into its bare encoding, which can begin with 0x00 as nil's does (-infinity,
            // Int.min, an empty string) and then sort by whatever follows it in the key.
            let optional = value as? any OptionalValue
            if let optional, optional.wrappedAny == nil {
                key.append(0)
            } else {
                key.append(1)
                guard KeyEncoding.append(optional?.wrappedAny ?? value, as: type, to: &key) else {
                    throw StrataError.invalidQuery("cannot encode the sort value of \(keyPath)")
                }
            }
        } else if let collation {
            // As an index in the collation holds it (IndexEntries.fieldValues): nil 0x00, a
            // present optional 0x01 then the key.
            if let optional = value as? any OptionalValue {
                if let string = optional.wrappedAny as? String {
                    key.append(1)
                    collation.appendEncodedKey(string, to: &key)
                } else {
                    key.append(0)
                }
            } else if let string = value as? String {
                collation.appendEncodedKey(string, to: &key)
            } else {
                throw StrataError.invalidQuery("cannot read the sort value of \(keyPath) as a String")
            }
        } else {
            guard KeyEncoding.append(value, as: type, to: &key) else {
                throw StrataError.invalidQuery("cannot encode the sort value of \(keyPath)")
            }
        }
        if reverse { for i in start..<key.count { key[i] = ~key[i] } }
    }

    /// Sorts `objects` (and `keys`, their primary keys, position for position) into this order;
    /// with `leading` (one key per object, e.g. a relevance score's encoding), by those keys first.
    func sort(_ objects: inout [M], keys: inout [[UInt8]], leading: [[UInt8]]? = nil) throws {
        if parts.isEmpty && leading == nil { return }
        // Sort positions, not objects: moving an object copies (and retains) all of it.
        var order = Array(objects.indices)
        if isEncoded {
            // Each object's values encoded once: the sort compares bytes, not descriptors
            // (Foundation's per-comparison cost dominates otherwise).
            var sortKeys = try objects.map(sortKey)
            if let leading { sortKeys = zip(leading, sortKeys).map { $0 + $1 } }
            order.sort { a, b in
                let c = KeyEncoding.compare(sortKeys[a], sortKeys[b])
                if c != 0 { return c < 0 }
                return KeyEncoding.compare(keys[a], keys[b]) < 0
            }
        } else {
            // Per object, the encoding of each encoded part (empty for compared ones).
            var encoded: [[[UInt8]]] = []
            encoded.reserveCapacity(objects.count)
            for object in objects {
                var row: [[UInt8]] = []
                for part in parts {
                    var bytes: [UInt8] = []
                    switch part {
                    case let .encoded(keyPath, type, reverse, collation, tagged):
                        try Self.append(
                            object[keyPath: keyPath], type: type, reverse: reverse, collation: collation, tagged: tagged, keyPath: keyPath, to: &bytes)
                    case let .collated(keyPath, reverse, collation):
                        try Self.append(
                            object[keyPath: keyPath], type: .string, reverse: reverse, collation: collation, tagged: false, keyPath: keyPath, to: &bytes)
                    case .compared:
                        break
                    }
                    row.append(bytes)
                }
                encoded.append(row)
            }
            let parts = self.parts
            order.sort { a, b in
                if let leading, leading[a] != leading[b] { return leading[a].lexicographicallyPrecedes(leading[b]) }
                for (p, part) in parts.enumerated() {
                    switch part {
                    case .encoded, .collated:
                        let x = encoded[a][p], y = encoded[b][p]
                        if x != y { return x.lexicographicallyPrecedes(y) }
                    case .compared(let descriptor):
                        switch descriptor.compare(objects[a], objects[b]) {
                        case .orderedAscending: return true
                        case .orderedDescending: return false
                        case .orderedSame: continue
                        }
                    }
                }
                return keys[a].lexicographicallyPrecedes(keys[b])
            }
        }
        objects = order.map { objects[$0] }
        keys = order.map { keys[$0] }
    }
}

/// The Swift types `ResultOrder.readsKeyOrderedType` accepts (a static of a generic type cannot be stored).
private let resultOrderKeyOrderedTypes: Set<ObjectIdentifier> = [
    ObjectIdentifier(Int.self), ObjectIdentifier(Int8.self), ObjectIdentifier(Int16.self), ObjectIdentifier(Int32.self),
    ObjectIdentifier(Int64.self), ObjectIdentifier(UInt.self), ObjectIdentifier(UInt8.self), ObjectIdentifier(UInt16.self),
    ObjectIdentifier(UInt32.self), ObjectIdentifier(UInt64.self), ObjectIdentifier(Double.self), ObjectIdentifier(Float.self),
    ObjectIdentifier(Date.self), ObjectIdentifier(Bool.self), ObjectIdentifier(String.self),
]

/// `ResultOrder.reachesThroughOptional`, with the stored types of the model's field paths from
/// `typeAt` (also used before a `ModelInfo` exists, to build its `PlannerIndex`es).
func reachesThroughOptional(_ path: String, typeAt: (String) -> FieldType?) -> Bool {
    // (A top-level field, the common case, without splitting by Character.)
    guard path.isNestedPath else { return false }
    let parts = path.split(separator: ".")
    guard parts.count > 1, let leaf = typeAt(path), !leaf.isOptional else { return false }
    var prefix = ""
    for part in parts.dropLast() {
        prefix = prefix.isEmpty ? String(part) : prefix + "." + part
        if typeAt(prefix)?.isOptional == true { return true }
    }
    return false
}

extension FieldType {
    /// `ResultOrder.isKeyOrdered` (here, for code that is not generic over a model).
    var isKeyOrdered: Bool {
        switch unwrapped {
        case .int, .double, .float, .date, .bool: return true
        default: return false
        }
    }
}
