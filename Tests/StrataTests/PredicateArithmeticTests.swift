import Testing
import Foundation
@testable import Strata

// Integer arithmetic in a `#Predicate` traps inside Foundation's `evaluate` on overflow, on
// division by zero and on a closed range with its bounds reversed. Strata evaluates such
// predicates itself and throws `invalidQuery` instead. Each predicate here has a reference written
// by hand with the `…ReportingOverflow` operations: for an object, either a truth value or "traps".
// Where it does not trap, the reference must agree with Foundation's `evaluate` (which is then
// safe to call), and the query must return exactly the objects Foundation's filter would; where
// any object traps, the query must throw. Values are drawn from the integer types' bounds and
// small numbers; STRATA_ARITH_N sets the number of objects, STRATA_ARITH_SEED the seed.

struct ArithItem: Model {
    static let indexes: [PartialKeyPath<ArithItem> & Sendable] = [\.room]
    var id: Int
    var room: Int
    var a: Int
    var b: Int
    var small: Int8
    var byte: UInt8
    var opt: Int?
    var list: [Int]
    var x: Double
}

/// What the reference says of one object: Foundation's answer, or that Foundation would trap
/// (`traps`) or throw (`throwsError`).
private enum Outcome: Equatable {
    case value(Bool)
    case traps
    case throwsError
}

private struct ArithCase: Sendable {
    let name: String
    let predicate: Predicate<ArithItem>
    let reference: @Sendable (ArithItem) -> Outcome
}

private func add(_ x: Int, _ y: Int) -> Int? {
    let (r, o) = x.addingReportingOverflow(y)
    return o ? nil : r
}

private func sub(_ x: Int, _ y: Int) -> Int? {
    let (r, o) = x.subtractingReportingOverflow(y)
    return o ? nil : r
}

private func mul(_ x: Int, _ y: Int) -> Int? {
    let (r, o) = x.multipliedReportingOverflow(by: y)
    return o ? nil : r
}

private func div(_ x: Int, _ y: Int) -> Int? {
    guard y != 0 else { return nil }
    let (r, o) = x.dividedReportingOverflow(by: y)
    return o ? nil : r
}

private func rem(_ x: Int, _ y: Int) -> Int? {
    guard y != 0 else { return nil }
    let (r, o) = x.remainderReportingOverflow(dividingBy: y)
    return o ? nil : r
}

/// `body` of a value that may have trapped.
private func outcome(_ value: Int?, _ body: (Int) -> Bool) -> Outcome { value.map { .value(body($0)) } ?? .traps }

private let cases: [ArithCase] = [
    ArithCase(name: "a + b > 0", predicate: #Predicate { $0.a + $0.b > 0 }, reference: { outcome(add($0.a, $0.b)) { $0 > 0 } }),
    ArithCase(name: "a - 1 < b", predicate: #Predicate { $0.a - 1 < $0.b }, reference: { o in outcome(sub(o.a, 1)) { $0 < o.b } }),
    ArithCase(name: "a * b == 0", predicate: #Predicate { $0.a * $0.b == 0 }, reference: { outcome(mul($0.a, $0.b)) { $0 == 0 } }),
    ArithCase(name: "a / b >= 1", predicate: #Predicate { $0.a / $0.b >= 1 }, reference: { outcome(div($0.a, $0.b)) { $0 >= 1 } }),
    ArithCase(name: "a % b == 0", predicate: #Predicate { $0.a % $0.b == 0 }, reference: { outcome(rem($0.a, $0.b)) { $0 == 0 } }),
    ArithCase(name: "-a > 0", predicate: #Predicate { -$0.a > 0 }, reference: { outcome(sub(0, $0.a)) { $0 > 0 } }),
    ArithCase(
        name: "b != 0 && a / b > 2", predicate: #Predicate { $0.b != 0 && $0.a / $0.b > 2 },
        reference: { $0.b == 0 ? .value(false) : outcome(div($0.a, $0.b)) { $0 > 2 } }),
    ArithCase(
        name: "b == 0 || a % b == 1", predicate: #Predicate { $0.b == 0 || $0.a % $0.b == 1 },
        reference: { $0.b == 0 ? .value(true) : outcome(rem($0.a, $0.b)) { $0 == 1 } }),
    ArithCase(
        name: "small + 1 > 0", predicate: #Predicate { $0.small + 1 > 0 },
        reference: { o in
            let (r, v) = o.small.addingReportingOverflow(1)
            return v ? .traps : .value(r > 0)
        }),
    ArithCase(
        name: "byte - 1 < 10", predicate: #Predicate { $0.byte - 1 < 10 },
        reference: { o in
            let (r, v) = o.byte.subtractingReportingOverflow(1)
            return v ? .traps : .value(r < 10)
        }),
    ArithCase(name: "(opt ?? 0) * 2 > 10", predicate: #Predicate { ($0.opt ?? 0) * 2 > 10 }, reference: { outcome(mul($0.opt ?? 0, 2)) { $0 > 10 } }),
    ArithCase(
        name: "opt.flatMap { v + 1 } == 5", predicate: #Predicate { $0.opt.flatMap { v in v + 1 } == 5 },
        reference: { o in
            guard let v = o.opt else { return .value(false) }
            return outcome(add(v, 1)) { $0 == 5 }
        }),
    ArithCase(
        name: "list.contains { v * 3 > 7 }", predicate: #Predicate { $0.list.contains { v in v * 3 > 7 } },
        reference: { o in
            // In order, stopping at the first match, as `contains(where:)` does.
            for v in o.list {
                guard let p = mul(v, 3) else { return .traps }
                if p > 7 { return .value(true) }
            }
            return .value(false)
        }),
    ArithCase(
        name: "list.allSatisfy { v - 1 < 5 }", predicate: #Predicate { $0.list.allSatisfy { v in v - 1 < 5 } },
        reference: { o in
            for v in o.list {
                guard let d = sub(v, 1) else { return .traps }
                if !(d < 5) { return .value(false) }
            }
            return .value(true)
        }),
    ArithCase(
        name: "list.filter { v % 2 == 0 }.count > 1", predicate: #Predicate { $0.list.filter { v in v % 2 == 0 }.count > 1 },
        reference: { o in .value(o.list.filter { $0 % 2 == 0 }.count > 1) }),
    ArithCase(
        name: "(a > 0 ? a - 1 : a + 1) == 0", predicate: #Predicate { ($0.a > 0 ? $0.a - 1 : $0.a + 1) == 0 },
        reference: { o in o.a > 0 ? outcome(sub(o.a, 1)) { $0 == 0 } : outcome(add(o.a, 1)) { $0 == 0 } }),
    ArithCase(
        name: "(list.max() ?? 0) + 1 > 2", predicate: #Predicate { ($0.list.max() ?? 0) + 1 > 2 },
        reference: { outcome(add($0.list.max() ?? 0, 1)) { $0 > 2 } }),
    ArithCase(
        name: "(a...b).contains(0)", predicate: #Predicate { ($0.a...$0.b).contains(0) },
        reference: { $0.a > $0.b ? .traps : .value(($0.a...$0.b).contains(0)) }),
    ArithCase(
        name: "list[0] + 1 > 0", predicate: #Predicate { $0.list[0] + 1 > 0 },
        reference: { $0.list.isEmpty ? .throwsError : outcome(add($0.list[0], 1)) { $0 > 0 } }),
    ArithCase(name: "x * 2 > 1 (Double)", predicate: #Predicate { $0.x * 2 > 1 }, reference: { .value($0.x * 2 > 1) }),
]

private struct ArithRandom: RandomNumberGenerator {
    var inner: SeededRandom
    mutating func next() -> UInt64 { inner.next() }
}

@Suite struct PredicateArithmeticTests {
    static let seed = UInt64(ProcessInfo.processInfo.environment["STRATA_ARITH_SEED"] ?? "") ?? 20_261_203
    static let count = Int(ProcessInfo.processInfo.environment["STRATA_ARITH_N"] ?? "") ?? 60

    static func objects(count: Int, seed: UInt64) -> [ArithItem] {
        var rng = ArithRandom(inner: SeededRandom(seed: seed))
        let bounds: [Int] = [.min, .min + 1, -3, -2, -1, 0, 1, 2, 3, 7, .max - 1, .max]
        func int() -> Int { Bool.random(using: &rng) ? bounds.randomElement(using: &rng)! : Int.random(in: -20...20, using: &rng) }
        let smalls: [Int8] = [.min, -1, 0, 1, 126, 127]
        let bytes: [UInt8] = [0, 1, 9, 10, 11, 255]
        return (0..<count).map { id in
            ArithItem(
                id: id, room: id % 3, a: int(), b: int(), small: smalls.randomElement(using: &rng)!,
                byte: bytes.randomElement(using: &rng)!, opt: Bool.random(using: &rng) ? int() : nil,
                list: (0..<Int.random(in: 0...3, using: &rng)).map { _ in int() }, x: Double(Int.random(in: -4...4, using: &rng)) / 4)
        }
    }

    /// One object, one case: the reference checked against Foundation where Foundation can run.
    private func referenceOutcome(_ test: ArithCase, _ object: ArithItem) -> Outcome {
        let expected = test.reference(object)
        switch expected {
        case .value(let holds):
            #expect((try? test.predicate.evaluate(object)) == holds, "\(test.name) on \(object)")
        case .throwsError:
            #expect(throws: (any Error).self, "\(test.name) on \(object)") { try test.predicate.evaluate(object) }
        case .traps:
            break
        }
        return expected
    }

    @Test func queriesThrowWhereFoundationWouldTrap() throws {
        let seed = Self.seed
        let objects = Self.objects(count: Self.count, seed: seed)
        let db = try Database.inMemory(models: [ArithItem.self])
        try db.write { tx in for object in objects { try tx.insert(object) } }
        var trapping = 0
        for test in cases {
            // Each object alone, then all of them: one trapping object fails the whole query.
            var anyFails = false
            var matching: [Int] = []
            for object in objects {
                let expected = referenceOutcome(test, object)
                let alone = db.objects(ArithItem.self).filter(#Predicate { $0.id == object.id }).filter(test.predicate)
                switch expected {
                case .value(let holds):
                    #expect(try alone.fetch().map(\.id) == (holds ? [object.id] : []), "seed \(seed): \(test.name) on \(object)")
                    if holds { matching.append(object.id) }
                case .traps, .throwsError:
                    anyFails = true
                    if expected == .traps { trapping += 1 }
                    #expect(throws: StrataError.self, "seed \(seed): \(test.name) on \(object)") { try alone.fetch() }
                    #expect(throws: StrataError.self, "seed \(seed): \(test.name) on \(object)") { try alone.fetchCount() }
                }
            }
            let all = db.objects(ArithItem.self).filter(test.predicate).sorted(by: SortDescriptor(\.id))
            if anyFails {
                #expect(throws: StrataError.self, "seed \(seed): \(test.name)") { try all.fetch() }
                #expect(throws: StrataError.self, "seed \(seed): \(test.name), in a write") {
                    try db.write { tx in _ = try tx.objects(ArithItem.self, where: test.predicate) }
                }
                #expect(throws: StrataError.self, "seed \(seed): \(test.name), deleting") {
                    try db.write { tx in _ = try tx.delete(ArithItem.self, where: test.predicate) }
                }
            } else {
                #expect(try all.fetch().map(\.id) == matching, "seed \(seed): \(test.name)")
                #expect(try db.read { tx in try tx.count(ArithItem.self, where: test.predicate) } == matching.count, "seed \(seed): \(test.name)")
            }
        }
        #expect(db.objects(ArithItem.self).count == objects.count, "a failed delete removed objects")
        // The bounds make some objects trap in most cases; a run where none did tested nothing.
        #expect(trapping > cases.count, "seed \(seed): only \(trapping) trapping evaluations")
    }

    @Test func theErrorSaysWhatOverflowed() throws {
        let db = try Database.inMemory(models: [ArithItem.self])
        try db.write { tx in
            try tx.insert(ArithItem(id: 1, room: 0, a: .max, b: 0, small: 0, byte: 0, opt: nil, list: [], x: 0))
        }
        do {
            _ = try db.objects(ArithItem.self).filter(#Predicate { $0.a + 1 > 0 }).fetch()
            Issue.record("an overflowing sum did not throw")
        } catch let error as StrataError {
            let text = "\(error)"
            #expect(text.contains("9223372036854775807 + 1") && text.contains("ArithItem 1"), "\(text)")
        }
        do {
            _ = try db.objects(ArithItem.self).filter(#Predicate { $0.a / $0.b > 0 }).fetch()
            Issue.record("a division by zero did not throw")
        } catch let error as StrataError {
            #expect("\(error)".contains("division by zero"), "\(error)")
        }
    }

    @Test func guardedArithmeticAndIndexedConditionsStillAnswer() throws {
        let db = try Database.inMemory(models: [ArithItem.self])
        try db.write { tx in
            for id in 0..<30 {
                try tx.insert(ArithItem(id: id, room: id % 3, a: id == 4 ? .max : id, b: id % 4, small: 0, byte: 0, opt: nil, list: [], x: 0))
            }
        }
        // An indexed condition first: the trapping object (room 1) is never evaluated.
        let room = db.objects(ArithItem.self).filter(#Predicate { $0.room == 0 && $0.a + 1 > 10 })
        #expect(try room.fetch().map(\.id).sorted() == [12, 15, 18, 21, 24, 27])
        let guarded = db.objects(ArithItem.self).filter(#Predicate { $0.b != 0 && $0.a / $0.b == 1 })
        #expect(try guarded.fetch().map(\.id).sorted() == [1, 2, 3])
        // A window does not keep the overflowing object (id 4) from failing the query, whatever
        // the plan: the unsorted scan could stop at the first match, the sorted one cannot.
        let unsorted = db.objects(ArithItem.self).filter(#Predicate { $0.a + 1 > 0 }).prefix(1)
        #expect(throws: StrataError.self) { try unsorted.fetch() }
        let sorted = db.objects(ArithItem.self).filter(#Predicate { $0.a + 1 > 0 }).sorted(by: SortDescriptor(\.b)).prefix(1)
        #expect(throws: StrataError.self) { try sorted.fetch() }
        #expect(unsorted.first == nil && unsorted.error != nil)
        // Double arithmetic cannot trap: the window still stops the scan.
        #expect(try db.objects(ArithItem.self).filter(#Predicate { $0.x * 2 >= 0 }).prefix(1).fetch().map(\.id) == [0])
        // Observers see the error as a failed evaluation, not a crash.
        let live = db.objects(ArithItem.self).filter(#Predicate { $0.a * 2 > 0 })
        #expect(throws: StrataError.self) { try live.fetch() }
    }
}
