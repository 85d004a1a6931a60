// The object-layer SIGKILL torture (`StrataTestHelper objects-torture`, ObjectKillTests.swift): a
// writer process commits seeded transactions of `KillItem`s through `Database` (inserts, updates
// of indexed and full-text fields, upserts, deletes, `delete(where:)`, unique-index clashes,
// savepoints, nested writes and compositions that roll back, big transactions that spill) and is
// killed at random moments; the test replays the same transactions on a plain dictionary and
// checks the reopened file against it, index by index. Transaction n of writer w is a function of
// the seed, w, n and the writer's objects after n - 1, so any acknowledged state can be recomputed.

import Strata

/// The model of the torture: a primary key, a secondary index (`tag`), a unique index (`code`), a
/// compound index (`group`, `rank`) and a full-text index (`text`). `owner` is the writer process.
public struct KillItem: Model, Equatable {
    public static let indexes: [PartialKeyPath<KillItem> & Sendable] = [\.tag]
    public static let uniqueIndexes: [PartialKeyPath<KillItem> & Sendable] = [\.code]
    public static let indexDescriptors: [IndexDescriptor<KillItem>] = [.on(\.group, \.rank), .fullText(\.text)]
    public var id: Int
    public var owner: Int
    public var tag: String
    public var code: String
    public var group: Int
    public var rank: Int
    public var text: String
    /// Unindexed; now and then long enough for an overflow run.
    public var note: String

    public init(id: Int, owner: Int, tag: String, code: String, group: Int, rank: Int, text: String, note: String) {
        self.id = id
        self.owner = owner
        self.tag = tag
        self.code = code
        self.group = group
        self.rank = rank
        self.text = text
        self.note = note
    }
}

/// One per writer (`id` is the writer): the last transaction it committed, and the digest and
/// count of its objects after it.
public struct KillMeta: Model, Equatable {
    public var id: Int
    public var seq: Int
    public var digest: UInt64
    public var count: Int

    public init(id: Int, seq: Int, digest: UInt64, count: Int) {
        self.id = id
        self.seq = seq
        self.digest = digest
        self.count = count
    }
}

/// What a transaction found that the workload says cannot be.
public struct KillViolation: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Thrown on purpose to roll something back.
public struct KillAbort: Error {
    public init() {}
}

/// How a part that rolls back is run.
public enum KillRollback: Sendable, Equatable {
    /// `tx.savepoint { …; throw }`.
    case savepoint
    /// `db.write { …; throw }` inside the open write: joins it as a savepoint.
    case nestedWrite
    /// `tx.run(DBWrite { … }.then(DBWrite.insert(clash)))`: the clash undoes all of it.
    case failingComposition
}

/// One write of a transaction.
public indirect enum KillOp: Sendable, Equatable {
    case insert(KillItem)
    case upsert(KillItem)
    /// `tx.update` of an existing object to these values.
    case update(KillItem)
    /// `tx.delete(key:)`; `existed` is what it must return.
    case delete(Int, existed: Bool)
    /// `tx.delete(where: owner == w && group == g && rank < r)`, which must delete `expected`.
    case deleteWhere(group: Int, rankBelow: Int, expected: Int)
    /// An insert whose code another object has: must throw `uniqueViolation`, changing nothing.
    case clashInsert(KillItem)
    /// An update to a code another object has: must throw `uniqueViolation`, changing nothing.
    case clashUpdate(id: Int, code: String)
    /// An insert of a key that exists: must throw `duplicateKey`, changing nothing.
    case duplicateInsert(KillItem)
    /// Writes that are made and then rolled back; `clash` is the insert that fails a
    /// `.failingComposition` (a taken code after `ops`).
    case rollback([KillOp], KillRollback, clash: KillItem?)
    /// Writes run as one `DBWrite` composition through `tx.run`; they stay.
    case composed([KillOp])
}

/// Transaction `seq` of a writer: its writes, and the writer's digest and count after it.
public struct KillTxn: Sendable {
    public var writer: Int
    public var seq: Int
    public var ops: [KillOp]
    public var big: Bool
    public var digestAfter: UInt64
    public var countAfter: Int
}

/// A writer's objects, as the workload expects them.
public struct KillState: Sendable {
    public let writer: Int
    public private(set) var seq = 0
    public private(set) var objects: [Int: KillItem] = [:]
    public private(set) var codes: [String: Int] = [:]
    /// Wrapping sum of `KillWorkload.hash` of every object: updated per write.
    public private(set) var digest: UInt64 = 0

    public init(writer: Int) { self.writer = writer }

    /// The state stored in a file (for a writer resuming): its objects and its meta.
    public init(writer: Int, objects: [KillItem], seq: Int) {
        self.writer = writer
        self.seq = seq
        for object in objects { put(object) }
    }

    mutating func put(_ object: KillItem) {
        if let old = objects[object.id] { remove(old) }
        objects[object.id] = object
        codes[object.code] = object.id
        digest &+= KillWorkload.hash(object)
    }

    mutating func remove(_ object: KillItem) {
        objects[object.id] = nil
        codes[object.code] = nil
        digest &-= KillWorkload.hash(object)
    }

    mutating func apply(_ op: KillOp) {
        switch op {
        case .insert(let item), .upsert(let item), .update(let item): put(item)
        case .delete(let id, _): if let old = objects[id] { remove(old) }
        case .deleteWhere(let group, let rankBelow, _):
            for object in objects.values where object.group == group && object.rank < rankBelow { remove(object) }
        case .clashInsert, .clashUpdate, .duplicateInsert, .rollback: break
        case .composed(let ops): for op in ops { apply(op) }
        }
    }

    /// Applies a transaction made for this state.
    public mutating func apply(_ txn: KillTxn) {
        precondition(txn.seq == seq + 1 && txn.writer == writer)
        for op in txn.ops { apply(op) }
        seq = txn.seq
    }
}

public enum KillWorkload {
    public static let tags = ["red", "green", "blue", "amber", "violet", "grey"]
    public static let groups = 12
    public static let ranks = 1_000
    /// Words of the texts: ASCII letters only, so a plain split finds what the index does.
    public static let vocabulary = [
        "apple", "apricot", "banana", "berry", "cherry", "date", "elder", "fig", "grape", "guava", "kiwi", "lemon",
        "lime", "mango", "melon", "nut", "olive", "orange", "papaya", "peach", "pear", "plum", "quince", "raisin",
        "salt", "sugar", "tea", "thyme", "vanilla", "walnut", "yam", "zest", "x", "bread", "butter", "cream",
    ]
    /// Codes are drawn from this many per writer (so deleted objects' codes come back), or fresh.
    static let codePool = 6_000

    /// The objects' first key for writer `w`: writers' keys never meet.
    public static func idBase(writer: Int) -> Int { writer << 40 }

    /// FNV-1a of every field, with lengths.
    public static func hash(_ item: KillItem) -> UInt64 {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        func add(_ value: UInt64) {
            var v = value
            for _ in 0..<8 {
                h = (h ^ (v & 0xFF)) &* 0x100_0000_01B3
                v >>= 8
            }
        }
        func add(_ text: String) {
            add(UInt64(text.utf8.count))
            for b in text.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
        }
        add(UInt64(bitPattern: Int64(item.id)))
        add(UInt64(item.owner))
        add(item.tag)
        add(item.code)
        add(UInt64(item.group))
        add(UInt64(item.rank))
        add(item.text)
        add(item.note)
        return h
    }

    /// The words of a text as the full-text index folds them, for ASCII text: lowercased runs of
    /// letters.
    public static func words(_ text: String) -> [String] {
        text.lowercased().split(whereSeparator: { !$0.isLetter }).map(String.init)
    }

    static func mix(_ x: UInt64) -> UInt64 {
        var z = x &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A random stream for transaction `seq` of `writer`, purpose `salt`.
    public static func random(seed: UInt64, writer: Int, seq: Int, salt: UInt64) -> KillRandom {
        KillRandom(seed: mix(seed ^ mix(UInt64(writer) << 48 ^ UInt64(seq)) ^ mix(salt)))
    }

    // MARK: Generation

    /// Transaction `seq` (= state.seq + 1) of the state's writer. `bigSize` is the number of
    /// objects a big transaction writes (well beyond a 64-page transaction memory).
    public static func transaction(seed: UInt64, state: KillState, bigSize: Int) -> KillTxn {
        let seq = state.seq + 1
        var rng = random(seed: seed, writer: state.writer, seq: seq, salt: 1)
        var gen = Generator(writer: state.writer, seq: seq, state: state, rng: rng)
        let big = seq > 1 && rng.percent(7)
        var ops: [KillOp]
        if seq == 1 {
            ops = (0..<max(20, bigSize / 4)).map { _ in gen.insertNew() }
        } else if big {
            ops = gen.bigOps(bigSize)
        } else {
            ops = []
            for _ in 0..<(1 + gen.rng.below(7)) { ops.append(gen.smallOp(depth: 0)) }
        }
        rng = gen.rng
        var after = state
        for op in ops { after.apply(op) }
        return KillTxn(
            writer: state.writer, seq: seq, ops: ops, big: big, digestAfter: after.digest, countAfter: after.objects.count)
    }

    /// Writes made by a transaction that throws at its end (never committed), for the state.
    public static func abortedOps(seed: UInt64, state: KillState) -> [KillOp] {
        var gen = Generator(
            writer: state.writer, seq: state.seq + 1, state: state, rng: random(seed: seed, writer: state.writer, seq: state.seq + 1, salt: 2))
        gen.fresh = 900  // keys and codes of its own
        return (0..<(1 + gen.rng.below(6))).map { _ in gen.smallOp(depth: 0) }
    }

    struct Generator {
        let writer: Int
        let seq: Int
        var state: KillState
        var rng: KillRandom
        /// Fresh keys and codes made so far in this transaction.
        var fresh = 0

        var ids: [Int] { state.objects.keys.sorted() }

        mutating func text() -> String {
            let count = rng.percent(3) ? 150 + rng.below(400) : 1 + rng.below(12)
            var words: [String] = []
            for _ in 0..<count {
                var word = KillWorkload.vocabulary[rng.below(KillWorkload.vocabulary.count)]
                if rng.percent(10) { word = word.prefix(1).uppercased() + word.dropFirst() }
                if rng.percent(5) { word = word.uppercased() }
                if rng.percent(8) { word += [",", ".", ";", "!"][rng.below(4)] }
                words.append(word)
            }
            return words.joined(separator: rng.percent(10) ? "  " : " ")
        }

        mutating func note(big: Bool = false) -> String {
            if big { return String(repeating: "n", count: 150 + rng.below(250)) }
            if rng.percent(5) { return String(repeating: "m\(rng.below(10))", count: 700 + rng.below(2_500)) }
            return "note \(rng.below(1_000))"
        }

        /// A code no object has now.
        mutating func freeCode() -> String {
            for _ in 0..<8 {
                let code = "w\(writer)-c\(rng.below(KillWorkload.codePool))"
                if state.codes[code] == nil { return code }
            }
            fresh += 1
            return "w\(writer)-f\(seq)-\(fresh)"
        }

        mutating func newId() -> Int {
            fresh += 1
            return KillWorkload.idBase(writer: writer) + seq * 10_000 + fresh
        }

        mutating func newItem(big: Bool = false) -> KillItem {
            KillItem(
                id: newId(), owner: writer, tag: KillWorkload.tags[rng.below(KillWorkload.tags.count)], code: freeCode(),
                group: rng.below(KillWorkload.groups), rank: rng.below(KillWorkload.ranks), text: text(), note: note(big: big))
        }

        mutating func record(_ op: KillOp) -> KillOp {
            state.apply(op)
            return op
        }

        mutating func insertNew(big: Bool = false) -> KillOp { record(.insert(newItem(big: big))) }

        /// An existing object changed in one or more fields (indexed, full-text or not).
        mutating func changed(_ old: KillItem) -> KillItem {
            var new = old
            repeat {
                switch rng.below(6) {
                case 0: new.tag = KillWorkload.tags[rng.below(KillWorkload.tags.count)]
                case 1: new.code = freeCode()
                case 2: new.group = rng.below(KillWorkload.groups)
                case 3: new.rank = rng.below(KillWorkload.ranks)
                case 4: new.text = text()
                default: new.note = note()
                }
            } while rng.percent(40)
            return new
        }

        mutating func randomExisting() -> KillItem? {
            let ids = self.ids
            return ids.isEmpty ? nil : state.objects[ids[rng.below(ids.count)]]
        }

        mutating func smallOp(depth: Int) -> KillOp {
            let roll = rng.below(100)
            let existing = state.objects.isEmpty ? nil : randomExisting()
            guard let existing, state.objects.count > 30 || roll < 25 else { return insertNew() }
            switch roll {
            case 0..<25: return insertNew()
            case 25..<50: return record(.update(changed(existing)))
            case 50..<55: return record(.upsert(changed(existing)))
            case 55..<58: return record(.upsert(newItem()))
            case 58..<70: return record(.delete(existing.id, existed: true))
            case 70..<72: return record(.delete(KillWorkload.idBase(writer: writer) + 1 + rng.below(5_000), existed: false))
            case 72..<76:
                let group = rng.below(KillWorkload.groups)
                let below = rng.below(60)
                let expected = state.objects.values.filter { $0.group == group && $0.rank < below }.count
                return record(.deleteWhere(group: group, rankBelow: below, expected: expected))
            case 76..<80:
                var clash = newItem()
                clash.code = existing.code
                return .clashInsert(clash)
            case 80..<83:
                guard let other = randomExisting(), other.id != existing.id else { return insertNew() }
                return .clashUpdate(id: existing.id, code: other.code)
            case 83..<85:
                var dup = newItem()
                dup.id = existing.id
                return .duplicateInsert(dup)
            case 85..<94 where depth < 2:
                let style: KillRollback = [.savepoint, .nestedWrite, .failingComposition][rng.below(3)]
                var inner = self
                let ops = (0..<(1 + rng.below(4))).map { _ in inner.smallOp(depth: depth + 1) }
                var clash: KillItem?
                if style == .failingComposition, let taken = inner.randomExisting() {
                    clash = inner.newItem()
                    clash?.code = taken.code
                }
                // The rolled-back writes keep their fresh keys and random draws; the state does not.
                rng = inner.rng
                fresh = inner.fresh
                return .rollback(ops, clash == nil && style == .failingComposition ? .savepoint : style, clash: clash)
            case 94..<100 where depth < 2:
                var ops: [KillOp] = []
                for _ in 0..<(1 + rng.below(4)) {
                    if state.objects.isEmpty || rng.percent(40) {
                        ops.append(insertNew())
                    } else if let old = randomExisting() {
                        ops.append(rng.percent(70) ? record(.update(changed(old))) : record(.delete(old.id, existed: true)))
                    }
                }
                return .composed(ops)
            default: return insertNew()
            }
        }

        /// Many writes: a bulk insert, a rewrite of many objects in key-random order, or a mass
        /// delete; then now and then a rollback and a clash.
        mutating func bigOps(_ size: Int) -> [KillOp] {
            var ops: [KillOp] = []
            let count = state.objects.count
            let kind = count > 3 * size ? 2 : count < size ? 0 : rng.below(3)
            switch kind {
            case 0:
                for _ in 0..<(size / 2 + rng.below(size / 2 + 1)) { ops.append(insertNew(big: true)) }
            case 1:
                var ids = self.ids
                for i in stride(from: ids.count - 1, to: 0, by: -1) { ids.swapAt(i, rng.below(i + 1)) }
                for id in ids.prefix(size) {
                    guard let old = state.objects[id] else { continue }
                    var new = changed(old)
                    new.note = note(big: true)
                    ops.append(record(rng.percent(80) ? .update(new) : .upsert(new)))
                }
            default:
                for _ in 0..<(2 + rng.below(4)) {
                    let group = rng.below(KillWorkload.groups)
                    let below = 300 + rng.below(700)
                    let expected = state.objects.values.filter { $0.group == group && $0.rank < below }.count
                    ops.append(record(.deleteWhere(group: group, rankBelow: below, expected: expected)))
                }
                for _ in 0..<(size / 8) { ops.append(insertNew(big: true)) }
            }
            for _ in 0..<(1 + rng.below(3)) { ops.append(smallOp(depth: 0)) }
            return ops
        }
    }

    // MARK: Execution

    /// Runs a transaction's writes in `tx` and records the writer's meta; checks first that the
    /// file holds the transaction before it.
    public static func perform(_ txn: KillTxn, in tx: Transaction, db: Database) throws {
        let meta = try tx.object(KillMeta.self, key: txn.writer)
        if (meta?.seq ?? 0) != txn.seq - 1 {
            throw KillViolation("transaction \(txn.seq) of writer \(txn.writer) found the writer at \(meta?.seq ?? 0)")
        }
        try execute(txn.ops, writer: txn.writer, in: tx, db: db)
        try tx.upsert(KillMeta(id: txn.writer, seq: txn.seq, digest: txn.digestAfter, count: txn.countAfter))
    }

    /// Runs writes in `tx`, checking what each must return or throw.
    public static func execute(_ ops: [KillOp], writer: Int, in tx: Transaction, db: Database) throws {
        for op in ops { try execute(op, writer: writer, in: tx, db: db) }
    }

    static func expectError(_ what: String, _ matches: (StrataError) -> Bool, _ body: () throws -> Void) throws {
        do {
            try body()
        } catch let error as StrataError where matches(error) {
            return
        }
        throw KillViolation("\(what) did not throw")
    }

    static func execute(_ op: KillOp, writer: Int, in tx: Transaction, db: Database) throws {
        switch op {
        case .insert(let item): _ = try tx.insert(item)
        case .upsert(let item): _ = try tx.upsert(item)
        case .update(let item):
            _ = try tx.update(KillItem.self, key: item.id) { object in
                object.tag = item.tag
                object.code = item.code
                object.group = item.group
                object.rank = item.rank
                object.text = item.text
                object.note = item.note
            }
        case .delete(let id, let existed):
            let deleted = try tx.delete(KillItem.self, key: id)
            if deleted != existed { throw KillViolation("delete of \(id) returned \(deleted), expected \(existed)") }
        case .deleteWhere(let group, let rankBelow, let expected):
            let deleted = try tx.delete(
                KillItem.self, where: #Predicate { $0.owner == writer && $0.group == group && $0.rank < rankBelow })
            if deleted != expected {
                throw KillViolation("delete(where: group \(group), rank < \(rankBelow)) deleted \(deleted), expected \(expected)")
            }
        case .clashInsert(let item):
            try expectError("insert of taken code \(item.code)", isUniqueViolation) { _ = try tx.insert(item) }
        case .clashUpdate(let id, let code):
            try expectError("update of \(id) to taken code \(code)", isUniqueViolation) {
                _ = try tx.update(KillItem.self, key: id) { $0.code = code }
            }
        case .duplicateInsert(let item):
            try expectError("insert of existing key \(item.id)", isDuplicateKey) { _ = try tx.insert(item) }
        case .rollback(let ops, let style, let clash):
            switch style {
            case .savepoint:
                do {
                    try tx.savepoint {
                        try execute(ops, writer: writer, in: tx, db: db)
                        throw KillAbort()
                    }
                } catch is KillAbort {}
            case .nestedWrite:
                do {
                    try db.write { inner in
                        try execute(ops, writer: writer, in: inner, db: db)
                        throw KillAbort()
                    }
                } catch is KillAbort {}
            case .failingComposition:
                guard let clash else { throw KillViolation("a failing composition without its clash") }
                let io = DBWrite<Void> { inner in try execute(ops, writer: writer, in: inner, db: db) }.then(DBWrite.insert(clash))
                try expectError("composition ending in insert of taken code \(clash.code)", isUniqueViolation) { _ = try tx.run(io) }
            }
        case .composed(let ops):
            var io = DBWrite<Void>.just(())
            for op in ops {
                switch op {
                case .insert(let item): io = io.then(DBWrite.insert(item).discardingResult())
                case .update(let item):
                    io = io.then(
                        DBWrite.update(KillItem.self, key: item.id) { object in
                            object.tag = item.tag
                            object.code = item.code
                            object.group = item.group
                            object.rank = item.rank
                            object.text = item.text
                            object.note = item.note
                        }.discardingResult())
                case .delete(let id, _): io = io.then(DBWrite.delete(KillItem.self, key: id).discardingResult())
                default: io = io.then(DBWrite { inner in try execute(op, writer: writer, in: inner, db: db) })
                }
            }
            try tx.run(io)
        }
    }

    static func isUniqueViolation(_ error: StrataError) -> Bool {
        if case .uniqueViolation = error { return true }
        return false
    }

    static func isDuplicateKey(_ error: StrataError) -> Bool {
        if case .duplicateKey = error { return true }
        return false
    }

    /// The state of `writer` a file holds: its meta and its objects. Throws `KillViolation` when
    /// the objects do not give the digest and count the meta recorded.
    public static func load(_ db: Database, writer: Int) throws -> KillState {
        try db.read { snapshot in
            let meta = try snapshot.object(KillMeta.self, key: writer)
            let objects = try snapshot.objects(KillItem.self).fetch().filter { $0.owner == writer }
            let state = KillState(writer: writer, objects: objects, seq: meta?.seq ?? 0)
            if state.digest != meta?.digest ?? 0 || state.objects.count != meta?.count ?? 0 {
                throw KillViolation(
                    "writer \(writer) at \(state.seq): \(state.objects.count) objects with digest \(state.digest), the meta says \(meta?.count ?? 0) with \(meta?.digest ?? 0)"
                )
            }
            return state
        }
    }

    // MARK: Checking

    /// Checks a snapshot against the objects expected (every writer's, by key): the objects
    /// themselves, then every index against them — the secondary index by each tag, the unique
    /// index by codes present and absent and as a whole range, the compound index by each group
    /// (sorted by rank, and a rank range), the full-text index by each word, word pairs, phrases
    /// and prefixes against a plain split of the texts — and that no two objects share a code.
    /// Returns what disagrees.
    public static func check(_ snapshot: Snapshot, expected: [Int: KillItem], rng: inout KillRandom) throws -> [String] {
        var problems: [String] = []
        func problem(_ text: String) { if problems.count < 20 { problems.append(text) } }
        let all = snapshot.objects(KillItem.self)
        let stored = try all.fetch()
        let want = expected.values.sorted { $0.id < $1.id }
        if stored != want {
            let got = Dictionary(stored.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
            let missing = want.filter { got[$0.id] == nil }.map(\.id)
            let extra = stored.filter { expected[$0.id] == nil }.map(\.id)
            let differ = stored.filter { expected[$0.id] != nil && expected[$0.id] != $0 }.map(\.id)
            problem(
                "objects: \(stored.count) stored, \(want.count) expected; missing \(missing.prefix(8)), extra \(extra.prefix(8)), different \(differ.prefix(8))\(stored.map(\.id) != stored.map(\.id).sorted() ? ", not in key order" : "")"
            )
        }
        if try all.fetchCount() != want.count { problem("count \(try all.fetchCount()), expected \(want.count)") }
        func compare(_ what: String, _ results: Results<KillItem>, _ wanted: [KillItem], ordered: Bool = false, index: String? = nil) throws {
            let got = try results.fetch()
            let same = ordered ? got == wanted : got.sorted { $0.id < $1.id } == wanted.sorted { $0.id < $1.id }
            if !same {
                let gotIds = Set(got.map(\.id))
                let wantIds = Set(wanted.map(\.id))
                problem(
                    "\(what): \(got.count) found, \(wanted.count) expected; missing \(wantIds.subtracting(gotIds).sorted().prefix(6)), extra \(gotIds.subtracting(wantIds).sorted().prefix(6))\(gotIds == wantIds ? " (values or order differ)" : "")"
                )
            }
            if let index, !results.explain().contains(index) { problem("\(what) does not use the index \(index): \(results.explain())") }
            if try results.fetchCount() != wanted.count { problem("\(what): count \(try results.fetchCount()), expected \(wanted.count)") }
        }
        // Secondary index.
        for tag in tags {
            try compare("tag == \(tag)", all.filter(#Predicate { $0.tag == tag }), want.filter { $0.tag == tag }, index: "i:KillItem:tag")
        }
        // Unique index: no two objects share a code, every code finds its object, free codes nothing.
        var byCode: [String: Int] = [:]
        for object in stored {
            if let other = byCode.updateValue(object.id, forKey: object.code) {
                problem("objects \(other) and \(object.id) share code \(object.code)")
            }
        }
        let codes = want.map(\.code)
        for _ in 0..<min(60, codes.count) {
            let code = codes[rng.below(codes.count)]
            try compare("code == \(code)", all.filter(#Predicate { $0.code == code }), want.filter { $0.code == code }, index: "i:KillItem:code")
        }
        for _ in 0..<10 {
            let code = "w\(rng.below(2))-c\(rng.below(codePool))"
            try compare("code == \(code)", all.filter(#Predicate { $0.code == code }), want.filter { $0.code == code }, index: "i:KillItem:code")
        }
        // Every code of the pools and every code present, in IN lists: the whole unique index
        // (strings ranges are not planned on an index).
        var candidates = Set(codes)
        for writer in 0..<2 { for k in 0..<codePool { candidates.insert("w\(writer)-c\(k)") } }
        let sortedCandidates = candidates.sorted()
        var covered = 0
        for start in stride(from: 0, to: sortedCandidates.count, by: 1_000) {
            let list = Array(sortedCandidates[start..<min(start + 1_000, sortedCandidates.count)])
            let wanted = Set(list)
            let inList = want.filter { wanted.contains($0.code) }
            covered += inList.count
            try compare("code in \(list.first!)...\(list.last!)", all.filter(#Predicate { list.contains($0.code) }), inList, index: "i:KillItem:code")
        }
        if covered != want.count { problem("the code lists cover \(covered) of \(want.count) objects") }
        // Compound index.
        for group in 0..<groups {
            let inGroup = want.filter { $0.group == group }.sorted { ($0.rank, $0.id) < ($1.rank, $1.id) }
            try compare(
                "group == \(group) by rank", all.filter(#Predicate { $0.group == group }).sorted(by: SortDescriptor(\KillItem.rank)), inGroup,
                ordered: true, index: "i:KillItem:group")
            let low = rng.below(ranks)
            let high = low + rng.below(300)
            try compare(
                "group == \(group), \(low) <= rank < \(high)", all.filter(#Predicate { $0.group == group && $0.rank >= low && $0.rank < high }),
                inGroup.filter { $0.rank >= low && $0.rank < high }, index: "i:KillItem:group")
        }
        // Full-text index.
        let wordsOf = Dictionary(uniqueKeysWithValues: want.map { ($0.id, words($0.text)) })
        func matching(_ test: ([String]) -> Bool) -> [KillItem] { want.filter { test(wordsOf[$0.id]!) } }
        let text = "i:KillItem:text"
        for word in vocabulary {
            try compare("search \(word)", all.search(\.text, TextSearch(word)), matching { $0.contains(word) }, index: text)
        }
        for _ in 0..<4 {
            let a = vocabulary[rng.below(vocabulary.count)]
            let b = vocabulary[rng.below(vocabulary.count)]
            try compare("search \(a) \(b)", all.search(\.text, .allWords("\(a) \(b)")), matching { $0.contains(a) && $0.contains(b) }, index: text)
            try compare("search any \(a) \(b)", all.search(\.text, .anyWord("\(a) \(b)")), matching { $0.contains(a) || $0.contains(b) })
            try compare(
                "phrase \(a) \(b)", all.search(\.text, .phrase("\(a) \(b)")),
                matching { words in words.indices.dropLast().contains { words[$0] == a && words[$0 + 1] == b } })
            let prefix = String(a.prefix(1 + rng.below(3)))
            try compare("search \(prefix)*", all.search(\.text, TextSearch(prefix + "*")), matching { $0.contains { $0.hasPrefix(prefix) } })
        }
        return problems
    }
}

/// SplitMix64.
public struct KillRandom: Sendable {
    var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    public mutating func below(_ n: Int) -> Int { Int(next() % UInt64(max(1, n))) }
    public mutating func percent(_ p: Int) -> Bool { below(100) < p }
}

/// `KillItem` stored under the same name with two more indexes (`owner, rank` and the words of
/// `note`): opening with one type after the other builds or drops them.
public struct KillItemMore: Model, Equatable {
    public static var modelName: String { "KillItem" }
    public static let indexes: [PartialKeyPath<KillItemMore> & Sendable] = [\.tag]
    public static let uniqueIndexes: [PartialKeyPath<KillItemMore> & Sendable] = [\.code]
    public static let indexDescriptors: [IndexDescriptor<KillItemMore>] = [
        .on(\.group, \.rank), .fullText(\.text), .on(\.owner, \.rank), .fullText(\.note),
    ]
    public var id: Int
    public var owner: Int
    public var tag: String
    public var code: String
    public var group: Int
    public var rank: Int
    public var text: String
    public var note: String

    public var plain: KillItem {
        KillItem(id: id, owner: owner, tag: tag, code: code, group: group, rank: rank, text: text, note: note)
    }
}

extension KillWorkload {
    /// What migration `version` (from `version - 1`) makes of an object: the rank moves up by one
    /// and the tag to the next, so every version's objects differ in two indexed fields.
    public static func migrated(_ item: KillItem, times: Int) -> KillItem {
        var item = item
        item.rank = (item.rank + times) % ranks
        item.tag = tags[((tags.firstIndex(of: item.tag) ?? 0) + times) % tags.count]
        return item
    }

    /// Opens `path` at schema `version` (≥ 1) with `KillItemMore` for odd versions and `KillItem`
    /// for even ones, migrating every object once (`migrated(_:times: 1)`) when the stored version
    /// is below.
    public static func openMigrating(path: String, version: Int, options: StoreOptions) throws -> Database {
        let model: any Model.Type = version % 2 == 1 ? KillItemMore.self : KillItem.self
        return try Database(path: path, models: [model], schemaVersion: version, options: options) { migration in
            try migration.enumerateObjects("KillItem") { old, new in
                guard let rank = old["rank"]?.intValue.map(Int.init), let tag = old["tag"]?.stringValue, let at = tags.firstIndex(of: tag) else {
                    throw KillViolation("object \(old.key) has no rank or tag")
                }
                new["rank"] = .int(Int64((rank + 1) % ranks))
                new["tag"] = .string(tags[(at + 1) % tags.count])
            }
        }
    }
}
