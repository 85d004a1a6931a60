import Testing
import Foundation
import Dispatch
@testable import Strata

struct SHItem: Model, Equatable {
    static let indexes: [PartialKeyPath<SHItem> & Sendable] = [\.group, \.score]
    var id: Int
    var group: Int
    var score: Int
    var name: String
}

private actor SHUpdater { func sync() {} }

private struct SHRandom {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E3779B97F4A7C15; var z = state; z = (z ^ (z >> 30)) &* 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) &* 0x94D049BB133111EB; return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}

/// Runs `body` on a dedicated thread and returns when it has finished.
private func onThread(_ body: @escaping @Sendable () -> Void) async {
    await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
        let t = Thread {
            body(); c.resume()
        }
        t.start()
    }
}

private func shPath() -> String { NSTemporaryDirectory() + "strata-shorthunt-\(UUID().uuidString).strata" }

struct ShortHuntLiveWindowTests {
    typealias Shape = (String, @Sendable (Results<SHItem>) -> Results<SHItem>)
    static let shapes: [Shape] = [
        ("score rev prefix 5", { $0.sorted(by: SortDescriptor(\.score, order: .reverse)).prefix(5) }),
        ("group rev offset 3 prefix 4", { $0.sorted(by: SortDescriptor(\.group, order: .reverse)).offset(3).prefix(4) }),
        (
            "group rev, score rev offset 2 prefix 6",
            { $0.sorted(by: SortDescriptor(\.group, order: .reverse), SortDescriptor(\.score, order: .reverse)).offset(2).prefix(6) }
        ),
        ("filter score>=5 sort group prefix 3", { $0.filter(#Predicate { $0.score >= 5 }).sorted(by: SortDescriptor(\.group)).prefix(3) }),
        ("filter group==1 offset 2", { $0.filter(#Predicate { $0.group == 1 }).offset(2) }),
        ("unsorted prefix 4", { $0.prefix(4) }),
        ("unsorted offset 5 prefix 3", { $0.offset(5).prefix(3) }),
        ("name rev prefix 7", { $0.sorted(by: SortDescriptor(\.name, order: .reverse)).prefix(7) }),
        (
            "filter group!=0 sort score rev offset 1 prefix 2",
            { $0.filter(#Predicate { $0.group != 0 }).sorted(by: SortDescriptor(\.score, order: .reverse)).offset(1).prefix(2) }
        ),
        ("prefix 0", { $0.prefix(0) }),
        ("prefix Int.max offset 3 score rev", { $0.prefix(Int.max).offset(3).sorted(by: SortDescriptor(\.score, order: .reverse)) }),
        ("offset -4 prefix -1", { $0.offset(-4).prefix(-1) }),
        ("offset Int.max prefix Int.max", { $0.offset(Int.max).prefix(Int.max) }),
        ("prefix 9 offset 7 group", { $0.sorted(by: SortDescriptor(\.group)).prefix(9).offset(7) }),
        ("score rev distinct group", { $0.sorted(by: SortDescriptor(\.score, order: .reverse)).distinct(by: \.group) }),
        ("distinct score offset 1 prefix 3", { $0.distinct(by: \.score).offset(1).prefix(3) }),
        ("group rev distinct name,group prefix 4", { $0.sorted(by: SortDescriptor(\.group, order: .reverse)).distinct(by: \.name, \.group).prefix(4) }),
        (
            "filter score<8 distinct name sorted name natural rev",
            { $0.filter(#Predicate { $0.score < 8 }).distinct(by: \.name).sorted(by: SortDescriptor(\.name, order: .reverse), collation: .natural).offset(2) }
        ),
        (
            "name caseInsensitive rev offset 1 prefix 5",
            { $0.sorted(by: SortDescriptor(\.name, order: .reverse), collation: .caseInsensitive).offset(1).prefix(5) }
        ),
        (
            "filter group==2 name natural offset 1",
            { $0.filter(#Predicate { $0.group == 2 }).sorted(by: SortDescriptor(\.name), collation: .natural).offset(1) }
        ),
        (
            "score, name natural rev prefix 6",
            { $0.sorted(by: [SortDescriptor(\.score), SortDescriptor(\.name, order: .reverse)], collation: .natural).prefix(6) }
        ),
        ("offset 1000", { $0.offset(1000) }),
    ]

    static func ids(_ r: Results<SHItem>) -> [Int] { r.map(\.id) }

    @Test(arguments: [false, true]) func windowsSettleOnTheFreshQuery(onDisk: Bool) async throws {
        let path = shPath()
        defer { try? FileManager.default.removeItem(atPath: path); try? FileManager.default.removeItem(atPath: path + "-lock") }
        let db =
            onDisk ? try Database(path: path, models: [SHItem.self], options: StoreOptions(durability: .noSync)) : try Database.inMemory(models: [SHItem.self])
        try await db.write { tx in for i in 0..<20 { try tx.insert(SHItem(id: i, group: i % 3, score: i % 7, name: "n\(i % 5)")) } }
        let updater = SHUpdater()
        let lives = Self.shapes.map { LiveResults($0.1(db.objects(SHItem.self)), updatingOn: updater) }

        func settle(_ phase: String) async throws {
            for (k, shape) in Self.shapes.enumerated() {
                let deadline = Date().addingTimeInterval(60)
                var expected = Self.ids(shape.1(db.objects(SHItem.self)))
                while true {
                    await updater.sync()
                    let shown = Self.ids(lives[k].results)
                    expected = Self.ids(shape.1(db.objects(SHItem.self)))
                    if shown == expected { break }
                    if Date() > deadline {
                        Issue.record("\(phase) \(shape.0): live \(shown) fresh \(expected) error \(String(describing: lives[k].error))")
                        break
                    }
                    try await Task.sleep(for: .milliseconds(5))
                }
                #expect(lives[k].error == nil, "\(phase) \(shape.0)")
            }
        }
        try await settle("initial")
        for round in 0..<6 {
            await onThread {
                var rng = SHRandom(state: UInt64(round * 7919 + (onDisk ? 1 : 0)))
                for _ in 0..<15 {
                    try! db.write { tx in
                        for _ in 0..<(1 + rng.below(4)) {
                            let id = rng.below(40)
                            switch rng.below(3) {
                            case 0:
                                try tx.upsert(
                                    SHItem(
                                        id: id, group: rng.below(3), score: rng.below(10),
                                        name: ["n\(rng.below(5))", "N\(rng.below(12))", "n\(rng.below(12))x", "É\(rng.below(3))", "e"][rng.below(5)]))
                            case 1:
                                let (sc, g) = (rng.below(10), rng.below(3))
                                if try tx.object(SHItem.self, key: id) != nil {
                                    _ = try tx.update(SHItem.self, key: id) {
                                        $0.score = sc; $0.group = g
                                    }
                                }
                            default: _ = try tx.delete(SHItem.self, key: id)
                            }
                        }
                    }
                }
            }
            try await settle("round \(round)")
        }
        await onThread { _ = try! db.write { tx in try tx.deleteAll(SHItem.self) } }
        try await settle("deleteAll")
        for (k, shape) in Self.shapes.enumerated() { #expect(Self.ids(lives[k].results).isEmpty, "after deleteAll \(shape.0)") }
        await onThread { try! db.write { tx in for i in 0..<12 { try tx.insert(SHItem(id: 100 + i, group: i % 2, score: 9 - i % 4, name: "z")) } } }
        try await settle("refill")
        let before = lives.map { Self.ids($0.results) }
        db.close()
        for (k, shape) in Self.shapes.enumerated() {
            let deadline = Date().addingTimeInterval(60)
            while lives[k].error != .databaseClosed && Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }
            #expect(lives[k].error == .databaseClosed, "\(shape.0) after close: \(String(describing: lives[k].error))")
            #expect(Self.ids(lives[k].results) == before[k], "\(shape.0) after close changed what it showed")
        }
        for l in lives { l.stop() }
    }
}

private final class SHStop: @unchecked Sendable {
    private let lock = NSLock()
    private var stopped = false
    var isStopped: Bool { lock.lock(); defer { lock.unlock() }; return stopped }
    func stop() { lock.lock(); stopped = true; lock.unlock() }
}

struct ShortHuntReadOnlyTests {
    static let n = 40

    /// Every object of one round: ids 0..<n, score == round for all, name "r<round>-<id>".
    static func check(_ objects: [SHItem], _ what: String) {
        #expect(objects.count == n, "\(what): \(objects.count) objects")
        let rounds = Set(objects.map(\.score))
        #expect(rounds.count <= 1, "\(what): rounds \(rounds.sorted().prefix(5))")
        #expect(objects.allSatisfy { $0.name == "r\($0.score)-\($0.id)" && $0.group == ($0.id + $0.score) % 4 }, "\(what): mixed object")
    }

    static func round(_ r: Int, in tx: Transaction) throws {
        for i in 0..<n { _ = try tx.upsert(SHItem(id: i, group: (i + r) % 4, score: r, name: "r\(r)-\(i)")) }
    }

    // Synchronous: a test that suspends while its writer thread churns may resume minutes later
    // in a busy parallel run, with the writer taking a core all along.
    @Test func readOnlyBesideAWriterInTheSameProcess() throws {
        let path = shPath()
        defer { try? FileManager.default.removeItem(atPath: path); try? FileManager.default.removeItem(atPath: path + "-lock") }
        let writer = try Database(path: path, models: [SHItem.self], options: StoreOptions(durability: .noSync))
        try writer.write { tx in try Self.round(0, in: tx) }
        let ro = try Database(path: path, models: [SHItem.self], options: StoreOptions(readOnly: true))
        let stop = SHStop()
        let done = DispatchSemaphore(value: 0)
        Thread {
            var r = 1
            while !stop.isStopped {
                try! writer.write { tx in try Self.round(r, in: tx) }
                r += 1
            }
            done.signal()
        }.start()
        defer { stop.stop(); done.wait() }
        var changed = 0
        var seen = Set<Int>()
        for i in 0..<300 {
            let all = try ro.read { s in try s.objects(SHItem.self).fetch() }
            Self.check(all, "read \(i)")
            seen.insert(all.first?.score ?? -1)
            let (g, r) = try ro.read { s in
                let a = try s.objects(SHItem.self).fetch()
                return (
                    try s.objects(SHItem.self).filter(#Predicate { $0.group == 2 }).sorted(by: SortDescriptor(\.id, order: .reverse)).fetch(),
                    a.first?.score ?? -1
                )
            }
            #expect(
                g.count == Self.n / 4 && g.allSatisfy { $0.score == r && $0.group == 2 } && g.map(\.id) == g.map(\.id).sorted(by: >),
                "grouped read \(i) round \(r): \(g.map(\.id)) \(Set(g.map(\.score)))")
            if let one = try ro.object(SHItem.self, key: i % Self.n) {
                #expect(one.name == "r\(one.score)-\(one.id)")
            } else {
                Issue.record("object \(i) missing")
            }
            let kept = ro.objects(SHItem.self).filter(#Predicate { $0.group == 1 }).sorted(by: SortDescriptor(\.score)).prefix(5)
            let c = kept.count
            usleep(UInt32(i % 3) * 2000)
            let objs = Array(kept)
            if kept.error?.isFileChangedDuringRead ?? false {
                changed += 1
            } else {
                #expect(kept.error == nil, "kept \(i): \(String(describing: kept.error))")
                #expect(
                    c == 5 && objs.count == 5 && objs.allSatisfy { $0.group == 1 && $0.name == "r\($0.score)-\($0.id)" } && Set(objs.map(\.score)).count == 1,
                    "kept \(i): \(objs)")
            }
            do {
                let cnt = try ro.objects(SHItem.self).filter(#Predicate { $0.score >= 0 }).fetchCount()
                #expect(cnt == Self.n, "count \(i) = \(cnt)")
            } catch let e as StrataError where e.isFileChangedDuringRead { changed += 1 }
        }
        print("ShortHunt read-only: \(changed) reported file changes, \(seen.count) rounds seen, writer at \(writer.store.latestVersion)")
        #expect(seen.count > 5)
    }
}

private actor SHProbe {
    func read<T: Sendable>(_ body: @Sendable () -> T) -> T { body() }
}

struct ShortHuntLiveChangeSetTests {
    /// Read on the actor the LiveResults update on, so that results, lastChange and updateCount
    /// are of one update; consecutive updates: the change set turns the old window into the new.
    @Test func windowChangeSetsTurnTheOldWindowIntoTheNew() async throws {
        let db = try Database.inMemory(models: [SHItem.self])
        try await db.write { tx in for i in 0..<20 { try tx.insert(SHItem(id: i, group: i % 3, score: i % 7, name: "n\(i % 5)")) } }
        let probe = SHProbe()
        let lives = ShortHuntLiveWindowTests.shapes.map { LiveResults($0.1(db.objects(SHItem.self)), updatingOn: probe) }
        let stop = SHStop()
        let done = DispatchSemaphore(value: 0)
        Thread {
            var rng = SHRandom(state: 42)
            for _ in 0..<300 {
                try! db.write { tx in
                    for _ in 0..<(1 + rng.below(3)) {
                        let id = rng.below(30)
                        switch rng.below(3) {
                        case 0:
                            try tx.upsert(
                                SHItem(
                                    id: id, group: rng.below(3), score: rng.below(10),
                                    name: ["n\(rng.below(5))", "N\(rng.below(12))", "n\(rng.below(12))x", "É\(rng.below(3))", "e"][rng.below(5)]))
                        case 1:
                            let (sc, g) = (rng.below(10), rng.below(3))
                            if try tx.object(SHItem.self, key: id) != nil {
                                _ = try tx.update(SHItem.self, key: id) {
                                    $0.score = sc; $0.group = g
                                }
                            }
                        default: _ = try tx.delete(SHItem.self, key: id)
                        }
                    }
                }
                usleep(300)
            }
            stop.stop()
            done.signal()
        }.start()
        var last: [(Int, [Int])] = Array(repeating: (-1, []), count: lives.count)
        var checked = 0
        while !stop.isStopped {
            for (k, live) in lives.enumerated() {
                let (n, ids, change) = await probe.read { (live.updateCount, live.results.map(\.id), live.lastChange) }
                if n == last[k].0 + 1, last[k].0 >= 1, let change {
                    checked += 1
                    var a = last[k].1
                    for i in change.deletions.sorted(by: >) {
                        if i < a.count { a.remove(at: i) } else { Issue.record("\(ShortHuntLiveWindowTests.shapes[k].0): deletion \(i) out of \(a.count)") }
                    }
                    for j in change.insertions.sorted() {
                        if j <= a.count && j < ids.count {
                            a.insert(ids[j], at: j)
                        } else {
                            Issue.record("\(ShortHuntLiveWindowTests.shapes[k].0): insertion \(j)")
                        }
                    }
                    #expect(a == ids, "\(ShortHuntLiveWindowTests.shapes[k].0): old \(last[k].1) + \(change) = \(a), new \(ids)")
                    #expect(change.modifications.allSatisfy { $0 < ids.count }, "\(ShortHuntLiveWindowTests.shapes[k].0): \(change)")
                }
                last[k] = (n, ids)
            }
        }
        done.wait()
        print("ShortHunt change sets checked: \(checked)")
        for l in lives { l.stop() }
    }

    /// LiveResults over a read-only database beside a writer: what it shows is one commit exactly.
    @Test func liveResultsOnAReadOnlyDatabaseShowOneCommit() async throws {
        let path = shPath()
        defer { try? FileManager.default.removeItem(atPath: path); try? FileManager.default.removeItem(atPath: path + "-lock") }
        let writer = try Database(path: path, models: [SHItem.self], options: StoreOptions(durability: .noSync))
        try await writer.write { tx in try ShortHuntReadOnlyTests.round(0, in: tx) }
        let stop = SHStop()
        let done = DispatchSemaphore(value: 0)
        // The writer commits in bursts, one as each observer starts, not for as long as the test
        // runs: the test suspends, and in a busy parallel run may resume minutes later.
        let go = DispatchSemaphore(value: 0)
        Thread {
            var r = 1
            while true {
                go.wait()
                if stop.isStopped { break }
                for _ in 0..<40 { try! writer.write { tx in try ShortHuntReadOnlyTests.round(r, in: tx) }; r += 1 }
            }
            done.signal()
        }.start()
        defer { stop.stop(); go.signal(); done.wait() }
        let probe = SHProbe()
        for i in 0..<30 {
            go.signal()
            let ro = try Database(path: path, models: [SHItem.self], options: StoreOptions(readOnly: true))
            let live = LiveResults(ro.objects(SHItem.self).sorted(by: SortDescriptor(\.score, order: .reverse)).prefix(10), updatingOn: probe)
            let deadline = Date().addingTimeInterval(60)
            while await probe.read({ live.updateCount }) < 1 && Date() < deadline { try await Task.sleep(for: .milliseconds(2)) }
            let (objs, err) = await probe.read { (Array(live.results), live.results.error ?? live.error) }
            if let err {
                #expect(err.isFileChangedDuringRead, "ro live \(i): \(err)")
            } else {
                #expect(
                    objs.count == 10 && Set(objs.map(\.score)).count == 1 && objs.allSatisfy { $0.name == "r\($0.score)-\($0.id)" }, "ro live \(i): \(objs)")
            }
            live.stop()
            ro.close()
        }
    }
}

struct ShortHuntWindowChainTests {
    @Test func randomWindowChainsMatchArrayWindows() async throws {
        let db = try Database.inMemory(models: [SHItem.self])
        try await db.write { tx in for i in 0..<37 { try tx.insert(SHItem(id: i * 2 - 20, group: i % 3, score: (i * 7) % 5, name: "n\(i % 4)")) } }
        var rng = SHRandom(state: 7)
        let counts = [-5, -1, 0, 1, 2, 3, 5, 8, 36, 37, 38, 100, Int.max, Int.min, Int.max - 1]
        let bases: [(String, Results<SHItem>)] = [
            ("all", db.objects(SHItem.self)),
            ("score rev", db.objects(SHItem.self).sorted(by: SortDescriptor(\.score, order: .reverse))),
            ("group,name rev", db.objects(SHItem.self).sorted(by: SortDescriptor(\.group), SortDescriptor(\.name, order: .reverse))),
            (
                "filter score<3 sorted group rev",
                db.objects(SHItem.self).filter(#Predicate { $0.score < 3 }).sorted(by: SortDescriptor(\.group, order: .reverse))
            ),
            ("filter group==2", db.objects(SHItem.self).filter(#Predicate { $0.group == 2 })),
        ]
        for _ in 0..<400 {
            let (name, base) = bases[rng.below(bases.count)]
            var expected = try base.fetch().map(\.id)
            var r = base
            var desc = name
            for _ in 0..<(1 + rng.below(4)) {
                let n = counts[rng.below(counts.count)]
                if rng.below(2) == 0 {
                    r = r.prefix(n); desc += ".prefix(\(n))"
                    expected = Array(expected.prefix(max(n, 0)))
                } else {
                    r = r.offset(n); desc += ".offset(\(n))"
                    expected = Array(expected.dropFirst(max(n, 0)))
                }
            }
            #expect(try r.fetch().map(\.id) == expected, "\(desc)")
            #expect(r.count == expected.count, "\(desc) count")
            #expect(try r.fetchCount() == expected.count, "\(desc) fetchCount")
            #expect(r.map(\.id) == expected, "\(desc) iteration")
            #expect(r.first?.id == expected.first, "\(desc) first")
            #expect(r.last?.id == expected.last, "\(desc) last")
            #expect(r.isEmpty == expected.isEmpty, "\(desc) isEmpty")
            if !expected.isEmpty { let k = rng.below(expected.count); #expect(r[k].id == expected[k], "\(desc)[\(k)]") }
        }
    }
}

struct ShortHuntWindowOrderTests {
    /// Windows apply after filter and sort whatever the call order.
    @Test func windowsBeforeFilterAndSortApplyAfterThem() async throws {
        let db = try Database.inMemory(models: [SHItem.self])
        try await db.write { tx in for i in 0..<30 { try tx.insert(SHItem(id: i, group: i % 3, score: (i * 7) % 5, name: "n\(i % 4)")) } }
        let p = #Predicate<SHItem> { $0.group != 1 }
        let s = SortDescriptor(\SHItem.score, order: .reverse)
        let full = try db.objects(SHItem.self).filter(p).sorted(by: s).fetch().map(\.id)
        for a in [0, 1, 4, 9, 25] {
            for b in [0, 2, 7] {
                let expected = Array(full.prefix(a).dropFirst(b))
                let variants: [(String, Results<SHItem>)] = [
                    ("p s w", db.objects(SHItem.self).filter(p).sorted(by: s).prefix(a).offset(b)),
                    ("w p s", db.objects(SHItem.self).prefix(a).offset(b).filter(p).sorted(by: s)),
                    ("p w s", db.objects(SHItem.self).filter(p).prefix(a).sorted(by: s).offset(b)),
                    ("s w p", db.objects(SHItem.self).sorted(by: s).prefix(a).filter(p).offset(b)),
                ]
                for (name, r) in variants {
                    #expect(try r.fetch().map(\.id) == expected, "\(name) a=\(a) b=\(b)")
                    #expect(r.count == expected.count, "\(name) a=\(a) b=\(b) count")
                }
                let live = LiveResults(db.objects(SHItem.self).prefix(a).filter(p).offset(b).sorted(by: s), updatingOn: SHProbe())
                let deadline = Date().addingTimeInterval(60)
                while live.updateCount < 1 && Date() < deadline { try await Task.sleep(for: .milliseconds(2)) }
                #expect(live.results.map(\.id) == expected, "live a=\(a) b=\(b)")
                live.stop()
            }
        }
    }
}

struct ShortHuntKeyPathWindowTests {
    /// keyPaths name only other fields of the objects; a change of a sort or filter field that
    /// moves objects into or out of the window still changes the results, so it must be delivered.
    @Test func membershipChangesReachKeyPathFilteredLiveResults() async throws {
        let db = try Database.inMemory(models: [SHItem.self])
        try await db.write { tx in for i in 0..<10 { try tx.insert(SHItem(id: i, group: i % 3, score: i, name: "n\(i)")) } }
        let probe = SHProbe()
        let shapes: [(String, Results<SHItem>)] = [
            ("score prefix 3", db.objects(SHItem.self).sorted(by: SortDescriptor(\.score)).prefix(3)),
            ("score rev offset 2 prefix 3", db.objects(SHItem.self).sorted(by: SortDescriptor(\.score, order: .reverse)).offset(2).prefix(3)),
            ("filter score>=5", db.objects(SHItem.self).filter(#Predicate { $0.score >= 5 })),
            ("filter group==0 prefix 2", db.objects(SHItem.self).filter(#Predicate { $0.group == 0 }).prefix(2)),
        ]
        let lives = shapes.map { LiveResults($0.1, keyPaths: [\SHItem.name], updatingOn: probe) }
        let steps: [@Sendable (Transaction) throws -> Void] = [
            { tx in _ = try tx.update(SHItem.self, key: 9) { $0.score = -1 } },  // last moves to first
            { tx in _ = try tx.update(SHItem.self, key: 0) { $0.score = 100 } },
            { tx in _ = try tx.update(SHItem.self, key: 3) { $0.group = 1 } },
            { tx in
                _ = try tx.update(SHItem.self, key: 4) {
                    $0.group = 0; $0.score = 6
                }
            },
        ]
        for (s, step) in steps.enumerated() {
            try await db.write(step)
            for (k, shape) in shapes.enumerated() {
                let fresh = try shape.1.fetch()  // results are snapshots: query again
                _ = fresh
                let expected = try await db.read { snap in
                    switch k {
                    case 0: return try snap.objects(SHItem.self).sorted(by: SortDescriptor(\.score)).prefix(3).fetch().map(\.id)
                    case 1: return try snap.objects(SHItem.self).sorted(by: SortDescriptor(\.score, order: .reverse)).offset(2).prefix(3).fetch().map(\.id)
                    case 2: return try snap.objects(SHItem.self).filter(#Predicate { $0.score >= 5 }).fetch().map(\.id)
                    default: return try snap.objects(SHItem.self).filter(#Predicate { $0.group == 0 }).prefix(2).fetch().map(\.id)
                    }
                }
                let deadline = Date().addingTimeInterval(120)
                var shown: [Int] = []
                while true {
                    shown = await probe.read { lives[k].results.map(\.id) }
                    if shown == expected || Date() > deadline { break }
                    try await Task.sleep(for: .milliseconds(5))
                }
                #expect(shown == expected, "step \(s) \(shape.0)")
            }
        }
        for l in lives { l.stop() }
    }
}

struct ShortHuntCloseRaceTests {
    /// Closing while a writer thread commits: every LiveResults ends with databaseClosed and keeps
    /// a window that was exactly some commit's (here: every commit keeps ids 0..<20 with one score).
    @Test func closeDuringCommitsLeavesExactWindowsAndTheError() async throws {
        for attempt in 0..<15 {
            let path = shPath()
            defer { try? FileManager.default.removeItem(atPath: path); try? FileManager.default.removeItem(atPath: path + "-lock") }
            let db = try Database(path: path, models: [SHItem.self], options: StoreOptions(durability: .noSync))
            try await db.write { tx in for i in 0..<20 { try tx.insert(SHItem(id: i, group: i % 3, score: 0, name: "r0-\(i)")) } }
            let probe = SHProbe()
            let lives = [
                LiveResults(db.objects(SHItem.self).sorted(by: SortDescriptor(\.group, order: .reverse)).offset(3).prefix(5), updatingOn: probe),
                LiveResults(db.objects(SHItem.self).filter(#Predicate { $0.group == 1 }).prefix(4), updatingOn: probe),
                LiveResults(db.objects(SHItem.self), updatingOn: probe),
            ]
            let done = DispatchSemaphore(value: 0)
            Thread {
                var r = 1
                while true {
                    do { try db.write { tx in for i in 0..<20 { _ = try tx.upsert(SHItem(id: i, group: i % 3, score: r, name: "r\(r)-\(i)")) } } } catch {
                        break
                    }
                    r += 1
                }
                done.signal()
            }.start()
            try await Task.sleep(for: .milliseconds(UInt64(5 + attempt * 3)))
            db.close()
            done.wait()
            for (k, live) in lives.enumerated() {
                let deadline = Date().addingTimeInterval(60)
                while await probe.read({ live.error }) != .databaseClosed && Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }
                let (err, objs) = await probe.read { (live.error, Array(live.results)) }
                #expect(err == .databaseClosed, "attempt \(attempt) live \(k): \(String(describing: err))")
                #expect(Set(objs.map(\.score)).count == 1 && objs.allSatisfy { $0.name == "r\($0.score)-\($0.id)" }, "attempt \(attempt) live \(k): \(objs)")
                #expect(objs.count == [5, 4, 20][k], "attempt \(attempt) live \(k) count \(objs.count)")
                live.stop()
            }
        }
    }
}

struct ShortHuntReadOnlyGrowthTests {
    /// The writer grows the file well past what the read-only store mapped at open, then shrinks
    /// the data (deleteAll): reads are exact for some commit or say the file changed, never trap.
    @Test func readOnlyFollowsAFileThatGrows() async throws {
        let path = shPath()
        defer { try? FileManager.default.removeItem(atPath: path); try? FileManager.default.removeItem(atPath: path + "-lock") }
        let writer = try Database(path: path, models: [SHItem.self], options: StoreOptions(durability: .noSync))
        try await writer.write { tx in try tx.insert(SHItem(id: 0, group: 0, score: 1, name: "b0" + String(repeating: "x", count: 3000))) }
        let ro = try Database(path: path, models: [SHItem.self], options: StoreOptions(readOnly: true))
        let stop = SHStop()
        let done = DispatchSemaphore(value: 0)
        let big = String(repeating: "x", count: 3000)
        Thread {
            // Batch b holds ids 0..<(b*50), each named "b<b>" + big padding; every 8th batch clears all.
            var b = 1
            while !stop.isStopped && b < 120 {
                try! writer.write { tx in
                    if b % 8 == 0 { _ = try tx.deleteAll(SHItem.self) }
                    let n = (b % 8) * 50 + 1
                    for i in 0..<n { _ = try tx.upsert(SHItem(id: i, group: b, score: n, name: "b\(b)" + big)) }
                    // ids above n from earlier batches: delete
                    _ = try tx.delete(SHItem.self, where: #Predicate { $0.id >= n })
                }
                b += 1
            }
            stop.stop()
            done.signal()
        }.start()
        var reads = 0, changed = 0
        while !stop.isStopped {
            reads += 1
            do {
                let all = try await ro.read { s in try s.objects(SHItem.self).sorted(by: SortDescriptor(\.id, order: .reverse)).fetch() }
                let n = all.first?.score ?? -1
                #expect(
                    all.count == n && Set(all.map(\.group)).count == 1 && all.map(\.id) == Array((0..<n).reversed()),
                    "read \(reads): \(all.count) objects, n \(n), groups \(Set(all.map(\.group)).sorted().prefix(4))")
                let kept = ro.objects(SHItem.self).filter(#Predicate { $0.id >= 10 }).prefix(20)
                let c = kept.count
                if reads % 4 == 0 {
                    let v = kept.version ?? 0
                    let deadline = Date().addingTimeInterval(5)
                    while writer.store.latestVersion < v + 3 && !stop.isStopped && Date() < deadline { usleep(200) }
                }
                let objs = Array(kept)
                #expect(objs.count == c || (kept.error?.isFileChangedDuringRead ?? false), "kept \(reads): count \(c) vs \(objs.count)")
                if kept.error?.isFileChangedDuringRead ?? false {
                    changed += 1
                } else {
                    #expect(
                        kept.error == nil && Set(objs.map(\.group)).count <= 1 && objs.allSatisfy { $0.name.count == big.count + "b\($0.group)".count },
                        "kept \(reads): \(String(describing: kept.error))")
                }
            } catch let e as StrataError where e.isFileChangedDuringRead { changed += 1 }
        }
        done.wait()
        print("ShortHunt growth: \(reads) reads, \(changed) file changes, file \( (try? FileManager.default.attributesOfItem(atPath: path)[.size]) ?? 0)")
    }
}

struct ShortHuntAfterCloseTests {
    /// LiveResults made from results taken before the close, and made after it: they show what the
    /// results held (or nothing) and report databaseClosed, never trap or hang.
    @Test func liveResultsMadeAroundTheClose() async throws {
        let db = try Database.inMemory(models: [SHItem.self])
        try await db.write { tx in for i in 0..<8 { try tx.insert(SHItem(id: i, group: i % 2, score: i, name: "n")) } }
        let before = db.objects(SHItem.self).sorted(by: SortDescriptor(\.score, order: .reverse)).prefix(3)
        db.close()
        let probe = SHProbe()
        let lives = [LiveResults(before, updatingOn: probe), LiveResults(db.objects(SHItem.self).offset(2), updatingOn: probe)]
        for (k, live) in lives.enumerated() {
            let deadline = Date().addingTimeInterval(60)
            while await probe.read({ live.error }) == nil && Date() < deadline { try await Task.sleep(for: .milliseconds(5)) }
            let err = await probe.read { live.error }
            #expect(err == .databaseClosed, "live \(k): \(String(describing: err))")
            live.stop()
        }
        #expect(lives[0].results.map(\.id) == [7, 6, 5] || lives[0].results.isEmpty)
    }
}
