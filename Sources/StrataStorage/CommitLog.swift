#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The commit log: a durable small commit syncs one contiguous append instead of its scattered pages.
//
// A commit writes its pages and meta page into the page file as always, but does not sync it: it
// appends a frame (a header page, an image of every page it wrote, and its meta page) to `NAME-log`
// and syncs that. A page copied from one an earlier frame of the generation wrote goes into the
// header as a patch against that page instead (LogPatch.swift): a one-object commit's frame is
// then most often one page. A sync of a few adjacent blocks the filesystem already has costs about half the
// sync of a dozen pages spread over the page file (FORMAT.md §3.2 has the figures).
//
// The frames since the page file was last synced form a generation. After a power loss, replaying
// every frame of the generation in order over the page file gives exactly the last frame's commit:
// every page written into the page file since that sync went through a frame (the last image of a
// page wins), and the pages written before it are on the disk. So the rules are about keeping it so:
//   - a frame extends a generation only when the commit builds on the generation's last frame, made
//     by this process (the chain); otherwise the page file is synced first and a new generation
//     starts at offset 0, with a new random salt;
//   - a durable commit that does not go through the log (`.double`, a spilled transaction, one too
//     large for a frame) first ends the generation: the page file is synced and the first frame
//     zeroed. Else a later replay would take the file back to the last frame over newer commits;
//   - a `.noSync` commit after the last frame leaves the generation (the replay of a power loss may
//     take the file back past it); one that is not after it starts a generation whose one frame is
//     the meta page of the commit it began from (`pin`), so that a power loss in the run of
//     `.noSync` commits it starts can always go back to that commit (RunPin.swift);
//   - recovery trusts a generation only if every valid meta page of the page file is one the
//     generation knew (the two at its start, or a frame's): a log left beside a replaced file is
//     ignored.

/// Byte offsets of a frame header (one page at the start of each frame), little-endian.
enum LogLayout {
    static let checksum = 0  // u64: XXH64 of the header's bytes 8..<pageSize, as a page's
    static let magic = 8  // u64
    static let salt = 16  // u64: the generation's, random, never 0
    static let txnid = 24  // u64: the commit's
    static let pageSize = 32  // u32
    static let count = 36  // u32: entries
    static let startMeta0 = 40  // u64: checksum of meta page 0 when the generation began
    static let startMeta1 = 48  // u64: checksum of meta page 1 when the generation began
    static let headerPages = 56  // u32: pages of this header (0 read as 1), which the checksum covers
    static let patchBytes = 60  // u32: bytes of patches after the entries (LogPatch.swift)
    static let entries = 64  // then `count` entries of `entrySize` bytes, then the patches
    static let entrySize = 24  // u64 page number, u32 pages, u32 kind (0 image, 1 patch), u64 the image's checksum

    /// Where the patches of a header with `entries` entries begin (8-byte aligned).
    static func patches(entries count: Int) -> Int { (entries + count * entrySize + 7) / 8 * 8 }

    /// "STRATLOG".
    static let magicValue: UInt64 = 0x474F_4C54_4152_5453

    static func capacity(pageSize: Int) -> Int { (pageSize - entries) / entrySize }
}

/// One entry of a frame: where an image goes in the page file and what it holds, and whether the
/// frame holds it as a patch (one page, rebuilt from its base page) rather than whole.
struct LogEntry: Equatable {
    var page: PageNo
    var pages: Int
    var checksum: UInt64
    var patch = false
}

/// The commit log of one read-write environment. `@unchecked Sendable`: the chain and the file are
/// touched only by the write transaction, which holds the environment's writer lock, by opening,
/// before the environment is shared, and by the environment's deinit, when nothing else holds it.
final class CommitLog: @unchecked Sendable {
    let path: String
    let pageSize: Int
    private let wrap: ((FileIO) -> FileIO)?
    private var file: FileIO?
    /// Set once the log cannot be used (not creatable, or the name holds another file): commits
    /// then sync the page file, as they did before the log.
    private var unusable = false
    /// This process's generation: its salt, the commit of its last frame (0: none), where the
    /// next frame goes, and how many bytes of the file are written (frames or zeros).
    private var salt: UInt64 = 0
    private var lastTxnid: UInt64 = 0
    private var next: UInt64 = 0
    private var written: UInt64 = 0
    /// The last commit this process made (through the log or not).
    private var lastOwnCommit: UInt64 = 0
    /// Pages the `.noSync` commits since the last frame freed that its commit sees: the pin holds
    /// them (`pinned`; RunPin.swift ends the pin when they are many).
    var heldByPin = 0
    /// The commit this process's generation began from: the frames' patches are made only against
    /// pages the commits after it wrote (`WriteTransaction.patchBases`).
    private(set) var startTxnid: UInt64 = 0
    /// The bytes of the images the generation's frames hold, patched ones counted whole.
    private var imageBytes: UInt64 = 0
    /// The checksum of the last image of each page the generation's frames hold (a page of a
    /// longer run: none), which is the image a replay rebuilds a patch on.
    private var loggedImages: [PageNo: UInt64] = [:]

    /// Whether the page file's page at `pgno` (`bytes`, through the map) is the last image of that
    /// page the generation's frames hold, so that a patch against it rebuilds on replay. Not every
    /// page sealed by a commit of the generation is: a commit that failed, or was killed, before
    /// its frame leaves pages sealed with the transaction id the next attempt takes again (found by
    /// the review of 2026-12-06).
    func holdsImage(of pgno: PageNo, _ bytes: UnsafeRawPointer) -> Bool {
        loggedImages[pgno].map { $0 == bytes.u64(PageHeader.checksum) } ?? false
    }

    /// The log's largest size: a full log starts a new generation, which syncs the page file.
    static let capacity: UInt64 = 16 << 20
    /// The log grows by written zeros, like the page file (Commit.swift, `growFile`).
    static let growthStep: UInt64 = 1 << 20

    /// The log of the page file at `pagePath` (canonical, as the lock file's).
    static func path(for pagePath: String) -> String { LockFileName.canonical(pagePath) + "-log" }

    init(pagePath: String, pageSize: Int, wrap: ((FileIO) -> FileIO)?) {
        self.path = Self.path(for: pagePath)
        self.pageSize = pageSize
        self.wrap = wrap
        self.metaCopies = .allocate(byteCount: 2 * pageSize, alignment: 16)
    }

    deinit { metaCopies.deallocate() }

    /// The meta pages of this process's last two frames, by slot, and their commits: a frame's
    /// meta page is logged as a patch against the one two commits before it (same slot), when that
    /// is a frame of the generation. Kept here rather than read from the page file, where a failed
    /// commit may have spoiled the slot since.
    private let metaCopies: UnsafeMutableRawPointer
    private var metaCopyTxnids: (UInt64, UInt64) = (0, 0)

    /// Whether a commit of `entries` images totalling `pages` pages fits in one frame.
    func accepts(entries: Int, pages: Int) -> Bool {
        if unusable || entries + 1 > LogLayout.capacity(pageSize: pageSize) { return false }
        return frameBytes(pages: pages) <= Self.capacity / 4
    }

    /// The bytes of a frame holding `pages` pages of images whole: those, its header and the meta
    /// page. With patches it is smaller (each patch takes at most half of the page it replaces), so
    /// this bounds every frame of such a commit.
    func frameBytes(pages: Int) -> UInt64 { UInt64((pages + 2) * pageSize) }

    /// Readies the log for the frame of a commit built on `base`, with `pages` pages of images; false
    /// when there is no log to be had (the commit then syncs the page file). A commit that does
    /// not extend this process's generation, or whose frame does not fit, starts a new one: the
    /// page file is synced first. Called before the commit writes anything, so that this sync
    /// never makes the commit itself durable before its frame is.
    func prepare(base: UInt64, pages: Int, pageFile: FileIO) throws -> Bool {
        guard let log = try opened(create: true) else { return false }
        // Another process may have ended this generation since (a transaction of its own that was
        // not pinned, which then committed nothing): frames appended to it would never be read.
        // A replay rebuilds every image of the generation in memory (LogReplay.chain): patched or
        // not, they stay within the log's capacity, as when frames held them whole.
        let bytes = frameBytes(pages: pages)
        var extends = lastTxnid != 0 && lastTxnid == base && next + bytes <= Self.capacity && imageBytes + bytes <= Self.capacity
        if extends { extends = try holdsOwnGeneration(log) }
        if !extends { try begin(base: base, pageFile: pageFile) }
        return true
    }

    /// Appends the frame of commit `txnid` after `prepare`, and syncs the log. `images` are the
    /// commit's page runs and `meta` its meta page, all written to the page file already. `bases`
    /// maps a page of `images`, or the meta page's slot, to the page it was copied from and that
    /// page's bytes, when an earlier frame of the generation wrote it (`patchBases`): the page is
    /// then logged as a patch when that is smaller (LogPatch.swift). On any error the chain is
    /// broken, so the next frame starts a new generation.
    func append(
        txnid: UInt64, images: [(PageNo, UnsafeRawBufferPointer)], bases: [PageNo: (page: PageNo, bytes: UnsafeRawPointer)] = [:],
        meta: UnsafeRawBufferPointer
    ) throws {
        do {
            guard let log = file else { throw StorageError.internalError("commit log appended to before it was prepared") }
            let all = images + [(txnid % 2, meta)]
            let slot = Int(txnid % 2)
            var bases = bases
            if txnid >= 2, txnid - 2 > startTxnid, (slot == 0 ? metaCopyTxnids.0 : metaCopyTxnids.1) == txnid - 2 {
                bases[txnid % 2] = (txnid % 2, UnsafeRawPointer(metaCopies + slot * pageSize))
            }
            // The patches, which the header carries after its entries (and pages of its own when
            // they do not fit in one).
            var area: [UInt8] = []
            var patched = [Bool](repeating: false, count: all.count)
            if !bases.isEmpty {
                area.reserveCapacity(pageSize)
                for (i, (page, bytes)) in all.enumerated() where bytes.count == pageSize {
                    guard let base = bases[page] else { continue }
                    patched[i] = LogPatch.append(page: bytes.baseAddress!, base: base.bytes, basePage: base.page, pageSize: pageSize, to: &area)
                }
            }
            let areaStart = LogLayout.patches(entries: all.count)
            let headerPages = (areaStart + area.count + pageSize - 1) / pageSize
            let header = UnsafeMutableRawPointer.allocate(byteCount: headerPages * pageSize, alignment: 4096)
            defer { header.deallocate() }
            header.initializeMemory(as: UInt8.self, repeating: 0, count: headerPages * pageSize)
            header.setU64(LogLayout.magic, LogLayout.magicValue)
            header.setU64(LogLayout.salt, salt)
            header.setU64(LogLayout.txnid, txnid)
            header.setU32(LogLayout.pageSize, UInt32(pageSize))
            header.setU32(LogLayout.count, UInt32(all.count))
            header.setU64(LogLayout.startMeta0, startChecksums.0)
            header.setU64(LogLayout.startMeta1, startChecksums.1)
            header.setU32(LogLayout.headerPages, UInt32(headerPages))
            header.setU32(LogLayout.patchBytes, UInt32(area.count))
            area.withUnsafeBytes { if $0.count > 0 { (header + areaStart).copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
            var buffers = [UnsafeRawBufferPointer(start: header, count: headerPages * pageSize)]
            buffers.reserveCapacity(all.count + 1)
            var storedPages = 0
            for (i, (page, bytes)) in all.enumerated() {
                let entry = LogEntry(page: page, pages: bytes.count / pageSize, checksum: bytes.baseAddress!.u64(PageHeader.checksum), patch: patched[i])
                Self.store(entry, into: header, at: i)
                if !patched[i] {
                    buffers.append(bytes)
                    storedPages += entry.pages
                }
            }
            header.setU64(LogLayout.checksum, pageChecksum(UnsafeRawPointer(header), byteCount: headerPages * pageSize))
            // Where the frame passes the written end, zeros after it up to the next growth step,
            // in the same durable write: the blocks are then allocated and on the disk, and later
            // frames (later generations' too) overwrite them in place. A durable write into blocks
            // the filesystem must still allocate, or over zeros still in the page cache, would pay
            // for that in its sync.
            let end = next + UInt64((headerPages + storedPages) * pageSize)
            var grownTo = written
            if end > written {
                // (Frames follow each other from offset 0 and `written` never falls below the end
                // of the last, so nothing unwritten lies before this one.)
                grownTo = min(Self.capacity, (end + Self.growthStep - 1) / Self.growthStep * Self.growthStep)
                let zeros = ZeroBlock.shared.bytes
                var at = end
                while at < grownTo {
                    let count = Int(min(UInt64(zeros.count), grownTo - at))
                    buffers.append(UnsafeRawBufferPointer(rebasing: zeros[0..<count]))
                    at += UInt64(count)
                }
            }
            try log.writeDurably(buffers, at: next)
            written = grownTo
            (metaCopies + slot * pageSize).copyMemory(from: meta.baseAddress!, byteCount: pageSize)
            if slot == 0 { metaCopyTxnids.0 = txnid } else { metaCopyTxnids.1 = txnid }
            for (page, bytes) in images {
                if bytes.count == pageSize {
                    loggedImages[page] = bytes.baseAddress!.u64(PageHeader.checksum)
                } else {
                    for k in 0..<UInt64(bytes.count / pageSize) { loggedImages[page + k] = nil }
                }
            }
            lastTxnid = txnid
            heldByPin = 0
            next = end
            imageBytes += UInt64(all.reduce(0) { $0 + $1.1.count })
        } catch {
            // The frame may be on the disk in part or in whole: spoil its header (best effort), so
            // that a replay stops before a commit that reported failure.
            if let file { try? Self.spoilFrame(file, at: next, pageSize: pageSize) }
            lastTxnid = 0
            throw error
        }
    }

    /// Starts a generation whose one frame is commit `base`'s meta page (no page images): a
    /// replay after a power loss can then always bring `base` back. Called before the first commit
    /// of a run of `.noSync` commits writes anything, when `base` is not already the last frame
    /// (a durable commit too large for a frame, another process's, the first after opening): each
    /// commit of the run writes one of the two meta slots, so from the run's second commit on the
    /// slot that held `base` may hold a commit whose pages did not all reach the disk, and the
    /// frame is then the only copy of `base` a power loss cannot take. The page file is synced
    /// first (`begin`), so `base`'s pages are on the disk; the pin (`pinned`) keeps the run off
    /// them. Costs one small append and a sync of the log (and a sync of the page file when this
    /// process has written to it since its last). False when there is no log to be had.
    ///
    /// ```swift
    /// if durability == .noSync, let log = env.commitLog { basePinned = try log.pin(base: base.txnid, meta: bytes, pageFile: file) }
    /// ```
    func pin(base: UInt64, meta: UnsafeRawBufferPointer, pageFile: FileIO) throws -> Bool {
        guard try opened(create: true) != nil else { return false }
        try begin(base: base, pageFile: pageFile)
        try append(txnid: base, images: [], meta: meta)
        lastOwnCommit = base
        return true
    }

    /// Notes a commit this process made, through the log or not (see `pinned`), or, when it
    /// opened the file alone and synced it, the commit it found.
    func committed(_ txnid: UInt64) { lastOwnCommit = txnid }

    /// The commit a transaction built on `base` must keep whole, or nil: the last frame of this
    /// process's generation, while only this process's `.noSync` commits came after it. A replay
    /// after a power loss takes the file back to that frame's commit, so no page it can see may be
    /// overwritten until the generation ends (the pages `.noSync` commits free stay unused, as if
    /// a snapshot of it were open). Such a `.noSync` commit then ends nothing and syncs nothing.
    func pinned(base: UInt64) -> UInt64? {
        lastTxnid != 0 && base == lastOwnCommit ? lastTxnid : nil
    }

    /// `pinned`, for a transaction about to begin: also asks the log whether it still holds this
    /// process's generation. Another process may have ended it (its durable transaction does so
    /// before its first write, and may then commit nothing: it throws, fails or is killed); a
    /// run going on as if pinned would have no frame left to bring its base back after a power
    /// loss (found by the review of 2026-12-06). The transaction then pins anew. Costs a read of
    /// the log's first bytes in a run (`asking`: a `.noSync` transaction; a durable one asks in
    /// `prepare`, before it appends to the generation).
    func pinnedAtBegin(base: UInt64, asking: Bool) -> UInt64? {
        guard let pin = pinned(base: base) else { return nil }
        guard asking else { return pin }
        guard let log = file, (try? holdsOwnGeneration(log)) == true else {
            lastTxnid = 0
            return nil
        }
        return pin
    }

    /// The checksums of both meta pages when this process's generation began.
    private var startChecksums: (UInt64, UInt64) = (0, 0)

    /// Starts a generation at offset 0. The page file must be on the disk first: nothing written
    /// before may need the old generation's frames, which the new one overwrites, and the meta
    /// pages' checksums recorded for recovery (`LogReplay.belongs`) must be what the disk holds.
    /// The sync is skipped only when it would flush nothing: this process has written nothing
    /// since its last good sync of the page file (`SyncRecoveringFile.isClean`), no other process
    /// has committed since this process's last commit (a generation the log holds is then this
    /// process's, and that sync made its frames unneeded), and the meta pages are as that sync
    /// left them (another process's failed commit writes and spoils one without a sync).
    private func begin(base: UInt64, pageFile: FileIO) throws {
        lastTxnid = 0
        let synced = pageFile as? SyncRecoveringFile
        let clean = synced.map { $0.isClean && $0.metasUnchangedSinceSync() } ?? false
        if !clean || base != lastOwnCommit { try pageFile.sync() }
        startChecksums = try Recovery.metaChecksums(file: pageFile, pageSize: pageSize)
        startTxnid = base
        imageBytes = 0
        loggedImages.removeAll(keepingCapacity: true)
        var s: UInt64 = 0
        while s == 0 { s = UInt64.random(in: 1...UInt64.max) }
        salt = s
        next = 0
    }

    /// Ends whatever generation the log holds (this process's or another's): syncs the page file,
    /// then zeros the first frame's header and syncs the log. Called before a commit that does not
    /// go through the log writes its meta page. Cheap when the log holds none: a read of 16 bytes.
    func end(pageFile: FileIO) throws {
        lastTxnid = 0
        guard !unusable, let log = try opened(create: false), try Self.holdsGeneration(log) else { return }
        try pageFile.sync()
        try Self.spoilFrame(log, at: 0, pageSize: pageSize)
        try log.sync()
    }

    /// Called when this process closes the file, holding the writer lock, best effort. The last
    /// process to close it (`alone`) ends any generation and removes the log, as SQLite removes
    /// its WAL: the page file then holds everything by itself, so a copy of it is whole, and
    /// damage to it is not papered over by a replay. While other processes have the file open
    /// (and may write to the log through descriptors of their own) only this process's own
    /// generation is ended, if no commit came after its last frame.
    func close(pageFile: FileIO, alone: Bool) {
        // `.noSync` commits after this process's last frame: ending the generation would sync them,
        // which a `.noSync` commit never asks for. The next opener finds the log (LogReplay.recover).
        if lastTxnid != 0 && lastOwnCommit != lastTxnid { return }
        if alone {
            // Only a log of this database's: `opened` leaves any other file alone.
            guard (try? opened(create: false)) != nil, (try? end(pageFile: pageFile)) != nil, !unusable else { return }
            file = nil
            unlink(path)
        } else {
            endOwnGeneration(pageFile: pageFile)
        }
    }

    private func endOwnGeneration(pageFile: FileIO) {
        guard lastTxnid != 0, let file else { return }
        lastTxnid = 0
        guard (try? holdsOwnGeneration(file)) == true, (try? pageFile.sync()) != nil else { return }
        if (try? Self.spoilFrame(file, at: 0, pageSize: pageSize)) != nil { try? file.sync() }
    }

    /// The log file, opened (and when `create`, created, its name made durable) at first use; nil
    /// when it does not exist and `create` is false.
    private func opened(create: Bool) throws -> FileIO? {
        if let file { return file }
        if unusable { return nil }
        if let existing = try PosixFile.openExisting(path, mode: .readWrite) {
            // A name that holds something else (a database named like this one's log) is left alone.
            if !(try Self.isLog(existing)) {
                unusable = true
                return nil
            }
            return try adopt(existing)
        }
        guard create else { return nil }
        let made: PosixFile
        do {
            made = try PosixFile(path: path, mode: .readWriteCreate)
            try syncDirectory(containing: path)
        } catch {
            unusable = true
            return nil
        }
        return try adopt(made)
    }

    private func adopt(_ posix: PosixFile) throws -> FileIO {
        let wrapped = wrap?(posix) ?? posix
        file = wrapped
        written = try wrapped.size()
        return wrapped
    }

    /// Removes the log left beside a file that was just created (or initialised) in its place:
    /// it belongs to a database deleted since, whose first meta pages were the same as every new
    /// file's, so recovery could not tell it from this file's own. Called under the writer lock.
    static func removeStale(besideNew pagePath: String) {
        let path = Self.path(for: pagePath)
        guard let existing = try? PosixFile.openExisting(path, mode: .readOnly), (try? isLog(existing)) == true else { return }
        unlink(path)
    }

    /// The first fields of the log's first frame header: checksum, magic and salt (nil when the
    /// log is shorter than that).
    static func firstHeader(_ log: FileIO) throws -> (checksum: UInt64, magic: UInt64, salt: UInt64)? {
        if try log.size() < 24 { return nil }
        var head: (UInt64, UInt64, UInt64) = (0, 0, 0)
        try withUnsafeMutableBytes(of: &head) { (h) throws in try log.read(into: h, at: 0) }
        return withUnsafeBytes(of: head) {
            ($0.baseAddress!.u64(LogLayout.checksum), $0.baseAddress!.u64(LogLayout.magic), $0.baseAddress!.u64(LogLayout.salt))
        }
    }

    /// Whether the log's first frame header is this process's generation's (its salt).
    private func holdsOwnGeneration(_ log: FileIO) throws -> Bool {
        guard let head = try Self.firstHeader(log) else { return false }
        return head.magic == LogLayout.magicValue && head.salt == salt
    }

    /// Whether the log's first frame header is there (its magic; a frame spoiled or torn counts too).
    static func holdsGeneration(_ log: FileIO) throws -> Bool {
        try firstHeader(log)?.magic == LogLayout.magicValue
    }

    /// Overwrites the header page of the frame at `offset` with zeros: replay stops before it.
    static func spoilFrame(_ log: FileIO, at offset: UInt64, pageSize: Int) throws {
        try log.writeZeros(from: offset, to: offset + UInt64(pageSize))
    }

    /// Whether `file` is a regular file that is empty or starts with zeros or a frame header (not
    /// some other file).
    static func isLog(_ file: PosixFile) throws -> Bool {
        if try file.status().st_mode & 0o170000 != 0o100000 { return false }
        if try file.size() == 0 { return true }
        guard let head = try firstHeader(file) else { return false }
        return (head.checksum == 0 && head.magic == 0) || head.magic == LogLayout.magicValue
    }

    static func store(_ entry: LogEntry, into header: UnsafeMutableRawPointer, at i: Int) {
        let p = header + LogLayout.entries + i * LogLayout.entrySize
        p.setU64(0, entry.page)
        p.setU32(8, UInt32(entry.pages))
        p.setU32(12, entry.patch ? 1 : 0)
        p.setU64(16, entry.checksum)
    }

    /// The entry `i` of a frame header, or nil when its kind is not one this build knows.
    static func load(_ header: UnsafeRawPointer, at i: Int) -> LogEntry? {
        let p = header + LogLayout.entries + i * LogLayout.entrySize
        let kind = p.u32(12)
        guard kind <= 1 else { return nil }
        return LogEntry(page: p.u64(0), pages: Int(p.u32(8)), checksum: p.u64(16), patch: kind == 1)
    }
}
