import Crypto
import Foundation
import Household
import Identity
import PostgreSQL
import Storage

/// API keys on PostgreSQL, shared by every gateway on the database: only the SHA-256 of each token is stored.
/// The request path never waits on the network for a key this node has seen lately (`knownPrincipal` answers from
/// memory); any other token is looked up asynchronously. A revocation is seen at once on the node that made it and
/// within `RecentKeys.lifetime` on every other one.
public final class PostgresAPIKeyStore: APIKeyStore {
    public static let migrations = [
        PostgresMigration(module: "auth", version: 1, sql: """
            CREATE TABLE api_keys (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                subject TEXT NOT NULL,
                role TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
                kind TEXT NOT NULL,
                token_sha256 BYTEA NOT NULL UNIQUE,
                created_at BIGINT NOT NULL,
                last_used_at BIGINT,
                revoked_at BIGINT,
                minted_by TEXT
            );
            CREATE INDEX api_keys_by_subject ON api_keys (subject);
            """),
    ]

    let pool: PostgresPool
    /// Keys this node looked up lately: the only ones the request path knows without waiting.
    private let recent = RecentKeys()

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    private static let columns = "id, name, subject, role, kind, created_at, last_used_at, revoked_at, minted_by"

    private static func key(_ row: PostgresRow) -> APIKey {
        APIKey(id: row.string("id") ?? "", name: row.string("name") ?? "", subject: row.string("subject") ?? "",
               role: row.string("role").flatMap(Role.init(rawValue:)) ?? .viewer, kind: row.string("kind").flatMap(APIKey.Kind.init(rawValue:)) ?? .manual,
               createdAt: Date(postgresMillis: row.int("created_at") ?? 0), lastUsedAt: row.int("last_used_at").map { Date(postgresMillis: $0) },
               revokedAt: row.int("revoked_at").map { Date(postgresMillis: $0) }, mintedBy: row.string("minted_by"))
    }

    private func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?, in db: PostgresConnection) throws -> MintedKey {
        let (id, token) = APIKeyTokens.newKey()
        let now = Date()
        try db.run("""
            INSERT INTO api_keys (id, name, subject, role, kind, token_sha256, created_at, minted_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
            """, id, name, subject, role.rawValue, kind.rawValue, SHA256.hash(token), now.postgresMillis, mintedBy)
        return MintedKey(key: APIKey(id: id, name: name, subject: subject, role: role, kind: kind, createdAt: now, mintedBy: mintedBy), token: token)
    }

    public func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?) async throws -> MintedKey {
        try await pool.transaction { db in try mint(name: name, subject: subject, role: role, kind: kind, mintedBy: mintedBy, in: db) }
    }

    public func mint(name: String, subject: String, role: Role, kind: APIKey.Kind, mintedBy: String?, in session: any StorageSession) throws -> MintedKey {
        try mint(name: name, subject: subject, role: role, kind: kind, mintedBy: mintedBy, in: session.postgresConnection())
    }

    public func mintFirstOwnerKey(name: String) async throws -> MintedKey? {
        try await pool.transaction { db in
            // Gateways starting together on an empty database queue here; the first mints, the rest see its key.
            try db.execute("LOCK TABLE api_keys IN SHARE ROW EXCLUSIVE MODE")
            guard try db.query("SELECT 1 FROM api_keys LIMIT 1").isEmpty else { return nil }
            return try mint(name: name, subject: Principal.ownerSubject, role: .admin, kind: .bootstrap, mintedBy: Principal.ownerSubject, in: db)
        }
    }

    public func knownPrincipal(for token: String) -> Principal? {
        APIKeyTokens.hash(token).flatMap(recent.principal(forHash:))
    }

    public func authenticate(_ token: String) async -> Principal? {
        guard let hash = APIKeyTokens.hash(token) else { return nil }
        if let known = recent.principal(forHash: hash) { return known }
        guard let row = try? await pool.withConnection({ db in
            try db.query("SELECT id, subject, role FROM api_keys WHERE token_sha256 = $1 AND revoked_at IS NULL", hash).first
        }), let id = row.string("id"), let subject = row.string("subject"), let role = row.string("role").flatMap(Role.init(rawValue:)) else {
            return nil
        }
        let principal = Principal(keyID: id, subject: APIKeyTokens.subject(stored: subject), role: role)
        recent.remember(principal, forHash: hash)
        return principal
    }

    public func principal(keyID: String) async -> Principal? {
        guard let row = try? await pool.withConnection({ db in
            try db.query("SELECT subject, role FROM api_keys WHERE id = $1 AND revoked_at IS NULL", keyID).first
        }), let subject = row.string("subject"), let role = row.string("role").flatMap(Role.init(rawValue:)) else { return nil }
        return Principal(keyID: keyID, subject: APIKeyTokens.subject(stored: subject), role: role)
    }

    public func list() async throws -> [APIKey] {
        try await pool.withConnection { db in try db.query("SELECT \(Self.columns) FROM api_keys ORDER BY created_at, id").map(Self.key) }
    }

    public func list(subject: String) async throws -> [APIKey] {
        try await pool.withConnection { db in
            try db.query("SELECT \(Self.columns) FROM api_keys WHERE subject IN ($1, $2) ORDER BY created_at, id", subject,
                         APIKeyTokens.storedSubjects(of: subject)).map(Self.key)
        }
    }

    public func revoke(id: String, subject: String?, in session: any StorageSession) throws -> Bool {
        let db = try session.postgresConnection()
        let now = Date().postgresMillis
        let revoked = try subject.map {
            try db.run("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND subject IN ($3, $4) AND revoked_at IS NULL", now, id, $0,
                       APIKeyTokens.storedSubjects(of: $0))
        } ?? db.run("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL", now, id)
        guard revoked > 0 else { return false }
        recent.forget(keyID: id)
        db.afterCommit { [recent] in recent.forget(keyID: id) }
        return true
    }
}
