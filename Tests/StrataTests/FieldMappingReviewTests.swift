import Foundation
import Testing

@testable import Strata

/// Findings of the review of 2026-12-07 in how key paths are mapped to stored fields: properties
/// whose value no stored field holds were mapped to a field, and queries read that field. Each
/// query is checked against Foundation's evaluation over the objects.
@Suite struct FieldMappingReviewTests {
    /// `canManage` is `isAdmin || isOwner`, `lastActive` the later of two dates, `priority` 0 when
    /// the key is absent: none is a stored field.
    struct Member: Model, Equatable {
        var id: Int
        var isAdmin: Bool
        var isOwner: Bool
        var canManage: Bool
        var created: Date
        var edited: Date
        var lastActive: Date
        var priority: Int?

        enum CodingKeys: String, CodingKey { case id, isAdmin, isOwner, created, edited, priority }

        init(id: Int, isAdmin: Bool, isOwner: Bool, created: Date, edited: Date, priority: Int?) {
            self.id = id
            self.isAdmin = isAdmin
            self.isOwner = isOwner
            self.canManage = isAdmin || isOwner
            self.created = created
            self.edited = edited
            self.lastActive = max(created, edited)
            self.priority = priority ?? 0
        }

        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                id: try c.decode(Int.self, forKey: .id), isAdmin: try c.decode(Bool.self, forKey: .isAdmin),
                isOwner: try c.decode(Bool.self, forKey: .isOwner), created: try c.decode(Date.self, forKey: .created),
                edited: try c.decode(Date.self, forKey: .edited), priority: try c.decodeIfPresent(Int.self, forKey: .priority))
        }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(id, forKey: .id)
            try c.encode(isAdmin, forKey: .isAdmin)
            try c.encode(isOwner, forKey: .isOwner)
            try c.encode(created, forKey: .created)
            try c.encode(edited, forKey: .edited)
            if priority != 0 { try c.encodeIfPresent(priority, forKey: .priority) }
        }
    }

    @Test func derivedPropertiesAreQueriedAsTheObjectsReadThem() throws {
        let day = 86_400.0
        let t0 = Date(timeIntervalSinceReferenceDate: 700_000_000)
        let members = [
            Member(id: 1, isAdmin: true, isOwner: false, created: t0, edited: t0.addingTimeInterval(day), priority: nil),
            Member(id: 2, isAdmin: false, isOwner: true, created: t0.addingTimeInterval(3 * day), edited: t0, priority: 2),
            Member(id: 3, isAdmin: false, isOwner: false, created: t0, edited: t0.addingTimeInterval(2 * day), priority: 0),
            Member(id: 4, isAdmin: true, isOwner: true, created: t0.addingTimeInterval(day), edited: t0, priority: 5),
        ]
        for member in members { #expect(try JSONDecoder().decode(Member.self, from: JSONEncoder().encode(member)) == member) }
        let db = try Database.inMemory(models: [Member.self])
        try db.write { tx in for member in members { try tx.insert(member) } }
        let cutoff = t0.addingTimeInterval(1.5 * day)
        let predicates = [
            #Predicate<Member> { $0.canManage == true }, #Predicate<Member> { !$0.canManage },
            #Predicate<Member> { $0.lastActive > cutoff }, #Predicate<Member> { $0.priority == 0 },
            #Predicate<Member> { $0.priority == nil }, #Predicate<Member> { $0.canManage && $0.lastActive < cutoff },
        ]
        for (i, predicate) in predicates.enumerated() {
            let expected = try members.filter { try predicate.evaluate($0) }.map(\.id)
            #expect(try db.objects(Member.self).filter(predicate).fetch().map(\.id) == expected, "predicate \(i)")
        }
        for sort in [SortDescriptor(\Member.lastActive), SortDescriptor(\Member.lastActive, order: .reverse)] {
            #expect(try db.objects(Member.self).sorted(by: [sort]).fetch().map(\.id) == CodecReviewTests.sorted(members, by: sort))
        }
    }

    /// A property that reads one field, or another where the first is empty or zero.
    struct Profile: Model, Equatable {
        var id: Int
        var nick: String
        var fullName: String
        var displayName: String
        var sale: Int
        var list: Int
        var price: Int

        enum CodingKeys: String, CodingKey { case id, nick, fullName, sale, list }

        init(id: Int, nick: String, fullName: String, sale: Int, list: Int) {
            self.id = id
            self.nick = nick
            self.fullName = fullName
            self.displayName = nick.isEmpty ? fullName : nick
            self.sale = sale
            self.list = list
            self.price = sale == 0 ? list : sale
        }

        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            self.init(
                id: try c.decode(Int.self, forKey: .id), nick: try c.decode(String.self, forKey: .nick),
                fullName: try c.decode(String.self, forKey: .fullName), sale: try c.decode(Int.self, forKey: .sale),
                list: try c.decode(Int.self, forKey: .list))
        }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(id, forKey: .id)
            try c.encode(nick, forKey: .nick)
            try c.encode(fullName, forKey: .fullName)
            try c.encode(sale, forKey: .sale)
            try c.encode(list, forKey: .list)
        }
    }

    @Test func aFallbackToAnotherFieldIsNoField() throws {
        let profiles = [
            Profile(id: 1, nick: "", fullName: "Ana Silva", sale: 0, list: 30), Profile(id: 2, nick: "ben", fullName: "Ben Ode", sale: 20, list: 25),
            Profile(id: 3, nick: "Ana Silva", fullName: "X", sale: 30, list: 40),
        ]
        let db = try Database.inMemory(models: [Profile.self])
        try db.write { tx in for profile in profiles { try tx.insert(profile) } }
        let predicates = [
            #Predicate<Profile> { $0.displayName == "Ana Silva" }, #Predicate<Profile> { $0.price == 30 },
            #Predicate<Profile> { $0.displayName.starts(with: "B") || $0.price < 25 },
        ]
        for (i, predicate) in predicates.enumerated() {
            let expected = try profiles.filter { try predicate.evaluate($0) }.map(\.id)
            #expect(try db.objects(Profile.self).filter(predicate).fetch().map(\.id) == expected, "predicate \(i)")
        }
    }
}
