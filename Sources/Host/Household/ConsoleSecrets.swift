import Crypto
import Foundation
import Identity

/// The console's lifetimes and where its code key lives: the same for every engine.
public enum ConsoleSessionPolicy {
    public static let idleLifetime: TimeInterval = 12 * 3600
    public static let absoluteLifetime: TimeInterval = 7 * 86_400
    public static let codeLifetime: TimeInterval = 600
    /// A session's last use is written at most this often (reads answered on the server thread stay reads).
    public static let touchInterval: TimeInterval = 60
    /// Ended sessions are removed this long after they ended: the table stays small.
    public static let keptAfterEnd: TimeInterval = 86_400

    /// Where the code key lives in a data directory.
    public static func codeKeyPath(dataDirectory: String) -> String { dataDirectory + "/console-codes.key" }
}

/// How codes are kept, for every engine: a code is six digits, so a plain hash would be undone by trying a million
/// values; it is kept as an HMAC under a key that lives beside the database, never in it.
public struct ConsoleSecrets: Sendable {
    private let codeKey: [UInt8]

    /// `codeKey`: the key codes are kept under (`SecretFile.key(at: ConsoleSessionPolicy.codeKeyPath(…), …)`), the
    /// same for the gateway and the CLI that prints codes.
    public init(codeKey: [UInt8]) {
        self.codeKey = codeKey
    }

    /// What is stored for `code`: its HMAC under the code key.
    public func stored(code: String) -> [UInt8] {
        HMACSHA256.authenticate(Array(code.utf8), key: codeKey)
    }

    /// What is stored for a code as typed (spaces and dashes dropped); nil for text that cannot be a code.
    public func stored(typedCode typed: String) -> [UInt8]? {
        let code = String(typed.filter { !$0.isWhitespace && $0 != "-" })
        guard code.count == 6, code.allSatisfy(\.isASCII), code.allSatisfy(\.isNumber) else { return nil }
        return stored(code: code)
    }

    /// Six decimal digits, uniformly drawn.
    public static func newCode() -> String {
        while true {
            let bytes = SecureBytes.random(count: 4)
            let value = bytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            // 4,294,000,000 is the largest multiple of a million below 2^32: no digit is likelier than another.
            guard value < 4_294_000_000 else { continue }
            let digits = String(value % 1_000_000)
            return String(repeating: "0", count: 6 - digits.count) + digits
        }
    }
}

/// A session's secret: 32 random bytes, the cookie's value in base64url. Stores keep only `stored` (its SHA-256,
/// from which the cookie cannot be rebuilt); the CSRF token is an HMAC of the secret and is not kept at all.
public struct ConsoleSessionSecret: Sendable {
    static let csrfLabel = Array("soulacy console csrf".utf8)

    public let bytes: [UInt8]

    private init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// A fresh secret.
    public static func random() -> ConsoleSessionSecret { ConsoleSessionSecret(bytes: SecureBytes.random(count: 32)) }

    /// The secret a cookie's value carries; nil for a value that cannot be one (so no store is asked).
    public init?(token: String) {
        guard token.utf8.count == 43, let bytes = Base64URL.decode(token), bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    /// The cookie's value.
    public var token: String { Base64URL.encode(bytes) }
    /// What the database keeps.
    public var stored: [UInt8] { SHA256.hash(bytes) }
    public var csrfToken: String { Base64URL.encode(HMACSHA256.authenticate(Self.csrfLabel, key: bytes)) }
}

/// A session's row as every engine keeps it (besides the secret's hash and its revocation): who signed in, with
/// which key (nil for a code), and the times its end is computed from.
public struct ConsoleSessionRecord: Sendable, Equatable {
    public let id: String
    public let subject: String
    public let role: Role
    public let keyID: String?
    /// When the session was last used (sign-in, at first).
    public let lastSeenAt: Date
    /// 7 days after sign-in: the end however busy.
    public let absoluteEnd: Date

    public init(id: String, subject: String, role: Role, keyID: String?, lastSeenAt: Date, absoluteEnd: Date) {
        self.id = id
        self.subject = subject
        self.role = role
        self.keyID = keyID
        self.lastSeenAt = lastSeenAt
        self.absoluteEnd = absoluteEnd
    }

    /// A new session signed in at `now`.
    public static func signedIn(subject: String, role: Role, keyID: String?, at now: Date) -> ConsoleSessionRecord {
        ConsoleSessionRecord(id: "cs_" + Hex.encode(SecureBytes.random(count: 8)), subject: subject, role: role, keyID: keyID, lastSeenAt: now,
                             absoluteEnd: now.addingTimeInterval(ConsoleSessionPolicy.absoluteLifetime))
    }

    /// Neither idle too long nor past its 7 days at `now` (revocation is the store's to check).
    public func isLive(at now: Date) -> Bool {
        now < absoluteEnd && now < lastSeenAt.addingTimeInterval(ConsoleSessionPolicy.idleLifetime)
    }

    /// Whether a use at `now` is worth writing down (at most once a minute).
    public func needsTouch(at now: Date) -> Bool {
        now.timeIntervalSince(lastSeenAt) >= ConsoleSessionPolicy.touchInterval
    }

    /// The session as used at `now`: its end slides to 12 hours after a use worth writing down, never past the
    /// 7 days (a touch the store then fails to write only brings the idle end closer).
    public func session(_ secret: ConsoleSessionSecret, usedAt now: Date) -> ConsoleSession {
        let seen = needsTouch(at: now) ? now : lastSeenAt
        return ConsoleSession(id: id, principal: principal, csrfToken: secret.csrfToken,
                              expiresAt: min(seen.addingTimeInterval(ConsoleSessionPolicy.idleLifetime), absoluteEnd))
    }

    /// The session's caller: its key's id, or `console:<id>` for a one-time code.
    public var principal: Principal {
        Principal(keyID: keyID ?? "console:" + id, subject: subject, role: role)
    }

    /// The session handed out at sign-in, with the cookie's value.
    public func issued(_ secret: ConsoleSessionSecret) -> IssuedConsoleSession {
        IssuedConsoleSession(token: secret.token, session: session(secret, usedAt: lastSeenAt))
    }
}
