#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A peer's shared library, opened at run time (the package links no peer): its symbols are
/// looked up by name and cast to the C function types the bindings declare.
struct PeerLibrary {
    let soname: String
    private let handle: UnsafeMutableRawPointer

    /// Opens `soname`, or the file named by the environment variable `override` (a custom build),
    /// and builds the bindings with `make`; or explains why it could not.
    static func load<L>(soname: String, override: String, _ make: (PeerLibrary) throws -> L) -> Result<L, BenchError> {
        let name = getenv(override).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? soname
        guard let handle = dlopen(name, RTLD_NOW | RTLD_LOCAL) else {
            let reason = dlerror().map { String(cString: $0) } ?? "not found"
            return .failure(BenchError("\(name) not loadable (\(reason))"))
        }
        do {
            return .success(try make(PeerLibrary(soname: name, handle: handle)))
        } catch let error as BenchError {
            return .failure(error)
        } catch {
            return .failure(BenchError("\(error)"))
        }
    }

    /// The function `name`, as `type`.
    func symbol<F>(_ name: String, as type: F.Type) throws -> F {
        guard let pointer = dlsym(handle, name) else { throw BenchError("\(soname) lacks \(name)") }
        return unsafeBitCast(pointer, to: type)
    }
}
