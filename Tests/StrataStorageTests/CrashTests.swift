import Testing
@testable import StrataStorage
import StrataTestWorkloads
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Crash safety: the StrataTestHelper process commits numbered transactions with `.full`
// durability and prints each one after its commit returns; the test kills it with SIGKILL at
// random moments, reopens the file and checks that every printed transaction is there, whole, and
// that nothing partial is visible; then it restarts the helper on the same file, so state
// accumulates across kills. SIGKILL keeps the page cache, so this proves the commit protocol
// against process crashes (power loss is the fault-injection tests' job).
//
// Environment: STRATA_CRASH_KILLS (kills per configuration, default 20), STRATA_CRASH_SEED
// (seed of the kill delays, default fixed; printed with every failure).

struct CrashConfig: Sendable, CustomTestStringConvertible {
    var sync: SyncMode
    var big: Bool
    var testDescription: String { "\(sync == .single ? "single" : "double") sync\(big ? ", big values" : "")" }
}

struct CrashCheckFailure: Error, CustomStringConvertible {
    var description: String
}

@Suite struct CrashTests {
    static let configurations = [
        CrashConfig(sync: .single, big: false), CrashConfig(sync: .double, big: false),
        CrashConfig(sync: .single, big: true), CrashConfig(sync: .double, big: true),
    ]

    /// Kills the committing helper again and again and checks the file after every kill.
    @Test(arguments: configurations)
    func killedWriterLosesNothing(_ config: CrashConfig) async throws {
        let helper = try strataTestHelperPath()
        let kills = Int(ProcessInfo.processInfo.environment["STRATA_CRASH_KILLS"] ?? "") ?? 20
        let baseSeed = UInt64(ProcessInfo.processInfo.environment["STRATA_CRASH_SEED"] ?? "") ?? 0x5EED_CAFE
        let seed = baseSeed ^ (config.sync == .single ? 0 : 1) ^ (config.big ? 2 : 0)
        var rng = SplitMix(seed: seed)
        let path = temporaryPath("crash-\(config.sync == .single ? "single" : "double")\(config.big ? "-big" : "")")
        defer { removeStoreFiles(path) }

        var last: UInt64 = 0  // the newest transaction the file held at the last check
        var printedTotal = 0
        var earlyKills = 0  // kills before the helper printed a commit
        var unpublished = 0  // kills that left a written but unpublished meta page behind
        // Every fourth cycle this process holds the file open, with a snapshot, from before the
        // helper starts until after the next helper is killed: the helper then opens a file another
        // process has open (no recovery at open), its crash leaves a live process behind, and the
        // snapshot must read the same bytes throughout.
        var held: (store: Store, snapshot: ReadTransaction, checksum: UInt64)?
        for cycle in 0..<kills {
            // Mostly while committing; every fifth kill early, during start-up and recovery.
            let delayMs = cycle % 5 == 4 ? rng.next() % 40 : 20 + rng.next() % (config.big ? 600 : 300)
            let context = "seed \(seed) (STRATA_CRASH_SEED=\(baseSeed)), cycle \(cycle), kill after \(delayMs) ms, file \(path)"
            if cycle % 4 == 2 && held == nil {
                let store = try Store(path: path)
                let snapshot = try store.beginRead()
                held = (store, snapshot, try helperChecksum(snapshot))
            }
            var arguments = ["commit-loop", path, "\(last + 1)", "--sync", config.sync == .single ? "single" : "double"]
            if config.big { arguments.append("--big") }
            let process = try HelperProcess(path: helper, arguments: arguments)
            var lines: [String] = []
            if cycle % 5 == 4 {
                try await process.kill(afterMilliseconds: Int(delayMs))
            } else {
                // Timed from its first line (the store open, any recovery done), so that the kill
                // lands among commits: on a loaded CI machine start-up alone has taken longer than
                // many of the delays, and a run of 20 kills saw only 17 commits printed.
                try await process.kill(afterFirstLineAndMilliseconds: Int(delayMs))
            }
            lines += try process.remainingLines()
            let errors = process.errorOutput()
            guard process.wasKilled else {
                Issue.record("helper exited by itself (status \(process.status)) before the kill: \(errors) — \(context)")
                return
            }
            // Its output: "resume L tag T", then "committed L+1", "committed L+2", ...
            var printed: UInt64?
            if let first = lines.first {
                let words = first.split(separator: " ")
                let resumed = words.count == 4 && words[0] == "resume" ? UInt64(words[1]) : nil
                guard let resumed else {
                    Issue.record("unexpected first line '\(first)' — \(context)")
                    return
                }
                #expect(resumed == last, "resumed at \(resumed) after \(last) — \(context)")
                var expected = resumed + 1
                for line in lines.dropFirst() {
                    guard line.hasPrefix("committed "), let n = UInt64(line.dropFirst("committed ".count)) else {
                        Issue.record("unexpected line '\(line)' — \(context)")
                        return
                    }
                    #expect(n == expected, "printed \(n), expected \(expected) — \(context)")
                    expected = n + 1
                    printed = n
                    printedTotal += 1
                }
            }
            if printed == nil { earlyKills += 1 }

            if let h = held {
                // Killed during its sync, the helper leaves a meta page newer than what the lock
                // file publishes; the next writer must spoil it (`discardUnpublishedMeta`).
                let env = h.store.env
                let latest = env.readers.latest
                if env.maps.current.base.u64(Int((latest + 1) % 2) * env.pageSize + PageHeader.txnid) > latest { unpublished += 1 }
                let again = try helperChecksum(h.snapshot)
                #expect(again == h.checksum, "a snapshot held across the crash changed — \(context)")
                if cycle % 4 == 3 {
                    h.snapshot.end()
                    held = nil
                }
            }
            let found = try verifyCrashStore(path: path, big: config.big, expectIdle: held == nil, context: context)
            #expect(found >= (printed ?? last), "transaction \(printed ?? last) was printed as committed but the file ends at \(found) — \(context)")
            #expect(found >= last, "the file went back from \(last) to \(found) — \(context)")
            last = found
        }
        held = nil
        // A last check with the file closed everywhere, so that opening runs recovery.
        let final = try verifyCrashStore(path: path, big: config.big, expectIdle: true, context: "final check, seed \(seed), file \(path)")
        #expect(final >= last)
        print(
            "CrashTests[\(config.testDescription)]: \(kills) kills, \(printedTotal) printed commits, \(final) transactions in the file, \(earlyKills) kills before the first commit, \(unpublished) unpublished commits left behind a live process"
        )
        #expect(printedTotal > kills, "too few commits between kills to prove anything — \(path)")
    }

    /// A writer that dies after writing its meta page but before publishing the commit in the lock
    /// file (SIGKILL during the sync) leaves a whole commit T+1 that a process which has the file
    /// open does not see. The next writer commits T+1 again, into the same meta slot and mostly
    /// the same pages; if it too dies, after its pages but before its meta page, its pages (same
    /// transaction id, valid checksums) complete the first commit's record, and the next open
    /// chose that meta page with trees pointing into the second writer's pages. The engine now
    /// spoils an unpublished meta page before a write begins (`discardUnpublishedMeta`).
    @Test func unpublishedCommitOfDeadWriterIsNotOverwritten() throws {
        let path = temporaryPath("unpublished")
        defer { removeStoreFiles(path) }
        func fill(_ tree: String, _ range: Range<Int>) -> [[UInt8]: [UInt8]] {
            var entries: [[UInt8]: [UInt8]] = [:]
            for i in range { entries[Array("\(tree)-\(i)".utf8)] = Array(repeating: UInt8(truncatingIfNeeded: i), count: 50 + i % 700) }
            return entries
        }
        // No idle compaction: its thread, holding the second handle as it looks, could keep that
        // environment (and its dead file) alive past the block, and the reopening below share it.
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = nil
        let base = fill("a", 0..<300)
        let orphan = fill("b", 0..<2000)  // the dead writer's commit: many pages
        let second = fill("c", 0..<3)  // the next writer's: a few
        var baseTxnid: UInt64 = 0
        do {
            let store = try Store(path: path, options: options)
            try store.write { txn in
                let t = try txn.createTree("t")
                for (k, v) in base { try t.put(k, v) }
            }
            baseTxnid = store.env.readers.latest
        }
        let dying = DyingFileBox()
        do {
            let store = try Store(path: path, options: options) { file in
                // The page file's: a `.noSync` run also opens the commit log (CommitLog.pin).
                if file.path.hasSuffix("-log") { return file }
                let wrapped = DyingFile(file, pageSize: Limits.defaultPageSize)
                dying.file = wrapped
                return wrapped
            }
            try store.write { txn in
                let t = try txn.createTree("t")
                for (k, v) in orphan { try t.put(k, v) }
            }
            #expect(store.env.readers.latest == baseTxnid + 1)
            // The writer of another process died here: its meta page is written, `latest` is not.
            store.env.readers.publish(latest: baseTxnid)
            #expect(try store.read { try $0.tree("t")?.count } == base.count)
            // The next writer dies after its pages, before its meta page reaches the file.
            dying.file?.dieAtMetaWrite()
            try store.write { txn in
                let t = try txn.createTree("t")
                for (k, v) in second { try t.put(k, v) }
            }
            dying.file = nil
        }
        // Reopen alone: recovery chooses the newest whole commit. Either the base state or the
        // first writer's complete commit is right; anything else is corruption.
        let store = try Store(path: path)
        let content = try store.read { txn -> [[UInt8]: [UInt8]] in
            var content: [[UInt8]: [UInt8]] = [:]
            guard let t = try txn.tree("t") else { return content }
            try t.forEach { k, v in
                content[Array(k)] = Array(v); return true
            }
            #expect(content.count == t.count)
            return content
        }
        let withOrphan = base.merging(orphan) { $1 }
        #expect(
            content == base || content == withOrphan,
            "reopened to \(content.count) keys (\(content.keys.filter { $0.first == UInt8(ascii: "c") }.count) of the dead second writer's), neither the base state (\(base.count)) nor the first writer's commit (\(withOrphan.count))"
        )
        let problems = storeCheckProblems(store)
        #expect(problems.isEmpty, "check: \(problems)")
    }
}

// MARK: Checking a crashed file

/// Opens the file, checks its structure and the crash workload's invariants, and returns the
/// newest transaction number it holds. `expectIdle`: no snapshot of any process is open.
func verifyCrashStore(path: String, big: Bool, expectIdle: Bool, context: String) throws -> UInt64 {
    let store = try Store(path: path)
    let problems = storeCheckProblems(store)
    #expect(problems.isEmpty, "check: \(problems) — \(context)")
    let last = try store.read { txn -> UInt64 in
        let names = try txn.treeNames()
        guard let meta = try txn.tree("meta") else {
            #expect(names.isEmpty, "trees \(names) without the meta tree — \(context)")
            return 0
        }
        #expect(names == ["data", "keep", "meta"], "trees \(names) — \(context)")
        #expect(meta.count == 1, "meta tree holds \(meta.count) entries — \(context)")
        guard let lastValue = try meta.get(Array("last".utf8)), lastValue.count == 16,
            let last = CrashWorkload.u64(lastValue), let lastTag = CrashWorkload.u64(lastValue, at: 8)
        else {
            throw CrashCheckFailure(description: "meta tree has no valid 'last' — \(context)")
        }
        // "keep": exactly 1...last, each whole; it records each transaction's tag.
        var tags: [UInt64] = [0]
        tags.reserveCapacity(Int(last) + 1)
        let keep = try #require(try txn.tree("keep"), "no keep tree — \(context)")
        var entries = 0
        var problems: [String] = []
        try keep.forEach { key, value in
            entries += 1
            let n = UInt64(entries)
            let tag = CrashWorkload.u64(Array(value), at: 8) ?? 0
            if Array(key) != CrashWorkload.keepKey(n) || Array(value) != CrashWorkload.value(n, 99, tag: tag, big: big) {
                problems.append("keep entry \(entries) is not transaction \(n)'s")
                return problems.count < 10
            }
            tags.append(tag)
            return true
        }
        #expect(problems.isEmpty, "\(problems) — \(context)")
        #expect(entries == keep.count, "keep tree counts \(keep.count) but holds \(entries) — \(context)")
        #expect(UInt64(entries) == last, "keep tree holds \(entries) transactions but last is \(last) (a partial transaction) — \(context)")
        if UInt64(entries) == last { #expect(tags[Int(last)] == lastTag, "'last' and keep entry \(last) come from different runs — \(context)") }
        // "data": the keys of exactly the last `window` transactions, written by the same run as
        // their keep entry.
        let data = try #require(try txn.tree("data"), "no data tree — \(context)")
        var expected: [(UInt64, Int)] = []
        let first = last > CrashWorkload.window ? last - CrashWorkload.window + 1 : 1
        for n in first...max(first, last) where n <= last {
            for j in 0..<CrashWorkload.keysPerTransaction { expected.append((n, j)) }
        }
        var index = 0
        try data.forEach { key, value in
            defer { index += 1 }
            guard index < expected.count else {
                problems.append("data key \(String(decoding: key, as: UTF8.self)) beyond the expected \(expected.count)")
                return false
            }
            let (n, j) = expected[index]
            if Array(key) != CrashWorkload.dataKey(n, j) {
                problems.append("data key \(String(decoding: key, as: UTF8.self)), expected \(String(decoding: CrashWorkload.dataKey(n, j), as: UTF8.self))")
                return false
            }
            let tag = Int(n) < tags.count ? tags[Int(n)] : 0
            if Array(value) != CrashWorkload.value(n, j, tag: tag, big: big) {
                let other = CrashWorkload.u64(Array(value), at: 8) ?? 0
                problems.append("value \(j) of transaction \(n) (\(value.count) bytes, tag \(other)) is not the one its keep entry's run wrote (tag \(tag))")
            }
            return problems.count < 10
        }
        #expect(problems.isEmpty, "\(problems) — \(context)")
        #expect(index == expected.count, "data tree holds \(index) keys, expected \(expected.count) — \(context)")
        #expect(data.count == expected.count, "data tree counts \(data.count), expected \(expected.count) — \(context)")
        return last
    }
    let stats = try store.stats()
    #expect(
        stats.fileSize >= stats.pageCount * UInt64(stats.pageSize), "file of \(stats.fileSize) bytes is shorter than its \(stats.pageCount) pages — \(context)")
    #expect(stats.freePages + stats.pendingPages <= stats.pageCount, "\(stats) — \(context)")
    if expectIdle {
        #expect(stats.pendingPages == 0, "pages pending with no reader open: \(stats.pendingHolders) — \(context)")
        #expect(store.readers().isEmpty, "reader slots left after the crash: \(store.readers()) — \(context)")
    }
    return last
}

/// `Store.check()` (what `strata check` runs): every page reached once, used or free, checksums,
/// key order, counts. Returns its problems, empty when the file is sound.
func storeCheckProblems(_ store: Store) -> [String] {
    do {
        let report = try store.check()
        if report.isOK { return [] }
        return report.problems.prefix(10).map(\.description) + (report.omittedProblems > 0 ? ["and \(report.omittedProblems) more"] : [])
    } catch {
        return ["check threw: \(error)"]
    }
}

/// FNV-1a over every tree name, key and value of a snapshot (the helper's `checksum`).
func helperChecksum(_ txn: ReadTransaction) throws -> UInt64 {
    var h: UInt64 = 0xCBF2_9CE4_8422_2325
    func add(_ bytes: UnsafeRawBufferPointer) {
        var length = UInt64(bytes.count)
        for _ in 0..<8 { h = (h ^ (length & 0xFF)) &* 0x100_0000_01B3; length >>= 8 }
        for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
    }
    for name in try txn.treeNames() {
        Array(name.utf8).withUnsafeBytes { add($0) }
        guard let tree = try txn.tree(name) else { throw CrashCheckFailure(description: "tree \(name) listed but missing") }
        try tree.forEach { key, value in
            add(key)
            add(value)
            return true
        }
    }
    return h
}

// MARK: A page file whose process "dies" at its next meta write

/// Passes everything through until `dieAtMetaWrite()`; from the next write to a meta page (page
/// 0 or 1) on, drops every write, sync and truncate, as if the process had been killed there.
final class DyingFile: ForwardingFile {
    let inner: any FileIO
    let pageSize: UInt64
    private let armed = Atomic<Bool>(false)
    private let dead = Atomic<Bool>(false)
    init(_ base: FileIO, pageSize: Int) {
        self.inner = base
        self.pageSize = UInt64(pageSize)
    }

    func dieAtMetaWrite() { armed.store(true, ordering: .sequentiallyConsistent) }

    /// Whether writes still reach the file, dying first if this one is an armed write of a meta
    /// page (spoiling one with zeros is not a commit: it passes).
    private func alive(writingAt offset: UInt64, _ bytes: UnsafeRawBufferPointer) -> Bool {
        if armed.load(ordering: .sequentiallyConsistent) && offset < 2 * pageSize && bytes.contains(where: { $0 != 0 }) {
            dead.store(true, ordering: .sequentiallyConsistent)
        }
        return !dead.load(ordering: .sequentiallyConsistent)
    }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        if alive(writingAt: offset, bytes) { try inner.write(bytes, at: offset) }
    }
    func write(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        if alive(writingAt: offset, buffers[0]) { try inner.write(buffers, at: offset) }
    }
    func sync() throws { if !dead.load(ordering: .sequentiallyConsistent) { try inner.sync() } }
    func truncate(to length: UInt64) throws { if !dead.load(ordering: .sequentiallyConsistent) { try inner.truncate(to: length) } }
}

/// Lets the test reach the wrapper `Store` creates.
final class DyingFileBox: Sendable {
    private let slot = Mutex<DyingFile?>(nil)
    var file: DyingFile? {
        get { slot.withLock { $0 } }
        set { slot.withLock { $0 = newValue } }
    }
}

// MARK: Helper processes (shared with MultiProcessTests.swift)

struct HelperProcessError: Error, CustomStringConvertible {
    var description: String
}

/// The StrataTestHelper executable. The test target depends on it, so SwiftPM builds it into the
/// same directory as the test bundle.
func strataTestHelperPath() throws -> String {
    var directories: [String] = []
    if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
        directories.append(URL(fileURLWithPath: exe).deletingLastPathComponent().path)
    }
    if let arg0 = CommandLine.arguments.first {
        directories.append(URL(fileURLWithPath: arg0).deletingLastPathComponent().path)
    }
    let bundle = Bundle.main.bundleURL
    directories.append(bundle.path)
    directories.append(bundle.deletingLastPathComponent().path)
    for b in Bundle.allBundles where b.bundleURL.pathExtension == "xctest" {
        directories.append(b.bundleURL.deletingLastPathComponent().path)
    }
    directories.append(FileManager.default.currentDirectoryPath + "/.build/debug")
    for directory in directories {
        let candidate = directory + "/StrataTestHelper"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    throw HelperProcessError(
        description: "StrataTestHelper not found in \(directories); it is built with the test target (`swift build --product StrataTestHelper`)")
}

/// A running helper process with pipes on its standard streams. Waiting is done with
/// `Task.sleep`, so a test waiting on a helper does not hold a thread of the shared pool.
final class HelperProcess {
    /// Spawned and reaped without Foundation's `Process`, whose death notice another test's child
    /// can hold up (see SpawnedProcess.swift).
    let process: SpawnedProcess
    let arguments: [String]
    private var buffer: [UInt8] = []
    private var atEnd = false
    private var killed = false

    init(path: String, arguments: [String]) throws {
        self.arguments = arguments
        process = try SpawnedProcess(executable: path, arguments: arguments)
    }

    var pid: Int32 { process.pid }

    /// A helper committing durably in a loop (`commit-loop`) on a new store at `path`, once it has
    /// made its first commit. The caller kills it (`process.send(SIGKILL)`).
    static func commitLoop(on path: String) async throws -> HelperProcess {
        try Store(path: path).close()
        let writer = try HelperProcess(path: try strataTestHelperPath(), arguments: ["commit-loop", path, "1"])
        #expect(try await writer.readLine()?.hasPrefix("resume") == true)
        _ = try await writer.readLine()
        return writer
    }

    /// The next line of its output; nil at the end. Throws after `timeout` seconds without one.
    func readLine(timeout: Double = 60) async throws -> String? {
        let fd = process.outputFD
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let newline = buffer.firstIndex(of: 10) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                return line
            }
            if atEnd {
                if buffer.isEmpty { return nil }
                defer { buffer.removeAll() }
                return String(decoding: buffer, as: UTF8.self)
            }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&p, 1, 0)
            if ready < 0 && errno != EINTR { throw HelperProcessError(description: "poll failed: errno \(errno)") }
            if ready <= 0 {
                if Date() > deadline { throw HelperProcessError(description: "no output from helper \(arguments) within \(timeout) s") }
                try await Task.sleep(for: .milliseconds(2))
                continue
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = chunk.withUnsafeMutableBytes { systemRead(fd, $0.baseAddress!, $0.count) }
            if n > 0 {
                buffer.append(contentsOf: chunk[..<n])
            } else if n == 0 {
                atEnd = true
            } else if errno != EINTR && errno != EAGAIN {
                throw HelperProcessError(description: "read failed: errno \(errno)")
            }
        }
    }

    /// Every line it printed that was not read yet; call once it has exited. Reads what the pipe
    /// holds without waiting for its end, which a descendant that inherited it could keep open.
    func remainingLines() throws -> [String] {
        buffer.append(contentsOf: try HelperProcess.drain(process.outputFD))
        atEnd = true
        var lines: [String] = []
        while let newline = buffer.firstIndex(of: 10) {
            lines.append(String(decoding: buffer[..<newline], as: UTF8.self))
            buffer.removeSubrange(...newline)
        }
        if !buffer.isEmpty { lines.append(String(decoding: buffer, as: UTF8.self)) }
        buffer.removeAll()
        return lines
    }

    /// What it wrote to standard error; call once it has exited.
    func errorOutput() -> String {
        String(decoding: (try? HelperProcess.drain(process.errorFD)) ?? [], as: UTF8.self)
    }

    /// The bytes a pipe holds now.
    private static func drain(_ fd: Int32) throws -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&p, 1, 0)
            if ready < 0 && errno == EINTR { continue }
            if ready <= 0 { return bytes }
            let n = chunk.withUnsafeMutableBytes { systemRead(fd, $0.baseAddress!, $0.count) }
            if n > 0 {
                bytes.append(contentsOf: chunk[..<n])
            } else if n == 0 {
                return bytes
            } else if errno != EINTR && errno != EAGAIN {
                throw HelperProcessError(description: "read failed: errno \(errno)")
            }
        }
    }

    func send(_ line: String) {
        var bytes = Array((line + "\n").utf8)
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeMutableBytes { write(process.inputFD, $0.baseAddress! + written, $0.count - written) }
            if n > 0 {
                written += n
            } else if n < 0 && errno != EINTR {
                return  // it has exited: what it reads no longer matters
            }
        }
    }

    /// SIGKILL, then wait until it is reaped (so that its pid no longer exists).
    func kill() async throws {
        killed = true
        process.send(SIGKILL)
        try await waitForExit()
    }

    /// SIGKILL after `milliseconds`, timed on a thread of its own so that the moment does not
    /// depend on when this test's task next gets a thread of the (possibly busy) shared pool; then
    /// wait until it is reaped. Not on Dispatch's global queue: on Linux that is the same pool,
    /// and long synchronous tests on both cores once kept it busy for a minute.
    func kill(afterMilliseconds milliseconds: Int) async throws {
        killed = true
        // (It only exits by itself on a failure; a reaped pid, which may be reused, is not signalled.)
        process.kill(afterMicroseconds: max(0, milliseconds) * 1_000)
        try await waitForExit(timeout: Double(milliseconds) / 1000 + 60)
    }

    /// SIGKILL `milliseconds` after its first line of output, both timed on a thread of its own:
    /// awaiting the line on the shared pool let a loaded run's helpers commit for many seconds
    /// before the timer even began (CI: thousands of commits a kill instead of tens, minutes of
    /// suite time). Then wait until it is reaped. What the thread read stays for
    /// `remainingLines`. If it ends without a line (a failure), the thread sends nothing.
    func kill(afterFirstLineAndMilliseconds milliseconds: Int) async throws {
        killed = true
        let fd = process.outputFD
        let spawned = process
        let handoff = FirstLineHandoff()
        Thread {
            var bytes: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 65536)
            let deadline = Date().addingTimeInterval(120)
            var ended = false
            while !bytes.contains(10) && !ended && Date() < deadline {
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&p, 1, 10) > 0 else { continue }
                let n = chunk.withUnsafeMutableBytes { systemRead(fd, $0.baseAddress!, $0.count) }
                if n > 0 { bytes.append(contentsOf: chunk[..<n]) } else if n == 0 || (errno != EINTR && errno != EAGAIN) { ended = true }
            }
            handoff.bytes.withLock { $0 = bytes }
            if ended { return }
            usleep(useconds_t(max(0, milliseconds) * 1_000))
            spawned.send(SIGKILL)
        }.start()
        try await waitForExit(timeout: Double(milliseconds) / 1000 + 180)
        // (Set before the SIGKILL, or before the thread gave up on a helper that had ended.)
        buffer.append(contentsOf: handoff.bytes.withLock { $0 })
    }

    /// Waits for it to exit and returns its status; throws after `timeout` seconds (and kills it).
    @discardableResult
    func waitForExit(timeout: Double = 60) async throws -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning {
            if Date() > deadline {
                process.send(SIGKILL)
                throw HelperProcessError(description: "helper \(arguments) did not exit within \(timeout) s")
            }
            try await Task.sleep(for: .milliseconds(2))
        }
        return process.exitCode ?? process.terminatingSignal ?? -1
    }

    /// Whether it died of our SIGKILL (rather than exiting by itself first).
    var wasKilled: Bool {
        killed && process.terminatingSignal == SIGKILL
    }

    /// Whether it exited normally with status 0.
    var succeeded: Bool {
        process.exitCode == 0
    }

    /// How it ended, for messages.
    var status: String {
        process.statusDescription
    }
}

/// The bytes a kill's timer thread read before it began to count.
private final class FirstLineHandoff: Sendable {
    let bytes = Mutex<[UInt8]>([])
}

#if canImport(Glibc)
private let systemRead = Glibc.read
#elseif canImport(Darwin)
private let systemRead = Darwin.read
#endif
