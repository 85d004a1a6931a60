import Synchronization

/// One spare coder (a model's `ModelDecoder` or top-level `ObjectEncoder`) kept between uses, so
/// that the common case, one thread coding object after object, reuses the same one. Taking is an
/// atomic exchange and giving back a compare-and-exchange: no lock. A thread that finds the slot
/// empty (another thread holds the spare, or a decode runs inside a decode) makes a fresh coder.
/// It holds `AnyObject` rather than being generic on purpose: it is used from generic code compiled
/// unspecialized, where a generic pool would look up the metadata of `Unmanaged<Coder>` on every
/// take and give.
///
/// `@unchecked Sendable`: the slot holds at most one coder, owned by the pool alone while it sits
/// there; `with` hands it to exactly one caller (the exchange empties the slot atomically), which
/// owns it until it puts it back. No coder is ever reachable from two threads at once.
final class CoderPool: @unchecked Sendable {
    private let slot = Atomic<Unmanaged<AnyObject>?>(nil)
    private let make: @Sendable () -> AnyObject

    init(_ make: @escaping @Sendable () -> AnyObject) { self.make = make }

    deinit { slot.exchange(nil, ordering: .acquiring)?.release() }

    /// Runs `body` with a coder of its own, of the type `make` returns.
    @inline(__always)
    func with<Coder: AnyObject, R>(_ type: Coder.Type, _ body: (Coder) throws -> R) rethrows -> R {
        if let spare = slot.exchange(nil, ordering: .acquiring) {
            // The spare's +1 is this call's while it runs, and goes back into the slot (or is
            // released) after: no retain or release of its own.
            defer {
                if !slot.compareExchange(expected: nil, desired: spare, ordering: .releasing).exchanged { spare.release() }
            }
            return try spare._withUnsafeGuaranteedRef { try body(unsafeDowncast($0, to: Coder.self)) }
        }
        let coder = make()
        defer {
            let spare = Unmanaged.passRetained(coder)
            if !slot.compareExchange(expected: nil, desired: spare, ordering: .releasing).exchanged { spare.release() }
        }
        return try body(unsafeDowncast(coder, to: Coder.self))
    }
}
