import Testing
@testable import StrataStorage
import Foundation

/// Opening what is not a database: the error names the file and says what is wrong, and the open
/// leaves nothing behind — no lock file beside a JSON file opened by mistake, nothing in a
/// directory that does not exist — while a database whose first meta page is damaged still opens.
@Suite struct ForeignFileTests {
    static func siblings(of path: String) -> [String] {
        let directory = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        return ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { $0.hasPrefix(name) }.sorted()
    }

    @Test(arguments: [8, 5_000, 70_000])
    func aForeignFileIsRefusedAndLeftAlone(size: Int) throws {
        let path = temporaryPath() + ".json"
        defer { removeStoreFiles(path) }
        var random = SplitMix(seed: UInt64(size))
        let content = Data((0..<size).map { i in i == 0 ? UInt8(ascii: "{") : UInt8(truncatingIfNeeded: random.next()) })
        try content.write(to: URL(fileURLWithPath: path))
        for readOnly in [false, true] {
            do {
                _ = try Store(path: path, options: StoreOptions(readOnly: readOnly))
                Issue.record("a file of \(size) foreign bytes opened (read-only: \(readOnly))")
            } catch StorageError.notAStrataFile(let named, _) {
                #expect(named == path)
            }
            #expect(Self.siblings(of: path) == [(path as NSString).lastPathComponent], "read-only: \(readOnly)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == content)
        }
    }

    @Test func aMissingDirectoryIsNamedAndNothingIsCreated() throws {
        let directory = temporaryPath()
        let path = directory + "/db"
        do {
            _ = try Store(path: path)
            Issue.record("opened in a missing directory")
        } catch StorageError.io(let operation, let named, let errno) {
            #expect(named == path)
            #expect(errno == ENOENT)
            #expect(operation.contains("directory"), "\(operation)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory))
        #expect(Self.siblings(of: directory).isEmpty)
    }

    /// The check before the lock file is made reads the meta pages as opening does: a database
    /// whose meta page 0 is torn opens from meta page 1.
    @Test func aDatabaseWithADamagedFirstMetaPageStillOpens() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        var options = StoreOptions(durability: .noSync)
        options.compaction = .off
        for round in 0..<3 {
            let store = try Store(path: path, options: options)
            try store.write { txn in _ = try txn.createTree("t").put([UInt8(round)], [1, 2, 3]) }
            store.close()
        }
        try patchFile(path, at: 0, [UInt8](repeating: 0, count: 64))
        let store = try Store(path: path, options: options)
        defer { store.close() }
        // (The newest commit may have been the damaged page's: the one before it has key 0.)
        let value = try store.read { try $0.tree("t")?.get([0]) }
        #expect(value == [1, 2, 3])
    }
}
