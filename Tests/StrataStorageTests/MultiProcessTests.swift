import Testing
@testable import StrataStorage
import StrataTestWorkloads
import Foundation

// Several processes on one file: writers serialised by the lock file's fcntl lock, and readers in
// other processes whose snapshots the writer must not reuse, found through the shared reader
// table. The other processes are StrataTestHelper (see Tests/StrataTestHelper/main.swift);
// HelperProcess and helperChecksum are in CrashTests.swift.

@Suite struct MultiProcessTests {
    /// Two helper processes and this one commit interleaved read-modify-write transactions while
    /// a fourth process and this one check snapshot after snapshot: every key of every writer
    /// arrives, the shared counter saw every increment exactly once, and no snapshot in either
    /// reading process ever shows the counter, the hot value and the tree disagreeing (pages
    /// freed by one process's commits and reused by another's, under readers of a third).
    @Test func interleavedWritersInThreeProcessesLoseNothing() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath("interleaved")
        defer { removeStoreFiles(path) }
        let perWriter = 300
        let ids = ["A", "B", "T"]
        let total = ids.count * perWriter
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        let writers = try ["A", "B"].map { id in
            try HelperProcess(path: helper, arguments: ["writer", path, id, "\(perWriter)", "--durable", "--gate"])
        }
        let checker = try HelperProcess(path: helper, arguments: ["check-loop", path, "\(total)"])
        #expect(try await checker.readLine() == "ready")
        for (writer, id) in zip(writers, ["A", "B"]) {
            #expect(try await writer.readLine() == "ready \(id)")
        }
        for writer in writers { writer.send("go") }
        // This process writes the same way, durably too, so that all three overlap, and checks a
        // snapshot after each of its commits.
        var snapshotProblems: [String] = []
        for i in 0..<perWriter {
            try store.write(durability: .full) { txn in try CounterWorkload.commit(txn, key: Array("T/\(i)".utf8), index: i) }
            do {
                _ = try store.read { try CounterWorkload.check($0) }
            } catch let violation as CounterWorkload.Violation {
                if snapshotProblems.count < 5 { snapshotProblems.append(violation.description) }
            }
        }
        #expect(snapshotProblems.isEmpty, "\(snapshotProblems)")
        for (writer, id) in zip(writers, ["A", "B"]) {
            try await writer.waitForExit(timeout: 120)
            let lines = try writer.remainingLines()
            #expect(writer.succeeded, "writer \(id) ended with \(writer.status): \(writer.errorOutput())")
            #expect(lines == ["done \(id)"])
        }
        try await checker.waitForExit(timeout: 120)
        let checked = try checker.remainingLines()
        #expect(checker.succeeded, "check-loop ended with \(checker.status): \(checker.errorOutput())")

        var order: [Int: String] = [:]  // counter value -> writer
        try store.read { txn in
            #expect(try CounterWorkload.check(txn) == UInt64(total))  // throws a Violation saying what disagrees
            let c = try #require(try txn.tree("c"))
            #expect(CrashWorkload.u64(try c.get(Array("count".utf8)) ?? []) == UInt64(total), "lost or doubled increments")
            let w = try #require(try txn.tree("w"))
            #expect(w.count == total)
            for id in ids {
                for i in 0..<perWriter {
                    guard let value = try w.get(Array("\(id)/\(i)".utf8)) else {
                        Issue.record("key \(id)/\(i) is missing")
                        continue
                    }
                    guard let n = CrashWorkload.u64(value), value == CounterWorkload.keyValue(n, i) else {
                        Issue.record("value of \(id)/\(i) is damaged")
                        continue
                    }
                    #expect(order[Int(n)] == nil, "counter value \(n) set twice")
                    order[Int(n)] = id
                }
            }
        }
        #expect(order.keys.sorted() == Array(1...total), "the commits' counter values are not exactly 1...\(total)")
        // How often consecutive commits came from different processes (interleaving, not turns).
        let switches = (1..<total).filter { order[$0] != nil && order[$0 + 1] != nil && order[$0] != order[$0 + 1] }.count
        print("MultiProcessTests: \(total) commits from 3 processes, \(switches) switches between writers; other process \(checked.last ?? "-")")
        #expect(switches >= 2, "the three writers never interleaved")
        let problems = storeCheckProblems(store)
        #expect(problems.isEmpty, "check: \(problems)")
    }

    /// A reader in another process keeps its snapshot while this process commits many times,
    /// freeing and reusing pages: its second reading of everything matches its first. While it
    /// reads, this process sees its slot and the pages it holds; once it exits, they are free.
    @Test func readerInAnotherProcessKeepsItsSnapshot() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath("foreign-reader")
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        var rng = SplitMix(seed: 7)
        func value(_ size: Int) -> [UInt8] { (0..<size).map { _ in UInt8(truncatingIfNeeded: rng.next()) } }
        func size() -> Int {
            switch rng.next() % 10 {
            case 0: return 4_000 + Int(rng.next() % 20_000)  // overflow runs
            case 1: return 0
            default: return Int(rng.next() % 400)
            }
        }
        try store.write { txn in
            let r = try txn.createTree("r")
            for k in 0..<400 { try r.put(Array("key-\(k)".utf8), value(size())) }
            let s = try txn.createTree("s")
            for k in 0..<50 { try s.put(Array("s-\(k)".utf8), value(100)) }
        }
        let (expectedTxnid, expectedChecksum) = try store.read { txn in (txn.txnid, try helperChecksum(txn)) }

        let reader = try HelperProcess(path: helper, arguments: ["hold-reader", path])
        let line = try #require(try await reader.readLine(), "hold-reader printed nothing: \(reader.errorOutput())")
        let words = line.split(separator: " ")
        try #require(words.count == 4 && words[0] == "snapshot", "unexpected line '\(line)'")
        let (txnid, checksum, pid) = (UInt64(words[1]), UInt64(words[2]), UInt64(words[3]))
        #expect(txnid == expectedTxnid)
        #expect(checksum == expectedChecksum, "the other process read different bytes")
        #expect(pid == UInt64(reader.pid))
        #expect(
            store.readers().contains { $0.pid == UInt64(reader.pid) && $0.txnid == expectedTxnid },
            "readers() does not list the other process: \(store.readers())")

        // Rewrite the same keys with other sizes, drop and recreate a tree: every commit frees
        // pages, and later ones reuse what earlier ones freed.
        var pageCounts: [UInt64] = []
        for round in 0..<200 {
            try store.write { txn in
                let r = try txn.createTree("r")
                for _ in 0..<40 {
                    let k = Array("key-\(rng.next() % 400)".utf8)
                    if rng.next() % 8 == 0 { try r.delete(k) } else { try r.put(k, value(size())) }
                }
                if round % 25 == 0 {
                    try txn.dropTree("s")
                    let s = try txn.createTree("s")
                    for k in 0..<50 { try s.put(Array("s-\(k)".utf8), value(Int(rng.next() % 300))) }
                }
            }
            pageCounts.append(try store.stats().pageCount)
        }
        print(
            "MultiProcessTests: page count with a foreign reader open: \(pageCounts[0]) after 1 commit, \(pageCounts[99]) after 100, \(pageCounts[199]) after 200"
        )
        let stats = try store.stats()
        #expect(stats.pendingPages > 0, "no pages held for the other process's snapshot")
        let holder = stats.pendingHolders.first { $0.reader.pid == UInt64(reader.pid) }
        #expect(holder != nil, "pendingHolders does not name the other process: \(stats.pendingHolders)")
        #expect(holder?.reader.txnid == expectedTxnid)
        #expect((holder?.pages ?? 0) > 0 && (holder?.pages ?? 0) <= stats.pendingPages)
        // Pages freed after the snapshot and seen by no one are reused: the file stops growing
        // although the snapshot stays open.
        #expect(
            pageCounts[199] <= pageCounts[99] + pageCounts[99] / 10,
            "the file kept growing with one old reader open: \(pageCounts[99]) pages after 100 commits, \(pageCounts[199]) after 200")

        reader.send("reread")
        let recheck = try await reader.readLine()
        try await reader.waitForExit()
        #expect(recheck == "recheck \(expectedChecksum)", "the snapshot changed under the other process")
        #expect(reader.succeeded, "hold-reader ended with \(reader.status): \(reader.errorOutput())")

        #expect(!store.readers().contains { $0.pid == UInt64(reader.pid) }, "the exited reader is still listed")
        try store.write { txn in _ = try txn.createTree("r").put(Array("after".utf8), value(10)) }
        let after = try store.stats()
        #expect(after.pendingPages == 0, "pages still pending after the reader exited: \(after.pendingHolders)")
        #expect(after.pendingHolders.isEmpty)
        let problems = storeCheckProblems(store)
        #expect(problems.isEmpty, "check: \(problems)")
    }

    /// The slot of a reader process killed with SIGKILL (it never ends its snapshot) is reclaimed:
    /// it no longer appears, and the pages it held become reusable.
    @Test func slotOfKilledReaderIsReclaimed() async throws {
        let helper = try strataTestHelperPath()
        let path = temporaryPath("killed-reader")
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let t = try txn.createTree("t")
            for k in 0..<200 { try t.put(Array("k\(k)".utf8), Array(repeating: 1, count: 300)) }
        }
        let reader = try HelperProcess(path: helper, arguments: ["hold-reader", path])
        let line = try await reader.readLine()
        #expect(line?.hasPrefix("snapshot ") == true, "hold-reader: \(line ?? "nothing")")
        let pid = UInt64(reader.pid)
        #expect(store.readers().contains { $0.pid == pid })
        for round in 0..<5 {
            try store.write { txn in
                let t = try txn.createTree("t")
                for k in 0..<200 { try t.put(Array("k\(k)".utf8), Array(repeating: UInt8(round + 2), count: 300)) }
            }
        }
        #expect(try store.stats().pendingHolders.contains { $0.reader.pid == pid })

        try await reader.kill()
        try store.write { txn in _ = try txn.createTree("t").put(Array("k0".utf8), [9]) }
        #expect(!store.readers().contains { $0.pid == pid }, "the killed reader's slot is still listed: \(store.readers())")
        let stats = try store.stats()
        #expect(stats.pendingPages == 0 && stats.pendingHolders.isEmpty, "pages still held for the killed reader: \(stats.pendingHolders)")
    }
}

extension MultiProcessTests {
    /// A reader slot whose pid now names a live process that never opened the file (the pid was
    /// reused after the slot's owner died without ending its snapshot) is reclaimed: the slot was
    /// taken as live for as long as that unrelated process ran, and pinned every page freed after
    /// its snapshot. The slot is written straight into the lock file, as a killed reader leaves
    /// it, with the pid of a `sleep` this test starts.
    @Test func aSlotWhosePidWasReusedByAnotherProcessIsReclaimed() throws {
        let path = temporaryPath("reused-pid")
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let t = try txn.createTree("t")
            for k in 0..<200 { try t.put(Array("k\(k)".utf8), Array(repeating: 1, count: 300)) }
        }
        let old = try store.read { $0.txnid }
        let sleeper = Process()
        sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
        sleeper.arguments = ["60"]
        try sleeper.run()
        defer { sleeper.terminate() }
        let stranger = UInt64(sleeper.processIdentifier)

        let fd = open(LockFileName.path(for: path), O_RDWR)
        #expect(fd >= 0)
        defer { close(fd) }
        let length = LockLayout.size(slots: LockLayout.defaultSlots)
        let map = try #require(mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0))
        #expect(map != MAP_FAILED)
        defer { munmap(map, length) }
        let highWater = Int(map.load(fromByteOffset: LockLayout.highWaterOffset, as: UInt64.self))
        let slot = map + LockLayout.slotsOffset + highWater * LockLayout.slotStride
        slot.storeBytes(of: stranger, toByteOffset: LockLayout.slotOwner, as: UInt64.self)
        slot.storeBytes(of: old, toByteOffset: LockLayout.slotTxnid, as: UInt64.self)
        map.storeBytes(of: UInt64(highWater + 1), toByteOffset: LockLayout.highWaterOffset, as: UInt64.self)

        for round in 0..<5 {
            try store.write { txn in
                let t = try txn.createTree("t")
                for k in 0..<200 { try t.put(Array("k\(k)".utf8), Array(repeating: UInt8(round + 2), count: 300)) }
            }
        }
        #expect(
            !store.readers().contains { $0.pid == stranger }, "the slot of pid \(stranger) (a sleep that never opened the file) is listed: \(store.readers())")
        let stats = try store.stats()
        #expect(stats.pendingPages == 0 && stats.pendingHolders.isEmpty, "pages held for pid \(stranger): \(stats.pendingHolders)")
        #expect(slot.load(fromByteOffset: LockLayout.slotOwner, as: UInt64.self) == 0, "the slot was not freed")
    }
}
