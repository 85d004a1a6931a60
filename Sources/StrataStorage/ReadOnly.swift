#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

// Opening a file read-only (`StoreOptions.readOnly`): what `strata` does to inspect a file without
// changing anything on disk. FORMAT.md §4.2.
//
// A read-only environment opens the page file O_RDONLY and never creates, grows or writes it. It
// never creates or writes the lock file, and takes none of its fcntl locks: the "alive" lock would
// make the next writer skip recovery, and a reader slot is a write. So each snapshot picks its meta
// page the way recovery does (the newest whose commit verifies), and, being unregistered, is not
// protected from a writer in another process reusing its pages. It detects that instead:
//
// A page a snapshot of commit S reads can only be overwritten by a commit that reuses it, which
// comes after the commit that freed it: commit S + 2 at the earliest. A commit's pages are written
// after the previous commit's meta page (a writer writes its pages after the commit it starts from
// is complete), so S + 2 writes nothing before commit S + 1 has rewritten meta slot (S + 1) % 2. A
// snapshot copies both meta pages when it begins; if both still hold the same bytes after it read
// its pages, no commit S + 2 wrote anything meanwhile and what it read was commit S. If not, the
// read throws `fileChangedDuringRead`, and the caller reads again. A read that a busy writer
// overtakes every time can instead run with writers held off (`holdingWritersOff`): the one lock a
// read-only environment takes on the lock file, the writer byte held shared.

/// What a read-only environment keeps: the lock file's reader table seen through a read-only map
/// (to list other processes' snapshots), and the newest commit it has verified.
final class ReadOnlyState: Sendable {
    /// The lock file's reader table, when there is a valid lock file (nil otherwise).
    let lockView: ReaderTable?
    private let lockViewMap: (address: UInt, length: Int)?
    /// The lock file, kept open (read-only) to ask whether a process has the database open
    /// read-write; only where its locks are open file description locks, which closing this
    /// descriptor cannot drop (PosixFile.lockCommands). Nil elsewhere.
    let lockFile: PosixFile?
    /// Transaction id and stored meta checksum of the newest commit verified, so that each new
    /// snapshot of an unchanged file does not read that commit's pages again.
    private let verified = Mutex<(txnid: UInt64, checksum: UInt64)?>(nil)

    /// The page file, as `ShrinkLock.localHolders` counts its snapshots.
    let identity: FileIdentity
    /// Snapshots of this environment alive now; while any is, this process share-locks the
    /// page file's shrink byte (Compaction.swift).
    private let shrinkLock = SharedByteLock(offset: ShrinkLock.offset)

    /// Called as an unregistered snapshot begins: no writer truncates the file while it lives.
    /// Where the file system has no fcntl locks the snapshot goes unprotected (as it is from reuse).
    func holdShrinkLock(_ file: FileIO) {
        ShrinkLock.countLocal(identity, 1)
        shrinkLock.take(file)
    }

    func releaseShrinkLock(_ file: FileIO) {
        shrinkLock.release(file)
        ShrinkLock.countLocal(identity, -1)
    }

    /// Callers of `holdingWritersOff` running now in this process.
    private let writersHeldOff = SharedByteLock(offset: LockLayout.writerLockByte, inTurn: true)

    /// Runs `body` while no writer in another process commits: a shared lock on the lock file's
    /// writer byte, which every writer takes exclusively for each transaction (waiting for the
    /// writer inside one to finish first). Where that cannot be taken (no lock file, or no open
    /// file description locks to keep it by: see `lockFile`) `body` runs unprotected.
    func holdingWritersOff<R>(_ body: () throws -> R) rethrows -> R {
        guard let lockFile else { return try body() }
        writersHeldOff.take(lockFile)
        defer { writersHeldOff.release(lockFile) }
        return try body()
    }

    init(identity: FileIdentity, lockView: ReaderTable?, lockViewMap: (UInt, Int)?, lockFile: PosixFile?) {
        self.identity = identity
        self.lockView = lockView
        self.lockViewMap = lockViewMap
        self.lockFile = lockFile
    }

    /// The newest commit a snapshot may choose: while a process has the database open read-write
    /// (it holds the "alive" lock), the lock file's published `latest` — a meta page past it is a
    /// commit not acknowledged yet, or one whose writer died before acknowledging it, which the
    /// next writer spoils and commits over (FORMAT.md §4.2). Nil when no process has it open:
    /// then the next opener's recovery takes the newest meta page that verifies, as snapshots do.
    func newestPublished() -> UInt64? {
        guard let lockView, let lockFile, lockFile.isLockedByOthers(offset: LockLayout.aliveLockByte) == true else { return nil }
        return lockView.latest
    }

    /// Whether a process holds the writer lock now (it is inside a write transaction or a commit);
    /// false where that cannot be asked (no lock file, or no open file description locks).
    func writerIsActive() -> Bool {
        lockFile?.isLockedByOthers(offset: LockLayout.writerLockByte) == true
    }

    deinit {
        if let lockViewMap { unmapMemory(lockViewMap.address, length: lockViewMap.length) }
    }

    func isVerified(_ meta: Meta, checksum: UInt64) -> Bool {
        verified.withLock { $0.map { $0.txnid == meta.txnid && $0.checksum == checksum } ?? false }
    }

    func remember(_ meta: Meta, checksum: UInt64) {
        verified.withLock { $0 = (meta.txnid, checksum) }
    }
}

/// A shared fcntl lock on one byte, held by this process while any of its holders holds it: the
/// locks of one open file description do not nest (the first unlock would end them all), so the
/// first holder takes it (waiting for an exclusive holder to let go) and the last lets it go.
/// Where the lock cannot be taken the holders go on without it.
final class SharedByteLock: Sendable {
    private let offset: Int64
    /// Whether the lock is the writer lock, taken in turn with writers (WriterLock.swift).
    private let inTurn: Bool
    private let holders = Mutex<Int>(0)

    init(offset: Int64, inTurn: Bool = false) {
        self.offset = offset
        self.inTurn = inTurn
    }

    func take(_ file: FileIO) {
        holders.withLock { count in
            if count == 0 {
                if inTurn {
                    try? WriterLock.take(file, exclusive: false)
                } else {
                    _ = try? file.lock(offset: offset, length: 1, exclusive: false, wait: true)
                }
            }
            count += 1
        }
    }

    func release(_ file: FileIO) {
        holders.withLock { count in
            count -= 1
            if count == 0 { file.unlock(offset: offset, length: 1) }
        }
    }
}

extension Environment {
    /// A read-only environment for `path`; the read-write one if this process already has the file
    /// open (its snapshots are then registered like any other).
    static func openReadOnly(path: String, options: StoreOptions, wrap: ((FileIO) -> FileIO)?) throws -> Environment {
        waitForRecoveryOutsideRegistry(path: path)
        return try registry.withLock { (registry) throws -> Environment in
            // Found by name before any descriptor is opened: one opened and closed again would, with
            // classic fcntl locks, drop the locks this process holds on the file (FileIO.swift).
            if let identity = FileIdentity(path: path), let env = try registry.shareable(identity, readOnlyWillDo: true) {
                return try env.shared(path: path, options: options)
            }
            let posix = try PosixFile(path: path, mode: .readOnly)
            let status = try posix.status()
            let identity = FileIdentity(status)
            if let env = try registry.shareable(identity, readOnlyWillDo: true) { return try env.shared(path: path, options: options) }
            if status.st_mode & 0o170000 != 0o100000 {
                throw StorageError.notAStrataFile(path: path, reason: "not a regular file")
            }
            let file: FileIO = wrap?(posix) ?? posix
            let pageSize = try detectPageSize(file)
            if let wanted = options.pageSize, wanted != pageSize {
                throw StorageError.pageSizeMismatch(path: path, found: pageSize, expected: wanted)
            }
            if try file.size() < 2 * UInt64(pageSize) {
                throw StorageError.truncated(path: path, expectedBytes: 2 * UInt64(pageSize), actualBytes: try file.size())
            }
            let view = lockFileView(path: LockFileName.path(for: path), registry: registry)
            // A read-write process that opens the file alone holds "alive" exclusively while it
            // replays the commit log: the page file may lack the log's commits until then. With
            // no read-write process alive, the page file must already hold what the commit log
            // made durable (a read-only process cannot replay it). (One answer decides both: a
            // second query could meet an opener that began its replay in between.)
            let alive = try view.flatMap { try waitForRecovery($0.file, path: path) }
            if alive != .shared {
                // The check maps the page file and reads it; a read-write opening that begins
                // meanwhile may cut the file's end under that map (SIGBUS). Cuts are held off as
                // for a snapshot: this process's writers see `localHolders`, other processes' the
                // shared lock on the shrink byte. (No store of this file lives in this process
                // yet, so unlocking the byte drops no other holder's lock, even with classic
                // fcntl locks.)
                ShrinkLock.countLocal(identity, 1)
                _ = try? file.lock(offset: ShrinkLock.offset, length: 1, exclusive: false, wait: true)
                defer {
                    file.unlock(offset: ShrinkLock.offset, length: 1)
                    ShrinkLock.countLocal(identity, -1)
                }
                try LogReplay.checkApplied(pageFile: file, pagePath: path, pageSize: pageSize)
            }
            let maps = try MapTable(file: file, minimumBytes: Int(try file.size()))
            #if os(Linux)
            let lockFile = view?.file
            #else
            let lockFile: PosixFile? = nil  // closing it would drop this process's classic fcntl locks
            #endif
            let readers = ReaderTable.inProcess(slots: 1)
            let env = Environment(
                file: file, lockFile: nil, lockFileMap: nil, readers: readers, maps: maps, pageSize: pageSize,
                syncMode: options.syncMode, identity: identity, lockIdentity: nil,
                readOnly: ReadOnlyState(
                    identity: identity, lockView: view?.table,
                    lockViewMap: view.map { ($0.address, $0.length) }, lockFile: lockFile))
            // Fail now, not at the first read, when no commit is usable. A writer changing the file
            // meanwhile says nothing about it: try again (a busy writer rarely overtakes 100 in a row).
            for attempt in 1...Environment.openAttempts {
                do {
                    _ = try env.readOnlySnapshot()
                    break
                } catch StorageError.fileChangedDuringRead(_) where attempt < Environment.openAttempts {}
            }
            registry.register(env)
            return env
        }
    }

    /// Waits (up to `recoveryWait`) while a read-write process that opened the file alone is
    /// recovering it: it holds the "alive" byte exclusively until the commit log is replayed.
    /// Returns how others then hold it (nil when the system cannot tell).
    static func waitForRecovery(_ lock: PosixFile, path: String) throws -> LockHolding? {
        let deadline = ContinuousClock.now + recoveryWait
        var counted = false
        while true {
            let holding = lock.othersHold(offset: LockLayout.aliveLockByte)
            if holding != .exclusive { return holding }
            if !counted {
                counted = true
                recoveryWaitsBegun.add(1, ordering: .relaxed)
            }
            if ContinuousClock.now > deadline {
                throw StorageError.io(
                    operation: "open read-only (a read-write process has been recovering the file for \(recoveryWait); try again)", path: path,
                    errno: EAGAIN)
            }
            usleep(1_000)
        }
    }

    /// Waits for another process's recovery of the file before the registry is taken: held, it
    /// would make every opening of any file in this process wait as long (up to `recoveryWait`).
    /// The opening asks again under the registry (`waitForRecovery`), where only a recovery that
    /// began in between still waits. Only where locks belong to the descriptor (Linux's open file
    /// description locks), and only while this process has no environment with that lock file
    /// open: elsewhere closing this descriptor would drop this process's locks on the file.
    ///
    /// It never throws: when the wait runs out, or this process is the recovering opener (another
    /// thread of it inside a read-write opening, holding "alive" on a descriptor of its own), the
    /// opening goes on to the registry, whose answer stands.
    private static func waitForRecoveryOutsideRegistry(path: String) {
        #if os(Linux)
        let lockPath = LockFileName.path(for: path)
        guard let identity = FileIdentity(path: lockPath),
            !registry.withLock({ registry in
                // (Any environment of the file: a read-only one shares at once, and is registered
                // without a lock identity.)
                FileIdentity(path: path).flatMap { registry[$0]?.environment } != nil
                    || registry.values.contains { $0.environment?.lockIdentity == identity }
            }),
            let lock = try? PosixFile(path: lockPath, mode: .readOnly)
        else { return }
        _ = try? waitForRecovery(lock, path: path)
        #endif
    }

    /// Waits for a recovery begun in this process so far (for tests: one can wait until an
    /// opening is inside its wait).
    package static let recoveryWaitsBegun = Atomic<Int>(0)

    /// How long a read-only opening waits for a read-write opener's recovery.
    static let recoveryWait: Duration = .seconds(60)

    /// The lock file's reader table through a read-only map, or nil when there is no lock file or
    /// it is not valid. Also nil when this process has that lock file open in another environment
    /// (a database file replaced under an open one): opening and closing it here would drop that
    /// environment's classic fcntl locks. The map stays valid after the descriptor is closed. Lock
    /// files only ever grow, so the map never runs past the file's end.
    private static func lockFileView(
        path: String, registry: [FileIdentity: WeakEnvironment]
    ) -> (table: ReaderTable, address: UInt, length: Int, file: PosixFile)? {
        guard let identity = FileIdentity(path: path) else { return nil }
        if registry.values.contains(where: { $0.environment?.lockIdentity == identity }) { return nil }
        guard let lock = try? PosixFile(path: path, mode: .readOnly), let size = try? lock.size(),
            size >= UInt64(LockLayout.slotsOffset)
        else { return nil }
        var header = [UInt8](repeating: 0, count: LockLayout.slotsOffset)
        guard (try? header.withUnsafeMutableBytes { (h) throws in try lock.read(into: h, at: 0) }) != nil,
            let count = header.withUnsafeBytes({ LockLayout.validSlotCount(header: $0.baseAddress!, fileSize: size) })
        else {
            return nil
        }
        let length = LockLayout.size(slots: count)
        guard let memory = try? lock.map(length: length, writable: false) else { return nil }
        // A slot whose pid a process bears that does not hold the pid's byte is a dead reader's
        // (the pid was reused): skipped here as the writer drops it (FORMAT.md §6).
        let table = ReaderTable(memory: memory, slotCount: count, ownsMemory: false, readOnly: true, holdsFile: ReaderTable.pidHolders(lock))
        return (table, UInt(bitPattern: memory), length, lock)
    }

    /// A new snapshot of a read-only environment: the newest commit whose pages verify, the map
    /// covering the file, and copies of both meta pages taken before anything else was read (for
    /// `metaPagesUnchanged`). Throws `fileChangedDuringRead` when choosing failed because a writer
    /// changed the file meanwhile.
    ///
    /// `passedOver` is the id of a newer commit in the other meta slot that was not published yet
    /// (its writer was inside its sync), nil when there is none: once it is published the commit
    /// after it may reuse pages this snapshot reads without changing either meta page, which
    /// `ReadTransaction.validate` watches for.
    func readOnlySnapshot() throws -> (meta: Meta, mapping: MapTable.Mapping, metaPages: [UInt8], passedOver: UInt64?) {
        guard let state = readOnly else { throw StorageError.internalError("read-only snapshot of a read-write environment") }
        // Verifying the commit reads its pages through the map: no writer may cut the file under
        // them meanwhile (SIGBUS). A snapshot holds the lock already (this nests); `latestVersion`
        // and opening did not (found by the review of 2026-12-06).
        state.holdShrinkLock(file)
        defer { state.releaseShrinkLock(file) }
        var copies = try Recovery.readMetaPages(file: file, pageSize: pageSize)
        var newest = state.newestPublished()  // after the copies: a commit published meanwhile is in them
        // A meta page newer than the published commit while a writer holds the writer lock is a
        // commit inside its sync: wait for it to be published (a sync's length, at most
        // `publicationWait`) rather than take the commit before it and watch it. Without a writer
        // it is a dead writer's commit that the next writer spoils: no wait. Only the meta pages
        // and `latest` are read again while waiting; the commit is chosen (verified) once.
        let deadline = ContinuousClock.now + Environment.publicationWait
        while let published = newest, newestTxnid(copies) > published, state.writerIsActive(),
            ContinuousClock.now < deadline
        {
            usleep(200)
            copies = try Recovery.readMetaPages(file: file, pageSize: pageSize)
            newest = state.newestPublished()
        }
        let fileSize = try file.size()
        do {
            let mapping = try maps.ensure(bytes: Int(fileSize))
            let (meta, checksum) = try copies.withUnsafeBytes { (m) throws -> (Meta, UInt64) in
                let meta = try Recovery.choose(
                    path: path, metaPages: m.baseAddress!, map: mapping.base, fileSize: fileSize,
                    pageSize: pageSize, newest: newest, alreadyVerified: state.isVerified)
                return (meta, m.baseAddress!.u64(Int(meta.txnid % 2) * pageSize + PageHeader.checksum))
            }
            let other = copies.withUnsafeBytes { $0.baseAddress!.u64(Int((meta.txnid + 1) % 2) * pageSize + PageHeader.txnid) }
            let passedOver = newest.flatMap { other > meta.txnid && other > $0 ? other : nil }
            state.remember(meta, checksum: checksum)
            readers.publish(latest: meta.txnid)
            return (meta, mapping, copies, passedOver)
        } catch {
            // A commit verified against pages a writer was rewriting fails for no fault of the file.
            if try !metaPagesUnchanged(copies) { throw StorageError.fileChangedDuringRead(path: path) }
            throw error
        }
    }

    /// The larger transaction id of the two meta pages in `copies`, as written (not verified).
    private func newestTxnid(_ copies: [UInt8]) -> UInt64 {
        copies.withUnsafeBytes { max($0.baseAddress!.u64(PageHeader.txnid), $0.baseAddress!.u64(pageSize + PageHeader.txnid)) }
    }

    /// Snapshots a read-only open takes before it gives up on a file that writers keep changing.
    static let openAttempts = 100

    /// How long a read-only snapshot waits for a newer commit on the file to be published (its
    /// writer is in its sync), on the monotonic clock.
    static let publicationWait = Duration.milliseconds(50)

    /// Whether pages 0 and 1 still hold `copies`: then no commit has overwritten a page of the
    /// snapshot that took them (see the top of this file).
    func metaPagesUnchanged(_ copies: [UInt8]) throws -> Bool {
        try Recovery.readMetaPages(file: file, pageSize: pageSize) == copies
    }

    /// Live snapshots of every process, as the writer sees them: from the lock file's table (for a
    /// read-only environment, through its read-only view, without clearing dead processes' slots).
    func liveReaders() -> [ReaderSlot] {
        guard let readOnly else { return readers.liveReaders() }
        return readOnly.lockView?.liveReaders() ?? []
    }
}
