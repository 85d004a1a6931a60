// Deferred writes: puts and deletes to one tree kept back and applied later in key order.
//
// An index takes its entries in the order objects arrive, which is random in its own key order:
// every entry is a descent from the root to a different leaf. Kept back and applied sorted, the
// entries of one leaf arrive one after another, and all but the first go straight to the leaf the
// previous one went to (`BTreeWrite.applySorted`). Full-text postings are the extreme case: a
// message adds an entry to each of its words' runs.
//
// Nothing can tell the difference. Writes to different keys commute, and writes to one key keep
// their order (the sort breaks ties by arrival). Every read of the tree, and every write that does not ask to
// be deferred, applies the deferred writes first (`WriteTree`, `Cursor`); so do savepoints (a
// rollback then discards exactly what was deferred inside) and the commit. Only the tree's
// `count` lags until then: it is not read for answers in a write transaction.

/// Applies a tree's deferred writes its own way, in place of putting each: for a tree whose
/// entries are not the writes themselves (a full-text index keeps a word's postings in blocks, and
/// its deferred writes are postings to merge into them). Set by `putLater(_:_:mergedBy:)`.
package protocol DeferredMerge: AnyObject {
    /// Applies `writes` to `tree` with its ordinary writes (`put`, `delete`, cursors). The tree's
    /// deferred writes are cleared before the call, so those apply at once.
    func apply(_ writes: DeferredBatch, to tree: WriteTree) throws
}

/// A tree's deferred writes, sorted by key (writes to one key in arrival order), as a
/// `DeferredMerge` receives them. Its views are valid while the batch lives.
package struct DeferredBatch {
    /// Holds `bytes`.
    let deferred: DeferredWrites
    /// Every key, then its value.
    package let bytes: UnsafeRawBufferPointer
    /// The writes in key order: where each one's key and value lie in `bytes`.
    package let writes: [DeferredWrite]

    init(_ deferred: DeferredWrites) {
        self.deferred = deferred.sorted()
        bytes = self.deferred.bytes
        writes = self.deferred.writes
    }

    /// The number of writes.
    package var count: Int { writes.count }

    /// The key of the `i`-th write in key order.
    @inlinable @inline(__always)
    package func key(_ i: Int) -> UnsafeRawBufferPointer {
        let write = writes[i]
        return UnsafeRawBufferPointer(start: bytes.baseAddress.unsafelyUnwrapped + write.start, count: write.keyLength)
    }

    /// The value of the `i`-th write in key order; nil for a delete.
    @inlinable @inline(__always)
    package func value(_ i: Int) -> UnsafeRawBufferPointer? {
        let write = writes[i]
        if write.valueLength < 0 { return nil }
        return UnsafeRawBufferPointer(start: bytes.baseAddress.unsafelyUnwrapped + write.start + write.keyLength, count: write.valueLength)
    }
}

/// Where a deferred write's key and value lie in its tree's bytes; a delete has no value
/// (`valueLength` -1).
package struct DeferredWrite {
    package var start: Int
    package var keyLength: Int
    package var valueLength: Int
    var isDelete: Bool { valueLength < 0 }
}

/// The deferred writes of one tree, in arrival order. A class: a tree's writes are handed over
/// whole (to be applied, or dropped) and never copied.
final class DeferredWrites {
    /// Every key, then its value, back to back, in memory of its own: a write is two copies and a
    /// length check (an array's `append(contentsOf:)` cost several times the bytes it copies, for
    /// every one of the entries a large transaction defers).
    // `@exclusivity(unchecked)` as on WriteTransaction's state: deferred writes belong to a tree
    // of one write transaction, which never leaves the thread running `Store.write`, and no method
    // here passes one of these properties inout while reading it (the checks were 40 % of a put).
    @exclusivity(unchecked) private var storage: UnsafeMutableRawPointer? = nil
    @exclusivity(unchecked) private var used = 0
    @exclusivity(unchecked) private var capacity = 0
    /// Where each write's key and value sit in `bytes`; a delete has no value (`valueLength` -1).
    @exclusivity(unchecked) private(set) var writes: [DeferredWrite] = []

    init() {}
    deinit { storage?.deallocate() }

    /// Every key, then its value: valid until the next write.
    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: storage, count: used) }

    /// Appends `data` to `bytes`, doubling the memory when it is full.
    @inline(__always)
    private func append(_ data: UnsafeRawBufferPointer) {
        guard let source = data.baseAddress, data.count > 0 else { return }
        if used + data.count > capacity {
            let grown = max(2 * capacity, used + data.count, 4096)
            let memory = UnsafeMutableRawPointer.allocate(byteCount: grown, alignment: 8)
            if let storage {
                memory.copyMemory(from: storage, byteCount: used)
                storage.deallocate()
            }
            storage = memory
            capacity = grown
        }
        storage.unsafelyUnwrapped.advanced(by: used).copyMemory(from: source, byteCount: data.count)
        used += data.count
    }

    /// Memory the deferred writes of a transaction may hold (all trees together): past it they
    /// are all applied, so that a transaction's memory stays bounded (the pages they make are
    /// bounded by spilling).
    static let limit = 8 << 20

    var isEmpty: Bool { writes.isEmpty }
    /// What a write costs against `limit`.
    static func memory(key: Int, value: Int) -> Int { key + max(0, value) + MemoryLayout<DeferredWrite>.stride }

    func put(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) {
        writes.append(DeferredWrite(start: used, keyLength: key.count, valueLength: value.count))
        append(key)
        append(value)
    }

    func delete(_ key: UnsafeRawBufferPointer) {
        writes.append(DeferredWrite(start: used, keyLength: key.count, valueLength: -1))
        append(key)
    }

    /// The same writes in key order (writes to one key in arrival order), their keys and values
    /// copied into new memory in that order, so that whoever applies them reads it front to back.
    /// Read in key order where they arrived, the writes of a large batch (an index's entries, in
    /// the random order of their objects) were scattered over megabytes, and each read missed the
    /// caches while the work between two reads left nothing to overlap it with: a seventh of a
    /// million-object bulk load. Copying is a pass of independent reads, which the processor
    /// overlaps.
    func sorted() -> DeferredWrites {
        let order = sortedOrder()
        let copy = DeferredWrites()
        guard let base = storage else { return copy }
        copy.storage = UnsafeMutableRawPointer.allocate(byteCount: max(used, 1), alignment: 8)
        copy.capacity = max(used, 1)
        copy.writes.reserveCapacity(order.count)
        let target = copy.storage.unsafelyUnwrapped
        var at = 0
        writes.withUnsafeBufferPointer { writes in
            for i in order {
                let w = writes[i]
                let length = w.keyLength + max(0, w.valueLength)
                copy.writes.append(DeferredWrite(start: at, keyLength: w.keyLength, valueLength: w.valueLength))
                (target + at).copyMemory(from: base + w.start, byteCount: length)
                at += length
            }
        }
        copy.used = at
        return copy
    }

    /// The writes in key order, writes to one key in arrival order.
    private func sortedOrder() -> [Int] {
        // Ordered by the keys' first 24 bytes as three integers, then (rarely) by whole keys,
        // by an introsort of plain values: the comparison runs n log n times, and the standard
        // library's sort with a closure reading the buffer cost as much as applying the writes.
        guard let base = bytes.baseAddress else { return Array(writes.indices) }
        return writes.withUnsafeBufferPointer { writes -> [Int] in
            var items: [SortItem] = []
            items.reserveCapacity(writes.count)
            for (i, w) in writes.enumerated() {
                let key = UnsafeRawBufferPointer(start: base + w.start, count: w.keyLength)
                items.append(SortItem(high: key.bigEndianWord(at: 0), middle: key.bigEndianWord(at: 8), low: key.bigEndianWord(at: 16), write: i))
            }
            items.withUnsafeMutableBufferPointer { items in
                let sorter = Introsort(items: items, base: base, writes: writes)
                guard items.count >= 1024 else { return sorter.sort(0, items.count) }
                // Many writes: ordered by their first eight bytes in a few linear passes, then
                // each run of equal first eight bytes (a word's entries, a room's messages) by
                // the rest, which arrival order mostly has already.
                Self.radixSortByHigh(items)
                var start = 0
                while start < items.count {
                    var end = start + 1
                    while end < items.count && items[end].high == items[start].high { end += 1 }
                    if end - start > 1 && !sorter.isSorted(start, end) { sorter.sort(start, end) }
                    start = end
                }
            }
            return items.map(\.write)
        }
    }

    /// A stable least-significant-digit radix sort of `items` by `high`, a byte per pass. One
    /// pass counts every byte position at once; a position every item shares (an index's leading
    /// type tag, a common prefix) needs no pass of its own.
    private static func radixSortByHigh(_ items: UnsafeMutableBufferPointer<SortItem>) {
        let n = items.count
        let counts = UnsafeMutableBufferPointer<Int>.allocate(capacity: 8 * 256)
        counts.initialize(repeating: 0)
        defer { counts.deallocate() }
        for item in items {
            var high = item.high
            for position in 0..<8 {
                counts[position &* 256 &+ Int(truncatingIfNeeded: high & 0xFF)] &+= 1
                high >>= 8
            }
        }
        let scratch = UnsafeMutableBufferPointer<SortItem>.allocate(capacity: n)
        defer { scratch.deallocate() }
        var source = items, target = scratch
        for position in 0..<8 {
            let offsets = UnsafeMutableBufferPointer(rebasing: counts[(position * 256)..<(position * 256 + 256)])
            if offsets.contains(n) { continue }
            var total = 0
            for b in 0..<256 {
                let c = offsets[b]
                offsets[b] = total
                total &+= c
            }
            let shift = UInt64(8 * position)
            for item in source {
                let b = Int(truncatingIfNeeded: (item.high >> shift) & 0xFF)
                target[offsets[b]] = item
                offsets[b] &+= 1
            }
            swap(&source, &target)
        }
        if source.baseAddress != items.baseAddress {
            _ = items.update(fromContentsOf: source)
        }
    }
}

/// A write's place in the sort: its key's first 24 bytes (zero-padded) and its number. Sixteen
/// were too few: full-text entries (a word, then the text's key) and compound index keys often
/// share their first sixteen bytes with many others, and each such comparison called memcmp.
private struct SortItem {
    var high: UInt64
    var middle: UInt64
    var low: UInt64
    var write: Int
}

extension UnsafeRawBufferPointer {
    /// Eight bytes from `offset` as a big-endian integer, zeros past the end.
    fileprivate func bigEndianWord(at offset: Int) -> UInt64 {
        if offset + 8 <= count { return UInt64(bigEndian: loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
        var value: UInt64 = 0
        for j in offset..<(offset + 8) { value = value << 8 | UInt64(j < count ? self[j] : 0) }
        return value
    }
}

/// Quicksort (median of three, insertion sort for short runs) falling back to heapsort when the
/// partitions go bad, over `SortItem`s compared without a closure.
private struct Introsort {
    let items: UnsafeMutableBufferPointer<SortItem>
    let base: UnsafeRawPointer
    let writes: UnsafeBufferPointer<DeferredWrite>

    @inline(__always) func less(_ a: SortItem, _ b: SortItem) -> Bool {
        if a.high != b.high { return a.high < b.high }
        if a.middle != b.middle { return a.middle < b.middle }
        if a.low != b.low { return a.low < b.low }
        let x = writes[a.write], y = writes[b.write]
        if x.keyLength > 24 || y.keyLength > 24 {
            // Equal up to 24 bytes: the rest decides (zero padding stood in for a shorter key's
            // missing bytes, so the whole keys are compared).
            let c = compareBytes(
                UnsafeRawBufferPointer(start: base + x.start, count: x.keyLength), UnsafeRawBufferPointer(start: base + y.start, count: y.keyLength))
            if c != 0 { return c < 0 }
        } else if x.keyLength != y.keyLength {
            return x.keyLength < y.keyLength  // equal up to the shorter (the zero padding)
        }
        return a.write < b.write
    }

    /// Sorts `items[start..<end]`.
    func sort(_ start: Int, _ end: Int) {
        guard end - start > 1 else { return }
        var depth = 0
        var n = end - start
        while n > 0 { depth += 2; n >>= 1 }
        sort(start, end, depth)
    }

    /// Whether `items[start..<end]` is in order already.
    func isSorted(_ start: Int, _ end: Int) -> Bool {
        for i in (start + 1)..<end where less(items[i], items[i - 1]) { return false }
        return true
    }

    private func sort(_ start: Int, _ end: Int, _ depth: Int) {
        var start = start
        var depth = depth
        while end - start > 16 {
            if depth == 0 { heapSort(start, end); return }
            depth -= 1
            let p = partition(start, end)
            // Recurse into the smaller side, loop on the larger: the stack stays O(log n).
            if p - start < end - p - 1 {
                sort(start, p, depth)
                start = p + 1
            } else {
                sort(p + 1, end, depth)
                return sort(start, p, depth)
            }
        }
        insertionSort(start, end)
    }

    /// Partitions around the median of the first, middle and last items; returns the pivot's place.
    private func partition(_ start: Int, _ end: Int) -> Int {
        let mid = start + (end - start) / 2
        if less(items[mid], items[start]) { items.swapAt(mid, start) }
        if less(items[end - 1], items[start]) { items.swapAt(end - 1, start) }
        if less(items[end - 1], items[mid]) { items.swapAt(end - 1, mid) }
        items.swapAt(mid, end - 1)
        let pivot = items[end - 1]
        var store = start
        for i in start..<(end - 1) where less(items[i], pivot) {
            items.swapAt(i, store)
            store += 1
        }
        items.swapAt(store, end - 1)
        return store
    }

    private func insertionSort(_ start: Int, _ end: Int) {
        guard end - start > 1 else { return }
        for i in (start + 1)..<end {
            let item = items[i]
            var j = i
            while j > start && less(item, items[j - 1]) {
                items[j] = items[j - 1]
                j -= 1
            }
            items[j] = item
        }
    }

    private func heapSort(_ start: Int, _ end: Int) {
        let n = end - start
        func siftDown(_ root: Int, _ limit: Int) {
            var root = root
            while true {
                var child = 2 * root + 1
                if child >= limit { return }
                if child + 1 < limit && less(items[start + child], items[start + child + 1]) { child += 1 }
                if !less(items[start + root], items[start + child]) { return }
                items.swapAt(start + root, start + child)
                root = child
            }
        }
        for root in stride(from: n / 2 - 1, through: 0, by: -1) { siftDown(root, n) }
        for last in stride(from: n - 1, to: 0, by: -1) {
            items.swapAt(start, start + last)
            siftDown(0, last)
        }
    }
}

extension WriteTransaction {
    /// Applies `state`'s deferred writes (a no-op when there are none). After an application
    /// failed halfway, throws its error: the tree holds part of them.
    @inline(__always)
    func applyDeferred(_ state: TreeState) throws {
        if let deferredFailure { throw deferredFailure.error }
        if state.hasDeferred { try applyDeferredNow(state) }
    }

    private func applyDeferredNow(_ state: TreeState) throws {
        let deferred = state.deferred
        let beside = state.beside
        state.deferred = DeferredWrites()
        state.beside = []
        if state.dropped { return }
        let version = pages.version
        defer { deferredApplyChanges &+= pages.version &- version }
        do {
            if let merge = state.merge, !deferred.isEmpty {
                try merge.apply(DeferredBatch(deferred), to: WriteTree(txn: self, state: state))
            } else {
                try applySorted(&state.info, deferred)
            }
            // No deferred write is for these keys, so the order does not matter.
            for (key, value) in beside {
                try key.withUnsafeBytes { k in try value.withUnsafeBytes { v in _ = try put(&state.info, key: k, value: v) } }
                try spillIfNeeded()
            }
        } catch {
            // Some writes are in and the rest are gone: whoever caught the error (a read of the
            // tree triggered this) must not commit, unless a savepoint undoes them all.
            deferredFailure = (error, savepoints.count)
            throw error
        }
    }

    /// `changeCount` less the changes applying deferred writes made: it moves only when the
    /// transaction's callers write (the object layer tells a write that failed before changing
    /// anything from one that failed halfway by it, and a query applies deferred writes).
    ///
    /// ```swift
    /// let stamp = txn.writeCount
    /// // ... a write that may fail ...
    /// let changedSomething = txn.writeCount != stamp
    /// ```
    package var writeCount: UInt64 { pages.version &- deferredApplyChanges }

    /// Applies every tree's deferred writes, as a savepoint's start does: for a reader about to
    /// hold cursors on several trees (applying one tree's deferred writes is a write, which
    /// invalidates the cursors on all of them).
    package func applyDeferredWrites() throws {
        try checkOpen()
        try applyAllDeferred()
    }

    /// Applies every tree's deferred writes: before a savepoint or the commit, and when they
    /// hold more than `DeferredWrites.limit`.
    func applyAllDeferred() throws {
        for state in trees.values { try applyDeferred(state) }
        deferredMemory = 0
    }

    /// Drops every tree's deferred writes: a savepoint's rollback (its start applied the earlier
    /// ones, so all that are left were made inside it).
    func discardAllDeferred() {
        for state in trees.values where state.hasDeferred {
            state.deferred = DeferredWrites()
            state.beside = []
        }
        deferredMemory = 0
    }
}
