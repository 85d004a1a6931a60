import Synchronization

/// One spare coder (a `ModelDecoder` or `ModelEncoder`) kept between uses, so that the common
/// case, one thread decoding object after object, reuses the same one. Taking is an atomic
/// exchange and giving back a compare-and-exchange: no lock. A thread that finds the slot empty
/// (another thread holds the spare, or a decode runs inside a decode) makes a fresh coder.
///
/// `@unchecked Sendable`: the slot holds at most one coder, owned by the pool alone while it sits
/// there; `take` hands it to exactly one caller (the exchange empties the slot atomically), which
/// owns it until `give` puts it back. No coder is ever reachable from two threads at once.
final class CoderPool<Coder: AnyObject>: @unchecked Sendable {
    private let slot = Atomic<Unmanaged<Coder>?>(nil)
    private let make: @Sendable () -> Coder

    init(_ make: @escaping @Sendable () -> Coder) { self.make = make }

    deinit { slot.exchange(nil, ordering: .acquiring)?.release() }

    /// Runs `body` with a coder of its own.
    @inline(__always)
    func with<R>(_ body: (Coder) throws -> R) rethrows -> R {
        let coder = slot.exchange(nil, ordering: .acquiring)?.takeRetainedValue() ?? make()
        defer {
            let spare = Unmanaged.passRetained(coder)
            if !slot.compareExchange(expected: nil, desired: spare, ordering: .releasing).exchanged { spare.release() }
        }
        return try body(coder)
    }
}
