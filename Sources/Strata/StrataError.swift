/// Every error the object layer throws. Each case names what was wrong and where.
///
/// ```swift
/// do { try db.write { try $0.insert(person) } }
/// catch StrataError.duplicateKey(let model, let key) { print("\(model) \(key) exists") }
/// ```
public enum StrataError: Error, Equatable, Sendable, CustomStringConvertible {
    /// An insert found an object with the same primary key.
    case duplicateKey(model: String, key: String)
    /// A write would give two objects the same value of a unique index.
    case uniqueViolation(model: String, field: String, value: String)
    /// No object has this primary key.
    case notFound(model: String, key: String)
    /// The stored schema differs from the types in ways that need a migration; one line per difference.
    case migrationRequired([String])
    /// A model's type cannot be stored: which model, which field, and why.
    case unsupportedType(model: String, field: String, reason: String)
    /// A stored record, index entry or schema catalog entry could not be decoded, or holds what
    /// Strata never writes (a field id out of range, say): the file is damaged.
    case corruptRecord(String)
    /// The database was closed.
    case databaseClosed
    /// A write was attempted through a read-only snapshot.
    case writeInReadTransaction
    /// A value could not be encoded or decoded as the schema says: which model and field, and why.
    case typeMismatch(model: String, field: String, reason: String)
    /// A query that cannot run: why.
    case invalidQuery(String)
    /// Input from outside (JSON, a change message) is malformed: what and where.
    case invalidInput(String)
    /// Fields that the model does not have were given (and the options say to reject them).
    case unknownFields(model: String, fields: [String])
    /// An object cannot be created from the fields given: these required fields are missing.
    case incompleteObject(model: String, key: String, missing: [String])
    /// An update cannot apply: it creates a nested struct (one that was nil) without these of
    /// its required fields (dotted paths).
    case incompleteUpdate(model: String, key: String, missing: [String])
    /// The storage engine failed.
    case storage(StorageError)

    public var description: String {
        switch self {
        case let .duplicateKey(model, key): return "duplicate key: a \(model) with key \(key) already exists"
        case let .uniqueViolation(model, field, value): return "unique index violation: another \(model) has \(field) = \(value)"
        case let .notFound(model, key): return "not found: no \(model) with key \(key)"
        case let .migrationRequired(differences):
            return "migration required:\n" + differences.map { "  - \($0)" }.joined(separator: "\n")
        case let .unsupportedType(model, field, reason): return "unsupported type in \(model).\(field): \(reason)"
        case let .corruptRecord(reason): return "corrupt record: \(reason)"
        case .databaseClosed: return "the database is closed"
        case .writeInReadTransaction: return "a write was attempted in a read transaction"
        case let .typeMismatch(model, field, reason): return "type mismatch in \(model).\(field): \(reason)"
        case let .invalidQuery(reason): return "invalid query: \(reason)"
        case let .invalidInput(reason): return "invalid input: \(reason)"
        case let .unknownFields(model, fields): return "unknown fields for \(model): \(fields.joined(separator: ", "))"
        case let .incompleteObject(model, key, missing):
            return "cannot create \(model) \(key): missing required fields \(missing.joined(separator: ", "))"
        case let .incompleteUpdate(model, key, missing):
            return "cannot update \(model) \(key): the new nested value lacks required fields \(missing.joined(separator: ", "))"
        case let .storage(error): return error.description
        }
    }
}
