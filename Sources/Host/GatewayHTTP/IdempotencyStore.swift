import Foundation
import SQLite

/// The idempotency log's rows: one per (caller's key, Idempotency-Key), with the answer once it is known.
struct IdempotencyStore: Sendable {
    /// A recorded answer; `status` 0 (`IdempotencyLog.appliedWithoutAnswer`) is "applied, answer not recorded".
    struct Answer: Sendable, Equatable {
        var method: String
        var path: String
        var status: Int
        var contentType: String?
        var body: [UInt8]
        var sealed: Bool
        /// For a line applied without an answer: what the call waited for (`AnswerResumer`'s reference).
        var resume: String? = nil
    }

    let database: DatabasePool

    func answer(scope: String, key: String) throws -> Answer? {
        try database.read { db in
            try db.query("SELECT method, path, status, content_type, body, sealed, resume FROM idempotency_log WHERE scope = ? AND idempotency_key = ?", scope, key)
                .first.map { row in
                    Answer(method: row.string("method") ?? "", path: row.string("path") ?? "", status: Int(row.int("status") ?? 200),
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
    func record(_ answer: Answer, scope: String, key: String, at now: Date) throws {
        try database.transaction { db in try Self.record(answer, scope: scope, key: key, at: now, in: db) }
    }

    /// The answer, inside the caller's transaction (the effect's own, when the handler built its answer there).
    static func record(_ answer: Answer, scope: String, key: String, at now: Date, in db: Connection) throws {
        try db.run("""
            INSERT INTO idempotency_log (scope, idempotency_key, method, path, status, content_type, body, created_at, sealed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (scope, idempotency_key) DO UPDATE SET status = excluded.status, content_type = excluded.content_type, body = excluded.body, sealed = excluded.sealed
            """, scope, key, answer.method, answer.path, answer.status, answer.contentType, answer.body, now.sqliteMillis, answer.sealed)
    }

    func forget(before cutoff: Date) throws -> Int {
        try database.deleteInBatches(from: "idempotency_log", where: "created_at < ?", arguments: [cutoff.sqliteMillis])
    }
}
