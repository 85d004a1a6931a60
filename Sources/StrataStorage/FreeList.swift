// The free-page tree and the writer's page allocator. Layout in FORMAT.md, "Free-page tree".
//
// Every page a commit stops using is recorded under that commit's id together with the id of the
// commit that wrote it (its "born" id). A snapshot S can see a page born at B and freed at F exactly
// when B <= S < F, so a freed page is reusable as soon as no live snapshot falls in that window.
// This is finer than LMDB's "older than the oldest reader" rule: a reader held open for hours pins
// only the pages its own snapshot sees, and pages written and freed again after it are reused.
//
// Key: u64 big-endian freeing transaction id, u32 big-endian chunk number.
// Value: up to `chunkCapacity` entries of (u64 page, u64 born), little-endian.

struct FreeEntry: Equatable {
    var page: PageNo
    var born: UInt64
}

enum FreeListFormat {
    static let keySize = 12
    static let entrySize = 16

    static func key(freedBy txnid: UInt64, chunk: UInt32) -> [UInt8] {
        var key: [UInt8] = []
        key.reserveCapacity(keySize)
        appendBigEndian(txnid, to: &key)
        for shift in stride(from: 24, through: 0, by: -8) { key.append(UInt8(truncatingIfNeeded: chunk >> UInt32(shift))) }
        return key
    }

    static func decodeKey(_ key: UnsafeRawBufferPointer, page: PageNo) throws -> UInt64 {
        guard key.count == keySize, let base = key.baseAddress else {
            throw StorageError.corrupt(page: page, reason: "free-list key of \(key.count) bytes, expected \(keySize)")
        }
        return readBigEndianU64(base)
    }

    static func decodeEntries(_ value: UnsafeRawBufferPointer, page: PageNo) throws -> [FreeEntry] {
        guard value.count % entrySize == 0 else {
            throw StorageError.corrupt(page: page, reason: "free-list value of \(value.count) bytes is not a whole number of entries")
        }
        var entries: [FreeEntry] = []
        entries.reserveCapacity(value.count / entrySize)
        guard let base = value.baseAddress else { return entries }
        for i in 0..<(value.count / entrySize) {
            entries.append(FreeEntry(page: base.u64(i * entrySize), born: base.u64(i * entrySize + 8)))
        }
        return entries
    }

    /// The entries of the chunk freed by `freedBy`, refusing one that names a page outside
    /// 2..<pageCount: reused, it would be written over a meta page or far past the end of the file
    /// (or overflow its byte offset).
    static func checkedEntries(_ value: UnsafeRawBufferPointer, freedBy: UInt64, pageCount: UInt64) throws -> [FreeEntry] {
        let entries = try decodeEntries(value, page: 0)
        for e in entries where e.page < 2 || e.page >= pageCount {
            throw StorageError.corrupt(page: 0, reason: "free list (chunk of transaction \(freedBy)) names page \(e.page), outside 2..<\(pageCount)")
        }
        return entries
    }

    static func encode(_ entries: ArraySlice<FreeEntry>) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: entries.count * entrySize)
        bytes.withUnsafeMutableBytes { p in
            for (i, e) in entries.enumerated() {
                p.baseAddress!.setU64(i * entrySize, e.page)
                p.baseAddress!.setU64(i * entrySize + 8, e.born)
            }
        }
        return bytes
    }

    /// Entries per chunk, so a chunk stays an inline leaf value.
    static func chunkCapacity(pageSize: Int) -> Int {
        (Limits.maxInlineEntry(pageSize: pageSize) - LeafEntry.headerSize - keySize) / entrySize
    }
}

/// Whether a page born at `born` and freed by `freedBy` is invisible to every reader in `readers`
/// (sorted ascending).
@inline(__always) func isReusable(born: UInt64, freedBy: UInt64, readers: [UInt64]) -> Bool {
    var low = 0
    var high = readers.count
    while low < high {
        let mid = (low + high) >> 1
        if readers[mid] < born { low = mid + 1 } else { high = mid }
    }
    return low == readers.count || readers[low] >= freedBy
}

/// One chunk of the committed free-page tree, as the writer has consumed it so far.
struct FreeChunk {
    let key: [UInt8]
    let freedBy: UInt64
    /// Pages still free in this chunk that some snapshot may see.
    var held: [FreeEntry]
    /// Pages still free in this chunk that no snapshot sees.
    var reusable: [FreeEntry]
    var modified = false

    var entries: [FreeEntry] { held + reusable }
}

/// Hands the writer reusable pages from the committed free-page tree, loading chunks in order
/// (oldest freeing transaction first) only as far as allocation needs.
final class FreePageAllocator {
    private let pages: PageMap
    private let baseRoot: PageNo
    /// The transaction id of the commit the writer began from.
    private let base: UInt64
    private let readers: () -> [UInt64]
    private var readerIDs: [UInt64]?
    // `@exclusivity(unchecked)`: only the writer's thread uses an allocator, never through
    // overlapping accesses; the runtime's checks were a tenth of a large delete's time.
    @exclusivity(unchecked) private(set) var chunks: [FreeChunk] = []
    /// With `prefersLow`: the indices of the chunks that have reusable pages, as a min-heap on each
    /// one's lowest page (its last entry), so that compaction's lowest-first allocation costs
    /// O(log chunks) and not a scan of every chunk per page. Rebuilt after any other change while
    /// `prefersLow` (the other allocation path runs only before `preferLowPages`, which rebuilds).
    @exclusivity(unchecked) private var lowHeap: [Int] = []
    @exclusivity(unchecked) private var lowHeapValid = false
    /// The reusable pages of the loaded chunks as a bitmap, for `lowestRunStart`: built when a run
    /// is first asked for, then kept in step by every allocation, so that a transaction writing
    /// many large values (or a compaction moving many) does not pay a pass over the whole free
    /// list per value. Nil: not built, or dropped by a savepoint's restore.
    @exclusivity(unchecked) private var runBits: [UInt64]?
    /// Per run length, a page below which no run of that length starts. Between loads the
    /// reusable pages only get fewer, so the lowest run of a length only moves up (and a longer
    /// run starts no lower than a shorter one): each search resumes where the last one found.
    @exclusivity(unchecked) private var runFloors: [Int: PageNo] = [:]
    /// Each loaded chunk's index in `chunks` by its key (`indexOfChunk`).
    @exclusivity(unchecked) private var chunkIndex: [[UInt8]: Int] = [:]
    private var lastLoadedKey: [UInt8]?
    /// Every page the loaded chunks list, with the key of the chunk that lists it. A page listed by
    /// two chunks is damage that reusing it would spread (two trees sharing a page), so loading
    /// refuses it. Not part of `State`: a chunk loaded again after a savepoint rolled back has the
    /// same key (whether or not the reader set now lets the scan skip a held prefix).
    private var listedBy: [PageNo: [UInt8]] = [:]
    private var exhausted: Bool
    /// Pages handed out so far; the commit's free-list fixpoint watches it.
    private(set) var allocations = 0
    /// Where an earlier commit found the free list's leading chunks all held by snapshots.
    private var hint: FreeScanHint?
    /// The last chunk of the leading run of chunks that hold no reusable page (for the next hint).
    private(set) var heldPrefixEnd: [UInt8]?
    private var prefixStillHeld = true

    init(pages: PageMap, baseRoot: PageNo, base: UInt64, hint: FreeScanHint? = nil, readers: @escaping () -> [UInt64]) {
        self.pages = pages
        self.baseRoot = baseRoot
        self.base = base
        self.readers = readers
        self.hint = hint
        self.exhausted = baseRoot == 0
    }

    /// Everything allocation changes, for savepoints to restore.
    struct State {
        var readerIDs: [UInt64]?
        var chunks: [FreeChunk]
        var lastLoadedKey: [UInt8]?
        var exhausted: Bool
        var allocations: Int
        var heldPrefixEnd: [UInt8]?
        var prefixStillHeld: Bool
    }

    var state: State {
        get {
            State(
                readerIDs: readerIDs, chunks: chunks, lastLoadedKey: lastLoadedKey, exhausted: exhausted,
                allocations: allocations, heldPrefixEnd: heldPrefixEnd, prefixStillHeld: prefixStillHeld)
        }
        set {
            readerIDs = newValue.readerIDs
            chunks = newValue.chunks
            lowHeapValid = false
            runBits = nil
            runFloors = [:]
            chunkIndex = [:]
            lastLoadedKey = newValue.lastLoadedKey
            exhausted = newValue.exhausted
            allocations = newValue.allocations
            heldPrefixEnd = newValue.heldPrefixEnd
            prefixStillHeld = newValue.prefixStillHeld
        }
    }

    /// Loads every chunk, the held prefix an earlier commit skipped included (before the first
    /// load; no effect after it): idle compaction must see which snapshots hold which pages, to
    /// wait for the right ones (IdleCompaction.swift) and to know what the run pin holds.
    func scanWithoutHint() {
        if lastLoadedKey == nil { hint = nil }
    }

    /// The hint the next transaction can start from, if this one found a held prefix.
    var nextHint: FreeScanHint? {
        guard let heldPrefixEnd, readerIDs != nil else { return nil }
        return FreeScanHint(readers: holdingReaders, skipThrough: heldPrefixEnd)
    }

    /// The snapshots that can keep a page of the committed free list from reuse: those older than
    /// the base commit. The list holds pages freed by the base or before it, which no snapshot of
    /// the base or a newer commit sees; so the commit log's pin of the base (CommitLog.pinned),
    /// which moves with every commit, does not make the reader set look changed from one commit to
    /// the next (it made every commit load the whole free list for compaction's check).
    var holdingReaders: Set<UInt64> { Set(sortedReaders.lazy.filter { $0 < self.base }) }

    /// The snapshots live when this transaction first looked, ascending.
    var sortedReaders: [UInt64] {
        if let readerIDs { return readerIDs }
        let ids = readers().sorted()
        readerIDs = ids
        return ids
    }

    /// The snapshots but one of `txnid` (a reader of the same commit still counts); nil when
    /// `txnid` is not among them.
    private func readers(without txnid: UInt64) -> [UInt64]? {
        var ids = sortedReaders
        guard let i = ids.firstIndex(of: txnid) else { return nil }
        ids.remove(at: i)
        return ids
    }

    /// Pages of the loaded chunks that snapshot `txnid` alone keeps from being reusable.
    func heldOnly(by txnid: UInt64) -> Int {
        guard let others = readers(without: txnid) else { return 0 }
        var count = 0
        for chunk in chunks {
            for e in chunk.held where isReusable(born: e.born, freedBy: chunk.freedBy, readers: others) { count += 1 }
        }
        return count
    }

    /// Stops counting snapshot `txnid`: the pages only it held become reusable. No hint is made
    /// for the next transaction then, since chunks skipped as held may now hold reusable pages.
    func release(snapshot txnid: UInt64) {
        guard let ids = readers(without: txnid) else { return }
        readerIDs = ids
        for c in chunks.indices {
            let freedBy = chunks[c].freedBy
            let (now, still) = chunks[c].held.reduce(into: ([FreeEntry](), [FreeEntry]())) {
                if isReusable(born: $1.born, freedBy: freedBy, readers: ids) { $0.0.append($1) } else { $0.1.append($1) }
            }
            if now.isEmpty { continue }
            chunks[c].held = still
            chunks[c].reusable.append(contentsOf: now)
            if prefersLow { chunks[c].reusable.sort { $0.page > $1.page } }
        }
        lowHeapValid = false
        runBits = nil
        runFloors = [:]
        heldPrefixEnd = nil
        prefixStillHeld = false
    }

    /// Whether `allocateOne` hands out the lowest reusable page of the chunks loaded (compaction,
    /// Compaction.swift) instead of the newest entry of the oldest chunk.
    private(set) var prefersLow = false

    /// Loads every chunk and from then on allocates lowest page first. The chunks keep their
    /// reusable pages sorted descending, so each one's lowest is its last.
    func preferLowPages() throws {
        try loadAll()
        prefersLow = true
        for i in chunks.indices { chunks[i].reusable.sort { $0.page > $1.page } }
        lowHeapValid = false
    }

    /// Loads every chunk of the free list.
    func loadAll() throws {
        while try loadNextChunk() {}
    }

    /// Loads chunks until those loaded hold at least `count` reusable pages or none is left.
    func load(reusable count: Int) throws {
        var loaded = chunks.reduce(0) { $0 + $1.reusable.count }
        while loaded < count, try loadNextChunk() { loaded += chunks[chunks.count - 1].reusable.count }
    }

    /// Hands out exactly `taken`, which must all be reusable pages of the loaded chunks.
    func take(_ taken: Set<PageNo>) {
        removeReusable(taken)
        allocations += taken.count
    }

    /// Whether every chunk is loaded: then `chunks` holds every committed free page.
    var isFullyLoaded: Bool { exhausted }

    /// The lowest reusable page loaded, if any.
    var lowestReusable: PageNo? {
        if prefersLow {
            if !lowHeapValid { rebuildLowHeap() }
            return lowHeap.first.flatMap { chunks[$0].reusable.last?.page }
        }
        var lowest: PageNo?
        for chunk in chunks {
            for e in chunk.reusable where lowest.map({ e.page < $0 }) ?? true { lowest = e.page }
        }
        return lowest
    }

    /// Removes `pages` from the reusable entries (they stop being pages of the file).
    func removeReusable(_ pages: Set<PageNo>) {
        lowHeapValid = false
        for page in pages { clearRunBit(page) }
        for i in chunks.indices where chunks[i].reusable.contains(where: { pages.contains($0.page) }) {
            chunks[i].reusable.removeAll { pages.contains($0.page) }
            chunks[i].modified = true
        }
    }

    /// One reusable page, or nil when the free list has none.
    func allocateOne() throws -> PageNo? {
        if prefersLow { return allocateLowest() }
        var i = 0
        while true {
            while i < chunks.count {
                if let entry = chunks[i].reusable.popLast() {
                    chunks[i].modified = true
                    clearRunBit(entry.page)
                    allocations += 1
                    return entry.page
                }
                i += 1
            }
            if try !loadNextChunk() { return nil }
        }
    }

    private func allocateLowest() -> PageNo? {
        if !lowHeapValid { rebuildLowHeap() }
        guard let best = lowHeap.first, let entry = chunks[best].reusable.popLast() else { return nil }
        chunks[best].modified = true
        clearRunBit(entry.page)
        allocations += 1
        if chunks[best].reusable.isEmpty {
            let last = lowHeap.removeLast()
            if !lowHeap.isEmpty { lowHeap[0] = last }
        }
        siftDown(0)
        return entry.page
    }

    /// The lowest page of chunk `i` (the heap holds only chunks that have one).
    private func lowKey(_ i: Int) -> PageNo { chunks[i].reusable.last?.page ?? .max }

    private func rebuildLowHeap() {
        lowHeap = chunks.indices.filter { !chunks[$0].reusable.isEmpty }
        var i = lowHeap.count / 2
        while i > 0 {
            i -= 1
            siftDown(i)
        }
        lowHeapValid = true
    }

    private func siftDown(_ start: Int) {
        var i = start
        while true {
            let left = 2 * i + 1, right = left + 1
            var smallest = i
            if left < lowHeap.count, lowKey(lowHeap[left]) < lowKey(lowHeap[smallest]) { smallest = left }
            if right < lowHeap.count, lowKey(lowHeap[right]) < lowKey(lowHeap[smallest]) { smallest = right }
            if smallest == i { return }
            lowHeap.swapAt(i, smallest)
            i = smallest
        }
    }

    /// The first page of the lowest `count` consecutive reusable pages, without taking them (the
    /// run `allocateRun` would take), or nil. Loads the whole free list.
    func lowestRun(_ count: Int) throws -> PageNo? {
        try loadAll()
        return lowestRunStart(count)
    }

    /// `count` consecutive reusable pages, the lowest such, or nil. Loads the whole free list:
    /// runs are for large values, whose cost this dwarfs.
    func allocateRun(_ count: Int) throws -> PageNo? {
        try loadAll()
        guard let first = lowestRunStart(count) else { return nil }
        let end = first + UInt64(count)
        // The chunks listing the run's pages, found through `listedBy` (not by a pass over every
        // chunk's entries: that was a pass over the free list per large value written).
        var listing: [Int] = []
        for page in first..<end {
            clearRunBit(page)
            if let key = listedBy[page], let c = indexOfChunk(key), !listing.contains(c) { listing.append(c) }
        }
        for c in listing {
            chunks[c].reusable.removeAll { $0.page >= first && $0.page < end }
            chunks[c].modified = true
        }
        lowHeapValid = false
        allocations += count
        return first
    }

    /// The lowest run of `count` reusable pages, found in the bitmap of the reusable pages from
    /// the floor the searches before it left (a value in an overflow run is written, and
    /// `compact()` moves runs, one at a time).
    private func lowestRunStart(_ count: Int) -> PageNo? {
        guard count > 0 else { return nil }
        let bits = runBits ?? buildRunBits()
        var from: PageNo = 0
        for (length, floor) in runFloors where length <= count { from = max(from, floor) }
        guard from != .max else { return nil }
        var start: PageNo = 0
        var length = 0
        var found: PageNo?
        var w = Int(from / 64)
        scan: while w < bits.count {
            let word = w == Int(from / 64) ? bits[w] & (UInt64.max << (from % 64)) : bits[w]
            if word == 0 {
                length = 0
            } else if word == .max {
                if length == 0 { start = PageNo(w) * 64 }
                length += 64
                if length >= count { found = start; break scan }
            } else {
                for b in 0..<64 {
                    if word & (1 << UInt64(b)) == 0 {
                        length = 0
                        continue
                    }
                    if length == 0 { start = PageNo(w) * 64 + PageNo(b) }
                    length += 1
                    if length >= count { found = start; break scan }
                }
            }
            w += 1
        }
        runFloors[count] = found ?? .max
        return found
    }

    /// Builds `runBits` from the loaded chunks' reusable pages.
    private func buildRunBits() -> [UInt64] {
        var highest: PageNo = 0
        for chunk in chunks { for e in chunk.reusable { highest = max(highest, e.page) } }
        // Entries were checked against the file's page count as their chunk loaded.
        var bits = [UInt64](repeating: 0, count: Int(highest / 64) + 1)
        for chunk in chunks { for e in chunk.reusable { bits[Int(e.page / 64)] |= 1 << (e.page % 64) } }
        runBits = bits
        return bits
    }

    /// The index in `chunks` of the loaded chunk with `key`.
    private func indexOfChunk(_ key: [UInt8]) -> Int? {
        if chunkIndex.count != chunks.count {
            chunkIndex = Dictionary(chunks.indices.map { (chunks[$0].key, $0) }, uniquingKeysWith: { first, _ in first })
        }
        if let i = chunkIndex[key], i < chunks.count, chunks[i].key == key { return i }
        return chunks.indices.first { chunks[$0].key == key }
    }

    /// Notes that `page` stopped being reusable.
    @inline(__always) private func clearRunBit(_ page: PageNo) {
        let w = Int(page / 64)
        if w < runBits?.count ?? 0 { runBits?[w] &= ~(1 << (page % 64)) }
    }

    private func loadNextChunk() throws -> Bool {
        if exhausted { return false }
        if lastLoadedKey == nil, let hint, hint.readers.isSubset(of: holdingReaders) {
            // Every chunk up to the hint held only pages that these snapshots (or a subset of
            // them) can see: with the same snapshots or more, they still do. New frees land in
            // later chunks, and held chunks are never consumed, so the prefix is unchanged.
            lastLoadedKey = hint.skipThrough
            heldPrefixEnd = hint.skipThrough
        }
        let cursor = Cursor(pages: pages, root: baseRoot, owner: pages)
        var found: Bool
        if let last = lastLoadedKey {
            found = try cursor.seek(last)
            if found && last.withUnsafeBytes({ compareBytes(cursor.key, $0) }) == 0 { found = try cursor.next() }
        } else {
            found = try cursor.first()
        }
        if !found { exhausted = true; return false }
        let chunk = try loadChunk(at: cursor)
        if prefixStillHeld {
            if chunk.reusable.isEmpty { heldPrefixEnd = chunk.key } else { prefixStillHeld = false }
        }
        chunks.append(chunk)  // oldest first, as `allocateOne` takes them
        lowHeapValid = false
        if !chunk.reusable.isEmpty {
            // New reusable pages: runs may now start lower than any floor says.
            runBits = nil
            runFloors = [:]
        }
        lastLoadedKey = chunk.key
        return true
    }

    /// The chunk at `cursor`, its pages sorted into held and reusable.
    private func loadChunk(at cursor: Cursor) throws -> FreeChunk {
        try cursor.verifySealed()  // a damaged chunk would hand out pages still in use
        let key = Array(cursor.key)
        let freedBy = try FreeListFormat.decodeKey(cursor.key, page: 0)
        let entries = try FreeListFormat.checkedEntries(cursor.value, freedBy: freedBy, pageCount: pages.limit)
        listedBy.reserveCapacity(listedBy.count + entries.count)  // (grown step by step, it rehashed every page again)
        // (A chunk loaded again finds its own key: only another chunk's, or this one's page seen
        // twice in this load, is a page listed twice, which would be handed out twice.)
        var here = Set<PageNo>(minimumCapacity: entries.count)
        for e in entries {
            if !here.insert(e.page).inserted {
                throw StorageError.corrupt(page: 0, reason: "free list lists page \(e.page) twice (twice in the chunk of transaction \(freedBy))")
            }
            if let other = listedBy.updateValue(key, forKey: e.page), other != key {
                throw StorageError.corrupt(
                    page: 0, reason: "free list lists page \(e.page) twice (chunk of transaction \(freedBy) and another)")
            }
        }
        let ids = sortedReaders
        var chunk = FreeChunk(key: key, freedBy: freedBy, held: [], reusable: [])
        chunk.reusable.reserveCapacity(entries.count)
        for e in entries {
            if isReusable(born: e.born, freedBy: freedBy, readers: ids) { chunk.reusable.append(e) } else { chunk.held.append(e) }
        }
        return chunk
    }
}

/// A leading run of free-list chunks that only held pages, with the snapshots that held them, so
/// that the next commit can skip re-reading them (a long-held snapshot otherwise makes every commit
/// scan every chunk it pins).
struct FreeScanHint: Sendable {
    var readers: Set<UInt64>
    var skipThrough: [UInt8]
}
