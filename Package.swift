// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Strata",
    // What the code needs on Apple platforms: Synchronization's Mutex and Atomic (and with them
    // os_sync_wait_on_address, Observation and Swift 6 concurrency) arrived in these releases.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "Strata", targets: ["Strata"]),
        .library(name: "StrataStorage", targets: ["StrataStorage"]),
        .executable(name: "strata", targets: ["strata"]),
        .executable(name: "strata-bench", targets: ["strata-bench"]),
    ],
    targets: [
        .target(name: "StrataStorage"),
        .target(name: "Strata", dependencies: ["StrataStorage"]),
        .executableTarget(name: "strata", dependencies: ["Strata", "StrataStorage"]),
        .executableTarget(name: "strata-bench", dependencies: ["Strata", "StrataStorage", "CodableFloor"], path: "Benchmarks/strata-bench"),
        // Codable's own cost for the bench's codec workloads: coders that read and write nothing,
        // in a module of their own so that a model's coding methods run as they do against Strata.
        .target(name: "CodableFloor", path: "Benchmarks/CodableFloor"),
        // The documented repository pattern (Examples/README.md); `swift run RepositoryExample`.
        .executableTarget(name: "RepositoryExample", dependencies: ["Strata"], path: "Examples/Repository"),
        // Spawned by the crash and multi-process tests: commits numbered transactions until killed.
        .executableTarget(name: "StrataTestHelper", dependencies: ["StrataStorage", "Strata", "StrataTestWorkloads"], path: "Tests/StrataTestHelper"),
        // What the helper writes and the tests check, defined once for both.
        .target(name: "StrataTestWorkloads", dependencies: ["StrataStorage", "Strata"], path: "Tests/StrataTestWorkloads"),
        // Fixtures: files written by earlier formats, read by the upgrade tests through #filePath.
        .testTarget(
            name: "StrataStorageTests", dependencies: ["StrataStorage", "StrataTestHelper", "StrataTestWorkloads"],
            exclude: ["Fixtures"]),
        .testTarget(name: "StrataTests", dependencies: ["Strata", "strata", "StrataTestHelper", "StrataTestWorkloads"]),
    ],
    swiftLanguageModes: [.v6]
)
