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
    let names = model.map { [$0] } ?? schemas.map(\.name)
    if let model, !schemas.contains(where: { $0.name == model }) {
        throw ToolFailure(.usage, "\(path): no model named \(model) (models: \(schemas.map(\.name).joined(separator: ", ")))")
    }
    // Written to a temporary file and copied out once whole: an attempt that a writer in another
    // process overtook is thrown away and made again (the later ones with that writer held off,
    // `on`), so what is printed is every model's objects as one commit holds them, and a slow
    // reader of the output never holds a writer off.
    guard let buffer = tmpfile() else {
        throw ToolFailure(.ioError, "\(path): cannot make a temporary file for the dump: \(systemMessage(errno))")
    }
    defer { fclose(buffer) }
    try on(path, store) {
        rewind(buffer)
        if ftruncate(fileno(buffer), 0) != 0 { throw ToolFailure(.ioError, "temporary file: \(systemMessage(errno))") }
        let commit = try store.read { $0.txnid }
        for name in names {
            try StoredObjects.forEach(in: store, model: name) { key, fields in
                let object = StoredValue.object(fields)
                let line =
                    json
                    ? "{\"model\":\(StoredValue.string(name).json),\"key\":\(key.json),\"object\":\(object.json)}\n"
                    : "\(name) \(key.json) \(object.json)\n"
                if fputs(line, buffer) < 0 { throw ToolFailure(.ioError, "temporary file: \(systemMessage(errno))") }
                return true
            }
        }
        // Each model was read in a snapshot of its own: they must all be the one commit.
        if try store.read({ $0.txnid }) != commit { throw StorageError.fileChangedDuringRead(path: path) }
        if fflush(buffer) != 0 { throw ToolFailure(.ioError, "temporary file: \(systemMessage(errno))") }
    }
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
