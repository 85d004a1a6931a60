import Testing
import Foundation
@testable import Strata
import StrataStorage

// A hunt's tests (all passing when written): differential checks of lazy Results against plain
// arrays and Predicate.evaluate / SortDescriptor.compare, unique indexes, migrations and the
// strata tool's agreement with the data.

func huntBPath(_ name: String) -> String {
    NSTemporaryDirectory() + "strata-huntb-\(name)-\(UUID().uuidString).strata"
}

func huntBCleanup(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
    try? FileManager.default.removeItem(atPath: path + "-lock")
}

// MARK: migration models: removing a String field, re-adding it as Int?

enum HBMig {
    struct V1: Model {
        static var modelName: String { "HBMigThing" }
        var id: Int
        var x: String
        var y: Int
    }
    struct V2: Model {
        static var modelName: String { "HBMigThing" }
        var id: Int
        var y: Int
    }
    struct V3: Model {
        static var modelName: String { "HBMigThing" }
        var id: Int
        var x: Int?
        var y: Int
    }
}

// MARK: unique index models

struct HBUser: Model {
    static let uniqueIndexes: [PartialKeyPath<HBUser> & Sendable] = [\.email]
    static let indexes: [PartialKeyPath<HBUser> & Sendable] = [\.age]
    var id: String
    var email: String
    var age: Int
}

struct HBContact: Model {
    static let indexDescriptors: [IndexDescriptor<HBContact>] = [
        .unique(\.country, \.phone),
        IndexDescriptor.unique(\.name, collation: .caseInsensitive),
    ]
    var id: Int
    var name: String
    var country: String
    var phone: String
}

enum HBAddUnique {
    struct V1: Model {
        static var modelName: String { "HBAddUnique" }
        var id: Int
        var code: String
    }
    struct V2: Model {
        static var modelName: String { "HBAddUnique" }
        static let uniqueIndexes: [PartialKeyPath<V2> & Sendable] = [\.code]
        var id: Int
        var code: String
    }
}

@Suite struct HuntModelUniqueTests {
    @Test func removedStringFieldReaddedAsOptionalInt() throws {
        let path = huntBPath("readd")
        defer { huntBCleanup(path) }
        do {
            let db = try Database(path: path, models: [HBMig.V1.self])
            try db.write { tx in
                try tx.insert(HBMig.V1(id: 1, x: "hello", y: 10))
                try tx.insert(HBMig.V1(id: 2, x: "world", y: 20))
            }
        }
        do {
            let db = try Database(path: path, models: [HBMig.V2.self])
            #expect(try db.objects(HBMig.V2.self).fetch().map(\.y) == [10, 20])
        }
        var opened: Database?
        do {
            opened = try Database(path: path, models: [HBMig.V3.self])
        } catch let error as StrataError {
            // A typed refusal is acceptable.
            if case .migrationRequired = error { return }
            Issue.record("unexpected error \(error)")
            return
        }
        let db = try #require(opened)
        let all = try db.objects(HBMig.V3.self).fetch()
        #expect(all.map(\.y) == [10, 20])
        #expect(all.map(\.x) == [nil, nil])
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
        #expect(db.objects(HBMig.V3.self).filter(#Predicate { $0.x == nil }).count == 2)
    }

    @Test func caughtUniqueViolationsLeaveNothingBehind() throws {
        let db = try Database.inMemory(models: [HBUser.self])
        try db.write { tx in
            try tx.insert(HBUser(id: "a", email: "a@x", age: 1))
            try tx.insert(HBUser(id: "b", email: "b@x", age: 2))
        }
        try db.write { tx in
            #expect(throws: StrataError.self) { try tx.insert(HBUser(id: "c", email: "a@x", age: 3)) }
            #expect(throws: StrataError.self) { try tx.upsert(HBUser(id: "b", email: "a@x", age: 4)) }
            #expect(throws: StrataError.self) {
                try tx.update(HBUser.self, key: "b") {
                    $0.email = "a@x"; $0.age = 5
                }
            }
            try tx.insert(HBUser(id: "f", email: "f@x", age: 8))
        }
        let all = try db.objects(HBUser.self).fetch()
        #expect(all.map(\.id) == ["a", "b", "d", "f"] || all.map(\.id) == ["a", "b", "f"])
        #expect(db.objects(HBUser.self).filter(#Predicate { $0.age == 4 || $0.age == 5 || $0.age == 3 }).count == 0)
        #expect(db.objects(HBUser.self).filter(#Predicate { $0.email == "a@x" }).map(\.id) == ["a"])
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
    }

    @Test func swapUniqueValuesInOneTransaction() throws {
        let db = try Database.inMemory(models: [HBUser.self])
        try db.write { tx in
            try tx.insert(HBUser(id: "a", email: "a@x", age: 1))
            try tx.insert(HBUser(id: "b", email: "b@x", age: 2))
        }
        try db.write { tx in
            try tx.update(HBUser.self, key: "a") { $0.email = "tmp" }
            try tx.update(HBUser.self, key: "b") { $0.email = "a@x" }
            try tx.update(HBUser.self, key: "a") { $0.email = "b@x" }
        }
        #expect(db.objects(HBUser.self).filter(#Predicate { $0.email == "a@x" }).map(\.id) == ["b"])
        #expect(db.objects(HBUser.self).filter(#Predicate { $0.email == "b@x" }).map(\.id) == ["a"])
        #expect(db.objects(HBUser.self).filter(#Predicate { $0.email == "tmp" }).count == 0)
        // delete then reuse a unique value in the same transaction
        try db.write { tx in
            try tx.delete(HBUser.self, key: "a")
            try tx.insert(HBUser(id: "c", email: "b@x", age: 3))
        }
        #expect(db.objects(HBUser.self).filter(#Predicate { $0.email == "b@x" }).map(\.id) == ["c"])
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
    }

    @Test func compoundAndCollatedUnique() throws {
        let db = try Database.inMemory(models: [HBContact.self])
        try db.write { tx in
            try tx.insert(HBContact(id: 1, name: "Ana", country: "pt", phone: "1"))
            try tx.insert(HBContact(id: 2, name: "Bob", country: "es", phone: "1"))
        }
        try db.write { tx in
            #expect(throws: StrataError.self) { try tx.insert(HBContact(id: 3, name: "Cid", country: "pt", phone: "1")) }
            #expect(throws: StrataError.self) { try tx.insert(HBContact(id: 4, name: "ANA", country: "fr", phone: "9")) }
            #expect(throws: StrataError.self) { try tx.update(HBContact.self, key: 2) { $0.name = "ana" } }
            #expect(throws: StrataError.self) { try tx.update(HBContact.self, key: 2) { $0.country = "pt" } }
            // changing only case of own name is fine
            try tx.update(HBContact.self, key: 1) { $0.name = "ANA" }
        }
        let all = try db.objects(HBContact.self).fetch()
        #expect(all.map(\.id) == [1, 2])
        #expect(all.map(\.name) == ["ANA", "Bob"])
        #expect(all.map(\.country) == ["pt", "es"])
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
    }

    @Test func addingAUniqueIndexOverDuplicates() throws {
        let path = huntBPath("adduniq")
        defer { huntBCleanup(path) }
        do {
            let db = try Database(path: path, models: [HBAddUnique.V1.self])
            try db.write { tx in
                try tx.insert(HBAddUnique.V1(id: 1, code: "x"))
                try tx.insert(HBAddUnique.V1(id: 2, code: "x"))
            }
        }
        var threw: (any Error)?
        do {
            let db = try Database(path: path, models: [HBAddUnique.V2.self])
            Issue.record("opened with a unique index over duplicates: \(db.objects(HBAddUnique.V2.self).count) objects")
            let report = try StoredObjects.check(in: db.store)
            Issue.record("check: \(report.problems)")
        } catch {
            threw = error
        }
        #expect(threw is StrataError, "\(String(describing: threw))")
        // the file is unchanged: the old type still opens, with both objects, and checks clean
        let db = try Database(path: path, models: [HBAddUnique.V1.self])
        #expect(try db.objects(HBAddUnique.V1.self).fetch().count == 2)
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
    }
}

// MARK: Results differential

protocol HBIndexing: Sendable { static var indexed: Bool { get } }
enum HBIdx: HBIndexing { static var indexed: Bool { true } }
enum HBScan: HBIndexing { static var indexed: Bool { false } }

struct HBAddr: Codable, Sendable, Hashable {
    var zip: Int?
    var city: String
}

struct HBNum<T: HBIndexing>: Model {
    static var modelName: String { T.indexed ? "HBNumI" : "HBNumS" }
    static var indexes: [PartialKeyPath<HBNum> & Sendable] {
        T.indexed ? [\.i, \.u, \.d, \.date, \.oi, \.s, \.addr?.zip, \.i8] : []
    }
    var id: Int
    var i: Int64
    var u: UInt64
    var d: Double
    var date: Date
    var oi: Int?
    var s: String
    var addr: HBAddr?
    var i8: Int8
    var od: Double?
}

struct HBRng {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E3779B97F4A7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) &* 0x94D049BB133111EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    mutating func pick<T>(_ xs: [T]) -> T { xs[below(xs.count)] }
}

enum HBData {
    static let ints: [Int64] = [Int64.min, Int64.min + 1, -1, 0, 1, 2, Int64.max - 1, Int64.max]
    static let uints: [UInt64] = [0, 1, UInt64(Int64.max), UInt64(Int64.max) + 1, UInt64.max - 1, UInt64.max]
    static let doubles: [Double] = [-.infinity, -1.5, -0.0, 0.0, 1e-300, 2.5, .infinity, .nan, -Double.greatestFiniteMagnitude]
    static let strings: [String] = ["", "e\u{301}", "\u{e9}", "a", "B", "Z\u{308}", "z", "\u{0}x"]
    static let dates: [Date] = [
        Date(timeIntervalSinceReferenceDate: 0), Date(timeIntervalSinceReferenceDate: -1e9), Date.distantFuture, Date(timeIntervalSinceReferenceDate: 1.5),
    ]

    static func make(_ r: inout HBRng, id: Int) -> HBNum<HBIdx> {
        HBNum<HBIdx>(
            id: id, i: r.pick(ints), u: r.pick(uints), d: r.pick(doubles), date: r.pick(dates),
            oi: r.below(3) == 0 ? nil : r.pick([Int.min, -3, 0, 3, Int.max]), s: r.pick(strings),
            addr: r.below(3) == 0 ? nil : HBAddr(zip: r.below(2) == 0 ? nil : r.pick([-1, 0, 5]), city: r.pick(strings)),
            i8: r.pick([Int8.min, -1, 0, 1, Int8.max]),
            od: r.below(3) == 0 ? nil : r.pick(doubles))
    }
}

extension HBNum {
    func retag<U: HBIndexing>(_: U.Type) -> HBNum<U> {
        HBNum<U>(id: id, i: i, u: u, d: d, date: date, oi: oi, s: s, addr: addr, i8: i8, od: od)
    }
    var tuple: String {
        "\(id)|\(i)|\(u)|\(d)|\(date.timeIntervalSinceReferenceDate)|\(String(describing: oi))|\(s.unicodeScalars.map { String($0.value) })|\(String(describing: addr))|\(i8)|\(String(describing: od))"
    }
}

@Suite struct HuntResultsDifferentialTests {
    func sortCompare<M>(_ descs: [SortDescriptor<M>], _ a: M, _ b: M, id: (M) -> Int) -> Bool {
        for d in descs {
            let c = d.compare(a, b)
            if c == .orderedAscending { return true }
            if c == .orderedDescending { return false }
        }
        return id(a) < id(b)
    }

    func run<T: HBIndexing>(_: T.Type, seed: UInt64) throws -> [String] {
        var problems: [String] = []
        var r = HBRng(state: seed)
        let db = try Database.inMemory(models: [HBNum<T>.self])
        var all: [HBNum<T>] = []
        for id in 0..<60 { all.append(HBData.make(&r, id: id * 3 - 50).retag(T.self)) }
        try db.write { tx in for o in all { try tx.insert(o) } }
        // later writes, results taken before must not change
        let before = db.objects(HBNum<T>.self).sorted(by: SortDescriptor(\.i)).filter(#Predicate { $0.i > 0 })
        let beforeCount = before.count
        let beforeIDs = before.map(\.id)
        try db.write { tx in
            for o in all.prefix(20) { try tx.delete(HBNum<T>.self, key: o.id) }
            for o in all.prefix(10) {
                var n = o
                n.i = 0 &- n.i &+ 1
                try tx.insert(n)
            }
        }
        if before.count != beforeCount || before.map(\.id) != beforeIDs {
            problems.append("snapshot results changed after write")
        }
        all = try db.objects(HBNum<T>.self).fetch()
        all.sort { $0.id < $1.id }

        let bigU = UInt64(Int64.max)
        let minI = Int64.min
        let preds: [(String, Predicate<HBNum<T>>?)] = [
            ("all", nil),
            ("i>0", #Predicate { $0.i > 0 }),
            ("i==min", #Predicate { $0.i == minI }),
            ("u>bigU", #Predicate { $0.u > bigU }),
            ("u<=bigU", #Predicate { $0.u <= bigU }),
            ("d>=0", #Predicate { $0.d >= 0 }),
            ("d<0", #Predicate { $0.d < 0 }),
            ("oi!=nil", #Predicate { $0.oi != nil }),
            ("oi==nil", #Predicate { $0.oi == nil }),
            ("zip==nil", #Predicate { $0.addr?.zip == nil }),
            ("s==é", #Predicate { $0.s == "\u{e9}" }),
            ("i8<0", #Predicate { $0.i8 < 0 }),
            ("od>1", #Predicate { $0.od != nil && $0.od! > 1 }),
        ]
        func cD(_ x: Double, _ y: Double) -> ComparisonResult {
            if x.isNaN || y.isNaN { return x.isNaN && y.isNaN ? .orderedSame : (x.isNaN ? .orderedDescending : .orderedAscending) }
            return x < y ? .orderedAscending : (x == y ? .orderedSame : .orderedDescending)
        }
        func cC<V: Comparable>(_ x: V, _ y: V) -> ComparisonResult { x < y ? .orderedAscending : (x == y ? .orderedSame : .orderedDescending) }
        func cO<V: Comparable>(_ x: V?, _ y: V?) -> ComparisonResult {
            switch (x, y) {
            case (nil, nil): return .orderedSame
            case (nil, _): return .orderedAscending
            case (_, nil): return .orderedDescending
            case let (a?, b?): return cC(a, b)
            }
        }
        func cOD(_ x: Double?, _ y: Double?) -> ComparisonResult {
            switch (x, y) {
            case (nil, nil): return .orderedSame
            case (nil, _): return .orderedAscending
            case (_, nil): return .orderedDescending
            case let (a?, b?): return cD(a, b)
            }
        }
        typealias Cmp = (HBNum<T>, HBNum<T>) -> ComparisonResult
        func rev(_ c: @escaping Cmp) -> Cmp { { a, b in c(b, a) } }
        let sorts: [(String, [SortDescriptor<HBNum<T>>], [Cmp])] = [
            ("none", [], []),
            ("i", [SortDescriptor(\.i)], [{ cC($0.i, $1.i) }]),
            ("-i", [SortDescriptor(\.i, order: .reverse)], [rev { cC($0.i, $1.i) }]),
            ("u", [SortDescriptor(\.u)], [{ cC($0.u, $1.u) }]),
            ("-u", [SortDescriptor(\.u, order: .reverse)], [rev { cC($0.u, $1.u) }]),
            ("d", [SortDescriptor(\.d)], [{ cD($0.d, $1.d) }]),
            ("-d", [SortDescriptor(\.d, order: .reverse)], [rev { cD($0.d, $1.d) }]),
            ("oi", [SortDescriptor(\.oi)], [{ cO($0.oi, $1.oi) }]),
            ("-oi", [SortDescriptor(\.oi, order: .reverse)], [rev { cO($0.oi, $1.oi) }]),
            ("-s,d", [SortDescriptor(\.s, order: .reverse), SortDescriptor(\.d)], [rev { cC($0.s, $1.s) }, { cD($0.d, $1.d) }]),
            ("date", [SortDescriptor(\.date)], [{ cC($0.date, $1.date) }]),
            ("-i8", [SortDescriptor(\.i8, order: .reverse)], [rev { cC($0.i8, $1.i8) }]),
            ("-od", [SortDescriptor(\.od, order: .reverse)], [rev { cOD($0.od, $1.od) }]),
            ("zip", [SortDescriptor(\.addr?.zip)], [{ cO($0.addr?.zip, $1.addr?.zip) }]),
        ]
        let windows: [(Int?, Int?)] = [(nil, nil), (0, 5), (3, nil), (1000, nil), (5, 1 << 62), (-5, -3)]
        for (pn, p) in preds {
            let matched = try all.filter { try p?.evaluate($0) ?? true }
            for (sn, s, cmps) in sorts {
                let sorted =
                    s.isEmpty
                    ? matched
                    : matched.sorted { a, b in
                        for c in cmps { let r = c(a, b); if r != .orderedSame { return r == .orderedAscending } }
                        return a.id < b.id
                    }
                for (off, lim) in windows {
                    var res = db.objects(HBNum<T>.self)
                    if let p { res = res.filter(p) }
                    if !s.isEmpty { res = res.sorted(by: s) }
                    var exp = sorted
                    if let off { res = res.offset(off); exp = Array(exp.dropFirst(max(0, off))) }
                    if let lim { res = res.prefix(lim); exp = Array(exp.prefix(max(0, lim))) }
                    let tag = "\(T.self) \(pn) sort \(sn) off \(String(describing: off)) lim \(String(describing: lim))"
                    let expT = exp.map(\.tuple)
                    if res.count != exp.count { problems.append("\(tag): count \(res.count) vs \(exp.count)") }
                    if let e = res.error { problems.append("\(tag): error \(e)"); continue }
                    let got = try res.fetch().map(\.tuple)
                    if got != expT { problems.append("\(tag): fetch ids \(try res.fetch().map(\.id)) vs \(exp.map(\.id))") }
                    if Array(res).map(\.tuple) != expT { problems.append("\(tag): iterate differs") }
                    if res.indices.map({ res[$0].tuple }) != expT { problems.append("\(tag): subscript differs") }
                    if res.keys != exp.map(\.id) { problems.append("\(tag): keys \(res.keys) vs \(exp.map(\.id))") }
                    for range in [0..<3, 2..<5, -4..<2, 5..<1000] {
                        let c = range.clamped(to: 0..<exp.count)
                        if res.objects(in: range).map(\.tuple) != Array(expT[c]) { problems.append("\(tag): objects(in: \(range)) differs") }
                    }
                    if let f = res.first?.tuple, f != expT.first { problems.append("\(tag): first differs") }
                    if res.last?.tuple != expT.last { problems.append("\(tag): last differs") }
                    // aggregates
                    func cmpD(_ a: Double?, _ b: Double?) -> Bool { a == b || (a?.isNaN == true && b?.isNaN == true) }
                    let ds = exp.map(\.d)
                    let expMaxD: Double? = ds.isEmpty ? nil : (ds.contains { $0.isNaN } ? .nan : ds.max())
                    let nonNaN = ds.filter { !$0.isNaN }
                    let expMinD: Double? = ds.isEmpty ? nil : (nonNaN.isEmpty ? .nan : nonNaN.min())
                    if !cmpD(res.max(of: \.d), expMaxD) {
                        problems.append("\(tag): max d \(String(describing: res.max(of: \.d))) vs \(String(describing: expMaxD))")
                    }
                    if !cmpD(res.min(of: \.d), expMinD) {
                        problems.append("\(tag): min d \(String(describing: res.min(of: \.d))) vs \(String(describing: expMinD))")
                    }
                    if res.min(of: \.i) != exp.map(\.i).min() { problems.append("\(tag): min i") }
                    if res.max(of: \.u) != exp.map(\.u).max() {
                        problems.append("\(tag): max u \(String(describing: res.max(of: \.u))) vs \(String(describing: exp.map(\.u).max()))")
                    }
                    if res.min(of: \.u) != exp.map(\.u).min() { problems.append("\(tag): min u") }
                    if res.max(of: \.oi) != exp.compactMap(\.oi).max() { problems.append("\(tag): max oi") }
                    if res.min(of: \.oi) != exp.compactMap(\.oi).min() { problems.append("\(tag): min oi") }
                    if res.max(of: \.i8) != exp.map(\.i8).max() { problems.append("\(tag): max i8") }
                    if res.min(of: \.date) != exp.map(\.date).min() { problems.append("\(tag): min date") }
                    if res.max(of: \.addr?.zip) != exp.compactMap({ $0.addr?.zip }).max() { problems.append("\(tag): max zip") }
                    // sums
                    var wrapped: Int64 = 0
                    var okSum = true
                    for v in exp.map(\.i8) { let (s2, o) = wrapped.addingReportingOverflow(Int64(v)); wrapped = s2; if o { okSum = false } }
                    let i8Sum = Int8(exactly: wrapped)
                    if (try? res.fetchSum(of: \.i8)) != i8Sum {
                        problems.append("\(tag): sum i8 \(String(describing: try? res.fetchSum(of: \.i8))) vs \(String(describing: i8Sum)) \(okSum)")
                    }
                    let uSum: UInt64? = {
                        var t = 0 as UInt64
                        var wraps = 0
                        for v in exp.map(\.u) { let (x, o) = t.addingReportingOverflow(v); t = x; if o { wraps += 1 } }
                        return wraps == 0 ? t : nil
                    }()
                    if (try? res.fetchSum(of: \.u)) != uSum { problems.append("\(tag): sum u") }
                    let avgI8: Double? = exp.isEmpty ? nil : exp.map { Double($0.i8) }.reduce(0, +) / Double(exp.count)
                    if res.average(of: \.i8) != avgI8 { problems.append("\(tag): avg i8") }
                    // distinct
                    let dist = res.distinct(by: \.oi)
                    var seen: [Int?] = []
                    var expDist: [Int] = []
                    for o in exp where !seen.contains(o.oi) { seen.append(o.oi); expDist.append(o.id) }
                    // distinct applies before the window: compute on sorted then window
                    var seen2: [Int?] = []
                    var full: [HBNum<T>] = []
                    for o in sorted where !seen2.contains(o.oi) { seen2.append(o.oi); full.append(o) }
                    var expD = full
                    if let off { expD = Array(expD.dropFirst(max(0, off))) }
                    if let lim { expD = Array(expD.prefix(max(0, lim))) }
                    if dist.map(\.id) != expD.map(\.id) { problems.append("\(tag): distinct oi \(dist.map(\.id)) vs \(expD.map(\.id))") }
                    _ = expDist
                }
            }
        }
        return problems
    }

    @Test(arguments: [UInt64(1), 42])
    func differentialIndexed(seed: UInt64) throws {
        let p = try run(HBIdx.self, seed: seed)
        #expect(p.isEmpty, "seed \(seed): \(p.count) problems\n\(p.prefix(30).joined(separator: "\n"))")
    }

    @Test(arguments: [UInt64(1), 42])
    func differentialScanned(seed: UInt64) throws {
        let p = try run(HBScan.self, seed: seed)
        #expect(p.isEmpty, "seed \(seed): \(p.count) problems\n\(p.prefix(30).joined(separator: "\n"))")
    }
}

enum HBM {
    // M1: optional field added later, with an index
    struct A1: Model { static var modelName: String { "HBMA" }; var id: Int; var n: Int }
    struct A2: Model {
        static var modelName: String { "HBMA" }
        static let indexes: [PartialKeyPath<A2> & Sendable] = [\.x]
        var id: Int; var n: Int; var x: String?
    }
    // M3: String -> String? with index
    struct B1: Model { static var modelName: String { "HBMB" }; static let indexes: [PartialKeyPath<B1> & Sendable] = [\.s]; var id: Int; var s: String }
    struct B2: Model { static var modelName: String { "HBMB" }; static let indexes: [PartialKeyPath<B2> & Sendable] = [\.s]; var id: Int; var s: String? }
    // M4: Int32 -> Int64 with index
    struct C1: Model { static var modelName: String { "HBMC" }; static let indexes: [PartialKeyPath<C1> & Sendable] = [\.v]; var id: Int; var v: Int32 }
    struct C2: Model { static var modelName: String { "HBMC" }; static let indexes: [PartialKeyPath<C2> & Sendable] = [\.v]; var id: Int; var v: Int64 }
    // M5: UInt8 -> UInt64, Int8 -> Int
    struct D1: Model {
        static var modelName: String { "HBMD" }; static let indexes: [PartialKeyPath<D1> & Sendable] = [\.u, \.i]; var id: Int; var u: UInt8; var i: Int8
    }
    struct D2: Model {
        static var modelName: String { "HBMD" }; static let indexes: [PartialKeyPath<D2> & Sendable] = [\.u, \.i]; var id: Int; var u: UInt64; var i: Int
    }
    // M6: property renamed, coding key kept
    struct E1: Model { static var modelName: String { "HBME" }; static let indexes: [PartialKeyPath<E1> & Sendable] = [\.name]; var id: Int; var name: String }
    struct E2: Model {
        static var modelName: String { "HBME" }
        static let indexes: [PartialKeyPath<E2> & Sendable] = [\.fullName]
        enum CodingKeys: String, CodingKey { case id; case fullName = "name" }
        var id: Int; var fullName: String
    }
    // M7: removing an indexed field
    struct F1: Model {
        static var modelName: String { "HBMF" }; static let uniqueIndexes: [PartialKeyPath<F1> & Sendable] = [\.code]; var id: Int; var code: String; var n: Int
    }
    struct F2: Model { static var modelName: String { "HBMF" }; var id: Int; var n: Int }
    struct F3: Model {
        static var modelName: String { "HBMF" }; static let uniqueIndexes: [PartialKeyPath<F3> & Sendable] = [\.code]; var id: Int; var code: String?;
        var n: Int
    }
    struct F4: Model {
        static var modelName: String { "HBMF" }; static let indexes: [PartialKeyPath<F4> & Sendable] = [\.code]; var id: Int; var code: String?; var n: Int
    }
    // M8: Float -> Double
    struct G1: Model { static var modelName: String { "HBMG" }; var id: Int; var f: Float }
    struct G2: Model { static var modelName: String { "HBMG" }; var id: Int; var f: Double }
    // M9: nested struct in array gains an optional field
    struct P1: Codable, Sendable, Hashable { var a: Int }
    struct P2: Codable, Sendable, Hashable { var a: Int; var b: String? }
    struct H1: Model { static var modelName: String { "HBMH" }; var id: Int; var parts: [P1] }
    struct H2: Model { static var modelName: String { "HBMH" }; var id: Int; var parts: [P2] }
}

@Suite struct HuntMigrationTests {
    func open(_ path: String, _ models: [any Model.Type]) throws -> Database { try Database(path: path, models: models) }
    func clean(_ db: Database, _ what: String) throws {
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(what): \(report.problems)")
    }

    @Test func optionalIndexedFieldAddedLater() throws {
        let path = huntBPath("m1"); defer { huntBCleanup(path) }
        do { let db = try open(path, [HBM.A1.self]); try db.write { tx in for i in 1...5 { try tx.insert(HBM.A1(id: i, n: i)) } } }
        let db = try open(path, [HBM.A2.self])
        try clean(db, "after add")
        #expect(db.objects(HBM.A2.self).filter(#Predicate { $0.x == nil }).count == 5)
        #expect(db.objects(HBM.A2.self).filter(#Predicate { $0.x == nil }).map(\.id) == [1, 2, 3, 4, 5])
        try db.write { tx in
            try tx.update(HBM.A2.self, key: 2) { $0.x = "b" }; try tx.insert(HBM.A2(id: 6, n: 6, x: nil))
        }
        #expect(db.objects(HBM.A2.self).filter(#Predicate { $0.x == nil }).map(\.id) == [1, 3, 4, 5, 6])
        #expect(db.objects(HBM.A2.self).filter(#Predicate { $0.x != nil }).map(\.id) == [2])
        #expect(db.objects(HBM.A2.self).sorted(by: SortDescriptor(\.x, order: .reverse)).map(\.id) == [2, 1, 3, 4, 5, 6])
        try clean(db, "after writes")
    }

    @Test func stringMadeOptionalWithIndex() throws {
        let path = huntBPath("m3"); defer { huntBCleanup(path) }
        do { let db = try open(path, [HBM.B1.self]); try db.write { tx in for i in 1...4 { try tx.insert(HBM.B1(id: i, s: ["b", "a", "", "c"][i - 1])) } } }
        let db = try open(path, [HBM.B2.self])
        try clean(db, "after open")
        #expect(db.objects(HBM.B2.self).filter(#Predicate { $0.s == nil }).count == 0)
        #expect(db.objects(HBM.B2.self).filter(#Predicate { $0.s == "" }).map(\.id) == [3])
        try db.write { tx in try tx.insert(HBM.B2(id: 5, s: nil)) }
        #expect(db.objects(HBM.B2.self).filter(#Predicate { $0.s == nil }).map(\.id) == [5])
        #expect(db.objects(HBM.B2.self).sorted(by: SortDescriptor(\.s)).map(\.id) == [5, 3, 2, 1, 4])
        try clean(db, "after writes")
    }

    @Test func int32WidenedWithIndex() throws {
        let path = huntBPath("m4"); defer { huntBCleanup(path) }
        let values: [Int32] = [Int32.min, -1, 0, 1, Int32.max]
        do { let db = try open(path, [HBM.C1.self]); try db.write { tx in for (i, v) in values.enumerated() { try tx.insert(HBM.C1(id: i, v: v)) } } }
        let db = try open(path, [HBM.C2.self])
        try clean(db, "after open")
        try db.write { tx in
            try tx.insert(HBM.C2(id: 10, v: Int64.min)); try tx.insert(HBM.C2(id: 11, v: Int64(Int32.max) + 1))
        }
        #expect(db.objects(HBM.C2.self).sorted(by: SortDescriptor(\.v)).map(\.id) == [10, 0, 1, 2, 3, 4, 11])
        #expect(db.objects(HBM.C2.self).filter(#Predicate { $0.v < 0 }).map(\.id) == [0, 1, 10])
        #expect(db.objects(HBM.C2.self).filter(#Predicate { $0.v > 2147483647 }).map(\.id) == [11])
        #expect(db.objects(HBM.C2.self).min(of: \.v) == Int64.min)
        #expect(db.objects(HBM.C2.self).sum(of: \.v) == 0 || true)
        try clean(db, "after writes")
    }

    @Test func smallIntegersWidenedWithIndex() throws {
        let path = huntBPath("m5"); defer { huntBCleanup(path) }
        do {
            let db = try open(path, [HBM.D1.self])
            try db.write { tx in
                try tx.insert(HBM.D1(id: 1, u: 255, i: -128)); try tx.insert(HBM.D1(id: 2, u: 0, i: 127)); try tx.insert(HBM.D1(id: 3, u: 7, i: -1))
            }
        }
        let db = try open(path, [HBM.D2.self])
        try clean(db, "after open")
        let all = try db.objects(HBM.D2.self).fetch()
        #expect(all.map(\.u) == [255, 0, 7])
        #expect(all.map(\.i) == [-128, 127, -1])
        try db.write { tx in try tx.insert(HBM.D2(id: 4, u: UInt64.max, i: Int.min)) }
        #expect(db.objects(HBM.D2.self).sorted(by: SortDescriptor(\.u)).map(\.id) == [2, 3, 1, 4])
        #expect(db.objects(HBM.D2.self).sorted(by: SortDescriptor(\.i)).map(\.id) == [4, 1, 3, 2])
        let big = UInt64(300)
        #expect(db.objects(HBM.D2.self).filter(#Predicate { $0.u > big }).map(\.id) == [4])
        #expect(db.objects(HBM.D2.self).filter(#Predicate { $0.i < -100 }).map(\.id) == [1, 4])
        try clean(db, "after writes")
    }

    @Test func propertyRenamedKeepingCodingKey() throws {
        let path = huntBPath("m6"); defer { huntBCleanup(path) }
        do {
            let db = try open(path, [HBM.E1.self]);
            try db.write { tx in
                try tx.insert(HBM.E1(id: 1, name: "b")); try tx.insert(HBM.E1(id: 2, name: "a"))
            }
        }
        let db = try open(path, [HBM.E2.self])
        try clean(db, "after open")
        #expect(db.objects(HBM.E2.self).filter(#Predicate { $0.fullName == "a" }).map(\.id) == [2])
        #expect(db.objects(HBM.E2.self).filter(#Predicate { $0.fullName == "a" }).explain().contains("index"))
        try db.write { tx in try tx.update(HBM.E2.self, key: 2) { $0.fullName = "c" } }
        #expect(db.objects(HBM.E2.self).filter(#Predicate { $0.fullName == "a" }).count == 0)
        #expect(db.objects(HBM.E2.self).filter(#Predicate { $0.fullName == "c" }).map(\.id) == [2])
        try clean(db, "after writes")
    }

    @Test func removedUniqueFieldThenReadded() throws {
        let path = huntBPath("m7"); defer { huntBCleanup(path) }
        do {
            let db = try open(path, [HBM.F1.self])
            try db.write { tx in for i in 1...4 { try tx.insert(HBM.F1(id: i, code: "c\(i)", n: i)) } }
        }
        do {
            let db = try open(path, [HBM.F2.self])
            try clean(db, "after removal")
            try db.write { tx in
                try tx.update(HBM.F2.self, key: 1) { $0.n = 100 }  // rewritten: drops code
                try tx.insert(HBM.F2(id: 5, n: 5))
                try tx.upsert(HBM.F2(id: 2, n: 2))  // unchanged: keeps code
            }
            try clean(db, "after writes without the field")
        }
        #expect(throws: StrataError.self) { try open(path, [HBM.F3.self]) }  // nil for 1 and 5: documented
        let db = try open(path, [HBM.F4.self])
        try clean(db, "after re-adding")
        let all = try db.objects(HBM.F4.self).fetch()
        let byIndex = db.objects(HBM.F4.self).filter(#Predicate { $0.code == nil }).map(\.id)
        let byScan = all.filter { $0.code == nil }.map(\.id)
        #expect(byIndex == byScan, "\(all)")
        for o in all {
            if let c = o.code {
                #expect(db.objects(HBM.F4.self).filter(#Predicate { $0.code == c }).map(\.id) == [o.id])
            }
        }
    }

    @Test func floatToDouble() throws {
        let path = huntBPath("m8"); defer { huntBCleanup(path) }
        do { let db = try open(path, [HBM.G1.self]); try db.write { tx in try tx.insert(HBM.G1(id: 1, f: 0.1)) } }
        do {
            let db = try open(path, [HBM.G2.self])
            let got = try db.objects(HBM.G2.self).fetch()
            #expect(got.map(\.f) == [Double(Float(0.1))])
        } catch let e as StrataError {
            guard case .migrationRequired = e else { Issue.record("unexpected \(e)"); return }
        }
    }

    @Test func nestedStructInArrayGainsOptionalField() throws {
        let path = huntBPath("m9"); defer { huntBCleanup(path) }
        do { let db = try open(path, [HBM.H1.self]); try db.write { tx in try tx.insert(HBM.H1(id: 1, parts: [.init(a: 1), .init(a: 2)])) } }
        let db = try open(path, [HBM.H2.self])
        #expect(try db.objects(HBM.H2.self).fetch().first?.parts == [.init(a: 1, b: nil), .init(a: 2, b: nil)])
        try db.write { tx in try tx.update(HBM.H2.self, key: 1) { $0.parts.append(.init(a: 3, b: "x")) } }
        #expect(try db.objects(HBM.H2.self).fetch().first?.parts == [.init(a: 1, b: nil), .init(a: 2, b: nil), .init(a: 3, b: "x")])
        try clean(db, "after writes")
    }
}

enum HBMU {
    struct V1: Model { static var modelName: String { "HBMU" }; var id: Int; var email: String }
    struct V2: Model {
        static var modelName: String { "HBMU" }
        static let uniqueIndexes: [PartialKeyPath<V2> & Sendable] = [\.email]
        static let indexes: [PartialKeyPath<V2> & Sendable] = [\.age]
        var id: Int; var email: String; var age: Int
    }
}

@Suite struct HuntMigrationUniqueTests {
    @Test func migrationThatWritesDuplicateUniqueValues() throws {
        let path = huntBPath("mu"); defer { huntBCleanup(path) }
        do {
            let db = try Database(path: path, models: [HBMU.V1.self])
            try db.write { tx in
                try tx.insert(HBMU.V1(id: 1, email: "a")); try tx.insert(HBMU.V1(id: 2, email: "b"))
            }
        }
        var threw: (any Error)?
        do {
            let db = try Database(path: path, models: [HBMU.V2.self], schemaVersion: 2) { m in
                try m.enumerateObjects("HBMU") { old, new in
                    new["age"] = .int(1)
                    new["email"] = .string("same")
                }
            }
            let all = try db.objects(HBMU.V2.self).fetch()
            Issue.record("migration giving two objects the same unique value succeeded: \(all)")
            let report = try StoredObjects.check(in: db.store)
            Issue.record("check: \(report.problems)")
            #expect(db.objects(HBMU.V2.self).filter(#Predicate { $0.email == "same" }).count == all.count)
        } catch { threw = error }
        #expect(threw is StrataError, "\(String(describing: threw))")
        // nothing changed
        let db = try Database(path: path, models: [HBMU.V1.self])
        #expect(try db.objects(HBMU.V1.self).fetch().map(\.email) == ["a", "b"])
    }

    @Test func migrationUpsertsDuplicateUniqueValues() throws {
        let path = huntBPath("mu2"); defer { huntBCleanup(path) }
        do {
            let db = try Database(path: path, models: [HBMU.V1.self])
            try db.write { tx in
                try tx.insert(HBMU.V1(id: 1, email: "a")); try tx.insert(HBMU.V1(id: 2, email: "b"))
            }
        }
        var threw: (any Error)?
        do {
            let db = try Database(path: path, models: [HBMU.V2.self], schemaVersion: 2) { m in
                try m.deleteAll("HBMU")
                try m.transaction.insert(HBMU.V2(id: 1, email: "x", age: 1))
                try m.transaction.insert(HBMU.V2(id: 2, email: "x", age: 2))
            }
            let all = try db.objects(HBMU.V2.self).fetch()
            Issue.record("migration inserting duplicate unique values succeeded: \(all)")
            let report = try StoredObjects.check(in: db.store)
            Issue.record("check: \(report.problems)")
        } catch { threw = error }
        #expect(threw is StrataError, "\(String(describing: threw))")
        let db = try Database(path: path, models: [HBMU.V1.self])
        #expect(try db.objects(HBMU.V1.self).fetch().map(\.email) == ["a", "b"])
    }
}

struct HBItem: Model, Equatable {
    static let indexes: [PartialKeyPath<HBItem> & Sendable] = [\.cat, \.tags, \.rank, \.owner, \.refs]
    static let uniqueIndexes: [PartialKeyPath<HBItem> & Sendable] = [\.code]
    static let indexDescriptors: [IndexDescriptor<HBItem>] = [.on(\.cat, \.rank), .fullText(\.text)]
    var id: Int
    var cat: Int
    var tags: [String]
    var rank: Int?
    var code: String?
    var owner: Ref<HBItem>?
    var refs: [Ref<HBItem>]
    var text: String
}

struct HBRollback: Error {}

@Suite struct HuntTransactionModelTests {
    static func random(_ r: inout HBRng, id: Int) -> HBItem {
        let words = ["a", "b", "c", "a"]
        return HBItem(
            id: id, cat: r.below(3),
            tags: (0..<r.below(4)).map { _ in r.pick(words) },
            rank: r.below(3) == 0 ? nil : r.below(4),
            code: r.below(2) == 0 ? nil : "c\(r.below(1000))",
            owner: r.below(2) == 0 ? nil : Ref(r.below(10)),
            refs: (0..<r.below(3)).map { _ in Ref(r.below(10)) },
            text: (0..<r.below(5)).map { _ in r.pick(["x", "y", "zz", "X"]) }.joined(separator: " "))
    }

    func compare(_ model: [Int: HBItem], _ q: (Predicate<HBItem>?) throws -> [HBItem], _ count: (Predicate<HBItem>?) throws -> Int, _ at: String) throws
        -> [String]
    {
        var problems: [String] = []
        let all = model.values.sorted { $0.id < $1.id }
        func chk(_ name: String, _ p: Predicate<HBItem>?) throws {
            let exp = try all.filter { try p?.evaluate($0) ?? true }.map(\.id)
            let got = try q(p).map(\.id)
            if got != exp { problems.append("\(at) \(name): \(got) vs \(exp)") }
            let c = try count(p)
            if c != exp.count { problems.append("\(at) \(name) count: \(c) vs \(exp.count)") }
        }
        for c in 0..<3 {
            try chk("cat==\(c)", #Predicate { $0.cat == c })
            for rk in 0..<4 { try chk("cat==\(c)&&rank==\(rk)", #Predicate { $0.cat == c && $0.rank == rk }) }
            try chk("cat==\(c)&&rank==nil", #Predicate { $0.cat == c && $0.rank == nil })
        }
        for w in ["a", "b", "c"] { try chk("tags \(w)", #Predicate { $0.tags.contains(w) }) }
        try chk("rank nil", #Predicate { $0.rank == nil })
        try chk("rank>1", #Predicate { $0.rank != nil && $0.rank! > 1 })
        for k in 0..<10 {
            let ref = Ref<HBItem>(k)
            try chk("owner \(k)", #Predicate { $0.owner == ref })
        }
        try chk("owner nil", #Predicate { $0.owner == nil })
        return problems
    }

    @Test(arguments: [UInt64(3), 99, 2024])
    func randomWritesInOneTransaction(seed: UInt64) throws {
        var r = HBRng(state: seed)
        let db = try Database.inMemory(models: [HBItem.self])
        var model: [Int: HBItem] = [:]
        var problems: [String] = []
        for round in 0..<6 {
            try db.write { tx in
                for step in 0..<60 {
                    let id = r.below(14)
                    let op = r.below(10)
                    var trial = model
                    func apply(_ body: () throws -> Void) {
                        do { try body(); model = trial } catch let e as StrataError {
                            if case .uniqueViolation = e {
                            } else if case .duplicateKey = e {
                            } else if case .notFound = e {
                            } else {
                                problems.append("unexpected \(e)")
                            }
                        } catch { problems.append("unexpected \(error)") }
                    }
                    func uniqueOK(_ o: HBItem) -> Bool { !trial.values.contains { $0.id != o.id && $0.code == o.code } }
                    switch op {
                    case 0, 1:
                        let o = Self.random(&r, id: id)
                        let expectOK = trial[id] == nil && uniqueOK(o)
                        apply {
                            try tx.insert(o); trial[id] = o
                        }
                        if expectOK != (model[id] == o) { problems.append("round \(round) step \(step): insert \(id) expected ok=\(expectOK)") }
                    case 2, 3:
                        let o = Self.random(&r, id: id)
                        apply {
                            try tx.upsert(o); trial[id] = o
                        }
                    case 4, 5:
                        let n = Self.random(&r, id: id)
                        apply {
                            let u = try tx.update(HBItem.self, key: id) {
                                $0.cat = n.cat; $0.tags = n.tags; $0.rank = n.rank; $0.code = n.code; $0.text = n.text
                            }
                            trial[id] = u
                        }
                    case 6:
                        apply {
                            _ = try tx.delete(HBItem.self, key: id); trial[id] = nil
                        }
                    case 7:
                        // a savepoint that rolls back
                        let before = model
                        let o = Self.random(&r, id: id)
                        do {
                            try tx.savepoint {
                                _ = try? tx.delete(HBItem.self, key: id)
                                _ = try? tx.upsert(o)
                                throw HBRollback()
                            }
                        } catch is HBRollback {} catch { problems.append("savepoint: \(error)") }
                        model = before
                    case 8:
                        // a savepoint that commits
                        let o = Self.random(&r, id: id)
                        try tx.savepoint {
                            var t = model
                            if (try? tx.delete(HBItem.self, key: id)) == true { t[id] = nil }
                            if !t.values.contains(where: { $0.code == o.code && $0.id != o.id }) {
                                try tx.insert(o); t[id] = o
                            }
                            model = t
                        }
                    default:
                        problems += try compare(
                            model, { try tx.objects(HBItem.self, where: $0) }, { try tx.count(HBItem.self, where: $0) }, "round \(round) step \(step) in tx")
                    }
                }
            }
            problems += try compare(
                model, { p in try (p.map { db.objects(HBItem.self).filter($0) } ?? db.objects(HBItem.self)).fetch() },
                { p in (p.map { db.objects(HBItem.self).filter($0) } ?? db.objects(HBItem.self)).count }, "round \(round) committed")
            let report = try StoredObjects.check(in: db.store)
            problems += report.problems.map { "round \(round) check: \($0)" }
            // text search vs model
            for w in ["x", "y", "zz"] {
                let exp = model.values.filter { $0.text.lowercased().split(separator: " ").contains(Substring(w)) }.map(\.id).sorted()
                let got = db.objects(HBItem.self).search(\.text, TextSearch(stringLiteral: w)).map(\.id).sorted()
                if exp != got { problems.append("round \(round) search \(w): \(got) vs \(exp)") }
            }
            // backlinks
            let snap = try db.snapshot()
            for k in 0..<10 {
                let exp = model.values.filter { $0.owner?.id == k }.map(\.id).sorted()
                let got = snap.backlinks(HBItem.self, via: \.owner, to: k).map(\.id).sorted()
                if exp != got { problems.append("round \(round) backlinks owner \(k): \(got) vs \(exp)") }
                let exp2 = model.values.filter { $0.refs.contains { $0.id == k } }.map(\.id).sorted()
                let got2 = snap.backlinks(HBItem.self, via: \.refs, to: k).map(\.id).sorted()
                if exp2 != got2 { problems.append("round \(round) backlinks refs \(k): \(got2) vs \(exp2)") }
            }
        }
        #expect(problems.isEmpty, "seed \(seed): \(problems.count)\n\(problems.prefix(20).joined(separator: "\n"))")
    }
}

@Suite struct HuntCollationFoldingTests {
    @Test func foldingDirection() {
        let c = StringCollation.caseInsensitive
        #expect(c.compare("apple", "Bänana") == .orderedAscending)
        #expect(c.compare("a_z", "A_zé") == .orderedAscending)
        #expect(c.compare("Straße", "STRASSE") == .orderedSame)
        #expect(c.compare("ǅ", "ǆ") == .orderedSame)
        #expect(StringCollation.natural.compare("x9", "x10") == .orderedAscending)
        #expect(StringCollation.natural.compare("x٩", "x10") != .orderedSame)
    }
}

struct HBComputed: Model {
    static let indexes: [PartialKeyPath<HBComputed> & Sendable] = [\.a]
    enum CodingKeys: String, CodingKey { case id; case a = "b" }
    var id: Int
    var a: Int
    var b: Int { a * 10 }
}

struct HBSwapped: Model {
    static let indexes: [PartialKeyPath<HBSwapped> & Sendable] = [\.a, \.b]
    enum CodingKeys: String, CodingKey { case id; case a = "b"; case b = "a" }
    var id: Int
    var a: Int
    var b: String
}

struct HBLazyish: Model {
    static let indexes: [PartialKeyPath<HBLazyish> & Sendable] = [\.total]
    var id: Int
    var parts: [Int]
    var total: Int
    var doubled: Int { total * 2 }
    var first: Int? { parts.first }
}

@Suite struct HuntKeyPathTests {
    @Test func computedPropertyNamedLikeACodingKey() throws {
        let db = try Database.inMemory(models: [HBComputed.self])
        try db.write { tx in for i in 1...3 { try tx.insert(HBComputed(id: i, a: i)) } }
        let r = db.objects(HBComputed.self)
        #expect(r.filter(#Predicate { $0.b > 15 }).map(\.id) == [2, 3])
        #expect(r.filter(#Predicate { $0.b > 15 }).count == 2)
        #expect(r.filter(#Predicate { $0.b == 20 }).map(\.id) == [2])
        #expect(r.sorted(by: SortDescriptor(\.b, order: .reverse)).map(\.id) == [3, 2, 1])
        #expect(r.max(of: \.b) == 30)
        #expect(r.sum(of: \.b) == 60)
        #expect(r.min(of: \.b) == 10)
        #expect(r.distinct(by: \.b).count == 3)
        #expect(r.filter(#Predicate { $0.a == 2 }).map(\.id) == [2])
    }

    @Test func swappedCodingKeys() throws {
        let db = try Database.inMemory(models: [HBSwapped.self])
        try db.write { tx in for i in 1...3 { try tx.insert(HBSwapped(id: i, a: 4 - i, b: "s\(i)")) } }
        let r = db.objects(HBSwapped.self)
        #expect(r.filter(#Predicate { $0.a == 1 }).map(\.id) == [3])
        #expect(r.filter(#Predicate { $0.b == "s1" }).map(\.id) == [1])
        #expect(r.filter(#Predicate { $0.a > 1 }).count == 2)
        #expect(r.sorted(by: SortDescriptor(\.a)).map(\.id) == [3, 2, 1])
        #expect(r.max(of: \.a) == 3)
        #expect(r.sum(of: \.a) == 6)
        try db.write { tx in try tx.update(HBSwapped.self, key: 1) { $0.a = 10 } }
        #expect(r.filter(#Predicate { $0.a == 10 }).count == 0)  // old snapshot
        #expect(db.objects(HBSwapped.self).filter(#Predicate { $0.a == 10 }).map(\.id) == [1])
        #expect(db.objects(HBSwapped.self).filter(#Predicate { $0.a == 3 }).count == 0)
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
    }

    @Test func computedKeyPathsInAggregates() throws {
        let db = try Database.inMemory(models: [HBLazyish.self])
        try db.write { tx in
            try tx.insert(HBLazyish(id: 1, parts: [5, 1], total: 6))
            try tx.insert(HBLazyish(id: 2, parts: [], total: 0))
            try tx.insert(HBLazyish(id: 3, parts: [-2], total: -2))
        }
        let r = db.objects(HBLazyish.self)
        #expect(r.max(of: \.doubled) == 12)
        #expect(r.min(of: \.first) == -2)
        #expect(r.max(of: \.first) == 5)
        #expect(r.sum(of: \.doubled) == 8)
        #expect(r.filter(#Predicate { $0.total > -5 }).sum(of: \.doubled) == 8)
        #expect(r.sorted(by: SortDescriptor(\.first)).map(\.id) == [2, 3, 1])
        #expect(r.filter(#Predicate { $0.first == nil }).map(\.id) == [2])
        #expect(r.distinct(by: \.first).count == 3)
    }
}

struct HBDoubleKey: Model {
    static let indexes: [PartialKeyPath<HBDoubleKey> & Sendable] = [\.d, \.od, \.when]
    var id: Double
    var d: Double
    var od: Double?
    var when: Date
}

@Suite struct HuntKeyTests {
    @Test func nanComparisonsOnKeysAndIndexes() throws {
        let db = try Database.inMemory(models: [HBDoubleKey.self])
        // (Not named `nan`: the compiler warns about comparisons with anything so named.)
        let notANumber = Double.nan
        let nanDate = Date(timeIntervalSinceReferenceDate: .nan)
        let objs = [
            HBDoubleKey(id: .nan, d: .nan, od: .nan, when: nanDate),
            HBDoubleKey(id: -1, d: -0.0, od: nil, when: Date(timeIntervalSinceReferenceDate: 0)),
            HBDoubleKey(id: 2, d: 3, od: 1, when: Date(timeIntervalSinceReferenceDate: 5)),
            HBDoubleKey(id: .infinity, d: .infinity, od: -.infinity, when: .distantFuture),
        ]
        try db.write { tx in for o in objs { try tx.insert(o) } }
        let r = db.objects(HBDoubleKey.self)
        func check(_ name: String, _ p: Predicate<HBDoubleKey>) throws {
            let exp = try objs.filter { try p.evaluate($0) }.map(\.id).sorted { a, b in a.isNaN ? false : (b.isNaN ? true : a < b) }
            let got = r.filter(p)
            let ids = got.map(\.id)
            let same = ids.count == exp.count && zip(ids, exp).allSatisfy { $0 == $1 || ($0.isNaN && $1.isNaN) }
            #expect(same, "\(name): got \(ids) expected \(exp)\n\(got.explain())")
            #expect(got.count == exp.count, "\(name) count: \(got.count) vs \(exp.count)")
        }
        try check("id == nan", #Predicate { $0.id == notANumber })
        try check("id != nan", #Predicate { $0.id != notANumber })
        try check("id >= nan", #Predicate { $0.id >= notANumber })
        try check("id < nan", #Predicate { $0.id < notANumber })
        try check("d == nan", #Predicate { $0.d == notANumber })
        try check("d <= nan", #Predicate { $0.d <= notANumber })
        try check("d > 0", #Predicate { $0.d > 0 })
        try check("d == 0", #Predicate { $0.d == 0 })
        try check("od == nan", #Predicate { $0.od == notANumber })
        try check("od != nil && od! >= nan", #Predicate { $0.od != nil && $0.od! >= notANumber })
        let list = [notANumber, 3.0]
        try check("list contains d", #Predicate { list.contains($0.d) })
        try check("list contains id", #Predicate { list.contains($0.id) })
        try check("when == nanDate", #Predicate { $0.when == nanDate })
        try check("when < nanDate", #Predicate { $0.when < nanDate })
        try check("when <= nanDate", #Predicate { $0.when <= nanDate })
        let five = Date(timeIntervalSinceReferenceDate: 5)
        try check("when >= five", #Predicate { $0.when >= five })
        try check("when > five", #Predicate { $0.when > five })
        // point lookups
        #expect(try db.object(HBDoubleKey.self, key: -0.0)?.id == -1 || true)
        #expect(try db.object(HBDoubleKey.self, key: 0.0) == nil)
    }
}

struct HBHelperNaN: Model {
    static let indexes: [PartialKeyPath<HBHelperNaN> & Sendable] = [\.d, \.ds, \.when]
    var id: Int
    var d: Double
    var ds: [Double]
    var when: Date
    var e: Double
    var es: [Double]
}

@Suite struct HuntHelperFilterTests {
    @Test func helperFiltersWithNaN() throws {
        let db = try Database.inMemory(models: [HBHelperNaN.self])
        let nanDate = Date(timeIntervalSinceReferenceDate: .nan)
        let objs = [
            HBHelperNaN(id: 1, d: .nan, ds: [.nan, 1], when: nanDate, e: .nan, es: [.nan]),
            HBHelperNaN(id: 2, d: 0, ds: [-0.0], when: Date(timeIntervalSinceReferenceDate: 0), e: -0.0, es: [0]),
        ]
        try db.write { tx in for o in objs { try tx.insert(o) } }
        let r = db.objects(HBHelperNaN.self)
        func ids(_ x: Results<HBHelperNaN>) -> [Int] { x.map(\.id) }
        // Swift's own answers
        #expect(ids(r.filter(\.d, equals: .nan)) == objs.filter { $0.d.isEqual(to: .nan) }.map(\.id), "\(r.filter(\.d, equals: .nan).explain())")
        #expect(r.filter(\.d, equals: .nan).count == 0)
        #expect(ids(r.filter(\.e, equals: .nan)) == [])
        #expect(ids(r.filter(\.ds, contains: .nan)) == objs.filter { $0.ds.contains(.nan) }.map(\.id), "\(r.filter(\.ds, contains: .nan).explain())")
        #expect(ids(r.filter(\.es, contains: .nan)) == [])
        #expect(ids(r.filter(\.when, equals: nanDate)) == objs.filter { $0.when == nanDate }.map(\.id))
        #expect(ids(r.filter(\.d, equals: -0.0)) == [2])
        #expect(ids(r.filter(\.ds, contains: 0.0)) == [2])
        #expect(ids(r.filter(\.es, contains: -0.0)) == [2])
    }
}

@Suite struct HuntOptionalUnsignedKeyTests {
    @Test func optionalUInt64Keys() throws {
        let db = try Database.inMemory(models: [AIUInt64.self])
        let ids: [UInt64] = [0, 1, UInt64(Int64.max), UInt64(Int64.max) + 1, UInt64.max]
        try db.write { tx in for i in ids.reversed() { try tx.insert(AIUInt64(id: i, text: "t\(i)")) } }
        let r = db.objects(AIUInt64.self)
        #expect(r.keys == ids.map { Optional($0) })
        #expect(r.map(\.id) == ids.map { Optional($0) })
        #expect(r.sorted(by: SortDescriptor(\.id, order: .reverse)).map(\.id) == ids.reversed().map { Optional($0) })
        let big: UInt64? = UInt64(Int64.max)
        #expect(r.filter(#Predicate { $0.id! > big! }).map(\.id) == [UInt64(Int64.max) + 1, UInt64.max])
        #expect(r.filter(#Predicate { $0.id == big }).count == 1)
        #expect(try db.object(AIUInt64.self, key: UInt64.max)?.text == "t\(UInt64.max)")
        #expect(r.max(of: \.id) == UInt64.max)
        #expect(r.offset(3).first?.id == UInt64(Int64.max) + 1)
        // inserting nil now must say the keys ran out (largest is UInt64.max)
        #expect(throws: StrataError.self) { try db.write { tx in try tx.insert(AIUInt64(id: nil, text: "x")) } }
    }
}

struct HBArith: Model {
    static let indexes: [PartialKeyPath<HBArith> & Sendable] = [\.cat]
    var id: Int
    var cat: Int
    var i8: Int8
    var u: UInt64
    var u8: UInt8
    var i32: Int32
    var oi8: Int8?
}

@Suite struct HuntArithmeticTests {
    func db(_ objs: [HBArith]) throws -> Database {
        let db = try Database.inMemory(models: [HBArith.self])
        try db.write { tx in for o in objs { try tx.insert(o) } }
        return db
    }

    // Each predicate overflows on object 2 in Swift (Foundation's evaluate would trap). Strata must
    // fail the query with invalidQuery, not trap and not answer as if widened.
    func expectFails(_ name: String, _ r: Results<HBArith>) {
        let e = r.error
        if e == nil {
            Issue.record("\(name): no error; got ids \(r.map(\.id)) count \(r.count)")
        } else if case .invalidQuery = e! {
        } else {
            Issue.record("\(name): error \(e!)")
        }
        #expect(throws: StrataError.self, "\(name) fetch") { try r.fetch() }
    }

    @Test func narrowIntegerArithmeticOverflows() throws {
        let d = try db([
            HBArith(id: 1, cat: 1, i8: 1, u: 5, u8: 5, i32: 1, oi8: 1),
            HBArith(id: 2, cat: 1, i8: .max, u: 0, u8: 0, i32: .max, oi8: .min),
        ])
        let r = d.objects(HBArith.self)
        expectFails("i8 + 1", r.filter(#Predicate { $0.i8 + 1 > 0 }))
        expectFails("i8 * 2", r.filter(#Predicate { $0.i8 * 2 > 0 }))
        expectFails("u - 1", r.filter(#Predicate { $0.u - 1 > 0 }))
        expectFails("u8 - 1", r.filter(#Predicate { $0.u8 - 1 > 0 }))
        expectFails("i32 + 1", r.filter(#Predicate { $0.i32 + 1 > 0 }))
        expectFails("cat==1 && i8 + 1", r.filter(#Predicate { $0.cat == 1 && $0.i8 + 1 > 0 }))
        expectFails("-oi8", r.filter(#Predicate { $0.oi8 != nil && -$0.oi8! > 0 }))
        expectFails("i8 / (i8 - i8)", r.filter(#Predicate { $0.i8 / ($0.i8 - $0.i8) > 0 }))
    }
}

enum HBTool {
    enum Mood: String, Codable, Sendable { case happy, sad }
    struct Geo: Codable, Sendable, Hashable { var lat: Double; var note: String? }
    struct Person: Model {
        static let indexes: [PartialKeyPath<Person> & Sendable] = [\.name, \.big, \.friend]
        static let uniqueIndexes: [PartialKeyPath<Person> & Sendable] = [\.email]
        enum CodingKeys: String, CodingKey { case id = "_id", name = "n", email, big, d, when, dec, blob, mood, geo, friend, friends, attrs, tags, small }
        var id: String
        var name: String
        var email: String
        var big: UInt64
        var d: Double
        var when: Date
        var dec: Decimal
        var blob: Data
        var mood: Mood
        var geo: Geo?
        var friend: Ref<Person>?
        var friends: [Ref<Person>]
        var attrs: [String: Int]
        var tags: Set<String>
        var small: Int8
    }
    struct Note: Model {
        static let indexDescriptors: [IndexDescriptor<Note>] = [.fullText(\.text), .on(\.author, \.at)]
        var id: Int?
        var author: Ref<Person>
        var at: Date
        var text: String
    }
}

@Suite struct HuntToolAgreementTests {
    func toolPath() -> String? { toolExecutable() }

    func run(_ tool: String, _ arguments: [String]) throws -> (status: Int32, output: String) { try runTool(tool, arguments) }

    static let people: [HBTool.Person] = [
        .init(
            id: "ana \"q\" \\ \n\t\u{1}", name: "e\u{301}", email: "a@x", big: UInt64.max, d: -0.0, when: Date(timeIntervalSinceReferenceDate: -1.25),
            dec: Decimal(string: "0.10000000000000000001")!, blob: Data([0, 255, 1]), mood: .sad, geo: .init(lat: .nan, note: nil),
            friend: Ref("zz-missing"), friends: [], attrs: ["b": Int.min, "a": 1], tags: ["x", "y"], small: -128),
        .init(
            id: "bob", name: "Bob", email: "b@x", big: UInt64(Int64.max) + 1, d: .infinity, when: Date.distantFuture,
            dec: Decimal(string: "-12345678901234567890.5")!, blob: Data(), mood: .happy, geo: nil,
            friend: nil, friends: [Ref("ana \"q\" \\ \n\t\u{1}"), Ref("bob")], attrs: [:], tags: [], small: 127),
        .init(
            id: "\u{2028}cid\u{0}", name: "", email: "c@x", big: 0, d: .leastNonzeroMagnitude, when: Date(timeIntervalSinceReferenceDate: 0.1),
            dec: 0, blob: Data(repeating: 7, count: 3000), mood: .happy, geo: .init(lat: -.infinity, note: "\u{7f}"),
            friend: Ref("bob"), friends: [], attrs: ["": 0], tags: [""], small: 0),
    ]

    @Test func toolAgreesWithTheData() throws {
        guard let tool = toolPath() else { Issue.record("strata tool not built"); return }
        let path = huntBPath("tool"); defer { huntBCleanup(path) }
        do {
            let db = try Database(path: path, models: [HBTool.Person.self, HBTool.Note.self])
            try db.write { tx in
                for p in Self.people { try tx.insert(p) }
                try tx.insert(HBTool.Note(id: nil, author: Ref("bob"), at: Date(timeIntervalSinceReferenceDate: 5), text: "hello wörld"))
                try tx.insert(HBTool.Note(id: nil, author: Ref("nobody"), at: Date(timeIntervalSinceReferenceDate: 6), text: "can't stop"))
            }
            try db.write { tx in
                try tx.update(HBTool.Person.self, key: "bob") {
                    $0.email = "bob2@x"; $0.big = 3
                }
                try tx.delete(HBTool.Note.self, key: 1)
            }
        }
        let check = try run(tool, ["check", path])
        #expect(check.status == 0, "\(check.output)")
        let schema = try run(tool, ["schema", path])
        #expect(schema.status == 0, "\(schema.output)")
        let dump = try run(tool, ["dump", path, "--json"])
        #expect(dump.status == 0, "\(dump.output)")
        var lines = 0
        for line in dump.output.split(separator: "\n", omittingEmptySubsequences: true) {
            lines += 1
            do {
                _ = try JSONSerialization.jsonObject(with: Data(line.utf8), options: [.fragmentsAllowed])
            } catch {
                Issue.record("dump --json line is not JSON: \(line)  (\(error))")
            }
        }
        #expect(lines == 4)
        let plain = try run(tool, ["dump", path])
        #expect(plain.status == 0, "\(plain.output)")
    }
}

@Suite struct HuntToolMigrationTests {
    @Test func toolOnAFileWithRemovedAndReaddedFields() throws {
        guard let tool = HuntToolAgreementTests().toolPath() else { Issue.record("no tool"); return }
        let path = huntBPath("toolmig"); defer { huntBCleanup(path) }
        do {
            let db = try Database(path: path, models: [HBM.F1.self])
            try db.write { tx in for i in 1...4 { try tx.insert(HBM.F1(id: i, code: "c\(i)", n: i)) } }
        }
        do {
            let db = try Database(path: path, models: [HBM.F2.self])
            try db.write { tx in
                try tx.update(HBM.F2.self, key: 1) { $0.n = 100 }; try tx.insert(HBM.F2(id: 5, n: 5))
            }
        }
        do {
            let db = try Database(path: path, models: [HBM.F4.self])
            try db.write { tx in try tx.update(HBM.F4.self, key: 3) { $0.code = "new3" } }
        }
        let check = try HuntToolAgreementTests().run(tool, ["check", path])
        #expect(check.status == 0, "\(check.output)")
        let schema = try HuntToolAgreementTests().run(tool, ["schema", path])
        #expect(schema.status == 0 && schema.output.contains("code"), "\(schema.output)")
        let dump = try HuntToolAgreementTests().run(tool, ["dump", path, "--json"])
        #expect(dump.status == 0)
        let lines = dump.output.split(separator: "\n")
        #expect(lines.count == 5)
        // object 3's code is "new3" and object 4's is nil, as the typed API reads them
        let db = try Database(path: path, models: [HBM.F4.self])
        let typed = try db.objects(HBM.F4.self).fetch()
        #expect(typed.first { $0.id == 3 }?.code == "new3")
        for line in lines {
            let obj = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            let fields = obj?["object"] as? [String: Any]
            let id = fields?["id"] as? Int
            let code = fields?["code"] as? String
            let expected = typed.first { $0.id == id }?.code
            #expect(code == expected, "dump of \(String(describing: id)) shows code \(String(describing: code)), typed reads \(String(describing: expected))")
        }
    }
}

// MARK: - collated index walks with ties

struct HBCollated: Model {
    static let indexDescriptors: [IndexDescriptor<HBCollated>] = [
        .on(\.name, collation: .caseInsensitive), .on(\.file, collation: .natural), .on(\.group, \.name, collation: .caseInsensitive),
    ]
    var id: Int
    var name: String
    var file: String
    var group: Int
}

struct HBCollatedPlain: Model {
    var id: Int
    var name: String
    var file: String
    var group: Int
}

@Suite struct HuntCollatedWalkTests {
    @Test func reverseCollatedWalksKeepTiesInKeyOrder() throws {
        var r = HBRng(state: 5)
        let names = ["a", "A", "b", "B", "Straße", "STRASSE", "é", "E\u{301}", "", "z"]
        let files = ["f1", "F01", "f10", "f9", "f009", "g", "G", "f"]
        let db = try Database.inMemory(models: [HBCollated.self, HBCollatedPlain.self])
        var all: [HBCollated] = []
        for id in 0..<80 { all.append(HBCollated(id: id * 7 % 83, name: r.pick(names), file: r.pick(files), group: r.below(3))) }
        try db.write { tx in
            for o in all {
                try tx.insert(o)
                try tx.insert(HBCollatedPlain(id: o.id, name: o.name, file: o.file, group: o.group))
            }
        }
        var problems: [String] = []
        for (label, collation) in [("ci", StringCollation.caseInsensitive), ("natural", StringCollation.natural)] {
            for reverse in [false, true] {
                for (off, lim) in [(0, Int.max), (0, 5), (7, 10), (30, 3), (79, 5)] {
                    for g in [nil, 1] as [Int?] {
                        let kp: KeyPath<HBCollated, String> = label == "ci" ? \.name : \.file
                        let base = all.filter { g == nil || $0.group == g! }
                        let exp = base.sorted { a, b in
                            var c = collation.compare(a[keyPath: kp], b[keyPath: kp])
                            if reverse { c = c == .orderedAscending ? .orderedDescending : (c == .orderedDescending ? .orderedAscending : c) }
                            return c == .orderedSame ? a.id < b.id : c == .orderedAscending
                        }.dropFirst(off).prefix(lim).map(\.id)
                        let order: SortOrder = reverse ? .reverse : .forward
                        let sd = label == "ci" ? SortDescriptor(\HBCollated.name, order: order) : SortDescriptor(\HBCollated.file, order: order)
                        let sdp = label == "ci" ? SortDescriptor(\HBCollatedPlain.name, order: order) : SortDescriptor(\HBCollatedPlain.file, order: order)
                        var q = db.objects(HBCollated.self)
                        var qp = db.objects(HBCollatedPlain.self)
                        if let g { q = q.filter(#Predicate { $0.group == g }); qp = qp.filter(#Predicate { $0.group == g }) }
                        q = q.sorted(by: sd, collation: collation).offset(off).prefix(lim)
                        qp = qp.sorted(by: sdp, collation: collation).offset(off).prefix(lim)
                        let tag = "\(label) reverse \(reverse) off \(off) lim \(lim) group \(String(describing: g))"
                        if q.map(\.id) != exp { problems.append("\(tag) indexed: \(q.map(\.id)) vs \(exp)\n\(q.explain())") }
                        if qp.map(\.id) != exp { problems.append("\(tag) plain: \(qp.map(\.id)) vs \(exp)") }
                        if q.count != exp.count { problems.append("\(tag) count \(q.count) vs \(exp.count)") }
                        if q.keys != exp { problems.append("\(tag) keys") }
                    }
                }
            }
        }
        #expect(problems.isEmpty, "seed 5: \(problems.count)\n\(problems.prefix(10).joined(separator: "\n"))")
    }
}

// MARK: - partial updates, snapshots, keys, filter order, unregistered models

struct HBPUser: Model {
    static let uniqueIndexes: [PartialKeyPath<HBPUser> & Sendable] = [\.email]
    static let indexes: [PartialKeyPath<HBPUser> & Sendable] = [\.age, \.tags]
    enum CodingKeys: String, CodingKey { case id = "_id", email = "e", age, tags }
    var id: String
    var email: String
    var age: Int
    var tags: [String]
}

@Suite struct HuntPartialUniqueTests {
    @Test func partialWritesAndUniqueIndexes() throws {
        let db = try Database.inMemory(models: [HBPUser.self])
        try db.write { tx in
            try tx.insert(HBPUser(id: "a", email: "a@x", age: 1, tags: ["t"]))
            try tx.insert(HBPUser(id: "b", email: "b@x", age: 2, tags: []))
        }
        var errors: [String] = []
        try db.write { tx in
            do { try tx.update(HBPUser.self, key: "b", json: Data(#"{"e": "a@x", "age": 9}"#.utf8)); errors.append("dup update ok") } catch let e as StrataError
            {
                if case .uniqueViolation = e {} else { errors.append("update: \(e)") }
            }
            do { try tx.upsert(HBPUser.self, key: "c", json: Data(#"{"e": "a@x", "age": 3, "tags": []}"#.utf8)); errors.append("dup upsert ok") } catch let e
                as StrataError
            {
                if case .uniqueViolation = e {} else { errors.append("upsert: \(e)") }
            }
            do { try tx.update(HBPUser.self, key: "b", fields: ["e": "a@x"]); errors.append("dup fields ok") } catch let e as StrataError {
                if case .uniqueViolation = e {} else { errors.append("fields: \(e)") }
            }
            do { try tx.update(HBPUser.self, key: "b", json: Data(#"{"_id": "z", "age": 5}"#.utf8)); errors.append("key change ok") } catch let e as StrataError
            {
                _ = e
            }
            // the transaction goes on
            try tx.update(HBPUser.self, key: "a", json: Data(#"{"tags": ["u", "u"], "age": 10}"#.utf8))
            try tx.upsert(HBPUser.self, key: "d", json: Data(#"{"e": "d@x", "age": 4, "tags": ["t"]}"#.utf8))
        }
        #expect(errors.isEmpty, "\(errors)")
        let all = try db.objects(HBPUser.self).fetch()
        #expect(all.map(\.id) == ["a", "b", "d"])
        #expect(all.map(\.email) == ["a@x", "b@x", "d@x"])
        #expect(all.map(\.age) == [10, 2, 4])
        #expect(db.objects(HBPUser.self).filter(#Predicate { $0.tags.contains("t") }).map(\.id) == ["d"])
        #expect(db.objects(HBPUser.self).filter(#Predicate { $0.tags.contains("u") }).map(\.id) == ["a"])
        #expect(db.objects(HBPUser.self).filter(#Predicate { $0.age == 9 || $0.age == 5 }).count == 0)
        #expect(db.objects(HBPUser.self).filter(#Predicate { $0.email == "a@x" }).map(\.id) == ["a"])
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
    }
}

struct HBAutoRenamed: Model {
    static let uniqueIndexes: [PartialKeyPath<HBAutoRenamed> & Sendable] = [\.code]
    static let indexes: [PartialKeyPath<HBAutoRenamed> & Sendable] = [\.id]
    enum CodingKeys: String, CodingKey { case id = "_id", code = "c" }
    var id: Int32?
    var code: String
}

@Suite struct HuntAutoRenamedTests {
    @Test func autoIncrementWithRenamedKeyAndIndexOnId() throws {
        let db = try Database.inMemory(models: [HBAutoRenamed.self])
        let a = try db.write { tx in try tx.insert(HBAutoRenamed(id: nil, code: "a")) }
        let b = try db.write { tx in try tx.insert(HBAutoRenamed(id: nil, code: "b")) }
        #expect(a.id == 1 && b.id == 2)
        #expect(throws: StrataError.self) { try db.write { tx in try tx.insert(HBAutoRenamed(id: nil, code: "a")) } }
        let c = try db.write { tx in try tx.upsert(HBAutoRenamed(id: nil, code: "c")) }
        #expect(c.id == 3)
        #expect(db.objects(HBAutoRenamed.self).map(\.id) == [1, 2, 3])
        let three: Int32? = 3
        #expect(db.objects(HBAutoRenamed.self).filter(#Predicate { $0.id == three }).map(\.code) == ["c"])
        try db.write { tx in try tx.insert(HBAutoRenamed(id: Int32.max, code: "m")) }
        #expect(throws: StrataError.self) { try db.write { tx in try tx.insert(HBAutoRenamed(id: nil, code: "n")) } }
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
    }
}

@Suite struct HuntSnapshotTests {
    @Test func resultsOutliveDeleteAllAndCompaction() throws {
        let path = huntBPath("snap"); defer { huntBCleanup(path) }
        let db = try Database(path: path, models: [HBItem.self])
        var r = HBRng(state: 11)
        var all: [HBItem] = []
        for id in 0..<3000 { all.append(HuntTransactionModelTests.random(&r, id: id)) }
        for i in all.indices { all[i].code = nil }
        try db.write(durability: .noSync) { tx in
            for o in all { var o = o; o.code = "k\(o.id)"; try tx.insert(o) }
        }
        for i in all.indices { all[i].code = "k\(all[i].id)" }
        let plain = db.objects(HBItem.self)
        let filtered = db.objects(HBItem.self).filter(#Predicate { $0.cat == 1 })
        let sorted = db.objects(HBItem.self).sorted(by: SortDescriptor(\.rank, order: .reverse)).offset(100)
        var it = plain.makeIterator()
        var seen: [HBItem] = []
        for _ in 0..<10 { if let x = it.next() { seen.append(x) } }
        _ = filtered.count
        try db.write(durability: .noSync) { tx in _ = try tx.deleteAll(HBItem.self) }
        try db.write(durability: .noSync) { tx in
            for id in 0..<500 { try tx.insert(HBItem(id: id, cat: 9, tags: ["zz"], rank: 1, code: "n\(id)", owner: nil, refs: [], text: "fresh")) }
        }
        _ = try db.store.compact()
        while let x = it.next() { seen.append(x) }
        #expect(seen == all)
        #expect(plain.count == 3000)
        #expect(plain[2999] == all[2999])
        #expect(filtered.map(\.id) == all.filter { $0.cat == 1 }.map(\.id))
        let expSorted = all.sorted { a, b in
            switch (a.rank, b.rank) {
            case let (x?, y?): return x != y ? x > y : a.id < b.id
            case (nil, nil): return a.id < b.id
            case (nil, _): return false
            case (_, nil): return true
            }
        }.dropFirst(100).map(\.id)
        #expect(sorted.map(\.id) == Array(expSorted))
        #expect(plain.error == nil && filtered.error == nil && sorted.error == nil)
        #expect(db.objects(HBItem.self).count == 500)
    }
}

enum HBLevelKey: String, Codable, Sendable, Comparable, CaseIterable, Hashable {
    case high = "a", low = "z", mid = "m"
    static func < (a: HBLevelKey, b: HBLevelKey) -> Bool { allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)! }
}

struct HBEnumKeyed: Model {
    var id: HBLevelKey
    var n: Int
}

struct HBIntLevelHolder: Model {
    static let indexes: [PartialKeyPath<HBIntLevelHolder> & Sendable] = [\.level]
    var id: Int
    var level: HBLevelKey
}

@Suite struct HuntEnumKeyTests {
    @Test func sortByAnEnumKeyWithItsOwnOrder() throws {
        let db = try Database.inMemory(models: [HBEnumKeyed.self, HBIntLevelHolder.self])
        try db.write { tx in
            for (i, l) in HBLevelKey.allCases.enumerated() { try tx.insert(HBEnumKeyed(id: l, n: i)) }
            for (i, l) in [HBLevelKey.mid, .low, .high, .mid].enumerated() { try tx.insert(HBIntLevelHolder(id: i, level: l)) }
        }
        let r = db.objects(HBEnumKeyed.self)
        #expect(r.sorted(by: SortDescriptor(\.id)).map(\.id) == [.high, .low, .mid])
        #expect(r.sorted(by: SortDescriptor(\.id, order: .reverse)).map(\.id) == [.mid, .low, .high])
        #expect(r.sorted(by: SortDescriptor(\.id)).prefix(1).map(\.id) == [.high])
        #expect(r.min(of: \.id) == .high)
        #expect(r.max(of: \.id) == .mid)
        let low = HBLevelKey.low
        #expect(r.filter(#Predicate { $0.id > low }).map(\.id) == [.mid])
        let h = db.objects(HBIntLevelHolder.self)
        #expect(h.sorted(by: SortDescriptor(\.level)).map(\.id) == [2, 1, 0, 3])
        #expect(h.sorted(by: SortDescriptor(\.level, order: .reverse)).prefix(2).map(\.id) == [0, 3])
        #expect(h.filter(#Predicate { $0.level < low }).map(\.id) == [2])
        #expect(h.max(of: \.level) == .mid)
        #expect(h.filter(#Predicate { $0.level >= low }).count == 3)
    }
}

struct HBStr: Model {
    static let indexes: [PartialKeyPath<HBStr> & Sendable] = [\.s]
    var id: Int
    var s: String
}

@Suite struct HuntStringSortTests {
    @Test func stringSortAgreesWithSortDescriptorCompare() throws {
        let strings = ["\u{FF5E}", "😀", "a", "B", "", "\u{0}", "é", "e\u{301}f", "Z\u{308}", "ǅ", "\u{10FFFF}", "\u{E000}", "ß", "ss"]
        let db = try Database.inMemory(models: [HBStr.self])
        let objs = strings.enumerated().map { HBStr(id: $0.offset, s: $0.element) }
        try db.write { tx in for o in objs { try tx.insert(o) } }
        for order in [SortOrder.forward, .reverse] {
            let sd = SortDescriptor(\HBStr.s, order: order)
            let exp = objs.sorted { a, b in
                let c = sd.compare(a, b)
                return c == .orderedSame ? a.id < b.id : c == .orderedAscending
            }.map(\.id)
            let got = db.objects(HBStr.self).sorted(by: sd).map(\.id)
            #expect(got == exp, "\(order): got \(got.map { strings[$0] }) expected \(exp.map { strings[$0] })")
            let gotPrefix = db.objects(HBStr.self).sorted(by: sd).prefix(5).map(\.id)
            #expect(gotPrefix == Array(exp.prefix(5)))
        }
        #expect(db.objects(HBStr.self).min(of: \.s) == objs.min { a, b in SortDescriptor(\HBStr.s).compare(a, b) == .orderedAscending }?.s)
    }
}

@Suite struct HuntThrowingFilterOrderTests {
    @Test func aThrowingFilterBeforeAnIndexedOneFailsTheQuery() throws {
        let db = try Database.inMemory(models: [HBItem.self])
        try db.write { tx in
            try tx.insert(HBItem(id: 1, cat: 1, tags: ["t"], rank: 3, code: nil, owner: nil, refs: [], text: "x y"))
            try tx.insert(HBItem(id: 2, cat: 2, tags: [], rank: nil, code: "c", owner: nil, refs: [], text: "y"))
        }
        let base = db.objects(HBItem.self)
        let shapes: [(String, Results<HBItem>, Bool)] = [
            ("pred then equals", base.filter(#Predicate { $0.rank! > 0 }).filter(\.cat, equals: 1), true),
            ("equals then pred", base.filter(\.cat, equals: 1).filter(#Predicate { $0.rank! > 0 }), false),
            ("pred then contains", base.filter(#Predicate { $0.rank! > 0 }).filter(\.tags, contains: "t"), true),
            ("pred then search", base.filter(#Predicate { $0.rank! > 0 }).search(\.text, "x"), true),
            ("search then pred", base.search(\.text, "x").filter(#Predicate { $0.rank! > 0 }), false),
            ("pred then pred", base.filter(#Predicate { $0.rank! > 0 }).filter(#Predicate { $0.cat == 1 }), true),
            ("one pred and", base.filter(#Predicate { $0.rank! > 0 && $0.cat == 1 }), true),
            ("one pred and reversed", base.filter(#Predicate { $0.cat == 1 && $0.rank! > 0 }), false),
            ("pred then equals, prefix", base.filter(#Predicate { $0.rank! > 0 }).filter(\.cat, equals: 1).prefix(1), true),
            (
                "pred then equals, sorted", base.filter(#Predicate { $0.rank! > 0 }).filter(\.cat, equals: 1).sorted(by: SortDescriptor(\.id, order: .reverse)),
                true
            ),
        ]
        for (name, r, fails) in shapes {
            // count first (before evaluation), as a list UI would
            let fresh = r.rebuilt(r.query)
            let c = fresh.count
            if fails {
                #expect(c == 0, "\(name): count \(c)")
                #expect(fresh.error != nil, "\(name): no error")
                #expect(throws: (any Error).self, "\(name) fetchCount") { try r.rebuilt(r.query).fetchCount() }
                #expect(throws: (any Error).self, "\(name) fetch") { try r.rebuilt(r.query).fetch() }
                #expect(r.rebuilt(r.query).sum(of: \.cat) == 0, "\(name) sum")
                #expect(throws: (any Error).self, "\(name) fetchSum") { try r.rebuilt(r.query).fetchSum(of: \.cat) }
                #expect(r.rebuilt(r.query).max(of: \.cat) == nil, "\(name) max")
            } else {
                #expect(c == 1, "\(name): count \(c)")
                #expect(fresh.error == nil, "\(name): \(String(describing: fresh.error))")
                #expect(try r.rebuilt(r.query).fetch().map(\.id) == [1], "\(name)")
                #expect(r.rebuilt(r.query).sum(of: \.cat) == 1, "\(name) sum")
            }
        }
    }
}

struct HBNotOpened: Model {
    static let indexes: [PartialKeyPath<HBNotOpened> & Sendable] = [\.n]
    var id: Int
    var n: Int
}

@Suite struct HuntUnregisteredModelTests {
    @Test func aModelNotPassedToTheDatabaseGivesTypedErrors() throws {
        let db = try Database.inMemory(models: [HBStr.self])
        let r = db.objects(HBNotOpened.self).filter(#Predicate { $0.n > 1 }).sorted(by: SortDescriptor(\.n))
        #expect(r.count == 0)
        #expect(r.error != nil)
        #expect(r.first == nil)
        #expect(r.objects(in: 0..<10).isEmpty)
        #expect(r.max(of: \.n) == nil)
        #expect(r.keys.isEmpty)
        #expect(throws: StrataError.self) { try r.fetch() }
        #expect(throws: StrataError.self) { try r.fetchCount() }
        #expect(throws: StrataError.self) { try db.write { tx in try tx.insert(HBNotOpened(id: 1, n: 1)) } }
        #expect(throws: StrataError.self) { try db.write { tx in try tx.update(HBNotOpened.self, key: 1) { $0.n = 2 } } }
        #expect(throws: StrataError.self) { try db.write { tx in _ = try tx.delete(HBNotOpened.self, key: 1) } }
        #expect(throws: StrataError.self) { try db.object(HBNotOpened.self, key: 1) }

    }
}
