import Observation
import Synchronization

/// One object that keeps itself current, for SwiftUI and anything else that uses Observation:
/// `object` is the stored object (nil while there is none), `changedFields` the stored fields the
/// last change touched. Every commit that changes the object, in this process or another, updates
/// them on the actor you name (the main actor with the `@MainActor` initializer); commits that
/// leave it as it was change nothing. A deleted object reads as nil, and one inserted under the
/// key later appears. It holds no snapshot, only the object. Releasing it (or `stop()`) ends the
/// observation.
///
/// ```swift
/// @MainActor final class ProfileModel {
///     let person: LiveObject<Person>
///     init(db: Database, id: String) { person = LiveObject(Person.self, key: id, in: db) }
/// }
/// ```
///
/// It is `Sendable`: its state sits behind a lock; mutations happen only on the chosen actor.
public final class LiveObject<M: Model>: Observable, Sendable {
    private struct State {
        var object: M?
        var changedFields: [String] = []
        var error: StrataError?
        /// Events applied (for tests).
        var updates = 0
        /// `stop()` was called: events already on their way to the actor are dropped there.
        var stopped = false
    }

    /// What the observer reports, in order, to the consumer that applies it on the actor.
    private enum Event: Sendable {
        case initial(M?)
        case change(ObjectChange<M>)
    }

    private let state: Mutex<State>
    private let registrar = ObservationRegistrar()
    private let token = Mutex<NotificationToken?>(nil)
    private let events: AsyncStream<Event>.Continuation

    /// The object as stored now; nil when there is none.
    ///
    /// ```swift
    /// // In a SwiftUI view holding `person: LiveObject<Person>`:
    /// Text(person.object?.name ?? "deleted")
    /// ```
    public var object: M? {
        registrar.access(self, keyPath: \.object)
        return state.withLock { $0.object }
    }

    /// The names of the stored fields the last change touched (every field when the object
    /// appeared; empty at first and after a deletion).
    ///
    /// ```swift
    /// if person.changedFields.contains("status") { pulseStatusBadge() }
    /// ```
    public var changedFields: [String] {
        registrar.access(self, keyPath: \.changedFields)
        return state.withLock { $0.changedFields }
    }

    /// Why the object could not be read, if the last read failed; the value stays as it was.
    ///
    /// ```swift
    /// if let error = person.error { print("could not read:", error) }
    /// ```
    public var error: StrataError? {
        registrar.access(self, keyPath: \.error)
        return state.withLock { $0.error }
    }

    /// Reads the object with primary key `key` now and keeps it current, updating on `actor`. The
    /// actor is not kept alive by this object (it may own it); once nothing holds the actor,
    /// updates are applied as they arrive.
    ///
    /// ```swift
    /// actor Presence {
    ///     private var ana: LiveObject<Person>?
    ///     func start(_ db: Database) { ana = LiveObject(Person.self, key: "u1", in: db, updatingOn: self) }
    /// }
    /// ```
    public init(_ type: M.Type, key: M.ID, in db: Database, updatingOn actor: any Actor) {
        var initialError: StrataError?
        var current: M?
        do { current = try db.object(M.self, key: key) } catch { initialError = error as? StrataError ?? .invalidQuery("\(error)") }
        state = Mutex(State(object: current, error: initialError))
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self)
        events = continuation
        let observation = db.observeLive(
            M.self, key: key, initial: { continuation.yield(.initial($0)) },
            change: { continuation.yield(.change($0)) })
        token.withLock { $0 = observation }
        // One consumer applies the events in order, each on the actor. It holds the actor weakly,
        // as it holds this object: an actor that owns this object (the documented pattern) would
        // otherwise be kept alive by the waiting consumer, and the stream never finished. An actor
        // that nothing else held is gone: no code can run on it any more, and the events are
        // applied here, in order.
        Task { [weak self, weak actor] in
            for await event in stream {
                guard let self else { return }
                if let actor {
                    await runIsolated(to: actor) { self.apply(event) }
                } else {
                    self.apply(event)
                }
            }
        }
    }

    deinit {
        events.finish()
    }

    /// Stops updating; the current values stay. (Releasing the object does the same.)
    ///
    /// ```swift
    /// person.stop()   // the object stays as it is; no more updates
    /// ```
    public func stop() {
        state.withLock { $0.stopped = true }
        token.withLock { $0 }?.invalidate()
        events.finish()
    }

    /// On the chosen actor.
    private func apply(_ event: Event) {
        // Events buffered or handed over before `stop()` reach the actor after it: the values stay.
        if state.withLock({ $0.stopped }) { return }
        switch event {
        case .initial(let object):
            set(object, fields: [], error: nil)
        case .change(.changed(let object, let fields)):
            set(object, fields: fields, error: nil)
        case .change(.deleted):
            set(nil, fields: [], error: nil)
        case .change(.error(let error)):
            registrar.willSet(self, keyPath: \.error)
            state.withLock {
                $0.error = error; $0.updates += 1
            }
            registrar.didSet(self, keyPath: \.error)
        }
    }

    /// Events applied so far (for tests).
    var updateCount: Int { state.withLock { $0.updates } }

    private func set(_ object: M?, fields: [String], error: StrataError?) {
        registrar.willSet(self, keyPath: \.object)
        registrar.willSet(self, keyPath: \.changedFields)
        registrar.willSet(self, keyPath: \.error)
        state.withLock { state in
            state.object = object
            state.changedFields = fields
            state.error = error
            state.updates += 1
        }
        registrar.didSet(self, keyPath: \.error)
        registrar.didSet(self, keyPath: \.changedFields)
        registrar.didSet(self, keyPath: \.object)
    }
}

extension LiveObject {
    /// A live object updated on the main actor, for SwiftUI.
    ///
    /// ```swift
    /// let ana = LiveObject(Person.self, key: "u1", in: db)   // in main-actor code (a view model, a view)
    /// ```
    @MainActor
    public convenience init(_ type: M.Type, key: M.ID, in db: Database) {
        self.init(type, key: key, in: db, updatingOn: MainActor.shared)
    }
}

extension Database {
    /// The observation behind `LiveObject`: `initial` gets the object as first read, then
    /// `change` every change, an appearance included, and a deletion does not end it.
    func observeLive<M: Model>(
        _ type: M.Type, key: M.ID, initial: @escaping @Sendable (M?) -> Void,
        change: @escaping @Sendable (ObjectChange<M>) -> Void
    ) -> NotificationToken {
        let observer = ObjectObserver<M>(db: self, key: key, queue: DispatchQueue(label: "strata.live-object"), initial: initial) { event, _ in change(event) }
        observer.start()
        return NotificationToken { observer.invalidate() }
    }
}
