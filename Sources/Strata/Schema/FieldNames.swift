import Foundation
import Synchronization

// Which stored field a key path reads. A key path names Swift properties (`\Message.roomId`); a
// record stores fields under their coding keys (`case roomId = "rid"`), and only the type's own
// `init(from:)` knows which is which. So the type is decoded a few times from the schema probe
// with a telltale value in every leaf (a distinct number, string, date… per leaf; for Bools and
// enums, one bit of the leaf's number per run), the probe noting which stored path received which
// value, and the resulting instances are read back property by property through `Mirror`: a
// property holding exactly the values a stored field received is that field. Nested structs,
// optionals, arrays and hand-written `init(from:)` in any order work the same way. The table is
// built once per type.

/// Marks the leaves of one probing run (see `FieldNames`).
final class ProbeMarking {
    /// Runs give Bools and enums one bit of their leaf number each: runs 0-6 the bit itself, runs
    /// 7-13 its complement. With only the bits, `a || b` held leaf b's values in every run where
    /// a's bits are a subset of b's (leaves 2 and 3), and was taken for b's field; with both, only
    /// a leaf's own field holds its values in every run.
    static let runs = 14
    static let bits = 7

    /// This run's bit of leaf number `n`.
    private func bit(_ n: Int) -> Bool {
        run < Self.bits ? (n >> run) & 1 == 1 : (n >> (run - Self.bits)) & 1 == 0
    }
    let run: Int

    /// Telltales an `init(from:)` that normalizes what it reads would change (see
    /// `Table.transformed`); strings and numbers differ, other leaves are the plain ones.
    enum Variant: CaseIterable {
        /// Distinct per leaf, to tell fields apart.
        case plain
        /// Strings with spaces around them and letters in both cases, negative numbers with
        /// many fractional digits.
        case decorated
        /// Empty strings and zeros.
        case blank
        /// Long strings and each type's largest numbers.
        case large
    }

    let variant: Variant
    /// For a blank run: blank only the leaves whose bit `bit` is `set` (nil: every leaf), the
    /// others plain. A property that reads one field, or another where the first is empty
    /// (`nick.isEmpty ? fullName : nick`), held the first's blank in a run that blanks both.
    let blankLeaves: (bit: Int, set: Bool)?
    var decorated: Bool { variant == .decorated }
    private var leaf = 0
    /// Stored path (dotted, cut before any array element or dictionary value) → tokens beneath.
    private(set) var tokens: [String: Set<String>] = [:]

    init(run: Int, variant: Variant = .plain, blankLeaves: (bit: Int, set: Bool)? = nil) {
        self.run = run
        self.blankLeaves = blankLeaves
        self.variant = variant
    }

    /// The next leaf's telltale value of a primitive type (nil: keep the placeholder).
    func value<T>(_ type: T.Type) -> T? {
        leaf += 1
        let n = leaf
        let bit = bit(n)
        if let value = variantValue(T.self, n) { return value }
        let sign = decorated ? -1 : 1
        let fraction = decorated ? 0.123456789 : 0.5
        let value: Any?
        switch T.self {
        case is Bool.Type: value = bit
        case is String.Type: value = decorated ? " \u{1}Ab\(n) " : "\u{1}\(n)"
        case is Double.Type: value = Double(sign) * (Double(n) + fraction)
        case is Float.Type: value = Float(sign) * (Float(n) + Float(fraction))
        case is Int.Type: value = sign * n
        case is Int8.Type: value = Int8(sign * (n % 127))
        case is Int16.Type: value = Int16(truncatingIfNeeded: sign * n)
        case is Int32.Type: value = Int32(truncatingIfNeeded: sign * n)
        case is Int64.Type: value = Int64(sign * n)
        case is UInt.Type: value = UInt(n)
        case is UInt8.Type: value = UInt8(n % 255)
        case is UInt16.Type: value = UInt16(truncatingIfNeeded: n)
        case is UInt32.Type: value = UInt32(truncatingIfNeeded: n)
        case is UInt64.Type: value = UInt64(n)
        // (Negative when decorated, as numbers are: the later of two dates is another leaf.)
        case is Date.Type: value = Date(timeIntervalSinceReferenceDate: Double(sign) * (Double(n) + fraction))
        case is UUID.Type:
            var bytes = [UInt8](repeating: 0, count: 16)
            bytes[15] = UInt8(truncatingIfNeeded: n)
            bytes[14] = UInt8(truncatingIfNeeded: n >> 8)
            value = UUID(
                uuid: (
                    bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                    bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
                ))
        case is Data.Type: value = Data("\u{1}\(n)".utf8)
        case is Decimal.Type: value = decorated ? -(Decimal(n) + Decimal(123_456_789) / Decimal(1_000_000_000)) : Decimal(n)
        case is URL.Type: value = URL(string: "strata:probe/\(n)")
        default: value = nil
        }
        return value as? T
    }

    /// The telltale of a blank or large run, for strings and numbers.
    private func variantValue<T>(_ type: T.Type, _ n: Int) -> T? {
        func pick<V>(_ blank: V, _ large: V) -> T? { (variant == .blank ? blank : large) as? T }
        guard variant == .blank || variant == .large else { return nil }
        if variant == .blank, let blankLeaves, ((n >> blankLeaves.bit) & 1 == 1) != blankLeaves.set { return nil }
        switch T.self {
        case is String.Type: return pick("", String(repeating: "\u{1}\(n)", count: 200))
        case is Double.Type: return pick(0.0, Double.greatestFiniteMagnitude)
        case is Float.Type: return pick(Float(0), Float.greatestFiniteMagnitude)
        case is Int.Type: return pick(0, Int.max)
        case is Int8.Type: return pick(Int8(0), Int8.max)
        case is Int16.Type: return pick(Int16(0), Int16.max)
        case is Int32.Type: return pick(Int32(0), Int32.max)
        case is Int64.Type: return pick(Int64(0), Int64.max)
        case is UInt.Type: return pick(UInt(0), UInt.max)
        case is UInt8.Type: return pick(UInt8(0), UInt8.max)
        case is UInt16.Type: return pick(UInt16(0), UInt16.max)
        case is UInt32.Type: return pick(UInt32(0), UInt32.max)
        case is UInt64.Type: return pick(UInt64(0), UInt64.max)
        case is Decimal.Type: return pick(Decimal(0), Decimal.greatestFiniteMagnitude)
        default: return nil
        }
    }

    /// For an enum leaf: whether to take its second case this run.
    func enumBit() -> Bool {
        leaf += 1
        return bit(leaf)
    }

    func record(_ value: Any, at path: [String]) {
        guard let token = FieldNames.token(value) else { return }
        var prefix = ""
        tokens["", default: []].insert(token)
        for component in path {
            if component.hasPrefix("[") { break }  // inside an array or dictionary: no key path reaches it
            prefix = prefix.isEmpty ? component : prefix + "." + component
            tokens[prefix, default: []].insert(token)
        }
    }
}

/// A key path as a cache key. `@unchecked Sendable`: key path objects are immutable once made
/// (their components, equality and hash never change), so sharing one across threads is safe
/// whatever the sendability of its root type, which is all the compiler cannot see.
private struct SharedKeyPath: Hashable, @unchecked Sendable {
    let keyPath: AnyKeyPath
}

enum FieldNames {
    /// What probing a type tells about its properties.
    struct Table {
        /// Property path → stored path.
        var stored: [String: String] = [:]
        /// Property paths whose value a stored nil does not give: the property is not optional,
        /// but `init(from:)` reads its field (or a struct holding it) with `decodeIfPresent`, or
        /// does without its key, and puts a value of its own where the record has none (`?? 3`).
        var defaulted: Set<String> = []
        /// Property paths whose value is not the one their stored field holds: `init(from:)`
        /// normalizes it (`.lowercased()`, trimming, `max(0, …)`, `isEmpty ? "Untitled" : s`),
        /// so the record, its index entries and sort keys do not say what the property reads.
        /// Found by runs with unusual telltales (`ProbeMarking.Variant`); a type whose
        /// `init(from:)` rejects those is taken at its word.
        var transformed: Set<String> = []
    }

    /// The table per type; nil when the type could not be probed.
    private static let tables = Mutex<[ObjectIdentifier: Table?]>([:])
    private static let paths = Mutex<[SharedKeyPath: String?]>([:])
    private static let queryPaths = Mutex<[SharedKeyPath: String?]>([:])

    /// `queryPaths` by key path object: a key path literal is instantiated once and handed out
    /// again on every evaluation, so most lookups (every planned query's sort and predicate
    /// fields) find the very object, without hashing and comparing its components (~700
    /// instructions). Each entry holds its key path, so that no other key path can take its
    /// identity; bounded, as key paths built at run time are new objects each time.
    private static let queryPathsByObject = Mutex<[ObjectIdentifier: (keyPath: SharedKeyPath, path: String?)]>([:])
    private static let queryPathsByObjectLimit = 4_096

    /// The stored (coding-key) path a key path reads, e.g. `\Message.roomId` → "rid",
    /// `\Message.author?.name` → "author.name"; nil when it reads no stored field (a computed
    /// property, a subscript). The primary key of a model whose `id` is computed is "#id".
    static func storedPath<Root>(of keyPath: PartialKeyPath<Root>) -> String? {
        let key = SharedKeyPath(keyPath: keyPath)
        if let known = paths.withLock({ $0[key] }) { return known }
        let resolved = resolve(keyPath)
        paths.withLock { $0[key] = resolved }
        return resolved
    }

    /// The stored path a query may read for a key path in place of the property: `storedPath(of:)`,
    /// except nil (evaluate on decoded objects) when the property's value is not what the record
    /// holds: where the record holds nothing, a default `init(from:)` supplies (`Table.defaulted`):
    /// objects written before the field existed read the default, and their records, index
    /// entries and sort keys say nil; or where `init(from:)` normalizes the value it reads
    /// (`Table.transformed`).
    static func queryPath<Root>(of keyPath: PartialKeyPath<Root>) -> String? {
        let object = ObjectIdentifier(keyPath)
        if let known = queryPathsByObject.withLock({ $0[object] }) { return known.path }
        let key = SharedKeyPath(keyPath: keyPath)
        if let known = queryPaths.withLock({ $0[key] }) {
            rememberByObject(key, known)
            return known
        }
        var resolved = storedPath(of: keyPath)
        if resolved != nil, let property = propertyPath(of: keyPath), let decodable = Root.self as? any Decodable.Type,
            let table = table(for: decodable)
        {
            var prefix = ""
            for part in property.split(separator: ".") {
                prefix = prefix.isEmpty ? String(part) : prefix + "." + part
                if table.defaulted.contains(prefix) || table.transformed.contains(prefix) { resolved = nil }
            }
        }
        queryPaths.withLock { $0[key] = resolved }
        rememberByObject(key, resolved)
        return resolved
    }

    private static func rememberByObject(_ key: SharedKeyPath, _ path: String?) {
        queryPathsByObject.withLock { known in
            if known.count < queryPathsByObjectLimit { known[ObjectIdentifier(key.keyPath)] = (key, path) }
        }
    }

    private static func resolve<Root>(_ keyPath: PartialKeyPath<Root>) -> String? {
        guard let property = propertyPath(of: keyPath) else { return nil }
        guard let decodable = Root.self as? any Decodable.Type, let table = table(for: decodable) else {
            return property  // not probed: the names are the best guess
        }
        if let stored = table.stored[property] { return stored }
        // `id` on an Identifiable type is the identity whether stored or computed.
        if property == "id", Root.self is any Identifiable.Type { return primaryKeyPath }
        return nil
    }

    /// The path conditions use for a primary key that is not a stored field.
    static let primaryKeyPath = "#id"

    /// The stored path of a model's `id` property, or `primaryKeyPath` when it is computed. (A
    /// key path to `id` formed in generic code reaches it through the protocol and does not
    /// describe itself by name, so this asks by the property's name.)
    static func keyPath<M: Model>(of type: M.Type) -> String {
        guard let table = table(for: M.self) else { return "id" }
        return table.stored["id"] ?? primaryKeyPath
    }

    /// The dotted property names of a key path: `\Person.address?.city` → "address.city".
    static func propertyPath<Root>(of keyPath: PartialKeyPath<Root>) -> String? {
        let description = String(describing: keyPath)  // "\Person.address?.city?"
        let root = "\\\(Root.self)."
        let tail: Substring
        if description.hasPrefix(root) {
            tail = description.dropFirst(root.count)
        } else {
            guard description.hasPrefix("\\"), let dot = description.firstIndex(of: ".") else { return nil }
            tail = description[description.index(after: dot)...]
        }
        let path = tail.replacingOccurrences(of: "?", with: "").replacingOccurrences(of: "!", with: "")
        if path.isEmpty || path.contains("(") || path.contains("[") { return nil }
        return path
    }

    /// The stored paths of `type`'s fields that `init(from:)` reads a value for where the record
    /// holds none (`Table.defaulted`): a record may lack them, as an `encode(to:)` that skips a
    /// default leaves them.
    static func defaultedStoredPaths(of type: any Decodable.Type) -> Set<String> {
        guard let table = table(for: type) else { return [] }
        return Set(table.defaulted.compactMap { table.stored[$0] })
    }

    private static func table(for type: any Decodable.Type) -> Table? {
        let id = ObjectIdentifier(type)
        if let known = tables.withLock({ $0[id] }) { return known }
        let built = build(type)
        tables.withLock { $0[id] = built }
        return built
    }

    private static func build<T: Decodable>(_ type: T.Type) -> Table? {
        var stored: [[String: Set<String>]] = []
        var properties: [[String: Set<String>]] = []
        var schema: ObjectSchema?
        var optionalProperties = Set<String>()
        var leafProperties = Set<String>()
        var propertyTypes: [String: String] = [:]
        for run in 0..<ProbeMarking.runs {
            let marking = ProbeMarking(run: run)
            let state = ProbeState(modelName: String(describing: T.self))
            state.marking = marking
            guard let (fieldType, instance) = try? state.probe(T.self, path: [], depth: 0) else { return nil }
            if case .object(let object) = fieldType { schema = object }
            stored.append(marking.tokens)
            var found: [String: Set<String>] = [:]
            _ = walk(
                instance, path: "", record: true, into: &found, optionals: &optionalProperties, leaves: &leafProperties, types: &propertyTypes)
            properties.append(found)
        }
        guard let first = properties.first else { return nil }
        // Whether the stored field at `path` can hold `property`: a single value is not stored as
        // an object (the one property read from a keyed container nested under a key has the
        // container's telltales, but its field is deeper), and a struct or an enum is stored as
        // an object of its own type, not as such a container or its case's object.
        func canHold(_ property: String, _ path: String) -> Bool {
            guard case .object(let object)? = schema?.type(atPath: path)?.unwrapped else { return true }
            if leafProperties.contains(property) { return false }
            return propertyTypes[property].map { $0 == object.typeName } ?? true
        }
        var table = Table()
        for property in first.keys {
            let depth = property.split(separator: ".").count
            let candidates = stored[0].keys.filter { path in
                // Cheapest test first: this runs for every property and stored path.
                !path.isEmpty && path.split(separator: ".").count == depth
                    && (0..<ProbeMarking.runs).allSatisfy { run in
                        guard let mine = properties[run][property], !mine.isEmpty else { return false }
                        return stored[run][path] == mine
                    } && canHold(property, path)
            }
            if candidates.count == 1 {
                table.stored[property] = candidates[0]
            } else if candidates.contains(property) {
                table.stored[property] = property  // indistinguishable values (two enums stuck on one case): the same name decides
            } else if candidates.isEmpty {
                // A property read from a keyed container nested under a key
                // (`nestedContainer(keyedBy:forKey:)`) sits deeper in the record than in the type:
                // one deeper stored path holding exactly its values in every run is its field.
                // (The path must lead through the schema's nested objects: a stored name that
                // itself contains a dot, "user.name", only looks deeper.)
                let deeper = stored[0].keys.filter { path in
                    path.split(separator: ".").count > depth
                        && (0..<ProbeMarking.runs).allSatisfy { run in
                            guard let mine = properties[run][property], !mine.isEmpty else { return false }
                            return stored[run][path] == mine
                        } && schema?.type(atPath: path) != nil && canHold(property, path)
                }
                // A payload enum's field holds the same telltales as its case's object and the
                // payload's fields below it: the shallowest of such a chain is the property's.
                let shallowest = deeper.filter { path in !deeper.contains { path.hasPrefix($0 + ".") } }
                if shallowest.count == 1 { table.stored[property] = shallowest[0] }
            }
        }
        // A stored optional read into a property that is not optional: a default fills the nil.
        for (property, path) in table.stored where schema?.type(atPath: path)?.isOptional == true && !optionalProperties.contains(property) {
            table.defaulted.insert(property)
        }
        // A required field whose key `init(from:)` does without (`contains` first, `try?`, a
        // default after a failed decode): a record may lack it (an `encode(to:)` that skips a
        // default value, a record written before the field was added), and its property then
        // reads the default, where the record, its index entries and sort keys say nil.
        // So is an optional one that reads a value where the key is absent (`?? 0`): the record
        // holds nothing, and a stored nil is no nil the property reads.
        for (property, path) in table.stored where !table.defaulted.contains(property) {
            guard let type = schema?.type(atPath: path) else { continue }
            let state = ProbeState(modelName: String(describing: T.self))
            state.marking = ProbeMarking(run: 0)
            state.absent = path.split(separator: ".").map(String.init)
            guard let (_, instance) = try? state.probe(T.self, path: [], depth: 0), state.askedAbsent else { continue }
            if !type.isOptional {
                table.defaulted.insert(property)
                continue
            }
            if tokensByProperty(instance)[property]?.isEmpty == false { table.defaulted.insert(property) }
        }
        // Once more with each kind of unusual telltale: a property that does not read back what
        // its field received is one `init(from:)` changes. (An `init(from:)` that throws on them,
        // say one that validates, keeps the mapping the plain runs found.)
        let blanksByBit = (0..<ProbeMarking.bits).flatMap { bit in
            [true, false].map { ProbeMarking(run: ProbeMarking.runs, variant: .blank, blankLeaves: (bit, $0)) }
        }
        let variants = ProbeMarking.Variant.allCases.filter { $0 != .plain }.map { ProbeMarking(run: ProbeMarking.runs, variant: $0) }
        for marking in variants + blanksByBit {
            let state = ProbeState(modelName: String(describing: T.self))
            state.marking = marking
            guard let (_, instance) = try? state.probe(T.self, path: [], depth: 0) else { continue }
            let found = tokensByProperty(instance)
            for (property, path) in table.stored where found[property] != marking.tokens[path] {
                table.transformed.insert(property)
            }
        }
        return table
    }

    /// The tokens beneath each property path of `instance` (`walk`, its other findings dropped).
    private static func tokensByProperty(_ instance: Any) -> [String: Set<String>] {
        var found: [String: Set<String>] = [:]
        var optionals = Set<String>()
        var leaves = Set<String>()
        var types: [String: String] = [:]
        _ = walk(instance, path: "", record: true, into: &found, optionals: &optionals, leaves: &leaves, types: &types)
        return found
    }

    /// Collects the tokens beneath `value`, recording them per property path when `record`, the
    /// paths of the properties whose type is optional in `optionals`, of those holding a single
    /// value (a token, perhaps optional) in `leaves`, and each property's type (inside an
    /// optional) in `types`.
    private static func walk(
        _ value: Any, path: String, record: Bool, into found: inout [String: Set<String>], optionals: inout Set<String>,
        leaves: inout Set<String>, types: inout [String: String]
    ) -> Set<String> {
        if let token = token(value) { return [token] }
        let mirror = Mirror(reflecting: value)
        var tokens = Set<String>()
        switch mirror.displayStyle {
        case .optional:
            for child in mirror.children {
                tokens.formUnion(walk(child.value, path: path, record: record, into: &found, optionals: &optionals, leaves: &leaves, types: &types))
            }
        case .collection, .set, .enum, .tuple:
            // An enum's one child is its case's payload (a tuple when it has several values): the
            // payload's tokens are the property's, whose stored field holds them under the case.
            for child in mirror.children {
                tokens.formUnion(walk(child.value, path: path, record: false, into: &found, optionals: &optionals, leaves: &leaves, types: &types))
            }
        case .dictionary:
            for child in mirror.children {
                let pair = Mirror(reflecting: child.value).children.map(\.value)
                if pair.count == 2 {
                    tokens.formUnion(walk(pair[1], path: path, record: false, into: &found, optionals: &optionals, leaves: &leaves, types: &types))
                }
            }
        case .struct:
            for child in mirror.children {
                guard let label = child.label else { continue }
                let childPath = path.isEmpty ? label : path + "." + label
                let beneath = walk(child.value, path: childPath, record: record, into: &found, optionals: &optionals, leaves: &leaves, types: &types)
                if record {
                    found[childPath] = beneath
                    if Mirror(reflecting: child.value).displayStyle == .optional { optionals.insert(childPath) }
                    if isLeaf(child.value) { leaves.insert(childPath) }
                    types[childPath] = String(describing: Swift.type(of: unwrapped(child.value)))
                }
                tokens.formUnion(beneath)
            }
        default:
            break
        }
        return tokens
    }

    /// Whether `value` is one token, or an optional holding one.
    private static func isLeaf(_ value: Any) -> Bool { token(unwrapped(value)) != nil }

    /// The value inside any optionals around `value` (itself when there are none, or a nil).
    private static func unwrapped(_ value: Any) -> Any {
        let mirror = Mirror(reflecting: value)
        guard mirror.displayStyle == .optional, let wrapped = mirror.children.first else { return value }
        return unwrapped(wrapped.value)
    }

    /// A value's identity as both sides see it; nil for values that are not leaves.
    static func token(_ value: Any) -> String? {
        switch value {
        case let v as Bool: return "Bool=\(v)"
        case let v as String: return "String=\(v)"
        case let v as Double: return "Double=\(v)"
        case let v as Float: return "Float=\(v)"
        // Types that encode themselves as one of the above hold its telltale as theirs: CGFloat
        // as its Double; Float16 as a Float, exact for the plain runs' telltales (n + 0.5), and
        // not for the unusual ones, so its field reads as transformed and queries evaluate it.
        case let v as CGFloat: return "Double=\(Double(v))"
        case let v as Date: return "Date=\(v.timeIntervalSinceReferenceDate)"
        case let v as UUID: return "UUID=\(v.uuidString)"
        case let v as Data: return "Data=\(v.base64EncodedString())"
        case let v as Decimal: return "Decimal=\(v)"
        case let v as URL: return "URL=\(v.absoluteString)"
        case let v as any BinaryInteger: return "\(type(of: v))=\(v)"
        default:
            #if !((os(macOS) || targetEnvironment(macCatalyst)) && arch(x86_64))
            if let v = value as? Float16 { return "Float=\(Float(v))" }
            #endif
            if Mirror(reflecting: value).displayStyle == .enum, let raw = value as? any RawRepresentable {
                return token(raw.rawValue).map { "enum \(type(of: value))=" + $0 }
            }
            return nil
        }
    }
}

extension String {
    /// Whether this stored path reaches into a nested struct (holds a "."). Checked on the UTF-8
    /// bytes: `contains(".")` is Foundation's substring search, thousands of instructions on the
    /// planner's path for every condition. A byte check answers yes for a dot joined to a combining
    /// mark as well, which only sends such a path down the general (nested) way.
    var isNestedPath: Bool { utf8.contains(UInt8(ascii: ".")) }
}
