import Foundation

// The Encoders of arrays, sets and `[String: T]` dictionaries inside a record. Their elements are
// written one after another into one buffer, which CollectionLayout lays out when the collection
// is done.

/// The elements of one collection being encoded: their bytes back to back in one buffer, and per
/// element its nil flag and span (no array per element). Elements of the common primitive types
/// are written without passing through `Any`, and struct elements through one encoder moved from
/// element to element: a new encoder, state, buffers and container box per element, and the
/// dynamic casts of the general path, cost several times what writing a small struct does.
final class ElementWriter {
    /// The elements' stored type (optional when the collection holds optionals).
    let element: FieldType
    /// The layout of the struct the elements hold (directly or deeper), when they hold one.
    let layout: DecodingLayout?
    /// How the elements are stored, for the fast paths (`DecodingLayout.kind(of:)`).
    private let kind: DecodingLayout.Kind
    /// What changes while writing, behind a pointer of its own: as stored properties of a class
    /// every access would be checked for exclusivity at run time, several times per element
    /// (a quarter of the time of writing an array of numbers).
    private let hot: UnsafeMutablePointer<Hot>

    private struct Hot {
        var body: [UInt8] = []
        var spans: [CollectionLayout.Span] = []
        /// A dictionary's key of each element, in the same order (empty for arrays and sets).
        var keys: [String] = []
        /// The encoder of struct elements, reused for the next element while nothing else holds it.
        var objects: ObjectEncoder?
        /// The encoder of collection elements (`RecordEncoding.encodeCollection`'s slot).
        var collections: AnyObject?
    }

    init(element: FieldType, layout: DecodingLayout?) {
        self.element = element
        self.layout = layout ?? DecodingLayout.objectSchema(in: element).map { DecodingLayout($0) }
        kind = DecodingLayout.kind(of: element)
        hot = .allocate(capacity: 1)
        hot.initialize(to: Hot())
    }

    deinit {
        hot.deinitialize(count: 1)
        hot.deallocate()
    }

    var body: [UInt8] { hot.pointee.body }
    var spans: [CollectionLayout.Span] { hot.pointee.spans }
    var keys: [String] { hot.pointee.keys }
    var count: Int { hot.pointee.spans.count }

    /// Empty again, for another collection of the same type: buffers and encoders kept, but not
    /// the storage of a large collection (a field's encoder lives as long as its model's pooled
    /// encoder, and one large array would otherwise stay allocated that long).
    func clear() {
        let keep = hot.pointee.body.capacity <= ElementWriter.keptBytes
        hot.pointee.body.removeAll(keepingCapacity: keep)
        hot.pointee.spans.removeAll(keepingCapacity: keep)
        hot.pointee.keys.removeAll(keepingCapacity: keep)
    }

    static let keptBytes = 1 << 16

    /// Records the dictionary key of the element appended last.
    func appendKey(_ key: String) { hot.pointee.keys.append(key) }

    func appendNil() {
        let end = hot.pointee.body.count
        hot.pointee.spans.append(CollectionLayout.Span(isNil: true, start: end, end: end))
    }

    /// Appends `value`, the element at `context` (for errors; made only when needed).
    func append<T: Encodable>(_ value: T, context: @autoclosure () -> EncodingContext) throws {
        // Only an optional can be nil: `_isOptional` reads the type's metadata kind, where the cast
        // to `OptionalValue` is a conformance lookup, for every element of every type.
        let optional = _isOptional(T.self)
        if optional, let wrapper = value as? any OptionalValue, wrapper.wrappedAny == nil { return appendNil() }
        let start = hot.pointee.body.count
        do {
            if optional {
                try RecordEncoding.encodeValue(value, as: element, into: &hot.pointee.body, context: context(), layout: layout)
            } else if kind == .object, let layout {
                try appendObject(value, context: context(), layout: layout)
            } else if kind.isCollection {
                // (Taken out of its slot while in use: an element's own collections find it empty.)
                var slot: AnyObject?
                swap(&slot, &hot.pointee.collections)
                defer { swap(&slot, &hot.pointee.collections) }
                try RecordEncoding.encodeCollection(value, as: element.unwrapped, into: &hot.pointee.body, context: context(), layout: layout, slot: &slot)
            } else if !RecordEncoding.appendPrimitive(value, kind: kind, to: &hot.pointee.body) {
                try RecordEncoding.encodeValue(value, as: element, into: &hot.pointee.body, context: context(), layout: layout)
            }
        } catch  where !optional && element.isOptional && RecordEncoding.writesNil(value) {
            // A wrapper around an optional, holding nil: a nil element (told only once it failed,
            // as `ObjectEncoding.general` does).
            hot.pointee.body.removeSubrange(start..<hot.pointee.body.count)
            return appendNil()
        }
        hot.pointee.spans.append(CollectionLayout.Span(isNil: false, start: start, end: hot.pointee.body.count))
    }

    /// A struct (or payload enum) element, through the reused encoder. A new one when a type kept
    /// the last one, or its container, past `encode(to:)`: the kept one writes into its own state,
    /// never into a later element's.
    private func appendObject<T: Encodable>(_ value: T, context: EncodingContext, layout: DecodingLayout) throws {
        if hot.pointee.objects == nil || !isKnownUniquelyReferenced(&hot.pointee.objects) || hot.pointee.objects.unsafelyUnwrapped.containerIsKept() {
            hot.pointee.objects = ObjectEncoder(layout: layout, context: context)
        }
        let encoder = hot.pointee.objects.unsafelyUnwrapped
        encoder.reset(at: context)
        try value.encode(to: encoder)
        try encoder.finish(into: &hot.pointee.body)
    }

    /// Orders the elements by their bytes (nil before an empty value): sets encode in hash order,
    /// and equal sets must give equal records.
    func sortByBytes() {
        hot.pointee.body.withUnsafeBufferPointer { body in
            hot.pointee.spans.sort { a, b in
                let x = UnsafeBufferPointer(rebasing: body[a.start..<a.end])
                let y = UnsafeBufferPointer(rebasing: body[b.start..<b.end])
                return x.elementsEqual(y) ? a.isNil && !b.isNil : x.lexicographicallyPrecedes(y)
            }
        }
    }
}

/// The encoder (and unkeyed container) an array or a set encodes its elements into.
final class ArrayEncoder: ForwardingEncoder, ReusableEncoder, UnkeyedEncodingContainer {
    private(set) var context: EncodingContext
    let elements: ElementWriter
    var forwardingDepth = 0
    /// Whether the value written is a set (or a wrapper of one): its elements are then stored
    /// sorted by their bytes, so that equal sets give equal records whatever their hash order.
    var isUnordered = false
    /// A container asked for that Strata cannot store (a nested one): thrown once the value is
    /// encoded, even when nothing was written into it (an empty row would vanish).
    var failure: StrataError?
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    var count: Int { elements.count }

    init(element: FieldType, context: EncodingContext, layout: DecodingLayout?) {
        self.context = context
        elements = ElementWriter(element: element, layout: layout)
    }

    /// Ready for another array of the same field, at `context`.
    func reuse(at context: EncodingContext) {
        self.context = context
        forwardingDepth = 0
        isUnordered = false
        failure = nil
        elements.clear()
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(FailingKeyedEncoding<Key>(error: context.mismatch("an array was expected")))
    }
    func unkeyedContainer() -> any UnkeyedEncodingContainer { self }
    func singleValueContainer() -> any SingleValueEncodingContainer {
        ForwardingSingleValueEncoding(encoder: self, expected: "an array", context: context)
    }

    func encodeNil() throws { elements.appendNil() }

    func encode<T: Encodable>(_ value: T) throws {
        try elements.append(value, context: context.appending(index: elements.count))
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        KeyedEncodingContainer(FailingKeyedEncoding<NestedKey>(error: noteNested("keyed")))
    }
    func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        FailingUnkeyedEncoding(error: noteNested("unkeyed"))
    }
    // (Refused as an object's super encoder is: JSON adds an element, this wrote into the array.)
    func superEncoder() -> any Encoder { FailingEncoder(error: noteNested("super encoder")) }

    private func noteNested(_ kind: String) -> StrataError {
        let error = context.appending(index: elements.count).mismatch(
            "\(ObjectEncoding.unwritableContainer) an element written as a nested \(kind) container is not supported; encode the element itself (`encode(_:)`)")
        if failure == nil { failure = error }
        return error
    }

    /// The array's stored bytes, appended to `out`.
    func serialize(into out: inout [UInt8]) {
        if isUnordered { elements.sortByBytes() }
        CollectionLayout.appendArray(elements.body, elements.spans, to: &out)
    }
}

/// The encoder a `[String: T]` dictionary encodes its values into (through a keyed container).
final class DictionaryEncoder: ForwardingEncoder, ReusableEncoder {
    private(set) var context: EncodingContext
    let values: ElementWriter
    var forwardingDepth = 0
    /// As `ArrayEncoder.failure`.
    var failure: StrataError?
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(element: FieldType, context: EncodingContext, layout: DecodingLayout?) {
        self.context = context
        values = ElementWriter(element: element, layout: layout)
    }

    /// Ready for another dictionary of the same field, at `context`.
    func reuse(at context: EncodingContext) {
        self.context = context
        forwardingDepth = 0
        failure = nil
        values.clear()
    }

    func noteNested(_ kind: String, key: String) -> StrataError {
        let error = context.appending(key).mismatch(
            "\(ObjectEncoding.unwritableContainer) a value written as a nested \(kind) container is not supported; encode the value itself (`encode(_:forKey:)`)"
        )
        if failure == nil { failure = error }
        return error
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(DictionaryKeyedEncoding<Key>(encoder: self))
    }
    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        FailingUnkeyedEncoding(error: context.mismatch("a [String: T] dictionary was expected"))
    }
    func singleValueContainer() -> any SingleValueEncodingContainer {
        ForwardingSingleValueEncoding(encoder: self, expected: "a [String: T] dictionary", context: context)
    }

    /// The dictionary's stored bytes, appended to `out`.
    func serialize(into out: inout [UInt8]) {
        CollectionLayout.appendDictionary(values.keys, values.body, values.spans, to: &out)
    }
}

struct DictionaryKeyedEncoding<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let encoder: DictionaryEncoder
    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil(forKey key: Key) throws {
        encoder.values.appendNil()
        encoder.values.appendKey(key.stringValue)
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        let name = key.stringValue
        try encoder.values.append(value, context: encoder.context.appending(name))
        encoder.values.appendKey(name)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        KeyedEncodingContainer(FailingKeyedEncoding<NestedKey>(error: encoder.noteNested("keyed", key: key.stringValue)))
    }
    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        FailingUnkeyedEncoding(error: encoder.noteNested("unkeyed", key: key.stringValue))
    }
    mutating func superEncoder() -> any Encoder { FailingEncoder(error: encoder.noteNested("super encoder", key: "super")) }
    mutating func superEncoder(forKey key: Key) -> any Encoder { FailingEncoder(error: encoder.noteNested("super encoder", key: key.stringValue)) }
}

/// The single-value container of an encoder that writes one shape of value (a struct's fields, an
/// array, a dictionary): a single-value wrapper (a property wrapper, a tagged identifier) encodes
/// the value it wraps here, and that value writes itself into the same encoder, as if the wrapper
/// were not there. The schema stores the wrapped value (the probe reads what `init(from:)` reads),
/// and reading goes through the wrapper's `init(from:)` and the same decoder.
struct ForwardingSingleValueEncoding: SingleValueEncodingContainer {
    let encoder: any ForwardingEncoder
    /// What the encoder writes, for errors ("an array").
    let expected: String
    let context: EncodingContext
    var codingPath: [any CodingKey] { [] }

    /// Wrappers inside wrappers deeper than this are taken for a type that encodes itself through
    /// its own single value, which no encoder could ever finish.
    static let maxDepth = 64

    mutating func encodeNil() throws { throw context.mismatch("\(expected) was expected, but the type encodes nil") }

    mutating func encode<T: Encodable>(_ value: T) throws {
        // A primitive encodes itself through a single-value container: it is no wrapper.
        if RecordDecoding.isPrimitive(T.self) { throw context.mismatch("\(expected) was expected, but the type encodes \(T.self)") }
        guard encoder.forwardingDepth < Self.maxDepth else {
            throw context.mismatch("\(T.self) is wrapped in single values \(Self.maxDepth) times over (a type that encodes itself?): \(expected) was expected")
        }
        encoder.forwardingDepth += 1
        defer { encoder.forwardingDepth -= 1 }
        // A wrapped set is as unordered as a set the field holds itself.
        if value is any UnorderedCollection, let array = encoder as? ArrayEncoder { array.isUnordered = true }
        try value.encode(to: encoder)
    }
}

/// An encoder a field keeps for its next collection (`RecordEncoding.encodeCollection`'s slot).
protocol ReusableEncoder: AnyObject {
    /// Ready for another collection of the same field, at `context`.
    func reuse(at context: EncodingContext)
}

/// An encoder whose single-value container forwards to itself (`ForwardingSingleValueEncoding`).
protocol ForwardingEncoder: AnyObject, Encoder {
    /// Single-value wrappers being encoded into this encoder, one inside the other.
    var forwardingDepth: Int { get set }
}
