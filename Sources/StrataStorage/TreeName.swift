/// A tree's name as the catalog keys it: by its UTF-8 bytes. Swift's `String` equality is
/// canonical equivalence, so "\u{E9}" and "e\u{301}" are one `String` key and two trees in the
/// file: a write transaction's open trees are keyed by this instead, so that it never takes one
/// for the other.
struct TreeName: Hashable {
    let name: String

    init(_ name: String) { self.name = name }

    static func == (a: TreeName, b: TreeName) -> Bool { a.name.utf8.elementsEqual(b.name.utf8) }

    func hash(into hasher: inout Hasher) {
        for byte in name.utf8 { hasher.combine(byte) }
    }
}
