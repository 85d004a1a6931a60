import Testing
import Foundation
import Dispatch
@testable import Strata
@testable import StrataStorage
import StrataTestWorkloads

// Live results across processes: another process (StrataTestHelper objects-writer) commits seeded
// transactions of `SharedNote`s while this one observes and writes notes of its own. Every change set
// delivered here is checked: applied to the previous delivery it gives the new results, its
// modifications are exactly the kept objects whose value changed, and the results equal the query
// re-run on the snapshot they came from. At the end every observer's results equal the query on a
// model that replays the other process's transactions (ObjectWorkload) and this process's own
// writes. Object and commit observers are checked the same way, and a writer killed inside its
// transaction delivers nothing.
//
// Knobs: STRATA_XPROC_SEED (default 4711), STRATA_XPROC_TXNS (the other process's transactions,
// default 150).

/// A query shape: how to build it, and the same thing on a plain array.
private struct XProcShape: Sendable {
    let name: String
    let build: @Sendable (Results<SharedNote>) -> Results<SharedNote>
    let plain: @Sendable ([SharedNote]) -> [SharedNote]

    static let all: [XProcShape] = [
        XProcShape(name: "all, by key", build: { $0 }, plain: byKey),
        XProcShape(name: "sorted by score", build: sortedByScore, plain: byScore),
        XProcShape(name: "category 2 by title", build: categoryTwoQuery, plain: categoryTwoByTitle),
        XProcShape(name: "top 10 by score above 5", build: topTenQuery, plain: topTen),
    ]

    static func sortedByScore(_ r: Results<SharedNote>) -> Results<SharedNote> { r.sorted(by: SortDescriptor(\SharedNote.score)) }
    static func categoryTwoQuery(_ r: Results<SharedNote>) -> Results<SharedNote> {
        r.filter(#Predicate<SharedNote> { $0.category == 2 }).sorted(by: SortDescriptor(\SharedNote.title))
    }
    static func topTenQuery(_ r: Results<SharedNote>) -> Results<SharedNote> {
        r.filter(#Predicate<SharedNote> { $0.score > 5 }).sorted(by: SortDescriptor(\SharedNote.score, order: .reverse)).prefix(10)
    }

    static func byKey(_ notes: [SharedNote]) -> [SharedNote] { notes.sorted { $0.id < $1.id } }
    static func byScore(_ notes: [SharedNote]) -> [SharedNote] {
        notes.sorted { (a: SharedNote, b: SharedNote) -> Bool in a.score != b.score ? a.score < b.score : a.id < b.id }
    }
    static func categoryTwoByTitle(_ notes: [SharedNote]) -> [SharedNote] {
        notes.filter { $0.category == 2 }.sorted { (a: SharedNote, b: SharedNote) -> Bool in a.title != b.title ? a.title < b.title : a.id < b.id }
    }
    static func topTen(_ notes: [SharedNote]) -> [SharedNote] {
        let sorted = notes.filter { $0.score > 5 }.sorted { (a: SharedNote, b: SharedNote) -> Bool in a.score != b.score ? a.score > b.score : a.id < b.id }
        return Array(sorted.prefix(10))
    }
}

/// Checks one observer's deliveries as they come. `@unchecked Sendable`: every access holds `lock`.
private final class XProcCheck: @unchecked Sendable {
    let shape: XProcShape
    private let lock = NSLock()
    private var previous: [SharedNote]?
    private(set) var lastVersion: UInt64 = 0
    private(set) var lastObjects: [SharedNote] = []
    private(set) var problems: [String] = []
    private(set) var updates = 0

    init(_ shape: XProcShape) { self.shape = shape }

    var state: (version: UInt64, objects: [SharedNote], problems: [String], updates: Int) {
        lock.lock(); defer { lock.unlock() }
        return (lastVersion, lastObjects, problems, updates)
    }

    func deliver(_ change: ResultsChange<SharedNote>) {
        lock.lock(); defer { lock.unlock() }
        func problem(_ text: String) { if problems.count < 8 { problems.append("\(shape.name): \(text)") } }
        switch change {
        case .initial(let results):
            previous = Array(results)
            record(results)
        case .update(let results, let deletions, let insertions, let modifications):
            updates += 1
            let new = Array(results)
            let version = results.version ?? 0
            guard let old = previous else { return problem("an update before the initial results") }
            if apply(old, deletions: deletions, insertions: insertions, new: new).map(\.id) != new.map(\.id) {
                problem("version \(version): the change set applied to the previous results does not give the new ones")
            }
            let before = Dictionary(uniqueKeysWithValues: old.map { ($0.id, $0) })
            let kept = Set(new.indices).subtracting(insertions)
            let changed = Set(kept.filter { before[new[$0].id] != new[$0] })
            if Set(modifications) != changed {
                problem("version \(version): modifications \(modifications), but the kept objects that changed are at \(changed.sorted())")
            }
            if let snapshot = results.snapshot {
                let rerun = shape.plain(Array(snapshot.objects(SharedNote.self)))
                if rerun != new {
                    let want = Dictionary(uniqueKeysWithValues: rerun.map { ($0.id, $0) })
                    let got = Dictionary(uniqueKeysWithValues: new.map { ($0.id, $0) })
                    let missing = want.keys.filter { got[$0] == nil }.sorted()
                    let extra = got.keys.filter { want[$0] == nil }.sorted()
                    let stale = got.keys.filter { want[$0] != nil && want[$0] != got[$0] }.sorted()
                    problem(
                        "version \(version): the results differ from the query re-run on their own snapshot: missing \(missing), extra \(extra), stale \(stale)\(missing.isEmpty && extra.isEmpty && stale.isEmpty ? " (order)" : "")"
                    )
                }
            }
            previous = new
            record(results)
        case .error(let error):
            problem("error \(error)")
        }
    }

    private func record(_ results: Results<SharedNote>) {
        lastVersion = results.version ?? 0
        lastObjects = Array(results)
    }
}

/// A helper process with pipes on its standard streams (a small cousin of StrataStorageTests'
/// HelperProcess).
final class XProcChild {
    let process = Process()
    private let output = Pipe()
    private let input = Pipe()
    private let errors = Pipe()
    private var buffer: [UInt8] = []

    init(_ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: try XProcChild.helperPath())
        process.arguments = arguments
        process.standardOutput = output
        process.standardInput = input
        process.standardError = errors
        try process.run()
    }

    deinit { stop() }

    /// Ends the helper now, whatever it is doing: SIGKILL, because a child started by the test
    /// process inherits its blocked signals, and SIGTERM (`Process.terminate`) may be among them.
    func stop() {
        if process.isRunning { _ = Foundation.kill(process.processIdentifier, SIGKILL) }
    }

    static func helperPath() throws -> String {
        var directories: [String] = []
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            directories.append(URL(fileURLWithPath: exe).deletingLastPathComponent().path)
        }
        if let arg0 = CommandLine.arguments.first { directories.append(URL(fileURLWithPath: arg0).deletingLastPathComponent().path) }
        directories.append(Bundle.main.bundleURL.path)
        directories.append(Bundle.main.bundleURL.deletingLastPathComponent().path)
        for b in Bundle.allBundles where b.bundleURL.pathExtension == "xctest" { directories.append(b.bundleURL.deletingLastPathComponent().path) }
        directories.append(FileManager.default.currentDirectoryPath + "/.build/debug")
        for directory in directories where FileManager.default.isExecutableFile(atPath: directory + "/StrataTestHelper") {
            return directory + "/StrataTestHelper"
        }
        throw StrataError.invalidQuery("StrataTestHelper not found in \(directories) (swift build --product StrataTestHelper)")
    }

    /// The next line of the helper's output if one is buffered or arrives within `waitMs`
    /// milliseconds; `.some(nil)` once the output has ended; nil when no line came yet.
    private func pollLine(waitMs: Int32) -> String?? {
        let fd = output.fileHandleForReading.fileDescriptor
        while true {
            if let newline = buffer.firstIndex(of: 10) {
                defer { buffer.removeSubrange(...newline) }
                return String(decoding: buffer[..<newline], as: UTF8.self)
            }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, waitMs) > 0 else { return nil }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = chunk.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress!, $0.count) }
            if n <= 0 { return .some(nil) }
            buffer.append(contentsOf: chunk[..<n])
        }
    }

    func readLine(timeout: Double = 60) async throws -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let line = pollLine(waitMs: 0) { return line }
            if Date() > deadline { throw StrataError.invalidQuery("no output from the helper within \(timeout) s") }
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    /// `readLine` for a test that must not suspend while the helper runs: a suspended test of a
    /// busy parallel run resumes only when a thread of the shared pool is free, which can be
    /// minutes, and the helper works on meanwhile.
    func readLineWithoutSuspending(timeout: Double = 60) throws -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let line = pollLine(waitMs: 10) { return line }
            if Date() > deadline { throw StrataError.invalidQuery("no output from the helper within \(timeout) s") }
        }
    }

    func send(_ line: String) { input.fileHandleForWriting.write(Data((line + "\n").utf8)) }

    func waitForExit(timeout: Double = 120) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning {
            if Date() > deadline { stop(); throw StrataError.invalidQuery("the helper did not exit within \(timeout) s") }
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    func kill() async throws {
        _ = Foundation.kill(process.processIdentifier, SIGKILL)
        try await waitForExit()
    }

    var succeeded: Bool { !process.isRunning && process.terminationReason == .exit && process.terminationStatus == 0 }
    var errorText: String { String(decoding: errors.fileHandleForReading.availableData, as: UTF8.self) }
}

/// Waits (polling) until `condition` holds; false after `seconds`.
private func eventually(seconds: Double = 120, _ condition: () -> Bool) async throws -> Bool {
    try await poolEventually(seconds: seconds, condition)
}

@Suite struct CrossProcessLiveTests {
    @Test func observersSeeAnotherProcessCommitsWithExactChangeSets() async throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["STRATA_XPROC_SEED"] ?? "") ?? 4711
        let count = Int(ProcessInfo.processInfo.environment["STRATA_XPROC_TXNS"] ?? "") ?? 150
        let context = "seed \(seed) (STRATA_XPROC_SEED)"
        let path = NSTemporaryDirectory() + "strata-xproc-\(UUID().uuidString).strata"
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        let db = try Database(path: path, models: [SharedNote.self], options: .countingEveryCommit())
        let initial = ObjectWorkload.initialNotes(seed: seed)
        try await db.write { tx in try tx.insert(contentsOf: initial) }

        // Observers: query shapes, a few objects, the commits.
        let checks = XProcShape.all.map(XProcCheck.init)
        let tokens = checks.map { check in
            check.shape.build(db.objects(SharedNote.self)).observe(on: DispatchQueue(label: "shape")) { check.deliver($0) }
        }
        let watched = [0, 1, 2, 3, 4, 5]
        let objectChanges = XProcLocked<[Int: [ObjectChange<SharedNote>]]>([:])
        let objectTokens = watched.map { id in
            db.observe(SharedNote.self, key: id, on: DispatchQueue(label: "object")) { change in objectChanges.withLock { $0[id, default: []].append(change) } }
        }
        let commits = XProcLocked<[DatabaseChange]>([])
        let commitToken = db.observeCommits(on: DispatchQueue(label: "commits")) { change in commits.withLock { $0.append(change) } }
        let started = try await eventually { checks.allSatisfy { $0.state.version > 0 } }
        #expect(started, "initial results not delivered")

        let writer = try XProcChild(["objects-writer", path, "\(seed)", "\(count)", "--gate"])
        #expect(try await writer.readLine() == "ready")
        writer.send("go")
        // Meanwhile this process writes notes of its own (ids from 100,000, which the other
        // process leaves alone): the observers see both processes' commits interleaved.
        var own: [Int: SharedNote] = [:]
        for i in 0..<40 {
            let id = 100_000 + i % 15
            if i % 4 == 3 {
                _ = try await db.write { tx in try tx.delete(SharedNote.self, key: id) }
                own[id] = nil
            } else {
                let note = SharedNote(id: id, title: "own\(i % 7)", category: i % 5, score: Double(i % 11), tags: [], body: "own")
                try await db.write { tx in try tx.upsert(note) }
                own[id] = note
            }
            try await Task.sleep(for: .microseconds(500))
        }
        try await writer.waitForExit()
        #expect(writer.succeeded, "objects-writer failed: \(writer.errorText)")
        let final = db.store.latestVersion

        // The model: the other process's transactions replayed, and this process's notes.
        var model = Dictionary(uniqueKeysWithValues: initial.map { ($0.id, $0) })
        for i in 0..<count { ObjectWorkload.apply(ObjectWorkload.operations(seed: seed, index: i, present: model), to: &model) }
        let everything = Array(model.values) + Array(own.values)
        // An observer delivers only when its results change: wait until each shows the model.
        let caughtUp = try await eventually { checks.allSatisfy { $0.state.objects == $0.shape.plain(everything) } }
        #expect(caughtUp, "\(context): observers at versions \(checks.map(\.state.version)), the file at \(final)")
        #expect(Set(try db.objects(SharedNote.self).fetch().map(\.id)) == Set(everything.map(\.id)), "\(context): the file holds other notes than the model")
        for check in checks {
            let state = check.state
            #expect(state.problems.isEmpty, "\(context): \(state.problems)")
            #expect(state.objects == check.shape.plain(everything), "\(context): \(check.shape.name): the final results differ from the model")
            #expect(state.updates > 0, "\(context): \(check.shape.name) received no update")
        }

        // Object observers: the fields named are those that changed since the previous delivery,
        // and the last delivery is the object's final state.
        let delivered = objectChanges.withLock { $0 }
        for id in watched {
            var last: SharedNote? = initial[id]
            for change in delivered[id] ?? [] {
                switch change {
                case .changed(let note, let fields):
                    if let before = last {
                        var differing = Set<String>()
                        if before.title != note.title { differing.insert("title") }
                        if before.category != note.category { differing.insert("category") }
                        if before.score != note.score { differing.insert("score") }
                        if before.tags != note.tags { differing.insert("tags") }
                        if before.body != note.body { differing.insert("body") }
                        #expect(Set(fields) == differing, "\(context): note \(id): fields \(fields), but \(differing.sorted()) changed")
                    }
                    last = note
                case .deleted:
                    last = nil
                case .error(let error):
                    Issue.record("\(context): note \(id): \(error)")
                }
            }
            #expect(last == model[id], "\(context): note \(id): last delivered \(String(describing: last)), the model has \(String(describing: model[id]))")
        }

        let seen = commits.withLock { $0 }
        #expect(seen.last?.version == final)
        #expect(seen.filter(\.isFromOtherProcess).count > 0)
        let ownVersions = seen.filter { !$0.isFromOtherProcess }.map(\.version)
        // (A delete of a note already gone, or an identical upsert, commits nothing.)
        #expect(
            ownVersions.count > 20 && ownVersions.count <= 40 && Set(ownVersions).count == ownVersions.count,
            "this process's commits, one change each: \(ownVersions)")
        #expect(seen.allSatisfy { $0.models == ["SharedNote"] })
        print(
            "CrossProcessLiveTests: \(count) commits of another process and 40 of this one; updates per observer \(checks.map(\.state.updates)), commit changes from the other process \(seen.filter(\.isFromOtherProcess).count)"
        )

        // A writer killed inside its transaction: nothing is delivered for it; the next commit
        // (another process's, one transaction) is delivered alone.
        let before = commits.withLock { $0.count }
        let dying = try XProcChild(["die-in-write", path])
        #expect(try await dying.readLine() == "in-write")
        try await dying.kill()
        // (One transaction that surely changes something: a seeded one may change nothing, and
        // commit nothing, as above.)
        let target = try #require(everything.min { $0.id < $1.id })
        let next = try XProcChild(["objects-set-score", path, "\(target.id)", "\(target.score + 1)"])
        try await next.waitForExit()
        #expect(next.succeeded, "objects-set-score failed: \(next.errorText)")
        #expect(db.store.latestVersion == final + 1)
        let arrived = try await eventually { commits.withLock { $0.count } > before }
        #expect(arrived)
        let after = commits.withLock { Array($0[before...]) }
        #expect(
            after.count == 1 && after.first?.version == final + 1 && after.first?.isFromOtherProcess == true,
            "\(context): after the killed writer: \(after)")

        tokens.forEach { $0.invalidate() }
        objectTokens.forEach { $0.invalidate() }
        commitToken.invalidate()
    }
}

extension CrossProcessLiveTests {
    /// Two commits of another process reported as one event, the second undoing the first: the
    /// event lists no change to the object, yet observers that started between the two (so their
    /// results hold the first commit's value) must still see the change back.
    @Test func aChangeUndoneInsideOneEventStillReachesObserversThatSawIt() async throws {
        let path = NSTemporaryDirectory() + "strata-xproc-undo-\(UUID().uuidString).strata"
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        let db = try Database(path: path, models: [SharedNote.self], options: StoreOptions(durability: .noSync))
        try await db.write { tx in
            try tx.insert(
                contentsOf: ObjectWorkload.initialNotes(seed: 1).prefix(5).map {
                    var n = $0; n.score = 1; return n
                })
        }
        // An observer from the start keeps the watcher running, and the watcher is held still.
        let early = XProcCheck(XProcShape.all[0])
        let earlyToken = db.objects(SharedNote.self).observe(on: DispatchQueue(label: "early")) { early.deliver($0) }
        #expect(try await eventually { early.state.version > 0 })
        let watch = try #require(db.store.env.commitWatch)
        watch.paused.store(true, ordering: .sequentiallyConsistent)

        let first = try XProcChild(["objects-set-score", path, "3", "2"])
        try await first.waitForExit()
        #expect(first.succeeded, "\(first.errorText)")
        // Observers that start now see note 3 with score 2.
        let late = XProcCheck(XProcShape.all[0])
        let lateToken = db.objects(SharedNote.self).observe(on: DispatchQueue(label: "late")) { late.deliver($0) }
        #expect(try await eventually { late.state.version > 0 })
        #expect(late.state.objects.first { $0.id == 3 }?.score == 2)
        let objectChanges = XProcLocked<[ObjectChange<SharedNote>]>([])
        let objectToken = db.observe(SharedNote.self, key: 3, on: DispatchQueue(label: "object")) { change in objectChanges.withLock { $0.append(change) } }
        db.observerQueue.sync {}  // its first read (score 2, not a change) has run

        let second = try XProcChild(["objects-set-score", path, "3", "1"])
        try await second.waitForExit()
        #expect(second.succeeded, "\(second.errorText)")
        watch.paused.store(false, ordering: .sequentiallyConsistent)
        watch.nudge()

        // One event covers both commits and lists nothing for note 3 (its value is as before them).
        let back = try await eventually { late.state.objects.first { $0.id == 3 }?.score == 1 }
        #expect(back, "an observer whose results held score 2 still shows \(late.state.objects.first { $0.id == 3 }?.score ?? -1)")
        let objectBack = try await eventually {
            objectChanges.withLock { changes in
                changes.contains { if case .changed(let note, let fields) = $0 { return note.score == 1 && fields == ["score"] } else { return false } }
            }
        }
        #expect(objectBack, "the object observer did not see score 1 again: \(objectChanges.withLock { $0 })")
        #expect(early.state.problems.isEmpty && late.state.problems.isEmpty, "\(early.state.problems) \(late.state.problems)")
        #expect(early.state.objects.first { $0.id == 3 }?.score == 1)
        earlyToken.invalidate()
        lateToken.invalidate()
        objectToken.invalidate()
    }
}

/// A value behind a lock. `@unchecked Sendable`: every access holds `lock`.
final class XProcLocked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) -> R) -> R { lock.lock(); defer { lock.unlock() }; return body(&value) }
}
