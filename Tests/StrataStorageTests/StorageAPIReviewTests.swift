import Foundation
import Testing

@testable import StrataStorage

// The storage API against the sorted-dictionary model and its own docs (a review, 2026-12-07).

struct StorageAPIReviewTests {
    /// Deleting the key a cursor shows tells listeners that key: the delete read it after a merge
    /// had rebuilt the leaf in place (listeners heard of the next key) or freed it.
    @Test func deletingTheCursorsKeyTellsListenersThatKey() throws {
        let store = try Store.inMemory(options: StoreOptions(pageSize: 4096, durability: .noSync))
        func k(_ i: Int) -> [UInt8] { [UInt8(i)] + [UInt8](repeating: 0, count: 199) }
        try store.write { txn in
            let t = try txn.createTree("t")
            for i in 0..<20 { try t.put(k(i), []) }
            for i in stride(from: 18, through: 6, by: -1) { try t.delete(k(i)) }
        }
        let events = Locked<[CommitEvent]>([])
        let token = store.addCommitListener { e in events.withLock { $0.append(e) } }
        defer { token.invalidate() }
        try store.write { txn in
            let t = try #require(try txn.tree("t"))
            #expect(try t.delete(k(5)))
            let c = try t.cursor()
            #expect(try c.seek(k(2)))
            #expect(try t.delete(c.key))
            // And the last key of a tree, through a view of its own page.
            let d = try t.cursor()
            #expect(try d.last())
            #expect(try t.delete(d.key))
        }
        #expect(events.withLock { $0.last?.changedKeys["t"] } == [k(5), k(2), k(19)])
        try store.read { txn in
            var keys: [[UInt8]] = []
            try #require(try txn.tree("t")).forEach { key, _ in
                keys.append(Array(key))
                return true
            }
            #expect(keys == [0, 1, 3, 4].map(k))
        }
    }

    /// Inserting under a key that is a view of a value of the same tree tells listeners that key:
    /// the insert's split rebuilt the page the view points into (listeners heard of another key).
    @Test func insertingUnderAValueViewTellsListenersThatKey() throws {
        let store = try Store.inMemory(options: StoreOptions(pageSize: 4096, durability: .noSync))
        _ = try store.write { try $0.createTree("t") }
        let events = Locked<[CommitEvent]>([])
        let token = store.addCommitListener { e in events.withLock { $0.append(e) } }
        defer { token.invalidate() }
        func k(_ i: Int) -> [UInt8] { [UInt8(i)] + [UInt8](repeating: 0, count: 199) }
        let target = [UInt8](repeating: 0xFF, count: 200)
        try store.write { txn in
            let t = try #require(try txn.tree("t"))
            try t.put([0x80], target)
            for i in 0..<18 { try t.put(k(i), []) }
            try [UInt8(0x80)].withUnsafeBytes { marker in
                let view = try #require(try t.get(marker))
                let inserted = try t.insert(view, UnsafeRawBufferPointer(start: nil, count: 0))
                #expect(inserted)
            }
        }
        let noted = events.withLock { $0.last?.changedKeys["t"] }
        #expect(noted?.contains(target) == true)
        let stored = try store.read { txn in try txn.tree("t")?.get(target) }
        #expect(stored == [])
    }

    /// A put or insert refused (an empty key, a value too large) changes nothing: no commit, no
    /// listener event ("throw before they change anything").
    @Test func aRefusedPutCommitsNothing() throws {
        let store = try Store.inMemory(options: StoreOptions(durability: .noSync))
        _ = try store.write { try $0.createTree("t").put([1], [1]) }
        let before = store.latestVersion
        let events = Locked<[CommitEvent]>([])
        let token = store.addCommitListener { e in events.withLock { $0.append(e) } }
        defer { token.invalidate() }
        try store.write { txn in
            let t = try #require(try txn.tree("t"))
            #expect(throws: StorageError.self) { try t.put([], [1]) }
            #expect(throws: StorageError.self) { _ = try t.insert([], [1]) }
            #expect(throws: StorageError.self) { _ = try t.insert([2], [UInt8](repeating: 0, count: Limits.maxValueSize + 1)) }
        }
        #expect(store.latestVersion == before)
        #expect(events.withLock { $0.isEmpty })
    }
}
