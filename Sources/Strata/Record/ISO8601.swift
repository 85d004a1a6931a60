import Foundation

/// Dates as ISO 8601 text, exactly: what `StoredValue.json` and `strata dump` write, and what JSON
/// input reads. Foundation's formatter keeps at most milliseconds; a `Date` is a `Double` of
/// seconds, so this writes the shortest decimal that reads back as that `Double` — whole seconds
/// in UTC, then as many fraction digits as it takes (`2026-11-30T12:30:00.125Z`,
/// `…:01.0001235Z`) — and reads text by forming that decimal and converting it once, correctly
/// rounded: a date written here reads back bit for bit. Years outside 0000–9999 use ISO 8601's
/// expanded form (`+033689-09-27T01:46:40Z`). The calendar is Foundation's, so that JSON reads as
/// `JSONDecoder` reads it and dates print as `JSONEncoder` prints them: Gregorian from 1582-10-15,
/// Julian before (1582-10-04 is the day before 1582-10-15; the ten dates between, which never
/// existed, read as Julian dates too), with year 0 the year before 1. ISO 8601 itself would have
/// the Gregorian calendar throughout: a server that means that (.NET's `DateTime`, JavaScript's
/// `Date`) writes dates before 1582-10-15 that read here, as in `JSONDecoder`, some days off.
enum ISO8601 {
    /// Seconds from 1970-01-01 to 2001-01-01, Foundation's reference date.
    private static let referenceOffset: Int64 = 978_307_200
    /// Beyond this many seconds (about 140 million years) whole seconds stop being exact.
    private static let exactLimit = 4_503_599_627_370_496.0

    /// The exact text of `date`; nil for a date that is not a finite number of seconds, or is
    /// further than `exactLimit` from 2001.
    static func format(_ date: Date) -> String? {
        let t = date.timeIntervalSinceReferenceDate
        guard t.isFinite, abs(t) < exactLimit, let parts = decimal(t), let wholeSeconds = Int64(parts.whole) else { return nil }
        // Floor to whole seconds, keeping the fraction in 0..<1 (in decimal, exactly).
        var seconds = parts.negative ? -wholeSeconds : wholeSeconds
        var fraction = parts.fraction
        if parts.negative && !fraction.isEmpty {
            seconds -= 1
            fraction = complement(fraction)
        }
        let total = seconds + referenceOffset
        let days = total.floorDiv(86_400)
        let secondOfDay = total - days * 86_400
        let (year, month, day) = civil(fromDays: days)
        var text = yearText(year) + "-" + pad(month, 2) + "-" + pad(day, 2)
        text += "T" + pad(secondOfDay / 3600, 2) + ":" + pad(secondOfDay / 60 % 60, 2) + ":" + pad(secondOfDay % 60, 2)
        if !fraction.isEmpty { text += "." + fraction }
        return text + "Z"
    }

    /// Seconds since the reference date from whole seconds and the digits of a fraction (in
    /// 0..<1), converted once from their exact decimal value.
    private static func seconds(whole: Int64, fraction: String) -> Double? {
        if fraction.isEmpty { return Double(whole) }
        if whole >= 0 { return Double("\(whole).\(fraction)") }
        // whole + 0.f = -((|whole| - 1) + (1 - 0.f))
        return Double("-\(-(whole + 1)).\(complement(fraction))")
    }

    /// The digits of 1 - 0.`digits` (same length, trailing zeros dropped).
    private static func complement(_ digits: String) -> String {
        var result = Array(digits.utf8.map { Int($0) - 48 })
        // 10^n - f: subtract from a power of ten digit by digit, from the right.
        var borrow = 0
        for i in result.indices.reversed() {
            var d = (i == result.count - 1 ? 10 : 9) - result[i] - borrow
            borrow = 0
            if d < 0 { d += 10; borrow = 1 }
            result[i] = d
        }
        var text = String(result.map { Character(Unicode.Scalar(UInt8(48 + $0))) })
        while text.hasSuffix("0") { text.removeLast() }
        return text
    }

    /// The shortest decimal that reads back as `value`, as sign, whole digits and fraction digits
    /// (no trailing zeros).
    private static func decimal(_ value: Double) -> (negative: Bool, whole: String, fraction: String)? {
        var text = "\(value)"  // shortest round-trip form: "817654321.0001235", "-1e-300", "1e+16"
        let negative = text.hasPrefix("-")
        if negative { text.removeFirst() }
        var exponent = 0
        if let e = text.firstIndex(where: { $0 == "e" || $0 == "E" }) {
            guard let x = Int(text[text.index(after: e)...]) else { return nil }
            exponent = x
            text = String(text[..<e])
        }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        var digits = String(parts[0]) + (parts.count > 1 ? String(parts[1]) : "")
        var point = parts[0].count + exponent  // digits before the decimal point
        if point < 0 {
            digits = String(repeating: "0", count: -point) + digits
            point = 0
        }
        if point > digits.count { digits += String(repeating: "0", count: point - digits.count) }
        var whole = String(digits.prefix(point))
        var fraction = String(digits.dropFirst(point))
        while fraction.hasSuffix("0") { fraction.removeLast() }
        while whole.count > 1 && whole.hasPrefix("0") { whole.removeFirst() }
        if whole.isEmpty { whole = "0" }
        return (negative, whole, fraction)
    }

    /// Reads `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH[[:]MM])` (offsets up to 18 hours), and expanded
    /// years (`±YYYYYY`, six digits or more) outside 0000–9999 as `format` writes them; nil for
    /// anything else, so that nothing `JSONDecoder` rejects (`t`, `z`, a comma, no seconds,
    /// `+2024`, `+23:59`) reads here either.
    static func parse(_ text: String) -> Date? {
        var scanner = Scanner(Array(text.utf8))
        var sign: Int64 = 1
        var yearDigits = 4
        if let c = scanner.peek(), c == UInt8(ascii: "+") || c == UInt8(ascii: "-") {
            sign = c == UInt8(ascii: "-") ? -1 : 1
            scanner.index += 1
            yearDigits = 0  // expanded: any number of digits (at least 4)
        }
        guard let year = scanner.number(digits: yearDigits == 0 ? nil : 4),
            yearDigits != 0 || (scanner.lastCount >= 6 && !(0...9999).contains(sign * year)),
            scanner.take("-"), let month = scanner.number(digits: 2), scanner.take("-"), let day = scanner.number(digits: 2),
            scanner.take("T"),
            let hour = scanner.number(digits: 2), scanner.take(":"), let minute = scanner.number(digits: 2)
        else { return nil }
        guard scanner.take(":"), let second = scanner.number(digits: 2) else { return nil }
        var fraction = ""
        if scanner.take(".") {
            let start = scanner.index
            while let c = scanner.peek(), c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") { scanner.index += 1 }
            guard scanner.index > start else { return nil }
            fraction = String(decoding: scanner.bytes[start..<scanner.index], as: UTF8.self)
            while fraction.hasSuffix("0") { fraction.removeLast() }
        }
        var offset: Int64 = 0
        if !scanner.take("Z") {
            guard let c = scanner.peek(), c == UInt8(ascii: "+") || c == UInt8(ascii: "-") else { return nil }
            scanner.index += 1
            guard let hours = scanner.number(digits: 2) else { return nil }
            var minutes: Int64 = 0
            if scanner.take(":") {
                guard let m = scanner.number(digits: 2) else { return nil }
                minutes = m
            } else if let m = scanner.number(digits: 2) {
                minutes = m
            }
            // Foundation's time zones end at 18 hours from GMT.
            guard minutes <= 59, hours * 3600 + minutes * 60 <= 18 * 3600 else { return nil }
            offset = (hours * 3600 + minutes * 60) * (c == UInt8(ascii: "-") ? -1 : 1)
        }
        guard scanner.atEnd, (1...12).contains(month), (1...31).contains(day), hour <= 24, minute <= 59, second <= 60,
            day <= daysIn(month: month, year: sign * year, julian: isJulian(year: sign * year, month: month, day: day))
        else { return nil }
        let days = self.days(fromYear: sign * year, month: month, day: day)
        let (seconds, overflow) = days.multipliedReportingOverflow(by: 86_400)
        guard !overflow, abs(Double(seconds)) < exactLimit else { return nil }
        let whole = seconds + hour * 3600 + minute * 60 + second - offset - referenceOffset
        return self.seconds(whole: whole, fraction: fraction).map { Date(timeIntervalSinceReferenceDate: $0) }
    }

    // MARK: Calendar (Gregorian from 1582-10-15, Julian before, as Foundation's)

    /// Days from 1970-01-01 to 1582-10-15, the first Gregorian day.
    private static let gregorianStart: Int64 = -141_427

    /// Whether the date is written in the Julian calendar: it comes before 1582-10-15.
    private static func isJulian(year: Int64, month: Int64, day: Int64) -> Bool {
        (year, month, day) < (1582, 10, 15)
    }

    private static func civil(fromDays z: Int64) -> (year: Int64, month: Int64, day: Int64) {
        z < gregorianStart ? julianCivil(fromDays: z) : gregorianCivil(fromDays: z)
    }

    private static func days(fromYear y: Int64, month m: Int64, day d: Int64) -> Int64 {
        isJulian(year: y, month: m, day: d) ? julianDays(fromYear: y, month: m, day: d) : gregorianDays(fromYear: y, month: m, day: d)
    }

    /// The Julian calendar's date of a day (days from 1970-01-01), from its Julian day number.
    private static func julianCivil(fromDays z: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let c = z + 2_440_588 + 32_082
        let d = (4 * c + 3).floorDiv(1461)
        let e = c - (1461 * d).floorDiv(4)
        let m = (5 * e + 2) / 153
        return (d - 4800 + m / 10, m + 3 - 12 * (m / 10), e - (153 * m + 2) / 5 + 1)
    }

    /// Days from 1970-01-01 to a date of the Julian calendar, through its Julian day number.
    private static func julianDays(fromYear y: Int64, month m: Int64, day d: Int64) -> Int64 {
        let a = (14 - m) / 12
        let yy = y + 4800 - a
        let mm = m + 12 * a - 3
        return d + (153 * mm + 2) / 5 + 365 * yy + yy.floorDiv(4) - 32_083 - 2_440_588
    }

    // Howard Hinnant's days-from-civil algorithms, Gregorian.

    private static func gregorianCivil(fromDays z: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = z + 719_468
        let era = z.floorDiv(146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    private static func gregorianDays(fromYear y: Int64, month m: Int64, day d: Int64) -> Int64 {
        let y = m <= 2 ? y - 1 : y
        let era = y.floorDiv(400)
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    private static func daysIn(month: Int64, year: Int64, julian: Bool) -> Int64 {
        switch month {
        case 2:
            let leap = year % 4 == 0 && (julian || year % 100 != 0 || year % 400 == 0)
            return leap ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    // MARK: Text

    private static func pad(_ n: Int64, _ width: Int) -> String {
        let digits = String(n)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    private static func yearText(_ year: Int64) -> String {
        if (0...9999).contains(year) { return pad(year, 4) }
        return (year < 0 ? "-" : "+") + pad(abs(year), 6)
    }

    private struct Scanner {
        let bytes: [UInt8]
        var index = 0
        var lastCount = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var atEnd: Bool { index == bytes.count }
        func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func take(_ character: Unicode.Scalar) -> Bool {
            guard peek() == UInt8(ascii: character) else { return false }
            index += 1
            return true
        }

        /// Exactly `digits` decimal digits (any number, at most 12, when nil).
        mutating func number(digits: Int?) -> Int64? {
            var value: Int64 = 0
            var count = 0
            while let c = peek(), c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9"), count < (digits ?? 12) {
                value = value * 10 + Int64(c - UInt8(ascii: "0"))
                count += 1
                index += 1
            }
            lastCount = count
            if let digits, count != digits { return nil }
            return count > 0 ? value : nil
        }
    }
}

private extension Int64 {
    /// Division rounding toward negative infinity.
    func floorDiv(_ d: Int64) -> Int64 {
        let q = self / d
        return (self % d != 0 && (self < 0) != (d < 0)) ? q - 1 : q
    }
}
