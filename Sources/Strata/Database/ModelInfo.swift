import Foundation

/// Everything the database knows about one model type, fixed at open.
protocol AnyModelInfo: AnyObject, Sendable {
    var name: String { get }
    var stored: StoredModelSchema { get }
    /// Dotted paths of fields whose type reads its case from the keys present (a payload enum):
    /// a partial update replaces such a field's object instead of merging into it.
    var caseKeyedPaths: Set<String> { get }
    /// Raw-value enum fields (raw value a JSON scalar), by dotted path: a partial update reads
    /// them in their JSON form (WireEnum).
    var wireEnums: [String: WireEnum] { get }
    /// Whether the model's `init(from:)` reads a value for the field at a stored path where the
    /// record holds none (FieldNames.defaultedStoredPaths).
    func decodesWithout(_ storedPath: String) -> Bool
    /// The key of a reference to this model given as `JSONEncoder` writes a `Ref`: the id's own
    /// JSON form, read as the id field and decoded by the id's type (an enum's or a raw-value
    /// struct's own Codable, which the raw value the key is made of need not match); nil when the
    /// id is no stored field. `path` names the reference in errors.
    func referenceKey(givenAs value: StoredValue, path: FieldPath, registry: ModelRegistry, options: PartialUpdateOptions) throws -> [UInt8]?
    /// Rebuilds secondary indexes that the stored schema did not have.
    func buildIndexes(_ paths: [IndexSchema], in txn: StrataStorage.WriteTransaction) throws
    /// Decodes every record as the model's type; throws `migrationRequired` naming the first that fails.
    func validateRecords(in txn: StrataStorage.WriteTransaction) throws
}

final class ModelInfo<M: Model>: AnyModelInfo {
    let name: String
    let stored: StoredModelSchema
    let indexes: [(schema: IndexSchema, keyPath: PartialKeyPath<M> & Sendable)]
    /// `id` is an optional integer: inserting nil takes the next key.
    let autoIncrement: Bool
    /// Tree names of `indexes`, in order.
    let indexTreeNames: [String]
    /// Positions of the unique indexes in `indexes`.
    let uniqueIndexPositions: [Int]
    /// The same facts per index as plain arrays, for the write path: code generic over the model
    /// runs unspecialized, and every access to `indexes` (an array of tuples holding a generic
    /// key path) looks the tuple's type metadata up at run time.
    let indexCount: Int
    let indexSchemas: [IndexSchema]
    /// How every write finds each index's entries in a record (IndexEntries).
    let indexPlans: [IndexEntryPlan]
    /// Whether any index is unique.
    var hasUniqueIndexes: Bool { !uniqueIndexPositions.isEmpty }
    /// Whether each indexed field is an array (one entry per element).
    let indexIsArray: [Bool]
    /// Every key path of each index, in order (a compound index has several): for messages only;
    /// index entries are computed from the record's bytes (IndexEntries).
    let indexKeyPaths: [[PartialKeyPath<M> & Sendable]]
    /// The stored type of every field path (dotted into nested structs), for the planner: looked
    /// up on every query, so built once.
    private let fieldTypes: [String: FieldType]
    /// What the planner reads of each index (in the order of `indexes`) on every query, worked
    /// out here once (see PlannerIndex).
    let plannerIndexes: [PlannerIndex]

    /// The type of the stored field at a dotted path (as `ObjectSchema.type(atPath:)`).
    func type(atPath path: String) -> FieldType? { fieldTypes[path] }
    /// The stored field holding the primary key (`id`, or its coding key such as `_id`), or
    /// `FieldNames.primaryKeyPath` when `id` is computed: what conditions on `\.id` name.
    let keyPath: String
    /// What a lazily read element that fails to decode is returned as (the schema probe's
    /// instance, every field a zero or empty value), so that the collection API never traps; the
    /// results' `error` says what failed.
    let placeholder: M
    /// Whether stored records may hold a removed field's bytes, which encoding the type leaves
    /// out (see `Transaction.storesSame`).
    let hasRemovedFields: Bool
    /// Whether the model's `init(from:)` reads a default for some field a record may lack (a field
    /// added since, `decodeIfPresent(…) ?? 3`): such a record and the type's encoding of the
    /// object it reads differ in bytes, not in the object.
    let hasDefaultedFields: Bool
    /// Spare coders for this model's records (see CoderPool).
    private let decoders: CoderPool
    private let encoders: CoderPool

    /// This model as if it had no index: what a migration's queries plan with, as its closure
    /// rewrites records whose index entries are only rebuilt after it (Database.init).
    func withoutIndexes() -> ModelInfo<M> {
        var schema = stored
        schema.indexes = []
        return ModelInfo(stored: schema, indexes: [], placeholder: placeholder)
    }

    let caseKeyedPaths: Set<String>
    let wireEnums: [String: WireEnum]

    func decodesWithout(_ storedPath: String) -> Bool { FieldNames.defaultedStoredPaths(of: M.self).contains(storedPath) }

    func referenceKey(givenAs value: StoredValue, path: FieldPath, registry: ModelRegistry, options: PartialUpdateOptions) throws -> [UInt8]? {
        guard let keyType = stored.keyFieldType, let keyName = stored.keyFieldSchema?.name else { return nil }
        // As `ChangeMessage.modelKey` reads a message's key: the id field's shape, for its wire form.
        var encoder = PatchEncoder(model: name, options: options, registry: registry)
        let bytes = try encoder.encode(value, as: keyType, path: FieldPath(model: path.model, text: path.text, depth: path.depth, shape: keyName))
        let id = try bytes.withUnsafeBytes {
            try RecordDecoding.decodeValue(M.ID.self, as: keyType, bytes: $0, context: EncodingContext(model: path.model, path: [path.text]))
        }
        return try keyBytes(id)
    }

    init(stored: StoredModelSchema, indexes: [(IndexSchema, [PartialKeyPath<M> & Sendable])], placeholder: M) {
        self.placeholder = placeholder
        self.caseKeyedPaths = SchemaProbe.caseKeyedPaths(of: M.self)
        self.wireEnums = SchemaProbe.wireEnums(of: M.self)
        self.hasRemovedFields = stored.object.hasRemovedFields
        self.hasDefaultedFields = !FieldNames.defaultedStoredPaths(of: M.self).isEmpty
        self.name = stored.name
        self.stored = stored
        self.indexes = indexes.map { (schema: $0.0, keyPath: $0.1[0]) }
        self.indexKeyPaths = indexes.map(\.1)
        var types: [String: FieldType] = [:]
        func collect(_ object: ObjectSchema, prefix: String) {
            for field in object.fields where !field.removed {
                types[prefix + field.name] = field.type
                if case .object(let nested) = field.type.unwrapped { collect(nested, prefix: prefix + field.name + ".") }
            }
        }
        collect(stored.object, prefix: "")
        self.fieldTypes = types
        self.autoIncrement = isAutoIncrementKey(M.ID.self)
        self.indexTreeNames = indexes.map { $0.0.treeName(model: stored.name) }
        self.uniqueIndexPositions = indexes.indices.filter { indexes[$0].0.unique }
        self.indexCount = indexes.count
        self.indexSchemas = indexes.map(\.0)
        self.indexPlans = indexes.map { IndexEntryPlan(index: $0.0, schema: stored.object) }
        self.keyPath = FieldNames.keyPath(of: M.self)
        let object = stored.object, name = stored.name
        let layout = DecodingLayout(object)
        self.decoders = CoderPool { ModelDecoder(layout: layout, model: name) }
        self.encoders = CoderPool { ObjectEncoder(layout: layout, context: EncodingContext(model: name, path: [])) }
        self.indexIsArray = indexes.map { index in
            if case .array = stored.object.type(atPath: index.0.path)?.unwrapped { return true }
            return false
        }
        self.plannerIndexes = indexes.map { PlannerIndex($0.0, fieldTypes: types) }
    }

    var recordTree: String { stored.recordTree }

    func keyBytes(_ id: M.ID) throws -> [UInt8] {
        // The common key types without boxing into Any or a dynamic cast (either costs more than
        // the encoding): the static type is checked, then the value reinterpreted as that type.
        // (A cast would also unwrap an optional id and drop its tag.)
        var key: [UInt8] = []
        if M.ID.self == Int64.self {
            KeyEncoding.appendInt(unsafeBitCast(id, to: Int64.self), to: &key)
            return key
        }
        if M.ID.self == Int.self {
            KeyEncoding.appendInt(Int64(unsafeBitCast(id, to: Int.self)), to: &key)
            return key
        }
        if M.ID.self == String.self {
            KeyEncoding.appendBytes(KeyEncoding.normalized(unsafeBitCast(id, to: String.self)).utf8, to: &key)
            return key
        }
        guard let key = KeyEncoding.encode(id) else {
            throw StrataError.unsupportedType(model: name, field: "id", reason: "\(M.ID.self) cannot be a primary key")
        }
        return key
    }

    /// The object stored under `key` in a snapshot or the write transaction, or nil.
    /// Calls `found` with the object stored under `key`, if there is one. The public `object(_:key:)`
    /// methods are `@inlinable` wrappers of this: an `M?` made here or passed through `checked`, in
    /// code compiled unspecialized (the model is the caller's type), costs a runtime metadata
    /// lookup each time.
    func readObject<S: TreeSource>(key: M.ID, in source: S, _ found: (M) -> Void) throws {
        guard let tree = try wrapStorage({ try source.tree(named: recordTree) }) else { return }
        let keyBytes = try keyBytes(key)
        guard let record = try wrapStorage({ try tree.view(keyBytes) }) else { return }
        found(try decode(record, storedUnder: key))
    }

    /// The object `bytes` hold, read from under primary key `key`: a record whose object has
    /// another id (a damaged tree) is reported as damage, never handed out as the object asked for.
    func decode(_ bytes: UnsafeRawBufferPointer, storedUnder key: M.ID) throws -> M {
        let object: M
        do {
            object = try decode(bytes)
        } catch StrataError.corruptRecord(let reason) {
            throw StrataError.corruptRecord("\(reason) (the record stored under key \(quotedForError(describeValue(key))))")
        }
        // (A NaN key, which equals nothing, not even the NaN the record holds: one key encodes them all.)
        guard object.id == key || (key != key && object.id != object.id) else { throw recordUnderWrongKey(key, holding: object.id) }
        return object
    }

    /// The damage of a record stored under `key` that holds the object with id `id`.
    func recordUnderWrongKey(_ key: M.ID, holding id: M.ID) -> StrataError {
        .corruptRecord(
            "\(name): the record stored under key \(quotedForError(describeValue(key))) holds the object with id \(quotedForError(describeValue(id)))")
    }

    func encode(_ object: M) throws -> [UInt8] {
        try encoders.with(ObjectEncoder.self) { encoder in
            encoder.reset()
            try object.encode(to: encoder)
            let record = encoder.record()
            // A container the type asked for and Strata cannot write (`ObjectEncoding.failure`).
            if let failure = encoder.state.failure { throw failure }
            return record
        }
    }

    func decode(_ bytes: UnsafeRawBufferPointer) throws -> M {
        // Every object decoded is a chance for a long read to stop (Progress.swift).
        if let control = OperationControl.current { try control.decoded() }
        return try decoders.with(ModelDecoder.self) { try $0.decode(M.self, from: bytes) }
    }

    /// Builds indexes from the record bytes alone (nothing is decoded), a batch of records at a
    /// time: a write invalidates cursors, and holding every entry of a large model at once would
    /// take more memory than the index itself.
    private func buildRecordIndexes(_ built: [IndexSchema], in txn: StrataStorage.WriteTransaction) throws {
        if built.isEmpty { return }
        let trees = try built.map { try txn.createTree($0.treeName(model: name)) }
        let plans = built.map { IndexEntryPlan(index: $0, schema: stored.object) }
        var stats = [(documents: Int, words: Int)](repeating: (0, 0), count: built.count)
        var after: [UInt8]?
        let batch = 4_096
        while true {
            guard let records = try txn.tree(recordTree) else { return }
            var rows: [([UInt8], [[IndexPair]])] = []
            var last: [UInt8]?
            try records.makeCursor().forEach(from: after, to: nil, reverse: false) { key, record in
                if let after, key.elementsEqual(after) { return true }
                let primaryKey = Array(key)
                var perIndex: [[IndexPair]] = []
                for i in built.indices {
                    let (pairs, words) = try IndexEntries.entries(record, schema: stored.object, plan: plans[i], primaryKey: primaryKey)
                    perIndex.append(pairs)
                    if words > 0 { stats[i].documents += 1; stats[i].words += words }
                }
                rows.append((primaryKey, perIndex))
                last = primaryKey
                return rows.count < batch
            }
            for (primaryKey, perIndex) in rows {
                for (i, pairs) in perIndex.enumerated() {
                    for pair in pairs {
                        // A value stored under another index, or none, can make a key too long
                        // for this one (a layout that tags it is a byte longer): name it, as a
                        // write would, rather than the engine's bare key length.
                        if pair.key.count > txn.maxKeySize {
                            let this = primaryKey.withUnsafeBytes { describeStoredKey($0) }
                            throw StrataError.invalidInput(
                                "\(name): the object \(this) makes an entry of the index \(built[i].treeName(model: name)) \(pair.key.count) bytes "
                                    + "long, and an index key holds at most \(txn.maxKeySize) bytes (FORMAT.md §7); found building the index as the "
                                    + "database opened, which keeps its stored schema: shorten the value in a migration, or leave the field out of the index")
                        }
                        if built[i].unique {
                            if try !pair.withKeyAndValue({ try trees[i].insert($0, $1) }) {
                                let other = try pair.withKey { try trees[i].get($0) }.map { describeStoredKey($0) } ?? "another object"
                                let this = primaryKey.withUnsafeBytes { describeStoredKey($0) }
                                let record = try records.get(primaryKey)
                                let value = record.flatMap { $0.withUnsafeBytes { describeFields(built[i].paths, of: $0) } }
                                throw StrataError.uniqueViolation(
                                    model: name, field: built[i].summary,
                                    value: "\(value ?? "the value of \(this)") (held by \(other) and \(this)); found building the new unique index as the "
                                        + "database opened, which keeps its stored schema")
                            }
                        } else if built[i].isFullText {
                            try pair.withKeyAndValue { try trees[i].putLater($0, $1, mergedBy: PostingMerge.shared) }
                        } else {
                            try pair.withKeyAndValue { _ = try trees[i].put($0, $1) }
                        }
                    }
                }
            }
            guard let last, rows.count == batch else { break }
            after = last
        }
        for (i, index) in built.enumerated() where index.isFullText {
            try trees[i].put(TextPostingValue.statsKey, TextPostingValue.stats(documents: stats[i].documents, words: stats[i].words))
        }
    }

    /// The values at `paths` (dotted, as an index names them) in a stored record, as text for
    /// messages, comma-separated; nil when the record does not decode.
    func describeFields(_ paths: [String], of record: UnsafeRawBufferPointer) -> String? {
        guard let fields = try? UntypedDecoding(schemas: [stored]).decode(record, schema: stored.object) else { return nil }
        return paths.map { path in
            var value: StoredValue? = .object(fields)
            for part in path.split(separator: ".") {
                guard case .object(let inner)? = value else { value = nil; break }
                value = inner[String(part)]
            }
            return value.map { $0.json } ?? "nil"
        }.joined(separator: ", ")
    }

    /// A stored key as text for messages, read as the model's key type.
    func describeStoredKey(_ key: UnsafeRawBufferPointer) -> String {
        guard let value = try? UntypedDecoding(schemas: [stored]).key(key, of: stored) else {
            return "0x" + key.map { String(format: "%02x", $0) }.joined()
        }
        return UntypedDecoding.text(value)
    }

    /// After a migration: every record must read as the model, and lie under the key its id
    /// encodes to. One that does not (the key's type changed, say `Int` to `Int?` for automatic
    /// keys, and the migration left the objects as they were) moves there; two objects with one
    /// key then throw `duplicateKey`.
    func validateRecords(in txn: StrataStorage.WriteTransaction) throws {
        guard let records = try txn.tree(recordTree) else { return }
        var failures = 0
        var first = ""
        var moves: [(from: [UInt8], to: [UInt8], record: [UInt8], id: M.ID)] = []
        try records.forEach { key, value in
            do {
                let object = try decode(value)
                let encoded = try keyBytes(object.id)
                if !encoded.elementsEqual(key) { moves.append((Array(key), encoded, Array(value), object.id)) }
            } catch {
                if failures == 0 { first = "\(describeStoredKey(key)): \(error)" }
                failures += 1
            }
            return true
        }
        if failures > 0 {
            throw StrataError.migrationRequired(["\(name): the migration left \(failures) object(s) unreadable as \(M.self), first \(first)"])
        }
        for move in moves { _ = try records.delete(move.from) }
        for move in moves where try !records.insert(move.to, move.record) {
            throw StrataError.duplicateKey(model: name, key: describeValue(move.id))
        }
    }

    /// The length of every primary key's encoding, when the key's type fixes it (full-text
    /// readers check postings against it).
    var postingKeyLength: Int? { stored.keyFieldType.flatMap(KeyEncoding.fixedLength(of:)) }

    func buildIndexes(_ paths: [IndexSchema], in txn: StrataStorage.WriteTransaction) throws {
        try buildRecordIndexes(paths.filter { path in indexes.contains { $0.schema == path } }, in: txn)
    }
}

extension Model {
    /// The schema is what `init(from:)` reads: a type whose `encode(to:)` also writes a key that
    /// `init(from:)` never reads (a constant "kind", say) would open and then fail every insert.
    /// Writing the probe's placeholder finds it at open. Other failures to write the placeholder
    /// are its values', not the type's (a check in `encode(to:)`): inserts report those.
    private static func checkWrites(_ placeholder: Self, schema: ObjectSchema) throws {
        do {
            _ = try RecordEncoding.encode(placeholder, schema: schema, model: modelName)
        } catch StrataError.typeMismatch(_, let field, let reason) where reason == ObjectEncoding.unreadField {
            throw StrataError.unsupportedType(
                model: modelName, field: field,
                reason: "encode(to:) writes this key and init(from:) never reads it; the stored fields are those init(from:) reads, "
                    + "so it would have no place in the record: read it in init(from:) (and ignore the value), or stop writing it")
        } catch StrataError.typeMismatch(_, let field, let reason) where reason.hasPrefix(ObjectEncoding.unwritableContainer) {
            // Written so, the field would be missing from records (an empty array) or fail every write.
            throw StrataError.unsupportedType(model: modelName, field: field, reason: "the field is " + reason)
        } catch {}
    }

    /// Probes the type, reconciles it with the stored schema, and returns the model's runtime info
    /// plus what changed. Called once per model at open.
    static func reconcile(stored: StoredModelSchema?, schemaVersion: Int, migrating: Bool = false) throws -> (ModelInfo<Self>, SchemaChange) {
        let (current, placeholder) = try SchemaProbe.schemaAndPlaceholder(of: Self.self, modelName: modelName)
        try checkWrites(placeholder, schema: current)
        var change = SchemaChange()
        let keyType = String(describing: ID.self)
        if KeyEncoding.supportsKey(ID.self) == false {
            throw StrataError.unsupportedType(
                model: modelName, field: "id",
                reason:
                    "\(ID.self) cannot be a primary key (use an integer, an optional Int, Int64, Int32, UInt, UInt64 or UInt32 for automatic keys, String, UUID, Date, Data, Bool, Double or an enum with such a raw value)"
            )
        }
        var indexes: [(IndexSchema, [PartialKeyPath<Self> & Sendable])] = []
        func path(of keyPath: PartialKeyPath<Self> & Sendable) throws -> String {
            // The stored field, even one whose missing values `init(from:)` fills with a default
            // (FieldNames.Table.defaulted): its index is kept, and queries do not read it.
            guard let path = FieldNames.storedPath(of: keyPath) else {
                let described = String(describing: keyPath)
                // Swift describes a key path to a computed property as `\T.<computed 0x… (String)>`:
                // the advice about enums would send a newcomer who indexed one the wrong way.
                if described.contains("<computed ") {
                    throw StrataError.unsupportedType(
                        model: modelName, field: described,
                        reason: "an index must name a stored field by key path, and this one reads a computed property, "
                            + "which is not stored; index the stored fields it is computed from")
                }
                // An enum with associated values is stored as an object naming its case: no one
                // field holds its value, so no index key can be made of it.
                if SchemaProbe.isCaseKeyed(type(of: keyPath).valueType, in: Self.self) {
                    throw StrataError.unsupportedType(
                        model: modelName, field: described,
                        reason: "an enum with associated values (or without raw values) is stored as an object naming its case, and cannot be indexed; "
                            + "index a raw-value enum or another field, or query it without an index")
                }
                // A stored name with a dot (`case userName = "user.name"`) reads as a nested path,
                // so no key path reaches it: say so when there is one, rather than only the enum
                // advice, which sent the owner of such a field looking in the wrong place.
                let dotted =
                    Self.unreachableName(in: current).map {
                        $0.isEmpty
                            ? "an empty stored name (a coding key \"\") is no path a key path can reach: rename it in CodingKeys; or "
                            : "a stored name containing '.', such as \(jsonString($0)), reads as a nested path: rename it in CodingKeys; or "
                    } ?? ""
                throw StrataError.unsupportedType(
                    model: modelName, field: described,
                    reason: "an index must name a stored field by key path, and Strata could not tell which stored field this is "
                        + "(\(dotted)two renamed fields the schema probe cannot tell apart: of one enum type of a single case, or in a model of "
                        + "more than 128 stored values, two Bool or enum fields 128 values apart, or two Int8 or UInt8 fields 127 or 255 apart; "
                        + "give the field its property's name in CodingKeys)")
            }
            guard let stored = current.type(atPath: path) else {
                throw StrataError.unsupportedType(model: modelName, field: path, reason: "indexed key path is not a stored field")
            }
            // An index key is one value, or one per element of an array of values: no key can be
            // made of a value stored as an object, or of a dictionary or an array of arrays.
            var keyed = stored.unwrapped
            if case .array(let element) = keyed { keyed = element.unwrapped }
            switch keyed {
            case .object:
                let reason: String
                if stored.unwrapped != keyed {
                    reason =
                        "the elements of this array (structs, or enums with associated values) are stored as objects, and an array of them cannot be indexed"
                } else if SchemaProbe.isCaseKeyed(type(of: keyPath).valueType, in: Self.self) {
                    reason =
                        "an enum with associated values (or without raw values) is stored as an object naming its case, and cannot be indexed; "
                        + "index a raw-value enum or another field, or query it without an index"
                } else {
                    reason =
                        "a nested struct is stored as an object of its fields, and cannot be indexed as a whole; "
                        + "index one of its fields with a key path that reaches into it"
                }
                throw StrataError.unsupportedType(model: modelName, field: path, reason: reason)
            case .array, .dictionary:
                throw StrataError.unsupportedType(
                    model: modelName, field: path,
                    reason: "an index key is one value, or one per element of an array of values; \(stored) cannot be indexed")
            default:
                break
            }
            return path
        }
        for (keyPath, unique) in Self.indexes.map({ ($0, false) }) + Self.uniqueIndexes.map({ ($0, true) }) {
            indexes.append((IndexSchema(path: try path(of: keyPath), unique: unique), [keyPath]))
        }
        for descriptor in Self.indexDescriptors {
            let paths = try descriptor.keyPaths.map(path(of:))
            let schema = try IndexSchema.validated(descriptor.kind, paths: paths, object: current, model: modelName)
            indexes.append((schema, descriptor.keyPaths))
        }
        // Each index's layout as its fields' types call for (a field reached through an optional
        // struct is tagged, FORMAT.md §8.3): an index written before the tags differs from the
        // declaration, so it is dropped and rebuilt as any changed index is.
        indexes = indexes.map { ($0.0.tagging(in: current), $0.1) }
        // Declarations of one index: the same one twice is one index, and one declared both plain
        // and unique is unique (the stronger). Two different indexes that would share a tree are
        // an error.
        var byTree: [String: Int] = [:]
        var declared: [(IndexSchema, [PartialKeyPath<Self> & Sendable])] = []
        for index in indexes {
            let tree = index.0.treeName(model: modelName)
            guard let at = byTree[tree] else {
                byTree[tree] = declared.count
                declared.append(index)
                continue
            }
            var kept = declared[at].0, other = index.0
            kept.unique = kept.unique || other.unique
            other.unique = kept.unique
            guard kept == other else {
                throw StrataError.unsupportedType(
                    model: modelName, field: index.0.path, reason: "two different indexes are declared on \(index.0.summary); declare it once")
            }
            declared[at].0 = kept
        }
        indexes = declared
        var merged: ObjectSchema
        // (Type names aside: a renamed Swift type writes no schema, and so never disturbs handles
        // opened with the old name, a widget's or a tool's.)
        var sameFields = false
        if let stored {
            merged = try mergeSchemas(stored: stored.object, current: current, model: modelName, differences: &change.differences, migrating: migrating)
            // An index kept over a field whose stored type changed (made optional, widened) is
            // rebuilt as well: its entries are the values' key encodings, which the type decides
            // (an optional's carry a tag byte, FORMAT.md §8.1), and entries written under the old
            // type would not be found by the new one.
            // So is a tagged index one of whose paths came to reach through an optional struct, or
            // stopped to (a struct on the way made optional): that path's entries gain or lose
            // their tag, whatever the rest of the index does (IndexEntries).
            let retyped = stored.indexes.filter { index in
                indexes.contains { $0.0 == index }
                    && index.paths.contains {
                        stored.object.type(atPath: $0) != merged.type(atPath: $0)
                            || stored.object.nilNeedsTag(atPath: $0) != merged.nilNeedsTag(atPath: $0)
                    }
            }
            change.droppedIndexes = stored.indexes.filter { index in !indexes.contains { $0.0 == index } } + retyped
            // An index whose tree a dropped index shared (a file written when one path could be
            // declared twice) is rebuilt after the drop; one on the same path in another tree (a
            // collated or full-text index beside a plain one) is kept as it is: its tree is full.
            let droppedTrees = Set(change.droppedIndexes.map { $0.treeName(model: modelName) })
            change.addedIndexes = indexes.map(\.0).filter { !stored.indexes.contains($0) || droppedTrees.contains($0.treeName(model: modelName)) }
            // A version above the stored one is recorded; a lower one (a widget or a tool that
            // opens without one) never lowers it, or the next open would migrate again.
            if stored.schemaVersion < schemaVersion { change.raisedVersion = (stored.schemaVersion, schemaVersion) }
            sameFields = merged.withoutTypeNames == stored.object.withoutTypeNames
            change.changed = !sameFields || stored.indexes != indexes.map(\.0) || change.raisedVersion != nil
        } else {
            merged = current
            change.addedIndexes = indexes.map(\.0)
            change.changed = true
        }
        let keyPath = FieldNames.keyPath(of: Self.self)
        let keyField = merged.field(named: keyPath) != nil ? keyPath : nil
        let key: FieldType
        do {
            (key, _) = try ProbeState(modelName: modelName).probe(ID.self, path: ["id"], depth: 0)
        } catch let failure as ProbeFailure {
            throw failure.error
        }
        if let stored {
            // The key's stored type, its Swift name aside (a renamed key type is no change); by
            // the name only for a catalog that records no stored type (older files).
            if stored.key.map({ $0.withoutTypeNames != key.withoutTypeNames }) ?? (stored.keyType != keyType) {
                change.differences.append("\(modelName).id: key type changed from \(stored.keyType) to \(keyType)")
            }
            // A stored key made computed (`var id: String { email }`): the records stay under
            // the old ids until a migration moves each to its computed one (validateRecords).
            if keyField == nil, let old = stored.keyFieldSchema {
                change.differences.append(
                    "\(modelName).id: the primary key was the stored field \(old.name) and is now computed; its objects are stored under "
                        + "the old keys: migrate (a migration moves each object to its new key)")
            }
            change.changed = change.changed || stored.keyField != keyField || stored.key?.withoutTypeNames != key.withoutTypeNames
            change.layoutOnly =
                change.changed && change.raisedVersion == nil && sameFields && stored.keyField == keyField
                && stored.key?.withoutTypeNames == key.withoutTypeNames
                && stored.indexes.map(\.withoutLayout) == indexes.map(\.0.withoutLayout)
        }
        let schema = StoredModelSchema(
            name: modelName, keyType: keyType, keyField: keyField, key: key, object: merged,
            indexes: indexes.map(\.0), schemaVersion: max(stored?.schemaVersion ?? schemaVersion, schemaVersion))
        return (ModelInfo<Self>(stored: schema, indexes: indexes, placeholder: placeholder), change)
    }
}

/// Index entries. Unique: key = value encoding, value = primary key. Otherwise: key = value
/// encoding + primary key (so equal values sort by key), value = varint length of the primary key.
enum IndexEntry {
    /// Appends an entry's value to `out`: a unique index's value is the primary key; any other
    /// index's key ends with it, and the value says how long it is.
    static func appendValue(primaryKey: [UInt8], unique: Bool, to out: inout [UInt8]) {
        if unique { out += primaryKey } else { appendVarint(UInt64(primaryKey.count), to: &out) }
    }

    /// The primary key an index entry points at.
    static func primaryKey(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, unique: Bool) throws -> [UInt8] {
        Array(try primaryKeyBytes(key: key, value: value, unique: unique))
    }

    /// The primary key an index entry points at, as a view into the entry (no copy).
    static func primaryKeyBytes(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, unique: Bool) throws -> UnsafeRawBufferPointer {
        if unique { return value }
        var reader = ByteReader(value)
        let length = try reader.varint()
        guard length <= UInt64(key.count) else { throw StrataError.corruptRecord("index entry names a key longer than itself") }
        return UnsafeRawBufferPointer(rebasing: key[(key.count - Int(length))...])
    }
}

/// How a model's stored schema changes at open.
struct SchemaChange {
    var changed = false
    /// The stored schema version and the higher one given to open with, if it is higher.
    var raisedVersion: (from: Int, to: Int)?
    var differences: [String] = []
    var addedIndexes: [IndexSchema] = []
    var droppedIndexes: [IndexSchema] = []
    /// The change only rebuilds indexes this build lays out otherwise (an index written before
    /// `taggedValues`, a full-text index of older word rules): the schema the types declare is
    /// the stored one, so an open at a lower schema version may apply it.
    var layoutOnly = false
}

/// Merges the current type's schema into the stored one: fields keep their ids, new optional
/// fields get new ids, removed fields are kept (marked) so old records stay readable. Anything else
/// is a difference that needs a migration.
///
/// When `migrating`, a field whose type changed gets a new id (the old one is kept as removed, so a
/// migration can still read it untyped) and new fields of any type are added.
///
/// `prefix` is the dotted path of the nested struct merged ("" for the model's own fields). Throws
/// `unsupportedType` when a new field needs an id and the stored ones reach the largest
/// (`FieldSchema.validIDs`): records could not hold the next.
func mergeSchemas(
    stored: ObjectSchema, current: ObjectSchema, model: String, prefix: String = "", differences: inout [String], migrating: Bool = false
) throws -> ObjectSchema {
    // Stored ids are in `FieldSchema.validIDs` (Catalog.decode), so this cannot overflow.
    var nextID = (stored.fields.map(\.id).max() ?? -1) + 1
    func newID(for field: String) throws -> Int {
        guard nextID <= FieldSchema.validIDs.upperBound else {
            throw StrataError.unsupportedType(
                model: model, field: prefix + field,
                reason: "the stored schema has given out every field id up to \(FieldSchema.validIDs.upperBound), and a new field needs another")
        }
        defer { nextID += 1 }
        return nextID
    }
    var result: [FieldSchema] = []
    for field in current.fields {
        let fieldPath = "\(model).\(prefix)\(field.name)"
        guard let old = stored.fields.first(where: { $0.name == field.name && !$0.removed }) else {
            if !field.type.isOptional {
                differences.append("\(fieldPath): new non-optional field \(field.type) (make it optional, or migrate)")
            }
            result.append(FieldSchema(name: field.name, id: try newID(for: field.name), type: field.type))
            continue
        }
        var type = field.type
        if case .object(let a) = old.type.unwrapped, case .object(let b) = field.type.unwrapped,
            old.type.isOptional == field.type.isOptional || field.type.isOptional
        {
            let nested = FieldType.object(
                try mergeSchemas(stored: a, current: b, model: model, prefix: prefix + field.name + ".", differences: &differences, migrating: migrating))
            type = field.type.isOptional ? .optional(nested) : nested
        } else if let (aligned, inner) = try mergeElementStructs(stored: old.type, current: field.type, model: model, path: prefix + field.name) {
            // Structs inside arrays and dictionaries: their fields keep their stored ids too, or
            // old elements would be read by the new type's positions.
            type = aligned
            if !inner.isEmpty {
                differences += inner
                if migrating {
                    result.append(FieldSchema(name: field.name, id: try newID(for: field.name), type: field.type))
                    continue
                }
            }
        } else if !compatible(stored: old.type, current: field.type) {
            // Name the fields inside arrays and dictionaries of structs that changed: the whole
            // types read alike ("[Address] to [Address]") and do not say what to migrate.
            let inner = incompatibilities(stored: old.type, current: field.type, path: field.name)
            if inner.isEmpty {
                differences.append("\(fieldPath): type changed from \(old.type) to \(field.type)")
            }
            for (path, was, now) in inner {
                differences.append("\(model).\(prefix)\(path): type changed from \(was) to \(now)")
            }
            if migrating {
                result.append(FieldSchema(name: field.name, id: try newID(for: field.name), type: field.type))
                continue
            }
        }
        result.append(FieldSchema(name: field.name, id: old.id, type: type))
    }
    for old in stored.fields where !result.contains(where: { $0.id == old.id }) {
        var kept = old
        kept.removed = true
        result.append(kept)
    }
    return ObjectSchema(typeName: current.typeName, fields: result)
}

/// `current` with every struct inside its arrays and dictionaries (through optionals) merged into
/// the stored struct at the same place (`mergeSchemas`: fields keep their ids, new ones get new
/// ids, removed ones stay marked), and the differences that merge found that need a migration
/// (named `path[].field`, `path[key].field`); nil unless both types are such collections of
/// structs. A field made optional (`[Stop]` to `[Stop]?`) merges as well.
func mergeElementStructs(stored: FieldType, current: FieldType, model: String, path: String) throws -> (FieldType, [String])? {
    func elements(_ stored: FieldType, _ current: FieldType, _ path: String) throws -> (FieldType, [String])? {
        switch (stored, current) {
        case let (.object(a), .object(b)):
            var differences: [String] = []
            let merged = try mergeSchemas(stored: a, current: b, model: model, prefix: path + ".", differences: &differences)
            return (.object(merged), differences)
        case let (.optional(a), .optional(b)):
            return try elements(a, b, path).map { (.optional($0.0), $0.1) }
        case let (.array(a), .array(b)):
            return try elements(a, b, path + "[]").map { (.array($0.0), $0.1) }
        case let (.dictionary(a), .dictionary(b)):
            return try elements(a, b, path + "[key]").map { (.dictionary($0.0), $0.1) }
        default:
            return nil
        }
    }
    func collection(_ stored: FieldType, _ current: FieldType) throws -> (FieldType, [String])? {
        switch (stored, current) {
        case (.array, .array), (.dictionary, .dictionary): return try elements(stored, current, path)
        default: return nil
        }
    }
    if case .optional(let a) = stored, case .optional(let b) = current { return try collection(a, b).map { (.optional($0.0), $0.1) } }
    if !stored.isOptional, case .optional(let b) = current { return try collection(stored, b).map { (.optional($0.0), $0.1) } }
    return try collection(stored, current)
}

/// The innermost fields whose stored type `current` cannot read, below a field at `path`, through
/// optionals, arrays (`homes[].zip`), dictionaries (`scores[key]`) and nested structs: the paths
/// and types a migration message names.
func incompatibilities(stored: FieldType, current: FieldType, path: String) -> [(String, FieldType, FieldType)] {
    if compatible(stored: stored, current: current) { return [] }
    switch (stored, current) {
    case (.optional(let a), .optional(let b)): return incompatibilities(stored: a, current: b, path: path)
    case (.array(let a), .array(let b)): return incompatibilities(stored: a, current: b, path: path + "[]")
    case (.dictionary(let a), .dictionary(let b)): return incompatibilities(stored: a, current: b, path: path + "[key]")
    case (.object(let a), .object(let b)):
        return a.liveFields.flatMap { old -> [(String, FieldType, FieldType)] in
            guard let new = b.field(named: old.name) else { return [] }
            return incompatibilities(stored: old.type, current: new.type, path: path + "." + old.name)
        }
    default: return [(path, stored, current)]
    }
}

/// Whether records written as `stored` read correctly as `current`.
func compatible(stored: FieldType, current: FieldType) -> Bool {
    if stored.isStorageCompatible(with: current) { return true }
    // Making a field optional is safe: every stored value is still a value.
    if case .optional(let inner) = current, !stored.isOptional { return compatible(stored: stored, current: inner) }
    return false
}

extension KeyEncoding {
    static func supportsKey(_ type: Any.Type) -> Bool {
        let supported: [Any.Type] = [
            Int.self, Int8.self, Int16.self, Int32.self, Int64.self, UInt.self, UInt8.self, UInt16.self,
            UInt32.self, UInt64.self, String.self, UUID.self, Date.self, Data.self, Bool.self, Double.self,
        ]
        if supported.contains(where: { $0 == type }) { return true }
        if isAutoIncrementKey(type) { return true }
        if let raw = type as? any RawRepresentable.Type { return supportsRaw(raw) }
        return false
    }

    private static func supportsRaw<R: RawRepresentable>(_ type: R.Type) -> Bool { supportsKey(R.RawValue.self) }
}

/// Whether a key type is an optional integer: inserting nil takes the next key.
func isAutoIncrementKey(_ type: Any.Type) -> Bool {
    type == Optional<Int>.self || type == Optional<Int64>.self || type == Optional<Int32>.self
        || type == Optional<UInt64>.self || type == Optional<UInt>.self || type == Optional<UInt32>.self
}

extension Model {
    /// The first stored field name, here or in a nested struct, that no key path's stored path can
    /// name: one containing a '.' (read as a nested path) or an empty one.
    static func unreachableName(in schema: ObjectSchema) -> String? {
        for field in schema.liveFields {
            if field.name.isEmpty || field.name.contains(".") { return field.name }
            if case .object(let nested) = field.type.unwrapped, let name = unreachableName(in: nested) { return name }
        }
        return nil
    }
}

extension IndexSchema {
    /// The stored form of a declared `IndexDescriptor`, after checking that its fields can be
    /// indexed that way: a full-text index needs a `String` field; a compound index stored values
    /// that are not arrays, dictionaries or structs; a collation at least one `String` field.
    static func validated<M>(_ kind: IndexDescriptor<M>.Kind, paths: [String], object: ObjectSchema, model: String) throws -> IndexSchema {
        let types = paths.map { object.type(atPath: $0) ?? .string }
        switch kind {
        case .fullText:
            guard types[0].unwrapped == .string else {
                throw StrataError.unsupportedType(model: model, field: paths[0], reason: "a full-text index needs a String field, not \(types[0])")
            }
            return IndexSchema(paths: paths, unique: false, collation: nil, kind: .fullText)
        case let .values(unique, collation):
            if Set(paths).count != paths.count {
                throw StrataError.unsupportedType(model: model, field: paths.joined(separator: ","), reason: "an index names a field twice")
            }
            for (path, type) in zip(paths, types) {
                switch type.unwrapped {
                case .array, .dictionary, .object:
                    if paths.count > 1 || collation != nil {
                        throw StrataError.unsupportedType(model: model, field: path, reason: "a compound or collated index needs stored values, not \(type)")
                    }
                default: break
                }
            }
            if collation != nil, !types.contains(where: { $0.unwrapped == .string }) {
                throw StrataError.unsupportedType(
                    model: model, field: paths.joined(separator: ","), reason: "a collation orders String fields, and this index has none")
            }
            // The file records a collation by its name, which names only the known options: one
            // with other bits (`StringCollation(.init(rawValue: 8))`) was written as "", and the
            // file then failed to open ("unknown string collation").
            if let collation, StringCollation(name: collation.description) != collation {
                throw StrataError.unsupportedType(
                    model: model, field: paths.joined(separator: ","),
                    reason: "the collation's options (raw value \(collation.options.rawValue)) have bits that name no option; "
                        + "use caseInsensitive, diacriticInsensitive and numeric")
            }
            return IndexSchema(paths: paths, unique: unique, collation: collation, kind: nil)
        }
    }
}
