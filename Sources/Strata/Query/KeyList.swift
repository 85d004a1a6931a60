/// Primary keys in result order, in one buffer: what lazy results hold instead of objects (a
/// million keys are two arrays, not a million). Keys are the stored key encodings.
struct KeyList: Sendable {
    private(set) var bytes: [UInt8] = []
    /// End of each key in `bytes`; key i starts where key i - 1 ends.
    private(set) var ends: [Int] = []

    var count: Int { ends.count }

    init() {}

    /// An empty list with room for a window of `keys` keys (of a typical key size), so that
    /// filling a page of results does not regrow its arrays at every doubling.
    init(reservingKeys keys: Int) {
        let keys = Swift.max(0, Swift.min(keys, 4_096))
        bytes.reserveCapacity(16 * keys)
        ends.reserveCapacity(keys)
    }

    mutating func append(_ key: UnsafeRawBufferPointer) {
        bytes.append(contentsOf: key)
        ends.append(bytes.count)
    }

    mutating func append(_ key: [UInt8]) {
        bytes.append(contentsOf: key)
        ends.append(bytes.count)
    }

    private func range(_ i: Int) -> Range<Int> { (i == 0 ? 0 : ends[i - 1])..<ends[i] }

    /// Key `i`, valid during the call.
    func withKey<R>(_ i: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let r = range(i)
        return try bytes.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[r])) }
    }

    /// Key `i` as an array.
    subscript(i: Int) -> [UInt8] { Array(bytes[range(i)]) }

    /// Every key, as arrays.
    var arrays: [[UInt8]] { (0..<count).map { self[$0] } }

    /// The keys reordered by `sortKeys` (one per key), ties in key order.
    mutating func sort(by sortKeys: [[UInt8]]) {
        var order = Array(0..<count)
        let keys = self
        order.sort { a, b in
            let c = KeyEncoding.compare(sortKeys[a], sortKeys[b])
            if c != 0 { return c < 0 }
            return keys.withKey(a) { ka in keys.withKey(b) { kb in KeyEncoding.compare(ka, kb) < 0 } }
        }
        var sorted = KeyList()
        sorted.bytes.reserveCapacity(bytes.count)
        sorted.ends.reserveCapacity(count)
        for i in order { sorted.bytes.append(contentsOf: bytes[range(i)]); sorted.ends.append(sorted.bytes.count) }
        self = sorted
    }

    /// The keys from `offset`, at most `limit` of them.
    func window(offset: Int, limit: Int?) -> KeyList {
        let start = min(offset, count)
        let end = limit.map { min(count, start + $0) } ?? count
        if start == 0 && end == count { return self }
        var out = KeyList()
        for i in start..<end { out.bytes.append(contentsOf: bytes[range(i)]); out.ends.append(out.bytes.count) }
        return out
    }
}
