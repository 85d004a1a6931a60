import Foundation

/// How `filter(_:matching:options:)` compares strings.
///
/// ```swift
/// let joses = db.objects(Person.self).filter(\.name, matching: .equals("jose"), options: [.caseInsensitive, .diacriticInsensitive])
/// ```
public struct StringMatchOptions: OptionSet, Sendable {
    /// The bits of the options, for `OptionSet`.
    public let rawValue: Int
    /// Options from their bits; use the named options instead.
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// "ana" matches "Ana" (Realm's `[c]`).
    public static let caseInsensitive = StringMatchOptions(rawValue: 1)
    /// "jose" matches "José" (Realm's `[d]`).
    public static let diacriticInsensitive = StringMatchOptions(rawValue: 2)
}

/// A string comparison for `filter(_:matching:options:)`.
///
/// Each case means what the same `#Predicate` means, comparing `Character`s (so canonically
/// equivalent strings match, and `"cafe\u{301}"` does not contain `"\u{301}"`): `.equals` is
/// `==`, `.beginsWith` is `starts(with:)`, `.contains` is `contains`, `.endsWith` is
/// `starts(with:)` on the reversed characters; an empty string begins, ends and is contained in
/// every string. With options, the stored value and the string given are first folded with
/// Foundation's `folding(options:locale:)` (no locale): `.caseInsensitive` folds case
/// (`"Straße"` matches `"STRASSE"`), `.diacriticInsensitive` removes marks (`"José"` matches
/// `"jose"`).
///
/// ```swift
/// let smiths = db.objects(Person.self).filter(\.name, matching: .endsWith("Smith"))
/// ```
public enum StringMatch: Sendable {
    /// The whole string equals the given one.
    case equals(String)
    /// The string contains the given one.
    case contains(String)
    /// The string begins with the given one.
    case beginsWith(String)
    /// The string ends with the given one.
    case endsWith(String)
}

/// Filters that `#Predicate` cannot express on Linux, or that are easier with a key path. They
/// combine with `#Predicate` filters (all must hold) and with sorting, counting and aggregates.
///
/// ```swift
/// let anas = db.objects(Person.self)
///     .filter(\.name, matching: .beginsWith("ana"), options: [.caseInsensitive, .diacriticInsensitive])
///     .filter(#Predicate { $0.age > 18 })
/// ```
extension Results {
    private func adding(_ test: FieldTest<M>) -> Results<M> {
        var q = query
        q.filters.append(.test(test))
        return rebuilt(q)
    }

    /// Objects whose string field matches, optionally ignoring case and diacritics.
    ///
    /// ```swift
    /// let anas = db.objects(Person.self).filter(\.name, matching: .beginsWith("ana"), options: [.caseInsensitive])
    /// ```
    public func filter(_ keyPath: KeyPath<M, String> & Sendable, matching match: StringMatch, options: StringMatchOptions = []) -> Results<M> {
        adding(stringTest(keyPath, match, options) { $0 })
    }

    /// Objects whose optional string field is present and matches.
    ///
    /// ```swift
    /// let gmail = db.objects(Person.self).filter(\.email, matching: .endsWith("@gmail.com"))   // email: String?
    /// ```
    public func filter(_ keyPath: KeyPath<M, String?> & Sendable, matching match: StringMatch, options: StringMatchOptions = []) -> Results<M> {
        adding(stringTest(keyPath, match, options) { $0 })
    }

    /// Objects whose field equals `value`; uses the key or an index on the field when there is one.
    ///
    /// ```swift
    /// let thirty = db.objects(Person.self).filter(\.age, equals: 30)
    /// ```
    public func filter<V: Equatable & Sendable>(_ keyPath: KeyPath<M, V> & Sendable, equals value: V) -> Results<M> {
        let path = fieldPath(of: keyPath as PartialKeyPath<M>)
        return adding(FieldTest(condition: path.map { .compare(path: $0, op: .eq, value: value) } ?? .opaque) { $0[keyPath: keyPath] == value })
    }

    /// Objects whose array field contains `value`; uses an index on the field when there is one.
    ///
    /// ```swift
    /// let admins = db.objects(Person.self).filter(\.tags, contains: "admin")   // tags: [String]
    /// ```
    public func filter<V: Equatable & Sendable>(_ keyPath: KeyPath<M, [V]> & Sendable, contains value: V) -> Results<M> {
        let path = fieldPath(of: keyPath as PartialKeyPath<M>)
        return adding(FieldTest(condition: path.map { .arrayContains(path: $0, value: value) } ?? .opaque) { $0[keyPath: keyPath].contains(value) })
    }

    private func stringTest<S>(
        _ keyPath: KeyPath<M, S> & Sendable, _ match: StringMatch, _ options: StringMatchOptions,
        _ unwrap: @escaping @Sendable (S) -> String?
    ) -> FieldTest<M> {
        var compare: String.CompareOptions = []
        if options.contains(.caseInsensitive) { compare.insert(.caseInsensitive) }
        if options.contains(.diacriticInsensitive) { compare.insert(.diacriticInsensitive) }
        let flags = compare
        let path = fieldPath(of: keyPath as PartialKeyPath<M>) ?? "\(keyPath)"
        // Without options the matches are `#Predicate`'s own, so the conditions are exact; with
        // options only the closure knows (Foundation's comparison), so nothing else may answer.
        let plain = options.isEmpty
        let condition: @Sendable () -> Condition = {
            guard plain else { return .opaque }
            switch match {
            case .equals(let s): return .compare(path: path, op: .eq, value: s)
            case .beginsWith(let s): return .startsWith(path: path, prefix: s)
            case .contains(let s): return .contains(path: path, substring: s)
            case .endsWith: return .opaque
            }
        }
        // With options both sides are folded first (Foundation's `folding(options:locale:)`, no
        // locale), then compared as without: folding is total, where Foundation's
        // `range(of:options:)` traps on some inputs on Linux ("é" searched for "e\u{0}").
        let fold: @Sendable (String) -> String = { plain ? $0 : $0.folding(options: flags, locale: nil) }
        let needle: String
        switch match {
        case .equals(let s), .contains(let s), .beginsWith(let s), .endsWith(let s): needle = fold(s)
        }
        return FieldTest(condition: condition()) { object in
            guard let stored = unwrap(object[keyPath: keyPath]) else { return false }
            let value = fold(stored)
            switch match {
            case .equals: return value == needle
            case .contains: return PredicateSemantics.contains(value, needle)
            case .beginsWith: return PredicateSemantics.startsWith(value, needle)
            case .endsWith: return PredicateSemantics.startsWith(value.reversed(), needle.reversed())
            }
        }
    }
}

extension Snapshot {
    /// The objects of `source` whose reference field points at the object with key `target`: the
    /// reverse of a `Ref`. Index the field to make this a lookup instead of a scan.
    ///
    /// ```swift
    /// let messages = try db.snapshot().backlinks(Message.self, via: \.author, to: "u1")
    /// ```
    public func backlinks<Source: Model, Target: Model>(
        _ source: Source.Type, via keyPath: KeyPath<Source, Ref<Target>> & Sendable,
        to target: Target.ID
    ) -> Results<Source> {
        objects(source).filter(keyPath, equals: Ref<Target>(target))
    }

    /// Backlinks through an optional reference field.
    ///
    /// ```swift
    /// let reports = try db.snapshot().backlinks(Person.self, via: \.manager, to: "u1")   // manager: Ref<Person>?
    /// ```
    public func backlinks<Source: Model, Target: Model>(
        _ source: Source.Type, via keyPath: KeyPath<Source, Ref<Target>?> & Sendable,
        to target: Target.ID
    ) -> Results<Source> {
        objects(source).filter(keyPath, equals: Optional(Ref<Target>(target)))
    }

    /// Backlinks through an array of references.
    ///
    /// ```swift
    /// let rooms = try db.snapshot().backlinks(Room.self, via: \.members, to: "u1")   // members: [Ref<Person>]
    /// ```
    public func backlinks<Source: Model, Target: Model>(
        _ source: Source.Type, via keyPath: KeyPath<Source, [Ref<Target>]> & Sendable,
        to target: Target.ID
    ) -> Results<Source> {
        objects(source).filter(keyPath, contains: Ref<Target>(target))
    }
}
