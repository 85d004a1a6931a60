// The commands of the strata tool. Each opens the file read-only (changing nothing on disk),
// reads what it needs, prints to stdout, and throws a `ToolFailure` for anything that should end
// the tool with a non-zero status.

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Strata
import StrataStorage

/// `strata info FILE`: what the file is and where its space goes.
func info(path: String) throws(ToolFailure) {
    let store = try openStore(path)
    // One attempt reads all three from snapshots of the same commit, or is made again.
    let (stats, metas, notes, treeCount) = try on(path, store) {
        let stats = try store.stats()
        let metas = try store.metaPages()
        let notes = try store.metaNotes()
        if metas.first(where: \.isCurrent)?.txnid != stats.txnid { throw StorageError.fileChangedDuringRead(path: path) }
        let trees = try store.read { txn -> Int in
            if txn.txnid != stats.txnid { throw StorageError.fileChangedDuringRead(path: path) }
            return try txn.treeNames().count
        }
        return (stats, metas, notes, trees)
    }
    let current = metas.first { $0.isCurrent }
    var lines: [(String, String)] = [
        ("file", path),
        ("format version", current.map { String($0.formatVersion) } ?? "?"),
        ("page size", "\(stats.pageSize) bytes"),
        ("transaction", String(stats.txnid)),
    ]
    for note in notes { lines.append(("  note", note.message)) }
    lines += [
        ("file size", "\(grouped(stats.fileSize)) bytes (\(humanBytes(stats.fileSize)))"),
        ("trees", String(treeCount)),
        ("pages", "\(grouped(stats.pageCount)) (\(humanBytes(stats.pageCount * UInt64(stats.pageSize))))"),
        ("  used", "\(grouped(stats.usedPages)) (meta pages included)"),
        ("  free", "\(grouped(stats.freePages)) (reusable by the next write: \(humanBytes(stats.freeBytes)))"),
        ("  at the end", "\(grouped(stats.freeTailPages)) of them (what a compacting commit gives back, compaction on)"),
        ("  by eighth", stats.freeFractionByEighth.map { "\(Int(($0 * 100).rounded()))%" }.joined(separator: " ") + " free, first eighth of the file first"),
        ("  pending reuse", "\(grouped(stats.pendingPages))" + (stats.pendingPages > 0 ? " (freed, but a live snapshot may still read them)" : "")),
    ]
    if stats.pendingHolders.isEmpty {
        if stats.pendingPages > 0 { lines.append(("  held by", "snapshots that ended while this ran")) }
    } else {
        for holder in stats.pendingHolders {
            let behind = stats.txnid - min(stats.txnid, holder.reader.txnid)
            lines.append(
                (
                    "  held by",
                    "snapshot of transaction \(holder.reader.txnid) (\(behind) commit\(behind == 1 ? "" : "s") behind), pid \(holder.reader.pid), reader slot \(holder.reader.slot): \(grouped(holder.pages)) pages"
                ))
        }
    }
    print(fields(lines))
}

/// `strata trees FILE`: one line per tree, the internal ones last.
func trees(path: String) throws(ToolFailure) {
    let store = try openStore(path)
    let stats = try on(path, store) { try store.treeStats() }
    let rows = stats.map { t -> [String] in
        [
            t.name, String(t.depth), grouped(t.branchPages), grouped(t.leafPages), grouped(t.overflowPages), grouped(t.entries),
            t.leafPages == 0 ? "-" : percentText(t.fillFactor),
        ]
    }
    print(table(["tree", "depth", "branch", "leaf", "overflow", "entries", "fill"], rows, rightAligned: [1, 2, 3, 4, 5, 6]))
    let user = stats.filter { $0.kind == .user }
    if user.isEmpty { print("(no named trees)") }
}

/// `strata check FILE`: the full walk; exits 5 when anything is wrong.
func check(path: String) throws(ToolFailure) {
    let store = try openStore(path)
    let report = try on(path, store) { try store.check() }
    let p = report.pages
    print("checked transaction \(report.txnid): \(grouped(report.pageCount)) pages of \(report.pageSize) bytes")
    print(
        "  \(p.meta) meta, \(grouped(p.catalog)) catalog, \(grouped(p.trees)) tree, \(grouped(p.overflow)) overflow, "
            + "\(grouped(p.freeTree)) free-list, \(grouped(p.commitRecord)) commit record, \(grouped(p.free)) free, \(grouped(p.leaked)) leaked")
    let user = report.trees.filter { $0.kind == .user }
    print("  \(user.count) tree\(user.count == 1 ? "" : "s"), \(grouped(user.reduce(UInt64(0)) { $0 + $1.entries })) entries")
    // Not problems: a torn newest commit that opening ignored, an empty meta slot.
    for warning in report.warnings { print("note: \(warning)") }
    for problem in report.problems { print("problem: \(problem)") }
    if report.omittedProblems > 0 { print("problem: … and \(report.omittedProblems) more") }
    // The object layer, when the pages it lives in are sound: records, keys and indexes checked
    // against the stored schemas (a file of the engine alone has none).
    var objectProblems = 0
    if report.isOK, user.contains(where: { $0.name == "strata:schema" }) {
        let objects = try on(path, store) { try StoredObjects.check(in: store) }
        print("  objects: \(grouped(objects.objects)) objects, \(grouped(objects.indexEntries)) index entries checked against their schemas")
        for note in objects.notes { print("note: \(note)") }
        for problem in objects.problems { print("problem: \(problem)") }
        objectProblems = objects.problemCount
    }
    if report.isOK && objectProblems == 0 {
        print("ok")
        return
    }
    let total = report.problems.count + report.omittedProblems + objectProblems
    throw ToolFailure(.checkFailed, "\(path): check found \(total) problem\(total == 1 ? "" : "s")")
}

/// `strata page FILE N`: one page decoded.
func page(path: String, number: UInt64) throws(ToolFailure) {
    let store = try openStore(path)
    let text = try on(path, store) { () throws -> String in
        do {
            return try store.describePage(number)
        } catch let error as InspectError {
            throw ToolFailure(.usage, "\(path): \(error)")
        }
    }
    print(text)
}

/// `strata readers FILE`: every live read snapshot in the lock file.
func readers(path: String) throws(ToolFailure) {
    let store = try openStore(path)
    // The tool reads the lock file's table without registering in it, so it never lists itself.
    let slots = store.readers()
    let latest = try on(path, store) { try store.read { $0.txnid } }
    print("newest transaction \(latest)")
    if slots.isEmpty {
        print("no live readers")
        return
    }
    let rows = slots.map { r -> [String] in
        let behind = latest - min(latest, r.txnid)
        return [String(r.slot), String(r.pid), String(r.txnid), behind == 0 ? "newest" : "\(behind) behind"]
    }
    print(table(["slot", "pid", "transaction", "age"], rows, rightAligned: [0, 2]))
}

/// `strata compact FILE OUT`: a compacted copy of the newest commit.
func compact(path: String, output: String) throws(ToolFailure) {
    if access(output, F_OK) == 0 {
        throw ToolFailure(.usage, "\(output) already exists; compact writes a new file")
    }
    let store = try openStore(path)
    let before = try on(path, store) { try store.stats().fileSize }
    // A copy whose source changed under it removes what it wrote, so it can simply be made again.
    try on(path, store) { try store.copy(to: output, compacting: true) }
    var st = stat()
    let after = stat(output, &st) == 0 ? UInt64(st.st_size) : 0
    print("wrote \(output): \(grouped(after)) bytes (\(humanBytes(after))), from \(grouped(before)) bytes (\(humanBytes(before)))")
}
