import Foundation

/// An order of strings as people read them: ignoring case, ignoring diacritics, and numbers by
/// their value (`"room9"` before `"room10"`). Give it to `sorted(by:collation:)`, and to an index
/// (`IndexDescriptor.on(\.name, collation: .caseInsensitive)`) so that sorted pages walk the index.
///
/// ```swift
/// let contacts = db.objects(Contact.self)
///     .sorted(by: SortDescriptor(\.name), collation: .caseInsensitive)   // "apple", "Banana", "cherry"
/// let files = db.objects(File.self)
///     .sorted(by: SortDescriptor(\.name), collation: .natural)           // "room9", "room10", "Room11"
/// ```
///
/// Without a collation, `SortDescriptor(\.name)` compares as Foundation does on Linux: by Swift's
/// `String` `<` (`"Banana" < "apple" < "room10" < "room9"`). Foundation's own alternatives do not
/// help there: `String.StandardComparator` has only `.lexical` on Linux, and `String.Comparator`
/// with `.caseInsensitive` traps in this toolchain ("_caseFoldMapping is not implemented yet").
///
/// A collation is a total order defined by a sort key (FORMAT.md §8.4), the same on every machine
/// and independent of the locale: the string is folded (full Unicode case folding for
/// `.caseInsensitive`, marks removed for `.diacriticInsensitive`, both with Foundation's
/// `folding(options:locale:)` and no locale), put in NFC, and compared by Unicode scalars, with
/// each run of ASCII digits compared by its value when `.numeric` (leading zeros ignored, so
/// `"room09"` and `"room9"` are equal). Strings equal under a collation tie, and ties are in
/// primary-key order, as in every Strata sort.
public struct StringCollation: Hashable, Sendable, Codable, CustomStringConvertible {
    /// What a collation ignores, and how it reads numbers.
    public struct Options: OptionSet, Hashable, Sendable {
        /// The bits of the options, for `OptionSet`.
        public let rawValue: Int
        /// Options from their bits; use the named options instead.
        public init(rawValue: Int) { self.rawValue = rawValue }
        /// `"apple"` equals `"APPLE"` (and `"Straße"` equals `"STRASSE"`).
        public static let caseInsensitive = Options(rawValue: 1)
        /// `"José"` equals `"Jose"`.
        public static let diacriticInsensitive = Options(rawValue: 2)
        /// Runs of ASCII digits compare by value: `"room9"` before `"room10"`.
        public static let numeric = Options(rawValue: 4)
    }

    /// What this collation ignores, and whether it reads numbers by value.
    public let options: Options

    /// A collation with these options. No options: Unicode scalar order of the NFC form (a total
    /// order, unlike Swift's `String` `<` on this toolchain).
    ///
    /// ```swift
    /// let numbersOnly = StringCollation([.numeric])   // "a9" < "a10", "B" < "a"
    /// ```
    public init(_ options: Options) { self.options = options }

    /// Case-insensitive: `"apple" < "Banana" < "cherry"`.
    public static let caseInsensitive = StringCollation([.caseInsensitive])
    /// How a file browser sorts: case- and diacritic-insensitive, numbers by value.
    public static let natural = StringCollation([.caseInsensitive, .diacriticInsensitive, .numeric])

    private static let names: [(Options, String)] = [
        (.caseInsensitive, "caseInsensitive"), (.diacriticInsensitive, "diacriticInsensitive"), (.numeric, "numeric"),
    ]

    /// The collation's name, as index tree names and the stored schema write it: `natural`,
    /// or its options joined by `+` (`caseInsensitive+numeric`), or `scalars` for none.
    public var description: String {
        if self == .natural { return "natural" }
        if options.isEmpty { return "scalars" }
        return Self.names.filter { options.contains($0.0) }.map(\.1).joined(separator: "+")
    }

    /// The collation a name (`description`) gives, or nil.
    ///
    /// ```swift
    /// StringCollation(name: "caseInsensitive+numeric")   // case-insensitive, numbers by value
    /// ```
    public init?(name: String) {
        if name == "natural" { self = .natural; return }
        if name == "scalars" { self.init([]); return }
        var options: Options = []
        for part in name.split(separator: "+") {
            guard let option = Self.names.first(where: { $0.1 == part })?.0 else { return nil }
            options.insert(option)
        }
        if options.isEmpty { return nil }
        self.init(options)
    }

    /// Reads a collation stored by its name (as the catalog stores an index's collation).
    ///
    /// ```swift
    /// let c = try JSONDecoder().decode(StringCollation.self, from: Data(#""natural""#.utf8))   // .natural
    /// ```
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let name = try container.decode(String.self)
        guard let collation = StringCollation(name: name) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "unknown string collation \(quotedForError(name))")
        }
        self = collation
    }

    /// Writes the collation's name (`description`).
    ///
    /// ```swift
    /// let json = try JSONEncoder().encode(StringCollation.caseInsensitive)   // "caseInsensitive"
    /// ```
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }

    /// Compares two strings in this collation.
    ///
    /// ```swift
    /// StringCollation.natural.compare("room9", "Room10")   // .orderedAscending
    /// ```
    public func compare(_ a: String, _ b: String) -> ComparisonResult {
        let x = key(a), y = key(b)
        if x == y { return .orderedSame }
        return x.lexicographicallyPrecedes(y) ? .orderedAscending : .orderedDescending
    }

    /// What `key` folds with: Foundation's options for the collation's.
    private var folding: String.CompareOptions {
        var folding: String.CompareOptions = []
        if options.contains(.caseInsensitive) { folding.insert(.caseInsensitive) }
        if options.contains(.diacriticInsensitive) { folding.insert(.diacriticInsensitive) }
        return folding
    }

    /// Whether every string Swift's `==` equals to `s` (every canonically equivalent spelling)
    /// has `s`'s key, so that an index in this collation holds all of them under that key.
    ///
    /// A key folds before it normalizes (FORMAT.md §8.4), and Foundation's folding does not keep
    /// canonical equivalence for a few characters: `.caseInsensitive` turns U+0345 (combining
    /// ypogegrammeni) into ι, a letter, so its place among its letter's other marks changes the
    /// key (`"α\u{345}\u{301}" == "α\u{301}\u{345}"`, keys `αί` and `άι`); `.diacriticInsensitive`
    /// keeps some precomposed symbols whose decompositions lose their mark (`"∉"` stays `∉`,
    /// `"∈\u{338}"` folds to `∈`). False when the decomposed string holds a mark that folds into
    /// something other than itself or nothing, or when its composed and decomposed forms have
    /// other keys than it.
    func keyIsCanonical(_ s: String) -> Bool {
        let folding = self.folding
        // Without folding the key is the NFC form, the same for every spelling; ASCII has no marks.
        if folding.isEmpty || s.utf8.allSatisfy({ $0 < 0x80 }) { return true }
        let decomposed = s.decomposedStringWithCanonicalMapping
        for scalar in decomposed.unicodeScalars where scalar.properties.canonicalCombiningClass.rawValue != 0 {
            let folded = String(scalar).folding(options: folding, locale: nil).unicodeScalars
            if !folded.isEmpty && !folded.elementsEqual(CollectionOfOne(scalar)) { return false }
        }
        let own = key(s)
        return key(decomposed) == own && key(s.precomposedStringWithCanonicalMapping) == own
    }

    /// The sort key of `s`: comparing keys as bytes compares the strings in this collation
    /// (FORMAT.md §8.4).
    func key(_ s: String) -> [UInt8] {
        let folding = self.folding
        let folded: String
        if folding.isEmpty {
            folded = s
        } else if s.utf8.allSatisfy({ $0 < 0x80 }) {
            // ASCII folds to ASCII: case folding is lowercasing there, and there are no marks.
            folded = options.contains(.caseInsensitive) ? s.lowercased() : s
        } else {
            folded = s.folding(options: folding, locale: nil)
        }
        let utf8 = Array(KeyEncoding.normalized(folded).utf8)
        guard options.contains(.numeric) else { return utf8 }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count + 4)
        Self.writeNumeric(count: utf8.count, byte: { utf8[$0] }) { out.append($0) }
        return out
    }

    /// `count` bytes (`byte(i)` each) through `emit`, each run of ASCII digits rewritten as
    /// `.numeric` orders it: 0x30, the run's significant length (one byte, or 0xFF and four
    /// big-endian bytes from 255 on), its significant digits.
    @inline(__always)
    private static func writeNumeric(count: Int, byte: (Int) -> UInt8, emit: (UInt8) -> Void) {
        @inline(__always) func isDigit(_ b: UInt8) -> Bool { b &- 0x30 < 10 }
        var i = 0
        while i < count {
            let b = byte(i)
            guard isDigit(b) else {
                emit(b)
                i += 1
                continue
            }
            var start = i
            var end = i
            while end < count && isDigit(byte(end)) { end += 1 }
            while start < end - 1 && byte(start) == 0x30 { start += 1 }
            let length = end - start
            emit(0x30)
            if length < 0xFF {
                emit(UInt8(length))
            } else {
                emit(0xFF)
                for shift in stride(from: 24, through: 0, by: -8) { emit(UInt8(truncatingIfNeeded: UInt64(length) >> UInt64(shift))) }
            }
            for j in start..<end { emit(byte(j)) }
            i = end
        }
    }

    /// The key encoding (FORMAT.md §8.1) of `s`'s sort key: escaped and terminated, so that it
    /// can start an index key or a composite sort key.
    func appendEncodedKey(_ s: String, to out: inout [UInt8]) {
        var s = s
        s.withUTF8 { appendEncodedKey(utf8: UnsafeRawBufferPointer($0), to: &out) }
    }

    /// `appendEncodedKey` of a string given as its UTF-8 bytes (a stored field's). An ASCII
    /// string (most names, handles and tags) is folded, keyed and escaped in one pass, with no
    /// folded copy and no key array: ASCII folds to ASCII (case folding lowers A–Z, and nothing
    /// has a mark) and is its own NFC, so `key` would only lower it and rewrite its digit runs.
    /// Any other string is keyed by `key`.
    func appendEncodedKey(utf8 bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        guard bytes.allSatisfy({ $0 < 0x80 }) else {
            KeyEncoding.appendBytes(key(String(decoding: bytes, as: UTF8.self)), to: &out)
            return
        }
        let lower = options.contains(.caseInsensitive)
        @inline(__always) func emit(_ b: UInt8) {
            out.append(b)
            if b == 0 { out.append(0xFF) }
        }
        @inline(__always) func folded(_ i: Int) -> UInt8 {
            let b = bytes[i]
            return lower && b &- 0x41 < 26 ? b | 0x20 : b
        }
        if options.contains(.numeric) {
            Self.writeNumeric(count: bytes.count, byte: folded, emit: emit)
        } else {
            for i in 0..<bytes.count { emit(folded(i)) }
        }
        out.append(0)
        out.append(0)
    }
}

extension Results {
    /// Sorted by `descriptors`, comparing `String` fields in `collation` (the descriptors' own
    /// string comparators are not used; other fields compare as usual); ties in primary-key order.
    /// An index on the field in the same collation (`IndexDescriptor.on(_:collation:)`) is walked
    /// in order, stopping when the window is full.
    ///
    /// ```swift
    /// let page = db.objects(Contact.self)
    ///     .sorted(by: [SortDescriptor(\.name)], collation: .caseInsensitive)
    ///     .objects(in: 500..<550)
    /// ```
    public func sorted(by descriptors: [SortDescriptor<M>], collation: StringCollation) -> Results<M> {
        var q = query
        q.sort = descriptors
        q.collation = collation
        return rebuilt(q)
    }

    /// Sorted by one or more descriptors, comparing `String` fields in `collation`.
    ///
    /// ```swift
    /// let files = db.objects(File.self).sorted(by: SortDescriptor(\.name), collation: .natural)   // "a9" before "a10"
    /// ```
    public func sorted(by descriptor: SortDescriptor<M>, _ more: SortDescriptor<M>..., collation: StringCollation) -> Results<M> {
        // (One descriptor without `+`, as in `sorted(by:_:)`.)
        sorted(by: more.count == 0 ? [descriptor] : [descriptor] + more, collation: collation)
    }
}
