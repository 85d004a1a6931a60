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
//   StrataTestHelper objects-writer FILE SEED COUNT [--gate] [--compacting]
//       Opens FILE as a `Database` of `SharedNote`s (StrataTestWorkloads/ObjectWorkload.swift) and
//       commits COUNT transactions of `ObjectWorkload.operations(seed: SEED, index: i, ...)`,
//       generated from the notes with ids below 100,000 it finds at open and its own writes since
//       (other processes may write notes from 100,000 up meanwhile). With --gate, prints "ready"
//       and waits for a line on stdin first. With --compacting, compacts tightly, calls
//       `store.compact()` every 10 transactions and pauses for idle compaction every 7. Prints
//       "done COUNT" at the end.
//   StrataTestHelper objects-churn FILE
//       Opens FILE as a `Database` of `ChurnItem`s (StrataTestWorkloads/ChurnWorkload.swift), prints
//       "ready", then commits round after round (`.noSync`), each rewriting every object, until
//       killed. Rounds continue from the one the store holds.
//   StrataTestHelper objects-set-score FILE ID SCORE
//       Sets the score of `SharedNote` ID (one transaction) and prints "done".
//   StrataTestHelper objects-torture FILE WRITER SEED [--big N] [--idle-ms MS|off] [--memory BYTES]
//       Opens FILE as a `Database` of `KillItem`s and `KillMeta`s (StrataTestWorkloads/
//       KillWorkload.swift) with `.full` durability and the given transaction memory (default 0:
//       the 64-page minimum, so big transactions spill) and idle-compaction delay (default 50 ms),
//       checks that writer WRITER's objects give the digest its meta records, prints "resume WRITER
//       SEQ", then commits the writer's seeded transactions SEQ+1, SEQ+2, ... until killed: through
//       `write` (now and then `.noSync`), `run(DBWrite)` and batches of `writeAsync` (group commit);
//       between them now and then `store.compact()`, an idle pause (background compaction) or a
//       write that throws at its end. Prints "begin WRITER N" before transaction N (or before a
//       batch ending at N) and "ack WRITER N DIGEST" once it returned; "mark big|compact|idle|async
//       ..." before the moments worth a kill. Exits 3 when the store contradicts the workload.
//   StrataTestHelper objects-migrate FILE VERSION
//       Opens FILE with `KillWorkload.openMigrating` at schema VERSION (building or dropping two
//       indexes, and migrating every `KillItem` when the stored version is below) and prints
//       "opened VERSION".
//   StrataTestHelper die-in-write FILE
//       Begins a write transaction, puts keys "dead/0" ... "dead/9" in tree "w", prints "in-write"
//       and waits inside the transaction until killed: a writer that dies mid-transaction.
//   StrataTestHelper damage-probe FILE kv|objects
//       Runs `DamageWorkload.probe` on a (damaged) file: opens it read-only and read-write, reads
//       every tree both ways, queries the object layer (objects), writes, compacts; prints one
//       "step NAME ok|error ..." line per step and "done". Exits 0 whatever the steps threw: the
//       damage fuzz test (DamageFuzzTests.swift) wants it to end by itself, never by a signal.
//   StrataTestHelper hold-reader FILE [--read-only]
//       Begins a read snapshot and prints "snapshot TXNID CHECKSUM PID"; waits for a line on
//       stdin, re-reads everything through the same snapshot and prints "recheck CHECKSUM"; exits
//       0 when both checksums agree, 1 when they differ. With --read-only, through a read-only store;
//       "recheck changed" when a writer reused its pages (fileChangedDuringRead).

import Foundation
import StrataStorage
import Strata
import StrataTestWorkloads
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
    fail(
        64,
        """
        usage: StrataTestHelper commit-loop FILE START [--sync single|double] [--big]
               StrataTestHelper writer FILE ID COUNT [--durable] [--gate]
               StrataTestHelper hold-reader FILE [--read-only]
               StrataTestHelper compact FILE
               StrataTestHelper die-in-write FILE
               StrataTestHelper objects-writer FILE SEED COUNT [--gate] [--compacting]
               StrataTestHelper objects-set-score FILE ID SCORE
               StrataTestHelper objects-churn FILE
               StrataTestHelper check-loop FILE TARGET
               StrataTestHelper objects-torture FILE WRITER SEED [--big N] [--idle-ms MS|off] [--memory BYTES]
               StrataTestHelper objects-migrate FILE VERSION
               StrataTestHelper damage-probe FILE kv|objects
        """)
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

func writer(_ args: [String]) throws {
    guard args.count >= 3, let count = Int(args[2]) else { usage() }
    let id = args[1]
    let flags = args.dropFirst(3)
    if flags.contains(where: { $0 != "--durable" && $0 != "--gate" }) { usage() }
    let store = try Store(path: args[0], options: .countingEveryCommit(durability: flags.contains("--durable") ? .full : .noSync))
    if flags.contains("--gate") {
        say("ready \(id)")
        _ = readLine()
    }
    for i in 0..<count {
        do {
            try store.write { txn in try CounterWorkload.commit(txn, key: Array("\(id)/\(i)".utf8), index: i) }
        } catch let violation as CounterWorkload.Violation {
            fail(3, violation.description)
        }
        if i % 16 == 0 { sched_yield() }
    }
    say("done \(id)")
}

/// Compacts the file (`Store.compact()`: commits until the file stops shrinking, the last ones
/// changing no tree), and says how many commits it made.
func compact(_ args: [String]) throws {
    guard args.count == 1 else { usage() }
    let report = try Store(path: args[0]).compact()
    say("compacted \(report.commits)")
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
        let total: UInt64
        do {
            total = try store.read { txn in try CounterWorkload.check(txn) }
        } catch let violation as CounterWorkload.Violation {
            fail(1, violation.description)
        }
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
/// What `checksum` found that a consistent snapshot cannot hold.
struct Inconsistent: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

func checksum(_ txn: ReadTransaction) throws -> UInt64 {
    var h: UInt64 = 0xCBF2_9CE4_8422_2325
    func add(_ bytes: UnsafeRawBufferPointer) {
        var length = UInt64(bytes.count)
        for _ in 0..<8 { h = (h ^ (length & 0xFF)) &* 0x100_0000_01B3; length >>= 8 }
        for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
    }
    for name in try txn.treeNames() {
        Array(name.utf8).withUnsafeBytes { add($0) }
        guard let tree = try txn.tree(name) else { throw Inconsistent(message: "tree \(name) is listed but cannot be opened") }
        var entries = 0
        try tree.forEach { key, value in
            add(key)
            add(value)
            entries += 1
            return true
        }
        if entries != tree.count { throw Inconsistent(message: "tree \(name) counts \(tree.count) entries but holds \(entries)") }
    }
    return h
}

func holdReader(_ args: [String]) throws {
    // `--read-only`: through a read-only store, whose snapshots are unregistered (they hold the
    // page file's shrink lock instead of a reader slot). `--reopen-read-only`/`--reopen-read-write`:
    // then opens the file again that way and lets that handle go, while the snapshot lives.
    let flags = Set(args.dropFirst())
    guard args.count >= 1, flags.isSubset(of: ["--read-only", "--reopen-read-only", "--reopen-read-write"]) else { usage() }
    let store = try Store(path: args[0], options: StoreOptions(readOnly: flags.contains("--read-only")))
    let snapshot = try store.beginRead()
    if flags.contains("--reopen-read-only") { _ = try Store(path: args[0], options: StoreOptions(readOnly: true)) }
    if flags.contains("--reopen-read-write") { _ = try Store(path: args[0]) }
    let first = try checksum(snapshot)
    say("snapshot \(snapshot.txnid) \(first) \(getpid())")
    _ = readLine()
    // A read-only snapshot's pages may be reused by a writer in another process (never cut off):
    // what it read then fails validation, whether it looked wrong or not.
    let second: UInt64
    do {
        second = try checksum(snapshot)
        try snapshot.validate()
    } catch {
        guard (try? snapshot.validate()) == nil else { throw error }
        say("recheck changed")
        exit(0)
    }
    say("recheck \(second)")
    snapshot.end()
    exit(first == second ? 0 : 1)
}

func dieInWrite(_ args: [String]) throws {
    guard args.count == 1 else { usage() }
    let store = try Store(path: args[0], options: StoreOptions(durability: .noSync))
    try store.write { txn in
        let tree = try txn.createTree("w")
        for i in 0..<10 { try tree.put(Array("dead/\(i)".utf8), [UInt8](repeating: 0xDE, count: 100)) }
        say("in-write")
        while true { sleep(60) }
    }
}

func objectsWriter(_ args: [String]) throws {
    guard args.count >= 3, let seed = UInt64(args[1]), let count = Int(args[2]) else { usage() }
    let flags = Set(args.dropFirst(3))
    guard flags.isSubset(of: ["--gate", "--compacting"]) else { usage() }
    let compacting = flags.contains("--compacting")
    var options = StoreOptions.countingEveryCommit()
    if compacting {
        // Pages move all the time: tight automatic compaction, idle compaction after 5 ms.
        options.compaction = Compaction(freeFraction: 0.05, pagesPerCommit: 8, idleDelay: .milliseconds(5))
    }
    let db = try Database(path: args[0], models: [SharedNote.self], options: options)
    var present: [Int: SharedNote] = [:]
    for note in try db.objects(SharedNote.self).fetch() where note.id < 100_000 { present[note.id] = note }
    if args.dropFirst(3).contains("--gate") {
        say("ready")
        _ = readLine()
    }
    for i in 0..<count {
        let ops = ObjectWorkload.operations(seed: seed, index: i, present: present)
        try db.write { tx in try ObjectWorkload.apply(ops, in: tx) }
        ObjectWorkload.apply(ops, to: &present)
        if i % 8 == 0 { sched_yield() }
        if compacting && i % 10 == 9 { _ = try db.store.compact() }
        if compacting && i % 7 == 3 { usleep(20_000) }  // quiet: idle compaction runs
    }
    say("done \(count)")
}

func objectsSetScore(_ args: [String]) throws {
    guard args.count == 3, let id = Int(args[1]), let score = Double(args[2]) else { usage() }
    let db = try Database(path: args[0], models: [SharedNote.self], options: .countingEveryCommit())
    try db.write { tx in _ = try tx.update(SharedNote.self, key: id) { $0.score = score } }
    say("done")
}

func objectsChurn(_ args: [String]) throws {
    guard args.count == 1 else { usage() }
    let db = try Database(path: args[0], models: [ChurnItem.self], options: StoreOptions(durability: .noSync))
    var round = try db.object(ChurnItem.self, key: 0)?.round ?? 0
    say("ready")
    while true {
        round += 1
        try db.write { tx in try ChurnWorkload.write(round: round, in: tx) }
    }
}

/// The first error of a batch of async writes. `@unchecked Sendable`: every access holds `lock`.
final class FirstError: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: (any Error)?
    func record(_ error: any Error) {
        lock.lock()
        if stored == nil { stored = error }
        lock.unlock()
    }
    var error: (any Error)? {
        lock.lock()
        defer { lock.unlock() }
        return stored
    }
}

func objectsTorture(_ args: [String]) throws {
    guard args.count >= 3, let writer = Int(args[1]), let seed = UInt64(args[2]) else { usage() }
    var bigSize = 400
    var idleMs: Int? = 50
    var memory = 0
    var i = 3
    while i + 1 < args.count {
        switch args[i] {
        case "--big": bigSize = Int(args[i + 1]) ?? bigSize
        case "--idle-ms": idleMs = Int(args[i + 1])
        case "--memory": memory = Int(args[i + 1]) ?? memory
        default: usage()
        }
        i += 2
    }
    if i != args.count { usage() }
    var options = StoreOptions(durability: .full)
    options.transactionMemory = memory
    options.compaction.idleDelay = idleMs.map { .milliseconds($0) }
    let db = try Database(path: args[0], models: [KillItem.self, KillMeta.self], options: options)
    var state: KillState
    do {
        state = try KillWorkload.load(db, writer: writer)
    } catch let violation as KillViolation {
        fail(3, violation.description)
    }
    say("resume \(writer) \(state.seq)")
    let acks = DispatchQueue(label: "acks")
    do {
        while true {
            let n = state.seq + 1
            var exec = KillWorkload.random(seed: seed, writer: writer, seq: n, salt: 3)
            if n > 1 && exec.percent(5) {
                say("mark compact \(writer)")
                _ = try db.store.compact()
            }
            if n > 1, let idleMs, exec.percent(4) {
                say("mark idle \(writer)")
                usleep(UInt32(idleMs + exec.below(200)) * 1_000)
            }
            if n > 1 && exec.percent(8) {
                let ops = KillWorkload.abortedOps(seed: seed, state: state)
                do {
                    try db.write { tx in
                        try KillWorkload.execute(ops, writer: writer, in: tx, db: db)
                        throw KillAbort()
                    }
                } catch is KillAbort {}
            }
            let txn = KillWorkload.transaction(seed: seed, state: state, bigSize: bigSize)
            let style = exec.below(100)
            if txn.big || style < 55 {
                say("begin \(writer) \(n)")
                if txn.big { say("mark big \(writer) \(n) \(txn.ops.count)") }
                try db.write(durability: exec.percent(20) ? .noSync : nil) { tx in try KillWorkload.perform(txn, in: tx, db: db) }
                state.apply(txn)
                say("ack \(writer) \(n) \(state.digest)")
            } else if style < 72 {
                say("begin \(writer) \(n)")
                try db.run(DBWrite { tx in try KillWorkload.perform(txn, in: tx, db: db) })
                state.apply(txn)
                say("ack \(writer) \(n) \(state.digest)")
            } else {
                var batch = [txn]
                var before = [state]  // the writer's state before each of the batch
                var after = state
                after.apply(txn)
                let size = 2 + exec.below(5)
                while batch.count < size {
                    let next = KillWorkload.transaction(seed: seed, state: after, bigSize: bigSize)
                    if next.big { break }
                    batch.append(next)
                    before.append(after)
                    after.apply(next)
                }
                say("begin \(writer) \(batch[batch.count - 1].seq)")
                say("mark async \(writer) \(n) \(batch.count)")
                let group = DispatchGroup()
                let failure = FirstError()
                for (position, t) in batch.enumerated() {
                    if exec.percent(25) {
                        // A write of the group that throws: rolled back alone.
                        let ops = KillWorkload.abortedOps(seed: seed &+ UInt64(position), state: before[position])
                        group.enter()
                        db.writeAsync(completionQueue: acks) { tx in
                            try KillWorkload.execute(ops, writer: writer, in: tx, db: db)
                            throw KillAbort()
                        } completion: { result in
                            if case .success = result { failure.record(KillViolation("a write that threw committed")) }
                            if case .failure(let error) = result, !(error is KillAbort) { failure.record(error) }
                            group.leave()
                        }
                    }
                    group.enter()
                    db.writeAsync(completionQueue: acks) { tx in
                        try KillWorkload.perform(t, in: tx, db: db)
                    } completion: { result in
                        switch result {
                        case .success: say("ack \(writer) \(t.seq) \(t.digestAfter)")
                        case .failure(let error): failure.record(error)
                        }
                        group.leave()
                    }
                }
                if exec.percent(20) {
                    say("mark compact \(writer)")
                    _ = try db.store.compact()  // while the group commits
                }
                group.wait()
                if let error = failure.error { throw error }
                state = after
            }
        }
    } catch let violation as KillViolation {
        fail(3, violation.description)
    }
}

/// Exits once the test process that started this helper is gone (its parent then changes, to init
/// or a subreaper): a test run that crashed or was killed must not leave helpers behind, writing
/// or checking in a loop for hours and loading the machine every later measurement runs on.
func exitWhenOrphaned() {
    let parent = getppid()
    Thread.detachNewThread {
        while getppid() == parent { usleep(200_000) }
        _exit(7)
    }
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else { usage() }
exitWhenOrphaned()
do {
    switch command {
    case "commit-loop": try commitLoop(Array(arguments.dropFirst()))
    case "writer": try writer(Array(arguments.dropFirst()))
    case "hold-reader": try holdReader(Array(arguments.dropFirst()))
    case "compact": try compact(Array(arguments.dropFirst()))
    case "check-loop": try checkLoop(Array(arguments.dropFirst()))
    case "die-in-write": try dieInWrite(Array(arguments.dropFirst()))
    case "objects-writer": try objectsWriter(Array(arguments.dropFirst()))
    case "objects-set-score": try objectsSetScore(Array(arguments.dropFirst()))
    case "objects-churn": try objectsChurn(Array(arguments.dropFirst()))
    case "objects-torture": try objectsTorture(Array(arguments.dropFirst()))
    case "damage-probe":
        let args = Array(arguments.dropFirst())
        guard args.count == 2, ["kv", "objects"].contains(args[1]) else { usage() }
        DamageWorkload.probe(path: args[0], objects: args[1] == "objects")
    case "objects-migrate":
        let args = Array(arguments.dropFirst())
        guard args.count == 2, let version = Int(args[1]) else { usage() }
        _ = try KillWorkload.openMigrating(path: args[0], version: version, options: StoreOptions(durability: .full))
        say("opened \(version)")
    default: usage()
    }
} catch {
    fail(4, "\(command) failed: \(error)")
}
