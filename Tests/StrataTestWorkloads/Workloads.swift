// The workloads the helper process (StrataTestHelper) writes and the storage tests check: one
// definition, so that what a killed or concurrent process wrote and what a test expects cannot
// drift apart.

import StrataStorage

extension StoreOptions {
    /// Options for a store whose every commit a test counts (or a helper it runs writes to): no
    /// idle-time compaction, whose background commits would not be the workload's.
    ///
    /// ```swift
    /// let store = try Store(path: path, options: .countingEveryCommit())
    /// ```
    public static func countingEveryCommit(durability: Durability = .noSync) -> StoreOptions {
        var options = StoreOptions(durability: durability)
        options.compaction.idleDelay = nil
        return options
    }
}

/// The crash workload of `StrataTestHelper commit-loop`. Transaction N puts 4 keys "d/<N>/<j>" in
/// tree "data" (an overflow value every few commits) and deletes those of transaction N - 40,
/// inserts key N in tree "keep", and sets "last" in tree "meta".
public enum CrashWorkload {
    /// Keys per transaction in tree "data".
    public static let keysPerTransaction = 4
    /// Transaction N deletes the keys of transaction N - window.
    public static let window: UInt64 = 40

    public static func dataKey(_ n: UInt64, _ j: Int) -> [UInt8] {
        let digits = String(n)
        return Array(("d/" + String(repeating: "0", count: max(0, 10 - digits.count)) + digits + "/\(j)").utf8)
    }

    public static func keepKey(_ n: UInt64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: n >> (56 - 8 * UInt64($0))) }
    }

    static func mix(_ x: UInt64) -> UInt64 {
        var z = x &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Length of value j of transaction n: small, or every few commits a multi-page overflow value.
    static func length(_ n: UInt64, _ j: Int, big: Bool) -> Int {
        let h = mix(n &* 8 &+ UInt64(j))
        if j == 0 && big && n % 7 == 0 { return 100_000 + Int(h % 300_000) }
        if j == 0 && n % 3 == 0 { return 4_500 + Int(h % 30_000) }
        if j == 1 && n % 5 == 0 { return 2_000 + Int(h % 6_000) }
        return 16 + Int(h % 300)
    }

    /// Value j of transaction n (j == 99 for the "keep" tree), written by the run tagged `tag`:
    /// n and the tag in the first 16 bytes (so a verifier can tell two versions of one transaction
    /// apart), then bytes derived from n, j and the position, to the length `length` gives.
    public static func value(_ n: UInt64, _ j: Int, tag: UInt64, big: Bool) -> [UInt8] {
        let count = j == 99 ? 16 + Int(n % 50) : length(n, j, big: big)
        let seed = mix(n ^ (UInt64(j) << 40))
        var bytes = (0..<count).map { i in UInt8(truncatingIfNeeded: (seed >> UInt64((i & 7) * 8)) &+ UInt64(i) &* 131) }
        bytes.replaceSubrange(0..<16, with: self.bytes(n) + self.bytes(tag))
        return bytes
    }

    /// The little-endian u64 at `offset` of `bytes`, or nil when they are too short.
    public static func u64<C: Collection<UInt8>>(_ bytes: C?, at offset: Int = 0) -> UInt64? where C.Index == Int {
        guard let bytes, bytes.count >= offset + 8 else { return nil }
        let start = bytes.startIndex + offset
        return (0..<8).reduce(0) { $0 | UInt64(bytes[start + $1]) << (8 * UInt64($1)) }
    }

    public static func bytes(_ x: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: x >> (8 * UInt64($0))) } }
}

/// The shared-counter workload of `StrataTestHelper writer`: one commit increments "count" in tree
/// "c", rewrites "hot" in tree "c" with a value derived from the new count (an overflow run every
/// few commits, so runs are freed and reused), and inserts `key` in tree "w" with a value starting
/// with the new count.
public enum CounterWorkload {
    public struct Violation: Error, CustomStringConvertible {
        public let description: String
    }

    static func hotValue(_ total: UInt64) -> [UInt8] {
        let length = total % 4 == 0 ? 5_000 + Int(total * 7_919 % 20_000) : 8 + Int(total * 31 % 300)
        return CrashWorkload.bytes(total) + (8..<length).map { UInt8(truncatingIfNeeded: total &* 13 &+ UInt64($0)) }
    }

    public static func keyValue(_ total: UInt64, _ i: Int) -> [UInt8] {
        CrashWorkload.bytes(total) + Array(repeating: UInt8(truncatingIfNeeded: i), count: 10 + (i * 37) % 200)
    }

    /// One commit of the workload; throws `Violation` when `key` already exists.
    public static func commit(_ txn: WriteTransaction, key: [UInt8], index i: Int) throws {
        let c = try txn.createTree("c")
        let total = (CrashWorkload.u64(try c.get(Array("count".utf8))) ?? 0) + 1
        try c.put(Array("count".utf8), CrashWorkload.bytes(total))
        try c.put(Array("hot".utf8), hotValue(total))
        if try !txn.createTree("w").insert(key, keyValue(total, i)) {
            throw Violation(description: "key \(String(decoding: key, as: UTF8.self)) existed before it was written")
        }
    }

    /// Checks one snapshot: the counter, the hot value and tree "w" agree. Returns the count, or
    /// throws `Violation` saying what disagrees.
    public static func check(_ txn: ReadTransaction) throws -> UInt64 {
        func violation(_ what: String) -> Violation { Violation(description: "snapshot \(txn.txnid): \(what)") }
        guard let c = try txn.tree("c") else { return 0 }
        guard let total = CrashWorkload.u64(try c.get(Array("count".utf8))) else { throw violation("no count") }
        if try c.get(Array("hot".utf8)) != hotValue(total) { throw violation("hot value is not count \(total)'s") }
        guard let w = try txn.tree("w"), w.count == Int(total) else { throw violation("w holds the wrong count for \(total)") }
        var seen = [Bool](repeating: false, count: Int(total) + 1)
        var entries = 0
        var outside = false
        try w.forEach { _, value in
            entries += 1
            guard let n = CrashWorkload.u64(value), n >= 1, n <= total, !seen[Int(n)] else {
                outside = true
                return false
            }
            seen[Int(n)] = true
            return true
        }
        if outside { throw violation("a value of w names a count outside 1...\(total) or twice") }
        if entries != Int(total) { throw violation("w iterates \(entries) entries, count \(total)") }
        return total
    }
}
