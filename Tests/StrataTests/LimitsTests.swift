import Testing

import Strata

/// `Limits` takes any page size a caller passes: `Int.min` used to overflow in
/// `maxInlineEntry(pageSize:)`, and sizes too small for a page header gave negative lengths.
struct LimitsTests {
    @Test func theLimitsOfTheFilePageSizes() {
        #expect(Limits.maxKeySize(pageSize: 4096) == 998)
        for pageSize in Limits.pageSizes {
            #expect(Limits.maxKeySize(pageSize: pageSize) > 0)
            #expect(Limits.maxKeySize(pageSize: pageSize) < Limits.maxInlineEntry(pageSize: pageSize))
        }
    }

    @Test func anyIntIsTakenWithoutTrapping() {
        for pageSize in [Int.min, -4096, -1, 0, 1, 24, 64] {
            #expect(Limits.maxInlineEntry(pageSize: pageSize) >= 0, "\(pageSize)")
            #expect(Limits.maxKeySize(pageSize: pageSize) == 0, "\(pageSize)")
        }
        #expect(Limits.maxKeySize(pageSize: Int.max) > 0)
    }
}
