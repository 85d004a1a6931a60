import Foundation

// Records: the stored form of an object. Layout in FORMAT.md, "Records".
//
//   record := varint n, n × (varint (fieldId << 1 | isNil), varint length), the n values back to back
//
// Fields are listed by ascending id, so a query can find one field by walking the small table
// without decoding any value, and a field added to the model later is simply absent from older
// records. Values by type:
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
    static func encodeValue(_ value: Any, as type: FieldType, into out: inout [UInt8], context: EncodingContext) throws {
        if let optional = value as? any OptionalValue {
            guard let wrapped = optional.wrappedAny else {
                throw context.mismatch("nil where a value is required")
            }
            return try encodeValue(wrapped, as: type.isOptional ? type.unwrappedOnce : type, into: &out, context: context)
        }
        switch type {
        case .optional(let inner):
            try encodeValue(value, as: inner, into: &out, context: context)
        case .bool:
            guard let v = value as? Bool else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            out.append(v ? 1 : 0)
        case .int(_, let signed):
            if signed, let v = value as? any SignedInteger & FixedWidthInteger, let i = Int64(exactly: v) {
                appendVarint(zigzag(i), to: &out)
            } else if !signed, let v = value as? any UnsignedInteger & FixedWidthInteger, let u = UInt64(exactly: v) {
                appendVarint(u, to: &out)
            } else if value is any BinaryInteger {
                throw context.mismatch("\(value) does not fit \(type)")
            } else {
                try encodeThroughSingleValue(value, as: type, into: &out, context: context)
            }
        case .double:
            guard let v = value as? Double else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            withUnsafeBytes(of: v.bitPattern.littleEndian) { out.append(contentsOf: $0) }
        case .float:
            guard let v = value as? Float else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            withUnsafeBytes(of: v.bitPattern.littleEndian) { out.append(contentsOf: $0) }
        case .string:
            guard let v = value as? String else { return try encodeThroughSingleValue(value, as: type, into: &out, context: context) }
            out.append(contentsOf: v.utf8)
        case .data:
            guard let v = value as? Data else { throw context.mismatch("expected Data, found \(Swift.type(of: value))") }
            out.append(contentsOf: v)
        case .date:
            guard let v = value as? Date else { throw context.mismatch("expected Date, found \(Swift.type(of: value))") }
            withUnsafeBytes(of: v.timeIntervalSinceReferenceDate.bitPattern.littleEndian) { out.append(contentsOf: $0) }
        case .uuid:
            guard let v = value as? UUID else { throw context.mismatch("expected UUID, found \(Swift.type(of: value))") }
            withUnsafeBytes(of: v.uuid) { out.append(contentsOf: $0) }
        case .decimal:
            guard let v = value as? Decimal else { throw context.mismatch("expected Decimal, found \(Swift.type(of: value))") }
            out.append(contentsOf: v.description.utf8)
        case .url:
            guard let v = value as? URL else { throw context.mismatch("expected URL, found \(Swift.type(of: value))") }
            out.append(contentsOf: v.absoluteString.utf8)
        case .enumeration(let raw):
            guard let v = value as? any RawRepresentable else { return try encodeThroughSingleValue(value, as: raw, into: &out, context: context) }
            try encodeValue(v.rawValue, as: raw, into: &out, context: context)
        case .reference:
            guard let v = value as? any ReferenceValue, let key = KeyEncoding.encode(v.keyAny) else {
                throw context.mismatch("expected a Ref with a storable key, found \(Swift.type(of: value))")
            }
            out.append(contentsOf: key)
        case .object(let schema):
            guard let encodable = value as? any Encodable else { throw context.mismatch("\(Swift.type(of: value)) is not Encodable") }
            let encoder = ObjectEncoder(schema: schema, context: context)
            try encodable.encode(to: encoder)
            encoder.serialize(into: &out)
        case .array(let element):
            guard let encodable = value as? any Encodable else { throw context.mismatch("\(Swift.type(of: value)) is not Encodable") }
            let encoder = ArrayEncoder(element: element, context: context)
            try encodable.encode(to: encoder)
            if value is any UnorderedCollection { encoder.elements.sort { $0.bytes.lexicographicallyPrecedes($1.bytes) } }
            CollectionLayout.appendArray(encoder.elements, to: &out)
        case .dictionary(let element):
            guard let encodable = value as? any Encodable else { throw context.mismatch("\(Swift.type(of: value)) is not Encodable") }
            let encoder = DictionaryEncoder(element: element, context: context)
            try encodable.encode(to: encoder)
            CollectionLayout.appendDictionary(encoder.entries, to: &out)
        }
    }

    /// A wrapper type (an enum, a custom single-value type) encodes itself into one primitive.
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

/// Where a value sits, for error messages. Cheap to extend by one key (no allocation for a
/// model's own fields): the path is only assembled when an error is built.
struct EncodingContext {
    let model: String
    private let parent: [String]
    private let leaf: String?

    init(model: String, path: [String]) {
        self.model = model
        self.parent = path
        self.leaf = nil
    }

    private init(model: String, parent: [String], leaf: String) {
        self.model = model
        self.parent = parent
        self.leaf = leaf
    }

    var path: [String] { leaf.map { parent + [$0] } ?? parent }

    func appending(_ key: String) -> EncodingContext { EncodingContext(model: model, parent: path, leaf: key) }

    func mismatch(_ reason: String) -> StrataError {
        .typeMismatch(model: model, field: path.isEmpty ? "(model)" : path.joined(separator: "."), reason: reason)
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

    /// The record: the table (by ascending id), then the values in the same order.
    func serialize(into out: inout [UInt8]) {
        withOrder { order, values, size in
            let start = out.count
            out.append(contentsOf: repeatElement(0, count: size))
            out.withUnsafeMutableBufferPointer { all in
                // (`all` has `size` bytes from `start`, just appended.)
                if let base = all.baseAddress { Self.write(order, values, to: base + start) }
            }
        }
    }

    /// The record as a new array of exactly its size.
    func record() -> [UInt8] {
        withOrder { order, values, size in
            [UInt8](unsafeUninitializedCapacity: size) { out, count in
                if let base = out.baseAddress { Self.write(order, values, to: base) }
                count = size
            }
        }
    }

    /// The spans by ascending id, the values, and the size of the record they make.
    private func withOrder<R>(_ body: (UnsafeBufferPointer<Span>, UnsafeBufferPointer<UInt8>, Int) -> R) -> R {
        let order = spans.isSorted(by: { $0.id < $1.id }) ? spans : spans.sorted { $0.id < $1.id }
        var size = varintSize(UInt64(order.count))
        for span in order {
            size += varintSize(UInt64(span.id) << 1 | (span.isNil ? 1 : 0)) + varintSize(UInt64(span.end - span.start)) + (span.end - span.start)
        }
        return order.withUnsafeBufferPointer { order in buffer.withUnsafeBufferPointer { values in body(order, values, size) } }
    }

    /// Writes the record of `order` to `p`, which has room for the size `withOrder` computed from
    /// exactly what is written here (the table's varints, then every span's bytes).
    private static func write(_ order: UnsafeBufferPointer<Span>, _ values: UnsafeBufferPointer<UInt8>, to start: UnsafeMutablePointer<UInt8>) {
        var p = start
        @inline(__always) func put(_ value: UInt64) {
            var v = value
            while v >= 0x80 {
                p.pointee = UInt8(truncatingIfNeeded: v) | 0x80
                p += 1
                v >>= 7
            }
            p.pointee = UInt8(v)
            p += 1
        }
        put(UInt64(order.count))
        for span in order {
            put(UInt64(span.id) << 1 | (span.isNil ? 1 : 0))
            put(UInt64(span.end - span.start))
        }
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

/// The encoder a type's `encode(to:)` sees for a struct: a thin owner of the encoding state
/// (`ObjectEncoding`) and of the keyed container, made once per coding-key type and handed out
/// again. The top-level one of each model is reused (`ModelInfo`'s pool), so its buffers keep
/// their storage.
final class ObjectEncoder: Encoder {
    let state: ObjectEncoding
    private var containerKeyType: ObjectIdentifier?
    private var container: AnyObject?
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(state: ObjectEncoding) { self.state = state }

    convenience init(layout: DecodingLayout, context: EncodingContext) {
        self.init(state: ObjectEncoding(layout: layout, context: context))
    }

    convenience init(schema: ObjectSchema, context: EncodingContext) {
        self.init(layout: DecodingLayout(schema), context: context)
    }

    deinit { retireContainer() }

    /// Ready for the next object.
    func reset() { state.reset() }
    /// The record of the fields encoded so far, appended to `out`.
    func serialize(into out: inout [UInt8]) { state.serialize(into: &out) }
    /// The record of the fields encoded so far.
    func record() -> [UInt8] { state.record() }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if containerKeyType == ObjectIdentifier(Key.self), let container {
            // (The size was checked when it was cached.)
            return unsafeBitCast(container, to: KeyedEncodingContainer<Key>.self)
        }
        retireContainer()
        let made = KeyedEncodingContainer(ObjectKeyedEncoding<Key>(encoder: state))
        // A KeyedEncodingContainer is one reference to its box: kept as that reference, checked
        // by the key type's identity (and by size, should the standard library's layout change).
        if MemoryLayout<KeyedEncodingContainer<Key>>.size == MemoryLayout<AnyObject>.size {
            containerKeyType = ObjectIdentifier(Key.self)
            container = unsafeBitCast(made, to: AnyObject.self)
        } else {
            // A box this encoder cannot watch: the state must outlive whatever keeps it.
            keepForever(state)
        }
        return made
    }

    /// The cached container goes: if anything but this encoder still holds it (a type kept its
    /// container past `encode(to:)`), the state it refers to (unowned) must live on for it.
    private func retireContainer() {
        if container != nil, !isKnownUniquelyReferenced(&container) { keepForever(state) }
        container = nil
        containerKeyType = nil
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        FailingUnkeyedEncoding(error: state.context.mismatch("a struct field list was expected, but the type encodes an array"))
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        FailingSingleValueEncoding(error: state.context.mismatch("a struct field list was expected, but the type encodes a single value"))
    }
}

/// The fields of one struct being encoded and the work of its keyed container, compiled once,
/// non-generic.
final class ObjectEncoding {
    let layout: DecodingLayout
    var schema: ObjectSchema { layout.schema }
    let context: EncodingContext
    /// What changes while encoding, behind a pointer of its own: as stored properties of a class
    /// every access would be checked for exclusivity at run time, on every field of every object.
    private let hot: UnsafeMutablePointer<Hot>

    struct Hot {
        var storage = RecordFields()
        /// The field expected next: synthesized encoders go in declaration order, which is schema order.
        var next = 0
    }

    init(layout: DecodingLayout, context: EncodingContext) {
        self.layout = layout
        self.context = context
        hot = .allocate(capacity: 1)
        hot.initialize(to: Hot())
    }

    deinit {
        hot.deinitialize(count: 1)
        hot.deallocate()
    }

    /// The fields encoded so far.
    var storage: RecordFields { hot.pointee.storage }

    /// Ready for the next object.
    func reset() {
        hot.pointee.storage.removeAll()
        hot.pointee.next = 0
    }

    /// The record of the fields encoded so far, appended to `out`.
    func serialize(into out: inout [UInt8]) { hot.pointee.storage.serialize(into: &out) }

    /// The record of the fields encoded so far.
    func record() -> [UInt8] { hot.pointee.storage.record() }

    /// The layout index of the live field named `name`.
    @inline(__always)
    func field(_ name: String) throws -> Int {
        guard let f = layout.field(named: name, after: hot.pointee.next) else {
            throw context.appending(name).mismatch("encode(to:) writes a field that init(from:) never reads, so the schema does not have it")
        }
        hot.pointee.next = f + 1
        return f
    }

    // The work of the keyed container, here so that it is compiled once, non-generic.

    func encodeNil(_ name: String) throws {
        let f = try field(name)
        hot.pointee.storage.append(id: layout.ids[f], isNil: true, bytes: EmptyCollection())
    }

    /// Primitives: written straight into the buffer when the field stores exactly that kind, with
    /// no boxing into Any and no dynamic casts. Anything else takes the general path.
    func integer(_ value: Int64, unsigned: UInt64?, _ name: String) throws {
        let f = try field(name)
        switch layout.kinds[f] {
        case .signed:
            hot.pointee.storage.append(id: layout.ids[f]) { appendVarint(zigzag(value), to: &$0) }
        case .unsigned:
            guard let u = unsigned ?? (value >= 0 ? UInt64(value) : nil) else {
                throw context.appending(name).mismatch("\(value) does not fit \(schema.fields[f].type)")
            }
            hot.pointee.storage.append(id: layout.ids[f]) { appendVarint(u, to: &$0) }
        default:
            if let unsigned { try general(unsigned, f, name) } else { try general(value, f, name) }
        }
    }

    func string(_ value: String, _ name: String) throws {
        let f = try field(name)
        guard layout.kinds[f] == .string else { return try general(value, f, name) }
        var value = value
        value.withUTF8 { utf8 in hot.pointee.storage.append(id: layout.ids[f]) { $0.append(contentsOf: utf8) } }
    }

    func double(_ value: Double, _ name: String) throws {
        let f = try field(name)
        guard layout.kinds[f] == .double else { return try general(value, f, name) }
        hot.pointee.storage.append(id: layout.ids[f]) { out in withUnsafeBytes(of: value.bitPattern.littleEndian) { out.append(contentsOf: $0) } }
    }

    func bool(_ value: Bool, _ name: String) throws {
        let f = try field(name)
        guard layout.kinds[f] == .bool else { return try general(value, f, name) }
        hot.pointee.storage.append(id: layout.ids[f]) { $0.append(value ? 1 : 0) }
    }

    func data(_ value: Data, _ name: String) throws {
        let f = try field(name)
        guard layout.kinds[f] == .data else { return try general(value, f, name) }
        value.withUnsafeBytes { bytes in hot.pointee.storage.append(id: layout.ids[f]) { $0.append(contentsOf: bytes) } }
    }

    func date(_ value: Date, _ name: String) throws {
        let f = try field(name)
        guard layout.kinds[f] == .date else { return try general(value, f, name) }
        let bits = value.timeIntervalSinceReferenceDate.bitPattern.littleEndian
        hot.pointee.storage.append(id: layout.ids[f]) { out in withUnsafeBytes(of: bits) { out.append(contentsOf: $0) } }
    }

    func value<T: Encodable>(_ value: T, _ name: String) throws {
        let f = try field(name)
        if let optional = value as? any OptionalValue, optional.wrappedAny == nil {
            hot.pointee.storage.append(id: layout.ids[f], isNil: true, bytes: EmptyCollection())
            return
        }
        try general(value, f, name)
    }

    private func general<T>(_ value: T, _ f: Int, _ name: String) throws {
        let type = schema.fields[f].type
        let context = self.context.appending(name)
        try hot.pointee.storage.append(id: layout.ids[f]) { try RecordEncoding.encodeValue(value, as: type, into: &$0, context: context) }
    }
}

/// The keyed container of a struct. Generic over the type's coding keys, so compiled
/// unspecialized: every method hands the key's name to the (non-generic) encoding state at once.
///
/// It refers to the state unretained (`Unmanaged`), for the reason and with the guarantee of
/// `ObjectKeyedDecoding`: a plain value the standard library's box copies without a retain and a
/// release, whose state the `ObjectEncoder` that made it keeps alive (for good, should the
/// container outlive the encoder). It also means the encoder's cached container does not keep
/// the encoder alive (a strong reference here made a cycle, and leaked every nested encoder).
struct ObjectKeyedEncoding<Key: CodingKey>: KeyedEncodingContainerProtocol {
    private let unmanaged: Unmanaged<ObjectEncoding>

    init(encoder: ObjectEncoding) { unmanaged = .passUnretained(encoder) }

    /// Runs `body` on the state without retaining it (see above for why it is alive).
    @inline(__always)
    private func with<R>(_ body: (ObjectEncoding) throws -> R) rethrows -> R {
        try unmanaged._withUnsafeGuaranteedRef(body)
    }
    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil(forKey key: Key) throws { try with { try $0.encodeNil(key.stringValue) } }
    mutating func encode(_ value: Int, forKey key: Key) throws { try with { try $0.integer(Int64(value), unsigned: nil, key.stringValue) } }
    mutating func encode(_ value: Int8, forKey key: Key) throws { try with { try $0.integer(Int64(value), unsigned: nil, key.stringValue) } }
    mutating func encode(_ value: Int16, forKey key: Key) throws { try with { try $0.integer(Int64(value), unsigned: nil, key.stringValue) } }
    mutating func encode(_ value: Int32, forKey key: Key) throws { try with { try $0.integer(Int64(value), unsigned: nil, key.stringValue) } }
    mutating func encode(_ value: Int64, forKey key: Key) throws { try with { try $0.integer(value, unsigned: nil, key.stringValue) } }
    mutating func encode(_ value: UInt, forKey key: Key) throws { try with { try $0.integer(Int64(truncatingIfNeeded: value), unsigned: UInt64(value), key.stringValue) } }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { try with { try $0.integer(Int64(value), unsigned: UInt64(value), key.stringValue) } }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { try with { try $0.integer(Int64(value), unsigned: UInt64(value), key.stringValue) } }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { try with { try $0.integer(Int64(value), unsigned: UInt64(value), key.stringValue) } }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { try with { try $0.integer(Int64(truncatingIfNeeded: value), unsigned: value, key.stringValue) } }
    mutating func encode(_ value: String, forKey key: Key) throws { try with { try $0.string(value, key.stringValue) } }
    mutating func encode(_ value: Double, forKey key: Key) throws { try with { try $0.double(value, key.stringValue) } }
    mutating func encode(_ value: Bool, forKey key: Key) throws { try with { try $0.bool(value, key.stringValue) } }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        // Common Foundation types without a dynamic cast (T is exactly the type, so the bit cast
        // is an identity).
        if T.self == Data.self { return try with { try $0.data(unsafeBitCast(value, to: Data.self), key.stringValue) } }
        if T.self == Date.self { return try with { try $0.date(unsafeBitCast(value, to: Date.self), key.stringValue) } }
        try with { try $0.value(value, key.stringValue) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        KeyedEncodingContainer(FailingKeyedEncoding<NestedKey>(error: with { $0.context }.appending(key.stringValue).mismatch("nested containers are not supported; encode a nested struct")))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        FailingUnkeyedEncoding(error: with { $0.context }.appending(key.stringValue).mismatch("nested containers are not supported; encode an array"))
    }

    mutating func superEncoder() -> any Encoder { ObjectEncoder(state: unmanaged.takeUnretainedValue()) }
    mutating func superEncoder(forKey key: Key) -> any Encoder { ObjectEncoder(state: unmanaged.takeUnretainedValue()) }
}

final class ArrayEncoder: Encoder, UnkeyedEncodingContainer {
    let element: FieldType
    let context: EncodingContext
    var elements: [(isNil: Bool, bytes: [UInt8])] = []
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    var count: Int { elements.count }

    init(element: FieldType, context: EncodingContext) {
        self.element = element
        self.context = context
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(FailingKeyedEncoding<Key>(error: context.mismatch("an array was expected")))
    }
    func unkeyedContainer() -> any UnkeyedEncodingContainer { self }
    func singleValueContainer() -> any SingleValueEncodingContainer {
        FailingSingleValueEncoding(error: context.mismatch("an array was expected"))
    }

    func encodeNil() throws { elements.append((true, [])) }

    func encode<T: Encodable>(_ value: T) throws {
        if let optional = value as? any OptionalValue, optional.wrappedAny == nil { return try encodeNil() }
        var bytes: [UInt8] = []
        try RecordEncoding.encodeValue(value, as: element, into: &bytes, context: context.appending("[\(elements.count)]"))
        elements.append((false, bytes))
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        KeyedEncodingContainer(FailingKeyedEncoding<NestedKey>(error: context.mismatch("nested containers are not supported")))
    }
    func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        FailingUnkeyedEncoding(error: context.mismatch("nested containers are not supported"))
    }
    func superEncoder() -> any Encoder { self }
}

final class DictionaryEncoder: Encoder {
    let element: FieldType
    let context: EncodingContext
    var entries: [(key: String, isNil: Bool, bytes: [UInt8])] = []
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(element: FieldType, context: EncodingContext) {
        self.element = element
        self.context = context
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(DictionaryKeyedEncoding<Key>(encoder: self))
    }
    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        FailingUnkeyedEncoding(error: context.mismatch("a [String: T] dictionary was expected"))
    }
    func singleValueContainer() -> any SingleValueEncodingContainer {
        FailingSingleValueEncoding(error: context.mismatch("a [String: T] dictionary was expected"))
    }
}

struct DictionaryKeyedEncoding<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let encoder: DictionaryEncoder
    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil(forKey key: Key) throws { encoder.entries.append((key.stringValue, true, [])) }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        if let optional = value as? any OptionalValue, optional.wrappedAny == nil { return try encodeNil(forKey: key) }
        var bytes: [UInt8] = []
        try RecordEncoding.encodeValue(value, as: encoder.element, into: &bytes, context: encoder.context.appending(key.stringValue))
        encoder.entries.append((key.stringValue, false, bytes))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        KeyedEncodingContainer(FailingKeyedEncoding<NestedKey>(error: encoder.context.mismatch("nested containers are not supported")))
    }
    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        FailingUnkeyedEncoding(error: encoder.context.mismatch("nested containers are not supported"))
    }
    mutating func superEncoder() -> any Encoder { encoder }
    mutating func superEncoder(forKey key: Key) -> any Encoder { encoder }
}

/// Captures the one value a wrapper type encodes.
final class SingleValueCapture: Encoder, SingleValueEncodingContainer {
    let context: EncodingContext
    var value: Any?
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(context: EncodingContext) { self.context = context }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(FailingKeyedEncoding<Key>(error: context.mismatch("a single value was expected, but the type encodes fields")))
    }
    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        FailingUnkeyedEncoding(error: context.mismatch("a single value was expected, but the type encodes an array"))
    }
    func singleValueContainer() -> any SingleValueEncodingContainer { self }
    func encodeNil() throws { value = Optional<Int>.none as Any }
    func encode<T: Encodable>(_ value: T) throws { self.value = value }
}

// Containers for shapes the schema does not allow: they throw on first use.

struct FailingKeyedEncoding<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let error: StrataError
    var codingPath: [any CodingKey] { [] }
    mutating func encodeNil(forKey key: Key) throws { throw error }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws { throw error }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        KeyedEncodingContainer(FailingKeyedEncoding<NestedKey>(error: error))
    }
    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer { FailingUnkeyedEncoding(error: error) }
    mutating func superEncoder() -> any Encoder { FailingEncoder(error: error) }
    mutating func superEncoder(forKey key: Key) -> any Encoder { FailingEncoder(error: error) }
}

struct FailingUnkeyedEncoding: UnkeyedEncodingContainer {
    let error: StrataError
    var codingPath: [any CodingKey] { [] }
    var count: Int { 0 }
    mutating func encodeNil() throws { throw error }
    mutating func encode<T: Encodable>(_ value: T) throws { throw error }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        KeyedEncodingContainer(FailingKeyedEncoding<NestedKey>(error: error))
    }
    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer { self }
    mutating func superEncoder() -> any Encoder { FailingEncoder(error: error) }
}

struct FailingSingleValueEncoding: SingleValueEncodingContainer {
    let error: StrataError
    var codingPath: [any CodingKey] { [] }
    mutating func encodeNil() throws { throw error }
    mutating func encode<T: Encodable>(_ value: T) throws { throw error }
}

struct FailingEncoder: Encoder {
    let error: StrataError
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(FailingKeyedEncoding<Key>(error: error))
    }
    func unkeyedContainer() -> any UnkeyedEncodingContainer { FailingUnkeyedEncoding(error: error) }
    func singleValueContainer() -> any SingleValueEncodingContainer { FailingSingleValueEncoding(error: error) }
}
