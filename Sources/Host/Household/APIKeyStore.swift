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

    public init(id: String, name: String, subject: String, role: Role, kind: Kind, createdAt: Date, lastUsedAt: Date? = nil, revokedAt: Date? = nil,
                mintedBy: String? = nil) {
        self.id = id
        self.name = name
        self.subject = subject
        self.role = role
        self.kind = kind
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.revokedAt = revokedAt
        self.mintedBy = mintedBy
    }
}

/// A freshly minted key: the secret exists only in this value and in what the caller shows once.
public struct MintedKey: Sendable {
    public let key: APIKey
    public let token: String

    public init(key: APIKey, token: String) {
        self.key = key
        self.token = token
    }
}

/// The API keys a gateway accepts. A protocol because a second engine (PostgreSQL, for several gateways) will keep
/// them too; whatever the engine, only a hash of each token is stored.
public protocol APIKeyStore: Sendable {
    /// `mintedBy`: the subject whose credential asks for it (the owner for the console's first-start key).
    func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?) async throws -> MintedKey
    /// The same inside the caller's transaction (pairing redeems its code and mints the code's key as one step).
    func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?, in session: any StorageSession) throws -> MintedKey
    /// The owner's admin key, minted only while the database holds no key at all: of several gateways starting on one
    /// empty database, exactly one mints it (nil for the others, and on every later start).
    func mintFirstOwnerKey(name: String) async throws -> MintedKey?
    /// The caller a bearer token names, answered without waiting on another machine (SQLite reads its own file; a
    /// networked engine answers from what it holds in memory). Nil: unknown here, ask `authenticate`.
    func knownPrincipal(for token: String) -> Principal?
    /// The caller a bearer token names; nil for an unknown or revoked one.
    func authenticate(_ token: String) async -> Principal?
    /// The caller of an active key by its id (commands that arrive sealed through the relay); nil when revoked or gone.
    func principal(keyID: String) async -> Principal?
    func list() async throws -> [APIKey]
    /// The keys of one subject (the owner's include keys minted before subjects existed).
    func list(subject: String) async throws -> [APIKey]
    /// Revokes a key inside the caller's transaction (the unpairing of its phones and the answer commit with it); once
    /// committed its next request is refused. `subject`: only a key of that subject (nil: any). False when there is
    /// no such active key.
    func revoke(id: String, subject: String?, in session: any StorageSession) throws -> Bool
}

extension APIKeyStore {
    /// Revokes a key in a transaction of its own.
    public func revoke(id: String, subject: String? = nil, storage: any TransactionalStorage) async throws -> Bool {
        try await storage.withTransaction { session in try revoke(id: id, subject: subject, in: session) }
    }
}

/// What every engine's key store shares: the token's shape and the way a token is looked up (its SHA-256, so no
/// secret is ever compared or stored).
public enum APIKeyTokens {
    public static let prefix = "sk_"

    /// The original's shapes: a 16-hex key id and `sk_` + 64 lowercase hex (256 random bits).
    public static func newKey() -> (id: String, token: String) {
        (Hex.encode(SecureBytes.random(count: 8)), prefix + Hex.encode(SecureBytes.random(count: 32)))
    }

    /// The stored hash of a presented token; nil for one that cannot be a key (wrong prefix, absurd length).
    public static func hash(_ token: String) -> [UInt8]? {
        guard token.hasPrefix(prefix), token.utf8.count < 200 else { return nil }
        return SHA256.hash(token)
    }

    /// Keys minted before identities existed carry no subject: they are the owner's.
    public static func subject(stored: String) -> String { stored.isEmpty ? Principal.ownerSubject : stored }

    /// What `subject` is stored as besides itself (the owner's old keys carry none).
    public static func storedSubjects(of subject: String) -> String { subject == Principal.ownerSubject ? "" : subject }
}

/// Keys a node looked up lately, by token hash, trusted from memory for `lifetime`: every engine's key store keeps
/// one. A revocation forgets its key at once on the node that made it; other nodes sharing the database see it
/// within `lifetime`.
public final class RecentKeys: Sendable {
    public let lifetime: Duration
    private let entries = Mutex<[[UInt8]: (principal: Principal, until: ContinuousClock.Instant)]>([:])

    public init(lifetime: Duration = .seconds(2)) {
        self.lifetime = lifetime
    }

    public func principal(forHash hash: [UInt8]) -> Principal? {
        let now = ContinuousClock.now
        return entries.withLock { $0[hash].flatMap { $0.until > now ? $0.principal : nil } }
    }

    public func remember(_ principal: Principal, forHash hash: [UInt8]) {
        let until = ContinuousClock.now + lifetime
        entries.withLock { entries in
            // A flood of distinct tokens must not grow it without end.
            if entries.count > 10_000 { entries.removeAll() }
            entries[hash] = (principal, until)
        }
    }

    public func forget(keyID id: String) {
        entries.withLock { $0 = $0.filter { $0.value.principal.keyID != id } }
    }
}

/// API keys at rest in SQLite: only the SHA-256 of each token is stored. Tokens carry 256 random bits,
/// so a plain hash is enough and lookup by hash needs no comparison of secrets at all.
public final class SQLiteAPIKeyStore: APIKeyStore {
    public static let tokenPrefix = APIKeyTokens.prefix


    public let database: DatabasePool
    /// Recently seen tokens and whom they belong to (revoking forgets them).
    private let recent = RecentKeys()

    public init(database: DatabasePool) throws {
        self.database = database
    }

    private static func millis(_ d: Date) -> Int64 { d.sqliteMillis }

    public func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?) async throws -> MintedKey {
        try await database.asyncTransaction { db in try mint(name: name, subject: subject, role: role, kind: kind, mintedBy: mintedBy, in: db) }
    }

    public func mintFirstOwnerKey(name: String) async throws -> MintedKey? {
        // One write transaction: SQLite's single writer makes the check and the insert one step.
        try await database.asyncTransaction { db in
            guard try db.query("SELECT 1 FROM api_keys LIMIT 1").isEmpty else { return nil }
            return try mint(name: name, subject: Principal.ownerSubject, role: .admin, kind: .bootstrap, mintedBy: Principal.ownerSubject, in: db)
        }
    }

    public func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?, in session: any StorageSession) throws -> MintedKey {
        try mint(name: name, subject: subject, role: role, kind: kind, mintedBy: mintedBy, in: session.sqliteConnection())
    }

    /// Mints inside the caller's transaction (pairing redeems a code and mints its key as one step).
    func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?, in db: Connection) throws -> MintedKey {
        // The original's shapes: a 16-hex key id and `sk_` + 64 lowercase hex (256 random bits). Keys minted earlier in
        // other shapes keep working: only the token's hash is looked up.
        let (id, token) = APIKeyTokens.newKey()
        let now = Date()
        try db.run("INSERT INTO api_keys (id, name, subject, role, kind, token_sha256, created_at, minted_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   id, name, subject, role.rawValue, kind.rawValue, SHA256.hash(token), Self.millis(now), mintedBy)
        return MintedKey(key: APIKey(id: id, name: name, subject: subject, role: role, kind: kind, createdAt: now, mintedBy: mintedBy), token: token)
    }

    /// The principal for a presented token, or nil when it is unknown or revoked: the local file is read at once
    /// (a recent answer is cached), so every token is known here.
    public func knownPrincipal(for token: String) -> Principal? {
        guard let hash = APIKeyTokens.hash(token) else { return nil }
        if let hit = recent.principal(forHash: hash) { return hit }
        guard let row = try? database.read({ db in
            try db.query("SELECT id, subject, role FROM api_keys WHERE token_sha256 = ? AND revoked_at IS NULL", hash).first
        }), let id = row.string("id"), let subject = row.string("subject"), let role = row.string("role").flatMap(Role.init(rawValue:)) else {
            return nil
        }
        let principal = Principal(keyID: id, subject: APIKeyTokens.subject(stored: subject), role: role)
        recent.remember(principal, forHash: hash)
        return principal
    }

    public func authenticate(_ token: String) async -> Principal? { knownPrincipal(for: token) }

    /// The principal of an active key by its id (for commands that arrive sealed through the relay).
    public func principal(keyID: String) async -> Principal? {
        guard let row = try? await database.asyncRead({ db in
            try db.query("SELECT subject, role FROM api_keys WHERE id = ? AND revoked_at IS NULL", keyID).first
        }), let subject = row.string("subject"), let role = row.string("role").flatMap(Role.init(rawValue:)) else { return nil }
        return Principal(keyID: keyID, subject: APIKeyTokens.subject(stored: subject), role: role)
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

    public func list() async throws -> [APIKey] {
        try await database.asyncRead { db in try db.query("SELECT \(Self.columns) FROM api_keys ORDER BY created_at, id").map(Self.key) }
    }

    public func list(subject: String) async throws -> [APIKey] {
        try await database.asyncRead { db in
            try db.query("SELECT \(Self.columns) FROM api_keys WHERE subject IN (?, ?) ORDER BY created_at, id", subject,
                         APIKeyTokens.storedSubjects(of: subject)).map(Self.key)
        }
    }

    public func revoke(id: String, subject: String?, in session: any StorageSession) throws -> Bool {
        let db = try session.sqliteConnection()
        let now = Self.millis(Date())
        let revoked = try subject.map {
            try db.run("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND subject IN (?, ?) AND revoked_at IS NULL", now, id, $0,
                       APIKeyTokens.storedSubjects(of: $0))
        } ?? db.run("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", now, id)
        // Forgotten now (a request racing the commit is refused a moment early, never let through late) and again
        // after the commit, in case a lookup cached the key in between.
        guard revoked > 0 else { return false }
        recent.forget(keyID: id)
        database.afterCommit { [recent] in recent.forget(keyID: id) }
        return true
    }
}
