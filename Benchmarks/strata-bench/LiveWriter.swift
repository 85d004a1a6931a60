import Foundation
import Strata

// The other process of `strata-bench live`'s cross_process_latency: the bench re-executes itself
// as `strata-bench live-writer FILE N`, which opens the same database and, for each line
// "go K SCORE" read on stdin, updates object K's score and stores in its blob the CLOCK_MONOTONIC
// time (nanoseconds) just before the transaction began. The observing process reads that time from
// the delivered object: CLOCK_MONOTONIC is one clock for every process of the machine, so
// receipt time minus it is the delivery latency across processes, durable commit included.

/// The first 8 bytes of an Item's blob: a CLOCK_MONOTONIC time in nanoseconds.
enum LatencyStamp {
    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    static func stamp(_ blob: inout Data, _ time: UInt64) {
        if blob.count < 8 { blob.append(Data(count: 8 - blob.count)) }
        withUnsafeBytes(of: time.littleEndian) { blob.replaceSubrange(blob.startIndex..<blob.startIndex + 8, with: $0) }
    }

    static func read(_ blob: Data) -> UInt64? {
        guard blob.count >= 8 else { return nil }
        var time: UInt64 = 0
        withUnsafeMutableBytes(of: &time) { $0.copyBytes(from: blob.prefix(8)) }
        return UInt64(littleEndian: time)
    }
}

/// `strata-bench live-writer FILE`: the writing process.
func runLiveWriter(_ args: [String]) -> Int32 {
    guard let path = args.first else {
        note("live-writer: expected FILE")
        return 2
    }
    do {
        let db = try Database(path: path, models: [Item.self])
        writeAll(fd: 1, "ready\n")
        while let line = readLine() {
            let words = line.split(separator: " ")
            if words.first == "quit" { break }
            guard words.count == 3, words[0] == "go", let id = Int64(words[1]), let score = Double(words[2]) else {
                note("live-writer: unexpected line '\(line)'")
                return 2
            }
            let start = LatencyStamp.now()
            try db.write { tx in
                _ = try tx.update(Item.self, key: id) { item in
                    item.score = score
                    LatencyStamp.stamp(&item.blob, start)
                }
            }
        }
        return 0
    } catch {
        note("live-writer: \(error)")
        return 1
    }
}

/// The writing process, seen from the observing one: its stdin to send "go" lines.
final class LiveWriterProcess {
    private let pid: pid_t
    private let input: Int32

    init(path: String) throws {
        guard let exe = executablePath() else { throw BenchError("cannot find this executable (/proc/self/exe)") }
        var toChild: [Int32] = [-1, -1]
        var fromChild: [Int32] = [-1, -1]
        if pipe(&toChild) != 0 || pipe(&fromChild) != 0 { throw BenchError("pipe failed: \(errnoText())") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, toChild[0], 0)
        posix_spawn_file_actions_adddup2(&actions, fromChild[1], 1)
        for fd in toChild + fromChild { posix_spawn_file_actions_addclose(&actions, fd) }
        let words: [String] = [exe, "live-writer", path]
        let argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var pid = pid_t()
        let rc = posix_spawn(&pid, exe, &actions, nil, argv, environ)
        close(toChild[0])
        close(fromChild[1])
        if rc != 0 {
            close(toChild[1])
            close(fromChild[0])
            throw BenchError("cannot start the live writer: \(errnoText(rc))")
        }
        self.pid = pid
        self.input = toChild[1]
        // Wait for "ready": the writer has the database open.
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n = read(fromChild[0], &byte, 1)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            if byte == 10 { break }
            line.append(byte)
        }
        close(fromChild[0])
        if String(decoding: line, as: UTF8.self) != "ready" { throw BenchError("the live writer did not start") }
    }

    /// Asks for one update of object `id` to `score`.
    func update(_ id: Int64, score: Double) { writeAll(fd: input, "go \(id) \(score)\n") }

    /// Ends it and waits for it.
    func finish() throws {
        writeAll(fd: input, "quit\n")
        close(input)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            if errno != EINTR { throw BenchError("waitpid failed: \(errnoText())") }
        }
        if status != 0 { throw BenchError("the live writer ended with status \(status)") }
    }
}
