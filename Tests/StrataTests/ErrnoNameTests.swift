import Foundation
import Testing

import StrataStorage

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// I/O errors name their errno by the platform's constants: the names were a table of Linux
/// numbers (wrong on Darwin, where EAGAIN is 35 and EDQUOT 69), and opening a directory read
/// "failed with errno 21 (errno 21)".
struct ErrnoNameTests {
    @Test func ioErrorsNameTheirErrno() {
        let named: [(Int32, String)] = [
            (ENOENT, "ENOENT"), (EISDIR, "EISDIR"), (ENOTDIR, "ENOTDIR"), (EPERM, "EPERM"), (EAGAIN, "EAGAIN"),
            (EDQUOT, "EDQUOT"), (ENOSPC, "ENOSPC"), (EMFILE, "EMFILE"), (ENAMETOOLONG, "ENAMETOOLONG"),
        ]
        for (err, name) in named {
            let description = StorageError.io(operation: "open", path: "/x", errno: err).description
            #expect(description == "I/O error: open on /x failed with errno \(err) (\(name))")
        }
    }

    @Test func openingADirectorySaysSo() throws {
        let error = #expect(throws: StorageError.self) { try Store(path: "/tmp") }
        #expect(error?.description.contains("EISDIR") == true, "\(String(describing: error))")
    }

    /// An empty path is ENOENT, as open(2) says, and creates nothing: it used to create the lock
    /// file "-lock" in the working directory before failing on a rename.
    @Test func anEmptyPathCreatesNothing() throws {
        let lock = FileManager.default.currentDirectoryPath + "/-lock"
        let existed = FileManager.default.fileExists(atPath: lock)
        #expect(throws: StorageError.io(operation: "open", path: "", errno: ENOENT)) { try Store(path: "") }
        #expect(throws: StorageError.io(operation: "open", path: "", errno: ENOENT)) {
            try Store(path: "", options: StoreOptions(readOnly: true))
        }
        let store = try Store.inMemory()
        #expect(throws: StorageError.self) { try store.copy(to: "") }
        #expect(throws: StorageError.self) { try store.copy(to: "", compacting: false) }
        #expect(FileManager.default.fileExists(atPath: lock) == existed)
    }
}
