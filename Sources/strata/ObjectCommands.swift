// Commands that read the object layer: models, fields, indexes and objects, from the schema
// catalog in the file alone (no Swift types needed).

import Strata

func schema(path: String) throws(ToolFailure) {
    let store = try openStore(path)
    let schemas = try on(path) { try StoredObjects.schemas(in: store) }
    if schemas.isEmpty {
        print("no models (not written by the Strata object layer)")
        return
    }
    for model in schemas {
        let count = try on(path) { try StoredObjects.count(in: store, model: model.name) }
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
    let schemas = try on(path) { try StoredObjects.schemas(in: store) }
    let names = model.map { [$0] } ?? schemas.map(\.name)
    if let model, !schemas.contains(where: { $0.name == model }) {
        throw ToolFailure(.usage, "\(path): no model named \(model) (models: \(schemas.map(\.name).joined(separator: ", ")))")
    }
    for name in names {
        // Printed as it is read, so not read again: if a writer changes the file meanwhile, the
        // tool says so and exits 7 (the objects printed may then mix two commits).
        try once(path) {
            try StoredObjects.forEach(in: store, model: name) { key, fields in
                let object = StoredValue.object(fields)
                if json {
                    print("{\"model\":\(StoredValue.string(name).json),\"key\":\(key.json),\"object\":\(object.json)}")
                } else {
                    print("\(name) \(key.json) \(object.json)")
                }
                return true
            }
        }
    }
}
