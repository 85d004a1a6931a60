import Testing

@testable import StrataStorage

/// Patches of the commit log (LogPatch.swift, FORMAT.md §3.2): applying a patch to its base gives
/// back the page exactly; a patch larger than half a page is refused without a trace; a malformed
/// one is rejected, never applied past the page.
@Suite struct LogPatchTests {
    static let pageSize = 4096

    /// A page of random bytes, and a copy with `edits` random stretches changed.
    static func pair(_ rng: inout SplitMix, edits: Int, longest: Int) -> (base: [UInt8], page: [UInt8]) {
        let base = rng.byteArray(pageSize)
        var page = base
        for _ in 0..<edits {
            let length = rng.within(1...longest)
            let at = rng.below(pageSize - length + 1)
            for i in at..<(at + length) { page[i] = UInt8(truncatingIfNeeded: rng.next()) }
        }
        return (base, page)
    }

    static func patch(_ page: [UInt8], on base: [UInt8], basePage: PageNo = 7, into area: inout [UInt8]) -> Bool {
        page.withUnsafeBytes { p in
            base.withUnsafeBytes { b in
                LogPatch.append(page: p.baseAddress!, base: b.baseAddress!, basePage: basePage, pageSize: pageSize, to: &area)
            }
        }
    }

    /// Applies the patch at `offset` of `area` to a copy of `base`; nil when it is rejected.
    static func apply(_ area: [UInt8], at offset: Int, to base: [UInt8]) -> (image: [UInt8], next: Int)? {
        var image = base
        let next = area.withUnsafeBytes { a in
            image.withUnsafeMutableBytes { LogPatch.apply(a, at: offset, to: $0.baseAddress!, pageSize: pageSize) }
        }
        return next.map { (image, $0) }
    }

    @Test func randomEditsRoundTrip() throws {
        let seed: UInt64 = 0x9A7C_0001
        var rng = SplitMix(seed: seed)
        for round in 0..<400 {
            // Edits at the page's ends included: its first and last bytes.
            var (base, page) = Self.pair(&rng, edits: rng.within(0...12), longest: rng.percent(20) ? 300 : 24)
            if rng.percent(10) { page[0] ^= 1 }
            if rng.percent(10) { page[Self.pageSize - 1] ^= 0x80 }
            // Two patches back to back, after bytes of something else, as in a frame's header.
            var area = rng.byteArray(rng.within(0...40))
            let first = area.count
            let (other, otherBase) = (rng.byteArray(Self.pageSize), rng.byteArray(Self.pageSize))
            guard Self.patch(page, on: base, basePage: 42, into: &area) else {
                // Refused: only when it would take more than half a page, and then nothing was added.
                #expect(area.count == first, "seed \(seed) round \(round)")
                let differing = zip(base, page).filter { $0 != $1 }.count
                #expect(differing > Self.pageSize / 4, "seed \(seed) round \(round): refused a patch of \(differing) differing bytes")
                continue
            }
            #expect(area.count - first <= Self.pageSize / 2, "seed \(seed) round \(round)")
            let second = area.count
            #expect(!Self.patch(other, on: otherBase, into: &area), "seed \(seed) round \(round): unrelated pages patched")
            #expect(area.count == second)
            area += [0, 0, 0, 0]  // zeros after the last patch, as the rest of a header
            #expect(area.withUnsafeBytes { LogPatch.basePage(in: $0, at: first) } == 42)
            let applied = try #require(Self.apply(area, at: first, to: base), "seed \(seed) round \(round)")
            #expect(applied.image == page, "seed \(seed) round \(round)")
            #expect(applied.next == second, "seed \(seed) round \(round)")
        }
    }

    @Test func aPageEqualToItsBaseIsAnEmptyPatch() throws {
        var rng = SplitMix(seed: 3)
        let base = rng.byteArray(Self.pageSize)
        var area: [UInt8] = []
        #expect(Self.patch(base, on: base, into: &area))
        #expect(area.count == LogPatch.headerSize)
        #expect(try #require(Self.apply(area, at: 0, to: base)).image == base)
    }

    @Test func aPatchOfMoreThanHalfAPageIsRefused() {
        var rng = SplitMix(seed: 5)
        let base = rng.byteArray(Self.pageSize)
        var page = base
        // Every other 8-byte word changed: one run over the whole page.
        for word in stride(from: 0, to: Self.pageSize, by: 16) { page[word] ^= 0xFF }
        var area: [UInt8] = [1, 2, 3]
        #expect(!Self.patch(page, on: base, into: &area))
        #expect(area == [1, 2, 3])
    }

    /// Runs past the page or the area, out of order or overlapping, empty, or a header cut short:
    /// rejected, and the image is not written past the page.
    @Test func malformedPatchesAreRejected() {
        func run(_ offset: UInt32, _ length: UInt32, bytes: Int? = nil) -> [UInt8] {
            withUnsafeBytes(of: offset.littleEndian) { Array($0) } + withUnsafeBytes(of: length.littleEndian) { Array($0) }
                + [UInt8](repeating: 0xAB, count: bytes ?? Int(length))
        }
        func patch(_ runs: [[UInt8]], count: UInt32? = nil) -> [UInt8] {
            withUnsafeBytes(of: UInt64(9).littleEndian) { Array($0) } + withUnsafeBytes(of: (count ?? UInt32(runs.count)).littleEndian) { Array($0) }
                + runs.flatMap { $0 }
        }
        let base = [UInt8](repeating: 0, count: Self.pageSize)
        let size = UInt32(Self.pageSize)
        let bad: [(String, [UInt8])] = [
            ("run past the page", patch([run(size - 4, 8)])),
            ("run starting past the page", patch([run(size, 1)])),
            ("huge offset", patch([run(UInt32.max, 1)])),
            ("huge length", patch([run(0, UInt32.max, bytes: 16)])),
            ("bytes missing", patch([run(0, 64, bytes: 10)])),
            ("runs out of order", patch([run(100, 8), run(50, 8)])),
            ("overlapping runs", patch([run(100, 8), run(104, 8)])),
            ("empty run", patch([run(100, 0)])),
            ("more runs than bytes", patch([run(0, 8)], count: 1000)),
            ("header cut short", Array(patch([])[0..<10])),
        ]
        for (name, area) in bad {
            #expect(Self.apply(area, at: 0, to: base) == nil, "\(name) was applied")
        }
        #expect(Self.apply(patch([run(0, 8), run(8, 8), run(size - 8, 8)]), at: 0, to: base) != nil, "a sound patch was rejected")
        #expect(Self.apply([], at: 0, to: base) == nil)
        #expect(Self.apply(patch([]), at: -1, to: base) == nil)
    }
}
