/// An open transaction of one engine, handed to a transaction's body. Stores of that engine reach their own
/// connection through it (`SQLite`'s `Connection` is one); a store of another engine refuses it. Used only on the
/// thread that runs the body, inside the body.
public protocol StorageSession: AnyObject {
    /// Rows changed through this session so far: the commit hook runs only for a body that changed something.
    var changeCount: Int64 { get }
}

/// The seam every engine implements: transactions on the engine's own threads (no cooperative thread ever waits
/// on a lock, a socket or an fsync), nesting (a transaction begun inside another on the same task joins it as a
/// savepoint and commits with it), the answer hook (an idempotent call's answer committed with its effect), and work
/// deferred until the outermost commit.
public protocol TransactionalStorage: Sendable {
    /// The engine's name as health checks show it: `sqlite` or `postgresql`.
    var engine: String { get }
    /// Runs `body` in one transaction: all of it commits, or none; a nested call joins the open one.
    func withTransaction<T: Sendable>(_ body: (any StorageSession) throws -> T) async throws -> T
    /// One transaction whose value is also the call's answer: while a `CommitHook` is bound to the task,
    /// `answer(value)` is recorded in this very transaction, so the effect never commits without it.
    func withTransaction<T: Sendable>(answering answer: (T) -> CommitHook.Answer,
                                      _ body: (any StorageSession) throws -> T) async throws -> T
    /// Runs `work` once what this task is writing is committed (at once outside a transaction; never after a
    /// rollback), so nobody is woken to read rows that are not there yet.
    func afterCommit(_ work: @escaping @Sendable () -> Void)
    /// Throws when the database cannot answer a read (the health checks' probe).
    func checkReadable() async throws
}
