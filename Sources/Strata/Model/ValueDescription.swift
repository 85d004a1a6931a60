import Foundation

// User values in error messages and query explanations. They come from callers, predicates and
// stored records, so describing them must never trap: Foundation's `Date.description` traps on a
// NaN date (a legal `Date`, and a legal predicate constant or key), while it prints
// "<description unavailable>" for other dates it cannot format.

/// A value for a message: optionals without "Optional(…)", dates that cannot be shown by their
/// interval since the reference date, anything else as Swift prints it.
func describeValue(_ value: Any) -> String {
    if let optional = value as? any OptionalValue {
        guard let wrapped = optional.wrappedAny else { return "nil" }
        return describeValue(wrapped)
    }
    if let date = value as? Date, !date.timeIntervalSinceReferenceDate.isFinite {
        return "Date(timeIntervalSinceReferenceDate: \(date.timeIntervalSinceReferenceDate))"
    }
    return "\(value)"
}
