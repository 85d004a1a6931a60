import Foundation

// How each primitive value is laid out in a record (FORMAT.md §8.2): the one place that
// says it. Every writer of record bytes (the general encoder through `Any`, the per-field and
// per-element short paths, partial updates from JSON) appends its primitives through these.

enum PrimitiveLayout {
    /// 1 byte: 1 for true, 0 for false.
    @inline(__always) static func append(bool value: Bool, to out: inout [UInt8]) { out.append(value ? 1 : 0) }

    /// A signed integer of any width: a zigzag varint.
    @inline(__always) static func append(signed value: Int64, to out: inout [UInt8]) { appendVarint(zigzag(value), to: &out) }

    /// An unsigned integer of any width: a varint.
    @inline(__always) static func append(unsigned value: UInt64, to out: inout [UInt8]) { appendVarint(value, to: &out) }

    /// 8 bytes: the IEEE 754 bit pattern, little-endian (NaN payloads and -0 kept).
    @inline(__always) static func append(double value: Double, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.bitPattern.littleEndian) { out.append(contentsOf: $0) }
    }

    /// 4 bytes: the IEEE 754 bit pattern, little-endian.
    @inline(__always) static func append(float value: Float, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.bitPattern.littleEndian) { out.append(contentsOf: $0) }
    }

    /// Seconds since 2001-01-01 00:00 UTC (`timeIntervalSinceReferenceDate`) as a Double.
    @inline(__always) static func append(date value: Date, to out: inout [UInt8]) {
        append(double: value.timeIntervalSinceReferenceDate, to: &out)
    }

    /// The string's UTF-8 bytes, as they are (not normalized).
    @inline(__always) static func append(string value: String, to out: inout [UInt8]) {
        var value = value
        value.withUTF8 { out.append(contentsOf: $0) }
    }

    /// The bytes themselves.
    @inline(__always) static func append(data value: Data, to out: inout [UInt8]) {
        value.withUnsafeBytes { out.append(contentsOf: $0) }
    }

    /// 16 bytes, in the order `uuid` lists them.
    @inline(__always) static func append(uuid value: UUID, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.uuid) { out.append(contentsOf: $0) }
    }

    /// A Decimal's `description` in UTF-8 (NaN is refused by the callers: it does not read back).
    @inline(__always) static func append(decimal value: Decimal, to out: inout [UInt8]) { out.append(contentsOf: value.description.utf8) }

    /// A URL's `absoluteString` in UTF-8.
    @inline(__always) static func append(url value: URL, to out: inout [UInt8]) { out.append(contentsOf: value.absoluteString.utf8) }

    /// The Decimal a stored text holds, nil unless the whole text is a decimal number:
    /// `Decimal(string:)` alone reads a valid prefix ("12abc" is 12, "1.5.3" is 1.5).
    static func decimal(text: String) -> Decimal? {
        guard isDecimalText(text), let decimal = Decimal(string: text, locale: posix), !decimal.isNaN else { return nil }
        return decimal
    }

    private static let posix = Locale(identifier: "en_US_POSIX")

    /// Whether `s` is `-?digits(.digits)?([eE][+-]?digits)?` (what a Decimal's `description` writes).
    static func isDecimalText(_ s: String) -> Bool {
        var bytes = s.utf8[...]
        func digits() -> Bool {
            let count = bytes.prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }.count
            bytes = bytes.dropFirst(count)
            return count > 0
        }
        if bytes.first == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
        guard digits() else { return false }
        if bytes.first == UInt8(ascii: ".") {
            bytes = bytes.dropFirst()
            guard digits() else { return false }
        }
        if bytes.first == UInt8(ascii: "e") || bytes.first == UInt8(ascii: "E") {
            bytes = bytes.dropFirst()
            if bytes.first == UInt8(ascii: "+") || bytes.first == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
            guard digits() else { return false }
        }
        return bytes.isEmpty
    }
}
