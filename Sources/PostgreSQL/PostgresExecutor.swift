import Foundation

/// Threads of the pool's own, for work that blocks on the server (a query, a lock wait, a reconnect): a task that
/// prefers this executor runs here instead of on Swift's cooperative pool, whose few threads must never wait. A task
/// that suspends (waiting for a free connection) frees its thread.
///
/// The same shape as the SQLite engine's `StorageExecutor` (which lives in the engine seam's target, out of reach of
/// this libpq-only target): once both engines sit under the seam, one of the two can go.
public final class PostgresExecutor: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var stopping = false
    private var threadIDs: [pthread_t] = []

    /// Starts `threads` threads named `name-0`…; they end when `stop()` is called and the queue is empty.
    public init(threads: Int, name: String) {
        for index in 0..<max(1, threads) {
            let thread = Thread { [self] in
                // Named from inside: on Linux a name given before the start does not reach the thread itself.
                Thread.current.name = "\(name)-\(index)"
                run()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        guard !stopping else {
            condition.unlock()
            // Work that arrives after the stop (a task resuming late) still runs, on a thread of its own.
            Thread { job.runSynchronously(on: self.asUnownedTaskExecutor()) }.start()
            return
        }
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Whether the calling thread is one of this executor's.
    public var isCurrent: Bool {
        condition.lock()
        defer { condition.unlock() }
        let me = pthread_self()
        return threadIDs.contains { pthread_equal($0, me) != 0 }
    }

    /// Lets the threads finish the queued work and end.
    public func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }

    private func run() {
        condition.lock()
        threadIDs.append(pthread_self())
        condition.unlock()
        while true {
            condition.lock()
            while jobs.isEmpty, !stopping { condition.wait() }
            if jobs.isEmpty {
                threadIDs.removeAll { pthread_equal($0, pthread_self()) != 0 }
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
