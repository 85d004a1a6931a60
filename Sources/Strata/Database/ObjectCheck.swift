import Foundation
import StrataStorage

/// What `StoredObjects.check` found: problems (the object layer's data is damaged: exit 5 in
/// `strata check`) and notes (facts worth knowing that are not damage, like references to objects
/// that do not exist, which Strata allows).
///
/// ```swift
/// let report = try StoredObjects.check(in: db.store)
/// report.problems.forEach { print("problem:", $0) }
/// report.notes.forEach { print("note:", $0) }
/// ```
public struct ObjectCheckReport: Sendable {
    /// Damage: records that do not decode, index entries without their record or records without
    /// their index entries, duplicate values in a unique index.
    public var problems: [String] = []
    /// Not damage: dangling references, per model and field.
    public var notes: [String] = []
    /// Objects examined.
    public var objects = 0
    /// Index entries examined.
    public var indexEntries = 0
    /// Problems found beyond the `limit` listed (`problems` then ends with a line counting them).
    public var omittedProblems = 0
    /// Every problem found, listed or not.
    ///
    /// ```swift
    /// let report = try StoredObjects.check(in: db.store, limit: 10)
    /// print(report.problemCount, "problems")   // not problems.count: the list stops at the limit
    /// ```
    public var problemCount: Int { problems.count - (omittedProblems > 0 ? 1 : 0) + omittedProblems }
}

extension StoredObjects {
    /// Checks the object layer of a file against its stored schemas, like SQLite's
    /// `integrity_check`: every record decodes (keys included, by the recorded key type); every
    /// index entry matches its record and every record has its entries; unique indexes hold each
    /// value once; references whose target does not exist are reported as notes. Reads one
    /// snapshot; writes nothing. At most `limit` problems are listed (the count of the rest is).
    ///
    /// ```swift
    /// let report = try StoredObjects.check(in: try Store(path: "app.strata"))
    /// for problem in report.problems { print(problem) }
    /// ```
    public static func check(in store: Store, limit: Int = 50) throws -> ObjectCheckReport {
        try store.read { txn in
            var check = ObjectCheck(txn: txn, limit: limit)
            return try check.run()
        }
    }
}

private struct ObjectCheck {
    let txn: ReadTransaction
    let limit: Int
    var report = ObjectCheckReport()
    var hidden = 0

    init(txn: ReadTransaction, limit: Int) {
        self.txn = txn
        self.limit = limit
    }

    mutating func problem(_ text: String) {
        if report.problems.count < limit { report.problems.append(text) } else { hidden += 1 }
    }

    mutating func run() throws -> ObjectCheckReport {
        let schemas: [String: StoredModelSchema]
        do {
            schemas = try Catalog.load(try txn.tree(Catalog.schemaTree))
        } catch {
            problem("the schema catalog does not read: \(error)")
            return report
        }
        let decoding = UntypedDecoding(schemas: schemas.values)
        for schema in schemas.values.sorted(by: { $0.name < $1.name }) {
            try check(schema, decoding: decoding, schemas: schemas)
        }
        if hidden > 0 {
            report.problems.append("… and \(hidden) more problems")
            report.omittedProblems = hidden
        }
        return report
    }

    mutating func check(_ schema: StoredModelSchema, decoding: UntypedDecoding, schemas: [String: StoredModelSchema]) throws {
        let model = schema.name
        guard let records = try txn.tree(schema.recordTree) else {
            if !schema.indexes.isEmpty, try schema.indexes.contains(where: { try txn.tree($0.treeName(model: model)) != nil }) {
                problem("\(model): indexes exist but the record tree \(schema.recordTree) does not")
            }
            return
        }
        // The entries every index should hold (key → value), from the records; and a full-text
        // index's statistics.
        var expected = [[ByteKey: [UInt8]]](repeating: [:], count: schema.indexes.count)
        var textStats = [(documents: Int, words: Int)](repeating: (0, 0), count: schema.indexes.count)
        var dangling: [String: (count: Int, sample: String)] = [:]
        let keyIsComparable = !UntypedDecoding.appTypedKey(schema)
        try records.forEach { key, record in
            report.objects += 1
            let keyValue: StoredValue
            do {
                keyValue = try decoding.key(key, of: schema)
            } catch {
                problem("\(model): a key of \(key.count) bytes does not read as \(schema.keyFieldType.map { "\($0)" } ?? "the key type"): \(error)")
                return true
            }
            let keyText = UntypedDecoding.text(keyValue)
            let fields: [String: StoredValue]
            do {
                fields = try decoding.decode(record, schema: schema.object, includeRemoved: true)
            } catch {
                problem("\(model) \(keyText): the record does not decode: \(error)")
                return true
            }
            // A record under another object's key (reads by key refuse it: `recordUnderWrongKey`).
            // Compared as key encodings, as the tree orders keys: equal ids in other spellings
            // (decomposed and composed text) are one key. A computed id is not in the record, and
            // without the Swift type it cannot be computed here.
            // An id of a type of the app's own (a raw-value struct) is keyed by its raw value and
            // stored by its Codable form ("u:" + raw, `{"rawValue": …}`), which cannot be told
            // from each other without the Swift type: not compared (they differed, reported).
            if let keyField = schema.keyFieldSchema, keyIsComparable {
                let stored = try? RecordIndexKeys.values(record, schema: schema.object, path: keyField.name, tagged: false)
                if stored != [Array(key)] {
                    // Both shown as JSON values, so that the key "5" and the id 5 read apart.
                    let id = fields[keyField.name].map(Self.shown) ?? "none (the field is absent)"
                    problem(
                        "\(model) \(keyText): the record's \(keyField.name) field does not match its key: "
                            + "the record stored under key \(Self.shown(keyValue)) holds the object with \(keyField.name) \(id)")
                }
            }
            for (i, index) in schema.indexes.enumerated() where index.kind?.outdatedBy == nil {
                do {
                    let (pairs, words) = try IndexEntries.entries(record, schema: schema.object, index: index, primaryKey: Array(key))
                    for pair in pairs {
                        let key = ByteKey(Array(pair.key)), value = Array(pair.value)
                        if let other = expected[i][key], index.unique, other != value {
                            problem("\(model) \(keyText): its \(index.path) value is also another object's, in a unique index")
                        }
                        expected[i][key] = value
                    }
                    if words > 0 {
                        textStats[i].documents += 1
                        textStats[i].words += words
                    }
                } catch {
                    problem("\(model) \(keyText): the value of indexed \(index.path) does not read: \(error)")
                }
            }
            try references(record, schema: schema.object, path: "") { field, target, targetKey in
                guard let targetSchema = schemas[target] else { return }
                let found = targetKey.isEmpty ? nil : try txn.tree(targetSchema.recordTree)?.get(targetKey)
                let exists = found != nil
                if !exists {
                    let name = "\(model).\(field) → \(target)"
                    let sample = targetKey.withUnsafeBytes { try? decoding.key($0, of: targetSchema) }.map(UntypedDecoding.text) ?? "?"
                    dangling[name, default: (0, "\(keyText) → \(sample)")].count += 1
                }
            }
            return true
        }
        for (name, found) in dangling.sorted(by: { $0.key < $1.key }) {
            report.notes.append("\(name): \(found.count) reference(s) to objects that do not exist (e.g. \(found.sample))")
        }
        for (i, index) in schema.indexes.enumerated() {
            if let by = index.kind?.outdatedBy {
                report.notes.append(
                    "\(model): the full-text index on \(index.path) was written by \(by), which this build does not read; "
                        + "the next read-write open of the database rebuilds it")
                continue
            }
            let treeName = index.treeName(model: model)
            guard let tree = try txn.tree(treeName) else {
                if !expected[i].isEmpty { problem("\(model): the index on \(index.summary) is missing (\(expected[i].count) entries expected)") }
                continue
            }
            var remaining = expected[i]
            /// One entry of the index (a posting of a full-text one) against the records'.
            func check(_ entry: [UInt8], _ value: [UInt8]) {
                if index.isFullText && entry == TextPostingValue.statsKey {
                    // The statistics entry: texts with words, and their words in all.
                    let stored = try? value.withUnsafeBytes { try TextPostingValue.readStats($0) }
                    if stored?.documents != textStats[i].documents || stored?.words != textStats[i].words {
                        problem(
                            "\(model): full-text index \(index.path) counts \(stored.map { "\($0.documents) texts of \($0.words) words" } ?? "unreadably"), the records \(textStats[i].documents) texts of \(textStats[i].words) words"
                        )
                    }
                    return
                }
                guard let expectedValue = remaining.removeValue(forKey: ByteKey(entry)) else {
                    problem("\(model): index \(index.summary) has an entry no record gives (\(entry.count) bytes)")
                    return
                }
                if !value.elementsEqual(expectedValue) {
                    problem(
                        index.isFullText
                            ? "\(model): an entry of full-text index \(index.path) holds other positions than its record's text gives"
                            : "\(model): an entry of index \(index.summary) names the wrong object")
                }
                return
            }
            var block = PostingBlockReader()
            // The word of the block before and its last posting's primary key: a word's blocks
            // must not interleave (FORMAT.md §8.5). Interleaved blocks hold every posting once, so
            // the postings' check alone passes them, while a search that skips blocks misses texts.
            var previous: (word: [UInt8], last: [UInt8])?
            try tree.forEach { key, value in
                report.indexEntries += 1
                if index.isFullText && !key.elementsEqual(TextPostingValue.statsKey) {
                    // A block: each posting checked as the entry (word ‖ primary key → value) a
                    // write gives for it.
                    do {
                        guard let wordEnd = PostingBlocks.wordEnd(key) else { throw PostingBlocks.corrupt("has a key without a word") }
                        let word = Array(key[..<wordEnd])
                        let sameWord = previous?.word == word
                        if sameWord, let last = previous?.last, !last.lexicographicallyPrecedes(key[wordEnd...]) {
                            // (Reported, and the block's postings still checked: each is there once.)
                            problem(
                                "\(model): full-text index \(index.path) has a block (\(key.count)-byte key) that starts at or below the last key of the word's block before it"
                            )
                        }
                        previous = nil
                        try block.load(key: key, wordEnd: wordEnd, value: value)
                        var last: [UInt8] = []
                        while try block.next() {
                            last = block.primaryKey
                            let entry = word + block.primaryKey
                            var posting: [UInt8] = []
                            appendVarint(UInt64(block.primaryKey.count), to: &posting)
                            block.withRest { posting += $0 }
                            check(entry, posting)
                        }
                        previous = (word, last)
                    } catch {
                        problem("\(model): full-text index \(index.path) has a damaged block (\(key.count)-byte key): \(error)")
                    }
                    return true
                }
                check(Array(key), Array(value))
                return true
            }
            if index.isFullText, textStats[i].documents > 0, try tree.get(TextPostingValue.statsKey) == nil {
                problem("\(model): full-text index \(index.path) lacks its statistics entry")
            }
            if !remaining.isEmpty {
                problem("\(model): \(remaining.count) record(s) lack their entry in index \(index.summary)")
            }
        }
    }

    /// A key or id in a problem, as JSON; text cut short as other errors cut it (`quotedForError`).
    static func shown(_ value: StoredValue) -> String {
        switch value {
        case .string(let text): return quotedForError(text)
        case .data(let data): return quotedForError(data.base64EncodedString())
        default: return value.json
        }
    }

    /// Calls `body` with each reference in a record: the field's dotted path, the target model and
    /// the target's key encoding.
    func references(
        _ record: UnsafeRawBufferPointer, schema: ObjectSchema, path: String,
        _ body: (String, String, [UInt8]) throws -> Void
    ) throws {
        for field in schema.fields where !field.removed {
            guard let (bytes, isNil) = try RecordField.find(field.id, in: record), !isNil else { continue }
            try references(bytes, type: field.type, path: path.isEmpty ? field.name : path + "." + field.name, body)
        }
    }

    /// The references in a value of `type`, wherever they nest: in structs, arrays and
    /// dictionaries of them, at any depth (an order's lines, each naming a product). Elements
    /// and entries report under their collection's path.
    private func references(
        _ bytes: UnsafeRawBufferPointer, type: FieldType, path: String,
        _ body: (String, String, [UInt8]) throws -> Void
    ) throws {
        switch type.unwrapped {
        case .reference(let target): try body(path, target, Array(bytes))
        case .object(let nested): try references(bytes, schema: nested, path: path, body)
        case .array(let element):
            guard element.containsReference else { return }
            for item in try CollectionLayout.readArray(bytes) where !item.isNil { try references(item.bytes, type: element, path: path, body) }
        case .dictionary(let value):
            guard value.containsReference else { return }
            for entry in try CollectionLayout.readDictionary(bytes) where !entry.isNil {
                try references(entry.bytes, type: value, path: path, body)
            }
        default: break
        }
    }
}

extension FieldType {
    /// Whether a value of this type can hold a reference (so that a collection of anything else
    /// is not read element by element for nothing).
    var containsReference: Bool {
        switch unwrapped {
        case .reference: return true
        case .object(let schema): return schema.fields.contains { !$0.removed && $0.type.containsReference }
        case .array(let element), .dictionary(let element): return element.containsReference
        default: return false
        }
    }
}
