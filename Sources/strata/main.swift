// strata: the dump tool. Argument parsing and dispatch; the commands live in Commands.swift.
//
//   strata info FILE | trees FILE | check FILE | page FILE N | readers FILE | compact FILE OUT
//   strata schema FILE | dump FILE [--model NAME] [--json] | help
//
// Every command opens FILE read-only and changes nothing on disk (see `openStore`).
//
// Exit codes (see `ExitCode`): 0 ok, 1 usage, 2 missing file, 3 not a Strata file, 4 corrupt,
// 5 check found problems, 6 other I/O error, 7 the file changed during inspection and writers
// could not be held off (run again).

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let arguments = Array(CommandLine.arguments.dropFirst())

func run(_ arguments: [String]) throws(ToolFailure) {
    guard let command = arguments.first else {
        throw ToolFailure(.usage, "no command given\n" + usage)
    }
    let rest = Array(arguments.dropFirst())
    // An operand that looks like an option and names no file is one this command does not take
    // (`strata info -x` said "-x: no such file", exit 2, where a usage error is meant).
    func refuseOptions(_ given: [String], usage: String) throws(ToolFailure) {
        if let option = given.first(where: { $0.count > 1 && $0.hasPrefix("-") && access($0, F_OK) != 0 }) {
            throw ToolFailure(.usage, "unknown option '\(option)'; usage: strata \(command) \(usage)")
        }
    }
    func operands(_ names: String...) throws(ToolFailure) -> [String] {
        // (The input file alone: an output may be named anything, `compact`'s OUT a new name.)
        try refuseOptions(Array(rest.prefix(1)), usage: names.joined(separator: " "))
        if rest.count != names.count {
            throw ToolFailure(.usage, "usage: strata \(command) \(names.joined(separator: " "))")
        }
        return rest
    }
    switch command {
    case "help", "-h", "--help":
        print(usage)
    case "info":
        try info(path: operands("FILE")[0])
    case "trees":
        try trees(path: operands("FILE")[0])
    case "check":
        try check(path: operands("FILE")[0])
    case "page":
        let args = try operands("FILE", "N")
        guard let number = parsePageNumber(args[1]) else {
            throw ToolFailure(.usage, "page number '\(args[1])' is not a non-negative integer")
        }
        try page(path: args[0], number: number)
    case "readers":
        try readers(path: operands("FILE")[0])
    case "schema":
        try schema(path: operands("FILE")[0])
    case "dump":
        guard let path = rest.first else { throw ToolFailure(.usage, "usage: strata dump FILE [--model NAME] [--json]") }
        try refuseOptions([path], usage: "FILE [--model NAME] [--json]")
        var model: String?
        var json = false
        var i = 1
        while i < rest.count {
            switch rest[i] {
            case "--json": json = true
            case "--model":
                guard i + 1 < rest.count else { throw ToolFailure(.usage, "--model needs a model name") }
                model = rest[i + 1]
                i += 1
            default: throw ToolFailure(.usage, "unknown option '\(rest[i])'; usage: strata dump FILE [--model NAME] [--json]")
            }
            i += 1
        }
        try dump(path: path, model: model, json: json)
    case "compact":
        let args = try operands("FILE", "OUT")
        try compact(path: args[0], output: args[1])
    default:
        throw ToolFailure(.usage, "unknown command '\(command)'\n" + usage)
    }
}

do {
    try run(arguments)
    // Output that did not reach standard output (a full disk, say) is an I/O error, as a failed
    // write of `dump`'s own is: a script must not take a cut-off listing for the whole.
    // (All streams: `stdout` itself is shared mutable state to Swift 6. The last flush fails
    // for a stream whose earlier writes failed, its buffered bytes still unwritten.)
    if fflush(nil) != 0 {
        let err = errno
        printError("standard output: write failed: \(systemMessage(err))")
        exit(ExitCode.ioError.rawValue)
    }
    exit(ExitCode.ok.rawValue)
} catch {
    printError(error.message)
    exit(error.code.rawValue)
}
