import Testing
import Foundation
import Dispatch
@testable import Strata

struct Author: Model, Equatable {
    var id: String
    var name: String
    var mentor: Ref<Author>?
}

struct Post: Model, Equatable {
    static let indexes: [PartialKeyPath<Post> & Sendable] = [\.author, \.mentions]
    var id: Int?
    var title: String
    var author: Ref<Author>
    var mentions: [Ref<Author>]
}

struct GraphAndThreadTests {
    @Test func referencesFollowedBothWays() throws {
        let db = try Database.inMemory(models: [Author.self, Post.self])
        try db.write { tx in
            try tx.insert(Author(id: "a", name: "Ana", mentor: nil))
            try tx.insert(Author(id: "b", name: "José", mentor: Ref("a")))
            try tx.insert(Post(id: nil, title: "one", author: Ref("a"), mentions: [Ref("b")]))
            try tx.insert(Post(id: nil, title: "two", author: Ref("b"), mentions: [Ref("a"), Ref("b")]))
            try tx.insert(Post(id: nil, title: "three", author: Ref("a"), mentions: []))
        }
        let snapshot = try db.snapshot()
        // Forward: post → author → mentor.
        let two = try #require(try snapshot.object(Post.self, key: 2))
        let author = try #require(try snapshot.object(Author.self, key: two.author.id))
        #expect(author.name == "José")
        #expect(try snapshot.object(Author.self, key: try #require(author.mentor).id)?.name == "Ana")
        // Backward: author → posts, through an index.
        let byAna = snapshot.backlinks(Post.self, via: \.author, to: "a")
        #expect(byAna.map(\.title) == ["one", "three"])
        #expect(byAna.explain().contains("i:Post:author"))
        #expect(snapshot.backlinks(Post.self, via: \.mentions, to: "b").map(\.title) == ["one", "two"])
        #expect(snapshot.backlinks(Author.self, via: \.mentor, to: "a").map(\.name) == ["José"])
    }

    @Test func caseAndDiacriticInsensitiveSearch() throws {
        let db = try Database.inMemory(models: [Author.self, Post.self])
        try db.write { tx in
            for (id, name) in [("1", "José"), ("2", "jose"), ("3", "JOSEPH"), ("4", "Ana")] { try tx.insert(Author(id: id, name: name, mentor: nil)) }
        }
        let all = db.objects(Author.self)
        #expect(all.filter(\.name, matching: .equals("jose"), options: [.caseInsensitive, .diacriticInsensitive]).map(\.id) == ["1", "2"])
        #expect(all.filter(\.name, matching: .beginsWith("jos"), options: .caseInsensitive).map(\.id) == ["1", "2", "3"])
        #expect(all.filter(\.name, matching: .contains("OS"), options: []).map(\.id) == ["3"])
        #expect(all.filter(\.name, matching: .endsWith("é"), options: .diacriticInsensitive).map(\.id) == ["1", "2"])
        let n = "Ana"
        #expect(all.filter(\.name, matching: .contains("a"), options: .caseInsensitive).filter(#Predicate { $0.name != n }).map(\.id) == [])
    }

    @Test func resultsCrossThreadsWithoutTranslators() async throws {
        let db = try Database.inMemory(models: [Author.self, Post.self])
        try await db.write { tx in for i in 0..<200 { try tx.insert(Author(id: String(format: "%03d", i), name: "n\(i)", mentor: nil)) } }
        let results = db.objects(Author.self).sorted(by: SortDescriptor(\.id))
        // Writes after the snapshot do not change what the results see, on any thread.
        try await db.write { tx in try tx.deleteAll(Author.self) }
        let counts = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<4 { group.addTask { results.reduce(0) { n, a in n + (a.name.isEmpty ? 0 : 1) } } }
            return await group.reduce(0, +)
        }
        #expect(counts == 800)
        #expect(db.objects(Author.self).count == 0)
        let names = await Task.detached { results.prefix(3).map(\.name) }.value
        #expect(names == ["n0", "n1", "n2"])
    }
}
