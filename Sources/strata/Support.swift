// Exit codes, errors, opening a store, and text formatting for the strata tool.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Strata

/// The tool's exit status: each kind of failure has its own, so scripts can tell them apart.
enum ExitCode: Int32 {
    case ok = 0
    /// Wrong arguments.
    case usage = 1
    /// The database file does not exist.
    case missingFile = 2
    /// The file exists but is not a Strata database.
    case foreign = 3
    /// A Strata database too damaged to open or read.
    case corrupt = 4
    /// `strata check` found problems.
    case checkFailed = 5
    /// Any other failure (permissions, I/O, resources).
    case ioError = 6
    /// A writer in another process changed the file while the tool read it, again and again, and
    /// could not be held off: nothing is wrong with the file; run the command again.
    case changed = 7
}

/// A failure to report as one line on stderr, with its exit code.
struct ToolFailure: Error {
    var code: ExitCode
    var message: String

    init(_ code: ExitCode, _ message: String) {
        self.code = code
        self.message = message
    }

    /// Classifies an error thrown by the engine while working on `path`.
    init(_ error: any Error, path: String) {
        if let strata = error as? StrataError {
            switch strata {
            case .storage(let e): self.init(e, path: path)
            case .corruptRecord: self.init(.corrupt, "\(path): \(strata)")
            default: self.init(.ioError, "\(path): \(strata)")
            }
            return
        }
        guard let e = error as? StorageError else {
            self.init(.ioError, "\(path): \(error)")
            return
        }
        switch e {
        case let .io(operation, errorPath, err):
            if err == ENOENT && operation == "open" {
                self.init(.missingFile, "\(errorPath): no such file")
            } else {
                self.init(.ioError, "\(errorPath): \(operation) failed: \(systemMessage(err))")
            }
        case let .notAStrataFile(errorPath, reason):
            self.init(.foreign, "\(errorPath): not a Strata database (\(reason))")
        case .corrupt, .noValidMeta, .truncated, .unsupportedFormatVersion, .pageSizeMismatch:
            self.init(.corrupt, "\(path): \(e)")
        case .fileChangedDuringRead:
            self.init(
                .changed,
                "\(path): the file changed during inspection (a writer in another process committed during every "
                    + "attempt to read it, and could not be held off: no lock file, no fcntl locks, or not Linux); run the command again")
        default:
            self.init(.ioError, "\(path): \(e)")
        }
    }
}

let usage = """
    usage: strata COMMAND FILE [ARGS]

    commands:
      info FILE           format version, page size, transaction, file size, used / free / pending pages
      trees FILE          each tree: depth, branch / leaf / overflow pages, entries, fill factor
      check FILE          verify every page, key order, entry counts and page accounting
      page FILE N         decode page N
      readers FILE        live read snapshots of every process on the file
      compact FILE OUT    write a compacted copy of FILE to the new file OUT
      schema FILE         models, fields (id, type), indexes and object counts of the object layer
      dump FILE [--model NAME] [--json]
                          every object, decoded from the stored schema alone (JSON lines with --json)
      help                this text

    Every command only reads: it opens FILE read-only and creates or changes nothing, not even
    the lock file FILE-lock (a read-only directory is fine). Beside a writer that commits during
    every read, the tool holds writers in other processes off for one read's length.

    exit codes: 0 ok, 1 usage error, 2 missing file, 3 not a Strata file, 4 corrupt file,
                5 check found problems, 6 other I/O error, 7 the file changed during inspection
                (a live writer the tool could not hold off; run again)
    """

/// One line on stderr, after whatever stdout holds so far.
func printError(_ message: String) {
    fflush(nil)
    let bytes = Array("strata: \(message)\n".utf8)
    _ = bytes.withUnsafeBytes { writeAll(2, $0) }
}

/// Writes all of `bytes` to descriptor `fd`, through short writes and interruptions; false on
/// an error (`errno` says which).
func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
    var done = 0
    while done < bytes.count {
        let n = write(fd, bytes.baseAddress! + done, bytes.count - done)
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { return false }
        done += n
    }
    return true
}

func systemMessage(_ err: Int32) -> String {
    guard let text = strerror(err) else { return "errno \(err)" }
    return String(cString: text)
}

/// Opens an existing store read-only: nothing on disk is created or changed, the lock file
/// included, and the tool takes no reader slot. A writer in another process may therefore reuse
/// pages the tool is reading; the engine notices (`fileChangedDuringRead`) and `on` reads again.
func openStore(_ path: String) throws(ToolFailure) -> Store {
    try on(path, nil) { try Store(path: path, options: StoreOptions(readOnly: true)) }
}

/// How often a read that a writer changed under the tool is tried in all, and how many of those
/// tries run with writers plainly beside it.
private let attempts = 5
private let attemptsBesideWriters = 2

/// Runs `body`, classifying any engine error as a failure on `path`. A read that a writer in
/// another process changed under the tool (`fileChangedDuringRead`) is run again, up to
/// `attempts` times in all: the first tries beside the writers, the later ones with `store`'s
/// writers in other processes held off (`Store.holdingWritersOff`: they wait for this one read),
/// so that a busy writer, which commits during every read, cannot fail the tool. `body` must not
/// print.
func on<R>(_ path: String, _ store: Store?, _ body: () throws -> R) throws(ToolFailure) -> R {
    var attempt = 1
    while true {
        do {
            if attempt > attemptsBesideWriters, let store { return try store.holdingWritersOff(body) }
            return try body()
        } catch let failure as ToolFailure {
            throw failure
        } catch {
            if attempt < attempts && changedDuringRead(error) {
                attempt += 1
                continue
            }
            throw ToolFailure(error, path: path)
        }
    }
}

private func changedDuringRead(_ error: any Error) -> Bool {
    if case .fileChangedDuringRead? = error as? StorageError { return true }
    if case .storage(.fileChangedDuringRead)? = error as? StrataError { return true }
    return false
}

func parsePageNumber(_ text: String) -> UInt64? {
    if text.hasPrefix("0x") || text.hasPrefix("0X") { return UInt64(text.dropFirst(2), radix: 16) }
    return UInt64(text)
}

// MARK: Formatting

/// 1234567 → "1,234,567".
func grouped<T: BinaryInteger>(_ value: T) -> String {
    let digits = Array(String(value).reversed())
    var out: [Character] = []
    for (i, d) in digits.enumerated() {
        if i > 0 && i % 3 == 0 && d != "-" { out.append(",") }
        out.append(d)
    }
    return String(out.reversed())
}

/// 1258291 → "1.2 MiB".
func humanBytes(_ bytes: UInt64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var value = Double(bytes)
    var unit = 0
    while value >= 1024 && unit < units.count - 1 {
        value /= 1024
        unit += 1
    }
    if unit == 0 { return "\(bytes) B" }
    let tenths = Int((value * 10).rounded())
    return "\(tenths / 10).\(tenths % 10) \(units[unit])"
}

/// 0.873 → "87.3%".
func percentText(_ fraction: Double) -> String {
    guard fraction.isFinite else { return "-" }
    let tenths = Int((fraction * 1000).rounded())
    return "\(tenths / 10).\(tenths % 10)%"
}

func padRight(_ text: String, _ width: Int) -> String {
    text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
}

func padLeft(_ text: String, _ width: Int) -> String {
    text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
}

/// Rows laid out in columns; `rightAligned` columns (numbers) align on the right.
func table(_ header: [String], _ rows: [[String]], rightAligned: Set<Int>) -> String {
    var widths = header.map(\.count)
    for row in rows {
        for (i, cell) in row.enumerated() where i < widths.count { widths[i] = max(widths[i], cell.count) }
    }
    func line(_ cells: [String]) -> String {
        var parts: [String] = []
        for (i, cell) in cells.enumerated() {
            parts.append(rightAligned.contains(i) ? padLeft(cell, widths[i]) : padRight(cell, widths[i]))
        }
        var text = parts.joined(separator: "  ")
        while text.hasSuffix(" ") { text.removeLast() }
        return text
    }
    return ([line(header)] + rows.map(line)).joined(separator: "\n")
}

/// Two-column "label   value" lines.
func fields(_ pairs: [(String, String)]) -> String {
    let width = pairs.map(\.0.count).max() ?? 0
    return pairs.map { padRight($0.0, width) + "  " + $0.1 }.joined(separator: "\n")
}
