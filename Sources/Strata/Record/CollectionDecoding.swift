import Foundation

// Arrays and `[String: V]` dictionaries read with their element type known. The standard
// library's `Array.init(from:)` and `Dictionary.init(from:)` are compiled unspecialized: per
// element they call through an existential container, and they grow their storage append by
// append (an array of ten structs reallocated four times; a dictionary's `allKeys` cost more than
// decoding two small values). Reading the stored elements here, into storage reserved at once,
// calls for each element exactly what those initializers' containers call (`ArrayDecoding`,
// `DictionaryKeyedDecoding`), so the values and the errors are theirs.

/// A collection type this file reads directly (only `Array` and `Dictionary<String, _>`, whose
/// `init(from:)` no user type can replace).
protocol DirectlyDecodedCollection {
    /// The collection stored in `decoder`'s value; nil to take the general path instead.
    static func decodeDirectly(from decoder: ValueDecoder) throws -> Self?
}

extension Array: DirectlyDecodedCollection where Element: Decodable {
    static func decodeDirectly(from decoder: ValueDecoder) throws -> [Element]? {
        guard case .array(let element) = decoder.fieldType.unwrapped else { return nil }
        let items = try CollectionLayout.readArray(decoder.bytes)
        var values: [Element] = []
        values.reserveCapacity(items.count)
        for (i, item) in items.enumerated() {
            let context = decoder.context.appending(index: i)
            if item.isNil {
                values.append(
                    try RecordDecoding.decodeNil(Element.self, as: element, context: context, orThrow: context.mismatch("nil element read as \(Element.self)")))
            } else {
                values.append(
                    try RecordDecoding.decodeElement(Element.self, as: element, bytes: item.bytes, context: context, owner: decoder, layout: decoder.layout))
            }
        }
        return values
    }
}

extension Dictionary: DirectlyDecodedCollection where Key == String, Value: Decodable {
    static func decodeDirectly(from decoder: ValueDecoder) throws -> [String: Value]? {
        guard case .dictionary(let element) = decoder.fieldType.unwrapped else { return nil }
        let entries = try CollectionLayout.readDictionary(decoder.bytes)
        // Stored keys are sorted by their bytes, which is the order `allKeys` sorts them in (and
        // no two are equal) only while they are ASCII: keys that compare equal as Strings (é as
        // one scalar or two) make the standard library keep one of them, and `allKeys` decodes
        // its values in String order. Such dictionaries take the general path.
        for entry in entries where !entry.key.utf8.allSatisfy({ $0 < 0x80 }) { return nil }
        var values: [String: Value] = [:]
        values.reserveCapacity(entries.count)
        for entry in entries {
            let context = decoder.context.appending(entry.key)
            if entry.isNil {
                values[entry.key] = try RecordDecoding.decodeNil(
                    Value.self, as: element, context: context, orThrow: context.mismatch("nil read as \(Value.self)"))
            } else {
                values[entry.key] = try RecordDecoding.decodeElement(
                    Value.self, as: element, bytes: entry.bytes, context: context, owner: decoder, layout: decoder.layout)
            }
        }
        return values
    }
}
