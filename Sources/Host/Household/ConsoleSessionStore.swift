import Crypto
import Foundation
import Identity
import SQLite

/// A signed-in console: who it acts as, its CSRF token, and when it ends unless used again.
public struct ConsoleSession: Sendable, Equatable {
    /// Names the session without opening it (not the cookie's value).
    public let id: String
    /// The subject and role of the key (or code) that signed in; `keyID` is that key's id, so idempotency and
    /// "registered by" scope to it as for the key itself, or `console:<id>` for a one-time code.
    public let principal: Principal
    /// What a state-changing request must send in `X-CSRF-Token`: derived from the session's secret, never stored.
    public let csrfToken: String
    /// 12 hours after its last use, and never later than 7 days after sign-in.
    public let expiresAt: Date
}

/// A session as handed out once: `token` (the cookie's value) exists only here and in the browser.
public struct IssuedConsoleSession: Sendable {
    public let token: String
    public let session: ConsoleSession
}

/// A one-time code for signing in to the console, as `soulacy console-code` prints it.
public struct ConsoleCode: Sendable {
    public let code: String
    public let subject: String
    public let role: Role
    public let expiresAt: Date
}

public enum ConsoleCodeError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknown
    case expired
    case used

    public var description: String {
        switch self {
        case .unknown: return "this console code is not known; run soulacy console-code for a new one"
        case .expired: return "this console code has expired (codes live 10 minutes); run soulacy console-code for a new one"
        case .used: return "this console code has already been used; each code signs in once"
        }
    }

    /// The error's machine code, as the sign-in answers it.
    public var code: String {
        switch self {
        case .unknown: return "console_code_unknown"
        case .expired: return "console_code_expired"
        case .used: return "console_code_used"
        }
    }
}

/// Console sessions and the one-time codes that start them.
///
/// A session's secret is 32 random bytes; the database keeps only their SHA-256 (the cookie cannot be rebuilt from
/// it) and the CSRF token is an HMAC of the secret (not stored at all). A code is six digits, so a plain hash would
/// be undone by trying a million values: it is kept as an HMAC under a key that lives beside the database, never
/// in it. Sessions end after 12 idle hours, 7 days after sign-in, when revoked, or when the key that signed in is
/// revoked.
public final class ConsoleSessionStore: Sendable {
    public static let idleLifetime: TimeInterval = 12 * 3600
    public static let absoluteLifetime: TimeInterval = 7 * 86_400
    public static let codeLifetime: TimeInterval = 600
    /// A session's last use is written at most this often (reads answered on the server thread stay reads).
    static let touchInterval: TimeInterval = 60
    static let csrfLabel = Array("soulacy console csrf".utf8)

    public let database: DatabasePool
    private let codeKey: [UInt8]
    private let now: @Sendable () -> Date

    /// `codeKey`: the key codes are kept under (`SecretFile.key(at: <data>/console-codes.key, …)`), the same for
    /// the gateway and the CLI that prints codes.
    public init(database: DatabasePool, codeKey: [UInt8], now: @escaping @Sendable () -> Date = { Date() }) {
        self.database = database
        self.codeKey = codeKey
        self.now = now
    }

    /// Where the code key lives in a data directory.
    public static func codeKeyPath(dataDirectory: String) -> String { dataDirectory + "/console-codes.key" }

    // MARK: One-time codes

    /// A fresh six-digit code for `subject` with `role`, valid 10 minutes, for one sign-in.
    public func createCode(subject: String, role: Role) throws -> ConsoleCode {
        let at = now()
        let expires = at.addingTimeInterval(Self.codeLifetime)
        return try database.transaction { db in
            // Codes past their time are of no further use; dropping them frees their digits too.
            try db.run("DELETE FROM console_codes WHERE expires_at <= ?", at.sqliteMillis)
            while true {
                let code = Self.newCode()
                // A code that is still live keeps its digits: draw again (a million codes, a handful live).
                let inserted = try db.run("INSERT OR IGNORE INTO console_codes (code_hmac, subject, role, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
                                          keyed(code), subject, role.rawValue, at.sqliteMillis, expires.sqliteMillis)
                if inserted == 1 { return ConsoleCode(code: code, subject: subject, role: role, expiresAt: expires) }
            }
        }
    }

    /// Six decimal digits, uniformly drawn.
    static func newCode() -> String {
        while true {
            let bytes = SecureBytes.random(count: 4)
            let value = bytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            // 4,294,000,000 is the largest multiple of a million below 2^32: no digit is likelier than another.
            guard value < 4_294_000_000 else { continue }
            let digits = String(value % 1_000_000)
            return String(repeating: "0", count: 6 - digits.count) + digits
        }
    }

    private func keyed(_ code: String) -> [UInt8] {
        HMACSHA256.authenticate(Array(code.utf8), key: codeKey)
    }

    /// Signs in with a code: the code is used and the session made in one transaction, so a code signs in once.
    public func signIn(code typed: String) throws -> IssuedConsoleSession {
        let code = String(typed.filter { !$0.isWhitespace && $0 != "-" })
        let at = now()
        let outcome: Result<IssuedConsoleSession, ConsoleCodeError> = try database.transaction { db in
            guard code.count == 6, code.allSatisfy(\.isASCII), code.allSatisfy(\.isNumber),
                  let row = try db.query("SELECT subject, role, expires_at, used_at FROM console_codes WHERE code_hmac = ?", keyed(code)).first else {
                return .failure(.unknown)
            }
            if row.int("used_at") != nil { return .failure(.used) }
            if (row.int("expires_at") ?? 0) <= at.sqliteMillis { return .failure(.expired) }
            guard try db.run("UPDATE console_codes SET used_at = ? WHERE code_hmac = ? AND used_at IS NULL", at.sqliteMillis, keyed(code)) == 1 else {
                return .failure(.used)
            }
            let role = row.string("role").flatMap(Role.init(rawValue:)) ?? .viewer
            return .success(try insertSession(subject: row.string("subject") ?? Principal.ownerSubject, role: role, keyID: nil, at: at, in: db))
        }
        return try outcome.get()
    }

    // MARK: Sessions

    /// Signs in as the caller of an API key (its subject and role); the session ends when that key is revoked.
    public func signIn(key principal: Principal) throws -> IssuedConsoleSession {
        let at = now()
        return try database.transaction { db in try insertSession(subject: principal.subject, role: principal.role, keyID: principal.keyID, at: at, in: db) }
    }

    private func insertSession(subject: String, role: Role, keyID: String?, at: Date, in db: Connection) throws -> IssuedConsoleSession {
        let secret = SecureBytes.random(count: 32)
        let id = "cs_" + Hex.encode(SecureBytes.random(count: 8))
        let absolute = at.addingTimeInterval(Self.absoluteLifetime)
        try db.run("""
            INSERT INTO console_sessions (id, token_sha256, subject, role, key_id, created_at, last_seen_at, expires_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """, id, SHA256.hash(secret), subject, role.rawValue, keyID, at.sqliteMillis, at.sqliteMillis, absolute.sqliteMillis)
        // Ended sessions are of no use a day later; the table stays small.
        try db.run("DELETE FROM console_sessions WHERE expires_at < ? OR revoked_at < ?", at.sqliteMillis - 86_400_000, at.sqliteMillis - 86_400_000)
        let session = ConsoleSession(id: id, principal: Self.principal(id: id, subject: subject, role: role, keyID: keyID), csrfToken: Self.csrfToken(secret),
                                     expiresAt: min(at.addingTimeInterval(Self.idleLifetime), absolute))
        return IssuedConsoleSession(token: Base64URL.encode(secret), session: session)
    }

    static func principal(id: String, subject: String, role: Role, keyID: String?) -> Principal {
        Principal(keyID: keyID ?? "console:" + id, subject: subject, role: role)
    }

    static func csrfToken(_ secret: [UInt8]) -> String {
        Base64URL.encode(HMACSHA256.authenticate(csrfLabel, key: secret))
    }

    /// The live session a cookie's value names, its last use moved to now; nil when unknown, idle too long, past
    /// its 7 days, revoked, or signed in with a key that is revoked since.
    public func session(token: String) -> ConsoleSession? {
        guard token.utf8.count == 43, let secret = Base64URL.decode(token), secret.count == 32 else { return nil }
        let hash = SHA256.hash(secret)
        let at = now()
        guard let row = try? database.read({ db in
            try db.query("""
                SELECT s.id, s.subject, s.role, s.key_id, s.last_seen_at, s.expires_at FROM console_sessions s
                LEFT JOIN api_keys k ON k.id = s.key_id
                WHERE s.token_sha256 = ? AND s.revoked_at IS NULL AND (s.key_id IS NULL OR (k.id IS NOT NULL AND k.revoked_at IS NULL))
                """, hash).first
        }), let id = row.string("id"), let subject = row.string("subject"), let role = row.string("role").flatMap(Role.init(rawValue:)),
            let lastSeen = row.date("last_seen_at"), let absolute = row.date("expires_at") else { return nil }
        guard at < absolute, at < lastSeen.addingTimeInterval(Self.idleLifetime) else { return nil }
        if at.timeIntervalSince(lastSeen) >= Self.touchInterval {
            // A lost touch only brings the idle end closer; the request is still answered.
            _ = try? database.transaction { db in
                try db.run("UPDATE console_sessions SET last_seen_at = ? WHERE id = ? AND last_seen_at < ?", at.sqliteMillis, id, at.sqliteMillis)
            }
        }
        let seen = at.timeIntervalSince(lastSeen) >= Self.touchInterval ? at : lastSeen
        return ConsoleSession(id: id, principal: Self.principal(id: id, subject: subject, role: role, keyID: row.string("key_id")), csrfToken: Self.csrfToken(secret),
                              expiresAt: min(seen.addingTimeInterval(Self.idleLifetime), absolute))
    }

    /// Ends the session a cookie's value names (signing out). False when it had already ended or never was.
    public func revoke(token: String) throws -> Bool {
        guard let secret = Base64URL.decode(token), secret.count == 32 else { return false }
        let at = now()
        return try database.transaction { db in
            try db.run("UPDATE console_sessions SET revoked_at = ? WHERE token_sha256 = ? AND revoked_at IS NULL", at.sqliteMillis, SHA256.hash(secret)) > 0
        }
    }

    /// Ends every session signed in with the key `keyID` (the key was revoked); their number.
    @discardableResult
    public func revoke(signedInWithKey keyID: String) throws -> Int {
        let at = now()
        return try database.transaction { db in
            try db.run("UPDATE console_sessions SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL", at.sqliteMillis, keyID)
        }
    }
}
