import Foundation

// The Decoder a model's init(from:) reads from: one object's state and its keyed, unkeyed, dictionary
// and single-value containers, reading fields in place from the record (RecordDecoder.swift).

/// The state of one object being decoded: its layout, its field table, and where the next field
/// probably is (fields arrive in declaration order, which is schema order, so one string compare
/// finds each field and no lookup table is built). The record and the cursor live behind a pointer
/// of their own: as stored properties of a class every access would be checked for exclusivity
/// at run time, on every field of every object.
final class ObjectDecodingState {
    let layout: DecodingLayout
    var schema: ObjectSchema { layout.schema }
    /// Where this object is, for errors (`move(to:)` changes it for an array's next element).
    private(set) var context: EncodingContext
    private let hot: UnsafeMutablePointer<Hot>

    struct Hot {
        var bytes = UnsafeRawBufferPointer(start: nil, count: 0)
        var table = FieldTable()
        var nextField = 0
        var nextEntry = 0
        /// Keyed containers nested under a field (`nested`), handed out again for the next record
        /// while nothing else holds them: making one costs a state, a box and its metadata lookup.
        var nested: [NestedContainer] = []
        /// Counts `reset`s, so that a cached nested container knows whether it reads this record.
        var generation = 0
        /// Per field, the decoder its values of non-primitive types were last read with, reused
        /// for the next record's while nothing else holds it (empty until one is needed).
        var decoders: [ValueDecoder?] = []
        /// `allKeys` of records holding one field, per field (each a `[Key]` of the key type
        /// `keysOfOneFieldType`, type-erased), made once per state.
        var keysOfOneField: [AnyObject?] = []
        var keysOfOneFieldType: ObjectIdentifier?
    }

    /// A keyed container handed out over field `field` with key type `type`, its state, and the
    /// record (`Hot.generation`) its state was last pointed at.
    struct NestedContainer {
        var field: Int
        var type: ObjectIdentifier
        var state: ObjectDecodingState
        var box: AnyObject?
        var generation: Int
    }

    /// A located field: its index in the layout, and its entry in the record's table (-1: absent).
    struct Located {
        var field: Int
        var entry: Int
    }

    init(layout: DecodingLayout, context: EncodingContext) {
        self.layout = layout
        self.context = context
        hot = .allocate(capacity: 1)
        hot.initialize(to: Hot())
    }

    deinit {
        retireKeptNested()
        hot.deinitialize(count: 1)
        hot.deallocate()
    }

    /// Nested containers a type kept past its `init(from:)` leave the cache, and their states live
    /// on for good (a container refers to its state unretained); the others stay for reuse.
    private func retireKeptNested() {
        var i = 0
        while i < hot.pointee.nested.count {
            if hot.pointee.nested[i].box != nil && !isKnownUniquelyReferenced(&hot.pointee.nested[i].box) {
                keepForever(hot.pointee.nested[i].state)
                hot.pointee.nested.remove(at: i)
            } else {
                i += 1
            }
        }
    }

    var bytes: UnsafeRawBufferPointer { hot.pointee.bytes }
    var table: FieldTable { hot.pointee.table }

    /// Points this state at another record, keeping its storage.
    func reset(_ bytes: UnsafeRawBufferPointer) throws {
        if !hot.pointee.nested.isEmpty { retireKeptNested() }
        hot.pointee.generation &+= 1
        hot.pointee.bytes = bytes
        hot.pointee.nextField = 0
        hot.pointee.nextEntry = 0
        try hot.pointee.table.parse(bytes)
    }

    /// Makes this state read an object at another place (the next element of an array of structs):
    /// containers and decoders made under the old place name it in their errors, so they go.
    func move(to context: EncodingContext) {
        self.context = context
        if !hot.pointee.nested.isEmpty {
            retireKeptNested()
            hot.pointee.nested.removeAll()
        }
        if !hot.pointee.decoders.isEmpty { hot.pointee.decoders.removeAll() }
    }

    /// Starts over at the first field (a type may ask for its container more than once).
    func rewind() {
        hot.pointee.nextField = 0
        hot.pointee.nextEntry = 0
    }

    /// The live field named `name` and its entry in this record (nil when the schema has none).
    @inline(__always)
    func locate(_ name: String) -> Located? {
        guard let f = layout.field(named: name, after: hot.pointee.nextField) else { return nil }
        hot.pointee.nextField = f + 1
        let id = layout.ids[f]
        guard let e = hot.pointee.table.index(of: id, hint: hot.pointee.nextEntry) else { return Located(field: f, entry: -1) }
        hot.pointee.nextEntry = e + 1
        return Located(field: f, entry: e)
    }

    @inline(__always) func entry(_ e: Int) -> FieldTable.Entry { hot.pointee.table.entries[e] }

    /// The schema field at a layout index (for the slow paths).
    func field(_ f: Int) -> FieldSchema { layout.schema.fields[f] }

    /// Why field `name` has no value in this record: written before the field existed, or (when
    /// the record still holds a value under the field's old id) before a migration changed its type.
    func missing(_ name: String) -> StrataError {
        let fields = layout.schema.fields
        let current = fields.first { $0.name == name && !$0.removed }
        if let old = fields.last(where: { $0.name == name && $0.removed && table.index(of: $0.id, hint: 0) != nil }) {
            let now = current.map { " to \($0.type)" } ?? ""
            return context.appending(name).mismatch(
                "stored as \(old.type), written before a migration changed the field\(now); convert it in the migration (Migration.enumerateObjects)")
        }
        return context.appending(name).mismatch(
            "no value stored (the field was added after this record was written, or encode(to:) left it out; an init(from:) that does without it reads such records)"
        )
    }

    @inline(__always) func slice(_ entry: FieldTable.Entry) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: hot.pointee.bytes[entry.start..<entry.end])
    }
}

/// The keyed container of an object. Generic over the model's coding keys, so compiled
/// unspecialized: every method hands the key's name to the (non-generic, fully optimized)
/// decoding state at once.
///
/// It refers to its state `unowned(unsafe)`: a container with no strong reference is a plain value,
/// so the standard library's box (generic code, compiled unspecialized) copies and destroys it on
/// every call without a retain and a release. The decoder that makes a container owns its state
/// and outlives every call of a synthesized `init(from:)`; should a type keep its container past
/// that, the decoder finds the box still referenced when it lets go of it and keeps the state
/// alive for good (`keepForever`), so the reference never dangles.
struct ObjectKeyedDecoding<Key: CodingKey>: KeyedDecodingContainerProtocol {
    private let unmanaged: Unmanaged<ObjectDecodingState>
    var codingPath: [any CodingKey] { [] }

    init(state: ObjectDecodingState) { unmanaged = .passUnretained(state) }

    /// Runs `body` on the state without retaining it (see above for why it is alive).
    @inline(__always)
    private func with<R>(_ body: (ObjectDecodingState) throws -> R) rethrows -> R {
        try unmanaged._withUnsafeGuaranteedRef(body)
    }

    var allKeys: [Key] {
        with { state in
            // A record of a payload enum holds one field, its case: the keys of one field are
            // made once per state and handed out again (building them is generic code, compiled
            // unspecialized, and cost more than the rest of decoding the enum).
            guard let f = state.onlyPresentField() else {
                var keys: [Key] = []
                for name in state.presentNames() { if let key = Key(stringValue: name) { keys.append(key) } }
                return keys
            }
            // Kept type-erased: an array of `[Key]?` read in unspecialized code looks the metadata
            // of its element type up on every read. An array is one reference whatever its element.
            if let keys = state.keysOfOneField(f, keyType: ObjectIdentifier(Key.self)) { return unsafeBitCast(keys, to: [Key].self) }
            let keys = Key(stringValue: state.layout.names[f]).map { [$0] } ?? []
            state.setKeysOfOneField(f, keyType: ObjectIdentifier(Key.self), unsafeBitCast(keys, to: AnyObject.self))
            return keys
        }
    }
    func contains(_ key: Key) -> Bool { with { $0.contains(key.stringValue) } }
    func decodeNil(forKey key: Key) throws -> Bool { with { $0.isNil(key.stringValue) } }

    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try with { try $0.integer(Int.self, key.stringValue) } }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try with { try $0.integer(Int8.self, key.stringValue) } }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try with { try $0.integer(Int16.self, key.stringValue) } }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try with { try $0.integer(Int32.self, key.stringValue) } }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try with { try $0.integer(Int64.self, key.stringValue) } }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try with { try $0.integer(UInt.self, key.stringValue) } }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try with { try $0.integer(UInt8.self, key.stringValue) } }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try with { try $0.integer(UInt16.self, key.stringValue) } }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try with { try $0.integer(UInt32.self, key.stringValue) } }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try with { try $0.integer(UInt64.self, key.stringValue) } }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try with { try $0.string(key.stringValue) } }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try with { try $0.double(key.stringValue) } }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try with { try $0.bool(key.stringValue) } }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        // Common Foundation types without a dynamic cast (T is exactly the type).
        if T.self == Data.self { return unsafeBitCast(try with { try $0.data(key.stringValue) }, to: T.self) }
        if T.self == Date.self { return unsafeBitCast(try with { try $0.date(key.stringValue) }, to: T.self) }
        return try with { try $0.value(T.self, key.stringValue) }
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        try with { try $0.valueIfPresent(T.self, key.stringValue) }
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try with { try $0.nested(NestedKey.self, key.stringValue) }
    }
    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        throw with { $0.context }.appending(key.stringValue).mismatch("nested containers are not supported")
    }
    func superDecoder() throws -> any Decoder { throw with { $0.context }.mismatch("superDecoder is not supported") }
    func superDecoder(forKey key: Key) throws -> any Decoder { throw with { $0.context }.mismatch("superDecoder is not supported") }
}

extension ObjectDecodingState {
    /// The layout index of the one live field this record holds, or nil when it holds none or more.
    func onlyPresentField() -> Int? {
        guard hot.pointee.table.entries.count == 1 else { return nil }
        let id = hot.pointee.table.entries[0].id
        for f in layout.ids.indices where layout.live[f] && layout.ids[f] == id { return f }
        return nil
    }

    /// `allKeys` of a record holding field `f` alone, for keys of type `keyType` (a `[Key]`), when
    /// this state made it before.
    func keysOfOneField(_ f: Int, keyType: ObjectIdentifier) -> AnyObject? {
        guard hot.pointee.keysOfOneFieldType == keyType, f < hot.pointee.keysOfOneField.count else { return nil }
        return hot.pointee.keysOfOneField[f]
    }

    func setKeysOfOneField(_ f: Int, keyType: ObjectIdentifier, _ keys: AnyObject) {
        if hot.pointee.keysOfOneFieldType != keyType {
            hot.pointee.keysOfOneFieldType = keyType
            hot.pointee.keysOfOneField = Array(repeating: nil, count: layout.names.count)
        }
        hot.pointee.keysOfOneField[f] = keys
    }

    /// The names of the live fields this record holds.
    func presentNames() -> [String] {
        var names: [String] = []
        var hint = 0
        for f in layout.ids.indices where layout.live[f] {
            guard let e = hot.pointee.table.index(of: layout.ids[f], hint: hint) else { continue }
            names.append(layout.names[f])
            hint = e + 1
        }
        return names
    }

    func contains(_ name: String) -> Bool {
        guard let at = locate(name) else { return false }
        return at.entry >= 0
    }

    func isNil(_ name: String) -> Bool {
        guard let at = locate(name), at.entry >= 0 else { return true }
        return entry(at.entry).isNil
    }

    /// The stored bytes of a non-nil field and its layout index, or a thrown error naming it.
    @inline(__always)
    private func present(_ name: String) throws -> (field: Int, bytes: UnsafeRawBufferPointer) {
        guard let at = locate(name) else {
            throw context.appending(name).mismatch("the schema has no field \(name)")
        }
        guard at.entry >= 0 else { throw missing(name) }
        let e = entry(at.entry)
        if e.isNil { throw missing(name) }
        return (at.field, slice(e))
    }

    // Primitives: read straight from the bytes when the field stores exactly that kind, with no
    // boxing and no dynamic casts; anything else (an Int field read as Double…) takes the general
    // path, which says what does not match.

    @inline(__always)
    func integer<I: FixedWidthInteger>(_ type: I.Type, _ name: String) throws -> I {
        let (f, bytes) = try present(name)
        let kind = layout.kinds[f]
        guard kind == .signed || kind == .unsigned else {
            throw context.appending(name).mismatch("stored as \(field(f).type), read as \(I.self)")
        }
        var reader = ByteReader(bytes)
        let raw = try reader.varint()
        let value: I? = kind == .signed ? I(exactly: unzigzag(raw)) : I(exactly: raw)
        guard let value, reader.isAtEnd else {
            throw context.appending(name).mismatch("stored value does not fit \(I.self)")
        }
        return value
    }

    /// A keyed container nested under field `name`: the field holds a nested struct's record.
    func nested<NestedKey: CodingKey>(_ type: NestedKey.Type, _ name: String) throws -> KeyedDecodingContainer<NestedKey> {
        let (f, bytes) = try present(name)
        guard case .object(let schema) = field(f).type.unwrapped else {
            throw context.appending(name).mismatch("stored as \(field(f).type), read as a nested container")
        }
        let key = ObjectIdentifier(NestedKey.self)
        for i in hot.pointee.nested.indices where hot.pointee.nested[i].field == f && hot.pointee.nested[i].type == key {
            let cached = hot.pointee.nested[i]
            // Asked again for this record: the same container, from its first field.
            if cached.generation == hot.pointee.generation {
                cached.state.rewind()
            } else {
                try cached.state.reset(bytes)
                hot.pointee.nested[i].generation = hot.pointee.generation
            }
            // (Only containers whose size was checked are cached.)
            return unsafeBitCast(cached.box, to: KeyedDecodingContainer<NestedKey>.self)
        }
        let state = ObjectDecodingState(layout: layout.children[f] ?? DecodingLayout(schema), context: context.appending(name))
        try state.reset(bytes)
        let made = KeyedDecodingContainer(ObjectKeyedDecoding<NestedKey>(state: state))
        if MemoryLayout<KeyedDecodingContainer<NestedKey>>.size == MemoryLayout<AnyObject>.size {
            hot.pointee.nested.append(
                NestedContainer(field: f, type: key, state: state, box: unsafeBitCast(made, to: AnyObject.self), generation: hot.pointee.generation))
        } else {
            keepForever(state)
        }
        return made
    }

    func string(_ name: String) throws -> String {
        let (f, bytes) = try present(name)
        guard layout.kinds[f] == .string else { return try general(String.self, f, name, bytes) }
        return String(decoding: bytes, as: UTF8.self)
    }

    func double(_ name: String) throws -> Double {
        let (f, bytes) = try present(name)
        guard layout.kinds[f] == .double, bytes.count == 8 else { return try general(Double.self, f, name, bytes) }
        return Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(as: UInt64.self)))
    }

    func bool(_ name: String) throws -> Bool {
        let (f, bytes) = try present(name)
        guard layout.kinds[f] == .bool, bytes.count == 1 else { return try general(Bool.self, f, name, bytes) }
        return bytes[0] != 0
    }

    func data(_ name: String) throws -> Data {
        let (f, bytes) = try present(name)
        guard layout.kinds[f] == .data else { return try general(Data.self, f, name, bytes) }
        // (Not `Data(bytes)`: the generic Sequence initializer copies byte by byte.)
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return Data() }
        return Data(bytes: base, count: bytes.count)
    }

    func date(_ name: String) throws -> Date {
        let (f, bytes) = try present(name)
        guard layout.kinds[f] == .date, bytes.count == 8 else { return try general(Date.self, f, name, bytes) }
        return Date(timeIntervalSinceReferenceDate: Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(as: UInt64.self))))
    }

    private func general<T: Decodable>(_ type: T.Type, _ f: Int, _ name: String, _ bytes: UnsafeRawBufferPointer) throws -> T {
        if RecordDecoding.isPrimitive(T.self) {
            return try RecordDecoding.decodeValue(T.self, as: field(f).type, bytes: bytes, context: context.appending(name))
        }
        if layout.kinds[f] == .stringArray, T.self == [String].self { return unsafeBitCast(try strings(bytes, name), to: T.self) }
        if layout.kinds[f] == .array, Self.isPrimitiveArray(T.self) { return try primitiveArray(T.self, f, name, bytes) }
        // Structs, enums, arrays…: through this field's decoder, made once (a decoder, its context
        // and a struct's container cost more to make than a small value costs to read).
        if hot.pointee.decoders.isEmpty { hot.pointee.decoders = Array(repeating: nil, count: layout.names.count) }
        if hot.pointee.decoders[f] == nil || !isKnownUniquelyReferenced(&hot.pointee.decoders[f]) {
            let type = field(f).type
            hot.pointee.decoders[f] = ValueDecoder(
                fieldType: type.isOptional ? type.unwrappedOnce : type, bytes: bytes, isNil: false,
                context: context.appending(name), layout: layout.children[f])
        }
        let decoder = hot.pointee.decoders[f].unsafelyUnwrapped
        decoder.reset(bytes)
        return try RecordDecoding.decode(T.self, with: decoder)
    }

    /// A `[String]` field (tags, say) read straight from its bytes. Through `Array.init(from:)`
    /// every element cost an unkeyed container call, a generic value decode and, in the standard
    /// library's unspecialized code, the array's regrowth with its metadata lookups: about 1,600
    /// instructions an element. The strings are those the general path reads.
    private func strings(_ bytes: UnsafeRawBufferPointer, _ name: String) throws -> [String] {
        let items = try CollectionLayout.readArray(bytes)
        var strings: [String] = []
        strings.reserveCapacity(items.count)
        for (i, item) in items.enumerated() {
            if item.isNil { throw context.appending(name).appending(index: i).mismatch("nil element read as String") }
            strings.append(String(decoding: item.bytes, as: UTF8.self))
        }
        return strings
    }

    /// Whether `primitiveArray` reads values of `type`: arrays of `Int`, `Int64`, `Double` and
    /// `Date` (scores, coordinates, timestamps).
    private static func isPrimitiveArray(_ type: Any.Type) -> Bool {
        type == [Int].self || type == [Int64].self || type == [Double].self || type == [Date].self
    }

    /// An array `isPrimitiveArray` accepts, read as `strings` reads strings: element by element
    /// with `RecordDecoding.primitive`, as the general path reads them (errors included), without
    /// the standard library's `Array.init(from:)` (compiled unspecialized, it looks up the array's
    /// metadata on every append) and a generic decode per element.
    private func primitiveArray<T>(_ type: T.Type, _ f: Int, _ name: String, _ bytes: UnsafeRawBufferPointer) throws -> T {
        // (Each branch converts a value of exactly T's type.)
        if T.self == [Int].self { return unsafeBitCast(try primitives(Int.self, f, bytes, name), to: T.self) }
        if T.self == [Int64].self { return unsafeBitCast(try primitives(Int64.self, f, bytes, name), to: T.self) }
        if T.self == [Double].self { return unsafeBitCast(try primitives(Double.self, f, bytes, name), to: T.self) }
        if T.self == [Date].self { return unsafeBitCast(try primitives(Date.self, f, bytes, name), to: T.self) }
        throw context.appending(name).mismatch("\(T.self) is not read as an array of primitives")
    }

    private func primitives<E>(_ type: E.Type, _ f: Int, _ bytes: UnsafeRawBufferPointer, _ name: String) throws -> [E] {
        guard case .array(let element) = field(f).type.unwrapped else { throw context.appending(name).mismatch("stored as \(field(f).type), read as an array") }
        let stored = element.isOptional ? element.unwrappedOnce : element
        let items = try CollectionLayout.readArray(bytes)
        let array = context.appending(name)
        var values: [E] = []
        values.reserveCapacity(items.count)
        for (i, item) in items.enumerated() {
            if item.isNil { throw array.appending(index: i).mismatch("nil element read as \(E.self)") }
            values.append(try RecordDecoding.primitive(E.self, as: stored, bytes: item.bytes, context: array.appending(index: i)))
        }
        return values
    }

    func value<T: Decodable>(_ type: T.Type, _ name: String) throws -> T {
        guard let at = locate(name) else {
            throw context.appending(name).mismatch("the schema has no field \(name)")
        }
        guard at.entry >= 0, !entry(at.entry).isNil else {
            // A stored nil or a missing field, read as a non-optional: let Optional types decode
            // nil, and a wrapper around an optional its own nil.
            return try RecordDecoding.decodeNil(T.self, as: field(at.field).type, context: context.appending(name), orThrow: missing(name))
        }
        return try general(T.self, at.field, name, slice(entry(at.entry)))
    }

    func valueIfPresent<T: Decodable>(_ type: T.Type, _ name: String) throws -> T? {
        guard let at = locate(name), at.entry >= 0 else { return nil }
        let e = entry(at.entry)
        if e.isNil {
            // A stored nil inside a present field: `.some(nil)` for a double optional, nil otherwise.
            if let none = nilValue(of: T.self) { return .some(none) }
            return nil
        }
        if T.self == String.self, layout.kinds[at.field] == .string { return unsafeBitCast(String(decoding: slice(e), as: UTF8.self), to: T.self) }
        return try general(T.self, at.field, name, slice(e))
    }
}

struct ArrayDecoding: UnkeyedDecodingContainer {
    let element: FieldType
    let context: EncodingContext
    /// The elements' struct layout (`ValueDecoder.layout`).
    let layout: DecodingLayout?
    /// The decoder of the array, which keeps one decoder for its elements (`ValueDecoder.element`).
    let owner: ValueDecoder
    var items: [(isNil: Bool, bytes: UnsafeRawBufferPointer)] = []
    var codingPath: [any CodingKey] { [] }
    var count: Int? { items.count }
    var currentIndex = 0
    var isAtEnd: Bool { currentIndex >= items.count }

    init(element: FieldType, bytes: UnsafeRawBufferPointer, context: EncodingContext, layout: DecodingLayout?, owner: ValueDecoder) throws {
        self.element = element
        self.context = context
        self.layout = layout
        self.owner = owner
        items = try CollectionLayout.readArray(bytes)
    }

    mutating func decodeNil() throws -> Bool {
        guard currentIndex < items.count else { throw context.mismatch("read past the end of the array") }
        if items[currentIndex].isNil {
            currentIndex += 1
            return true
        }
        return false
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        guard currentIndex < items.count else { throw context.mismatch("read past the end of the array") }
        let item = items[currentIndex]
        currentIndex += 1
        if item.isNil {
            return try nilValue(of: T.self, orThrow: context.appending(index: currentIndex - 1).mismatch("nil element read as \(T.self)"))
        }
        return try RecordDecoding.decodeElement(
            T.self, as: element, bytes: item.bytes, context: context.appending(index: currentIndex - 1), owner: owner, layout: layout)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        throw context.mismatch("nested containers are not supported")
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { throw context.mismatch("nested containers are not supported") }
    mutating func superDecoder() throws -> any Decoder { throw context.mismatch("superDecoder is not supported") }
}

struct DictionaryKeyedDecoding<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let element: FieldType
    let context: EncodingContext
    /// The values' struct layout (`ValueDecoder.layout`).
    let layout: DecodingLayout?
    /// The decoder of the dictionary, which keeps one decoder for its values (`ValueDecoder.element`).
    let owner: ValueDecoder
    var entries: [String: (isNil: Bool, bytes: UnsafeRawBufferPointer)] = [:]
    var codingPath: [any CodingKey] { [] }

    init(element: FieldType, bytes: UnsafeRawBufferPointer, context: EncodingContext, layout: DecodingLayout?, owner: ValueDecoder) throws {
        self.element = element
        self.context = context
        self.layout = layout
        self.owner = owner
        for entry in try CollectionLayout.readDictionary(bytes) { entries[entry.key] = (entry.isNil, entry.bytes) }
    }

    var allKeys: [Key] { entries.keys.sorted().compactMap { Key(stringValue: $0) } }
    func contains(_ key: Key) -> Bool { entries[key.stringValue] != nil }
    func decodeNil(forKey key: Key) throws -> Bool { entries[key.stringValue]?.isNil ?? true }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        guard let entry = entries[key.stringValue] else { throw context.appending(key.stringValue).mismatch("no such key") }
        if entry.isNil {
            return try nilValue(of: T.self, orThrow: context.appending(key.stringValue).mismatch("nil read as \(T.self)"))
        }
        return try RecordDecoding.decodeElement(
            T.self, as: element, bytes: entry.bytes, context: context.appending(key.stringValue), owner: owner, layout: layout)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        throw context.mismatch("nested containers are not supported")
    }
    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer { throw context.mismatch("nested containers are not supported") }
    func superDecoder() throws -> any Decoder { throw context.mismatch("superDecoder is not supported") }
    func superDecoder(forKey key: Key) throws -> any Decoder { throw context.mismatch("superDecoder is not supported") }
}

struct SingleValueDecoding: SingleValueDecodingContainer {
    let decoder: ValueDecoder
    var codingPath: [any CodingKey] { [] }

    func decodeNil() -> Bool { decoder.isNil }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let stored = decoder.fieldType
        switch stored.unwrapped {
        case .enumeration(let raw):
            // The raw value itself, or an enum (inside a wrapper) read as one, by its own
            // init(from:) or else by its raw value (RecordDecoding.decodeValue).
            if RecordDecoding.isPrimitive(T.self) { return try RecordDecoding.primitive(T.self, as: raw, bytes: decoder.bytes, context: decoder.context) }
            return try RecordDecoding.decodeValue(T.self, as: .enumeration(raw), bytes: decoder.bytes, context: decoder.context, layout: decoder.layout)
        case .reference:
            guard let value = KeyEncoding.decode(T.self, from: decoder.bytes) else {
                throw decoder.context.mismatch("stored reference key does not decode as \(T.self)")
            }
            return value
        default:
            if RecordDecoding.isPrimitive(T.self) { return try RecordDecoding.primitive(T.self, as: stored, bytes: decoder.bytes, context: decoder.context) }
            return try T(from: decoder)
        }
    }
}
