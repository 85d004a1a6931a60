import Foundation

// Evaluates a translated predicate on encoded records, reading only the fields it names: rows that
// fail are never decoded, and a count decodes nothing. Only conditions whose result is certain to
// equal Swift's own evaluation compile (top-level fields; integers, floating point, strings,
// bools, dates and raw-value enums; ordering only on non-optional fields); anything else returns
// nil and the query evaluates the predicate on decoded objects instead.

struct RecordFilter: Sendable {
    private let test: @Sendable (UnsafeRawBufferPointer) throws -> Bool

    func matches(_ record: UnsafeRawBufferPointer) throws -> Bool { try test(record) }

    /// The filter of no conditions: every record passes.
    static let passing = RecordFilter { _ in true }

    static func compile(_ conditions: [Condition], schema: ObjectSchema) -> RecordFilter? {
        var tests: [@Sendable (UnsafeRawBufferPointer) throws -> Bool] = []
        for condition in conditions {
            guard let test = compile(condition, schema: schema) else { return nil }
            tests.append(test)
        }
        // One closure, not a loop over an array of them: iterating the array copied each closure
        // (a retain and a release of its context) for every record scanned. Joined in pairs, in
        // order: a chain joined one by one recursed once per filter for every record (thousands
        // of filters chained in a loop overflowed a thread's stack).
        if tests.isEmpty { return passing }
        while tests.count > 1 {
            var joined: [@Sendable (UnsafeRawBufferPointer) throws -> Bool] = []
            joined.reserveCapacity((tests.count + 1) / 2)
            for i in stride(from: 0, to: tests.count, by: 2) {
                if i + 1 == tests.count {
                    joined.append(tests[i])
                } else {
                    let (first, second) = (tests[i], tests[i + 1])
                    joined.append { try first($0) && second($0) }
                }
            }
            tests = joined
        }
        return RecordFilter(test: tests[0])
    }

    private static func compile(_ condition: Condition, schema: ObjectSchema) -> (@Sendable (UnsafeRawBufferPointer) throws -> Bool)? {
        switch condition {
        case let .and(a, b):
            guard let l = compile(a, schema: schema), let r = compile(b, schema: schema) else { return nil }
            return { try l($0) && r($0) }
        case let .or(a, b):
            guard let l = compile(a, schema: schema), let r = compile(b, schema: schema) else { return nil }
            return { try l($0) || r($0) }
        case let .not(c):
            guard let inner = compile(c, schema: schema) else { return nil }
            return { try !inner($0) }
        case let .isNil(path, isNil):
            guard let field = schema.field(named: path), !path.isNestedPath, field.type.isOptional else { return nil }
            let id = field.id
            return { record in
                let stored = try RecordField.find(id, in: record)
                let present = stored.map { !$0.1 } ?? false
                return isNil ? !present : present
            }
        case let .compare(path, op, value):
            guard !path.isNestedPath, let field = schema.field(named: path) else { return nil }
            let optional = field.type.isOptional
            if optional && op != .eq && op != .ne { return nil }
            var constant: Any? = value
            if let wrapped = value as? any OptionalValue { constant = wrapped.wrappedAny }
            // `field == nil`-style comparisons with a nil constant.
            guard let constant else {
                guard optional else { return nil }
                let id = field.id
                return { record in
                    let present = try RecordField.find(id, in: record).map { !$0.1 } ?? false
                    return op == .eq ? !present : present
                }
            }
            guard let compare = comparator(field.type.unwrapped, op, constant) else { return nil }
            let id = field.id
            return { record in
                guard let (bytes, isNil) = try RecordField.find(id, in: record), !isNil else {
                    // A missing value equals nothing and differs from everything.
                    return op == .ne
                }
                return try compare(bytes)
            }
        case let .inList(path, values):
            guard !path.isNestedPath, let field = schema.field(named: path), !field.type.isOptional else { return nil }
            var tests: [@Sendable (UnsafeRawBufferPointer) throws -> Bool] = []
            for value in values {
                guard let test = comparator(field.type, .eq, value) else { return nil }
                tests.append(test)
            }
            let id = field.id
            let any = anyOf(tests[...])
            return { record in
                guard let (bytes, isNil) = try RecordField.find(id, in: record), !isNil else { return false }
                return try any(bytes)
            }
        case let .startsWith(path, prefix):
            guard !path.isNestedPath, let field = schema.field(named: path), field.type == .string else { return nil }
            let id = field.id
            return { record in
                guard let (bytes, isNil) = try RecordField.find(id, in: record), !isNil else { return false }
                return PredicateSemantics.startsWith(String(decoding: bytes, as: UTF8.self), prefix)
            }
        case let .contains(path, substring):
            guard !path.isNestedPath, let field = schema.field(named: path), field.type == .string else { return nil }
            let id = field.id
            return { record in
                guard let (bytes, isNil) = try RecordField.find(id, in: record), !isNil else { return false }
                return PredicateSemantics.contains(String(decoding: bytes, as: UTF8.self), substring)
            }
        case let .textSearch(path, search):
            guard !path.isNestedPath, let field = schema.field(named: path), field.type.unwrapped == .string else { return nil }
            let id = field.id
            return { record in
                guard let (bytes, isNil) = try RecordField.find(id, in: record), !isNil else { return false }
                return search.matches(words: WordTokenizer.words(utf8: bytes))
            }
        case .arrayContains, .unknown, .opaque:
            return nil
        }
    }

    /// `tests` joined by `||`, as a balanced tree of closures (as deep as the log of their count):
    /// one call per value tested, and no array walked per record (which copied each closure).
    private static func anyOf(_ tests: ArraySlice<@Sendable (UnsafeRawBufferPointer) throws -> Bool>) -> @Sendable (UnsafeRawBufferPointer) throws -> Bool {
        guard let first = tests.first else { return { _ in false } }
        if tests.count == 1 { return first }
        let middle = tests.startIndex + tests.count / 2
        let left = anyOf(tests[..<middle]), right = anyOf(tests[middle...])
        return { try left($0) || right($0) }
    }

    /// A test of one stored (non-nil) value against a constant, when both are of a kind this
    /// evaluates exactly as Swift does.
    private static func comparator(_ type: FieldType, _ op: CompareOp, _ constant: Any) -> (@Sendable (UnsafeRawBufferPointer) throws -> Bool)? {
        func ordered<T: Comparable & Sendable>(_ c: T, _ read: @escaping @Sendable (UnsafeRawBufferPointer) throws -> T)
            -> @Sendable (UnsafeRawBufferPointer) throws -> Bool
        {
            switch op {
            case .eq: return { try read($0) == c }
            case .ne: return { try read($0) != c }
            case .lt: return { try read($0) < c }
            case .le: return { try read($0) <= c }
            case .gt: return { try read($0) > c }
            case .ge: return { try read($0) >= c }
            }
        }
        switch type {
        case .int(_, let signed):
            if signed, let c = signedValue(constant) {
                return ordered(c) { bytes in
                    var reader = ByteReader(bytes)
                    return unzigzag(try reader.varint())
                }
            }
            if !signed, let c = unsignedValue(constant) {
                return ordered(c) { bytes in
                    var reader = ByteReader(bytes)
                    return try reader.varint()
                }
            }
            return nil
        case .double:
            guard let c = constant as? Double else { return nil }
            return ordered(c) { bytes in
                guard bytes.count == 8 else { throw StrataError.corruptRecord("Double of \(bytes.count) bytes") }
                return Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(as: UInt64.self)))
            }
        case .float:
            guard let c = constant as? Float else { return nil }
            return ordered(c) { bytes in
                guard bytes.count == 4 else { throw StrataError.corruptRecord("Float of \(bytes.count) bytes") }
                return Float(bitPattern: UInt32(littleEndian: bytes.loadUnaligned(as: UInt32.self)))
            }
        case .date:
            guard let c = constant as? Date else { return nil }
            return ordered(c) { bytes in
                guard bytes.count == 8 else { throw StrataError.corruptRecord("Date of \(bytes.count) bytes") }
                return Date(timeIntervalSinceReferenceDate: Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(as: UInt64.self))))
            }
        case .string:
            guard let c = constant as? String else { return nil }
            return ordered(c) { String(decoding: $0, as: UTF8.self) }
        case .bool:
            guard let c = constant as? Bool, op == .eq || op == .ne else { return nil }
            return { bytes in
                guard bytes.count == 1 else { throw StrataError.corruptRecord("Bool of \(bytes.count) bytes") }
                return (bytes[0] != 0) == c ? op == .eq : op == .ne
            }
        case .enumeration(let raw):
            // Enums compare by case, which is by raw value only for equality.
            guard op == .eq || op == .ne, let r = constant as? any RawRepresentable else { return nil }
            return comparator(raw, op, r.rawValue)
        default:
            return nil
        }
    }

    private static func signedValue(_ value: Any) -> Int64? {
        switch value {
        case let v as Int: return Int64(v)
        case let v as Int64: return v
        case let v as Int32: return Int64(v)
        case let v as Int16: return Int64(v)
        case let v as Int8: return Int64(v)
        default: return nil
        }
    }

    private static func unsignedValue(_ value: Any) -> UInt64? {
        switch value {
        case let v as UInt: return UInt64(v)
        case let v as UInt64: return v
        case let v as UInt32: return UInt64(v)
        case let v as UInt16: return UInt64(v)
        case let v as UInt8: return UInt64(v)
        default: return nil
        }
    }
}

/// The operations of Foundation's predicate expressions, called the way their `evaluate` calls
/// them: in a generic context, so that the standard library's element-wise (`Character`-wise)
/// versions run, not Foundation's `StringProtocol` ones (`"abc".contains("")` is false there,
/// true for `#Predicate`; `"cafe\u{301}".contains("\u{301}")` the opposite).
enum PredicateSemantics {
    /// `PredicateExpressions.CollectionContainsCollection`.
    static func contains<B: Collection, O: Collection>(_ base: B, _ other: O) -> Bool where B.Element == O.Element, B.Element: Equatable {
        base.contains(other)
    }

    /// `PredicateExpressions.SequenceStartsWith`.
    static func startsWith<B: Sequence, P: Sequence>(_ base: B, _ prefix: P) -> Bool where B.Element == P.Element, B.Element: Equatable {
        base.starts(with: prefix)
    }
}
