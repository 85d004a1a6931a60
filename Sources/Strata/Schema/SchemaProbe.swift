import Foundation
import Synchronization

// Derives a schema from a Decodable type by decoding one instance from a probe that answers every
// request with a placeholder and records what was asked for: field names in the order the type
// asks for them, and the type of each. Synthesized and hand-written `init(from:)` both work,
// whatever order they decode in.
//
// Enums are the one thing a placeholder cannot fake (the raw value "" is rarely a case): an enum
// that is `CaseIterable` probes as its first case, and any other payload-free raw-value enum as
// the case whose tag is zero.

enum SchemaProbe {
    static let maxDepth = 24

    static func schema<T: Decodable>(of type: T.Type, modelName: String) throws -> ObjectSchema {
        try schemaAndPlaceholder(of: T.self, modelName: modelName).schema
    }

    /// Per probed type: the dotted paths of fields whose type is an enum naming its case by key
    /// (a payload enum), which a partial update replaces rather than merges into, and those
    /// types; and the raw-value enum fields (WireEnum), by path (`[]` an element).
    private static let caseKeyed = Mutex<[ObjectIdentifier: (paths: Set<String>, types: Set<ObjectIdentifier>, wire: [String: WireEnum])]>([:])

    /// The raw-value enum fields of `type` (WireEnum), by dotted path.
    static func wireEnums(of type: Any.Type) -> [String: WireEnum] {
        caseKeyed.withLock { $0[ObjectIdentifier(type)]?.wire } ?? [:]
    }

    /// The case-keyed field paths of `type`, found when it was last probed.
    static func caseKeyedPaths(of type: Any.Type) -> Set<String> {
        caseKeyed.withLock { $0[ObjectIdentifier(type)]?.paths } ?? []
    }

    /// Whether `valueType` (an optional unwrapped) is a case-keyed enum found in `model`.
    static func isCaseKeyed(_ valueType: Any.Type, in model: Any.Type) -> Bool {
        var type = valueType
        while let optional = type as? any OptionalValue.Type { type = optional.wrappedType }
        return caseKeyed.withLock { $0[ObjectIdentifier(model)]?.types.contains(ObjectIdentifier(type)) } ?? false
    }

    /// The schema, and the instance the probe decoded (every field a placeholder value).
    static func schemaAndPlaceholder<T: Decodable>(of type: T.Type, modelName: String) throws -> (schema: ObjectSchema, placeholder: T) {
        let probe = ProbeState(modelName: modelName)
        defer {
            let found = (paths: probe.caseKeyedPaths, types: probe.caseKeyedTypes, wire: probe.wireEnums)
            caseKeyed.withLock { $0[ObjectIdentifier(T.self)] = found }
        }
        let fieldType: FieldType
        let instance: T
        do {
            (fieldType, instance) = try probe.probe(T.self, path: [], depth: 0)
            if let failure = probe.depthFailure { throw failure }
        } catch let failure as ProbeFailure {
            throw failure.error
        }
        guard case .object(let schema) = fieldType else {
            throw StrataError.unsupportedType(
                model: modelName, field: "(model)", reason: "a model must encode as a keyed container (a struct with fields), not \(fieldType)")
        }
        return (schema, instance)
    }
}

/// Thrown through the type's `init(from:)` when probing cannot continue.
struct ProbeFailure: Error {
    let error: StrataError
    /// For a failure said again at an enclosing Foundation type: the probe's own, where it failed.
    var origin: StrataError? = nil
}

final class ProbeState {
    let modelName: String
    /// Set when probing for field names (`FieldNames`): leaves get telltale values.
    var marking: ProbeMarking?
    /// The path of a field whose key this probe's containers do not hold (`FieldNames` asks
    /// whether `init(from:)` does without it), and whether it asked for it.
    var absent: [String]?
    var askedAbsent = false
    /// Dotted paths of fields whose type is an enum naming its case by key, and those types.
    var caseKeyedPaths = Set<String>()
    var caseKeyedTypes = Set<ObjectIdentifier>()
    var wireEnums: [String: WireEnum] = [:]
    /// The first "nesting too deep" failure, kept although an `init(from:)` (or a probe run that
    /// tries a branch) may catch it: a recursive type must be refused, not stored as far as the
    /// probe went, and its branches not probed again at every level (2 branches per level made
    /// 4^24 runs).
    private(set) var depthFailure: ProbeFailure?

    init(modelName: String) { self.modelName = modelName }

    /// `fail` for nesting deeper than `SchemaProbe.maxDepth`, remembered.
    func tooDeep(_ path: [String], _ reason: String) -> ProbeFailure {
        let failure = fail(path, reason)
        if depthFailure == nil { depthFailure = failure }
        return failure
    }

    func fail(_ path: [String], _ reason: String) -> ProbeFailure {
        ProbeFailure(error: .unsupportedType(model: modelName, field: path.isEmpty ? "(model)" : dottedPath(path), reason: reason))
    }

    /// The field type of `T` and a placeholder instance of it.
    func probe<T: Decodable>(_ type: T.Type, path: [String], depth: Int) throws -> (FieldType, T) {
        do {
            return try probeType(T.self, path: path, depth: depth)
        } catch let failure as ProbeFailure {
            // A Foundation type that cannot be probed failed somewhere inside its own Codable form
            // (Locale in its LocalePreferences, DateComponents in its Calendar), which the user
            // neither wrote nor can change: said at the field, naming the type and what to store.
            // Outer Foundation types catch this again, so the outermost one is named.
            if T.self == Duration.self {
                throw ProbeFailure(
                    error: fail(
                        path,
                        "Duration is not supported as a stored field (its Codable form is two integers of different types); "
                            + "store its parts instead, duration.components.seconds and .attoseconds as Int64 fields, or a Double of seconds"
                    ).error, origin: failure.origin ?? failure.error)
            }
            guard let name = Self.foundationTypeName(T.self) else { throw failure }
            let origin = failure.origin ?? failure.error
            throw ProbeFailure(error: fail(path, Self.unsupportedFoundationType(name, failure: origin)).error, origin: origin)
        }
    }

    /// The Foundation modules whose types a model may hold, as `String(reflecting:)` prefixes them.
    private static let foundationModules = ["Foundation", "FoundationEssentials", "FoundationInternationalization"]

    /// `T`'s name without module prefixes ("Date.FormatStyle") when `T` is a Foundation type; nil
    /// for any other type. Asked only when probing failed.
    static func foundationTypeName<T>(_ type: T.Type) -> String? {
        var name = String(reflecting: T.self)
        // A type declared in an extension from another module reads
        // "(extension in FoundationInternationalization):FoundationEssentials.Date.FormatStyle".
        while let start = name.range(of: "(extension in "), let end = name[start.upperBound...].range(of: "):") {
            name.removeSubrange(start.lowerBound..<end.upperBound)
        }
        guard let module = name.split(separator: ".", maxSplits: 1).first, foundationModules.contains(String(module)) else { return nil }
        for module in foundationModules { name = name.replacingOccurrences(of: module + ".", with: "") }
        return name
    }

    /// Why Foundation type `name` cannot be a stored field, and what to store instead.
    static func unsupportedFoundationType(_ name: String, failure: StrataError) -> String {
        let advice: String
        switch name {
        case "TimeZone":
            advice = "store its identifier instead, a String (zone.identifier, e.g. \"Europe/Lisbon\"), and make it with TimeZone(identifier:)"
        case "Locale":
            advice = "store its identifier instead, a String (locale.identifier, e.g. \"pt_PT\"), and make it with Locale(identifier:)"
        case "Calendar":
            advice = "store its identifier instead, as a String or a raw-value enum (e.g. \"gregorian\"), and make it with Calendar(identifier:)"
        case "DateComponents":
            advice = "store the Date it stands for instead (Calendar.date(from:)), or the components you need as Int fields (year, month, day…)"
        case "IndexSet":
            advice = "store its integers instead, an [Int] (Array(indexSet)), and make it with IndexSet(_:)"
        case "URLComponents":
            advice =
                "store its URL instead (components.url, a URL field), or its string (components.string), and make it with URLComponents(url:resolvingAgainstBaseURL:) or URLComponents(string:)"
        case "CharacterSet":
            advice = "store the characters it holds instead, as a String, and make it with CharacterSet(charactersIn:)"
        case "IndexPath":
            advice = "store its indexes instead, an [Int] (Array(indexPath)), and make it with IndexPath(indexes:)"
        default:
            // An unexpected one: what the probe hit inside it, for a bug report or a workaround.
            var found = "\(failure)"
            if case .unsupportedType(_, let field, let reason) = failure { found = "\(field): \(reason)" }
            advice = "store the values it is made from instead (Strings, numbers, Dates), as fields of their own (inside it: \(found))"
        }
        return "\(name) is not supported as a stored field (Strata cannot derive stored fields from its Codable form); " + advice
    }

    /// `probe`'s work.
    private func probeType<T: Decodable>(_ type: T.Type, path: [String], depth: Int) throws -> (FieldType, T) {
        // Foundation types whose init(from:) stops the process on placeholder values (an empty
        // scheme, an empty bitmap) instead of throwing: refused without calling it (`probe` says why).
        if T.self == URLComponents.self || T.self == CharacterSet.self {
            throw fail(path, "\(T.self).init(from:) cannot be called on placeholder values")
        }
        if depth > SchemaProbe.maxDepth {
            throw tooDeep(path, "nesting deeper than \(SchemaProbe.maxDepth) levels (a recursive type? use Ref<M> to link objects)")
        }
        if let (fieldType, placeholder) = primitive(T.self) {
            guard let marking else { return (fieldType, placeholder) }
            let value = marking.value(T.self) ?? placeholder
            marking.record(value, at: path)
            return (fieldType, value)
        }
        if let reference = T.self as? any ReferenceType.Type {
            let keyDecoder = ProbeDecoder(state: self, path: path, depth: depth + 1)
            let value = try T(from: keyDecoder)
            return (.reference(reference.targetModelName), value)
        }
        if let (raw, value) = try enumPlaceholder(T.self, path: path) {
            if let marking {
                // An enum is told by its case. A raw-value struct (an OptionSet) is a struct to
                // the walk of the decoded instance (FieldNames), which finds its raw value inside.
                if Mirror(reflecting: value).displayStyle == .enum {
                    marking.record(value, at: path)
                    // An `init(from:)` that reads a raw value no case has as some case (a
                    // fallback for values a newer app wrote) reads another value than the
                    // record and the index hold: one more token here tells FieldNames that the
                    // property does not read what its field holds (`Table.transformed`).
                    if marking.decorated && readsUnknownRawValues(T.self) { marking.record("\u{1}fallback", at: path) }
                } else if let representable = value as? any RawRepresentable {
                    marking.record(representable.rawValue, at: path)
                }
            } else if let wire = WireEnum.of(value) {
                wireEnums[dottedPath(path)] = wire
            }
            return (.enumeration(raw), value)
        }
        if T.self is any AnyDictionary.Type && !(T.self is any StringKeyedDictionary.Type) {
            throw fail(path, "\(T.self): only dictionaries with String keys can be stored")
        }
        if T.self is any StringKeyedDictionary.Type {
            let decoder = ProbeDecoder(state: self, path: path, depth: depth + 1)
            decoder.dictionaryMode = true
            let value = try decodeReporting(T.self, from: decoder, path: path)
            guard let valueType = decoder.dictionaryValueType else { throw fail(path, "could not determine the dictionary's value type") }
            return (.dictionary(valueType), value)
        }
        var decoder = ProbeDecoder(state: self, path: path, depth: depth + 1)
        var value = try decodeReporting(T.self, from: decoder, path: path)
        if marking != nil, decoder.askedForKeys, let count = decoder.caseCount, count > 1,
            Mirror(reflecting: value).displayStyle == .enum, Mirror(reflecting: value).children.isEmpty
        {
            // FieldNames knows a payload enum's property by the telltales of its payload: with a
            // first case that has none (`case none`), it marks the first case that has one. A
            // case without a payload reads no value, so the cases passed over mark nothing.
            for index in 1..<count {
                let other = ProbeDecoder(state: self, path: path, depth: depth + 1)
                other.caseIndex = index
                guard let candidate = try? decodeReporting(T.self, from: other, path: path) else {
                    if let depthFailure { throw depthFailure }
                    continue
                }
                if !Mirror(reflecting: candidate).children.isEmpty {
                    decoder = other
                    value = candidate
                    break
                }
            }
        }
        var branched = false
        // The runs below look for fields only, which the schema probe needs and FieldNames'
        // marking probes (several per type, at every open) do not: there they are skipped (their
        // telltale values would also mark paths with values the instance here does not hold).
        if marking == nil, decoder.askedForKeys, let count = decoder.caseCount {
            // One probe per case of the keys; a field not every case reads is optional (a
            // payload enum's record holds its own case's field alone).
            var seen: [String: Int] = [:]
            for field in decoder.fields { seen[field.name, default: 0] += 1 }
            for index in 1..<max(count, 1) {
                let other = ProbeDecoder(state: self, path: path, depth: depth + 1)
                other.caseIndex = index
                _ = try decodeReporting(T.self, from: other, path: path)
                for field in other.fields { seen[field.name, default: 0] += 1 }
                decoder.merge(other)
            }
            for (name, runs) in seen where runs < count { decoder.makeOptional(name) }
            branched = true
        } else if marking == nil, let names = decoder.containsCases {
            // The type asked `contains` (answered yes for every key above): a hand-written enum
            // coder picks its case that way. Probed again with one key present at a time, a type
            // whose branches read other fields gets them all, each optional unless every run
            // reads it; a type that only skips absent fields finds nothing new and stays as is.
            var runs: [ProbeDecoder] = []
            for name in names {
                let other = ProbeDecoder(state: self, path: path, depth: depth + 1)
                other.containsOnly = name
                guard (try? decodeReporting(T.self, from: other, path: path)) != nil else {
                    if let depthFailure { throw depthFailure }
                    continue
                }
                runs.append(other)
            }
            let known = Set(decoder.fields.map(\.name))
            if runs.contains(where: { $0.fields.contains { !known.contains($0.name) } }) {
                for other in runs { decoder.merge(other) }
                for field in decoder.fields where !runs.allSatisfy({ $0.position(of: field.name) != nil }) { decoder.makeOptional(field.name) }
                branched = true
            }
        }
        // An enum that names its case by key is replaced whole by a partial update (merged key by
        // key it could hold two cases); a struct that reads whatever keys are present is merged.
        if branched && Mirror(reflecting: value).displayStyle == .enum {
            caseKeyedPaths.insert(dottedPath(path))
            caseKeyedTypes.insert(ObjectIdentifier(T.self))
        }
        switch decoder.shape {
        case .keyed where decoder.dictionaryMode:
            guard let valueType = decoder.dictionaryValueType else { throw fail(path, "could not determine the dictionary's value type") }
            return (.dictionary(valueType), value)
        case .keyed:
            return (
                .object(
                    ObjectSchema(typeName: String(describing: T.self), fields: decoder.resolvedFields())), value
            )
        case .unkeyed:
            guard let element = decoder.elementType else { throw fail(path, "could not determine the element type of \(T.self)") }
            return (.array(element), value)
        case .single:
            guard let single = decoder.singleType else { throw fail(path, "\(T.self) decodes nothing") }
            // A model is stored as its fields: one that wraps another value (even a struct) in a
            // single-value container has none of its own, and the record encoder refuses it.
            if depth == 0 && path.isEmpty {
                throw fail(
                    path,
                    "a model must encode as a keyed container (a struct with fields), not a single value (\(single)); "
                        + "decode its fields with container(keyedBy:)")
            }
            return (single, value)
        case .none:
            // A struct with no fields decodes nothing (its synthesized init(from:) asks for no
            // container): an object of no fields, as JSON has it (`{}`). A model is not one.
            guard depth == 0 && path.isEmpty else {
                return (.object(ObjectSchema(typeName: String(describing: T.self), fields: [])), value)
            }
            throw fail(path, "\(T.self) decodes nothing")
        }
    }

    private func decodeReporting<T: Decodable>(_ type: T.Type, from decoder: ProbeDecoder, path: [String]) throws -> T {
        do {
            return try T(from: decoder)
        } catch let failure as ProbeFailure {
            throw failure
        } catch {
            if decoder.askedForKeys && decoder.caseCount == nil {
                // The keys name what the value is, and they cannot be listed (not an enum of
                // cases, as an enum's synthesized keys are): no schema follows from the type.
                throw fail(
                    path,
                    "\(T.self).init(from:) reads which keys the data holds (allKeys), and its coding keys are not an enum whose cases can be listed, "
                        + "so no schema follows from the type: decode fixed keys (an enum of coding keys), or store a [String: T] dictionary")
            }
            throw fail(path, "\(T.self).init(from:) failed on placeholder values: \(error)")
        }
    }

    private func primitive<T>(_ type: T.Type) -> (FieldType, T)? {
        func make<V>(_ fieldType: FieldType, _ value: V) -> (FieldType, T)? { (value as? T).map { (fieldType, $0) } }
        switch T.self {
        case is Bool.Type: return make(.bool, false)
        case is String.Type: return make(.string, "")
        case is Double.Type: return make(.double, 0.0)
        case is Float.Type: return make(.float, Float(0))
        case is Int.Type: return make(.int(bits: 64, signed: true), 0)
        case is Int8.Type: return make(.int(bits: 8, signed: true), Int8(0))
        case is Int16.Type: return make(.int(bits: 16, signed: true), Int16(0))
        case is Int32.Type: return make(.int(bits: 32, signed: true), Int32(0))
        case is Int64.Type: return make(.int(bits: 64, signed: true), Int64(0))
        case is UInt.Type: return make(.int(bits: 64, signed: false), UInt(0))
        case is UInt8.Type: return make(.int(bits: 8, signed: false), UInt8(0))
        case is UInt16.Type: return make(.int(bits: 16, signed: false), UInt16(0))
        case is UInt32.Type: return make(.int(bits: 32, signed: false), UInt32(0))
        case is UInt64.Type: return make(.int(bits: 64, signed: false), UInt64(0))
        case is Date.Type: return make(.date, Date(timeIntervalSinceReferenceDate: 0))
        case is UUID.Type: return make(.uuid, UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)))
        case is Data.Type: return make(.data, Data())
        case is Decimal.Type: return make(.decimal, Decimal(0))
        case is URL.Type: return URL(string: "strata:probe").flatMap { make(.url, $0) }
        default: return nil
        }
    }

    /// A placeholder case of a raw-value enum, and the raw value's stored type.
    private func enumPlaceholder<T>(_ type: T.Type, path: [String]) throws -> (FieldType, T)? {
        guard ProbeState.storesRawValue(T.self), let raw = T.self as? any RawRepresentable.Type else { return nil }
        let rawType = try rawFieldType(raw, path: path)
        if let iterable = T.self as? any CaseIterable.Type, let first = firstCase(iterable) as? T {
            if let marking, marking.enumBit(), let second = secondCase(iterable) as? T { return (rawType, second) }
            return (rawType, first)
        }
        // (Checked again here, where a value is made from bytes.)
        if _isPOD(T.self) && !(T.self is AnyClass) && MemoryLayout<T>.size <= 8 {
            // A raw-value struct (an OptionSet) takes any raw value: when marking, a telltale one,
            // so that FieldNames can tell which property it is.
            if let marking, let value = telltale(raw, marking) as? T, Mirror(reflecting: value).displayStyle != .enum { return (rawType, value) }
            // A payload-free enum is a bare tag; all-zero bytes are its first case.
            let storage = UnsafeMutableRawPointer.allocate(byteCount: max(MemoryLayout<T>.size, 1), alignment: max(MemoryLayout<T>.alignment, 1))
            defer { storage.deallocate() }
            storage.initializeMemory(as: UInt8.self, repeating: 0, count: max(MemoryLayout<T>.size, 1))
            let first = storage.load(as: T.self)
            // When marking, tag 1 (its second case) where this leaf's bit says so, as a Bool or a
            // CaseIterable enum is marked: two properties of one such enum type are then told
            // apart (a shared first case let the same-name rule map a property to another's
            // renamed field). A payload-free enum of one or two bytes has at least two cases,
            // tagged from 0 in declaration order; one of a single case takes no byte.
            let mirror = Mirror(reflecting: first)
            if let marking, MemoryLayout<T>.size == 1 || MemoryLayout<T>.size == 2, mirror.displayStyle == .enum, mirror.children.isEmpty,
                marking.enumBit()
            {
                storage.storeBytes(of: 1, as: UInt8.self)
                return (rawType, storage.load(as: T.self))
            }
            return (rawType, first)
        }
        return nil
    }

    /// Whether values of `T` are stored as their raw value: a raw-value enum that lists its cases,
    /// or any raw-value type of at most 8 bytes of plain data (a payload-free enum, an option set),
    /// whose placeholder the probe can make from its bytes. Other raw-value types are stored by
    /// their `Codable` form.
    static func storesRawValue<T>(_ type: T.Type) -> Bool {
        guard T.self is any RawRepresentable.Type else { return false }
        if let iterable = T.self as? any CaseIterable.Type, hasCases(iterable) { return true }
        return _isPOD(T.self) && !(T.self is AnyClass) && MemoryLayout<T>.size <= 8
    }

    private static func hasCases<C: CaseIterable>(_ type: C.Type) -> Bool { !C.allCases.isEmpty }

    /// Whether `T.init(from:)` gives a case for a raw value that is not that case's own (a
    /// decorated or a largest telltale, which a case may have, but hardly both).
    private func readsUnknownRawValues<T: Decodable>(_ type: T.Type) -> Bool {
        [ProbeMarking.Variant.decorated, .large].contains { variant in
            let trial = ProbeState(modelName: modelName)
            let marking = ProbeMarking(run: 0, variant: variant)
            trial.marking = marking
            guard let value = try? T(from: ProbeDecoder(state: trial, path: [], depth: 1)), let raw = value as? any RawRepresentable,
                let token = FieldNames.token(raw.rawValue)
            else { return false }
            return marking.tokens[""]?.contains(token) != true
        }
    }

    /// A value made from the marking's next telltale raw value; nil when `R` has no such value.
    private func telltale<R: RawRepresentable>(_ type: R.Type, _ marking: ProbeMarking) -> R? {
        marking.value(R.RawValue.self).flatMap { R(rawValue: $0) }
    }

    private func firstCase<C: CaseIterable>(_ type: C.Type) -> Any? { C.allCases.first }
    private func secondCase<C: CaseIterable>(_ type: C.Type) -> Any? { C.allCases.dropFirst().first }

    private func rawFieldType<R: RawRepresentable>(_ type: R.Type, path: [String]) throws -> FieldType {
        guard let (fieldType, _) = primitive(R.RawValue.self) else {
            throw fail(path, "enum \(R.self) has raw type \(R.RawValue.self), which is not a stored primitive")
        }
        return fieldType
    }
}

/// Dictionaries with String keys encode as keyed containers; the probe and the coders must tell
/// them apart from nested structs.
protocol StringKeyedDictionary {}
extension Dictionary: StringKeyedDictionary where Key == String {}
protocol AnyDictionary {}
extension Dictionary: AnyDictionary {}

final class ProbeDecoder: Decoder {
    enum Shape { case none, keyed, unkeyed, single }

    let state: ProbeState
    let path: [String]
    let depth: Int
    var shape: Shape = .none
    /// The fields asked for, in order, each once (`addField`, `removeField` keep `positions`).
    private(set) var fields: [(name: String, type: FieldType)] = []
    /// Where each name is in `fields`: a model with thousands of fields (a hand-written coder
    /// with computed keys) was probed in quadratic time by searching `fields` for every key,
    /// 16 s to open one of 4,000 Int fields in a debug build.
    private var positions: [String: Int] = [:]
    var elementType: FieldType?
    var singleType: FieldType?
    var dictionaryMode = false
    var dictionaryValueType: FieldType?
    /// Decoders of the keyed containers nested under a key (`nestedContainer(keyedBy:forKey:)`), by
    /// field name: their fields are known only after the type's `init(from:)` has returned.
    var nested: [String: ProbeDecoder] = [:]
    /// The type asked its keyed container which keys the data holds (outside a dictionary): the
    /// `Codable` Swift synthesizes for an enum with associated values does, to learn the case.
    var askedForKeys = false
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(state: ProbeState, path: [String], depth: Int) {
        self.state = state
        self.path = path
        self.depth = depth
    }

    func record(_ name: String, _ type: FieldType) {
        if let i = positions[name] {
            // Asked twice (decodeNil then decode): keep the optional-ness learnt first.
            if case .optional = fields[i].type, !type.isOptional { fields[i].type = .optional(type) } else { fields[i].type = type }
        } else {
            addField(name, type)
        }
    }

    /// The position of field `name` in `fields`, if it was asked for.
    func position(of name: String) -> Int? { positions[name] }

    /// Sets the type of the field at `position`.
    func setType(_ type: FieldType, at position: Int) { fields[position].type = type }

    /// The fields asked for, a nested container's as the struct it is stored as.
    func resolvedFields() -> [FieldSchema] {
        fields.enumerated().map { i, field in
            guard let child = nested[field.name] else { return FieldSchema(name: field.name, id: i, type: field.type) }
            let object = FieldType.object(ObjectSchema(typeName: child.nestedTypeName, fields: child.resolvedFields()))
            return FieldSchema(name: field.name, id: i, type: optionalNested.contains(field.name) ? .optional(object) : object)
        }
    }

    /// For a nested container's decoder: the coding-key type it was asked with, as its type's name.
    var nestedTypeName = ""
    /// Nested containers whose key the type first asked about with `decodeNil(forKey:)`: optional.
    var optionalNested = Set<String>()
    /// Which of its coding keys' cases `allKeys` answers with (a payload enum is probed once per
    /// case), and how many cases there are (nil until asked, or when the keys cannot be listed).
    var caseIndex = 0
    var caseCount: Int?
    /// The names of the keys the type asked `contains` about, when they are an enum's cases.
    var containsCases: [String]?
    /// Set for a probe run in which `contains` says yes for this key alone.
    var containsOnly: String?
    /// Keys the type asked `contains` about: a nested container under one may be absent.
    var askedContains = Set<String>()

    /// Adds the fields another probe of the same type found (another case of a payload enum).
    func merge(_ other: ProbeDecoder) {
        for field in other.fields where position(of: field.name) == nil {
            addField(field.name, field.type)
            if let child = other.nested[field.name] { nested[field.name] = child }
            if other.optionalNested.contains(field.name) { optionalNested.insert(field.name) }
        }
    }

    /// Makes field `name` optional (a case of a payload enum, absent from the other cases' records).
    func makeOptional(_ name: String) {
        guard let i = position(of: name) else { return }
        if nested[name] != nil {
            optionalNested.insert(name)
        } else if !fields[i].type.isOptional {
            fields[i].type = .optional(fields[i].type)
        }
    }

    /// Appends a field not asked for before.
    func addField(_ name: String, _ type: FieldType) {
        positions[name] = fields.count
        fields.append((name, type))
    }

    /// Removes field `name`, if it was asked for; the fields after it move up.
    func removeField(_ name: String) {
        guard let i = positions.removeValue(forKey: name) else { return }
        fields.remove(at: i)
        for j in i..<fields.count { positions[fields[j].name] = j }
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        // A type that hands its decoder on to a dictionary's `init(from:)` (a wrapper that does
        // not go through a single-value container) is stored as that dictionary: the standard
        // library reads a `[String: V]` through a keyed container of this key type.
        if shape == .none, !dictionaryMode, !path.isEmpty, String(reflecting: Key.self) == "Swift._DictionaryCodingKey" { dictionaryMode = true }
        shape = .keyed
        return KeyedDecodingContainer(ProbeKeyedContainer<Key>(decoder: self))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        shape = .unkeyed
        return ProbeUnkeyedContainer(decoder: self)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        shape = .single
        return ProbeSingleValueContainer(decoder: self)
    }
}

struct ProbeKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let decoder: ProbeDecoder
    var codingPath: [any CodingKey] { [] }

    var allKeys: [Key] {
        // Only dictionaries enumerate keys; one placeholder key reveals the value type.
        if decoder.dictionaryMode, let key = Key(stringValue: "k") { return [key] }
        // A type that learns what it holds from the keys present (the Codable of an enum with
        // associated values names its case this way): one case per probe, each probed in turn.
        decoder.askedForKeys = true
        guard let cases = CodingKeyCases.cases(of: Key.self), decoder.caseIndex < cases.count else { return [] }
        decoder.caseCount = cases.count
        return [cases[decoder.caseIndex]]
    }

    /// Whether `key` is the field `ProbeState.absent` leaves out (noting that it was asked).
    private func isAbsent(_ key: Key) -> Bool {
        guard let absent = decoder.state.absent, !decoder.dictionaryMode, decoder.path.count + 1 == absent.count,
            key.stringValue == absent.last, decoder.path.elementsEqual(absent.dropLast())
        else { return false }
        decoder.state.askedAbsent = true
        return true
    }

    /// What JSONDecoder throws for a key the container does not hold.
    private func notFound(_ key: Key) -> DecodingError {
        .keyNotFound(key, DecodingError.Context(codingPath: [], debugDescription: "No value associated with key \(key.stringValue)"))
    }

    func contains(_ key: Key) -> Bool {
        if decoder.dictionaryMode { return true }
        if isAbsent(key) { return false }
        decoder.askedContains.insert(key.stringValue)
        if let only = decoder.containsOnly { return key.stringValue == only }
        if decoder.containsCases == nil { decoder.containsCases = CodingKeyCases.cases(of: Key.self)?.map(\.stringValue) }
        return true
    }

    func decodeNil(forKey key: Key) throws -> Bool {
        if isAbsent(key) { throw notFound(key) }
        if !decoder.dictionaryMode, decoder.position(of: key.stringValue) == nil {
            decoder.addField(key.stringValue, .optional(.bool))  // type filled in by the decode that follows
        }
        return false
    }

    /// Where a value decoded under `key` sits: a field, or (for a dictionary) any value of it.
    private func path(_ key: Key) -> [String] { decoder.path + [decoder.dictionaryMode ? "[key]" : key.stringValue] }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        if isAbsent(key) { throw notFound(key) }
        if decoder.nested[key.stringValue] != nil {
            throw decoder.state.fail(path(key), "\(key.stringValue) is read both as a value and as a nested container")
        }
        let (fieldType, value) = try decoder.state.probe(T.self, path: path(key), depth: decoder.depth)
        if decoder.dictionaryMode {
            decoder.dictionaryValueType = fieldType
        } else if let i = decoder.position(of: key.stringValue), case .optional = decoder.fields[i].type {
            decoder.setType(fieldType.isOptional ? fieldType : .optional(fieldType), at: i)
        } else {
            decoder.record(key.stringValue, fieldType)
        }
        return value
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        if isAbsent(key) { return nil }
        if decoder.nested[key.stringValue] != nil {
            throw decoder.state.fail(path(key), "\(key.stringValue) is read both as a value and as a nested container")
        }
        let (fieldType, value) = try decoder.state.probe(T.self, path: path(key), depth: decoder.depth)
        if decoder.dictionaryMode {
            decoder.dictionaryValueType = .optional(fieldType)
        } else {
            decoder.removeField(key.stringValue)
            decoder.addField(key.stringValue, fieldType.isOptional ? fieldType : .optional(fieldType))
        }
        return value
    }

    /// A keyed container nested under `key` is stored as a nested struct would be: a field of
    /// object type, whose fields are what the type decodes from the container.
    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        if isAbsent(key) { throw notFound(key) }
        let name = key.stringValue
        if decoder.dictionaryMode {
            throw decoder.state.fail(path(key), "nested containers inside a dictionary are not supported; decode a nested struct instead")
        }
        if decoder.depth + 1 > SchemaProbe.maxDepth {
            throw decoder.state.tooDeep(path(key), "nesting deeper than \(SchemaProbe.maxDepth) levels (a recursive type? use Ref<M> to link objects)")
        }
        let child: ProbeDecoder
        if let known = decoder.nested[name] {
            child = known
        } else {
            child = ProbeDecoder(state: decoder.state, path: path(key), depth: decoder.depth + 1)
            child.shape = .keyed
            child.nestedTypeName = String(describing: NestedKey.self)
            let placeholder = FieldType.object(ObjectSchema(typeName: child.nestedTypeName, fields: []))
            if let i = decoder.position(of: name) {
                // Asked `decodeNil(forKey:)` first (which records a Bool? to be refined): a
                // container that may be absent. Read as a value too, it is a type error.
                guard decoder.fields[i].type == .optional(.bool) else {
                    throw decoder.state.fail(path(key), "\(name) is read both as a value and as a nested container")
                }
                decoder.optionalNested.insert(name)
                decoder.setType(.optional(placeholder), at: i)
            } else if decoder.askedContains.contains(name) {
                // Asked `contains` first: a container the type reads only when present.
                decoder.optionalNested.insert(name)
                decoder.addField(name, .optional(placeholder))
            } else {
                decoder.addField(name, placeholder)
            }
            decoder.nested[name] = child
        }
        return KeyedDecodingContainer(ProbeKeyedContainer<NestedKey>(decoder: child))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        throw decoder.state.fail(decoder.path + [key.stringValue], "nested containers inside init(from:) are not supported; decode an array instead")
    }

    // 128-bit integers: stored integers are 64 bits (FORMAT.md), so the field is refused here
    // with a reason, not by the standard library's "has not implemented support" default.
    func decode(_ type: Int128.Type, forKey key: Key) throws -> Int128 { throw decoder.state.fail(path(key), unsupported128(type)) }
    func decode(_ type: UInt128.Type, forKey key: Key) throws -> UInt128 { throw decoder.state.fail(path(key), unsupported128(type)) }
    func decodeIfPresent(_ type: Int128.Type, forKey key: Key) throws -> Int128? { throw decoder.state.fail(path(key), unsupported128(type)) }
    func decodeIfPresent(_ type: UInt128.Type, forKey key: Key) throws -> UInt128? { throw decoder.state.fail(path(key), unsupported128(type)) }

    func superDecoder() throws -> any Decoder { throw decoder.state.fail(decoder.path, "superDecoder is not supported") }
    func superDecoder(forKey key: Key) throws -> any Decoder { throw decoder.state.fail(decoder.path, "superDecoder is not supported") }
}

struct ProbeUnkeyedContainer: UnkeyedDecodingContainer {
    let decoder: ProbeDecoder
    var codingPath: [any CodingKey] { [] }
    var count: Int? { 1 }
    var currentIndex = 0
    var isAtEnd: Bool { currentIndex >= 1 }
    private var sawNil = false

    init(decoder: ProbeDecoder) { self.decoder = decoder }

    mutating func decodeNil() throws -> Bool {
        sawNil = true
        return false
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let (fieldType, value) = try decoder.state.probe(T.self, path: decoder.path + ["[]"], depth: decoder.depth)
        let element = sawNil && !fieldType.isOptional ? FieldType.optional(fieldType) : fieldType
        // An array is stored as elements of one type. A type that writes a tuple (a label and a
        // count; Duration's two halves, Int64 and UInt64) would open, then fail every write:
        // refused here instead, saying what it decodes.
        if let earlier = decoder.elementType, earlier != element {
            guard earlier.unwrapped == element.unwrapped else {
                throw decoder.state.fail(
                    decoder.path,
                    "its Codable form is a list of values of different types (\(earlier), then \(element)), and Strata stores a list as values of one type; "
                        + "encode them in a keyed container (a struct with fields), or store them as fields of their own")
            }
        }
        // (An element read as optional before keeps the array's elements optional.)
        if !(decoder.elementType?.isOptional ?? false) { decoder.elementType = element }
        currentIndex += 1
        return value
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        throw decoder.state.fail(decoder.path, "nested containers inside arrays are not supported")
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw decoder.state.fail(decoder.path, "nested containers inside arrays are not supported")
    }
    mutating func superDecoder() throws -> any Decoder { throw decoder.state.fail(decoder.path, "superDecoder is not supported") }

    mutating func decode(_ type: Int128.Type) throws -> Int128 { throw decoder.state.fail(decoder.path + ["[]"], unsupported128(type)) }
    mutating func decode(_ type: UInt128.Type) throws -> UInt128 { throw decoder.state.fail(decoder.path + ["[]"], unsupported128(type)) }
    mutating func decodeIfPresent(_ type: Int128.Type) throws -> Int128? { throw decoder.state.fail(decoder.path + ["[]"], unsupported128(type)) }
    mutating func decodeIfPresent(_ type: UInt128.Type) throws -> UInt128? { throw decoder.state.fail(decoder.path + ["[]"], unsupported128(type)) }
}

struct ProbeSingleValueContainer: SingleValueDecodingContainer {
    let decoder: ProbeDecoder
    var codingPath: [any CodingKey] { [] }

    init(decoder: ProbeDecoder) { self.decoder = decoder }

    func decodeNil() -> Bool {
        decoder.singleType = .optional(.bool)  // replaced by the decode that follows
        return false
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let (fieldType, value) = try decoder.state.probe(T.self, path: decoder.path, depth: decoder.depth)
        if case .optional = decoder.singleType, !fieldType.isOptional {
            decoder.singleType = .optional(fieldType)
        } else {
            decoder.singleType = fieldType
        }
        return value
    }

    func decode(_ type: Int128.Type) throws -> Int128 { throw decoder.state.fail(decoder.path, unsupported128(type)) }
    func decode(_ type: UInt128.Type) throws -> UInt128 { throw decoder.state.fail(decoder.path, unsupported128(type)) }
}

/// Why a 128-bit integer field is refused.
private func unsupported128(_ type: Any.Type) -> String {
    "\(type) is not supported (stored integers have at most 64 bits); store it as a String or Data, or as two 64-bit fields"
}

/// The cases of a coding-key type that is an enum without payloads (as Swift synthesizes for
/// `CodingKeys` and for a payload enum's case keys), in declaration order; nil for any other key
/// type. Such an enum is a bare tag: no bytes for one case, else one byte holding the case's
/// index, whose unused values are its spare bit patterns, the first of them (the case count) being
/// `Optional.none`'s. Each case built from its tag is checked to name itself.
enum CodingKeyCases {
    /// The case count of each key type looked at, nil for one that is not such an enum: checking
    /// that every case names itself costs a `Key(stringValue:)` per case, itself a comparison per
    /// case, and the probe asks again for every case of a payload enum (a 300-case enum took
    /// seconds to open a database with).
    private static let counts = Mutex<[ObjectIdentifier: Int?]>([:])

    static func cases<Key: CodingKey>(of type: Key.Type) -> [Key]? {
        let id = ObjectIdentifier(Key.self)
        let count: Int?
        if let known = counts.withLock({ $0[id] }) {
            count = known
        } else {
            count = checkedCount(of: Key.self)
            counts.withLock { $0[id] = count }
        }
        guard let count else { return nil }
        return (0..<count).map { key(tag: $0) }
    }

    /// The key whose tag is `tag`.
    private static func key<Key: CodingKey>(tag: Int) -> Key {
        withUnsafeBytes(of: UInt16(tag).littleEndian) { $0.load(as: Key.self) }
    }

    /// The number of cases of `Key`, each checked to name itself; nil for a key type that is not
    /// an enum of payload-free cases.
    private static func checkedCount<Key: CodingKey>(of type: Key.Type) -> Int? {
        guard _isPOD(Key.self), !(Key.self is AnyClass) else { return nil }
        let count: Int
        switch MemoryLayout<Key>.size {
        case 0:
            count = 1
        case 1:
            // Every byte value taken (no spare pattern for nil): 256 cases.
            count = MemoryLayout<Key?>.size == 1 ? withUnsafeBytes(of: Key?.none) { Int($0[0]) } : 256
        case 2:
            // 256 cases or more: a two-byte tag, little-endian on every platform Swift runs on.
            guard MemoryLayout<Key?>.size == 2 else { return nil }
            count = withUnsafeBytes(of: Key?.none) { Int($0[0]) | Int($0[1]) << 8 }
        default:
            return nil
        }
        guard count >= 1 else { return nil }
        var names = Set<String>()
        for tag in 0..<count {
            let key: Key = key(tag: tag)
            let name = key.stringValue
            guard let again = Key(stringValue: name), bytes(of: again) == bytes(of: key), names.insert(name).inserted else { return nil }
        }
        return count
    }

    private static func bytes<Key>(of key: Key) -> [UInt8] { withUnsafeBytes(of: key) { Array($0) } }
}
