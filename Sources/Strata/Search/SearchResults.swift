import Foundation

/// Full-text search as a query condition: it combines with `#Predicate` filters (all must hold),
/// sorts, windows, counts, aggregates and observers, like any filter. With a full-text index on the
/// field (`IndexDescriptor.fullText`) the index answers it; without one every object's text is
/// read (the same answer, slower).
///
/// ```swift
/// let page = db.objects(Message.self)
///     .search(\.text, "hel* world")                       // words starting with "hel", and "world"
///     .filter(#Predicate { $0.roomId == 7 })
///     .prefix(50)
/// let best = db.objects(Message.self).search(\.text, "coffee beans", ranked: true).prefix(10)
/// let n = db.objects(Message.self).search(\.text, "the").count     // adds up the word's block counts
/// ```
extension Results {
    /// Objects whose text field matches `search` (see `TextSearch`). With `ranked`, the results
    /// are ordered by relevance first (BM25, most relevant first), then by any sort descriptors,
    /// then by primary key; of two ranked searches the later ranks (both filter).
    ///
    /// ```swift
    /// let best = db.objects(Message.self).search(\.text, "coffee beans", ranked: true).prefix(10)
    /// ```
    public func search(_ keyPath: KeyPath<M, String> & Sendable, _ search: TextSearch, ranked: Bool = false) -> Results<M> {
        searching(keyPath, search, ranked: ranked) { $0 }
    }

    /// Objects whose optional text field is present and matches `search`.
    ///
    /// ```swift
    /// let notes = db.objects(Task.self).search(\.notes, "invoice")   // notes: String?
    /// ```
    public func search(_ keyPath: KeyPath<M, String?> & Sendable, _ search: TextSearch, ranked: Bool = false) -> Results<M> {
        searching(keyPath, search, ranked: ranked) { $0 }
    }

    private func searching<S>(
        _ keyPath: KeyPath<M, S> & Sendable, _ search: TextSearch, ranked: Bool,
        _ text: @escaping @Sendable (S) -> String?
    ) -> Results<M> {
        if snapshot == nil && database == nil { return self }
        let parsed = ParsedSearch(search)
        let path = fieldPath(of: keyPath as PartialKeyPath<M>)
        var q = query
        q.filters.append(
            .test(
                FieldTest(condition: path.map { .textSearch(path: $0, search: parsed) } ?? .opaque) { object in
                    parsed.matches(text: text(object[keyPath: keyPath]))
                }))
        if ranked {
            guard let path else {
                return Results(failed: .invalidQuery("ranking a search needs a stored field; \(keyPath) is not one"))
            }
            q.ranking = TextRanking(path: path, search: parsed)
        }
        return rebuilt(q)
    }
}
