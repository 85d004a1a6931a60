// Commands that read the object layer: models, fields, indexes and objects, from the schema
// catalog in the file alone (no Swift types needed).

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Strata
import StrataStorage

func schema(path: String) throws(ToolFailure) {
    let store = try openStore(path)
    let schemas = try on(path, store) { try StoredObjects.schemas(in: store) }
    if schemas.isEmpty {
        print("no models (not written by the Strata object layer)")
        return
    }
    for model in schemas {
        let count = try on(path, store) { try StoredObjects.count(in: store, model: model.name) }
        print("model \(model.name)  key \(model.keyType)  objects \(grouped(count))  schema version \(model.schemaVersion)")
        var rows: [[String]] = []
        // Nested structs' fields follow their struct, dotted (and inside arrays, as `tags[].name`).
        func add(_ object: ObjectSchema, prefix: String, removed: Bool) {
            for field in object.fields {
                let name = prefix + field.name
                let gone = removed || field.removed
                let key = model.keyField == field.name && prefix.isEmpty ? "primary key" : ""
                rows.append(["  " + name, "\(field.id)", field.type.description, [gone ? "removed" : "", key].filter { !$0.isEmpty }.joined(separator: ", ")])
                switch field.type.unwrapped {
                case .object(let nested): add(nested, prefix: name + ".", removed: gone)
                case .array(let element), .dictionary(let element):
                    if case .object(let nested) = element.unwrapped { add(nested, prefix: name + "[].", removed: gone) }
                default: break
                }
            }
        }
        add(model.object, prefix: "", removed: false)
        print(table(["  field", "id", "type", ""], rows, rightAligned: [1]))
        for index in model.indexes {
            print("  index \(index.summary)")
        }
        print("")
    }
}

func dump(path: String, model: String?, json: Bool) throws(ToolFailure) {
    let store = try openStore(path)
    let schemas = try on(path, store) { try StoredObjects.schemas(in: store) }
    if let model, !schemas.contains(where: { $0.name == model }) {
        throw ToolFailure(.usage, "\(path): no model named \(model) (models: \(schemas.map(\.name).joined(separator: ", ")))")
    }
    // Written to a temporary file and copied out once whole: an attempt that a writer in another
    // process overtook is thrown away and made again (the later ones with that writer held off,
    // `on`), so what is printed is every model's objects as one commit holds them, and a slow
    // reader of the output never holds a writer off.
    // Where no temporary file can be had (no writable $TMPDIR or /tmp), or it fills up: printed
    // as it is read, once, with writers in other processes held off throughout, so that it is
    // still one commit. (Where they cannot be, one that overtakes the read makes the tool exit 7,
    // and what it printed may mix commits.)
    func printHoldingWritersOff() throws(ToolFailure) {
        do {
            try store.holdingWritersOff { try dumpObjects(store, model: model, json: json, path: path) { print($0, terminator: "") } }
        } catch let failure as ToolFailure {
            throw failure
        } catch {
            throw ToolFailure(error, path: path)
        }
    }
    guard let buffer = temporaryFile() else { return try printHoldingWritersOff() }
    defer { fclose(buffer) }
    var full = false
    try on(path, store) {
        rewind(buffer)
        if ftruncate(fileno(buffer), 0) != 0 { throw ToolFailure(.ioError, "temporary file: \(systemMessage(errno))") }
        do {
            try dumpObjects(store, model: model, json: json, path: path) { line in
                if fputs(line, buffer) < 0 { throw TemporaryFileFailed() }
            }
            if fflush(buffer) != 0 { throw TemporaryFileFailed() }
        } catch is TemporaryFileFailed {
            full = true
        }
    }
    if full { return try printHoldingWritersOff() }
    rewind(buffer)
    fflush(nil)
    var chunk = [UInt8](repeating: 0, count: 1 << 16)
    while true {
        let count = chunk.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, buffer) }
        if count == 0 { break }
        if !chunk.withUnsafeBytes({ writeAll(1, UnsafeRawBufferPointer(rebasing: $0[..<count])) }) {
            throw ToolFailure(.ioError, "standard output: \(systemMessage(errno))")
        }
    }
    if ferror(buffer) != 0 { throw ToolFailure(.ioError, "temporary file: read failed") }
}

/// Every object of `model` (nil: of every model), one line each (`--json`: a JSON object per
/// line), handed to `emit` in key order; throws `fileChangedDuringRead` when the models were not
/// read from one commit.
private func dumpObjects(_ store: Store, model: String?, json: Bool, path: String, _ emit: (String) throws -> Void) throws {
    let commit = try store.read { $0.txnid }
    // The model list of that commit too (a list read before it missed a model added since).
    let names = try model.map { [$0] } ?? StoredObjects.schemas(in: store).map(\.name)
    for name in names {
        try StoredObjects.forEach(in: store, model: name) { key, fields in
            let object = StoredValue.object(fields)
            try emit(
                json
                    ? "{\"model\":\(StoredValue.string(name).json),\"key\":\(key.json),\"object\":\(object.json)}\n"
                    : "\(name) \(key.json) \(object.json)\n")
            return true
        }
    }
    // Each model was read in a snapshot of its own: they must all be the one commit.
    if try store.read({ $0.txnid }) != commit { throw StorageError.fileChangedDuringRead(path: path) }
}

/// A write to the dump's temporary file failed (a full disk, a file too large for it).
private struct TemporaryFileFailed: Error {}

/// A new file in `$TMPDIR` (else /tmp), already unlinked, open for writing and reading; nil when
/// none can be made there.
private func temporaryFile() -> UnsafeMutablePointer<FILE>? {
    let directory = getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
    var template = Array("\(directory)/strata-dump-XXXXXX".utf8CString)
    let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
    if fd < 0 { return nil }
    template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
    guard let file = fdopen(fd, "w+") else {
        close(fd)
        return nil
    }
    return file
}
