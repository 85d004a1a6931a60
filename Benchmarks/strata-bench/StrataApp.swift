import Foundation
import Strata

/// A chat message: its room's newest page walks the compound index (room, created); searches use
/// the full-text index on its text.
struct AppMessage: Model {
    static let indexDescriptors: [IndexDescriptor<AppMessage>] = [.on(\.room, \.created), .fullText(\.text)]
    var id: Int64
    var room: Int64
    var author: Int64
    var created: Date
    var text: String
}

/// A contact: sorted pages walk the index on its name in case-insensitive order.
struct AppContact: Model {
    static let indexDescriptors: [IndexDescriptor<AppContact>] = [.on(\.name, collation: .caseInsensitive)]
    var id: Int64
    var name: String
    var phone: String
}

/// Strata through its public API: `#Predicate` with a sort and a prefix, `search(_:_:)`,
/// `sorted(by:collation:)`, `fetchCount()`. Default options (4 KiB pages, `.full` durability).
final class StrataApp: AppEngine {
    let db: Database
    let path: String

    init(path: String, options: StoreOptions = StoreOptions()) throws {
        removeFile(path)
        removeFile(path + "-lock")
        removeFile(path + "-log")
        self.path = path
        db = try Database(path: path, models: [AppMessage.self, AppContact.self], options: options)
    }

    var dataFiles: [String] { strataDataFiles(path) }
    var canSearch: Bool { true }

    func info() -> [(String, String)] {
        let snapshot = try? db.snapshot()
        func plan<M: Model>(_ results: Results<M>?) -> String { results?.explain().replacingOccurrences(of: "\n", with: "; ") ?? "-" }
        let room = Int64(0)
        return [
            ("page size", "\(db.store.pageSize)"),
            (
                "room page plan",
                plan(
                    snapshot?.objects(AppMessage.self).filter(#Predicate { $0.room == room })
                        .sorted(by: SortDescriptor(\.created, order: .reverse)).prefix(50))
            ),
            ("search plan", plan(snapshot?.objects(AppMessage.self).search(\.text, "the").prefix(50))),
            ("count plan (decodes nothing)", plan(snapshot?.objects(AppMessage.self).search(\.text, "the"))),
            ("contacts plan", plan(snapshot?.objects(AppContact.self).sorted(by: SortDescriptor(\.name), collation: .caseInsensitive).offset(50).prefix(50))),
        ]
    }

    func insertMessages(_ range: Range<Int>, _ data: AppData) throws {
        try db.write { tx in
            for i in range {
                let m = data.message(i)
                try tx.insert(AppMessage(id: m.id, room: m.room, author: m.author, created: Date(timeIntervalSinceReferenceDate: m.created), text: m.text))
            }
        }
    }

    func insertContacts(_ range: Range<Int>, _ data: AppData) throws {
        try db.write { tx in
            for i in range {
                let c = data.contact(i)
                try tx.insert(AppContact(id: c.id, name: c.name, phone: c.phone))
            }
        }
    }

    func read<R>(_ body: (any AppReader) throws -> R) throws -> R {
        try db.read { snapshot in try body(Reader(snapshot: snapshot)) }
    }

    struct Reader: AppReader {
        let snapshot: Snapshot

        private func visit<M: Model>(_ results: Results<M>, _ body: (M) -> Void) throws -> Int {
            var n = 0
            for object in results {
                body(object)
                n += 1
            }
            if let error = results.error { throw error }
            return n
        }

        private static func value(_ m: AppMessage) -> AppMessageValue {
            AppMessageValue(id: m.id, room: m.room, author: m.author, created: m.created.timeIntervalSinceReferenceDate, text: m.text)
        }

        func roomPage(room: Int64, limit: Int, _ body: (AppMessageValue) -> Void) throws -> Int {
            let page = snapshot.objects(AppMessage.self)
                .filter(#Predicate { $0.room == room })
                .sorted(by: SortDescriptor(\.created, order: .reverse))
                .prefix(limit)
            return try visit(page) { body(Self.value($0)) }
        }

        func search(_ words: [String], limit: Int, _ body: (AppMessageValue) -> Void) throws -> Int {
            try visit(snapshot.objects(AppMessage.self).search(\.text, TextSearch(words.joined(separator: " "))).prefix(limit)) { body(Self.value($0)) }
        }

        func count(word: String) throws -> Int {
            try snapshot.objects(AppMessage.self).search(\.text, TextSearch(word)).fetchCount()
        }

        func contacts(offset: Int, limit: Int, _ body: (AppContactValue) -> Void) throws -> Int {
            let page = snapshot.objects(AppContact.self).sorted(by: SortDescriptor(\.name), collation: .caseInsensitive).offset(offset).prefix(limit)
            return try visit(page) { body(AppContactValue(id: $0.id, name: $0.name, phone: $0.phone)) }
        }
    }
}
