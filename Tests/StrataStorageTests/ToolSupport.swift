import Testing
import Foundation

// Running the `strata` executable from the storage tests (CheckTests, ToolReadOnlyTests).

/// The `strata` executable built beside the test bundle, if any.
func strataToolPath() -> String? {
    var directories: [URL] = []
    if let first = CommandLine.arguments.first {
        let url = URL(fileURLWithPath: first)
        directories.append(url.deletingLastPathComponent())
        directories.append(url.deletingLastPathComponent().deletingLastPathComponent())
    }
    directories.append(Bundle.main.bundleURL)
    directories.append(Bundle.main.bundleURL.deletingLastPathComponent())
    for directory in directories {
        let candidate = directory.appendingPathComponent("strata").path
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: candidate, isDirectory: &isDirectory), !isDirectory.boolValue,
            FileManager.default.isExecutableFile(atPath: candidate)
        {
            return candidate
        }
    }
    return nil
}

struct ToolResult: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String
    var description: String { "exit \(status)\nstdout: \(stdout)\nstderr: \(stderr)" }
}

func runTool(_ tool: String, _ arguments: [String]) throws -> ToolResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: tool)
    process.arguments = arguments
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    try process.run()
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    let errData = err.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return ToolResult(
        status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
        stderr: String(decoding: errData, as: UTF8.self))
}
