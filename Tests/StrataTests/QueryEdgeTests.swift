import Testing
import Foundation
import Dispatch
import StrataStorage
@testable import Strata

/// A model for the edge cases of the planner: an indexed and an unindexed copy of each kind.
struct Edge: Model, Equatable {
    static let indexes: [PartialKeyPath<Edge> & Sendable] = [\.n, \.d, \.small, \.opt]
    var id: Int
    var n: Int
    var m: Int = 0
    var d: Double = 0
    var e: Double = 0
    var small: UInt8 = 0
    var opt: Int? = nil
    var s: String = ""
}

/// The reproductions of the exactness issue, one per class; the differential tests cover the
/// classes at large.
struct QueryEdgeTests {
    func database(_ objects: [Edge]) throws -> Database {
        let db = try Database.inMemory(models: [Edge.self])
        try db.write { tx in try tx.insert(contentsOf: objects) }
        return db
    }

    /// The oracle: Foundation's evaluation of the predicate over the objects in key order.
    func expected(_ objects: [Edge], _ predicate: Predicate<Edge>) throws -> [Int] {
        try objects.sorted { $0.id < $1.id }.filter { try predicate.evaluate($0) }.map(\.id)
    }

    @Test func boundsAboveTheMaximumSelectNothing() throws {
        let objects = [
            Edge(id: 1, n: 1, m: 1, d: 1, e: 1, small: 1), Edge(id: Int.max, n: Int.max, m: Int.max, d: .infinity, e: .infinity, small: 255),
            Edge(id: 5, n: 5, m: 5, d: 5, e: 5, small: 5),
        ]
        let db = try database(objects)
        let big = Int.max, small = Int.min, top: UInt8 = 255, inf = Double.infinity
        let predicates: [Predicate<Edge>] = [
            #Predicate { $0.n > big }, #Predicate { $0.id > big }, #Predicate { $0.m > big },
            #Predicate { $0.n >= big }, #Predicate { $0.id >= big }, #Predicate { $0.n <= big },
            #Predicate { $0.n < small }, #Predicate { $0.id < small }, #Predicate { $0.n <= small },
            #Predicate { $0.small > top }, #Predicate { $0.small >= top }, #Predicate { $0.d > inf }, #Predicate { $0.d >= inf },
            #Predicate { $0.n > big || $0.n == 5 }, #Predicate { $0.n > big && $0.id > 0 },
        ]
        for predicate in predicates {
            let results = db.objects(Edge.self).filter(predicate)
            let want = try expected(objects, predicate)
            #expect(results.map(\.id) == want, "\(predicate)")
            #expect(results.count == want.count, "\(predicate)")
            #expect(results.keys == want, "\(predicate)")
            #expect(results.max(of: \.n) == objects.filter { want.contains($0.id) }.map(\.n).max(), "\(predicate)")
            #expect(results.sum(of: \.d) == objects.filter { want.contains($0.id) }.reduce(0) { $0 + $1.d }, "\(predicate)")
            try db.read { _ in }
            let inWrite = try db.write { tx in try tx.count(Edge.self, where: predicate) }
            #expect(inWrite == want.count, "\(predicate)")
        }
    }

    @Test func reverseSortsKeepTiesInKeyOrderOnEveryPlan() throws {
        let objects = [Edge(id: 1, n: 7, m: 7), Edge(id: 2, n: 7, m: 7), Edge(id: 3, n: 7, m: 7), Edge(id: 4, n: 1, m: 1)]
        let db = try database(objects)
        let reverseIndexed = db.objects(Edge.self).sorted(by: SortDescriptor(\.n, order: .reverse))
        #expect(reverseIndexed.explain().contains("descending"))
        #expect(reverseIndexed.keys == [1, 2, 3, 4])
        #expect(reverseIndexed.prefix(2).keys == [1, 2])
        #expect(reverseIndexed.offset(1).prefix(2).keys == [2, 3])
        #expect(db.objects(Edge.self).sorted(by: SortDescriptor(\.m, order: .reverse)).keys == [1, 2, 3, 4])
        #expect(db.objects(Edge.self).filter(#Predicate { $0.id > 1 }).sorted(by: SortDescriptor(\.n, order: .reverse)).keys == [2, 3, 4])
        let inWrite = try db.write { tx in try tx.objects(Edge.self, sortedBy: [SortDescriptor(\.n, order: .reverse)]).map(\.id) }
        #expect(inWrite == [1, 2, 3, 4])
    }

    /// A descending index walk holds back each run of equal values to visit it in key order: runs
    /// of hundreds of entries with long keys (past the run's first buffers), a run cut by the limit
    /// or the offset, and runs of one, against `SortDescriptor.compare` with ties in key order.
    @Test func longRunsOfTiesInADescendingWalk() throws {
        struct Tied: Model, Equatable {
            static let indexes: [PartialKeyPath<Tied> & Sendable] = [\.n]
            var id: String
            var n: Int
        }
        var rng = SeededRandom(seed: 20261202)
        var objects: [Tied] = []
        for i in 0..<700 {
            let length = 1 + Int(rng.next() % 120)
            let id = String((0..<length).map { _ in Character(Unicode.Scalar(UInt8(97 + rng.next() % 26))) }) + "\(i)"
            // Mostly three big runs; every tenth object alone in its value.
            objects.append(Tied(id: id, n: i % 10 == 0 ? 1_000 + i : Int(rng.next() % 3)))
        }
        let db = try Database.inMemory(models: [Tied.self])
        try db.write { tx in try tx.insert(contentsOf: objects) }
        let descriptor = SortDescriptor(\Tied.n, order: .reverse)
        // ASCII ids: key order is String order.
        let expected = objects.sorted { a, b in
            let c = descriptor.compare(a, b)
            return c == .orderedSame ? a.id < b.id : c == .orderedAscending
        }.map(\.id)
        let results = db.objects(Tied.self).sorted(by: descriptor)
        #expect(results.explain().contains("descending"))
        #expect(results.keys == expected, "seed 20261202")
        #expect(results.map(\.id) == expected)
        for (offset, limit) in [(0, 1), (0, 150), (3, 200), (250, 10), (0, 699), (690, 50)] {
            let window = Array(expected.dropFirst(offset).prefix(limit))
            #expect(results.offset(offset).prefix(limit).keys == window, "offset \(offset), limit \(limit)")
            #expect(results.offset(offset).prefix(limit).map(\.id) == window, "offset \(offset), limit \(limit)")
        }
    }

    @Test func nanSortsAboveEveryNumberOnEveryPlan() throws {
        let values: [Double] = [.nan, 1, -.infinity, .infinity, -0.0, 0.0, .nan, -1]
        let objects = values.enumerated().map { Edge(id: $0.offset, n: 0, d: $0.element, e: $0.element, s: "x") }
        let db = try database(objects)
        let ascending = [2, 7, 4, 5, 1, 3, 0, 6]
        let descending = [0, 6, 3, 1, 4, 5, 7, 2]
        #expect(db.objects(Edge.self).sorted(by: SortDescriptor(\.d)).keys == ascending)  // index walk
        #expect(db.objects(Edge.self).sorted(by: SortDescriptor(\.e)).keys == ascending)  // in memory, encoded
        #expect(db.objects(Edge.self).sorted(by: SortDescriptor(\.s), SortDescriptor(\.e)).keys == ascending)  // with a compared descriptor
        #expect(db.objects(Edge.self).sorted(by: SortDescriptor(\.d, order: .reverse)).keys == descending)
        #expect(db.objects(Edge.self).sorted(by: SortDescriptor(\.s), SortDescriptor(\.e, order: .reverse)).keys == descending)
    }

    @Test func stringContainsIsThePredicatesEverywhere() throws {
        struct Named: Model {
            static let indexes: [PartialKeyPath<Named> & Sendable] = [\.name]
            var id: Int
            var name: String
            var inner: Inner
        }
        struct Inner: Codable, Sendable, Equatable { var name: String }
        let names = ["cafe\u{301}", "café", "", "abc", "\u{301}", "e\u{301}x", "Ana", "JOSÉ", "bob"]
        let objects = names.enumerated().map { Named(id: $0.offset, name: $0.element, inner: Inner(name: $0.element)) }
        let db = try Database.inMemory(models: [Named.self])
        try db.write { tx in try tx.insert(contentsOf: objects) }
        for needle in ["", "\u{301}", "e", "é", "e\u{301}", "ca", "x", "NA"] {
            for predicate in [
                #Predicate<Named> { $0.name.contains(needle) }, #Predicate<Named> { $0.inner.name.contains(needle) },
                #Predicate<Named> { $0.name.starts(with: needle) }, #Predicate<Named> { !$0.name.contains(needle) },
            ] {
                let want = try objects.filter { try predicate.evaluate($0) }.map(\.id)
                #expect(db.objects(Named.self).filter(predicate).keys == want, "\(needle.unicodeScalars.map { $0.value })")
                #expect(db.objects(Named.self).filter(predicate).count == want.count)
            }
        }
        // The helper: without options it is the predicate's; with options Foundation's comparison.
        let matching: [(StringMatch, StringMatchOptions, [Int])] = [
            (.contains("ANA"), .caseInsensitive, [6]),
            (.contains("jose"), [.caseInsensitive, .diacriticInsensitive], [7]),
            (.contains(""), [], Array(names.indices)),
            (.contains(""), .caseInsensitive, Array(names.indices)),
            (.contains("\u{301}"), [], [4]),
            (.beginsWith("e"), [], []),
            (.endsWith("e"), [], []),
            (.endsWith("\u{301}"), [], [4]),
            (.equals("e\u{301}x"), [], [5]),
            (.equals("JOSE"), .diacriticInsensitive, [7]),
        ]
        for (match, options, want) in matching {
            #expect(db.objects(Named.self).filter(\.name, matching: match, options: options).keys == want, "\(match) \(options)")
            #expect(db.objects(Named.self).filter(\.name, matching: match, options: options).count == want.count, "\(match) \(options)")
        }
    }

    @Test func integerSumsThatOverflowThrowInsteadOfTrapping() throws {
        let db = try database([Edge(id: 1, n: Int.max), Edge(id: 2, n: 1)])
        #expect(throws: StrataError.self) { try db.objects(Edge.self).fetchSum(of: \.n) }
        #expect(db.objects(Edge.self).sum(of: \.n) == 0)
        #expect(db.objects(Edge.self).filter(#Predicate { $0.id == 2 }).sum(of: \.n) == 1)
    }

    @Test func forceUnwrapsTranslateOnlyWhereGuarded() throws {
        let objects = [Edge(id: 1, n: 0, opt: 3), Edge(id: 2, n: 0, opt: nil), Edge(id: 3, n: 0, opt: 9)]
        let db = try database(objects)
        let guarded = #Predicate<Edge> { $0.opt != nil && $0.opt! > 4 }
        #expect(db.objects(Edge.self).filter(guarded).keys == [3])
        #expect(db.objects(Edge.self).filter(guarded).count == 1)
        #expect(db.objects(Edge.self).filter(guarded).explain().contains("i:Edge:opt"))
        let bare = #Predicate<Edge> { $0.opt! == 3 }
        // Evaluating it on object 2 throws, so the query fails as evaluating it does.
        #expect(!db.objects(Edge.self).filter(bare).explain().contains("no residual filter"))
        #expect(db.objects(Edge.self).filter(bare).error != nil)
        #expect(throws: StrataError.self) { try db.objects(Edge.self).filter(bare).fetchCount() }
        let orGuard = #Predicate<Edge> { $0.opt == nil || $0.opt! > 4 }
        #expect(db.objects(Edge.self).filter(orGuard).keys == [2, 3])
    }

    /// Evaluation goes left to right and stops at the first false conjunct, so an object a later
    /// conjunct's (or a later filter's) index would skip still evaluates the earlier ones, which
    /// may throw; and a window does not stop the evaluation of a predicate that may throw.
    @Test func aPredicateThatMayThrowIsEvaluatedOnEveryObjectBeforeIt() throws {
        let objects = [Edge(id: 1, n: 5, opt: 3), Edge(id: 2, n: 0, opt: nil), Edge(id: 3, n: 5, opt: 9)]
        let db = try database(objects)
        let unwrapFirst = #Predicate<Edge> { $0.opt! > 1 && $0.n == 5 }
        let unwrapLast = #Predicate<Edge> { $0.n == 5 && $0.opt! > 1 }
        let unwrap = #Predicate<Edge> { $0.opt! > 1 }
        let indexed = #Predicate<Edge> { $0.n == 5 }
        let throwing: [Results<Edge>] = [
            db.objects(Edge.self).filter(unwrapFirst),
            db.objects(Edge.self).filter(unwrap).filter(indexed),
            db.objects(Edge.self).filter(unwrap).prefix(1),
            db.objects(Edge.self).filter(unwrap).sorted(by: SortDescriptor(\.n)).prefix(1),
            db.objects(Edge.self).filter(unwrap).filter(indexed).sorted(by: SortDescriptor(\.n, order: .reverse)).prefix(1),
        ]
        for (i, results) in throwing.enumerated() {
            #expect(throws: StrataError.self, "shape \(i)") { try results.fetchCount() }
            #expect(throws: StrataError.self, "shape \(i)") { try results.fetch() }
            #expect(results.error != nil, "shape \(i)")
        }
        // Conjuncts before the unwrap narrow the candidates: object 2 never reaches it.
        #expect(try db.objects(Edge.self).filter(unwrapLast).fetch().map(\.id) == [1, 3])
        #expect(try db.objects(Edge.self).filter(indexed).filter(unwrap).fetch().map(\.id) == [1, 3])
        #expect(db.objects(Edge.self).filter(indexed).filter(unwrap).explain().contains("i:Edge:n"))
    }

    @Test func stringRangesFollowSwiftsOwnComparison() throws {
        struct Word: Model {
            static let indexes: [PartialKeyPath<Word> & Sendable] = [\.indexed]
            var id: Int
            var indexed: String
            var plain: String
        }
        let words = ["éb", "a", "z", "e\u{301}", "é", "ea"]
        let objects = words.enumerated().map { Word(id: $0.offset, indexed: $0.element, plain: $0.element) }
        let db = try Database.inMemory(models: [Word.self])
        try db.write { tx in try tx.insert(contentsOf: objects) }
        for bound in ["e\u{301}", "é", "éa", "e"] {
            let predicates: [(Predicate<Word>, Predicate<Word>)] = [
                (#Predicate { $0.indexed <= bound }, #Predicate { $0.plain <= bound }),
                (#Predicate { $0.indexed > bound }, #Predicate { $0.plain > bound }),
                (#Predicate { $0.indexed == bound }, #Predicate { $0.plain == bound }),
            ]
            for (onIndex, onRecords) in predicates {
                let want = try objects.filter { try onIndex.evaluate($0) }.map(\.id)
                #expect(db.objects(Word.self).filter(onIndex).keys == want, "\(bound.unicodeScalars.map(\.value))")
                #expect(db.objects(Word.self).filter(onRecords).keys == want, "\(bound.unicodeScalars.map(\.value))")
            }
        }
    }
}

/// Live results whose order is a reverse walk of an index with ties, and observers that hit an error.
struct LiveEdgeTests {
    @Test func reverseSortedObserverKeepsEachObjectOnce() throws {
        let db = try Database.inMemory(models: [Edge.self])
        try db.write { tx in try tx.insert(contentsOf: [Edge(id: 1, n: 7), Edge(id: 2, n: 7), Edge(id: 3, n: 7)]) }
        let inbox = Inbox<[Int]>()
        let token = db.objects(Edge.self).sorted(by: SortDescriptor(\.n, order: .reverse)).observe(on: DispatchQueue(label: "t")) { change in
            switch change {
            case .initial(let r): inbox.append(r.keys)
            case .update(let r, _, _, _): inbox.append(r.keys)
            case .error: inbox.append([-1])
            }
        }
        defer { token.invalidate() }
        #expect(inbox.wait { $0.count == 1 })
        try db.write { tx in try tx.update(Edge.self, key: 2) { $0.m = 1 } }
        try db.write { tx in try tx.update(Edge.self, key: 1) { $0.m = 1 } }
        try db.write { tx in try tx.update(Edge.self, key: 3) { $0.n = 8 } }
        #expect(inbox.wait { $0.last == [3, 1, 2] })
        #expect(inbox.all.allSatisfy { Set($0).count == $0.count && $0.count == 3 }, "\(inbox.all)")
    }

    @Test func anObserverRecoversAfterAnError() throws {
        var options = StoreOptions(durability: .noSync)
        options.readerSlots = 8
        let db = try Database(path: databasePath(), models: [Edge.self], options: options)
        try db.write { tx in try tx.insert(Edge(id: 1, n: 1)) }
        // (keys, deletions, insertions) per delivery; nil keys for an error.
        let inbox = Inbox<(keys: [Int]?, deletions: [Int], insertions: [Int])>()
        let token = db.objects(Edge.self).observe(on: DispatchQueue(label: "t")) { change in
            switch change {
            case .initial(let r): inbox.append((r.keys, [], []))
            case .update(let r, let d, let i, _): inbox.append((r.keys, d, i))
            case .error: inbox.append((nil, [], []))
            }
        }
        defer { token.invalidate() }
        #expect(inbox.wait { $0.count == 1 })
        // Hold every reader slot, each on a different commit, so the observer cannot read.
        var held: [Snapshot] = []
        var id = 2
        while held.count < 8 && id < 100 {
            try db.write { tx in try tx.insert(Edge(id: id, n: id)) }
            id += 1
            if let snapshot = try? db.snapshot() { held.append(snapshot) }
        }
        try db.write { tx in try tx.insert(Edge(id: id, n: id)) }
        #expect(inbox.wait { $0.contains { $0.keys == nil } }, "no error delivered")
        held.removeAll()
        try db.write { tx in try tx.delete(Edge.self, key: 1) }
        let want = Array(2...id)
        #expect(inbox.wait { $0.last?.keys == want }, "\(inbox.all.map(\.keys))")
        // Every update applies to the last results delivered before it, errors in between or not.
        var mirror: [Int] = []
        for delivery in inbox.all {
            guard let keys = delivery.keys else { continue }
            if mirror.isEmpty && delivery.deletions.isEmpty && delivery.insertions.isEmpty {
                mirror = keys
                continue
            }
            #expect(apply(mirror, deletions: delivery.deletions, insertions: delivery.insertions, new: keys) == keys)
            mirror = keys
        }
    }
}
