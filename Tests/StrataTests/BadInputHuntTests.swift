import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Strata

// Bad and extreme input from files, JSON and callers: each must give a typed error saying what
// was wrong and where, or the value `JSONDecoder` gives for the same document; never a crash.
// Risky inputs that once crashed the process are kept at the size that crashed it.

// MARK: Models

struct BIAddress: Codable, Sendable, Equatable {
    var city: String
    var zip: String?
}

enum BIStatus: String, Codable, Sendable { case on, off }

struct BIThing: Model, Equatable {
    var id: String
    var name: String
    var n: Int
    var price: Decimal?
    var when: Date?
    var link: URL?
    var blob: Data?
    var address: BIAddress?
    var status: BIStatus?
    var ratio: Float?
}

/// Runs `body` on a thread with a 512 KiB stack (Darwin's default for secondary threads and
/// Dispatch workers), where a recursion per level of hostile input overflows soonest.
func biOnSmallStack(_ body: @escaping @Sendable () -> Void) {
    let done = DispatchSemaphore(value: 0)
    let thread = Thread {
        body()
        done.signal()
    }
    thread.stackSize = 512 * 1024
    thread.start()
    done.wait()
}

/// What a call gave: its value, or its error's description.
func biOutcome<T>(_ body: () throws -> T) -> String {
    do { return "ok \(try body())" } catch { return "error \(error)" }
}

// MARK: Change messages

@Suite struct BadInputHuntChangeMessages {
    static func database() throws -> Database {
        let db = try Database.inMemory(models: [BIThing.self])
        try db.write { tx in try tx.insert(BIThing(id: "a", name: "A", n: 1, address: BIAddress(city: "Porto", zip: "4000"))) }
        return db
    }

    /// A `cleared` path is one JSON string, so the parser's depth bound does not see how many
    /// levels it names; `patch()` built one level of patch per part, recursively, and 100,000
    /// parts overflowed the stack (SIGSEGV), from JSON and from a message built in code alike.
    @Test func aClearedPathDeeperThanAnyModelIsAnError() throws {
        let db = try Self.database()
        for depth in [JSONParser.maxDepth + 1, 100_000] {
            let path = Array(repeating: "address", count: depth).joined(separator: ".")
            let built = ChangeMessage(.changed, model: "BIThing", key: .string("a"), cleared: [path])
            let parsed = try ChangeMessage.decode(
                json: Data(#"[{"msg": "changed", "collection": "BIThing", "id": "a", "cleared": ["\#(path)"]}]"#.utf8))
            for messages in [[built], parsed] {
                let outcome = biOutcome { try db.apply(messages) }
                #expect(outcome.hasPrefix("error invalid input: BIThing the string \"a\": cleared field \"address.address."), "\(outcome.prefix(300))")
                #expect(outcome.contains("is nested \(depth) levels deep, deeper than the \(JSONParser.maxDepth) allowed"), "\(outcome.prefix(300))")
            }
        }
        // Nothing changed; a path as deep as allowed is an ordinary unknown field.
        #expect(try db.object(BIThing.self, key: "a")?.address?.zip == "4000")
        let allowed = Array(repeating: "address", count: JSONParser.maxDepth).joined(separator: ".")
        let outcome = biOutcome { try db.apply([ChangeMessage(.changed, model: "BIThing", key: .string("a"), cleared: [allowed])]) }
        #expect(outcome == "error unknown fields for BIThing: address.address", "\(outcome.prefix(300))")
    }
}

extension BadInputHuntChangeMessages {
    /// A `JSONValue` built in code is not bounded by the parser. Its conversion for a patch
    /// recursed once per level without a bound, and at 1,000 levels overflowed a 512 KiB stack
    /// (SIGSEGV) in a change message's fields, in its key, and as a value of `fields: [String: Any]`,
    /// where the value itself was made and freed on that stack without trouble.
    @Test func deepJSONValuesBuiltInCodeAreAnError() throws {
        let db = try Self.database()
        let outcomes = Mutex<[String]>([])
        biOnSmallStack {
            var deep = JSONValue.int(1)
            for _ in 0..<1000 { deep = .array([deep]) }
            let inFields = biOutcome { try db.apply([ChangeMessage(.changed, model: "BIThing", key: .string("a"), fields: ["name": deep])]) }
            let asKey = biOutcome { try db.apply([ChangeMessage(.changed, model: "BIThing", key: deep)]) }
            let inDictionary = biOutcome { try db.write { tx in try tx.update(BIThing.self, key: "a", fields: ["name": deep]).object } }
            outcomes.withLock { $0 = [inFields, asKey, inDictionary] }
        }
        let seen = outcomes.withLock { $0 }
        let prefixes = ["error type mismatch in BIThing.name[0][0]", "error type mismatch in BIThing.id[0][0]", "error type mismatch in BIThing.name[0][0]"]
        #expect(seen.count == 3)
        for (outcome, prefix) in zip(seen, prefixes) {
            #expect(outcome.hasPrefix(prefix) && outcome.hasSuffix(": nesting deeper than \(JSONParser.maxDepth) levels"), "\(outcome.prefix(200))")
        }
        #expect(try db.object(BIThing.self, key: "a")?.name == "A")
    }
}

// MARK: Damaged files

struct BIMeta: Codable, Sendable, Equatable {
    var kind: BIStatus
    var score: Int
    var labels: [String: Int]
}

struct BIStored: Model, Equatable {
    static let indexDescriptors: [IndexDescriptor<BIStored>] = [
        .on(\.name), .on(\.n), .on(\.when), .on(\.tags), .on(\.meta.score), .on(\.price), .unique(\.code),
        .on(\.name, \.n), .on(\.name, collation: .caseInsensitive), .fullText(\.text),
    ]
    var id: String
    var name: String
    var n: Int
    var code: Int
    var when: Date
    var price: Decimal
    var ratio: Double?
    var tags: [String]
    var text: String
    var blob: Data
    var meta: BIMeta
    var parent: Ref<BIStored>?
    var status: BIStatus
    var small: Int8
}

/// A small deterministic generator (SplitMix64), so that a failing seed can be run again.
struct BIRandom: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func biSize(_ fallback: Int) -> Int {
    ProcessInfo.processInfo.environment["STRATA_BADINPUT_N"].flatMap(Int.init) ?? fallback
}

@Suite struct BadInputHuntDamagedFiles {
    static func object(_ i: Int) -> BIStored {
        BIStored(
            id: "k\(i)", name: i % 3 == 0 ? "Ana" : "bo\(i)", n: i * 7 - 20, code: i, when: Date(timeIntervalSinceReferenceDate: Double(i) * 1e6),
            price: Decimal(i) / 4, ratio: i % 2 == 0 ? nil : Double(i) / 3, tags: Array(["x", "y", "z\(i)"].prefix(i % 4)),
            text: "word\(i) common text", blob: Data(repeating: UInt8(i % 256), count: i % 5), meta: BIMeta(kind: i % 2 == 0 ? .on : .off, score: i, labels: ["a": i]),
            parent: i > 0 ? Ref("k\(i - 1)") : nil, status: i % 2 == 0 ? .on : .off, small: Int8(i % 100))
    }

    /// Everything that reads records or index entries; each may throw or give any answer, but
    /// must return. Results' non-throwing accessors note a damaged record in `error`.
    static func readEverything(_ db: Database, damagedKey: String) {
        let on = BIStatus.on
        let cutoff = Date(timeIntervalSinceReferenceDate: 5e6)
        let limit = Decimal(2)
        let all = db.objects(BIStored.self)
        let queries: [Results<BIStored>] = [
            all,
            all.filter(#Predicate { $0.name == "Ana" }),
            all.filter(#Predicate { $0.n > 3 && $0.n < 100 }),
            all.filter(#Predicate { $0.when < cutoff }),
            all.filter(#Predicate { $0.tags.contains("x") }),
            all.filter(#Predicate { $0.meta.score >= 2 }),
            all.filter(#Predicate { $0.price > limit }),
            all.filter(#Predicate { $0.status == on && $0.small > 3 }),
            all.filter(#Predicate { $0.ratio != nil }),
            all.filter(#Predicate { $0.text.contains("common") }),
            all.filter(#Predicate { $0.code == 4 }),
            all.sorted(by: SortDescriptor(\.name), SortDescriptor(\.n, order: .reverse)),
            all.sorted(by: SortDescriptor(\.when)).prefix(5),
            all.sorted(by: SortDescriptor(\.ratio)).offset(2),
            all.sorted(by: SortDescriptor(\.price)),
            all.filter(#Predicate { $0.name == "Ana" }).sorted(by: SortDescriptor(\.n)),
            all.distinct(by: \.status),
            all.search(\.text, "common"),
            all.search(\.text, "word", ranked: true),
        ]
        for results in queries {
            _ = results.count
            _ = Array(results).count
            _ = try? results.fetch()
            _ = try? results.fetchCount()
            _ = results.keys
            _ = results.first
            if !results.isEmpty { _ = results[results.count - 1] }
            _ = results.min(of: \.n)
            _ = results.max(of: \.when)
            _ = results.sum(of: \.n)
            _ = try? results.fetchSum(of: \.small)
            _ = results.average(of: \.code)
            _ = results.max(of: \.ratio)
            _ = results.explain()
            _ = results.error
        }
        _ = try? db.object(BIStored.self, key: damagedKey)
        _ = try? db.snapshot().backlinks(BIStored.self, via: \.parent, to: damagedKey)
        _ = try? StoredObjects.forEach(in: db.store, model: "BIStored") { _, fields in _ = fields.count; return true }
        _ = try? StoredObjects.check(in: db.store)
        _ = try? db.store.check()
    }

    static func writeEverything(_ db: Database, damagedKey: String, _ rng: inout BIRandom) {
        let k = damagedKey
        let steps: [(Transaction) throws -> Void] = [
            { tx in _ = try tx.update(BIStored.self, key: k, json: Data(#"{"name": "Eva", "meta": {"score": 3}}"#.utf8)) },
            { tx in _ = try tx.update(BIStored.self, key: k) { $0.n += 1 } },
            { tx in _ = try tx.upsert(Self.object(999)) },
            { tx in var o = Self.object(3); o.id = k; _ = try tx.upsert(o) },
            { tx in _ = try tx.delete(BIStored.self, key: k) },
            { tx in _ = try tx.delete(BIStored.self, where: #Predicate { $0.n > 10 }) },
            { tx in _ = try tx.apply([ChangeMessage(.changed, model: "BIStored", key: .string(k), fields: ["n": .int(5)], cleared: ["ratio"])]) },
            { tx in _ = try tx.objects(BIStored.self, where: #Predicate { $0.name != "x" }, sortedBy: [SortDescriptor(\.name)]) },
            { tx in _ = try tx.count(BIStored.self, where: #Predicate { $0.code > 2 }) },
            { tx in _ = try tx.deleteAll(BIStored.self) },
        ]
        for step in steps.shuffled(using: &rng).prefix(4) {
            _ = try? db.write { tx in try step(tx) }
        }
    }

    /// Records and index entries damaged in the file: random bytes written over, cut short,
    /// lengthened or replaced, then read and written through every API. Nothing may trap.
    @Test func damagedRecordsAndIndexEntriesNeverTrap() throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["STRATA_BADINPUT_SEED"].flatMap(UInt64.init) ?? 0xB1D_0001)
        let rounds = biSize(12)
        var rng = BIRandom(state: seed)
        for round in 0..<rounds {
            let path = databasePath()
            defer { try? FileManager.default.removeItem(atPath: path) }
            let db = try Database(path: path, models: [BIStored.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in for i in 0..<12 { try tx.insert(Self.object(i)) } }
            let victim = Int.random(in: 0..<12, using: &rng)
            let damagedKey = "k\(victim)"
            var what = ""
            try db.store.write { txn in
                let names = try txn.treeNames().filter { $0.hasPrefix("m:") || $0.hasPrefix("i:") || $0.hasPrefix("t:") || $0.hasPrefix("x:") }
                let treeName = round % 2 == 0 ? "m:BIStored" : names.randomElement(using: &rng) ?? "m:BIStored"
                guard let tree = try txn.tree(treeName) else { return }
                let cursor = try tree.cursor()
                var key: [UInt8] = []
                var value: [UInt8] = []
                if treeName == "m:BIStored" {
                    KeyEncoding.appendBytes(damagedKey.utf8, to: &key)
                    value = try tree.get(key) ?? []
                } else if try cursor.first() {
                    for _ in 0..<Int.random(in: 0..<8, using: &rng) where try cursor.next() == false { _ = try cursor.first() }
                    key = Array(cursor.key)
                    value = Array(cursor.value)
                }
                var spoilKey = treeName != "m:BIStored" && Bool.random(using: &rng)
                var bytes = spoilKey ? key : value
                switch Int.random(in: 0..<4, using: &rng) {
                case 0:
                    for _ in 0..<Int.random(in: 1...4, using: &rng) where !bytes.isEmpty {
                        bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
                    }
                case 1: bytes.removeLast(Int.random(in: 0...bytes.count, using: &rng))
                case 2: bytes += (0..<Int.random(in: 1...40, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
                default: bytes = (0..<Int.random(in: 0...60, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
                }
                if spoilKey && bytes.isEmpty { spoilKey = false }
                what = "\(treeName) \(spoilKey ? "key" : "value") → \(bytes.prefix(24))"
                if spoilKey {
                    _ = try tree.delete(key)
                    _ = try tree.put(bytes, value)
                } else if !key.isEmpty {
                    _ = try tree.put(key, bytes)
                }
            }
            print("BadInputHunt seed \(seed) round \(round): \(what)")
            Self.readEverything(db, damagedKey: damagedKey)
            Self.writeEverything(db, damagedKey: damagedKey, &rng)
            Self.readEverything(db, damagedKey: damagedKey)
            db.close()
        }
    }
}
