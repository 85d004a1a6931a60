import Foundation
import Testing

import Strata

/// Options outside what the engine accepts are a typed error when the store opens, never a trap
/// later: a NaN or huge `freeFraction` used to trap converting to Int at the first commit that
/// checked for compaction, a huge `pagesPerCommit` overflowed `16 * pagesPerCommit`, and a huge or
/// negative `readerSlots` overflowed the lock file's size on opening.
struct StoreOptionsValidationTests {
    struct Event: Model {
        var id: Int?
        var payload: [UInt8]
    }

    static func options(_ change: (inout StoreOptions) -> Void) -> StoreOptions {
        var options = StoreOptions(durability: .noSync)
        change(&options)
        return options
    }

    static let invalid: [(String, StoreOptions)] = [
        ("compaction.freeFraction", options { $0.compaction = Compaction(freeFraction: .nan) }),
        ("compaction.freeFraction", options { $0.compaction = Compaction(freeFraction: .infinity) }),
        ("compaction.freeFraction", options { $0.compaction = Compaction(freeFraction: 1e300) }),
        ("compaction.freeFraction", options { $0.compaction = Compaction(freeFraction: -1) }),
        ("compaction.pagesPerCommit", options { $0.compaction = Compaction(pagesPerCommit: Int.max / 4) }),
        ("compaction.pagesPerCommit", options { $0.compaction = Compaction(pagesPerCommit: 0) }),
        ("readerSlots", options { $0.readerSlots = Int.max / 2 }),
        ("readerSlots", options { $0.readerSlots = -1 }),
        ("readerSlots", options { $0.readerSlots = 0 }),
        ("pageSize", options { $0.pageSize = 1000 }),
        ("pageSize", options { $0.pageSize = -4096 }),
    ]

    @Test func invalidOptionsAreNamedWhenAFileStoreOpens() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("options-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        for (index, (name, options)) in Self.invalid.enumerated() {
            let path = dir.appendingPathComponent("\(index).strata").path
            let error = #expect(throws: StorageError.self) { try Store(path: path, options: options) }
            guard case .invalidOption(let named, _)? = error else {
                Issue.record("\(name): \(String(describing: error))")
                continue
            }
            #expect(named == name)
            #expect(!FileManager.default.fileExists(atPath: path), "\(name): nothing is created")
            #expect(throws: StrataError.storage(error!)) { try Database(path: path, models: [Event.self], options: options) }
        }
    }

    @Test func invalidOptionsAreNamedWhenAnInMemoryStoreOpens() {
        for (name, options) in Self.invalid {
            let error = #expect(throws: StorageError.self) { try Store.inMemory(options: options) }
            guard case .invalidOption(let named, _)? = error else {
                Issue.record("\(name): \(String(describing: error))")
                continue
            }
            #expect(named == name)
        }
    }

    /// The bounds themselves are accepted, and a store with them commits, compacts and trims.
    @Test func boundaryOptionsWork() throws {
        let settings = [
            Self.options { $0.compaction = Compaction(freeFraction: 0, pagesPerCommit: 1) },
            Self.options { $0.compaction = Compaction(freeFraction: 1, pagesPerCommit: Int.max / 16) },
            Self.options { $0.readerSlots = 1 },
        ]
        for options in settings {
            let db = try Database(store: try Store.inMemory(options: options), models: [Event.self])
            try db.write { tx in
                for _ in 0..<500 { try tx.insert(Event(id: nil, payload: Array(repeating: 1, count: 200))) }
            }
            try db.write { tx in _ = try tx.deleteAll(Event.self) }
            for _ in 0..<20 { try db.write { tx in _ = try tx.insert(Event(id: nil, payload: [1])) } }
            #expect(db.objects(Event.self).count == 20)
        }
    }
}
