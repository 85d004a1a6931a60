import Foundation

// Swift's Codable machinery at its cheapest, for `strata-bench`'s codec floor workloads: a Decoder
// that reads no bytes (it hands out the values it is given, in the order they are asked for) and an
// Encoder that writes none (it folds each value into a sum). A model's synthesized `init(from:)` and
// `encode(to:)` still run through the standard library's keyed containers: the box, its generic
// dispatch per field, the metadata lookups, and the String and Data a decoded object holds. What a
// real codec (Strata's `RecordCoder`) costs above these is its own work.
//
// A module of its own on purpose: like Strata's coders, these are called from generic code the
// model's module cannot specialize, so the model's coding methods run as they do against Strata.

/// One value a `FloorDecoder` hands out. Strings and data are bytes the caller keeps alive: handing
/// a value out copies no reference (which a real decoder, reading the record in place, would not
/// pay either).
public enum FloorValue {
    case int(Int64)
    case double(Double)
    case string(UnsafeRawBufferPointer)
    case data(UnsafeRawBufferPointer)
}

/// Why a floor coder cannot go on: the model asked for something it was not given.
public struct FloorError: Error, CustomStringConvertible {
    public let description: String
}

/// A Decoder that hands out `values` in order, whatever the key.
///
/// ```swift
/// let decoder = FloorDecoder()
/// let item = try values.withUnsafeBufferPointer { try decoder.decode(Item.self, values: $0) }
/// ```
public final class FloorDecoder: Decoder {
    public var codingPath: [any CodingKey] { [] }
    public var userInfo: [CodingUserInfoKey: Any] { [:] }
    fileprivate var values = UnsafeBufferPointer<FloorValue>(start: nil, count: 0)
    fileprivate var next = 0
    /// The keyed container handed out last and its key type: handed out again, as Strata's
    /// decoder does (a new one costs a box and its metadata lookup).
    private var box: AnyObject?
    private var boxKey: ObjectIdentifier?

    public init() {}

    /// An object of type `M` made from `values`, which must stay valid while it runs.
    public func decode<M: Decodable>(_ type: M.Type, values: UnsafeBufferPointer<FloorValue>) throws -> M {
        self.values = values
        next = 0
        return try M(from: self)
    }

    fileprivate func take() throws -> FloorValue {
        guard next < values.count else { throw FloorError(description: "the model asked for more values than it was given") }
        defer { next += 1 }
        return values[next]
    }

    public func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        if boxKey == ObjectIdentifier(Key.self), let box { return unsafeBitCast(box, to: KeyedDecodingContainer<Key>.self) }
        let made = KeyedDecodingContainer(FloorKeyedDecoding<Key>(decoder: self))
        if MemoryLayout<KeyedDecodingContainer<Key>>.size == MemoryLayout<AnyObject>.size {
            box = unsafeBitCast(made, to: AnyObject.self)
            boxKey = ObjectIdentifier(Key.self)
        }
        return made
    }

    public func unkeyedContainer() throws -> any UnkeyedDecodingContainer { throw FloorError(description: "no unkeyed containers") }
    public func singleValueContainer() throws -> any SingleValueDecodingContainer { throw FloorError(description: "no single values") }
}

private struct FloorKeyedDecoding<Key: CodingKey>: KeyedDecodingContainerProtocol {
    // Unretained, as Strata's containers refer to their state (the decoder keeps the box), and
    // used without a retain per call.
    private let unmanaged: Unmanaged<FloorDecoder>
    init(decoder: FloorDecoder) { unmanaged = .passUnretained(decoder) }
    private func take() throws -> FloorValue { try unmanaged._withUnsafeGuaranteedRef { try $0.take() } }
    var codingPath: [any CodingKey] { [] }
    var allKeys: [Key] { [] }
    func contains(_ key: Key) -> Bool { unmanaged._withUnsafeGuaranteedRef { $0.next < $0.values.count } }
    func decodeNil(forKey key: Key) throws -> Bool { false }

    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 {
        guard case .int(let v) = try take() else { throw FloorError(description: "\(key.stringValue): not an integer") }
        return v
    }

    func decode(_ type: Double.Type, forKey key: Key) throws -> Double {
        guard case .double(let v) = try take() else { throw FloorError(description: "\(key.stringValue): not a Double") }
        return v
    }

    func decode(_ type: String.Type, forKey key: Key) throws -> String {
        guard case .string(let bytes) = try take() else { throw FloorError(description: "\(key.stringValue): not a String") }
        return String(decoding: bytes, as: UTF8.self)
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        guard T.self == Data.self, case .data(let bytes) = try take() else {
            throw FloorError(description: "\(key.stringValue): \(T.self) is not a floor value")
        }
        let data = bytes.baseAddress.map { Data(bytes: $0, count: bytes.count) } ?? Data()
        return unsafeBitCast(data, to: T.self)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        throw FloorError(description: "no nested containers")
    }
    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer { throw FloorError(description: "no nested containers") }
    func superDecoder() throws -> any Decoder { throw FloorError(description: "no super decoders") }
    func superDecoder(forKey key: Key) throws -> any Decoder { throw FloorError(description: "no super decoders") }
}

/// An Encoder that folds every value it is given into `sum` and writes nothing.
///
/// ```swift
/// let encoder = FloorEncoder()
/// try encoder.encode(item)
/// print(encoder.sum)
/// ```
public final class FloorEncoder: Encoder {
    public var codingPath: [any CodingKey] { [] }
    public var userInfo: [CodingUserInfoKey: Any] { [:] }
    /// Every integer, the bits of every Double, and the byte count of every String and Data.
    public fileprivate(set) var sum: UInt64 = 0
    private var box: AnyObject?
    private var boxKey: ObjectIdentifier?

    public init() {}

    /// Runs `value`'s `encode(to:)` against this encoder.
    public func encode<M: Encodable>(_ value: M) throws { try value.encode(to: self) }

    public func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if boxKey == ObjectIdentifier(Key.self), let box { return unsafeBitCast(box, to: KeyedEncodingContainer<Key>.self) }
        let made = KeyedEncodingContainer(FloorKeyedEncoding<Key>(encoder: self))
        if MemoryLayout<KeyedEncodingContainer<Key>>.size == MemoryLayout<AnyObject>.size {
            box = unsafeBitCast(made, to: AnyObject.self)
            boxKey = ObjectIdentifier(Key.self)
        }
        return made
    }

    public func unkeyedContainer() -> any UnkeyedEncodingContainer { FloorUnkeyedEncoding(encoder: self) }
    public func singleValueContainer() -> any SingleValueEncodingContainer { FloorUnkeyedEncoding(encoder: self) }

    /// Folds a value of a type the keyed container has no method of its own for: Data.
    fileprivate func fold<T: Encodable>(_ value: T) throws {
        guard T.self == Data.self else { throw FloorError(description: "\(T.self) is not a floor value") }
        sum &+= UInt64(unsafeBitCast(value, to: Data.self).count)
    }
}

private struct FloorKeyedEncoding<Key: CodingKey>: KeyedEncodingContainerProtocol {
    private let unmanaged: Unmanaged<FloorEncoder>
    var codingPath: [any CodingKey] { [] }
    init(encoder: FloorEncoder) { unmanaged = .passUnretained(encoder) }
    private func add(_ value: UInt64) { unmanaged._withUnsafeGuaranteedRef { $0.sum &+= value } }

    mutating func encodeNil(forKey key: Key) throws {}
    mutating func encode(_ value: Int64, forKey key: Key) throws { add(UInt64(bitPattern: value)) }
    mutating func encode(_ value: Double, forKey key: Key) throws { add(value.bitPattern) }
    mutating func encode(_ value: String, forKey key: Key) throws { add(UInt64(value.utf8.count)) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws { try unmanaged._withUnsafeGuaranteedRef { try $0.fold(value) } }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        KeyedEncodingContainer(FloorKeyedEncoding<NestedKey>(encoder: unmanaged.takeUnretainedValue()))
    }
    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer { FloorUnkeyedEncoding(encoder: unmanaged.takeUnretainedValue()) }
    mutating func superEncoder() -> any Encoder { unmanaged.takeUnretainedValue() }
    mutating func superEncoder(forKey key: Key) -> any Encoder { unmanaged.takeUnretainedValue() }
}

/// Elements and single values: refused (a floor model has neither).
private struct FloorUnkeyedEncoding: UnkeyedEncodingContainer, SingleValueEncodingContainer {
    let encoder: FloorEncoder
    var codingPath: [any CodingKey] { [] }
    private(set) var count = 0

    init(encoder: FloorEncoder) { self.encoder = encoder }

    mutating func encodeNil() throws { throw FloorError(description: "no elements or single values") }
    mutating func encode<T: Encodable>(_ value: T) throws { throw FloorError(description: "no elements or single values") }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        count += 1
        return KeyedEncodingContainer(FloorKeyedEncoding<NestedKey>(encoder: encoder))
    }
    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        count += 1
        return FloorUnkeyedEncoding(encoder: encoder)
    }
    mutating func superEncoder() -> any Encoder { encoder }
}
