// Patches: a page of a commit-log frame written as the bytes in which it differs from the page it
// was copied from (FORMAT.md §3.2).
//
// A one-object commit copies about a dozen pages (the paths from the roots of the record tree, its
// indexes, the catalog and the free-page tree), and changes a few dozen bytes of most of them: a
// child's number and count in a branch, one entry in a leaf. Logging each whole page made the
// frame of such a commit about 14 pages; with patches, which the frame's header carries, it is
// most often the header alone. A base is always a page an earlier frame of the generation wrote
// (`WriteTransaction.patchBases`), so a replay rebuilds each patched page from that frame's image,
// never from the page file, where the base's number may have been reused since.

enum LogPatch {
    /// Bytes of a patch before its runs: u64 base page, u32 run count.
    static let headerSize = 12
    /// Bytes before each run's bytes: u32 offset, u32 length.
    static let runHeaderSize = 8
    /// Equal bytes between two differing stretches that a run still covers: fewer cost more as a
    /// run header of their own than as bytes.
    static let joinGap = 16

    /// Appends to `area` the patch that turns `base` (page number `basePage`) into `page`, both
    /// `pageSize` bytes, unless it would take more than half a page: the page is then logged
    /// whole, and `area` is left as it was. Returns whether it appended.
    ///
    /// ```swift
    /// if LogPatch.append(page: buffer, base: map + Int(origin) * pageSize, basePage: origin, pageSize: pageSize, to: &area) { kind = .patch }
    /// ```
    static func append(page: UnsafeRawPointer, base: UnsafeRawPointer, basePage: PageNo, pageSize: Int, to area: inout [UInt8]) -> Bool {
        let start = area.count
        let budget = pageSize / 2
        var runs = 0
        withUnsafeBytes(of: basePage.littleEndian) { area.append(contentsOf: $0) }
        area.append(contentsOf: [0, 0, 0, 0])
        var at = 0
        while at < pageSize {
            // The next differing 8-byte word, then the end of the stretch of differing words,
            // stretched over short equal gaps.
            while at < pageSize && page.loadUnaligned(fromByteOffset: at, as: UInt64.self) == base.loadUnaligned(fromByteOffset: at, as: UInt64.self) {
                at += 8
            }
            if at >= pageSize { break }
            let from = at
            var end = at + 8
            var probe = end
            while probe < pageSize && probe - end < joinGap {
                if page.loadUnaligned(fromByteOffset: probe, as: UInt64.self) != base.loadUnaligned(fromByteOffset: probe, as: UInt64.self) {
                    end = probe + 8
                }
                probe += 8
            }
            if area.count - start + runHeaderSize + (end - from) > budget {
                area.removeSubrange(start...)
                return false
            }
            withUnsafeBytes(of: UInt32(from).littleEndian) { area.append(contentsOf: $0) }
            withUnsafeBytes(of: UInt32(end - from).littleEndian) { area.append(contentsOf: $0) }
            area.append(contentsOf: UnsafeRawBufferPointer(start: page + from, count: end - from))
            runs += 1
            at = end
        }
        area.withUnsafeMutableBytes { $0.baseAddress!.setU32(start + 8, UInt32(runs)) }
        return true
    }

    /// The base page of the patch at `offset` in `area`, or nil when its header does not fit.
    static func basePage(in area: UnsafeRawBufferPointer, at offset: Int) -> PageNo? {
        guard offset >= 0, offset <= area.count - headerSize else { return nil }
        return area.baseAddress!.u64(offset)
    }

    /// Applies the runs of the patch at `offset` in `area` to `image` (`pageSize` bytes, holding
    /// the base page), and returns the offset just past the patch; nil when the patch is malformed
    /// (a run past the page or past the area, or runs out of order).
    static func apply(_ area: UnsafeRawBufferPointer, at offset: Int, to image: UnsafeMutableRawPointer, pageSize: Int) -> Int? {
        guard offset >= 0, offset <= area.count - headerSize else { return nil }
        let p = area.baseAddress!
        let runs = Int(p.u32(offset + 8))
        var at = offset + headerSize
        var floor = 0
        for _ in 0..<runs {
            guard at <= area.count - runHeaderSize else { return nil }
            let from = Int(p.u32(at)), count = Int(p.u32(at + 4))
            at += runHeaderSize
            guard from >= floor, count > 0, count <= pageSize - from, count <= area.count - at else { return nil }
            (image + from).copyMemory(from: p + at, byteCount: count)
            at += count
            floor = from + count
        }
        return at
    }
}
