import Foundation
import Testing

@testable import Strata

// A recursive type whose hand-written `init(from:)` picks its case with `contains` (or skips a
// child with `try?`) is refused at open, as a synthesized recursive type is. The probe tries such
// a type once per key present; each run that failed for nesting too deep was skipped, so two
// recursive children made 4 runs per level (4^24 in all: the open never returned), and one made
// a schema cut at 24 levels that opened fine and failed inserts deeper than that (found by a
// review of limits, 2026-12-07).

/// Two recursive children; the case chosen by which key is present.
indirect enum PRFilter: Codable, Sendable {
    case term(String)
    case both(PRFilter, PRFilter)
    enum CodingKeys: String, CodingKey { case term, left, right }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        if c.contains(.term) {
            self = .term(try c.decode(String.self, forKey: .term))
        } else {
            self = .both(try c.decode(PRFilter.self, forKey: .left), try c.decode(PRFilter.self, forKey: .right))
        }
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .term(let t): try c.encode(t, forKey: .term)
        case .both(let l, let r):
            try c.encode(l, forKey: .left)
            try c.encode(r, forKey: .right)
        }
    }
}

/// One recursive child.
indirect enum PRList: Codable, Sendable {
    case end(Int)
    case next(PRList)
    enum CodingKeys: String, CodingKey { case end, next }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        if c.contains(.end) { self = .end(try c.decode(Int.self, forKey: .end)) } else { self = .next(try c.decode(PRList.self, forKey: .next)) }
    }
    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .end(let n): try c.encode(n, forKey: .end)
        case .next(let l): try c.encode(l, forKey: .next)
        }
    }
}

/// A recursive child read with `try?`: its failure never reaches the probe.
struct PRNode: Codable, Sendable {
    var name: String
    var children: [PRNode]
    enum CodingKeys: String, CodingKey { case name, children }
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        children = (try? c.decode([PRNode].self, forKey: .children)) ?? []
    }
}

struct PRFilterModel: Model {
    var id: Int
    var filter: PRFilter
}

struct PRListModel: Model {
    var id: Int
    var list: PRList
}

struct PRNodeModel: Model {
    var id: Int
    var root: PRNode
}

struct ProbeRecursionTests {
    static func refusal(_ open: () throws -> Void) -> String {
        do {
            try open()
            return "opened"
        } catch StrataError.unsupportedType(_, let field, let reason) {
            return "unsupportedType \(field): \(reason)"
        } catch {
            return "\(error)"
        }
    }

    // The time limit only guards against a hang (a test can wait minutes for a thread on 2 cores).
    @Test(.timeLimit(.minutes(20))) func recursiveTypesWithHandWrittenCodersAreRefused() {
        let start = Date()
        for (name, open) in [
            ("filter", { _ = try Database.inMemory(models: [PRFilterModel.self]) }),
            ("list", { _ = try Database.inMemory(models: [PRListModel.self]) }),
            ("node", { _ = try Database.inMemory(models: [PRNodeModel.self]) }),
        ] as [(String, () throws -> Void)] {
            let result = Self.refusal(open)
            #expect(result.hasPrefix("unsupportedType") && result.contains("recursive type"), "\(name): \(result)")
        }
        #expect(Date().timeIntervalSince(start) < 10, "took \(Date().timeIntervalSince(start)) s")
    }
}
