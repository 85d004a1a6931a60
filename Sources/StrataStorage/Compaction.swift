import Synchronization

// Compaction: a file whose size follows its live data (FORMAT.md §3.1).
//
// It is done by ordinary commits, so it is as crash-safe as any commit and never blocks a reader:
//
// * Trim. A commit whose free list holds the last pages of the file, seen by no snapshot, drops
//   them from the free list and lowers the meta's page count. Once that commit is on disk, the
//   file is truncated, in steps (`returnFreeTail`) so that a workload that grows and shrinks
//   around one size does not truncate and regrow the file on every commit.
// * Move. When the reusable free pages exceed `Compaction.freeFraction` of the file, the commit
//   allocates lowest page first and copies a bounded number of live pages from the end of the
//   file into free pages nearer its start. Under copy-on-write a moved page is just a page
//   written again: the copy goes where the allocator puts it and the old page is freed like any
//   other, for a later commit to trim once no snapshot sees it. A reader's snapshot never changes.
//
// The pages to move are found through the trees' branch pages (which name their children) without
// reading leaves. Overflow runs are named only by the leaves that hold them: a commit's automatic
// compaction leaves them where they are (finding them means reading every leaf), and they move when
// their value is written again. `Store.compact()` and idle-time compaction, which run when the
// writes have stopped, read the leaves when the end of the file holds runs, and move those runs
// first, into the lowest free stretch long enough for each (before single pages fill the holes
// page by page; a run is written anew at the end of the file when no free stretch below fits).
//
// Unregistered snapshots (a read-only opening in another process, ReadOnly.swift) read pages the
// writer cannot know they see, so a truncation could pull a page from under them (SIGBUS). Each
// holds a shared fcntl lock on one byte of the page file far past its end while it lives; the
// writer truncates only when it gets that byte exclusively, without waiting.

/// When commits give space back to the file system.
///
/// ```swift
/// var options = StoreOptions()
/// options.compaction = .off                                   // never shrink the file
/// options.compaction = Compaction(freeFraction: 0.05)         // keep it tighter
/// ```
public struct Compaction: Sendable, Equatable {
    /// Whether commits trim free pages off the end of the file and move pages to let them.
    public var isEnabled: Bool
    /// Reusable free pages, as a fraction of the file's pages, above which commits move live pages
    /// from the end of the file into free pages nearer its start: 0 to 1 (opening a store with
    /// another value, NaN included, throws `StorageError.invalidOption`).
    public var freeFraction: Double
    /// Live pages a commit moves at most when it moves pages, or as many as it writes for itself
    /// if that is more (up to 16 times this): its added cost stays proportional to its own. At
    /// least 1 (opening a store with less, or with more than `Int.max / 16`, throws
    /// `StorageError.invalidOption`).
    public var pagesPerCommit: Int

    /// How long no commit must have been made through this process, after one that left more than
    /// `freeFraction` of the file free (or freed a large part of it), before a background thread
    /// compacts the file: it makes compaction commits, each moving up to 16 × `pagesPerCommit`
    /// pages and trimming the end, until the file is compact, a write comes, or another process
    /// writes. A bulk delete's file then shrinks soon after the deleting stops, without slowing
    /// the deletes down. nil: only commits compact, each a little. At least 1 ms (opening
    /// throws `invalidOption` otherwise).
    ///
    /// ```swift
    /// var options = StoreOptions()
    /// options.compaction.idleDelay = .seconds(5)   // wait longer for the app to go quiet
    /// options.compaction.idleDelay = nil           // never write in the background
    /// ```
    public var idleDelay: Duration?

    /// A policy with these settings; the defaults are those of `automatic`.
    ///
    /// ```swift
    /// var options = StoreOptions()
    /// options.compaction = Compaction(freeFraction: 0.05, pagesPerCommit: 256)
    /// ```
    public init(isEnabled: Bool = true, freeFraction: Double = 0.125, pagesPerCommit: Int = 64, idleDelay: Duration? = .milliseconds(500)) {
        self.isEnabled = isEnabled
        self.freeFraction = freeFraction
        self.pagesPerCommit = pagesPerCommit
        self.idleDelay = idleDelay
    }

    /// The largest `pagesPerCommit` a store accepts: 16 times it must not overflow.
    static let maxPagesPerCommit = Int.max / 16

    /// The default: trim whenever the tail is free, move pages past an eighth free.
    public static let automatic = Compaction()
    /// Commits never trim or move pages; the file only grows (`Store.compact()` still works).
    public static let off = Compaction(isEnabled: false)
}

/// What the writer carries from one commit to the next (kept in `Environment`, writer only).
struct CompactionSchedule {
    /// Commits left before one loads the whole free list to look for a free tail and holes.
    var commitsUntilCheck = 0
    /// The last check found enough holes to move pages into: keep checking on every commit.
    var moving = false
    /// The snapshots live at the last check: once one of them ends, the pages it held may be free.
    var readersAtCheck: Set<UInt64> = []
    /// Pages freed by the commits since the last check (theirs included): many small deletes
    /// between two checks hole the file as much as one large one.
    var freedSinceCheck = 0
}

/// The byte of the page file that unregistered snapshots share-lock and a truncation takes
/// exclusively (never written: it lies far past the end of any file).
enum ShrinkLock {
    static let offset: Int64 = 1 << 62
    /// Unregistered snapshots (and page copies) alive in this process, by file (device and inode, so that another
    /// path to the same file counts too): fcntl locks never conflict within a process, so a writer
    /// here must not truncate a file while one of this process's snapshots of it lives. Per file,
    /// so that a read-only store of one file never stops another file from shrinking.
    static let localHolders = Mutex<[FileIdentity: Int]>([:])

    /// One more (`delta` 1) or one fewer (-1) of this process's holders of the file `identity`.
    static func countLocal(_ identity: FileIdentity, _ delta: Int) {
        localHolders.withLock { holders in
            let count = holders[identity, default: 0] + delta
            holders[identity] = count > 0 ? count : nil
        }
    }

    /// Commits between checks for a free tail while there is nothing to move.
    static let checkInterval = 16
}

extension Store {
    /// Runs `body` while no writer, in this process or another, cuts the file (when `needed`).
    /// A snapshot pins the pages it can reach, not its free ones: a commit may trim free pages at
    /// the end and cut the file below the snapshot's page count. What reads every page of a
    /// snapshot (a page copy, `check()`) holds cuts off from before its snapshot begins, as an
    /// unregistered snapshot does: this process's writers see `localHolders`, other processes'
    /// the shared lock on the shrink byte. (A read-only store's snapshots do so already, on the
    /// same descriptor: locking and unlocking the byte again here would drop their lock.)
    func holdingOffCuts<R>(if needed: Bool = true, _ body: () throws -> R) rethrows -> R {
        guard needed, !env.isReadOnly else { return try body() }
        let file = env.file
        let identity = env.cutHolders
        if let identity { ShrinkLock.countLocal(identity, 1) }
        // Counted: two such reads on two threads share the lock, and the first to end must not
        // drop it under the other (the locks of one open file description do not nest).
        env.cutsHeldOff.take(file)
        defer {
            env.cutsHeldOff.release(file)
            if let identity { ShrinkLock.countLocal(identity, -1) }
        }
        return try body()
    }
}

extension WriteTransaction {
    /// Runs before the commit writes the catalog: decides whether this commit compacts, and if
    /// so moves pages. Returns whether the whole free list is loaded (then `trimFreeTail` can
    /// see every free page). `force` moves everything movable (`Store.compact()`).
    func compactIfDue(force: Bool = false, now: Bool = false) throws -> Bool {
        guard compaction.isEnabled || force else { return false }
        var schedule = env.compactionSchedule
        defer {
            // A commit that frees many pages, or the last of several that together did, makes the
            // next one look (they are reusable only then).
            schedule.freedSinceCheck += freed.count
            if freedMuch || schedule.freedSinceCheck >= muchFreed { schedule.commitsUntilCheck = 0 }
            env.compactionSchedule = schedule
        }
        let readers = allocator.holdingReaders
        if !force && !now && !schedule.moving && schedule.commitsUntilCheck > 0 && schedule.readersAtCheck.isSubset(of: readers) {
            schedule.commitsUntilCheck -= 1
            return false
        }
        schedule.commitsUntilCheck = ShrinkLock.checkInterval
        schedule.readersAtCheck = readers
        schedule.freedSinceCheck = 0
        try allocator.loadAll()
        let reusable = allocator.reusablePages.count + spare.count
        schedule.moving = reusable > movingThreshold
        if schedule.moving || (force && reusable > 0) {
            try allocator.preferLowPages()
            // At least its own writes or a quarter of the holes (a file that just lost most of its
            // data is compact again within a few commits), at most 16 times `pagesPerCommit`.
            let wanted = max(compaction.pagesPerCommit, pages.dirty.count, reusable / 4)
            let budget = force ? Int.max : min(wanted, 16 * compaction.pagesPerCommit)
            try moveTail(budget: budget, reusable: reusable)
        }
        return true
    }

    /// Reusable free pages above which commits move pages (`Compaction.freeFraction` of the file).
    private var movingThreshold: Int { max(16, Int(Double(pageCount) * compaction.freeFraction)) }

    /// Whether this commit freed a sixteenth of the file or more: they are reusable at the next
    /// commit, which then checks for holes and a free tail.
    /// (At least 16, the floor of `movingThreshold`: a small file that loses most of its pages in
    /// one commit is holed as much as a large one.)
    private var freedMuch: Bool { freed.count >= muchFreed }

    /// Pages freed that make "much": a sixteenth of the file, at least 16.
    private var muchFreed: Int { max(16, Int(base.pageCount / 16)) }

    /// Whether this commit freed much, or the commits since the last check of the free list did
    /// between them, this one included (a run of small deletes).
    var freedMuchLately: Bool { freedMuch || env.compactionSchedule.freedSinceCheck >= muchFreed }

    /// Whether this commit leaves the file with holes for idle-time compaction to fill: its check
    /// found more than `freeFraction` free, or it freed much (`freedMuchLately`).
    var leavesHoles: Bool {
        compaction.isEnabled && (env.compactionSchedule.moving || freedMuchLately)
    }

    /// Whether an idle-time compaction commit would move or trim pages now.
    func idleCompactionIsDue() throws -> Bool {
        guard compaction.isEnabled else { return false }
        try allocator.loadAll()
        // The writes have stopped: a `.noSync` run gives up the pages its pin holds (RunPin.swift).
        if let pin = runPin, allocator.heldOnly(by: pin) > 0 { try releaseRunPin() }
        let tail = try freeTailPages()
        return allocator.reusablePages.count + spare.count > movingThreshold || tail >= 256
    }

    /// Copies up to `budget` live pages from the end of the file to lower free pages.
    private func moveTail(budget: Int, reusable: Int) throws {
        guard budget > 0, let lowest = lowestFreePage() else { return }
        // Were every free page at the end, the file would stop here: live pages past it move.
        let floor = max(lowest + 1, pageCount > UInt64(reusable) ? pageCount - UInt64(reusable) : 2)
        var candidates: [Candidate] = []
        try collect(root: catalog.root, owner: .catalog, floor: floor, into: &candidates)
        try collect(root: freeTree.root, owner: .free, floor: floor, into: &candidates)
        for name in try listTrees(pages: pages, catalogRoot: catalog.root) {
            guard let root = try state(name)?.info.root else { continue }
            try collect(root: root, owner: .tree(name), floor: floor, into: &candidates)
        }
        candidates.sort { $0.page > $1.page }
        var moved = 0
        if forceCompaction || cutsToFit { moved += try moveRuns(floor: floor, budget: budget) }
        for candidate in candidates {
            if moved >= budget { break }
            // Copies land lowest first; once the holes are above a page, moving it gains nothing.
            guard let low = lowestFreePage(), low < candidate.page, pages.dirty[candidate.page] == nil,
                pages.spilled.isEmpty || pages.spilled[candidate.page] == nil
            else { continue }
            try candidate.key.withUnsafeBytes { (key) throws in
                switch candidate.owner {
                case .catalog:
                    _ = try touchPath(&catalog, key: key)
                case .free:
                    _ = try touchPath(&freeTree, key: key)
                case .tree(let name):
                    guard let state = try state(name) else { return }
                    var info = state.info
                    _ = try touchPath(&info, key: key)
                    state.info = info
                    state.modified = true  // a new root for the catalog; no key changed
                }
            }
            moved += 1
        }
        movedPages += moved
    }

    /// Moves the overflow runs at or above `floor` (highest first, up to `budget` pages) into the
    /// lowest free stretch that fits each, when it lies below the run: the value is written again
    /// under its key, which allocates the lowest fitting stretch and frees the old run. Reads every
    /// leaf of the trees, so it runs only when a page past `floor` is a run's first page.
    /// Returns the pages moved.
    private func moveRuns(floor: PageNo, budget: Int) throws -> Int {
        guard try tailHoldsRuns(from: floor) else { return 0 }
        var moved = 0
        // The shortest run no free stretch fits: the free pages only get fewer in a transaction,
        // so no longer run fits either, and its search (a pass over the free list) is skipped.
        var noFit = Int.max
        for name in try listTrees(pages: pages, catalogRoot: catalog.root) {
            guard let state = try state(name), state.info.root != 0 else { continue }
            var found: [(key: [UInt8], run: PageNo)] = []
            let cursor = Cursor(pages: pages, root: state.info.root, owner: pages)
            var more = try cursor.first()
            while more {
                if let run = try cursor.overflowRun(), run >= floor { found.append((Array(cursor.key), run)) }
                more = try cursor.next()
            }
            found.sort { $0.run > $1.run }
            for (key, run) in found {
                if moved >= budget { return moved }
                guard let value = try key.withUnsafeBytes({ try pages.get(root: state.info.root, key: $0).map(Array.init) }) else { continue }
                // The run the value gets when written again (as `makeLeafEntry` sizes it).
                let count = (PageHeader.size + value.count + pageSize - 1) / pageSize
                if count >= noFit { continue }
                guard let low = try allocator.lowestRun(count) else {
                    noFit = count
                    continue
                }
                if low >= run { continue }
                var info = state.info
                try key.withUnsafeBytes { k in try value.withUnsafeBytes { v in _ = try put(&info, key: k, value: v) } }
                state.info = info
                state.modified = true  // a new root for the catalog; no key changed
                moved += count
            }
        }
        return moved
    }

    /// Whether a page at or above `floor` that no free list names starts an overflow run. Freed
    /// runs keep their header until the page is written again, so free pages are passed over: else
    /// every idle commit would read every leaf while a held snapshot keeps such pages in the tail.
    /// (Runs this transaction wrote are left: they were placed lowest first.) Needs every chunk
    /// of the free list loaded.
    private func tailHoldsRuns(from floor: PageNo) throws -> Bool {
        guard floor < pageCount else { return false }
        var free = Set(spare.lazy.filter { $0 >= floor })
        for entry in freed where entry.page >= floor { free.insert(entry.page) }
        for chunk in allocator.chunks {
            for entry in chunk.reusable where entry.page >= floor { free.insert(entry.page) }
            for entry in chunk.held where entry.page >= floor { free.insert(entry.page) }
        }
        var page = floor
        while page < pageCount {
            if pages.dirty[page] == nil, !free.contains(page), let p = try? pages.page(page), p.u8(PageHeader.type) == PageType.overflow.rawValue {
                return true
            }
            page += 1
        }
        return false
    }

    private enum Owner { case catalog, free, tree(String) }

    private struct Candidate {
        var page: PageNo
        var owner: Owner
        /// A key whose path from the root passes through the page.
        var key: [UInt8]
    }

    /// Adds the pages at or above `floor` of the tree at `root` to `candidates`, reading only its
    /// branch pages. Each child is reached by the key that routes to it (the empty key, below
    /// every key, for the leftmost path).
    private func collect(root: PageNo, owner: Owner, floor: PageNo, into candidates: inout [Candidate]) throws {
        guard root != 0 else { return }
        if root >= floor { candidates.append(Candidate(page: root, owner: owner, key: [])) }
        var height = 0
        var node = try pages.node(root)
        while !node.isLeaf {
            height += 1
            if height > maxTreeDepth { throw StorageError.corrupt(page: node.pgno, reason: "tree deeper than \(maxTreeDepth) levels") }
            node = try pages.node(try node.child(0))
        }
        guard height > 0 else { return }
        var stack: [(page: PageNo, height: Int, key: [UInt8])] = [(root, height, [])]
        var seen: Set<PageNo> = []  // a damaged tree may reach a branch by two paths (2^height walks)
        while let (page, height, lower) = stack.popLast() {
            if !seen.insert(page).inserted { throw StorageError.corrupt(page: page, reason: "page reached by two paths of one tree") }
            let branch = try pages.node(page)
            if branch.isLeaf { throw StorageError.corrupt(page: page, reason: "a leaf where the tree's height puts a branch") }
            for i in 0..<branch.count {
                let child = try branch.child(i)
                let key = i == 0 ? lower : Array(try branch.key(i))
                if child >= floor { candidates.append(Candidate(page: child, owner: owner, key: key)) }
                if height > 1 { stack.append((child, height - 1, key)) }
            }
        }
    }

    /// The lowest page this transaction could allocate without growing the file.
    private func lowestFreePage() -> PageNo? {
        let fromSpare = spare.min()
        guard let fromList = allocator.lowestReusable else { return fromSpare }
        return min(fromList, fromSpare ?? fromList)
    }

    /// Reusable free pages at the end of the file (loads the whole free list).
    func freeTailPages() throws -> UInt64 {
        try allocator.loadAll()
        return pageCount - freeTailStart()
    }

    /// The first page of the run of reusable free pages (committed or this transaction's spare)
    /// that ends the file; `pageCount` when the last page is in use. Needs every chunk loaded.
    private func freeTailStart() -> UInt64 {
        var free = Set(allocator.reusablePages)
        free.formUnion(spare)
        var start = pageCount
        while start > 2 && free.contains(start - 1) { start -= 1 }
        return start
    }

    /// Whether this commit freed so much of the file that a follow-up commit should trim it
    /// (`Store.followUpCompaction`).
    var wantsFollowUp: Bool {
        compaction.isEnabled && freed.count >= max(1024, Int(pageCount / 8))
    }

    /// Lowers the page count past the free pages at the end of the file (run after the free list
    /// is written, with every chunk loaded). Their entries leave the free list; the caller writes
    /// it again.
    func trimFreeTail() throws -> Bool {
        guard allocator.isFullyLoaded else { return false }
        let newCount = freeTailStart()
        guard newCount < pageCount else { return false }
        let removed = Set(newCount..<pageCount)
        allocator.removeReusable(removed)
        spare.removeAll { removed.contains($0) }
        trimmedPages += Int(pageCount - newCount)
        pageCount = newCount
        return true
    }

    /// After the commit is durable: gives the file's unused end back to the file system, in steps.
    /// The file is cut only once it holds two growth steps (`growthStep`) beyond its pages, so that
    /// a workload growing and shrinking around one size does not cut and regrow it on every
    /// commit; it keeps an eighth of its pages beyond them, at most one growth step (past 512 MiB
    /// of pages an eighth is more than the two steps that allow a cut: the cut would grow the file,
    /// and then come again at every commit). An idle-time compaction commit and
    /// `Store.compact()` cut down to that at once. Skipped, and tried again at a later commit,
    /// while an unregistered snapshot holds the shrink lock. Failure here loses nothing (the
    /// commit is done): the file just stays larger.
    func returnFreeTail() {
        guard compaction.isEnabled || forceCompaction,
            let target = Self.cutTarget(needed: pageCount * UInt64(pageSize), fileSize: fileSize, pageSize: pageSize, toFit: cutsToFit || forceCompaction)
        else { return }
        let file = env.file
        let identity = env.cutHolders
        // Not when a snapshot holds the lock now (asked without a sync first; asked again below).
        if file.isLockedByOthers(offset: ShrinkLock.offset, length: 1) == true { return }
        if let identity, ShrinkLock.localHolders.withLock({ $0[identity, default: 0] > 0 }) { return }
        // The meta that stopped needing the tail must be on disk before the tail goes: else a
        // crash could bring back the previous meta, whose pages would lie past the end.
        // That sync also ends the commit log's generation: a replay would bring back a commit whose
        // pages may lie past the cut.
        if durability == .noSync {
            guard (try? file.sync()) != nil else { return }
            if let log = env.commitLog, (try? log.end(pageFile: file)) == nil { return }
        }
        // The check of this process's holders and the cut happen under their lock: a snapshot (or
        // a page copy) of this process that begins meanwhile either stops the cut or, counted
        // after it, finds the file already cut, never a cut under its feet.
        let cut = ShrinkLock.localHolders.withLock { holders -> Bool in
            if let identity, holders[identity, default: 0] > 0 { return false }
            guard (try? file.lock(offset: ShrinkLock.offset, length: 1, exclusive: true, wait: false)) == true else { return false }
            defer { file.unlock(offset: ShrinkLock.offset, length: 1) }
            return (try? file.truncate(to: target)) != nil
        }
        if cut {
            fileSize = target
            truncations += 1
        }
    }

    /// The size to cut a file of `fileSize` bytes to when its pages take `needed`, or nil to leave
    /// it (`returnFreeTail`); `toFit`: an idle-time compaction commit or `compact()`, which run
    /// when the writes have stopped and cut whatever lies past the target.
    static func cutTarget(needed: UInt64, fileSize: UInt64, pageSize: Int, toFit: Bool) -> UInt64? {
        let step = growthStep(needed: needed)
        let target = (needed + min(needed / 8, step) + UInt64(pageSize) - 1) / UInt64(pageSize) * UInt64(pageSize)
        return fileSize > (toFit ? target : needed + 2 * step) ? target : nil
    }

    /// How far the file grows beyond its pages when it must grow: an eighth of its size, 1 MiB to
    /// 64 MiB (see `growFile`).
    static func growthStep(needed: UInt64) -> UInt64 {
        min(max(needed / 8, 1 << 20), 64 << 20)
    }
}

extension FreePageAllocator {
    /// Every reusable page loaded.
    var reusablePages: [PageNo] {
        var all: [PageNo] = []
        for chunk in chunks { all.append(contentsOf: chunk.reusable.lazy.map(\.page)) }
        return all
    }
}

extension Store {
    /// After a commit that freed a large part of the file (a bulk delete, a dropped tree): one
    /// more commit, made only if the end of the file is free now. The pages a commit frees become
    /// reusable once it is the newest and no snapshot sees them, which without this would wait
    /// for the next write. Runs under the writer's locks; a failure leaves the file as it was.
    func followUpCompaction(durability: Durability) {
        guard let txn = try? WriteTransaction(env: env, durability: durability, memory: transactionMemory, compaction: compaction) else { return }
        do {
            guard try txn.freeTailPages() >= 256 else { txn.abort(); return }
            txn.compactNow = true
            try txn.commit()
        } catch {
            txn.abort()
        }
    }
}

/// What compaction did in one `Store.compact()`.
///
/// ```swift
/// let report = try store.compact()
/// print("freed \(report.bytesBefore - report.bytesAfter) bytes")
/// ```
public struct CompactionReport: Sendable, Equatable {
    /// The file's size before, in bytes.
    public var bytesBefore: UInt64
    /// The file's size after, in bytes.
    public var bytesAfter: UInt64
    /// Commits it made.
    public var commits: Int
}

extension Store {
    /// Compacts the file now: moves every movable page to the lowest free pages and returns the
    /// free end of the file, in a few commits (automatic compaction does the same a little at a
    /// time). Readers keep reading meanwhile; pages a live snapshot sees stay until it ends.
    /// Under `withProgress` it reports the pages given back so far (phase "compact") and stops
    /// between two commits, keeping what it compacted, with `CancellationError`.
    ///
    /// ```swift
    /// try store.write { txn in _ = try txn.dropTree("log") }
    /// let report = try store.compact()
    /// print("\(report.bytesBefore) → \(report.bytesAfter) bytes in \(report.commits) commits")
    /// ```
    @discardableResult
    public func compact() throws -> CompactionReport {
        let before = try env.file.size()
        var commits = 0
        var lastCount = UInt64.max
        var stalls = 0
        // Without a snapshot when it can: compacting must not fail for want of a reader slot.
        let pageCount = { [self] in try newestMetaFields()?.pageCount ?? read { $0.meta.pageCount } }
        // Progress in pages given back; a stop comes between commits, each whole.
        let control = OperationControl.current
        control?.begin("compact", total: nil)
        var reported = try pageCount()
        // Each commit moves what it can and trims what the previous one freed; stop when the page
        // count stops falling twice in a row.
        while commits < 64 {
            try write(durability: .full) { txn in txn.forceCompaction = true }
            commits += 1
            let now = try pageCount()
            if now < reported {
                try control?.step(Int(clamping: reported - now))
                reported = now
            }
            if now >= lastCount { stalls += 1 } else { stalls = 0 }
            if stalls >= 2 { break }
            lastCount = min(lastCount, now)
        }
        return CompactionReport(bytesBefore: before, bytesAfter: try env.file.size(), commits: commits)
    }
}
