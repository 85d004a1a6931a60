import Foundation

// Order-preserving encodings of primary keys and index values: comparing the bytes with memcmp
// gives the same order as comparing the values. Composite index keys concatenate them, so
// variable-length values are escaped and terminated (0x00 → 0x00 0xFF, end → 0x00 0x00).
//
//   Bool          1 byte
//   Int*          8 bytes big-endian, sign bit flipped
//   UInt*         8 bytes big-endian
//   Double/Float  8 bytes big-endian: sign bit flipped for positives, all bits flipped for negatives
//   Date          as its Double timeIntervalSinceReferenceDate
//   String, Data  escaped bytes, terminated
//   UUID          16 bytes
//   Optional      0x00 for nil, 0x01 then the value (nil sorts first)

enum KeyEncoding {
    /// The order of two encodings (memcmp, then length): <0, 0 or >0. The generic lexicographic
    /// comparison walks iterators byte by byte. Most keys are decided by their first eight bytes
    /// (an integer key is eight bytes), which one big-endian load of each compares without a call:
    /// a call to memcmp per posting was 9 % of a two-word search.
    @inline(__always)
    static func compare(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
        let n = min(a.count, b.count)
        if n > 0, let x = a.baseAddress, let y = b.baseAddress {
            if n >= 8 {
                let p = UInt64(bigEndian: x.loadUnaligned(as: UInt64.self)), q = UInt64(bigEndian: y.loadUnaligned(as: UInt64.self))
                if p != q { return p < q ? -1 : 1 }
                if n > 8 {
                    let c = memcmp(x + 8, y + 8, n - 8)
                    if c != 0 { return Int(c) }
                }
            } else {
                let c = memcmp(x, y, n)
                if c != 0 { return Int(c) }
            }
        }
        return a.count - b.count
    }

    static func appendInt(_ v: Int64, to out: inout [UInt8]) {
        appendUInt(UInt64(bitPattern: v) ^ (1 << 63), to: &out)
    }

    static func appendUInt(_ v: UInt64, to out: inout [UInt8]) {
        // Big-endian, in one append (eight single appends check capacity and uniqueness eight times).
        withUnsafeBytes(of: v.bigEndian) { out.append(contentsOf: $0) }
    }

    static func appendDouble(_ d: Double, to out: inout [UInt8]) {
        let value = d.isNaN ? Double.nan : (d == 0 ? 0.0 : d)  // one NaN, one zero
        let bits = value.bitPattern
        appendUInt(bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63), to: &out)
    }

    static func appendBytes<C: Collection>(_ bytes: C, to out: inout [UInt8]) where C.Element == UInt8 {
        for b in bytes {
            out.append(b)
            if b == 0 { out.append(0xFF) }
        }
        out.append(0)
        out.append(0)
    }

    /// `appendBytes` of bytes in memory: bytes without a 0x00 (every full-text word, most
    /// strings) are copied in one piece rather than one append per byte.
    static func appendBytes(_ bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        guard let start = bytes.baseAddress, memchr(start, 0, bytes.count) == nil else {
            appendBytes(bytes.lazy, to: &out)
            return
        }
        out.append(contentsOf: bytes)
        out.append(0)
        out.append(0)
    }

    /// Swift compares strings by canonical equivalence; keys compare bytes. NFC makes the two agree
    /// (equal strings get equal bytes, and byte order is Unicode scalar order). The standard
    /// library's own NFC, the one `==` compares by: Foundation's on Linux (CoreFoundation's tables)
    /// predates Unicode 16, and left marks added since (U+0897 ARABIC PEPET) unordered, so two
    /// spellings Swift calls equal got two keys and an indexed `==` found one of them.
    static func normalized(_ s: String) -> String {
        if s.utf8.allSatisfy({ $0 < 0x80 }) { return s }
        return String(decoding: s._nfcCodeUnits, as: UTF8.self)
    }

    /// Encodes a key value; nil when the value is not a type keys support.
    static func encode(_ value: Any) -> [UInt8]? {
        var out: [UInt8] = []
        return append(value, to: &out) ? out : nil
    }

    /// Whether `type` is one of the types `append` recognises first (none of them optional).
    static func isCommonPlainType(_ type: Any.Type) -> Bool {
        type == Int64.self || type == Int.self || type == String.self || type == Double.self
    }

    static func append(_ value: Any, to out: inout [UInt8]) -> Bool {
        // The most common types first, told by the value's dynamic type: comparing metadata is
        // cheap, where the protocol casts below each look a conformance up.
        let dynamicType = type(of: value)
        if dynamicType == Int64.self, let v = value as? Int64 { appendInt(v, to: &out); return true }
        if dynamicType == Int.self, let v = value as? Int { appendInt(Int64(v), to: &out); return true }
        if dynamicType == String.self, let v = value as? String { appendBytes(normalized(v).utf8, to: &out); return true }
        if dynamicType == Double.self, let v = value as? Double { appendDouble(v, to: &out); return true }
        // Then: a cast from Any would silently unwrap an optional and lose its tag.
        if let v = value as? any OptionalValue {
            guard let wrapped = v.wrappedAny else { out.append(0); return true }
            out.append(1)
            return append(wrapped, to: &out)
        }
        switch value {
        case let v as Bool: out.append(v ? 1 : 0)
        case let v as Int: appendInt(Int64(v), to: &out)
        case let v as Int8: appendInt(Int64(v), to: &out)
        case let v as Int16: appendInt(Int64(v), to: &out)
        case let v as Int32: appendInt(Int64(v), to: &out)
        case let v as Int64: appendInt(v, to: &out)
        case let v as UInt: appendUInt(UInt64(v), to: &out)
        case let v as UInt8: appendUInt(UInt64(v), to: &out)
        case let v as UInt16: appendUInt(UInt64(v), to: &out)
        case let v as UInt32: appendUInt(UInt64(v), to: &out)
        case let v as UInt64: appendUInt(v, to: &out)
        case let v as Double: appendDouble(v, to: &out)
        case let v as Float: appendDouble(Double(v), to: &out)
        case let v as String: appendBytes(normalized(v).utf8, to: &out)
        case let v as Data: appendBytes(v, to: &out)
        case let v as Date: appendDouble(v.timeIntervalSinceReferenceDate, to: &out)
        case let v as UUID: withUnsafeBytes(of: v.uuid) { out.append(contentsOf: $0) }
        case let v as URL: appendBytes(v.absoluteString.utf8, to: &out)
        case let v as Decimal: appendDouble(NSDecimalNumber(decimal: v).doubleValue, to: &out)
        case let v as any RawRepresentable:
            return append(v.rawValue, to: &out)
        case let v as any ReferenceValue:
            return append(v.keyAny, to: &out)
        default:
            return false
        }
        return true
    }

    /// Encodes a value whose stored type is known, trying the one or two casts that type allows
    /// before falling back to the general cascade.
    static func append(_ value: Any, as type: FieldType, to out: inout [UInt8]) -> Bool {
        switch type {
        case .int(_, true):
            if let v = value as? Int64 { appendInt(v, to: &out); return true }
            if let v = value as? Int { appendInt(Int64(v), to: &out); return true }
        case .int(_, false):
            if let v = value as? UInt64 { appendUInt(v, to: &out); return true }
        case .string:
            if let v = value as? String { appendBytes(normalized(v).utf8, to: &out); return true }
        case .double:
            if let v = value as? Double { appendDouble(v, to: &out); return true }
        default:
            break
        }
        return append(value, to: &out)
    }

    /// Decodes a primary key of type `T` from its encoding.
    static func decode<T>(_ type: T.Type, from bytes: UnsafeRawBufferPointer) -> T? {
        var reader = KeyReader(bytes: bytes)
        guard let value = reader.read(T.self), reader.offset == bytes.count else { return nil }
        return value
    }
}

struct KeyReader {
    let bytes: UnsafeRawBufferPointer
    var offset = 0

    mutating func uint() -> UInt64? {
        guard bytes.count - offset >= 8 else { return nil }
        var v: UInt64 = 0
        for i in 0..<8 { v = v << 8 | UInt64(bytes[offset + i]) }
        offset += 8
        return v
    }

    mutating func int() -> Int64? { uint().map { Int64(bitPattern: $0 ^ (1 << 63)) } }

    mutating func byte() -> UInt8? {
        guard offset < bytes.count else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func double() -> Double? {
        guard let bits = uint() else { return nil }
        return Double(bitPattern: bits & (1 << 63) != 0 ? bits & ~(1 << 63) : ~bits)
    }

    /// Moves past an escaped, terminated string (as `escaped` reads it) without copying it;
    /// false when there is none.
    mutating func skipEscaped() -> Bool {
        while offset < bytes.count {
            let b = bytes[offset]
            offset += 1
            if b != 0 { continue }
            guard offset < bytes.count else { return false }
            let next = bytes[offset]
            offset += 1
            if next == 0 { return true }
            if next != 0xFF { return false }
        }
        return false
    }

    mutating func escaped() -> [UInt8]? {
        var out: [UInt8] = []
        while offset < bytes.count {
            let b = bytes[offset]
            offset += 1
            if b != 0 { out.append(b); continue }
            guard offset < bytes.count else { return nil }
            let next = bytes[offset]
            offset += 1
            if next == 0 { return out }
            if next == 0xFF { out.append(0) } else { return nil }
        }
        return nil
    }

    mutating func read<T>(_ type: T.Type) -> T? {
        func cast<V>(_ v: V?) -> T? { v.flatMap { $0 as? T } }
        switch T.self {
        case is Bool.Type:
            guard offset < bytes.count else { return nil }
            defer { offset += 1 }
            return cast(bytes[offset] != 0)
        case is Int.Type: return cast(int().flatMap { Int(exactly: $0) })
        case is Int8.Type: return cast(int().flatMap { Int8(exactly: $0) })
        case is Int16.Type: return cast(int().flatMap { Int16(exactly: $0) })
        case is Int32.Type: return cast(int().flatMap { Int32(exactly: $0) })
        case is Int64.Type: return cast(int())
        case is UInt.Type: return cast(uint().flatMap { UInt(exactly: $0) })
        case is UInt8.Type: return cast(uint().flatMap { UInt8(exactly: $0) })
        case is UInt16.Type: return cast(uint().flatMap { UInt16(exactly: $0) })
        case is UInt32.Type: return cast(uint().flatMap { UInt32(exactly: $0) })
        case is UInt64.Type: return cast(uint())
        case is Double.Type: return cast(double())
        case is Float.Type: return cast(double().map { Float($0) })
        case is String.Type: return cast(escaped().map { String(decoding: $0, as: UTF8.self) })
        case is Data.Type: return cast(escaped().map { Data($0) })
        case is Date.Type: return cast(double().map { Date(timeIntervalSinceReferenceDate: $0) })
        case is UUID.Type:
            guard bytes.count - offset >= 16 else { return nil }
            var uuid = UUID().uuid
            withUnsafeMutableBytes(of: &uuid) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + 16)])) }
            offset += 16
            return cast(UUID(uuid: uuid))
        default:
            if let optional = T.self as? any OptionalValue.Type {
                guard offset < bytes.count else { return nil }
                let tag = bytes[offset]
                offset += 1
                if tag == 0 { return optional.none(as: T.self) }
                return readSome(optional) as? T
            }
            if let raw = T.self as? any RawRepresentable.Type { return readRaw(raw) as? T }
            if let reference = T.self as? any ReferenceValue.Type { return readReference(reference) as? T }
            return nil
        }
    }

    private mutating func readSome<O: OptionalValue>(_ type: O.Type) -> Any? {
        read(O.Wrapped.self).map { O.wrapping($0) }
    }

    private mutating func readRaw<R: RawRepresentable>(_ type: R.Type) -> Any? {
        read(R.RawValue.self).flatMap { R(rawValue: $0) }
    }

    private mutating func readReference<R: ReferenceValue>(_ type: R.Type) -> Any? {
        read(R.Key.self).map { R(key: $0) }
    }
}

/// Optionals seen through `Any`.
protocol OptionalValue {
    associatedtype Wrapped
    var wrappedAny: Any? { get }
    /// This type's nil as a `T`, when `T` is this type. (Not `Optional<Wrapped>.none as Any as? T`:
    /// casting an `Any` that holds `Int??.none` to `Int??` gives `.some(nil)`, so a nil double
    /// optional would read back as a present inner nil.)
    static func none<T>(as type: T.Type) -> T?
    static func wrapping(_ value: Wrapped) -> Self
    /// Whether the wrapped type is an optional too (`Int??`).
    static var wrapsOptional: Bool { get }
    /// The wrapped type, for code that looks through optional metatypes (`Int??` → `Int?`).
    static var wrappedType: Any.Type { get }
}

extension Optional: OptionalValue {
    var wrappedAny: Any? { self.map { $0 as Any } }
    static var wrapsOptional: Bool { Wrapped.self is any OptionalValue.Type }
    static var wrappedType: Any.Type { Wrapped.self }
    static func none<T>(as type: T.Type) -> T? {
        guard T.self == Self.self else { return nil }
        // (T is exactly this type, so the bit cast is an identity.)
        return unsafeBitCast(Self.none, to: T.self)
    }
    static func wrapping(_ value: Wrapped) -> Wrapped? { .some(value) }
}

/// The nil of `T` when `T` is an optional type; nil when it is not.
func nilValue<T>(of type: T.Type) -> T? {
    (T.self as? any OptionalValue.Type)?.none(as: T.self)
}

/// The nil of `T` when `T` is an optional type; `error` when it is not. Not inlined, and returning
/// `T` rather than `T?`: a generic caller compiled unspecialized looks up the metadata of every
/// type its body names when it is entered, so naming `T?` cost a lookup per call, nil or not.
@inline(never) func nilValue<T>(of type: T.Type, orThrow error: @autoclosure () -> StrataError) throws -> T {
    if let none = nilValue(of: T.self) { return none }
    throw error()
}

/// `Ref` seen through `Any`.
protocol ReferenceValue {
    associatedtype Key
    var keyAny: Any { get }
    init(key: Key)
}

extension Ref: ReferenceValue {
    var keyAny: Any { id }
    init(key: Target.ID) { self.init(key) }
}
