// The writer's page tables (PageMap's dirty, frozen and spilled pages): maps from page numbers,
// looked up on every page a write transaction reads. A Dictionary hashes each key with SipHash,
// which cost about a tenth of an insert's instructions; page numbers need no protection against
// chosen collisions (a file's page numbers are the engine's own), so a multiplicative hash and
// linear probing do.

/// A hash map from page numbers to `Value`: open addressing, linear probing, Fibonacci hashing,
/// deletion by backward shift (no tombstones, so lookups stay short after many removals).
/// Iteration order is unspecified, as for a Dictionary.
struct PageTable<Value>: Sequence {
    /// Slot keys; `empty` marks a free slot. The page number equal to `empty` is kept aside in
    /// `maxKeyValue`, so every UInt64 is a valid key.
    private var keys: [PageNo] = []
    private var values: [Value?] = []
    private var maxKeyValue: Value?
    private(set) var count = 0
    /// 64 minus log2 of the slot count: the hash's top bits pick the slot.
    private var shift = 64

    private static var empty: PageNo { .max }

    init() {}

    var isEmpty: Bool { count == 0 }

    @inline(__always)
    private func slot(_ key: PageNo) -> Int {
        Int(truncatingIfNeeded: (key &* 0x9E37_79B9_7F4A_7C15) >> UInt64(shift))
    }

    /// The slot holding `key`, or the free slot where it would go.
    @inline(__always)
    private func find(_ key: PageNo) -> (slot: Int, found: Bool) {
        let mask = keys.count - 1
        var i = slot(key)
        while true {
            let k = keys[i]
            if k == key { return (i, true) }
            if k == Self.empty { return (i, false) }
            i = (i + 1) & mask
        }
    }

    subscript(key: PageNo) -> Value? {
        @inline(__always) get {
            if key == Self.empty { return maxKeyValue }
            if keys.isEmpty { return nil }
            let (i, found) = find(key)
            return found ? values[i] : nil
        }
        set {
            if let newValue { insert(key, newValue) } else { _ = removeValue(forKey: key) }
        }
    }

    private mutating func insert(_ key: PageNo, _ value: Value) {
        if key == Self.empty {
            if maxKeyValue == nil { count += 1 }
            maxKeyValue = value
            return
        }
        // At most half full: probes stay short.
        if (count + 1) * 2 > keys.count { grow() }
        let (i, found) = find(key)
        values[i] = value
        if !found {
            keys[i] = key
            count += 1
        }
    }

    @discardableResult
    mutating func removeValue(forKey key: PageNo) -> Value? {
        if key == Self.empty {
            guard let old = maxKeyValue else { return nil }
            maxKeyValue = nil
            count -= 1
            return old
        }
        if keys.isEmpty { return nil }
        let (hole, found) = find(key)
        guard found else { return nil }
        var i = hole
        let old = values[i]
        count -= 1
        // Backward shift: move up every later entry of the run whose home slot is not between the
        // hole and itself, so that no lookup meets a free slot before its key.
        let mask = keys.count - 1
        var j = i
        while true {
            j = (j + 1) & mask
            let k = keys[j]
            if k == Self.empty { break }
            let home = slot(k)
            // Entry j may fill hole i unless its home lies cyclically in (i, j].
            let homeAfterHole = i <= j ? (home > i && home <= j) : (home > i || home <= j)
            if homeAfterHole { continue }
            keys[i] = k
            values[i] = values[j]
            i = j
        }
        keys[i] = Self.empty
        values[i] = nil
        return old
    }

    mutating func removeAll(keepingCapacity: Bool = false) {
        maxKeyValue = nil
        count = 0
        if keepingCapacity && !keys.isEmpty {
            for i in keys.indices { keys[i] = Self.empty }
            for i in values.indices { values[i] = nil }
        } else {
            keys = []
            values = []
            shift = 64
        }
    }

    /// Adds the entries of `other` whose keys this table lacks (an existing entry is kept).
    mutating func mergeKeepingExisting(_ other: PageTable<Value>) {
        for (key, value) in other where self[key] == nil { self[key] = value }
    }

    private mutating func grow() {
        let oldKeys = keys
        let oldValues = values
        let size = Swift.max(16, keys.count * 2)
        keys = [PageNo](repeating: Self.empty, count: size)
        values = [Value?](repeating: nil, count: size)
        shift = 64 - size.trailingZeroBitCount
        for (i, key) in oldKeys.enumerated() where key != Self.empty {
            let (slot, _) = find(key)
            keys[slot] = key
            values[slot] = oldValues[i]
        }
    }

    /// The page numbers in the table.
    var pageNumbers: [PageNo] { map { $0.key } }

    struct Iterator: IteratorProtocol {
        fileprivate let table: PageTable
        fileprivate var position = 0
        fileprivate var maxKeyDone = false

        mutating func next() -> (key: PageNo, value: Value)? {
            while position < table.keys.count {
                let i = position
                position += 1
                if table.keys[i] != PageTable.empty, let value = table.values[i] { return (table.keys[i], value) }
            }
            if !maxKeyDone {
                maxKeyDone = true
                if let value = table.maxKeyValue { return (PageTable.empty, value) }
            }
            return nil
        }
    }

    func makeIterator() -> Iterator { Iterator(table: self) }
    var underestimatedCount: Int { count }
}
