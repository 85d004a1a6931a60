import Foundation
import Synchronization
import Testing

@testable import Strata
@testable import StrataStorage

/// Linux's behaviour after a failed fdatasync (see Tests/StrataStorageTests/SyncLossTests.swift,
/// `SyncLossFile`): the writes a failed sync could not flush never reach the disk, and a later sync
/// succeeds without them. The disk is a shadow image updated at each successful sync.
// Unchecked: its mutable state is in `state` and `logs` (Mutexes); `pageFile` is set once by the
// initializer, before the file is shared.
final class HCSyncLossFile: FileIO, @unchecked Sendable {
    let inner: any FileIO
    struct State {
        var image: [UInt8]
        var written: [(offset: UInt64, count: Int)] = []
        var failNextSync = false
        var failedSyncs = 0
    }
    let state: Mutex<State>
    /// For the commit log beside a page file: the page file, whose `failNextSync` also fails this
    /// file's next sync (one fault plan for both files).
    private weak var pageFile: HCSyncLossFile?
    /// For a page file: the commit logs that share its plan, put back with it by `losePower`.
    private let logs = Mutex<[HCSyncLossFile]>([])

    /// Wraps the commit log `inner` beside `pageFile`, sharing its plan.
    convenience init(_ inner: any FileIO, logOf pageFile: HCSyncLossFile) throws {
        try self.init(inner)
        self.pageFile = pageFile
        pageFile.logs.withLock { $0.append(self) }
    }

    init(_ inner: any FileIO) throws {
        self.inner = inner
        let size = Int(try inner.size())
        var image = [UInt8](repeating: 0, count: size)
        if size > 0 { try image.withUnsafeMutableBytes { try inner.read(into: $0, at: 0) } }
        state = Mutex(State(image: image))
    }
    var path: String { inner.path }
    func size() throws -> UInt64 { try inner.size() }
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws { try inner.read(into: buffer, at: offset) }
    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        try inner.write(bytes, at: offset)
        state.withLock { $0.written.append((offset, bytes.count)) }
    }
    func write(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws {
        try inner.write(buffers, at: offset)
        let total = buffers.reduce(0) { $0 + $1.count }
        state.withLock { $0.written.append((offset, total)) }
    }
    func sync() throws {
        let fail = (pageFile ?? self).state.withLock { s -> Bool in
            guard s.failNextSync else { return false }
            s.failNextSync = false
            s.failedSyncs += 1
            return true
        }
        if fail {
            state.withLock { $0.written.removeAll() }
            throw StorageError.io(operation: "fdatasync", path: path, errno: 5)
        }
        try inner.sync()
        let size = Int(try inner.size())
        let ranges = state.withLock { $0.written }
        var pieces: [(Int, [UInt8])] = []
        for (offset, count) in ranges where Int(offset) < size {
            var bytes = [UInt8](repeating: 0, count: min(count, size - Int(offset)))
            try bytes.withUnsafeMutableBytes { try inner.read(into: $0, at: offset) }
            pieces.append((Int(offset), bytes))
        }
        state.withLock { s in
            if s.image.count < size { s.image += [UInt8](repeating: 0, count: size - s.image.count) }
            if s.image.count > size { s.image.removeLast(s.image.count - size) }
            for (offset, bytes) in pieces { s.image.replaceSubrange(offset..<(offset + bytes.count), with: bytes) }
            s.written.removeAll()
        }
    }
    func truncate(to length: UInt64) throws { try inner.truncate(to: length) }
    func map(length: Int, writable: Bool) throws -> UnsafeMutableRawPointer { try inner.map(length: length, writable: writable) }
    func unmap(_ address: UnsafeMutableRawPointer, length: Int) { inner.unmap(address, length: length) }
    func lock(offset: Int64, length: Int64, exclusive: Bool, wait: Bool) throws -> Bool {
        try inner.lock(offset: offset, length: length, exclusive: exclusive, wait: wait)
    }
    func unlock(offset: Int64, length: Int64) { inner.unlock(offset: offset, length: length) }
    func losePower() throws {
        for log in logs.withLock({ $0 }) { try log.losePower() }
        let image = state.withLock { $0.image }
        try inner.truncate(to: UInt64(image.count))
        try image.withUnsafeBytes { try inner.write($0, at: 0) }
        try inner.sync()
    }
}

@Suite struct SyncLossObjectTests {
    /// The object-layer view of `SyncLossTests.failedSyncOfANoSyncBaseThenAcknowledgedCommitSurvivesPowerLoss`
    /// (found by a hunt): objects with secondary, unique, compound, full-text and collated
    /// indexes and overflow blobs. A `.noSync` write, then a durable write whose sync (the one that
    /// secures the `.noSync` base) fails and throws, then a durable write that succeeds
    /// (acknowledged); then a power loss. The reopened database checks clean and holds the
    /// acknowledged objects (they were unreadable before the page file wrote the unsynced pages
    /// again after a failed sync).
    @Test func acknowledgedObjectsAfterAFailedSyncOfANoSyncWriteSurvivePowerLoss() throws {
        let path = databasePath("huntc-objects-syncloss")
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: path + "-lock")
        }
        var options = StoreOptions(durability: .full)
        options.compaction.idleDelay = nil
        let made = Mutex<HCSyncLossFile?>(nil)
        var store: Store? = try Store(path: path, options: options) { inner in
            if inner.path.hasSuffix("-log"), let pageFile = made.withLock({ $0 }) { return try! HCSyncLossFile(inner, logOf: pageFile) }
            let f = try! HCSyncLossFile(inner)
            made.withLock { $0 = f }
            return f
        }
        let file = try #require(made.withLock { $0 })
        var db: Database? = try Database(store: store!, models: [HCItem.self])
        var rng = PowerLossObjects.Rng(state: 0x5EED)
        var model: [Int: HCItem] = [:]
        try db!.write { tx in try PowerLossObjects.transaction(tx, &model, &rng, version: 0, operations: 400) }
        try db!.write(durability: .noSync) { tx in try PowerLossObjects.transaction(tx, &model, &rng, version: 1, operations: 300) }
        file.state.withLock { $0.failNextSync = true }
        var attempted = model
        #expect(throws: (any Error).self) { try db!.write { tx in try PowerLossObjects.transaction(tx, &attempted, &rng, version: 2, operations: 50) } }
        try db!.write { tx in try PowerLossObjects.transaction(tx, &model, &rng, version: 3, operations: 50) }  // acknowledged, durable
        weak let environment = db!.store.env
        db!.close()
        db = nil
        store = nil
        for _ in 0..<500 where environment != nil { usleep(2_000) }
        #expect(environment == nil)
        try file.losePower()
        do {
            let index = try PowerLossObjects.verify(path, acceptable: [model], context: "after a failed sync of a noSync base")
            #expect(index == 0)
        } catch {
            Issue.record("reopening or reading after the power loss threw \(error)")
        }
    }
}
