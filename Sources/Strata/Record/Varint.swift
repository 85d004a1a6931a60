// LEB128 varints: 7 bits per byte, low bits first, high bit set on every byte but the last.

@inline(__always)
func appendVarint(_ value: UInt64, to bytes: inout [UInt8]) {
    var v = value
    while v >= 0x80 {
        bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
        v >>= 7
    }
    bytes.append(UInt8(v))
}

/// Writes `value` as `appendVarint` does at `p`, which has room for it (`varintSize`), and moves
/// `p` past it: for buffers sized once and filled through a pointer.
@inline(__always)
func storeVarint(_ value: UInt64, at p: inout UnsafeMutablePointer<UInt8>) {
    var v = value
    while v >= 0x80 {
        p.pointee = UInt8(truncatingIfNeeded: v) | 0x80
        p += 1
        v >>= 7
    }
    p.pointee = UInt8(v)
    p += 1
}

@inline(__always)
func zigzag(_ value: Int64) -> UInt64 { UInt64(bitPattern: (value << 1) ^ (value >> 63)) }

@inline(__always)
func unzigzag(_ value: UInt64) -> Int64 { Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1) }

/// Reads bytes of a record with bounds checks: every read past the end throws, so a corrupt record
/// is an error, never a crash.
struct ByteReader {
    let bytes: UnsafeRawBufferPointer
    var offset: Int

    init(_ bytes: UnsafeRawBufferPointer, offset: Int = 0) {
        self.bytes = bytes
        self.offset = offset
    }

    var isAtEnd: Bool { offset >= bytes.count }

    @inline(__always)
    mutating func varint() throws -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard offset < bytes.count else { throw StrataError.corruptRecord("varint runs past the end of the record") }
            let byte = bytes[offset]
            offset += 1
            if shift == 63 && byte > 1 { throw StrataError.corruptRecord("varint overflows 64 bits") }
            result |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return result }
            shift += 7
            if shift > 63 { throw StrataError.corruptRecord("varint longer than 10 bytes") }
        }
    }

    @inline(__always)
    mutating func length() throws -> Int {
        let n = try varint()
        guard n <= UInt64(bytes.count - offset) else { throw StrataError.corruptRecord("length \(n) runs past the end of the record") }
        return Int(n)
    }

    @inline(__always)
    mutating func take(_ count: Int) throws -> UnsafeRawBufferPointer {
        guard count >= 0, count <= bytes.count - offset else { throw StrataError.corruptRecord("field of \(count) bytes runs past the end of the record") }
        let slice = UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)])
        offset += count
        return slice
    }
}

/// The little-endian unsigned value of `bytes`, which must be exactly `count` bytes long (the fixed
/// width of a Bool, Float, Double or Date in a record); `place` names the field in the error.
func fixedWidthValue(_ bytes: UnsafeRawBufferPointer, count: Int, place: @autoclosure () -> String) throws -> UInt64 {
    guard bytes.count == count else { throw StrataError.corruptRecord("\(place()): expected \(count) bytes, found \(bytes.count)") }
    var v: UInt64 = 0
    for i in (0..<count).reversed() { v = v << 8 | UInt64(bytes[i]) }
    return v
}

/// The integer a field of `bits` bits stores in `bytes` (a zigzag varint when `signed`, its bit
/// pattern in the `UInt64`), checked as a typed read checks it: the varint is the whole value, and
/// it fits the field's width. (No `StoredValue`: index keys are made from records on every write.)
func storedInteger(_ bytes: UnsafeRawBufferPointer, bits: Int, signed: Bool) throws -> UInt64 {
    var reader = ByteReader(bytes)
    let raw = try reader.varint()
    guard reader.isAtEnd else { throw StrataError.corruptRecord("integer has trailing bytes") }
    if signed {
        let value = unzigzag(raw)
        try checkWidth(value, bits: bits)
        return UInt64(bitPattern: value)
    }
    try checkWidth(raw, bits: bits)
    return raw
}

/// Throws unless `value` fits an integer of `bits` bits (a record or key an app's typed read
/// would refuse).
func checkWidth(_ value: Int64, bits: Int, place: String = "stored value") throws {
    guard bits < 64, value < -(Int64(1) << (bits - 1)) || value >= Int64(1) << (bits - 1) else { return }
    throw StrataError.corruptRecord("\(place) \(value) does not fit Int\(bits)")
}

/// `checkWidth` for an unsigned integer.
func checkWidth(_ value: UInt64, bits: Int, place: String = "stored value") throws {
    guard bits < 64, value >= UInt64(1) << bits else { return }
    throw StrataError.corruptRecord("\(place) \(value) does not fit UInt\(bits)")
}
