import Synchronization

/// One spare `ModelDecoder` kept between uses, so that the common case, one thread decoding
/// object after object, reuses the same one. Taking is an atomic exchange and giving back a
/// compare-and-exchange: no lock. A thread that finds the slot empty (another thread holds the
/// spare, or a decode runs inside a decode) makes a fresh decoder. Not generic on purpose: it is
/// used from generic code compiled unspecialized, where a generic pool would look up the metadata
/// of `Unmanaged<Coder>` on every take and give.
///
/// `@unchecked Sendable`: the slot holds at most one decoder, owned by the pool alone while it
/// sits there; `with` hands it to exactly one caller (the exchange empties the slot atomically),
/// which owns it until it puts it back. No decoder is ever reachable from two threads at once.
final class DecoderPool: @unchecked Sendable {
    private let slot = Atomic<Unmanaged<ModelDecoder>?>(nil)
    private let make: @Sendable () -> ModelDecoder

    init(_ make: @escaping @Sendable () -> ModelDecoder) { self.make = make }

    deinit { slot.exchange(nil, ordering: .acquiring)?.release() }

    /// Runs `body` with a decoder of its own.
    @inline(__always)
    func with<R>(_ body: (ModelDecoder) throws -> R) rethrows -> R {
        let coder = slot.exchange(nil, ordering: .acquiring)?.takeRetainedValue() ?? make()
        defer {
            let spare = Unmanaged.passRetained(coder)
            if !slot.compareExchange(expected: nil, desired: spare, ordering: .releasing).exchanged { spare.release() }
        }
        return try body(coder)
    }
}
