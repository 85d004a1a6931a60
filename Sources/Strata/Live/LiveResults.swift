import Observation
import Synchronization

/// What the last update of live results changed, in the indices UIKit's batch updates and
/// SwiftUI's diffing use (each ascending): `deletions` in the previous results, `insertions` and
/// `modifications` in the current ones (see `ResultsChange.update`).
///
/// ```swift
/// if let change = people.lastChange {   // people: LiveResults<Person>, rows: [Person]
///     for i in change.deletions.reversed() { rows.remove(at: i) }
///     for i in change.insertions { rows.insert(people.results[i], at: i) }
///     for i in change.modifications { rows[i] = people.results[i] }
/// }
/// ```
public struct ResultsChangeSet: Sendable, Equatable {
    /// Indices, in the previous results, of the objects that left them.
    public let deletions: [Int]
    /// Indices, in the current results, of the objects that entered them.
    public let insertions: [Int]
    /// Indices, in the current results, of the objects that stayed and changed.
    public let modifications: [Int]

    /// A change set with these indices, each list ascending: for tests and for adapting
    /// other change sources to the same shape.
    ///
    /// ```swift
    /// let change = ResultsChangeSet(deletions: [0], insertions: [], modifications: [2])
    /// ```
    public init(deletions: [Int], insertions: [Int], modifications: [Int]) {
        self.deletions = deletions
        self.insertions = insertions
        self.modifications = modifications
    }
}

/// Query results that keep themselves current, for SwiftUI and anything else that uses
/// Observation (the role of Realm's `@ObservedResults` and SwiftData's `@Query`). Reading
/// `results`, `lastChange` or `error` inside `withObservationTracking` (or a SwiftUI view's `body`)
/// registers for their changes; every commit that changes the results, in this process or
/// another, updates them on the actor you name (the main actor with the `@MainActor` initializer).
/// It keeps one snapshot alive, that of `results`: commits that land while an update is on its way
/// to the actor merge into the next one. Releasing it (or `stop()`) ends the observation.
///
/// ```swift
/// @MainActor final class PeopleModel {
///     let people: LiveResults<Person>
///     init(db: Database) {
///         people = LiveResults(db.objects(Person.self).sorted(by: SortDescriptor(\.name)))
///     }
/// }
/// ```
///
/// It is `Sendable`: its state sits behind a lock, so any thread may read it; mutations happen
/// only on the chosen actor, which is what observers (SwiftUI included) see.
public final class LiveResults<M: Model>: Observable, Sendable {
    private struct State {
        var results: Results<M>
        var lastChange: ResultsChangeSet?
        var error: StrataError?
        /// Updates applied (for tests).
        var updates = 0
        /// `stop()` was called: changes already on their way to the actor are dropped there.
        var stopped = false
    }

    private let state: Mutex<State>
    private let registrar = ObservationRegistrar()
    private let token = Mutex<NotificationToken?>(nil)

    /// The current results, of the newest commit that changed them.
    ///
    /// ```swift
    /// // In a SwiftUI view whose model holds `people: LiveResults<Person>`:
    /// List(model.people.results, id: \.id) { Text($0.name) }
    /// ```
    public var results: Results<M> {
        registrar.access(self, keyPath: \.results)
        return state.withLock { $0.results }
    }

    /// What the last update changed, relative to the `results` before it; nil when the results
    /// were replaced as a whole (the first update, which evaluates the query afresh). An error
    /// (`error`) leaves `results` and `lastChange` as they were, and the update after it is
    /// relative to those `results` again.
    ///
    /// ```swift
    /// if let change = people.lastChange {   // animate rows instead of reloading the list
    ///     print(change.deletions, change.insertions, change.modifications)
    /// }
    /// ```
    public var lastChange: ResultsChangeSet? {
        registrar.access(self, keyPath: \.lastChange)
        return state.withLock { $0.lastChange }
    }

    /// The last evaluation's failure (a reader slot not available, a damaged record); nil after a
    /// successful one. The results stay as they were; the next commit evaluates again.
    ///
    /// ```swift
    /// if let error = people.error { showBanner("Could not refresh: \(error)") }
    /// ```
    public var error: StrataError? {
        registrar.access(self, keyPath: \.error)
        return state.withLock { $0.error }
    }

    /// Starts from `results` (shown at once) and keeps them current, updating on `actor`. With
    /// `keyPaths`, commits that change only other fields of the objects change nothing unless they
    /// move objects into, out of or within the results. The
    /// actor is not kept alive by this object (it may own it); once nothing holds the actor,
    /// updates are applied as they arrive.
    ///
    /// ```swift
    /// actor Indexer {
    ///     private var people: LiveResults<Person>?
    ///     func start(_ db: Database) { people = LiveResults(db.objects(Person.self), updatingOn: self) }
    /// }
    /// ```
    public init(_ results: Results<M>, keyPaths: [PartialKeyPath<M> & Sendable]? = nil, updatingOn actor: any Actor) {
        state = Mutex(State(results: results, lastChange: nil, error: results.error))
        // The actor weakly too: an actor that owns this object (the documented pattern) would
        // otherwise be kept alive by the observer the database holds, and so would this object
        // and its observation, until the database closed. An actor that nothing else held is
        // gone: no code can run on it any more, and the changes are applied as they come, in order.
        let observation = results.observe(keyPaths: keyPaths) { [weak self, weak actor] change, _, done in
            guard let self else { return done() }
            guard let actor else {
                self.apply(change)
                return done()
            }
            Task {
                await runIsolated(to: actor) { self.apply(change) }
                done()
            }
        }
        token.withLock { $0 = observation }
    }

    /// Stops updating; the current values stay. (Releasing the object does the same.)
    ///
    /// ```swift
    /// people.stop()   // results stay as they are; no more updates
    /// ```
    public func stop() {
        state.withLock { $0.stopped = true }
        token.withLock { $0 }?.invalidate()
    }

    /// On the chosen actor.
    private func apply(_ change: ResultsChange<M>) {
        // A change handed over before `stop()` reaches the actor after it: the values stay.
        if state.withLock({ $0.stopped }) { return }
        switch change {
        case .initial(let results):
            replace(results, change: nil)
        case .update(let results, let deletions, let insertions, let modifications):
            replace(results, change: ResultsChangeSet(deletions: deletions, insertions: insertions, modifications: modifications))
        case .error(let error):
            registrar.willSet(self, keyPath: \.error)
            state.withLock {
                // The close's error is final here too: an earlier failure's task may reach the
                // actor after it (see `replace`).
                if $0.error != .databaseClosed { $0.error = error }
                $0.updates += 1
            }
            registrar.didSet(self, keyPath: \.error)
        }
    }

    /// Updates applied so far (for tests).
    var updateCount: Int { state.withLock { $0.updates } }

    private func replace(_ results: Results<M>, change: ResultsChangeSet?) {
        registrar.willSet(self, keyPath: \.results)
        registrar.willSet(self, keyPath: \.lastChange)
        registrar.willSet(self, keyPath: \.error)
        // The previous results (and their snapshot) are released here, outside the lock.
        let previous = state.withLock { state -> Results<M> in
            defer {
                state.results = results
                state.lastChange = change
                // The close's error is final: it reaches the actor in a task of its own, which
                // may run before the last change's.
                if state.error != .databaseClosed { state.error = nil }
                state.updates += 1
            }
            return state.results
        }
        _ = previous
        registrar.didSet(self, keyPath: \.error)
        registrar.didSet(self, keyPath: \.lastChange)
        registrar.didSet(self, keyPath: \.results)
    }
}

extension LiveResults {
    /// Live results updated on the main actor, for SwiftUI.
    ///
    /// ```swift
    /// let people = LiveResults(db.objects(Person.self).sorted(by: SortDescriptor(\.name)))   // in main-actor code
    /// ```
    @MainActor
    public convenience init(_ results: Results<M>, keyPaths: [PartialKeyPath<M> & Sendable]? = nil) {
        self.init(results, keyPaths: keyPaths, updatingOn: MainActor.shared)
    }
}

/// Runs `body` on `actor`'s executor.
func runIsolated(to actor: isolated any Actor, _ body: @Sendable () -> Void) {
    body()
}
