import Foundation
import Storage
import Synchronization

/// A few connections to one database and threads of the pool's own: libpq blocks its caller on the network, so the
/// calls run on those threads (the task prefers the pool's `PostgresExecutor` while it holds a connection), never on
/// Swift's cooperative pool. A task waiting for a free connection waits as a suspended continuation, not a parked
/// thread. Because the body runs in the calling task, task-locals bound around the call are seen inside it.
///
/// A connection the server dropped (a restart, `pg_terminate_backend`, a network cut) is reconnected on its next use;
/// the call that meets the break fails with `.connectionLost`, the next one works.
public final class PostgresPool: Sendable {
    public let size: Int
    /// The URL with its password replaced by `***`.
    public let redactedURL: String
    /// The pool's threads, one a connection: a task holding a connection runs there.
    public let executor: PostgresExecutor
    private let connections: [PooledConnection]
    private let slots: ConnectionSlots

    /// Checks the URL (as libpq reads it) and starts `size` threads; connections open on first use, or all at once
    /// with `connectAll()`.
    public init(url: String, size: Int = 4, applicationName: String = "soulacy") throws(PostgresError) {
        try PostgresConnection.validate(url)
        self.size = max(1, size)
        redactedURL = PostgresURL.redacted(url)
        connections = (0..<self.size).map { _ in PooledConnection(url: url, applicationName: applicationName) }
        slots = ConnectionSlots(count: self.size)
        executor = PostgresExecutor(threads: self.size, name: "postgres")
    }

    deinit { close() }

    /// Runs `body` with a connection of its own, on one of the pool's threads. A transaction `body` leaves open is
    /// rolled back before the connection serves anyone else.
    public func withConnection<T: Sendable>(_ body: (PostgresConnection) throws -> T) async throws -> T {
        // The slot first, then the thread: a task waiting for a connection waits where it is (and can be cancelled
        // there), never in the queue of threads busy with other holders' statements.
        let index = try await slots.acquire()
        defer { if slots.release(index) { connections[index].close() } }
        return try await onPoolThread { try connections[index].use(body) }
    }

    /// Runs `body` (work outside the database, such as files several processes share) while this connection holds
    /// the session advisory lock `key`: of all the processes on the database that ask for `key`, one runs at a time.
    public func withAdvisoryLock<T: Sendable>(_ key: Int64, _ body: () throws -> T) async throws -> T {
        try await withConnection { connection in
            _ = try connection.query("SELECT pg_advisory_lock($1)", key)
            // A broken connection has released the lock already; the body's error is the one that matters.
            defer { _ = try? connection.query("SELECT pg_advisory_unlock($1)", key) }
            return try body()
        }
    }

    /// Runs `body` in one transaction on a connection of its own: all of it commits, or none. Transactions nested
    /// inside (`connection.transaction`) are savepoints of it.
    public func transaction<T: Sendable>(isolation: PostgresIsolation? = nil, _ body: (PostgresConnection) throws -> T) async throws -> T {
        // Nested use joins the transaction this task holds on this pool (a savepoint on its connection), as SQLite's
        // pool does: a second connection would wait for the first and could never see its writes.
        if let held = HeldPostgresTransaction.usable(in: self) { return try held.connection.transaction(isolation: isolation, body) }
        // The task's hook (an idempotent call's "applied" line) runs before the COMMIT, in this very transaction;
        // work deferred with `afterCommit` inside waits for that COMMIT.
        let hook = CommitHook.current
        return try await withConnection { connection in
            let held = HeldPostgresTransaction(pool: self, connection: connection)
            return try HeldPostgresTransaction.$current.withValue(held) {
                try connection.transaction(isolation: isolation) { connection in try CommitHook.withCurrent(hook, in: connection, body) }
            }
        }
    }

    /// Deletes the rows of `table` matching `condition`, a few thousand per transaction, so a large clean-up never
    /// holds its locks for long (SQLite's `DatabasePool.deleteInBatches`). Returns how many went.
    @discardableResult
    public func deleteInBatches(from table: String, where condition: String, arguments: [any PostgresBindable], batchSize: Int = 5000) async throws -> Int {
        var removed = 0
        while true {
            let count = try await transaction { db in
                try db.run("DELETE FROM \(table) WHERE ctid IN (SELECT ctid FROM \(table) WHERE \(condition) LIMIT \(batchSize))", arguments: arguments)
            }
            removed += count
            if count < batchSize { return removed }
        }
    }

    /// Sends a notification to every connection listening on `channel` (`pg_notify`, both values as parameters).
    /// Here it is its own statement; `PostgresConnection.notify` sends one with a transaction's writes.
    public func notify(channel: String, payload: String = "") async throws {
        try await withConnection { connection in try connection.notify(channel: channel, payload: payload) }
    }

    /// Opens every connection now (a startup check: a wrong URL or password fails here, not on the first request).
    /// It takes every slot in turn, so it waits for connections in use.
    public func connectAll() async throws {
        var held: [Int] = []
        defer { for index in held where slots.release(index) { connections[index].close() } }
        for _ in 0..<size { held.append(try await slots.acquire()) }
        try await onPoolThread { [held] in
            for index in held { try connections[index].use { _ in () } }
        }
    }

    /// Runs `work` in the calling task (its task-locals included) on one of the pool's threads.
    private func onPoolThread<T>(_ work: () throws -> T) async throws -> T {
        try await withTaskExecutorPreference(executor) { try work() }
    }

    /// Whether `close()` was called: every later call fails.
    public var isClosed: Bool { slots.isClosed }

    /// Refuses new work and fails the tasks waiting for a connection; each connection closes now if free, else once
    /// its holder is done.
    public func close() {
        for index in slots.close() { connections[index].close() }
        executor.stop()
    }
}

/// One connection of the pool, opened on first use and reopened after a break; only the task holding its slot
/// touches it.
final class PooledConnection: @unchecked Sendable {
    private let url: String
    private let applicationName: String
    private var connection: PostgresConnection?

    init(url: String, applicationName: String) {
        self.url = url
        self.applicationName = applicationName
    }

    func use<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        let connection: PostgresConnection
        if let existing = self.connection {
            try existing.prepareForUse()
            connection = existing
        } else {
            connection = try PostgresConnection(url: url, applicationName: applicationName)
            self.connection = connection
        }
        defer { connection.finishUse() }
        return try body(connection)
    }

    func close() {
        connection?.close()
        connection = nil
    }
}

/// The pool's free connections and the tasks waiting for one, first come first served.
final class ConnectionSlots: Sendable {
    private struct Waiter {
        let id: UInt64
        let continuation: CheckedContinuation<Int, any Error>
    }

    private struct State {
        var free: [Int]
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
        var closed = false
    }

    private let state: Mutex<State>

    init(count: Int) {
        state = Mutex(State(free: Array((0..<count).reversed())))
    }

    static let closedError = PostgresError(kind: .connectionLost, message: "the connection pool is closed")

    func acquire() async throws -> Int {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Int, any Error>) in
                // Decided under the lock, resumed outside it.
                let outcome: Result<Int, any Error>? = state.withLock { state in
                    if state.closed { return .failure(Self.closedError) }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if let index = state.free.popLast() { return .success(index) }
                    state.waiters.append(Waiter(id: id, continuation: continuation))
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            // Either the waiter is still queued (taken out and failed here) or it already has a connection.
            let waiter = state.withLock { state -> Waiter? in
                guard let position = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: position)
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Hands the connection to the first waiter, or frees it; true when the pool is closed (the caller closes it).
    func release(_ index: Int) -> Bool {
        let (waiter, closed) = state.withLock { state -> (Waiter?, Bool) in
            if state.closed { return (nil, true) }
            if state.waiters.isEmpty {
                state.free.append(index)
                return (nil, false)
            }
            return (state.waiters.removeFirst(), false)
        }
        waiter?.continuation.resume(returning: index)
        return closed
    }

    var isClosed: Bool { state.withLock { $0.closed } }

    /// Refuses every later acquire and fails the waiters; returns the free connections (to close now).
    func close() -> [Int] {
        let (waiters, free) = state.withLock { state -> ([Waiter], [Int]) in
            state.closed = true
            defer {
                state.waiters = []
                state.free = []
            }
            return (state.waiters, state.free)
        }
        for waiter in waiters { waiter.continuation.resume(throwing: Self.closedError) }
        return free
    }
}
