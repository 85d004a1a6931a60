import Foundation
import Synchronization
import Testing

@testable import StrataStorage

/// `PosixFile` cuts writes into pieces of at most `maxWriteBytes` (FileIO.swift): every byte must
/// still land where it was meant to, whatever mix of small, exact and oversized buffers it gets.
struct FileIOTests {
    @Test func piecewiseWritesLandByteForByte() throws {
        let path = temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let file = try PosixFile(path: path, create: true)
        let piece = PosixFile.maxWriteBytes
        // Sizes around the piece size, and vectors whose total crosses it in every way.
        let sizes = [1, 4096, piece - 1, piece, piece + 1, 3 * piece + 17, 4096, 4096, 12_288, 2 * piece, 5]
        var seed: UInt64 = 0x5eed_f11e
        func nextByte() -> UInt8 {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: seed >> 33)
        }
        let buffers = sizes.map { size in (0..<size).map { _ in nextByte() } }
        let expected = buffers.flatMap { $0 }
        let offset: UInt64 = 4096 * 3 + 100  // unaligned on purpose

        let pointers = buffers.map { bytes -> UnsafeMutableRawBufferPointer in
            let p = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 16)
            p.copyBytes(from: bytes)
            return p
        }
        defer { pointers.forEach { $0.deallocate() } }
        try file.write(pointers.map { UnsafeRawBufferPointer($0) }, at: offset)
        // One buffer far larger than a piece, after the vector.
        let single = (0..<(5 * piece + 123)).map { _ in nextByte() }
        let singleOffset = offset + UInt64(expected.count)
        try single.withUnsafeBytes { try file.write($0, at: singleOffset) }

        var readBack = [UInt8](repeating: 0, count: expected.count + single.count)
        try readBack.withUnsafeMutableBytes { try file.read(into: $0, at: offset) }
        #expect(readBack == expected + single)
        #expect(try file.size() == singleOffset + UInt64(single.count))
    }
}

/// `writeDurably` (FileIO.swift): page-aligned buffers go out in one `O_DIRECT | O_DSYNC` write
/// where the filesystem takes one, anything else through the page cache and a sync; either way the
/// bytes must be what every other view of the file then shows — reads, a map made before the
/// write, another descriptor — also over a range the page cache held from an earlier write.
struct DurableWriteTests {
    /// Whether the filesystem holding `path` takes an `O_DIRECT` write, probed with a file of its
    /// own. Where it does, the flag must also be what it claims to be: a descriptor opened with it
    /// refuses a write from a buffer off the block boundary (EINVAL), which any other flag allows.
    private func directWritesWork(beside path: String) -> Bool {
        StrataStorageTests.directWritesWork(probe: path + "-probe") { fd, page in
            let odd = pwrite(fd, page + 1, 4096, 4096)
            #expect(odd == -1 && errno == EINVAL, "PosixFile.directFlag is not O_DIRECT here: an unaligned write went through")
        }
    }

    @Test func durableWritesLandAndEveryViewOfTheFileShowsThem() throws {
        let path = temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let file = try PosixFile(path: path, create: true)
        let length = 64 * 1024
        // Cached first: zeros written through the page cache and synced, and a map made of them.
        try file.writeZeros(from: 0, to: UInt64(length))
        try file.sync()
        let map = try file.map(length: length, writable: false)
        defer { file.unmap(map, length: length) }
        #expect(UnsafeRawPointer(map).load(fromByteOffset: 8192, as: UInt8.self) == 0)

        var rng = SplitMix(seed: 0xd1_7ec7)
        func fill(_ p: UnsafeMutableRawBufferPointer) { p.copyBytes(from: rng.byteArray(p.count)) }
        var expected = [UInt8](repeating: 0, count: length)
        /// The first byte where `bytes` differs from `expected`, nil when none does.
        func firstDifference(_ bytes: [UInt8]) -> Int? { bytes.indices.first { bytes[$0] != expected[$0] } }
        func check(_ what: Comment) throws {
            var read = [UInt8](repeating: 0, count: length)
            try read.withUnsafeMutableBytes { try file.read(into: $0, at: 0) }
            #expect(firstDifference(read) == nil, "read: \(what)")
            #expect(firstDifference(Array(UnsafeRawBufferPointer(start: map, count: length))) == nil, "map: \(what)")
            let other = try PosixFile(path: path, mode: .readOnly)
            var again = [UInt8](repeating: 0, count: length)
            try again.withUnsafeMutableBytes { try other.read(into: $0, at: 0) }
            #expect(firstDifference(again) == nil, "another descriptor: \(what)")
        }

        // Three aligned pages at an aligned offset: the direct write, where there is one.
        let direct = directWritesWork(beside: path)
        let pages = (0..<3).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 4096) }
        defer { pages.forEach { $0.deallocate() } }
        pages.forEach(fill)
        try file.writeDurably(pages.map { UnsafeRawBufferPointer($0) }, at: 8192)
        for (i, page) in pages.enumerated() { expected.replaceSubrange((8192 + 4096 * i)..<(8192 + 4096 * (i + 1)), with: page) }
        try check("aligned pages")
        #expect(file.directWriteCount == (direct ? 1 : 0), "the filesystem takes O_DIRECT writes: \(direct)")

        // Over them again, after a buffered write cached part of the range.
        let cached = UnsafeMutableRawBufferPointer.allocate(byteCount: 100, alignment: 16)
        defer { cached.deallocate() }
        fill(cached)
        try file.write(UnsafeRawBufferPointer(cached), at: 12_000)
        expected.replaceSubrange(12_000..<12_100, with: cached)
        try check("a buffered write between")
        pages.forEach(fill)
        try file.writeDurably(pages.map { UnsafeRawBufferPointer($0) }, at: 8192)
        for (i, page) in pages.enumerated() { expected.replaceSubrange((8192 + 4096 * i)..<(8192 + 4096 * (i + 1)), with: page) }
        try check("aligned pages over cached bytes")

        // Not aligned (the buffer, its length, the offset): through the page cache, same bytes.
        let odd = UnsafeMutableRawBufferPointer.allocate(byteCount: 5000, alignment: 16)
        defer { odd.deallocate() }
        fill(odd)
        try file.writeDurably([UnsafeRawBufferPointer(rebasing: odd[3...])], at: 40_003)
        expected.replaceSubrange(40_003..<(40_003 + 4997), with: odd[3...])
        try check("unaligned")
        #expect(file.directWriteCount == (direct ? 2 : 0), "only the aligned writes go direct")

        // Past the end, followed by the shared block of zeros (as the commit log grows): the file
        // grows by the write, and a direct one stays direct (the zeros start on a page boundary).
        let zeros = UnsafeRawBufferPointer(rebasing: ZeroBlock.shared.bytes[0..<(16 * 4096)])
        try file.writeDurably(pages.map { UnsafeRawBufferPointer($0) } + [zeros], at: UInt64(length))
        #expect(try file.size() == UInt64(length + 19 * 4096))
        var tail = [UInt8](repeating: 1, count: 19 * 4096)
        try tail.withUnsafeMutableBytes { try file.read(into: $0, at: UInt64(length)) }
        #expect(tail == pages.flatMap { Array($0) } + [UInt8](repeating: 0, count: 16 * 4096))
        #expect(Int(bitPattern: ZeroBlock.shared.bytes.baseAddress) % 4096 == 0)
        #expect(file.directWriteCount == (direct ? 3 : 0), "the pages and the zeros after them went direct")
    }

    /// The direct path's rare outcomes, injected (`PosixFile.injectDirectWriteFaults`): an
    /// interrupted write is made again; a short one (a full disk, a signal) is written again whole
    /// through the page cache; EFAULT (a buffer the kernel will not pin) goes through the page
    /// cache that once; EINVAL (a filesystem that refuses the shape) for good; any other error
    /// fails the write, and the next one goes direct again. Every write that returns has its bytes
    /// where every view of the file shows them.
    @Test(.enabled(if: directWritesWorkInTemporaryDirectory(), "the temporary directory's filesystem takes no O_DIRECT writes"))
    func directWriteFailuresFallBackOrFailAndTheBytesLand() throws {
        let path = temporaryPath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let file = try PosixFile(path: path, create: true)
        let length = 64 * 1024
        try file.writeZeros(from: 0, to: UInt64(length))
        try file.sync()
        let direct = directWritesWork(beside: path)
        try #require(direct, "the filesystem under \(path) takes no O_DIRECT writes: no direct path to fail")
        let map = try file.map(length: length, writable: false)
        defer { file.unmap(map, length: length) }
        let faults = DirectFaultQueue()
        file.injectDirectWriteFaults { faults.next() }

        var rng = SplitMix(seed: 0xfa_0175)
        var expected = [UInt8](repeating: 0, count: length)
        let pages = (0..<3).map { _ in UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 4096) }
        defer { pages.forEach { $0.deallocate() } }
        /// Fills the pages afresh and writes them durably at `offset`, after queueing `queued`.
        func write(at offset: Int, after queued: [PosixFile.DirectWriteFault]) throws {
            faults.queue(queued)
            for page in pages { page.copyBytes(from: rng.byteArray(4096)) }
            try file.writeDurably(pages.map { UnsafeRawBufferPointer($0) }, at: UInt64(offset))
            for (i, page) in pages.enumerated() { expected.replaceSubrange((offset + 4096 * i)..<(offset + 4096 * (i + 1)), with: page) }
        }
        func check(_ what: Comment) throws {
            var read = [UInt8](repeating: 0, count: length)
            try read.withUnsafeMutableBytes { try file.read(into: $0, at: 0) }
            /// The first byte where `bytes` differs from `expected`, nil when none does.
            func firstDifference(_ bytes: [UInt8]) -> Int? { bytes.indices.first { bytes[$0] != expected[$0] } }
            #expect(firstDifference(read) == nil, "read: \(what)")
            #expect(firstDifference(Array(UnsafeRawBufferPointer(start: map, count: length))) == nil, "map: \(what)")
            let other = try PosixFile(path: path, mode: .readOnly)
            var again = [UInt8](repeating: 0, count: length)
            try again.withUnsafeMutableBytes { try other.read(into: $0, at: 0) }
            #expect(firstDifference(again) == nil, "another descriptor: \(what)")
        }

        try write(at: 8192, after: [.error(EINTR), .error(EINTR)])
        try check("interrupted twice")
        #expect(file.directWriteCount == 1, "an interrupted direct write is made again, direct")

        try write(at: 16_384, after: [.short(bytes: 4096)])
        try check("short")
        #expect(file.directWriteCount == 1, "a short write is written again through the page cache")

        try write(at: 4096, after: [.error(EFAULT)])
        try check("EFAULT")
        #expect(file.directWriteCount == 1)
        try write(at: 20_480, after: [])
        try check("after EFAULT")
        #expect(file.directWriteCount == 2, "EFAULT sends one write through the page cache, not the next")

        // A failure of the disk: the write fails (some of it may have landed; the caller treats the
        // range as unknown), and the descriptor stays for the next.
        faults.queue([.error(EIO)])
        for page in pages { page.copyBytes(from: rng.byteArray(4096)) }
        #expect(throws: StorageError.self) { try file.writeDurably(pages.map { UnsafeRawBufferPointer($0) }, at: 32_768) }
        try write(at: 32_768, after: [])
        try check("after EIO")
        #expect(file.directWriteCount == 3, "an error of the disk does not give up the direct descriptor")

        try write(at: 40_960, after: [.error(EINVAL)])
        try check("EINVAL")
        try write(at: 8192, after: [])
        try check("after EINVAL")
        #expect(file.directWriteCount == 3, "a filesystem that refused a direct write is written through the page cache from then on")
        #expect(faults.pending == 0)
    }

    /// The direct descriptor is opened by name at the first durable write: when the name has been
    /// given to another file since, the bytes must still go to the file this one is, never to the
    /// file now under its name.
    @Test func aDurableWriteAfterTheNameWasReplacedGoesToThisFile() throws {
        let path = temporaryPath()
        let other = path + "-other"
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: other)
        }
        let file = try PosixFile(path: path, create: true)
        try file.writeZeros(from: 0, to: 8192)
        let replacement = try PosixFile(path: other, create: true)
        try replacement.writeZeros(from: 0, to: 8192)
        #expect(rename(other, path) == 0)

        let page = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 4096)
        defer { page.deallocate() }
        for i in page.indices { page[i] = UInt8(truncatingIfNeeded: i &* 7 &+ 1) }
        try file.writeDurably([UnsafeRawBufferPointer(page)], at: 4096)
        #expect(file.directWriteCount == 0)
        var mine = [UInt8](repeating: 0, count: 4096)
        try mine.withUnsafeMutableBytes { try file.read(into: $0, at: 4096) }
        #expect(mine == Array(page))
        var theirs = [UInt8](repeating: 1, count: 4096)
        try theirs.withUnsafeMutableBytes { try replacement.read(into: $0, at: 4096) }
        #expect(theirs == [UInt8](repeating: 0, count: 4096))
    }
}

/// Whether files in the tests' temporary directory take `O_DIRECT` writes (not on every
/// filesystem, nor on systems without the flag): the tests that inject faults into the direct path
/// have nothing to inject into otherwise.
func directWritesWorkInTemporaryDirectory() -> Bool { directWritesWork(probe: temporaryPath("direct-probe")) }

/// Whether a file made at `probe` (and removed after) with `PosixFile.directFlag` takes an aligned
/// 4 KiB write; `then` runs with its descriptor and an aligned 8 KiB buffer when it does.
func directWritesWork(probe: String, then: (Int32, UnsafeMutableRawPointer) -> Void = { _, _ in }) -> Bool {
    guard let flag = PosixFile.directFlag else { return false }
    defer { unlink(probe) }
    let fd = open(probe, O_RDWR | O_CREAT | O_CLOEXEC | flag, 0o644)
    if fd < 0 { return false }
    defer { close(fd) }
    let page = UnsafeMutableRawPointer.allocate(byteCount: 8192, alignment: 4096)
    defer { page.deallocate() }
    page.initializeMemory(as: UInt8.self, repeating: 7, count: 8192)
    guard pwrite(fd, page, 4096, 0) == 4096 else { return false }
    then(fd, page)
    return true
}

/// Faults for `PosixFile.injectDirectWriteFaults`, handed out one per direct write in the order
/// queued; none once the queue is empty.
final class DirectFaultQueue: Sendable {
    private let faults = Mutex<[PosixFile.DirectWriteFault]>([])

    func queue(_ more: [PosixFile.DirectWriteFault]) { faults.withLock { $0 += more } }
    func next() -> PosixFile.DirectWriteFault? { faults.withLock { $0.isEmpty ? nil : $0.removeFirst() } }
    var pending: Int { faults.withLock { $0.count } }
}
