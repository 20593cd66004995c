import Foundation
import GatewayHTTP
import PostgreSQL
import Storage

/// The idempotency log on PostgreSQL: the same rows as SQLite's (`idempotency_log`), shared by every node on the
/// database, so a retry that lands on another node is answered from the log.
public struct PostgresIdempotencyStore: IdempotencyStore {
    public static let migrations = [
        PostgresMigration(module: "idempotency", version: 1, sql: """
            CREATE TABLE idempotency_log (
                scope TEXT NOT NULL,
                idempotency_key TEXT NOT NULL,
                method TEXT NOT NULL,
                path TEXT NOT NULL,
                status INTEGER NOT NULL,
                content_type TEXT,
                body BYTEA NOT NULL,
                created_at BIGINT NOT NULL,
                sealed BOOLEAN NOT NULL DEFAULT FALSE,
                resume TEXT,
                PRIMARY KEY (scope, idempotency_key)
            );
            CREATE INDEX idempotency_log_created ON idempotency_log (created_at);
            """),
        // Keys held by calls running on some node: a duplicate on another node waits instead of applying twice.
        PostgresMigration(module: "idempotency", version: 2, sql: """
            CREATE TABLE idempotency_holds (
                scope TEXT NOT NULL,
                idempotency_key TEXT NOT NULL,
                holder TEXT NOT NULL,
                held_until BIGINT NOT NULL,
                PRIMARY KEY (scope, idempotency_key)
            );
            """),
    ]

    let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    public func line(scope: String, key: String) async throws -> IdempotencyLine? {
        try await pool.withConnection { db in
            try db.query("SELECT method, path, status, content_type, body, sealed, resume FROM idempotency_log WHERE scope = $1 AND idempotency_key = $2",
                         scope, key).first.map { row in
                IdempotencyLine(method: row.string("method") ?? "", path: row.string("path") ?? "", status: Int(row.int("status") ?? 200),
                                contentType: row.string("content_type"), body: row.bytes("body") ?? [], sealed: row.bool("sealed") == true,
                                resume: row.string("resume"))
            }
        }
    }

    public func record(_ line: IdempotencyLine, scope: String, key: String, at now: Date) async throws {
        try await pool.transaction { db in try Self.record(line, scope: scope, key: key, at: now, in: db) }
    }

    public func appliedHook(scope: String, key: String, method: String, path: String, at now: Date,
                            line: @escaping @Sendable (CommitHook.Answer) -> IdempotencyLine) -> CommitHook {
        CommitHook({ session, resume in
            try Self.markApplied(scope: scope, key: key, method: method, path: path, resume: resume, at: now, in: session.postgresConnection())
        }, recordAnswer: { answer, session in
            try Self.record(line(answer), scope: scope, key: key, at: now, in: session.postgresConnection())
        })
    }

    public func hold(scope: String, key: String, holder: String, lease: Duration) async throws -> Bool {
        let leaseMS = lease.components.seconds * 1000 + lease.components.attoseconds / 1_000_000_000_000_000
        return try await pool.transaction { db in
            // Taken when free or lapsed (on the database's clock); a racing taker waits on the row, then re-checks.
            !(try db.query("""
                INSERT INTO idempotency_holds (scope, idempotency_key, holder, held_until)
                VALUES ($1, $2, $3, (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT + $4)
                ON CONFLICT (scope, idempotency_key) DO UPDATE SET holder = excluded.holder, held_until = excluded.held_until
                WHERE idempotency_holds.holder = excluded.holder
                   OR idempotency_holds.held_until < (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT
                RETURNING holder
                """, scope, key, holder, leaseMS).isEmpty)
        }
    }

    public func release(scope: String, key: String, holder: String) async throws {
        try await pool.transaction { db in
            _ = try db.run("DELETE FROM idempotency_holds WHERE scope = $1 AND idempotency_key = $2 AND holder = $3", scope, key, holder)
        }
    }

    public func forget(before cutoff: Date) async throws -> Int {
        try await pool.deleteInBatches(from: "idempotency_log", where: "created_at < $1", arguments: [cutoff.postgresMillis])
    }

    /// "Applied", inside the effect's transaction, with what the call waits for when it said.
    static func markApplied(scope: String, key: String, method: String, path: String, resume: String?, at now: Date, in db: PostgresConnection) throws {
        try db.run("""
            INSERT INTO idempotency_log (scope, idempotency_key, method, path, status, content_type, body, created_at, sealed, resume)
            VALUES ($1, $2, $3, $4, $5, NULL, $6, $7, FALSE, $8)
            ON CONFLICT (scope, idempotency_key) DO UPDATE SET resume = excluded.resume
            WHERE idempotency_log.status = $5 AND excluded.resume IS NOT NULL AND idempotency_log.resume IS DISTINCT FROM excluded.resume
            """, scope, key, method, path, Int64(IdempotencyLog.appliedWithoutAnswer), [UInt8](), now.postgresMillis, resume)
    }

    static func record(_ answer: IdempotencyLine, scope: String, key: String, at now: Date, in db: PostgresConnection) throws {
        try db.run("""
            INSERT INTO idempotency_log (scope, idempotency_key, method, path, status, content_type, body, created_at, sealed)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            ON CONFLICT (scope, idempotency_key) DO UPDATE SET status = excluded.status, content_type = excluded.content_type,
                body = excluded.body, sealed = excluded.sealed
            """, scope, key, answer.method, answer.path, Int64(answer.status), answer.contentType, answer.body, now.postgresMillis, answer.sealed)
    }
}
