import Testing

@testable import StrataStorage

/// `PageTable` (the writer's page tables) against a Dictionary: random inserts, overwrites and
/// removals over key sets that collide on purpose (dense runs, strides of large powers of two,
/// the extreme keys), with every lookup and the whole contents compared after each step.
struct PageTableTests {
    @Test(arguments: [UInt64(0x7a61_6c65), 0xdead_beef, 42])
    func matchesADictionary(seed: UInt64) {
        var rng = seed
        func next() -> UInt64 {
            rng = rng &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return rng >> 11
        }
        // Keys drawn from a few shapes, so that probe runs form, wrap around the table and are
        // cut by removals in every way.
        func key() -> UInt64 {
            switch next() % 6 {
            case 0: return next() % 64  // a dense run
            case 1: return (next() % 32) << 32  // same low bits, different high bits
            case 2: return (next() % 32) << 58
            case 3: return [UInt64.max, UInt64.max - 1, 0, 1][Int(next() % 4)]
            case 4: return 1_000 + next() % 4_000
            default: return next()
            }
        }
        var table = PageTable<UInt64>()
        var model: [UInt64: UInt64] = [:]
        for step in 0..<20_000 {
            let k = key()
            switch next() % 10 {
            case 0...4:
                let v = next()
                table[k] = v
                model[k] = v
            case 5...7:
                #expect(table.removeValue(forKey: k) == model.removeValue(forKey: k), "seed \(seed) step \(step)")
            case 8:
                table[k] = nil
                model[k] = nil
            default:
                if next() % 200 == 0 {
                    let keep = next() % 2 == 0
                    table.removeAll(keepingCapacity: keep)
                    model.removeAll()
                }
            }
            #expect(table[k] == model[k], "seed \(seed) step \(step) key \(k)")
            #expect(table.count == model.count, "seed \(seed) step \(step)")
            if step % 500 == 0 || step == 19_999 {
                var seen: [UInt64: UInt64] = [:]
                for (key, value) in table {
                    #expect(seen[key] == nil, "seed \(seed): key \(key) iterated twice")
                    seen[key] = value
                }
                #expect(seen == model, "seed \(seed) step \(step)")
                for (key, value) in model { #expect(table[key] == value, "seed \(seed) step \(step) key \(key)") }
            }
        }
    }

    @Test func mergeKeepsExistingEntries() {
        var a = PageTable<UInt64>()
        var b = PageTable<UInt64>()
        for k: UInt64 in [1, 2, 3, .max] { a[k] = k }
        for k: UInt64 in [3, 4, .max, 0] { b[k] = k &+ 100 }
        a.mergeKeepingExisting(b)
        #expect(Dictionary(uniqueKeysWithValues: a.map { ($0.key, $0.value) }) == [0: 100, 1: 1, 2: 2, 3: 3, 4: 104, .max: .max])
        #expect(a.pageNumbers.sorted() == [0, 1, 2, 3, 4, .max])
        #expect(PageTable<UInt64>().isEmpty && !a.isEmpty && a.count == 6)
    }
}
