import Storage
import Foundation
import Synchronization

/// Batches concurrent write transactions into one SQLite transaction, so one fsync serves many callers.
/// Each caller's work runs in its own SAVEPOINT: a caller that throws rolls back only its own part.
/// A caller returns only after the shared COMMIT has reached the disk.
final class GroupCommit: Sendable {
    struct Job: Sendable {
        let run: @Sendable (Connection) throws -> Void
        let finish: @Sendable ((any Error)?) -> Void
    }

    private let state = Mutex<(queue: [Job], draining: Bool)>(([], false))
    private let maximumBatch: Int
    private unowned let pool: DatabasePool

    init(pool: DatabasePool, maximumBatch: Int = 512) {
        self.pool = pool
        self.maximumBatch = maximumBatch
    }

    func submit(_ job: Job) {
        let startDrain = state.withLock { s -> Bool in
            s.queue.append(job)
            if s.draining { return false }
            s.draining = true
            return true
        }
        // The first caller of a burst drains on a plain thread: blocking SQLite work stays off the Swift pool.
        if startDrain { Thread.detachNewThread { self.drain() } }
    }

    private func drain() {
        while true {
            let batch = state.withLock { s -> [Job] in
                let taken = Array(s.queue.prefix(maximumBatch))
                s.queue.removeFirst(taken.count)
                if taken.isEmpty { s.draining = false }
                return taken
            }
            if batch.isEmpty { return }
            // Jobs almost never fail, so a batch first runs bare; savepoints copy every page a job touches.
            // Only if a job throws is the batch rolled back and run again with one savepoint per job.
            let outcomes = (try? commit(batch, isolated: false)) ?? isolatedOutcomes(batch)
            for (job, outcome) in zip(batch, outcomes) { job.finish(outcome) }
        }
    }

    private struct JobFailed: Error {}

    /// One transaction for the whole batch. Not isolated, a failing job aborts it (throws `JobFailed`);
    /// isolated, each job runs in its own SAVEPOINT and its error is returned in its place.
    private func commit(_ batch: [Job], isolated: Bool) throws -> [(any Error)?] {
        var outcomes: [(any Error)?] = Array(repeating: nil, count: batch.count)
        try pool.transaction { db in
            for (i, job) in batch.enumerated() {
                guard isolated else {
                    do { try job.run(db) } catch { throw JobFailed() }
                    continue
                }
                try db.run("SAVEPOINT job")
                do {
                    try job.run(db)
                    try db.run("RELEASE job")
                } catch {
                    // Some failures (disk full, I/O) make SQLite roll the whole transaction back
                    // itself; then no savepoint is left and every job of the batch fails with it.
                    do {
                        try db.run("ROLLBACK TO job")
                        try db.run("RELEASE job")
                    } catch _ {
                        throw error
                    }
                    outcomes[i] = error
                }
            }
        }
        return outcomes
    }

    private func isolatedOutcomes(_ batch: [Job]) -> [(any Error)?] {
        do {
            return try commit(batch, isolated: true)
        } catch {
            // The commit itself failed (disk full, read-only): nothing of this batch is stored.
            return Array(repeating: error, count: batch.count)
        }
    }
}

extension DatabasePool {
    /// Runs `body` in a transaction shared with other concurrent callers (group commit); returns after it is durable.
    /// `body` may run twice (again after another caller's failure rolled the first attempt back): it must only
    /// touch the database, and only its last run counts.
    public func groupTransaction<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        // The job runs on the commit thread, where task-locals are not bound: the hook travels with it.
        let hook = CommitHook.current
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let result = Mutex<T?>(nil)
            groupCommit.submit(GroupCommit.Job(run: { db in
                let value = try CommitHook.withCurrent(hook, in: db, body)
                result.withLock { $0 = value }
            }, finish: { error in
                if let error { continuation.resume(throwing: error) } else {
                    continuation.resume(returning: result.withLock { $0! })
                }
            }))
        }
    }
}
