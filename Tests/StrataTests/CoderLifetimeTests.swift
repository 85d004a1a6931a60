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

struct HoardList: Codable, Equatable {
    var id: Int
    var items: [Hoard]
    var keepers: [DecoderKeeper]
}

/// A type that keeps its whole decoder: the decoder of the next element must be another one.
struct DecoderKeeper: Codable, Equatable {
    var n: Int
    init(n: Int) { self.n = n }
    init(from decoder: any Decoder) throws {
        n = try decoder.container(keyedBy: CodingKeys.self).decode(Int.self, forKey: .n)
        HoardStash.decoders.withLock { $0.append(decoder) }
    }
}

/// A list whose elements keep their container (`Hoard`) or their whole encoder.
struct HoardShelf: Codable, Equatable {
    var id: Int
    var items: [Hoard]
    var keepers: [EncoderKeeper]
}

/// A type that keeps its whole encoder: the next element must be written by another one.
struct EncoderKeeper: Codable, Equatable {
    var n: Int
    enum CodingKeys: String, CodingKey { case n }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(n, forKey: .n)
        HoardStash.encoders.withLock { $0.append(encoder) }
    }
}

/// A list that keeps its unkeyed container, and a map that keeps its whole encoder: a field's
/// collection encoder is reused for the next record only while nothing else holds it.
struct ListKeeper: Codable, Equatable, Sendable {
    var xs: [Int]
    init(_ xs: [Int]) { self.xs = xs }
    init(from decoder: any Decoder) throws {
        var c = try decoder.unkeyedContainer()
        var xs: [Int] = []
        while !c.isAtEnd { xs.append(try c.decode(Int.self)) }
        self.xs = xs
    }
    func encode(to encoder: any Encoder) throws {
        // Written through every container kept before: none of them may be this one.
        try HoardStash.scribble()
        var c = encoder.unkeyedContainer()
        for x in xs { try c.encode(x) }
        HoardStash.lists.withLock { $0.append(c) }
    }
}

struct MapKeeper: Codable, Equatable, Sendable {
    var byName: [String: Int]
    init(_ byName: [String: Int]) { self.byName = byName }
    init(from decoder: any Decoder) throws { byName = try decoder.singleValueContainer().decode([String: Int].self) }
    func encode(to encoder: any Encoder) throws {
        try HoardStash.scribble()
        var c = encoder.singleValueContainer()
        try c.encode(byName)
        HoardStash.encoders.withLock { $0.append(encoder) }
    }
}

struct KeeperShelf: Model, Equatable {
    var id: Int
    var list: ListKeeper
    var map: MapKeeper
    /// Lists inside a list, and lists inside the structs of a list: the encoders of elements'
    /// collections are reused from element to element the same way.
    var grid: [ListKeeper]
    var rows: [KeeperRow]
}

struct KeeperRow: Codable, Equatable, Sendable {
    var list: ListKeeper
    var plain: [Int]
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
    static let decoders = LockedContainers<any Decoder>()
    static let encoders = LockedContainers<any Encoder>()
    static let lists = LockedContainers<any UnkeyedEncodingContainer>()

    /// Writes a value through every kept list container and dictionary encoder.
    static func scribble() throws {
        for var list in lists.withLock({ $0 }) { try list.encode(-999) }
        for encoder in encoders.withLock({ $0 }) where encoder is DictionaryEncoder {
            var c = encoder.container(keyedBy: CodingKeysOfAnyName.self)
            try c.encode(-999, forKey: CodingKeysOfAnyName(stringValue: "zz"))
        }
    }
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

    /// The elements of an array share one decoder and one container while no element keeps
    /// them; a container or decoder an element kept goes on reading that element.
    @Test func elementsKeepingTheirContainersOrDecodersStayUsable() throws {
        let schema = try SchemaProbe.schema(of: HoardList.self, modelName: "HoardList")
        let value = HoardList(
            id: 1, items: (0..<5).map { Hoard(id: $0, name: "item \($0)") }, keepers: (0..<4).map { DecoderKeeper(n: $0 * 10) })
        let record = try RecordEncoding.encode(value, schema: schema, model: "HoardList")
        let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: record.count, alignment: 8)
        defer { bytes.deallocate() }
        record.withUnsafeBytes { bytes.copyMemory(from: $0) }
        // (Probing the schema decoded values of both types too.)
        HoardStash.decoding.withLock { $0.removeAll() }
        HoardStash.decoders.withLock { $0.removeAll() }
        for _ in 0..<2 {
            let back = try RecordDecoding.decode(HoardList.self, from: UnsafeRawBufferPointer(bytes), schema: schema, model: "HoardList")
            #expect(back == value)
            let kept = HoardStash.decoding.withLock { stash in
                defer { stash.removeAll() }; return stash
            }
            #expect(kept.count == 5)
            for (i, container) in kept.enumerated() {
                #expect(try container.decode(Int.self, forKey: .id) == i)
                #expect(try container.decode(String.self, forKey: .name) == "item \(i)")
            }
            let decoders = HoardStash.decoders.withLock { stash in
                defer { stash.removeAll() }; return stash
            }
            #expect(decoders.count == 4)
            for (i, decoder) in decoders.enumerated() {
                #expect(try DecoderKeeper(from: decoder) == DecoderKeeper(n: i * 10))
            }
            HoardStash.decoders.withLock { $0.removeAll() }
        }
    }

    /// Elements that keep their container or their whole encoder past `encode(to:)`: later
    /// elements are written by other encoders, and writing through the kept ones changes no record.
    @Test func elementsKeepingTheirContainersOrEncodersWriteNoOtherElement() throws {
        let schema = try SchemaProbe.schema(of: HoardShelf.self, modelName: "HoardShelf")
        let value = HoardShelf(id: 1, items: (0..<5).map { Hoard(id: $0, name: "item \($0)") }, keepers: (0..<4).map { EncoderKeeper(n: $0 * 10) })
        HoardStash.encoding.withLock { $0.removeAll() }
        HoardStash.encoders.withLock { $0.removeAll() }
        let first = try RecordEncoding.encode(value, schema: schema, model: "HoardShelf")
        for _ in 0..<2 {
            let containers = HoardStash.encoding.withLock { stash in
                defer { stash.removeAll() }
                return stash
            }
            #expect(containers.count == 5)
            for var container in containers {
                try container.encode(-1, forKey: .id)
                try container.encode("overwritten", forKey: .name)
            }
            let encoders = HoardStash.encoders.withLock { stash in
                defer { stash.removeAll() }
                return stash
            }
            #expect(encoders.count == 4)
            for encoder in encoders {
                var c = encoder.container(keyedBy: EncoderKeeper.CodingKeys.self)
                try c.encode(-7, forKey: .n)
            }
            let again = try RecordEncoding.encode(value, schema: schema, model: "HoardShelf")
            #expect(again == first)
            let back = try again.withUnsafeBytes { try RecordDecoding.decode(HoardShelf.self, from: $0, schema: schema, model: "HoardShelf") }
            #expect(back == value)
        }
        HoardStash.encoding.withLock { $0.removeAll() }
        HoardStash.decoding.withLock { $0.removeAll() }
        HoardStash.encoders.withLock { $0.removeAll() }
    }

    /// Collections that keep their container or encoder, written object after object through a
    /// database (whose model encoder is pooled, with a collection encoder per field): writing
    /// through the kept ones between inserts changes no stored object.
    @Test func collectionsKeepingTheirContainersOrEncodersWriteNoOtherCollection() throws {
        HoardStash.lists.withLock { $0.removeAll() }
        HoardStash.encoders.withLock { $0.removeAll() }
        defer {
            HoardStash.lists.withLock { $0.removeAll() }
            HoardStash.encoders.withLock { $0.removeAll() }
        }
        let db = try Database.inMemory(models: [KeeperShelf.self])
        func shelf(_ i: Int) -> KeeperShelf {
            KeeperShelf(
                id: i, list: ListKeeper(Array(0..<(i % 4))), map: MapKeeper(["a": i, "b": -i]),
                grid: (0..<(i % 3)).map { ListKeeper([i, $0]) },
                rows: (0..<2).map { KeeperRow(list: ListKeeper([i * 10 + $0]), plain: Array(repeating: i, count: $0 + 1)) })
        }
        for i in 0..<12 {
            try db.write { tx in try tx.insert(shelf(i)) }
            try HoardStash.scribble()
        }
        let stored = Array(db.objects(KeeperShelf.self).sorted(by: SortDescriptor(\.id)))
        #expect(stored == (0..<12).map(shelf))
    }
}

/// Any key: what a kept dictionary encoder is written through.
struct CodingKeysOfAnyName: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
