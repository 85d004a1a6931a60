import Foundation
import Testing

@testable import Strata

// A stored NaN of any sign or payload reads back from its untyped form (a migration's
// `old["point"]?.decode(Point.self)`): Swift prints "-nan" and "snan", which the JSON the
// untyped value goes through did not take (found by a review of the codec, 2026-12-07).

struct SVPoint: Codable, Equatable {
    var x: Double
    var at: Date
}

struct StoredValueNaNTests {
    @Test(arguments: [Double.nan, -Double.nan, Double.signalingNaN, -Double.signalingNaN, Double(bitPattern: 0x7FF8_0000_0000_0001)])
    func everyNaNReadsBack(nan: Double) throws {
        let value = StoredValue.object(["x": .double(nan), "at": .date(Date(timeIntervalSinceReferenceDate: nan))])
        let point = try value.decode(SVPoint.self)
        #expect(point.x.isNaN)
        #expect(point.at.timeIntervalSinceReferenceDate.isNaN)
        for infinity in [Double.infinity, -Double.infinity] {
            #expect(try StoredValue.object(["x": .double(infinity), "at": .date(Date(timeIntervalSinceReferenceDate: 0))]).decode(SVPoint.self).x == infinity)
        }
    }
}
