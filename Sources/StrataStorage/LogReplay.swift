#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Reading the commit log back (CommitLog.swift): its generation's frames, verified, and their
// replay over the page file by the first read-write process to open it.

enum LogReplay {
    /// A verified frame: its commit and its images (the page runs, then the meta page).
    struct Frame {
        var txnid: UInt64
        var entries: [LogEntry]
        var images: [UInt8]
        /// The commit's `pageCount` (from its meta page).
        var pageCount: UInt64
    }

    /// The log's generation: its frames in order, as long as they chain (same salt, consecutive
    /// commits, every checksum right), and the meta pages' checksums when it began. Empty when the
    /// first frame is missing or damaged: nothing needs replaying then. A patched page is rebuilt
    /// from its base's last image in an earlier frame (a frame that patches a page no earlier
    /// frame wrote ends the chain, as a damaged one); each frame's images are then whole, as if
    /// the frame had held them.
    static func chain(log: FileIO, pageSize: Int) throws -> (frames: [Frame], start: (UInt64, UInt64)) {
        let size = try log.size()
        var frames: [Frame] = []
        var start: (UInt64, UInt64) = (0, 0)
        var salt: UInt64 = 0
        var offset: UInt64 = 0
        var header = [UInt8](repeating: 0, count: pageSize)
        // Where the last image of each page (meta slots included) lies: frame, and byte offset in its images.
        var latest: [PageNo: (frame: Int, at: Int)] = [:]
        while offset + UInt64(pageSize) <= size {
            header.removeAll(keepingCapacity: true)
            header.append(contentsOf: repeatElement(0, count: pageSize))
            try header.withUnsafeMutableBytes { (h) throws in try log.read(into: h, at: offset) }
            // A header longer than a page (patches that do not fit in one): the rest, within the log.
            let headerPages = header.withUnsafeBytes { max(1, Int($0.baseAddress!.u32(LogLayout.headerPages))) }
            let count = header.withUnsafeBytes { Int($0.baseAddress!.u32(LogLayout.count)) }
            // The sizes are the file's word: checked against what a frame can be before anything is
            // allocated (a damaged header in a sparse log could claim a terabyte). Every frame ends
            // within the log's capacity (`CommitLog.prepare`).
            guard count >= 1, count <= LogLayout.capacity(pageSize: pageSize), headerPages <= count + 1,
                offset + UInt64(headerPages * pageSize) <= min(size, CommitLog.capacity)
            else { break }
            if headerPages > 1 {
                header.append(contentsOf: repeatElement(0, count: (headerPages - 1) * pageSize))
                try header.withUnsafeMutableBytes { (h) throws in
                    try log.read(into: UnsafeMutableRawBufferPointer(rebasing: h[pageSize...]), at: offset + UInt64(pageSize))
                }
            }
            let parsed: (txnid: UInt64, entries: [LogEntry], patches: Range<Int>)? = header.withUnsafeBytes { raw in
                let h = raw.baseAddress!
                guard pageChecksum(h, byteCount: raw.count) == h.u64(LogLayout.checksum), h.u64(LogLayout.magic) == LogLayout.magicValue,
                    h.u32(LogLayout.pageSize) == UInt32(pageSize)
                else { return nil }
                let txnid = h.u64(LogLayout.txnid)
                if frames.isEmpty {
                    guard h.u64(LogLayout.salt) != 0 else { return nil }
                    salt = h.u64(LogLayout.salt)
                    start = (h.u64(LogLayout.startMeta0), h.u64(LogLayout.startMeta1))
                } else if h.u64(LogLayout.salt) != salt || txnid != frames[frames.count - 1].txnid &+ 1 {
                    return nil
                }
                guard count >= 1, count <= LogLayout.capacity(pageSize: pageSize) else { return nil }
                var entries: [LogEntry] = []
                for i in 0..<count {
                    guard let entry = CommitLog.load(h, at: i) else { return nil }
                    entries.append(entry)
                }
                guard let meta = entries.last, meta.page == txnid % 2, meta.pages == 1 else { return nil }
                for entry in entries.dropLast() where entry.page < 2 || entry.pages < 1 || entry.pages > Int(size / UInt64(pageSize)) { return nil }
                // A patch is of one page; the patches lie within the header.
                let from = LogLayout.patches(entries: count)
                let bytes = Int(h.u32(LogLayout.patchBytes))
                guard !entries.contains(where: { $0.patch && $0.pages != 1 }), bytes <= raw.count - from else { return nil }
                return (txnid, entries, from..<(from + bytes))
            }
            guard let parsed else { break }
            let storedPages = parsed.entries.reduce(0) { $0 + ($1.patch ? 0 : $1.pages) }
            let storedBytes = UInt64(storedPages) * UInt64(pageSize)
            let imagesAt = offset + UInt64(headerPages * pageSize)
            guard imagesAt + storedBytes <= min(size, CommitLog.capacity) else { break }
            var stored = [UInt8](repeating: 0, count: Int(storedBytes))
            try stored.withUnsafeMutableBytes { (b) throws in try log.read(into: b, at: imagesAt) }
            // Every image whole, in entry order: the stored ones as they are, the patched ones
            // rebuilt on their base's last image in an earlier frame (the meta page's: its slot's).
            let pages = parsed.entries.reduce(0) { $0 + $1.pages }
            var images = [UInt8](repeating: 0, count: pages * pageSize)
            let rebuilt = images.withUnsafeMutableBytes { out -> Bool in
                stored.withUnsafeBytes { raw -> Bool in
                    header.withUnsafeBytes { h -> Bool in
                        let area = UnsafeRawBufferPointer(rebasing: h[parsed.patches])
                        var patchAt = 0
                        var storedAt = 0
                        var at = 0
                        for (i, entry) in parsed.entries.enumerated() {
                            let count = entry.pages * pageSize
                            let image = out.baseAddress! + at
                            if entry.patch {
                                let isMeta = i == parsed.entries.count - 1
                                guard let page = LogPatch.basePage(in: area, at: patchAt), isMeta ? page == entry.page : page >= 2,
                                    let (f, from) = latest[page]
                                else { return false }
                                frames[f].images.withUnsafeBytes { image.copyMemory(from: $0.baseAddress! + from, byteCount: pageSize) }
                                guard let next = LogPatch.apply(area, at: patchAt, to: image, pageSize: pageSize) else { return false }
                                patchAt = next
                            } else {
                                image.copyMemory(from: raw.baseAddress! + storedAt, byteCount: count)
                                storedAt += count
                            }
                            at += count
                        }
                        return true
                    }
                }
            }
            guard rebuilt else { break }
            let pageCount = images.withUnsafeBytes { raw -> UInt64? in
                // The meta page first (the last image): every other image must lie inside its pages.
                let metaEntry = parsed.entries[parsed.entries.count - 1]
                let metaImage = raw.baseAddress! + raw.count - pageSize
                guard metaImage.u64(PageHeader.checksum) == metaEntry.checksum,
                    let meta = try? Meta.decode(metaImage, slot: metaEntry.page, pageSize: pageSize, path: log.path), meta.txnid == parsed.txnid
                else { return nil }
                var at = 0
                for entry in parsed.entries.dropLast() {
                    let p = raw.baseAddress! + at
                    let count = entry.pages * pageSize
                    guard entry.page < meta.pageCount, UInt64(entry.pages) <= meta.pageCount - entry.page,
                        p.u64(PageHeader.checksum) == entry.checksum, pageChecksum(p, byteCount: count) == entry.checksum,
                        p.u64(PageHeader.pageNumber) == entry.page, p.u64(PageHeader.txnid) == parsed.txnid
                    else { return nil }
                    at += count
                }
                return meta.pageCount
            }
            guard let pageCount else { break }
            var at = 0
            for entry in parsed.entries {
                for k in 0..<entry.pages { latest[entry.page + UInt64(k)] = (frames.count, at + k * pageSize) }
                at += entry.pages * pageSize
            }
            frames.append(Frame(txnid: parsed.txnid, entries: parsed.entries, images: images, pageCount: pageCount))
            offset = imagesAt + storedBytes
        }
        return (frames, start)
    }

    /// Replays the log of the page file at `pagePath` over `pageFile`, then ends its generation.
    /// Called by a read-write process that opens the file alone, before it chooses a commit: after
    /// a power loss the page file may lack pages of commits the log made durable.
    static func recover(pageFile: FileIO, pagePath: String, pageSize: Int, wrap: ((FileIO) -> FileIO)?) throws {
        guard let posix = try PosixFile.openExisting(CommitLog.path(for: pagePath), mode: .readWrite) else { return }
        let log = wrap?(posix) ?? posix
        guard let frames = try generation(of: log, checked: posix, pageFile: pageFile, pageSize: pageSize) else { return }
        let last = frames[frames.count - 1]
        // Every frame is written again, whatever the page file seems to hold: no test of the
        // pages can tell a write the power loss took from an older page that happens to look
        // newer (bytes of a value where a header would be, or a page sealed by a run of `.noSync`
        // commits that an earlier power loss took back, whose transaction ids were then used
        // again). That is harmless where the page file holds them already, and for every page but
        // those the commits after the last frame use (`pagesWrittenAfter`), which stay: the
        // commit the file opens at sees no other page than the frames' last images of them.
        let limits = counting(frames)
        let kept = try pagesWrittenAfter(last.txnid, pageFile: pageFile, pageSize: pageSize)
        for (f, frame) in frames.enumerated() {
            try frame.images.withUnsafeBytes { (raw) throws in
                var at = 0
                for entry in frame.entries {
                    let count = entry.pages * pageSize
                    // Pages a later frame cut off the file's end are left out (see `applied`),
                    // and so are the pages of the commits after the last frame.
                    let range = entry.page..<(entry.page + UInt64(entry.pages))
                    if entry.page < 2 || range.upperBound <= limits[f], !kept.contains(where: { $0.overlaps(range) }) {
                        try pageFile.write(UnsafeRawBufferPointer(rebasing: raw[at..<(at + count)]), at: entry.page * UInt64(pageSize))
                    }
                    at += count
                }
            }
        }
        // The last commit's pages all exist now; its free pages past them may not.
        let needed = last.pageCount * UInt64(pageSize)
        if try pageFile.size() < needed { try pageFile.truncate(to: needed) }
        if !opens(atOrAfter: last.txnid, pageFile: pageFile, pageSize: pageSize) {
            // The meta pages kept for the commits after the frame (`pagesWrittenAfter`) hold none
            // that is whole, and the frame's own slot was one of them: the file opens at the frame.
            try last.images.withUnsafeBytes { (raw) throws in
                var at = 0
                for entry in last.entries {
                    if entry.page == last.txnid % 2 {
                        try pageFile.write(UnsafeRawBufferPointer(rebasing: raw[at..<(at + pageSize)]), at: entry.page * UInt64(pageSize))
                    }
                    at += entry.pages * pageSize
                }
            }
            let other = ((last.txnid + 1) % 2) * UInt64(pageSize)
            try pageFile.writeZeros(from: other, to: other + UInt64(pageSize))
            if !opens(atOrAfter: last.txnid, pageFile: pageFile, pageSize: pageSize) {
                // The log stays as it is (a later build, or a person, may still do better with it).
                try pageFile.sync()
                throw StorageError.noValidMeta(
                    path: pagePath,
                    reason:
                        "after replaying its commit log \(posix.path), the file still does not open at the log's last commit \(last.txnid) (pages of it are damaged)"
                )
            }
        }
        try pageFile.sync()
        try CommitLog.spoilFrame(log, at: 0, pageSize: pageSize)
        try log.sync()
    }

    /// The pages (and runs) that the commits after the generation's last frame (`txnid`) wrote or
    /// carry, by the commit records of the meta pages past it, with those meta pages: a replay
    /// leaves them alone. They belong to a `.noSync` run after the last frame, which may reuse pages
    /// the generation's earlier commits freed, and which the sync of the durable commit after it
    /// makes durable before that commit ends the generation: writing the frames' older images over
    /// them would tear a run that a power loss in between must keep. None of them is a page the last
    /// frame's commit sees (the run's pin keeps those), so the replay still restores all of that
    /// commit. A run the power loss tore fails its own record, and the file opens before it.
    /// A run that does not carry the checksum its commit recorded counts for its first page only
    /// (its length is not to be trusted).
    static func pagesWrittenAfter(_ txnid: UInt64, pageFile: FileIO, pageSize: Int) throws -> [Range<PageNo>] {
        try Recovery.listedPages(file: pageFile, pageSize: pageSize) { $0.txnid > txnid }
    }

    /// Whether the page file as it is opens at commit `txnid` or a later one (`Recovery.choose`).
    static func opens(atOrAfter txnid: UInt64, pageFile: FileIO, pageSize: Int) -> Bool {
        guard let size = try? pageFile.size(), size >= 2 * UInt64(pageSize), size <= UInt64(Int.max),
            let map = try? pageFile.map(length: Int(size), writable: false)
        else { return false }
        defer { pageFile.unmap(map, length: Int(size)) }
        guard let meta = try? Recovery.choose(file: pageFile, map: map, fileSize: size, pageSize: pageSize) else { return false }
        return meta.txnid >= txnid
    }

    /// The generation `log` holds for `pageFile`, or nil when there is none to replay: `checked`
    /// (the log as opened) is not a log, its first frame is missing or damaged, or the generation
    /// does not belong to the file. That last one is left as it is: the next commit that needs the
    /// log ends or overwrites it.
    private static func generation(of log: FileIO, checked: PosixFile, pageFile: FileIO, pageSize: Int) throws -> [Frame]? {
        guard try CommitLog.isLog(checked) else { return nil }
        let (frames, start) = try chain(log: log, pageSize: pageSize)
        if frames.isEmpty { return nil }
        guard try belongs(frames: frames, start: start, pageFile: pageFile, pageSize: pageSize) else { return nil }
        return frames
    }

    /// Whether the generation belongs to this page file: each of its meta pages that is valid is
    /// one the generation began with or a frame wrote. A meta page it never knew means the file
    /// was replaced or written without the log since (by a build without it): replaying would
    /// take it back.
    ///
    /// Besides those, a meta page may hold the commit after the last frame (whose frame the power
    /// loss took), or `.noSync` commits made after it: a replay takes those back, as a power loss may.
    static func belongs(frames: [Frame], start: (UInt64, UInt64), pageFile: FileIO, pageSize: Int) throws -> Bool {
        var known: Set<UInt64> = [start.0, start.1]
        for frame in frames { known.insert(frame.entries[frame.entries.count - 1].checksum) }
        let last = frames[frames.count - 1].txnid
        guard try pageFile.size() >= UInt64(2 * pageSize) else { return true }
        let metas = try Recovery.readMetaPages(file: pageFile, pageSize: pageSize)
        return metas.withUnsafeBytes { raw in
            for slot in 0..<2 {
                let p = raw.baseAddress! + slot * pageSize
                guard let meta = try? Meta.decode(p, slot: UInt64(slot), pageSize: pageSize, path: pageFile.path) else { continue }
                if known.contains(p.u64(PageHeader.checksum)) || meta.txnid == last &+ 1 || (meta.txnid > last && meta.unsynced) { continue }
                return false
            }
            return true
        }
    }

    /// Whether the page file holds what the frames wrote: for every page, its last image, or a
    /// later commit's page. A page written after its last frame (sealed as that page, with a
    /// greater txnid and its checksum) was free then, reused by a commit the log did not take (one
    /// in flight when the process died, or a `.noSync` one, which never reuses a page the last
    /// frame's commit sees): it does not count. Anything else means a write the disk lost. (Only a
    /// read-only opening asks, which cannot replay: a txnid an earlier power loss took back and
    /// commits used again can still pass for later here; a read-write opening replays every frame.)
    ///
    /// Nor does an image a later frame cut off the file's end (`counting`).
    ///
    /// Page by page: a later frame may write one page of an earlier frame's run alone (the run
    /// freed, its second page taken first), and that page's last image is then the later one,
    /// while the run's first page keeps the earlier.
    static func applied(frames: [Frame], pageFile: FileIO, pageSize: Int) throws -> Bool {
        let limits = counting(frames)
        // Each page's last image, and the image of the first page of the entry it belongs to
        // (whose header names the commit).
        var last: [PageNo: (frame: Int, at: Int, head: Int)] = [:]
        for (f, frame) in frames.enumerated() {
            var at = 0
            for entry in frame.entries {
                // (Limits never fall from frame to frame: an image that counts is never followed
                // by a later one of the same page that does not.)
                if entry.page < 2 || entry.page + UInt64(entry.pages) <= limits[f] {
                    for k in 0..<entry.pages { last[entry.page + UInt64(k)] = (f, at + k * pageSize, at) }
                }
                at += entry.pages * pageSize
            }
        }
        let size = try pageFile.size()
        guard size >= 2 * UInt64(pageSize), size <= UInt64(Int.max) else { return false }
        let map = UnsafeRawPointer(try pageFile.map(length: Int(size), writable: false))
        defer { pageFile.unmap(UnsafeMutableRawPointer(mutating: map), length: Int(size)) }
        for (page, image) in last {
            let offset = page * UInt64(pageSize)
            if offset + UInt64(pageSize) > size { return false }
            let p = map + Int(offset)
            let same = frames[image.frame].images.withUnsafeBytes { framed in
                if memcmp(p, framed.baseAddress! + image.at, pageSize) == 0 { return true }
                let logged = (framed.baseAddress! + image.head).u64(PageHeader.txnid)
                if image.at == image.head {
                    let written = p.u64(PageHeader.txnid)
                    if written == logged { return false }
                    // (A meta slot a later commit wrote: whether the file opens at or after the
                    // last frame is the question then, which `checkApplied` asks.)
                    if page < 2 { return written > logged }
                }
                return writtenLater(page, than: logged, map: map, pageCount: size / UInt64(pageSize), pageSize: pageSize)
            }
            if !same { return false }
        }
        return true
    }

    /// Whether a commit after `logged` wrote the page: the page that heads it (itself, or the
    /// first page of the overflow run it lies in: the nearest page before it that names itself)
    /// carries its own number, a newer txnid and its checksum, and covers it. Looks back at most
    /// 65,536 pages for a run's head (a longer value's page is taken as not written later).
    static func writtenLater(_ page: PageNo, than logged: UInt64, map: UnsafeRawPointer, pageCount: UInt64, pageSize: Int) -> Bool {
        var head = page
        while head > 2, page - head < 65_536, (map + Int(head) * pageSize).u64(PageHeader.pageNumber) != head { head -= 1 }
        let h = map + Int(head) * pageSize
        guard h.u64(PageHeader.pageNumber) == head, h.u64(PageHeader.txnid) > logged else { return false }
        // (Both kinds of run carry their length and one checksum over all their pages: a value's,
        // and a commit record's, which a large `.noSync` commit after the last frame may put over
        // pages a frame wrote.)
        let type = h.u8(PageHeader.type)
        let isRun = type == PageType.overflow.rawValue || type == PageType.commitRecord.rawValue
        let run = isRun ? UInt64(h.u32(PageHeader.runPages)) : 1
        guard run >= 1, head + run > page, head + run <= pageCount else { return false }
        return pageChecksum(h, byteCount: Int(run) * pageSize) == h.u64(PageHeader.checksum)
    }

    /// Per frame, the page count below which its images still count: the least `pageCount` of it
    /// and every later frame. A page at or past a later frame's end was cut off the file then (it
    /// was free in that commit): the file may since have been cut and grown again over it, leaving
    /// zeros there, and a commit that used the page again wrote it anew, in a later frame.
    static func counting(_ frames: [Frame]) -> [UInt64] {
        var limits = [UInt64](repeating: 0, count: frames.count)
        var least = UInt64.max
        for f in frames.indices.reversed() {
            least = min(least, frames[f].pageCount)
            limits[f] = least
        }
        return limits
    }

    /// For a read-only opening while no read-write process has the file open: throws when the
    /// log holds commits the page file lacks (after a power loss). Reading the page file then
    /// would miss them, and a read-only process may not replay them.
    static func checkApplied(pageFile: FileIO, pagePath: String, pageSize: Int) throws {
        guard let log = try PosixFile.openExisting(CommitLog.path(for: pagePath), mode: .readOnly),
            let frames = try generation(of: log, checked: log, pageFile: pageFile, pageSize: pageSize)
        else { return }
        let last = frames[frames.count - 1].txnid
        // (A run of `.noSync` commits after the last frame that the power loss tore can leave the
        // file opening before it, with every frame's pages in place.)
        if try !applied(frames: frames, pageFile: pageFile, pageSize: pageSize) || !opens(atOrAfter: last, pageFile: pageFile, pageSize: pageSize) {
            throw StorageError.noValidMeta(
                path: pagePath,
                reason:
                    "its commit log \(log.path) holds commits the file lacks, up to transaction \(last) (a power loss before they reached it); open the database read-write once to replay them"
            )
        }
    }
}
