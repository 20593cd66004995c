import Foundation
import Storage
import Synchronization

/// PostgreSQL's side of the engine seam: a connection is the session a transaction's body gets, the pool runs
/// transactions on its own threads, and SQLSTATE classes say which `StorageError` they are.
extension PostgresConnection: StorageSession {}

extension StorageSession {
    /// This session's PostgreSQL connection, for a PostgreSQL store joining the caller's transaction; a session of
    /// another engine is refused (a composition root that mixed engines), never used.
    public func postgresConnection() throws(StorageError) -> PostgresConnection {
        guard let connection = self as? PostgresConnection else {
            throw StorageError.unavailable("a PostgreSQL store was handed a \(type(of: self)) session: one gateway runs one engine")
        }
        return connection
    }
}

extension PostgresError: StorageFailure {
    public var storageError: StorageError? {
        switch kind {
        case .diskFull: .full("the database server's disk is full")
        case .readOnly: .readOnly("the database server takes reads only")
        case .connectionLost: .unavailable("the database server cannot be reached")
        case .uniqueViolation: .conflict(constraint.map { "\($0) is taken" } ?? message)
        case .serializationFailure: .conflict("another transaction changed the same rows")
        case .other: nil
        }
    }
}

/// The transaction a task holds on one of the pool's connections: work a store defers with
/// `afterCommit` inside the body waits for its COMMIT. Only the thread running the body may use it.
final class HeldPostgresTransaction: @unchecked Sendable {
    @TaskLocal static var current: HeldPostgresTransaction?

    let pool: ObjectIdentifier
    let connection: PostgresConnection
    private let thread = pthread_self()

    init(pool: PostgresPool, connection: PostgresConnection) {
        self.pool = ObjectIdentifier(pool)
        self.connection = connection
    }

    static func usable(in pool: PostgresPool) -> HeldPostgresTransaction? {
        guard let held = current, held.pool == ObjectIdentifier(pool), pthread_equal(held.thread, pthread_self()) != 0 else { return nil }
        return held
    }
}

extension PostgresPool: TransactionalStorage {
    public var engine: String { "postgresql" }

    public func withTransaction<T: Sendable>(_ body: (any StorageSession) throws -> T) async throws -> T {
        try await transaction { connection in try body(connection) }
    }

    public func withTransaction<T: Sendable>(answering answer: (T) -> CommitHook.Answer,
                                             _ body: (any StorageSession) throws -> T) async throws -> T {
        try await withTransaction { session in
            let value = try body(session)
            if let hook = CommitHook.current { try hook.record(answer(value), in: session) }
            return value
        }
    }

    public func afterCommit(_ work: @escaping @Sendable () -> Void) {
        if let held = HeldPostgresTransaction.usable(in: self) { held.connection.afterCommit(work) } else { work() }
    }

    public func checkReadable() async throws {
        try await withConnection { _ = try $0.query("SELECT 1") }
    }
}
