/// Size limits that follow from the page size. See FORMAT.md, "Limits".
///
/// ```swift
/// let store = try Store(path: "big.strata", options: StoreOptions(pageSize: Limits.pageSizes.last))
/// print(Limits.maxKeySize(pageSize: store.pageSize))
/// ```
public enum Limits {
    /// Page sizes a store may be created with.
    public static let pageSizes = [4096, 8192, 16384, 32768]
    /// The page size new stores use unless told otherwise.
    public static let defaultPageSize = 4096
    /// The largest value the engine stores (values above the inline limit go to overflow pages).
    public static let maxValueSize = 1 << 30

    /// The largest leaf or branch entry kept in a page, so that every page holds at least four
    /// and a split always succeeds. 0 for a size too small to hold a page header (any `Int` is
    /// taken; only `pageSizes` are page sizes of a file).
    public static func maxInlineEntry(pageSize: Int) -> Int { Swift.max(0, (Swift.max(pageSize, PageHeader.size) - PageHeader.size) / 4 - 2) }

    /// The longest key: a leaf entry with the key and an overflow reference must fit inline.
    /// 998 bytes with 4 KiB pages; 0 for a size too small to hold one.
    public static func maxKeySize(pageSize: Int) -> Int { Swift.max(0, maxInlineEntry(pageSize: pageSize) - LeafEntry.headerSize - 8) }
}
