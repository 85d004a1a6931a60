// Checks what DocC itself does not: that every public symbol we declare has a doc comment, and that
// every public top-level symbol and every article of the catalog is curated on its module's landing
// page (DocC would otherwise file them silently under default groups).
//
//     swift Scripts/doc-coverage.swift <symbol-graph-dir> <landing-page.md> [<symbol-graph-dir> <landing-page.md>]...
//
// Reads every `*.symbols.json` in each directory (graphs extracted with `-minimum-access-level public`).
// A symbol must carry its own doc comment when it has a source location, unless its comment comes from
// another module: the compiler copies a requirement's documentation onto an undocumented implementation
// of a stdlib or Foundation protocol (`description`, `hash(into:)`, `init(from:)`, `startIndex`), and
// repeating that text would say nothing new. Symbols without a location were written by the compiler
// (Codable and RawRepresentable synthesis); `::SYNTHESIZED::` ones are protocol-extension members as
// seen from a conforming type, documented where the extension declares them.
import Foundation

struct Graph: Decodable {
    struct Module: Decodable { var name: String }
    struct Symbol: Decodable {
        struct Identifier: Decodable { var precise: String }
        struct Kind: Decodable { var identifier: String }
        struct DocComment: Decodable {
            struct Line: Decodable { var text: String }
            var module: String?
            var lines: [Line]
        }
        struct Location: Decodable {
            struct Position: Decodable { var line: Int }
            var uri: String
            var position: Position
        }
        var identifier: Identifier
        var kind: Kind
        var pathComponents: [String]
        var docComment: DocComment?
        var location: Location?
    }
    var module: Module
    var symbols: [Symbol]
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("doc-coverage: \(message)\n".utf8))
    exit(2)
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard !arguments.isEmpty, arguments.count % 2 == 0 else {
    fail("usage: swift doc-coverage.swift <symbol-graph-dir> <landing-page.md> [<symbol-graph-dir> <landing-page.md>]...")
}

var undocumented: [String] = []
var uncurated: [String] = []
for pair in stride(from: 0, to: arguments.count, by: 2) {
    let directory = arguments[pair]
    let landingPage = arguments[pair + 1]
    guard let landing = try? String(contentsOfFile: landingPage, encoding: .utf8) else { fail("cannot read \(landingPage)") }
    let articles = URL(fileURLWithPath: landingPage).deletingLastPathComponent().appendingPathComponent("Articles")
    for article in ((try? FileManager.default.contentsOfDirectory(atPath: articles.path)) ?? []).sorted() where article.hasSuffix(".md") {
        let name = String(article.dropLast(3))
        if !landing.contains("<doc:\(name)>") {
            uncurated.append("\(articles.path)/\(article): <doc:\(name)> is not listed in \(landingPage)")
        }
    }
    let files = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
        .filter { $0.hasSuffix(".symbols.json") }
        .sorted()
    guard !files.isEmpty else { fail("no symbol graphs in \(directory)") }
    for file in files {
        let url = URL(fileURLWithPath: directory).appendingPathComponent(file)
        let graph: Graph
        do { graph = try JSONDecoder().decode(Graph.self, from: Data(contentsOf: url)) } catch { fail("\(file): \(error)") }
        // `Strata@Foundation.symbols.json` would hold our extensions of another module's types: their
        // members are still ours to document, but DocC curates them under the extended module itself.
        let module = graph.module.name
        let extendsOtherModule = file.contains("@")
        var declared = 0
        var missing = 0
        for symbol in graph.symbols {
            guard let location = symbol.location, !symbol.identifier.precise.contains("::SYNTHESIZED::") else { continue }
            declared += 1
            let name = symbol.pathComponents.joined(separator: ".")
            let path = location.uri.replacingOccurrences(of: "file://", with: "")
            let relative = path.range(of: "/Sources/").map { "Sources/" + path[$0.upperBound...] } ?? path
            let place = "\(relative):\(location.position.line + 1): \(module).\(name) (\(symbol.kind.identifier))"

            let documented: Bool
            if let comment = symbol.docComment {
                documented =
                    (comment.module.map { $0 != module } ?? false)
                    || comment.lines.contains { !$0.text.trimmingCharacters(in: .whitespaces).isEmpty }
            } else {
                documented = false
            }
            if !documented {
                missing += 1
                undocumented.append(place)
            }

            if !extendsOtherModule, symbol.pathComponents.count == 1 {
                let top = symbol.pathComponents[0]
                let links = ["``\(top)``", "``\(top)(", "``\(module)/\(top)``", "``\(module)/\(top)("]
                if !links.contains(where: { landing.contains($0) }) {
                    uncurated.append("\(place) is not listed in \(landingPage)")
                }
            }
        }
        print("doc-coverage: \(file): \(declared) public symbols declared in source, \(missing) without a doc comment")
    }
}

if !undocumented.isEmpty {
    print("doc-coverage: public symbols without a documentation comment:")
    for line in undocumented.sorted() { print("  " + line) }
}
if !uncurated.isEmpty {
    print("doc-coverage: public top-level symbols and articles missing from their landing page's Topics:")
    for line in uncurated.sorted() { print("  " + line) }
}
if !undocumented.isEmpty || !uncurated.isEmpty { exit(1) }
