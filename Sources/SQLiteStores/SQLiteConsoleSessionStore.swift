import Foundation
import Household
import Identity
import SQLite
import Storage

/// Console sessions and their one-time codes in the gateway's SQLite file (`console_sessions`, `console_codes`).
/// Only hashes and HMACs are stored (`ConsoleSecrets`, `ConsoleSessionSecret`); a session is looked up on the
/// calling thread, since the file is local.
public final class SQLiteConsoleSessionStore: ConsoleSessionStore {
    public let database: DatabasePool
    private let secrets: ConsoleSecrets
    private let now: @Sendable () -> Date

    /// `codeKey`: the key codes are kept under (`SecretFile.key(at: ConsoleSessionPolicy.codeKeyPath(…), …)`), the
    /// same for the gateway and the CLI that prints codes. `now`: the gateway's clock.
    public init(database: DatabasePool, codeKey: [UInt8], now: @escaping @Sendable () -> Date = { Date() }) {
        self.database = database
        self.secrets = ConsoleSecrets(codeKey: codeKey)
        self.now = now
    }

    // MARK: One-time codes

    public func createCode(subject: String, role: Role) async throws -> ConsoleCode {
        let at = now()
        let expires = at.addingTimeInterval(ConsoleSessionPolicy.codeLifetime)
        let secrets = self.secrets
        return try await database.asyncTransaction { db in
            // Codes past their time are of no further use; dropping them frees their digits too.
            try db.run("DELETE FROM console_codes WHERE expires_at <= ?", at.sqliteMillis)
            while true {
                let code = ConsoleSecrets.newCode()
                // A code that is still live keeps its digits: draw again (a million codes, a handful live).
                let inserted = try db.run("INSERT OR IGNORE INTO console_codes (code_hmac, subject, role, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
                                          secrets.stored(code: code), subject, role.rawValue, at.sqliteMillis, expires.sqliteMillis)
                if inserted == 1 { return ConsoleCode(code: code, subject: subject, role: role, expiresAt: expires) }
            }
        }
    }

    public func signIn(code typed: String) async throws -> IssuedConsoleSession {
        guard let stored = secrets.stored(typedCode: typed) else { throw ConsoleCodeError.unknown }
        let at = now()
        // SQLite's single writer makes the look-up and the use one step: a code signs in once.
        let outcome: Result<IssuedConsoleSession, ConsoleCodeError> = try await database.asyncTransaction { db in
            guard let row = try db.query("SELECT subject, role, expires_at, used_at FROM console_codes WHERE code_hmac = ?", stored).first else {
                return .failure(.unknown)
            }
            if row.int("used_at") != nil { return .failure(.used) }
            if (row.int("expires_at") ?? 0) <= at.sqliteMillis { return .failure(.expired) }
            guard try db.run("UPDATE console_codes SET used_at = ? WHERE code_hmac = ? AND used_at IS NULL", at.sqliteMillis, stored) == 1 else {
                return .failure(.used)
            }
            let role = row.string("role").flatMap(Role.init(rawValue:)) ?? .viewer
            return .success(try Self.insertSession(subject: row.string("subject") ?? Principal.ownerSubject, role: role, keyID: nil, at: at, in: db))
        }
        return try outcome.get()
    }

    // MARK: Sessions

    public func signIn(key principal: Principal) async throws -> IssuedConsoleSession {
        let at = now()
        return try await database.asyncTransaction { db in
            try Self.insertSession(subject: principal.subject, role: principal.role, keyID: principal.keyID, at: at, in: db)
        }
    }

    private static func insertSession(subject: String, role: Role, keyID: String?, at: Date, in db: Connection) throws -> IssuedConsoleSession {
        let secret = ConsoleSessionSecret.random()
        let record = ConsoleSessionRecord.signedIn(subject: subject, role: role, keyID: keyID, at: at)
        try db.run("""
            INSERT INTO console_sessions (id, token_sha256, subject, role, key_id, created_at, last_seen_at, expires_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """, record.id, secret.stored, subject, role.rawValue, keyID, at.sqliteMillis, at.sqliteMillis, record.absoluteEnd.sqliteMillis)
        let cutoff = at.addingTimeInterval(-ConsoleSessionPolicy.keptAfterEnd).sqliteMillis
        try db.run("DELETE FROM console_sessions WHERE expires_at < ? OR revoked_at < ?", cutoff, cutoff)
        return record.issued(secret)
    }

    /// Read on the calling thread: the file is local, so every session is known here.
    public func knownSession(token: String) -> ConsoleSession? {
        guard let secret = ConsoleSessionSecret(token: token) else { return nil }
        let at = now()
        guard let row = try? database.read({ db in
            try db.query("""
                SELECT s.id, s.subject, s.role, s.key_id, s.last_seen_at, s.expires_at FROM console_sessions s
                LEFT JOIN api_keys k ON k.id = s.key_id
                WHERE s.token_sha256 = ? AND s.revoked_at IS NULL AND (s.key_id IS NULL OR (k.id IS NOT NULL AND k.revoked_at IS NULL))
                """, secret.stored).first
        }), let record = Self.record(row), record.isLive(at: at) else { return nil }
        if record.needsTouch(at: at) {
            // A lost touch only brings the idle end closer; the request is still answered.
            _ = try? database.transaction { db in
                try db.run("UPDATE console_sessions SET last_seen_at = ? WHERE id = ? AND last_seen_at < ?", at.sqliteMillis, record.id, at.sqliteMillis)
            }
        }
        return record.session(secret, usedAt: at)
    }

    public func session(token: String) async -> ConsoleSession? { knownSession(token: token) }

    private static func record(_ row: Row) -> ConsoleSessionRecord? {
        guard let id = row.string("id"), let subject = row.string("subject"), let role = row.string("role").flatMap(Role.init(rawValue:)),
              let lastSeen = row.date("last_seen_at"), let absolute = row.date("expires_at") else { return nil }
        return ConsoleSessionRecord(id: id, subject: subject, role: role, keyID: row.string("key_id"), lastSeenAt: lastSeen, absoluteEnd: absolute)
    }

    public func revoke(token: String) async throws -> Bool {
        guard let secret = ConsoleSessionSecret(token: token) else { return false }
        let at = now()
        return try await database.asyncTransaction { db in
            try db.run("UPDATE console_sessions SET revoked_at = ? WHERE token_sha256 = ? AND revoked_at IS NULL", at.sqliteMillis, secret.stored) > 0
        }
    }

    @discardableResult
    public func revoke(signedInWithKey keyID: String, in session: any StorageSession) throws -> Int {
        try session.sqliteConnection().run("UPDATE console_sessions SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL", now().sqliteMillis, keyID)
    }
}
