import Foundation

/// A key encoding (or any byte string) as a dictionary key or set element.
///
/// `[UInt8]`'s own `Hashable` conformance is generic code of the standard library: it hashes and
/// compares element by element through witness tables, about ten instructions a byte, so sets and
/// dictionaries of long keys (a primary key of hundreds of bytes) cost more than the work around
/// them. This one hashes the bytes in one call and compares them with memcmp.
struct ByteKey: Hashable, Sendable {
    let bytes: [UInt8]

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = Array(bytes) }

    func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    static func == (a: ByteKey, b: ByteKey) -> Bool {
        a.bytes.count == b.bytes.count && KeyEncoding.compare(a.bytes, b.bytes) == 0
    }
}
