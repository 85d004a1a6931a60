/// A Swift struct stored as an object. `id` is the primary key; the schema comes from the type's
/// `Codable` conformance, with no translator and no generated code.
///
/// ```swift
/// struct Person: Model {
///     static let indexes: [PartialKeyPath<Person> & Sendable] = [\.name]
///     var id: String
///     var name: String
///     var age: Int
/// }
/// ```
///
/// A model whose `id` is an optional integer (`var id: Int?`) gets the next auto-increment key
/// when inserted with `nil`.
public protocol Model: Codable, Sendable, Identifiable where ID: Codable & Sendable {
    /// The name the model is stored under. Defaults to the type's name.
    static var modelName: String { get }
    /// Fields with a secondary index, as key paths.
    static var indexes: [PartialKeyPath<Self> & Sendable] { get }
    /// Fields with a unique secondary index: no two objects may share a value. A field listed here
    /// and in `indexes` has one index, the unique one. Nil is a value too: at most one object
    /// may have nil in a uniquely indexed optional field (SQL allows many `NULL`s).
    static var uniqueIndexes: [PartialKeyPath<Self> & Sendable] { get }
    /// Compound, collated and full-text indexes (see `IndexDescriptor`).
    static var indexDescriptors: [IndexDescriptor<Self>] { get }
}

extension Model {
    /// The type's name: declare `modelName` to keep the stored name when renaming the type.
    ///
    /// ```swift
    /// struct Contact: Model { static let modelName = "Person"; var id: String }   // was Person
    /// ```
    public static var modelName: String { String(describing: Self.self) }
    /// None: declare the fields that queries filter or sort on.
    ///
    /// ```swift
    /// static let indexes: [PartialKeyPath<Person> & Sendable] = [\.name]
    /// ```
    public static var indexes: [PartialKeyPath<Self> & Sendable] { [] }
    /// None: declare the fields no two objects may share.
    ///
    /// ```swift
    /// static let uniqueIndexes: [PartialKeyPath<User> & Sendable] = [\.email]
    /// ```
    public static var uniqueIndexes: [PartialKeyPath<Self> & Sendable] { [] }
    /// None: declare compound, collated and full-text indexes.
    ///
    /// ```swift
    /// static let indexDescriptors: [IndexDescriptor<Message>] = [.on(\.roomId, \.createdAt), .fullText(\.text)]
    /// ```
    public static var indexDescriptors: [IndexDescriptor<Self>] { [] }
}

/// A reference to another object by its primary key.
///
/// ```swift
/// struct Message: Model {
///     var id: Int?
///     var author: Ref<Person>
/// }
/// let author = try db.object(Person.self, key: message.author.id)
/// ```
public struct Ref<Target: Model>: Codable, Sendable, Hashable where Target.ID: Hashable {
    /// The referenced object's primary key.
    public var id: Target.ID

    /// A reference to the object with primary key `id`, whether or not it exists yet.
    ///
    /// ```swift
    /// let author = Ref<Person>("u1")
    /// ```
    public init(_ id: Target.ID) { self.id = id }
    /// A reference to `object`, by its primary key.
    ///
    /// ```swift
    /// let message = Message(id: nil, author: Ref(ana))
    /// ```
    public init(_ object: Target) { self.id = object.id }

    public init(from decoder: any Decoder) throws {
        id = try decoder.singleValueContainer().decode(Target.ID.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(id)
    }
}

/// Lets the schema probe and the record coders recognise `Ref` without knowing its target.
protocol ReferenceType {
    static var targetModelName: String { get }
    static var keyType: any (Codable & Sendable).Type { get }
}

extension Ref: ReferenceType {
    static var targetModelName: String { Target.modelName }
    static var keyType: any (Codable & Sendable).Type { Target.ID.self }
}
