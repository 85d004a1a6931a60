// One page decoded for humans, and both meta pages decoded field by field: what `strata page`
// and `strata info` print.
//
// Pages are read with pread into copies, never through the map past the snapshot, so a short or
// corrupt file can be described without faulting.

/// The decoded fields of one meta page (page 0 or 1), valid or not.
///
/// ```swift
/// for meta in try store.metaPages() {
///     print(meta.slot, meta.txnid, meta.isCurrent ? "current" : "", meta.error ?? "valid")
/// }
/// ```
public struct MetaPageInfo: Sendable, Equatable {
    /// 0 or 1.
    public var slot: UInt64
    /// Whether this is the meta page of the snapshot that was inspected (the newest commit).
    public var isCurrent: Bool
    /// Why the page does not decode as a valid meta page; nil when it does.
    public var error: String?
    /// Whether every byte of the page is zero (a copy's unused slot, or a slot a failed commit spoiled).
    public var isEmpty: Bool
    /// The format version the page was written with.
    public var formatVersion: UInt32
    /// The page size the page records.
    public var pageSize: Int
    /// The transaction id of the commit the page describes.
    public var txnid: UInt64
    /// Pages the commit accounts for.
    public var pageCount: UInt64
    /// Root page of the catalog tree, 0 when it is empty.
    public var catalogRoot: UInt64
    /// Named trees in the catalog.
    public var catalogCount: UInt64
    /// Root page of the free-page tree, 0 when it is empty.
    public var freeRoot: UInt64
    /// Entries in the free-page tree.
    public var freeCount: UInt64
    /// First page of the commit-record run, 0 when the record is inline in the meta page.
    public var recordRun: UInt64
    /// Page numbers in the commit record.
    public var recordCount: Int
    /// The checksum the page stores.
    public var storedChecksum: UInt64
    /// The checksum of the page's bytes as read; a valid page has both equal.
    public var computedChecksum: UInt64

    /// Whether the page decodes: magic, version, page size, checksum, header and fields.
    public var isValid: Bool { error == nil }
}

/// A page number `Store.describePage` cannot show.
///
/// ```swift
/// do { print(try store.describePage(1 << 40)) }
/// catch let error as InspectError { print(error) }   // the page is past the end of the file
/// ```
public enum InspectError: Error, Equatable, Sendable, CustomStringConvertible {
    /// `page` is not below `filePages`, the number of pages in the file.
    case pageOutOfRange(page: UInt64, filePages: UInt64)

    public var description: String {
        switch self {
        case let .pageOutOfRange(page, filePages):
            return "page \(page) is past the end of the file, which holds pages 0..<\(filePages)"
        }
    }
}

extension Store {
    /// Both meta pages, decoded, with which one the newest snapshot uses.
    ///
    /// ```swift
    /// let current = try store.metaPages().first { $0.isCurrent }
    /// print(current?.formatVersion ?? 0)
    /// ```
    public func metaPages() throws -> [MetaPageInfo] {
        try read { txn in try readMetaPages(current: txn.txnid) }
    }

    /// Decodes page `n` for a human: the meta fields of page 0 or 1; otherwise the header (with
    /// the checksum verified), then the slots of a branch or leaf with previews of keys and values
    /// and child pointers, the length of an overflow run, or the pages a commit record lists.
    /// Pages listed in the free-page tree say so. Throws `InspectError.pageOutOfRange` for a page
    /// past the end of the file.
    ///
    /// ```swift
    /// print(try store.describePage(2))
    /// // page 2: leaf, written by transaction 5, checksum ok
    /// //   slots 3, entry area 3990..<4096, garbage 0, used 142 of 4096 bytes (3.5%)
    /// //   [0] @4072 key "apple" (5 B) value "red" (3 B)
    /// ```
    public func describePage(_ n: UInt64) throws -> String {
        // (It reads the page through the snapshot's map after checking the file's size: a page
        // free in the snapshot could be cut in between, and the read would fault: cuts held off.)
        try holdingOffCuts { try read { txn in try describePage(n, txn: txn) } }
    }

    private func describePage(_ n: UInt64, txn: ReadTransaction) throws -> String {
        let fileSize = try env.file.size()
        let filePages = fileSize / UInt64(pageSize)
        if n >= filePages { throw InspectError.pageOutOfRange(page: n, filePages: filePages) }
        if n < 2 {
            let metas = try readMetaPages(current: txn.txnid)
            return describeMeta(metas[Int(n)])
        }
        var lines: [String] = []
        let page = try readPages(n, count: 1)
        defer { page.deallocate() }
        let p = UnsafeRawPointer(page)
        let type = p.u8(PageHeader.type)
        var runPages = 1
        if type == PageType.overflow.rawValue || type == PageType.commitRecord.rawValue {
            runPages = Int(p.u32(PageHeader.runPages))
        }
        let typeName = pageTypeName(type)
        var checksumNote: String
        if runPages < 1 || n + UInt64(runPages) > filePages {
            checksumNote = "checksum not verifiable: run of \(runPages) pages runs past the file end"
        } else {
            let computed: UInt64
            if n + UInt64(runPages) <= txn.meta.pageCount {
                // Inside the snapshot, which the map covers; the file holds it (checked above).
                computed = pageChecksum(txn.pages.base + Int(n) * pageSize, byteCount: runPages * pageSize)
            } else {
                let run = try readPages(n, count: runPages)
                defer { run.deallocate() }
                computed = pageChecksum(UnsafeRawPointer(run), byteCount: runPages * pageSize)
            }
            let stored = p.u64(PageHeader.checksum)
            checksumNote = computed == stored ? "checksum ok" : "CHECKSUM MISMATCH (stored \(hex(stored)), computed \(hex(computed)))"
        }
        let isZero = UnsafeRawBufferPointer(start: p, count: pageSize).allSatisfy { $0 == 0 }
        if isZero {
            lines.append("page \(n): all zero (never written)")
        } else {
            lines.append("page \(n): \(typeName), written by transaction \(p.u64(PageHeader.txnid)), \(checksumNote)")
            let named = p.u64(PageHeader.pageNumber)
            if named != n {
                lines.append("  HEADER NAMES PAGE \(named): a misdirected write, or a page inside an overflow run (only a run's first page has a header)")
            }
        }
        if n >= txn.meta.pageCount {
            lines.append("  beyond the newest commit's \(txn.meta.pageCount) pages: not part of the database")
        }
        if let free = freeListing(of: n, txn: txn) { lines.append("  " + free) }
        if isZero { return lines.joined(separator: "\n") }

        if type == PageType.branch.rawValue || type == PageType.countedBranch.rawValue || type == PageType.leaf.rawValue {
            describeNode(p, pgno: n, into: &lines)
        } else if runPages < 1 {
            lines.append("  \(typeName) run of 0 pages: corrupt")
        } else if type == PageType.overflow.rawValue {
            lines.append(
                "  overflow run of \(runPages) page\(runPages == 1 ? "" : "s") (\(n)...\(n + UInt64(runPages) - 1)), holds up to \(runPages * pageSize - PageHeader.size) value bytes"
            )
            lines.append("  data " + preview(UnsafeRawBufferPointer(start: p + PageHeader.size, count: pageSize - PageHeader.size), limit: 48, forceHex: true))
        } else if type == PageType.commitRecord.rawValue {
            lines.append("  commit record run of \(runPages) page\(runPages == 1 ? "" : "s")")
            // Entries as the newest meta's format writes them (page and checksum since format 2).
            let version = txn.meta.formatVersion
            let entrySize = txn.meta.recordEntrySize
            var listed: [String] = []
            for i in 0..<((pageSize - PageHeader.size) / entrySize) {
                let entry = RecordEntry.load(p + PageHeader.size + entrySize * i, version: version)
                if entry.page == 0 { break }
                listed.append(entry.carried ? "\(entry.page)(carried)" : String(entry.page))
            }
            lines.append("  lists (first page): " + (listed.count > 64 ? listed[0..<64].joined(separator: " ") + " …" : listed.joined(separator: " ")))
        } else {
            lines.append(
                "  unknown page type \(type); header bytes " + preview(UnsafeRawBufferPointer(start: p, count: PageHeader.size), limit: 32, forceHex: true))
        }
        return lines.joined(separator: "\n")
    }

    // MARK: Helpers of describePage and metaPages

    /// Reads `count` pages from `n` with pread (no map access: safe on a short file).
    private func readPages(_ n: UInt64, count: Int) throws -> UnsafeMutableRawPointer {
        let bytes = count * pageSize
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: 16)
        do {
            try env.file.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: bytes), at: n * UInt64(pageSize))
        } catch {
            buffer.deallocate()
            throw error
        }
        return buffer
    }

    func readMetaPages(current: UInt64) throws -> [MetaPageInfo] {
        let fileSize = try env.file.size()
        var result: [MetaPageInfo] = []
        for slot: UInt64 in [0, 1] {
            if fileSize < (slot + 1) * UInt64(pageSize) {
                result.append(
                    MetaPageInfo(
                        slot: slot, isCurrent: false, error: "missing: the file ends before it", isEmpty: false,
                        formatVersion: 0, pageSize: 0, txnid: 0, pageCount: 0, catalogRoot: 0, catalogCount: 0,
                        freeRoot: 0, freeCount: 0, recordRun: 0, recordCount: 0, storedChecksum: 0, computedChecksum: 0))
                continue
            }
            let page = try readPages(slot, count: 1)
            defer { page.deallocate() }
            result.append(MetaPageInfo.decode(UnsafeRawPointer(page), slot: slot, pageSize: pageSize, path: path, current: current))
        }
        return result
    }

    private func describeMeta(_ m: MetaPageInfo) -> String {
        var lines = [
            "page \(m.slot): meta\(m.isCurrent ? " (current)" : ""), transaction \(m.txnid), "
                + (m.isEmpty ? "all zero" : m.isValid ? "valid" : "INVALID: \(m.error ?? "")")
        ]
        if m.isEmpty { return lines[0] }
        lines.append("  checksum        \(hex(m.storedChecksum)) (\(m.storedChecksum == m.computedChecksum ? "ok" : "computed \(hex(m.computedChecksum))"))")
        lines.append("  format version  \(m.formatVersion)")
        lines.append("  page size       \(m.pageSize)")
        lines.append("  page count      \(m.pageCount)")
        lines.append("  catalog         root \(m.catalogRoot), \(m.catalogCount) trees")
        lines.append("  free pages      root \(m.freeRoot), \(m.freeCount) chunks")
        if m.recordRun != 0 {
            lines.append("  commit record   \(m.recordCount) pages, listed in the run at page \(m.recordRun)")
        } else {
            lines.append("  commit record   \(m.recordCount) pages, inline")
            if m.isValid && m.recordCount > 0, let page = try? readPages(m.slot, count: 1) {
                defer { page.deallocate() }
                let shown = min(m.recordCount, 64)
                let width = m.formatVersion >= 2 ? 16 : 8
                let listed = (0..<shown).map { i -> String in
                    let entry = RecordEntry.load(UnsafeRawPointer(page) + MetaLayout.inlineRecord + width * i, version: m.formatVersion)
                    return entry.carried ? "\(entry.page)(carried)" : String(entry.page)
                }
                lines.append("    " + listed.joined(separator: " ") + (m.recordCount > shown ? " …" : ""))
            }
        }
        return lines.joined(separator: "\n")
    }

    private func describeNode(_ p: UnsafeRawPointer, pgno: UInt64, into lines: inout [String]) {
        let count = Int(p.u16(PageHeader.count))
        let upper = Int(p.u16(PageHeader.upper))
        let garbage = Int(p.u16(PageHeader.garbage))
        let node: Node
        do {
            node = try Node(p, pgno: pgno, pageSize: pageSize)
        } catch {
            lines.append("  slots \(count), entry area \(upper)..<\(pageSize), garbage \(garbage)")
            lines.append("  CORRUPT: \(error)")
            return
        }
        let used = node.usedBytes
        lines.append(
            "  slots \(count), entry area \(upper)..<\(pageSize), garbage \(garbage), used \(used) of \(pageSize) bytes (\(percent(Double(used) / Double(pageSize))))"
        )
        do { try node.validateAll() } catch { lines.append("  CORRUPT: \(error)") }
        for i in 0..<count {
            let offset = node.slot(i)
            var line = "  [\(i)] @\(offset)"
            do {
                let key = try node.key(i)
                if node.isLeaf {
                    line += " key \(preview(key)) (\(key.count) B)"
                    switch try node.value(i) {
                    case .inline(let value):
                        line += " value \(preview(value)) (\(value.count) B)"
                    case .overflow(let run, let length):
                        line += " value in overflow run at page \(run) (\(length) B)"
                    }
                } else {
                    line += " child \(try node.child(i))"
                    if let entries = try node.childCount(i) { line += " (\(entries) entr\(entries == 1 ? "y" : "ies"))" }
                    line += i == 0 && key.isEmpty ? " (keys below entry 1)" : " key \(preview(key)) (\(key.count) B)"
                }
            } catch {
                line += " CORRUPT: \(error)"
            }
            lines.append(line)
        }
    }

    /// "listed free: freed by transaction F, born B" when `n` is in the snapshot's free-page tree.
    private func freeListing(of n: UInt64, txn: ReadTransaction) -> String? {
        let cursor = Cursor(pages: txn.pages, root: txn.meta.free.root, owner: txn)
        do {
            var more = try cursor.first()
            while more {
                let freedBy = try FreeListFormat.decodeKey(cursor.key, page: 0)
                for entry in try FreeListFormat.decodeEntries(cursor.value, page: 0) where entry.page == n {
                    return "listed free: freed by transaction \(freedBy), written by transaction \(entry.born)"
                }
                more = try cursor.next()
            }
        } catch {
            return "free-page tree unreadable: \(error)"
        }
        return nil
    }
}

// MARK: - Formatting helpers

func pageTypeName(_ type: UInt8) -> String {
    switch type {
    case PageType.meta.rawValue: return "meta"
    case PageType.branch.rawValue: return "branch (format 2, uncounted)"
    case PageType.countedBranch.rawValue: return "branch"
    case PageType.leaf.rawValue: return "leaf"
    case PageType.overflow.rawValue: return "overflow"
    case PageType.commitRecord.rawValue: return "commit record"
    default: return "type \(type)"
    }
}

private let hexDigits = Array("0123456789abcdef".utf8)

func hex(_ value: UInt64) -> String {
    var chars: [UInt8] = Array("0x".utf8)
    for shift in stride(from: 60, through: 0, by: -4) { chars.append(hexDigits[Int((value >> UInt64(shift)) & 0xF)]) }
    return String(decoding: chars, as: UTF8.self)
}

/// A short rendering of bytes: quoted text when every byte is printable ASCII, hex otherwise;
/// at most `limit` bytes, then "…".
func preview(_ bytes: UnsafeRawBufferPointer, limit: Int = 32, forceHex: Bool = false) -> String {
    let shown = bytes.prefix(limit)
    let ellipsis = bytes.count > limit ? "…" : ""
    if !forceHex && !bytes.isEmpty && shown.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) {
        var text = ""
        for b in shown {
            if b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") { text.append("\\") }
            text.append(Character(Unicode.Scalar(b)))
        }
        return "\"" + text + "\"" + ellipsis
    }
    if bytes.isEmpty { return "(empty)" }
    var chars: [UInt8] = Array("0x".utf8)
    for b in shown {
        chars.append(hexDigits[Int(b >> 4)])
        chars.append(hexDigits[Int(b & 0xF)])
    }
    return String(decoding: chars, as: UTF8.self) + ellipsis
}

/// "87.3%".
func percent(_ fraction: Double) -> String {
    guard fraction.isFinite else { return "-" }
    let tenths = Int((fraction * 1000).rounded())
    return "\(tenths / 10).\(tenths % 10)%"
}

extension MetaPageInfo {
    /// Decodes a meta page copy; a page that does not verify still shows its raw fields.
    static func decode(_ p: UnsafeRawPointer, slot: UInt64, pageSize: Int, path: String, current: UInt64) -> MetaPageInfo {
        let fields = Meta.fields(p)
        var error: String?
        do {
            _ = try Meta.decode(p, slot: slot, pageSize: pageSize, path: path)
        } catch let e as StorageError {
            if case .corrupt(_, let reason) = e { error = reason } else { error = "\(e)" }
        } catch let e {
            error = "\(e)"
        }
        let isEmpty = UnsafeRawBufferPointer(start: p, count: pageSize).allSatisfy { $0 == 0 }
        return MetaPageInfo(
            slot: slot, isCurrent: slot == current % 2, error: isEmpty ? "all zero" : error, isEmpty: isEmpty,
            formatVersion: p.u32(MetaLayout.formatVersion), pageSize: fields.pageSize, txnid: fields.txnid,
            pageCount: fields.pageCount, catalogRoot: fields.catalog.root, catalogCount: fields.catalog.count,
            freeRoot: fields.free.root, freeCount: fields.free.count, recordRun: fields.recordRun,
            recordCount: fields.recordCount, storedChecksum: p.u64(PageHeader.checksum),
            computedChecksum: pageChecksum(p, byteCount: pageSize))
    }
}
