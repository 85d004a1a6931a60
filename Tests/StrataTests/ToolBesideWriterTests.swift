import Testing
import Foundation
import Synchronization
@testable import Strata

// The `strata` tool reads a database that an app has open and keeps writing. The tool takes no
// reader slot (it changes nothing on disk), so a writer in another process may reuse the pages it
// reads; a read that is overtaken runs again, and the last attempt holds the writers off. Every
// command must then finish (exit 0) however busy the writer, and what it prints must be one
// commit: here the writer moves amounts between accounts and vaults (two models), so every dump's
// balances add up to the same total.

struct ToolBesideWriterTests {
    struct Account: Model, Equatable {
        var id: Int64
        var balance: Int64
        var note: String
    }

    /// Where the transfers go: a dump of both models adds up only if both are the same commit.
    struct Vault: Model, Equatable {
        var id: Int64
        var balance: Int64
    }

    final class WriterState: Sendable {
        let stop = Atomic<Bool>(false)
        let commits = Atomic<Int>(0)
    }

    static let accounts = 2_000
    static let vaults = 10
    static let total = Int64(accounts) * 100

    /// `pause`: microseconds the writer waits between commits. None: it overtakes every read, and
    /// the tool must hold it off to finish. A millisecond: many reads are not overtaken, and the
    /// first attempts (beside the writer) do the work.
    @Test(arguments: [0, 1_000])
    func everyCommandFinishesBesideABusyWriter(pause: UInt32) throws {
        let tool = try #require(toolExecutable(), "the strata executable is not built next to the tests")
        let path = databasePath()
        let db = try Database(path: path, models: [Account.self, Vault.self])
        try db.write { tx in
            for i in 0..<Self.accounts {
                try tx.insert(Account(id: Int64(i), balance: 100, note: String(repeating: "n", count: 40 + i % 60)))
            }
            for i in 0..<Self.vaults { try tx.insert(Vault(id: Int64(i), balance: 0)) }
        }
        // The writer: one small transfer per commit, as fast as it goes (no sync), so that each of
        // the tool's reads sees many commits, and pages freed by one are reused two commits later.
        let state = WriterState()
        let writer = Thread {
            var rng = ObjectRandom(seed: 20_261_206)
            while !state.stop.load(ordering: .relaxed) {
                let account = Int64(rng.below(Self.accounts)), vault = Int64(rng.below(Self.vaults))
                let amount = Int64(rng.below(15)) - 7
                try? db.write(durability: .noSync) { tx in
                    try tx.update(Account.self, key: account) { $0.balance -= amount }
                    try tx.update(Vault.self, key: vault) { $0.balance += amount }
                }
                state.commits.add(1, ordering: .relaxed)
                if pause > 0 { usleep(pause) }
            }
        }
        writer.start()
        defer {
            state.stop.store(true, ordering: .relaxed)
            while !writer.isFinished { usleep(1_000) }
        }
        while state.commits.load(ordering: .relaxed) < (pause > 0 ? 3 : 100) { usleep(1_000) }

        let output = NSTemporaryDirectory() + "strata-beside-writer-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { for file in [output, output + "-lock", output + "-log"] { try? FileManager.default.removeItem(atPath: file) } }
        let commands: [[String]] = [["info", path], ["trees", path], ["check", path], ["schema", path], ["readers", path], ["compact", path, output]]
        for round in 0..<(pause > 0 ? 6 : 3) {
            for command in commands {
                let before = state.commits.load(ordering: .relaxed)
                let result = try runTool(tool, command)
                #expect(result.status == 0, "round \(round): strata \(command.joined(separator: " ")): \(result.output)")
                #expect(state.commits.load(ordering: .relaxed) > before || result.status != 0, "the writer made no commit while the tool ran")
                if command.first == "compact" {
                    // The copy is one commit of the database: its balances add up.
                    let copy = try Database(path: output, models: [Account.self, Vault.self])
                    #expect(copy.objects(Account.self).sum(of: \.balance) + copy.objects(Vault.self).sum(of: \.balance) == Self.total)
                    copy.close()
                    for file in [output, output + "-lock", output + "-log"] { try? FileManager.default.removeItem(atPath: file) }
                }
            }
            for (json, withTemporaryFile) in [(false, true), (true, true), (false, false)] {
                // Without a temporary file to write first, the dump prints as it reads, writers held off.
                let result = try runTool(
                    tool, ["dump", path] + (json ? ["--json"] : []), environment: withTemporaryFile ? [:] : ["TMPDIR": "/nonexistent/strata"])
                #expect(result.status == 0, "round \(round): strata dump (temporary file: \(withTemporaryFile)): \(result.output)")
                let lines = result.output.split(separator: "\n")
                #expect(lines.count == Self.accounts + Self.vaults, "round \(round): \(lines.count) objects dumped")
                var sum: Int64 = 0
                for line in lines {
                    let object = json ? String(line) : String(line.split(separator: " ", maxSplits: 2).last ?? "")
                    let parsed = try JSONSerialization.jsonObject(with: Data(object.utf8)) as? [String: Any]
                    let fields: Any? = json ? parsed?["object"] : parsed
                    let balance = try #require((fields as? [String: Any])?["balance"] as? Int, "\(line)")
                    sum += Int64(balance)
                }
                #expect(sum == Self.total, "round \(round): a dump mixing commits (balances add up to \(sum))")
            }
        }
    }
}
