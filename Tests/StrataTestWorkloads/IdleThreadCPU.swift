// The CPU time of a store's idle compaction thread, for the tests that check it does not spin:
// measured on that thread alone, since suites running in parallel start threads of their own
// (and the process's CPU time says little).

import Foundation
import StrataStorage

package enum IdleThreadCPU {
    /// The idle compaction thread of `store` (its id, once it runs; 20 s at most).
    ///
    /// ```swift
    /// let threads = IdleThreadCPU.idleThread(store)
    /// ```
    package static func idleThread(_ store: Store) -> Set<Int> {
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if let id = store.idleCompactionThreadID { return [id] }
            usleep(1_000)
        }
        return []
    }

    /// CPU time (user + system) of the threads `ids` so far, from /proc/self/task/ID/stat (those
    /// that have exited count zero).
    ///
    /// ```swift
    /// let before = IdleThreadCPU.cpu(threads)
    /// ```
    package static func cpu(_ ids: Set<Int>) -> Duration {
        let ticks = Int64(sysconf(Int32(_SC_CLK_TCK)))
        var total: Duration = .zero
        for id in ids {
            guard let stat = try? String(contentsOfFile: "/proc/self/task/\(id)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 12, let user = Int64(fields[11]), let system = Int64(fields[12]) else { continue }
            total += .milliseconds((user + system) * 1000 / ticks)
        }
        return total
    }
}
