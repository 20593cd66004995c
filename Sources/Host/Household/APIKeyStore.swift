import Storage
import Crypto
import Foundation
import Identity
import SQLite
import Synchronization

public struct APIKey: Sendable, Equatable {
    public enum Kind: String, Sendable {
        /// Created on first start for the owner.
        case bootstrap
        /// Created by an admin through /admin/api-keys.
        case manual
        /// Minted by redeeming a pairing code (a phone or a watch).
        case managed
    }

    public var id: String
    public var name: String
    public var subject: String
    public var role: Role
    public var kind: Kind
    public var createdAt: Date
    public var lastUsedAt: Date?
    public var revokedAt: Date?
    /// The subject whose credential minted it (for a pairing code's key, the code's maker); nil for keys minted
    /// before this was recorded.
    public var mintedBy: String?
}

/// A freshly minted key: the secret exists only in this value and in what the caller shows once.
public struct MintedKey: Sendable {
    public let key: APIKey
    public let token: String
}

/// The API keys a gateway accepts. A protocol because a second engine (PostgreSQL, for several gateways) will keep
/// them too; whatever the engine, only a hash of each token is stored.
public protocol APIKeyStore: Sendable {
    /// `mintedBy`: the subject whose credential asks for it (the owner for the console's first-start key).
    func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?) throws -> MintedKey
    /// The same inside the caller's transaction (pairing redeems its code and mints the code's key as one step).
    func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?, in session: any StorageSession) throws -> MintedKey
    /// The caller a bearer token names; nil for an unknown or revoked one.
    func authenticate(_ token: String) -> Principal?
    func principal(keyID: String) -> Principal?
    var isEmpty: Bool { get }
    func list() throws -> [APIKey]
    /// The keys of one subject (the owner's include keys minted before subjects existed).
    func list(subject: String) throws -> [APIKey]
    /// Revokes a key at once: its next request is refused. False when there is no such active key.
    func revoke(id: String) throws -> Bool
    /// Revokes a key of `subject` only: false when that subject has no such active key.
    func revoke(id: String, subject: String) throws -> Bool
}

/// API keys at rest in SQLite: only the SHA-256 of each token is stored. Tokens carry 256 random bits,
/// so a plain hash is enough and lookup by hash needs no comparison of secrets at all.
public final class SQLiteAPIKeyStore: APIKeyStore {
    public static let tokenPrefix = "sk_"


    public let database: DatabasePool
    /// Recently seen tokens (by hash) and whom they belong to. Revoking clears it, so a revoked key is refused at
    /// once in this process; another process sharing the database sees the revocation within `cacheLifetime`.
    private let cache = Mutex<[[UInt8]: (principal: Principal, until: ContinuousClock.Instant)]>([:])
    public static let cacheLifetime: Duration = .seconds(2)

    public init(database: DatabasePool) throws {
        self.database = database
    }

    private static func millis(_ d: Date) -> Int64 { d.sqliteMillis }

    public func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?) throws -> MintedKey {
        try database.transaction { db in try mint(name: name, subject: subject, role: role, kind: kind, mintedBy: mintedBy, in: db) }
    }

    public func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?, in session: any StorageSession) throws -> MintedKey {
        try mint(name: name, subject: subject, role: role, kind: kind, mintedBy: mintedBy, in: session.sqliteConnection())
    }

    /// Mints inside the caller's transaction (pairing redeems a code and mints its key as one step).
    func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?, in db: Connection) throws -> MintedKey {
        // The original's shapes: a 16-hex key id and `sk_` + 64 lowercase hex (256 random bits). Keys minted earlier in
        // other shapes keep working: only the token's hash is looked up.
        let id = Hex.encode(SecureBytes.random(count: 8))
        let token = Self.tokenPrefix + Hex.encode(SecureBytes.random(count: 32))
        let now = Date()
        try db.run("INSERT INTO api_keys (id, name, subject, role, kind, token_sha256, created_at, minted_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   id, name, subject, role.rawValue, kind.rawValue, SHA256.hash(token), Self.millis(now), mintedBy)
        return MintedKey(key: APIKey(id: id, name: name, subject: subject, role: role, kind: kind, createdAt: now, mintedBy: mintedBy), token: token)
    }

    /// The principal for a presented token, or nil when it is unknown or revoked.
    public func authenticate(_ token: String) -> Principal? {
        guard token.hasPrefix(Self.tokenPrefix), token.utf8.count < 200 else { return nil }
        let hash = SHA256.hash(token)
        let now = ContinuousClock.now
        if let hit = cache.withLock({ $0[hash] }), hit.until > now { return hit.principal }
        guard let row = try? database.read({ db in
            try db.query("SELECT id, subject, role FROM api_keys WHERE token_sha256 = ? AND revoked_at IS NULL", hash).first
        }), let id = row.string("id"), let subject = row.string("subject"), let role = row.string("role").flatMap(Role.init(rawValue:)) else {
            return nil
        }
        // Keys minted before identities existed carry no subject: they are the owner's.
        let principal = Principal(keyID: id, subject: subject.isEmpty ? Principal.ownerSubject : subject, role: role)
        cache.withLock { entries in
            if entries.count > 10_000 { entries.removeAll() }
            entries[hash] = (principal, now + Self.cacheLifetime)
        }
        return principal
    }

    /// The principal of an active key by its id (for commands that arrive sealed through the relay).
    public func principal(keyID: String) -> Principal? {
        guard let row = try? database.read({ db in
            try db.query("SELECT subject, role FROM api_keys WHERE id = ? AND revoked_at IS NULL", keyID).first
        }), let subject = row.string("subject"), let role = row.string("role").flatMap(Role.init(rawValue:)) else { return nil }
        return Principal(keyID: keyID, subject: subject.isEmpty ? Principal.ownerSubject : subject, role: role)
    }

    public var isEmpty: Bool {
        ((try? database.read { db in try db.query("SELECT COUNT(*) AS n FROM api_keys").first?.int("n") }) ?? 0) == 0
    }

    private static func key(_ row: Row) -> APIKey {
        APIKey(id: row.string("id") ?? "", name: row.string("name") ?? "", subject: row.string("subject") ?? "",
               role: row.string("role").flatMap(Role.init(rawValue:)) ?? .viewer,
               kind: row.string("kind").flatMap(APIKey.Kind.init(rawValue:)) ?? .manual,
               createdAt: row.date("created_at") ?? Date(sqliteMillis: 0),
               lastUsedAt: row.date("last_used_at"), revokedAt: row.date("revoked_at"), mintedBy: row.string("minted_by"))
    }

    /// The columns by name, not `*`: a connection opened before a migration expands `*` from the schema it
    /// knew when the statement was prepared, and would miss a column the migration added.
    private static let columns = "id, name, subject, role, kind, created_at, last_used_at, revoked_at, minted_by"

    public func list() throws -> [APIKey] {
        try database.read { db in try db.query("SELECT \(Self.columns) FROM api_keys ORDER BY created_at, id").map(Self.key) }
    }

    public func list(subject: String) throws -> [APIKey] {
        try database.read { db in
            try db.query("SELECT \(Self.columns) FROM api_keys WHERE subject IN (?, ?) ORDER BY created_at, id", subject, Self.storedSubjects(of: subject)).map(Self.key)
        }
    }

    /// What `subject` is stored as besides itself: keys minted before identities existed carry none and are the owner's.
    private static func storedSubjects(of subject: String) -> String {
        subject == Principal.ownerSubject ? "" : subject
    }

    /// Revokes a key at once: its next request is refused. False when there is no such active key.
    public func revoke(id: String) throws -> Bool {
        let revoked = try database.transaction { db in
            try db.run("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", Self.millis(Date()), id) > 0
        }
        if revoked { forget(keyID: id) }
        return revoked
    }

    public func revoke(id: String, subject: String) throws -> Bool {
        let revoked = try database.transaction { db in
            try db.run("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND subject IN (?, ?) AND revoked_at IS NULL",
                       Self.millis(Date()), id, subject, Self.storedSubjects(of: subject)) > 0
        }
        if revoked { forget(keyID: id) }
        return revoked
    }

    private func forget(keyID id: String) {
        cache.withLock { $0 = $0.filter { $0.value.principal.keyID != id } }
    }
}
