// The full consistency check of the newest snapshot: what `strata check` prints.
//
// A corrupt file yields problems, never a crash: the walk (`Inspector`) goes through the engine's
// throwing, bounds-checked accessors and turns every error into a reported problem.

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
        // (It reads the file's size against the snapshot's page count: cuts held off, see `holdingOffCuts`.)
        try holdingOffCuts { try read { txn in try Inspector(store: self, txn: txn, verify: true, maxProblems: maxProblems).check() } }
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
}

extension Inspector {
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

        return CheckReport(
            txnid: meta.txnid, pageSize: pageSize, pageCount: pageCount, fileSize: fileSize, metas: metas,
            pages: counts, trees: trees, problems: problems, omittedProblems: omitted, warnings: warnings)
    }

    /// `latest` is the newest commit published after the metas were read: a meta newer than the
    /// snapshot and not newer than it was committed while the check ran.
    private func checkMetas(_ metas: [MetaPageInfo], latest: UInt64) {
        // A read-only opening beside a live writer takes the newest commit that verifies, at most
        // the one the writer published: a published commit passed over is damage readers see.
        if let passedOver = passedOverPublishedCommit(metas) {
            problem(
                passedOver.slot,
                "the newest commit (transaction \(passedOver.txnid)), which the writer published and readers see, does not verify: "
                    + "\(passedOver.reason); the check read transaction \(meta.txnid)")
            warnings += Inspector.otherMetaNotes(metas, current: meta.txnid, latest: latest).filter { $0.page != passedOver.slot }
        } else {
            if latest != meta.txnid {
                warnings.append(
                    CheckProblem(page: nil, message: "a writer committed transaction \(latest) while the check ran; it checked transaction \(meta.txnid)"))
            }
            warnings += Inspector.otherMetaNotes(metas, current: meta.txnid, latest: latest)
        }
        for m in metas {
            if m.isCurrent {
                if let error = m.error {
                    // Unless a writer is rewriting it (two commits since the snapshot began).
                    if latest == meta.txnid { problem(m.slot, "the current meta page is invalid: \(error)") }
                    continue
                }
                if m.txnid != meta.txnid || m.pageCount != pageCount { continue }  // overwritten meanwhile
                if fileSize >= pageCount * UInt64(pageSize) {
                    // The decoded copy's fields (record count within bounds); the pages it
                    // names lie below the page count, which the map covers.
                    do {
                        try Recovery.verifyCommit(m.meta, map: pages.base, pageSize: pageSize)
                    } catch {
                        // The record is read from the live slot, which a second commit made
                        // meanwhile rewrites: before it publishes (a durable one syncs in between),
                        // so the slot's own transaction id says so first.
                        if store.env.readers.latest > meta.txnid + 1 { continue }
                        if (pages.base + Int(m.slot) * pageSize).u64(PageHeader.txnid) != meta.txnid { continue }
                        problem(m.slot, "the newest commit (transaction \(meta.txnid)) does not verify: \(reason(error))")
                    }
                }
            }
        }
    }

    /// The commit a live writer published that this (read-only) snapshot passed over because it
    /// does not verify, and why; nil when there is none, or when the writer has committed again
    /// meanwhile (its slot may then be rewritten under the check).
    private func passedOverPublishedCommit(_ metas: [MetaPageInfo]) -> (slot: UInt64, txnid: UInt64, reason: String)? {
        guard let state = store.env.readOnly, let published = state.newestPublished(), published > meta.txnid,
            let m = metas.first(where: { !$0.isCurrent && $0.error == nil && $0.txnid == published }),
            m.pageCount <= UInt64(Int.max / pageSize), fileSize >= m.pageCount * UInt64(pageSize)
        else { return nil }
        do {
            // (A map reaching its pages: the file may have grown past the snapshot's.)
            let map = try store.env.maps.ensure(bytes: Int(m.pageCount) * pageSize).base
            do {
                try Recovery.verifyCommit(m.meta, map: map, pageSize: pageSize)
                return nil
            } catch {
                guard state.newestPublished() == published, (map + Int(m.slot) * pageSize).u64(PageHeader.txnid) == published else { return nil }
                return (m.slot, published, reason(error))
            }
        } catch {
            return nil
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
                if latest != current { continue }  // a writer was writing it
                if m.txnid > current && m.txnid % 2 == m.slot {
                    notes.append(
                        CheckProblem(page: m.slot, message: "newest commit \(m.txnid) was not completed (\(error)); the file opens at commit \(current)"))
                } else {
                    notes.append(
                        CheckProblem(
                            page: m.slot,
                            message:
                                "meta page does not verify (\(error)): a commit after \(current) torn by a crash, or damage to the meta page of an earlier commit; the file opens at commit \(current)"
                        ))
                }
            } else if m.txnid > latest {
                notes.append(
                    CheckProblem(
                        page: m.slot,
                        message:
                            "newest commit \(m.txnid) was not completed (its pages do not all verify, or it was never published); the file opens at commit \(current)"
                    ))
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
}

extension MetaPageInfo {
    /// The commit this page describes, as `Recovery.verifyCommit` takes it.
    var meta: Meta {
        Meta(
            txnid: txnid, pageSize: pageSize, pageCount: pageCount,
            catalog: TreeInfo(root: catalogRoot, count: catalogCount),
            free: TreeInfo(root: freeRoot, count: freeCount),
            recordRun: recordRun, recordCount: recordCount, formatVersion: formatVersion)
    }
}
