import Testing
import Foundation
import Dispatch
import Synchronization
@testable import Strata

// A small shop written from README.md and the DocC articles alone: customers with a nested
// optional address, products with a unique SKU, a compound (category, price) index, a
// case-insensitive collated name index and a full-text description, and orders referring to
// customers and products. Then the bad input a real app receives.

enum NHTier: String, Codable, Sendable, CaseIterable { case basic, gold, platinum }
enum NHCategory: Int, Codable, Sendable, CaseIterable { case books = 1, music = 2, games = 3 }
enum NHOrderState: String, Codable, Sendable { case open, paid, shipped, cancelled }

struct NHAddress: Codable, Sendable, Hashable {
    var street: String
    var city: String
    var zip: String?
}

struct NHCustomer: Model, Equatable {
    static let indexes: [PartialKeyPath<NHCustomer> & Sendable] = [\.tier, \.address?.city]
    static let uniqueIndexes: [PartialKeyPath<NHCustomer> & Sendable] = [\.email]
    var id: String
    var name: String
    var email: String
    var tier: NHTier
    var address: NHAddress?
    var age: UInt8
    var note: String?
}

struct NHProduct: Model, Equatable {
    static let uniqueIndexes: [PartialKeyPath<NHProduct> & Sendable] = [\.sku]
    static let indexes: [PartialKeyPath<NHProduct> & Sendable] = [\.tags]
    static let indexDescriptors: [IndexDescriptor<NHProduct>] = [
        .on(\.category, \.price),
        .on(\.name, collation: .caseInsensitive),
        .fullText(\.blurb),
    ]
    var id: Int?
    var sku: String
    var name: String
    var blurb: String
    var category: NHCategory
    var price: Double
    var stock: Int16
    var tags: [String]
}

struct NHLine: Codable, Sendable, Hashable {
    var product: Ref<NHProduct>
    var quantity: Int
}

struct NHOrder: Model, Equatable {
    static let indexes: [PartialKeyPath<NHOrder> & Sendable] = [\.customer, \.state]
    static let indexDescriptors: [IndexDescriptor<NHOrder>] = [.on(\.customer, \.placedAt)]
    var id: Int?
    var customer: Ref<NHCustomer>
    var lines: [NHLine]
    var state: NHOrderState
    var placedAt: Date
    var total: Double
}

enum NHShop {
    static let models: [any Model.Type] = [NHCustomer.self, NHProduct.self, NHOrder.self]

    static func temporaryDirectory() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("nh-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }

    static func seed(_ db: Database) throws {
        try db.write { tx in
            try tx.insert(
                NHCustomer(
                    id: "c1", name: "Ana", email: "ana@x", tier: .gold,
                    address: NHAddress(street: "Rua 1", city: "Lisbon", zip: "1100"), age: 30, note: nil))
            try tx.insert(NHCustomer(id: "c2", name: "ben", email: "ben@x", tier: .basic, address: nil, age: 41, note: "vip?"))
            let names = ["apple pie book", "Banana split", "cherry Jam", "Étude in C", "zebra game", "Apple Music"]
            for (i, name) in names.enumerated() {
                try tx.insert(
                    NHProduct(
                        id: nil, sku: "S\(i)", name: name, blurb: "the \(name) – a fine thing, can't miss",
                        category: NHCategory.allCases[i % 3], price: Double(10 + i), stock: Int16(i),
                        tags: i % 2 == 0 ? ["sale"] : []))
            }
        }
    }
}

struct NHBoom: Error {}

struct NHWords: Model {
    static let indexDescriptors: [IndexDescriptor<NHWords>] = [.fullText(\.text)]
    var id: Int
    var text: String
}

struct NHWordsScanned: Model {
    var id: Int
    var text: String
}

struct NHNumbers: Model {
    var id: Int
    var small: UInt8
    var tiny: Int8
    var mid: Int32
    var big: Int64
}

@Suite struct NewcomerHuntTests {
    /// SyncingFromAServer.md: numbers are read as JSONDecoder reads them; out of range is
    /// `typeMismatch`, beyond any Double is `invalidInput`. Every refused input leaves the object.
    @Test func partialNumbersMatchJSONDecoder() throws {
        let db = try Database.inMemory(models: NHShop.models)
        try NHShop.seed(db)
        let ages = [
            "300", "-1", "255", "255.0", "2.55e2", "256", "1e400", "-0", "-0.0", "\"NaN\"", "\"30\"", "true", "null", "30.5", "1e2",
            "0e0", "-0e0", "18446744073709551616", "1E1", "0.000000000000000000001e22", "[30]", "{}", "2.5500000000000000000000001e2",
        ]
        for value in ages {
            let before = try #require(try db.object(NHCustomer.self, key: "c1"))
            var document = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(before)) as? [String: Any])
            document["age"] = 0
            let text = String(decoding: try JSONSerialization.data(withJSONObject: document, options: .sortedKeys), as: UTF8.self)
                .replacingOccurrences(of: #""age":0"#, with: #""age":\#(value)"#)
            let expected = try? JSONDecoder().decode(NHCustomer.self, from: Data(text.utf8))
            do {
                let stored = try db.write { tx in try tx.update(NHCustomer.self, key: "c1", json: Data(#"{"age":\#(value)}"#.utf8)).object }
                #expect(stored == expected, "age \(value)")
                #expect(expected != nil, "Strata accepted age \(value), JSONDecoder refuses it")
            } catch let error as StrataError {
                #expect(expected == nil, "Strata refused age \(value): \(error)")
                switch error {
                case .typeMismatch(let model, let field, _): #expect(model == "NHCustomer" && field == "age")
                case .invalidInput(let reason): #expect(reason.contains("line 1"), "\(reason)")
                default: Issue.record("age \(value): \(error)")
                }
                #expect(try db.object(NHCustomer.self, key: "c1") == before)
            }
        }
        for (value, sign) in [("-0", FloatingPointSign.minus), ("-0.0", .minus), ("0", .plus), ("-0e5", .minus)] {
            let stored = try db.write { tx in try tx.update(NHProduct.self, key: 1, json: Data(#"{"price":\#(value)}"#.utf8)).object }
            #expect(stored.price == 0 && stored.price.sign == sign, "price \(value)")
            #expect(try db.object(NHProduct.self, key: 1)?.price.sign == sign)
        }
        for value in ["\"NaN\"", "NaN", "Infinity", "\"Infinity\"", "1e400", "-1e400", "1.7976931348623159e308", "01", ".5", "+1", "0x10", "1e", "--1"] {
            #expect(throws: StrataError.self, "price \(value)") {
                try db.write { tx in _ = try tx.update(NHProduct.self, key: 1, json: Data(#"{"price":\#(value)}"#.utf8)) }
            }
        }
    }

    /// Malformed and ill-shaped JSON from a server: each is a typed error naming the field or the
    /// position, and nothing is written.
    @Test func badJSONShapesAreTypedErrors() throws {
        let db = try Database.inMemory(models: NHShop.models)
        try NHShop.seed(db)
        try db.write { tx in
            try tx.insert(NHOrder(id: 1, customer: Ref("c1"), lines: [], state: .open, placedAt: Date(timeIntervalSince1970: 0), total: 0))
        }
        func input(_ json: Data, _ model: String = "c") -> StrataError? {
            do {
                try db.write { tx in
                    if model == "c" { _ = try tx.update(NHCustomer.self, key: "c2", json: json) } else { _ = try tx.update(NHOrder.self, key: 1, json: json) }
                }
                return nil
            } catch let error as StrataError { return error } catch { return nil }
        }
        func isInvalid(_ e: StrataError?, _ text: String) -> Bool { if case .invalidInput(let r) = e { return r.contains(text) } else { return false } }
        let customer = try db.object(NHCustomer.self, key: "c2")
        #expect(isInvalid(input(Data(#"{"name":"A","name":"B"}"#.utf8)), #"duplicate field "name" at line 1"#))
        #expect(isInvalid(input(Data(#"{"n\u0061me":"A","name":"B"}"#.utf8)), "duplicate field"))
        #expect(isInvalid(input(Data(#"{"lines":[{"product":1,"quantity":1,"quantity":2}]}"#.utf8), "o"), #"duplicate field "quantity""#))
        #expect(isInvalid(input(Data([0x7B, 0x22, 0x6E, 0x61, 0x6D, 0x65, 0x22, 0x3A, 0x22, 0xC3, 0x28, 0x22, 0x7D])), "invalid UTF-8"))
        #expect(isInvalid(input(Data([0x7B, 0x22, 0x6E, 0x61, 0x6D, 0x65, 0x22, 0x3A, 0x22, 0xED, 0xA0, 0x80, 0x22, 0x7D])), "invalid UTF-8"))
        #expect(isInvalid(input(Data(#"{"name":"\ud800"}"#.utf8)), "surrogate"))
        #expect(isInvalid(input(Data("{\"name\":\"a\u{01}b\"}".utf8)), "control character"))
        #expect(isInvalid(input(Data()), "end of the input"))
        #expect(isInvalid(input(Data("[1]".utf8)), "JSON object"))
        #expect(isInvalid(input(Data(#"{"name":"A"} x"#.utf8)), "after the end"))
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(isInvalid(input(Data(#"{"note":\#(deep)}"#.utf8)), "nesting deeper"))
        let deepObject = String(repeating: #"{"a":"#, count: 100_000) + "1" + String(repeating: "}", count: 100_000)
        #expect(isInvalid(input(Data(#"{"note":\#(deepObject)}"#.utf8)), "nesting deeper"))
        #expect(input(Data(#"{"name":"A","bogus":1}"#.utf8)) == .unknownFields(model: "NHCustomer", fields: ["bogus"]))
        #expect(input(Data(#"{"lines":[{"product":2,"quantity":1,"x":1}]}"#.utf8), "o") == .unknownFields(model: "NHOrder", fields: ["lines[0].x"]))
        if case .typeMismatch(_, let field, _) = input(Data(#"{"name":null}"#.utf8)) { #expect(field == "name") } else { Issue.record("null name") }
        if case .typeMismatch(_, let field, _) = input(Data(#"{"tier":"diamond"}"#.utf8)) { #expect(field == "tier") } else { Issue.record("bad enum") }
        if case .typeMismatch(_, let field, _) = input(Data(#"{"customer":5}"#.utf8), "o") { #expect(field == "customer") } else { Issue.record("ref type") }
        if case .incompleteUpdate(_, _, let missing) = input(Data(#"{"address":{"city":"Porto"}}"#.utf8)) {
            #expect(missing == ["address.street"])
        } else {
            Issue.record("partial nested create")
        }
        if case .incompleteUpdate(_, _, let missing) = input(Data(#"{"lines":[{"quantity":1}]}"#.utf8), "o") {
            #expect(missing == ["lines[0].product"])
        } else {
            Issue.record("partial line")
        }
        #expect(try db.object(NHCustomer.self, key: "c2") == customer)
        #expect(try db.object(NHOrder.self, key: 1)?.lines == [])
        // upsert of an incomplete object names what is missing
        do {
            _ = try db.write { tx in try tx.upsert(NHCustomer.self, key: "c9", json: Data(#"{"name":"X"}"#.utf8)) }
            Issue.record("an incomplete upsert was stored")
        } catch let error as StrataError {
            #expect(error == .incompleteObject(model: "NHCustomer", key: "c9", missing: ["age", "email", "tier"]))
        }
    }

    /// Queries.md: "a search without words finds nothing"; with or without the index, the same
    /// answers; counts agree with the rows.
    @Test func searchInputsWithoutWordsFindNothing() throws {
        let db = try Database.inMemory(models: [NHWords.self, NHWordsScanned.self])
        let long = String(repeating: "a", count: 130)
        let texts = ["hello world", "can't stop", "3.14 pi", "***", "the end.", long + "x", long + "y", "", "é café", "a_b c-d", "x*y"]
        try db.write { tx in
            for (i, t) in texts.enumerated() {
                try tx.insert(NHWords(id: i, text: t))
                try tx.insert(NHWordsScanned(id: i, text: t))
            }
        }
        for empty in ["", " ", "*", "**", "***", "...", "'", "*hel", "hel *", "\u{0}", "😀", "-", "\"\""] {
            for search in [TextSearch(stringLiteral: empty), .anyWord(empty), .phrase(empty)] {
                let results = db.objects(NHWords.self).search(\.text, search)
                #expect(results.isEmpty && results.error == nil, "search \(empty.debugDescription)")
                #expect(try results.fetchCount() == 0)
            }
        }
        for word in ["hel*", long + "x", String(repeating: "a", count: 2000), "can't", "3.14", "x*y", "cafe", "CAFÉ", "a_b", "c-d", "x"] {
            for search in [TextSearch(stringLiteral: word), .anyWord(word), .phrase(word)] {
                let indexed = db.objects(NHWords.self).search(\.text, search)
                let scanned = db.objects(NHWordsScanned.self).search(\.text, search)
                #expect(indexed.map(\.id) == scanned.map(\.id), "search \(word.prefix(20))")
                #expect(try indexed.fetchCount() == indexed.count)
                #expect(Set(db.objects(NHWords.self).search(\.text, search, ranked: true).map(\.id)) == Set(indexed.map(\.id)))
            }
        }
    }

    /// Queries.md: integer arithmetic Swift would trap on fails the query with `invalidQuery`
    /// naming the object and the operation, for every integer width.
    @Test func narrowIntegerArithmeticFailsTheQuery() throws {
        let db = try Database.inMemory(models: [NHNumbers.self])
        try db.write { tx in
            try tx.insert(NHNumbers(id: 1, small: 0, tiny: .min, mid: .max, big: .min))
            try tx.insert(NHNumbers(id: 2, small: 255, tiny: 127, mid: 2, big: 3))
        }
        let cases: [(Predicate<NHNumbers>, String)] = [
            (#Predicate { $0.small - 1 > 3 }, "0 - 1 does not fit in UInt8"),
            (#Predicate { $0.small + 1 > 3 }, "255 + 1 does not fit in UInt8"),
            (#Predicate { $0.small * 2 > 3 }, "255 * 2 does not fit in UInt8"),
            (#Predicate { $0.tiny / ($0.tiny < 0 ? -1 : 1) > 3 }, "-128 / -1 does not fit in Int8"),
            (#Predicate { $0.mid * $0.mid > 3 }, "does not fit in Int32"),
            (#Predicate { $0.big % -1 > 3 }, "% -1 does not fit in Int64"),
            (#Predicate { $0.id % ($0.id - 1) > 3 }, "division by zero: 1 % 0"),
            (#Predicate { $0.small / ($0.small - $0.small) > 3 }, "division by zero"),
            (#Predicate { ($0.big...$0.big - 5).contains(1) }, "does not fit in Int64"),
        ]
        for (predicate, message) in cases {
            let results = db.objects(NHNumbers.self).filter(predicate)
            #expect(results.isEmpty)
            guard case .invalidQuery(let reason)? = results.error else {
                Issue.record("expected invalidQuery for \(message), got \(String(describing: results.error))")
                continue
            }
            #expect(reason.contains("NHNumbers") && reason.contains(message), "\(reason)")
            #expect(throws: StrataError.self) { try db.objects(NHNumbers.self).filter(predicate).fetch() }
        }
        // Guarded, the same arithmetic answers.
        let guarded = db.objects(NHNumbers.self).filter(#Predicate { $0.small > 0 && $0.small - 1 > 3 })
        #expect(guarded.map(\.id) == [2] && guarded.error == nil)
    }

    /// GettingStarted.md: `write` rolls everything back when it throws: records, plain, unique,
    /// compound, collated and full-text index entries alike; a failed unique write leaves the
    /// transaction usable and leaves no entry behind.
    @Test func aThrowingWriteLeavesNoTraceInAnyIndex() throws {
        let dir = try NHShop.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = try Database(path: dir.appendingPathComponent("shop.strata").path, models: NHShop.models)
        defer { db.close() }
        try NHShop.seed(db)
        let before = try db.objects(NHProduct.self).fetch()
        #expect(throws: NHBoom.self) {
            try db.write { tx in
                try tx.update(NHProduct.self, key: 1) {
                    $0.blurb = "zzzword"; $0.name = "AAA"; $0.price = 999; $0.tags = ["new"]
                }
                try tx.insert(NHProduct(id: nil, sku: "NEW", name: "new", blurb: "zzzword qqq", category: .games, price: 1, stock: 1, tags: ["new"]))
                _ = try tx.delete(NHProduct.self, key: 2)
                _ = try tx.update(NHProduct.self, key: 3, json: Data(#"{"blurb":"zzzword"}"#.utf8))
                #expect(try tx.count(NHProduct.self, where: #Predicate { $0.tags.contains("new") }) == 2)
                throw NHBoom()
            }
        }
        #expect(try db.objects(NHProduct.self).fetch() == before)
        #expect(db.objects(NHProduct.self).search(\.blurb, "zzzword").isEmpty)
        #expect(db.objects(NHProduct.self).search(\.blurb, "fine").count == before.count)
        #expect(db.objects(NHProduct.self).filter(\.tags, contains: "new").isEmpty)
        let games = NHCategory.games
        #expect(db.objects(NHProduct.self).filter(#Predicate { $0.category == games && $0.price > 100 }).isEmpty)
        #expect(
            db.objects(NHProduct.self).sorted(by: SortDescriptor(\.name), collation: .caseInsensitive).map(\.name)
                == before.map(\.name).sorted { StringCollation.caseInsensitive.compare($0, $1) == .orderedAscending })
        // Unique violations inside a transaction that commits leave no entries either.
        try db.write { tx in
            #expect(throws: StrataError.self) {
                try tx.insert(NHProduct(id: nil, sku: "S1", name: "Ghost", blurb: "ghostword", category: .games, price: 5, stock: 1, tags: ["ghost"]))
            }
            #expect(throws: StrataError.self) {
                try tx.update(NHProduct.self, key: 3) {
                    $0.sku = "S1"; $0.blurb = "ghostword"; $0.tags = ["ghost"]
                }
            }
            #expect(throws: StrataError.self) { _ = try tx.update(NHProduct.self, key: 4, json: Data(#"{"sku":"S1","blurb":"ghostword"}"#.utf8)) }
            #expect(throws: StrataError.self) {
                _ = try tx.upsert(
                    NHProduct.self, key: 99, json: Data(#"{"sku":"S1","name":"x","blurb":"ghostword","category":1,"price":1,"stock":1,"tags":["ghost"]}"#.utf8))
            }
        }
        #expect(db.objects(NHProduct.self).search(\.blurb, "ghostword").isEmpty)
        #expect(db.objects(NHProduct.self).filter(\.tags, contains: "ghost").isEmpty)
        #expect(try db.objects(NHProduct.self).fetch() == before)
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty, "\(report.problems)")
        // The next automatic key is the one after the largest stored.
        let next = try db.write { tx in try tx.insert(NHProduct(id: nil, sku: "N2", name: "n2", blurb: "b", category: .games, price: 1, stock: 1, tags: [])).id
        }
        #expect(next == 7)
    }

    /// Files that are not databases are refused with a typed error, and left as they were.
    @Test func foreignFilesAreRefusedAndLeftAlone() throws {
        let dir = try NHShop.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        var sqlite = Data("SQLite format 3\0".utf8)
        sqlite.append(Data(repeating: 0, count: 4096 - 16))
        var rng = NHSeeded(state: 0x5EED)
        let random = Data((0..<8192).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
        for (name, bytes) in [("random", random), ("sqlite", sqlite), ("short", Data("hello".utf8)), ("zeros", Data(repeating: 0, count: 16384))] {
            let url = dir.appendingPathComponent(name)
            #expect(FileManager.default.createFile(atPath: url.path, contents: bytes))
            do {
                let db = try Database(path: url.path, models: NHShop.models)
                db.close()
                Issue.record("\(name) opened as a database")
            } catch let error as StrataError {
                guard case .storage(let storage) = error, case .notAStrataFile = storage else {
                    Issue.record("\(name): \(error)")
                    continue
                }
            }
            #expect(try Data(contentsOf: url) == bytes, "\(name) was changed by the failed open")
        }
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("adir"), withIntermediateDirectories: true)
        #expect(throws: StrataError.self) { _ = try Database(path: dir.appendingPathComponent("adir").path, models: NHShop.models) }
        #expect(throws: StrataError.self) { _ = try Database(path: dir.appendingPathComponent("no/such/dir/x.strata").path, models: NHShop.models) }
        var readOnly = StoreOptions()
        readOnly.readOnly = true
        #expect(FileManager.default.createFile(atPath: dir.appendingPathComponent("empty").path, contents: Data()))
        #expect(throws: StrataError.self) { _ = try Database(path: dir.appendingPathComponent("empty").path, models: NHShop.models, options: readOnly) }
        // The same file twice in one process: one database, both handles see every commit.
        let path = dir.appendingPathComponent("shop.strata").path
        let first = try Database(path: path, models: NHShop.models)
        try NHShop.seed(first)
        let second = try Database(path: path, models: NHShop.models)
        try second.write { tx in try tx.insert(NHCustomer(id: "c3", name: "Cleo", email: "c@x", tier: .basic, address: nil, age: 3, note: nil)) }
        #expect(first.objects(NHCustomer.self).count == 3)
        second.close()
        try first.write { tx in try tx.insert(NHCustomer(id: "c4", name: "Dan", email: "d@x", tier: .basic, address: nil, age: 4, note: nil)) }
        #expect(first.objects(NHCustomer.self).count == 4)
        first.close()
        // Its lock file is not a database either.
        #expect(throws: StrataError.self) { _ = try Database(path: path + "-lock", models: NHShop.models) }
    }

    /// ModelsAndSchema.md: references are not foreign keys; back-links still find the objects
    /// that point at a deleted one, and the check notes the dangling references.
    @Test func deletedTargetsLeaveDanglingReferences() throws {
        let dir = try NHShop.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = try Database(path: dir.appendingPathComponent("shop.strata").path, models: NHShop.models)
        defer { db.close() }
        try NHShop.seed(db)
        try db.write { tx in
            for i in 1...2 {
                try tx.insert(
                    NHOrder(
                        id: nil, customer: Ref("c2"), lines: [NHLine(product: Ref(i), quantity: i)], state: .paid,
                        placedAt: Date(timeIntervalSince1970: Double(i)), total: 1))
            }
        }
        try db.write { tx in _ = try tx.delete(NHCustomer.self, key: "c2") }
        #expect(try db.snapshot().backlinks(NHOrder.self, via: \.customer, to: "c2").map(\.id) == [1, 2])
        let c2 = Ref<NHCustomer>("c2")
        #expect(db.objects(NHOrder.self).filter(#Predicate { $0.customer == c2 }).sorted(by: SortDescriptor(\.placedAt, order: .reverse)).map(\.id) == [2, 1])
        #expect(try db.object(NHCustomer.self, key: "c2") == nil)
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty)
        #expect(report.notes.contains { $0.contains("NHOrder.customer") && $0.contains("c2") }, "\(report.notes)")
    }

    /// TransactionsAndConcurrency.md: a nested `db.write` joins the open transaction as a
    /// savepoint (a failing one is undone alone, also inside an async write), and a composed
    /// write that throws anywhere rolls all of it back.
    @Test func nestedAndComposedWritesFromAsyncCode() async throws {
        let db = try Database.inMemory(models: NHShop.models)
        try NHShop.seed(db)
        let nine: Int16 = 9
        let count = try await db.write { tx in
            try tx.update(NHProduct.self, key: 1) { $0.stock = 9 }
            try db.write { inner in try inner.update(NHProduct.self, key: 2) { $0.stock = 9 } }
            do {
                try db.write { inner in
                    try inner.update(NHProduct.self, key: 3) { $0.stock = 9 }
                    throw NHBoom()
                }
            } catch {}
            return try tx.count(NHProduct.self, where: #Predicate { $0.stock == nine })
        }
        #expect(count == 2)
        #expect(db.objects(NHProduct.self).filter(#Predicate { $0.stock == nine }).map(\.id) == [1, 2])
        let failing: DBWrite<Void> = DBWrite.update(NHProduct.self, key: 5) { $0.stock = 9 }
            .then(DBWrite.insert(NHProduct(id: 1, sku: "dup", name: "d", blurb: "dupword", category: .books, price: 1, stock: 1, tags: [])))
            .discardingResult()
        await #expect(throws: StrataError.duplicateKey(model: "NHProduct", key: "1")) { try await db.run(failing) }
        #expect(db.objects(NHProduct.self).filter(#Predicate { $0.stock == nine }).map(\.id) == [1, 2])
        #expect(db.objects(NHProduct.self).search(\.blurb, "dupword").isEmpty)
    }

    /// An observer that writes from its callback: the write commits and the observer hears it.
    @Test func anObserverMayWriteFromItsCallback() async throws {
        let db = try Database.inMemory(models: NHShop.models)
        try NHShop.seed(db)
        let log = Mutex<[String]>([])
        let token = db.objects(NHProduct.self).filter(#Predicate { $0.stock > 2 }).observe(on: DispatchQueue(label: "nh.observer")) { change in
            switch change {
            case .initial(let results):
                log.withLock { $0.append("initial \(results.count)") }
                do { try db.write { tx in try tx.update(NHProduct.self, key: 1) { $0.stock = 50 } } } catch { log.withLock { $0.append("error \(error)") } }
            case .update(let results, let deletions, let insertions, let modifications):
                log.withLock { $0.append("update \(results.count) \(deletions) \(insertions) \(modifications)") }
            case .error(let error):
                log.withLock { $0.append("error \(error)") }
            }
        }
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline && log.withLock({ $0.count < 2 }) { try await Task.sleep(for: .milliseconds(5)) }
        #expect(log.withLock { $0 } == ["initial 3", "update 4 [] [0] []"])
        _ = token
    }
}

struct NHSeeded {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
