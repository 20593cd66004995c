import Storage
import Foundation
import Synchronization

/// A database file shared by threads: one writer connection and a few readers (WAL lets them run at once).
public final class DatabasePool: Sendable {
    public let path: String
    private let writer: GuardedConnection
    private let readers: [GuardedConnection]
    private let nextReader = Atomic<Int>(0)
    private let committedChanges = Atomic<UInt64>(0)
    private let groupCommitBox = GroupCommitBox()
    private let storageExecutor = Mutex<StorageExecutor?>(nil)
    private let storageThreads: Int
    var groupCommit: GroupCommit { groupCommitBox.get(self) }
    /// Told how long callers waited for a connection and how long the writer was held (nil: not measured).
    let metrics: (any DatabaseMetricsSink)?

    /// `maximumBytes` caps the file (SQLite's max_page_count): past it writes fail as "disk full", cleanly.
    public init(path: String, readerCount: Int = 4, durability: Durability = .full, maximumBytes: Int? = nil,
                metrics: (any DatabaseMetricsSink)? = nil) throws(SQLiteError) {
        self.path = path
        self.metrics = metrics
        let writerConnection = try Connection(path: path, durability: durability)
        if let maximumBytes {
            let pageSize = try writerConnection.query("PRAGMA page_size").first?.int("page_size") ?? 4096
            try writerConnection.query("PRAGMA max_page_count = \(max(1, Int64(maximumBytes) / pageSize))")
        }
        writer = GuardedConnection(writerConnection, role: .writer, metrics: metrics)
        var readers: [GuardedConnection] = []
        for _ in 0..<max(1, readerCount) {
            readers.append(GuardedConnection(try Connection(path: path, durability: durability), role: .reader, metrics: metrics))
        }
        self.readers = readers
        storageThreads = readers.count + 1
    }

    /// The pool's own threads (started on first use): the async accessors run there, and so can whole request
    /// handlers (`HTTPServerConfiguration.handlerExecutor`), so no cooperative thread waits on SQLite.
    public var executor: StorageExecutor {
        storageExecutor.withLock { existing in
            if let existing { return existing }
            let created = StorageExecutor(threads: storageThreads)
            existing = created
            return created
        }
    }

    /// `body` on the pool's own threads: a store's synchronous calls (each its own read or transaction) made without
    /// a cooperative thread waiting on SQLite.
    public func onStorageThreads<T: Sendable>(_ body: () throws -> T) async throws -> T {
        try await withTaskExecutorPreference(executor) { try body() }
    }

    /// `read` on the pool's own threads.
    public func asyncRead<T: Sendable>(_ body: @Sendable (Connection) throws -> T) async throws -> T {
        try await withTaskExecutorPreference(executor) { try self.read(body) }
    }

    /// `write` on the pool's own threads.
    public func asyncWrite<T: Sendable>(_ body: @Sendable (Connection) throws -> T) async throws -> T {
        try await withTaskExecutorPreference(executor) { try self.write(body) }
    }

    /// `transaction` on the pool's own threads.
    public func asyncTransaction<T: Sendable>(_ body: @Sendable (Connection) throws -> T) async throws -> T {
        try await withTaskExecutorPreference(executor) { try self.transaction(body) }
    }

    /// `transaction(answering:)` on the pool's own threads.
    public func asyncTransaction<T: Sendable>(answering answer: @Sendable (T) -> CommitHook.Answer,
                                              _ body: @Sendable (Connection) throws -> T) async throws -> T {
        try await withTaskExecutorPreference(executor) { try self.transaction(answering: answer, body) }
    }

    /// Closes every connection once the owner has stopped using the pool (a stopped gateway releases its files
    /// even while something still holds the pool).
    public func close() {
        storageExecutor.withLock { $0?.stop() }
        writer.with { $0.close() }
        for reader in readers { reader.with { $0.close() } }
    }

    /// Grows after each write access that changed rows, once the change is committed. A value read before a
    /// query and unchanged after it means the query's answer is still current (in this process; the gateway
    /// is the only writer of its database). Caches of rendered answers key on it.
    public var changeGeneration: UInt64 { committedChanges.load(ordering: .acquiring) }

    @discardableResult
    /// Serialised access to the writer; wrap several statements in `transaction` to commit them as one.
    public func write<T>(_ body: (Connection) throws -> T) throws -> T {
        if let open = HeldConnection.usable(HeldConnection.transaction, in: self) { return try body(open.connection) }
        return try writer.with { db in
            let before = db.totalChanges
            let started = metrics == nil ? nil : ContinuousClock.now
            // After the body, so after its COMMIT: a reader that sees the new generation sees the new rows.
            defer {
                if db.totalChanges != before { committedChanges.add(1, ordering: .releasing) }
                if let started, let metrics { metrics.heldWriter(ContinuousClock.now - started) }
            }
            return try body(db)
        }
    }

    @discardableResult
    /// Runs `body` in one IMMEDIATE transaction on the writer: all of it commits, or none. Called inside another
    /// transaction of this pool on the same task and thread, it is a savepoint of that one and commits with it,
    /// so a handler can wrap several stores' work (and its answer) in one transaction.
    public func transaction<T>(_ body: (Connection) throws -> T) throws -> T {
        if let open = HeldConnection.usable(HeldConnection.transaction, in: self) { return try open.connection.savepoint(body) }
        let hook = CommitHook.current
        var held: HeldConnection?
        let value = try write { db in
            try db.transaction { db in
                let transaction = HeldConnection(pool: self, connection: db)
                held = transaction
                defer { transaction.release() }
                return try HeldConnection.$transaction.withValue(transaction) { try CommitHook.withCurrent(hook, in: db, body) }
            }
        }
        // Committed: what waited for it (waking a dispatcher that will read the new rows) runs now.
        for work in held?.takeAfterCommit() ?? [] { work() }
        return value
    }

    /// Runs `work` once what this task is writing is committed: at once outside a transaction, after the
    /// outermost COMMIT inside one (and never if it rolls back). Wake-ups use it, so nobody is woken to read rows
    /// that are not there yet.
    public func afterCommit(_ work: @escaping @Sendable () -> Void) {
        if let open = HeldConnection.usable(HeldConnection.transaction, in: self) { open.deferUntilCommit(work) } else { work() }
    }

    /// One transaction whose value is also the call's answer: while an idempotency scope is bound to the task
    /// (`CommitHook.current`), `answer` is recorded in this very transaction, so the effect never commits without it.
    public func transaction<T>(answering answer: (T) -> CommitHook.Answer, _ body: (Connection) throws -> T) throws -> T {
        try transaction { db in
            let value = try body(db)
            if let hook = CommitHook.current { try hook.record(answer(value), in: db) }
            return value
        }
    }

    /// A reader connection; reads see the last committed state (inside this task's open transaction, that
    /// transaction's own state: a handler reads what it just wrote).
    public func read<T>(_ body: (Connection) throws -> T) throws -> T {
        if let open = HeldConnection.usable(HeldConnection.transaction, in: self) { return try body(open.connection) }
        // A read inside a read of this task and thread uses the reader it already holds: taking a second one could
        // wait for ever once every reader is held by a thread wanting another.
        if let held = HeldConnection.usable(HeldConnection.reader, in: self) { return try body(held.connection) }
        let holding: (Connection) throws -> T = { db in
            let held = HeldConnection(pool: self, connection: db)
            defer { held.release() }
            return try HeldConnection.$reader.withValue(held) { try body(db) }
        }
        let start = nextReader.add(1, ordering: .relaxed).oldValue
        // A free reader if there is one; wait on the next in turn only when all are busy.
        for step in 0..<readers.count {
            if let result = try readers[(start &+ step) % readers.count].withIfFree(holding) { return result }
        }
        return try readers[start % readers.count].with(holding)
    }


    /// Several reads in one read transaction: they all see the same committed state (and take SQLite's
    /// shared lock once, not once per statement).
    public func readSnapshot<T>(_ body: (Connection) throws -> T) throws -> T {
        try read { try $0.readTransaction(body) }
    }

    /// Deletes the rows of `table` matching `condition`, a few thousand per transaction, so a large clean-up
    /// never holds the writer for long. Returns how many went.
    @discardableResult
    public func deleteInBatches(from table: String, where condition: String, arguments: [any SQLiteBindable], batchSize: Int = 5000) throws -> Int {
        var removed = 0
        while true {
            let count = try transaction { db in
                try db.run("DELETE FROM \(table) WHERE rowid IN (SELECT rowid FROM \(table) WHERE \(condition) LIMIT \(batchSize))", arguments: arguments)
            }
            removed += count
            if count < batchSize { return removed }
        }
    }

    /// `deleteInBatches` on the pool's own threads.
    public func asyncDeleteInBatches(from table: String, where condition: String, arguments: [any SQLiteBindable], batchSize: Int = 5000) async throws -> Int {
        try await withTaskExecutorPreference(executor) { try self.deleteInBatches(from: table, where: condition, arguments: arguments, batchSize: batchSize) }
    }

    /// Applies `migrations` (see `DatabaseMigrator`, which a composition root uses to register every module's list).
    public func migrate(_ migrations: [Migration]) throws {
        var migrator = DatabaseMigrator()
        try migrator.register(migrations)
        try migrator.migrate(self)
    }
}

/// A connection a task holds (its open writer transaction, or the reader of a `read`), so work nested in it uses
/// that connection instead of waiting for one it already holds. Only the thread that took it, while it is held,
/// may use it: a task spawned inside inherits the task-local but runs elsewhere, and takes a connection the
/// ordinary way.
final class HeldConnection: @unchecked Sendable {
    /// The writer, inside `transaction`.
    @TaskLocal static var transaction: HeldConnection?
    /// A reader, inside `read`.
    @TaskLocal static var reader: HeldConnection?

    let pool: ObjectIdentifier
    let connection: Connection
    private let thread = pthread_self()
    private let isHeld = Atomic<Bool>(true)
    private let afterCommit = Mutex<[@Sendable () -> Void]>([])

    init(pool: DatabasePool, connection: Connection) {
        self.pool = ObjectIdentifier(pool)
        self.connection = connection
    }

    func release() { isHeld.store(false, ordering: .releasing) }

    func deferUntilCommit(_ work: @escaping @Sendable () -> Void) { afterCommit.withLock { $0.append(work) } }

    func takeAfterCommit() -> [@Sendable () -> Void] { afterCommit.withLock { work in defer { work = [] }; return work } }

    /// `held` when it is this pool's and this thread's, still held.
    static func usable(_ held: HeldConnection?, in pool: DatabasePool) -> HeldConnection? {
        guard let held, held.pool == ObjectIdentifier(pool), held.isHeld.load(ordering: .acquiring),
              pthread_equal(held.thread, pthread_self()) != 0 else { return nil }
        return held
    }
}

/// A connection used by one thread at a time.
final class GuardedConnection: @unchecked Sendable {
    private let lock = NSLock()
    private let connection: Connection
    let role: DatabaseConnectionRole
    let metrics: (any DatabaseMetricsSink)?

    init(_ connection: Connection, role: DatabaseConnectionRole = .writer, metrics: (any DatabaseMetricsSink)? = nil) {
        self.connection = connection
        self.role = role
        self.metrics = metrics
    }

    func with<T>(_ body: (Connection) throws -> T) rethrows -> T {
        if let metrics, !lock.try() {
            // Only a wait is timed: the free connection's path stays one lock.
            let started = ContinuousClock.now
            lock.lock()
            metrics.waited(ContinuousClock.now - started, for: role)
        } else if metrics == nil {
            lock.lock()
        }
        defer { lock.unlock() }
        return try body(connection)
    }

    /// Runs `body` only if no other thread holds the connection (nil otherwise).
    func withIfFree<T>(_ body: (Connection) throws -> T) rethrows -> T? {
        guard lock.try() else { return nil }
        defer { lock.unlock() }
        return .some(try body(connection))
    }
}

/// Created on first use, so a pool that never group-commits never starts anything.
final class GroupCommitBox: Sendable {
    private let value = Mutex<GroupCommit?>(nil)
    func get(_ pool: DatabasePool) -> GroupCommit {
        value.withLock { v in
            if let v { return v }
            let created = GroupCommit(pool: pool)
            v = created
            return created
        }
    }
}

/// Which connection of a pool a caller waited for.
public enum DatabaseConnectionRole: String, Sendable {
    case writer, reader
}

/// Where a pool reports its waits and how long the writer was held (the gateway's metrics); called on the
/// storage threads, so it must be quick and never touch the pool.
public protocol DatabaseMetricsSink: Sendable {
    func waited(_ duration: Duration, for connection: DatabaseConnectionRole)
    func heldWriter(_ duration: Duration)
}
