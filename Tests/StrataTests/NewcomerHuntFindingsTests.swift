import Testing
import Foundation
@testable import Strata

// Findings of the newcomer hunt (see NewcomerHuntTests.swift for the shop models). Each test failed
// before its fix; the comment above it says what is expected and why.

@Suite struct NewcomerHuntFindingsTests {
    /// ModelsAndSchema.md ("References"): "References are not foreign keys: deleting an object does
    /// not delete or clear the references to it. `strata check` reports references to missing
    /// objects as notes." InspectingAFile.md: "References to objects that do not exist are notes".
    /// A shop's order lines are the common place for references (`[NHLine]`, each with a
    /// `Ref<NHProduct>`), yet `StoredObjects.check` (and so `strata check`) only follows a `Ref`
    /// field, a `Ref` inside a nested struct and an array of `Ref`s: a `Ref` inside an array of
    /// structs is never looked at, so the deleted products below give no note.
    /// Suspect: Sources/Strata/Database/ObjectCheck.swift `references(_:schema:path:_:)`, whose
    /// `.array` case only handles an element that is itself a reference (no `.object` elements,
    /// no dictionaries).
    @Test func checkNotesDanglingReferencesInsideArraysOfStructs() throws {
        let dir = try NHShop.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let db = try Database(path: dir.appendingPathComponent("shop.strata").path, models: NHShop.models)
        defer { db.close() }
        try NHShop.seed(db)
        try db.write { tx in
            try tx.insert(
                NHOrder(
                    id: nil, customer: Ref("c1"), lines: [NHLine(product: Ref(1), quantity: 2), NHLine(product: Ref(2), quantity: 1)],
                    state: .paid, placedAt: Date(timeIntervalSince1970: 100), total: 21))
        }
        try db.write { tx in
            _ = try tx.delete(NHProduct.self, key: 1)
            _ = try tx.delete(NHProduct.self, key: 2)
        }
        // The order still refers to both products, as documented.
        #expect(try db.object(NHOrder.self, key: 1)?.lines.map(\.product.id) == [1, 2])
        let report = try StoredObjects.check(in: db.store)
        #expect(report.problems.isEmpty)
        #expect(
            report.notes.contains { $0.contains("NHOrder.lines") && $0.contains("NHProduct") },
            "no note for the order lines' references to deleted products: \(report.notes)")
    }

    /// SyncingFromAServer.md: "Numbers are read as `JSONDecoder` reads them" and "A value of the
    /// wrong type throws `StrataError.typeMismatch`". A `Ref` to a model with an auto-increment key
    /// (`var id: Int?`, the documented pattern) holds an `Int?`: `Ref<NHProduct>(nil)` is a value
    /// the typed API stores and reads back, and `JSONDecoder` reads `"product": null` as exactly
    /// that (`Ref.init(from:)` decodes `Target.ID`, here `Int?`). A partial update refuses it:
    /// "type mismatch in NHOrder.lines[0].product: null given for a non-optional Ref<NHProduct>".
    /// So a stored object cannot be written back through the JSON path in the shape
    /// `JSONEncoder` gives it, and the error calls a legal value the wrong type.
    /// Expected: the update stores what `JSONDecoder` decodes from the merged document.
    @Test func aNullReferenceToAnAutoIncrementModelReadsAsJSONDecoderReadsIt() throws {
        let db = try Database.inMemory(models: NHShop.models)
        try NHShop.seed(db)
        let typed = NHOrder(
            id: 1, customer: Ref("c1"), lines: [NHLine(product: Ref(nil), quantity: 1)], state: .open,
            placedAt: Date(timeIntervalSince1970: 0), total: 0)
        // The typed API stores such a reference.
        try db.write { tx in try tx.insert(typed) }
        #expect(try db.object(NHOrder.self, key: 1)?.lines.first?.product.id == nil)
        // JSONDecoder reads null there too, and JSONEncoder writes it so.
        let encoded = try JSONEncoder().encode(typed)
        #expect(String(decoding: encoded, as: UTF8.self).contains(#""product":null"#))
        let decoded = try JSONDecoder().decode(NHLine.self, from: Data(#"{"product":null,"quantity":3}"#.utf8))
        #expect(decoded == NHLine(product: Ref(nil), quantity: 3))
        // The partial update should agree.
        do {
            let result = try db.write { tx in
                try tx.update(NHOrder.self, key: 1, json: Data(#"{"lines":[{"product":null,"quantity":3}]}"#.utf8))
            }
            #expect(result.object.lines == [decoded])
        } catch {
            Issue.record("the partial update refused a null reference that JSONDecoder and the typed API accept: \(error)")
        }
    }

    /// GettingStarted.md ("Errors"): each case "names the model, field or key concerned, and its
    /// description reads as a sentence" that says what was wrong. Listing one model type twice in
    /// `Database(models:)` (an easy slip in an app that builds the list from several modules)
    /// fails with "two models share the name NHCustomer; set modelName": it is one model, and
    /// setting `modelName` cannot help (the type would still share it with itself).
    /// Expected: either the duplicate is ignored (the list is a set of types), or the error says
    /// the type is listed twice.
    @Test func aModelListedTwiceIsNotReportedAsTwoModelsSharingAName() throws {
        // The list is a set of types: the repeat is one model.
        do {
            let db = try Database.inMemory(models: [NHCustomer.self, NHProduct.self, NHCustomer.self])
            try db.write { tx in _ = try tx.insert(NHCustomer(id: "c9", name: "Ada", email: "ada@x", tier: .basic, address: nil, age: 30, note: nil)) }
            #expect(db.objects(NHCustomer.self).count == 1)
            db.close()
        } catch {
            Issue.record("a type listed twice: \(error)")
        }
    }
}
