/// `distinct(by:)`: the first object of each group of objects whose values at the key paths are
/// equal as Swift's `==` says (strings and arrays of strings by canonical equivalence, structs by
/// their own `==`), with one exception Foundation leaves open: every NaN is one value, like every
/// zero. Scalars compare by their key encoding, which makes exactly those identifications; other
/// Hashable values by `AnyHashable`; anything else only Equatable by `==` against each group seen.
/// A `Decimal` is not compared by its key encoding, which is the nearest Double and would make
/// 0.1 and 0.10000000000000000001 one value.
enum Distinct {
    /// Positions of the objects kept, in order.
    static func firstOfEachGroup<M>(_ objects: [M], by keyPaths: [PartialKeyPath<M> & Sendable]) -> [Int] {
        var seen = Set<[AnyHashable]>()
        var unhashable: [[Any]] = []  // one representative per group, when some value is not Hashable
        var kept: [Int] = []
        // Decided once per key path, from its value type, not by casting every value.
        let byEncoding = keyPaths.map { !holdsDecimal(type(of: $0).valueType) }
        for (i, object) in objects.enumerated() {
            // Each value as it is compared: a scalar by its key encoding, also beside a value
            // that is only Equatable (its NaNs are then still one value).
            let values = zip(keyPaths, byEncoding).map { keyPath, byEncoding -> Any in
                let value = object[keyPath: keyPath]
                var bytes: [UInt8] = []
                return byEncoding && KeyEncoding.append(value, to: &bytes) ? bytes : value
            }
            if let signature = hashableSignature(values) {
                if seen.insert(signature).inserted { kept.append(i) }
            } else if !unhashable.contains(where: { equal($0, values) }) {
                unhashable.append(values)
                kept.append(i)
            }
        }
        return kept
    }

    private static func hashableSignature(_ values: [Any]) -> [AnyHashable]? {
        var signature: [AnyHashable] = []
        for value in values {
            guard let hashable = value as? any Hashable else { return nil }
            signature.append(AnyHashable(hashable))
        }
        return signature
    }

    /// Whether values of `type` are `Decimal`s or optionals of them.
    private static func holdsDecimal(_ type: Any.Type) -> Bool {
        if type == Decimal.self { return true }
        guard let optional = type as? any OptionalValue.Type else { return false }
        return holdsDecimal(optional.wrappedType)
    }

    private static func equal(_ a: [Any], _ b: [Any]) -> Bool {
        zip(a, b).allSatisfy { x, y in
            guard let x = x as? any Equatable else { return false }
            return x.isEqual(to: y)
        }
    }
}

private extension Equatable {
    func isEqual(to other: Any) -> Bool { (other as? Self).map { $0 == self } ?? false }
}
