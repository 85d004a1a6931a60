import Testing
import Foundation
@testable import Strata

struct DumpToolTests {
    @Test func schemaAndDumpReadObjectsWithoutTypes() throws {
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [User.self, Note.self])
            try db.write { tx in
                try tx.insert(User(id: "u1", email: "ana@x", age: 30, status: .online, nickname: "Ana \"A\""))
                try tx.insert(Note(id: nil, text: "hello\nworld", author: Ref("u1")))
            }
        }
        let store = try Store(path: path)
        let schemas = try StoredObjects.schemas(in: store)
        #expect(schemas.map(\.name) == ["Note", "User"])
        var dumped: [String: [String: StoredValue]] = [:]
        try StoredObjects.forEach(in: store, model: "User") { key, fields in
            dumped[key.stringValue ?? "?"] = fields; return true
        }
        #expect(dumped["u1"]?["email"] == .string("ana@x"))
        #expect(dumped["u1"]?["status"] == .string("online"))
        #expect(dumped["u1"]?["age"] == .int(30))

        guard let tool = toolPath() else {
            Issue.record("the strata executable was not found next to the test bundle")
            return
        }
        let schema = try run(tool, ["schema", path])
        #expect(schema.status == 0, "\(schema.output)")
        #expect(schema.output.contains("model User"), "\(schema.output)")
        #expect(schema.output.contains("index email (unique)"), "\(schema.output)")
        let dump = try run(tool, ["dump", path, "--model", "Note", "--json"])
        #expect(dump.status == 0)
        let line = try #require(dump.output.split(separator: "\n").first)
        let json = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        let object = json?["object"] as? [String: Any]
        #expect(object?["text"] as? String == "hello\nworld")
        #expect(object?["author"] as? String == "u1")
        #expect(json?["key"] as? Int == 1)
        #expect(try run(tool, ["dump", path, "--model", "Nope"]).status == 1)
        // A misplaced option is a usage error, not a missing file (exit 2).
        for arguments in [["info", "-x"], ["dump", "--json"], ["check", "--verbose"], ["compact", "-o", path]] {
            let misplaced = try run(tool, arguments)
            #expect(misplaced.status == 1, "\(arguments): \(misplaced.output)")
            #expect(misplaced.output.contains("unknown option"), "\(arguments): \(misplaced.output)")
        }
    }

    /// A stored schema the object layer refuses (a field id out of range, a name that is not its
    /// catalog key) is a corrupt file to the tool: exit 4 from `schema` and `dump`, a problem
    /// (exit 5) from `check`.
    @Test func aDamagedStoredSchemaIsReportedAsCorrupt() throws {
        guard let tool = toolPath() else {
            Issue.record("the strata executable was not found next to the test bundle")
            return
        }
        let edits: [(String, (inout StoredModelSchema) -> Void)] = [
            ("id -1", { $0.object.fields[1].id = -1 }),
            ("id Int.max", { $0.object.fields[1].id = Int.max }),
            ("renamed", { $0.name = "Other" }),
        ]
        for (what, edit) in edits {
            let path = databasePath()
            do {
                let db = try Database(path: path, models: [User.self])
                try db.write { tx in try tx.insert(User(id: "u1", email: "ana@x", age: 30, status: .online, nickname: nil)) }
                try db.store.write { txn in
                    let schemas = try #require(try txn.tree(Catalog.schemaTree))
                    let bytes = try #require(try schemas.get(Array("User".utf8)))
                    var stored = try bytes.withUnsafeBytes { try Catalog.decode($0) }
                    edit(&stored)
                    try schemas.put(Array("User".utf8), try Catalog.encode(stored))
                }
            }
            let schema = try run(tool, ["schema", path])
            #expect(schema.status == 4, "\(what): \(schema.output)")
            let dump = try run(tool, ["dump", path])
            #expect(dump.status == 4, "\(what): \(dump.output)")
            #expect(dump.output.contains("corrupt"), "\(what): \(dump.output)")
            let check = try run(tool, ["check", path])
            #expect(check.status == 5, "\(what): \(check.output)")
            #expect(check.output.contains("schema catalog"), "\(what): \(check.output)")
        }
    }

    private func toolPath() -> String? {
        var directories: [URL] = []
        if let first = CommandLine.arguments.first {
            directories.append(URL(fileURLWithPath: first).deletingLastPathComponent())
        }
        directories.append(Bundle.main.bundleURL.deletingLastPathComponent())
        directories.append(Bundle.main.bundleURL)
        return directories.map { $0.appendingPathComponent("strata").path }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    private func run(_ tool: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}

extension DumpToolTests {
    /// Output that cannot be written (standard output on a full disk) is an I/O error, exit 6, for
    /// every command, as a failed write of `dump`'s own was already: `schema` and `info` said 0.
    @Test(.enabled(if: FileManager.default.isWritableFile(atPath: "/dev/full"), "needs /dev/full"))
    func outputThatCannotBeWrittenIsAnIOError() throws {
        let tool = try #require(toolExecutable())
        let path = databasePath()
        defer { try? FileManager.default.removeItem(atPath: path) }
        do {
            let db = try Database(path: path, models: [CKSmall.self])
            try db.write { tx in try tx.insert(CKSmall(id: 1, small: 1)) }
            db.close()
        }
        for command in ["schema", "info", "check", "trees", "dump"] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: tool)
            process.arguments = [command, path]
            process.standardOutput = FileHandle(forWritingAtPath: "/dev/full")
            let errors = Pipe()
            process.standardError = errors
            try process.run()
            let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 6, "\(command): \(message)")
        }
    }
}
