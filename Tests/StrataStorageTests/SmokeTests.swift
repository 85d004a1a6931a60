import Testing
@testable import StrataStorage
import Foundation

func temporaryPath(_ name: String = #function) -> String {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("strata-tests-\(getpid())")
    try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    let path = dir.appendingPathComponent("\(name.filter { $0.isLetter || $0.isNumber })-\(UInt32.random(in: 0...UInt32.max)).strata").path
    return path
}

struct SmokeTests {
    @Test func putGetAcrossReopen() throws {
        let path = temporaryPath()
        do {
            let store = try Store(path: path)
            try store.write { txn in
                let t = try txn.createTree("t")
                for i in 0..<5000 {
                    try t.put(Array("key\(i)".utf8), Array("value\(i)".utf8))
                }
            }
            let v = try store.read { try $0.tree("t")?.get(Array("key42".utf8)) }
            #expect(v == Array("value42".utf8))
        }
        let store = try Store(path: path)
        try store.read { txn in
            let t = try #require(try txn.tree("t"))
            #expect(t.count == 5000)
            var n = 0
            try t.forEach { _, _ in
                n += 1; return true
            }
            #expect(n == 5000)
        }
    }

    @Test func randomAgainstDictionary() throws {
        let path = temporaryPath()
        var model: [[UInt8]: [UInt8]] = [:]
        var rng = SplitMix(seed: 42)
        var store = try Store(path: path, options: StoreOptions(durability: .noSync))
        for round in 0..<40 {
            try store.write { txn in
                let t = try txn.createTree("t")
                for _ in 0..<500 {
                    let k = Array("k\(rng.next() % 3000)".utf8)
                    if rng.next() % 3 == 0 {
                        let deleted = try t.delete(k)
                        #expect(deleted == (model.removeValue(forKey: k) != nil))
                    } else {
                        let size = Int(rng.next() % 20 == 0 ? rng.next() % 9000 : rng.next() % 120)
                        let v = (0..<size).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                        try t.put(k, v)
                        model[k] = v
                    }
                }
            }
            if round % 10 == 9 { store = try Store(path: path, options: StoreOptions(durability: .noSync)) }
            try store.read { txn in
                let t = try #require(try txn.tree("t"))
                #expect(t.count == model.count)
                var seen: [[UInt8]] = []
                try t.forEach { k, v in
                    seen.append(Array(k))
                    #expect(model[Array(k)] == Array(v))
                    return true
                }
                #expect(seen == model.keys.sorted { $0.lexicographicallyPrecedes($1) })
            }
        }
    }
}

struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E3779B97F4A7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) &* 0x94D049BB133111EB
        return z ^ (z >> 31)
    }
}
