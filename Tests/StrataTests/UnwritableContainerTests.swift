import Foundation
import Testing

@testable import Strata

// A field written through a container Strata cannot store (a nested unkeyed container for an
// array, a nested keyed one for a dictionary): it was dropped from the record when empty, and the
// object then did not read back. Now such a type is refused at open (and a write that reaches
// such a container anyway throws, whether it wrote into it or not).

private struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

struct UCTagged: Model {
    var id: Int
    var tags: [String]

    enum CodingKeys: String, CodingKey { case id, tags }

    init(id: Int, tags: [String]) {
        self.id = id
        self.tags = tags
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        tags = try c.decode([String].self, forKey: .tags)
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        var list = c.nestedUnkeyedContainer(forKey: .tags)
        for tag in tags.sorted() { try list.encode(tag) }
    }
}

struct UCCounts: Model {
    var id: Int
    var counts: [String: Int]

    enum CodingKeys: String, CodingKey { case id, counts }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(Int.self, forKey: .id)
        counts = try c.decode([String: Int].self, forKey: .counts)
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        var nested = c.nestedContainer(keyedBy: AnyKey.self, forKey: .counts)
        for (key, value) in counts { try nested.encode(value, forKey: AnyKey(stringValue: key)) }
    }
}

struct UCInner: Codable, Sendable, Equatable {
    var tags: [String]

    enum CodingKeys: String, CodingKey { case tags }

    init(tags: [String]) { self.tags = tags }

    init(from decoder: any Decoder) throws {
        tags = try decoder.container(keyedBy: CodingKeys.self).decode([String].self, forKey: .tags)
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        var list = c.nestedUnkeyedContainer(forKey: .tags)
        for tag in tags { try list.encode(tag) }
    }
}

struct UCOuter: Model {
    var id: Int
    var items: [UCInner]
}

struct UnwritableContainerTests {
    @Test func aModelWritingAFieldThroughANestedContainerIsRefusedAtOpen() throws {
        // (UCOuter's: the open's trial write holds an element, whose struct writes so.)
        for model in [UCTagged.self, UCCounts.self, UCOuter.self] as [any Model.Type] {
            #expect("\(model)") {
                _ = try Database.inMemory(models: [model])
            } throws: { error in
                guard case StrataError.unsupportedType(_, let field, let reason) = error else { return false }
                return (field.hasSuffix("tags") || field == "counts") && reason.contains("written through a container")
            }
        }
    }
}
