import Foundation
import Household
import Identity
import PostgreSQL
import Storage

/// Console sessions and their one-time codes on PostgreSQL, shared by every gateway on the database: only hashes
/// and HMACs are stored (`ConsoleSecrets`, `ConsoleSessionSecret`). A code is used by one conditional UPDATE, so of
/// gateways redeeming it at once exactly one signs in. Sessions are looked up asynchronously (the request path
/// never waits on the network), and a session signed in with a key ends once `api_keys` shows the key revoked:
/// the database must hold `PostgresAPIKeyStore.migrations` too.
public final class PostgresConsoleSessionStore: ConsoleSessionStore {
    /// The same tables as SQLite's (`console.1-sessions`), times in milliseconds, hashes as BYTEA.
    public static let migrations = [
        PostgresMigration(module: "console", version: 1, sql: """
            CREATE TABLE console_sessions (
                id TEXT PRIMARY KEY,
                token_sha256 BYTEA NOT NULL UNIQUE,
                subject TEXT NOT NULL,
                role TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
                key_id TEXT,
                created_at BIGINT NOT NULL,
                last_seen_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL,
                revoked_at BIGINT
            );
            CREATE INDEX console_sessions_by_key ON console_sessions (key_id);
            CREATE TABLE console_codes (
                code_hmac BYTEA PRIMARY KEY,
                subject TEXT NOT NULL,
                role TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
                created_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL,
                used_at BIGINT
            );
            """),
    ]

    let pool: PostgresPool
    private let secrets: ConsoleSecrets
    private let now: @Sendable () -> Date

    /// `codeKey`: the key codes are kept under, the same on every gateway and in the CLI that prints codes.
    /// `now`: the gateway's clock; expiry is computed from it, not from the database server's.
    public init(pool: PostgresPool, codeKey: [UInt8], now: @escaping @Sendable () -> Date = { Date() }) {
        self.pool = pool
        self.secrets = ConsoleSecrets(codeKey: codeKey)
        self.now = now
    }

    // MARK: One-time codes

    public func createCode(subject: String, role: Role) async throws -> ConsoleCode {
        let at = now()
        let expires = at.addingTimeInterval(ConsoleSessionPolicy.codeLifetime)
        let secrets = self.secrets
        return try await pool.transaction { db in
            // Codes past their time are of no further use; dropping them frees their digits too.
            try db.run("DELETE FROM console_codes WHERE expires_at <= $1", at.postgresMillis)
            while true {
                let code = ConsoleSecrets.newCode()
                // A code that is still live keeps its digits: draw again (a million codes, a handful live).
                let inserted = try db.run("""
                    INSERT INTO console_codes (code_hmac, subject, role, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)
                    ON CONFLICT (code_hmac) DO NOTHING
                    """, secrets.stored(code: code), subject, role.rawValue, at.postgresMillis, expires.postgresMillis)
                if inserted == 1 { return ConsoleCode(code: code, subject: subject, role: role, expiresAt: expires) }
            }
        }
    }

    public func signIn(code typed: String) async throws -> IssuedConsoleSession {
        guard let stored = secrets.stored(typedCode: typed) else { throw ConsoleCodeError.unknown }
        let at = now().postgresMillis
        let outcome: Result<IssuedConsoleSession, ConsoleCodeError> = try await pool.transaction { db in
            // One statement uses the code: a concurrent redeemer waits on the row, then finds it used and gets nothing.
            if let row = try db.query("""
                UPDATE console_codes SET used_at = $1 WHERE code_hmac = $2 AND used_at IS NULL AND expires_at > $1 RETURNING subject, role
                """, at, stored).first {
                let role = row.string("role").flatMap(Role.init(rawValue:)) ?? .viewer
                return .success(try Self.insertSession(subject: row.string("subject") ?? Principal.ownerSubject, role: role, keyID: nil,
                                                       at: Date(postgresMillis: at), in: db))
            }
            // Not used now: say why, in the order SQLite's store does.
            guard let row = try db.query("SELECT expires_at, used_at FROM console_codes WHERE code_hmac = $1", stored).first else { return .failure(.unknown) }
            return .failure(row.int("used_at") != nil ? .used : .expired)
        }
        return try outcome.get()
    }

    // MARK: Sessions

    public func signIn(key principal: Principal) async throws -> IssuedConsoleSession {
        let at = now()
        return try await pool.transaction { db in
            try Self.insertSession(subject: principal.subject, role: principal.role, keyID: principal.keyID, at: at, in: db)
        }
    }

    private static func insertSession(subject: String, role: Role, keyID: String?, at: Date, in db: PostgresConnection) throws -> IssuedConsoleSession {
        let secret = ConsoleSessionSecret.random()
        let record = ConsoleSessionRecord.signedIn(subject: subject, role: role, keyID: keyID, at: at)
        try db.run("""
            INSERT INTO console_sessions (id, token_sha256, subject, role, key_id, created_at, last_seen_at, expires_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
            """, record.id, secret.stored, subject, role.rawValue, keyID, at.postgresMillis, at.postgresMillis, record.absoluteEnd.postgresMillis)
        let cutoff = at.addingTimeInterval(-ConsoleSessionPolicy.keptAfterEnd).postgresMillis
        try db.run("DELETE FROM console_sessions WHERE expires_at < $1 OR revoked_at < $1", cutoff)
        return record.issued(secret)
    }

    /// Nothing is known without asking the database: every cookie is looked up by `session(token:)`, so a sign-out
    /// on one gateway is seen by the next request on any other.
    public func knownSession(token: String) -> ConsoleSession? { nil }

    public func session(token: String) async -> ConsoleSession? {
        guard let secret = ConsoleSessionSecret(token: token) else { return nil }
        let at = now()
        guard let row = try? await pool.withConnection({ db in
            try db.query("""
                SELECT s.id, s.subject, s.role, s.key_id, s.last_seen_at, s.expires_at FROM console_sessions s
                LEFT JOIN api_keys k ON k.id = s.key_id
                WHERE s.token_sha256 = $1 AND s.revoked_at IS NULL AND (s.key_id IS NULL OR (k.id IS NOT NULL AND k.revoked_at IS NULL))
                """, secret.stored).first
        }), let record = Self.record(row), record.isLive(at: at) else { return nil }
        if record.needsTouch(at: at) {
            // A lost touch only brings the idle end closer; the request is still answered. Never moved backwards by a
            // gateway whose request was slower than another's.
            _ = try? await pool.withConnection { db in
                try db.run("UPDATE console_sessions SET last_seen_at = $1 WHERE id = $2 AND last_seen_at < $1", at.postgresMillis, record.id)
            }
        }
        return record.session(secret, usedAt: at)
    }

    private static func record(_ row: PostgresRow) -> ConsoleSessionRecord? {
        guard let id = row.string("id"), let subject = row.string("subject"), let role = row.string("role").flatMap(Role.init(rawValue:)),
              let lastSeen = row.int("last_seen_at"), let absolute = row.int("expires_at") else { return nil }
        return ConsoleSessionRecord(id: id, subject: subject, role: role, keyID: row.string("key_id"), lastSeenAt: Date(postgresMillis: lastSeen),
                                    absoluteEnd: Date(postgresMillis: absolute))
    }

    public func revoke(token: String) async throws -> Bool {
        guard let secret = ConsoleSessionSecret(token: token) else { return false }
        let at = now().postgresMillis
        return try await pool.withConnection { db in
            try db.run("UPDATE console_sessions SET revoked_at = $1 WHERE token_sha256 = $2 AND revoked_at IS NULL", at, secret.stored) > 0
        }
    }

    @discardableResult
    public func revoke(signedInWithKey keyID: String, in session: any StorageSession) throws -> Int {
        try session.postgresConnection().run("UPDATE console_sessions SET revoked_at = $1 WHERE key_id = $2 AND revoked_at IS NULL", now().postgresMillis, keyID)
    }
}
