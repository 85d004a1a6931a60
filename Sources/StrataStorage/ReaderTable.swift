import Synchronization

// The reader table: one slot per live read transaction, holding the owner's pid and the
// transaction id its snapshot sees. It lives in the lock file beside the database (shared by every
// process that opens it) or, for an in-memory store, in process memory. Layout in FORMAT.md,
// "Lock file".
//
// Beginning a read claims a slot with one compare-and-swap and publishes the snapshot's id with
// one store: no syscall and no lock. The writer scans the table when it first needs to reuse a
// freed page, and reclaims slots whose process has died.

enum LockLayout {
    static let magic: UInt64 = 0x4B4C_4154_4152_5453  // "STRATALK" read as little-endian bytes
    static let version: UInt32 = 3
    static let magicOffset = 0  // u64
    static let versionOffset = 8  // u32
    static let slotCountOffset = 12  // u32
    static let latestOffset = 16  // u64 atomic: id of the newest committed transaction
    static let highWaterOffset = 24  // u64 atomic: slots below this index may be in use; the writer scans only those
    static let commitSignalOffset = 32  // u32 atomic: bumped after every published commit; watchers sleep on it (futex)
    static let watchersOffset = 36  // u32 atomic: processes whose commit watcher may sleep on the signal
    static let slotsOffset = 64
    static let slotStride = 64  // one cache line per slot, so readers on different cores do not share lines
    static let slotOwner = 0  // u64 atomic: pid of the owner, 0 when free
    static let slotTxnid = 8  // u64 atomic: snapshot id, 0 while the owner is not reading
    static let defaultSlots = 1024

    /// fcntl byte ranges in the lock file.
    static let writerLockByte: Int64 = 0
    static let aliveLockByte: Int64 = 1
    /// Held by the process whose turn at the writer lock is next (WriterLock.swift).
    static let writerTurnByte: Int64 = 2
    /// Byte `pidLockBase + pid`: held shared by process `pid` for as long as it has the file open
    /// read-write, so that a slot whose pid now names a process that never opened the file (the
    /// pid was reused after its owner died) is told from a live reader's. Far past any data.
    static let pidLockBase: Int64 = 1 << 40

    /// The byte of the lock file that process `pid` holds while it has the file open.
    static func pidByte(_ pid: UInt64) -> Int64 { pidLockBase + Int64(pid) }

    static func size(slots: Int) -> Int { slotsOffset + slots * slotStride }

    /// The slot count of a lock file whose first `slotsOffset` bytes are `header`, or nil when the
    /// magic or version is wrong or the file is too short for its slots.
    static func validSlotCount(header: UnsafeRawPointer, fileSize: UInt64) -> Int? {
        let count = Int(header.u32(slotCountOffset))
        if header.u64(magicOffset) != magic || header.u32(versionOffset) != version || count == 0
            || UInt64(size(slots: count)) > fileSize
        {
            return nil
        }
        return count
    }
}

/// The publish hook, boxed: a closure kept directly in a `Mutex` would be re-wrapped in a
/// reabstraction thunk on every `withLock` (the inout access converts it in and back out), and a
/// hook read once per commit would grow a chain of thunks as long as the number of commits.
final class PublishHook: Sendable {
    let call: @Sendable (UInt64) -> Void
    init(_ call: @escaping @Sendable (UInt64) -> Void) { self.call = call }
}

/// A snapshot a reader slot holds, as the writer and `strata readers` see it.
///
/// ```swift
/// for reader in store.readers() { print(reader.slot, reader.pid, reader.txnid) }
/// ```
public struct ReaderSlot: Sendable, Equatable {
    /// Index of the slot in the table.
    public var slot: Int
    /// Process that owns the slot.
    public var pid: UInt64
    /// Transaction id of the snapshot it reads.
    public var txnid: UInt64
}

/// Shared table memory: the header's `latest` counter and the slots.
final class ReaderTable: Sendable {
    /// Points into the lock file's shared map, or into memory this object owns.
    /// Only touched through atomics after initialisation.
    private let memoryAddress: UInt
    let slotCount: Int
    private let ownsMemory: Bool
    private let pid: UInt64
    /// A view of another process's table through a read-only map (a read-only store listing the
    /// readers of a live file): it is only read, never written, not even to clear a dead
    /// process's slot.
    let isReadOnly: Bool
    /// Called by `publish` with each commit of this process, before the commit is published (the
    /// commit watcher tells this process's commits from other processes' with it).
    private let publishHook = Mutex<PublishHook?>(nil)
    private let hasPublishHook = Atomic<Bool>(false)
    /// This process counts itself among the lock file's watchers: its own commits need not wake
    /// anyone unless another process watches too.
    private let selfWatching = Atomic<Bool>(false)

    /// Whether process `pid` has the file open (holds its pid byte in the lock file); nil, or a nil
    /// answer, when that cannot be asked (an in-process table; a failed query).
    private let holdsFile: (@Sendable (UInt64) -> Bool?)?

    init(
        memory: UnsafeMutableRawPointer, slotCount: Int, ownsMemory: Bool, readOnly: Bool = false,
        holdsFile: (@Sendable (UInt64) -> Bool?)? = nil
    ) {
        self.memoryAddress = UInt(bitPattern: memory)
        self.slotCount = slotCount
        self.ownsMemory = ownsMemory
        self.pid = currentPID()
        self.isReadOnly = readOnly
        self.holdsFile = holdsFile
    }

    /// `holdsFile` for a table in the lock file `lockFile`: whether anyone holds the pid's byte.
    static func pidHolders(_ lockFile: PosixFile) -> @Sendable (UInt64) -> Bool? {
        { [lockFile] pid in
            // A pid read from the file that no process can have (a damaged slot) has no byte:
            // its slot is dead. (Its byte's offset would overflow, and trap.)
            guard pid > 0, pid <= UInt64(Int32.max) else { return false }
            return lockFile.isLockedByOthers(offset: LockLayout.pidByte(pid))
        }
    }

    /// A table in process memory, for stores no other process can open.
    static func inProcess(slots: Int = LockLayout.defaultSlots) -> ReaderTable {
        let size = LockLayout.size(slots: slots)
        let memory = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 64)
        memory.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        ReaderTable.format(memory, slots: slots)
        return ReaderTable(memory: memory, slotCount: slots, ownsMemory: true)
    }

    /// Writes a fresh header and empties every slot.
    static func format(_ memory: UnsafeMutableRawPointer, slots: Int) {
        memory.initializeMemory(as: UInt8.self, repeating: 0, count: LockLayout.size(slots: slots))
        memory.setU64(LockLayout.magicOffset, LockLayout.magic)
        memory.setU32(LockLayout.versionOffset, LockLayout.version)
        memory.setU32(LockLayout.slotCountOffset, UInt32(slots))
    }

    deinit {
        if ownsMemory { UnsafeMutableRawPointer(bitPattern: memoryAddress)?.deallocate() }
    }

    @inline(__always) private func atomic(_ offset: Int) -> UnsafeMutablePointer<Atomic<UInt64>> {
        (UnsafeMutableRawPointer(bitPattern: memoryAddress)! + offset).assumingMemoryBound(to: Atomic<UInt64>.self)
    }

    @inline(__always) private func atomic32(_ offset: Int) -> UnsafeMutablePointer<Atomic<UInt32>> {
        (UnsafeMutableRawPointer(bitPattern: memoryAddress)! + offset).assumingMemoryBound(to: Atomic<UInt32>.self)
    }

    @inline(__always) private func owner(_ slot: Int) -> UnsafeMutablePointer<Atomic<UInt64>> {
        atomic(LockLayout.slotsOffset + slot * LockLayout.slotStride + LockLayout.slotOwner)
    }

    @inline(__always) private func txn(_ slot: Int) -> UnsafeMutablePointer<Atomic<UInt64>> {
        atomic(LockLayout.slotsOffset + slot * LockLayout.slotStride + LockLayout.slotTxnid)
    }

    /// The id of the newest committed transaction.
    var latest: UInt64 {
        atomic(LockLayout.latestOffset).pointee.load(ordering: .sequentiallyConsistent)
    }

    /// Makes `txnid` the newest commit and wakes the other processes' commit watchers (FORMAT.md
    /// §6): the signal is bumped after `latest`, and a watcher reads the signal before `latest`
    /// and sleeps only while the signal is unchanged, so it never sleeps through a commit. The
    /// wake-up (a system call) is made only when a process other than this one watches.
    func publish(latest txnid: UInt64) {
        if isReadOnly { return }
        if hasPublishHook.load(ordering: .sequentiallyConsistent), let hook = publishHook.withLock({ $0 }) { hook.call(txnid) }
        atomic(LockLayout.latestOffset).pointee.store(txnid, ordering: .sequentiallyConsistent)
        atomic32(LockLayout.commitSignalOffset).pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        let watchers = atomic32(LockLayout.watchersOffset).pointee.load(ordering: .sequentiallyConsistent)
        if watchers > (selfWatching.load(ordering: .sequentiallyConsistent) ? 1 : 0) { AddressWait.wakeAll(commitSignalAddress) }
    }

    /// Sets the function `publish` calls with this process's commits (nil: none).
    func setPublishHook(_ hook: (@Sendable (UInt64) -> Void)?) {
        let boxed = hook.map(PublishHook.init)
        publishHook.withLock { $0 = boxed }
        hasPublishHook.store(hook != nil, ordering: .sequentiallyConsistent)
    }

    // MARK: Commit signal

    /// The commit signal's address, to sleep on (AddressWait).
    var commitSignalAddress: UnsafeMutableRawPointer {
        UnsafeMutableRawPointer(bitPattern: memoryAddress)! + LockLayout.commitSignalOffset
    }

    /// The commit signal's value; read it before `latest`, then sleep while it holds this value.
    var commitSignal: UInt32 { atomic32(LockLayout.commitSignalOffset).pointee.load(ordering: .sequentiallyConsistent) }

    /// Counts this process among the watchers, so that other processes' commits wake it.
    func addWatcher() {
        if isReadOnly { return }
        atomic32(LockLayout.watchersOffset).pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
        selfWatching.store(true, ordering: .sequentiallyConsistent)
    }

    /// Undoes `addWatcher` (never below zero: a count left by a process that died keeps only
    /// costing writers a wake-up call, until the lock file is next formatted).
    func removeWatcher() {
        if isReadOnly { return }
        selfWatching.store(false, ordering: .sequentiallyConsistent)
        let count = atomic32(LockLayout.watchersOffset)
        var current = count.pointee.load(ordering: .sequentiallyConsistent)
        while current > 0 {
            let (done, found) = count.pointee.compareExchange(expected: current, desired: current - 1, ordering: .sequentiallyConsistent)
            if done { return }
            current = found
        }
    }

    /// Processes counted as watchers (for `strata readers` and tests).
    var watcherCount: UInt32 { atomic32(LockLayout.watchersOffset).pointee.load(ordering: .sequentiallyConsistent) }

    /// Claims the lowest free slot, so that the slots in use stay packed at the start of the table
    /// and the writer's scan stays short.
    /// The owner of a slot being cleared after its process died (not a pid: pids are below 2^31).
    static let reclaiming = UInt64.max

    func acquire() throws -> Int {
        if isReadOnly { throw StorageError.internalError("a read-only reader table cannot register a snapshot") }
        if let slot = claimFreeSlot() { return slot }
        // Full: slots of processes that died are freed by the writer's scans (which may not come:
        // a file only read), so clear them here before refusing the snapshot.
        _ = liveReaders()
        if let slot = claimFreeSlot() { return slot }
        throw StorageError.readersFull(slots: slotCount)
    }

    private func claimFreeSlot() -> Int? {
        for slot in 0..<slotCount {
            let o = owner(slot)
            if o.pointee.load(ordering: .relaxed) != 0 { continue }
            if o.pointee.compareExchange(expected: 0, desired: pid, ordering: .sequentiallyConsistent).exchanged {
                raiseHighWater(to: UInt64(slot + 1))
                return slot
            }
        }
        return nil
    }

    private func raiseHighWater(to value: UInt64) {
        let mark = atomic(LockLayout.highWaterOffset)
        var current = mark.pointee.load(ordering: .sequentiallyConsistent)
        while current < value {
            let (exchanged, original) = mark.pointee.compareExchange(expected: current, desired: value, ordering: .sequentiallyConsistent)
            if exchanged { return }
            current = original
        }
    }

    /// Publishes the snapshot id a slot reads (a slot `acquire` returned, so never in a read-only
    /// view). Sequentially consistent, so that a writer scanning
    /// after this store sees it, and a writer that scanned before it has already published a newer
    /// `latest`, which the reader's recheck then sees.
    @inline(__always) func set(_ slot: Int, txnid: UInt64) {
        txn(slot).pointee.store(txnid, ordering: .sequentiallyConsistent)
    }

    func release(_ slot: Int) {
        if isReadOnly { return }
        txn(slot).pointee.store(0, ordering: .sequentiallyConsistent)
        owner(slot).pointee.store(0, ordering: .sequentiallyConsistent)
    }

    /// Clears the slots that name this process's pid, when it opens the file beside other
    /// processes and holds none yet: a process that died with a snapshot had this pid before it
    /// was reused. Once this process holds the pid's byte, every other process takes such a slot
    /// for its own (alive), and its own scans skip slots of its pid, so nothing else would ever
    /// clear it, and the pages of that old snapshot stayed unreusable while this process ran.
    /// Called by the opener under the writer lock, after it took the pid's byte, while no
    /// environment of the file exists in the process (none of its slots can be in use).
    func releaseSlotsOfThisPid() {
        if isReadOnly { return }
        let limit = Int(min(UInt64(slotCount), atomic(LockLayout.highWaterOffset).pointee.load(ordering: .sequentiallyConsistent)))
        for slot in 0..<limit where owner(slot).pointee.load(ordering: .sequentiallyConsistent) == pid {
            txn(slot).pointee.store(0, ordering: .sequentiallyConsistent)
            _ = owner(slot).pointee.compareExchange(expected: pid, desired: 0, ordering: .sequentiallyConsistent)
        }
    }

    /// Live snapshots, after clearing the slots of processes that no longer exist, or whose pid a
    /// process that does not have the file open now bears (a read-only view only skips them). Scans only the
    /// slots below the high-water mark: a reader raises the mark (sequentially consistent) before
    /// it publishes a snapshot id, so a scan that misses its slot also misses its id.
    func liveReaders() -> [ReaderSlot] {
        var result: [ReaderSlot] = []
        var deadPids: Set<UInt64> = []
        let limit = Int(min(UInt64(slotCount), atomic(LockLayout.highWaterOffset).pointee.load(ordering: .sequentiallyConsistent)))
        for slot in 0..<limit {
            let ownerPid = owner(slot).pointee.load(ordering: .sequentiallyConsistent)
            if ownerPid == 0 || ownerPid == Self.reclaiming { continue }
            let t = txn(slot).pointee.load(ordering: .sequentiallyConsistent)
            if ownerPid != pid {
                // The owner is gone when nobody holds its pid's byte in the lock file: a pid may be
                // reused once its process dies (a live process with that pid and no byte is not
                // the owner), and a process in another PID namespace (a container sharing the
                // volume) is no process here (`kill` says so) while it holds its byte (found by the
                // review of 2026-12-06: its snapshots' pages were reused). `kill` decides only
                // where the byte cannot be asked.
                let holds = holdsFile?(ownerPid) ?? nil
                if deadPids.contains(ownerPid) || holds == false || (holds == nil && !processIsAlive(ownerPid)) {
                    deadPids.insert(ownerPid)
                    if isReadOnly { continue }
                    // One scanner wins the slot from the dead owner, and only it clears the slot:
                    // clearing by the snapshot id read could wipe the id of a new reader that took
                    // the slot (cleared by another scanner meanwhile) and reads the same commit.
                    // No one can take the slot while it is marked.
                    if owner(slot).pointee.compareExchange(expected: ownerPid, desired: Self.reclaiming, ordering: .sequentiallyConsistent).exchanged {
                        txn(slot).pointee.store(0, ordering: .sequentiallyConsistent)
                        _ = owner(slot).pointee.compareExchange(expected: Self.reclaiming, desired: 0, ordering: .sequentiallyConsistent)
                    }
                    continue
                }
            }
            if t != 0 { result.append(ReaderSlot(slot: slot, pid: ownerPid, txnid: t)) }
        }
        return result
    }
}
