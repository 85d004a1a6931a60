// The pin of a run of `.noSync` commits, and when the run renews it.
//
// A run's first commit makes the commit before it the commit log's one frame (`CommitLog.pin`,
// called from `secureLog`): whatever a power loss does to the run's meta pages and pages, a replay
// brings that commit back. So no page it sees may be overwritten while the run lasts: the later
// transactions of the run count it among the live snapshots (`CommitLog.pinned`), and the pages
// the run frees that it sees stay free but unused. The run ends at the next durable commit.
//
// Until then the held pages cost space, like a snapshot kept open. So a `.noSync` transaction
// renews the pin before it writes anything once the run has freed `runPinLimit` such pages (or
// when idle compaction wants them): it syncs the page file, so that its own base is on the disk,
// and makes that base the frame instead; the held pages are reusable at once. That costs a sync
// of the page file and one of the log, once per `runPinLimit` pages the run frees. A durable
// transaction ends the run instead (`secureBase`).

extension WriteTransaction {
    /// Pages the run may free under its pin before the pin is renewed: a thirty-second of the file,
    /// at least 64. The file grows by at most about that many pages for the pin.
    var runPinLimit: Int { max(64, Int(pageCount / 32)) }

    /// Renews the run's pin when it holds `runPinLimit` pages or more; called at the start of
    /// a `.noSync` transaction.
    func renewRunPinIfHoldingMuch() throws {
        guard runPin != nil, durability == .noSync, let log = env.commitLog,
            log.heldByPin >= runPinLimit || base.recordCount > Meta.inlineCapacity(pageSize: pageSize)
        else { return }
        try releaseRunPin()
    }

    /// The pages of the run's earlier commits that this `.noSync` commit still uses, with their
    /// checksums, for its commit record: the commit it began from is one of the run (unsynced,
    /// with no sync since), so a power loss may keep this commit's meta page and pages and lose
    /// theirs, and opening must then not take this commit. That commit's record lists its own
    /// pages and those it carried; this one drops the pages it frees. Empty otherwise.
    ///
    /// ```swift
    /// record += try carriedRecord()
    /// ```
    func carriedRecord() throws -> [RecordEntry] {
        guard durability == .noSync, runPin != nil else { return [] }
        let gone = Set(freed.lazy.map(\.page))
        return try Recovery.commitRecord(base, map: pages.base, pageSize: pageSize).compactMap { entry in
            gone.contains(entry.page) ? nil : RecordEntry(page: entry.page, checksum: entry.checksum, carried: true)
        }
    }

    /// Counts the pages this committed transaction freed that the pin holds for the transactions
    /// after it (born at or before the log's frame).
    func noteRunPinHolds() {
        guard let log = env.commitLog, let pin = log.pinned(base: txnid), pin < txnid else { return }
        log.heldByPin += freed.reduce(0) { $0 + ($1.born <= pin ? 1 : 0) }
    }

    /// Syncs the page file and makes this transaction's base the log's frame: the pages only the
    /// old pin held become reusable.
    ///
    /// ```swift
    /// if let pin = runPin, allocator.heldOnly(by: pin) > 0 { try releaseRunPin() }
    /// ```
    func releaseRunPin() throws {
        guard let pin = runPin, durability == .noSync else { return }
        try pinBase()
        guard basePinned else { return }
        logSecured = true
        runPin = nil
        allocator.release(snapshot: pin)
    }

    /// Makes this transaction's base the commit log's one frame (`CommitLog.pin`), reading its meta
    /// page from its slot (this transaction has not written its own yet); `basePinned` says whether
    /// there was a log to do it in.
    func pinBase() throws {
        guard let log = env.commitLog else { return }
        let slot = UnsafeRawBufferPointer(start: env.maps.current.base + Int(base.txnid % 2) * pageSize, count: pageSize)
        basePinned = try log.pin(base: base.txnid, meta: slot, pageFile: env.file)
    }
}
