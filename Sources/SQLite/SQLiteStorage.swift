import Storage

/// SQLite's side of the engine seam: a connection is the session a transaction's body gets, the pool runs
/// transactions on its own threads, and SQLite's result codes say which `StorageError` they are.
extension Connection: StorageSession {
    public var changeCount: Int64 { totalChanges }
}

extension StorageSession {
    /// This session's SQLite connection, for a SQLite store joining the caller's transaction; a session of another
    /// engine is refused (a composition root that mixed engines), never used.
    public func sqliteConnection() throws(StorageError) -> Connection {
        guard let connection = self as? Connection else {
            throw StorageError.unavailable("a SQLite store was handed a \(type(of: self)) session: one gateway runs one engine")
        }
        return connection
    }
}

extension SQLiteError: StorageFailure {
    public var storageError: StorageError? {
        if isDiskFull { return .full("the gateway's disk is full") }
        if isReadOnly { return .readOnly("the database file is read-only") }
        if isBusy { return .unavailable("the database is busy") }
        // A unique or primary key taken by another writer; other constraints (NOT NULL, CHECK) are a statement's bug.
        if code == 2067 || code == 1555 { return .conflict(message) }
        return nil
    }
}

extension DatabasePool: TransactionalStorage {
    public var engine: String { "sqlite" }

    public func checkReadable() async throws {
        try await asyncRead { _ = try $0.query("SELECT 1") }
    }

    public func withTransaction<T: Sendable>(_ body: (any StorageSession) throws -> T) async throws -> T {
        try await withTaskExecutorPreference(executor) { try transaction { try body($0) } }
    }

    public func withTransaction<T: Sendable>(answering answer: (T) -> CommitHook.Answer,
                                             _ body: (any StorageSession) throws -> T) async throws -> T {
        try await withTaskExecutorPreference(executor) { try transaction(answering: answer) { try body($0) } }
    }
}
