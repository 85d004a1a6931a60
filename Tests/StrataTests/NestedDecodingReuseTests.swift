import Foundation
import Testing

@testable import Strata

// A decoder reuses, from one record to the next, what it makes for nested values: the decoder of
// each field, a struct's keyed container and its state, nested keyed containers and the keys of a
// payload enum's case. These tests decode many records of varied shapes with one decoder, and
// types that keep what they are given, that switch key types, or that ask twice.

private enum NRShape: Codable, Equatable, Sendable {
    case circle(radius: Double)
    case rect(Double, Double)
    case label(String, size: Int?)
    case empty
}

private struct NRPoint: Codable, Equatable, Sendable {
    var x: Int
    var y: Int
    var tag: String?
}

private struct NRFrame: Codable, Equatable, Sendable {
    var origin: NRPoint
    var corner: NRPoint?
    var shape: NRShape
}

private struct NRDrawing: Model, Equatable {
    var id: Int
    var title: String
    var frame: NRFrame
    var optionalFrame: NRFrame?
    var shapes: [NRShape]
    var points: [String: NRPoint]
    var lastShape: NRShape?
}

/// Reads its fields through a container of another key type too, and asks for its first one twice.
private struct NRTwoKeyTypes: Codable, Equatable, Sendable {
    var a: Int
    var b: String

    enum CodingKeys: String, CodingKey { case a, b }
    enum OnlyB: String, CodingKey { case b }

    init(a: Int, b: String) {
        self.a = a
        self.b = b
    }

    init(from decoder: any Decoder) throws {
        let first = try decoder.container(keyedBy: CodingKeys.self)
        let again = try decoder.container(keyedBy: CodingKeys.self)
        a = try first.decode(Int.self, forKey: .a)
        let other = try decoder.container(keyedBy: OnlyB.self)
        b = try other.decode(String.self, forKey: .b)
        // The first container, still held, reads its value again after the other key type's.
        guard try again.decode(Int.self, forKey: .a) == a, try first.decode(String.self, forKey: .b) == b else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "containers disagree"))
        }
    }
}

private struct NRMixed: Model, Equatable {
    var id: Int
    var pair: NRTwoKeyTypes
    var pairs: [NRTwoKeyTypes]
}

/// Keeps the nested container it reads its coordinates from (`nestedContainer(keyedBy:forKey:)`).
private struct NRLocated: Codable, Equatable, Sendable {
    var name: String
    var lat: Double

    enum CodingKeys: String, CodingKey { case name, geo }
    enum GeoKeys: String, CodingKey { case lat }

    init(name: String, lat: Double) {
        self.name = name
        self.lat = lat
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        let geo = try c.nestedContainer(keyedBy: GeoKeys.self, forKey: .geo)
        lat = try geo.decode(Double.self, forKey: .lat)
        NRLocatedStash.kept.withLock { $0.append(geo) }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        var geo = c.nestedContainer(keyedBy: GeoKeys.self, forKey: .geo)
        try geo.encode(lat, forKey: .lat)
    }
}

private enum NRLocatedStash {
    static let kept = LockedContainers<KeyedDecodingContainer<NRLocated.GeoKeys>>()
}

private struct NRLocatedOuter: Codable, Equatable {
    var id: Int
    var place: NRLocated
}

/// Fails to encode itself halfway through when `fail` is set.
private struct NRHalfway: Codable, Equatable, Sendable {
    var first: Int
    var fail: Bool
    var last: String

    struct Refused: Error {}

    enum CodingKeys: String, CodingKey { case first, fail, last }

    init(first: Int, fail: Bool, last: String) {
        self.first = first
        self.fail = fail
        self.last = last
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        first = try c.decode(Int.self, forKey: .first)
        fail = try c.decode(Bool.self, forKey: .fail)
        last = try c.decode(String.self, forKey: .last)
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(first, forKey: .first)
        try c.encode(fail, forKey: .fail)
        if fail { throw Refused() }
        try c.encode(last, forKey: .last)
    }
}

private struct NRHolder: Model, Equatable {
    var id: Int
    var inner: NRHalfway
    var shape: NRShape
}

@Suite(.serialized) struct NestedDecodingReuseTests {
    /// A nested value whose `encode(to:)` throws halfway leaves nothing behind in the encoder
    /// that the next object's nested value is written with.
    @Test func aNestedValueThatFailsToEncodeLeavesNothingForTheNext() throws {
        let db = try Database.inMemory(models: [NRHolder.self])
        var stored: [NRHolder] = []
        for i in 0..<30 {
            let holder = NRHolder(id: i, inner: NRHalfway(first: i, fail: i % 3 == 1, last: "l\(i)"), shape: i % 2 == 0 ? .empty : .label("s\(i)", size: i))
            do {
                try db.write { tx in try tx.insert(holder) }
                #expect(!holder.inner.fail, "object \(i) should have failed to encode")
                stored.append(holder)
            } catch is NRHalfway.Refused {
                #expect(holder.inner.fail, "object \(i)")
            }
        }
        #expect(try db.objects(NRHolder.self).fetch() == stored)
    }

    private static func randomShape(_ rng: inout SeededRandom) -> NRShape {
        switch rng.below(4) {
        case 0: return .circle(radius: Double(rng.below(1001)) / 8)
        case 1: return .rect(Double((rng.below(101) - 50)), .infinity)
        case 2: return .label(["", "é", "e\u{301}", "label"][rng.below(4)], size: (rng.below(100) < 50) ? nil : Int(bitPattern: UInt(rng.next())))
        default: return .empty
        }
    }

    private static func randomPoint(_ rng: inout SeededRandom) -> NRPoint {
        NRPoint(x: Int(bitPattern: UInt(rng.next())), y: (rng.below(7) - 3), tag: (rng.below(100) < 40) ? nil : "t\(rng.below(10))")
    }

    private static func randomFrame(_ rng: inout SeededRandom) -> NRFrame {
        NRFrame(origin: randomPoint(&rng), corner: (rng.below(100) < 50) ? nil : randomPoint(&rng), shape: randomShape(&rng))
    }

    /// Objects whose nested values change shape from one to the next (an optional struct present
    /// or not, enum cases with and without payloads, collections of structs and enums of varying
    /// sizes), fetched by one query (one decoder for all), equal what was stored; and again after
    /// a reopen, and one by one.
    @Test func nestedValuesOfVaryingShapesReadBackExactly() throws {
        let seed: UInt64 = 0x5EED_0DEC
        var rng = SeededRandom(seed: seed)
        let path = databasePath()
        var model: [Int: NRDrawing] = [:]
        do {
            let db = try Database(path: path, models: [NRDrawing.self])
            try db.write { tx in
                for id in 0..<400 {
                    let drawing = NRDrawing(
                        id: id, title: "d\(id)", frame: Self.randomFrame(&rng),
                        optionalFrame: (rng.below(100) < 50) ? nil : Self.randomFrame(&rng),
                        shapes: (0..<rng.below(5)).map { _ in Self.randomShape(&rng) },
                        points: Dictionary(uniqueKeysWithValues: (0..<rng.below(4)).map { ("k\($0)", Self.randomPoint(&rng)) }),
                        lastShape: (rng.below(100) < 30) ? nil : Self.randomShape(&rng))
                    try tx.insert(drawing)
                    model[id] = drawing
                }
            }
            let all = try db.objects(NRDrawing.self).fetch()
            #expect(all.count == model.count, "seed \(seed)")
            for drawing in all where model[drawing.id] != drawing {
                Issue.record("seed \(seed): \(drawing.id) read back as \(drawing), stored \(String(describing: model[drawing.id]))")
            }
        }
        let db = try Database(path: path, models: [NRDrawing.self])
        #expect(try db.objects(NRDrawing.self).fetch() == model.keys.sorted().map { model[$0]! }, "seed \(seed)")
        for id in stride(from: 0, to: 400, by: 37) { #expect(try db.object(NRDrawing.self, key: id) == model[id], "seed \(seed) id \(id)") }
    }

    /// A type that asks for its container twice and for another key type in between gets
    /// containers that each read the current object, record after record.
    @Test func containersOfTwoKeyTypesReadTheCurrentObject() throws {
        let db = try Database.inMemory(models: [NRMixed.self])
        let values = (0..<120).map { i in
            NRMixed(id: i, pair: NRTwoKeyTypes(a: i, b: "b\(i)"), pairs: (0..<(i % 4)).map { NRTwoKeyTypes(a: -$0, b: "p\(i).\($0)") })
        }
        try db.write { tx in for value in values { try tx.insert(value) } }
        #expect(try db.objects(NRMixed.self).fetch() == values)
    }

    /// Encodes each value into a buffer of its own and decodes them all, one after another, with
    /// one decoder (as a query does); the buffers stay alive for containers kept past decoding.
    private static func decodeOneByOne<T: Codable & Equatable>(_ values: [T], model: String, beforeDecoding: () -> Void) throws
        -> [UnsafeMutableRawBufferPointer]
    {
        let schema = try SchemaProbe.schema(of: T.self, modelName: model)
        let decoder = ModelDecoder(layout: DecodingLayout(schema), model: model)
        beforeDecoding()
        var buffers: [UnsafeMutableRawBufferPointer] = []
        for value in values {
            let record = try RecordEncoding.encode(value, schema: schema, model: model)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: record.count, alignment: 8)
            record.withUnsafeBytes { buffer.copyMemory(from: $0) }
            buffers.append(buffer)
            #expect(try decoder.decode(T.self, from: UnsafeRawBufferPointer(buffer)) == value)
        }
        return buffers
    }

    /// A nested container a type keeps past its `init(from:)` keeps reading its own object's
    /// record after the decoder has moved on to others (it is not handed out again).
    @Test func keptNestedContainersKeepTheirOwnObject() throws {
        defer { NRLocatedStash.kept.withLock { $0.removeAll() } }
        let values = (0..<40).map { NRLocatedOuter(id: $0, place: NRLocated(name: "p\($0)", lat: Double($0) / 4)) }
        // (The schema probe's containers are dropped before decoding.)
        let buffers = try Self.decodeOneByOne(values, model: "NRLocatedOuter") { NRLocatedStash.kept.withLock { $0.removeAll() } }
        defer { for buffer in buffers { buffer.deallocate() } }
        let kept = NRLocatedStash.kept.withLock { $0 }
        #expect(kept.count == 40)
        for (i, geo) in kept.enumerated() { #expect(try geo.decode(Double.self, forKey: .lat) == Double(i) / 4, "object \(i)") }
    }

    /// Containers of a nested struct field kept past their coder: each keeps its own object.
    @Test func keptContainersOfNestedStructsKeepTheirOwnObject() throws {
        defer { HoardStash.decoding.withLock { $0.removeAll() } }
        let values = (0..<40).map { HoardOuter(id: $0, inner: Hoard(id: $0 * 2, name: "n\($0)")) }
        let buffers = try Self.decodeOneByOne(values, model: "HoardOuter") { HoardStash.decoding.withLock { $0.removeAll() } }
        defer { for buffer in buffers { buffer.deallocate() } }
        let kept = HoardStash.decoding.withLock { $0 }
        #expect(kept.count == 40)
        for (i, c) in kept.enumerated() { #expect(try c.decode(String.self, forKey: .name) == "n\(i)", "object \(i)") }
    }
}
