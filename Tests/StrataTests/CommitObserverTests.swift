import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Strata

// `observeCommits` found wrong by a review of the live layer (2026-12-07).

/// A model whose name holds a colon, with an index, beside a model named as the name's first part.
struct COChatMessage: Model {
    static let modelName = "chat:Message"
    static let indexes: [PartialKeyPath<COChatMessage> & Sendable] = [\.text]
    var id: Int
    var text: String
}

struct COChat: Model {
    static let modelName = "chat"
    var id: Int
}

/// An indexed field whose coding key holds a colon.
struct COColonKey: Model {
    static let indexes: [PartialKeyPath<COColonKey> & Sendable] = [\.text]
    var id: Int
    var text: String
    enum CodingKeys: String, CodingKey {
        case id
        case text = "a:b"
    }
}

@Suite struct CommitObserverTests {
    /// "Closing the database ends every observation of that handle": a commit observer whose
    /// token the app still holds kept its commit listener (and the commit watcher thread that
    /// listens for other processes' commits, with its reader slot) until the token went.
    @Test func closeEndsACommitObservation() async throws {
        let path = databasePath()
        defer { for suffix in ["", "-lock", "-log"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let db = try Database(path: path, models: [CLNote.self])
        let token = db.observeCommits(on: DispatchQueue(label: "co.close")) { _ in }
        #expect(db.store.commitListenerCount == 1)
        db.close()
        #expect(db.store.commitListenerCount == 0)
        token.invalidate()  // after the close: nothing left to end, and no trap
        #expect(db.store.commitListenerCount == 0)
    }

    /// The models a commit names are the models it wrote, whatever their names hold: an index
    /// tree `i:chat:Message:text` was read as model "chat".
    @Test func aCommitNamesItsModelsWhateverTheirNamesHold() throws {
        let db = try Database.inMemory(models: [COChatMessage.self, COChat.self, COColonKey.self])
        let queue = DispatchQueue(label: "co.models")
        let seen = Mutex<[Set<String>]>([])
        let token = db.observeCommits(on: queue) { change in seen.withLock { $0.append(change.models) } }
        defer { token.invalidate() }
        try db.write { tx in try tx.insert(COChatMessage(id: 1, text: "hello")) }
        try db.write { tx in try tx.insert(COColonKey(id: 1, text: "x")) }
        try db.write { tx in try tx.insert(COChat(id: 1)) }
        try db.write { tx in _ = try tx.delete(COChatMessage.self, key: 1) }
        queue.sync {}
        #expect(seen.withLock { $0 } == [["chat:Message"], ["COColonKey"], ["chat"], ["chat:Message"]])
    }
}

/// The model "chat" indexing a coding key "Message:text": its index tree is the one of
/// `COChatMessage`'s index on "text".
struct COChatWithColonKey: Model {
    static let modelName = "chat"
    static let indexes: [PartialKeyPath<COChatWithColonKey> & Sendable] = [\.text]
    var id: Int
    var text: String
    enum CodingKeys: String, CodingKey {
        case id
        case text = "Message:text"
    }
}

extension CommitObserverTests {
    /// Two models whose index trees had one name wrote into one tree (each model's entries the
    /// other's damage to `strata check`, a `deleteAll` of one wiping the other's index): such
    /// models are refused at open, naming the tree.
    @Test func modelsWhoseTreesWouldShareANameAreRefused() throws {
        #expect {
            _ = try Database.inMemory(models: [COChatMessage.self, COChatWithColonKey.self])
        } throws: { error in
            guard case StrataError.unsupportedType(_, _, let reason) = error else { return false }
            return reason.contains("i:chat:Message:text")
        }
        // Also when the other model is stored in the file by another open, not named by this one.
        let path = databasePath()
        defer { for suffix in ["", "-lock", "-log"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        do {
            let db = try Database(path: path, models: [COChatMessage.self])
            try db.write { tx in try tx.insert(COChatMessage(id: 1, text: "hello")) }
            db.close()
        }
        #expect {
            _ = try Database(path: path, models: [COChatWithColonKey.self])
        } throws: { error in
            guard case StrataError.unsupportedType(_, _, let reason) = error else { return false }
            return reason.contains("i:chat:Message:text")
        }
        // Apart, each opens and is whole.
        for models in [[COChatMessage.self], [COChatWithColonKey.self]] as [[any Model.Type]] {
            let db = try Database.inMemory(models: models)
            #expect(try StoredObjects.check(in: db.store).problems.isEmpty)
        }
    }
}

extension CommitObserverTests {
    /// A commit of a model this handle does not know (another handle's): its index tree is named
    /// by the model the commit also wrote, not cut at the first colon.
    @Test func anotherHandlesModelIsNamedWhole() throws {
        let path = databasePath()
        defer { for suffix in ["", "-lock", "-log"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let knowing = try Database(path: path, models: [COChatMessage.self, COChat.self])
        let other = try Database(path: path, models: [COChat.self])
        let queue = DispatchQueue(label: "co.other")
        let seen = Mutex<[Set<String>]>([])
        let token = other.observeCommits(on: queue) { change in seen.withLock { $0.append(change.models) } }
        try knowing.write { tx in try tx.insert(COChatMessage(id: 1, text: "hello")) }
        queue.sync {}
        #expect(seen.withLock { $0 } == [["chat:Message"]])
        token.invalidate()
        other.close()
        knowing.close()
    }
}
