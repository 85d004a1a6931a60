import Testing
import Foundation
@testable import Strata

/// A model generic over its key type, pointing at another object of its kind.
struct Keyed<K: Codable & Sendable & Hashable>: Model {
    var id: K
    var label: String
    var next: Ref<Keyed<K>>?
}

enum Colour: String, Codable, Sendable, Hashable { case red, green, blue }

/// A primary key as the untyped paths must give it back.
func storedKey(_ value: Any) -> StoredValue? {
    switch value {
    case let v as Int: return .int(Int64(v))
    case let v as Int8: return .int(Int64(v))
    case let v as Int16: return .int(Int64(v))
    case let v as Int32: return .int(Int64(v))
    case let v as Int64: return .int(v)
    case let v as UInt: return .uint(UInt64(v))
    case let v as UInt8: return .uint(UInt64(v))
    case let v as UInt16: return .uint(UInt64(v))
    case let v as UInt32: return .uint(UInt64(v))
    case let v as UInt64: return .uint(v)
    case let v as String: return .string(v)
    case let v as UUID: return .uuid(v)
    case let v as Date: return .date(v)
    case let v as Data: return .data(v)
    case let v as Double: return .double(v)
    case let v as Bool: return .bool(v)
    case let v as Colour: return .string(v.rawValue)
    default: return nil
    }
}

struct KeyTypeTests {
    /// Writes objects with `keys`, each pointing at the next, then reads every key back through
    /// every untyped path: the stored-object reader (what `strata dump` prints), references, a
    /// migration's old objects (both forms), and error text.
    func roundTrip<K: Codable & Sendable & Hashable>(_ keys: [K], line: Int = #line) throws {
        let path = databasePath("keys\(line)")
        let name = Keyed<K>.modelName
        do {
            let db = try Database(path: path, models: [Keyed<K>.self], options: StoreOptions(durability: .noSync))
            try db.write { tx in
                for (i, key) in keys.enumerated() {
                    try tx.insert(Keyed(id: key, label: "#\(i)", next: Ref(keys[(i + 1) % keys.count])))
                }
            }
            for key in keys {
                // Error text names the key as the typed value prints.
                let error = #expect(throws: StrataError.self) { try db.write { tx in try tx.insert(Keyed(id: key, label: "dup", next: nil)) } }
                let text = String(describing: key)
                #expect(text.isEmpty || "\(error.map { "\($0)" } ?? "")".contains(text), "\(K.self) \(key)")
            }
        }
        var labelByKey: [String: StoredValue] = [:]
        var nextByLabel: [String: StoredValue] = [:]
        try StoredObjects.forEach(in: try Store(path: path), model: name) { key, fields in
            labelByKey[fields["label"]?.stringValue ?? "?"] = key
            nextByLabel[fields["label"]?.stringValue ?? "?"] = fields["next"]
            return true
        }
        for (i, key) in keys.enumerated() {
            let want = try #require(storedKey(key), "\(K.self)")
            #expect(labelByKey["#\(i)"] == want, "\(K.self): key \(key) read back as \(labelByKey["#\(i)"]?.json ?? "nothing")")
            let target = try #require(storedKey(keys[(i + 1) % keys.count]))
            #expect(nextByLabel["#\(i)"] == .reference(model: name, key: target), "\(K.self): reference to \(keys[(i + 1) % keys.count])")
            #expect(nextByLabel["#\(i)"]?.referenceKey?.json == target.json)
        }
        // A migration sees the same typed keys, and writing them back keeps every object.
        var migrated: [StoredValue] = []
        var enumerated: [StoredValue] = []
        _ = try Database(path: path, models: [Keyed<K>.self], schemaVersion: 1, options: StoreOptions(durability: .noSync)) { migration in
            migrated = try migration.objects(name).map(\.key)
            try migration.enumerateObjects(name) { old, new in
                enumerated.append(old.key)
                new["label"] = .string((old["label"]?.stringValue ?? "") + "!")
            }
        }
        let wanted = keys.compactMap(storedKey)
        #expect(Set(migrated.map(\.json)) == Set(wanted.map(\.json)), "\(K.self)")
        #expect(Set(enumerated.map(\.json)) == Set(wanted.map(\.json)), "\(K.self)")
        let db = try Database(store: try Store(path: path, options: StoreOptions(durability: .noSync)), models: [Keyed<K>.self], schemaVersion: 1)
        for (i, key) in keys.enumerated() {
            #expect(try db.object(Keyed<K>.self, key: key)?.label == "#\(i)!", "\(K.self) \(key)")
        }
    }

    @Test func everyKeyTypeReadsBackTyped() throws {
        try roundTrip([Int.min, -1, 0, 1, 100_000, 0x7F_FF_FF_FF_FF_FF, Int.max])
        try roundTrip([Int8.min, -1, 0, 6, Int8.max])
        try roundTrip([Int16.min, 0, 0x3031, Int16.max])
        try roundTrip([Int32.min, 0, 0x3031_3233, Int32.max])
        try roundTrip([Int64.min, 0, 0x3031_3233_3435, Int64.max])
        try roundTrip([UInt.min, 1, 0x7573_6572_2D31, UInt.max])
        try roundTrip([UInt8.min, 48, UInt8.max])
        try roundTrip([UInt16.min, 0x3031, UInt16.max])
        try roundTrip([UInt32.min, 0x3031_3233, UInt32.max])
        try roundTrip([UInt64.min, 0x7573_6572_2D31, UInt64.max])
        // Strings of every length 0…40, ASCII and not: "user-1" is 6 bytes, like an Int with its tag.
        var strings = (0...40).map { String(repeating: "x", count: $0) }
        strings += ["user-1", "seq-10", "abcdefgh", "é", "e\u{301}x", "日本語のキー", "👩‍👩‍👧", "a\u{0}b", "\u{1}\u{2}\u{3}\u{4}\u{5}\u{6}\u{7}\u{8}"]
        try roundTrip(strings)
        try roundTrip([UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)), UUID(), UUID()])
        try roundTrip([Date.distantPast, Date(timeIntervalSinceReferenceDate: 0), Date(timeIntervalSinceReferenceDate: 817_654_321.125), Date.distantFuture])
        try roundTrip([Data(), Data([0]), Data([0, 0xFF]), Data("user-1".utf8), Data((0..<40).map { UInt8($0) })])
        try roundTrip([-Double.infinity, -1.5, 0, 0.1, 1e300, Double.infinity])
        try roundTrip([Colour.red, .green, .blue])
    }

    @Test func dumpPrintsTypedKeys() throws {
        let path = databasePath()
        do {
            let db = try Database(path: path, models: [Keyed<String>.self])
            try db.write { tx in
                try tx.insert(Keyed(id: "user-1", label: "a", next: Ref("seq-10")))
                try tx.insert(Keyed(id: "seq-10", label: "b", next: nil))
            }
        }
        guard let tool = toolExecutable() else {
            Issue.record("the strata executable was not found next to the test bundle")
            return
        }
        let (status, output) = try runTool(tool, ["dump", path, "--json"])
        #expect(status == 0, "\(output)")
        let lines = output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(lines.compactMap { $0["key"] as? String }.sorted() == ["seq-10", "user-1"], "\(output)")
        let a = lines.first { ($0["key"] as? String) == "user-1" }
        #expect((a?["object"] as? [String: Any])?["next"] as? String == "seq-10", "\(output)")
        let text = try runTool(tool, ["dump", path])
        #expect(text.output.contains("\"user-1\""), "\(text.output)")
    }
}

/// The `strata` executable built next to the test bundle.
func toolExecutable() -> String? {
    var directories: [URL] = []
    if let first = CommandLine.arguments.first {
        directories.append(URL(fileURLWithPath: first).deletingLastPathComponent())
    }
    directories.append(Bundle.main.bundleURL.deletingLastPathComponent())
    directories.append(Bundle.main.bundleURL)
    return directories.map { $0.appendingPathComponent("strata").path }.first { FileManager.default.isExecutableFile(atPath: $0) }
}

/// Runs a tool, returning its exit status and its output and errors together; `environment`
/// adds to (or replaces in) this process's. A tool still running after two minutes is stopped
/// (it then fails its test rather than hang the run).
func runTool(_ tool: String, _ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: tool)
    process.arguments = arguments
    if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let watchdog = DispatchWorkItem { if process.isRunning { process.terminate() } }
    DispatchQueue.global().asyncAfter(deadline: .now() + 120, execute: watchdog)
    defer { watchdog.cancel() }
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}
