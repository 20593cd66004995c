import Foundation
import GatewayHTTP
import SQLite
import Storage

/// The idempotency log in the gateway's SQLite file. Only this process writes the file, so a key is held in memory.
public struct SQLiteIdempotencyStore: IdempotencyStore {
    let database: DatabasePool
    let holds = InProcessKeyHolds()

    public init(database: DatabasePool) {
        self.database = database
    }

    public func hold(scope: String, key: String, holder: String, lease: Duration) async throws -> Bool {
        holds.hold(scope + "\u{0}" + key, holder: holder)
    }

    public func release(scope: String, key: String, holder: String) async throws {
        holds.release(scope + "\u{0}" + key, holder: holder)
    }

    public func line(scope: String, key: String) async throws -> IdempotencyLine? {
        try await database.asyncRead { db in
            try db.query("SELECT method, path, status, content_type, body, sealed, resume FROM idempotency_log WHERE scope = ? AND idempotency_key = ?", scope, key)
                .first.map { row in
                    IdempotencyLine(method: row.string("method") ?? "", path: row.string("path") ?? "", status: Int(row.int("status") ?? 200),
                           contentType: row.string("content_type"), body: row.blob("body") ?? [], sealed: row.bool("sealed") == true,
                           resume: row.string("resume"))
                }
        }
    }

    /// "This intent was applied", written inside the transaction that makes the effect (see `CommitHook`), with what
    /// the call waits for next when it said (a later effect of the same call may be the first to know it).
    static func markApplied(scope: String, key: String, method: String, path: String, resume: String?, at now: Date, in db: Connection) throws {
        try db.run("""
            INSERT INTO idempotency_log (scope, idempotency_key, method, path, status, content_type, body, created_at, sealed, resume)
            VALUES (?, ?, ?, ?, ?, NULL, ?, ?, 0, ?)
            ON CONFLICT (scope, idempotency_key) DO UPDATE SET resume = excluded.resume
            WHERE idempotency_log.status = ? AND excluded.resume IS NOT NULL AND idempotency_log.resume IS NOT excluded.resume
            """, scope, key, method, path, IdempotencyLog.appliedWithoutAnswer, [UInt8](), now.sqliteMillis, resume, IdempotencyLog.appliedWithoutAnswer)
    }

    /// The answer, over the applied line if there is one.
    public func record(_ line: IdempotencyLine, scope: String, key: String, at now: Date) async throws {
        try await database.asyncTransaction { db in try Self.record(line, scope: scope, key: key, at: now, in: db) }
    }

    public func appliedHook(scope: String, key: String, method: String, path: String, at now: Date,
                     line: @escaping @Sendable (CommitHook.Answer) -> IdempotencyLine) -> CommitHook {
        CommitHook({ session, resume in
            try Self.markApplied(scope: scope, key: key, method: method, path: path, resume: resume, at: now, in: session.sqliteConnection())
        }, recordAnswer: { answer, session in
            // The handler built its answer inside its effect's transaction: it commits with the effect.
            try Self.record(line(answer), scope: scope, key: key, at: now, in: session.sqliteConnection())
        })
    }

    /// The answer, inside the caller's transaction (the effect's own, when the handler built its answer there).
    static func record(_ answer: IdempotencyLine, scope: String, key: String, at now: Date, in db: Connection) throws {
        try db.run("""
            INSERT INTO idempotency_log (scope, idempotency_key, method, path, status, content_type, body, created_at, sealed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (scope, idempotency_key) DO UPDATE SET status = excluded.status, content_type = excluded.content_type, body = excluded.body, sealed = excluded.sealed
            """, scope, key, answer.method, answer.path, answer.status, answer.contentType, answer.body, now.sqliteMillis, answer.sealed)
    }

    public func forget(before cutoff: Date) async throws -> Int {
        try await database.asyncDeleteInBatches(from: "idempotency_log", where: "created_at < ?", arguments: [cutoff.sqliteMillis])
    }
}
