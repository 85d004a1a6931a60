#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Hot backup and compaction.
extension Store {
    /// Writes a consistent copy of the newest commit to a new file at `path` while writers go on.
    ///
    /// With `compacting` (the default) every tree is rewritten in key order into fresh, full pages:
    /// the copy holds no free pages and is the way to shrink a file. Without it the pages are copied
    /// as they are, free space included. The destination must not exist (a symbolic link to a
    /// missing file is followed: the copy is made there). The copy is written under a temporary
    /// name beside it (`NAME-copying-PID-N`, which a crash may leave behind) and given its name
    /// once complete and synced, never replacing a file that appeared there meanwhile (then it
    /// throws): nobody ever sees a partial copy under the name.
    ///
    /// ```swift
    /// try store.copy(to: "/backups/app.strata")
    /// ```
    /// A copy that fails (or whose source snapshot a writer changed under a read-only store, see
    /// `StoreOptions.readOnly`) removes what it wrote and throws. Under `withProgress` it reports
    /// the entries (or pages) copied and stops, removing what it wrote, with `CancellationError`.
    public func copy(to path: String, compacting: Bool = true) throws {
        // Where the name leads (through a symbolic link to a missing file: that file, as opening
        // a database there would create it).
        let destination = LockFileName.canonical(path)
        if PosixFile.exists(destination) { throw StorageError.io(operation: "create copy", path: path, errno: EEXIST) }
        // The copy is made under a name of its own and linked into place once complete and
        // synced: the destination never holds a partial copy, and a file that appears there
        // meanwhile (another process's database) is never written into or replaced.
        let temporary = destination + "-copying-\(currentPID())-\(UInt32.random(in: 0...UInt32.max))"
        defer {
            unlinkFile(LockFileName.path(for: temporary))
            // (The copy's store commits with `.noSync`, which pins its base in a commit log of
            // the temporary's name; the copy is synced before it is named, so the log holds
            // nothing it needs.)
            unlinkFile(CommitLog.path(for: temporary))
            unlinkFile(temporary)
        }
        // A page copy reads the snapshot's free pages too, which no snapshot pins.
        try holdingOffCuts(if: !compacting) {
            try read { snapshot in
                if compacting {
                    try compactingCopy(snapshot, to: temporary)
                } else {
                    try pageCopy(snapshot, to: temporary)
                }
            }
        }
        guard try FileCreation.giveName(temporary, as: destination, given: path) else {
            throw StorageError.io(operation: "create copy (a file appeared under the name meanwhile)", path: path, errno: EEXIST)
        }
        try syncDirectory(containing: destination)
    }

    private func compactingCopy(_ snapshot: ReadTransaction, to path: String) throws {
        // No idle-time compaction: nothing of this store may outlive the copy, which is given its
        // name once the store is closed.
        var options = StoreOptions(pageSize: pageSize, durability: .noSync)
        options.compaction = .off
        let target = try Store(path: path, options: options)
        defer { target.close() }
        // Commit in batches so a large copy never holds the whole file in dirty pages.
        let batchBytes = 64 << 20
        let control = OperationControl.current
        // Every page read is checked against its checksum, the catalog's and branches included:
        // the copy seals what it writes, so damage copied over would look whole there.
        var verified = Set<PageNo>()
        let names = try verifiedTreeNames(snapshot, verified: &verified)
        var sources: [ReadTree] = []
        for name in names {
            guard let source = try snapshot.tree(name) else {
                throw StorageError.corrupt(page: snapshot.meta.catalog.root, reason: "the catalog lists tree '\(name)', which it does not hold")
            }
            sources.append(source)
        }
        control?.begin("copy", total: sources.reduce(0) { $0 + $1.count })
        for (name, source) in zip(names, sources) {
            let cursor = source.cursor()
            var more = try cursor.first()
            _ = try target.write { try $0.createTree(name) }
            while more {
                more = try target.write { txn -> Bool in
                    let tree = try txn.createTree(name)
                    var bytes = 0
                    var more = true
                    while more && bytes < batchBytes {
                        try control?.step()
                        try cursor.verifyPathSealed(verified: &verified)
                        // A key no writer makes (a damaged leaf whose checksum was made to
                        // match) is the source's damage, not the caller's bad key.
                        if cursor.key.isEmpty || cursor.key.count > maxKeySize {
                            throw StorageError.corrupt(
                                page: cursor.leafPage ?? 0, reason: "tree '\(name)' holds a key of \(cursor.key.count) bytes, outside 1...\(maxKeySize)")
                        }
                        try tree.put(cursor.key, cursor.value)
                        bytes += cursor.key.count + cursor.value.count
                        more = try cursor.next()
                    }
                    return more
                }
            }
        }
        try target.env.file.sync()
    }

    /// The catalog's tree names, its pages checked against their checksums; a name that is not
    /// UTF-8 (which no writer stores) is damage.
    private func verifiedTreeNames(_ snapshot: ReadTransaction, verified: inout Set<PageNo>) throws -> [String] {
        var names: [String] = []
        let cursor = Cursor(pages: snapshot.pages, root: snapshot.meta.catalog.root, owner: snapshot.pages)
        var more = try cursor.first()
        while more {
            try cursor.verifyPathSealed(verified: &verified)
            guard let name = String(validating: cursor.key, as: UTF8.self) else {
                throw StorageError.corrupt(page: cursor.leafPage ?? 0, reason: "the catalog holds a tree name that is not UTF-8")
            }
            names.append(name)
            more = try cursor.next()
        }
        return names
    }

    private func pageCopy(_ snapshot: ReadTransaction, to path: String) throws {
        let target = try PosixFile(path: path, mode: .createNew(permissions: 0o644))
        let meta = snapshot.meta
        let chunk = 256
        var page: UInt64 = 2
        let control = OperationControl.current
        control?.begin("copy pages", total: Int(clamping: meta.pageCount))
        while page < meta.pageCount {
            let count = Int(min(UInt64(chunk), meta.pageCount - page))
            try control?.step(count)
            try target.write(
                UnsafeRawBufferPointer(start: snapshot.pages.base + Int(page) * pageSize, count: count * pageSize),
                at: page * UInt64(pageSize))
            page += UInt64(count)
        }
        try target.sync()
        // The snapshot's meta in its own slot and an empty other slot. A record run, if the commit
        // had one, is copied with the pages (the snapshot pins it) and still verifies; an inline
        // record is left empty, since every page is already synced.
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: pageSize, alignment: 4096)
        defer { buffer.deallocate() }
        var copy = meta
        if copy.recordRun == 0 { copy.recordCount = 0 }
        copy.encode(into: buffer, inlineRecord: [])
        try target.write(UnsafeRawBufferPointer(start: buffer, count: pageSize), at: (meta.txnid % 2) * UInt64(pageSize))
        buffer.initializeMemory(as: UInt8.self, repeating: 0, count: pageSize)
        try target.write(UnsafeRawBufferPointer(start: buffer, count: pageSize), at: ((meta.txnid + 1) % 2) * UInt64(pageSize))
        try target.sync()
    }
}
