// Inspection: a full consistency check of the newest snapshot, per-tree statistics, and one page
// decoded for humans. This is what `strata check`, `strata trees` and `strata page` print.
//
// Everything here reads a file that may be corrupt. It goes through the engine's throwing,
// bounds-checked accessors (`Node`, `PageMap`, `Meta.decode`, `FreeListFormat`), never follows a
// page reference outside the file, never visits a page twice (so reference cycles end), and turns
// every error into a reported problem instead of stopping or crashing.

/// One thing `Store.check()` found wrong, at a page when the problem belongs to one.
///
/// ```swift
/// for problem in try store.check().problems { print(problem) }   // "page 812: …"
/// ```
public struct CheckProblem: Sendable, Equatable, CustomStringConvertible {
    /// The page the problem was found at, or nil for a file-wide problem.
    public var page: UInt64?
    /// What is wrong, in one line.
    public var message: String

    /// A problem at `page` (nil: the whole file), for tools that report their own findings the
    /// same way.
    public init(page: UInt64?, message: String) {
        self.page = page
        self.message = message
    }

    public var description: String {
        if let page { return "page \(page): \(message)" }
        return message
    }
}

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

/// What kind of tree a `TreeStats` describes.
///
/// ```swift
/// let userTrees = try store.treeStats().filter { $0.kind == .user }
/// ```
public enum TreeKind: Sendable, Equatable {
    /// A named tree of the user's keys and values.
    case user
    /// The internal catalog: tree names to their roots and counts.
    case catalog
    /// The internal free-page tree.
    case freePages
}

/// Shape and space use of one tree.
///
/// ```swift
/// for tree in try store.treeStats() where tree.kind == .user {
///     print(tree.name, tree.depth, tree.leafPages, tree.entries, tree.fillFactor)
/// }
/// ```
public struct TreeStats: Sendable, Equatable {
    /// The tree's name; "(catalog)" and "(free pages)" for the internal trees.
    public var name: String
    /// Whether this is a named tree, the catalog or the free-page tree.
    public var kind: TreeKind
    /// Root page, 0 for an empty tree.
    public var root: UInt64
    /// Levels from root to leaf: 0 for an empty tree, 1 for a tree that is a single leaf.
    public var depth: Int
    /// Branch (interior) pages.
    public var branchPages: Int
    /// Leaf pages.
    public var leafPages: Int
    /// Pages of the overflow runs that hold the tree's large values.
    public var overflowPages: Int
    /// Entries found in the leaves.
    public var entries: UInt64
    /// Bytes in use in the leaf pages: headers, slots and live entries.
    public var leafBytesUsed: Int
    /// The file's page size, for `fillFactor`.
    public var pageSize: Int

    /// An empty tree's statistics, to be filled in by a walk of its pages.
    public init(name: String, kind: TreeKind, pageSize: Int) {
        self.name = name
        self.kind = kind
        self.root = 0
        self.depth = 0
        self.branchPages = 0
        self.leafPages = 0
        self.overflowPages = 0
        self.entries = 0
        self.leafBytesUsed = 0
        self.pageSize = pageSize
    }

    /// Every page the tree occupies.
    public var totalPages: Int { branchPages + leafPages + overflowPages }

    /// Used bytes of the leaves over their capacity (leaf pages × page size), 0 for an empty tree.
    public var fillFactor: Double {
        leafPages == 0 ? 0 : Double(leafBytesUsed) / Double(leafPages * pageSize)
    }
}

/// How `Store.check()` accounted for the pages of the file.
///
/// ```swift
/// let pages = try store.check().pages
/// print("\(pages.trees) tree pages, \(pages.free) free, \(pages.leaked) leaked of \(pages.total)")
/// ```
public struct PageCounts: Sendable, Equatable {
    /// Pages 0 and 1.
    public var meta = 0
    /// Branch and leaf pages of the catalog tree.
    public var catalog = 0
    /// Branch and leaf pages of the named trees.
    public var trees = 0
    /// Pages of overflow runs (of any tree).
    public var overflow = 0
    /// Branch and leaf pages of the free-page tree.
    public var freeTree = 0
    /// Pages of the newest commit's record run.
    public var commitRecord = 0
    /// Pages listed in the free-page tree.
    public var free = 0
    /// Pages below the page count that are neither used nor listed free.
    public var leaked = 0

    /// No pages counted yet.
    public init() {}

    /// Pages accounted for, leaked ones included.
    public var total: Int { meta + catalog + trees + overflow + freeTree + commitRecord + free + leaked }
}

/// The result of `Store.check()`.
///
/// ```swift
/// let report = try store.check()
/// if !report.isOK { report.problems.forEach { print($0) } }
/// ```
public struct CheckReport: Sendable, Equatable {
    /// The snapshot that was checked.
    public var txnid: UInt64
    /// The file's page size.
    public var pageSize: Int
    /// Pages the snapshot's meta page accounts for.
    public var pageCount: UInt64
    /// Bytes of the file.
    public var fileSize: UInt64
    /// Both meta pages, slot 0 first.
    public var metas: [MetaPageInfo]
    /// What every page of the file was found to be.
    public var pages: PageCounts
    /// Every named tree, then the catalog and the free-page tree.
    public var trees: [TreeStats]
    /// What is wrong, in the order found (at most `maxProblems` of them).
    public var problems: [CheckProblem]
    /// Problems found beyond `maxProblems` and left out of `problems`.
    public var omittedProblems: Int
    /// Things worth knowing that do not make the file inconsistent (a torn newest commit that open
    /// ignored, an empty meta slot).
    public var warnings: [CheckProblem]

    /// Whether the check found nothing wrong.
    public var isOK: Bool { problems.isEmpty && omittedProblems == 0 }
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
    /// Walks everything the newest commit references and reports what is inconsistent: both meta
    /// pages and the newest commit's record, the catalog, every tree, the free-page tree, overflow
    /// runs and the commit-record run. For every reachable page it verifies the checksum, the page
    /// number in its header, key order inside the page and against its parent's separators, and
    /// uniform leaf depth; each tree's entry count must match its catalog entry; and every page in
    /// `2 ..< pageCount` must be used exactly once or listed free exactly once.
    ///
    /// The check runs on a read snapshot, so writers go on meanwhile. A corrupt file yields
    /// problems, never a crash; the call itself throws only when no snapshot can be begun, or, on a
    /// read-only store, when a writer in another process changed the file under it
    /// (`StorageError.fileChangedDuringRead`: check again). A newest commit that a crash left
    /// incomplete, which opening ignored, is not a problem: `warnings` says so (see `metaNotes()`).
    ///
    /// ```swift
    /// let report = try store.check()
    /// if !report.isOK {
    ///     for problem in report.problems { print(problem) }   // "page 57: checksum mismatch ..."
    /// }
    /// ```
    public func check(maxProblems: Int = 1000) throws -> CheckReport {
        try read { txn in try Inspector(store: self, txn: txn, verify: true, maxProblems: maxProblems).check() }
    }

    /// Depth, pages, entries and leaf fill of every named tree (in name order), followed by the
    /// internal catalog (`kind == .catalog`) and free-page tree (`kind == .freePages`).
    /// Checksums and recorded entry counts are not verified (that is `check()`'s job); a
    /// structural error (a bad page, keys out of order, a page reached twice) throws
    /// `StorageError.corrupt`.
    ///
    /// ```swift
    /// for tree in try store.treeStats() {
    ///     print("\(tree.name): \(tree.entries) entries in \(tree.totalPages) pages")
    /// }
    /// ```
    public func treeStats() throws -> [TreeStats] {
        try read { txn in
            let inspector = try Inspector(store: self, txn: txn, verify: false, maxProblems: 1)
            let trees = inspector.walkAllTrees()
            if let problem = inspector.problems.first {
                throw StorageError.corrupt(page: problem.page ?? 0, reason: problem.message)
            }
            return trees
        }
    }

    /// Both meta pages, decoded, with which one the newest snapshot uses.
    ///
    /// ```swift
    /// let current = try store.metaPages().first { $0.isCurrent }
    /// print(current?.formatVersion ?? 0)
    /// ```
    public func metaPages() throws -> [MetaPageInfo] {
        try read { txn in try readMetaPages(current: txn.txnid) }
    }

    /// What the meta pages say about commits a reader does not see, as `check()` reports them in
    /// `CheckReport.warnings`: a newest commit that a crash interrupted (its meta page torn, or its
    /// pages not all written), which opening ignored in favour of the commit before; a meta page
    /// that does not verify; an all-zero meta slot. None of these makes the file inconsistent.
    /// Empty for a file whose last commit completed.
    ///
    /// ```swift
    /// for note in try store.metaNotes() { print("note:", note) }
    /// // note: page 1: newest commit 7 was not completed (meta page checksum mismatch); the file opens at commit 6
    /// ```
    public func metaNotes() throws -> [CheckProblem] {
        try read { txn in
            Inspector.otherMetaNotes(try readMetaPages(current: txn.txnid), current: txn.txnid, latest: env.readers.latest)
        }
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
        try read { txn in try describePage(n, txn: txn) }
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
            if named != n { lines.append("  HEADER NAMES PAGE \(named): a misdirected write, or a page inside an overflow run (only a run's first page has a header)") }
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
            lines.append("  overflow run of \(runPages) page\(runPages == 1 ? "" : "s") (\(n)...\(n + UInt64(runPages) - 1)), holds up to \(runPages * pageSize - PageHeader.size) value bytes")
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
                listed.append(String(entry.page))
            }
            lines.append("  lists (first page): " + (listed.count > 64 ? listed[0..<64].joined(separator: " ") + " …" : listed.joined(separator: " ")))
        } else {
            lines.append("  unknown page type \(type); header bytes " + preview(UnsafeRawBufferPointer(start: p, count: PageHeader.size), limit: 32, forceHex: true))
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
                result.append(MetaPageInfo(slot: slot, isCurrent: false, error: "missing: the file ends before it", isEmpty: false,
                                           formatVersion: 0, pageSize: 0, txnid: 0, pageCount: 0, catalogRoot: 0, catalogCount: 0,
                                           freeRoot: 0, freeCount: 0, recordRun: 0, recordCount: 0, storedChecksum: 0, computedChecksum: 0))
                continue
            }
            let page = try readPages(slot, count: 1)
            defer { page.deallocate() }
            result.append(Inspector.metaInfo(UnsafeRawPointer(page), slot: slot, pageSize: pageSize, path: path, current: current))
        }
        return result
    }

    private func describeMeta(_ m: MetaPageInfo) -> String {
        var lines = ["page \(m.slot): meta\(m.isCurrent ? " (current)" : ""), transaction \(m.txnid), " +
                     (m.isEmpty ? "all zero" : m.isValid ? "valid" : "INVALID: \(m.error ?? "")")]
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
                let listed = (0..<shown).map { String(UnsafeRawPointer(page).u64(MetaLayout.inlineRecord + width * $0)) }
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
        lines.append("  slots \(count), entry area \(upper)..<\(pageSize), garbage \(garbage), used \(used) of \(pageSize) bytes (\(percent(Double(used) / Double(pageSize))))")
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

// MARK: - The walker

/// Walks one snapshot's trees, marking which page is used by what.
final class Inspector {
    private let store: Store
    private let txn: ReadTransaction
    private let meta: Meta
    private let pages: PageMap
    private let pageSize: Int
    private let pageCount: UInt64
    /// Pages the file really holds, at most `pageCount`: nothing at or past it is read.
    private let readable: UInt64
    private let fileSize: UInt64
    private let verify: Bool
    private let maxProblems: Int
    private let maxKey: Int
    /// Who uses each page below `readable`: 0 nobody, else an owner code.
    private var owners: [UInt32]
    private(set) var problems: [CheckProblem] = []
    private var omitted = 0
    private var warnings: [CheckProblem] = []
    /// Tree names by slot: 0 the catalog, 1 the free-page tree, 2... the named trees.
    private var slotNames = ["(catalog)", "(free pages)"]
    private var freeChunks: [(freedBy: UInt64, entries: [FreeEntry], leaf: PageNo)] = []

    private static let metaOwner: UInt32 = 1
    private static let recordOwner: UInt32 = 2
    private static let freeOwner: UInt32 = 3
    private static func nodeOwner(_ slot: Int) -> UInt32 { UInt32(truncatingIfNeeded: 8 + 2 * slot) }
    private static func overflowOwner(_ slot: Int) -> UInt32 { UInt32(truncatingIfNeeded: 9 + 2 * slot) }

    init(store: Store, txn: ReadTransaction, verify: Bool, maxProblems: Int) throws {
        self.store = store
        self.txn = txn
        self.meta = txn.meta
        self.pageSize = txn.meta.pageSize
        self.pageCount = txn.meta.pageCount
        self.fileSize = try store.env.file.size()
        self.readable = min(txn.meta.pageCount, fileSize / UInt64(txn.meta.pageSize))
        // Reads through the snapshot's map, limited to pages the file holds (a map access past
        // the end of the file would fault).
        self.pages = PageMap(base: txn.pages.base, pageSize: txn.meta.pageSize, limit: readable, isWrite: false)
        self.verify = verify
        self.maxProblems = max(maxProblems, 1)
        self.maxKey = Limits.maxKeySize(pageSize: txn.meta.pageSize)
        self.owners = [UInt32](repeating: 0, count: Int(readable))
        if readable > 0 { owners[0] = Inspector.metaOwner }
        if readable > 1 { owners[1] = Inspector.metaOwner }
    }

    // MARK: Reporting

    private func problem(_ page: UInt64?, _ message: String) {
        if problems.count < maxProblems {
            problems.append(CheckProblem(page: page, message: message))
        } else {
            omitted += 1
        }
    }

    private func ownerName(_ code: UInt32) -> String {
        switch code {
        case 0: return "nothing"
        case Inspector.metaOwner: return "a meta page"
        case Inspector.recordOwner: return "the commit record"
        case Inspector.freeOwner: return "a free page"
        default:
            let slot = Int((code - 8) / 2)
            let isOverflow = (code - 8) % 2 == 1
            let tree: String
            switch slot {
            case 0: tree = "the catalog"
            case 1: tree = "the free-page tree"
            default: tree = slot < slotNames.count ? "tree '\(slotNames[slot])'" : "tree #\(slot)"
            }
            return isOverflow ? "an overflow page of \(tree)" : "a page of \(tree)"
        }
    }

    /// Marks `pgno` as used by `code`. False (and a problem) when something already uses it.
    private func claim(_ pgno: UInt64, _ code: UInt32, from: UInt64?) -> Bool {
        guard pgno < readable else { return false }
        let existing = owners[Int(pgno)]
        if existing == 0 {
            owners[Int(pgno)] = code
            return true
        }
        if !verify { // treeStats: only structure matters; a revisit is still a cycle or a shared page
            problem(pgno, "reached twice (as \(ownerName(code)) and as \(ownerName(existing)))")
            return false
        }
        if code == Inspector.freeOwner && existing == Inspector.freeOwner {
            problem(pgno, "listed free twice in the free-page tree")
        } else if code == Inspector.freeOwner {
            problem(pgno, "listed free but used as \(ownerName(existing))")
        } else if existing == Inspector.freeOwner {
            problem(pgno, "used as \(ownerName(code)) but listed free")
        } else {
            problem(pgno, "used twice: as \(ownerName(existing)) and as \(ownerName(code))" + (from.map { " (referenced from page \($0))" } ?? ""))
        }
        return false
    }

    /// Whether a reference to `count` pages at `pgno` stays inside the file. Reports when not.
    private func inBounds(_ pgno: UInt64, count: UInt64 = 1, from: UInt64?, what: String) -> Bool {
        if pgno < 2 || pgno >= pageCount || count > pageCount - pgno {
            let span = count == 1 ? "page \(pgno)" : "pages \(pgno)..<\(pgno &+ count)"
            problem(from ?? pgno, "\(what) refers to \(span), outside 2..<\(pageCount)")
            return false
        }
        if pgno + count > readable {
            problem(pgno, "\(what) lies past the end of the file (\(readable) whole pages)")
            return false
        }
        return true
    }

    /// Page number, transaction id and (when verifying) checksum of a page or run inside the file.
    private func checkHeader(_ pgno: UInt64, run: Int, expectedTxn: UInt64? = nil) {
        let p = pages.base + Int(pgno) * pageSize
        let named = p.u64(PageHeader.pageNumber)
        if named != pgno { problem(pgno, "header names page \(named) (a misdirected write?)") }
        let written = p.u64(PageHeader.txnid)
        if let expectedTxn, written != expectedTxn {
            problem(pgno, "written by transaction \(written), expected \(expectedTxn)")
        } else if written > meta.txnid {
            problem(pgno, "written by transaction \(written), newer than the snapshot's \(meta.txnid)")
        }
        if verify {
            let computed = pageChecksum(p, byteCount: run * pageSize)
            let stored = p.u64(PageHeader.checksum)
            if computed != stored {
                problem(pgno, "checksum mismatch (stored \(hex(stored)), computed \(hex(computed)))" + (run > 1 ? " over the \(run)-page run" : ""))
            }
        }
    }

    // MARK: Trees

    private struct Walk {
        let slot: Int
        var stats: TreeStats
        var leafDepth: Int?
        let keyLengths: ClosedRange<Int>
    }

    /// Walks the tree at `root`, calling `leaf` with each entry's key, its value (nil when it
    /// cannot be read) and its leaf page.
    private func walkTree(slot: Int, name: String, kind: TreeKind, root: PageNo, keyLengths: ClosedRange<Int>,
                          leaf visitor: (UnsafeRawBufferPointer, UnsafeRawBufferPointer?, PageNo) -> Void) -> TreeStats {
        var walk = Walk(slot: slot, stats: TreeStats(name: name, kind: kind, pageSize: pageSize), leafDepth: nil, keyLengths: keyLengths)
        walk.stats.root = root
        if root != 0 {
            visit(root, from: nil, depth: 0, lower: nil, upper: nil, walk: &walk, leaf: visitor)
        }
        walk.stats.depth = (walk.leafDepth ?? -1) + 1
        return walk.stats
    }

    /// Checks the subtree at `pgno` and returns how many entries it holds, nil when a problem
    /// left it uncounted (so a parent's recorded count is not compared with a partial one).
    @discardableResult
    private func visit(_ pgno: PageNo, from parent: PageNo?, depth: Int,
                       lower: UnsafeRawBufferPointer?, upper: UnsafeRawBufferPointer?, walk: inout Walk,
                       leaf visitor: (UnsafeRawBufferPointer, UnsafeRawBufferPointer?, PageNo) -> Void) -> UInt64? {
        let what = parent == nil ? "the root of \(slotLabel(walk.slot))" : "a child pointer"
        guard inBounds(pgno, from: parent, what: what) else { return nil }
        if depth >= maxTreeDepth {
            problem(pgno, "\(slotLabel(walk.slot)) is deeper than \(maxTreeDepth) levels")
            return nil
        }
        guard claim(pgno, Inspector.nodeOwner(walk.slot), from: parent) else { return nil }
        checkHeader(pgno, run: 1)
        let node: Node
        do {
            node = try pages.node(pgno)
            try node.validateAll()
        } catch {
            problem(pgno, reason(error))
            return nil
        }
        if node.isLeaf {
            walk.stats.leafPages += 1
            walk.stats.leafBytesUsed += node.usedBytes
            if let expected = walk.leafDepth {
                if expected != depth { problem(pgno, "leaf at depth \(depth) of \(slotLabel(walk.slot)), other leaves at depth \(expected)") }
            } else {
                walk.leafDepth = depth
            }
            if node.count == 0 {
                problem(pgno, parent == nil ? "empty root leaf (an empty tree has root 0)" : "empty leaf below a branch")
            }
        } else {
            walk.stats.branchPages += 1
            if !node.isCounted && meta.formatVersion >= 3 {
                problem(pgno, "an uncounted format-2 branch in a format-\(meta.formatVersion) file")
            }
        }

        var previous: UnsafeRawBufferPointer?
        var keys: [UnsafeRawBufferPointer] = []
        keys.reserveCapacity(node.count)
        for i in 0..<node.count {
            let key: UnsafeRawBufferPointer
            do { key = try node.key(i) } catch { problem(pgno, reason(error)); return nil }
            keys.append(key)
            if !node.isLeaf && i == 0 {
                if !key.isEmpty { problem(pgno, "entry 0 of a branch has a \(key.count)-byte key, expected none") }
                continue
            }
            if node.isLeaf && !walk.keyLengths.contains(key.count) {
                problem(pgno, "key \(i) is \(key.count) bytes, outside \(walk.keyLengths.lowerBound)...\(walk.keyLengths.upperBound)")
            }
            if let previous, compareBytes(previous, key) >= 0 {
                problem(pgno, "key \(i) \(preview(key)) is not above key \(i - 1) \(preview(previous))")
            }
            if let lower, compareBytes(key, lower) < 0 {
                problem(pgno, "key \(i) \(preview(key)) is below its parent's separator \(preview(lower))")
            }
            if let upper, compareBytes(key, upper) >= 0 {
                problem(pgno, "key \(i) \(preview(key)) is not below the next separator \(preview(upper))")
            }
            previous = key
        }

        if node.isLeaf {
            for i in 0..<node.count {
                walk.stats.entries += 1
                var value: UnsafeRawBufferPointer?
                do {
                    let stored = try node.value(i)
                    if case .overflow(let run, let length) = stored {
                        if checkOverflow(run, length: length, from: pgno, walk: &walk) {
                            value = try pages.overflow(run, length: length)
                        }
                    } else {
                        value = try pages.resolve(stored)
                    }
                } catch {
                    problem(pgno, reason(error))
                }
                visitor(keys[i], value, pgno)
            }
            return UInt64(node.count)
        }
        var total: UInt64? = 0
        for i in 0..<node.count {
            let child: PageNo
            do { child = try node.child(i) } catch { problem(pgno, reason(error)); total = nil; continue }
            let actual = visit(child, from: pgno, depth: depth + 1,
                               lower: i == 0 ? lower : keys[i],
                               upper: i + 1 < node.count ? keys[i + 1] : upper,
                               walk: &walk, leaf: visitor)
            guard let actual else { total = nil; continue }
            total = total.map { $0 &+ actual }
            if let recorded = try? node.childCount(i), recorded != actual {
                problem(pgno, "entry \(i) records \(recorded) entries below child \(child), which holds \(actual)")
            }
        }
        return total
    }

    /// Checks and claims an overflow run. True when its value can be read.
    private func checkOverflow(_ run: PageNo, length: Int, from leaf: PageNo, walk: inout Walk) -> Bool {
        guard inBounds(run, from: leaf, what: "an overflow reference") else { return false }
        let p = pages.base + Int(run) * pageSize
        let type = p.u8(PageHeader.type)
        if type != PageType.overflow.rawValue {
            problem(run, "expected an overflow page (referenced from page \(leaf)), found \(pageTypeName(type))")
            _ = claim(run, Inspector.overflowOwner(walk.slot), from: leaf)
            return false
        }
        let count = UInt64(p.u32(PageHeader.runPages))
        let expected = (PageHeader.size + length + pageSize - 1) / pageSize
        guard count > 0, inBounds(run, count: count, from: leaf, what: "an overflow run of \(count) pages") else {
            if count == 0 { problem(run, "overflow run of 0 pages") }
            _ = claim(run, Inspector.overflowOwner(walk.slot), from: leaf)
            return false
        }
        if Int(count) != expected {
            problem(run, "overflow run of \(count) pages for a \(length)-byte value, which needs \(expected)")
        }
        // Claim the whole run. A first page already claimed means the run was reached before
        // (and checked then); inside the run, report only the first conflict.
        let code = Inspector.overflowOwner(walk.slot)
        guard claim(run, code, from: leaf) else { return false }
        var conflictReported = false
        for page in (run + 1)..<(run + count) {
            if owners[Int(page)] == 0 {
                owners[Int(page)] = code
            } else if !conflictReported {
                _ = claim(page, code, from: leaf)
                conflictReported = true
            }
        }
        walk.stats.overflowPages += Int(count)
        checkHeader(run, run: Int(count))
        return Int(count) * pageSize >= PageHeader.size + length
    }

    private func slotLabel(_ slot: Int) -> String {
        switch slot {
        case 0: return "the catalog"
        case 1: return "the free-page tree"
        default: return slot < slotNames.count ? "tree '\(slotNames[slot])'" : "tree #\(slot)"
        }
    }

    /// The catalog, every named tree, and the free-page tree, with entry counts compared to what
    /// the meta page and the catalog record.
    func walkAllTrees() -> [TreeStats] {
        var catalogEntries: [(name: String, info: TreeInfo, leaf: PageNo)] = []
        let catalog = walkTree(slot: 0, name: "(catalog)", kind: .catalog, root: meta.catalog.root, keyLengths: 1...255) { key, value, leaf in
            let name = String(decoding: key, as: UTF8.self)
            guard name.utf8.elementsEqual(key) else {
                problem(leaf, "catalog key \(preview(key)) is not a UTF-8 tree name")
                return
            }
            guard let value else { return }
            do {
                catalogEntries.append((name, try TreeInfo.decode(value, name: name), leaf))
            } catch {
                problem(leaf, reason(error))
            }
        }
        if verify && catalog.entries != meta.catalog.count {
            problem(nil, "the catalog holds \(catalog.entries) trees but the meta page says \(meta.catalog.count)")
        }

        var result: [TreeStats] = []
        for entry in catalogEntries {
            let slot = slotNames.count
            slotNames.append(entry.name)
            if verify && (entry.info.root == 0) != (entry.info.count == 0) {
                problem(entry.leaf, "tree '\(entry.name)' has root \(entry.info.root) but \(entry.info.count) entries")
            }
            let stats = walkTree(slot: slot, name: entry.name, kind: .user, root: entry.info.root, keyLengths: 1...maxKey) { _, _, _ in }
            if verify && stats.entries != entry.info.count {
                problem(entry.info.root == 0 ? entry.leaf : entry.info.root,
                        "tree '\(entry.name)' holds \(stats.entries) entries but its catalog entry says \(entry.info.count)")
            }
            result.append(stats)
        }

        let freeTree = walkTree(slot: 1, name: "(free pages)", kind: .freePages, root: meta.free.root,
                                keyLengths: FreeListFormat.keySize...FreeListFormat.keySize) { key, value, leaf in
            guard let value else { return }
            do {
                let freedBy = try FreeListFormat.decodeKey(key, page: leaf)
                freeChunks.append((freedBy, try FreeListFormat.decodeEntries(value, page: leaf), leaf))
            } catch {
                problem(leaf, reason(error))
            }
        }
        if verify && freeTree.entries != meta.free.count {
            problem(nil, "the free-page tree holds \(freeTree.entries) chunks but the meta page says \(meta.free.count)")
        }
        result.append(catalog)
        result.append(freeTree)
        return result
    }

    // MARK: The full check

    func check() -> CheckReport {
        // Meta pages, read with pread into copies. A live writer may be writing one meta slot
        // (or, after two commits, the snapshot's own): a page that does not decode is read again
        // before it counts as damaged.
        var metas: [MetaPageInfo] = []
        do {
            metas = try store.readMetaPages(current: meta.txnid)
            if metas.contains(where: { !$0.isValid && !$0.isEmpty }) {
                metas = try store.readMetaPages(current: meta.txnid)
            }
        } catch {
            problem(nil, "meta pages unreadable: \(reason(error))")
        }
        checkMetas(metas, latest: store.env.readers.latest)

        if readable < pageCount {
            problem(nil, "the file holds \(fileSize) bytes (\(readable) pages) but the meta page accounts for \(pageCount) pages (truncated)")
        }

        let trees = walkAllTrees()
        checkFreeList()
        checkRecordRun()

        // Leaks: report runs of consecutive unaccounted pages as one problem.
        var counts = PageCounts()
        var leakStart: UInt64?
        func flushLeak(_ end: UInt64) {
            guard let start = leakStart else { return }
            if end - start == 1 {
                problem(start, "neither used nor listed free (leaked)")
            } else {
                problem(start, "pages \(start)...\(end - 1) are neither used nor listed free (leaked)")
            }
            leakStart = nil
        }
        for pgno in 0..<readable {
            let code = owners[Int(pgno)]
            switch code {
            case 0:
                if pgno >= 2 {
                    counts.leaked += 1
                    if leakStart == nil { leakStart = pgno }
                }
            case Inspector.metaOwner: counts.meta += 1
            case Inspector.recordOwner: counts.commitRecord += 1
            case Inspector.freeOwner: counts.free += 1
            default:
                let slot = (code - 8) / 2
                if (code - 8) % 2 == 1 {
                    counts.overflow += 1
                } else if slot == 0 {
                    counts.catalog += 1
                } else if slot == 1 {
                    counts.freeTree += 1
                } else {
                    counts.trees += 1
                }
            }
            if code != 0 { flushLeak(pgno) }
        }
        flushLeak(readable)

        return CheckReport(txnid: meta.txnid, pageSize: pageSize, pageCount: pageCount, fileSize: fileSize, metas: metas,
                           pages: counts, trees: trees, problems: problems, omittedProblems: omitted, warnings: warnings)
    }

    /// `latest` is the newest commit published after the metas were read: a meta newer than the
    /// snapshot and not newer than it was committed while the check ran.
    private func checkMetas(_ metas: [MetaPageInfo], latest: UInt64) {
        if latest != meta.txnid {
            warnings.append(CheckProblem(page: nil, message: "a writer committed transaction \(latest) while the check ran; it checked transaction \(meta.txnid)"))
        }
        warnings += Inspector.otherMetaNotes(metas, current: meta.txnid, latest: latest)
        for m in metas {
            if m.isCurrent {
                if let error = m.error {
                    // Unless a writer is rewriting it (two commits since the snapshot began).
                    if latest == meta.txnid { problem(m.slot, "the current meta page is invalid: \(error)") }
                    continue
                }
                if m.txnid != meta.txnid || m.pageCount != pageCount { continue }   // overwritten meanwhile
                if fileSize >= pageCount * UInt64(pageSize) {
                    // The decoded copy's fields (record count within bounds); the pages it
                    // names lie below the page count, which the map covers.
                    let decoded = Meta(txnid: m.txnid, pageSize: m.pageSize, pageCount: m.pageCount,
                                       catalog: TreeInfo(root: m.catalogRoot, count: m.catalogCount),
                                       free: TreeInfo(root: m.freeRoot, count: m.freeCount),
                                       recordRun: m.recordRun, recordCount: m.recordCount, formatVersion: m.formatVersion)
                    do {
                        try Recovery.verifyCommit(decoded, map: pages.base, pageSize: pageSize)
                    } catch {
                        // The record is read from the live slot, which a second commit made
                        // meanwhile rewrites.
                        if store.env.readers.latest > meta.txnid + 1 { continue }
                        problem(m.slot, "the newest commit (transaction \(meta.txnid)) does not verify: \(reason(error))")
                    }
                }
            }
        }
    }

    /// Notes on the meta page that is not the current one (`current` is the snapshot's commit,
    /// `latest` the newest published when the pages were read). It holds no commit a reader sees,
    /// so nothing wrong with it makes the file inconsistent, and a crash leaves it in any of these
    /// states: a commit after `current` whose meta page was torn (its checksum fails; the header
    /// may still be the previous occupant's if its first sector never reached the disk) or whose
    /// pages did not all reach the disk, or a slot a failed commit zeroed.
    static func otherMetaNotes(_ metas: [MetaPageInfo], current: UInt64, latest: UInt64) -> [CheckProblem] {
        var notes: [CheckProblem] = []
        for m in metas where !m.isCurrent {
            if m.isEmpty {
                notes.append(CheckProblem(page: m.slot, message: "meta page is all zero (a copy's unused slot, or spoiled by a failed commit)"))
            } else if let error = m.error {
                if latest != current { continue }   // a writer was writing it
                if m.txnid > current && m.txnid % 2 == m.slot {
                    notes.append(CheckProblem(page: m.slot, message: "newest commit \(m.txnid) was not completed (\(error)); the file opens at commit \(current)"))
                } else {
                    notes.append(CheckProblem(page: m.slot, message: "meta page does not verify (\(error)): a commit after \(current) torn by a crash, or damage to the meta page of an earlier commit; the file opens at commit \(current)"))
                }
            } else if m.txnid > latest {
                notes.append(CheckProblem(page: m.slot, message: "newest commit \(m.txnid) was not completed (its pages do not all verify, or it was never published); the file opens at commit \(current)"))
            }
        }
        return notes
    }

    private func checkFreeList() {
        for chunk in freeChunks {
            if chunk.freedBy > meta.txnid {
                problem(chunk.leaf, "free-list chunk of transaction \(chunk.freedBy), newer than the snapshot's \(meta.txnid)")
            }
            for entry in chunk.entries {
                if entry.page < 2 || entry.page >= pageCount {
                    problem(chunk.leaf, "the free list names page \(entry.page), outside 2..<\(pageCount)")
                    continue
                }
                if entry.born > chunk.freedBy {
                    problem(entry.page, "listed free by transaction \(chunk.freedBy) but written by the later transaction \(entry.born)")
                }
                _ = claim(entry.page, Inspector.freeOwner, from: chunk.leaf)
            }
        }
    }

    private func checkRecordRun() {
        let run = meta.recordRun
        if run == 0 { return }
        guard inBounds(run, from: meta.txnid % 2, what: "the meta page's commit record") else { return }
        let p = pages.base + Int(run) * pageSize
        let type = p.u8(PageHeader.type)
        let count = UInt64(p.u32(PageHeader.runPages))
        if type != PageType.commitRecord.rawValue {
            problem(run, "expected the commit record, found \(pageTypeName(type))")
            _ = claim(run, Inspector.recordOwner, from: nil)
            return
        }
        guard count > 0, inBounds(run, count: count, from: nil, what: "the commit record run of \(count) pages") else {
            if count == 0 { problem(run, "commit record run of 0 pages") }
            _ = claim(run, Inspector.recordOwner, from: nil)
            return
        }
        for page in run..<(run + count) { _ = claim(page, Inspector.recordOwner, from: nil) }
        checkHeader(run, run: Int(count), expectedTxn: meta.txnid)
        let capacity = (Int(count) * pageSize - PageHeader.size) / meta.recordEntrySize
        if meta.recordCount > capacity {
            problem(run, "the commit record lists \(meta.recordCount) pages but its run holds \(capacity)")
        }
    }

    private func reason(_ error: any Error) -> String {
        if let e = error as? StorageError, case .corrupt(_, let reason) = e { return reason }
        return "\(error)"
    }

    // MARK: Meta pages

    static func metaInfo(_ p: UnsafeRawPointer, slot: UInt64, pageSize: Int, path: String, current: UInt64) -> MetaPageInfo {
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
        return MetaPageInfo(slot: slot, isCurrent: slot == current % 2, error: isEmpty ? "all zero" : error, isEmpty: isEmpty,
                            formatVersion: p.u32(MetaLayout.formatVersion), pageSize: fields.pageSize, txnid: fields.txnid,
                            pageCount: fields.pageCount, catalogRoot: fields.catalog.root, catalogCount: fields.catalog.count,
                            freeRoot: fields.free.root, freeCount: fields.free.count, recordRun: fields.recordRun,
                            recordCount: fields.recordCount, storedChecksum: p.u64(PageHeader.checksum),
                            computedChecksum: pageChecksum(p, byteCount: pageSize))
    }
}
