// A helper process for the crash and multi-process tests of StrataStorage (CrashTests.swift,
// MultiProcessTests.swift). It uses only the public API.
//
//   StrataTestHelper commit-loop FILE START [--sync single|double] [--big]
//       Commits numbered transactions START, START+1, ... forever with `.full` durability and
//       prints "committed N" after each commit returns. Transaction N (see `CrashWorkload`):
//         tree "data": puts 4 keys "d/<N>/<j>" (one of them a multi-page overflow value every few
//                      commits) and deletes the 4 keys of transaction N-40, so pages are freed
//                      and reused all the time;
//         tree "keep": inserts key N (8 bytes big-endian), kept forever, so state accumulates;
//         tree "meta": "last" = N, after checking that it held N-1.
//       Every value starts with N and a random tag of this run, so a verifier can tell two
//       versions of one transaction apart. Prints "resume START-1 tag TAG" first. Exits 2 when the
//       store's "last" is not START-1 at open, 3 when the store contradicts the workload (a key
//       missing or present where it must not be).
//   StrataTestHelper writer FILE ID COUNT [--durable] [--gate]
//       Commits COUNT transactions (`.noSync` unless --durable); transaction i increments the
//       shared counter "count" in tree "c" (a read-modify-write: lost if writers interleave badly),
//       rewrites "hot" in "c" from the new count, and puts "<ID>/<i>" in tree "w" with a value
//       starting with the new count (u64 LE), so the parent can see the order of all commits
//       (`CounterWorkload`). With --gate, prints "ready ID" after opening and waits for a line on
//       stdin before writing. Prints "done ID" at the end.
//   StrataTestHelper check-loop FILE TARGET
//       Prints "ready", then checks snapshot after snapshot that "count", "hot" and tree "w" agree
//       (`CounterWorkload.check`) until one shows TARGET commits; prints "checked N snapshots of
//       M commits". Exits 1 at the first snapshot that disagrees.
//   StrataTestHelper hold-reader FILE
//       Begins a read snapshot and prints "snapshot TXNID CHECKSUM PID"; waits for a line on
//       stdin, re-reads everything through the same snapshot and prints "recheck CHECKSUM"; exits
//       0 when both checksums agree, 1 when they differ.

import StrataStorage
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes a line to stdout unbuffered, so a line the parent reads is a line that was done.
func say(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    var done = 0
    while done < bytes.count {
        let n = bytes.withUnsafeBytes { write(1, $0.baseAddress! + done, $0.count - done) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { exit(5) }
        done += n
    }
}

func fail(_ code: Int32, _ message: String) -> Never {
    let bytes = Array(("StrataTestHelper: " + message + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(2, $0.baseAddress!, $0.count) }
    exit(code)
}

func usage() -> Never {
    fail(64, """
    usage: StrataTestHelper commit-loop FILE START [--sync single|double] [--big]
           StrataTestHelper writer FILE ID COUNT [--durable] [--gate]
           StrataTestHelper hold-reader FILE
           StrataTestHelper check-loop FILE TARGET
    """)
}

// MARK: The crash workload (mirrored in CrashTests.swift: keep the two in step)

enum CrashWorkload {
    /// Keys per transaction in tree "data".
    static let keysPerTransaction = 4
    /// Transaction N deletes the keys of transaction N - window.
    static let window: UInt64 = 40

    static func dataKey(_ n: UInt64, _ j: Int) -> [UInt8] {
        let digits = String(n)
        return Array(("d/" + String(repeating: "0", count: max(0, 10 - digits.count)) + digits + "/\(j)").utf8)
    }

    static func keepKey(_ n: UInt64) -> [UInt8] {
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
    static func value(_ n: UInt64, _ j: Int, tag: UInt64, big: Bool) -> [UInt8] {
        let count = j == 99 ? 16 + Int(n % 50) : length(n, j, big: big)
        let seed = mix(n ^ (UInt64(j) << 40))
        var bytes = (0..<count).map { i in UInt8(truncatingIfNeeded: (seed >> UInt64((i & 7) * 8)) &+ UInt64(i) &* 131) }
        bytes.replaceSubrange(0..<16, with: self.bytes(n) + self.bytes(tag))
        return bytes
    }

    /// The little-endian u64 at the start of `bytes`.
    static func u64(_ bytes: [UInt8]?) -> UInt64? {
        guard let bytes, bytes.count >= 8 else { return nil }
        return (0..<8).reduce(0) { $0 | UInt64(bytes[$1]) << (8 * UInt64($1)) }
    }

    static func bytes(_ x: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: x >> (8 * UInt64($0))) } }
}

func commitLoop(_ args: [String]) throws {
    guard args.count >= 2, let start = UInt64(args[1]), start >= 1 else { usage() }
    var options = StoreOptions(durability: .full)
    var big = false
    var i = 2
    while i < args.count {
        switch args[i] {
        case "--sync":
            guard i + 1 < args.count else { usage() }
            switch args[i + 1] {
            case "single": options.syncMode = .single
            case "double": options.syncMode = .double
            default: usage()
            }
            i += 2
        case "--big":
            big = true
            i += 1
        default:
            usage()
        }
    }
    let store = try Store(path: args[0], options: options)
    let last = try store.read { txn in CrashWorkload.u64(try txn.tree("meta")?.get(Array("last".utf8))) } ?? 0
    if last != start - 1 { fail(2, "the store's last transaction is \(last), expected \(start - 1)") }
    let tag = UInt64.random(in: 1...UInt64.max)
    say("resume \(last) tag \(tag)")
    var n = start
    while true {
        try store.write { txn in
            let meta = try txn.createTree("meta")
            let previous = CrashWorkload.u64(try meta.get(Array("last".utf8))) ?? 0
            if previous != n - 1 { fail(3, "transaction \(n) found last = \(previous)") }
            let data = try txn.createTree("data")
            for j in 0..<CrashWorkload.keysPerTransaction {
                if try !data.insert(CrashWorkload.dataKey(n, j), CrashWorkload.value(n, j, tag: tag, big: big)) {
                    fail(3, "key \(j) of transaction \(n) exists before it was written")
                }
            }
            if n > CrashWorkload.window {
                for j in 0..<CrashWorkload.keysPerTransaction {
                    if try !data.delete(CrashWorkload.dataKey(n - CrashWorkload.window, j)) {
                        fail(3, "key \(j) of transaction \(n - CrashWorkload.window) is missing")
                    }
                }
            }
            if try !txn.createTree("keep").insert(CrashWorkload.keepKey(n), CrashWorkload.value(n, 99, tag: tag, big: big)) {
                fail(3, "keep key of transaction \(n) exists before it was written")
            }
            try meta.put(Array("last".utf8), CrashWorkload.bytes(n) + CrashWorkload.bytes(tag))
        }
        say("committed \(n)")
        n += 1
    }
}

/// The shared-counter workload of `writer` (mirrored in MultiProcessTests.swift): one commit
/// increments "count" in tree "c", rewrites "hot" in tree "c" with a value derived from the new
/// count (an overflow run every few commits, so runs are freed and reused), and inserts `key` in
/// tree "w" with a value starting with the new count.
enum CounterWorkload {
    static func hotValue(_ total: UInt64) -> [UInt8] {
        let length = total % 4 == 0 ? 5_000 + Int(total * 7_919 % 20_000) : 8 + Int(total * 31 % 300)
        return CrashWorkload.bytes(total) + (8..<length).map { UInt8(truncatingIfNeeded: total &* 13 &+ UInt64($0)) }
    }

    static func keyValue(_ total: UInt64, _ i: Int) -> [UInt8] {
        CrashWorkload.bytes(total) + Array(repeating: UInt8(truncatingIfNeeded: i), count: 10 + (i * 37) % 200)
    }

    static func commit(_ txn: WriteTransaction, key: [UInt8], index i: Int) throws {
        let c = try txn.createTree("c")
        let total = (CrashWorkload.u64(try c.get(Array("count".utf8))) ?? 0) + 1
        try c.put(Array("count".utf8), CrashWorkload.bytes(total))
        try c.put(Array("hot".utf8), hotValue(total))
        if try !txn.createTree("w").insert(key, keyValue(total, i)) {
            fail(3, "key \(String(decoding: key, as: UTF8.self)) exists before it was written")
        }
    }

    /// Checks one snapshot: the counter, the hot value and the "w" tree agree. Returns the count.
    static func check(_ txn: ReadTransaction) throws -> UInt64 {
        guard let c = try txn.tree("c") else { return 0 }
        guard let total = CrashWorkload.u64(try c.get(Array("count".utf8))) else { fail(1, "snapshot \(txn.txnid): no count") }
        if try c.get(Array("hot".utf8)) != hotValue(total) { fail(1, "snapshot \(txn.txnid): hot value is not count \(total)'s") }
        guard let w = try txn.tree("w"), w.count == Int(total) else { fail(1, "snapshot \(txn.txnid): w holds the wrong count for \(total)") }
        var seen = [Bool](repeating: false, count: Int(total) + 1)
        var entries = 0
        try w.forEach { _, value in
            entries += 1
            guard let n = CrashWorkload.u64(Array(value.prefix(8))), n >= 1, n <= total, !seen[Int(n)] else {
                fail(1, "snapshot \(txn.txnid): a value of w names a count outside 1...\(total) or twice")
            }
            seen[Int(n)] = true
            return true
        }
        if entries != Int(total) { fail(1, "snapshot \(txn.txnid): w iterates \(entries) entries, count \(total)") }
        return total
    }
}

func writer(_ args: [String]) throws {
    guard args.count >= 3, let count = Int(args[2]) else { usage() }
    let id = args[1]
    let flags = args.dropFirst(3)
    if flags.contains(where: { $0 != "--durable" && $0 != "--gate" }) { usage() }
    let store = try Store(path: args[0], options: StoreOptions(durability: flags.contains("--durable") ? .full : .noSync))
    if flags.contains("--gate") {
        say("ready \(id)")
        _ = readLine()
    }
    for i in 0..<count {
        try store.write { txn in try CounterWorkload.commit(txn, key: Array("\(id)/\(i)".utf8), index: i) }
        if i % 16 == 0 { sched_yield() }
    }
    say("done \(id)")
}

/// Checks snapshot after snapshot until one shows `target` commits.
func checkLoop(_ args: [String]) throws {
    guard args.count == 2, let target = UInt64(args[1]) else { usage() }
    let store = try Store(path: args[0])
    say("ready")
    var snapshots = 0
    var distinct = Set<UInt64>()
    var pause: UInt32 = 0
    while true {
        let total = try store.read { txn in try CounterWorkload.check(txn) }
        snapshots += 1
        if total >= target { break }
        // Nothing new since the last snapshot: back off (up to 20 ms) rather than spin on one commit.
        if distinct.insert(total).inserted {
            pause = 0
        } else {
            pause = min(max(pause * 2, 100), 20_000)
            usleep(pause)
        }
    }
    say("checked \(snapshots) snapshots of \(distinct.count) commits")
}

/// FNV-1a over every tree name, key and value (with their lengths) of the snapshot, in order.
func checksum(_ txn: ReadTransaction) throws -> UInt64 {
    var h: UInt64 = 0xCBF2_9CE4_8422_2325
    func add(_ bytes: UnsafeRawBufferPointer) {
        var length = UInt64(bytes.count)
        for _ in 0..<8 { h = (h ^ (length & 0xFF)) &* 0x100_0000_01B3; length >>= 8 }
        for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
    }
    for name in try txn.treeNames() {
        Array(name.utf8).withUnsafeBytes { add($0) }
        guard let tree = try txn.tree(name) else { fail(3, "tree \(name) is listed but cannot be opened") }
        var entries = 0
        try tree.forEach { key, value in
            add(key)
            add(value)
            entries += 1
            return true
        }
        if entries != tree.count { fail(3, "tree \(name) counts \(tree.count) entries but holds \(entries)") }
    }
    return h
}

func holdReader(_ args: [String]) throws {
    guard args.count == 1 else { usage() }
    let store = try Store(path: args[0])
    let snapshot = try store.beginRead()
    let first = try checksum(snapshot)
    say("snapshot \(snapshot.txnid) \(first) \(getpid())")
    _ = readLine()
    let second = try checksum(snapshot)
    say("recheck \(second)")
    snapshot.end()
    exit(first == second ? 0 : 1)
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else { usage() }
do {
    switch command {
    case "commit-loop": try commitLoop(Array(arguments.dropFirst()))
    case "writer": try writer(Array(arguments.dropFirst()))
    case "hold-reader": try holdReader(Array(arguments.dropFirst()))
    case "check-loop": try checkLoop(Array(arguments.dropFirst()))
    default: usage()
    }
} catch {
    fail(4, "\(command) failed: \(error)")
}
