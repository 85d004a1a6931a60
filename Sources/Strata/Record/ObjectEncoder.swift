import Foundation

// The Encoder a model's encode(to:) writes into: keyed, unkeyed, dictionary and single-value containers
// that append fields to a record (RecordEncoder.swift) without building per-field arrays.

/// The encoder a type's `encode(to:)` sees for a struct: a thin owner of the encoding state
/// (`ObjectEncoding`) and of the keyed container, made once per coding-key type and handed out
/// again. The top-level one of each model is reused (`ModelInfo`'s pool), so its buffers keep
/// their storage.
final class ObjectEncoder: ForwardingEncoder {
    let state: ObjectEncoding
    var forwardingDepth = 0
    private var containerKeyType: ObjectIdentifier?
    private var container: AnyObject?
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(state: ObjectEncoding) { self.state = state }

    convenience init(layout: DecodingLayout, context: EncodingContext) {
        self.init(state: ObjectEncoding(layout: layout, context: context))
    }

    deinit { retireContainer() }

    /// Ready for the next object.
    func reset() { state.reset() }
    /// Ready for the next object, at another place (`ObjectEncoding.move(to:)`).
    func reset(at context: EncodingContext) {
        state.move(to: context)
        state.reset()
    }
    /// The record of the fields encoded so far, appended to `out`.
    func serialize(into out: inout [UInt8]) { state.serialize(into: &out) }
    /// The record of the fields encoded so far.
    func record() -> [UInt8] { state.record() }
    /// The record of the fields encoded so far, appended to `out`, or the error of a container
    /// the type asked for and Strata cannot write (`ObjectEncoding.failure`).
    func finish(into out: inout [UInt8]) throws {
        state.serialize(into: &out)
        if let failure = state.failure { throw failure }
    }

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

    /// Whether anything but this encoder holds its cached container (a type kept it).
    func containerIsKept() -> Bool {
        container != nil && !isKnownUniquelyReferenced(&container)
    }

    /// The cached container goes: if anything but this encoder still holds it (a type kept its
    /// container past `encode(to:)`), the state it refers to (unowned) must live on for it.
    private func retireContainer() {
        if container != nil, !isKnownUniquelyReferenced(&container) { keepForever(state) }
        container = nil
        containerKeyType = nil
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let failure = state.context.mismatch("a struct field list was expected, but the type encodes an array")
        state.noteFailure(failure)  // (an empty array writes nothing that would throw)
        return FailingUnkeyedEncoding(error: failure)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        ForwardingSingleValueEncoding(encoder: self, expected: "a struct field list", context: state.context)
    }
}

/// The fields of one struct being encoded and the work of its keyed container, compiled once,
/// non-generic.
final class ObjectEncoding {
    let layout: DecodingLayout
    var schema: ObjectSchema { layout.schema }
    /// Where this object is, for errors (`move(to:)` changes it for a collection's next element).
    private(set) var context: EncodingContext
    /// What changes while encoding, behind a pointer of its own: as stored properties of a class
    /// every access would be checked for exclusivity at run time, on every field of every object.
    private let hot: UnsafeMutablePointer<Hot>

    struct Hot {
        var storage = RecordFields()
        /// The field expected next: synthesized encoders go in declaration order, which is schema order.
        var next = 0
        /// Keyed containers nested under a field (`nestedContainer(keyedBy:forKey:)`), written
        /// into as the type goes on: serialized into their fields when the record is.
        var nested: [Nested] = []
        /// Per field, the encoder its struct values were last written with, reused for the next
        /// record's while nothing else holds it or its container (empty until one is needed).
        var encoders: [ObjectEncoder?] = []
        /// Per field, the encoder its collections were last written with
        /// (`RecordEncoding.encodeCollection`'s slot; empty until one is needed).
        var collections: [AnyObject?] = []
        /// A container the type asked for that Strata cannot write (a nested unkeyed one), whose
        /// error is thrown when its first element is written; noted here, it is thrown at the
        /// end of `encode(to:)` even when none was (an empty array written so left the field out
        /// of the record, and the object could not be read back).
        var failure: StrataError?
    }

    /// A nested container's field, its state, and the box handed out (to tell whether the type
    /// kept it).
    struct Nested {
        var field: Int
        var state: ObjectEncoding
        var box: AnyObject?
        /// The first container of its field, which writes it (a later one shares its state).
        var writes: Bool
    }

    init(layout: DecodingLayout, context: EncodingContext) {
        self.layout = layout
        self.context = context
        hot = .allocate(capacity: 1)
        hot.initialize(to: Hot())
    }

    deinit {
        releaseNested()
        hot.deinitialize(count: 1)
        hot.deallocate()
    }

    /// The fields encoded so far.
    var storage: RecordFields { hot.pointee.storage }

    /// `Hot.failure`.
    var failure: StrataError? { hot.pointee.failure }

    /// Notes that `error` will fail the object (the first noted is kept).
    func noteFailure(_ error: StrataError) {
        if hot.pointee.failure == nil { hot.pointee.failure = error }
    }

    /// Makes this state write an object at another place (a collection's next element): the
    /// encoders it made for fields under the old place name it in their errors, so they go.
    func move(to context: EncodingContext) {
        self.context = context
        if !hot.pointee.encoders.isEmpty { hot.pointee.encoders.removeAll() }
    }

    /// Ready for the next object.
    func reset() {
        hot.pointee.storage.removeAll()
        hot.pointee.next = 0
        hot.pointee.failure = nil
        if !hot.pointee.nested.isEmpty { releaseNested() }
    }

    /// The record of the fields encoded so far, appended to `out`.
    func serialize(into out: inout [UInt8]) {
        if !hot.pointee.nested.isEmpty { flushNested() }
        hot.pointee.storage.serialize(into: &out)
    }

    /// The record of the fields encoded so far.
    func record() -> [UInt8] {
        if !hot.pointee.nested.isEmpty { flushNested() }
        return hot.pointee.storage.record()
    }

    /// A keyed container nested under field `name`, stored as a nested struct would be.
    func nested<NestedKey: CodingKey>(_ type: NestedKey.Type, _ name: String) -> KeyedEncodingContainer<NestedKey> {
        let f: Int
        do {
            f = try field(name)
        } catch {
            let failure = error as? StrataError ?? context.appending(name).mismatch("\(error)")
            noteFailure(failure)
            return KeyedEncodingContainer(FailingKeyedEncoding<NestedKey>(error: failure))
        }
        guard case .object(let schema) = schema.fields[f].type.unwrapped else {
            let failure = context.appending(name).mismatch(
                "\(Self.unwritableContainer) stored as \(schema.fields[f].type), written as a nested keyed container; encode the value itself (`encode(_:forKey:)`)"
            )
            noteFailure(failure)
            return KeyedEncodingContainer(FailingKeyedEncoding<NestedKey>(error: failure))
        }
        // Asked again for the same key: the same container, as JSONEncoder merges them (written
        // twice, the field would be in the record twice, and read back from its first entry).
        let again = hot.pointee.nested.first { $0.field == f && $0.writes }?.state
        let state = again ?? ObjectEncoding(layout: layout.children[f] ?? DecodingLayout(schema), context: context.appending(name))
        let made = KeyedEncodingContainer(ObjectKeyedEncoding<NestedKey>(encoder: state))
        var box: AnyObject?
        if MemoryLayout<KeyedEncodingContainer<NestedKey>>.size == MemoryLayout<AnyObject>.size {
            box = unsafeBitCast(made, to: AnyObject.self)
        } else {
            keepForever(state)
        }
        hot.pointee.nested.append(Nested(field: f, state: state, box: box, writes: again == nil))
        return made
    }

    /// Writes each nested container's fields into its field, then lets them go.
    private func flushNested() {
        // (By index: a copy of the array would hold a second reference to every box.)
        for i in hot.pointee.nested.indices where hot.pointee.nested[i].writes {
            var bytes: [UInt8] = []
            hot.pointee.nested[i].state.serialize(into: &bytes)
            if let failure = hot.pointee.nested[i].state.failure { noteFailure(failure) }
            hot.pointee.storage.append(id: layout.ids[hot.pointee.nested[i].field], isNil: false, bytes: bytes)
        }
        releaseNested()
    }

    /// The nested containers go; one the type kept past its `encode(to:)` keeps its state alive
    /// for good (it refers to it unretained, as `ObjectKeyedEncoding` does).
    private func releaseNested() {
        for i in hot.pointee.nested.indices where hot.pointee.nested[i].box != nil && !isKnownUniquelyReferenced(&hot.pointee.nested[i].box) {
            keepForever(hot.pointee.nested[i].state)
        }
        hot.pointee.nested.removeAll()
    }

    /// How the error of a container the type asks for and Strata cannot write begins
    /// (`Model.reconcile` looks for it: such a type is refused at open).
    static let unwritableContainer = "written through a container Strata cannot store:"

    /// Why a field the type writes has no place in the record (`Model.reconcile` looks for it).
    static let unreadField = "encode(to:) writes a field that init(from:) never reads, so the schema does not have it"

    /// The layout index of the live field named `name`.
    @inline(__always)
    func field(_ name: String) throws -> Int {
        guard let f = layout.field(named: name, after: hot.pointee.next) else {
            throw context.appending(name).mismatch(ObjectEncoding.unreadField)
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
            hot.pointee.storage.append(id: layout.ids[f]) { PrimitiveLayout.append(signed: value, to: &$0) }
        case .unsigned:
            guard let u = unsigned ?? (value >= 0 ? UInt64(value) : nil) else {
                throw context.appending(name).mismatch("\(describeValue(value)) does not fit \(schema.fields[f].type)")
            }
            hot.pointee.storage.append(id: layout.ids[f]) { PrimitiveLayout.append(unsigned: u, to: &$0) }
        default:
            if let unsigned { try general(unsigned, f, name) } else { try general(value, f, name) }
        }
    }

    func string(_ value: String, _ name: String) throws {
        let f = try field(name)
        guard layout.kinds[f] == .string else { return try general(value, f, name) }
        hot.pointee.storage.append(id: layout.ids[f]) { PrimitiveLayout.append(string: value, to: &$0) }
    }

    func double(_ value: Double, _ name: String) throws {
        let f = try field(name)
        guard layout.kinds[f] == .double else { return try general(value, f, name) }
        hot.pointee.storage.append(id: layout.ids[f]) { PrimitiveLayout.append(double: value, to: &$0) }
    }

    func bool(_ value: Bool, _ name: String) throws {
        let f = try field(name)
        guard layout.kinds[f] == .bool else { return try general(value, f, name) }
        hot.pointee.storage.append(id: layout.ids[f]) { PrimitiveLayout.append(bool: value, to: &$0) }
    }

    func data(_ value: Data, _ name: String) throws {
        let f = try field(name)
        guard layout.kinds[f] == .data else { return try general(value, f, name) }
        hot.pointee.storage.append(id: layout.ids[f]) { PrimitiveLayout.append(data: value, to: &$0) }
    }

    func date(_ value: Date, _ name: String) throws {
        let f = try field(name)
        guard layout.kinds[f] == .date else { return try general(value, f, name) }
        hot.pointee.storage.append(id: layout.ids[f]) { PrimitiveLayout.append(date: value, to: &$0) }
    }

    func value<T: Encodable>(_ value: T, _ name: String) throws {
        let f = try field(name)
        if layout.kinds[f] == .stringArray, T.self == [String].self {
            // Checked first: comparing metatypes costs nothing beside the cast to OptionalValue.
            // The bytes the general path writes, without an encoder and a boxed value per element.
            let strings = unsafeBitCast(value, to: [String].self)
            hot.pointee.storage.append(id: layout.ids[f]) { CollectionLayout.appendStrings(strings, to: &$0) }
            return
        }
        // Only an optional can be nil: `_isOptional` reads the type's metadata kind, where the cast
        // to `OptionalValue` is a conformance lookup, made for every struct or collection field.
        if _isOptional(T.self), let optional = value as? any OptionalValue {
            // A nested optional's own nil (`String??.none`, as a hand-written coder hands every key
            // to `encode(_:forKey:)`) is no value, as `encodeIfPresent` leaves it: it reads back
            // nil, as JSON's null does through `decodeIfPresent`, not as the inner nil below.
            if optional.wrappedAny == nil, type(of: optional).wrapsOptional { return }
            // A nested optional's inner nil (`Int??.some(nil)` given to `encode(_:forKey:)`, as a
            // generic model or a hand-written coder does) is the field's nil, as `encodeIfPresent`
            // stores it; only an array element or a dictionary value cannot keep it.
            if optional.wrappedAny.map(isNilInside) ?? true {
                hot.pointee.storage.append(id: layout.ids[f], isNil: true, bytes: EmptyCollection())
                return
            }
        } else if layout.kinds[f] == .object, let child = layout.children[f] {
            do {
                return try object(value, f, name, layout: child)
            } catch  where schema.fields[f].type.isOptional && RecordEncoding.writesNil(value) {
                return appendWrappedNil(f)
            }
        } else if layout.kinds[f].isCollection {
            if layout.kinds[f] == .array {
                let element = layout.elementKinds[f]
                if hot.pointee.storage.append(id: layout.ids[f], ifWritten: { RecordEncoding.appendPrimitiveArray(value, element: element, to: &$0) }) {
                    return
                }
            }
            // (Not through `general`: it would pass the collection through `Any` and cast it back.)
            // (`T` is not optional, so the field's optionals have nothing to unwrap.)
            let type = schema.fields[f].type.unwrapped
            let context = self.context.appending(name)
            let child = layout.children[f]
            if hot.pointee.collections.isEmpty { hot.pointee.collections = Array(repeating: nil, count: layout.names.count) }
            // (Taken out of its slot while in use: a type writing the field again inside finds it empty.)
            var slot: AnyObject?
            swap(&slot, &hot.pointee.collections[f])
            defer { swap(&slot, &hot.pointee.collections[f]) }
            do {
                return try hot.pointee.storage.append(id: layout.ids[f]) {
                    try RecordEncoding.encodeCollection(value, as: type, into: &$0, context: context, layout: child, slot: &slot)
                }
            } catch  where schema.fields[f].type.isOptional && RecordEncoding.writesNil(value) {
                return appendWrappedNil(f)
            }
        }
        try general(value, f, name)
    }

    /// A struct (or payload enum) into a field that stores one, through this field's encoder, made
    /// once: the general path casts the value through `Any` and makes an encoder, a layout and a
    /// container for every value, which cost several times what writing a small struct does.
    private func object<T: Encodable>(_ value: T, _ f: Int, _ name: String, layout child: DecodingLayout) throws {
        if hot.pointee.encoders.isEmpty { hot.pointee.encoders = Array(repeating: nil, count: layout.names.count) }
        // A new encoder when a type kept the last one, or its container, past `encode(to:)`: the
        // kept one writes into its own state, never into a later record's.
        if hot.pointee.encoders[f] == nil || !isKnownUniquelyReferenced(&hot.pointee.encoders[f])
            || hot.pointee.encoders[f].unsafelyUnwrapped.containerIsKept()
        {
            hot.pointee.encoders[f] = ObjectEncoder(layout: child, context: context.appending(name))
        }
        let encoder = hot.pointee.encoders[f].unsafelyUnwrapped
        encoder.reset()
        try value.encode(to: encoder)
        try hot.pointee.storage.append(id: layout.ids[f]) { try encoder.finish(into: &$0) }
    }

    private func general<T>(_ value: T, _ f: Int, _ name: String) throws {
        let type = schema.fields[f].type
        let context = self.context.appending(name)
        let child = layout.children[f]
        do {
            try hot.pointee.storage.append(id: layout.ids[f]) { try RecordEncoding.encodeValue(value, as: type, into: &$0, context: context, layout: child) }
        } catch  where type.isOptional && !_isOptional(T.self) && RecordEncoding.writesNil(value) {
            appendWrappedNil(f)
        }
    }

    /// A nil entry for field `f`, whose value is a wrapper around an optional holding nil
    /// (`RecordEncoding.writesNil`). Told only once the value failed to encode (on each path of
    /// `value`): a raw enum is stored by its raw value whatever its own encode(to:) writes (even
    /// a nil), and every present optional would pay for a second encoding.
    private func appendWrappedNil(_ f: Int) {
        hot.pointee.storage.append(id: layout.ids[f], isNil: true, bytes: EmptyCollection())
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
    mutating func encode(_ value: UInt, forKey key: Key) throws {
        try with { try $0.integer(Int64(truncatingIfNeeded: value), unsigned: UInt64(value), key.stringValue) }
    }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { try with { try $0.integer(Int64(value), unsigned: UInt64(value), key.stringValue) } }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { try with { try $0.integer(Int64(value), unsigned: UInt64(value), key.stringValue) } }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { try with { try $0.integer(Int64(value), unsigned: UInt64(value), key.stringValue) } }
    mutating func encode(_ value: UInt64, forKey key: Key) throws {
        try with { try $0.integer(Int64(truncatingIfNeeded: value), unsigned: value, key.stringValue) }
    }
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
        with { $0.nested(NestedKey.self, key.stringValue) }
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        with { state in
            let failure = state.context.appending(key.stringValue).mismatch(
                "\(ObjectEncoding.unwritableContainer) a nested unkeyed container is not supported; encode the array itself (`encode(_:forKey:)`)")
            state.noteFailure(failure)
            return FailingUnkeyedEncoding(error: failure)
        }
    }

    // A super encoder is refused as the probe refuses a super decoder. It wrote into this object's
    // own fields (JSON nests it under its key): a nested `at` replaced the object's `at`, and
    // the field it stood for was never written. Noted, so that it fails also when nothing is
    // written through it, and the type is refused as the database opens (`checkWrites`).
    mutating func superEncoder() -> any Encoder { refusedSuperEncoder("super") }
    mutating func superEncoder(forKey key: Key) -> any Encoder { refusedSuperEncoder(key.stringValue) }

    private func refusedSuperEncoder(_ key: String) -> any Encoder {
        with { state in
            let failure = state.context.appending(key).mismatch(
                "\(ObjectEncoding.unwritableContainer) a super encoder is not supported; encode the value itself (`encode(_:forKey:)`)")
            state.noteFailure(failure)
            return FailingEncoder(error: failure)
        }
    }
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

/// Whether `value` is an optional that holds nil at some depth (`Int?.none`, `Int??.some(nil)`).
private func isNilInside(_ value: Any) -> Bool {
    // `_isOptional` reads the type's metadata kind: no conformance lookup for the common non-optional value.
    func isOptional<V>(_: V) -> Bool { _isOptional(V.self) }
    guard isOptional(value), let optional = value as? any OptionalValue else { return false }
    return optional.wrappedAny.map(isNilInside) ?? true
}
