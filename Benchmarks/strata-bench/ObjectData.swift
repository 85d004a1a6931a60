import Foundation
import Strata

// The objects suite's record and data set. Every engine stores and returns this same struct; object
// `i` is a function of (seed, i), so every engine sees the same objects, and the random choices of
// each workload come from their own seeded stream (`ItemData.choices`).

/// The benchmark's object: what every engine stores, and what every read decodes into.
struct Item: Model, Equatable {
    static let indexes: [PartialKeyPath<Item> & Sendable] = [\.category]

    /// The primary key: `i + 1` for object `i`.
    var id: Int64
    /// 16 to 32 ASCII letters and digits.
    var name: String
    /// 0 to 99; indexed.
    var category: Int64
    /// Uniform in [0, 1).
    var score: Double
    /// 64 random bytes.
    var blob: Data
}

/// The data set: object `i` (0-based) has id `i + 1`, a name, category, score and blob drawn from
/// (seed, i). Nothing is kept in memory, so each engine's peak RSS is its own.
struct ItemData: Sendable {
    static let categories = 100
    static let blobSize = 64
    static let minNameLength = 16
    static let maxNameLength = 32
    /// The unindexed filter's condition: `score > scoreThreshold`.
    static let scoreThreshold = 0.9

    private static let alphabet: [UInt8] = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".utf8)

    let seed: UInt64

    /// The primary key of object `i`.
    @inline(__always)
    func id(_ i: Int) -> Int64 { Int64(i) + 1 }

    /// Object `i`.
    func item(_ i: Int) -> Item {
        var rng = SplitMix64(seed: seed ^ 0x6F62_6A65_6374_7321 ^ (UInt64(truncatingIfNeeded: i) &* 0xD1B5_4A32_D192_ED03))
        let name = ItemData.name(&rng)
        let category = Int64(rng.next(below: ItemData.categories))
        let score = ItemData.unit(&rng)
        var blob = Data(count: ItemData.blobSize)
        blob.withUnsafeMutableBytes { raw in
            for word in 0..<(ItemData.blobSize / 8) {
                raw.storeBytes(of: rng.next(), toByteOffset: word * 8, as: UInt64.self)
            }
        }
        return Item(id: id(i), name: name, category: category, score: score, blob: blob)
    }

    /// The new name and score of the `k`-th update.
    func update(_ k: Int) -> (name: String, score: Double) {
        var rng = SplitMix64(seed: ~seed ^ 0x7570_6461_7465_7321 ^ (UInt64(truncatingIfNeeded: k) &* 0x8CB9_2BA7_2F3D_8DD7))
        let name = ItemData.name(&rng)
        return (name, ItemData.unit(&rng))
    }

    /// The random-choice stream of one workload (or one thread of it).
    func choices(_ stream: UInt64) -> SplitMix64 {
        SplitMix64(seed: seed &+ 0x2545_F491_4F6C_DD1D &* (stream &+ 1))
    }

    private static func name(_ rng: inout SplitMix64) -> String {
        let length = minNameLength + rng.next(below: maxNameLength - minNameLength + 1)
        return String(unsafeUninitializedCapacity: length) { buffer in
            for k in 0..<length { buffer[k] = alphabet[rng.next(below: alphabet.count)] }
            return length
        }
    }

    /// A uniform Double in [0, 1) with 53 random bits.
    private static func unit(_ rng: inout SplitMix64) -> Double {
        Double(rng.next() >> 11) * 0x1p-53
    }
}

/// Visits the first `count` elements of a seeded permutation of `0..<n` (an affine map
/// i → (a·i + b) mod n with gcd(a, n) = 1), so that deletes hit distinct objects spread over the
/// whole key range without holding a shuffled array in memory.
struct Permutation {
    let n: Int
    let a: UInt64
    let b: UInt64

    init(n: Int, rng: inout SplitMix64) {
        self.n = max(1, n)
        var a = UInt64(rng.next(below: self.n)) | 1
        func gcd(_ x: UInt64, _ y: UInt64) -> UInt64 { y == 0 ? x : gcd(y, x % y) }
        while gcd(a, UInt64(self.n)) != 1 { a = (a + 2) % UInt64(self.n) | 1 }
        self.a = a
        self.b = UInt64(rng.next(below: self.n))
    }

    @inline(__always)
    subscript(i: Int) -> Int {
        let product = a.multipliedFullWidth(by: UInt64(i))
        let (_, r) = UInt64(n).dividingFullWidth((product.high, product.low))
        return Int((r + b) % UInt64(n))
    }
}

/// A checksum of every field of a decoded object, so that reads cannot be optimised away and
/// engines can be compared: the same objects read in any order give the same sum of checksums.
@inline(__always)
func checksum(_ item: Item) -> UInt64 {
    var h = UInt64(bitPattern: item.id) &* 0x9E37_79B9_7F4A_7C15
    h = (h ^ UInt64(bitPattern: item.category)) &* 0xBF58_476D_1CE4_E5B9
    h = (h ^ item.score.bitPattern) &* 0x94D0_49BB_1331_11EB
    var name = item.name
    h ^= name.withUTF8 { checksum(UnsafeRawBufferPointer($0)) }
    h = (h ^ (h >> 29)) &* 0xBF58_476D_1CE4_E5B9
    h ^= item.blob.withUnsafeBytes { checksum($0) }
    return h ^ (h >> 32)
}

/// A sum of scores as an integer in thousandths, so that engines that add the same values in a
/// slightly different way (compensated summation) still agree.
func roundedSum(_ sum: Double) -> UInt64 {
    let scaled = (sum * 1000).rounded()
    return scaled.isFinite && scaled >= 0 && scaled < 1e18 ? UInt64(scaled) : UInt64.max
}

// MARK: The record as LMDB stores it

/// The LMDB engine's value layout, the way a careful app packs a fixed record:
/// category (Int64, little-endian) at 0, score (Double bits) at 8, blob (64 bytes) at 16, then the
/// name's UTF-8 bytes to the end. The key is the big-endian id.
enum PackedItem {
    static let categoryOffset = 0
    static let scoreOffset = 8
    static let blobOffset = 16
    static let nameOffset = 16 + ItemData.blobSize
    static let maxSize = nameOffset + 1024

    /// Packs `item` at `p` (at least `size(of:)` bytes); returns the length.
    static func pack(_ item: Item, into p: UnsafeMutableRawPointer) throws -> Int {
        guard item.blob.count == ItemData.blobSize else {
            throw BenchError("item \(item.id): blob of \(item.blob.count) bytes, expected \(ItemData.blobSize)")
        }
        p.storeBytes(of: UInt64(bitPattern: item.category).littleEndian, toByteOffset: categoryOffset, as: UInt64.self)
        p.storeBytes(of: item.score.bitPattern.littleEndian, toByteOffset: scoreOffset, as: UInt64.self)
        item.blob.withUnsafeBytes { blob in
            if let base = blob.baseAddress { (p + blobOffset).copyMemory(from: base, byteCount: ItemData.blobSize) }
        }
        var name = item.name
        return try name.withUTF8 { utf8 in
            guard nameOffset + utf8.count <= maxSize else { throw BenchError("item \(item.id): name too long") }
            if let base = utf8.baseAddress { (p + nameOffset).copyMemory(from: base, byteCount: utf8.count) }
            return nameOffset + utf8.count
        }
    }

    static func category(_ value: UnsafeRawBufferPointer) throws -> Int64 {
        guard value.count >= nameOffset else { throw BenchError("lmdb: a record of \(value.count) bytes is too short") }
        return Int64(bitPattern: UInt64(littleEndian: value.loadUnaligned(fromByteOffset: categoryOffset, as: UInt64.self)))
    }

    static func score(_ value: UnsafeRawBufferPointer) throws -> Double {
        guard value.count >= nameOffset else { throw BenchError("lmdb: a record of \(value.count) bytes is too short") }
        return Double(bitPattern: UInt64(littleEndian: value.loadUnaligned(fromByteOffset: scoreOffset, as: UInt64.self)))
    }

    /// Decodes the record of `id`.
    static func decode(id: Int64, _ value: UnsafeRawBufferPointer) throws -> Item {
        guard value.count >= nameOffset, let base = value.baseAddress else {
            throw BenchError("lmdb: the record of \(id) (\(value.count) bytes) is too short")
        }
        let category = Int64(bitPattern: UInt64(littleEndian: value.loadUnaligned(fromByteOffset: categoryOffset, as: UInt64.self)))
        let score = Double(bitPattern: UInt64(littleEndian: value.loadUnaligned(fromByteOffset: scoreOffset, as: UInt64.self)))
        let blob = Data(bytes: base + blobOffset, count: ItemData.blobSize)
        let name = String(decoding: UnsafeRawBufferPointer(rebasing: value[nameOffset...]), as: UTF8.self)
        return Item(id: id, name: name, category: category, score: score, blob: blob)
    }
}

/// 8-byte big-endian keys (ids, categories), so that byte order is numeric order for values ≥ 0.
@inline(__always)
func bigEndianKey(_ value: Int64) -> UInt64 { UInt64(bitPattern: value).bigEndian }

@inline(__always)
func int64(bigEndian bytes: UnsafeRawBufferPointer) throws -> Int64 {
    guard bytes.count == 8 else { throw BenchError("expected an 8-byte key, found \(bytes.count) bytes") }
    return Int64(bitPattern: UInt64(bigEndian: bytes.loadUnaligned(as: UInt64.self)))
}
