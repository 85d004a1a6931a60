import Foundation
import Synchronization
import Testing

@testable import Strata
@testable import StrataStorage

// Hunt C, object layer: power loss (writes since the last completed sync lost, or kept in part,
// page by page or sector by sector) in the middle of `Database` commits of objects with a
// secondary, a unique, a compound, a full-text, a collated and a unique collated index and large
// values in overflow runs, and in the middle of `compact()`. The reopened file must check clean
// (engine and objects: every index entry recomputed from the records) and hold exactly the last
// acknowledged objects, or the ones of the commit in flight.
//
// Environment: HUNTC_ITERATIONS (rounds, default small), HUNTC_SEED.

struct HCItem: Model, Equatable {
    static let indexes: [PartialKeyPath<HCItem> & Sendable] = [\.tag]
    static let indexDescriptors: [IndexDescriptor<HCItem>] = [
        .unique(\.code), .on(\.group, \.rank), .fullText(\.text), .on(\.name, collation: .caseInsensitive),
        .unique(\.handle, collation: .natural),
    ]
    var id: Int
    var tag: String
    var code: String
    var group: Int
    var rank: Int
    var text: String
    var name: String
    var handle: String
    var blob: Data
}

/// A page file seen through a power switch: every write since the last completed sync is
/// journaled with the bytes it replaced; `losePower` puts back all of them or a random subset, in
/// chunks. The power can be cut at the Nth write (that write half done or not) or Nth sync.
// Unchecked: its mutable state is in `state` (a Mutex).
final class HCPowerFile: FileIO, @unchecked Sendable {
    let inner: any FileIO
    struct State {
        var writes = 0, syncs = 0
        var cutAtWrite: Int?, cutAtSync: Int?, partial = false, off = false
        var journal: [(offset: UInt64, old: [UInt8])] = []
    }
    let state = Mutex(State())
    /// For the commit log beside a page file: the page file, whose counts and power switch this
    /// file shares (one plan for both files; each keeps its own journal).
    private weak var pageFile: HCPowerFile?
    /// For a page file: the commit logs that share its plan, put back with it by `losePower`.
    private let logs = Mutex<[HCPowerFile]>([])
    private var plan: HCPowerFile { pageFile ?? self }
    init(_ inner: any FileIO) { self.inner = inner }

    /// Wraps the commit log `inner` beside `pageFile`, sharing its plan.
    convenience init(_ inner: any FileIO, logOf pageFile: HCPowerFile) {
        self.init(inner)
        self.pageFile = pageFile
        pageFile.logs.withLock { $0.append(self) }
    }
    var path: String { inner.path }
    func size() throws -> UInt64 { try inner.size() }
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws { try inner.read(into: buffer, at: offset) }

    private func journaled(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        var old = [UInt8](repeating: 0, count: bytes.count)
        let size = try inner.size()
        if offset < size {
            let n = Int(min(UInt64(bytes.count), size - offset))
            try old.withUnsafeMutableBytes { try inner.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<n]), at: offset) }
        }
        state.withLock { $0.journal.append((offset, old)) }
        try inner.write(bytes, at: offset)
    }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        let (ok, half) = plan.state.withLock { s -> (Bool, Bool) in
            s.writes += 1
            if s.off { return (false, false) }
            if let cut = s.cutAtWrite, s.writes >= cut { s.off = true; return (false, s.partial) }
            return (true, false)
        }
        if ok { return try journaled(bytes, at: offset) }
        if half { try journaled(UnsafeRawBufferPointer(rebasing: bytes[0..<(bytes.count / 2)]), at: offset) }
        throw StorageError.io(operation: "pwrite", path: path, errno: 5)
    }

    func write(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        var joined: [UInt8] = []
        for b in buffers { joined.append(contentsOf: b) }
        try joined.withUnsafeBytes { try write($0, at: offset) }
    }

    func sync() throws {
        let ok = plan.state.withLock { s -> Bool in
            s.syncs += 1
            if let cut = s.cutAtSync, s.syncs >= cut { s.off = true }
            return !s.off
        }
        if !ok { throw StorageError.io(operation: "fdatasync", path: path, errno: 5) }
        try inner.sync()
        state.withLock { $0.journal.removeAll() }
    }

    func truncate(to length: UInt64) throws {
        if plan.state.withLock({ $0.off }) { throw StorageError.io(operation: "ftruncate", path: path, errno: 5) }
        try inner.truncate(to: length)
    }
    func map(length: Int, writable: Bool) throws -> UnsafeMutableRawPointer { try inner.map(length: length, writable: writable) }
    func unmap(_ address: UnsafeMutableRawPointer, length: Int) { inner.unmap(address, length: length) }
    func lock(offset: Int64, length: Int64, exclusive: Bool, wait: Bool) throws -> Bool {
        try inner.lock(offset: offset, length: length, exclusive: exclusive, wait: wait)
    }
    func unlock(offset: Int64, length: Int64) { inner.unlock(offset: offset, length: length) }

    var writes: Int { state.withLock { $0.writes } }
    var syncs: Int { state.withLock { $0.syncs } }
    func cut(atWrite n: Int, partial: Bool) {
        state.withLock {
            $0.cutAtWrite = $0.writes + n; $0.partial = partial
        }
    }
    func cut(atSync n: Int) { state.withLock { $0.cutAtSync = $0.syncs + n } }
    func clear() {
        state.withLock {
            $0.cutAtWrite = nil; $0.cutAtSync = nil; $0.off = false
        }
    }

    func losePower(chunk: Int, keep: (Int) -> Bool) throws {
        for log in logs.withLock({ $0 }) { try log.losePower(chunk: chunk, keep: keep) }
        let journal = state.withLock { s -> [(offset: UInt64, old: [UInt8])] in
            let j = s.journal
            s.journal.removeAll()
            s.off = false
            s.cutAtWrite = nil
            s.cutAtSync = nil
            return j
        }
        var piece = 0
        for entry in journal.reversed() {
            var start = 0
            while start < entry.old.count {
                let end = min(entry.old.count, start + chunk)
                if !keep(piece) {
                    try entry.old[start..<end].withUnsafeBytes { try inner.write($0, at: entry.offset + UInt64(start)) }
                }
                piece += 1
                start = end
            }
        }
        try inner.sync()
    }
}

enum PowerLossObjects {
    struct Rng {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
        mutating func percent(_ p: Int) -> Bool { below(100) < p }
    }

    static let words = ["alpha", "Beta", "gamma", "délta", "Straße", "naïve", "x10", "x9", "zeta", "omega", "can't", "3.14"]

    static func item(_ id: Int, version: Int, _ rng: inout Rng) -> HCItem {
        let big = rng.percent(15)
        let blobCount = big ? 5_000 + rng.below(60_000) : rng.below(100)
        var blob = Data(count: blobCount)
        blob.withUnsafeMutableBytes { p in for i in 0..<p.count { p[i] = UInt8(truncatingIfNeeded: (id &* 31) ^ version ^ i) } }
        let text = (0..<(1 + rng.below(12))).map { _ in words[rng.below(words.count)] }.joined(separator: " ")
        return HCItem(
            id: id, tag: "t\(rng.below(7))", code: "code-\(id)-\(version)", group: rng.below(5), rank: rng.below(1000) - 500,
            text: text, name: ["Ana", "ana", "BOB", "bob", "Émile", "emile"][rng.below(6)] + "\(rng.below(4))",
            handle: "h\(id)-\(version)-file\(rng.below(30))", blob: blob)
    }

    /// One transaction: inserts, updates of indexed fields and blobs, deletes.
    static func transaction(_ tx: Transaction, _ model: inout [Int: HCItem], _ rng: inout Rng, version: Int, operations: Int) throws {
        for _ in 0..<operations {
            let roll = rng.below(10)
            if roll < 4 || model.isEmpty {
                let id = rng.below(400)
                let item = item(id, version: version, &rng)
                try tx.upsert(item)
                model[id] = item
            } else if roll < 7 {
                let id = model.keys.sorted()[rng.below(model.count)]
                let item = item(id, version: version, &rng)
                try tx.upsert(item)
                model[id] = item
            } else {
                let id = model.keys.sorted()[rng.below(model.count)]
                _ = try tx.delete(HCItem.self, key: id)
                model[id] = nil
            }
        }
    }

    static func open(_ path: String, tight: Bool) throws -> (Database, HCPowerFile) {
        var options = StoreOptions(durability: .full)
        options.compaction.idleDelay = nil
        if tight { options.compaction.freeFraction = 0.02; options.compaction.pagesPerCommit = 8 }
        let made = Mutex<HCPowerFile?>(nil)
        let store = try Store(path: path, options: options) { inner in
            if inner.path.hasSuffix("-log"), let pageFile = made.withLock({ $0 }) { return HCPowerFile(inner, logOf: pageFile) }
            let f = HCPowerFile(inner)
            made.withLock { $0 = f }
            return f
        }
        let file = try #require(made.withLock { $0 })
        return (try Database(store: store, models: [HCItem.self]), file)
    }

    /// Checks the reopened file; returns which of `acceptable` it holds.
    static func verify(_ path: String, acceptable: [[Int: HCItem]], context: String) throws -> Int? {
        let db = try Database(path: path, models: [HCItem.self])
        defer { db.close() }
        let engine = try db.store.check()
        #expect(engine.isOK, "\(context): engine check: \(engine.problems.prefix(5))")
        let objects = try StoredObjects.check(in: db.store)
        #expect(objects.problems.isEmpty, "\(context): object check: \(objects.problems.prefix(5))")
        let found = Dictionary(uniqueKeysWithValues: try db.objects(HCItem.self).fetch().map { ($0.id, $0) })
        let index = acceptable.firstIndex(of: found)
        #expect(index != nil, "\(context): \(found.count) objects, matching none of \(acceptable.map(\.count)) acceptable states")
        if let index {
            // The indexes answer as the model does.
            let model = acceptable[index]
            for t in 0..<7 {
                let tag = "t\(t)"
                let n = db.objects(HCItem.self).filter(#Predicate { $0.tag == tag }).count
                #expect(n == model.values.filter { $0.tag == tag }.count, "\(context): tag \(tag)")
            }
            let g = 2
            let inGroup = try db.objects(HCItem.self).filter(#Predicate { $0.group == g }).sorted(by: SortDescriptor(\.rank)).fetch().map(\.id)
            #expect(Set(inGroup) == Set(model.values.filter { $0.group == 2 }.map(\.id)), "\(context): group 2")
        }
        return index
    }
}

@Suite struct PowerLossObjectHuntTests {
    /// Durable object commits (some with big blobs, some rewriting most objects) and `compact()`
    /// calls, each possibly cut by a power loss at a random write or sync.
    @Test(arguments: [false, true])
    func powerLossInObjectCommitsAndCompaction(tight: Bool) throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["STRATA_POWER_LOSS_HUNT_SEED"].flatMap { Int($0) } ?? 0xC0FFEE) ^ (tight ? 0x77 : 0x78)
        let rounds = ProcessInfo.processInfo.environment["STRATA_POWER_LOSS_HUNT_ROUNDS"].flatMap { Int($0) } ?? 14
        let path = databasePath("huntc-objects-\(tight)")
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        var rng = PowerLossObjects.Rng(state: seed)
        var (db, file) = try PowerLossObjects.open(path, tight: tight)
        var model: [Int: HCItem] = [:]
        var version = 0
        try db.write { tx in try PowerLossObjects.transaction(tx, &model, &rng, version: version, operations: 300) }
        var cuts = 0
        for round in 0..<rounds {
            let context = "seed \(seed) round \(round) tight \(tight)"
            for _ in 0..<(1 + rng.below(3)) {
                version += 1
                try db.write { tx in try PowerLossObjects.transaction(tx, &model, &rng, version: version, operations: 5 + rng.below(120)) }
            }
            let compacting = rng.percent(35)
            if rng.percent(50) {
                file.cut(atWrite: 1 + rng.below(compacting ? 60 : 25), partial: rng.percent(50))
            } else {
                file.cut(atSync: 1 + rng.below(compacting ? 6 : 1))
            }
            var attempted = model
            var acceptable = [model]
            version += 1
            do {
                if compacting {
                    try db.store.compact()
                } else {
                    try db.write { tx in try PowerLossObjects.transaction(tx, &attempted, &rng, version: version, operations: 1 + rng.below(150)) }
                    acceptable = [attempted]
                }
                file.clear()
            } catch {
                if !compacting { acceptable.append(attempted) }
                cuts += 1
            }
            weak let environment = db.store.env
            db.close()
            db = try Database(store: try Store.inMemory(), models: [HCItem.self])
            for _ in 0..<500 where environment != nil { usleep(2_000) }
            #expect(environment == nil, "\(context): the environment outlived its handles")
            let share = rng.below(101)
            let chunk = rng.percent(30) ? 512 : 4096
            var keepRng = PowerLossObjects.Rng(state: rng.next())
            try file.losePower(chunk: chunk) { _ in keepRng.percent(share) }
            guard
                let index = try PowerLossObjects.verify(
                    path, acceptable: acceptable, context: context + " (chunk \(chunk), keep \(share)%, compacting \(compacting))")
            else { return }
            model = acceptable[index]
            (db, file) = try PowerLossObjects.open(path, tight: tight)
        }
        print("HuntC objects tight=\(tight): \(cuts) cuts")
        #expect(cuts > 0)
    }
}
