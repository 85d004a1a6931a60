// XXH64 (Yann Collet's xxHash, 64-bit variant), implemented from its public specification.
// Every page and both meta pages carry this hash of their bytes; see FORMAT.md, "Checksums".

@usableFromInline let xxPrime1: UInt64 = 0x9E37_79B1_85EB_CA87
@usableFromInline let xxPrime2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
@usableFromInline let xxPrime3: UInt64 = 0x1656_67B1_9E37_79F9
@usableFromInline let xxPrime4: UInt64 = 0x85EB_CA77_C2B2_AE63
@usableFromInline let xxPrime5: UInt64 = 0x27D4_EB2F_1656_67C5

@inline(__always)
private func xxRound(_ acc: UInt64, _ input: UInt64) -> UInt64 {
    var acc = acc &+ input &* xxPrime2
    acc = (acc << 31) | (acc >> 33)
    return acc &* xxPrime1
}

@inline(__always)
private func xxMerge(_ acc: UInt64, _ val: UInt64) -> UInt64 {
    let acc = acc ^ xxRound(0, val)
    return acc &* xxPrime1 &+ xxPrime4
}

/// XXH64 of `bytes` with `seed`.
func xxh64(_ bytes: UnsafeRawBufferPointer, seed: UInt64 = 0) -> UInt64 {
    let count = bytes.count
    guard let base = bytes.baseAddress else { return xxh64Tail(seed &+ xxPrime5, nil, 0, 0) }
    var offset = 0
    var h: UInt64
    if count >= 32 {
        var v1 = seed &+ xxPrime1 &+ xxPrime2
        var v2 = seed &+ xxPrime2
        var v3 = seed
        var v4 = seed &- xxPrime1
        let limit = count - 32
        while offset <= limit {
            v1 = xxRound(v1, UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
            v2 = xxRound(v2, UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)))
            v3 = xxRound(v3, UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset + 16, as: UInt64.self)))
            v4 = xxRound(v4, UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset + 24, as: UInt64.self)))
            offset += 32
        }
        h = ((v1 << 1) | (v1 >> 63)) &+ ((v2 << 7) | (v2 >> 57)) &+ ((v3 << 12) | (v3 >> 52)) &+ ((v4 << 18) | (v4 >> 46))
        h = xxMerge(h, v1)
        h = xxMerge(h, v2)
        h = xxMerge(h, v3)
        h = xxMerge(h, v4)
    } else {
        h = seed &+ xxPrime5
    }
    h = h &+ UInt64(count)
    return xxh64Tail(h, base, offset, count)
}

@inline(__always)
private func xxh64Tail(_ hash: UInt64, _ base: UnsafeRawPointer?, _ start: Int, _ count: Int) -> UInt64 {
    var h = hash
    var offset = start
    if let base {
        while offset + 8 <= count {
            let k = xxRound(0, UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
            h ^= k
            h = ((h << 27) | (h >> 37)) &* xxPrime1 &+ xxPrime4
            offset += 8
        }
        if offset + 4 <= count {
            h ^= UInt64(UInt32(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt32.self))) &* xxPrime1
            h = ((h << 23) | (h >> 41)) &* xxPrime2 &+ xxPrime3
            offset += 4
        }
        while offset < count {
            h ^= UInt64(base.load(fromByteOffset: offset, as: UInt8.self)) &* xxPrime5
            h = ((h << 11) | (h >> 53)) &* xxPrime1
            offset += 1
        }
    }
    h ^= h >> 33
    h = h &* xxPrime2
    h ^= h >> 29
    h = h &* xxPrime3
    h ^= h >> 32
    return h
}
