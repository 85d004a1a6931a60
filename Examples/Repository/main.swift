// A repository over Strata: sorted lists loaded on a background queue and handed to callers on
// another thread, as values. Nothing here copies objects out of a "live" database object or
// checks which thread it is on: models and results are `Sendable` values, so they simply cross.
//
//   swift run RepositoryExample

import Foundation
import Dispatch
import Strata

enum Presence: String, Codable, Sendable, CaseIterable {
    case online, away, offline
}

struct Contact: Model, Equatable {
    static let indexes: [PartialKeyPath<Contact> & Sendable] = [\.presence]
    var id: String
    var name: String
    var presence: Presence
}

/// The app's access to contacts. Callers never see a transaction or a snapshot.
final class ContactRepository: Sendable {
    private let db: Database
    private let loading = DispatchQueue(label: "contacts.loading", attributes: .concurrent)

    init(db: Database) { self.db = db }

    /// The contacts with `presence`, by name: one read on its own snapshot.
    private func query(_ presence: Presence) -> DBRead<[Contact]> {
        DBRead.objects(Contact.self, where: #Predicate { $0.presence == presence }, sortedBy: [SortDescriptor(\.name)])
    }

    /// Loads on the repository's queue, delivers on `queue`: for callback-style callers.
    func contacts(
        _ presence: Presence, deliverOn queue: DispatchQueue,
        _ completion: @escaping @Sendable (Result<[Contact], any Error>) -> Void
    ) {
        let io = query(presence)
        loading.async { [db] in
            let result = Result { try db.run(io) }
            queue.async { completion(result) }
        }
    }

    /// The same for Swift concurrency.
    func contacts(_ presence: Presence) async throws -> [Contact] {
        try await db.run(query(presence))
    }

    /// Changes one contact's presence; concurrent calls share commits (group commit).
    func setPresence(_ presence: Presence, of id: String) async throws {
        try await db.write { tx in _ = try tx.update(Contact.self, key: id) { $0.presence = presence } }
    }
}

let path = FileManager.default.temporaryDirectory.appendingPathComponent("repository-example-\(getpid()).strata").path
defer {
    try? FileManager.default.removeItem(atPath: path)
    try? FileManager.default.removeItem(atPath: path + "-lock")
}
let db = try Database(path: path, models: [Contact.self])
try db.write { tx in
    for (i, name) in ["Noor", "Ana", "Ivo", "Lea", "Ben", "Zoe"].enumerated() {
        try tx.upsert(Contact(id: "c\(i)", name: name, presence: i % 2 == 0 ? .online : .away))
    }
}
let contacts = ContactRepository(db: db)

// Callback style: loaded on the repository's queue, handed to a "UI" queue.
let ui = DispatchQueue(label: "ui")
let delivered = DispatchSemaphore(value: 0)
contacts.contacts(.online, deliverOn: ui) { result in
    switch result {
    case .success(let list): print("online:", list.map(\.name).joined(separator: ", "))
    case .failure(let error): print("could not load:", error)
    }
    delivered.signal()
}
delivered.wait()

// Swift concurrency (top-level code may await): three presence changes at once, which share
// one commit, then the lists again.
try await withThrowingTaskGroup(of: Void.self) { group in
    for id in ["c1", "c3", "c5"] { group.addTask { try await contacts.setPresence(.online, of: id) } }
    try await group.waitForAll()
}
print("online now:", try await contacts.contacts(.online).map(\.name).joined(separator: ", "))
print("away now:", try await contacts.contacts(.away).map(\.name).joined(separator: ", "))
