import Testing
@testable import StrataStorage
import Foundation

// Helpers shared by the storage-engine suites (TreeModel, Cursor, Snapshot, PageReuse,
// FaultInjection, Corruption, StoreAPI). `temporaryPath()` and `SplitMix` live in SmokeTests.swift.

enum TestEnv {
    /// An integer from the environment, or `fallback` when unset or unparsable.
    static func int(_ name: String, default fallback: Int) -> Int {
        guard let text = ProcessInfo.processInfo.environment[name], let value = Int(text) else { return fallback }
        return value
    }
}

/// Removes a store file and its lock file.
func removeStoreFiles(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
    try? FileManager.default.removeItem(atPath: path + "-lock")
    try? FileManager.default.removeItem(atPath: path + "-log")
}

/// Size of the file at `path` in bytes (0 when missing).
func fileSizeOf(_ path: String) -> UInt64 {
    let attributes = try? FileManager.default.attributesOfItem(atPath: path)
    return (attributes?[.size] as? NSNumber)?.uint64Value ?? 0
}

func readFileBytes(_ path: String) throws -> [UInt8] {
    [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
}

func writeFileBytes(_ path: String, _ bytes: [UInt8]) throws {
    try Data(bytes).write(to: URL(fileURLWithPath: path))
}

/// Overwrites `bytes.count` bytes of the file at `offset`, in place (the inode stays the same).
func patchFile(_ path: String, at offset: Int, _ bytes: [UInt8]) throws {
    let handle = try #require(FileHandle(forUpdatingAtPath: path), "cannot open \(path)")
    defer { try? handle.close() }
    try handle.seek(toOffset: UInt64(offset))
    try handle.write(contentsOf: Data(bytes))
}

/// Reads `count` bytes of the file at `offset`.
func readFileRange(_ path: String, at offset: Int, count: Int) throws -> [UInt8] {
    let handle = try #require(FileHandle(forReadingAtPath: path), "cannot open \(path)")
    defer { try? handle.close() }
    try handle.seek(toOffset: UInt64(offset))
    return [UInt8](try handle.read(upToCount: count) ?? Data())
}

extension SplitMix {
    /// A value in `0..<bound` (bound > 0).
    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
    /// A value in `range`.
    mutating func within(_ range: ClosedRange<Int>) -> Int { range.lowerBound + below(range.count) }
    /// True with probability `percent` / 100.
    mutating func percent(_ percent: Int) -> Bool { below(100) < percent }
    /// `count` pseudo-random bytes, eight at a time.
    mutating func byteArray(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { p in
            var i = 0
            while i + 8 <= count {
                p.storeBytes(of: next(), toByteOffset: i, as: UInt64.self)
                i += 8
            }
            while i < count {
                p[i] = UInt8(truncatingIfNeeded: next())
                i += 1
            }
        }
        return bytes
    }
}

/// 8-byte big-endian encoding, so that numeric order is byte order.
func bigEndianKey(_ n: UInt64) -> [UInt8] {
    withUnsafeBytes(of: n.bigEndian) { Array($0) }
}

func bigEndianValue(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
    var n: UInt64 = 0
    for b in bytes.prefix(8) { n = n << 8 | UInt64(b) }
    return n
}

/// Byte order of keys (memcmp order, shorter first on a common prefix).
@inline(__always) func keyLess(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    a.lexicographicallyPrecedes(b)
}

/// Every entry of a tree in key order.
func allEntries(_ tree: ReadTree) throws -> [([UInt8], [UInt8])] {
    var result: [([UInt8], [UInt8])] = []
    try tree.forEach { k, v in
        result.append((Array(k), Array(v)))
        return true
    }
    return result
}

/// Every tree of a snapshot with all its entries.
func snapshotContents(_ txn: ReadTransaction) throws -> [String: [[UInt8]: [UInt8]]] {
    var result: [String: [[UInt8]: [UInt8]]] = [:]
    for name in try txn.treeNames() {
        let tree = try #require(try txn.tree(name))
        var entries: [[UInt8]: [UInt8]] = [:]
        try tree.forEach { k, v in
            entries[Array(k)] = Array(v)
            return true
        }
        #expect(entries.count == tree.count, "tree \(name): count \(tree.count) but \(entries.count) entries")
        result[name] = entries
    }
    return result
}

/// Whether an error is a `StorageError` of the given case (payload ignored).
func isStorageError(_ error: any Error, _ matches: (StorageError) -> Bool) -> Bool {
    guard let e = error as? StorageError else { return false }
    return matches(e)
}

/// A small Sendable box for results gathered from threads. `@unchecked Sendable`: `value`, the
/// only mutable state, is read and written only inside `withLock`, which holds `lock`.
final class Locked<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
    var current: Value { withLock { $0 } }
}

/// Runs `bodies` on their own threads at once and waits for all of them.
func runThreads(_ bodies: [@Sendable () -> Void]) {
    let group = DispatchGroup()
    for body in bodies {
        group.enter()
        let thread = Thread {
            body()
            group.leave()
        }
        thread.stackSize = 4 << 20
        thread.start()
    }
    group.wait()
}

/// Leaf count and fill of a tree, walking its pages through internal APIs.
struct TreeShape {
    var depth = 0
    var branches = 0
    var leaves = 0
    var overflowPages = 0
    var leafUsedBytes = 0
    var entries = 0
    var pageSize = 0
    var leafFill: Double { leaves == 0 ? 0 : Double(leafUsedBytes) / Double(leaves * pageSize) }
    /// Fill of the leaves other than the last one (the right edge of an ascending load is partial).
    var leafFillExcludingLast = 0.0
}

func treeShape(_ txn: ReadTransaction, _ name: String) throws -> TreeShape {
    let tree = try #require(try txn.tree(name))
    var shape = TreeShape()
    shape.pageSize = txn.pages.pageSize
    if tree.info.root == 0 { return shape }
    var level: [PageNo] = [tree.info.root]
    var lastLeafUsed = 0
    while !level.isEmpty {
        shape.depth += 1
        var next: [PageNo] = []
        for pgno in level {
            let node = try txn.pages.node(pgno)
            if node.isLeaf {
                shape.leaves += 1
                shape.leafUsedBytes += node.usedBytes
                lastLeafUsed = node.usedBytes
                shape.entries += node.count
                for i in 0..<node.count {
                    if case .overflow(let run, _) = try node.value(i) {
                        shape.overflowPages += Int(try txn.pages.page(run).u32(PageHeader.runPages))
                    }
                }
            } else {
                shape.branches += 1
                for i in 0..<node.count { next.append(try node.child(i)) }
            }
        }
        level = next
    }
    if shape.leaves > 1 {
        shape.leafFillExcludingLast = Double(shape.leafUsedBytes - lastLeafUsed) / Double((shape.leaves - 1) * shape.pageSize)
    } else {
        shape.leafFillExcludingLast = shape.leafFill
    }
    return shape
}

/// A test's `FileIO` wrapper: everything it does not implement itself goes to `inner` as it is.
protocol ForwardingFile: FileIO {
    var inner: any FileIO { get }
}

extension ForwardingFile {
    var path: String { inner.path }
    func size() throws -> UInt64 { try inner.size() }
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws { try inner.read(into: buffer, at: offset) }
    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws { try inner.write(bytes, at: offset) }
    func write(_ buffers: [UnsafeRawBufferPointer], at offset: UInt64) throws { try inner.write(buffers, at: offset) }
    func sync() throws { try inner.sync() }
    func truncate(to length: UInt64) throws { try inner.truncate(to: length) }
    func map(length: Int, writable: Bool) throws -> UnsafeMutableRawPointer { try inner.map(length: length, writable: writable) }
    func unmap(_ address: UnsafeMutableRawPointer, length: Int) { inner.unmap(address, length: length) }
    func lock(offset: Int64, length: Int64, exclusive: Bool, wait: Bool) throws -> Bool {
        try inner.lock(offset: offset, length: length, exclusive: exclusive, wait: wait)
    }
    func unlock(offset: Int64, length: Int64) { inner.unlock(offset: offset, length: length) }
}
