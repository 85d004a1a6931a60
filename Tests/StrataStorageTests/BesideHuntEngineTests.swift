import Testing
@testable import StrataStorage
import Foundation

/// Hunting `putBesideDeferred` kept back per tree (9e19659): whatever it stored must be what every
/// read path sees, what a savepoint rollback undoes, what a drop discards and what a commit keeps.
@Suite struct BesideHuntEngineTests {
    static let beside: [UInt8] = [0xFE, 1]

    func putBeside(_ tree: WriteTree, _ key: [UInt8], _ value: [UInt8]) throws {
        try key.withUnsafeBytes { k in try value.withUnsafeBytes { try tree.putBesideDeferred(k, $0) } }
    }

    func getBeside(_ tree: WriteTree, _ key: [UInt8]) throws -> [UInt8]? {
        try key.withUnsafeBytes { try tree.getBesideDeferred($0) }
    }

    func putLater(_ tree: WriteTree, _ key: [UInt8], _ value: [UInt8]) throws {
        try key.withUnsafeBytes { k in try value.withUnsafeBytes { try tree.putLater(k, $0) } }
    }

    func keys(_ tree: WriteTree) throws -> [[UInt8]] {
        var out: [[UInt8]] = []
        try tree.forEach { k, _ in
            out.append(Array(k))
            return true
        }
        return out
    }

    /// A beside value (alone, or with deferred writes) is seen by each read path.
    @Test(arguments: 0..<8)
    func everyReadPathSeesABesideValue(path: Int) throws {
        let store = try Store.inMemory(options: StoreOptions(pageSize: 4096, durability: .noSync))
        try store.write { txn in
            let tree = try txn.createTree("t")
            for i in 0..<50 { try tree.put([0x10, UInt8(i)], [UInt8(i)]) }
        }
        try store.write { txn in
            let tree = try #require(try txn.tree("t"))
            if path % 2 == 1 { try putLater(tree, [0x20], [1]) }
            try putBeside(tree, Self.beside, [9, 9])
            let cursor = try tree.cursor()
            switch path / 2 {
            case 0:
                #expect(try tree.get(Self.beside) == [9, 9])
            case 1:
                #expect(try cursor.last())
                #expect(Array(cursor.key) == Self.beside && Array(cursor.value) == [9, 9])
            case 2:
                #expect(try cursor.seek(Self.beside))
                #expect(Array(cursor.key) == Self.beside)
                #expect(try tree.count(from: [0xFE], to: nil) == 1)
            default:
                #expect(try keys(tree).last == Self.beside)
                #expect(tree.count == 50 + (path % 2) + 1)
            }
        }
        let value = try store.read { txn in try txn.tree("t")?.get(Self.beside) }
        #expect(value == [9, 9])
        #expect(try store.read { txn in try txn.tree("t")?.count } == 50 + (path % 2) + 1)
    }

    /// A cursor positioned before a beside write is invalidated by it, like any write.
    @Test func aBesideWriteInvalidatesCursors() throws {
        let store = try Store.inMemory(options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let tree = try txn.createTree("t")
            try tree.put([1], [1])
            try tree.put([2], [2])
            let cursor = try tree.cursor()
            #expect(try cursor.first())
            try putBeside(tree, [3], [3])
            #expect(throws: StorageError.self) { try cursor.next() }
            #expect(try cursor.first())
            var seen: [[UInt8]] = []
            repeat { seen.append(Array(cursor.key)) } while try cursor.next()
            #expect(seen == [[1], [2], [3]])
        }
    }

    /// Savepoints around beside writes: a rollback restores the value from before the savepoint
    /// (written before it, or never), a release keeps the one from inside.
    @Test func savepointsAroundBesideWrites() throws {
        let store = try Store.inMemory(options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let tree = try txn.createTree("t")
            try putBeside(tree, Self.beside, [1])
            _ = try? txn.savepoint {
                try putBeside(tree, Self.beside, [2])
                #expect(try getBeside(tree, Self.beside) == [2])
                try putLater(tree, [5], [5])
                throw CancellationError()
            }
            #expect(try getBeside(tree, Self.beside) == [1])
            #expect(try tree.get([5]) == nil)
            try txn.savepoint {
                try putBeside(tree, Self.beside, [3])
                _ = try? txn.savepoint {
                    try putBeside(tree, Self.beside, [4])
                    throw CancellationError()
                }
                #expect(try getBeside(tree, Self.beside) == [3])
            }
            #expect(try getBeside(tree, Self.beside) == [3])
            try putBeside(tree, [0xFE, 2], [7])
            _ = try? txn.savepoint {
                #expect(try getBeside(tree, [0xFE, 2]) == [7])
                _ = try tree.delete([0xFE, 2])
                #expect(try getBeside(tree, [0xFE, 2]) == nil)
                throw CancellationError()
            }
            #expect(try getBeside(tree, [0xFE, 2]) == [7])
            #expect(try tree.get([0xFE, 2]) == [7])
        }
        let entries = try store.read { txn in try txn.tree("t").map(allEntries) ?? [] }
        #expect(entries.map(\.0) == [Self.beside, [0xFE, 2]])
        #expect(entries.map(\.1) == [[3], [7]])
    }

    /// Dropping a tree discards its beside values; one made again starts empty; an abort keeps
    /// nothing.
    @Test func dropRecreateAndAbort() throws {
        let store = try Store.inMemory(options: StoreOptions(durability: .noSync))
        try store.write { txn in
            let tree = try txn.createTree("t")
            try putBeside(tree, Self.beside, [1])
            #expect(try txn.dropTree("t"))
            let again = try txn.createTree("t")
            #expect(try getBeside(again, Self.beside) == nil)
            #expect(try again.get(Self.beside) == nil)
            try putBeside(again, [0xFE, 3], [3])
        }
        #expect(try store.read { txn in try txn.tree("t").map(allEntries) ?? [] }.map(\.0) == [[0xFE, 3]])
        try store.write { txn in
            let tree = try #require(try txn.tree("t"))
            try putBeside(tree, Self.beside, [1])
            txn.abort()
        }
        #expect(try store.read { txn in try txn.tree("t").map(allEntries) ?? [] }.map(\.0) == [[0xFE, 3]])
        // Dropped inside a savepoint that rolls back: the value from before it is back.
        try store.write { txn in
            let tree = try #require(try txn.tree("t"))
            try putBeside(tree, [0xFE, 3], [4])
            _ = try? txn.savepoint {
                #expect(try txn.dropTree("t"))
                throw CancellationError()
            }
            let again = try #require(try txn.tree("t"))
            #expect(try getBeside(again, [0xFE, 3]) == [4])
        }
        #expect(try store.read { txn in try txn.tree("t")?.get([0xFE, 3]) } == [4])
    }

    /// Many beside keys, past the 8 MiB deferred-memory limit, with a reopen: all kept, the
    /// latest value of each, and the file checks.
    @Test func pastTheDeferredMemoryLimit() throws {
        let path = temporaryPath("besidehunt-limit")
        defer { removeStoreFiles(path) }
        var options = StoreOptions(pageSize: 4096, durability: .noSync)
        options.transactionMemory = 1 << 20
        var model: [[UInt8]: [UInt8]] = [:]
        do {
            let store = try Store(path: path, options: options)
            var rng = SplitMix(seed: 5)
            try store.write { txn in
                let tree = try txn.createTree("t")
                for i in 0..<3000 {
                    let key = [0xFE] + bigEndianKey(UInt64(i % 2800))
                    let value = rng.byteArray(i % 10 == 0 ? 5000 : 3500)
                    try putBeside(tree, key, value)
                    model[key] = value
                    if i % 7 == 0 {
                        let k = [0x01] + bigEndianKey(UInt64(i))
                        try putLater(tree, k, [1])
                        model[k] = [1]
                    }
                    if i % 500 == 0 { #expect(try getBeside(tree, key) == value) }
                }
            }
            #expect(try store.check().isOK)
        }
        let store = try Store(path: path, options: options)
        let entries = try store.read { txn in try txn.tree("t").map(allEntries) ?? [] }
        #expect(entries.map(\.0) == model.keys.sorted(by: keyLess))
        #expect(entries.allSatisfy { model[$0.0] == $0.1 })
        #expect(try store.check().isOK)
    }
}

extension BesideHuntEngineTests {
    /// Past the 8 MiB limit inside a savepoint (the writes are applied there, nothing spills),
    /// then a rollback: the tree and the beside value are as they were before the savepoint;
    /// the same with a release keeps everything.
    @Test(arguments: [false, true])
    func theMemoryLimitInsideASavepoint(rollBack: Bool) throws {
        var options = StoreOptions(pageSize: 4096, durability: .noSync)
        options.transactionMemory = 1 << 20
        let store = try Store.inMemory(options: options)
        var model: [[UInt8]: [UInt8]] = [:]
        var rng = SplitMix(seed: 21)
        try store.write { txn in
            let tree = try txn.createTree("t")
            for i in 0..<200 {
                let key = [0x01] + bigEndianKey(UInt64(i * 3))
                let value = rng.byteArray(30)
                try putLater(tree, key, value)
                model[key] = value
            }
            try putBeside(tree, Self.beside, [1])
            model[Self.beside] = [1]
            var inner = model
            do {
                try txn.savepoint {
                    for i in 0..<2600 {
                        let key = [0x01] + bigEndianKey(UInt64(i))
                        let value = rng.byteArray(i % 50 == 0 ? 6000 : 3500)
                        try putLater(tree, key, value)
                        inner[key] = value
                        if i % 400 == 0 {
                            try putBeside(tree, Self.beside, [UInt8(i / 400 + 2)])
                            inner[Self.beside] = [UInt8(i / 400 + 2)]
                        }
                    }
                    if rollBack { throw CancellationError() }
                }
                model = inner
            } catch is CancellationError {}
            #expect(try getBeside(tree, Self.beside) == model[Self.beside])
            var seen: [[UInt8]: [UInt8]] = [:]
            try tree.forEach { k, v in
                seen[Array(k)] = Array(v)
                return true
            }
            #expect(seen.count == model.count)
            #expect(seen == model)
            #expect(tree.count == model.count)
        }
        let entries = try store.read { txn in try txn.tree("t").map(allEntries) ?? [] }
        #expect(entries.map(\.0) == model.keys.sorted(by: keyLess))
        #expect(try store.check().isOK)
    }
}
