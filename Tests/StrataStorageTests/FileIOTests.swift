import Foundation
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
