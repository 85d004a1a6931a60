import Foundation

/// Decodes records into values of a model's type, following its schema. Every read is bounds
/// checked: a corrupt record throws `StrataError.corruptRecord`, never traps.
enum RecordDecoding {
    static func decode<T: Decodable>(_ type: T.Type, from bytes: UnsafeRawBufferPointer, schema: ObjectSchema, model: String) throws -> T {
        try decodeValue(T.self, as: .object(schema), bytes: bytes, context: EncodingContext(model: model, path: []))
    }

    /// Decodes a present (non-nil) value of `type` stored as `fieldType`.
    /// `layout` is `DecodingLayout.objectSchema(in: fieldType)`'s layout when the caller has it.
    static func decodeValue<T: Decodable>(
        _ type: T.Type, as fieldType: FieldType, bytes: UnsafeRawBufferPointer, context: EncodingContext, layout: DecodingLayout? = nil
    ) throws -> T {
        let stored = fieldType.isOptional ? fieldType.unwrappedOnce : fieldType
        if isPrimitive(T.self) { return try primitive(T.self, as: stored, bytes: bytes, context: context) }
        return try decode(T.self, with: ValueDecoder(fieldType: stored, bytes: bytes, isNil: false, context: context, layout: layout))
    }

    /// A stored nil (or a missing value) of a field or element stored as `fieldType`, read as
    /// `T`: an optional's nil, or, for a type that is not optional in a field that is (a wrapper
    /// around an optional, `@NullCodable var n: Int?`), the value its own `init(from:)` reads from
    /// a nil single value; `error` otherwise.
    @inline(never)
    static func decodeNil<T: Decodable>(_ type: T.Type, as fieldType: FieldType, context: EncodingContext, orThrow failure: @autoclosure () -> StrataError)
        throws -> T
    {
        if let none = nilValue(of: T.self) { return none }
        guard fieldType.isOptional, !isPrimitive(T.self) else { throw failure() }
        let decoder = ValueDecoder(fieldType: fieldType.unwrappedOnce, bytes: UnsafeRawBufferPointer(start: nil, count: 0), isNil: true, context: context)
        // A type that does not read a nil single value is missing its value, as before.
        guard let value = try? T(from: decoder) else { throw failure() }
        return value
    }

    /// `decodeValue` for an element of a collection (or a dictionary's value): one of a type that
    /// is not primitive is read with the decoder `owner` keeps for its elements.
    static func decodeElement<T: Decodable>(
        _ type: T.Type, as element: FieldType, bytes: UnsafeRawBufferPointer, context: EncodingContext, owner: ValueDecoder, layout: DecodingLayout?
    ) throws -> T {
        if isPrimitive(T.self) { return try primitive(T.self, as: element.isOptional ? element.unwrappedOnce : element, bytes: bytes, context: context) }
        return try decode(T.self, with: owner.element(element, bytes, context, layout: layout))
    }

    /// Decodes a value of a type that is not primitive with its own `init(from:)`, from `decoder`
    /// (made for a present value, its field type unwrapped once as `decodeValue` does).
    static func decode<T: Decodable>(_ type: T.Type, with decoder: ValueDecoder) throws -> T {
        // An enum is stored as its raw value: RecordEncoding writes `rawValue`, never the enum's
        // own encode(to:). So the raw value names the case it was written from, whatever shape
        // the enum's init(from:) reads (a case name for an Int enum, a keyed container, a number
        // mapped another way, as in a wire format): that init runs only for a raw value that
        // names no case (its fallback for values it does not know).
        if case .enumeration(let raw) = decoder.fieldType { return try decodeEnumeration(T.self, raw: raw, with: decoder) }
        do {
            if decoder.holdsCollection, let collection = T.self as? any DirectlyDecodedCollection.Type,
                let value = try decodeDirectly(collection, as: T.self, from: decoder)
            {
                return value
            }
            return try T(from: decoder)
        } catch {
            return try recover(T.self, from: error, decoder: decoder)
        }
    }

    /// `decode(_:with:)` of a value stored as an enum's raw value. Apart, so that the common path
    /// names no `T?` (whose metadata an unspecialized caller looks up on entry).
    @inline(never)
    private static func decodeEnumeration<T: Decodable>(_ type: T.Type, raw: FieldType, with decoder: ValueDecoder) throws -> T {
        if let value = rawCase(T.self, raw: raw, bytes: decoder.bytes, context: decoder.context) { return value }
        do {
            return try T(from: decoder)
        } catch {
            return try recover(T.self, from: error, decoder: decoder)
        }
    }

    /// `C.decodeDirectly(from:)`, where `C` is `T` (seen through the protocol).
    private static func decodeDirectly<C: DirectlyDecodedCollection, T>(_ collection: C.Type, as type: T.Type, from decoder: ValueDecoder) throws -> T? {
        guard let value = try C.decodeDirectly(from: decoder) else { return nil }
        return unsafeBitCast(value, to: T.self)
    }

    /// What `decode(_:with:)` returns or throws when `init(from:)` failed. Apart, so that the
    /// common path names no `T?` (whose metadata an unspecialized caller looks up on entry).
    @inline(never)
    private static func recover<T: Decodable>(_ type: T.Type, from error: any Error, decoder: ValueDecoder) throws -> T {
        if let error = error as? StrataError { throw error }
        throw decoder.context.mismatch("\(T.self).init(from:) failed: \(error)")
    }

    /// The case of a raw-value type whose raw value is stored in `bytes`; nil when `T` has no raw
    /// value of a stored primitive type, or the stored one names no case.
    private static func rawCase<T>(_ type: T.Type, raw: FieldType, bytes: UnsafeRawBufferPointer, context: EncodingContext) -> T? {
        guard let representable = T.self as? any RawRepresentable.Type else { return nil }
        return rawCase(representable, raw: raw, bytes: bytes, context: context) as? T
    }

    private static func rawCase<R: RawRepresentable>(_ type: R.Type, raw: FieldType, bytes: UnsafeRawBufferPointer, context: EncodingContext) -> R? {
        guard isPrimitive(R.RawValue.self), let rawValue = try? primitive(R.RawValue.self, as: raw, bytes: bytes, context: context) else { return nil }
        return R(rawValue: rawValue)
    }

    /// Whether `primitive` decodes values of `type` (a type read from the record's bytes itself,
    /// without `init(from:)`). Metatype identity, not `is` casts: this runs for every field that
    /// takes the general path, in code compiled unspecialized.
    static func isPrimitive(_ type: Any.Type) -> Bool {
        type == Int64.self || type == Int.self || type == Double.self || type == String.self || type == Date.self
            || type == Bool.self || type == Data.self || type == UUID.self || type == Int32.self || type == UInt64.self
            || type == Float.self || type == Int8.self || type == Int16.self || type == UInt.self || type == UInt8.self
            || type == UInt16.self || type == UInt32.self || type == Decimal.self || type == URL.self
    }

    /// Decodes a stored primitive of type `T`, one `isPrimitive` accepts. It returns `T`, not `T?`,
    /// and converts with `unsafeBitCast` after an identity check rather than through `Any`: in
    /// unspecialized code each `T?` is a runtime metadata lookup and each `as? T` a dynamic cast.
    static func primitive<T>(_ type: T.Type, as fieldType: FieldType, bytes: UnsafeRawBufferPointer, context: EncodingContext) throws -> T {
        func expect(_ kind: FieldType) throws {
            if fieldType.unwrapped != kind { throw context.mismatch("stored as \(fieldType), read as \(T.self)") }
        }
        func fixed(_ count: Int) throws -> UInt64 {
            try fixedWidthValue(bytes, count: count, place: "\(context.model).\(context.text)")
        }
        func integer<I: FixedWidthInteger>(_ type: I.Type) throws -> T {
            guard case .int(_, let signed) = fieldType.unwrapped else { throw context.mismatch("stored as \(fieldType), read as \(I.self)") }
            var reader = ByteReader(bytes)
            let raw = try reader.varint()
            if !reader.isAtEnd { throw StrataError.corruptRecord("\(context.model).\(context.text): integer has trailing bytes") }
            let result: I? = signed ? I(exactly: unzigzag(raw)) : I(exactly: raw)
            guard let result else { throw context.mismatch("stored value does not fit \(I.self)") }
            return unsafeBitCast(result, to: T.self)
        }
        // Each branch converts a value of exactly T's type (checked just before).
        if T.self == Int64.self { return try integer(Int64.self) }
        if T.self == Int.self { return try integer(Int.self) }
        if T.self == Double.self {
            try expect(.double)
            return unsafeBitCast(Double(bitPattern: try fixed(8)), to: T.self)
        }
        if T.self == String.self {
            try expect(.string)
            return unsafeBitCast(String(decoding: bytes, as: UTF8.self), to: T.self)
        }
        if T.self == Date.self {
            try expect(.date)
            return unsafeBitCast(Date(timeIntervalSinceReferenceDate: Double(bitPattern: try fixed(8))), to: T.self)
        }
        if T.self == Bool.self {
            try expect(.bool)
            return unsafeBitCast(try fixed(1) != 0, to: T.self)
        }
        if T.self == Data.self {
            try expect(.data)
            return unsafeBitCast(bytes.baseAddress.map { Data(bytes: $0, count: bytes.count) } ?? Data(), to: T.self)
        }
        if T.self == UUID.self {
            try expect(.uuid)
            guard bytes.count == 16 else { throw StrataError.corruptRecord("UUID of \(bytes.count) bytes") }
            var uuid = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)).uuid
            withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: bytes) }
            return unsafeBitCast(UUID(uuid: uuid), to: T.self)
        }
        if T.self == Int32.self { return try integer(Int32.self) }
        if T.self == UInt64.self { return try integer(UInt64.self) }
        if T.self == Float.self {
            try expect(.float)
            return unsafeBitCast(Float(bitPattern: UInt32(truncatingIfNeeded: try fixed(4))), to: T.self)
        }
        if T.self == Int8.self { return try integer(Int8.self) }
        if T.self == Int16.self { return try integer(Int16.self) }
        if T.self == UInt.self { return try integer(UInt.self) }
        if T.self == UInt8.self { return try integer(UInt8.self) }
        if T.self == UInt16.self { return try integer(UInt16.self) }
        if T.self == UInt32.self { return try integer(UInt32.self) }
        if T.self == Decimal.self {
            try expect(.decimal)
            let text = String(decoding: bytes, as: UTF8.self)
            guard let d = PrimitiveLayout.decimal(text: text) else {
                throw StrataError.corruptRecord("Decimal \(quotedForError(text)) does not parse")
            }
            return unsafeBitCast(d, to: T.self)
        }
        if T.self == URL.self {
            try expect(.url)
            guard let url = URL(string: String(decoding: bytes, as: UTF8.self)) else { throw StrataError.corruptRecord("invalid URL text") }
            return unsafeBitCast(url, to: T.self)
        }
        throw context.mismatch("\(T.self) is not read as a primitive")
    }
}

/// Decodes one model's records, one after another: the decoder a model's `init(from:)` sees for a
/// whole object. It is reused (see `CoderPool`), so decoding an object allocates nothing of its
/// own: the field table keeps its storage, and the keyed container the type asks for (a box the
/// standard library allocates, and looks its generic metadata up for, on every request) is made
/// once per coding-key type and handed out again.
final class ModelDecoder: Decoder {
    let state: ObjectDecodingState
    private var containerKeyType: ObjectIdentifier?
    private var container: AnyObject?
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(layout: DecodingLayout, model: String) {
        state = ObjectDecodingState(layout: layout, context: EncodingContext(model: model, path: []))
    }

    deinit { retireContainer() }

    func decode<M: Decodable>(_ type: M.Type, from bytes: UnsafeRawBufferPointer) throws -> M {
        do {
            try state.reset(bytes)
        } catch StrataError.corruptRecord(let reason) {
            // (The field table's own reasons know no model: "field count 200 exceeds the record size".)
            throw StrataError.corruptRecord("\(state.context.model): \(reason)")
        }
        do {
            return try M(from: self)
        } catch let error as StrataError {
            throw error
        } catch {
            throw state.context.mismatch("\(M.self).init(from:) failed: \(error)")
        }
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        state.rewind()
        // A KeyedDecodingContainer is one reference to its box; the cast is checked by the key
        // type's identity, and by size in case the standard library's layout ever changes.
        if containerKeyType == ObjectIdentifier(Key.self), let container {
            // (The size was checked when it was cached.)
            return unsafeBitCast(container, to: KeyedDecodingContainer<Key>.self)
        }
        retireContainer()
        let made = KeyedDecodingContainer(ObjectKeyedDecoding<Key>(state: state))
        if MemoryLayout<KeyedDecodingContainer<Key>>.size == MemoryLayout<AnyObject>.size {
            containerKeyType = ObjectIdentifier(Key.self)
            container = unsafeBitCast(made, to: AnyObject.self)
        } else {
            // A box this decoder cannot watch: the state must outlive whatever keeps it.
            keepForever(state)
        }
        return made
    }

    /// The cached container goes: if anything but this decoder still holds it (a type kept its
    /// container past `init(from:)`), the state it refers to (unowned) must live on for it.
    private func retireContainer() {
        if container != nil, !isKnownUniquelyReferenced(&container) { keepForever(state) }
        container = nil
        containerKeyType = nil
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw state.context.mismatch("stored as a struct, read as an array")
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        throw state.context.mismatch("stored as a struct, read as a single value")
    }
}

/// A decoder positioned on one stored value; the containers it hands out follow the field type.
/// An `ObjectDecodingState` keeps one per field and points it at each record's value in turn.
final class ValueDecoder: Decoder {
    let fieldType: FieldType
    private(set) var bytes: UnsafeRawBufferPointer
    let isNil: Bool
    /// Where this value is, for errors; an element decoder is moved from element to element.
    private(set) var context: EncodingContext
    /// Whether `context` changed since `keyedState` was pointed at a value.
    private var contextMoved = false
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    /// The decoder of this collection's elements (or dictionary values) of types that are not
    /// primitive, moved from element to element while nothing else holds it (`element(_:_:_:)`).
    private var elements: ValueDecoder?
    /// The layout of the struct `fieldType` holds (`DecodingLayout.objectSchema(in:)`), when the
    /// caller has it; built on demand otherwise.
    let layout: DecodingLayout?

    /// The keyed container last handed out over a struct, its key type and its state. It is
    /// handed out again for the next value (its state pointed at it) while nothing else holds it:
    /// a new one costs a state, a box and the box's generic metadata lookup, more than decoding a
    /// small struct. The containers refer to their states unowned, so this decoder keeps them
    /// alive, and forever those a type kept past its `init(from:)`.
    private var keyedType: ObjectIdentifier?
    private var keyedBox: AnyObject?
    private var keyedState: ObjectDecodingState?
    /// Whether `keyedState` reads the current value (`reset` points the decoder at another).
    private var keyedStateCurrent = false
    /// Containers superseded by one of another key type, alive until the next value.
    private var superseded: [(state: ObjectDecodingState, box: AnyObject?)] = []

    /// Whether the value is an array or a dictionary (`DirectlyDecodedCollection` may read it).
    let holdsCollection: Bool

    init(fieldType: FieldType, bytes: UnsafeRawBufferPointer, isNil: Bool, context: EncodingContext, layout: DecodingLayout? = nil) {
        self.fieldType = fieldType
        switch fieldType.unwrapped {
        case .array, .dictionary: holdsCollection = true
        default: holdsCollection = false
        }
        self.bytes = bytes
        self.isNil = isNil
        self.context = context
        self.layout = layout
    }

    deinit {
        retireKeyed()
        releaseSuperseded()
    }

    /// Points this decoder at another present value of the same field.
    func reset(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
        keyedStateCurrent = false
        // A container the previous value's type kept keeps its state; the next value gets a new one.
        if keyedBox != nil, !isKnownUniquelyReferenced(&keyedBox) { retireKeyed() }
        if !superseded.isEmpty { releaseSuperseded() }
    }

    /// Points this decoder at another element of the same collection, at `context`.
    func reset(_ bytes: UnsafeRawBufferPointer, context: EncodingContext) {
        self.context = context
        contextMoved = true
        reset(bytes)
    }

    /// A decoder on the present element `bytes` (of type `element`, not primitive) of the collection
    /// this decoder holds, at `context`. One decoder serves element after element, with the keyed
    /// container it handed out: making a decoder, a state and a container's box for every element
    /// of an array of structs cost more than reading the struct. A decoder something still holds
    /// (a type that kept it, or a decode of this collection inside an element's) is not moved.
    func element(_ element: FieldType, _ bytes: UnsafeRawBufferPointer, _ context: EncodingContext, layout: DecodingLayout?) -> ValueDecoder {
        if elements != nil, isKnownUniquelyReferenced(&elements), let decoder = elements {
            decoder.reset(bytes, context: context)
            return decoder
        }
        let decoder = ValueDecoder(
            fieldType: element.isOptional ? element.unwrappedOnce : element, bytes: bytes, isNil: false, context: context, layout: layout)
        elements = decoder
        return decoder
    }

    private func retireKeyed() {
        if let keyedState, keyedBox != nil, !isKnownUniquelyReferenced(&keyedBox) { keepForever(keyedState) }
        keyedBox = nil
        keyedState = nil
        keyedType = nil
    }

    private func releaseSuperseded() {
        for i in superseded.indices where superseded[i].box != nil && !isKnownUniquelyReferenced(&superseded[i].box) {
            keepForever(superseded[i].state)
        }
        superseded.removeAll()
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        switch fieldType.unwrapped {
        case .object(let schema):
            if keyedType == ObjectIdentifier(Key.self), let keyedState, let keyedBox {
                // (The size was checked when it was cached.)
                if keyedStateCurrent {
                    keyedState.rewind()
                } else {
                    if contextMoved { keyedState.move(to: context) }
                    try keyedState.reset(bytes)
                    keyedStateCurrent = true
                }
                contextMoved = false
                return unsafeBitCast(keyedBox, to: KeyedDecodingContainer<Key>.self)
            }
            if let keyedState { superseded.append((keyedState, keyedBox)) }
            keyedState = nil
            keyedBox = nil
            keyedType = nil
            let state = ObjectDecodingState(layout: layout ?? DecodingLayout(schema), context: context)
            contextMoved = false
            try state.reset(bytes)
            let made = KeyedDecodingContainer(ObjectKeyedDecoding<Key>(state: state))
            if MemoryLayout<KeyedDecodingContainer<Key>>.size == MemoryLayout<AnyObject>.size {
                keyedType = ObjectIdentifier(Key.self)
                keyedBox = unsafeBitCast(made, to: AnyObject.self)
                keyedState = state
                keyedStateCurrent = true
            } else {
                // A box this decoder cannot watch: the state must outlive whatever keeps it.
                keepForever(state)
            }
            return made
        case .dictionary(let element):
            return KeyedDecodingContainer(try DictionaryKeyedDecoding<Key>(element: element, bytes: bytes, context: context, layout: layout, owner: self))
        default:
            throw context.mismatch("stored as \(fieldType), read as a struct")
        }
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let element) = fieldType.unwrapped else { throw context.mismatch("stored as \(fieldType), read as an array") }
        return try ArrayDecoding(element: element, bytes: bytes, context: context, layout: layout, owner: self)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleValueDecoding(decoder: self)
    }
}

/// Keeps `object` alive for the rest of the process: the state of a keyed container that
/// outlived the coder owning it (see `ObjectKeyedDecoding`). Costs one leaked object, only when a
/// type keeps its container past its own `init(from:)` / `encode(to:)`.
func keepForever(_ object: AnyObject) {
    _ = Unmanaged.passRetained(object)
}

/// The field table of a record: ids, nil flags and value ranges, in id order.
struct FieldTable {
    struct Entry {
        var id: Int
        var isNil: Bool
        var start: Int
        var end: Int
    }

    var entries: [Entry] = []

    init() {}

    init(_ bytes: UnsafeRawBufferPointer) throws {
        try parse(bytes)
    }

    /// Reads the table of `bytes`, reusing this table's storage (records of one model usually have
    /// the same number of fields, so the entries are overwritten in place).
    mutating func parse(_ bytes: UnsafeRawBufferPointer) throws {
        var reader = ByteReader(bytes)
        let count: Int
        do {
            let stated = try reader.varint()
            guard stated <= UInt64(bytes.count) else { throw StrataError.corruptRecord("field count \(stated) exceeds the record size") }
            count = Int(stated)
        } catch {
            entries.removeAll(keepingCapacity: true)
            throw error
        }
        if entries.count > count {
            entries.removeLast(entries.count - count)
        } else if entries.count < count {
            entries.append(contentsOf: repeatElement(Entry(id: 0, isNil: false, start: 0, end: 0), count: count - entries.count))
        }
        do {
            try entries.withUnsafeMutableBufferPointer { table in
                var total = 0
                for i in 0..<table.count {
                    // Nearly every header and length is one byte (ids below 64, values below 128
                    // bytes): read those without the general varint loop.
                    let header: UInt64
                    let length: Int
                    if reader.offset + 1 < bytes.count, bytes[reader.offset] < 0x80, bytes[reader.offset + 1] < 0x80 {
                        header = UInt64(bytes[reader.offset])
                        length = Int(bytes[reader.offset + 1])
                        reader.offset += 2
                        guard length <= bytes.count - reader.offset else { throw StrataError.corruptRecord("length \(length) runs past the end of the record") }
                    } else {
                        header = try reader.varint()
                        guard header >> 1 <= UInt64(FieldSchema.validIDs.upperBound) else { throw StrataError.corruptRecord("field id out of range") }
                        length = try reader.length()
                    }
                    table[i] = Entry(id: Int(header >> 1), isNil: header & 1 == 1, start: total, end: total + length)
                    total += length
                }
                let base = reader.offset
                guard total <= bytes.count - base else { throw StrataError.corruptRecord("field values run past the end of the record") }
                for i in 0..<table.count {
                    table[i].start += base
                    table[i].end += base
                }
            }
        } catch {
            // A table that failed to parse holds no entries (never half of a corrupt one).
            entries.removeAll(keepingCapacity: true)
            throw error
        }
    }

    var ids: [Int] { entries.map(\.id) }

    func index(of id: Int, hint: Int) -> Int? {
        if hint < entries.count, entries[hint].id == id { return hint }
        return entries.firstIndex { $0.id == id }
    }
}

/// An object schema flattened for decoding: per field, in schema order, what the hot path reads,
/// in arrays of plain values (a `FieldSchema` carries a String and an indirect enum, and copying
/// one costs reference counting on every field of every object). Built once per decoder.
final class DecodingLayout: Sendable {
    /// How a field's value is stored, for the primitive fast paths (the unwrapped type).
    enum Kind: UInt8, Sendable {
        case bool, signed, unsigned, double, float, string, data, date, object, stringArray, array, dictionary, other

        /// Written through `RecordEncoding.encodeCollection` (a `[String]` has a shorter path).
        var isCollection: Bool { self == .array || self == .dictionary }
    }

    let schema: ObjectSchema
    let names: [String]
    let ids: [Int]
    let kinds: [Kind]
    /// Per field stored as an array, how its elements are stored (`.other` for other fields).
    let elementKinds: [Kind]
    let live: [Bool]
    /// Per field, the layout of the struct its values hold (directly, or inside optionals, arrays
    /// and dictionaries): built once with the model's layout, because building one for every
    /// nested value read cost more than decoding the value (five allocations and a pass over
    /// the schema, for a struct of three fields).
    let children: [DecodingLayout?]

    init(_ schema: ObjectSchema) {
        self.schema = schema
        children = schema.fields.map { field in DecodingLayout.objectSchema(in: field.type).map { DecodingLayout($0) } }
        names = schema.fields.map(\.name)
        ids = schema.fields.map(\.id)
        live = schema.fields.map { !$0.removed }
        kinds = schema.fields.map { Self.kind(of: $0.type) }
        elementKinds = schema.fields.map { field in
            if case .array(let element) = field.type.unwrapped { return Self.kind(of: element) }
            return .other
        }
    }

    /// How values of `type` are stored, for the fast paths (optionals unwrapped).
    static func kind(of type: FieldType) -> Kind {
        switch type.unwrapped {
        case .bool: return .bool
        case .int(_, true): return .signed
        case .int(_, false): return .unsigned
        case .double: return .double
        case .float: return .float
        case .string: return .string
        case .data: return .data
        case .date: return .date
        case .object: return .object
        case .array(.string): return .stringArray
        case .array: return .array
        case .dictionary: return .dictionary
        default: return .other
        }
    }

    /// The struct a value of `type` holds, looking through optionals, arrays and dictionaries: the
    /// schema that a decoder handed such a value, or its containers' elements, meets first.
    static func objectSchema(in type: FieldType) -> ObjectSchema? {
        switch type {
        case .object(let schema): return schema
        case .optional(let inner), .array(let inner), .dictionary(let inner): return objectSchema(in: inner)
        default: return nil
        }
    }

    /// The live field named `name`, looking first where the last one found ended.
    @inline(__always)
    func field(named name: String, after hint: Int) -> Int? {
        if hint < names.count, live[hint], names[hint] == name { return hint }
        for i in names.indices where live[i] && names[i] == name { return i }
        return nil
    }
}
