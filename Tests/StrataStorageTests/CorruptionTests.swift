import Testing
@testable import StrataStorage
import Foundation

/// Torn or corrupt meta pages, damaged pages, foreign, truncated and newer files: opening falls back
/// to the previous commit or throws a `StorageError`; nothing crashes.
@Suite struct CorruptionTests {
    static let pageSize = 4096

    /// A file with two commits: A (the older) and B (the newest). Returns their contents and ids.
    /// `flip` adds a commit first, so that B lands in the other meta slot.
    static func twoCommits(_ path: String, bigB: Bool = false, flip: Bool = false) throws -> (a: Contents, b: Contents, txnA: UInt64, txnB: UInt64) {
        let store = try Store(path: path, options: StoreOptions(pageSize: pageSize))
        var rng = SplitMix(seed: 5)
        var model: Contents = [:]
        if flip { try store.write { txn in try mutate(txn, &model, &rng, operations: 100) } }
        try store.write { txn in try mutate(txn, &model, &rng, operations: 2000) }
        let a = model
        let txnA = try store.stats().txnid
        try store.write { txn in
            try mutate(txn, &model, &rng, operations: bigB ? 40_000 : 200, keySpace: bigB ? 60_000 : 4000)
            try txn.createTree("only-in-b").put([1], [2])
            model["only-in-b"] = [[1]: [2]]
        }
        let txnB = try store.stats().txnid
        #expect(txnB == txnA + 1)
        return (a, model, txnA, txnB)
    }

    /// Reads a page of the file.
    static func page(_ path: String, _ n: UInt64) throws -> [UInt8] {
        try readFileRange(path, at: Int(n) * pageSize, count: pageSize)
    }

    /// Rewrites a meta page's checksum after editing it, so only the edited field is wrong.
    static func resealMeta(_ bytes: inout [UInt8]) {
        let sum = bytes.withUnsafeBytes { pageChecksum($0.baseAddress!, byteCount: $0.count) }
        withUnsafeBytes(of: sum.littleEndian) { s in for i in 0..<8 { bytes[i] = s[i] } }
    }

    enum Spoil: String, CaseIterable, Sendable {
        case zeroed, flippedByte, tornHalf, garbage, flippedTxnid
    }

    static func spoil(_ bytes: inout [UInt8], _ how: Spoil, rng: inout SplitMix) {
        switch how {
        case .zeroed: bytes = [UInt8](repeating: 0, count: bytes.count)
        case .flippedByte: bytes[bytes.count / 2 + rng.below(100)] ^= 0x5A
        case .tornHalf: for i in (bytes.count / 2)..<bytes.count { bytes[i] = 0 }; bytes[bytes.count / 2] = 1
        case .garbage: bytes = rng.byteArray(bytes.count)
        case .flippedTxnid: bytes[PageHeader.txnid] ^= 0x01  // a txnid off by one, checksum left stale
        }
    }

    /// Spoil the newest meta page in each way: opening falls back to the previous commit, whose data is
    /// visible and the newest's is not; the store then commits normally.
    @Test(arguments: Spoil.allCases, [false, true])
    func spoiledNewestMetaFallsBack(spoil how: Spoil, flip: Bool) throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let (a, b, txnA, txnB) = try Self.twoCommits(path, flip: flip)
        #expect(a != b)
        var rng = SplitMix(seed: 17)
        let slot = txnB % 2
        var meta = try Self.page(path, slot)
        Self.spoil(&meta, how, rng: &rng)
        try patchFile(path, at: Int(slot) * Self.pageSize, meta)

        let store = try Store(path: path)
        let opened = try store.stats().txnid
        #expect(opened == txnA, "\(how): opened at \(opened), expected \(txnA)")
        #expect(try contents(of: store) == a, "\(how): the previous commit's data")
        #expect(try store.read { try $0.tree("only-in-b") } == nil)
        // Writing on goes on from A, into the spoiled slot.
        _ = try store.write { try $0.createTree("after").put([9], [9]) }
        #expect(try store.stats().txnid == txnB)
        var expected = a
        expected["after"] = [[9]: [9]]
        #expect(try contents(of: store) == expected)
    }

    /// A page the newest commit wrote is damaged (or lost): the commit record check catches it and the
    /// previous commit is used. Covers inline records and record runs (a large commit).
    @Test(arguments: [false, true])
    func spoiledPageOfNewestCommitFallsBack(large: Bool) throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let (a, _, txnA, txnB) = try Self.twoCommits(path, bigB: large)
        let metaBytes = try Self.page(path, txnB % 2)
        let meta = metaBytes.withUnsafeBytes { Meta.fields($0.baseAddress!) }
        #expect((meta.recordRun != 0) == large, "large \(large): record run \(meta.recordRun)")
        // The commit's pages, from its record.
        var written: [UInt64] = []
        if meta.recordRun == 0 {
            for i in 0..<meta.recordCount {
                written.append(metaBytes.withUnsafeBytes { $0.baseAddress!.u64(MetaLayout.inlineRecord + meta.recordEntrySize * i) })
            }
        } else {
            let run = try readFileRange(path, at: Int(meta.recordRun) * Self.pageSize, count: Self.pageSize * 2)
            for i in 0..<min(meta.recordCount, 100) { written.append(run.withUnsafeBytes { $0.baseAddress!.u64(PageHeader.size + meta.recordEntrySize * i) }) }
        }
        #expect(written.count > 3)
        var rng = SplitMix(seed: large ? 2 : 1)
        let victims: [UInt64] = [written[rng.below(written.count)]] + (large ? [meta.recordRun] : [])
        for victim in victims {
            let original = try Self.page(path, victim)
            // A lost write: the page still holds something older (here: zeros); then a flipped byte.
            for damage in 0..<2 {
                var bytes = original
                if damage == 0 { bytes = [UInt8](repeating: 0, count: bytes.count) } else { bytes[Self.pageSize - 1 - rng.below(200)] ^= 0x10 }
                try patchFile(path, at: Int(victim) * Self.pageSize, bytes)
                do {
                    let store = try Store(path: path)
                    #expect(try store.stats().txnid == txnA, "page \(victim) damage \(damage)")
                    #expect(try contents(of: store) == a)
                }
                try patchFile(path, at: Int(victim) * Self.pageSize, original)
            }
        }
        // Restored, the newest commit is chosen again.
        let store = try Store(path: path)
        #expect(try store.stats().txnid == txnB)
    }

    /// Pages of the newest commit's trees that it did not write, replaced by valid pages of a later
    /// transaction (what reuse by a commit the disk lost would leave: the commit's record, which
    /// lists only its own pages, still verifies): reads and writes refuse them as corrupt, naming
    /// the newer transaction, instead of reading another commit's entries; `check()` reports them.
    @Test func aPageSealedByALaterTransactionIsRefused() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let (_, b, _, txnB) = try Self.twoCommits(path)
        let pageCount = try Store(path: path).stats().pageCount
        var resealed = 0
        for n in 2..<pageCount {
            var bytes = try Self.page(path, n)
            let (type, txnid) = bytes.withUnsafeBytes { ($0.baseAddress!.u8(PageHeader.type), $0.baseAddress!.u64(PageHeader.txnid)) }
            guard type == PageType.leaf.rawValue, txnid < txnB else { continue }
            withUnsafeBytes(of: (txnB + 3).littleEndian) { t in for i in 0..<8 { bytes[PageHeader.txnid + i] = t[i] } }
            Self.resealMeta(&bytes)  // the page's own checksum, over the new id
            try patchFile(path, at: Int(n) * Self.pageSize, bytes)
            resealed += 1
        }
        #expect(resealed > 3)
        let store = try Store(path: path)
        #expect(try store.stats().txnid == txnB)
        func isNewerPage(_ error: any Error) -> Bool {
            guard case StorageError.corrupt(_, let reason) = error else { return false }
            return reason.contains("written by transaction \(txnB + 3), newer than the snapshot's \(txnB)")
        }
        #expect(performing: { _ = try contents(of: store) }, throws: isNewerPage)
        #expect(
            performing: { try store.write { txn in for (name, entries) in b { for key in entries.keys { _ = try txn.createTree(name).put(key, [7]) } } } },
            throws: isNewerPage)
        #expect(!(try store.check().isOK))
    }

    /// Both meta pages damaged: no valid commit (or, with the magic gone, not a Strata file).
    /// A compacting copy checks the catalog's pages and every branch it walks, as it checks
    /// leaves: it reseals what it writes, so a damaged name copied over would look whole in the
    /// copy (`strata check` of it said ok, and the app's tree was gone under its name). The
    /// damaged leaf is one the newest commit did not write, which opening does not check.
    @Test(arguments: [false, true])
    func aCompactingCopyRefusesADamagedCatalog(validUTF8: Bool) throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let names = (0..<300).map { i in String(format: "tree-%04d-", i) + String(repeating: "n", count: 190) }
        do {
            // (No idle compaction: it could move the catalog leaf after the patch's place is found.)
            var options = StoreOptions(pageSize: Self.pageSize)
            options.compaction.idleDelay = nil
            let store = try Store(path: path, options: options)
            try store.write { txn in for name in names { _ = try txn.createTree(name).put([1], [2]) } }
            try store.write { txn in _ = try txn.createTree(names[299]).put([3], [4]) }
            store.close()
        }
        // The first tree's name, where the catalog leaf the newest commit reaches holds it: one
        // byte changed, the checksum left as it was. (Found through the catalog, not by the first
        // match in the file: a page's unused space can hold an old copy of the name, and where
        // such copies land depends on the order of the transaction's dirty pages, which hashing
        // varies from process to process; the patch then missed the live key about one run in
        // thirty.)
        let at = try Store(path: path, options: StoreOptions(pageSize: Self.pageSize)).read { snapshot -> Int in
            let cursor = Cursor(pages: snapshot.pages, root: snapshot.meta.catalog.root, owner: snapshot.pages)
            #expect(try cursor.first())
            #expect(cursor.key.elementsEqual(names[0].utf8))
            return try #require(cursor.key.baseAddress) - snapshot.pages.base
        }
        // (An "n" of its tail: the name still sorts first, so the catalog reads as whole and only
        // the leaf's checksum tells.)
        try patchFile(path, at: at + 20, [validUTF8 ? UInt8(ascii: "m") : 0xFF])
        let store = try Store(path: path, options: StoreOptions(pageSize: Self.pageSize))
        defer { store.close() }
        let out = temporaryPath()
        defer { removeStoreFiles(out) }
        #expect(throws: StorageError.self) { try store.copy(to: out) }
        #expect(!FileManager.default.fileExists(atPath: out))
    }

    @Test func bothMetasSpoiled() throws {
        for how in Spoil.allCases {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            _ = try Self.twoCommits(path)
            var rng = SplitMix(seed: 3)
            for slot: UInt64 in [0, 1] {
                var meta = try Self.page(path, slot)
                Self.spoil(&meta, how, rng: &rng)
                try patchFile(path, at: Int(slot) * Self.pageSize, meta)
            }
            do {
                _ = try Store(path: path)
                Issue.record("\(how): a file with both metas spoiled opened")
            } catch let error as StorageError {
                switch error {
                case .noValidMeta, .notAStrataFile: break
                default: Issue.record("\(how): \(error)")
                }
            }
        }
    }

    /// The newest meta's page size field damaged with the magic intact (and, separately, its checksum
    /// resealed): opening must not trust it over the intact previous meta.
    @Test func newestMetaWithDamagedPageSizeField() throws {
        for (reseal, flip, bogus) in [
            (false, false, 8192), (true, false, 8192), (false, true, 8192), (true, true, 8192),
            (false, false, 12345), (false, true, 12345), (true, true, 0),
        ] {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            let (a, _, txnA, txnB) = try Self.twoCommits(path, flip: flip)
            var meta = try Self.page(path, txnB % 2)
            meta.withUnsafeMutableBytes { $0.baseAddress!.setU32(MetaLayout.pageSize, UInt32(bogus)) }
            if reseal { Self.resealMeta(&meta) }
            try patchFile(path, at: Int(txnB % 2) * Self.pageSize, meta)
            let store = try Store(path: path)
            #expect(try store.stats().txnid == txnA, "page size \(bogus), reseal \(reseal), newest in slot \(txnB % 2)")
            #expect(try contents(of: store) == a, "page size \(bogus), reseal \(reseal), newest in slot \(txnB % 2)")
        }
    }

    /// A newer format version (checksum recomputed, so only the version is new) is refused.
    @Test func newerFormatVersionIsRefused() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        _ = try Self.twoCommits(path)
        for slot: UInt64 in [0, 1] {
            var meta = try Self.page(path, slot)
            meta.withUnsafeMutableBytes { $0.baseAddress!.setU32(MetaLayout.formatVersion, strataFormatVersion + 1) }
            Self.resealMeta(&meta)
            try patchFile(path, at: Int(slot) * Self.pageSize, meta)
        }
        #expect(throws: StorageError.unsupportedFormatVersion(path: path, found: strataFormatVersion + 1, supported: strataFormatVersion)) {
            _ = try Store(path: path)
        }
    }

    /// A format-4 file (before the commit log's patches, FORMAT.md §9) is read as it is, and its next
    /// commit writes a meta of this build's format, which a format-4 build then refuses.
    @Test func aFormat4FileIsReadAndItsNextCommitWritesTheCurrentFormat() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let (_, b, _, _) = try Self.twoCommits(path)
        for slot: UInt64 in [0, 1] {
            var meta = try Self.page(path, slot)
            meta.withUnsafeMutableBytes { $0.baseAddress!.setU32(MetaLayout.formatVersion, 4) }
            Self.resealMeta(&meta)
            try patchFile(path, at: Int(slot) * Self.pageSize, meta)
        }
        let store = try Store(path: path)
        #expect(try store.metaPages().first { $0.isCurrent }?.formatVersion == 4)
        #expect(try contents(of: store) == b)
        _ = try store.write { txn in try txn.createTree("after").put([1], [1]) }
        #expect(try store.metaPages().first { $0.isCurrent }?.formatVersion == strataFormatVersion)
        #expect(strataFormatVersion == 5)
        #expect(storeCheckProblems(store).isEmpty)
    }

    /// FORMAT.md states the version the code writes, at its top and in the meta page's table (both
    /// said 3 while the code wrote 5).
    @Test func formatMDStatesTheFormatVersionWritten() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("FORMAT.md"), encoding: .utf8)
        #expect(text.contains("Format version **\(strataFormatVersion)**."))
        #expect(text.contains("| 40 | u32 | formatVersion | \(strataFormatVersion) ("))
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let store = try Store(path: path, options: StoreOptions(durability: .noSync))
        _ = try store.write { txn in try txn.createTree("t").put([1], [1]) }
        #expect(try store.metaPages().allSatisfy { $0.formatVersion == strataFormatVersion })
    }

    /// Only the newest meta has a newer version: a newer build committed to this file. Falling back to
    /// the older meta would let this build write over that commit, so it is refused as well.
    @Test func newerFormatVersionInNewestMetaOnlyIsRefused() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let (_, _, _, txnB) = try Self.twoCommits(path)
        var meta = try Self.page(path, txnB % 2)
        meta.withUnsafeMutableBytes { $0.baseAddress!.setU32(MetaLayout.formatVersion, strataFormatVersion + 1) }
        Self.resealMeta(&meta)
        try patchFile(path, at: Int(txnB % 2) * Self.pageSize, meta)
        #expect(throws: StorageError.unsupportedFormatVersion(path: path, found: strataFormatVersion + 1, supported: strataFormatVersion)) {
            _ = try Store(path: path)
        }
    }

    @Test func wrongPageSizeRequested() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        do {
            let store = try Store(path: path, options: StoreOptions(pageSize: 4096))
            _ = try store.write { try $0.createTree("t").put([1], [1]) }
            // While a handle is open (the environment is shared) and after it closes.
            #expect(throws: StorageError.pageSizeMismatch(path: path, found: 4096, expected: 8192)) {
                _ = try Store(path: path, options: StoreOptions(pageSize: 8192))
            }
        }
        #expect(throws: StorageError.pageSizeMismatch(path: path, found: 4096, expected: 16384)) {
            _ = try Store(path: path, options: StoreOptions(pageSize: 16384))
        }
        // No page size requested: the file's own is used.
        #expect(try Store(path: path).pageSize == 4096)
        // A page size that is not one of Limits.pageSizes, for a new file.
        let other = temporaryPath()
        defer { removeStoreFiles(other) }
        #expect(throws: StorageError.self) { _ = try Store(path: other, options: StoreOptions(pageSize: 5000)) }
        #expect(throws: StorageError.self) { _ = try Store.inMemory(options: StoreOptions(pageSize: 1024)) }
    }

    /// An empty file is a new store (like a file that does not exist yet); with `createIfMissing`
    /// false a missing file is an error.
    @Test func emptyAndMissingFiles() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        try writeFileBytes(path, [])
        let store = try Store(path: path)
        #expect(try store.read { try $0.treeNames() } == [])
        _ = try store.write { try $0.createTree("t").put([1], [1]) }
        let missing = temporaryPath()
        var options = StoreOptions()
        options.createIfMissing = false
        #expect(throws: StorageError.io(operation: "open", path: missing, errno: 2)) { _ = try Store(path: missing, options: options) }
    }

    @Test func foreignFiles() throws {
        var rng = SplitMix(seed: 8)
        let text = Array(
            """
            Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut
            labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco.

            """.utf8)
        var magicOnly = [UInt8](repeating: 0, count: 3 * 4096)
        for (i, b) in MetaLayout.magicValue.enumerated() { magicOnly[MetaLayout.magic + i] = b }
        magicOnly.withUnsafeMutableBytes { $0.baseAddress!.setU32(MetaLayout.pageSize, 4096) }
        let cases: [(String, [UInt8])] = [
            ("one byte", [0x53]),
            ("short text", Array("hello, world\n".utf8)),
            ("text", Array((0..<200).flatMap { _ in text })),
            ("random bytes", rng.byteArray(100_000)),
            ("random pages", rng.byteArray(8 * 4096)),
            ("zeros", [UInt8](repeating: 0, count: 4 * 4096)),
            ("magic but nothing else", magicOnly),
        ]
        for (name, bytes) in cases {
            let path = temporaryPath()
            defer { removeStoreFiles(path) }
            try writeFileBytes(path, bytes)
            do {
                _ = try Store(path: path)
                Issue.record("\(name): a foreign file opened")
            } catch let error as StorageError {
                if name == "magic but nothing else" {
                    switch error {
                    case .noValidMeta, .corrupt, .unsupportedFormatVersion: break
                    default: Issue.record("\(name): \(error)")
                    }
                } else if case .notAStrataFile = error {
                } else {
                    Issue.record("\(name): expected notAStrataFile, got \(error)")
                }
            }
            // The file is left as it was.
            #expect(try readFileBytes(path) == bytes, "\(name): opening changed the file")
        }
    }

    /// A populated file cut short at several points: `truncated` when no commit is whole, or (when
    /// only the newest commit's pages are cut off, as after a crash before the sync that grew the
    /// file) the previous commit, complete.
    @Test func truncatedFiles() throws {
        let path = temporaryPath()
        defer { removeStoreFiles(path) }
        let (a, _, txnA, _) = try Self.twoCommits(path)
        let metaA = try Self.page(path, txnA % 2).withUnsafeBytes { Meta.fields($0.baseAddress!) }
        #expect(metaA.txnid == txnA)
        let sizeAtA = Int(metaA.pageCount) * Self.pageSize
        let metaB = try Self.page(path, (txnA + 1) % 2).withUnsafeBytes { Meta.fields($0.baseAddress!) }
        let sizeAtB = Int(metaB.pageCount) * Self.pageSize
        let original = try readFileBytes(path)
        #expect(original.count > 20 * Self.pageSize)
        // The file may run past the newest commit's pages (space it grew by ahead of need): cut
        // into that commit's pages, and also into the space past them, which loses nothing.
        #expect(original.count >= sizeAtB)
        if original.count > sizeAtB {
            let cut = temporaryPath()
            defer { removeStoreFiles(cut) }
            try writeFileBytes(cut, Array(original[0..<sizeAtB]))
            #expect(try Store(path: cut).stats().txnid == txnA + 1, "a file cut after its newest commit's pages lost that commit")
        }
        for length in [100, Self.pageSize + 10, 2 * Self.pageSize, sizeAtB / 2, sizeAtB - Self.pageSize, sizeAtB - 1] {
            let cut = temporaryPath()
            defer { removeStoreFiles(cut) }
            try writeFileBytes(cut, Array(original[0..<length]))
            do {
                let store = try Store(path: cut)
                // Only acceptable if what it opened is the previous commit, whole.
                #expect(length >= sizeAtA, "a file cut to \(length) of \(original.count) bytes opened")
                #expect(try store.stats().txnid == txnA)
                #expect(try contents(of: store) == a)
            } catch let error as StorageError {
                switch error {
                case .truncated:
                    break
                case .notAStrataFile:
                    #expect(length < MetaLayout.inlineRecord, "cut to \(length): \(error)")
                default:
                    Issue.record("cut to \(length) of \(original.count) bytes: expected truncated, got \(error)")
                }
            }
        }
    }

    /// Random bytes spoiled at random offsets of a populated file, many times: opening, reading every
    /// tree in every way, and writing either work or throw a `StorageError`. Never a crash or a hang.
    @Test func randomCorruptionNeverCrashes() throws {
        let seed: UInt64 = 0xC0_4404
        let iterations = TestEnv.int("STRATA_CORRUPTION_ITERATIONS", default: 400)
        let source = temporaryPath()
        defer { removeStoreFiles(source) }
        var rng = SplitMix(seed: seed)
        do {
            let store = try Store(path: source, options: StoreOptions(pageSize: Self.pageSize, durability: .noSync))
            var model: Contents = [:]
            try store.write { txn in try mutate(txn, &model, &rng, operations: 3000) }
            for _ in 0..<6 { try store.write { txn in try mutate(txn, &model, &rng, operations: 400) } }
            // Some long keys and a second-level tree, free pages and a record run in the history.
            try store.write { txn in
                let t = try txn.createTree("long")
                for i in 0..<300 { try t.put(bigEndianKey(UInt64(i)) + rng.byteArray(rng.within(100...900)), rng.byteArray(rng.within(0...3000))) }
            }
            try store.write { txn in _ = try txn.dropTree("b") }
            try store.write { txn in try mutate(txn, &model, &rng, operations: 200) }
        }
        let original = try readFileBytes(source)
        var openedFine = 0
        var refusedAtOpen = 0
        var failedLater = 0
        for iteration in 0..<iterations {
            var bytes = original
            let spoils = rng.within(1...6)
            for _ in 0..<spoils {
                let kind = rng.below(10)
                // Mostly page headers and entry areas of tree pages; sometimes anywhere, sometimes a meta.
                var offset = rng.below(bytes.count)
                if kind < 3 { offset = (offset / Self.pageSize) * Self.pageSize + rng.below(40) }
                if kind == 9 { offset = rng.below(2 * Self.pageSize) }
                let length = kind == 8 ? min(Self.pageSize, bytes.count - offset) : min(rng.within(1...16), bytes.count - offset)
                if rng.percent(30) {
                    bytes[offset] ^= UInt8(1) << UInt8(rng.below(8))
                } else {
                    for i in offset..<(offset + length) { bytes[i] = UInt8(truncatingIfNeeded: rng.next()) }
                }
            }
            let path = temporaryPath("corrupt")
            defer { removeStoreFiles(path) }
            try writeFileBytes(path, bytes)
            if ProcessInfo.processInfo.environment["STRATA_CORRUPTION_TRACE"] != nil { print("CorruptionTests: iteration \(iteration)") }
            let stage = exercise(path: path, seed: seed &+ UInt64(iteration))
            switch stage {
            case .ok: openedFine += 1
            case .open: refusedAtOpen += 1
            case .later: failedLater += 1
            case .foreignError(let error):
                Issue.record("seed \(seed) iteration \(iteration): a non-StorageError was thrown: \(error)")
            }
        }
        print(
            "CorruptionTests: \(iterations) corrupted files: \(openedFine) opened and read without error, \(refusedAtOpen) refused at open, \(failedLater) threw while reading or writing"
        )
        #expect(openedFine + refusedAtOpen + failedLater == iterations)
    }

    // MARK: Bad values behind good checksums

    // What a bug, or a bit flipped in memory before the checksum was computed, would leave: pages whose
    // checksums verify but whose content is wrong. The engine must throw, not trap or write over the
    // meta pages. The damage is made through internal APIs, inside an otherwise normal commit.

    /// A free-list entry naming a meta page, a page past the end, or a number whose byte offset overflows.
    @Test(arguments: [UInt64(0), 1, 5000, 1 << 52, 1 << 60, UInt64.max])
    func freeListEntryOutsideTheFile(page: UInt64) throws {
        let store = try Store.inMemory()
        _ = try store.write { try $0.createTree("t").put([1], [1]) }
        try store.write { txn in
            // Many copies, so that a stats() that trusted them would count more free pages than exist.
            let bogus = [FreeEntry](repeating: FreeEntry(page: page, born: 0), count: 40)
            try FreeListFormat.key(freedBy: 1, chunk: 7).withUnsafeBytes { (k) throws in
                try FreeListFormat.encode(bogus[...]).withUnsafeBytes { (v) throws in
                    _ = try txn.put(&txn.freeTree, key: k, value: v)
                }
            }
            try txn.createTree("t").put([2], [2])
        }
        let meta0 = try store.read { $0.pages.base.u64(PageHeader.txnid) }
        // The next writer needs pages from the free list: it must refuse the entry, not use it.
        #expect(throws: StorageError.self) {
            try store.write { txn in
                let t = try txn.createTree("t")
                for i in 0..<300 { try t.put(bigEndianKey(UInt64(i)), [UInt8](repeating: 1, count: 100)) }
            }
        }
        #expect(throws: StorageError.self) { _ = try store.stats() }
        // Nothing was written over the meta pages, and the data reads as before.
        #expect(try store.read { $0.pages.base.u64(PageHeader.txnid) } == meta0)
        #expect(try store.read { try $0.tree("t")?.get([2]) } == [2])
    }

    /// A tree's entry count in the catalog out of range (beyond Int.max, or 0 for a tree with entries).
    @Test(arguments: [UInt64.max, 1 << 63, 0])
    func treeCountOutOfRange(count: UInt64) throws {
        let store = try Store.inMemory()
        try store.write { txn in
            let t = try txn.createTree("t")
            for i in 0..<50 { try t.put([UInt8(i)], [UInt8(i)]) }
        }
        try store.write { txn in
            _ = try txn.createTree("t").put([200], [1])
            try #require(txn.trees[TreeName("t")]).info.count = count
        }
        // Reading it throws or gives a number; it never traps.
        do {
            _ = try store.read { try $0.tree("t")?.count }
        } catch {
            #expect(error is StorageError)
        }
        // Deleting every entry of a tree whose count says 0 must not trap either.
        do {
            try store.write { txn in
                guard let t = try txn.tree("t") else { return }
                for i in 0..<50 { try t.delete([UInt8(i)]) }
                try t.delete([200])
                _ = t.count
            }
        } catch {
            #expect(error is StorageError, "\(error)")
        }
    }

    enum Stage { case ok, open, later, foreignError(any Error) }

    /// Opens a possibly corrupt file and uses it in every way. Returns where a StorageError stopped it.
    func exercise(path: String, seed: UInt64) -> Stage {
        let store: Store
        do {
            store = try Store(path: path)
        } catch is StorageError {
            return .open
        } catch {
            return .foreignError(error)
        }
        var rng = SplitMix(seed: seed)
        do {
            _ = try store.stats()
            try store.read { txn in
                for name in try txn.treeNames() {
                    guard let tree = try txn.tree(name) else { continue }
                    _ = tree.count
                    var keys: [[UInt8]] = []
                    try tree.forEach { k, v in
                        keys.append(Array(k))
                        _ = v.count
                        return keys.count < 100_000
                    }
                    try tree.forEach(reverse: true) { _, v in
                        _ = v.first; return true
                    }
                    let cursor = tree.cursor()
                    if !keys.isEmpty {
                        for _ in 0..<20 {
                            let k = keys[rng.below(keys.count)]
                            _ = try tree.get(k)
                            if try cursor.seek(k) { _ = try cursor.prev(); _ = try cursor.next(); _ = try cursor.next() }
                        }
                    }
                    try tree.forEach(from: [0x10], to: [0xF0], reverse: rng.percent(50)) { _, _ in true }
                }
            }
            try store.write { txn in
                var model: Contents = [:]
                try mutate(txn, &model, &rng, operations: 300)
                for name in try txn.treeNames() where rng.percent(30) { try txn.dropTree(name) }
                try mutate(txn, &model, &rng, operations: 100)
            }
            try store.read { txn in
                for name in try txn.treeNames() { try txn.tree(name)?.forEach { _, _ in true } }
            }
            _ = try store.stats()
            return .ok
        } catch is StorageError {
            return .later
        } catch {
            return .foreignError(error)
        }
    }
}
