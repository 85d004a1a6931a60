// Where the last insert into each page went, for the next split of that page (`BTreeWrite.insert`
// puts a new entry with the smaller side of its spot when the previous insert was next to it).
//
// Every insert notes its place, and a run of sorted writes (an index's deferred entries) inserts
// into one page many times in a row: the latest page's hint is kept in two plain fields and goes
// to the table only when another page takes its place, so that a run costs no hashing.

struct InsertHints {
    /// Hints of pages other than `lastPage`; emptied when they reach 32,768 pages, so that they
    /// cost at most ~1 MiB of memory per file.
    private var table = PageTable<UInt16>()
    /// The page of the latest insert (0: none) and that insert's index.
    private var lastPage: PageNo = 0
    private var lastIndex: UInt16 = 0

    /// The index of the last insert into `pgno`, if one is remembered.
    func hint(_ pgno: PageNo) -> UInt16? {
        pgno == lastPage ? lastIndex : table[pgno]
    }

    /// Records that an insert into `pgno` went to `index`.
    @inline(__always)
    mutating func note(_ pgno: PageNo, _ index: Int) {
        if pgno != lastPage {
            if lastPage != 0 {
                if table.count >= 1 << 15 { table.removeAll(keepingCapacity: true) }
                table[lastPage] = lastIndex
            }
            lastPage = pgno
        }
        lastIndex = UInt16(truncatingIfNeeded: index)
    }

    /// A copy-on-write copy of `old` is `new`: its hint goes with it.
    mutating func move(from old: PageNo, to new: PageNo) {
        let moved = table.removeValue(forKey: old)
        if old == lastPage {
            lastPage = new
        } else if let moved {
            table[new] = moved
        }
    }
}
