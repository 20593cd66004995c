import Foundation
import Identity
import Storage

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

    public init(id: String, principal: Principal, csrfToken: String, expiresAt: Date) {
        self.id = id
        self.principal = principal
        self.csrfToken = csrfToken
        self.expiresAt = expiresAt
    }
}

/// A session as handed out once: `token` (the cookie's value) exists only here and in the browser.
public struct IssuedConsoleSession: Sendable {
    public let token: String
    public let session: ConsoleSession

    public init(token: String, session: ConsoleSession) {
        self.token = token
        self.session = session
    }
}

/// A one-time code for signing in to the console, as `soulacy console-code` prints it.
public struct ConsoleCode: Sendable {
    public let code: String
    public let subject: String
    public let role: Role
    public let expiresAt: Date

    public init(code: String, subject: String, role: Role, expiresAt: Date) {
        self.code = code
        self.subject = subject
        self.role = role
        self.expiresAt = expiresAt
    }
}

/// Why a one-time code signed nobody in.
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

/// Console sessions and the one-time codes that start them, on any engine.
///
/// Whatever the engine, a session's secret is 32 random bytes of which only the SHA-256 is stored, its CSRF token
/// is an HMAC of the secret (not stored at all), and a code is stored only as an HMAC under a key kept beside the
/// database (`ConsoleSecrets`, shared by every engine). Sessions end after 12 idle hours, 7 days after sign-in,
/// when revoked, or when the key that signed in is revoked; times come from the store's clock (the gateway's).
public protocol ConsoleSessionStore: Sendable {
    /// A fresh six-digit code for `subject` with `role`, valid 10 minutes, for one sign-in.
    func createCode(subject: String, role: Role) async throws -> ConsoleCode
    /// Signs in with a code (spaces and dashes in it ignored): the code is used and the session made in one
    /// transaction, so of any number of concurrent redemptions, across gateways, exactly one signs in. Throws
    /// `ConsoleCodeError` for an unknown, expired or already used code.
    func signIn(code: String) async throws -> IssuedConsoleSession
    /// Signs in as the caller of an API key (its subject and role); the session ends when that key is revoked.
    func signIn(key principal: Principal) async throws -> IssuedConsoleSession
    /// The live session a cookie's value names, answered without waiting on another machine (SQLite reads its own
    /// file; a networked engine may know nothing here). Nil: not known here, ask `session(token:)`.
    func knownSession(token: String) -> ConsoleSession?
    /// The live session a cookie's value names, its last use moved to now; nil when unknown, idle too long, past its
    /// 7 days, revoked, or signed in with a key that is revoked since.
    func session(token: String) async -> ConsoleSession?
    /// Ends the session a cookie's value names (signing out). False when it had already ended or never was.
    func revoke(token: String) async throws -> Bool
    /// Ends every session signed in with the key `keyID`, inside the caller's transaction (the key's revocation
    /// and the answer commit with it); their number.
    @discardableResult
    func revoke(signedInWithKey keyID: String, in session: any StorageSession) throws -> Int
}

extension ConsoleSessionStore {
    /// Ends every session signed in with the key `keyID` in a transaction of its own; their number.
    @discardableResult
    public func revoke(signedInWithKey keyID: String, storage: any TransactionalStorage) async throws -> Int {
        try await storage.withTransaction { session in try revoke(signedInWithKey: keyID, in: session) }
    }
}
