import Foundation
import Testing

@testable import Strata

/// Findings of the review of 2026-12-06 in query planning, each checked against Foundation's own
/// evaluation of the predicate over every object.
@Suite struct QueryReviewTests {
    struct Slot: Model {
        static let indexes: [PartialKeyPath<Slot> & Sendable] = [\.room]
        var id: Int
        var room: Int
        var lo: Int
        var hi: Int
    }

    /// Whether Foundation's evaluation throws for any of `objects`.
    static func throwsForAny<M>(_ predicate: Predicate<M>, _ objects: [M]) -> Bool {
        objects.contains { (try? predicate.evaluate($0)) == nil }
    }

    /// A half-open range built from fields throws when its lower bound is above its upper (as
    /// Foundation's evaluation does): the query throws, whether an index or a window would have
    /// kept the object out. It returned the other objects.
    @Test func aRangeThatThrowsFailsTheQueryWhateverThePlan() throws {
        let db = try Database.inMemory(models: [Slot.self])
        let objects = [Slot(id: 1, room: 7, lo: 9, hi: 1), Slot(id: 2, room: 3, lo: 1, hi: 9)]
        try db.write { tx in for object in objects { try tx.insert(object) } }
        let indexed = #Predicate<Slot> { ($0.lo..<$0.hi).contains(5) && $0.room == 3 }
        #expect(Self.throwsForAny(indexed, objects))
        #expect(throws: (any Error).self) { try db.objects(Slot.self).filter(indexed).fetch() }
        #expect(throws: (any Error).self) { try db.objects(Slot.self).filter(indexed).fetchCount() }
        // No index, a window that the first object fills: the second throws all the same.
        let windowed = #Predicate<Slot> { ($0.hi..<$0.lo).contains(5) }
        let reversed = [Slot(id: 1, room: 0, lo: 9, hi: 1), Slot(id: 2, room: 0, lo: 1, hi: 9)]
        let other = try Database.inMemory(models: [Slot.self])
        try other.write { tx in for object in reversed { try tx.insert(object) } }
        #expect(Self.throwsForAny(windowed, reversed))
        #expect(throws: (any Error).self) { try other.objects(Slot.self).filter(windowed).prefix(1).fetch() }
    }

    struct NamedSlot: Model {
        var id: Int
        var lo: Int
        var hi: Int
        var name: String
    }

    /// A range built from fields beside a regex in one operand (whose expression has no checked
    /// form, so the translation judges it by its type's name): a window that the first object
    /// fills stopped the scan before the object whose range throws.
    @Test func aRangeBesideARegexStillFailsTheQuery() throws {
        let db = try Database.inMemory(models: [NamedSlot.self])
        let objects = [NamedSlot(id: 1, lo: 9, hi: 1, name: "x"), NamedSlot(id: 2, lo: 1, hi: 9, name: "y")]
        try db.write { tx in for object in objects { try tx.insert(object) } }
        let predicate = #Predicate<NamedSlot> { ($0.hi..<$0.lo).contains(5) == $0.name.contains(/x/) }
        #expect(objects.contains { object in (try? predicate.evaluate(object)) == nil })
        #expect(throws: (any Error).self) { try db.objects(NamedSlot.self).filter(predicate).prefix(1).fetch() }
    }

    struct Inner: Codable, Sendable, Hashable {
        var n: Int
    }

    struct Holder: Model {
        static let indexes: [PartialKeyPath<Holder> & Sendable] = [\.inner?.n]
        var id: Int
        var inner: Inner?
        var n: Int
    }

    /// A closure in an optional's `flatMap` that reads the predicate's object, not the unwrapped
    /// value: `h.inner.flatMap { _ in h.n }` is `h.n` when `inner` is there, not `inner.n`.
    @Test func aFlatMapClosureThatReadsTheObjectIsNotAFieldOfTheValue() throws {
        let db = try Database.inMemory(models: [Holder.self])
        let objects = [Holder(id: 1, inner: Inner(n: 1), n: 5), Holder(id: 2, inner: Inner(n: 5), n: 1), Holder(id: 3, inner: nil, n: 5)]
        try db.write { tx in for object in objects { try tx.insert(object) } }
        let predicate = #Predicate<Holder> { h in h.inner.flatMap { _ in h.n } == 5 }
        let expected = try objects.filter { try predicate.evaluate($0) }.map(\.id)
        #expect(expected == [1])
        #expect(try db.objects(Holder.self).filter(predicate).fetch().map(\.id) == expected)
        #expect(db.objects(Holder.self).filter(predicate).count == expected.count)
    }
}

/// A raw-value struct whose own Codable writes another form than its raw value: the schema
/// stores the field as that form (a string), while keys are its raw value's encoding.
struct QRUserID: RawRepresentable, Codable, Sendable, Hashable {
    var rawValue: String
    init(rawValue: String) { self.rawValue = rawValue }
    init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        rawValue = text.hasPrefix("u:") ? String(text.dropFirst(2)) : text
    }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode("u:" + rawValue)
    }
}

/// A raw-value struct with the standard library's Codable (its raw value, as is).
struct QRPlainID: RawRepresentable, Codable, Sendable, Hashable {
    var rawValue: String
}

struct QRPlainDoc: Model {
    static let indexes: [PartialKeyPath<QRPlainDoc> & Sendable] = [\.owner]
    var id: Int
    var owner: QRPlainID
}

struct QRDoc: Model, Equatable {
    static let indexes: [PartialKeyPath<QRDoc> & Sendable] = [\.owner, \.editor]
    var id: QRUserID
    var owner: QRUserID
    var editor: QRUserID?
}

extension QueryReviewTests {
    /// Constants of such a type on an indexed field were looked up by their raw value ("abc")
    /// among entries holding "u:abc": an exact index answer, so every query came back empty.
    /// One whose Codable writes its raw value is still looked up in the index (and found).
    @Test func anIndexedRawValueStructCodedAsItsRawValueUsesTheIndex() throws {
        let db = try Database.inMemory(models: [QRPlainDoc.self])
        try db.write { tx in for i in 0..<20 { try tx.insert(QRPlainDoc(id: i, owner: QRPlainID(rawValue: "o\(i % 3)"))) } }
        let who = QRPlainID(rawValue: "o1")
        let found = db.objects(QRPlainDoc.self).filter(#Predicate { $0.owner == who })
        #expect(found.map(\.id) == [1, 4, 7, 10, 13, 16, 19])
        #expect(found.explain().contains("i:QRPlainDoc:owner"), "\(found.explain())")
    }

    @Test func anIndexedRawValueStructCodedOtherwiseAnswersAsEvaluate() throws {
        let db = try Database.inMemory(models: [QRDoc.self])
        let ids = ["abc", "b", "u:c", ""].map { QRUserID(rawValue: $0) }
        try db.write { tx in
            for (i, id) in ids.enumerated() { try tx.insert(QRDoc(id: id, owner: ids[(i + 1) % ids.count], editor: i % 2 == 0 ? id : nil)) }
        }
        let all = try db.read { snapshot in try snapshot.objects(QRDoc.self).fetch() }
        let b = QRUserID(rawValue: "b")
        for who in ids {
            let predicates = [
                #Predicate<QRDoc> { $0.owner == who }, #Predicate<QRDoc> { $0.editor == who }, #Predicate<QRDoc> { $0.id == who },
                #Predicate<QRDoc> { [who, b].contains($0.owner) },
            ]
            for predicate in predicates {
                let expected = try all.filter { try predicate.evaluate($0) }.map(\.id.rawValue).sorted()
                #expect(db.objects(QRDoc.self).filter(predicate).map(\.id.rawValue).sorted() == expected, "\(who)")
                #expect(db.objects(QRDoc.self).filter(predicate).count == expected.count, "\(who)")
            }
        }
    }
}
