import Testing
import Foundation
import Synchronization
import StrataStorage
@testable import Strata

/// Counts the objects decoded, to prove results decode only what is read.
let decodedCounted = Atomic<Int>(0)

struct Counted: Model, Equatable {
    static let indexes: [PartialKeyPath<Counted> & Sendable] = [\.group]
    var id: Int
    var group: Int
    var label: String
    var score: Double

    init(id: Int, group: Int, label: String, score: Double) {
        self.id = id
        self.group = group
        self.label = label
        self.score = score
    }

    enum CodingKeys: String, CodingKey { case id, group, label, score }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        group = try c.decode(Int.self, forKey: .group)
        label = try c.decode(String.self, forKey: .label)
        score = try c.decode(Double.self, forKey: .score)
        decodedCounted.add(1, ordering: .relaxed)
    }
}

@Suite(.serialized) struct LazyResultsTests {
    static let n = 20_000

    func database() throws -> Database {
        let db = try Database.inMemory(models: [Counted.self])
        try db.write { tx in
            for i in 0..<Self.n { try tx.insert(Counted(id: i, group: i % 10, label: "l\(i % 97)", score: Double(i % 1000) / 10)) }
        }
        return db
    }

    /// What `body` returns, and the objects decoded while it ran.
    func measured<R>(_ body: () throws -> R) rethrows -> (value: R, decoded: Int) {
        let before = decodedCounted.load(ordering: .relaxed)
        let value = try body()
        return (value, decodedCounted.load(ordering: .relaxed) - before)
    }

    @Test func elementsAreDecodedWhenRead() throws {
        let db = try database()
        let all = db.objects(Counted.self)
        var m = measured { all.count }
        #expect(m.value == Self.n && m.decoded == 0)
        let one = measured { all[12_345].id }
        #expect(one.value == 12_345 && one.decoded == 1)
        let page = measured { all.offset(15_000).prefix(50).map(\.id) }
        #expect(page.value == Array(15_000..<15_050) && page.decoded == 50)
        let range = measured { all.objects(in: 100..<110).map(\.id) }
        #expect(range.value == Array(100..<110) && range.decoded == 10)
        m = measured { all.keys.count }
        #expect(m.value == Self.n && m.decoded == 0)
        let first = measured { all.first?.id }
        #expect(first.value == 0 && first.decoded == 1)
        // Filters that compile to record tests and sorts by numbers decode nothing to evaluate.
        let sevens = all.filter(#Predicate { $0.group == 7 && $0.score > 50 }).sorted(by: SortDescriptor(\.score, order: .reverse))
        m = measured { sevens.count }
        #expect(m.value == (0..<Self.n).filter { $0 % 10 == 7 && Double($0 % 1000) / 10 > 50 }.count && m.decoded == 0)
        #expect(measured { sevens[3].id }.decoded == 1)
        // Iteration decodes one object per step, in order.
        let streamed = measured { Array(all.offset(19_990)).map(\.id) }
        #expect(streamed.value == Array(19_990..<20_000) && streamed.decoded == 10)
        // A sort by strings needs the objects: they are decoded once, then kept. Its count comes
        // from the index before that.
        let byLabel = all.filter(#Predicate { $0.group == 3 }).sorted(by: SortDescriptor(\.label))
        #expect(measured { byLabel.count }.decoded == 0)
        #expect(measured { byLabel[5].id }.decoded == Self.n / 10)
        #expect(measured { byLabel.map(\.id).count + byLabel.count }.decoded == 0)
    }

    @Test func everyShapeAgreesWithFetch() throws {
        let db = try database()
        let shapes: [Results<Counted>] = [
            db.objects(Counted.self), db.objects(Counted.self).offset(7).prefix(13), db.objects(Counted.self).offset(Self.n + 5),
            db.objects(Counted.self).filter(#Predicate { $0.group == 4 }).prefix(30),
            db.objects(Counted.self).filter(#Predicate { $0.score < 10 }).sorted(by: SortDescriptor(\.score), SortDescriptor(\.group, order: .reverse)).offset(
                3),
            db.objects(Counted.self).sorted(by: SortDescriptor(\.group, order: .reverse)).prefix(100),
            db.objects(Counted.self).filter(#Predicate { $0.label.contains("9") }).sorted(by: SortDescriptor(\.label)),
        ]
        for results in shapes {
            let fetched = try results.fetch()
            #expect(results.count == fetched.count)
            #expect(Array(results) == fetched)
            #expect(results.keys == fetched.map(\.id))
            #expect(results.map(\.id) == fetched.map(\.id))
            #expect((0..<results.count).map { results[$0] } == fetched)
            #expect(results.first == fetched.first)
            #expect(results.error == nil)
        }
    }

    /// Windows of any size agree with an array's `dropFirst(n).prefix(m)`, on every plan: an
    /// offset plus `prefix(Int.max)` (a common "no limit"), or two offsets of `Int.max`, overflowed
    /// and trapped (found by an independent test).
    @Test func hugeWindowsAreClampedNotTrapped() throws {
        let db = try database()
        let queries: [(String, Results<Counted>)] = [
            ("all", db.objects(Counted.self)),
            ("indexed", db.objects(Counted.self).filter(#Predicate { $0.group == 4 })),
            ("unindexed", db.objects(Counted.self).filter(#Predicate { $0.score < 3 })),
            ("sorted", db.objects(Counted.self).filter(#Predicate { $0.group == 2 }).sorted(by: SortDescriptor(\.score, order: .reverse))),
            ("by string", db.objects(Counted.self).filter(#Predicate { $0.score < 1 }).sorted(by: SortDescriptor(\.label))),
        ]
        for (name, results) in queries {
            let all = try results.fetch()
            let windows: [(String, Results<Counted>, [Counted])] = [
                ("offset(1).prefix(max)", results.offset(1).prefix(.max), Array(all.dropFirst(1))),
                ("prefix(max).offset(3)", results.prefix(.max).offset(3), Array(all.dropFirst(3))),
                ("offset(max).offset(max)", results.offset(.max).offset(.max), []),
                ("offset(max).prefix(1)", results.offset(.max).prefix(1), []),
                ("offset(max - 1).offset(2).prefix(max)", results.offset(.max - 1).offset(2).prefix(.max), []),
                ("offset(2).prefix(max).prefix(max)", results.offset(2).prefix(.max).prefix(.max), Array(all.dropFirst(2))),
            ]
            for (window, shaped, expected) in windows {
                #expect(try shaped.fetch() == expected, "\(name) \(window)")
                #expect(shaped.count == expected.count, "\(name) \(window)")
                #expect(Array(shaped) == expected, "\(name) \(window)")
                #expect(shaped.keys == expected.map(\.id), "\(name) \(window)")
            }
        }
    }

    @Test func aRecordThatDoesNotDecodeReadsAsAPlaceholderAndSaysSo() throws {
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [Counted.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in for i in 0..<10 { try tx.insert(Counted(id: i, group: 0, label: "x", score: 1)) } }
        }
        _ = try Store(path: path).write { txn in try txn.tree("m:Counted")?.put(try #require(KeyEncoding.encode(4)), [1, 2, 3]) }
        let db = try Database(path: path, models: [Counted.self])
        let all = db.objects(Counted.self)
        #expect(all.count == 10)
        let items = Array(all)
        #expect(items.count == 10)
        #expect(items[3].id == 3 && items[5].id == 5)
        #expect(all.error != nil)
        #expect(throws: StrataError.self) { try all.fetch() }
    }
}
