import Testing
import Foundation
import Dispatch
import Strata
import StrataTestWorkloads

// Crash safety at the object layer, through the public API only: StrataTestHelper objects-torture
// commits seeded transactions of `KillItem`s (KillWorkload.swift: inserts, updates of indexed and
// full-text fields, deletes, delete(where:), unique clashes, savepoints, nested writes and
// compositions that roll back, big transactions spilled through a 64-page transaction memory,
// async batches that commit as groups, compact(), idle-time compaction) and is killed with SIGKILL
// at random moments: any time, early (opening and recovery), or just after it announced a big
// transaction, a compaction, an idle pause or an async batch. After every kill the file is opened
// and checked against a replay of the workload: each writer is at its last acknowledged
// transaction or one it had begun (never older, never a mix), every object is what the replay
// holds, every index answers as a plain filter over the objects does (the full-text index as a
// plain split of the texts), no two objects share a code, and `store.check()` and
// `StoredObjects.check` find nothing. Some cycles hold a snapshot open in this process across the
// kill (it must read the same objects after, and the file is checked through that handle), some
// run two writer processes at once, each with its own objects, killed one after the other; in
// some the first to open the file after the kill is read-only, in some `strata check` must pass.
// A second test kills a process while its opening migrates every object and builds or drops
// indexes, and checks that the migration then applies exactly once.
//
// Knobs: STRATA_OBJECT_KILLS (cycles, default 10), STRATA_OBJECT_SEED (default 0x0B1EC7),
// STRATA_OBJECT_BIG (objects of a big transaction, default 300), STRATA_OBJECT_MIGRATIONS
// (migrating openings killed, default 5), STRATA_OBJECT_KEEP=1 keeps the file.

/// A helper process whose output is read without blocking.
private final class TortureChild {
    let writer: Int
    let process: SpawnedProcess
    private var buffer: [UInt8] = []
    private(set) var lines: [String] = []
    private var killed = false

    init(writer: Int, arguments: [String]) throws {
        self.writer = writer
        process = try SpawnedProcess(executable: try XProcChild.helperPath(), arguments: arguments)
    }

    /// Reads what the pipe holds now into `lines`.
    func pump() {
        let fd = process.outputFD
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, 0) > 0 else { break }
            let n = chunk.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress!, $0.count) }
            if n <= 0 { break }
            buffer.append(contentsOf: chunk[..<n])
        }
        while let newline = buffer.firstIndex(of: 10) {
            lines.append(String(decoding: buffer[..<newline], as: UTF8.self))
            buffer.removeSubrange(...newline)
        }
    }

    func kill() {
        killed = true
        process.send(SIGKILL)
    }

    func kill(afterMicroseconds delay: Int) {
        killed = true
        process.kill(afterMicroseconds: delay)
    }

    var wasKilled: Bool { killed && process.terminatingSignal == SIGKILL }
    var status: String { process.statusDescription }
    var errorText: String {
        let fd = process.errorFD
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, 0) > 0 else { return "" }
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let n = chunk.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress!, $0.count) }
        return n > 0 ? String(decoding: chunk[..<n], as: UTF8.self) : ""
    }
}

/// The children of one cycle, handed to the thread that supervises them.
///
/// `@unchecked Sendable`: the test's task creates the children, passes them here and awaits the
/// supervising thread before it touches them again (`supervise`), so one thread at a time uses
/// them; the await orders the thread's work before the task's.
private struct TortureChildren: @unchecked Sendable {
    let children: [TortureChild]
    init(_ children: [TortureChild]) { self.children = children }
}

private struct TortureFailure: Error, CustomStringConvertible {
    let description: String
}

/// The parent's side: a replay of every writer, and the checks after a kill.
private final class TortureRun {
    let path: String
    let seed: UInt64
    let bigSize: Int
    var states: [Int: KillState] = [0: KillState(writer: 0), 1: KillState(writer: 1)]
    /// Digests the children printed with their acknowledgements, checked when the replay passes.
    var acked: [Int: [Int: UInt64]] = [0: [:], 1: [:]]
    var checkRandom: KillRandom
    /// The newest transaction a killed writer had begun, when the file was checked through a
    /// handle kept open across the kill and did not show it: the writer may have written its
    /// commit whole but died before publishing it to the processes that have the file open. They
    /// go on without it; once none has the file open, the next opening finds it whole and uses it
    /// (unless a writer spoiled it first: `discardUnpublishedMeta`). Allowed, as for any commit
    /// in flight at a crash; counted in `resurrected`.
    var unpublished: [Int: Int] = [:]
    var resurrected = 0
    var acknowledged = 0
    var replayed = 0
    var objectsChecked = 0

    init(path: String, seed: UInt64, bigSize: Int) {
        self.path = path
        self.seed = seed
        self.bigSize = bigSize
        checkRandom = KillRandom(seed: seed ^ 0xC4EC)
    }

    /// Reads a killed child's lines: its acknowledgements and the newest transaction it began.
    func collect(_ child: TortureChild, context: String) throws -> (acked: Int?, begun: Int?) {
        var ack: Int?
        var begun: Int?
        for line in child.lines {
            let words = line.split(separator: " ").map(String.init)
            if words.first == "mark" { continue }
            guard words.count >= 3, Int(words[1]) == child.writer, let n = Int(words[2]) else {
                throw TortureFailure(description: "unexpected line '\(line)' — \(context)")
            }
            switch words[0] {
            case "resume":
                let checked = states[child.writer]!.seq
                if n < checked || n > max(checked, unpublished[child.writer] ?? 0) {
                    throw TortureFailure(description: "writer \(child.writer) resumed at \(n), the file was checked at \(checked) — \(context)")
                }
            case "begin": begun = max(begun ?? 0, n)
            case "ack":
                guard words.count == 4, let digest = UInt64(words[3]) else { throw TortureFailure(description: "bad line '\(line)' — \(context)") }
                ack = max(ack ?? 0, n)
                acked[child.writer]![n] = digest
                acknowledged += 1
            default: throw TortureFailure(description: "unexpected line '\(line)' — \(context)")
            }
        }
        return (ack, begun)
    }

    /// Checks the newest commit of `db` after the kill of writers whose acknowledged and begun
    /// transactions are given, and advances the replay to it.
    func verify(_ db: Database, bounds: [Int: (acked: Int?, begun: Int?)], liveHandle: Bool, context: String) throws {
        try db.read { snapshot in
            for writer in [0, 1] {
                let found = try snapshot.object(KillMeta.self, key: writer)?.seq ?? 0
                let previous = states[writer]!.seq
                let acked = bounds[writer]?.acked ?? previous
                let begun = max(bounds[writer]?.begun ?? previous, previous, unpublished[writer] ?? 0)
                guard found >= previous else {
                    throw TortureFailure(description: "writer \(writer) went back from \(previous) to \(found) — \(context)")
                }
                guard found >= acked else {
                    throw TortureFailure(description: "writer \(writer): transaction \(acked) was acknowledged, the file holds \(found) — \(context)")
                }
                guard found <= begun else {
                    throw TortureFailure(description: "writer \(writer): the file holds \(found), only \(begun) was begun — \(context)")
                }
                if found > max(acked, previous, bounds[writer]?.begun ?? 0) { resurrected += 1 }
                if liveHandle, let newest = bounds[writer]?.begun, found < newest {
                    unpublished[writer] = max(unpublished[writer] ?? 0, newest)
                } else if !liveHandle || found >= unpublished[writer] ?? 0 {
                    unpublished[writer] = nil
                }
                var state = states[writer]!
                while state.seq < found {
                    let txn = KillWorkload.transaction(seed: seed, state: state, bigSize: bigSize)
                    state.apply(txn)
                    replayed += 1
                    if let digest = ackDigest(writer, state.seq), digest != state.digest {
                        throw TortureFailure(
                            description:
                                "writer \(writer): transaction \(state.seq) acknowledged with digest \(digest), the replay gives \(state.digest) — \(context)")
                    }
                }
                states[writer] = state
                let meta = try snapshot.object(KillMeta.self, key: writer)
                if found > 0, meta?.digest != state.digest || meta?.count != state.objects.count {
                    throw TortureFailure(description: "writer \(writer) at \(found): the meta does not match the replay — \(context)")
                }
            }
            var expected: [Int: KillItem] = [:]
            for state in states.values { expected.merge(state.objects) { a, _ in a } }
            objectsChecked += expected.count
            let problems = try KillWorkload.check(snapshot, expected: expected, rng: &checkRandom)
            if !problems.isEmpty {
                throw TortureFailure(description: "after the kill: \(problems.joined(separator: "; ")) — \(context)")
            }
        }
        let report = try db.store.check()
        if !report.isOK { throw TortureFailure(description: "store.check(): \(report.problems.prefix(10)) — \(context)") }
        let objects = try StoredObjects.check(in: db.store)
        if !objects.problems.isEmpty { throw TortureFailure(description: "StoredObjects.check: \(objects.problems.prefix(10)) — \(context)") }
    }

    private func ackDigest(_ writer: Int, _ seq: Int) -> UInt64? { acked[writer]![seq] }
}

@Suite struct ObjectKillTests {
    /// Options of the checking process: no idle compaction of its own.
    static var checkingOptions: StoreOptions {
        var options = StoreOptions()
        options.compaction.idleDelay = nil
        return options
    }

    /// The `strata` tool, built with the tests.
    static func toolPath() -> String? {
        guard let helper = try? XProcChild.helperPath() else { return nil }
        let tool = URL(fileURLWithPath: helper).deletingLastPathComponent().appendingPathComponent("strata").path
        return FileManager.default.isExecutableFile(atPath: tool) ? tool : nil
    }

    static func runTool(_ tool: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// Waits for the moment to kill the first child, kills the children, and waits until they
    /// have ended, on a thread of its own: the test's task and Dispatch's global queue share one
    /// pool on Linux, and long synchronous tests on both cores kept it busy for a minute, so that
    /// a child meant to die 6 s in ran for 60 (CI). Returns the moment's label (with "(not seen)"
    /// when the child did not announce it within 6 s), notes about children slow to end, and
    /// whether one still ran after 300 s.
    private static func supervise(
        _ box: TortureChildren, moment: String, delay: Int, secondDelay: Int?, context: String
    ) async -> (label: String, notes: [String], timedOut: Bool) {
        await withCheckedContinuation { continuation in
            let thread = Thread {
                let children = box.children
                let first = children[0]
                let started = Date()
                var label = moment
                if moment != "early" && moment != "any" {
                    // Wait for the announcement (at most a few seconds), then kill soon after it.
                    var seen = false
                    while !seen && Date().timeIntervalSince(started) < 6 && first.process.isRunning {
                        for child in children { child.pump() }
                        seen = first.lines.contains { $0.hasPrefix("mark \(moment) ") }
                        if !seen { usleep(1_000) }
                    }
                    if !seen { label = "\(moment) (not seen)" }
                }
                first.kill(afterMicroseconds: delay)
                if let secondDelay { children[1].kill(afterMicroseconds: secondDelay) }
                var notes: [String] = []
                var timedOut = false
                while children.contains(where: { $0.process.isRunning }) {
                    for child in children { child.pump() }
                    let waited = Date().timeIntervalSince(started)
                    if waited > 60 && notes.isEmpty {
                        // A child sent SIGKILL dies when it leaves the kernel: one blocked in a
                        // sync behind other tests' writes on a slow disk may take a while. Say
                        // what each was doing, and fail only if it does not end even then.
                        for child in children {
                            let sent = child.process.firstSignal.map { "SIGKILL sent \(Int(Date().timeIntervalSince($0))) s ago" } ?? "no signal sent"
                            notes.append(
                                "ObjectKillTests: writer \(child.writer) still running after 60 s (\(sent); \(child.process.kernelState)) — \(context)")
                        }
                        for child in children { child.kill() }
                    }
                    if waited > 300 {
                        timedOut = true
                        break
                    }
                    usleep(2_000)
                }
                continuation.resume(returning: (label, notes, timedOut))
            }
            thread.start()
        }
    }

    @Test func killedObjectWritersLoseNothingAndIndexesStayWhole() async throws {
        let environment = ProcessInfo.processInfo.environment
        let kills = Int(environment["STRATA_OBJECT_KILLS"] ?? "") ?? 10
        let seed = UInt64(environment["STRATA_OBJECT_SEED"] ?? "") ?? 0x0B1E_C7
        let bigSize = Int(environment["STRATA_OBJECT_BIG"] ?? "") ?? 300
        let path = NSTemporaryDirectory() + "strata-objkill-\(UUID().uuidString).strata"
        defer {
            if environment["STRATA_OBJECT_KEEP"] == nil {
                try? FileManager.default.removeItem(atPath: path)
                try? FileManager.default.removeItem(atPath: path + "-lock")
            }
        }
        let run = TortureRun(path: path, seed: seed, bigSize: bigSize)
        var rng = KillRandom(seed: seed ^ 0x5EED)
        var moments: [String: Int] = [:]
        var held = 0
        for cycle in 0..<kills {
            let twoWriters = cycle % 5 == 4
            let holdSnapshot = cycle % 3 == 2
            let idle = [nil, 10, 30, 150][rng.below(4)]
            let memory = rng.percent(80) ? 0 : 1 << 20
            let context = "seed \(seed) (STRATA_OBJECT_SEED), cycle \(cycle), file \(path)"
            // A snapshot held in this process from before the writers start until after the check.
            var holder: (db: Database, snapshot: Snapshot, objects: [KillItem])?
            if holdSnapshot {
                let db = try Database(path: path, models: [KillItem.self, KillMeta.self], options: Self.checkingOptions)
                let snapshot = try db.snapshot()
                holder = (db, snapshot, try snapshot.objects(KillItem.self).fetch())
                held += 1
            }
            let children = try (twoWriters ? [0, 1] : [0]).map { writer in
                try TortureChild(
                    writer: writer,
                    arguments: [
                        "objects-torture", path, "\(writer)", "\(seed)", "--big", "\(bigSize)", "--idle-ms", idle.map { "\($0)" } ?? "off", "--memory",
                        "\(memory)",
                    ])
            }
            // When to kill the first child: a moment it announces, then a delay (drawn here, in
            // the seed's order; the moment is waited for on a thread of its own).
            let moment = ["any", "early", "big", "compact", "idle", "async"][rng.below(6)]
            let delay =
                switch moment {
                case "early": rng.below(60_000)
                case "any": 20_000 + rng.below(900_000)
                case "big": rng.below(1_500_000)
                case "compact": rng.below(40_000)
                case "idle": (idle ?? 0) * 1_000 + rng.below(150_000)
                default: rng.below(30_000)
                }
            // The other writer goes on a little longer, alone with the dead one's leftovers.
            let secondDelay = twoWriters ? 50_000 + rng.below(500_000) : nil
            let outcome = await Self.supervise(
                TortureChildren(children), moment: moment, delay: delay, secondDelay: secondDelay, context: context)
            for line in outcome.notes { print(line) }
            if outcome.timedOut { Issue.record("a child was still running after 300 s — \(context)") }
            let label = outcome.label
            moments[label, default: 0] += 1
            var bounds: [Int: (acked: Int?, begun: Int?)] = [:]
            for child in children {
                child.pump()
                guard child.wasKilled else {
                    Issue.record("writer \(child.writer) ended by itself (\(child.status)): \(child.errorText) — \(context)")
                    return
                }
                bounds[child.writer] = try run.collect(child, context: "\(context), killed at \(label)")
            }
            if let holder {
                let again = try holder.snapshot.objects(KillItem.self).fetch()
                #expect(again == holder.objects, "a snapshot held across the kill changed — \(context)")
                // Checked through the handle this process kept open (no recovery at open).
                try run.verify(holder.db, bounds: bounds, liveHandle: true, context: "\(context), killed at \(label), checked by the open handle")
                holder.db.close()
            } else {
                if cycle % 4 == 1 {
                    // The first to open the file after the crash is read-only: it must pick the
                    // same commit, changing nothing.
                    let store = try Store(path: path, options: StoreOptions(readOnly: true))
                    let db = try Database(store: store, models: [KillItem.self, KillMeta.self])
                    try run.verify(db, bounds: bounds, liveHandle: false, context: "\(context), killed at \(label), opened read-only")
                    db.close()
                }
                if cycle % 4 == 3, let tool = Self.toolPath() {
                    let (status, output) = try Self.runTool(tool, ["check", path])
                    #expect(status == 0, "strata check: \(output) — \(context)")
                }
                let db = try Database(path: path, models: [KillItem.self, KillMeta.self], options: Self.checkingOptions)
                try run.verify(db, bounds: bounds, liveHandle: false, context: "\(context), killed at \(label)")
                db.close()
            }
            if kills >= 50 && cycle % 25 == 24 {
                print(
                    "ObjectKillTests: cycle \(cycle + 1) of \(kills), \(run.acknowledged) acknowledged, writers at \(run.states[0]!.seq) and \(run.states[1]!.seq)"
                )
            }
        }
        let db = try Database(path: path, models: [KillItem.self, KillMeta.self], options: Self.checkingOptions)
        try run.verify(db, bounds: [:], liveHandle: false, context: "final check, seed \(seed)")
        db.close()
        print(
            "ObjectKillTests: \(kills) cycles (\(held) with a snapshot held), \(run.resurrected) unpublished commits found at a later opening, \(run.acknowledged) acknowledged transactions, \(run.replayed) replayed; writers at \(run.states[0]!.seq) and \(run.states[1]!.seq) with \(run.states[0]!.objects.count + run.states[1]!.objects.count) objects; \(run.objectsChecked) object checks; kills: \(moments.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))"
        )
        #expect(run.acknowledged > kills, "too few acknowledged transactions to prove anything — \(path)")
    }

    /// Another process that migrates the file (a newer version of the app, say) changes the
    /// stored schema under this process's open handle: the handle's next read and write fail
    /// with `migrationRequired` naming the model, instead of planning with what it read at open.
    @Test func aMigrationInAnotherProcessStopsThisProcessHandle() async throws {
        let path = NSTemporaryDirectory() + "strata-objschema-\(UUID().uuidString).strata"
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        let db = try KillWorkload.openMigrating(path: path, version: 1, options: StoreOptions(durability: .noSync))
        defer { db.close() }
        #expect(db.objects(KillItemMore.self).error == nil)
        let before = try db.snapshot()
        let child = try TortureChild(writer: 0, arguments: ["objects-migrate", path, "2"])
        let started = Date()
        while child.process.isRunning {
            child.pump()
            if Date().timeIntervalSince(started) > 120 {
                child.kill()
                Issue.record("the migrating process did not end in 120 s")
            }
            try await Task.sleep(for: .milliseconds(2))
        }
        child.pump()
        #expect(child.lines.contains("opened 2"), "\(child.status): \(child.errorText)")
        guard case .migrationRequired(let reasons)? = db.objects(KillItemMore.self).error else {
            Issue.record("the handle read on after another process migrated the file")
            return
        }
        #expect(reasons.first?.hasPrefix("KillItem: its stored schema was changed by another Database handle") == true, "\(reasons)")
        #expect(throws: StrataError.self) { try db.write { tx in try tx.deleteAll(KillItemMore.self) } }
        // What was read before the migration still reads.
        #expect(before.objects(KillItemMore.self).error == nil)
    }

    /// Opening a file migrates it (every object's rank and tag change) and builds or drops two
    /// indexes, in the opening transaction; the opening process is killed at a random moment of
    /// it. Reopened at the same version, the file must hold every object migrated exactly as
    /// many times as versions were opened — never twice for one version, never some objects
    /// only — with every index in agreement.
    @Test func killedWhileOpeningMigratesOnceAndBuildsIndexesWhole() async throws {
        let environment = ProcessInfo.processInfo.environment
        let versions = Int(environment["STRATA_OBJECT_MIGRATIONS"] ?? "") ?? 5
        let seed = UInt64(environment["STRATA_OBJECT_SEED"] ?? "") ?? 0x0B1E_C7
        let path = NSTemporaryDirectory() + "strata-objmigrate-\(UUID().uuidString).strata"
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        var state = KillState(writer: 0)
        while state.objects.count < 600 { state.apply(KillWorkload.transaction(seed: seed, state: state, bigSize: 800)) }
        let base = state.objects
        do {
            let db = try Database(path: path, models: [KillItem.self], options: StoreOptions(durability: .noSync))
            let objects = base.values.sorted { $0.id < $1.id }
            try await db.write { tx in _ = try tx.insert(contentsOf: objects) }
            db.close()
        }
        var rng = KillRandom(seed: seed ^ 0x3161)
        var opening = 2.0  // seconds an opening took, measured by the first
        var killed = 0
        for version in 1...versions {
            let context = "seed \(seed) (STRATA_OBJECT_SEED), version \(version), file \(path)"
            let child = try TortureChild(writer: 0, arguments: ["objects-migrate", path, "\(version)"])
            let started = Date()
            if version > 1 { child.kill(afterMicroseconds: rng.below(Int(opening * 1_300_000))) }
            while child.process.isRunning {
                child.pump()
                if Date().timeIntervalSince(started) > 120 {
                    child.kill()
                    Issue.record("the opening did not end in 120 s — \(context)")
                }
                try await Task.sleep(for: .milliseconds(2))
            }
            child.pump()
            let opened = child.lines.contains("opened \(version)")
            if version == 1 { opening = Date().timeIntervalSince(started) }
            if child.wasKilled { killed += 1 }
            guard opened || child.wasKilled else {
                Issue.record("the opening failed (\(child.status)): \(child.errorText) — \(context)")
                return
            }
            // Reopened at the same version: migrated now if the killed opening did not commit.
            let db = try KillWorkload.openMigrating(path: path, version: version, options: Self.checkingOptions)
            defer { db.close() }
            let expected = base.mapValues { KillWorkload.migrated($0, times: version) }
            let want = expected.values.sorted { $0.id < $1.id }
            if version % 2 == 1 {
                let all = db.objects(KillItemMore.self)
                let stored = try all.fetch().map(\.plain)
                let shifts = Set(stored.compactMap { item in base[item.id].map { (item.rank - $0.rank + KillWorkload.ranks) % KillWorkload.ranks } })
                #expect(stored == want, "objects differ from \(version) migrations (rank shifts found: \(shifts.sorted())) — \(context)")
                for _ in 0..<5 {
                    let low = rng.below(KillWorkload.ranks)
                    let high = low + 100
                    let found = try all.filter(#Predicate { $0.owner == 0 && $0.rank >= low && $0.rank < high }).fetch().map(\.id).sorted()
                    #expect(found == want.filter { $0.rank >= low && $0.rank < high }.map(\.id), "owner 0, \(low) <= rank < \(high) — \(context)")
                }
                let notes = try all.search(\.note, "note").fetch().map(\.id).sorted()
                #expect(notes == want.filter { KillWorkload.words($0.note).contains("note") }.map(\.id), "search of notes — \(context)")
            } else {
                let problems = try KillWorkload.check(try db.snapshot(), expected: expected, rng: &rng)
                #expect(problems.isEmpty, "\(problems) — \(context)")
            }
            let report = try db.store.check()
            #expect(report.isOK, "store.check(): \(report.problems.prefix(10)) — \(context)")
            let objects = try StoredObjects.check(in: db.store)
            #expect(objects.problems.isEmpty, "StoredObjects.check: \(objects.problems.prefix(10)) — \(context)")
        }
        print("ObjectKillTests: \(versions) migrating openings of \(base.count) objects, \(killed) killed (an opening took \(opening) s)")
    }
}
