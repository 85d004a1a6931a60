import Strata

/// What the Strata-only suites (`live`, `group`) share: a file per suite and a fresh database of
/// at most 100,000 `Item`s to start from.
protocol StrataItemSuite: BenchSuite {}

extension StrataItemSuite {
    static var engines: [EngineInfo] { [EngineInfo(id: "strata", title: "Strata")] }
    static var sizes: [SizeInfo] { [] }

    static func unavailable(_ engine: String) -> String? { engine == "strata" ? nil : "the \(name) suite measures Strata only" }

    static func files(of engine: String, in directory: String) -> [String] {
        let base = directory + "/\(name)." + engine
        return [base, base + "-lock", base + "-log"]
    }

    /// The objects loaded: N, at most 100,000.
    static func itemCount(_ options: BenchOptions) -> Int { min(options.n, 100_000) }

    /// A new database at this suite's file holding `itemCount` items, loaded in one commit.
    static func loadItems(engine: String, options: BenchOptions) throws -> (Database, ItemData) {
        let path = files(of: engine, in: options.directory)[0]
        removeFile(path)
        removeFile(path + "-lock")
        removeFile(path + "-log")
        let db = try Database(path: path, models: [Item.self], options: options.strataStoreOptions)
        let data = ItemData(seed: options.seed)
        try db.write(durability: .noSync) { tx in for i in 0..<itemCount(options) { try tx.insert(data.item(i)) } }
        return (db, data)
    }
}
