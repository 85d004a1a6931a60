// Branch and leaf pages: slotted pages of sorted entries. Layout in FORMAT.md, "Branch and leaf pages".
//
// After the 32-byte header comes an array of u16 slot offsets, one per entry, in key order. Entries
// are packed from the end of the page downwards; `upper` is the lowest entry byte. Deleting an entry
// leaves its bytes as garbage until the page is compacted.
//
// Leaf entry:   u16 keyLength, u8 flags (bit 0: value in overflow pages), u8 0, u32 valueLength,
//               key bytes, then the value bytes, or the u64 first page of the overflow run.
// Branch entry: u64 child page, u64 entries in the child's subtree, u16 keyLength, key bytes.
//               Entry 0's key is empty: it stands for "everything below entry 1's key". (Format 2
//               branches, type 2, have no count: u64 child, u16 keyLength, key; they are read, and
//               rewritten as counted branches when a file is upgraded.)

enum LeafEntry {
    static let headerSize = 8
    static let overflowFlag: UInt8 = 1
}

enum BranchEntry {
    /// A counted branch entry's header: child, count, key length.
    static let headerSize = 18
    static let countOffset = 8
    static let keyLengthOffset = 16
    /// Format 2's branch entry header: child, key length.
    static let legacyHeaderSize = 10
    static let legacyKeyLengthOffset = 8
}

/// Where a leaf's value lives.
enum LeafValue {
    case inline(UnsafeRawBufferPointer)
    case overflow(page: PageNo, length: Int)
}

/// A validated view of a branch or leaf page. Every accessor checks the bytes it reads against
/// the page bounds, so a corrupt page throws instead of reading outside it.
struct Node {
    let base: UnsafeRawPointer
    let pgno: PageNo
    let pageSize: Int
    let count: Int
    let isLeaf: Bool
    /// A branch whose entries carry subtree counts (every branch a format-3 writer makes).
    let isCounted: Bool
    /// Lowest offset an entry may start at: the end of the slot array.
    private let slotsEnd: Int

    init(_ base: UnsafeRawPointer, pgno: PageNo, pageSize: Int) throws {
        self.base = base
        self.pgno = pgno
        self.pageSize = pageSize
        let type = base.u8(PageHeader.type)
        if type == PageType.leaf.rawValue {
            isLeaf = true
            isCounted = false
        } else if type == PageType.countedBranch.rawValue {
            isLeaf = false
            isCounted = true
        } else if type == PageType.branch.rawValue {
            isLeaf = false
            isCounted = false
        } else {
            throw StorageError.corrupt(page: pgno, reason: "expected a branch or leaf page, found type \(type)")
        }
        count = Int(base.u16(PageHeader.count))
        slotsEnd = PageHeader.size + 2 * count
        let upper = Int(base.u16(PageHeader.upper))
        if upper < slotsEnd || upper > pageSize {
            throw StorageError.corrupt(page: pgno, reason: "entry area starts at \(upper), outside \(slotsEnd)...\(pageSize) for \(count) slots")
        }
        if !isLeaf && count == 0 {
            throw StorageError.corrupt(page: pgno, reason: "branch page without children")
        }
    }

    @inline(__always) func slot(_ i: Int) -> Int {
        Int(base.u16(PageHeader.size + 2 * i))
    }

    /// Size of an entry's fixed header on this page.
    @inline(__always) private var headerSize: Int {
        isLeaf ? LeafEntry.headerSize : (isCounted ? BranchEntry.headerSize : BranchEntry.legacyHeaderSize)
    }

    /// Where an entry's key length sits, from the entry's start.
    @inline(__always) private var keyLengthOffset: Int {
        isLeaf ? 0 : (isCounted ? BranchEntry.keyLengthOffset : BranchEntry.legacyKeyLengthOffset)
    }

    /// Offset of entry `i`, checked to leave room for its fixed header.
    @inline(__always) func entryOffset(_ i: Int) throws -> Int {
        let off = slot(i)
        if off < slotsEnd || off + headerSize > pageSize {
            throw StorageError.corrupt(page: pgno, reason: "slot \(i) points at \(off), outside the entry area")
        }
        return off
    }

    @inline(__always) func key(_ i: Int) throws -> UnsafeRawBufferPointer {
        let off = try entryOffset(i)
        let keyStart = off + headerSize
        let keyLength = Int(base.u16(off + keyLengthOffset))
        if keyStart + keyLength > pageSize {
            throw StorageError.corrupt(page: pgno, reason: "key of entry \(i) runs past the page end")
        }
        return UnsafeRawBufferPointer(start: base + keyStart, count: keyLength)
    }

    func child(_ i: Int) throws -> PageNo {
        let off = try entryOffset(i)
        return base.u64(off)
    }

    /// Entries in child `i`'s subtree, as a counted branch records it; nil on a format-2 branch.
    @inline(__always) func childCount(_ i: Int) throws -> UInt64? {
        guard isCounted else { return nil }
        return base.u64(try entryOffset(i) + BranchEntry.countOffset)
    }

    /// Entries below this page: a leaf's own count, a counted branch's sum (nil for a format-2
    /// branch, whose children must be counted).
    func subtreeCount() throws -> UInt64? {
        if isLeaf { return UInt64(count) }
        guard isCounted else { return nil }
        var total: UInt64 = 0
        for i in 0..<count { total &+= try childCount(i) ?? 0 }
        return total
    }

    func value(_ i: Int) throws -> LeafValue { try leafEntry(i).value }

    /// Leaf entry `i`'s key and value location, reading its slot and header once.
    @inline(__always)
    func leafEntry(_ i: Int) throws -> (key: UnsafeRawBufferPointer, value: LeafValue) {
        let off = try entryOffset(i)
        let keyLength = Int(base.u16(off))
        let valueLength = Int(base.u32(off + 4))
        let keyStart = off + LeafEntry.headerSize
        let valueStart = keyStart + keyLength
        let key = UnsafeRawBufferPointer(start: base + keyStart, count: keyLength)
        if base.u8(off + 2) & LeafEntry.overflowFlag != 0 {
            if valueStart + 8 > pageSize {
                throw StorageError.corrupt(page: pgno, reason: "overflow reference of entry \(i) runs past the page end")
            }
            return (key, .overflow(page: base.u64(valueStart), length: valueLength))
        }
        if valueStart + valueLength > pageSize {
            throw StorageError.corrupt(page: pgno, reason: "entry \(i) runs past the page end")
        }
        return (key, .inline(UnsafeRawBufferPointer(start: base + valueStart, count: valueLength)))
    }

    /// Bytes entry `i` occupies in the entry area (not counting its slot).
    func entrySize(_ i: Int) throws -> Int {
        let off = try entryOffset(i)
        if isLeaf {
            let keyLength = Int(base.u16(off))
            let overflow = base.u8(off + 2) & LeafEntry.overflowFlag != 0
            let size = LeafEntry.headerSize + keyLength + (overflow ? 8 : Int(base.u32(off + 4)))
            if off + size > pageSize { throw StorageError.corrupt(page: pgno, reason: "entry \(i) runs past the page end") }
            return size
        }
        let size = headerSize + Int(base.u16(off + keyLengthOffset))
        if off + size > pageSize { throw StorageError.corrupt(page: pgno, reason: "entry \(i) runs past the page end") }
        return size
    }

    /// The raw bytes of entry `i`.
    func entryBytes(_ i: Int) throws -> UnsafeRawBufferPointer {
        let off = try entryOffset(i)
        return UnsafeRawBufferPointer(start: base + off, count: try entrySize(i))
    }

    /// Leaf: the first index whose key is ≥ `key`, and whether it is equal.
    func leafSearch(_ key: UnsafeRawBufferPointer) throws -> (index: Int, found: Bool) {
        try leafSearch(key, in: 0, count)
    }

    /// `leafSearch` for a key known not to sort below the entry at `hint` (sorted writes: the
    /// previous put's place). The entry there and the next one decide most searches of a run of
    /// keys that go to one spot; the rest search above `hint`. A hint the page does not bear out
    /// (out of range, or its entry above `key`) searches the whole page.
    func leafSearch(_ key: UnsafeRawBufferPointer, from hint: Int) throws -> (index: Int, found: Bool) {
        guard hint >= 0, hint < count else { return try leafSearch(key) }
        let c = compareBytes(try self.key(hint), key)
        if c == 0 { return (hint, true) }
        if c > 0 { return try leafSearch(key) }
        let next = hint + 1
        guard next < count else { return (next, false) }
        let order = compareBytes(try self.key(next), key)
        if order >= 0 { return (next, order == 0) }
        return try leafSearch(key, in: next + 1, count)
    }

    /// The binary search of `leafSearch` over the entries `low..<high`, whose keys below `low`
    /// are known to be smaller than `key`.
    @inline(__always)
    private func leafSearch(_ key: UnsafeRawBufferPointer, in low: Int, _ high: Int) throws -> (index: Int, found: Bool) {
        var low = low
        var high = high
        while low < high {
            let mid = (low + high) >> 1
            let c = compareBytes(try self.key(mid), key)
            if c < 0 {
                low = mid + 1
            } else if c > 0 {
                high = mid
            } else {
                return (mid, true)
            }
        }
        return (low, false)
    }

    /// Branch: the index of the child whose subtree holds `key`.
    func branchSearch(_ key: UnsafeRawBufferPointer) throws -> Int {
        var low = 1
        var high = count
        while low < high {
            let mid = (low + high) >> 1
            if compareBytes(try self.key(mid), key) <= 0 { low = mid + 1 } else { high = mid }
        }
        return low - 1
    }

    /// Bytes in use: header, slots and live entries.
    var usedBytes: Int {
        let upper = Int(base.u16(PageHeader.upper))
        let garbage = Int(base.u16(PageHeader.garbage))
        return PageHeader.size + 2 * count + (pageSize - upper) - garbage
    }

    /// Checks every entry, so that a page about to be modified cannot send a copy outside it.
    func validateAll() throws {
        // One pass with every check inline: this runs on every page a write copies, and the
        // checked accessors (slot, header and size read again per call) cost thousands of
        // instructions a page. A page failing any check is walked again by them, for the message.
        let header = headerSize, keyLengthAt = keyLengthOffset
        var live = 0
        var sound = true
        for i in 0..<count {
            let off = slot(i)
            if off < slotsEnd || off + header > pageSize { sound = false; break }
            let size: Int
            if isLeaf {
                let overflow = base.u8(off + 2) & LeafEntry.overflowFlag != 0
                size = LeafEntry.headerSize + Int(base.u16(off)) + (overflow ? 8 : Int(base.u32(off + 4)))
                // (An overflow entry ends with its run's first page number.)
                if off + size > pageSize || (overflow && base.u64(off + size - 8) < 2) { sound = false; break }
            } else {
                size = header + Int(base.u16(off + keyLengthAt))
                if off + size > pageSize { sound = false; break }
            }
            live += size
        }
        if !sound {
            for i in 0..<count {
                _ = try entrySize(i)
                if isLeaf, case .overflow(let page, _) = try value(i), page < 2 {
                    throw StorageError.corrupt(page: pgno, reason: "entry \(i) references overflow page \(page)")
                }
            }
            throw StorageError.corrupt(page: pgno, reason: "an entry runs outside the page")
        }
        let upper = Int(base.u16(PageHeader.upper))
        let garbage = Int(base.u16(PageHeader.garbage))
        if live + garbage != pageSize - upper {
            throw StorageError.corrupt(page: pgno, reason: "entries (\(live) bytes) and garbage (\(garbage)) do not fill the entry area (\(pageSize - upper))")
        }
    }
}

/// Writes to a dirty branch or leaf page owned by the write transaction.
struct MutableNode {
    let base: UnsafeMutableRawPointer
    let pageSize: Int

    var count: Int { Int(UnsafeRawPointer(base).u16(PageHeader.count)) }
    var upper: Int { Int(UnsafeRawPointer(base).u16(PageHeader.upper)) }
    var garbage: Int { Int(UnsafeRawPointer(base).u16(PageHeader.garbage)) }
    var contiguousFree: Int { upper - PageHeader.size - 2 * count }
    var totalFree: Int { contiguousFree + garbage }

    /// Starts an empty page of `type`. Zeros all of it, not only the header: the buffer is fresh
    /// from the heap, and its unused space goes to disk with the page (it held whatever the process
    /// freed there: another database's records, a network buffer).
    static func initialize(_ base: UnsafeMutableRawPointer, pageSize: Int, type: PageType) {
        base.initializeMemory(as: UInt8.self, repeating: 0, count: pageSize)
        base.setU8(PageHeader.type, type.rawValue)
        base.setU16(PageHeader.upper, UInt16(truncatingIfNeeded: pageSize))
    }

    /// Appends an entry after the existing ones (the page must have room).
    func append(_ entry: UnsafeRawBufferPointer) {
        let n = count
        let newUpper = upper - entry.count
        if entry.count > 0 { (base + newUpper).copyMemory(from: entry.baseAddress!, byteCount: entry.count) }
        base.setU16(PageHeader.size + 2 * n, UInt16(newUpper))
        base.setU16(PageHeader.count, UInt16(n + 1))
        base.setU16(PageHeader.upper, UInt16(newUpper))
    }

    /// Inserts an entry at `index`. Returns false when the page cannot hold it even compacted.
    func insert(_ entry: UnsafeRawBufferPointer, at index: Int, scratch: UnsafeMutableRawPointer) -> Bool {
        let needed = entry.count + 2
        if contiguousFree < needed {
            if totalFree < needed { return false }
            compact(scratch: scratch)
        }
        let n = count
        let slots = base + PageHeader.size
        if index < n {
            (slots + 2 * (index + 1)).copyMemory(from: slots + 2 * index, byteCount: 2 * (n - index))
        }
        let newUpper = upper - entry.count
        if entry.count > 0 { (base + newUpper).copyMemory(from: entry.baseAddress!, byteCount: entry.count) }
        base.setU16(PageHeader.size + 2 * index, UInt16(newUpper))
        base.setU16(PageHeader.count, UInt16(n + 1))
        base.setU16(PageHeader.upper, UInt16(newUpper))
        return true
    }

    /// Removes entry `index`; its bytes become garbage.
    func remove(at index: Int, entrySize: Int) {
        let n = count
        let slots = base + PageHeader.size
        if index < n - 1 {
            (slots + 2 * index).copyMemory(from: slots + 2 * (index + 1), byteCount: 2 * (n - index - 1))
        }
        base.setU16(PageHeader.count, UInt16(n - 1))
        base.setU16(PageHeader.garbage, UInt16(garbage + entrySize))
    }

    /// Rewrites the entry area without garbage.
    func compact(scratch: UnsafeMutableRawPointer) {
        scratch.copyMemory(from: base, byteCount: pageSize)
        let old = UnsafeRawPointer(scratch)
        let n = count
        let isLeaf = old.u8(PageHeader.type) == PageType.leaf.rawValue
        base.setU16(PageHeader.count, 0)
        base.setU16(PageHeader.upper, UInt16(truncatingIfNeeded: pageSize))
        base.setU16(PageHeader.garbage, 0)
        for i in 0..<n {
            let off = Int(old.u16(PageHeader.size + 2 * i))
            append(UnsafeRawBufferPointer(start: old + off, count: MutableNode.entrySize(old, at: off, isLeaf: isLeaf)))
        }
    }

    /// Whether an entry of `size` bytes fits without compacting.
    func fits(_ size: Int) -> Bool { contiguousFree >= size + 2 }

    /// Replaces every entry with `entries`, which must not point into this page.
    func rebuild(_ entries: ArraySlice<UnsafeRawBufferPointer>) {
        base.setU16(PageHeader.count, 0)
        base.setU16(PageHeader.upper, UInt16(truncatingIfNeeded: pageSize))
        base.setU16(PageHeader.garbage, 0)
        for entry in entries { append(entry) }
    }

    /// The child page of entry `index` of a (counted) branch.
    func child(_ index: Int) -> PageNo {
        let off = Int(UnsafeRawPointer(base).u16(PageHeader.size + 2 * index))
        return UnsafeRawPointer(base).u64(off)
    }

    func setChild(_ index: Int, _ child: PageNo) {
        let off = Int(UnsafeRawPointer(base).u16(PageHeader.size + 2 * index))
        base.setU64(off, child)
    }

    /// The subtree count of entry `index` of a (counted) branch.
    func childCount(_ index: Int) -> UInt64 {
        let off = Int(UnsafeRawPointer(base).u16(PageHeader.size + 2 * index))
        return UnsafeRawPointer(base).u64(off + BranchEntry.countOffset)
    }

    func setChildCount(_ index: Int, _ count: UInt64) {
        let off = Int(UnsafeRawPointer(base).u16(PageHeader.size + 2 * index))
        base.setU64(off + BranchEntry.countOffset, count)
    }

    /// Adds `delta` (wrapping: a corrupt count must not trap) to the subtree count of entry `index`.
    func addChildCount(_ index: Int, _ delta: Int) {
        setChildCount(index, childCount(index) &+ UInt64(bitPattern: Int64(delta)))
    }

    /// Entries below this dirty page: a leaf's count, a counted branch's sum.
    var subtreeCount: UInt64 {
        if UnsafeRawPointer(base).u8(PageHeader.type) == PageType.leaf.rawValue { return UInt64(count) }
        var total: UInt64 = 0
        for i in 0..<count { total &+= childCount(i) }
        return total
    }

    /// Size of the entry at byte offset `off` of a page already validated (a leaf or a counted
    /// branch: the only kinds a writer modifies).
    @inline(__always)
    static func entrySize(_ page: UnsafeRawPointer, at off: Int, isLeaf: Bool) -> Int {
        if isLeaf {
            let keyLength = Int(page.u16(off))
            let overflow = page.u8(off + 2) & LeafEntry.overflowFlag != 0
            return LeafEntry.headerSize + keyLength + (overflow ? 8 : Int(page.u32(off + 4)))
        }
        return BranchEntry.headerSize + Int(page.u16(off + BranchEntry.keyLengthOffset))
    }
}
