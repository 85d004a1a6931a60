import Foundation

// Records: the stored form of an object. Layout in FORMAT.md, "Records".
//
//   record := varint n, n × (varint (fieldId << 1 | isNil), varint length), the n values back to back
//
// Fields are listed by ascending id, so a query can find one field by walking the small table
// without decoding any value, and a field added to the model later is simply absent from older
// records. Values by type (primitives are written by PrimitiveLayout.swift):
//
//   Bool 1 byte · signed ints zigzag varint · unsigned ints varint · Double 8 bytes · Float 4 bytes
//   String, URL, Decimal UTF-8 · Data raw · Date Double seconds since 2001 · UUID 16 bytes
//   enum: its raw value · Ref: the target's key encoding (KeyEncoding) · nested struct: a record
//   array/set: varint count, count × (varint (length << 1 | isNil), bytes); sets sorted by bytes
//   [String: T]: varint count, count × (varint keyLength, key, varint (length << 1 | isNil), bytes), sorted by key

/// Encodes values of a model's type into records, following its schema.
enum RecordEncoding {
    static func encode<T: Encodable>(_ value: T, schema: ObjectSchema, model: String) throws -> [UInt8] {
        var out: [UInt8] = []
        try encodeValue(value, as: .object(schema), into: &out, context: EncodingContext(model: model, path: []))
        return out
    }

    /// Appends the encoding of `value`, stored as `type`, to `out`. Nil optionals are the caller's.
    /// `layout` is `DecodingLayout.objectSchema(in: type)`'s layout when the caller has it (built
    /// per struct value otherwise).
    static func encodeValue(_ value: Any, as type: FieldType, into out: inout [UInt8], context: EncodingContext, layout: DecodingLayout? = nil) throws {
        if let optional = value as? any OptionalValue {
            guard let wrapped = optional.wrappedAny else {
                throw context.mismatch("nil where a value is required")
            }
            // The inner nil of a nested optional (`String??.some(nil)`): an element or a value
            // has one nil flag, which cannot tell it from the outer nil.
            if let inner = wrapped as? any OptionalValue, inner.wrappedAny == nil {
                throw context.mismatch(
                    "the inner nil of a nested optional (.some(nil)) cannot be stored in an array element or dictionary value, which keep one level of nil")
            }
            return try encodeValue(wrapped, as: type.isOptional ? type.unwrappedOnce : type, into: &out, context: context, layout: layout)
        }
        switch type {
        case .optional(let inner):
            try encodeValue(value, as: inner, into: &out, context: context, layout: layout)
        case .bool:
            guard let v = value as? Bool else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            PrimitiveLayout.append(bool: v, to: &out)
        case .int(_, let signed):
            if signed, let v = value as? any SignedInteger & FixedWidthInteger, let i = Int64(exactly: v) {
                PrimitiveLayout.append(signed: i, to: &out)
            } else if !signed, let v = value as? any UnsignedInteger & FixedWidthInteger, let u = UInt64(exactly: v) {
                PrimitiveLayout.append(unsigned: u, to: &out)
            } else if value is any BinaryInteger {
                throw context.mismatch("\(describeValue(value)) does not fit \(type)")
            } else {
                try encodeThroughSingleValue(value, as: type, into: &out, context: context)
            }
        case .double:
            guard let v = value as? Double else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            PrimitiveLayout.append(double: v, to: &out)
        case .float:
            guard let v = value as? Float else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            PrimitiveLayout.append(float: v, to: &out)
        case .string:
            guard let v = value as? String else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            PrimitiveLayout.append(string: v, to: &out)
        case .data:
            guard let v = value as? Data else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            PrimitiveLayout.append(data: v, to: &out)
        case .date:
            guard let v = value as? Date else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            PrimitiveLayout.append(date: v, to: &out)
        case .uuid:
            guard let v = value as? UUID else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            PrimitiveLayout.append(uuid: v, to: &out)
        case .decimal:
            guard let v = value as? Decimal else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            // NaN's text ("NaN") does not read back as a Decimal: refuse it here, not at every read.
            guard !v.isNaN else { throw context.mismatch("Decimal NaN cannot be stored (a stored Decimal is a number); store nil instead") }
            PrimitiveLayout.append(decimal: v, to: &out)
        case .url:
            guard let v = value as? URL else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            PrimitiveLayout.append(url: v, to: &out)
        case .enumeration(let raw):
            if let v = value as? any RawRepresentable { return try encodeValue(v.rawValue, as: raw, into: &out, context: context) }
            // The raw value itself (what a wrapper of the enum may encode), or a wrapper of the
            // enum, whose single value is encoded as above: its raw value, never what the enum's
            // own encode(to:) writes (the case's name, say), which would not fit the raw type.
            if RecordDecoding.isPrimitive(Swift.type(of: value)) { return try encodeValue(value, as: raw, into: &out, context: context) }
            try encodeThroughSingleValue(value, as: type, into: &out, context: context)
        case .reference:
            // A wrapper of the Ref (`@Box var owner: Ref<Person>`) is stored as its single value.
            guard let v = value as? any ReferenceValue else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            guard let key = KeyEncoding.encode(v.keyAny) else {
                throw context.mismatch("expected a Ref with a storable key, found \(Swift.type(of: value))")
            }
            out.append(contentsOf: key)
        case .object(let schema):
            guard let encodable = value as? any Encodable else { throw context.mismatch("\(Swift.type(of: value)) is not Encodable") }
            let encoder = ObjectEncoder(layout: layout ?? DecodingLayout(schema), context: context)
            try encodable.encode(to: encoder)
            try encoder.finish(into: &out)
        case .array, .dictionary:
            guard let encodable = value as? any Encodable else { throw context.mismatch("\(Swift.type(of: value)) is not Encodable") }
            try encodeCollection(encodable, as: type, into: &out, context: context, layout: layout)
        }
    }

    /// Appends the encoding of `value`, an array, a set or a `[String: T]` dictionary stored as
    /// `type` (`.array` or `.dictionary`), to `out`. Nil optionals are the caller's.
    static func encodeCollection<T: Encodable>(
        _ value: T, as type: FieldType, into out: inout [UInt8], context: EncodingContext, layout: DecodingLayout?
    ) throws {
        var slot: AnyObject?
        try encodeCollection(value, as: type, into: &out, context: context, layout: layout, slot: &slot)
    }

    /// `encodeCollection`, with the encoder `slot` holds when it holds one of the right kind that
    /// nothing else holds (a type may keep its encoder or container past `encode(to:)`: it then
    /// writes into its own buffers, never into a later collection's); otherwise with a new one,
    /// left in `slot`. A field's collections reuse one encoder, its buffers and the encoder of its
    /// struct elements: making them cost as much as writing a few small elements.
    static func encodeCollection<T: Encodable>(
        _ value: T, as type: FieldType, into out: inout [UInt8], context: EncodingContext, layout: DecodingLayout?, slot: inout AnyObject?
    ) throws {
        switch type {
        case .array(let element):
            let encoder = reused(in: &slot, at: context) { ArrayEncoder(element: element, context: context, layout: layout) }
            encoder.isUnordered = value is any UnorderedCollection
            try value.encode(to: encoder)
            if let failure = encoder.failure { throw failure }
            encoder.serialize(into: &out)
        case .dictionary(let element):
            let encoder = reused(in: &slot, at: context) { DictionaryEncoder(element: element, context: context, layout: layout) }
            try value.encode(to: encoder)
            if let failure = encoder.failure { throw failure }
            encoder.serialize(into: &out)
        default:
            try encodeValue(value, as: type, into: &out, context: context, layout: layout)
        }
    }

    /// The encoder in `slot` when it is an `E` nothing else holds, ready at `context`; else a new
    /// one from `make`, left in `slot`.
    private static func reused<E: ReusableEncoder>(in slot: inout AnyObject?, at context: EncodingContext, make: () -> E) -> E {
        if slot != nil, isKnownUniquelyReferenced(&slot), let cached = slot as? E {
            cached.reuse(at: context)
            return cached
        }
        let made = make()
        slot = made
        return made
    }

    /// Appends `value` as `encodeValue` writes it when it is an array of `Int`, `Int64`, `Double` or
    /// `Date` whose elements are stored as `element`: straight from the array, without its
    /// `encode(to:)` (the standard library's, compiled unspecialized, goes through an unkeyed
    /// container and a generic call per element). False, with nothing written, otherwise.
    static func appendPrimitiveArray<T>(_ value: T, element: DecodingLayout.Kind, to out: inout [UInt8]) -> Bool {
        // (Each branch converts a value of exactly T's type; each call is specialized.)
        if T.self == [Int].self { return appendPrimitives(unsafeBitCast(value, to: [Int].self), element: element, to: &out) }
        if T.self == [Int64].self { return appendPrimitives(unsafeBitCast(value, to: [Int64].self), element: element, to: &out) }
        if T.self == [Double].self { return appendPrimitives(unsafeBitCast(value, to: [Double].self), element: element, to: &out) }
        if T.self == [Date].self { return appendPrimitives(unsafeBitCast(value, to: [Date].self), element: element, to: &out) }
        return false
    }

    private static func appendPrimitives<E>(_ values: [E], element: DecodingLayout.Kind, to out: inout [UInt8]) -> Bool {
        let start = out.count
        appendVarint(UInt64(values.count), to: &out)
        for value in values {
            // Each element of these types takes at most 10 bytes, so its header, (length << 1) with
            // no nil flag, is one byte: written after the element's bytes are.
            let header = out.count
            out.append(0)
            guard appendPrimitive(value, kind: element, to: &out) else {
                // The element type is not stored as these elements are (all elements share it,
                // so this is the first): the general path says what does not match.
                out.removeSubrange(start...)
                return false
            }
            out[header] = UInt8(truncatingIfNeeded: (out.count - header - 1) << 1)
        }
        return true
    }

    /// Appends `value` as `encodeValue` writes it, when it is of a common primitive type stored as
    /// `kind`, without passing it through `Any` (each `as?` there is a dynamic cast, and the integer
    /// ones conformance lookups); false, with nothing written, for anything else. The identity of
    /// `T` is checked before each bit cast.
    static func appendPrimitive<T>(_ value: T, kind: DecodingLayout.Kind, to out: inout [UInt8]) -> Bool {
        switch kind {
        case .signed:
            if T.self == Int.self {
                PrimitiveLayout.append(signed: Int64(unsafeBitCast(value, to: Int.self)), to: &out)
            } else if T.self == Int64.self {
                PrimitiveLayout.append(signed: unsafeBitCast(value, to: Int64.self), to: &out)
            } else if T.self == Int32.self {
                PrimitiveLayout.append(signed: Int64(unsafeBitCast(value, to: Int32.self)), to: &out)
            } else {
                return false
            }
        case .unsigned:
            if T.self == UInt64.self {
                PrimitiveLayout.append(unsigned: unsafeBitCast(value, to: UInt64.self), to: &out)
            } else if T.self == UInt.self {
                PrimitiveLayout.append(unsigned: UInt64(unsafeBitCast(value, to: UInt.self)), to: &out)
            } else if T.self == UInt8.self {
                PrimitiveLayout.append(unsigned: UInt64(unsafeBitCast(value, to: UInt8.self)), to: &out)
            } else {
                return false
            }
        case .double:
            guard T.self == Double.self else { return false }
            PrimitiveLayout.append(double: unsafeBitCast(value, to: Double.self), to: &out)
        case .string:
            guard T.self == String.self else { return false }
            PrimitiveLayout.append(string: unsafeBitCast(value, to: String.self), to: &out)
        case .bool:
            guard T.self == Bool.self else { return false }
            PrimitiveLayout.append(bool: unsafeBitCast(value, to: Bool.self), to: &out)
        case .date:
            guard T.self == Date.self else { return false }
            PrimitiveLayout.append(date: unsafeBitCast(value, to: Date.self), to: &out)
        case .data:
            guard T.self == Data.self else { return false }
            PrimitiveLayout.append(data: unsafeBitCast(value, to: Data.self), to: &out)
        case .float, .object, .stringArray, .array, .dictionary, .other:
            return false
        }
        return true
    }

    /// A wrapper type (an enum, a custom single-value type such as a property wrapper or a tagged
    /// identifier) encodes itself into one primitive: the schema probe took the field's type from
    /// the value its `init(from:)` decodes, so every stored type falls back to this.
    /// Whether `value`, which is not an optional, writes a nil single value (a wrapper around an
    /// optional holding nil, `@NullCodable var n: Int?`): stored in a field or element of optional
    /// type, it is a nil entry, which its own `init(from:)` reads back (`decodeNil()`).
    static func writesNil(_ value: Any) -> Bool {
        guard !(value is any OptionalValue), let encodable = value as? any Encodable else { return false }
        let capture = SingleValueCapture(context: EncodingContext(model: "", path: []))
        guard (try? encodable.encode(to: capture)) != nil, let captured = capture.value else { return false }
        if let optional = captured as? any OptionalValue { return optional.wrappedAny == nil }
        // A wrapper of a wrapper (never the same type again: that would not end).
        return Swift.type(of: captured) != Swift.type(of: value) && writesNil(captured)
    }

    private static func encodeThroughSingleValue(_ value: Any, as type: FieldType, into out: inout [UInt8], context: EncodingContext) throws {
        guard let encodable = value as? any Encodable else { throw context.mismatch("\(Swift.type(of: value)) is not Encodable") }
        let capture = SingleValueCapture(context: context)
        try encodable.encode(to: capture)
        guard let captured = capture.value else { throw context.mismatch("\(Swift.type(of: value)) encoded nothing where \(type) was expected") }
        if captured is any OptionalValue == false, Swift.type(of: captured) == Swift.type(of: value) {
            throw context.mismatch("expected \(type), found \(Swift.type(of: value))")
        }
        try encodeValue(captured, as: type, into: &out, context: context)
    }
}

/// Sets encode in hash order; their stored elements are sorted so equal sets give equal bytes.
protocol UnorderedCollection {}
extension Set: UnorderedCollection {}

/// A field path as errors name it: fields joined by dots, an element's index (or `[]`, `[key]`)
/// right after its collection: `parts[0].level`, as partial updates name it, not `parts.[0].level`.
func dottedPath(_ parts: [String]) -> String {
    parts.reduce(into: "") { text, part in
        if !text.isEmpty && !part.hasPrefix("[") { text += "." }
        text += part
    }
}

/// Where a value sits, for error messages. Cheap to extend by one key (no allocation for a
/// model's own fields) or by an element's index (kept as a number): the path is only assembled
/// when an error is built, or when a context is made below this one.
struct EncodingContext {
    let model: String
    private let parent: [String]
    private let leaf: String?
    /// An array element's index under `parent` + `leaf`, written `[i]` only when the path is read:
    /// formatting it for every element cost more than decoding a small element.
    private let index: Int?

    init(model: String, path: [String]) {
        self.model = model
        self.parent = path
        self.leaf = nil
        self.index = nil
    }

    private init(model: String, parent: [String], leaf: String?, index: Int?) {
        self.model = model
        self.parent = parent
        self.leaf = leaf
        self.index = index
    }

    var path: [String] {
        guard leaf != nil || index != nil else { return parent }
        var path = parent
        if let leaf { path.append(leaf) }
        if let index { path.append("[\(index)]") }
        return path
    }

    func appending(_ key: String) -> EncodingContext { EncodingContext(model: model, parent: path, leaf: key, index: nil) }

    /// The context of element `index` of the array here.
    func appending(index: Int) -> EncodingContext {
        if self.index == nil { return EncodingContext(model: model, parent: parent, leaf: leaf, index: index) }
        return EncodingContext(model: model, parent: path, leaf: nil, index: index)
    }

    /// The path as errors name it (`dottedPath`).
    var text: String { dottedPath(path) }

    func mismatch(_ reason: String) -> StrataError {
        .typeMismatch(model: model, field: path.isEmpty ? "(model)" : text, reason: reason)
    }
}

extension FieldType {
    var unwrappedOnce: FieldType {
        if case .optional(let inner) = self { return inner }
        return self
    }
}

/// The fields of one object being encoded: every value's bytes back to back in one buffer, and
/// per field its id, nil flag and span (no array per field). Reusable: `removeAll` keeps the
/// storage for the next object.
struct RecordFields {
    struct Span {
        /// In `FieldSchema.validIDs` (stored schemas are checked when read, probed ones count from
        /// 0), so `UInt64(id) << 1` below neither traps nor loses a bit.
        var id: Int
        var isNil: Bool
        var start: Int
        var end: Int
    }

    private(set) var buffer: [UInt8] = []
    private(set) var spans: [Span] = []

    mutating func removeAll() {
        buffer.removeAll(keepingCapacity: true)
        spans.removeAll(keepingCapacity: true)
    }

    mutating func append<C: Collection>(id: Int, isNil: Bool, bytes: C) where C.Element == UInt8 {
        let start = buffer.count
        buffer.append(contentsOf: bytes)
        spans.append(Span(id: id, isNil: isNil, start: start, end: buffer.count))
    }

    /// A field whose bytes `write` appends to the buffer.
    @inline(__always)
    mutating func append(id: Int, _ write: (inout [UInt8]) throws -> Void) rethrows {
        let start = buffer.count
        try write(&buffer)
        spans.append(Span(id: id, isNil: false, start: start, end: buffer.count))
    }

    /// A field whose bytes `write` appends to the buffer, when it returns true (false: it wrote nothing).
    @inline(__always)
    mutating func append(id: Int, ifWritten write: (inout [UInt8]) -> Bool) -> Bool {
        let start = buffer.count
        guard write(&buffer) else { return false }
        spans.append(Span(id: id, isNil: false, start: start, end: buffer.count))
        return true
    }

    /// The record: the table (by ascending id), then the values in the same order.
    func serialize(into out: inout [UInt8]) {
        withOrder { order, values, size in Self.append(order, values, size: size, to: &out) }
    }

    /// The record as a new array of its size.
    func record() -> [UInt8] {
        withOrder { order, values, size in
            // Reserved, then appended to: `init(unsafeUninitializedCapacity:)` and
            // `init(repeating:count:)` reach the standard library's unspecialized allocation, which
            // looks up the storage class's generic metadata on every object encoded; reserving is
            // specialized in this module.
            var out: [UInt8] = []
            out.reserveCapacity(size)
            Self.append(order, values, size: size, to: &out)
            return out
        }
    }

    /// Appends the record of `order` (`size` bytes) to `out`. The table is written on the stack
    /// (on the heap past the standard library's limit for that) and appended in one copy, as are
    /// the values when they lie in the buffer in the table's order (fields written once, in schema
    /// order); else the whole record is assembled first. (Zero-filling `size` bytes of `out` to
    /// write over them went byte by byte.)
    private static func append(_ order: UnsafeBufferPointer<Span>, _ values: UnsafeBufferPointer<UInt8>, size: Int, to out: inout [UInt8]) {
        if valuesAreInOrder(order), let source = values.baseAddress {
            let valueBytes = order.last.map { $0.end } ?? 0
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: size - valueBytes) { table in
                guard let base = table.baseAddress else { return }
                writeTable(order, to: base)
                out.append(contentsOf: UnsafeBufferPointer(table))
            }
            out.append(contentsOf: UnsafeBufferPointer(start: source, count: valueBytes))
            return
        }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: size) { record in
            guard let base = record.baseAddress else { return }
            write(order, values, to: base)
            out.append(contentsOf: UnsafeBufferPointer(record))
        }
    }

    /// The spans by ascending id, the values, and the size of the record they make.
    private func withOrder<R>(_ body: (UnsafeBufferPointer<Span>, UnsafeBufferPointer<UInt8>, Int) -> R) -> R {
        let order = spans.isSorted(by: { $0.id < $1.id }) ? spans : Self.ordered(spans)
        return order.withUnsafeBufferPointer { order in buffer.withUnsafeBufferPointer { values in body(order, values, Self.size(of: order)) } }
    }

    /// The size of the record of `order`.
    private static func size(of order: UnsafeBufferPointer<Span>) -> Int {
        var size = varintSize(UInt64(order.count))
        for span in order {
            size += varintSize(UInt64(span.id) << 1 | (span.isNil ? 1 : 0)) + varintSize(UInt64(span.end - span.start)) + (span.end - span.start)
        }
        return size
    }

    /// Spans written out of schema order (a hand-written `encode(to:)`), by ascending id. A field
    /// encoded more than once keeps its last value, as JSONEncoder's keyed containers do: the
    /// table must name each field once (a reader finds the first entry of an id, so a repeated
    /// field would read back its first value, and its other bytes would be dead weight).
    private static func ordered(_ spans: [Span]) -> [Span] {
        // By id, then by when it was written (sorted by position too: `sort` is not documented stable).
        let sorted = spans.indices.sorted { spans[$0].id != spans[$1].id ? spans[$0].id < spans[$1].id : $0 < $1 }
        var order: [Span] = []
        order.reserveCapacity(spans.count)
        for i in sorted {
            if let last = order.last, last.id == spans[i].id {
                order[order.count - 1] = spans[i]
            } else {
                order.append(spans[i])
            }
        }
        return order
    }

    /// Whether the values of `order` lie in the buffer in its order, back to back from its start
    /// (every field written once, in schema order): the record's values are then the buffer.
    private static func valuesAreInOrder(_ order: UnsafeBufferPointer<Span>) -> Bool {
        var end = 0
        for span in order {
            if span.start != end { return false }
            end = span.end
        }
        return true
    }

    /// Writes the table of `order` (the record's start: its field count, then per field its id,
    /// nil flag and length) to `p`, and returns where it ends.
    @discardableResult
    private static func writeTable(_ order: UnsafeBufferPointer<Span>, to start: UnsafeMutablePointer<UInt8>) -> UnsafeMutablePointer<UInt8> {
        var p = start
        storeVarint(UInt64(order.count), at: &p)
        for span in order {
            storeVarint(UInt64(span.id) << 1 | (span.isNil ? 1 : 0), at: &p)
            storeVarint(UInt64(span.end - span.start), at: &p)
        }
        return p
    }

    /// Writes the record of `order` to `p`, which has room for the size `withOrder` computed from
    /// exactly what is written here (the table's varints, then every span's bytes).
    private static func write(_ order: UnsafeBufferPointer<Span>, _ values: UnsafeBufferPointer<UInt8>, to start: UnsafeMutablePointer<UInt8>) {
        var p = writeTable(order, to: start)
        guard let source = values.baseAddress else { return }
        for span in order where span.end > span.start {
            p.update(from: source + span.start, count: span.end - span.start)
            p += span.end - span.start
        }
    }
}

/// The number of bytes `appendVarint` writes for `value`.
@inline(__always)
func varintSize(_ value: UInt64) -> Int {
    // 1 byte per 7 significant bits, at least 1.
    (64 - (value | 1).leadingZeroBitCount + 6) / 7
}

extension Array {
    func isSorted(by areInOrder: (Element, Element) -> Bool) -> Bool {
        var i = 1
        while i < count {
            if !areInOrder(self[i - 1], self[i]) { return false }
            i += 1
        }
        return true
    }
}
