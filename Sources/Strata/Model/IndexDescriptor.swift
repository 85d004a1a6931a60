/// An index beyond the single fields of `indexes` and `uniqueIndexes`: over several fields (a
/// compound index), in a string collation, or over the words of a text field (a full-text index).
/// A model lists them in `indexDescriptors`; like every index they are kept up to date by every
/// write, built when first declared and dropped when no longer declared.
///
/// ```swift
/// struct Message: Model {
///     static let indexDescriptors: [IndexDescriptor<Message>] = [
///         .on(\.roomId, \.createdAt),      // a room's messages by time: the newest 50 in O(50)
///         .fullText(\.text),               // search(\.text, "hello wor*")
///     ]
///     var id: Int
///     var roomId: Int
///     var createdAt: Date
///     var text: String
/// }
///
/// struct Contact: Model {
///     static let indexDescriptors: [IndexDescriptor<Contact>] = [
///         .on(\.name, collation: .caseInsensitive),           // sorted pages walk it
///         .unique(\.country, \.phone),                        // no two contacts share both
///     ]
///     var id: Int
///     var name: String
///     var country: String
///     var phone: String
/// }
/// ```
///
/// A compound index orders by its first field, then its second, and so on, then by primary key.
/// The planner uses it for equality on a leading run of its fields (`roomId == r`) plus a range
/// and/or a sort on the next ones (`createdAt > t`, sorted by `createdAt` either way). Its fields
/// must be stored values that are not arrays or dictionaries.
public struct IndexDescriptor<M: Model>: Sendable {
    enum Kind: Sendable, Equatable {
        case values(unique: Bool, collation: StringCollation?)
        case fullText
    }

    let keyPaths: [PartialKeyPath<M> & Sendable]
    let kind: Kind

    /// An index on one or more fields, in order. With a collation, its `String` fields are
    /// ordered by it (and a sort with the same collation walks the index).
    ///
    /// ```swift
    /// static let indexDescriptors: [IndexDescriptor<Message>] = [.on(\.roomId, \.createdAt)]
    /// ```
    public static func on(
        _ field: PartialKeyPath<M> & Sendable, _ more: PartialKeyPath<M> & Sendable...,
        collation: StringCollation? = nil
    ) -> IndexDescriptor {
        IndexDescriptor(keyPaths: [field] + more, kind: .values(unique: false, collation: collation))
    }

    /// A unique index on one or more fields: no two objects may have the same values in all of
    /// them (compared in the collation, when one is given). Nil counts as a value, equal to nil:
    /// unlike SQL's `NULL`s, two objects with nil in the same fields violate the index.
    ///
    /// ```swift
    /// static let indexDescriptors: [IndexDescriptor<Contact>] = [.unique(\.email, collation: .caseInsensitive)]
    /// ```
    public static func unique(
        _ field: PartialKeyPath<M> & Sendable, _ more: PartialKeyPath<M> & Sendable...,
        collation: StringCollation? = nil
    ) -> IndexDescriptor {
        IndexDescriptor(keyPaths: [field] + more, kind: .values(unique: true, collation: collation))
    }

    /// A full-text index on the words of a string field, for `search(_:_:)`: the text folded for
    /// case, diacritics and width, then split into runs of letters, marks, digits and `_` (an
    /// apostrophe, a full stop or a digit-group comma inside a run joins it; each ideograph and
    /// Hiragana character is a word of its own; emoji and other symbols are no words), a fixed,
    /// simplified form of Unicode's word boundaries (FORMAT.md §8.5). A script written without
    /// spaces, such as Thai or Katakana, gives one word per run: find its parts with a prefix.
    ///
    /// ```swift
    /// static let indexDescriptors: [IndexDescriptor<Message>] = [.fullText(\.text)]
    /// ```
    public static func fullText(_ field: KeyPath<M, String> & Sendable) -> IndexDescriptor {
        IndexDescriptor(keyPaths: [field], kind: .fullText)
    }

    /// A full-text index on an optional string field (nil has no words).
    ///
    /// ```swift
    /// static let indexDescriptors: [IndexDescriptor<Note>] = [.fullText(\.title)]   // title: String?
    /// ```
    public static func fullText(_ field: KeyPath<M, String?> & Sendable) -> IndexDescriptor {
        IndexDescriptor(keyPaths: [field], kind: .fullText)
    }
}
