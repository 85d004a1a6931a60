import Testing
import Foundation
import Dispatch
import Observation
import Synchronization
@testable import Strata

// LiveResults and LiveObject through Observation, as SwiftUI uses them: `withObservationTracking`
// registers for the properties a body reads, the change is announced on the actor the object
// updates on, and the new values are there once that actor's job has run.

/// Set by an `onChange`, with where it ran. `@unchecked Sendable`: every access holds `lock`.
private final class Fired: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    private var places: [String] = []
    func fire(_ place: String) { lock.lock(); count += 1; places.append(place); lock.unlock() }
    var state: (count: Int, places: [String]) { lock.lock(); defer { lock.unlock() }; return (count, places) }
}

/// A serial executor on a Dispatch queue tagged with a key, so that code can tell it runs there.
private final class TaggedExecutor: SerialExecutor {
    static let key = DispatchSpecificKey<String>()
    let queue = DispatchQueue(label: "strata.tests.tagged")
    init() { queue.setSpecific(key: TaggedExecutor.key, value: "tagged") }
    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        let executor = asUnownedSerialExecutor()
        queue.async { unowned.runSynchronously(on: executor) }
    }
    func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }
}

/// An actor that runs on `TaggedExecutor`.
private actor TaggedActor {
    let executor = TaggedExecutor()
    nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
    func sync() {}
}

/// Marks the main queue, the main actor's executor (which, under the test runner on Linux, need
/// not run on the main thread).
private let mainQueueKey: DispatchSpecificKey<String> = {
    let key = DispatchSpecificKey<String>()
    DispatchQueue.main.setSpecific(key: key, value: "main")
    return key
}()

private func place() -> String {
    if DispatchQueue.getSpecific(key: TaggedExecutor.key) != nil { return "tagged" }
    return DispatchQueue.getSpecific(key: mainQueueKey) ?? "other"
}

/// Registers for `read`'s properties; the returned object records the change when it comes.
private func track(_ read: @escaping () -> Void) -> Fired {
    let fired = Fired()
    withObservationTracking(read) { fired.fire(place()) }
    return fired
}

/// Waits until `count()` reaches `target`: registers for `read` first, so that an update applied
/// in between is not missed, then waits for the announcement unless the count is there.
private func waitForUpdates(_ count: @escaping () -> Int, reaching target: Int, read: @escaping () -> Void) async throws -> Bool {
    while true {
        let fired = track(read)
        if count() >= target { return true }
        // Observation announces a change before it is made (willSet): the count may rise just after
        // the announcement, with no further one to wait for. So the count is watched too.
        guard try await poolEventually({ fired.state.count > 0 || count() >= target }) else { return false }
    }
}

private func waitFor(_ fired: Fired, seconds: Double = 120) async throws -> Bool {
    try await poolEventually(seconds: seconds) { fired.state.count > 0 }
}

@Suite(.serialized) struct LiveObservationTests {
    static func item(_ id: Int, score: Double) -> Item {
        Item(id: id, name: "n\(id)", category: id % 3, score: score, label: nil, status: .online, tags: [], rank: nil)
    }

    /// On the main actor: the first update replaces the results, then each commit's change set
    /// turns the previous array into the new one, and observers are told on the main actor.
    @Test func liveResultsUpdateOnTheMainActorThroughObservation() async throws {
        _ = mainQueueKey
        let db = try Database.inMemory(models: [Item.self])
        try await db.write { tx in for i in 0..<20 { try tx.insert(Self.item(i, score: Double(i))) } }
        try await Self.followUpdates(db)
        // Released (followUpdates kept the only reference): observation ends.
        _ = try await poolEventually { db.observers.count == 0 }
        #expect(db.observers.count == 0)
    }

    private static func followUpdates(_ db: Database) async throws {
        let results = await LiveResults(db.objects(Item.self).sorted(by: SortDescriptor(\.score)))
        #expect(results.results.count == 20)  // shown at once, before any update
        // The first update: the query evaluated afresh.
        #expect(try await waitForUpdates({ results.updateCount }, reaching: 1) { _ = results.results })
        #expect(await MainActor.run { results.lastChange } == nil)

        var previous = await MainActor.run { Array(results.results) }
        let steps: [(String, @Sendable (Transaction) throws -> Void)] = [
            ("insert", { tx in try tx.insert(Self.item(100, score: 7.5)) }),
            ("move", { tx in _ = try tx.update(Item.self, key: 3) { $0.score = 50 } }),
            ("modify in place", { tx in _ = try tx.update(Item.self, key: 10) { $0.name = "renamed" } }),
            ("delete", { tx in _ = try tx.delete(Item.self, key: 5) }),
        ]
        for (name, step) in steps {
            let fired = track { _ = results.results }
            try await db.write(step)
            #expect(try await waitFor(fired), "\(name): no change announced")
            #expect(fired.state.places == ["main"], "\(name): announced on \(fired.state.places)")
            let (current, change) = await MainActor.run { (Array(results.results), results.lastChange) }
            let expected = try db.objects(Item.self).sorted(by: SortDescriptor(\.score)).fetch()
            #expect(current.map(\.id) == expected.map(\.id) && current.map(\.name) == expected.map(\.name), "\(name): results differ from the query")
            let set = try #require(change, "\(name): no change set")
            #expect(apply(previous, deletions: set.deletions, insertions: set.insertions, new: current).map(\.id) == current.map(\.id), "\(name): \(set)")
            switch name {
            case "insert": #expect(set.insertions == [current.firstIndex { $0.id == 100 }!] && set.deletions.isEmpty)
            case "modify in place": #expect(set.modifications == [current.firstIndex { $0.id == 10 }!] && set.insertions.isEmpty)
            case "delete": #expect(set.deletions == [previous.firstIndex { $0.id == 5 }!] && set.insertions.isEmpty)
            default: #expect(!set.deletions.isEmpty && !set.insertions.isEmpty)
            }
            previous = current
        }
    }

    /// On an actor of the caller's choosing, changes are made (and announced) on its executor.
    @Test func liveResultsUpdateOnAGivenActor() async throws {
        let db = try Database.inMemory(models: [Item.self])
        try await db.write { tx in for i in 0..<5 { try tx.insert(Self.item(i, score: Double(i))) } }
        let worker = TaggedActor()
        let live = LiveResults(db.objects(Item.self).filter(#Predicate { $0.score >= 2 }), updatingOn: worker)
        #expect(try await waitForUpdates({ live.updateCount }, reaching: 1) { _ = live.results })
        let fired = track { _ = live.results }
        try await db.write { tx in try tx.insert(Self.item(9, score: 9)) }
        #expect(try await waitFor(fired))
        #expect(fired.state.places == ["tagged"])
        await worker.sync()  // the update's job has run
        #expect(live.results.map(\.id) == [2, 3, 4, 9])
        #expect(live.lastChange == ResultsChangeSet(deletions: [], insertions: [3], modifications: []))
        live.stop()
    }

    /// Only one snapshot stays alive, whatever the number of commits.
    @Test func liveResultsKeepOneSnapshot() async throws {
        let path = NSTemporaryDirectory() + "strata-live-snapshots-\(UUID().uuidString).strata"
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        let db = try Database(path: path, models: [Item.self], options: StoreOptions(durability: .noSync))
        try await db.write { tx in for i in 0..<50 { try tx.insert(Self.item(i, score: Double(i))) } }
        let worker = TaggedActor()
        let live = LiveResults(db.objects(Item.self).sorted(by: SortDescriptor(\.score)), updatingOn: worker)
        for round in 0..<40 {
            try await db.write { tx in _ = try tx.update(Item.self, key: round % 50) { $0.score = Double(100 + round) } }
        }
        let last = db.store.latestVersion
        let deadline = Date().addingTimeInterval(120)
        while (await worker.sync(), live.results.version).1 != last && Date() < deadline { try await Task.sleep(for: .milliseconds(2)) }
        #expect(live.results.version == last)
        // The results' snapshot, and the commit watcher's (this is a file other processes can write).
        let readers = db.store.readers()
        #expect(readers.count <= 2, "\(readers)")
        #expect(readers.filter { $0.txnid < last }.isEmpty, "an older snapshot is still held: \(readers)")
        live.stop()
    }

    /// A live object: changes, fields, deletion and reappearance, on the main actor.
    @Test func liveObjectFollowsOneObject() async throws {
        _ = mainQueueKey
        let db = try Database.inMemory(models: [Item.self])
        try await db.write { tx in try tx.insert(Self.item(1, score: 1)) }
        let live = await LiveObject(Item.self, key: 1, in: db)
        #expect(live.object?.score == 1)
        #expect(try await waitForUpdates({ live.updateCount }, reaching: 1) { _ = live.object })  // the observer's first read

        let steps: [(String, @Sendable (Transaction) throws -> Void, Double?, [String])] = [
            ("score", { tx in _ = try tx.update(Item.self, key: 1) { $0.score = 2 } }, 2, ["score"]),
            ("delete", { tx in _ = try tx.delete(Item.self, key: 1) }, nil, []),
            ("insert again", { tx in try tx.insert(Self.item(1, score: 3)) }, 3, ["id", "name", "category", "score", "label", "status", "tags", "rank"]),
        ]
        for (name, step, score, fields) in steps {
            let fired = track {
                _ = live.object; _ = live.changedFields
            }
            try await db.write(step)
            #expect(try await waitFor(fired), "\(name): no change announced")
            #expect(fired.state.places == ["main"])
            let (object, changed) = await MainActor.run { (live.object, live.changedFields) }
            #expect(object?.score == score, "\(name)")
            #expect(Set(changed) == Set(fields), "\(name): \(changed)")
        }
        // A commit that leaves the object as it was announces nothing; the next change does.
        let quiet = track { _ = live.object }
        try await db.write { tx in try tx.insert(Self.item(2, score: 0)) }
        try await db.write { tx in _ = try tx.update(Item.self, key: 1) { $0.name = "x" } }
        #expect(try await waitFor(quiet))
        let (name, fields) = await MainActor.run { (live.object?.name, live.changedFields) }
        #expect(name == "x" && fields == ["name"])
        live.stop()
    }
}
