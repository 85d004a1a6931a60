import Dispatch
import Foundation
import Testing

@testable import Strata
@testable import StrataStorage

// The big-value hunt at the object level: models whose records lie in overflow runs (large
// `Data`, `String` and array fields) beside indexed small fields, under `compact()` and idle-time
// compaction, which now move those runs (StrataStorage's Compaction.swift, `moveRuns`). Moving a
// run is no change of any object: live observers must hear nothing from it, their change sets
// must stay exact, and queries made while it runs must read the model. Sizes scale with
// STRATA_BIGHUNT_ROUNDS (default 4); seeds come from STRATA_BIGHUNT_SEED.

struct BigDoc: Model, Equatable {
    static let indexes: [PartialKeyPath<BigDoc> & Sendable] = [\.group, \.rank]
    var id: Int
    var group: Int
    var rank: Int
    var title: String
    var body: Data
    var numbers: [Int]
}

/// A `Results` observer that applies each change set to its own copy and records what is wrong.
private final class BigMirror: @unchecked Sendable {
    private let lock = NSLock()
    private var mirror: [BigDoc] = []
    private(set) var problems: [String] = []
    private(set) var deliveries = 0

    func receive(_ change: ResultsChange<BigDoc>) {
        lock.withLock {
            deliveries += 1
            switch change {
            case .initial(let results):
                mirror = Array(results)
            case .update(let results, let deletions, let insertions, let modifications):
                let new = Array(results)
                var copy = mirror
                for i in deletions.reversed() {
                    guard copy.indices.contains(i) else { problems.append("deletion \(i) out of range"); return }
                    copy.remove(at: i)
                }
                for i in insertions {
                    guard i <= copy.count, new.indices.contains(i) else { problems.append("insertion \(i) out of range"); return }
                    copy.insert(new[i], at: i)
                }
                for i in modifications {
                    guard copy.indices.contains(i), new.indices.contains(i) else { problems.append("modification \(i) out of range"); return }
                    copy[i] = new[i]
                }
                if copy != new { problems.append("change set d\(deletions) i\(insertions) m\(modifications) does not give the results") }
                mirror = new
            case .error(let error):
                problems.append("error \(error)")
            }
        }
    }

    var state: (mirror: [BigDoc], deliveries: Int, problems: [String]) { lock.withLock { (mirror, deliveries, problems) } }
}

extension ObjectRandom {
    fileprivate mutating func within(_ range: ClosedRange<Int>) -> Int { range.lowerBound + below(range.count) }
    fileprivate mutating func percent(_ percent: Int) -> Bool { below(100) < percent }
}

@Suite struct BigValueObjectHuntTests {
    static var rounds: Int { max(1, Int(ProcessInfo.processInfo.environment["STRATA_BIGHUNT_ROUNDS"] ?? "") ?? 4) }
    static var seed: UInt64 { UInt64(ProcessInfo.processInfo.environment["STRATA_BIGHUNT_SEED"] ?? "") ?? 20_261_205 }

    static func path() -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("strata-bighunt-\(getpid())")
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir.appendingPathComponent("db-\(UInt32.random(in: 0...UInt32.max)).strata").path
    }

    static func remove(_ path: String) {
        try? FileManager.default.removeItem(atPath: path)
        try? FileManager.default.removeItem(atPath: path + "-lock")
    }

    fileprivate static func doc(_ id: Int, generation: Int, random: inout ObjectRandom) -> BigDoc {
        let big = random.below(100)
        let bodySize = big < 30 ? random.below(200) : big < 90 ? random.within(1_000...20_000) : random.within(20_000...200_000)
        var bytes = [UInt8](repeating: 0, count: bodySize)
        for i in stride(from: 0, to: bodySize, by: 97) { bytes[i] = UInt8(truncatingIfNeeded: id &+ generation &+ i) }
        return BigDoc(
            id: id, group: random.below(5), rank: random.below(50),
            title: String(repeating: "t\(generation)-\(id) ", count: random.percent(20) ? random.within(100...500) : 1),
            body: Data(bytes), numbers: (0..<(random.percent(15) ? random.within(100...600) : 3)).map { $0 &* id })
    }

    /// Waits until `mirror` has had no delivery for 150 ms (at most about 5 s).
    private static func settle(_ mirror: BigMirror) {
        var last = mirror.state.deliveries
        var still = 0
        for _ in 0..<100 {
            usleep(50_000)
            let now = mirror.state.deliveries
            if now == last { still += 1 } else { still = 0 }
            if still >= 3 { return }
            last = now
        }
    }

    /// Random inserts, upserts, index-field updates and deletes of documents with large fields;
    /// after each round `compact()` (or idle compaction) while a thread queries the model. The
    /// observers' mirrors must equal the queries, compaction must deliver nothing, and the
    /// database checks clean and reopens with the model.
    @Test(arguments: [false, true])
    func largeRecordsUnderCompactionWithObservers(idle: Bool) throws {
        let seed = Self.seed ^ (idle ? 1 : 0)
        let path = Self.path()
        defer { Self.remove(path) }
        var options = StoreOptions(durability: .noSync)
        options.transactionMemory = 256 << 10
        options.compaction.idleDelay = idle ? .milliseconds(5) : nil
        var random = ObjectRandom(seed: seed)
        var model: [Int: BigDoc] = [:]
        do {
            let db = try Database(path: path, models: [BigDoc.self], options: options)
            let queue = DispatchQueue(label: "bighunt.observers")
            let byKey = BigMirror(), byGroup = BigMirror()
            let all = db.objects(BigDoc.self).sorted(by: SortDescriptor(\.id))
            let group2 = db.objects(BigDoc.self).filter(#Predicate { $0.group == 2 }).sorted(by: SortDescriptor(\.rank), SortDescriptor(\.id))
            let t1 = all.observe(on: queue) { byKey.receive($0) }
            let t2 = group2.observe(on: queue) { byGroup.receive($0) }
            defer {
                t1.invalidate()
                t2.invalidate()
            }
            for round in 0..<Self.rounds {
                let context = "seed \(seed) (STRATA_BIGHUNT_SEED=\(Self.seed)), \(idle ? "idle" : "compact()"), round \(round)"
                for w in 0..<3 {
                    try db.write { tx in
                        for _ in 0..<random.within(5...25) {
                            let id = random.below(60)
                            let pick = random.below(100)
                            if pick < 25 {
                                _ = try tx.delete(BigDoc.self, key: id)
                                model[id] = nil
                            } else if pick < 45, model[id] != nil {
                                let group = random.below(5), rank = random.below(50)
                                _ = try tx.update(BigDoc.self, key: id) {
                                    $0.group = group; $0.rank = rank
                                }
                                model[id]?.group = group
                                model[id]?.rank = rank
                            } else {
                                let d = Self.doc(id, generation: round * 10 + w, random: &random)
                                _ = try tx.upsert(d)
                                model[id] = d
                            }
                        }
                    }
                }
                Self.settle(byKey)
                Self.settle(byGroup)
                let before = (byKey.state.deliveries, byGroup.state.deliveries)
                // Queries on another thread while compaction runs.
                let expected = model.values.sorted { $0.id < $1.id }
                let queryProblems = XProcLocked<[String]>([])
                let stop = XProcLocked(false)
                let reader = Thread {
                    while !stop.withLock({ $0 }) {
                        do {
                            let got = try db.objects(BigDoc.self).sorted(by: SortDescriptor(\.id)).fetch()
                            if got != expected {
                                queryProblems.withLock { $0.append("a query during compaction read \(got.count) documents, \(expected.count) expected") }
                            }
                            let g = db.objects(BigDoc.self).filter(#Predicate { $0.group == 2 }).count
                            if g != expected.filter({ $0.group == 2 }).count { queryProblems.withLock { $0.append("count of group 2: \(g)") } }
                        } catch {
                            queryProblems.withLock { $0.append("query error \(error)") }
                        }
                    }
                }
                reader.start()
                if idle {
                    usleep(300_000)
                } else {
                    try db.store.compact()
                }
                stop.withLock { $0 = true }
                while !reader.isFinished { usleep(1_000) }
                #expect(queryProblems.withLock { $0 }.isEmpty, "\(context): \(queryProblems.withLock { $0 }.prefix(3))")
                Self.settle(byKey)
                Self.settle(byGroup)
                #expect(
                    byKey.state.deliveries == before.0 && byGroup.state.deliveries == before.1,
                    "\(context): compaction delivered \(byKey.state.deliveries - before.0) and \(byGroup.state.deliveries - before.1) change sets")
                #expect(
                    byKey.state.problems.isEmpty && byGroup.state.problems.isEmpty,
                    "\(context): \(byKey.state.problems.prefix(2)) \(byGroup.state.problems.prefix(2))")
                #expect(byKey.state.mirror == expected, "\(context): the observer by key holds \(byKey.state.mirror.count), \(expected.count) expected")
                let g2 = expected.filter { $0.group == 2 }.sorted { ($0.rank, $0.id) < ($1.rank, $1.id) }
                #expect(byGroup.state.mirror == g2, "\(context): the group observer holds \(byGroup.state.mirror.map(\.id)), \(g2.map(\.id)) expected")
                let report = try db.store.check()
                #expect(report.problems.isEmpty, "\(context): \(report.problems.prefix(3))")
            }
            db.close()
        }
        let db = try Database(path: path, models: [BigDoc.self], options: options)
        defer { db.close() }
        #expect(try db.objects(BigDoc.self).sorted(by: SortDescriptor(\.id)).fetch() == model.values.sorted { $0.id < $1.id }, "seed \(seed): reopened")
    }
}
