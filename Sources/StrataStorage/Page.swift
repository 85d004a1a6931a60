// The page header shared by every page, and the page types. Layout in FORMAT.md, "Pages".

typealias PageNo = UInt64

enum PageType: UInt8 {
    case meta = 1
    case branch = 2
    case leaf = 3
    case overflow = 4
    case commitRecord = 5
    /// A branch whose entries carry their subtree's entry count (format 3); `branch` pages are
    /// format 2's, read but never written.
    case countedBranch = 6
}

/// Byte offsets of the 32-byte page header.
enum PageHeader {
    static let checksum = 0  // u64: XXH64 of bytes 8..<(pages × pageSize)
    static let pageNumber = 8  // u64: where the page belongs; catches misdirected writes
    static let txnid = 16  // u64: the commit that wrote the page
    static let type = 24  // u8: PageType
    static let flags = 25  // u8: reserved, 0
    static let count = 26  // u16: slots in a branch or leaf
    static let upper = 28  // u16: start of the entry area (branch, leaf)
    static let garbage = 30  // u16: bytes of dead entries inside the entry area (branch, leaf)
    static let runPages = 28  // u32: pages in the run (overflow, commit record)
    static let size = 32
}

/// Little-endian field access on raw page bytes. The engine runs on little-endian hosts only
/// (x86_64, arm64), which `Store.init` checks; the explicit conversions keep the intent visible.
extension UnsafeRawPointer {
    @inline(__always) func u8(_ offset: Int) -> UInt8 { load(fromByteOffset: offset, as: UInt8.self) }
    @inline(__always) func u16(_ offset: Int) -> UInt16 { UInt16(littleEndian: loadUnaligned(fromByteOffset: offset, as: UInt16.self)) }
    @inline(__always) func u32(_ offset: Int) -> UInt32 { UInt32(littleEndian: loadUnaligned(fromByteOffset: offset, as: UInt32.self)) }
    @inline(__always) func u64(_ offset: Int) -> UInt64 { UInt64(littleEndian: loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
}

extension UnsafeMutableRawPointer {
    @inline(__always) func setU8(_ offset: Int, _ value: UInt8) { storeBytes(of: value, toByteOffset: offset, as: UInt8.self) }
    @inline(__always) func setU16(_ offset: Int, _ value: UInt16) { storeBytes(of: value.littleEndian, toByteOffset: offset, as: UInt16.self) }
    @inline(__always) func setU32(_ offset: Int, _ value: UInt32) { storeBytes(of: value.littleEndian, toByteOffset: offset, as: UInt32.self) }
    @inline(__always) func setU64(_ offset: Int, _ value: UInt64) { storeBytes(of: value.littleEndian, toByteOffset: offset, as: UInt64.self) }
}

/// Big-endian u64, used where keys must sort numerically (free-list keys).
@inline(__always) func appendBigEndian(_ value: UInt64, to bytes: inout [UInt8]) {
    for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
}

@inline(__always) func readBigEndianU64(_ p: UnsafeRawPointer) -> UInt64 {
    UInt64(bigEndian: p.loadUnaligned(as: UInt64.self))
}

/// Computes the checksum of a page or run: everything after the checksum field.
@inline(__always) func pageChecksum(_ page: UnsafeRawPointer, byteCount: Int) -> UInt64 {
    xxh64(UnsafeRawBufferPointer(start: page + 8, count: byteCount - 8))
}

/// Lexicographic byte order, shorter first on a common prefix (memcmp order). Only the sign of
/// the result means anything.
@inline(__always) func compareBytes(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
    let n = min(a.count, b.count)
    if n >= 8 {
        // Most comparisons in a search are decided by the first eight bytes (integer keys, and
        // strings that differ early): one big-endian load of each decides them without a call.
        // A call to memcmp was the largest single cost of reading 50 objects through an index.
        let x = readBigEndianU64(a.baseAddress!), y = readBigEndianU64(b.baseAddress!)
        if x != y { return x < y ? -1 : 1 }
        if n > 8 {
            let c = memcmpRaw(a.baseAddress! + 8, b.baseAddress! + 8, n - 8)
            if c != 0 { return Int(c) }
        }
    } else if n > 0 {
        let c = memcmpRaw(a.baseAddress!, b.baseAddress!, n)
        if c != 0 { return Int(c) }
    }
    return a.count - b.count
}
