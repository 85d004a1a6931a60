import Testing
import Foundation
import Dispatch
@testable import Strata
@testable import StrataStorage
import StrataTestWorkloads

// The space hunt at the object level: held `Results`, `Snapshot`s and async reads in progress
// while bulk deletes, `compact()` and idle compaction move pages and cut the file. Model-based:
// the expected objects are a plain dictionary. Sizes scale with STRATA_SPACEHUNT_SCALE.

struct SpaceNote: Model, Equatable {
    static let indexes: [PartialKeyPath<SpaceNote> & Sendable] = [\.group]
    var id: Int
    var group: Int
    var text: String
}

/// A gate an async read parks at: `reached` once it is inside, then it waits for `proceed`.
private final class ReadGate: Sendable {
    let reached = DispatchSemaphore(value: 0)
    let proceed = DispatchSemaphore(value: 0)
}

@Suite struct SpaceHuntObjectTests {
    static var scale: Int {
        max(1, Int(ProcessInfo.processInfo.environment["STRATA_SPACEHUNT_SCALE"] ?? "") ?? 1)
    }

    static func temporaryPath() -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("strata-spacehunt-\(getpid())")
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir.appendingPathComponent("db-\(UInt32.random(in: 0...UInt32.max)).strata").path
    }

    static func remove(_ path: String) {
        try? FileManager.default.removeItem(atPath: path)
        try? FileManager.default.removeItem(atPath: path + "-lock")
    }

    static func size(_ path: String) -> UInt64 {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.uint64Value ?? 0
    }

    static func note(_ id: Int, generation: Int) -> SpaceNote {
        SpaceNote(id: id, group: (id &* 7 &+ generation) % 13, text: String(repeating: "g\(generation)-\(id) ", count: 20))
    }

    /// Waits on a semaphore without holding a thread of the cooperative pool.
    static func wait(_ semaphore: DispatchSemaphore) async -> Bool {
        await withCheckedContinuation { (done: CheckedContinuation<Bool, Never>) in
            Thread { done.resume(returning: semaphore.wait(timeout: .now() + .seconds(60)) == .success) }.start()
        }
    }

    /// An async read parked halfway through its snapshot, a `Results` and a `Snapshot` kept from
    /// before: a bulk delete of nine objects in ten, `compact()`, idle compaction and more writes
    /// meanwhile (pages moved, the file's end trimmed and cut) must leave each reading exactly
    /// the objects of its commit, by key, by index and in order. Once they are let go, the file
    /// shrinks, checks clean at both levels, and reopens with the model.
    @Test func heldResultsAndAsyncReadsReadTheirCommitWhileTheFileIsCompactedAndCut() async throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction.idleDelay = .milliseconds(5)
        var db: Database? = try Database(path: path, models: [SpaceNote.self], options: options)
        let count = 6_000 * Self.scale
        var model: [Int: SpaceNote] = [:]
        let first = (0..<count).map { Self.note($0, generation: 0) }
        for n in first { model[n.id] = n }
        try await db!.write { tx in for n in first { try tx.insert(n) } }
        let before = model
        let sortedBefore = before.values.sorted { $0.id < $1.id }
        let heldResults = db!.objects(SpaceNote.self)
        let heldGroup = db!.objects(SpaceNote.self).filter(#Predicate { $0.group == 3 })
        let groupBefore = sortedBefore.filter { $0.group == 3 }
        let heldSnapshot = try db!.snapshot()
        #expect(heldResults.count == count)

        let gate = ReadGate()
        let reader = Task { [db] in
            try await db!.read { snapshot -> [SpaceNote] in
                let all = snapshot.objects(SpaceNote.self)
                var seen = Array(all.objects(in: 0..<(all.count / 2)))
                gate.reached.signal()
                gate.proceed.wait()
                seen += all.objects(in: (all.count / 2)..<all.count)
                for id in stride(from: 0, to: count, by: 97) {
                    if try snapshot.object(SpaceNote.self, key: id) != before[id] { throw CancellationError() }
                }
                return seen
            }
        }
        #expect(await Self.wait(gate.reached), "the async read never started")

        let full = Self.size(path)
        let doomed = (0..<count).filter { $0 % 10 != 0 }
        for i in doomed { model[i] = nil }
        try await db!.write { tx in for i in doomed { try tx.delete(SpaceNote.self, key: i) } }
        _ = try db!.store.compact()
        try await Task.sleep(for: .milliseconds(60))  // idle compaction
        let rewritten = stride(from: 0, to: count, by: 20).map { Self.note($0, generation: 1) }
        for n in rewritten { model[n.id] = n }
        try await db!.write { tx in for n in rewritten { try tx.upsert(n) } }
        _ = try db!.store.compact()
        try await Task.sleep(for: .milliseconds(60))

        gate.proceed.signal()
        let read = try await reader.value
        #expect(read == sortedBefore, "the parked async read saw other objects than its commit's")
        #expect(heldResults.count == count)
        #expect(heldResults.objects(in: 0..<heldResults.count) == sortedBefore, "held results changed")
        #expect(heldGroup.objects(in: 0..<heldGroup.count) == groupBefore, "held filtered (index) results changed")
        for id in stride(from: 1, to: count, by: 31) {
            #expect(try heldSnapshot.object(SpaceNote.self, key: id) == before[id], "held snapshot: object \(id)")
        }
        let now = try db!.objects(SpaceNote.self).fetch()
        #expect(now == model.values.sorted { $0.id < $1.id })

        // Let everything go: the space comes back.
        _ = consume heldResults
        _ = consume heldGroup
        _ = consume heldSnapshot
        let report = try db!.store.compact()
        let stats = try db!.store.stats()
        print("SpaceHunt objects: full \(full) bytes; after compact \(report.bytesAfter) bytes, \(stats.pageCount) pages, \(stats.usedPages) used")
        #expect(report.bytesAfter * 3 < full, "the file did not shrink once the readers were gone: \(full) → \(report.bytesAfter)")
        let check = try db!.store.check()
        #expect(check.problems.isEmpty, "\(check.problems.prefix(3))")
        let objectCheck = try StoredObjects.check(in: db!.store)
        #expect(objectCheck.problems.isEmpty, "\(objectCheck.problems.prefix(3))")
        db!.close()
        db = nil
        let reopened = try Database(path: path, models: [SpaceNote.self], options: options)
        #expect(try reopened.objects(SpaceNote.self).fetch() == model.values.sorted { $0.id < $1.id })
        #expect(
            try reopened.objects(SpaceNote.self).filter(#Predicate { $0.group == 3 }).fetch() == model.values.filter { $0.group == 3 }.sorted { $0.id < $1.id })
    }
}

extension SpaceHuntObjectTests {
    /// Another process commits `SharedNote` transactions with tight compaction, `compact()` every
    /// ten transactions and idle compaction in its pauses (`objects-writer --compacting`), and is
    /// killed at a random moment, round after round: each time the file must open, check clean at
    /// both levels and hold exactly the objects of some prefix of that round's transactions
    /// (replayed here from the seed), whatever compaction or cut the kill interrupted.
    @Test func aWriterKilledWhileCompactingLeavesAPrefixOfItsCommits() async throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        let rounds = max(1, Int(ProcessInfo.processInfo.environment["STRATA_SPACEHUNT_KILLS"] ?? "") ?? 4) * Self.scale
        let baseSeed = UInt64(ProcessInfo.processInfo.environment["STRATA_SPACEHUNT_SEED"] ?? "") ?? 20_261_204
        do {
            let db = try Database(path: path, models: [SharedNote.self], options: .countingEveryCommit())
            let initial = ObjectWorkload.initialNotes(seed: baseSeed)
            try await db.write { tx in for n in initial { try tx.insert(n) } }
        }
        for round in 0..<rounds {
            let seed = baseSeed &+ UInt64(round)
            let present = try Self.notes(path)
            let child = try XProcChild(["objects-writer", path, "\(seed)", "1000000", "--gate", "--compacting"])
            #expect(try await child.readLine() == "ready")
            child.send("go")
            try await Task.sleep(for: .milliseconds(150 + Int((seed &* 0x9E37_79B9) % 500)))
            try await child.kill()
            let found = try Self.notes(path)
            // The prefix of this round's transactions that the file holds.
            var model = present
            var matched = model == found ? 0 : nil
            var i = 0
            while matched == nil && i < 200_000 {
                ObjectWorkload.apply(ObjectWorkload.operations(seed: seed, index: i, present: model), to: &model)
                i += 1
                if model == found { matched = i }
            }
            #expect(matched != nil, "seed \(seed) round \(round): the file holds no prefix of the killed writer's transactions")
            let store = try Store(path: path, options: .countingEveryCommit())
            let check = try store.check()
            #expect(check.problems.isEmpty, "seed \(seed) round \(round): \(check.problems.prefix(3))")
            let objectCheck = try StoredObjects.check(in: store)
            #expect(objectCheck.problems.isEmpty, "seed \(seed) round \(round): \(objectCheck.problems.prefix(3))")
            print("SpaceHunt kill round \(round): \(matched.map(String.init) ?? "no") transactions, file \(Self.size(path)) bytes, \(found.count) notes")
            store.close()
            if matched == nil { return }
        }
    }

    /// Every note of the file at `path`, opened anew.
    static func notes(_ path: String) throws -> [Int: SharedNote] {
        let db = try Database(path: path, models: [SharedNote.self], options: .countingEveryCommit())
        defer { db.close() }
        return Dictionary(uniqueKeysWithValues: try db.objects(SharedNote.self).fetch().map { ($0.id, $0) })
    }
}

/// What an observer under compaction pressure saw. `@unchecked Sendable`: every access holds `lock`.
private final class ObservedResults: @unchecked Sendable {
    let lock = NSLock()
    var previous: [SpaceNote]?
    var previousResults: Results<SpaceNote>?
    var problems: [String] = []
    var updates = 0

    func take(_ change: ResultsChange<SpaceNote>) {
        lock.lock()
        defer { lock.unlock() }
        switch change {
        case .initial(let results):
            previous = results.objects(in: 0..<results.count)
            previousResults = results
        case .update(let results, let deletions, let insertions, let modifications):
            updates += 1
            let now = results.objects(in: 0..<results.count)
            guard let before = previous, let held = previousResults else {
                problems.append("an update before the initial results")
                return
            }
            // The results delivered last time, kept since: their snapshot must not have changed.
            if held.objects(in: 0..<held.count) != before { problems.append("update \(updates): the results kept from the previous delivery changed") }
            var kept = before
            for i in deletions.reversed() where i < kept.count { kept.remove(at: i) }
            let inserted = Set(insertions)
            var rebuilt: [SpaceNote] = []
            var next = 0
            for i in now.indices {
                if inserted.contains(i) {
                    rebuilt.append(now[i])
                } else if next < kept.count {
                    rebuilt.append(modifications.contains(i) ? now[i] : kept[next])
                    next += 1
                }
            }
            if next != kept.count || rebuilt != now {
                problems.append("update \(updates): the change set does not turn the previous results into the new ones")
            }
            previous = now
            previousResults = results
        case .error(let error):
            problems.append("error \(error)")
        }
    }
}

extension SpaceHuntObjectTests {
    /// An observed query under compaction pressure (tight automatic compaction, idle compaction
    /// after 1 ms, `compact()` and bulk deletes among small writes): every delivered change set
    /// turns the previous results into the new ones, the results kept from the previous delivery
    /// still read what they read then (their snapshot survived the moves and cuts), and the last
    /// delivery equals the query on the model.
    @Test func anObservedQueryStaysExactWhileCompactionMovesAndCutsItsPages() async throws {
        let path = Self.temporaryPath()
        defer { Self.remove(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction = Compaction(freeFraction: 0.02, pagesPerCommit: 4, idleDelay: .milliseconds(1))
        let db = try Database(path: path, models: [SpaceNote.self], options: options)
        let seed = UInt64(ProcessInfo.processInfo.environment["STRATA_SPACEHUNT_SEED"] ?? "") ?? 20_261_204
        var random = ObjectRandom(seed: seed)
        var model: [Int: SpaceNote] = [:]
        let first = (0..<2_000).map { Self.note($0, generation: 0) }
        for n in first { model[n.id] = n }
        try await db.write { tx in for n in first { try tx.insert(n) } }
        let observed = ObservedResults()
        let query = db.objects(SpaceNote.self).filter(#Predicate { $0.group < 5 }).sorted(by: SortDescriptor(\SpaceNote.group))
        let token = query.observe(on: DispatchQueue(label: "spacehunt.observer")) { observed.take($0) }
        let commits = 150 * Self.scale
        for c in 1...commits {
            var upserts: [SpaceNote] = []
            var deletes: [Int] = []
            if c % 25 == 0 {
                deletes = model.keys.filter { _ in random.below(10) < 8 }
            } else {
                for _ in 0..<(1 + random.below(30)) {
                    let id = random.below(4_000)
                    if random.below(4) == 0 { deletes.append(id) } else { upserts.append(Self.note(id, generation: c)) }
                }
            }
            for id in deletes { model[id] = nil }
            for n in upserts { model[n.id] = n }
            try await db.write { [deletes, upserts] tx in
                for id in deletes { _ = try tx.delete(SpaceNote.self, key: id) }
                for n in upserts { try tx.upsert(n) }
            }
            if c % 10 == 0 { _ = try db.store.compact() }
            if random.below(6) == 0 { try await Task.sleep(for: .milliseconds(3)) }
        }
        let expected = model.values.filter { $0.group < 5 }.sorted { ($0.group, $0.id) < ($1.group, $1.id) }
        var settled = false
        for _ in 0..<500 {
            settled = observed.lock.withLock { observed.previous == expected }
            if settled { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(settled, "seed \(seed): the observer did not reach the query's final results")
        let problems = observed.lock.withLock { observed.problems }
        #expect(problems.isEmpty, "seed \(seed): \(problems.prefix(3))")
        #expect(try db.objects(SpaceNote.self).filter(#Predicate { $0.group < 5 }).sorted(by: SortDescriptor(\SpaceNote.group)).fetch() == expected)
        #expect(try db.store.check().problems.isEmpty)
        print("SpaceHunt observer under compaction: \(observed.lock.withLock { observed.updates }) updates")
        token.invalidate()
    }
}

/// SplitMix64, for the object-level hunts.
struct ObjectRandom {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}
