// The damaged-file fuzz test (Tests/StrataStorageTests/DamageFuzzTests.swift): the files it
// damages, built here, and what `StrataTestHelper damage-probe` does with a damaged copy — open it
// read-only and read-write, read every tree both ways, look keys up, query the object layer, write
// and commit, compact — reporting what each step did instead of stopping at the first error. The
// parent only asks that the helper ends by itself (no signal, no hang) and that every error it
// reports is one of the engine's or the object layer's typed errors.

import Foundation
import Strata
import StrataStorage

/// The object model of the damaged object databases: an index on one field, a compound index, a
/// collated index, a unique index and a full-text index.
public struct DamageNote: Model, Equatable {
    public static let indexDescriptors: [IndexDescriptor<DamageNote>] = [
        .on(\.category),
        .on(\.room, \.created),
        .on(\.title, collation: .caseInsensitive),
        .unique(\.code),
        .fullText(\.body),
    ]
    public var id: Int
    public var title: String
    public var category: Int
    public var room: String
    public var created: Date
    public var code: String
    public var tags: [String]
    public var body: String

    public init(id: Int, title: String, category: Int, room: String, created: Date, code: String, tags: [String], body: String) {
        self.id = id
        self.title = title
        self.category = category
        self.room = room
        self.created = created
        self.code = code
        self.tags = tags
        self.body = body
    }
}

public enum DamageWorkload {
    /// The shapes of file the fuzz test damages.
    public enum Shape: String, Sendable, CaseIterable {
        /// Several raw trees, inline and overflow values, deletes (a free list), 4 KiB pages.
        case kv
        /// A smaller raw store with 8 KiB pages.
        case kv8k
        /// An object database of `DamageNote`s.
        case objects

        public var pageSize: Int { self == .kv8k ? 8192 : 4096 }
        public var isObjects: Bool { self == .objects }
    }

    static func options(_ shape: Shape) -> StoreOptions {
        var options = StoreOptions(pageSize: shape.pageSize, durability: .noSync)
        options.compaction.idleDelay = nil  // nothing changes the file between commits
        return options
    }

    /// Builds `shape` at `path` in a fixed series of commits; `beforeLast` runs before the last one
    /// (the parent copies the file there, to know what the commit before the newest holds).
    public static func build(_ shape: Shape, path: String, beforeLast: () throws -> Void) throws {
        var rng = DamageRandom(seed: 0xDA_3A6E ^ UInt64(shape.pageSize))
        if shape.isObjects {
            let db = try Database(path: path, models: [DamageNote.self], options: options(shape))
            defer { db.close() }
            let commits = 24
            var next = 0
            for c in 0..<commits {
                if c == commits - 1 { try beforeLast() }
                try db.write { tx in
                    for _ in 0..<(c == 0 ? 120 : 14) {
                        try tx.upsert(note(next, &rng))
                        next += 1
                    }
                    if c > 2 {
                        for _ in 0..<5 { _ = try tx.delete(DamageNote.self, key: rng.below(next)) }
                        let id = rng.below(next)
                        if try tx.object(DamageNote.self, key: id) != nil {
                            try tx.update(DamageNote.self, key: id) { $0.body += " edited \(c)" }
                        }
                    }
                }
            }
            return
        }
        let store = try Store(path: path, options: options(shape))
        defer { store.close() }
        let commits = shape == .kv8k ? 12 : 30
        let maxInline = (shape.pageSize - 32) / 4 - 2
        for c in 0..<commits {
            if c == commits - 1 { try beforeLast() }
            try store.write { txn in
                let names = ["alpha", "beta", "gamma", "big"]
                for (t, name) in names.enumerated() {
                    if shape == .kv8k && t == 2 { continue }
                    let tree = try txn.createTree(name)
                    let puts = c == 0 ? 150 : 25
                    for _ in 0..<puts {
                        let key: [UInt8] =
                            name == "alpha" ? Array("k\(rng.below(4000))".utf8) : withUnsafeBytes(of: UInt64(rng.below(100_000)).bigEndian) { Array($0) }
                        let size: Int
                        if name == "big" {
                            size = rng.below(4) == 0 ? 20 : maxInline + rng.below(3 * shape.pageSize)
                        } else {
                            size = rng.below(10) == 0 ? maxInline + rng.below(shape.pageSize) : rng.below(120)
                        }
                        try tree.put(key, (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ c) })
                    }
                    // Deletes: a free list with entries, some of them overflow pages.
                    if c > 0 {
                        let cursor = try tree.cursor()
                        var doomed: [[UInt8]] = []
                        var more = try cursor.seek(toPosition: rng.below(max(1, tree.count)))
                        while more && doomed.count < 8 {
                            doomed.append(Array(cursor.key))
                            more = try cursor.next()
                        }
                        for key in doomed { _ = try tree.delete(key) }
                    }
                }
                if c % 7 == 3 { _ = try txn.dropTree("scratch") }
                if c % 7 == 1 {
                    let scratch = try txn.createTree("scratch")
                    for i in 0..<60 { try scratch.put(Array("s\(i)".utf8), [UInt8](repeating: UInt8(i), count: 50)) }
                }
            }
        }
    }

    static func note(_ id: Int, _ rng: inout DamageRandom) -> DamageNote {
        let words = ["alpha", "beta", "Gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
        var body = (0..<(3 + rng.below(12))).map { _ in words[rng.below(words.count)] }.joined(separator: " ")
        if rng.below(12) == 0 { body += String(repeating: " lorem ipsum", count: 200 + rng.below(400)) }  // overflow
        return DamageNote(
            id: id, title: "\(words[rng.below(words.count)]) \(rng.below(100))", category: rng.below(6), room: "room\(rng.below(5))",
            created: Date(timeIntervalSinceReferenceDate: Double(rng.below(1_000_000))), code: "c\(id)",
            tags: (0..<rng.below(3)).map { _ in words[rng.below(words.count)] }, body: body)
    }

    // MARK: The probe

    /// What one step did: `ok` with a detail, or the error it threw.
    static func report(_ step: String, _ body: () throws -> String) {
        do {
            let detail = try body()
            emit("step \(step) ok \(detail)")
        } catch {
            emit("step \(step) error \(category(of: error)) \(String(describing: error).replacingOccurrences(of: "\n", with: " "))")
        }
    }

    static func emit(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { write(1, $0.baseAddress! + done, $0.count - done) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { exit(5) }
            done += n
        }
    }

    /// "storage.corrupt", "strata.corruptRecord", "strata.storage.corrupt", or "untyped <Type>".
    public static func category(of error: any Error) -> String {
        func caseName(_ value: Any) -> String {
            Mirror(reflecting: value).children.first?.label ?? String(describing: value)
        }
        if let e = error as? StorageError { return "storage." + caseName(e) }
        if let e = error as? StrataError {
            if case .storage(let inner) = e { return "strata.storage." + caseName(inner) }
            return "strata." + caseName(e)
        }
        return "untyped \(type(of: error))"
    }

    struct ProbeLimit: Error {}

    /// FNV-1a over every tree name, key and value of the snapshot, in order, read forward; then
    /// every tree read backward, every key looked up, positions sought. Returns "txnid digest".
    static func readAll(_ txn: ReadTransaction) throws -> String {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        func add(_ bytes: UnsafeRawBufferPointer) {
            var length = UInt64(bytes.count)
            for _ in 0..<8 {
                h = (h ^ (length & 0xFF)) &* 0x100_0000_01B3
                length >>= 8
            }
            for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
        }
        var total = 0
        for name in try txn.treeNames() {
            Array(name.utf8).withUnsafeBytes { add($0) }
            guard let tree = try txn.tree(name) else { continue }
            let cursor = tree.cursor()
            var keys: [[UInt8]] = []
            var more = try cursor.first()
            while more {
                add(cursor.key)
                add(cursor.value)
                if keys.count < 3_000 { keys.append(Array(cursor.key)) }
                total += 1
                if total > 1_000_000 { throw ProbeLimit() }
                more = try cursor.next()
            }
            var backward = 0
            more = try cursor.last()
            while more {
                backward += 1
                if backward > 1_000_000 { throw ProbeLimit() }
                more = try cursor.prev()
            }
            for key in keys { _ = try tree.get(key) }
            _ = try tree.get([0xFF, 0xFF, 0xFF])
            for position in [0, 1, tree.count / 2, tree.count - 1, tree.count, Int.max, -1] {
                if try cursor.seek(toPosition: position) { _ = try cursor.position() }
            }
            if try cursor.seek([0x6B, 0x35]) { _ = try cursor.seekForward([0x6B, 0x37]) }
        }
        return "\(txn.txnid) \(h)"
    }

    static func readStore(_ store: Store, _ prefix: String) {
        report("\(prefix)-read") { try store.read { try readAll($0) } }
        report("\(prefix)-stats") {
            let stats = try store.stats()
            _ = try store.treeStats()
            return "\(stats.pageCount)"
        }
    }

    static func queryObjects(_ db: Database, _ prefix: String) {
        report("\(prefix)-query") {
            let all = try db.objects(DamageNote.self).fetch()
            let category = 2
            let inCategory = try db.objects(DamageNote.self).filter(#Predicate { $0.category == category }).fetchCount()
            let room = "room3"
            let since = Date(timeIntervalSinceReferenceDate: 200_000)
            let inRoom = try db.objects(DamageNote.self).filter(#Predicate { $0.room == room && $0.created > since })
                .sorted(by: SortDescriptor(\.created, order: .reverse)).fetch()
            let titled = try db.objects(DamageNote.self).sorted(by: SortDescriptor(\.title), collation: .caseInsensitive).prefix(50).fetch()
            let found = try db.objects(DamageNote.self).search(\.body, .allWords("alpha beta")).fetchCount()
            let ranked = try db.objects(DamageNote.self).search(\.body, .anyWord("lorem gamma"), ranked: true).prefix(10).fetch()
            let code = "c7"
            let byCode = try db.objects(DamageNote.self).filter(#Predicate { $0.code == code }).fetch()
            let one = try db.object(DamageNote.self, key: 5)
            // The non-throwing surface too: counts, iteration and subscripts report errors through `error`.
            let lazy = db.objects(DamageNote.self).filter(#Predicate { $0.category > 3 })
            var walked = 0
            for _ in lazy { walked += 1 }
            if lazy.count > 0 { _ = lazy[lazy.count - 1] }
            _ = lazy.error
            // Counted from the trees before evaluating, then indexed: every position below the
            // count must be readable (as a placeholder, with `error` set, if its record is not).
            for fresh in [
                db.objects(DamageNote.self), db.objects(DamageNote.self).filter(#Predicate { $0.category == category }),
                db.objects(DamageNote.self).filter(#Predicate { $0.room == room }).sorted(by: SortDescriptor(\.created)),
                db.objects(DamageNote.self).offset(3).prefix(40),
            ] {
                let n = fresh.count
                if n > 0 {
                    _ = fresh[n - 1]
                    _ = fresh[n / 2]
                    _ = fresh.objects(in: 0..<n)
                }
                _ = fresh.keys
                _ = fresh.error
            }
            return "\(all.count) \(inCategory) \(inRoom.count) \(titled.count) \(found) \(ranked.count) \(byCode.count) \(one != nil) \(walked)"
        }
    }

    static func writeKV(_ store: Store) throws -> String {
        try store.write { txn in
            let names = try txn.treeNames()
            for name in names.prefix(4) {
                guard let tree = try txn.tree(name) else { continue }
                for i in 0..<5 { try tree.put(Array("probe\(i)".utf8), [UInt8](repeating: UInt8(i), count: 30 + i * 600)) }
                let cursor = try tree.cursor()
                var doomed: [[UInt8]] = []
                var more = try cursor.seek(toPosition: tree.count / 3)
                while more && doomed.count < 3 {
                    doomed.append(Array(cursor.key))
                    more = try cursor.next()
                }
                for key in doomed { _ = try tree.delete(key) }
            }
            let fresh = try txn.createTree("probe-new")
            try fresh.put([1, 2, 3], [UInt8](repeating: 7, count: 9_000))
            if names.contains("gamma") { _ = try txn.dropTree("gamma") }
        }
        return try store.read { "\($0.txnid)" }
    }

    /// Runs every step on the file at `path` and prints one line per step.
    public static func probe(path: String, objects: Bool) {
        // Read-only first: nothing changes on disk.
        var readOnly = StoreOptions(readOnly: true)
        readOnly.compaction.idleDelay = nil
        report("ro-open") {
            let store = try Store(path: path, options: readOnly)
            defer { store.close() }
            readStore(store, "ro")
            report("ro-describe") {
                _ = try store.metaPages()
                _ = try store.metaNotes()
                for n: UInt64 in [0, 1, 2, 3, 5] { _ = try? store.describePage(n) }
                return ""
            }
            return ""
        }
        if objects {
            report("ro-db-open") {
                let db = try Database(path: path, models: [DamageNote.self], options: readOnly)
                defer { db.close() }
                queryObjects(db, "ro-db")
                report("ro-db-check") {
                    let report = try StoredObjects.check(in: db.store)
                    return "\(report.problems.count)"
                }
                return ""
            }
        }
        // Read-write: recovery, reads, a write, a compaction, reads again.
        var readWrite = StoreOptions(durability: .noSync)
        readWrite.compaction.idleDelay = nil
        if objects {
            report("rw-db-open") {
                let db = try Database(path: path, models: [DamageNote.self], options: readWrite)
                defer { db.close() }
                readStore(db.store, "rw")
                queryObjects(db, "rw-db")
                report("rw-db-write") {
                    var rng = DamageRandom(seed: 99)
                    try db.write { tx in
                        for i in 0..<6 { try tx.upsert(note(50_000 + i, &rng)) }
                        _ = try tx.delete(DamageNote.self, key: 3)
                        _ = try tx.delete(DamageNote.self, key: 50_001)
                        _ = try tx.update(DamageNote.self, key: 10) { $0.body = "rewritten alpha" }
                    }
                    return ""
                }
                report("rw-compact") { "\(try db.store.compact().commits)" }
                readStore(db.store, "rw-after")
                queryObjects(db, "rw-db-after")
                return ""
            }
        } else {
            report("rw-open") {
                let store = try Store(path: path, options: readWrite)
                defer { store.close() }
                readStore(store, "rw")
                report("rw-write") { try writeKV(store) }
                report("rw-compact") { "\(try store.compact().commits)" }
                readStore(store, "rw-after")
                report("rw-write2") { try writeKV(store) }
                return ""
            }
        }
        emit("done")
    }
}

/// SplitMix64, for the builder's choices.
struct DamageRandom {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(max(1, bound))) }
}
