import Foundation
import Testing

@testable import Strata

/// A stop (`withProgress`'s handler returning false, a cancelled task) ends a loop over results
/// early without an error, by design: a write whose body ran such a loop wrote part of what it
/// meant to, and must not commit it, as `withProgress` documents ("a write transaction it ran in
/// rolls back"). It committed, and `withProgress` threw `CancellationError` after it.
@Suite struct StoppedWriteTests {
    struct Note: Model, Equatable {
        var id: Int
        var text: String
    }

    struct Archived: Model, Equatable {
        var id: Int
        var text: String
    }

    static func filled() throws -> Database {
        let db = try Database.inMemory(models: [Note.self, Archived.self])
        try db.write { tx in for i in 0..<3_000 { try tx.insert(Note(id: i, text: "note \(i)")) } }
        return db
    }

    @Test func aWriteWhoseLoopWasStoppedCommitsNothing() throws {
        let db = try Self.filled()
        var moved = 0
        #expect(throws: CancellationError.self) {
            try withProgress({ _ in false }) {  // stops at the first report (1,000 objects)
                try db.write { tx in
                    for note in db.objects(Note.self) {
                        try tx.insert(Archived(id: note.id, text: note.text))
                        try tx.delete(Note.self, key: note.id)
                        moved += 1
                    }
                }
            }
        }
        #expect(moved > 0 && moved < 3_000, "the loop ended early (\(moved))")
        #expect(try db.objects(Note.self).fetchCount() == 3_000)
        #expect(try db.objects(Archived.self).fetchCount() == 0)
    }

    /// A count that reads 0 once stopped, in a write joined as a savepoint and in a savepoint.
    @Test func aStoppedSavepointOrJoinedWriteIsUndone() throws {
        let db = try Self.filled()
        try db.write { tx in
            try tx.insert(Archived(id: -1, text: "kept"))
            #expect(throws: CancellationError.self) {
                try withProgress({ _ in false }) {
                    try db.write { inner in
                        try inner.insert(Archived(id: -2, text: "joined"))
                        for _ in db.objects(Note.self) {}
                    }
                }
            }
            #expect(throws: CancellationError.self) {
                try withProgress({ _ in false }) {
                    try tx.savepoint {
                        try tx.insert(Archived(id: -3, text: "savepoint"))
                        _ = db.objects(Note.self).filter(#Predicate { $0.text.contains("9") }).count
                    }
                }
            }
        }
        #expect(try db.objects(Archived.self).fetch().map(\.id) == [-1])
    }
}
