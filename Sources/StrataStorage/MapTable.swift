import Synchronization

// The memory map of the page file. Address space is reserved generously up front (the file grows
// into it with no remapping); when the file outgrows it, a larger map is made. Earlier maps stay
// mapped until the environment closes, so a snapshot that began on one never sees it vanish.

final class MapTable: Sendable {
    struct Mapping: Sendable {
        let address: UInt
        let length: Int
        var base: UnsafeRawPointer { UnsafeRawPointer(bitPattern: address)! }
    }

    static let minimumReservation = 1 << 36  // 64 GiB of address space, not memory
    private let file: FileIO
    private let maps: Mutex<[Mapping]>
    /// The newest map, packed for lock-free reads: index into a fixed table written once per slot.
    private let table: UnsafeMutablePointerBox
    private let currentIndex = Atomic<Int>(0)
    static let capacity = 64

    init(file: FileIO, minimumBytes: Int) throws {
        self.file = file
        let (address, length) = try MapTable.map(file, covering: minimumBytes)
        let first = Mapping(address: UInt(bitPattern: address), length: length)
        self.maps = Mutex([first])
        self.table = UnsafeMutablePointerBox(capacity: MapTable.capacity)
        table.store(first, at: 0)
    }

    deinit {
        maps.withLock { maps in
            for m in maps { file.unmap(UnsafeMutableRawPointer(bitPattern: m.address)!, length: m.length) }
        }
    }

    static func reservation(for bytes: Int) -> Int {
        var length = minimumReservation
        let wanted = twice(bytes)
        while length < wanted {
            if length > Int.max / 2 { return wanted }
            length *= 2
        }
        return length
    }

    /// `2 × bytes`, at most `Int.max`: a file's size is the file's word, and a sparse file can
    /// claim exabytes (a map that long then fails, as an error).
    private static func twice(_ bytes: Int) -> Int {
        bytes > Int.max / 2 ? Int.max : bytes * 2
    }

    /// Maps the generous reservation for `bytes`; where the address space is limited (`ulimit -v`,
    /// valgrind, small machines) and that fails, halves it down to twice `bytes` (more remaps
    /// later, nothing else changes).
    private static func map(_ file: FileIO, covering bytes: Int) throws -> (UnsafeMutableRawPointer, Int) {
        var length = reservation(for: bytes)
        let smallest = max(twice(bytes), 1 << 20)
        while true {
            do {
                return (try file.map(length: length, writable: false), length)
            } catch {
                if length / 2 < smallest { throw error }
                length /= 2
            }
        }
    }

    /// The newest map.
    var current: Mapping { table.load(at: currentIndex.load(ordering: .acquiring)) }

    /// A map covering at least `bytes`, remapping when the file has outgrown the current one.
    func ensure(bytes: Int) throws -> Mapping {
        let now = current
        if bytes <= now.length { return now }
        return try maps.withLock { (maps) throws -> Mapping in
            if let last = maps.last, bytes <= last.length { return last }
            if maps.count >= MapTable.capacity { throw StorageError.internalError("too many remaps") }
            let (address, length) = try MapTable.map(file, covering: bytes)
            let mapping = Mapping(address: UInt(bitPattern: address), length: length)
            table.store(mapping, at: maps.count)
            maps.append(mapping)
            currentIndex.store(maps.count - 1, ordering: .releasing)
            return mapping
        }
    }
}

/// Fixed storage for map records. `@unchecked Sendable`: each slot is written once, under
/// `MapTable.maps`'s lock, before its index is published with a releasing store; readers load
/// the index with an acquiring load and then read only that slot, which never changes again.
final class UnsafeMutablePointerBox: @unchecked Sendable {
    private let slots: UnsafeMutablePointer<MapTable.Mapping>

    init(capacity: Int) {
        slots = .allocate(capacity: capacity)
    }

    deinit { slots.deallocate() }

    func store(_ mapping: MapTable.Mapping, at index: Int) { (slots + index).initialize(to: mapping) }
    func load(at index: Int) -> MapTable.Mapping { slots[index] }
}
