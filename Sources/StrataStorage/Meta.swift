// The two meta pages (pages 0 and 1). Commit T writes meta page T % 2, so the previous commit's
// meta survives a torn write. Layout in FORMAT.md, "Meta pages".

enum MetaLayout {
    static let magic = 32  // 8 bytes "STRATADB"
    static let formatVersion = 40  // u32
    static let pageSize = 44  // u32
    static let pageCount = 48  // u64: pages in use or free; the file holds at least this many
    static let catalogRoot = 56  // u64: 0 when there are no trees
    static let catalogCount = 64  // u64: number of trees
    static let freeRoot = 72  // u64: the free-page tree
    static let freeCount = 80  // u64: entries (chunks) in the free-page tree
    static let recordRun = 88  // u64: first page of the commit record run, 0 when inline
    static let recordCount = 96  // u32: page numbers in the commit record
    static let flags = 100  // u32: bit 0 = unsynced (a `.noSync` commit); other bits 0
    static let inlineRecord = 128  // u64 page numbers when recordRun == 0

    static let magicValue: [UInt8] = Array("STRATADB".utf8)
}

/// The current file format. Readers refuse newer versions; see FORMAT.md, "Versioning".
///
/// ```swift
/// let versions = try store.metaPages().map(\.formatVersion)   // [strataFormatVersion, …]
/// ```
public let strataFormatVersion: UInt32 = 5

/// The decoded fields of a meta page.
struct Meta: Equatable, Sendable {
    var txnid: UInt64
    var pageSize: Int
    var pageCount: UInt64
    var catalog: TreeInfo
    var free: TreeInfo
    var recordRun: PageNo
    var recordCount: Int
    /// Made with `.noSync`: nothing guarantees its pages or its meta page reached the disk, so the
    /// commit before it may still be the newest durable one (flags bit 0; see `secureBase`).
    var unsynced = false
    /// The format the meta page was written in (1 or 2: see FORMAT.md, "Versioning").
    var formatVersion: UInt32 = strataFormatVersion

    /// Bytes per commit-record entry: a page number, and since version 2 the page's checksum.
    var recordEntrySize: Int { formatVersion >= 2 ? 16 : 8 }

    /// Reads the fields of a meta page without verifying anything (the reader hot path,
    /// on a meta whose checksum this process already verified or that its own writer wrote).
    static func fields(_ p: UnsafeRawPointer) -> Meta {
        Meta(
            txnid: p.u64(PageHeader.txnid),
            pageSize: Int(p.u32(MetaLayout.pageSize)),
            pageCount: p.u64(MetaLayout.pageCount),
            catalog: TreeInfo(root: p.u64(MetaLayout.catalogRoot), count: p.u64(MetaLayout.catalogCount)),
            free: TreeInfo(root: p.u64(MetaLayout.freeRoot), count: p.u64(MetaLayout.freeCount)),
            recordRun: p.u64(MetaLayout.recordRun),
            recordCount: Int(p.u32(MetaLayout.recordCount)),
            unsynced: p.u32(MetaLayout.flags) & 1 != 0,
            formatVersion: p.u32(MetaLayout.formatVersion))
    }

    /// Whether `p` starts with the Strata magic.
    static func hasMagic(_ p: UnsafeRawPointer) -> Bool {
        for (i, byte) in MetaLayout.magicValue.enumerated() where p.u8(MetaLayout.magic + i) != byte { return false }
        return true
    }

    /// Decodes and verifies a meta page read from slot `slot`. `pageSize` is the size of the buffer.
    static func decode(_ p: UnsafeRawPointer, slot: PageNo, pageSize: Int, path: String) throws -> Meta {
        if !hasMagic(p) { throw StorageError.notAStrataFile(path: path, reason: "meta page \(slot) has no Strata magic") }
        let version = p.u32(MetaLayout.formatVersion)
        if version > strataFormatVersion || version == 0 {
            throw StorageError.unsupportedFormatVersion(path: path, found: version, supported: strataFormatVersion)
        }
        let storedPageSize = Int(p.u32(MetaLayout.pageSize))
        if storedPageSize != pageSize {
            throw StorageError.pageSizeMismatch(path: path, found: storedPageSize, expected: pageSize)
        }
        if pageChecksum(p, byteCount: pageSize) != p.u64(PageHeader.checksum) {
            throw StorageError.corrupt(page: slot, reason: "meta page checksum mismatch")
        }
        if p.u64(PageHeader.pageNumber) != slot || p.u8(PageHeader.type) != PageType.meta.rawValue {
            throw StorageError.corrupt(page: slot, reason: "meta page header names page \(p.u64(PageHeader.pageNumber)), type \(p.u8(PageHeader.type))")
        }
        let meta = fields(p)
        if meta.txnid > maxTxnid {
            // Never reached by commits (one a nanosecond for a century); keeps `txnid + 1` exact.
            throw StorageError.corrupt(page: slot, reason: "transaction id \(meta.txnid) is beyond 2^62")
        }
        if meta.txnid % 2 != slot {
            throw StorageError.corrupt(page: slot, reason: "transaction \(meta.txnid) stored in the wrong meta slot")
        }
        if meta.pageCount < 2 || meta.pageCount > maxPageCount {
            throw StorageError.corrupt(page: slot, reason: "page count \(meta.pageCount) is outside 2...\(maxPageCount)")
        }
        let capacity = (pageSize - MetaLayout.inlineRecord) / meta.recordEntrySize
        if meta.recordRun == 0 && meta.recordCount > capacity {
            throw StorageError.corrupt(page: slot, reason: "inline commit record of \(meta.recordCount) pages exceeds \(capacity)")
        }
        for (name, page) in [("catalog root", meta.catalog.root), ("free root", meta.free.root), ("commit record", meta.recordRun)]
        where page != 0 && (page < 2 || page >= meta.pageCount) {
            throw StorageError.corrupt(page: slot, reason: "\(name) \(page) outside 2..<\(meta.pageCount)")
        }
        return meta
    }

    /// Writes this meta into a zeroed page buffer, with `record` inline when it fits, and seals it.
    func encode(into p: UnsafeMutableRawPointer, inlineRecord record: [RecordEntry]) {
        p.initializeMemory(as: UInt8.self, repeating: 0, count: pageSize)
        p.setU64(PageHeader.pageNumber, txnid % 2)
        p.setU64(PageHeader.txnid, txnid)
        p.setU8(PageHeader.type, PageType.meta.rawValue)
        for (i, byte) in MetaLayout.magicValue.enumerated() { p.setU8(MetaLayout.magic + i, byte) }
        p.setU32(MetaLayout.formatVersion, formatVersion)
        p.setU32(MetaLayout.pageSize, UInt32(pageSize))
        p.setU64(MetaLayout.pageCount, pageCount)
        p.setU64(MetaLayout.catalogRoot, catalog.root)
        p.setU64(MetaLayout.catalogCount, catalog.count)
        p.setU64(MetaLayout.freeRoot, free.root)
        p.setU64(MetaLayout.freeCount, free.count)
        p.setU64(MetaLayout.recordRun, recordRun)
        p.setU32(MetaLayout.recordCount, UInt32(recordCount))
        p.setU32(MetaLayout.flags, unsynced ? 1 : 0)
        if recordRun == 0 {
            for (i, entry) in record.enumerated() { entry.store(to: p + MetaLayout.inlineRecord + recordEntrySize * i, version: formatVersion) }
        }
        p.setU64(PageHeader.checksum, pageChecksum(UnsafeRawPointer(p), byteCount: pageSize))
    }

    /// The largest transaction id a meta page may hold.
    static let maxTxnid: UInt64 = 1 << 62

    /// 2^40 pages: 4 PiB with 4 KiB pages, and far from overflowing byte offsets.
    static let maxPageCount: UInt64 = 1 << 40

    /// Entries a meta page of the current format lists inline.
    static func inlineCapacity(pageSize: Int) -> Int { (pageSize - MetaLayout.inlineRecord) / 16 }
}

/// A tree's root page and entry count, as stored in the catalog and in the meta page.
struct TreeInfo: Equatable, Sendable {
    var root: PageNo
    var count: UInt64

    static let empty = TreeInfo(root: 0, count: 0)
    static let encodedSize = 24

    func encoded() -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: TreeInfo.encodedSize)
        bytes.withUnsafeMutableBytes { p in
            p.baseAddress!.setU64(0, root)
            p.baseAddress!.setU64(8, count)
        }
        return bytes
    }

    /// Decodes a catalog entry. With `pageCount` (the snapshot's), a count more entries than that
    /// many pages can hold is corrupt: callers size loops and buffers by it, and add it up.
    static func decode(_ bytes: UnsafeRawBufferPointer, name: String, pageCount: UInt64? = nil, pageSize: Int = 0) throws -> TreeInfo {
        guard bytes.count == encodedSize, let p = bytes.baseAddress else {
            throw StorageError.corrupt(page: 0, reason: "catalog entry for tree '\(name)' has \(bytes.count) bytes, expected \(encodedSize)")
        }
        let info = TreeInfo(root: p.u64(0), count: p.u64(8))
        if let pageCount, info.count > maxEntries(pageCount: pageCount, pageSize: pageSize) {
            throw StorageError.corrupt(
                page: info.root, reason: "catalog entry for tree '\(name)' records \(info.count) entries, more than \(pageCount) pages can hold")
        }
        return info
    }

    /// The most entries a tree can have in a file of `pageCount` pages: every page but the meta
    /// pages a leaf of the smallest entries (8-byte header, 1-byte key, empty value, 2-byte slot).
    /// At most 2^40 × 2^15 / 11: no overflow.
    static func maxEntries(pageCount: UInt64, pageSize: Int) -> UInt64 {
        (pageCount &- min(pageCount, 2)) * UInt64(max(0, pageSize - PageHeader.size) / (LeafEntry.headerSize + 1 + 2))
    }
}

/// One page (or run) a commit wrote, as its commit record lists it. The checksum (format 2) tells
/// this commit's page from a page another attempt at the same transaction id left behind.
struct RecordEntry: Equatable {
    var page: PageNo
    /// The page's checksum; nil in format 1 records, which list page numbers only.
    var checksum: UInt64?
    /// A page an earlier commit of a run of `.noSync` commits wrote, which this one uses (RunPin.swift;
    /// bit 63 of the stored page number, which page numbers below 2^40 never set).
    var carried = false

    static let carriedBit: UInt64 = 1 << 63

    func store(to p: UnsafeMutableRawPointer, version: UInt32) {
        p.setU64(0, carried ? page | Self.carriedBit : page)
        if version >= 2 { p.setU64(8, checksum ?? 0) }
    }

    static func load(_ p: UnsafeRawPointer, version: UInt32) -> RecordEntry {
        let stored = p.u64(0)
        // Format 1 records carry nothing: a page number there is a page number.
        let carried = version >= 2 && stored & carriedBit != 0
        return RecordEntry(page: carried ? stored & ~carriedBit : stored, checksum: version >= 2 ? p.u64(8) : nil, carried: carried)
    }
}
