import Testing
import Foundation

// Every ```swift block of the package's Markdown files (README.md, Examples/README.md, Benchmarks/README.md,
// FORMAT.md, any other) compiles, from the very text a reader sees.
//
// How a document's blocks become programs, in the order they appear:
// - A block whose first line of code is an `import` starts a new program; any other block continues the program
//   before it (the README's later blocks use the `db` and `Person` of its first). Each program is typechecked as
//   one `main.swift` by the toolchain's `swiftc` (Swift 6 mode) against the modules this test binary was built
//   with (`-I <build>/Modules`): no network, no package resolution, no linking. An error or a warning fails the
//   test. `#sourceLocation` lines make the compiler name the document and its own line numbers.
// - Markers, an HTML comment on the last non-blank line before a block (keep them rare):
//   `<!-- compile: excerpt of PATH -->`: the block is a piece of PATH (relative to the document), a source file
//   of a package target, which the build compiles; the test checks that the block's lines are there verbatim
//   (indented as a whole). For code that only makes sense in its file, e.g. a method of the example's class.
//   `<!-- compile: skip (REASON) -->`: not compiled; the reason is required.
// A marker that is not followed by a ```swift block, or that says anything else, fails the test.

struct DocumentationTests {
    /// The package's Markdown files, relative to its root.
    static let documents: [String] = DocumentationSource.markdownFiles()

    @Test func everyDocumentWithExamplesIsFound() throws {
        for expected in ["README.md", "Examples/README.md", "Benchmarks/README.md", "FORMAT.md"] {
            #expect(Self.documents.contains(expected), "\(expected) not found among \(Self.documents)")
        }
        // Guards the extraction itself: every block of the README is found, and its object examples and its
        // engine example are separate programs.
        let readme = try DocumentationSource.read("README.md")
        let fences = readme.split(separator: "\n").filter { $0.trimmingCharacters(in: .whitespaces).hasPrefix("```swift") }
        let programs = try DocumentationSource.programs(in: readme)
        #expect(programs.flatMap(\.blocks).count == fences.count)
        #expect(programs.count >= 2, "README.md: \(programs.map { $0.blocks.map(\.fenceLine) })")
    }

    @Test(arguments: documents)
    func swiftBlocksCompile(_ document: String) throws {
        let text = try DocumentationSource.read(document)
        let programs: [DocumentationSource.Program]
        do {
            programs = try DocumentationSource.programs(in: text)
        } catch {
            Issue.record("\(document): \(error)")
            return
        }
        for program in programs {
            for block in program.blocks {
                if case .excerpt(let path) = block.marker {
                    checkExcerpt(block, of: path, in: document)
                }
            }
            let compiled = program.blocks.filter { $0.marker == nil }
            guard !compiled.isEmpty else { continue }
            let result = try SwiftTypechecker.shared.typecheck(compiled, document: document)
            guard !result.succeeded else { continue }
            // Name the block(s) the compiler complains about, by the line of their opening fence.
            let lines = result.diagnosticLines(in: document)
            let culprits = compiled.filter { block in lines.contains { block.codeLines.contains($0) } }
            let named = (culprits.isEmpty ? compiled : culprits).map { String($0.fenceLine) }
            let one = named.count == 1
            let what = one ? "block at line \(named[0])" : "blocks at lines \(named.joined(separator: ", "))"
            let together =
                compiled.count > 1
                ? " (the blocks at lines \(compiled.map { String($0.fenceLine) }.joined(separator: ", ")) are typechecked as one program)"
                : ""
            let verdict =
                result.output.contains("error:")
                ? (one ? "does not compile" : "do not compile")
                : (one ? "compiles with warnings" : "compile with warnings")
            Issue.record(
                """
                \(document): the ```swift \(what) \(verdict)\(together):
                \(result.output)
                """)
        }
    }

    private func checkExcerpt(_ block: DocumentationSource.Block, of path: String, in document: String) {
        let file = DocumentationSource.resolve(path, from: document)
        let source: String
        do {
            source = try DocumentationSource.read(file)
        } catch {
            Issue.record("\(document): the ```swift block at line \(block.fenceLine) is marked as an excerpt of \(path), which cannot be read: \(error)")
            return
        }
        if let differing = DocumentationSource.excerptMismatch(source, block.code) {
            Issue.record(
                """
                \(document): the ```swift block at line \(block.fenceLine) is not in \(file) as it says: its lines must \
                appear there in order, verbatim up to a common indentation, and line \(block.codeLines.lowerBound + differing) \
                does not:
                \(block.code.indices.contains(differing) ? block.code[differing] : "(an empty block)")
                """)
        }
    }

    /// The extraction rules above, on a document made up for them.
    @Test func blocksAndMarkersAreRead() throws {
        let text = """
            # Title
            ```swift
            import Strata
            let a = 1
            ```
            - a list item:

              ```swift
              let b = a
                  + 1
              ```
            <!-- compile: skip (shows an error on purpose) -->
            ```swift
            let c: Int = "c"
            ```
            ````md
            ```swift
            not swift: inside another fence
            ```
            ````
            <!-- compile: excerpt of Examples/main.swift -->
            ```swift
            func f() {}
            ```
            ```sh
            swift test
            ```
            ```swift
            // the engine
            @preconcurrency import StrataStorage
            ```
            """
        let programs = try DocumentationSource.programs(in: text)
        #expect(programs.count == 2)
        #expect(programs[0].blocks.map(\.fenceLine) == [2, 8, 13, 22])
        #expect(programs[0].blocks[1].code == ["let b = a", "    + 1"])
        #expect(programs[0].blocks[1].codeLines == 9..<11)
        #expect(programs[0].blocks[2].marker == .skip("shows an error on purpose"))
        #expect(programs[0].blocks[3].marker == .excerpt("Examples/main.swift"))
        #expect(programs[1].blocks.map(\.fenceLine) == [28])

        #expect(throws: DocumentationSource.ReadError.self) { try DocumentationSource.programs(in: "<!-- compile: skip -->\n```swift\n```") }
        #expect(throws: DocumentationSource.ReadError.self) { try DocumentationSource.programs(in: "<!-- compile: separate -->\n```swift\n```") }
        #expect(throws: DocumentationSource.ReadError.self) { try DocumentationSource.programs(in: "<!-- compile: skip (x) -->\n\ntext\n```swift\n```") }
        #expect(throws: DocumentationSource.ReadError.self) { try DocumentationSource.programs(in: "```swift\nlet a = 1\n") }

        #expect(DocumentationSource.resolve("Repository/main.swift", from: "Examples/README.md") == "Examples/Repository/main.swift")
        #expect(DocumentationSource.resolve("./Sources/a.swift", from: "README.md") == "Sources/a.swift")
        #expect(DocumentationSource.resolve("../FORMAT.md", from: "Benchmarks/README.md") == "FORMAT.md")

        let source = "struct S {\n    func f() {\n        g()\n    }\n}\n"
        #expect(DocumentationSource.excerptMismatch(source, ["func f() {", "    g()", "}", ""]) == nil)
        #expect(DocumentationSource.excerptMismatch(source, ["func f() {", "g()", "}"]) == 1)
        #expect(DocumentationSource.excerptMismatch(source, ["func h() {"]) == 0)
    }
}

/// Reads the ```swift blocks of a Markdown document and groups them into programs.
enum DocumentationSource {
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    enum Marker: Equatable, Sendable {
        case skip(String)
        case excerpt(String)
    }

    struct Block: Sendable {
        /// 1-based line of the opening fence.
        var fenceLine: Int
        /// The code, without the indentation of the fence (blocks in list items are indented).
        var code: [String]
        var marker: Marker?
        /// 1-based lines of the code in the document.
        var codeLines: Range<Int> { fenceLine + 1..<fenceLine + 1 + code.count }
        var startsProgram: Bool {
            guard
                let first = code.first(where: { line in
                    let trimmed = line.trimmingCharacters(in: .whitespaces)
                    return !trimmed.isEmpty && !trimmed.hasPrefix("//")
                })
            else { return false }
            let words = first.split(separator: " ")
            return words.first { !$0.hasPrefix("@") } == "import"
        }
    }

    struct Program: Sendable {
        var blocks: [Block]
    }

    struct ReadError: Error, CustomStringConvertible {
        var line: Int
        var problem: String
        var description: String { "line \(line): \(problem)" }
    }

    static func markdownFiles() -> [String] {
        let keys: [URLResourceKey] = [.isDirectoryKey]
        guard let walk = FileManager.default.enumerator(at: packageRoot, includingPropertiesForKeys: keys, options: [.skipsHiddenFiles]) else {
            return []
        }
        let root = packageRoot.standardizedFileURL.path + "/"
        var found: [String] = []
        for case let url as URL in walk where url.pathExtension == "md" {
            let path = url.standardizedFileURL.path
            if path.hasPrefix(root) { found.append(String(path.dropFirst(root.count))) }
        }
        return found.sorted()
    }

    /// `path`, relative to the directory of `document`, as a path relative to the package root.
    static func resolve(_ path: String, from document: String) -> String {
        var parts = document.split(separator: "/").dropLast().map(String.init)
        for part in path.split(separator: "/") where part != "." {
            if part == ".." { _ = parts.popLast() } else { parts.append(String(part)) }
        }
        return parts.joined(separator: "/")
    }

    static func read(_ relativePath: String) throws -> String {
        try String(contentsOf: packageRoot.appendingPathComponent(relativePath), encoding: .utf8)
    }

    static func programs(in text: String) throws -> [Program] {
        var programs: [Program] = []
        for block in try blocks(in: text) {
            if block.startsProgram || programs.isEmpty {
                programs.append(Program(blocks: [block]))
            } else {
                programs[programs.count - 1].blocks.append(block)
            }
        }
        return programs
    }

    static func blocks(in text: String) throws -> [Block] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var blocks: [Block] = []
        var pendingMarker: (line: Int, marker: Marker)?
        var index = 0
        while index < lines.count {
            let line = lines[index]
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            let lineNumber = index + 1
            index += 1
            if let fence = openingFence(trimmed) {
                let indent = line.prefix { $0 == " " }.count
                var code: [String] = []
                var closed = false
                while index < lines.count {
                    let inner = lines[index]
                    index += 1
                    let innerTrimmed = inner.trimmingCharacters(in: .whitespaces)
                    if innerTrimmed.hasPrefix(fence.marks) && innerTrimmed.allSatisfy({ $0 == fence.marks.first }) {
                        closed = true
                        break
                    }
                    code.append(String(inner.dropFirst(min(indent, inner.prefix { $0 == " " }.count))))
                }
                guard closed else { throw ReadError(line: lineNumber, problem: "the ``` fence opened here is never closed") }
                if fence.language == "swift" {
                    blocks.append(Block(fenceLine: lineNumber, code: code, marker: pendingMarker?.marker))
                } else if let pending = pendingMarker {
                    throw ReadError(line: pending.line, problem: "the marker is not followed by a ```swift block")
                }
                pendingMarker = nil
            } else if trimmed.hasPrefix("<!--") && trimmed.contains("compile:") {
                if let pending = pendingMarker {
                    throw ReadError(line: pending.line, problem: "the marker is not followed by a ```swift block")
                }
                pendingMarker = (lineNumber, try marker(trimmed, line: lineNumber))
            } else if !trimmed.isEmpty, let pending = pendingMarker {
                throw ReadError(line: pending.line, problem: "the marker is not followed by a ```swift block")
            }
        }
        if let pending = pendingMarker {
            throw ReadError(line: pending.line, problem: "the marker is not followed by a ```swift block")
        }
        return blocks
    }

    private static func openingFence(_ trimmed: String) -> (marks: String, language: String)? {
        guard let first = trimmed.first, first == "`" || first == "~" else { return nil }
        let marks = String(trimmed.prefix { $0 == first })
        guard marks.count >= 3 else { return nil }
        let info = trimmed.dropFirst(marks.count).trimmingCharacters(in: .whitespaces)
        return (marks, String(info.prefix { !$0.isWhitespace }).lowercased())
    }

    private static func marker(_ comment: String, line: Int) throws -> Marker {
        let usage = "a marker is `<!-- compile: excerpt of PATH -->` or `<!-- compile: skip (REASON) -->`"
        guard comment.hasPrefix("<!--"), comment.hasSuffix("-->"),
            let colon = comment.range(of: "compile:")
        else {
            throw ReadError(line: line, problem: usage)
        }
        let body = comment[colon.upperBound..<comment.index(comment.endIndex, offsetBy: -3)]
            .trimmingCharacters(in: .whitespaces)
        if body.hasPrefix("excerpt of ") {
            let path = body.dropFirst("excerpt of ".count).trimmingCharacters(in: .whitespaces)
            if !path.isEmpty { return .excerpt(path) }
        } else if body.hasPrefix("skip"), body.hasSuffix(")"), let open = body.firstIndex(of: "(") {
            let reason = body[body.index(after: open)..<body.index(before: body.endIndex)].trimmingCharacters(in: .whitespaces)
            if !reason.isEmpty { return .skip(reason) }
        }
        throw ReadError(line: line, problem: "\(usage), not \(comment)")
    }

    /// nil when `excerpt`'s lines are consecutive lines of `source`, each indented by the same prefix (blank
    /// lines match blank lines); else the index of the first line of `excerpt` that differs from
    /// `source` where the most of its first lines match.
    static func excerptMismatch(_ source: String, _ excerpt: [String]) -> Int? {
        let lines = source.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let body = Array(excerpt.reversed().drop { $0.trimmingCharacters(in: .whitespaces).isEmpty }.reversed())
        guard let first = body.first, !first.isEmpty else { return 0 }
        var best = 0
        for start in lines.indices where lines[start].hasSuffix(first) {
            let indent = lines[start].dropLast(first.count)
            guard indent.allSatisfy({ $0 == " " || $0 == "\t" }) else { continue }
            var matched = 0
            for (expected, actual) in zip(body, lines[start...]) {
                let same =
                    expected.trimmingCharacters(in: .whitespaces).isEmpty
                    ? actual.trimmingCharacters(in: .whitespaces).isEmpty
                    : actual == indent + expected
                guard same else { break }
                matched += 1
            }
            if matched == body.count { return nil }
            best = max(best, matched)
        }
        return best
    }
}

/// Runs the toolchain's `swiftc -typecheck` on documentation code, against this build's modules.
struct SwiftTypechecker: Sendable {
    struct Outcome {
        var succeeded: Bool
        var output: String

        /// The document lines the compiler's errors and warnings point at.
        func diagnosticLines(in document: String) -> [Int] {
            output.split(separator: "\n").compactMap { line in
                guard line.hasPrefix(document + ":"), line.contains(": error:") || line.contains(": warning:") else { return nil }
                return line.dropFirst(document.count + 1).split(separator: ":").first.flatMap { Int($0) }
            }
        }
    }

    struct SetupError: Error, CustomStringConvertible {
        var description: String
    }

    static let shared: SwiftTypechecker = SwiftTypechecker()

    /// The directory holding `Strata.swiftmodule` and `StrataStorage.swiftmodule` of the build this test runs
    /// from (`.build/<triple>/debug/Modules` beside the test binary).
    let modules: URL?
    let swiftc: URL?

    private init() {
        modules = Self.findModules()
        swiftc = Self.findSwiftc()
    }

    func typecheck(_ blocks: [DocumentationSource.Block], document: String) throws -> Outcome {
        guard let modules else {
            throw SetupError(
                description:
                    "Strata.swiftmodule was not found in a Modules directory above the test binary \(Self.executable?.path ?? "?"); the documentation cannot be typechecked"
            )
        }
        guard let swiftc else {
            throw SetupError(description: "swiftc was not found (SWIFT_EXEC, next to the loaded Swift runtime, or on PATH)")
        }
        var source = ""
        for block in blocks {
            // Quoted as a Swift string literal: the document's path names the compiler's diagnostics.
            source += "#sourceLocation(file: \"\(document)\", line: \(block.codeLines.lowerBound))\n"
            source += block.code.joined(separator: "\n") + "\n"
        }
        source += "#sourceLocation()\n"

        let work = FileManager.default.temporaryDirectory.appendingPathComponent("strata-docs-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let main = work.appendingPathComponent("main.swift")
        try source.write(to: main, atomically: true, encoding: .utf8)
        let log = work.appendingPathComponent("swiftc.log")
        guard FileManager.default.createFile(atPath: log.path, contents: nil) else {
            throw SetupError(description: "could not create \(log.path)")
        }

        let process = Process()
        process.executableURL = swiftc
        process.arguments = [
            "-typecheck", "-swift-version", "6", "-diagnostic-style", "llvm",
            "-module-name", "DocumentationExample",
            "-I", modules.path,
            // The build's clang module cache (Glibc, Foundation's C modules): already built, so a typecheck takes seconds.
            "-module-cache-path", modules.deletingLastPathComponent().appendingPathComponent("ModuleCache").path,
            main.path,
        ]
        process.currentDirectoryURL = work
        let output = try FileHandle(forWritingTo: log)
        process.standardOutput = output
        process.standardError = output
        try process.run()
        process.waitUntilExit()
        try output.close()
        let text = try String(contentsOf: log, encoding: .utf8)
        let warned = text.contains("warning:")
        return Outcome(
            succeeded: process.terminationReason == .exit && process.terminationStatus == 0 && !warned,
            output: text.isEmpty ? "swiftc exited with status \(process.terminationStatus)" : text)
    }

    private static var executable: URL? {
        #if os(Linux)
        if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            return URL(fileURLWithPath: path)
        }
        #endif
        return Bundle.main.executableURL
    }

    private static func findModules() -> URL? {
        var directory = executable?.deletingLastPathComponent()
        while let current = directory, current.path != "/" {
            let modules = current.appendingPathComponent("Modules")
            if FileManager.default.fileExists(atPath: modules.appendingPathComponent("Strata.swiftmodule").path) {
                return modules
            }
            directory = current.deletingLastPathComponent()
        }
        return nil
    }

    /// The compiler of the toolchain this binary was built with: its modules can only be read by that compiler.
    private static func findSwiftc() -> URL? {
        let fileManager = FileManager.default
        if let exec = ProcessInfo.processInfo.environment["SWIFT_EXEC"], fileManager.isExecutableFile(atPath: exec) {
            return URL(fileURLWithPath: exec)
        }
        // The Swift runtime this process loaded lives in <toolchain>/usr/lib/swift/<os>/; swiftc in <toolchain>/usr/bin/.
        // (Read with a FileHandle: String(contentsOfFile:) stops after the first page of a /proc file.)
        if let maps = try? FileHandle(forReadingAtPath: "/proc/self/maps")?.readToEnd(),
            let line = String(decoding: maps, as: UTF8.self).split(separator: "\n").first(where: { $0.hasSuffix("/libswiftCore.so") }),
            let slash = line.firstIndex(of: "/")
        {
            let candidate = URL(fileURLWithPath: String(line[slash...]))
                .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("bin/swiftc")
            if fileManager.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let candidate = URL(fileURLWithPath: String(directory)).appendingPathComponent("swiftc")
            if fileManager.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return nil
    }
}
