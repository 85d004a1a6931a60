import Foundation

/// A strict RFC 8259 parser. Our own rather than `JSONSerialization` because that one hands back
/// `NSNumber`s in which `true` and `1` are hard to tell apart, loses integers above `Int64.max`
/// precision-wise, and reports errors without a position.
///
/// Recursion is bounded (`maxDepth`) so that hostile input cannot overflow the stack.
struct JSONParser {
    let bytes: [UInt8]
    var offset = 0
    static let maxDepth = 128

    init(bytes: [UInt8]) { self.bytes = bytes }

    mutating func parseDocument() throws -> JSONValue {
        // A UTF-8 byte order mark is tolerated, as RFC 8259 allows parsers to.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { offset = 3 }
        skipWhitespace()
        let value = try parseValue(depth: 0)
        skipWhitespace()
        if offset < bytes.count { throw error("unexpected \(describe(bytes[offset])) after the end of the JSON value") }
        return value
    }

    // MARK: Values

    private mutating func parseValue(depth: Int) throws -> JSONValue {
        guard depth < Self.maxDepth else { throw error("nesting deeper than \(Self.maxDepth) levels") }
        guard offset < bytes.count else { throw error("expected a value, found the end of the input") }
        switch bytes[offset] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth)
        case UInt8(ascii: "["): return try parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw error("expected a value, found \(describe(bytes[offset]))")
        }
    }

    private mutating func literal(_ word: String) throws {
        let expected = Array(word.utf8)
        guard bytes.count - offset >= expected.count, bytes[offset..<offset + expected.count].elementsEqual(expected) else {
            throw error("invalid literal (expected \(word))")
        }
        offset += expected.count
    }

    private mutating func parseObject(depth: Int) throws -> JSONValue {
        offset += 1  // {
        var fields: [String: JSONValue] = [:]
        skipWhitespace()
        if consume(UInt8(ascii: "}")) { return .object(fields) }
        while true {
            skipWhitespace()
            guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else {
                throw error("expected a field name in quotes, found \(offset < bytes.count ? describe(bytes[offset]) : "the end of the input")")
            }
            let keyStart = offset
            let key = try parseString()
            skipWhitespace()
            guard consume(UInt8(ascii: ":")) else { throw error("expected ':' after the field name \(quotedForError(key))") }
            skipWhitespace()
            let value = try parseValue(depth: depth + 1)
            // Two values for one field would make a patch ambiguous; JSON parsers disagree on which wins.
            if fields.updateValue(value, forKey: key) != nil {
                throw error("duplicate field \(quotedForError(key))", at: keyStart)
            }
            skipWhitespace()
            if consume(UInt8(ascii: ",")) { continue }
            if consume(UInt8(ascii: "}")) { return .object(fields) }
            throw error("expected ',' or '}' in an object, found \(offset < bytes.count ? describe(bytes[offset]) : "the end of the input")")
        }
    }

    private mutating func parseArray(depth: Int) throws -> JSONValue {
        offset += 1  // [
        var values: [JSONValue] = []
        skipWhitespace()
        if consume(UInt8(ascii: "]")) { return .array(values) }
        while true {
            skipWhitespace()
            values.append(try parseValue(depth: depth + 1))
            skipWhitespace()
            if consume(UInt8(ascii: ",")) { continue }
            if consume(UInt8(ascii: "]")) { return .array(values) }
            throw error("expected ',' or ']' in an array, found \(offset < bytes.count ? describe(bytes[offset]) : "the end of the input")")
        }
    }

    // MARK: Numbers

    private mutating func parseNumber() throws -> JSONValue {
        let start = offset
        var isInteger = true
        _ = consume(UInt8(ascii: "-"))
        // Integer part: one 0, or a non-zero digit followed by digits.
        guard offset < bytes.count, isDigit(bytes[offset]) else { throw error("expected a digit in a number") }
        if bytes[offset] == UInt8(ascii: "0") {
            offset += 1
            if offset < bytes.count, isDigit(bytes[offset]) { throw error("a number must not have leading zeros", at: start) }
        } else {
            while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
        }
        if consume(UInt8(ascii: ".")) {
            isInteger = false
            guard offset < bytes.count, isDigit(bytes[offset]) else { throw error("expected a digit after the decimal point") }
            while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
        }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "e") || bytes[offset] == UInt8(ascii: "E") {
            isInteger = false
            offset += 1
            if !consume(UInt8(ascii: "+")) { _ = consume(UInt8(ascii: "-")) }
            guard offset < bytes.count, isDigit(bytes[offset]) else { throw error("expected a digit in the exponent") }
            while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
        }
        let text = String(decoding: bytes[start..<offset], as: UTF8.self)
        if isInteger {
            // "-0" is negative zero to a Double field (as to JSONDecoder); an integer field takes it as 0.
            if text == "-0" { return .double(-0.0) }
            if let i = Int64(text) { return .int(i) }
            if let u = UInt64(text) { return .uint(u) }
        } else if let whole = JSONParser.wholeNumber(bytes[start..<offset]) {
            return whole  // 2.0, 25e-1 × 10, 9007199254740993.0: exactly, as JSONDecoder reads them
        }
        // Integers too large for 64 bits become doubles too: their magnitude is still meaningful.
        guard let d = Double(text), d.isFinite else {
            let shown = text.count > 40 ? "\(text.prefix(20))…(\(text.count) characters)" : text
            throw error("the number \(shown) is out of range", at: start)
        }
        return .double(d)
    }

    /// A number written with a fraction or an exponent whose exact value is a whole number within
    /// `Int64` or `UInt64`, as `.int` or `.uint` (negative zero stays a `Double`); nil otherwise.
    /// Read from the digits, not through a `Double`, which above 2^53 would round a fraction away
    /// or turn an integer out of range into one in range (-9223372036854775809 into `Int64.min`).
    static func wholeNumber(_ number: ArraySlice<UInt8>) -> JSONValue? {
        var digits: [UInt8] = []
        var negative = false
        var fractionDigits = 0
        var exponent = 0
        var exponentNegative = false
        var part = 0  // 0: integer part, 1: fraction, 2: exponent
        // An exponent beyond the number of digits + 20 leaves a value beyond 64 bits or with a
        // fraction, whatever the digits; a fixed bound (it was 10^6) misread a whole number
        // written with more digits than that (1 and 4,000,000 zeros, e-4000000) as a Double.
        let exponentBound = number.count + 20
        for b in number {
            switch b {
            case UInt8(ascii: "-") where part == 0: negative = true
            case UInt8(ascii: "-"): exponentNegative = true
            case UInt8(ascii: "+"): break
            case UInt8(ascii: "."): part = 1
            case UInt8(ascii: "e"), UInt8(ascii: "E"): part = 2
            default:
                let digit = Int(b) - 48
                if part == 2 {
                    if exponent <= exponentBound { exponent = exponent * 10 + digit }
                } else {
                    if part == 1 { fractionDigits += 1 }
                    if digit != 0 || !digits.isEmpty { digits.append(b) } else if part == 1 { continue }
                }
            }
        }
        if digits.isEmpty { return negative ? nil : .int(0) }  // zero; negative zero stays a Double
        if exponent > exponentBound { return nil }
        // The value is digits × 10^scale (leading zeros, left out of `digits`, change nothing).
        let scale = (exponentNegative ? -exponent : exponent) - fractionDigits
        var whole = digits
        if scale < 0 {
            guard -scale <= whole.count, whole.suffix(-scale).allSatisfy({ $0 == UInt8(ascii: "0") }) else { return nil }
            whole.removeLast(-scale)
        } else {
            guard whole.count + scale <= 20 else { return nil }
            whole += repeatElement(UInt8(ascii: "0"), count: scale)
        }
        if whole.isEmpty { return nil }
        let text = (negative ? "-" : "") + String(decoding: whole, as: UTF8.self)
        if let i = Int64(text) { return .int(i) }
        if let u = UInt64(text) { return .uint(u) }
        return nil
    }

    private func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

    // MARK: Strings

    private mutating func parseString() throws -> String {
        let start = offset
        offset += 1  // "
        var scalars = String.UnicodeScalarView()
        var runStart = offset
        // Runs of plain bytes are validated as UTF-8 in one go; escapes are decoded one by one.
        func flush(_ parser: JSONParser, upTo end: Int) throws {
            guard runStart < end else { return }
            guard let run = String(validating: parser.bytes[runStart..<end], as: UTF8.self) else {
                throw parser.error("invalid UTF-8 in a string", at: runStart)
            }
            scalars.append(contentsOf: run.unicodeScalars)
        }
        while true {
            guard offset < bytes.count else { throw error("unterminated string", at: start) }
            let b = bytes[offset]
            switch b {
            case UInt8(ascii: "\""):
                try flush(self, upTo: offset)
                offset += 1
                return String(scalars)
            case UInt8(ascii: "\\"):
                try flush(self, upTo: offset)
                offset += 1
                scalars.append(try parseEscape())
                runStart = offset
            case 0..<0x20:
                throw error("a control character must be escaped in a string")
            default:
                offset += 1
            }
        }
    }

    private mutating func parseEscape() throws -> Unicode.Scalar {
        guard offset < bytes.count else { throw error("unterminated escape") }
        let c = bytes[offset]
        offset += 1
        switch c {
        case UInt8(ascii: "\""): return "\""
        case UInt8(ascii: "\\"): return "\\"
        case UInt8(ascii: "/"): return "/"
        case UInt8(ascii: "b"): return "\u{08}"
        case UInt8(ascii: "f"): return "\u{0C}"
        case UInt8(ascii: "n"): return "\n"
        case UInt8(ascii: "r"): return "\r"
        case UInt8(ascii: "t"): return "\t"
        case UInt8(ascii: "u"):
            let escapeStart = offset - 2
            let high = try hex4()
            if (0xD800..<0xDC00).contains(high) {
                guard consume(UInt8(ascii: "\\")), consume(UInt8(ascii: "u")) else {
                    throw error("a high surrogate escape must be followed by a low one", at: escapeStart)
                }
                let low = try hex4()
                guard (0xDC00..<0xE000).contains(low),
                    let scalar = Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
                else {
                    throw error("invalid surrogate pair", at: escapeStart)
                }
                return scalar
            }
            guard let scalar = Unicode.Scalar(high) else { throw error("unpaired low surrogate", at: escapeStart) }
            return scalar
        default:
            throw error("invalid escape \\\(describe(c))", at: offset - 2)
        }
    }

    private mutating func hex4() throws -> UInt32 {
        guard bytes.count - offset >= 4 else { throw error("expected 4 hex digits after \\u") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let b = bytes[offset]
            let digit: UInt32
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(b - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(b - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(b - UInt8(ascii: "A") + 10)
            default: throw error("expected a hex digit after \\u, found \(describe(b))")
            }
            value = value << 4 | digit
            offset += 1
        }
        return value
    }

    // MARK: Helpers

    private mutating func skipWhitespace() {
        while offset < bytes.count {
            switch bytes[offset] {
            case 0x20, 0x09, 0x0A, 0x0D: offset += 1
            default: return
            }
        }
    }

    private mutating func consume(_ b: UInt8) -> Bool {
        guard offset < bytes.count, bytes[offset] == b else { return false }
        offset += 1
        return true
    }

    private func describe(_ b: UInt8) -> String {
        if b >= 0x21 && b < 0x7F { return "'\(Character(Unicode.Scalar(b)))'" }
        return "byte 0x" + String(b, radix: 16)
    }

    /// An `invalidInput` error at `position` (default: the current offset), with line and column
    /// (1-based, columns in bytes) so that a person can find it in the text.
    func error(_ what: String, at position: Int? = nil) -> StrataError {
        let at = min(position ?? offset, bytes.count)
        var line = 1
        var lineStart = 0
        for i in 0..<at where bytes[i] == 0x0A {
            line += 1
            lineStart = i + 1
        }
        return .invalidInput("\(what) at line \(line), column \(at - lineStart + 1) (byte \(at))")
    }
}
