import Testing
@testable import StrataStorage
import StrataTestWorkloads
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// A fuzz test of damaged files. Valid files of a few shapes (raw trees with inline and overflow
// values and a free list, 4 and 8 KiB pages; an object database with single, compound, collated,
// unique and full-text indexes) are damaged in many ways from a fixed seed: bit flips, byte runs,
// targeted header and entry fields (page type, counts, slot offsets, key and value lengths, child
// page numbers and counts, overflow runs, free-list entries, catalog entries, commit records, meta
// fields), truncation, zeroed, swapped and foreign pages. A targeted edit is, half the time,
// resealed — page checksum and the commit record's checksum made to match — so that it reaches
// the code past the checks that open makes.
//
// Each damaged copy is read in child processes, so that a trap is a signal and not the end of the
// test run: `strata check`, `info`, `dump` and one of `trees`, `schema`, `page`, `compact`; then
// `StrataTestHelper damage-probe` (open read-only and read-write, every tree read both ways, every
// key looked up, positions, object queries and searches, a write, `compact()`). Every child must
// end by itself (no signal) within the time limit, under a 2 GiB data limit (an absurd allocation
// fails, and Swift traps on it), and every error the probe reports must be a typed one. And where
// the format can tell: an edit that is not resealed must not pass `strata check` while the probe
// read anything but what the newest (or the previous) commit holds.
//
//   STRATA_DAMAGE_SEED   seed (default below); every failure names it with the shape and case
//   STRATA_DAMAGE_CASES  damaged copies per shape (default 24)
//   STRATA_DAMAGE_CASE   run only this case number (to reproduce one)
//   STRATA_DAMAGE_TIMEOUT  seconds a child may take (default 60)

@Suite struct DamageFuzzTests {
    static let defaultSeed: UInt64 = 0x5EED_DA3A_6E00_0001

    @Test(arguments: DamageWorkload.Shape.allCases)
    func damagedFilesGiveTypedErrors(shape: DamageWorkload.Shape) throws {
        guard let tool = strataToolPath() else {
            Issue.record("the strata tool was not found beside the test bundle")
            return
        }
        let helper = try strataTestHelperPath()
        let seed = ProcessInfo.processInfo.environment["STRATA_DAMAGE_SEED"].flatMap { UInt64($0) } ?? Self.defaultSeed
        let cases = TestEnv.int("STRATA_DAMAGE_CASES", default: 24)
        let only = ProcessInfo.processInfo.environment["STRATA_DAMAGE_CASE"].flatMap { Int($0) }
        let timeout = Double(TestEnv.int("STRATA_DAMAGE_TIMEOUT", default: 60))

        let dir = temporaryPath("damage-\(shape.rawValue)")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let original = dir + "/original.strata"
        let previous = dir + "/previous.strata"
        try DamageWorkload.build(shape, path: original) {
            try? FileManager.default.removeItem(atPath: previous)
            try FileManager.default.copyItem(atPath: original, toPath: previous)
        }
        // A file of another shape with the same page size, for foreign pages.
        let foreign = dir + "/foreign.strata"
        try DamageWorkload.build(shape == .kv ? .objects : (shape == .objects ? .kv : .kv8k), path: foreign) {}
        let foreignBytes = try readFileBytes(foreign)

        // What the newest and the previous commit hold, as the probe reads them.
        // (The probe writes: it reads copies.)
        let pristine = DamageImage(bytes: try readFileBytes(original), pageSize: shape.pageSize)
        var digests: [UInt64: String] = [:]
        for path in [original, previous] {
            let copy = dir + "/baseline.strata"
            removeStoreFiles(copy)
            try FileManager.default.copyItem(atPath: path, toPath: copy)
            let probe = runChild(helper, ["damage-probe", copy, shape.isObjects ? "objects" : "kv"], timeout: timeout)
            let report = DamageProbe(probe.stdout)
            #expect(probe.status == "exit 0" && report.done && report.errors.isEmpty, "the undamaged \(path) probes badly: \(probe)")
            if let (txnid, digest) = report.roDigest { digests[txnid] = digest }
            removeStoreFiles(copy)
        }
        #expect(digests.count == 2, "\(digests)")

        var tally = DamageTally()
        for index in 0..<cases {
            if let only, only != index { continue }
            var rng = SplitMix(seed: seed ^ (UInt64(index) &* 0x9E37_79B9_7F4A_7C15) ^ UInt64(shape.pageSize + (shape.isObjects ? 1 : 0)))
            var image = pristine
            let damage = image.damage(&rng, foreign: foreignBytes)
            let path = dir + "/case\(index).strata"
            removeStoreFiles(path)
            try writeFileBytes(path, image.bytes)
            let name = "shape \(shape.rawValue) case \(index) (STRATA_DAMAGE_SEED=\(seed) STRATA_DAMAGE_CASE=\(index)): \(damage.description)"

            var problems: [String] = []
            // The tool first: it changes nothing on disk.
            var commands: [[String]] = [["check", path], ["info", path], ["dump", path, "--json"]]
            switch index % 4 {
            case 0: commands.append(["trees", path])
            case 1: commands.append(["schema", path])
            case 2: commands.append(["page", path, String(rng.below(max(3, image.pageCountGuess + 2)))])
            default: commands.append(["compact", path, path + "-compacted"])
            }
            var checkPassed = false
            for command in commands {
                let result = runChild(tool, command, timeout: timeout)
                tally.add("strata \(command[0]): \(result.status)")
                if !result.status.hasPrefix("exit ") {
                    problems.append("strata \(command.joined(separator: " ")) ended by \(result.status)\n\(result.stderr.suffix(2_000))")
                } else if result.status == "exit 6" {
                    tally.add("strata \(command[0]) exit 6: \(result.stderr.prefix(160))")
                }
                if command[0] == "check" && result.status == "exit 0" { checkPassed = true }
            }
            try? FileManager.default.removeItem(atPath: path + "-compacted")

            let probe = runChild(helper, ["damage-probe", path, shape.isObjects ? "objects" : "kv"], timeout: timeout)
            let report = DamageProbe(probe.stdout)
            tally.add("probe: \(probe.status)")
            if probe.status != "exit 0" || !report.done {
                problems.append("damage-probe ended by \(probe.status)\nstdout: \(probe.stdout.suffix(3_000))\nstderr: \(probe.stderr.suffix(3_000))")
            }
            for (step, category) in report.outcomes { tally.add("\(step): \(category)") }
            tally.add(report.errors.isEmpty ? "case: every step succeeded" : "case: typed errors")
            for line in report.untyped { problems.append("an untyped error: \(line)") }
            // Undetected damage: check passed on an edit the checksums cover, yet the probe read
            // something that neither the newest nor the previous commit holds.
            if checkPassed && !damage.resealed, let (txnid, digest) = report.roDigest, let expected = digests[txnid], expected != digest {
                problems.append("strata check passed, yet a read-only snapshot of transaction \(txnid) reads other contents than the undamaged file")
            }
            if !problems.isEmpty { tally.add("case: FAILED") }
            for problem in problems { Issue.record("\(name)\n\(problem)") }
            removeStoreFiles(path)
        }
        print("damage fuzz \(shape.rawValue), seed \(seed), \(cases) cases:\n" + tally.summary)
    }
}

extension DamageFuzzTests {
    /// A file of `shape` whose catalog entry for `tree` records `count` entries (resealed, so that
    /// the newest commit still verifies): the count is what readers trust without a walk.
    static func fileWithCatalogCount(_ shape: DamageWorkload.Shape, tree: String, count: UInt64) throws -> String {
        let dir = temporaryPath("damage-catalog-count")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let path = dir + "/file.strata"
        try DamageWorkload.build(shape, path: path) {}
        var image = DamageImage(bytes: try readFileBytes(path), pageSize: shape.pageSize)
        let (page, entry) = try #require(image.catalogEntry(tree), "no catalog entry for \(tree)")
        image.set(entry + 8, count, width: 8)  // root u64, then count u64
        image.reseal(page)
        try writeFileBytes(path, image.bytes)
        return path
    }

    /// `strata compact` summed the trees' recorded counts (for its progress) with a trapping `+=`.
    @Test(arguments: [UInt64.max, 1 << 63, 1 << 62])
    func hugeCatalogCountIsCorruptNotATrap(count: UInt64) throws {
        let path = try Self.fileWithCatalogCount(.kv, tree: "alpha", count: count)
        defer { try? FileManager.default.removeItem(atPath: URL(fileURLWithPath: path).deletingLastPathComponent().path) }
        let tool = try #require(strataToolPath())
        let compact = runChild(tool, ["compact", path, path + "-out"], timeout: 60)
        #expect(compact.status == "exit 4", "\(compact)")
        let store = try Store(path: path, options: StoreOptions(readOnly: true))
        #expect(throws: StorageError.self) { try store.read { _ = try $0.tree("alpha") } }
        #expect(try store.read { try $0.tree("beta")?.count } ?? 0 > 0)
    }

    /// `strata compact` of a file whose first leaf holds an empty key (resealed damage: every
    /// checksum matches) failed with `invalidKey`, which the tool reports as an I/O error (exit 6)
    /// naming no page; it is the file's damage: corrupt, exit 4.
    @Test func emptyKeyInACopiedLeafIsCorrupt() throws {
        let dir = temporaryPath("damage-empty-key")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/file.strata"
        try DamageWorkload.build(.kv, path: path) {}
        var image = DamageImage(bytes: try readFileBytes(path), pageSize: 4096)
        let (_, value) = try #require(image.catalogEntry("alpha"))
        var page = Int(image.u64(value))
        while image.bytes[page * 4096 + PageHeader.type] != PageType.leaf.rawValue {
            page = Int(image.u64(page * 4096 + image.u16(page * 4096 + PageHeader.size)))  // child 0
        }
        image.set(page * 4096 + image.u16(page * 4096 + PageHeader.size), 0, width: 2)  // entry 0's keyLength
        image.reseal(page)
        try writeFileBytes(path, image.bytes)
        let result = runChild(try #require(strataToolPath()), ["compact", path, path + "-out"], timeout: 60)
        #expect(result.status == "exit 4" && result.stderr.contains("page \(page)"), "\(result)")
    }

    /// An object database whose record tree's catalog count is huge: `fetch()` reserved that many
    /// objects (an allocation that fails, and traps), and iterating gave that many placeholders.
    @Test func hugeRecordCountIsCorruptNotATrap() throws {
        let path = try Self.fileWithCatalogCount(.objects, tree: "m:DamageNote", count: 1 << 40)
        defer { try? FileManager.default.removeItem(atPath: URL(fileURLWithPath: path).deletingLastPathComponent().path) }
        let probe = runChild(try strataTestHelperPath(), ["damage-probe", path, "objects"], timeout: 60)
        let report = DamageProbe(probe.stdout)
        #expect(probe.status == "exit 0" && report.done && report.untyped.isEmpty, "\(probe)")
        #expect(report.outcomes.contains { $0.step == "ro-db-query" && $0.category.hasSuffix("corrupt") }, "\(probe)")
    }
}

// MARK: Running a child

struct ChildResult: CustomStringConvertible {
    /// "exit N", "signal N" or "timeout".
    var status: String
    var stdout: String
    var stderr: String
    var seconds: Double
    var description: String { "\(status) after \(String(format: "%.1f", seconds)) s\nstdout: \(stdout.suffix(2_000))\nstderr: \(stderr.suffix(2_000))" }
}

/// Runs `executable` with a 2 GiB data limit (`ulimit -d`, so an absurd allocation fails, and
/// Swift traps on it) and kills it after `timeout` seconds. Reads both pipes as it runs, so a
/// child writing much never blocks on them. The wait is on this thread (polling), not on the
/// shared pool's timers.
func runChild(_ executable: String, _ arguments: [String], timeout: Double) -> ChildResult {
    let start = Date()
    let process: SpawnedProcess
    do {
        process = try SpawnedProcess(executable: "/bin/sh", arguments: ["-c", "ulimit -d 2097152 && exec \"$0\" \"$@\"", executable] + arguments)
    } catch {
        return ChildResult(status: "spawn failed: \(error)", stdout: "", stderr: "", seconds: 0)
    }
    var output: [UInt8] = []
    var errors: [UInt8] = []
    var open = [process.outputFD, process.errorFD]
    var timedOut = false
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        if !timedOut && Date().timeIntervalSince(start) > timeout {
            timedOut = true
            process.send(SIGKILL)
        }
        if open.isEmpty {
            if !process.isRunning { break }
            usleep(5_000)
            continue
        }
        var fds = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        let ready = poll(&fds, nfds_t(fds.count), 50)
        if ready <= 0 { continue }
        for fd in fds where fd.revents != 0 {
            let n = buffer.withUnsafeMutableBytes { read(fd.fd, $0.baseAddress!, $0.count) }
            if n > 0 {
                // Keep at most the last 256 KiB of each stream: enough for any message.
                if fd.fd == process.outputFD {
                    output += buffer[0..<n]
                    if output.count > 1 << 19 { output.removeFirst(output.count - (1 << 18)) }
                } else {
                    errors += buffer[0..<n]
                    if errors.count > 1 << 19 { errors.removeFirst(errors.count - (1 << 18)) }
                }
            } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                open.removeAll { $0 == fd.fd }
            }
        }
    }
    let status = timedOut ? "timeout" : process.statusDescription
    return ChildResult(
        status: status, stdout: String(decoding: output, as: UTF8.self), stderr: String(decoding: errors, as: UTF8.self),
        seconds: Date().timeIntervalSince(start))
}

/// What `StrataTestHelper damage-probe` printed.
struct DamageProbe {
    var outcomes: [(step: String, category: String)] = []
    var errors: [String] = []
    var untyped: [String] = []
    var roDigest: (UInt64, String)?
    var done = false

    init(_ stdout: String) {
        for line in stdout.split(separator: "\n") {
            if line == "done" { done = true }
            let words = line.split(separator: " ", maxSplits: 3).map(String.init)
            guard words.count >= 3, words[0] == "step" else { continue }
            if words[2] == "ok" {
                outcomes.append((words[1], "ok"))
                if words[1] == "ro-read", words.count == 4 {
                    let parts = words[3].split(separator: " ")
                    if parts.count == 2, let txnid = UInt64(parts[0]) { roDigest = (txnid, String(parts[1])) }
                }
            } else {
                // "step NAME error CATEGORY message": "untyped" is a category of two words.
                let rest = words.count == 4 ? words[3] : ""
                let category =
                    rest.hasPrefix("untyped ")
                    ? "untyped " + (rest.split(separator: " ").dropFirst().first.map(String.init) ?? "") : String(rest.split(separator: " ").first ?? "")
                outcomes.append((words[1], category))
                errors.append(String(line))
                if category.hasPrefix("untyped") { untyped.append(String(line)) }
            }
        }
    }
}

/// Outcome counts by category.
struct DamageTally {
    var counts: [String: Int] = [:]
    mutating func add(_ key: String) { counts[key, default: 0] += 1 }
    var summary: String {
        counts.sorted { $0.key < $1.key }.map { "  \($0.value)\t\($0.key)" }.joined(separator: "\n")
    }
}

// MARK: Damage

/// One damaged copy's edits, described so that a failure can be read and reproduced.
struct Damage: CustomStringConvertible {
    var edits: [String] = []
    /// Whether an edit was resealed (its page checksum, and the commit record, made to match).
    var resealed = false
    var description: String { edits.joined(separator: "; ") + (resealed ? " [resealed]" : "") }
}

/// What a page is, found by walking the newest commit's trees.
enum PageRole: String, CaseIterable {
    case catalogBranch, catalogLeaf, treeBranch, treeLeaf, freeBranch, freeLeaf, overflow, commitRecord
}

struct DamageImage {
    var bytes: [UInt8]
    let pageSize: Int

    // Little-endian field access on the image.
    func u16(_ at: Int) -> Int { at + 2 <= bytes.count ? Int(bytes[at]) | Int(bytes[at + 1]) << 8 : 0 }
    func u32(_ at: Int) -> UInt32 { (0..<4).reduce(0) { at + $1 < bytes.count ? $0 | UInt32(bytes[at + $1]) << (8 * UInt32($1)) : $0 } }
    func u64(_ at: Int) -> UInt64 { (0..<8).reduce(0) { at + $1 < bytes.count ? $0 | UInt64(bytes[at + $1]) << (8 * UInt64($1)) : $0 } }
    mutating func set(_ at: Int, _ value: UInt64, width: Int) {
        for i in 0..<width where at + i < bytes.count { bytes[at + i] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(i))) }
    }

    var pages: Int { bytes.count / pageSize }

    /// The meta slot with the highest transaction id among those with a valid checksum.
    var currentMeta: Int {
        var best = 0
        var bestTxnid: UInt64? = nil
        for slot in 0..<2 where (slot + 1) * pageSize <= bytes.count {
            let sum = bytes.withUnsafeBytes { pageChecksum($0.baseAddress! + slot * pageSize, byteCount: pageSize) }
            guard sum == u64(slot * pageSize) else { continue }
            let txnid = u64(slot * pageSize + PageHeader.txnid)
            if bestTxnid == nil || txnid > bestTxnid! {
                best = slot
                bestTxnid = txnid
            }
        }
        return best
    }

    var pageCountGuess: Int { Int(min(u64(currentMeta * pageSize + MetaLayout.pageCount), 1 << 20)) }

    /// Every page of the newest commit's trees, by role, with the branch above each page.
    func roles() -> (roles: [Int: PageRole], parents: [Int: Int]) {
        var roles: [Int: PageRole] = [:]
        var parents: [Int: Int] = [:]
        let meta = currentMeta * pageSize
        func walk(_ page: Int, _ kind: String, depth: Int) {
            guard page >= 2, page < pages, roles[page] == nil, depth < 50 else { return }
            let base = page * pageSize
            let type = bytes[base + PageHeader.type]
            let count = u16(base + PageHeader.count)
            if type == PageType.countedBranch.rawValue {
                roles[page] = kind == "catalog" ? .catalogBranch : kind == "free" ? .freeBranch : .treeBranch
                for i in 0..<count {
                    let off = u16(base + 32 + 2 * i)
                    guard off + 8 <= pageSize else { continue }
                    let child = Int(clamping: u64(base + off))
                    if child >= 2 && child < pages && parents[child] == nil { parents[child] = page }
                    walk(child, kind, depth: depth + 1)
                }
            } else if type == PageType.leaf.rawValue {
                roles[page] = kind == "catalog" ? .catalogLeaf : kind == "free" ? .freeLeaf : .treeLeaf
                for i in 0..<count {
                    let off = u16(base + 32 + 2 * i)
                    guard off + 8 <= pageSize else { continue }
                    let keyLength = u16(base + off)
                    let valueAt = base + off + 8 + keyLength
                    if kind == "catalog" {
                        walk(Int(clamping: u64(valueAt)), "tree", depth: 0)
                    } else if bytes[base + off + 2] & LeafEntry.overflowFlag != 0 {
                        let run = Int(clamping: u64(valueAt))
                        if run >= 2 && run < pages && roles[run] == nil {
                            roles[run] = .overflow
                            parents[run] = page
                        }
                    }
                }
            }
        }
        walk(Int(clamping: u64(meta + MetaLayout.catalogRoot)), "catalog", depth: 0)
        walk(Int(clamping: u64(meta + MetaLayout.freeRoot)), "free", depth: 0)
        let run = Int(clamping: u64(meta + MetaLayout.recordRun))
        if run >= 2 && run < pages { roles[run] = .commitRecord }
        return (roles, parents)
    }

    /// The catalog leaf holding tree `name`'s entry, and the entry's value offset in the file.
    func catalogEntry(_ name: String) -> (page: Int, value: Int)? {
        var page = Int(clamping: u64(currentMeta * pageSize + MetaLayout.catalogRoot))
        let key = Array(name.utf8)
        for _ in 0..<50 {
            guard page >= 2, page < pages else { return nil }
            let base = page * pageSize
            let count = u16(base + PageHeader.count)
            func keyAt(_ i: Int, leaf: Bool) -> [UInt8] {
                let off = u16(base + 32 + 2 * i)
                let length = leaf ? u16(base + off) : u16(base + off + BranchEntry.keyLengthOffset)
                let start = base + off + (leaf ? LeafEntry.headerSize : BranchEntry.headerSize)
                return Array(bytes[start..<(start + length)])
            }
            if bytes[base + PageHeader.type] == PageType.leaf.rawValue {
                for i in 0..<count where keyAt(i, leaf: true) == key {
                    return (page, base + u16(base + 32 + 2 * i) + LeafEntry.headerSize + key.count)
                }
                return nil
            }
            var child = 0
            for i in 1..<max(1, count) where !key.lexicographicallyPrecedes(keyAt(i, leaf: false)) { child = i }
            page = Int(clamping: u64(base + u16(base + 32 + 2 * child)))
        }
        return nil
    }

    /// Pages in a run starting at `page` (an overflow or commit-record run), as its header says.
    func runLength(_ page: Int) -> Int {
        let type = bytes[page * pageSize + PageHeader.type]
        guard type == PageType.overflow.rawValue || type == PageType.commitRecord.rawValue else { return 1 }
        return max(1, min(Int(u32(page * pageSize + PageHeader.runPages)), pages - page))
    }

    /// Recomputes the checksum of the page or run at `page` and, where the newest commit's record
    /// lists it, the checksum recorded there (resealing the record run or meta page in turn).
    mutating func reseal(_ page: Int, run: Int? = nil) {
        guard page < pages else { return }
        let length = page < 2 ? 1 : (run ?? runLength(page))
        let sum = bytes.withUnsafeBytes { pageChecksum($0.baseAddress! + page * pageSize, byteCount: min(length, pages - page) * pageSize) }
        set(page * pageSize, sum, width: 8)
        if page < 2 { return }
        let slot = currentMeta  // (before the record changes: that spoils the meta's checksum)
        let meta = slot * pageSize
        let recordRun = Int(clamping: u64(meta + MetaLayout.recordRun))
        let recordCount = Int(u32(meta + MetaLayout.recordCount))
        let entries = recordRun == 0 ? meta + MetaLayout.inlineRecord : recordRun * pageSize + PageHeader.size
        guard recordRun < pages, recordCount < 1 << 20 else { return }
        for i in 0..<recordCount where entries + 16 * i + 16 <= bytes.count {
            if u64(entries + 16 * i) == UInt64(page) {
                set(entries + 16 * i + 8, sum, width: 8)
                if recordRun == 0 { reseal(slot) } else if recordRun != page { reseal(recordRun) }
                return
            }
        }
    }

    // Interesting values for a field.
    func u16Value(_ rng: inout SplitMix, old: Int) -> UInt64 {
        let choices = [0, 1, 2, 7, 31, 32, 33, pageSize - 1, pageSize, pageSize + 1, 0x7FFF, 0xFFFF, old - 1, old + 1, old * 2, rng.below(pageSize)]
        return UInt64(UInt16(truncatingIfNeeded: choices[rng.below(choices.count)]))
    }

    func u32Value(_ rng: inout SplitMix, old: UInt64) -> UInt64 {
        let choices: [UInt64] = [
            0, 1, 2, old &- 1, old &+ 1, old &* 2, UInt64(pageSize), UInt64(pageSize * 3), 1 << 20, 1 << 30, 1 << 31, UInt64(UInt32.max),
            rng.next() & 0xFFFF_FFFF,
        ]
        return choices[rng.below(choices.count)] & 0xFFFF_FFFF
    }

    func pageValue(_ rng: inout SplitMix, old: UInt64, roles: [Int: PageRole]) -> UInt64 {
        let count = UInt64(pageCountGuess)
        let known = roles.keys.sorted()  // (not hash order, which differs per process: a seed must reproduce)
        let choices: [UInt64] = [
            0, 1, 2, old, count &- 1, count, count &+ 1, count &+ 1_000, 1 << 32, 1 << 40, 1 << 62, UInt64.max, UInt64.max / UInt64(pageSize),
            known.isEmpty ? 3 : UInt64(known[rng.below(known.count)]), known.isEmpty ? 4 : UInt64(known[rng.below(known.count)]), old &+ 1, old &- 1,
        ]
        return choices[rng.below(choices.count)]
    }

    func countValue(_ rng: inout SplitMix, old: UInt64) -> UInt64 {
        let choices: [UInt64] = [0, 1, old &- 1, old &+ 1, old &* 2, 1 << 32, 1 << 58, 1 << 62, 1 << 63, UInt64.max, UInt64.max - 1, rng.next()]
        return choices[rng.below(choices.count)]
    }

    /// One or more damages chosen by `rng`.
    mutating func damage(_ rng: inout SplitMix, foreign: [UInt8]) -> Damage {
        var damage = Damage()
        let edits = rng.percent(20) ? 2 + rng.below(2) : 1
        for _ in 0..<edits where pages >= 3 && damage.edits.last?.hasPrefix("truncated") != true {
            damageOnce(&rng, foreign: foreign, into: &damage)
        }
        return damage
    }

    mutating func damageOnce(_ rng: inout SplitMix, foreign: [UInt8], into damage: inout Damage) {
        let (roles, parents) = roles()
        let pageCount = max(3, min(pages, pageCountGuess))
        func pick(_ wanted: [PageRole]) -> Int? {
            let candidates = roles.filter { wanted.contains($0.value) }.keys.sorted()
            return candidates.isEmpty ? nil : candidates[rng.below(candidates.count)]
        }
        let kind = rng.below(100)
        switch kind {
        case 0..<10:
            // Bit flips anywhere in the accounted pages.
            let flips = 1 + rng.below(4)
            var at: [Int] = []
            for _ in 0..<flips {
                let offset = rng.below(pageCount * pageSize)
                bytes[offset] ^= UInt8(1) << UInt8(rng.below(8))
                at.append(offset)
            }
            damage.edits.append("bit flips at \(at)")
        case 10..<16:
            // A run of random bytes.
            let offset = rng.below(pageCount * pageSize)
            let length = 1 + rng.below(16)
            for i in offset..<min(bytes.count, offset + length) { bytes[i] = UInt8(truncatingIfNeeded: rng.next()) }
            damage.edits.append("\(length) random bytes at \(offset) (page \(offset / pageSize))")
        case 16..<22:
            // Truncation.
            let lengths = [
                0, 1, 64, 127, 128, pageSize - 1, pageSize, pageSize + 100, 2 * pageSize - 1, 2 * pageSize, rng.below(bytes.count),
                pageCount * pageSize - 1 - rng.below(pageSize), (pageCount - 1 - rng.below(3)) * pageSize,
            ]
            let length = max(0, min(bytes.count, lengths[rng.below(lengths.count)]))
            bytes.removeSubrange(length...)
            damage.edits.append("truncated to \(length) bytes")
            return
        case 22..<27:
            // A zeroed page (meta pages included).
            let page = rng.percent(15) ? rng.below(2) : rng.below(pageCount)
            for i in (page * pageSize)..<min(bytes.count, (page + 1) * pageSize) { bytes[i] = 0 }
            damage.edits.append("zeroed page \(page) (\(roles[page]?.rawValue ?? "meta or free"))")
        case 27..<32:
            // Two pages swapped, or one copied over another (a misdirected write).
            let a = 2 + rng.below(pageCount - 2), b = 2 + rng.below(pageCount - 2)
            let copyOnly = rng.percent(40)
            let pa = Array(bytes[(a * pageSize)..<((a + 1) * pageSize)])
            let pb = Array(bytes[(b * pageSize)..<((b + 1) * pageSize)])
            bytes.replaceSubrange((b * pageSize)..<((b + 1) * pageSize), with: pa)
            if !copyOnly { bytes.replaceSubrange((a * pageSize)..<((a + 1) * pageSize), with: pb) }
            damage.edits.append(
                "\(copyOnly ? "copied page \(a) over" : "swapped pages \(a) and") \(b) (\(roles[a]?.rawValue ?? "free"), \(roles[b]?.rawValue ?? "free"))")
        case 32..<37:
            // A page from another file.
            let page = 2 + rng.below(pageCount - 2)
            let from = foreign.count / pageSize > 2 ? 2 + rng.below(foreign.count / pageSize - 2) : page
            let source = rng.percent(50) && page * pageSize + pageSize <= foreign.count ? page : from
            guard source * pageSize + pageSize <= foreign.count else { return }
            bytes.replaceSubrange((page * pageSize)..<((page + 1) * pageSize), with: foreign[(source * pageSize)..<((source + 1) * pageSize)])
            damage.edits.append("page \(page) (\(roles[page]?.rawValue ?? "free")) replaced by page \(source) of another file")
        case 37..<52:
            // A meta page field.
            let slot = rng.percent(75) ? currentMeta : 1 - currentMeta
            let base = slot * pageSize
            let fields: [(String, Int, Int)] = [
                ("pageCount", MetaLayout.pageCount, 8), ("catalogRoot", MetaLayout.catalogRoot, 8), ("catalogCount", MetaLayout.catalogCount, 8),
                ("freeRoot", MetaLayout.freeRoot, 8), ("freeCount", MetaLayout.freeCount, 8), ("txnid", PageHeader.txnid, 8),
                ("formatVersion", MetaLayout.formatVersion, 4), ("pageSize", MetaLayout.pageSize, 4), ("recordRun", MetaLayout.recordRun, 8),
                ("recordCount", MetaLayout.recordCount, 4), ("pageNumber", PageHeader.pageNumber, 8), ("type", PageHeader.type, 1),
                ("flags", MetaLayout.flags, 4), ("record entry", MetaLayout.inlineRecord + 16 * rng.below(4), 8),
                ("record checksum", MetaLayout.inlineRecord + 16 * rng.below(4) + 8, 8),
            ]
            let (name, offset, width) = fields[rng.below(fields.count)]
            let old = width == 8 ? u64(base + offset) : width == 4 ? UInt64(u32(base + offset)) : UInt64(bytes[base + offset])
            var value: UInt64
            switch name {
            case "pageCount": value = [0, 1, 2, 3, old &- 1, old &- 2, old &+ 1, old &+ 100, old &* 1_000, 1 << 40, UInt64.max, UInt64(pages)][rng.below(12)]
            case "catalogRoot", "freeRoot", "recordRun", "pageNumber", "record entry": value = pageValue(&rng, old: old, roles: roles)
            case "txnid": value = [0, 1, 2, old &+ 2, old &- 2, old &+ 1, 1 << 62, (1 << 62) + 2, UInt64.max - 1, UInt64.max][rng.below(10)]
            case "formatVersion": value = [0, 1, 2, UInt64(strataFormatVersion) + 1, 255, UInt64(UInt32.max)][rng.below(6)]
            case "pageSize": value = [0, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 4095, UInt64(UInt32.max)][rng.below(11)]
            case "recordCount": value = u32Value(&rng, old: old)
            case "type": value = UInt64(rng.below(8))
            default: value = countValue(&rng, old: old)
            }
            set(base + offset, value, width: width)
            let seal = rng.percent(75)
            if seal {
                reseal(slot)
                damage.resealed = true
            }
            damage.edits.append("meta \(slot)\(slot == currentMeta ? " (newest)" : "") \(name) \(old) -> \(value)")
        default:
            // A field of a page of the newest commit's trees.
            let role = PageRole.allCases[rng.below(PageRole.allCases.count)]
            guard let page = pick([role]) ?? pick(Array(PageRole.allCases)) else { return }
            let actualRole = roles[page]!
            let base = page * pageSize
            let count = u16(base + PageHeader.count)
            let isNode = [.catalogBranch, .catalogLeaf, .treeBranch, .treeLeaf, .freeBranch, .freeLeaf].contains(actualRole)
            let isLeaf = [.catalogLeaf, .treeLeaf, .freeLeaf].contains(actualRole)
            let run = runLength(page)
            var edit = ""
            let choice = rng.below(10)
            if !isNode || choice < 3 {
                // A header field.
                let which = rng.below(isNode ? 5 : 4)
                switch which {
                case 0:
                    let value = UInt64([0, 1, 2, 3, 4, 5, 6, 7, 255][rng.below(9)])
                    set(base + PageHeader.type, value, width: 1)
                    edit = "type -> \(value)"
                case 1:
                    let old = u64(base + PageHeader.pageNumber)
                    let value = pageValue(&rng, old: old, roles: roles)
                    set(base + PageHeader.pageNumber, value, width: 8)
                    edit = "pageNumber \(old) -> \(value)"
                case 2 where !isNode:
                    let old = UInt64(u32(base + PageHeader.runPages))
                    let value = u32Value(&rng, old: old)
                    set(base + PageHeader.runPages, value, width: 4)
                    edit = "runPages \(old) -> \(value)"
                case 3 where !isNode:
                    // Commit-record entries or overflow bytes.
                    let offset = PageHeader.size + rng.below(pageSize - PageHeader.size - 8)
                    let old = u64(base + offset)
                    let value = pageValue(&rng, old: old, roles: roles)
                    set(base + offset, value, width: 8)
                    edit = "u64 at \(offset) \(old) -> \(value)"
                case 2:
                    let value = u16Value(&rng, old: count)
                    set(base + PageHeader.count, value, width: 2)
                    edit = "count \(count) -> \(value)"
                case 3:
                    let old = u16(base + PageHeader.upper)
                    let value = u16Value(&rng, old: old)
                    set(base + PageHeader.upper, value, width: 2)
                    edit = "upper \(old) -> \(value)"
                default:
                    let old = u16(base + PageHeader.garbage)
                    let value = u16Value(&rng, old: old)
                    set(base + PageHeader.garbage, value, width: 2)
                    edit = "garbage \(old) -> \(value)"
                }
            } else if count > 0 {
                let i = rng.below(count)
                let slotAt = base + PageHeader.size + 2 * i
                let off = u16(slotAt)
                let entry = base + off
                if choice < 5 || off + 18 > pageSize {
                    let value = u16Value(&rng, old: off)
                    set(slotAt, value, width: 2)
                    edit = "slot \(i) \(off) -> \(value)"
                } else if isLeaf {
                    let keyLength = u16(entry)
                    switch rng.below(actualRole == .freeLeaf || actualRole == .catalogLeaf ? 6 : 4) {
                    case 0:
                        let value = u16Value(&rng, old: keyLength)
                        set(entry, value, width: 2)
                        edit = "entry \(i) keyLength \(keyLength) -> \(value)"
                    case 1:
                        let old = bytes[entry + 2]
                        bytes[entry + 2] = rng.percent(50) ? old ^ LeafEntry.overflowFlag : UInt8(truncatingIfNeeded: rng.next())
                        edit = "entry \(i) flags \(old) -> \(bytes[entry + 2])"
                    case 2:
                        let old = UInt64(u32(entry + 4))
                        let value = u32Value(&rng, old: old)
                        set(entry + 4, value, width: 4)
                        edit = "entry \(i) valueLength \(old) -> \(value)"
                    case 3:
                        // The overflow page number, or the start of an inline value.
                        let at = entry + 8 + keyLength
                        guard at + 8 <= base + pageSize else { return }
                        let old = u64(at)
                        let value = pageValue(&rng, old: old, roles: roles)
                        set(at, value, width: 8)
                        edit = "entry \(i) \(bytes[entry + 2] & 1 != 0 ? "overflow page" : "value start") \(old) -> \(value)"
                    default:
                        // A catalog value (root, count) or a free-list chunk's page or born id.
                        let valueLength = Int(u32(entry + 4))
                        let at = entry + 8 + keyLength
                        guard valueLength >= 16, at + valueLength <= base + pageSize else { return }
                        let field = actualRole == .catalogLeaf ? 8 * rng.below(2) : 16 * rng.below(valueLength / 16) + 8 * rng.below(2)
                        let old = u64(at + field)
                        let value = field % 16 == 0 ? pageValue(&rng, old: old, roles: roles) : countValue(&rng, old: old)
                        set(at + field, value, width: 8)
                        edit = "entry \(i) value u64 at \(field) \(old) -> \(value)"
                    }
                } else {
                    switch rng.below(3) {
                    case 0:
                        let old = u64(entry)
                        var value = pageValue(&rng, old: old, roles: roles)
                        if rng.percent(25) { value = UInt64(rng.percent(50) ? page : parents[page] ?? page) }  // a cycle
                        set(entry, value, width: 8)
                        edit = "entry \(i) child \(old) -> \(value)"
                    case 1:
                        let old = u64(entry + BranchEntry.countOffset)
                        let value = countValue(&rng, old: old)
                        set(entry + BranchEntry.countOffset, value, width: 8)
                        edit = "entry \(i) subtreeCount \(old) -> \(value)"
                    default:
                        let old = u16(entry + BranchEntry.keyLengthOffset)
                        let value = u16Value(&rng, old: old)
                        set(entry + BranchEntry.keyLengthOffset, value, width: 2)
                        edit = "entry \(i) keyLength \(old) -> \(value)"
                    }
                }
            } else {
                return
            }
            let seal = rng.percent(50)
            if seal {
                reseal(page, run: run)
                damage.resealed = true
            }
            damage.edits.append("\(actualRole.rawValue) page \(page): \(edit)")
        }
    }
}
