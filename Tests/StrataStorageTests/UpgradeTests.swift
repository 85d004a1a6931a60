import Testing
@testable import StrataStorage
import Foundation

// Format 2 → 3 (Upgrade.swift, FORMAT.md §9): a file written by the format-2 build (a fixture
// committed under Fixtures/, see its README) opens read-only as it is, with positions and range
// counts found by walking its uncounted branches; a read-write open rewrites every branch with
// counts in one durable commit, and a failed upgrade leaves the format-2 file as it was.

struct UpgradeTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures").path

    /// A copy of fixture `name` in a fresh directory.
    static func copy(_ name: String) throws -> (dir: String, path: String) {
        let dir = try temporaryDirectory()
        let path = dir + "/" + name
        try FileManager.default.copyItem(atPath: fixtures + "/" + name, toPath: path)
        return (dir, path)
    }

    static func key(_ n: Int) -> [UInt8] { Array(String(format: "key-%08d", n).utf8) }

    /// What the fixture generator wrote to v2-trees.strata.
    static func expectedTrees() -> [String: [([UInt8], [UInt8])]] {
        var many: [Int: [UInt8]] = [:]
        for i in 0..<20_000 where (i * 7 % 20_000) % 3 != 0 {
            many[i * 7 % 20_000] = [UInt8](repeating: UInt8(i % 251), count: 8 + i % 9)
        }
        return [
            "empty": [],
            "one": [(Array("k".utf8), Array("v".utf8))],
            "many": many.keys.sorted().map { (key($0), many[$0]!) },
            "overflow": (0..<5).map { ([UInt8($0 + 1)], [UInt8](repeating: UInt8($0), count: 5_000 + $0)) },
        ]
    }

    /// Every tree holds exactly what the generator wrote, and positions, ranks and range counts
    /// agree with it.
    static func expectContents(_ store: Store, formatVersion: Set<UInt32>) throws {
        let expected = expectedTrees()
        try store.read { txn in
            #expect(formatVersion.contains(txn.meta.formatVersion))
            #expect(try txn.treeNames().sorted() == expected.keys.sorted())
            for (name, entries) in expected {
                let tree = try #require(try txn.tree(name))
                #expect(tree.count == entries.count, "\(name)")
                var got: [([UInt8], [UInt8])] = []
                try tree.forEach { k, v in
                    got.append((Array(k), Array(v))); return true
                }
                #expect(got.count == entries.count && zip(got, entries).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }, "\(name) differs")
                let cursor = tree.cursor()
                for position in Set([0, 1, entries.count / 3, entries.count / 2, entries.count - 1, entries.count]) where position >= 0 {
                    let moved = try cursor.seek(toPosition: position)
                    if position < entries.count {
                        #expect(moved && Array(cursor.key) == entries[position].0, "\(name) position \(position)")
                        #expect(try cursor.position() == position, "\(name) position \(position)")
                    } else {
                        #expect(!moved, "\(name) position \(position) is past the end")
                    }
                }
            }
            let many = try #require(try txn.tree("many"))
            // Keys 3000..<9000 less the multiples of 3.
            #expect(try many.count(from: key(3_000), to: key(9_000)) == 4_000)
            #expect(try many.count(from: nil, to: key(3)) == 2)
            #expect(try many.count(from: key(19_999), to: nil) == 1)
            #expect(try many.count(from: key(9_000), to: key(3_000)) == 0)
        }
    }

    @Test func readOnlyOpenReadsFormat2AsItIs() throws {
        let (dir, path) = try Self.copy("v2-trees.strata")
        defer { removeDirectory(dir) }
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        do {
            let store = try Store(path: path, options: StoreOptions(readOnly: true))
            try Self.expectContents(store, formatVersion: [2])
            let report = try store.check()
            #expect(report.problems.isEmpty, "\(report.problems)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before, "a read-only open changed the file")
    }

    @Test func readWriteOpenUpgradesEveryBranch() throws {
        let (dir, path) = try Self.copy("v2-trees.strata")
        defer { removeDirectory(dir) }
        do {
            let store = try Store(path: path, options: StoreOptions(durability: .noSync))
            try Self.expectContents(store, formatVersion: [strataFormatVersion])
            // check() reports any uncounted branch in a format-3 file and any wrong count.
            let report = try store.check()
            #expect(report.problems.isEmpty, "\(report.problems)")
            #expect(try store.treeStats().contains { $0.name == "many" && $0.branchPages > 0 }, "the fixture has branches to upgrade")
        }
        // Reopened, it is format 3 without another upgrade, and ordinary writes keep counts exact.
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        try Self.expectContents(store, formatVersion: [strataFormatVersion])
        var model = Dictionary(uniqueKeysWithValues: Self.expectedTrees()["many"]!.map { ($0.0, $0.1) })
        var rng = SplitMix(seed: 0x0091_2AD3)
        for round in 0..<6 {
            try store.write { txn in
                let many = try #require(try txn.tree("many"))
                for _ in 0..<2_000 {
                    let k = Self.key(rng.below(24_000))
                    if rng.percent(round % 2 == 0 ? 70 : 20) {
                        let value = [UInt8](repeating: UInt8(rng.below(256)), count: rng.within(1...40))
                        try many.put(k, value)
                        model[k] = value
                    } else {
                        try many.delete(k)
                        model[k] = nil
                    }
                }
            }
            let sorted = model.keys.sorted { keyLess($0, $1) }
            try store.read { txn in
                let many = try #require(try txn.tree("many"))
                #expect(many.count == sorted.count, "seed 0x00912AD3 round \(round)")
                let cursor = many.cursor()
                for _ in 0..<50 {
                    let position = rng.below(sorted.count + 1)
                    let moved = try cursor.seek(toPosition: position)
                    #expect(
                        moved == (position < sorted.count) && (!moved || Array(cursor.key) == sorted[position]),
                        "seed 0x00912AD3 round \(round): seek(toPosition: \(position))")
                    let a = Self.key(rng.below(24_000)), b = Self.key(rng.below(24_000))
                    let expected = sorted.filter { !keyLess($0, a) && keyLess($0, b) }.count
                    #expect(try many.count(from: a, to: b) == expected, "seed 0x00912AD3 round \(round): count")
                }
            }
        }
        let report = try store.check()
        #expect(report.problems.isEmpty, "\(report.problems)")
    }

    /// Every write or sync of the upgrade can fail; each failure leaves the format-2 file readable
    /// as it was, and a later open upgrades it.
    @Test(arguments: ["write", "sync"])
    func failedUpgradeLeavesFormat2(_ failing: String) throws {
        var attempt = 1
        while true {
            let (dir, path) = try Self.copy("v2-trees.strata")
            defer { removeDirectory(dir) }
            var faulty: FaultyFile?
            let opened = Result {
                try Store(path: path, options: StoreOptions()) { io in
                    // The commit log beside the page file shares the page file's fault plan.
                    if io.path.hasSuffix("-log"), let faulty { return FaultyFile(io, sharing: faulty) }
                    let file = FaultyFile(io)
                    file.state.withLock { if failing == "write" { $0.failWrite = attempt } else { $0.failSync = attempt } }
                    faulty = file
                    return file
                }
            }
            if case .success = opened {
                // No fault was reached: every write and sync of the upgrade has been failed once.
                #expect(attempt > 1)
                break
            }
            #expect(faulty != nil)
            // A failed meta sync may still have written the upgraded meta page: the commit was not
            // acknowledged, but the file may hold it, complete. Either way nothing is lost.
            try Self.expectContents(
                try Store(path: path, options: StoreOptions(readOnly: true)), formatVersion: failing == "write" ? [2] : [2, strataFormatVersion])
            try Self.expectContents(try Store(path: path, options: StoreOptions(durability: .noSync)), formatVersion: [strataFormatVersion])
            attempt += 1
            if attempt > 64 { Issue.record("the upgrade makes more than 64 \(failing)s"); break }
        }
    }
}
