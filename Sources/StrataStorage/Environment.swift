#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

// One open page file in this process, shared by every `Store` handle on it. fcntl locks belong to
// the process and vanish when any descriptor of the file closes, so the lock file must be opened
// once per process: handles of the same file (found by device and inode) share this object.

/// `@unchecked Sendable`: every stored property is immutable or synchronised: `writer` is a Mutex,
/// `writerThread` an atomic, and the file, lock file, reader table and map table are Sendable;
/// `idleCompaction` a Mutex, `activeWriters` an atomic; `freeScanHint`, `compactionSchedule` and
/// `insertHints` are only touched by the write transaction, which holds `writer`.
final class Environment: @unchecked Sendable {
    let file: FileIO
    let lockFile: FileIO?
    let readers: ReaderTable
    let maps: MapTable
    let path: String
    let pageSize: Int
    let syncMode: SyncMode
    /// The page file's identity (nil for an anonymous file): the registry's key.
    let identity: FileIdentity?
    /// The key of this file's holders of cuts in this process (`holdingOffCuts`): `identity`, or
    /// an anonymous file's own, so that an in-memory store's page copies and checks hold its cuts
    /// off too.
    let cutHolders: FileIdentity?
    /// The lock file's identity, so that a read-only opening never opens (and closes) a lock file
    /// this process holds fcntl locks on through another environment.
    let lockIdentity: FileIdentity?
    /// Set for an environment opened read-only (ReadOnly.swift); nil for a read-write one.
    let readOnly: ReadOnlyState?
    /// The commit log small durable commits sync (CommitLog.swift); nil when read-only or in memory.
    let commitLog: CommitLog?
    /// Serialises writers of this process; the lock file's fcntl lock serialises processes.
    let writer = Mutex<Void>(())
    /// Hash of the thread inside `write`, to turn a nested write into an error instead of a deadlock.
    let writerThread = Atomic<UInt>(0)
    /// Told of every commit made through this environment, and (through `commitWatch`) of other
    /// processes' commits.
    let commitListeners = CommitListeners()
    /// This process's share of the page file's shrink lock for what reads every page of a
    /// snapshot (`Store.holdingOffCuts`): held while any such read runs.
    let cutsHeldOff = SharedByteLock(offset: ShrinkLock.offset)
    /// Reports other processes' commits to `commitListeners` while there are any; nil for a file
    /// no other process can write (in memory, or opened read-only).
    let commitWatch: CommitWatch?
    /// Written and read only by the writer, inside `writer`'s lock (see `Store.write`).
    nonisolated(unsafe) var freeScanHint: FreeScanHint?
    /// Written and read only by the writer, like `freeScanHint` (Compaction.swift).
    nonisolated(unsafe) var compactionSchedule = CompactionSchedule()
    /// Where the last entry inserted into a page went (its index), by page number, for choosing
    /// split points (BTreeWrite.swift); a copied page takes its original's. Kept across commits, so
    /// that a group's end page keeps splitting unevenly from one transaction to the next. Only a
    /// hint: a stale one (a delete since, a page reused, another process's commit) costs one
    /// uneven split, never a wrong tree. Written and read only by the writer, like `freeScanHint`.
    @exclusivity(unchecked) nonisolated(unsafe) var insertHints = InsertHints()
    /// Idle-time compaction's timer (IdleCompaction.swift).
    let idleCompaction = Mutex(IdleCompactionState())
    /// Threads of this process in `Store.write`, waiting for the writer lock or writing: idle-time
    /// compaction gives way to them.
    let activeWriters = Atomic<Int>(0)
    private let lockFileMap: (address: UInt, length: Int)?
    /// Finished at the end of `deinit`. The registry keeps it past the environment's release: its
    /// weak reference is nil from the last release on, while `deinit` still ends the commit log's
    /// generation (and may remove the log), so an opener of the same file waits for this instead
    /// of opening the file beside it (`Environment.open`).
    let teardown = Teardown()

    init(
        file: FileIO, lockFile: FileIO?, lockFileMap: (UInt, Int)?, readers: ReaderTable, maps: MapTable,
        pageSize: Int, syncMode: SyncMode, identity: FileIdentity?, lockIdentity: FileIdentity?, readOnly: ReadOnlyState? = nil,
        commitLog: CommitLog? = nil, anonymousIdentity: FileIdentity? = nil
    ) {
        self.cutHolders = identity ?? anonymousIdentity
        self.commitLog = commitLog
        self.file = file
        self.lockFile = lockFile
        self.lockFileMap = lockFileMap
        self.readers = readers
        self.maps = maps
        self.path = file.path
        self.pageSize = pageSize
        self.syncMode = syncMode
        self.identity = identity
        self.lockIdentity = lockIdentity
        self.readOnly = readOnly
        self.commitWatch = lockFile != nil && readOnly == nil && !readers.isReadOnly ? CommitWatch(readers: readers, pageSize: pageSize) : nil
        if commitWatch != nil {
            commitListeners.setOnChange { [weak self] count in
                guard let self, let watch = self.commitWatch else { return }
                if count > 0 { watch.start(self) } else { watch.nudge() }
            }
        }
    }

    deinit {
        commitWatch?.shutdown()  // its pins are slots of the lock file's table, unmapped below
        // Ends the commit log's generation (CommitLog.close). Not waiting for the writer lock: while
        // another process's writer holds it, the generation stays, and the next opener alone ends it.
        if let commitLog, let lockFile, (try? lockFile.lock(offset: LockLayout.writerLockByte, length: 1, exclusive: true, wait: false)) == true {
            let alone = (try? lockFile.lock(offset: LockLayout.aliveLockByte, length: 1, exclusive: true, wait: false)) == true
            commitLog.close(pageFile: file, alone: alone)
            lockFile.unlock(offset: LockLayout.writerLockByte, length: 1)
        }
        if let lockFile, let lockFileMap {
            lockFile.unmap(UnsafeMutableRawPointer(bitPattern: lockFileMap.address)!, length: lockFileMap.length)
        }
        // Its locks (alive, pid, writer bytes) go now, not when the descriptor closes after this
        // body: an opener waiting for `teardown` would otherwise find the file still "open in
        // another process" and take the published `latest` over recovery's choice (a commit whose
        // writer died before publishing it, or a commit that never reached the file).
        lockFile?.unlock(offset: 0, length: 0)
        teardown.finish()
    }

    /// Whether this environment was opened read-only: nothing is written, snapshots are not registered.
    var isReadOnly: Bool { readOnly != nil }

    // MARK: Opening

    static let registry = Mutex<[FileIdentity: WeakEnvironment]>([:])

    /// The environment for the file at `path`, shared with other handles of this process.
    static func open(path: String, options: StoreOptions, wrap: ((FileIO) -> FileIO)? = nil) throws -> Environment {
        try options.validate()
        // No file has an empty name (open(2) says ENOENT); without this check the lock file
        // "-lock" would be created in the working directory first.
        if path.isEmpty { throw StorageError.io(operation: "open", path: path, errno: ENOENT) }
        // A path with a NUL byte reaches the system cut short at it: "dir/x\0y.strata" opened, and
        // created a lock file named, "dir/x".
        if path.utf8.contains(0) { throw StorageError.io(operation: "open (the path contains a NUL byte)", path: path, errno: EINVAL) }
        return try untilNoneEnding {
            options.readOnly ? try openReadOnly(path: path, options: options, wrap: wrap) : try openReadWrite(path: path, options: options, wrap: wrap)
        }
    }

    /// Runs `open` again (after a millisecond, outside the registry's lock) while an environment of
    /// the file is still ending on another thread (`teardown`). Its deinit runs when its last
    /// handle, snapshot or background thread lets go of it, so a file closed and opened again at
    /// once can meet it.
    private static func untilNoneEnding(_ open: () throws -> Environment) throws -> Environment {
        while true {
            do {
                return try open()
            } catch is StillEnding {
                usleep(1000)
            }
        }
    }

    /// The read-write environment for `path`.
    private static func openReadWrite(path: String, options: StoreOptions, wrap: ((FileIO) -> FileIO)?) throws -> Environment {
        try registry.withLock { (registry) throws -> Environment in
            // A file this process has open read-write is found by name first, without opening
            // another descriptor of it (see PosixFile.lockCommands).
            if let identity = FileIdentity(path: path), let env = try registry.shareable(identity, readOnlyWillDo: false) {
                return try env.shared(path: path, options: options)
            }
            // The file as it is, not created yet: a missing file with `createIfMissing` false must
            // not get a lock file, and a file this process has open must not have its lock file
            // opened a second time (closing that descriptor would drop this process's fcntl locks).
            let existing = try PosixFile.openExisting(path, mode: .readWrite)
            // Only a regular file holds a database. A device or a FIFO has size 0 and was taken
            // for an empty file to initialise: "/dev/null" was replaced by a regular file (as
            // root), after a lock file "/dev/null-lock" had been made beside it.
            if let existing, try existing.status().st_mode & 0o170000 != 0o100000 {
                throw StorageError.notAStrataFile(path: path, reason: "not a regular file")
            }
            if existing == nil && !options.createIfMissing {
                throw StorageError.io(operation: "open", path: path, errno: ENOENT)
            }
            // A file holding something else is refused before its lock file is made: a JSON file
            // opened by mistake left "x.json-lock" beside it. (A read, under no lock: no Strata
            // process turns a non-empty file into a database, and this accepts a file whose meta
            // page 0 is torn as opening does. An empty file is initialised, below.)
            if let existing, try existing.size() > 0 { _ = try detectPageSize(existing) }
            if let existing, let env = try registry.shareable(try existing.identity(), readOnlyWillDo: false) {
                return try env.shared(path: path, options: options)
            }
            let env = try openShared(path: path, existing: existing, options: options, wrap: wrap)
            registry.register(env)
            return env
        }
    }

    /// This environment, for another handle opening `path` with `options`: their page size must be its.
    func shared(path: String, options: StoreOptions) throws -> Environment {
        if let wanted = options.pageSize, wanted != pageSize {
            throw StorageError.pageSizeMismatch(path: path, found: pageSize, expected: wanted)
        }
        return self
    }

    /// An environment on an anonymous file, with the reader table in process memory.
    static func openAnonymous(options: StoreOptions) throws -> Environment {
        try options.validate()
        let file = try PosixFile.anonymous()
        let pageSize = try chosenPageSize(options)
        try FileCreation.writeInitialPages(file, pageSize: pageSize)
        let readers = ReaderTable.inProcess(slots: options.readerSlots)
        readers.publish(latest: 1)
        let maps = try MapTable(file: file, minimumBytes: 2 * pageSize)
        return Environment(
            file: file, lockFile: nil, lockFileMap: nil, readers: readers, maps: maps,
            pageSize: pageSize, syncMode: options.syncMode, identity: nil, lockIdentity: nil, anonymousIdentity: try file.identity())
    }

    static func chosenPageSize(_ options: StoreOptions) throws -> Int {
        let size = options.pageSize ?? Limits.defaultPageSize
        if !Limits.pageSizes.contains(size) {
            throw StorageError.pageSizeMismatch(path: "(options)", found: size, expected: Limits.defaultPageSize)
        }
        return size
    }

    /// Opens the file read-write for this process: lock file, writer lock, the page file (created
    /// or initialised if need be, under that lock), then recovery when no other process has it open.
    private static func openShared(path: String, existing: PosixFile?, options: StoreOptions, wrap: ((FileIO) -> FileIO)?) throws -> Environment {
        let lockFile: PosixFile
        do {
            lockFile = try PosixFile(path: LockFileName.path(for: path), create: true)
        } catch StorageError.io(_, _, ENOENT) {
            // (Named after the database: the lock file's name is an implementation detail.)
            throw StorageError.io(operation: "create (its directory does not exist)", path: path, errno: ENOENT)
        }
        // Hold the writer lock while opening: no other process commits, creates or initialises meanwhile.
        try WriterLock.take(lockFile)
        defer { WriterLock.release(lockFile) }
        // Alone if no other process holds its shared "alive" lock: then the reader table is stale
        // (its processes are gone) and recovery of the page file is ours to do.
        let alone = try lockFile.lock(offset: LockLayout.aliveLockByte, length: 1, exclusive: true, wait: false)

        var slots = options.readerSlots
        let lockSize = try lockFile.size()
        if !alone {
            if lockSize < UInt64(LockLayout.slotsOffset) {
                throw StorageError.notAStrataFile(path: lockFile.path, reason: "lock file of \(lockSize) bytes is too short")
            }
            var header = [UInt8](repeating: 0, count: LockLayout.slotsOffset)
            try header.withUnsafeMutableBytes { (h) throws in try lockFile.read(into: h, at: 0) }
            guard let count = header.withUnsafeBytes({ LockLayout.validSlotCount(header: $0.baseAddress!, fileSize: lockSize) }) else {
                let found = header.withUnsafeBytes { ($0.baseAddress!.u64(LockLayout.magicOffset), $0.baseAddress!.u32(LockLayout.versionOffset)) }
                if found.0 == LockLayout.magic && found.1 != LockLayout.version {
                    throw StorageError.notAStrataFile(
                        path: lockFile.path,
                        reason:
                            "lock file of version \(found.1), this build's is \(LockLayout.version): a process of another Strata build has the database open; close it there first (FORMAT.md §6)"
                    )
                }
                throw StorageError.notAStrataFile(path: lockFile.path, reason: "lock file header is invalid")
            }
            slots = count
        } else if lockSize < UInt64(LockLayout.size(slots: slots)) {
            try lockFile.truncate(to: UInt64(LockLayout.size(slots: slots)))
        }
        let lockLength = LockLayout.size(slots: slots)
        let lockMemory = try lockFile.map(length: lockLength, writable: true)
        if alone { ReaderTable.format(lockMemory, slots: slots) }
        // A live process that bears this pid too (another pid namespace: containers sharing the
        // volume, each process 1) holds its byte: its slots look like this process's own, and
        // must not be cleared as a dead one's.
        let pidShared = lockFile.isLockedByOthers(offset: LockLayout.pidByte(currentPID())) ?? true
        // The pid byte first, then the slots: a slot of this process is never seen without it.
        _ = try lockFile.lock(offset: LockLayout.pidByte(currentPID()), length: 1, exclusive: false, wait: true)
        let readers = ReaderTable(memory: lockMemory, slotCount: slots, ownsMemory: false, holdsFile: ReaderTable.pidHolders(lockFile))
        if !alone && !pidShared { readers.releaseSlotsOfThisPid() }
        // The shared "alive" lock, held for as long as this process has the file open, is taken
        // once the page file is recovered (below): until then an opener that is alone holds it
        // exclusively, and a read-only opener waits (`ReadOnly.swift`), which takes a process
        // alive as a sign that the page cache holds every commit of the log.
        func holdAlive() throws { _ = try lockFile.lock(offset: LockLayout.aliveLockByte, length: 1, exclusive: false, wait: true) }
        if !alone { try holdAlive() }

        do {
            let posix = try openPageFile(path: path, existing: existing, options: options, alone: alone, wrap: wrap)
            try LockFileName.claim(pageFile: posix, lockFile: try lockFile.identity(), path: path)
            let identity = try posix.identity()
            if alone { FileCreation.removeStaleTemporary(of: path, identity: identity) }
            // Pages written since the last good sync are written again after a failed one (SyncRecovery.swift).
            let file: FileIO = SyncRecoveringFile(wrap?(posix) ?? posix)
            let pageSize = try detectPageSize(file)
            if let wanted = options.pageSize, wanted != pageSize {
                throw StorageError.pageSizeMismatch(path: file.path, found: pageSize, expected: wanted)
            }
            (file as? SyncRecoveringFile)?.noteMetas(pageSize: pageSize)
            // Commits the log made durable that a power loss kept from the page file go back in
            // before anything reads it. Another process alive means the page cache holds them.
            // Then one sync, so that what the page cache holds (a dead process's unsynced or failed
            // writes) is what the disk holds before this process's log records it (CommitLog.begin).
            if alone {
                try LogReplay.recover(pageFile: file, pagePath: path, pageSize: pageSize, wrap: wrap)
                // (The newest commits' pages, if made with `.noSync`, first written again: their
                // writeback may have failed before this opening, which its sync would not see.)
                try (file as? SyncRecoveringFile)?.noteUnsyncedCommits(pageSize: pageSize)
                try file.sync()
            }
            let fileSize = try file.size()
            let maps = try MapTable(file: file, minimumBytes: Int(fileSize))
            let commitLog = CommitLog(pagePath: path, pageSize: pageSize, wrap: wrap)
            if alone {
                // A commit of a run of `.noSync` commits opens only if the run's pages it uses are
                // whole (its record carries them): a power loss may have cut the run short. Also
                // when the log holds no generation: the opening that replayed it ended it, and may
                // have chosen an older commit without changing the newer meta page (found by the
                // review of 2026-12-06: the next opening took the torn commit).
                let meta = try Recovery.choose(file: file, map: maps.current.base, fileSize: fileSize, pageSize: pageSize)
                readers.publish(latest: meta.txnid)
                commitLog.committed(meta.txnid)
                try holdAlive()
            } else {
                let latest = readers.latest
                let meta = try Recovery.readMeta(file: file, slot: latest % 2, pageSize: pageSize)
                if meta.txnid != latest {
                    throw StorageError.noValidMeta(
                        path: file.path, reason: "lock file names transaction \(latest) but meta page \(latest % 2) holds \(meta.txnid)")
                }
            }
            return Environment(
                file: file, lockFile: lockFile, lockFileMap: (UInt(bitPattern: lockMemory), lockLength),
                readers: readers, maps: maps, pageSize: pageSize, syncMode: options.syncMode,
                identity: identity, lockIdentity: try lockFile.identity(),
                commitLog: commitLog)
        } catch {
            lockFile.unmap(lockMemory, length: lockLength)
            throw error
        }
    }

    /// The page file, read-write, once it holds a database. Runs under the writer lock, which every
    /// Strata process takes before creating or initialising a file:
    /// - missing (and `createIfMissing`): created atomically (Creation.swift);
    /// - empty and open in no other process: an interrupted creation (or a file made empty for
    ///   Strata to fill), initialised atomically by replacing it;
    /// - empty while another process has a database of this name open: an error, never initialised;
    /// - anything else is opened as it is, and recovery or the page-size check judges it (a short or
    ///   damaged file is never overwritten).
    /// `existing` was opened before the lock was taken; if the name has changed files since (another
    /// process created or initialised it), the file the name holds now is opened instead.
    private static func openPageFile(
        path: String, existing: PosixFile?, options: StoreOptions, alone: Bool,
        wrap: ((FileIO) -> FileIO)?
    ) throws -> PosixFile {
        var file = existing
        for _ in 0..<4 {
            if file == nil { file = try PosixFile.openExisting(path, mode: .readWrite) }
            guard let current = file else {
                if !options.createIfMissing { throw StorageError.io(operation: "open", path: path, errno: ENOENT) }
                _ = try FileCreation.create(path: path, pageSize: try chosenPageSize(options), replacing: nil, wrap: wrap)
                CommitLog.removeStale(besideNew: path)
                continue
            }
            let status = try current.status()
            if FileIdentity(path: path) != FileIdentity(status) {
                file = nil
                continue
            }
            if status.st_size > 0 { return current }
            if !alone {
                throw StorageError.notAStrataFile(path: path, reason: "the file is empty, and another process has a database of this name open")
            }
            if !options.createIfMissing {
                throw StorageError.notAStrataFile(path: path, reason: "empty file, 0 bytes")
            }
            _ = try FileCreation.create(path: path, pageSize: try chosenPageSize(options), replacing: status, wrap: wrap)
            CommitLog.removeStale(besideNew: path)
            file = nil
        }
        throw StorageError.io(operation: "open (the file kept changing while it was created)", path: path, errno: EAGAIN)
    }

    /// The page size of an existing file: from meta page 0, or, if that is torn, from meta page 1
    /// found at each candidate offset.
    static func detectPageSize(_ file: FileIO) throws -> Int {
        let size = try file.size()
        if size == 0 {
            throw StorageError.notAStrataFile(path: file.path, reason: "empty file, 0 bytes")
        }
        if size < UInt64(MetaLayout.inlineRecord) {
            throw StorageError.notAStrataFile(path: file.path, reason: "file of \(size) bytes is too short for a meta page")
        }
        var header = [UInt8](repeating: 0, count: MetaLayout.inlineRecord)
        // A torn or damaged meta 0 may keep its magic but not its page size: prefer a size whose meta
        // page checksums whole, then the first plausible one (open then reports what is wrong).
        var unverified: Int?
        var invalid: StorageError?
        for offset in [0] + Limits.pageSizes where UInt64(offset + MetaLayout.inlineRecord) <= size {
            try header.withUnsafeMutableBytes { (h) throws in try file.read(into: h, at: UInt64(offset)) }
            let found: Int? = header.withUnsafeBytes { h in
                Meta.hasMagic(h.baseAddress!) ? Int(h.baseAddress!.u32(MetaLayout.pageSize)) : nil
            }
            guard let pageSize = found else { continue }
            if offset != 0 && pageSize != offset { continue }
            if !Limits.pageSizes.contains(pageSize) {
                if invalid == nil {
                    invalid = StorageError.corrupt(page: offset == 0 ? 0 : 1, reason: "meta page records an invalid page size \(pageSize)")
                }
                continue
            }
            if UInt64(offset + pageSize) <= size {
                var page = [UInt8](repeating: 0, count: pageSize)
                try page.withUnsafeMutableBytes { (p) throws in try file.read(into: p, at: UInt64(offset)) }
                let whole = page.withUnsafeBytes { p in pageChecksum(p.baseAddress!, byteCount: pageSize) == p.baseAddress!.u64(PageHeader.checksum) }
                if whole { return pageSize }
            }
            if unverified == nil { unverified = pageSize }
        }
        if let unverified { return unverified }
        if let invalid { throw invalid }
        throw StorageError.notAStrataFile(path: file.path, reason: "no meta page carries the Strata magic")
    }
}

extension Environment {
    /// Spoils, durably, a meta page newer than the published `latest`. Call with the writer lock
    /// held, before a write transaction begins.
    ///
    /// Such a page is from a writer that wrote its meta page but never published the commit (a
    /// process killed during its sync, while another process kept the file open) or from a failed
    /// commit whose own spoiling failed: nobody was told it committed. It must not stay, because
    /// this writer commits the same transaction id into the same slot, mostly on the same page
    /// numbers: if this writer died after writing some of its pages but before its meta page,
    /// those pages (same id, valid checksums) would complete the stale page's commit record, and
    /// the next open would choose a meta page whose trees point into this writer's pages.
    func discardUnpublishedMeta() throws {
        let latest = readers.latest
        let offset = Int((latest + 1) % 2) * pageSize
        if maps.current.base.u64(offset + PageHeader.txnid) <= latest { return }
        try spoilMeta(at: UInt64(offset))
        try file.sync()
    }

    /// Overwrites the meta page at `offset` with zeros: its checksum fails, so opening chooses the
    /// other meta page.
    func spoilMeta(at offset: UInt64) throws {
        try file.writeZeros(from: offset, to: offset + UInt64(pageSize))
    }
}

struct WeakEnvironment: Sendable {
    weak var environment: Environment?
    /// The environment's own, which outlives it here (see `Environment.teardown`).
    let teardown: Teardown

    init(environment: Environment) {
        self.environment = environment
        self.teardown = environment.teardown
    }
}

/// Whether an environment's `deinit` has finished with its files.
final class Teardown: Sendable {
    private let finished = Atomic<Bool>(false)
    var isFinished: Bool { finished.load(ordering: .acquiring) }
    func finish() { finished.store(true, ordering: .releasing) }
}

/// Thrown inside the registry's lock when an environment of the file is still ending: the opening
/// waits and looks again (`Environment.untilNoneEnding`).
struct StillEnding: Error {}

extension [FileIdentity: WeakEnvironment] {
    /// The environment this process has open for the file `identity`, to share (a read-only one
    /// only when `readOnlyWillDo`); nil when there is none to share. Throws `StillEnding` while a
    /// released one's `deinit` runs.
    func shareable(_ identity: FileIdentity, readOnlyWillDo: Bool) throws -> Environment? {
        guard let entry = self[identity] else { return nil }
        if let env = entry.environment { return readOnlyWillDo || !env.isReadOnly ? env : nil }
        if entry.teardown.isFinished { return nil }
        throw StillEnding()
    }

    /// Adds `env` (a file's new environment), dropping the entries of environments that have ended.
    mutating func register(_ env: Environment) {
        self = filter { $0.value.environment != nil || !$0.value.teardown.isFinished }
        if let identity = env.identity { self[identity] = WeakEnvironment(environment: env) }
    }
}

/// Choosing the meta page on open: the newest whose commit is provably whole.
enum Recovery {
    static func readMeta(file: FileIO, slot: UInt64, pageSize: Int) throws -> Meta {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: pageSize, alignment: 4096)
        defer { buffer.deallocate() }
        try file.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: pageSize), at: slot * UInt64(pageSize))
        return try Meta.decode(buffer, slot: slot, pageSize: pageSize, path: file.path)
    }

    /// Pages 0 and 1, read with pread (the caller checked the file holds them).
    static func readMetaPages(file: FileIO, pageSize: Int) throws -> [UInt8] {
        var pages = [UInt8](repeating: 0, count: 2 * pageSize)
        try pages.withUnsafeMutableBytes { (p) throws in try file.read(into: p, at: 0) }
        return pages
    }

    /// The checksums stored in meta pages 0 and 1 (two reads of 8 bytes): they change with every
    /// write of either page.
    static func metaChecksums(file: FileIO, pageSize: Int) throws -> (UInt64, UInt64) {
        var bytes = (UInt64(0), UInt64(0))
        try withUnsafeMutableBytes(of: &bytes.0) { (b) throws in try file.read(into: b, at: UInt64(PageHeader.checksum)) }
        try withUnsafeMutableBytes(of: &bytes.1) { (b) throws in
            try file.read(into: b, at: UInt64(pageSize + PageHeader.checksum))
        }
        return (UInt64(littleEndian: bytes.0), UInt64(littleEndian: bytes.1))
    }

    /// Decodes both metas and returns the newest one whose commit record verifies; falls back to
    /// the older one when the newest commit is torn.
    static func choose(file: FileIO, map: UnsafeRawPointer, fileSize: UInt64, pageSize: Int) throws -> Meta {
        if fileSize < 2 * UInt64(pageSize) {
            throw StorageError.truncated(path: file.path, expectedBytes: 2 * UInt64(pageSize), actualBytes: fileSize)
        }
        let metaPages = try readMetaPages(file: file, pageSize: pageSize)
        return try metaPages.withUnsafeBytes { (m) throws -> Meta in
            try choose(path: file.path, metaPages: m.baseAddress!, map: map, fileSize: fileSize, pageSize: pageSize)
        }
    }

    /// `choose` on copies of the two meta pages (`metaPages`, 2 × `pageSize` bytes), with the pages
    /// they name read from `map`. A meta `alreadyVerified` accepts (by its fields and stored
    /// checksum) is not verified again: a read-only store verifies each newest commit once. A meta
    /// page past `newest` (the published commit, for a read-only snapshot while a writer lives)
    /// is passed over, unless no meta page is within it (a damaged lock file).
    static func choose(
        path: String, metaPages: UnsafeRawPointer, map: UnsafeRawPointer, fileSize: UInt64, pageSize: Int,
        newest: UInt64? = nil, alreadyVerified: (Meta, UInt64) -> Bool = { _, _ in false }
    ) throws -> Meta {
        var candidates: [Meta] = []
        var problems: [String] = []
        var versionError: StorageError?
        for slot: UInt64 in [0, 1] {
            do {
                candidates.append(try Meta.decode(metaPages + Int(slot) * pageSize, slot: slot, pageSize: pageSize, path: path))
            } catch {
                if let e = error as? StorageError, case .unsupportedFormatVersion(_, let found, _) = e {
                    // A newer build committed to this file: never fall back past its commit, which
                    // this build would then write over.
                    if found > strataFormatVersion { throw e }
                    versionError = e
                }
                problems.append("meta \(slot): \(error)")
            }
        }
        candidates.sort { $0.txnid > $1.txnid }
        if let newest, candidates.contains(where: { $0.txnid <= newest }) { candidates.removeAll { $0.txnid > newest } }
        var truncation: StorageError?
        var truncatedCandidates = 0
        for meta in candidates {
            let needed = meta.pageCount * UInt64(pageSize)
            if fileSize < needed {
                // The newest candidate's figure is the size the file should have.
                if truncation == nil { truncation = .truncated(path: path, expectedBytes: needed, actualBytes: fileSize) }
                truncatedCandidates += 1
                problems.append("meta \(meta.txnid % 2) (transaction \(meta.txnid)): file holds \(fileSize) bytes, needs \(needed)")
                continue
            }
            if alreadyVerified(meta, (metaPages + Int(meta.txnid % 2) * pageSize).u64(PageHeader.checksum)) { return meta }
            do {
                try verifyCommit(meta, map: map, pageSize: pageSize)
                return meta
            } catch {
                problems.append("meta \(meta.txnid % 2) (transaction \(meta.txnid)): \(error)")
            }
        }
        if let versionError { throw versionError }
        if candidates.count == 1 || problems.count == 1 || truncatedCandidates == candidates.count, let truncation { throw truncation }
        throw StorageError.noValidMeta(path: path, reason: problems.joined(separator: "; "))
    }

    /// Checks every page the commit wrote: number, transaction id, type and checksum, and (format 2)
    /// that the checksum is the one the commit recorded; also the pages of the run of `.noSync`
    /// commits it lists (RunPin.swift), which an earlier commit of the run wrote and a power loss
    /// may have lost (the commit still uses them, so nothing has written them since).
    static func verifyCommit(_ meta: Meta, map: UnsafeRawPointer, pageSize: Int) throws {
        for entry in try commitRecord(meta, map: map, pageSize: pageSize) {
            try verifyPage(
                entry.page, txnid: meta.txnid, pageCount: meta.pageCount, map: map, pageSize: pageSize, recorded: entry.checksum,
                earlier: entry.carried)
        }
    }

    /// The pages that the commits in `file`'s meta slots for which `include` holds wrote or carry,
    /// as ranges: each one's meta slot, its record run, and every page its commit record lists, an
    /// overflow run by its own length only when its first page carries its number and the checksum
    /// the record lists (else that page alone: the header of an older run left there could claim
    /// pages of other commits). A slot whose meta page does not decode, whose `pageCount` the file
    /// does not cover or whose record cannot be read adds nothing.
    static func listedPages(file: FileIO, pageSize: Int, where include: (Meta) -> Bool) throws -> [Range<PageNo>] {
        let size = try file.size()
        guard size >= 2 * UInt64(pageSize), size <= UInt64(Int.max) else { return [] }
        let pageCount = size / UInt64(pageSize)
        let metaPages = try readMetaPages(file: file, pageSize: pageSize)
        let mapped = try file.map(length: Int(size), writable: false)
        defer { file.unmap(mapped, length: Int(size)) }
        let map = UnsafeRawPointer(mapped)
        var ranges: [Range<PageNo>] = []
        metaPages.withUnsafeBytes { m in
            for slot: UInt64 in [0, 1] {
                guard let meta = try? Meta.decode(m.baseAddress! + Int(slot) * pageSize, slot: slot, pageSize: pageSize, path: file.path),
                    include(meta), meta.pageCount <= pageCount,  // (its record then lies inside the map)
                    let record = try? commitRecord(meta, map: map, pageSize: pageSize)
                else { continue }
                ranges.append(slot..<(slot + 1))
                if meta.recordRun >= 2 {
                    // (`commitRecord` verified the run.)
                    ranges.append(meta.recordRun..<(meta.recordRun + UInt64((map + Int(meta.recordRun) * pageSize).u32(PageHeader.runPages))))
                }
                for entry in record where entry.page >= 2 && entry.page < pageCount {
                    let page = entry.page
                    let p = map + Int(page) * pageSize
                    let run = p.u8(PageHeader.type) == PageType.overflow.rawValue ? UInt64(p.u32(PageHeader.runPages)) : 1
                    let whole =
                        p.u64(PageHeader.pageNumber) == page && p.u64(PageHeader.checksum) == entry.checksum && run >= 1
                        && page + run <= pageCount && pageChecksum(p, byteCount: Int(run) * pageSize) == entry.checksum
                    ranges.append(page..<(page + (whole ? run : 1)))
                }
            }
        }
        return ranges
    }

    /// The pages a commit wrote, from its meta page or its record run.
    static func commitRecord(_ meta: Meta, map: UnsafeRawPointer, pageSize: Int) throws -> [RecordEntry] {
        var entries: [RecordEntry] = []
        let width = meta.recordEntrySize
        if meta.recordRun == 0 {
            entries.reserveCapacity(meta.recordCount)  // Meta.decode bounded an inline record's count
            let metaPage = map + Int(meta.txnid % 2) * pageSize
            for i in 0..<meta.recordCount { entries.append(.load(metaPage + MetaLayout.inlineRecord + width * i, version: meta.formatVersion)) }
            return entries
        }
        try verifyPage(meta.recordRun, txnid: meta.txnid, pageCount: meta.pageCount, map: map, pageSize: pageSize, recorded: nil)
        let run = map + Int(meta.recordRun) * pageSize
        if run.u8(PageHeader.type) != PageType.commitRecord.rawValue {
            throw StorageError.corrupt(page: meta.recordRun, reason: "expected the commit record")
        }
        let capacity = (Int(run.u32(PageHeader.runPages)) * pageSize - PageHeader.size) / width
        if meta.recordCount > capacity {
            throw StorageError.corrupt(page: meta.recordRun, reason: "commit record lists \(meta.recordCount) pages but holds \(capacity)")
        }
        entries.reserveCapacity(meta.recordCount)
        for i in 0..<meta.recordCount { entries.append(.load(run + PageHeader.size + width * i, version: meta.formatVersion)) }
        return entries
    }

    /// Checks one page or run written by `txnid` (or, `earlier`, by a commit before it).
    static func verifyPage(
        _ pgno: PageNo, txnid: UInt64, pageCount: UInt64, map: UnsafeRawPointer, pageSize: Int, recorded: UInt64?, earlier: Bool = false
    ) throws {
        if pgno < 2 || pgno >= pageCount {
            throw StorageError.corrupt(page: pgno, reason: "commit record names a page outside 2..<\(pageCount)")
        }
        let p = map + Int(pgno) * pageSize
        let type = p.u8(PageHeader.type)
        var run = 1
        if type == PageType.overflow.rawValue || type == PageType.commitRecord.rawValue {
            run = Int(p.u32(PageHeader.runPages))
            if run == 0 || pgno + UInt64(run) > pageCount {
                throw StorageError.corrupt(page: pgno, reason: "run of \(run) pages runs past the file's \(pageCount) pages")
            }
        } else if type != PageType.branch.rawValue && type != PageType.countedBranch.rawValue && type != PageType.leaf.rawValue {
            throw StorageError.corrupt(page: pgno, reason: "unknown page type \(type)")
        }
        if p.u64(PageHeader.pageNumber) != pgno {
            throw StorageError.corrupt(page: pgno, reason: "header names page \(p.u64(PageHeader.pageNumber))")
        }
        // (A carried page's transaction id is covered by its recorded checksum.)
        let written = p.u64(PageHeader.txnid)
        if earlier ? written > txnid : written != txnid {
            throw StorageError.corrupt(page: pgno, reason: "written by transaction \(written), expected \(txnid) (a lost write)")
        }
        if let recorded, recorded != p.u64(PageHeader.checksum) {
            throw StorageError.corrupt(page: pgno, reason: "checksum differs from the commit record's (a page left by another attempt at transaction \(txnid))")
        }
        if pageChecksum(p, byteCount: run * pageSize) != p.u64(PageHeader.checksum) {
            throw StorageError.corrupt(page: pgno, reason: "checksum mismatch")
        }
    }
}

/// A megabyte of zeros, for writing the blocks a file grows by, starting on a 4 KiB boundary (so
/// that an `O_DIRECT` write may take them, `PosixFile.writeDurably`). `@unchecked Sendable`: the
/// bytes are zeroed once by `calloc` (untouched pages stay the kernel's shared zero page, costing
/// no memory) and never written, so any thread may read them.
final class ZeroBlock: @unchecked Sendable {
    static let shared = ZeroBlock(count: 1 << 20)
    let bytes: UnsafeRawBufferPointer

    private init(count: Int) {
        if let zeroed = calloc(1, count + 4096) {
            let aligned = (Int(bitPattern: zeroed) + 4095) & ~4095
            bytes = UnsafeRawBufferPointer(start: UnsafeRawPointer(bitPattern: aligned), count: count)
        } else {
            let made = UnsafeMutableRawPointer.allocate(byteCount: count, alignment: 4096)
            made.initializeMemory(as: UInt8.self, repeating: 0, count: count)
            bytes = UnsafeRawBufferPointer(start: made, count: count)
        }
    }
}
