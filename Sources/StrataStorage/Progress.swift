#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

// Progress and cancellation of long synchronous operations: query scans, migrations, copies and
// compactions. They take no extra parameter: `withProgress` installs a control for the calling
// thread, and the operations' loops report to the control of the thread they run on every so
// many steps (`OperationControl.step`), which is where a stop request or a cancelled Swift task
// turns into a thrown `CancellationError`. The async reads of the object layer install one on the
// thread that runs the read, cancelled with the reading task.
//
// The per-thread control is a pthread key, not a task-local: the operations are synchronous, and
// their hot loops look it up once per loop (a scan) or once per object (decoding), where a
// pthread_getspecific is a few nanoseconds and nothing when no control is installed anywhere.

/// How far a long operation has come, as `withProgress` reports it.
///
/// ```swift
/// try withProgress({ progress in
///     print(progress.phase, progress.completed, progress.total.map(String.init) ?? "?")
///     return true
/// }) { try store.copy(to: "/tmp/backup.strata") }
/// ```
public struct OperationProgress: Sendable, Equatable {
    /// What is being done: "scan m:Person", "copy users", "migrate Person", ...
    public var phase: String
    /// Units done in this phase: entries scanned or copied, objects decoded or migrated.
    public var completed: Int
    /// Units the phase has in all, when known in advance.
    public var total: Int?

    /// A progress report; the engine makes these, and tests or wrappers may too.
    public init(phase: String, completed: Int, total: Int?) {
        self.phase = phase
        self.completed = completed
        self.total = total
    }
}

/// Runs `body`, reporting the progress of the long operations it performs on this thread (query
/// scans and decoding, `Migration.enumerateObjects`, `Store.copy`) to `progress` about every
/// `interval` units. Return false from `progress` to stop: the operation throws
/// `CancellationError` (a write transaction it ran in rolls back; a copy removes what it wrote).
/// When `body` runs inside a Swift task, a cancelled task stops it the same way.
///
/// ```swift
/// let people = try withProgress({ p in
///     print(p.phase, p.completed, p.total ?? 0)
///     return !userPressedStop
/// }) {
///     try store.read { txn in try txn.tree("people")?.count ?? 0 }
/// }
/// ```
public func withProgress<R>(every interval: Int = 1_000, _ progress: (OperationProgress) -> Bool, _ body: () throws -> R) throws -> R {
    try withoutActuallyEscaping(progress) { progress in
        let control = OperationControl(handler: progress, interval: max(1, interval), watchesTask: true)
        let result: R
        do {
            result = try control.install(body)
        } catch {
            // The operation's own error may wrap the stop (a query reports it as its failure).
            if control.isCancelled { throw CancellationError() }
            throw error
        }
        // A loop that cannot throw (iterating results) just ended early: the result is partial.
        if control.isCancelled { throw CancellationError() }
        return result
    }
}

/// The progress and cancellation state of the operations running on one thread.
///
/// `@unchecked Sendable`: `completed`, `phase`, `total`, `scanning`, `inHandler`, `parent` and `sinceReport` are read and written only
/// by the thread that installed the control (the operations report to the control of their own
/// thread); `cancelled` is atomic and may be set from anywhere (`cancel()`); the rest is immutable.
package final class OperationControl: @unchecked Sendable {
    private let handler: ((OperationProgress) -> Bool)?
    private let interval: Int
    /// Whether a cancelled Swift task running the operation stops it.
    private let watchesTask: Bool
    private let cancelled = Atomic<Bool>(false)
    /// The control that was installed when this one was (its stop requests stop this one too).
    private var parent: OperationControl?
    private var phase = ""
    private var completed = 0
    private var total: Int?
    private var sinceReport = 0
    private var scanning = false
    /// The handler is running (on the installing thread): work it does itself (a query it runs)
    /// reports to this control too, and must not call it again from inside.
    private var inHandler = false

    package init(handler: ((OperationProgress) -> Bool)?, interval: Int = 1_000, watchesTask: Bool) {
        self.handler = handler
        self.interval = interval
        self.watchesTask = watchesTask
    }

    /// Asks the operations to stop at their next step (any thread).
    package func cancel() { cancelled.store(true, ordering: .sequentiallyConsistent) }

    /// Whether this control or one it was installed under was cancelled.
    package var isCancelled: Bool {
        var control: OperationControl? = self
        while let current = control {
            if current.cancelled.load(ordering: .sequentiallyConsistent) { return true }
            control = current.parent
        }
        return false
    }

    /// Runs `body` with this control as the calling thread's.
    package func install<R>(_ body: () throws -> R) throws -> R {
        let key = OperationControl.key
        let previous = pthread_getspecific(key)
        parent = previous.map { Unmanaged<OperationControl>.fromOpaque($0).takeUnretainedValue() }
        pthread_setspecific(key, Unmanaged.passUnretained(self).toOpaque())
        OperationControl.installed.add(1, ordering: .relaxed)
        defer {
            pthread_setspecific(key, previous)
            OperationControl.installed.subtract(1, ordering: .relaxed)
        }
        return try withExtendedLifetime(self) { try body() }
    }

    /// The calling thread's control, if one is installed.
    @inline(__always)
    package static var current: OperationControl? {
        if installed.load(ordering: .relaxed) == 0 { return nil }
        guard let raw = pthread_getspecific(key) else { return nil }
        return Unmanaged<OperationControl>.fromOpaque(raw).takeUnretainedValue()
    }

    /// Starts a phase of `total` units (nil: unknown). A scan phase (`scan`) makes the objects
    /// decoded meanwhile count as checks, not as units: the scan counts the entries.
    package func begin(_ phase: String, total: Int?, scan: Bool = false) {
        self.phase = phase
        self.total = total
        completed = 0
        scanning = scan
    }

    /// Ends a scan phase.
    package func endScan() { scanning = false }

    /// One object decoded: a unit of its own phase ("decode"), or, inside a scan, only a chance
    /// to stop.
    @inline(__always)
    package func decoded() throws {
        if scanning {
            sinceReport &+= 1
            if sinceReport >= interval { try report() }
            return
        }
        if phase != OperationControl.decodePhase { begin(OperationControl.decodePhase, total: nil) }
        try step()
    }

    static let decodePhase = "decode"

    /// Counts `units` done; every `interval` units (and whenever asked to stop) checks whether to
    /// stop, and throws `CancellationError` if so.
    @inline(__always)
    package func step(_ units: Int = 1) throws {
        completed &+= units
        sinceReport &+= units
        if sinceReport >= interval { try report() }
    }

    /// Checks now: a stop request, a cancelled task, or the handler's answer.
    package func report() throws {
        sinceReport = 0
        if isCancelled { throw CancellationError() }
        if watchesTask && Task.isCancelled {
            cancel()  // so that loops that cannot throw stop too (`shouldStop`)
            throw CancellationError()
        }
        var control: OperationControl? = self
        while let current = control {
            if let handler = current.handler, !current.inHandler {
                current.inHandler = true
                // A query the handler runs reports here too (its phase, its counts): what this
                // operation had done is put back after.
                let saved = (phase, completed, total, scanning)
                let goOn = handler(OperationProgress(phase: phase, completed: completed, total: total))
                (phase, completed, total, scanning) = saved
                current.inHandler = false
                if !goOn {
                    current.cancel()
                    throw CancellationError()
                }
            }
            control = current.parent
        }
    }

    /// Whether the calling thread's operations should stop now (a cheap check for loops that
    /// cannot throw, such as iterating results).
    package static var shouldStop: Bool { current?.isCancelled ?? false }

    /// Units completed in the current phase (for tests).
    package var completedUnits: Int { completed }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// Controls installed on any thread: while none is, `current` costs one atomic load.
    private static let installed = Atomic<Int>(0)
}
