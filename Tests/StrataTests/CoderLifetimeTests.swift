import Testing
import Foundation
@testable import Strata

/// A type that keeps the containers it is given past its own `init(from:)` and `encode(to:)`,
/// which no synthesized conformance does: the codec's containers refer to their state unretained,
/// and must stay usable (never dangle) even then.
struct Hoard: Codable, Equatable {
    var id: Int
    var name: String

    enum CodingKeys: String, CodingKey { case id, name }

    init(id: Int, name: String) { self.id = id; self.name = name }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        name = try c.decode(String.self, forKey: .name)
        HoardStash.decoding.withLock { $0.append(c) }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(name, forKey: .name)
        HoardStash.encoding.withLock { $0.append(c) }
    }
}

struct HoardOuter: Codable, Equatable {
    var id: Int
    var inner: Hoard
}

/// `@unchecked Sendable`: only touched under its own lock, by these tests.
final class LockedContainers<C>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [C] = []
    func withLock<R>(_ body: (inout [C]) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&items)
    }
}

enum HoardStash {
    static let decoding = LockedContainers<KeyedDecodingContainer<Hoard.CodingKeys>>()
    static let encoding = LockedContainers<KeyedEncodingContainer<Hoard.CodingKeys>>()
}

@Suite(.serialized) struct CoderLifetimeTests {
    @Test func containersKeptPastTheirCoderStayUsable() throws {
        let schema = try SchemaProbe.schema(of: HoardOuter.self, modelName: "HoardOuter")
        let value = HoardOuter(id: 1, inner: Hoard(id: 2, name: "kept"))
        let record = try RecordEncoding.encode(value, schema: schema, model: "HoardOuter")
        // A buffer that outlives the decoders, as the record they pointed at.
        let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: record.count, alignment: 8)
        defer { bytes.deallocate() }
        record.withUnsafeBytes { bytes.copyMemory(from: $0) }
        do {
            // The top-level decoder of a model (its state is owned by the decoder, dropped here) …
            let hoardSchema = try SchemaProbe.schema(of: Hoard.self, modelName: "Hoard")
            let hoardRecord = try RecordEncoding.encode(Hoard(id: 3, name: "top"), schema: hoardSchema, model: "Hoard")
            let top = UnsafeMutableRawBufferPointer.allocate(byteCount: hoardRecord.count, alignment: 8)
            defer { top.deallocate() }
            hoardRecord.withUnsafeBytes { top.copyMemory(from: $0) }
            var decoder: ModelDecoder? = ModelDecoder(layout: DecodingLayout(hoardSchema), model: "Hoard")
            #expect(try decoder?.decode(Hoard.self, from: UnsafeRawBufferPointer(top)) == Hoard(id: 3, name: "top"))
            decoder = nil
            let kept = HoardStash.decoding.withLock { $0.removeLast() }
            #expect(try kept.decode(Int.self, forKey: .id) == 3)
        }
        // … and a nested struct's decoder.
        let back = try RecordDecoding.decode(HoardOuter.self, from: UnsafeRawBufferPointer(bytes), schema: schema, model: "HoardOuter")
        #expect(back == value)
        let nested = HoardStash.decoding.withLock { $0.removeLast() }
        #expect(try nested.decode(String.self, forKey: .name) == "kept")
        // Encoders: the container still writes into its (kept) state.
        _ = try RecordEncoding.encode(value, schema: schema, model: "HoardOuter")
        var encoding = HoardStash.encoding.withLock { $0.removeLast() }
        try encoding.encode(4, forKey: .id)
        HoardStash.encoding.withLock { $0.removeAll() }
        HoardStash.decoding.withLock { $0.removeAll() }
    }
}
